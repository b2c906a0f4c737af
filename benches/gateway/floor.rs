//! The floor: the least an MCP server can do, answering at once and parsing
//! each message once, over Streamable HTTP (hyper 1.x, HTTP/1.1) and over
//! stdio (newline-delimited JSON-RPC). It runs as a child process of the
//! benchmark (`gateway floor http|stdio --tools N`) so that its CPU is read
//! apart from the gateway's and the load client's: HTTP on a tokio runtime
//! (one task per connection), stdio on the main thread, both until stdin
//! closes.

use std::borrow::Cow;
use std::convert::Infallible;
use std::io::{BufRead, Write};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use crate::Res;

/// The tool that returns its `text` argument.
pub const ECHO: &str = "echo";
/// The tool that pushes `notifications/resources/updated` for its `uri`
/// argument on every open notification stream (stdio: on stdout).
pub const NOTIFY: &str = "notify";
/// The tool that never answers (listed only by a floor started with
/// `--stall`): its POST stays open until the caller gives up.
pub const STALL: &str = "stall";
/// The one resource the floor lists; the fan-out subscribes to it.
pub const RESOURCE: &str = "bench://r/0";
/// Frames queued per open GET stream; a notification for a full queue is dropped.
const STREAM_QUEUE: usize = 1024;

const VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct InitParams<'a> {
    #[serde(borrow, default, rename = "protocolVersion")]
    protocol_version: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct CallParams<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default)]
    arguments: Option<CallArgs>,
}

#[derive(Deserialize, Default)]
struct CallArgs {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    uri: Option<String>,
}

/// What one message asks of the floor.
pub struct Handled {
    /// The response frame (none for a notification or a response).
    pub reply: Option<String>,
    /// The message was `initialize`: HTTP adds an `Mcp-Session-Id`.
    pub initialize: bool,
    /// A call of the `stall` tool: never answered.
    pub stall: bool,
}

/// The server's state, shared by every connection.
pub struct Floor {
    /// The `result` of `tools/list`, built once.
    tools_result: String,
    sessions: AtomicU64,
    /// Open GET streams; each receiver is a response body on its
    /// connection's task. Pruned when a send finds the receiver gone.
    streams: Mutex<Vec<mpsc::Sender<Bytes>>>,
}

