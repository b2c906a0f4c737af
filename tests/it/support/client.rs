//! A small MCP client over real HTTP for driving the gateway in tests: it
//! speaks the legacy Streamable HTTP transport and reads SSE incrementally.

use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::StreamExt as _;
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use super::within;

/// A raw HTTP answer.
#[derive(Debug)]
pub struct Raw {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Raw {
    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.body))
    }

    /// The JSON-RPC error code in the body.
    pub fn error_code(&self) -> i64 {
        self.json()["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("no error code in {:?}", self.body))
    }
}

/// An initialized legacy-era session.
pub struct McpClient {
    http: reqwest::Client,
    /// Headers sent with every request (a bearer token, say).
    extra: Vec<(String, String)>,
    pub url: String,
    pub session: String,
    pub version: String,
    next_id: AtomicU64,
}

impl McpClient {
    /// Initializes a session at `url` with protocol version 2025-11-25.
    pub async fn connect(url: &str) -> McpClient {
        Self::connect_with(url, &[]).await
    }

    /// Like [`Self::connect`], sending `extra` headers with every request.
    pub async fn connect_with(url: &str, extra: &[(&str, &str)]) -> McpClient {
        Self::connect_declaring(url, json!({}), extra).await
    }

    /// The raw answer to an `initialize` at `url`, for a test that expects
    /// it refused.
    pub async fn connect_raw(url: &str) -> Raw {
        Self::connect_raw_with(url, &[]).await
    }

    /// Like [`Self::connect_raw`], sending `extra` headers.
    pub async fn connect_raw_with(url: &str, extra: &[(&str, &str)]) -> Raw {
        post(
            &reqwest::Client::new(),
            url,
            None,
            &initialize_body(json!({})),
            extra,
        )
        .await
    }

    /// Like [`Self::connect_with`], declaring `capabilities` in `initialize`.
    pub async fn connect_declaring(
        url: &str,
        capabilities: Value,
        extra: &[(&str, &str)],
    ) -> McpClient {
        let http = reqwest::Client::new();
        let raw = post(&http, url, None, &initialize_body(capabilities), extra).await;
        assert_eq!(
            raw.status,
            StatusCode::OK,
            "initialize failed: {}",
            raw.body
        );
        let session = raw.headers["mcp-session-id"].to_str().unwrap().to_owned();
        let version = raw.json()["result"]["protocolVersion"]
            .as_str()
            .unwrap()
            .to_owned();
        let client = McpClient {
            http,
            extra: extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            url: url.to_owned(),
            session,
            version,
            next_id: AtomicU64::new(1),
        };
        client.notify("notifications/initialized", None).await;
        client
    }

    fn id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The same session, its requests sent to `url` (another replica).
    pub fn on(&self, url: &str) -> McpClient {
        McpClient {
            http: self.http.clone(),
            extra: self.extra.clone(),
            url: url.to_owned(),
            session: self.session.clone(),
            version: self.version.clone(),
            next_id: AtomicU64::new(self.next_id.load(Ordering::Relaxed) + 1000),
        }
    }

    /// POSTs a body with this session's headers plus `extra`.
    pub async fn post_raw(&self, body: &str, extra: &[(&str, &str)]) -> Raw {
        let mut headers: Vec<(&str, &str)> = self
            .extra
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        headers.extend_from_slice(extra);
        post(
            &self.http,
            &self.url,
            Some((&self.session, &self.version)),
            body,
            &headers,
        )
        .await
    }

    pub async fn notify(&self, method: &str, params: Option<Value>) {
        let mut msg = json!({ "jsonrpc": "2.0", "method": method });
        if let Some(p) = params {
            msg["params"] = p;
        }
        let raw = self.post_raw(&msg.to_string(), &[]).await;
        assert_eq!(raw.status, StatusCode::ACCEPTED, "{method}: {}", raw.body);
    }

