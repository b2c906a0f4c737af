//! A small MCP server over stdio: the upstream of the embedded demo config,
//! and the test upstream for what real servers cannot do on demand.
//!
//! It serves a few tools (`echo`, `add`, `slow` with progress and
//! cancellation, `link` returning resource links), prompts, resources with
//! subscriptions, a template, completions, logging and pagination
//! (`--page-size`). With `--test-controls` it adds tools that change it on
//! command: add tools or prompts (sending `list_changed`), touch a resource
//! (sending `resources/updated`), emit log messages, flood stderr, crash. `--record FILE` appends every received message to FILE, so tests
//! can check what reached the upstream. One task reads stdin; each request
//! runs in its own task so slow calls overlap; one task writes stdout.
//!
//! `--conformance` replaces all of that with the fixture of the official MCP
//! conformance suite (see [`conformance`]), served in both protocol eras.

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::protocol::{UPSTREAM_VERSIONS, code};

mod conformance;

/// Options of `mcpmux example-server`.
#[derive(Debug, Clone, clap::Args)]
pub struct ExampleServerArgs {
    /// Name used in resource URIs (`demo://NAME/...`) and server info.
    #[arg(long, default_value = "example")]
    pub name: String,
    /// Extra generated tools `gen_0000`..`gen_N`, to exercise paging.
    #[arg(long, default_value_t = 0)]
    pub tools: usize,
    /// Items per page of every list; 0 sends each list in one page.
    #[arg(long, default_value_t = 0)]
    pub page_size: usize,
    /// Append every received JSON-RPC message to this file, one per line.
    #[arg(long)]
    pub record: Option<std::path::PathBuf>,
    /// Declare no `resources.subscribe` capability (and refuse subscriptions).
    #[arg(long)]
    pub no_subscribe: bool,
    /// Add tools that change the server on command (add_tools, add_prompt,
    /// touch, log, flood_stderr, crash).
    #[arg(long)]
    pub test_controls: bool,
    /// Serve the fixture tools, prompts and resources of the MCP conformance
    /// suite instead, answering `server/discover` (2026-07-28) as well as
    /// `initialize`.
    #[arg(long)]
    pub conformance: bool,
    /// With --conformance: refuse `initialize`, speaking 2026-07-28 only.
    #[arg(long)]
    pub modern_only: bool,
}

struct Server {
    args: ExampleServerArgs,
    out: mpsc::Sender<String>,
    record: Option<Mutex<std::fs::File>>,
    /// Running requests by id (JSON text), cancelled by notifications/cancelled.
    running: Mutex<HashMap<String, CancellationToken>>,
    /// Tools and prompts added at run time by the test controls.
    added_tools: Mutex<Vec<String>>,
    added_prompts: Mutex<Vec<String>>,
    /// Set by the `stall` tool: the server stops reading its input.
    stalled: std::sync::atomic::AtomicBool,
    /// The conformance fixture, with `--conformance`.
    fixture: Option<conformance::Fixture>,
}

/// Runs the server on stdin/stdout until stdin closes.
pub async fn run(args: ExampleServerArgs) -> std::io::Result<()> {
    let record = match &args.record {
        Some(path) => Some(Mutex::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?,
        )),
        None => None,
    };
    let (out, mut outbound) = mpsc::channel::<String>(256);
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(line) = outbound.recv().await {
            if stdout.write_all(line.as_bytes()).await.is_err()
                || stdout.write_all(b"\n").await.is_err()
            {
                break;
            }
            let _ = stdout.flush().await;
        }
    });
    let server = Arc::new(Server {
        out,
        record,
        running: Mutex::new(HashMap::new()),
        added_tools: Mutex::new(Vec::new()),
        added_prompts: Mutex::new(Vec::new()),
        stalled: std::sync::atomic::AtomicBool::new(false),
        fixture: args
            .conformance
            .then(|| conformance::Fixture::new(args.modern_only)),
        args,
    });
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        if server.stalled.load(std::sync::atomic::Ordering::Relaxed) {
            // A server that stopped reading: its stdin pipe fills up.
            std::future::pending::<()>().await;
        }
        if line.trim().is_empty() {
            continue;
        }
        server.record(&line);
        let Ok(message) = serde_json::from_str::<Map<String, Value>>(&line) else {
            server.send(json!({"jsonrpc":"2.0","id":null,"error":{"code":code::PARSE_ERROR,"message":"parse error"}})).await;
            continue;
        };
        let server = server.clone();
        tokio::spawn(async move { server.handle(message).await });
    }
    // Listen streams never end on their own; closed input ends them.
    if let Some(fixture) = &server.fixture {
        fixture.close();
    }
    drop(server);
    let _ = writer.await;
    Ok(())
}

impl Server {
    fn record(&self, line: &str) {
        if let Some(file) = &self.record {
            let mut file = file.lock().unwrap_or_else(|e| e.into_inner());
            let _ = writeln!(file, "{line}");
            let _ = file.flush();
        }
    }

    async fn send(&self, message: Value) {
        let _ = self.out.send(message.to_string()).await;
    }

