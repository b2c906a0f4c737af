//! `mcpmux example-server`: a small MCP server over stdio, the upstream of
//! the embedded demo config and of the example and deploy configs.
//!
//! It serves a few tools (`echo`, `add`, `slow` with progress and
//! cancellation, `link` returning resource links), prompts, resources with
//! subscriptions, a template, completions and logging. One task reads stdin;
//! each request runs in its own task so slow calls overlap; one task writes
//! stdout, one `write` per batch of lines. `mcpmux example-server` runs it
//! on a current-thread runtime, and pipes are read and written by the
//! runtime's reactor, so an echo costs no thread hop.
//!
//! The integration tests' upstream, the `mcpmux-fixture` binary (`fixture/`,
//! not shipped), compiles this file too and layers its test knobs, test
//! controls and the conformance fixture on it through `Extension`; the
//! product runs it with no extension.

use std::collections::HashMap;
use std::future::Future;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::protocol::{UPSTREAM_VERSIONS, code};

/// Options of `mcpmux example-server`.
#[derive(Debug, Clone, clap::Args)]
pub struct ExampleServerArgs {
    /// Name used in resource URIs (`demo://NAME/...`) and server info.
    #[arg(long, default_value = "example")]
    pub name: String,
}

/// A boxed future, as [`Extension`]'s methods return.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a build of this server layers on it: the test fixture's hook. Every
/// method defaults to the plain server's behaviour.
pub(crate) trait Extension: Send + Sync {
    /// Sees each non-empty input line before it is parsed. The line is
    /// handled once the future resolves; one that never does stops the
    /// server reading.
    fn received<'a>(&'a self, _line: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(std::future::ready(()))
    }

    /// Answers request `id`; `Err` is a JSON-RPC error object. The default
    /// is the server's own answer, [`Server::answer`].
    fn dispatch<'a>(
        &'a self,
        server: &'a Server,
        method: &'a str,
        params: &'a Value,
        _id: &'a Value,
    ) -> BoxFuture<'a, Result<Value, Value>> {
        Box::pin(server.answer(method, params))
    }

    /// A message without a method: a response to a request the extension
    /// sent to the client.
    fn response(&self, _message: &Map<String, Value>) {}

    /// The input closed: no more requests or responses will arrive.
    fn closed(&self) {}
}

/// The product's server: nothing layered on.
struct Plain;

impl Extension for Plain {}

/// The running server, shared by the request tasks.
pub(crate) struct Server {
    args: ExampleServerArgs,
    /// To the stdout writer task; closed when every request task is done.
    out: mpsc::Sender<String>,
    /// Running requests by id (JSON text), cancelled by notifications/cancelled.
    running: Mutex<HashMap<String, CancellationToken>>,
    /// What this build layers on the server: `Plain` in the product.
    extension: Box<dyn Extension>,
}

/// Runs the server on stdin/stdout until stdin closes.
pub async fn run(args: ExampleServerArgs) -> std::io::Result<()> {
    serve(args, Box::new(Plain)).await
}

/// Runs the server with `extension` layered on, until stdin closes.
pub(crate) async fn serve(
    args: ExampleServerArgs,
    extension: Box<dyn Extension>,
) -> std::io::Result<()> {
    let (out, outbound) = mpsc::channel::<String>(256);
    // Not a gateway task: the demo server is a process of its own, with no
    // tracker; its tasks end when stdin closes and the process exits.
    let writer = tokio::spawn(write_lines(outbound));
    let server = Arc::new(Server {
        args,
        out,
        running: Mutex::new(HashMap::new()),
        extension,
    });
    let mut lines = BufReader::with_capacity(64 * 1024, stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        server.extension.received(&line).await;
        let Ok(message) = serde_json::from_str::<Map<String, Value>>(&line) else {
            server.send(json!({"jsonrpc":"2.0","id":null,"error":{"code":code::PARSE_ERROR,"message":"parse error"}})).await;
            continue;
        };
        let server = server.clone();
        // One task per request, so slow calls overlap (see `serve`).
        tokio::spawn(async move { server.handle(message).await });
    }
    // Streams the extension holds open never end on their own; closed input
    // ends them.
    server.extension.closed();
    drop(server);
    let _ = writer.await;
    Ok(())
}

/// Most bytes the writer gathers into one `write`.
const WRITE_BATCH: usize = 64 * 1024;