    /// Sends a request with id `id` and returns every message of the answer
    /// in order (one for JSON, all events for SSE).
    pub async fn exchange(&self, id: Value, method: &str, params: Value) -> Vec<Value> {
        let msg = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let raw = self.post_raw(&msg.to_string(), &[]).await;
        assert_eq!(raw.status, StatusCode::OK, "{method}: {}", raw.body);
        let content_type = raw
            .headers
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        if content_type.starts_with("text/event-stream") {
            sse_messages(&raw.body)
        } else {
            vec![raw.json()]
        }
    }

    /// Sends a request and returns its response message (result or error).
    pub async fn request(&self, method: &str, params: Value) -> Value {
        let id = self.id();
        let messages = self.exchange(json!(id), method, params).await;
        messages
            .into_iter()
            .find(|m| m.get("id") == Some(&json!(id)))
            .unwrap_or_else(|| panic!("{method}: no response with id {id}"))
    }

    /// Sends a request and returns its `result`, failing on an error.
    pub async fn result(&self, method: &str, params: Value) -> Value {
        let response = self.request(method, params).await;
        assert!(
            response.get("error").is_none(),
            "{method} failed: {response}"
        );
        response["result"].clone()
    }

    /// Walks every page of a list and returns all items.
    pub async fn list_all(&self, method: &str, key: &str) -> (Vec<Value>, usize) {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        let mut pages = 0;
        loop {
            let params = cursor
                .as_ref()
                .map_or(json!({}), |c| json!({ "cursor": c }));
            let result = self.result(method, params).await;
            pages += 1;
            items.extend(result[key].as_array().unwrap().iter().cloned());
            match result.get("nextCursor").and_then(Value::as_str) {
                Some(c) => cursor = Some(c.to_owned()),
                None => return (items, pages),
            }
            assert!(pages < 10_000, "pagination does not end");
        }
    }

    /// Calls a tool and returns the response message.
    pub async fn call_tool(&self, name: &str, arguments: Value) -> Value {
        self.request(
            "tools/call",
            json!({ "name": name, "arguments": arguments }),
        )
        .await
    }

    /// Sends a request whose answer is read event by event.
    pub async fn open_stream(&self, id: Value, method: &str, params: Value) -> SseReader {
        let msg = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let response = self
            .with_extra(self.http.post(&self.url))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", &self.session)
            .header("mcp-protocol-version", &self.version)
            .body(msg.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            content_type.starts_with("text/event-stream"),
            "expected SSE, got {content_type}"
        );
        SseReader {
            stream: Box::pin(response.bytes_stream()),
            buffer: String::new(),
        }
    }

    /// Opens the session's notification stream (GET), optionally resuming
    /// after `last_event_id`.
    pub async fn listen(&self, last_event_id: Option<u64>) -> SseReader {
        let mut request = self
            .with_extra(self.http.get(&self.url))
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &self.session)
            .header("mcp-protocol-version", &self.version);
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id.to_string());
        }
        let response = within("GET stream", request.send()).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        SseReader {
            stream: Box::pin(response.bytes_stream()),
            buffer: String::new(),
        }
    }

    /// Sets this session's log level.
    pub async fn set_level(&self, level: &str) {
        self.result("logging/setLevel", json!({ "level": level }))
            .await;
    }

    /// Subscribes to a resource URI.
    pub async fn subscribe(&self, uri: &str) {
        self.result("resources/subscribe", json!({ "uri": uri }))
            .await;
    }

    /// `request` with this client's extra headers.
    fn with_extra(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        self.extra
            .iter()
            .fold(request, |request, (k, v)| request.header(k, v))
    }

    /// Ends the session with DELETE and returns the status.
    pub async fn delete(&self) -> StatusCode {
        self.with_extra(self.http.delete(&self.url))
            .header("mcp-session-id", &self.session)
            .send()
            .await
            .unwrap()
            .status()
    }
}

/// POSTs one JSON-RPC body the way a conforming client does.
/// An `initialize` request declaring `capabilities`.
fn initialize_body(capabilities: Value) -> String {
    json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": { "protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": { "name": "it", "version": "0" } }
    })
    .to_string()
}