    async fn handle(self: Arc<Self>, message: Map<String, Value>) {
        let method = message
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        if !message.contains_key("method") {
            // A response to a request this server sent (conformance only).
            if let Some(fixture) = &self.fixture {
                fixture.on_response(&message);
            }
            return;
        }
        let Some(id) = message.get("id").cloned() else {
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
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string(), token.clone());
        let work = async {
            match &self.fixture {
                Some(fixture) => fixture.dispatch(&self, &method, &params, &id).await,
                None => self
                    .dispatch(&method, &params)
                    .await
                    .map_err(|(code, message)| json!({ "code": code, "message": message })),
            }
        };
        let outcome = tokio::select! {
            outcome = work => Some(outcome),
            () = token.cancelled() => None,
        };
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id.to_string());
        // A cancelled request gets no response, as the spec asks.
        let Some(outcome) = outcome else { return };
        let reply = match outcome {
            Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
            Err(error) => json!({ "jsonrpc": "2.0", "id": id, "error": error }),
        };
        self.send(reply).await;
    }

    async fn dispatch(&self, method: &str, params: &Value) -> Result<Value, (i64, String)> {
        match method {
            "initialize" => Ok(self.initialize(params)),
            "ping" => Ok(json!({})),
            "tools/list" => self.page("tools", self.tools(), params),
            "prompts/list" => self.page("prompts", self.prompts(), params),
            "resources/list" => self.page("resources", self.resources(), params),
            "resources/templates/list" => self.page("resourceTemplates", self.templates(), params),
            "tools/call" => self.call_tool(params).await,
            "prompts/get" => self.get_prompt(params),
            "resources/read" => self.read(params),
            "completion/complete" => Ok(complete(params)),
            "resources/subscribe" | "resources/unsubscribe" if self.args.no_subscribe => Err((
                code::METHOD_NOT_FOUND,
                format!("method not found: {method}"),
            )),
            "resources/subscribe" | "resources/unsubscribe" | "logging/setLevel" => Ok(json!({})),
            _ => Err((
                code::METHOD_NOT_FOUND,
                format!("method not found: {method}"),
            )),
        }
    }

    fn initialize(&self, params: &Value) -> Value {
        let requested = params
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let version = if UPSTREAM_VERSIONS.contains(&requested) {
            requested
        } else {
            UPSTREAM_VERSIONS[0]
        };
        json!({
            "protocolVersion": version,
            "capabilities": {
                "tools": { "listChanged": true },
                "prompts": { "listChanged": true },
                "resources": { "subscribe": !self.args.no_subscribe, "listChanged": true },
                "completions": {},
                "logging": {},
            },
            "serverInfo": { "name": format!("mcpmux-example-{}", self.args.name), "version": env!("CARGO_PKG_VERSION") },
            "instructions": format!("Example server '{}': echo text, add numbers, read demo://{}/readme.", self.args.name, self.args.name),
        })
    }

    fn page(&self, key: &str, items: Vec<Value>, params: &Value) -> Result<Value, (i64, String)> {
        let size = if self.args.page_size == 0 {
            items.len().max(1)
        } else {
            self.args.page_size
        };
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

    fn uri(&self, path: &str) -> String {
        format!("demo://{}/{path}", self.args.name)
    }

    fn tools(&self) -> Vec<Value> {
        let object = |props: Value, required: &[&str]| json!({ "type": "object", "properties": props, "required": required });
        let mut tools = vec![
            json!({ "name": "echo", "description": "Returns the message it is given.",
                    "inputSchema": object(json!({ "message": { "type": "string" } }), &["message"]) }),
            json!({ "name": "add", "description": "Adds two numbers.",
                    "inputSchema": object(json!({ "a": { "type": "number" }, "b": { "type": "number" } }), &["a", "b"]) }),
            json!({ "name": "slow", "description": "Takes `steps` steps of `interval_ms`, reporting progress; can be cancelled.",
                    "inputSchema": object(json!({ "steps": { "type": "integer" }, "interval_ms": { "type": "integer" } }), &[]) }),
            json!({ "name": "link", "description": "Returns a link to this server's readme and the readme itself.",
                    "inputSchema": object(json!({}), &[]) }),
        ];
        if self.args.test_controls {
            tools.push(json!({ "name": "flood_stderr", "description": "Writes `bytes` bytes of log lines to stderr.",
                               "inputSchema": object(json!({ "bytes": { "type": "integer" } }), &["bytes"]) }));
            tools.push(json!({ "name": "garbage_stdout", "description": "Writes `count` lines that are not JSON-RPC to stdout.",
                               "inputSchema": object(json!({ "count": { "type": "integer" } }), &["count"]) }));
            tools.push(json!({ "name": "crash", "description": "Exits the process at once.", "inputSchema": object(json!({}), &[]) }));
            tools.push(json!({ "name": "stall", "description": "Stops reading stdin (after one more message).", "inputSchema": object(json!({}), &[]) }));
            tools.push(json!({ "name": "add_tools", "description": "Adds `count` tools named `prefix`N, one list_changed each.",
                               "inputSchema": object(json!({ "count": { "type": "integer" }, "prefix": { "type": "string" } }), &[]) }));
            tools.push(json!({ "name": "add_prompt", "description": "Adds a prompt and sends prompts/list_changed.",
                               "inputSchema": object(json!({ "name": { "type": "string" } }), &["name"]) }));
            tools.push(json!({ "name": "touch", "description": "Sends resources/updated for `uri` `count` times.",
                               "inputSchema": object(json!({ "uri": { "type": "string" }, "count": { "type": "integer" } }), &["uri"]) }));
            tools.push(json!({ "name": "log", "description": "Sends `count` notifications/message at `level`.",
                               "inputSchema": object(json!({ "level": { "type": "string" }, "count": { "type": "integer" }, "message": { "type": "string" } }), &[]) }));
            for name in self
                .added_tools
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
            {
                tools.push(json!({ "name": name, "description": "Added at run time.", "inputSchema": object(json!({}), &[]) }));
            }
        }
        for i in 0..self.args.tools {
            tools.push(json!({ "name": format!("gen_{i:04}"), "description": format!("Generated tool {i}."), "inputSchema": object(json!({}), &[]) }));
        }
        tools
    }

    fn prompts(&self) -> Vec<Value> {
        let mut prompts = vec![
            json!({ "name": "greeting", "description": "Greets someone.",
                    "arguments": [{ "name": "name", "description": "Who to greet", "required": true }] }),
            json!({ "name": "summarize_readme", "description": "Asks for a summary of the readme, embedding it." }),
        ];
        for name in self
            .added_prompts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            prompts.push(json!({ "name": name, "description": "Added at run time." }));
        }
        prompts
    }

    async fn notify(&self, method: &str, params: Value) {
        self.send(json!({ "jsonrpc": "2.0", "method": method, "params": params }))
            .await;
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
        let text = |s: String| json!({ "content": [{ "type": "text", "text": s }] });
        let known = self.tools().iter().any(|t| t["name"] == name);
        if !known {
            return Err((code::INVALID_PARAMS, format!("Unknown tool: {name}")));
        }
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
                        self.send(json!({ "jsonrpc": "2.0", "method": "notifications/progress",
                                          "params": { "progressToken": token, "progress": step, "total": steps, "message": format!("step {step}") } }))
                            .await;
                    }
                }
                Ok(text(format!("done after {steps} steps")))
            }
            "link" => Ok(json!({ "content": [
                { "type": "resource_link", "uri": self.uri("readme"), "name": "readme" },
                { "type": "resource", "resource": self.readme() },
            ] })),
            "flood_stderr" => {
                let bytes = args.get("bytes").and_then(Value::as_u64).unwrap_or(0) as usize;
                let line = format!("{}\n", "x".repeat(99));
                let mut stderr = tokio::io::stderr();
                let mut written = 0;
                while written < bytes {
                    if stderr.write_all(line.as_bytes()).await.is_err() {
                        break;
                    }
                    written += line.len();
                }
                let _ = stderr.flush().await;
                Ok(text(format!("wrote {written} bytes to stderr")))
            }
            "garbage_stdout" => {
                let count = args.get("count").and_then(Value::as_u64).unwrap_or(0);
                for i in 0..count {
                    if self
                        .out
                        .send(format!("not json-rpc, line {i}"))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
                Ok(text(format!("wrote {count} garbage lines to stdout")))
            }
            "crash" => std::process::exit(3),
            "stall" => {
                self.stalled
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                Ok(text("stalled".into()))
            }
            "add_tools" => {
                let count = args.get("count").and_then(Value::as_u64).unwrap_or(1);
                let prefix = args
                    .get("prefix")
                    .and_then(Value::as_str)
                    .unwrap_or("added_");
                for i in 0..count {
                    self.added_tools
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(format!("{prefix}{i}"));
                    self.notify("notifications/tools/list_changed", json!({}))
                        .await;
                }
                Ok(text(format!("added {count} tools")))
            }
            "add_prompt" => {
                let name = args
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("added")
                    .to_owned();
                self.added_prompts
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(name);
                self.notify("notifications/prompts/list_changed", json!({}))
                    .await;
                Ok(text("added a prompt".into()))
            }
            "touch" => {
                let uri = args.get("uri").and_then(Value::as_str).unwrap_or_default();
                let count = args.get("count").and_then(Value::as_u64).unwrap_or(1);
                for _ in 0..count {
                    self.notify("notifications/resources/updated", json!({ "uri": uri }))
                        .await;
                }
                Ok(text(format!("touched {uri}")))
            }
            "log" => {
                let level = args.get("level").and_then(Value::as_str).unwrap_or("info");
                let count = args.get("count").and_then(Value::as_u64).unwrap_or(1);
                let message = args.get("message").and_then(Value::as_str).unwrap_or("log");
                for i in 0..count {
                    self.notify("notifications/message", json!({ "level": level, "logger": "example", "data": format!("{message} {i}") }))
                        .await;
                }
                Ok(text(format!("logged {count}")))
            }
            _ => Ok(text(format!("{name} ran"))),
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
