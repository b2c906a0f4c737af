//! Rows of the fault matrix about bad requests, each sent to the running
//! gateway on a session of its own: the exact HTTP status, JSON-RPC code,
//! id and message, and the session still works afterwards.
//!
//! Where the answer's id is `null` although the request had one, the
//! gateway refused the request before reading its body: a body over
//! `http.max_body_bytes`, and a request from a disallowed `Origin` or
//! `Host` (whose body is not read at all).

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::{assert_echo, assert_rpc_error, config, end_session, run_rows};
use crate::support::client::{Raw, post};
use crate::support::matrix::Subject;
use crate::support::{McpClient, example_upstream, within};

/// `http.max_body_bytes` of the gateway under test.
const LIMIT: usize = 4096;

/// How a row's request is sent.
#[derive(Debug, Clone, Copy)]
enum Send {
    /// POST on the row's session, with `headers` added or overriding.
    Session,
    /// POST without `Mcp-Session-Id` (but with `headers`).
    Sessionless,
    /// `Content-Length` over the limit; the body is never sent.
    DeclaredTooLarge,
    /// A chunked body (no length) over the limit.
    ChunkedTooLarge,
}

#[derive(Clone, Copy)]
struct BadInput {
    name: &'static str,
    send: Send,
    headers: &'static [(&'static str, &'static str)],
    /// Makes the request body.
    body: fn() -> String,
    status: StatusCode,
    code: i64,
    /// The id the answer carries.
    id: fn() -> Value,
    /// What the message must say.
    says: &'static [&'static str],
}

impl std::fmt::Debug for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

fn null() -> Value {
    Value::Null
}