pub async fn post(
    http: &reqwest::Client,
    url: &str,
    session: Option<(&str, &str)>,
    body: &str,
    extra: &[(&str, &str)],
) -> Raw {
    let mut headers = HeaderMap::new();
    let mut set = |k: &str, v: &str| {
        headers.insert(
            reqwest::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            reqwest::header::HeaderValue::from_str(v).unwrap(),
        );
    };
    set("content-type", "application/json");
    set("accept", "application/json, text/event-stream");
    if let Some((id, version)) = session {
        set("mcp-session-id", id);
        set("mcp-protocol-version", version);
    }
    // `extra` overrides the defaults above.
    for (k, v) in extra {
        set(k, v);
    }
    let request = http.post(url).headers(headers).body(body.to_owned());
    let response = within("HTTP response", request.send()).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = within("HTTP body", response.text()).await.unwrap();
    Raw {
        status,
        headers,
        body,
    }
}

/// Every JSON message in an SSE body (priming events with empty data are skipped).
pub fn sse_messages(body: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter_map(|e| sse_event(e).map(|(_, m)| m))
        .collect()
}

/// One SSE event's id and JSON data, if it has data.
fn sse_event(event: &str) -> Option<(Option<u64>, Value)> {
    let field = |name: &str| {
        event
            .lines()
            .filter_map(|l| l.strip_prefix(name))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect::<Vec<&str>>()
            .join("\n")
    };
    let data = field("data:");
    let id = field("id:").trim().parse().ok();
    (!data.trim().is_empty()).then(|| (id, serde_json::from_str(&data).unwrap()))
}

type ByteStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>;

/// Reads an SSE response one message at a time.
pub struct SseReader {
    stream: ByteStream,
    buffer: String,
}

impl SseReader {
    /// Reads the body of an SSE response.
    pub fn from_response(response: reqwest::Response) -> SseReader {
        SseReader {
            stream: Box::pin(response.bytes_stream()),
            buffer: String::new(),
        }
    }

    /// The next JSON message, or None when the stream ends.
    pub async fn next(&mut self) -> Option<Value> {
        self.next_event().await.map(|(_, message)| message)
    }

    /// The next message that is not a `list_changed` notification.
    pub async fn next_skipping_list_changed(&mut self) -> Option<Value> {
        loop {
            let message = self.next().await?;
            if !message["method"]
                .as_str()
                .unwrap_or_default()
                .ends_with("/list_changed")
            {
                return Some(message);
            }
        }
    }

    /// The next event's id and JSON message, or None when the stream ends.
    pub async fn next_event(&mut self) -> Option<(Option<u64>, Value)> {
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                if let Some(found) = sse_event(&event) {
                    return Some(found);
                }
            }
            match within("an SSE event", self.stream.next()).await {
                Some(Ok(bytes)) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                Some(Err(e)) => panic!("SSE stream failed: {e}"),
                None => return None,
            }
        }
    }
}

/// The `_meta` a 2026-07-28 request carries.
pub const MODERN_META: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

/// Opens a raw 2026-07-28 `subscriptions/listen` stream at `url` with
/// `filter` (its `notifications`) and request `id`.
pub async fn open_listen(url: &str, id: Value, filter: Value) -> SseReader {
    let mut params = json!({ "notifications": filter });
    params["_meta"] = serde_json::from_str(MODERN_META).unwrap();
    let body =
        json!({ "jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": params })
            .to_string();
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "subscriptions/listen")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    SseReader::from_response(response)
}

/// POSTs a stateless 2026-07-28 request with the mirrored headers (and
/// `extra`).
pub async fn modern_post(
    url: &str,
    method: &str,
    mut params: Value,
    extra: &[(&str, &str)],
) -> Raw {
    params["_meta"] = serde_json::from_str(MODERN_META).unwrap();
    let body = json!({ "jsonrpc": "2.0", "id": 9, "method": method, "params": params }).to_string();
    let mut headers = vec![
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", method),
    ];
    headers.extend_from_slice(extra);
    post(&reqwest::Client::new(), url, None, &body, &headers).await
}
