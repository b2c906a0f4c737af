//! The load client: one hyper HTTP/1.1 keep-alive connection per simulated
//! client (its connection task spawned on the benchmark's runtime, aborted
//! with the `Conn`), MCP sessions on top, `tools/call` echo with prebuilt
//! payloads, and `GET /mcp` notification streams.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::header::{ACCEPT, CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Request, StatusCode};
use serde_json::Value;

use crate::{Res, fail};

/// No single request of the benchmark may take longer than this.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
const SESSION: &str = "mcp-session-id";
const VERSION: &str = "2025-11-25";

type Body = BoxBody<Bytes, hyper::Error>;

/// Aborts a task when dropped.
pub struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One HTTP/1.1 connection.
pub struct Conn {
    sender: hyper::client::conn::http1::SendRequest<Body>,
    host: HeaderValue,
    /// The MCP path it posts to: `/mcp`, or an endpoint's.
    path: String,
    _task: AbortOnDrop,
}

/// A response, read whole.
pub struct Answer {
    pub status: StatusCode,
    pub session: Option<HeaderValue>,
    pub body: Bytes,
}

impl Conn {
    pub async fn connect(addr: SocketAddr) -> Res<Conn> {
        let stream = tokio::time::timeout(REQUEST_TIMEOUT, tokio::net::TcpStream::connect(addr))
            .await
            .map_err(|_| fail(format!("connecting to {addr} timed out")))??;
        stream.set_nodelay(true)?;
        let (sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        let task = tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Conn {
            sender,
            host: HeaderValue::from_str(&addr.to_string())?,
            path: "/mcp".to_owned(),
            _task: AbortOnDrop(task),
        })
    }

    async fn send(&mut self, req: Request<Body>) -> Res<hyper::Response<Incoming>> {
        let send = async {
            self.sender.ready().await?;
            self.sender.send_request(req).await
        };
        tokio::time::timeout(REQUEST_TIMEOUT, send)
            .await
            .map_err(|_| fail("request timed out"))?
            .map_err(Into::into)
    }

    /// The same connection, speaking to the MCP endpoint at `path`.
    pub fn at(mut self, path: &str) -> Conn {
        self.path = path.to_owned();
        self
    }

    /// POSTs one JSON-RPC message to the MCP path and reads the whole answer.
    pub async fn post(&mut self, session: Option<&HeaderValue>, body: Bytes) -> Res<Answer> {
        let mut req = Request::post(self.path.as_str())
            .header(HOST, self.host.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, text/event-stream")
            .header("mcp-protocol-version", VERSION);
        if let Some(session) = session {
            req = req.header(SESSION, session.clone());
        }
        let response = self
            .send(req.body(Full::new(body).map_err(|e| match e {}).boxed())?)
            .await?;
        let status = response.status();
        let session = response.headers().get(SESSION).cloned();
        let body = tokio::time::timeout(REQUEST_TIMEOUT, response.into_body().collect())
            .await
            .map_err(|_| fail("reading a response body timed out"))??
            .to_bytes();
        Ok(Answer {
            status,
            session,
            body,
        })
    }

    /// `DELETE` on the MCP path: ends `session`.
    pub async fn delete(&mut self, session: &HeaderValue) -> Res<()> {
        let req = Request::delete(self.path.as_str())
            .header(HOST, self.host.clone())
            .header("mcp-protocol-version", VERSION)
            .header(SESSION, session.clone())
            .body(Empty::new().map_err(|e| match e {}).boxed())?;
        let response = self.send(req).await?;
        let _ = response.into_body().collect().await;
        Ok(())
    }

    /// `GET path`; the status, the body dropped.
    pub async fn get_status(&mut self, path: &str) -> Res<StatusCode> {
        let req = Request::get(path)
            .header(HOST, self.host.clone())
            .body(Empty::new().map_err(|e| match e {}).boxed())?;
        Ok(self.send(req).await?.status())
    }

    /// `GET path`; the body as JSON, whatever the status.
    pub async fn get_json(&mut self, path: &str) -> Res<Value> {
        let req = Request::get(path)
            .header(HOST, self.host.clone())
            .body(Empty::new().map_err(|e| match e {}).boxed())?;
        let response = self.send(req).await?;
        let body = tokio::time::timeout(REQUEST_TIMEOUT, response.into_body().collect())
            .await
            .map_err(|_| fail("reading a response body timed out"))??
            .to_bytes();
        Ok(serde_json::from_slice(&body)?)
    }

    /// Opens the session's `GET /mcp` notification stream; the body is the stream.
    pub async fn open_stream(&mut self, session: &HeaderValue) -> Res<Incoming> {
        let req = Request::get(self.path.as_str())
            .header(HOST, self.host.clone())
            .header(ACCEPT, "text/event-stream")
            .header("mcp-protocol-version", VERSION)
            .header(SESSION, session.clone())
            .body(Empty::new().map_err(|e| match e {}).boxed())?;
        let response = self.send(req).await?;
        if response.status() != StatusCode::OK {
            return Err(fail(format!("GET /mcp answered {}", response.status())));
        }
        Ok(response.into_body())
    }
}

/// The JSON-RPC message of an answer: the body, or the SSE event carrying
/// the response when the server answered with a stream.
pub fn message_of(body: &[u8]) -> Res<Value> {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        return Ok(v);
    }
    let text = std::str::from_utf8(body)?;
    text.lines()
        .rev()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v.get("id").is_some())
        .ok_or_else(|| fail(format!("no JSON-RPC answer in: {}", preview(body))))
}