impl Floor {
    /// A floor listing `tools` tools: `echo`, `notify`, then `tool2`, `tool3`,
    /// ... (with `words`, actions on a service's objects instead, see
    /// `words`); with `stall`, the `stall` tool too.
    pub fn new(tools: usize, stall: bool, words: Option<usize>) -> Floor {
        let schema =
            r#"{"type":"object","properties":{"text":{"type":"string"},"uri":{"type":"string"}}}"#;
        let mut items = Vec::with_capacity(tools.max(2));
        items.push(format!(
            r#"{{"name":"{ECHO}","description":"Returns its text argument.","inputSchema":{schema}}}"#
        ));
        items.push(format!(
            r#"{{"name":"{NOTIFY}","description":"Emits resources/updated for its uri argument.","inputSchema":{schema}}}"#
        ));
        for i in 2..tools {
            match words {
                Some(seed) => {
                    let (name, description, [id, note]) =
                        crate::words::tool(seed, (i - 2) % crate::words::MAX_TOOLS);
                    items.push(format!(
                        r#"{{"name":"{name}","description":"{description}","inputSchema":{{"type":"object","properties":{{"{id}":{{"type":"string"}},"{note}":{{"type":"string"}}}}}}}}"#
                    ));
                }
                None => items.push(format!(
                    r#"{{"name":"tool{i}","description":"Benchmark filler tool number {i}; it is never called.","inputSchema":{schema}}}"#
                )),
            }
        }
        if stall {
            items.push(format!(
                r#"{{"name":"{STALL}","description":"Never answers.","inputSchema":{schema}}}"#
            ));
        }
        Floor {
            tools_result: format!(r#"{{"tools":[{}]}}"#, items.join(",")),
            sessions: AtomicU64::new(0),
            streams: Mutex::new(Vec::new()),
        }
    }

    /// Answers one message. `push` sends a notification frame out of band
    /// and says how many streams it reached.
    pub fn handle(&self, body: &[u8], push: &mut dyn FnMut(&str) -> usize) -> Handled {
        let msg: Message = match serde_json::from_slice(body) {
            Ok(m) => m,
            Err(_) => {
                return Handled {
                    reply: Some(error("null", -32700, "Parse error")),
                    initialize: false,
                    stall: false,
                };
            }
        };
        let (Some(id), Some(method)) = (msg.id, msg.method.as_deref()) else {
            // A notification, or a response to a request the floor never sends.
            return Handled {
                reply: None,
                initialize: false,
                stall: false,
            };
        };
        let id = id.get();
        let params = msg.params.map_or("{}", RawValue::get);
        let reply = match method {
            "initialize" => {
                let asked = serde_json::from_str::<InitParams>(params)
                    .ok()
                    .and_then(|p| p.protocol_version);
                let version = asked
                    .as_deref()
                    .filter(|v| VERSIONS.contains(v))
                    .unwrap_or("2025-11-25");
                result(
                    id,
                    &format!(
                        r#"{{"protocolVersion":"{version}","capabilities":{{"tools":{{}},"resources":{{"subscribe":true}}}},"serverInfo":{{"name":"floor","version":"0.1.0"}}}}"#
                    ),
                )
            }
            "ping" | "resources/subscribe" | "resources/unsubscribe" | "logging/setLevel" => {
                result(id, "{}")
            }
            "tools/list" => result(id, &self.tools_result),
            "prompts/list" => result(id, r#"{"prompts":[]}"#),
            "resources/templates/list" => result(id, r#"{"resourceTemplates":[]}"#),
            "resources/list" => result(
                id,
                &format!(r#"{{"resources":[{{"uri":"{RESOURCE}","name":"r0"}}]}}"#),
            ),
            "tools/call" => match serde_json::from_str::<CallParams>(params) {
                Ok(call) if call.name == ECHO => {
                    let text = call.arguments.unwrap_or_default().text.unwrap_or_default();
                    let text = serde_json::to_string(&text).expect("a string serializes");
                    result(
                        id,
                        &format!(r#"{{"content":[{{"type":"text","text":{text}}}]}}"#),
                    )
                }
                Ok(call) if call.name == NOTIFY => {
                    let uri = call.arguments.unwrap_or_default().uri;
                    let uri = uri.as_deref().unwrap_or(RESOURCE);
                    let uri = serde_json::to_string(uri).expect("a string serializes");
                    let reached = push(&format!(
                        r#"{{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{{"uri":{uri}}}}}"#
                    ));
                    result(
                        id,
                        &format!(
                            r#"{{"content":[{{"type":"text","text":"{reached}"}}],"structuredContent":{{"reached":{reached}}}}}"#
                        ),
                    )
                }
                Ok(call) if call.name == STALL => {
                    return Handled {
                        reply: None,
                        initialize: false,
                        stall: true,
                    };
                }
                Ok(_) => error(id, -32602, "Unknown tool"),
                Err(_) => error(id, -32602, "Invalid params"),
            },
            _ => error(id, -32601, "Method not found"),
        };
        Handled {
            reply: Some(reply),
            initialize: method == "initialize",
            stall: false,
        }
    }

    /// Sends `frame` as an SSE event on every open GET stream.
    fn push_to_streams(&self, frame: &str) -> usize {
        let event = Bytes::from(format!("data: {frame}\n\n"));
        let mut streams = self.streams.lock().expect("streams lock");
        streams.retain(|tx| !tx.is_closed());
        streams
            .iter()
            .filter(|tx| tx.try_send(event.clone()).is_ok())
            .count()
    }
}

fn result(id: &str, result: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#)
}

fn error(id: &str, code: i32, message: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{code},"message":"{message}"}}}}"#)
}

/// `floor stdio`: one line in, its notifications and its answer out, each
/// with one `write`, until stdin closes.
pub fn run_stdio(tools: usize, words: Option<usize>) -> Res<()> {
    let floor = Floor::new(tools, false, words);
    let stdin = std::io::stdin().lock();
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    for line in stdin.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let mut pushed: Vec<String> = Vec::new();
        let handled = floor.handle(line.as_bytes(), &mut |frame| {
            pushed.push(frame.to_owned());
            1
        });
        for frame in pushed.iter().chain(handled.reply.iter()) {
            out.write_all(frame.as_bytes())?;
            out.write_all(b"\n")?;
        }
        out.flush()?;
    }
    Ok(())
}