/// The stdout writer task: each message is one line, and the lines waiting
/// in the queue go out together in one `write` (at most [`WRITE_BATCH`]
/// bytes past the first line), so a frame is never split over two writes.
async fn write_lines(mut outbound: mpsc::Receiver<String>) {
    let mut stdout = stdout();
    let mut batch = Vec::with_capacity(8 * 1024);
    while let Some(line) = outbound.recv().await {
        batch.clear();
        batch.extend_from_slice(line.as_bytes());
        batch.push(b'\n');
        while batch.len() < WRITE_BATCH {
            let Ok(line) = outbound.try_recv() else { break };
            batch.extend_from_slice(line.as_bytes());
            batch.push(b'\n');
        }
        if stdout.write_all(&batch).await.is_err() || stdout.flush().await.is_err() {
            break;
        }
    }
}

/// Standard input, read straight from the pipe by the runtime's reactor
/// when it is one (no blocking thread and no hop per read), else through
/// tokio's `stdin` (a terminal or a file).
fn stdin() -> Pin<Box<dyn AsyncRead + Send>> {
    let pipe = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .and_then(pipe::Receiver::from_owned_fd);
    match pipe {
        Ok(pipe) => Box::pin(pipe),
        Err(_) => Box::pin(tokio::io::stdin()),
    }
}

/// Standard output, written straight to the pipe when it is one (see
/// [`stdin`]), else through tokio's `stdout`.
fn stdout() -> Pin<Box<dyn AsyncWrite + Send>> {
    let pipe = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .and_then(pipe::Sender::from_owned_fd);
    match pipe {
        Ok(pipe) => Box::pin(pipe),
        Err(_) => Box::pin(tokio::io::stdout()),
    }
}

impl Server {
    /// Writes one line to stdout, as it is: the extension's raw output.
    pub(crate) async fn send_line(&self, line: String) -> bool {
        self.out.send(line).await.is_ok()
    }