/// The start of a body, for error messages.
pub fn preview(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned()
}

/// A `tools/call` of `tool` with a `text` of `size` bytes, built once; only
/// the id changes from call to call.
pub struct Payload {
    prefix: String,
    pub size: usize,
}

impl Payload {
    pub fn echo(tool: &str, size: usize) -> Payload {
        let text = "x".repeat(size);
        Payload {
            prefix: format!(
                r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"name":"{tool}","arguments":{{"text":"{text}"}}}},"id":"#
            ),
            size,
        }
    }

    fn body(&self, id: u64) -> Bytes {
        let mut body = String::with_capacity(self.prefix.len() + 24);
        body.push_str(&self.prefix);
        body.push_str(&id.to_string());
        body.push('}');
        Bytes::from(body)
    }
}

/// An MCP session (2025-11-25) on one connection.
pub struct Session {
    pub conn: Conn,
    pub id: Option<HeaderValue>,
    next_id: u64,
}

impl Session {
    /// `initialize` then `notifications/initialized` on `conn`.
    pub async fn open(mut conn: Conn) -> Res<Session> {
        let id = initialize(&mut conn).await?;
        Ok(Session {
            conn,
            id,
            next_id: 1,
        })
    }

    /// Ends the session (`DELETE`), so that sessions do not pile up in the
    /// gateway from round to round.
    pub async fn close(mut self) -> Res<()> {
        match self.id.take() {
            Some(id) => self.conn.delete(&id).await,
            None => Ok(()),
        }
    }

    /// One request; the answer's body as it came (HTTP 200 checked).
    pub async fn request_raw(&mut self, method: &str, params: Value) -> Res<Bytes> {
        self.next_id += 1;
        let frame = serde_json::json!({
            "jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params,
        });
        let answer = self
            .conn
            .post(self.id.as_ref(), Bytes::from(frame.to_string()))
            .await?;
        if answer.status != StatusCode::OK {
            return Err(fail(format!(
                "{method} answered HTTP {}: {}",
                answer.status,
                preview(&answer.body)
            )));
        }
        Ok(answer.body)
    }

    /// One request; the answer's `result`, or an error naming the JSON-RPC error.
    pub async fn request(&mut self, method: &str, params: Value) -> Res<Value> {
        self.next_id += 1;
        rpc(
            &mut self.conn,
            self.id.as_ref(),
            self.next_id,
            method,
            params,
        )
        .await
    }

    /// One echo call; checks the status and the answer's size (and, with
    /// `verify`, that the text came back whole).
    pub async fn echo(&mut self, payload: &Payload, verify: bool) -> Res<()> {
        self.next_id += 1;
        let answer = self
            .conn
            .post(self.id.as_ref(), payload.body(self.next_id))
            .await?;
        if answer.status != StatusCode::OK || answer.body.len() < payload.size {
            return Err(fail(format!(
                "echo answered HTTP {}: {}",
                answer.status,
                preview(&answer.body)
            )));
        }
        if verify {
            let message = message_of(&answer.body)?;
            let text = message
                .pointer("/result/content/0/text")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if text.len() != payload.size {
                return Err(fail(format!("echo returned something else: {message}")));
            }
        }
        Ok(())
    }
}

/// One request of `session` on `conn`; the answer's `result`, or an error
/// naming the JSON-RPC error.
pub async fn rpc(
    conn: &mut Conn,
    session: Option<&HeaderValue>,
    id: u64,
    method: &str,
    params: Value,
) -> Res<Value> {
    let frame = serde_json::json!({
        "jsonrpc": "2.0", "id": id, "method": method, "params": params,
    });
    let answer = conn.post(session, Bytes::from(frame.to_string())).await?;
    if answer.status != StatusCode::OK {
        return Err(fail(format!(
            "{method} answered HTTP {}: {}",
            answer.status,
            preview(&answer.body)
        )));
    }
    let mut message = message_of(&answer.body)?;
    match message.get_mut("result") {
        Some(result) => Ok(result.take()),
        None => Err(fail(format!("{method} failed: {message}"))),
    }
}

/// `initialize` and `notifications/initialized`; the session id, if any.
pub async fn initialize(conn: &mut Conn) -> Res<Option<HeaderValue>> {
    let init = Bytes::from_static(
        br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"mcpmux-bench","version":"0.1.0"}}}"#,
    );
    let answer = conn.post(None, init).await?;
    if answer.status != StatusCode::OK {
        return Err(fail(format!(
            "initialize answered HTTP {}: {}",
            answer.status,
            preview(&answer.body)
        )));
    }
    let session = answer.session;
    let done = Bytes::from_static(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let answer = conn.post(session.as_ref(), done).await?;
    if answer.status != StatusCode::ACCEPTED {
        return Err(fail(format!(
            "notifications/initialized answered HTTP {}",
            answer.status
        )));
    }
    Ok(session)
}