/// `floor http`: serves `POST/GET/DELETE /mcp` on 127.0.0.1:0, prints
/// `listening ADDR` on stdout, and stops when stdin closes. `threads` 1 is
/// a current-thread runtime, more a multi-thread one with that many workers.
/// With `stall`, it lists the `stall` tool, whose calls are never answered.
pub fn run_http(tools: usize, threads: usize, stall: bool) -> Res<()> {
    let runtime = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()?
    };
    runtime.block_on(async move {
        let floor = Arc::new(Floor::new(tools, stall, None));
        serve_until_stdin_closes(|stream| {
            let floor = floor.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| serve(floor.clone(), req));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        })
        .await
    })
}

/// The accept loop of a child process of the benchmark (the HTTP floor and
/// the bare proxy): listens on 127.0.0.1:0, prints `listening ADDR` on
/// stdout, hands each connection (`TCP_NODELAY` set) to `accepted`, and
/// returns when stdin closes.
pub async fn serve_until_stdin_closes(mut accepted: impl FnMut(tokio::net::TcpStream)) -> Res<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("listening {}", listener.local_addr()?);
    std::io::stdout().flush()?;
    // The parent holds our stdin; when it goes away, so do we.
    let mut stdin_closed = tokio::task::spawn_blocking(|| {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
    });
    loop {
        tokio::select! {
            _ = &mut stdin_closed => return Ok(()),
            connection = listener.accept() => {
                let (stream, _) = connection?;
                stream.set_nodelay(true)?;
                accepted(stream);
            }
        }
    }
}

type Body = BoxBody<Bytes, Infallible>;

async fn serve(floor: Arc<Floor>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    if req.uri().path() != "/mcp" {
        return Ok(status(StatusCode::NOT_FOUND));
    }
    match *req.method() {
        Method::POST => {
            let Ok(body) = req.into_body().collect().await.map(|b| b.to_bytes()) else {
                return Ok(status(StatusCode::BAD_REQUEST));
            };
            let handled = floor.handle(&body, &mut |frame| floor.push_to_streams(frame));
            if handled.stall {
                // Held until the caller closes the connection or the floor stops.
                std::future::pending::<()>().await;
            }
            let Some(reply) = handled.reply else {
                return Ok(status(StatusCode::ACCEPTED));
            };
            let mut response =
                Response::builder().header(hyper::header::CONTENT_TYPE, "application/json");
            if handled.initialize {
                let n = floor.sessions.fetch_add(1, Ordering::Relaxed);
                response = response.header("mcp-session-id", format!("floor-{n}"));
            }
            Ok(response
                .body(Full::new(Bytes::from(reply)).boxed())
                .expect("a valid response"))
        }
        Method::GET => {
            let (tx, rx) = mpsc::channel(STREAM_QUEUE);
            floor.streams.lock().expect("streams lock").push(tx);
            Ok(Response::builder()
                .header(hyper::header::CONTENT_TYPE, "text/event-stream")
                .header(hyper::header::CACHE_CONTROL, "no-cache")
                .body(Stream(rx).boxed())
                .expect("a valid response"))
        }
        Method::DELETE => Ok(status(StatusCode::OK)),
        _ => Ok(status(StatusCode::METHOD_NOT_ALLOWED)),
    }
}

fn status(code: StatusCode) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::new()).boxed());
    *response.status_mut() = code;
    response
}

/// An SSE response body fed by [`Floor::push_to_streams`].
struct Stream(mpsc::Receiver<Bytes>);

impl hyper::body::Body for Stream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}