    /// A clone of the stdout queue, for a message sent after the request
    /// that caused it was answered (the test fixture's task jobs).
    #[allow(
        dead_code,
        reason = "only the test fixture, which compiles this file in, uses it"
    )]
    pub(crate) fn outlet(&self) -> mpsc::Sender<String> {
        self.out.clone()
    }

    /// Writes one JSON-RPC message to stdout.
    pub(crate) async fn send(&self, message: Value) {
        self.send_line(message.to_string()).await;
    }

    /// Sends a notification.
    pub(crate) async fn notify(&self, method: &str, params: Value) {
        self.send(json!({ "jsonrpc": "2.0", "method": method, "params": params }))
            .await;
    }

    async fn handle(self: Arc<Self>, mut message: Map<String, Value>) {
        if !message.contains_key("method") {
            self.extension.response(&message);
            return;
        }
        let method = match message.remove("method") {
            Some(Value::String(method)) => method,
            _ => String::new(),
        };
        let params = message.remove("params").unwrap_or(Value::Null);
        let Some(id) = message.remove("id") else {
            if method == "notifications/cancelled" {
                let key = params
                    .get("requestId")
                    .map(Value::to_string)
                    .unwrap_or_default();
                if let Some(token) = self
                    .running
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&key)
                {
                    token.cancel();
                }
            }
            return;
        };
        let token = CancellationToken::new();
        let key = id.to_string();
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.clone(), token.clone());
        let outcome = tokio::select! {
            outcome = self.extension.dispatch(&self, &method, &params, &id) => Some(outcome),
            () = token.cancelled() => None,
        };
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
        // A cancelled request gets no response, as the spec asks.
        let Some(outcome) = outcome else { return };
        let reply = match outcome {
            Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
            Err(error) => json!({ "jsonrpc": "2.0", "id": id, "error": error }),
        };
        self.send(reply).await;
    }

    /// The server's own answer to a request; `Err` is a JSON-RPC error
    /// object.
    pub(crate) async fn answer(&self, method: &str, params: &Value) -> Result<Value, Value> {
        self.dispatch(method, params)
            .await
            .map_err(|(code, message)| error(code, message))
    }

    async fn dispatch(&self, method: &str, params: &Value) -> Result<Value, (i64, String)> {
        if let Some((key, items)) = self.list(method) {
            return page(key, items, params, 0);
        }
        match method {
            "initialize" => Ok(self.initialize(params)),
            "ping" => Ok(json!({})),
            "tools/call" => self.call_tool(params).await,
            "prompts/get" => self.get_prompt(params),
            "resources/read" => self.read(params),
            "completion/complete" => Ok(complete(params)),
            "resources/subscribe" | "resources/unsubscribe" | "logging/setLevel" => Ok(json!({})),
            _ => Err((
                code::METHOD_NOT_FOUND,
                format!("method not found: {method}"),
            )),
        }
    }

    /// The whole list a list method returns, and the key of the result
    /// that holds it; `None` for any other method.
    pub(crate) fn list(&self, method: &str) -> Option<(&'static str, Vec<Value>)> {
        Some(match method {
            "tools/list" => ("tools", self.tools()),
            "prompts/list" => ("prompts", self.prompts()),
            "resources/list" => ("resources", self.resources()),
            "resources/templates/list" => ("resourceTemplates", self.templates()),
            _ => return None,
        })
    }

    fn initialize(&self, params: &Value) -> Value {
        let version = negotiated_version(params);
        json!({
            "protocolVersion": version,
            "capabilities": {
                "tools": { "listChanged": true },
                "prompts": { "listChanged": true },
                "resources": { "subscribe": true, "listChanged": true },
                "completions": {},
                "logging": {},
            },
            "serverInfo": { "name": format!("mcpmux-example-{}", self.args.name), "version": env!("CARGO_PKG_VERSION") },
            "instructions": format!("Example server '{}': echo text, add numbers, read demo://{}/readme.", self.args.name, self.args.name),
        })
    }

    fn uri(&self, path: &str) -> String {
        format!("demo://{}/{path}", self.args.name)
    }

    fn tools(&self) -> Vec<Value> {
        vec![
            json!({ "name": "echo", "description": "Returns the message it is given.",
                    "inputSchema": object(json!({ "message": { "type": "string" } }), &["message"]) }),
            json!({ "name": "add", "description": "Adds two numbers.",
                    "inputSchema": object(json!({ "a": { "type": "number" }, "b": { "type": "number" } }), &["a", "b"]) }),
            json!({ "name": "slow", "description": "Takes `steps` steps of `interval_ms`, reporting progress; can be cancelled.",
                    "inputSchema": object(json!({ "steps": { "type": "integer" }, "interval_ms": { "type": "integer" } }), &[]) }),
            json!({ "name": "link", "description": "Returns a link to this server's readme and the readme itself.",
                    "inputSchema": object(json!({}), &[]) }),
        ]
    }

    fn prompts(&self) -> Vec<Value> {
        vec![
            json!({ "name": "greeting", "description": "Greets someone.",
                    "arguments": [{ "name": "name", "description": "Who to greet", "required": true }] }),
            json!({ "name": "summarize_readme", "description": "Asks for a summary of the readme, embedding it." }),
        ]
    }

    fn resources(&self) -> Vec<Value> {
        vec![
            json!({ "uri": self.uri("readme"), "name": "readme", "mimeType": "text/plain", "description": "About this server." }),
            json!({ "uri": self.uri("status"), "name": "status", "mimeType": "application/json" }),
        ]
    }

    fn templates(&self) -> Vec<Value> {
        vec![
            json!({ "uriTemplate": self.uri("notes/{id}"), "name": "note", "mimeType": "text/plain" }),
        ]
    }

    fn readme(&self) -> Value {
        json!({ "uri": self.uri("readme"), "mimeType": "text/plain",
                "text": format!("This is the '{}' example server of mcpmux.", self.args.name) })
    }

    async fn call_tool(&self, params: &Value) -> Result<Value, (i64, String)> {
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let args = params
            .get("arguments")
            .cloned()
            .unwrap_or_else(|| json!({}));
        match name {
            "echo" => Ok(text(
                args.get("message")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            )),
            "add" => {
                let n = |k: &str| {
                    args.get(k)
                        .and_then(Value::as_f64)
                        .ok_or((code::INVALID_PARAMS, format!("{k} must be a number")))
                };
                Ok(text(format!("{}", n("a")? + n("b")?)))
            }
            "slow" => {
                let steps = args.get("steps").and_then(Value::as_u64).unwrap_or(3);
                let interval = Duration::from_millis(
                    args.get("interval_ms")
                        .and_then(Value::as_u64)
                        .unwrap_or(100),
                );
                let token = params
                    .get("_meta")
                    .and_then(|m| m.get("progressToken"))
                    .cloned();
                for step in 1..=steps {
                    tokio::time::sleep(interval).await;
                    if let Some(token) = &token {
                        self.notify("notifications/progress", json!({ "progressToken": token, "progress": step, "total": steps, "message": format!("step {step}") }))
                            .await;
                    }
                }
                Ok(text(format!("done after {steps} steps")))
            }
            "link" => Ok(json!({ "content": [
                { "type": "resource_link", "uri": self.uri("readme"), "name": "readme" },
                { "type": "resource", "resource": self.readme() },
            ] })),
            _ => Err((code::INVALID_PARAMS, format!("Unknown tool: {name}"))),
        }
    }

    fn get_prompt(&self, params: &Value) -> Result<Value, (i64, String)> {
        match params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
        {
            "greeting" => {
                let who = params
                    .pointer("/arguments/name")
                    .and_then(Value::as_str)
                    .unwrap_or("world");
                Ok(json!({ "description": "A greeting", "messages": [
                    { "role": "user", "content": { "type": "text", "text": format!("Hello, {who}!") } }
                ] }))
            }
            "summarize_readme" => Ok(json!({ "messages": [
                { "role": "user", "content": { "type": "text", "text": "Summarize this document." } },
                { "role": "user", "content": { "type": "resource", "resource": self.readme() } },
            ] })),
            other => Err((code::INVALID_PARAMS, format!("Unknown prompt: {other}"))),
        }
    }

    fn read(&self, params: &Value) -> Result<Value, (i64, String)> {
        let uri = params
            .get("uri")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if uri == self.uri("readme") {
            return Ok(json!({ "contents": [self.readme()] }));
        }
        if uri == self.uri("status") {
            return Ok(
                json!({ "contents": [{ "uri": uri, "mimeType": "application/json", "text": "{\"ok\":true}" }] }),
            );
        }
        if let Some(id) = uri.strip_prefix(&self.uri("notes/")) {
            return Ok(
                json!({ "contents": [{ "uri": uri, "mimeType": "text/plain", "text": format!("Note {id}") }] }),
            );
        }
        Err((
            code::RESOURCE_NOT_FOUND,
            format!("Resource not found: {uri}"),
        ))
    }
}