/// A `tools/call` of `alpha__echo` whose arguments nest 200 levels deep.
fn deep_call(id: &str, meta: Option<Value>) -> String {
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let mut params = json!({ "name": "alpha__echo", "arguments": { "message": "deep" } });
    if let Some(meta) = meta {
        params["_meta"] = meta;
    }
    let mut text =
        json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params }).to_string();
    let at = text.find(r#""message":"deep""#).unwrap();
    text.insert_str(at, &format!(r#""deep":{deep},"#));
    text
}

const MODERN: &[(&str, &str)] = &[
    ("mcp-protocol-version", "2026-07-28"),
    ("mcp-method", "tools/call"),
    ("mcp-name", "alpha__echo"),
];

const ROWS: &[BadInput] = &[
    BadInput {
        name: "malformed JSON",
        send: Send::Session,
        headers: &[],
        body: || r#"{"jsonrpc": "2.0", "id": 1, "method": "#.into(),
        status: StatusCode::BAD_REQUEST,
        code: -32700,
        id: null,
        says: &["parse error"],
    },
    BadInput {
        name: "batch",
        send: Send::Session,
        headers: &[],
        body: || r#"[{"jsonrpc":"2.0","id":2,"method":"ping"}]"#.into(),
        status: StatusCode::BAD_REQUEST,
        code: -32600,
        id: null,
        says: &["batches are not supported"],
    },
    BadInput {
        name: "wrong jsonrpc",
        send: Send::Session,
        headers: &[],
        body: || r#"{"jsonrpc":"1.0","id":3,"method":"ping"}"#.into(),
        status: StatusCode::BAD_REQUEST,
        code: -32600,
        id: || json!(3),
        says: &[r#""jsonrpc""#, r#""2.0""#],
    },
    BadInput {
        name: "missing method",
        send: Send::Session,
        headers: &[],
        body: || r#"{"jsonrpc":"2.0","id":"four","params":{}}"#.into(),
        status: StatusCode::BAD_REQUEST,
        code: -32600,
        id: || json!("four"),
        says: &[r#""method""#],
    },
    BadInput {
        name: "declared body over the limit",
        send: Send::DeclaredTooLarge,
        headers: &[],
        body: String::new,
        status: StatusCode::PAYLOAD_TOO_LARGE,
        code: -32600,
        id: null,
        says: &["exceeds the limit of 4096 bytes"],
    },
    BadInput {
        name: "chunked body over the limit",
        send: Send::ChunkedTooLarge,
        headers: &[],
        body: || {
            let pad = "x".repeat(LIMIT);
            json!({ "jsonrpc": "2.0", "id": 6, "method": "ping", "params": { "pad": pad } })
                .to_string()
        },
        status: StatusCode::PAYLOAD_TOO_LARGE,
        code: -32600,
        id: null,
        says: &["exceeds the limit of 4096 bytes"],
    },
    BadInput {
        name: "JSON nested 200 deep",
        send: Send::Session,
        headers: &[],
        body: || deep_call("deep", None),
        status: StatusCode::BAD_REQUEST,
        code: -32600,
        id: || json!("deep"),
        says: &["deeper than 128 levels"],
    },
    BadInput {
        name: "JSON nested 200 deep in a 2026-07-28 request",
        send: Send::Sessionless,
        headers: MODERN,
        body: || {
            let meta = json!({ "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} });
            deep_call("deep-modern", Some(meta))
        },
        status: StatusCode::BAD_REQUEST,
        code: -32600,
        id: || json!("deep-modern"),
        says: &["deeper than 128 levels"],
    },
    BadInput {
        name: "bad cursor",
        send: Send::Session,
        headers: &[],
        body: || {
            json!({ "jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": { "cursor": "not-a-cursor" } })
                .to_string()
        },
        status: StatusCode::OK,
        code: -32602,
        id: || json!(9),
        says: &["invalid cursor"],
    },
    BadInput {
        name: "missing session header",
        send: Send::Sessionless,
        headers: &[],
        body: || r#"{"jsonrpc":"2.0","id":10,"method":"ping"}"#.into(),
        status: StatusCode::BAD_REQUEST,
        code: -32600,
        id: || json!(10),
        says: &["missing Mcp-Session-Id header"],
    },
    BadInput {
        name: "unknown session",
        send: Send::Sessionless,
        headers: &[("mcp-session-id", "0123456789abcdef0123456789abcdef")],
        body: || r#"{"jsonrpc":"2.0","id":11,"method":"ping"}"#.into(),
        status: StatusCode::NOT_FOUND,
        code: -32600,
        id: || json!(11),
        says: &["unknown or expired session"],
    },
    BadInput {
        name: "protocol version other than the session's",
        send: Send::Session,
        headers: &[("mcp-protocol-version", "2025-06-18")],
        body: || r#"{"jsonrpc":"2.0","id":12,"method":"ping"}"#.into(),
        status: StatusCode::BAD_REQUEST,
        code: -32600,
        id: || json!(12),
        says: &["2025-06-18", "2025-11-25", "does not match"],
    },
    BadInput {
        name: "bad Origin",
        send: Send::Session,
        headers: &[("origin", "http://evil.example")],
        body: || r#"{"jsonrpc":"2.0","id":13,"method":"ping"}"#.into(),
        status: StatusCode::FORBIDDEN,
        code: -32600,
        id: null,
        says: &["http://evil.example", "http.allowed_origins"],
    },
    BadInput {
        name: "bad Host",
        send: Send::Session,
        headers: &[("host", "evil.example")],
        body: || r#"{"jsonrpc":"2.0","id":14,"method":"ping"}"#.into(),
        status: StatusCode::FORBIDDEN,
        code: -32600,
        id: null,
        says: &[r#"Host "evil.example""#, "http.allowed_hosts"],
    },
    BadInput {
        name: "unknown tool",
        send: Send::Session,
        headers: &[],
        body: || {
            json!({ "jsonrpc": "2.0", "id": 15, "method": "tools/call", "params": { "name": "alpha__nope", "arguments": {} } })
                .to_string()
        },
        status: StatusCode::OK,
        code: -32602,
        id: || json!(15),
        says: &["unknown tool: alpha__nope"],
    },
    BadInput {
        name: "tool of a down upstream",
        send: Send::Session,
        headers: &[],
        body: || {
            json!({ "jsonrpc": "2.0", "id": 16, "method": "tools/call", "params": { "name": "ghost__echo", "arguments": { "message": "boo" } } })
                .to_string()
        },
        status: StatusCode::OK,
        code: -32050,
        id: || json!(16),
        says: &[
            "upstream 'ghost' is unavailable",
            "it is down (could not start",
            "next try in",
        ],
    },
];

#[tokio::test]
async fn bad_inputs() {
    let ghost = "  ghost:\n    command: /nonexistent/mcp-server\n    required: false\n";
    let yaml = config(
        &format!("http:\n  max_body_bytes: {LIMIT}"),
        &[
            example_upstream("alpha", &[]),
            example_upstream("beta", &[]),
            ghost.into(),
        ],
    );
    let mut subject = Subject::start(&yaml, &[], "beta__echo").await;
    run_rows(
        &mut subject,
        ROWS,
        async |s: &mut Subject, row: BadInput| {
            let client = McpClient::connect(&s.url).await;
            let raw = send(s, &client, &row).await;
            assert_eq!(raw.status, row.status, "{}: {}", row.name, raw.body);
            assert_rpc_error(row.name, &raw.json(), row.code, &(row.id)(), row.says);
            // Its session is still there and works.
            assert_echo(&client, "alpha__echo", row.name).await;
            end_session(client, row.name).await;
        },
    )
    .await;
}

/// Sends `row`'s request.
async fn send(s: &Subject, client: &McpClient, row: &BadInput) -> Raw {
    let body = (row.body)();
    match row.send {
        Send::Session => client.post_raw(&body, row.headers).await,
        Send::Sessionless => post(&reqwest::Client::new(), &s.url, None, &body, row.headers).await,
        Send::DeclaredTooLarge => {
            let head = format!(
                "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: {}\r\nContent-Length: {}\r\n\r\n",
                s.base.trim_start_matches("http://"),
                client.session,
                LIMIT + 1
            );
            raw_exchange(s, head.as_bytes()).await
        }
        Send::ChunkedTooLarge => {
            let chunks: Vec<Result<String, std::io::Error>> = body
                .as_bytes()
                .chunks(1000)
                .map(|c| Ok(String::from_utf8(c.to_vec()).unwrap()))
                .collect();
            let response = reqwest::Client::new()
                .post(&s.url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-session-id", &client.session)
                .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
                    chunks,
                )))
                .send();
            let response = within("the chunked POST", response).await.unwrap();
            Raw {
                status: response.status(),
                headers: response.headers().clone(),
                body: within("its body", response.text()).await.unwrap(),
            }
        }
    }
}

/// Writes `request` on a new connection and reads one response (which
/// must have a `Content-Length`).
async fn raw_exchange(s: &Subject, request: &[u8]) -> Raw {
    let addr = s.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut buffer = Vec::new();
    within("a raw HTTP response", async {
        loop {
            let text = String::from_utf8_lossy(&buffer).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse::<usize>().unwrap())
                    })
                    .expect("a Content-Length");
                if body.len() >= length {
                    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
                    return Raw {
                        status: StatusCode::from_u16(status).unwrap(),
                        headers: Default::default(),
                        body: body[..length].to_owned(),
                    };
                }
            }
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(
                n > 0,
                "the connection closed before a whole response: {text}"
            );
            buffer.extend_from_slice(&chunk[..n]);
        }
    })
    .await
}
