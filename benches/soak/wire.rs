//! The load client's HTTP side: one POST and the messages of its answer
//! (a JSON body or an event stream, answering the requests a server sends
//! on it), and the events of an open `GET /mcp` stream as they arrive.

use std::time::Duration;

use futures_util::StreamExt as _;
use serde_json::Value;

/// The 2025-era protocol version the legacy sessions negotiate.
pub const LEGACY_VERSION: &str = "2025-11-25";
/// The stateless era.
pub const MODERN_VERSION: &str = "2026-07-28";
/// The `_meta` a stateless request carries: its version and capabilities.
pub fn modern_meta() -> Value {
    serde_json::json!({
        "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

/// How long the client waits for any one answer before calling it lost.
pub const ANSWER_WAIT: Duration = Duration::from_secs(40);

/// What came back for one POST.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub session: Option<String>,
    /// Every JSON-RPC message of the body, in order.
    pub messages: Vec<Value>,
    /// Answers to the server's requests that the gateway did not accept
    /// (no 202: the connection broke, or HAProxy had no replica).
    pub answers_refused: usize,
}

impl Answer {
    /// The response to request `id`s among the messages, with how many there were.
    pub fn response(&self, id: u64) -> (Option<&Value>, usize) {
        let mut found = self.messages.iter().filter(|m| {
            m.get("id").and_then(Value::as_u64) == Some(id) && m.get("method").is_none()
        });
        let first = found.next();
        (first, first.map_or(0, |_| 1 + found.count()))
    }
}

/// Why a POST got no answer.
#[derive(Debug)]
pub enum Failed {
    /// The connection broke or was refused.
    Transport(String),
    /// Nothing within [`ANSWER_WAIT`].
    Lost,
}

/// POSTs `body` with the headers of a session (`session`) or of a
/// stateless request (`modern`: method and name headers).
pub async fn post(
    http: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    modern: Option<(&str, Option<&str>)>,
    body: String,
) -> Result<Answer, Failed> {
    post_answering(http, url, session, modern, body, &|_| None).await
}

/// [`post`], answering every request the answer's event stream carries
/// (a server asking back, relayed by the gateway) while the stream is
/// open: `reply` gives the result for a request, and the response goes
/// back on the session in a POST of its own. Requests `reply` gives no
/// result for stay unanswered. The requests are kept among the messages.
pub async fn post_answering(
    http: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    modern: Option<(&str, Option<&str>)>,
    body: String,
    reply: &(dyn Fn(&Value) -> Option<Value> + Sync),
) -> Result<Answer, Failed> {
    let mut request = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(session) = session {
        request = request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", LEGACY_VERSION);
    }
    if let Some((method, name)) = modern {
        request = request
            .header("mcp-protocol-version", MODERN_VERSION)
            .header("mcp-method", method);
        if let Some(name) = name {
            request = request.header("mcp-name", name);
        }
    }
    let exchange = async {
        let response = request
            .body(body)
            .send()
            .await
            .map_err(|e| Failed::Transport(short(&e)))?;
        let status = response.status().as_u16();
        let issued = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let stream = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/event-stream"));
        let mut answers_refused = 0;
        let messages = match stream {
            true => {
                let mut messages = Vec::new();
                let mut body = response.bytes_stream();
                let mut parser = Events::default();
                while let Some(chunk) = body.next().await {
                    let chunk = chunk.map_err(|e| Failed::Transport(short(&e)))?;
                    for message in parser.feed(&chunk) {
                        if let Some(answer) = reply_to(&message, reply) {
                            let sent =
                                Box::pin(post(http, url, session, None, answer.to_string())).await;
                            if !sent.is_ok_and(|a| a.status == 202) {
                                answers_refused += 1;
                            }
                        }
                        messages.push(message);
                    }
                }
                messages.extend(parser.feed(b"\n\n"));
                messages
            }
            false => {
                let text = response
                    .text()
                    .await
                    .map_err(|e| Failed::Transport(short(&e)))?;
                serde_json::from_str(&text).into_iter().collect()
            }
        };
        Ok(Answer {
            status,
            session: issued,
            messages,
            answers_refused,
        })
    };
    tokio::time::timeout(ANSWER_WAIT, exchange)
        .await
        .unwrap_or(Err(Failed::Lost))
}

/// The JSON-RPC response to `message` when it is a request `reply` has a
/// result for.
fn reply_to(message: &Value, reply: &(dyn Fn(&Value) -> Option<Value> + Sync)) -> Option<Value> {
    let id = message.get("id")?;
    message.get("method")?;
    let result = reply(message)?;
    Some(serde_json::json!({ "jsonrpc": "2.0", "id": id, "result": result }))
}

/// An incremental event-stream parser: bytes in, JSON messages out.
#[derive(Default)]
pub struct Events {
    pending: Vec<u8>,
    data: String,
}

impl Events {
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<Value> {
        self.pending.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if !self.data.is_empty()
                    && let Ok(value) = serde_json::from_str(&self.data)
                {
                    out.push(value);
                }
                self.data.clear();
            } else if let Some(data) = line.strip_prefix("data:") {
                if !self.data.is_empty() {
                    self.data.push('\n');
                }
                self.data.push_str(data.strip_prefix(' ').unwrap_or(data));
            }
        }
        out
    }
}

/// Opens `GET /mcp` for `session` and hands every message to `seen` until
/// the stream ends; `pause` is waited between reads (a slow reader).
pub async fn listen(
    http: &reqwest::Client,
    url: &str,
    session: &str,
    pause: Option<Duration>,
    mut seen: impl FnMut(Value),
) -> Result<(), String> {
    let response = http
        .get(url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", LEGACY_VERSION)
        .send()
        .await
        .map_err(|e| short(&e))?;
    if !response.status().is_success() {
        return Err(format!("GET /mcp answered {}", response.status()));
    }
    let mut body = response.bytes_stream();
    let mut parser = Events::default();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| short(&e))?;
        for message in parser.feed(&chunk) {
            seen(message);
        }
        if let Some(pause) = pause {
            tokio::time::sleep(pause).await;
        }
    }
    Ok(())
}

/// A reqwest error in one line, without the URL's query.
fn short(e: &reqwest::Error) -> String {
    let kind = match () {
        () if e.is_connect() => "connect",
        () if e.is_timeout() => "timeout",
        () if e.is_body() || e.is_decode() => "body",
        () if e.is_request() => "request",
        () => "other",
    };
    let mut text = format!("{kind}: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}