/// The page of `items` that starts at the request's `cursor`, under `key`,
/// with a `nextCursor` if more follow; `size` 0 is one page.
pub(crate) fn page(
    key: &str,
    items: Vec<Value>,
    params: &Value,
    size: usize,
) -> Result<Value, (i64, String)> {
    let size = if size == 0 { items.len().max(1) } else { size };
    let start = match params.get("cursor").and_then(Value::as_str) {
        None => 0,
        Some(c) => c
            .parse::<usize>()
            .ok()
            .filter(|s| *s <= items.len())
            .ok_or((code::INVALID_PARAMS, format!("bad cursor {c:?}")))?,
    };
    let end = (start + size).min(items.len());
    let mut result = json!({ key: items[start..end] });
    if end < items.len() {
        result["nextCursor"] = Value::from(end.to_string());
    }
    Ok(result)
}

/// A JSON-RPC error object.
pub(crate) fn error(code: i64, message: impl Into<String>) -> Value {
    json!({ "code": code, "message": message.into() })
}

/// A tool result of one text item.
pub(crate) fn text(s: impl Into<String>) -> Value {
    json!({ "content": [{ "type": "text", "text": s.into() }] })
}

/// A tool's input schema: an object with `props`, `required` of them.
pub(crate) fn object(props: Value, required: &[&str]) -> Value {
    json!({ "type": "object", "properties": props, "required": required })
}

/// Completions for the greeting's `name` and a note's `id`.
fn complete(params: &Value) -> Value {
    let prefix = params
        .pointer("/argument/value")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let candidates: &[&str] = match params.pointer("/ref/type").and_then(Value::as_str) {
        Some("ref/prompt") => &["alice", "bob", "carol"],
        Some("ref/resource") => &["1", "2", "3"],
        _ => &[],
    };
    let values: Vec<&str> = candidates
        .iter()
        .copied()
        .filter(|c| c.starts_with(prefix))
        .collect();
    json!({ "completion": { "values": values, "total": values.len(), "hasMore": false } })
}

/// The version an `initialize` settles on: the client's, if supported,
/// else the newest (shared with the test fixture, which builds on this file).
pub(crate) fn negotiated_version(params: &Value) -> &str {
    let requested = params
        .get("protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match UPSTREAM_VERSIONS.contains(&requested) {
        true => requested,
        false => UPSTREAM_VERSIONS[0],
    }
}
