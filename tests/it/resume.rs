//! Resumable POST streams (2025-era sessions): the priming event, event ids
//! naming the stream, and `GET /mcp` with `Last-Event-ID` picking up a call
//! whose connection dropped, with a raw HTTP client and with the Python SDK
//! behind a proxy that cuts the connection.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::StreamExt as _;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::interop::run_python;
use crate::support::{McpClient, TestGateway, read_jsonl, tempdir, within};
use mcpmux::limits::RESUME_RETRY;

/// One SSE event as sent: its fields, unparsed.
#[derive(Debug, Clone, PartialEq)]
struct Ev {
    id: Option<String>,
    retry: Option<u64>,
    data: Option<String>,
}

impl Ev {
    fn json(&self) -> Value {
        let data = self.data.as_deref().unwrap_or_default();
        serde_json::from_str(data).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }

    /// `(stream, seq)` of a POST stream's event id.
    fn position(&self) -> (u64, u64) {
        let id = self
            .id
            .as_deref()
            .unwrap_or_else(|| panic!("no id: {self:?}"));
        let (stream, seq) = id
            .split_once('-')
            .unwrap_or_else(|| panic!("not <stream>-<seq>: {id}"));
        (stream.parse().unwrap(), seq.parse().unwrap())
    }
}

/// Reads an SSE body event by event, keeping ids and `retry` as strings
/// and numbers (comment-only blocks are skipped).
struct Events {
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: String,
}

impl Events {
    fn new(response: reqwest::Response) -> Events {
        assert_eq!(response.status(), StatusCode::OK);
        let content_type = response.headers()["content-type"].to_str().unwrap();
        assert!(
            content_type.starts_with("text/event-stream"),
            "{content_type}"
        );
        Events {
            body: Box::pin(response.bytes_stream()),
            buffer: String::new(),
        }
    }

    async fn next(&mut self) -> Option<Ev> {
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                if let Some(event) = parse_block(&block) {
                    return Some(event);
                }
            }
            match within("an SSE event", self.body.next()).await {
                Some(Ok(bytes)) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                Some(Err(e)) => panic!("SSE stream failed: {e}"),
                None => {
                    assert!(
                        self.buffer.trim().is_empty(),
                        "cut event: {:?}",
                        self.buffer
                    );
                    return None;
                }
            }
        }
    }

    /// Every remaining event, until the server ends the stream.
    async fn rest(mut self) -> Vec<Ev> {
        let mut all = Vec::new();
        while let Some(event) = self.next().await {
            all.push(event);
        }
        all
    }
}

fn parse_block(block: &str) -> Option<Ev> {
    let mut event = Ev {
        id: None,
        retry: None,
        data: None,
    };
    let mut any = false;
    for line in block
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with(':'))
    {
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value).to_owned();
        any = true;
        match field {
            "id" => event.id = Some(value),
            "retry" => event.retry = Some(value.parse().unwrap()),
            "data" => {
                event.data = Some(match event.data.take() {
                    Some(before) => format!("{before}\n{value}"),
                    None => value,
                });
            }
            other => panic!("unexpected SSE field {other:?} in {block:?}"),
        }
    }
    any.then_some(event)
}

fn slow_call(id: &str, steps: u64, interval_ms: u64) -> String {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {
            "name": "alpha__slow",
            "arguments": { "steps": steps, "interval_ms": interval_ms },
            "_meta": { "progressToken": "t" }
        }
    })
    .to_string()
}

/// A session to send raw requests in: URL, `Mcp-Session-Id`, version.
struct Session<'a>(&'a str, &'a str, &'a str);

impl<'a> From<&'a McpClient> for Session<'a> {
    fn from(client: &'a McpClient) -> Self {
        Session(&client.url, &client.session, &client.version)
    }
}

async fn post<'a>(to: impl Into<Session<'a>>, body: String, accept: &str) -> reqwest::Response {
    let Session(url, session, version) = to.into();
    let request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", accept)
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", version)
        .body(body);
    within("POST", request.send()).await.unwrap()
}

async fn resume(client: &McpClient, last_event_id: &str) -> reqwest::Response {
    let request = reqwest::Client::new()
        .get(&client.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &client.session)
        .header("mcp-protocol-version", &client.version)
        .header("last-event-id", last_event_id);
    within("GET", request.send()).await.unwrap()
}

fn assert_priming(event: &Ev) -> u64 {
    assert_eq!(event.data.as_deref(), Some(""), "{event:?}");
    assert_eq!(
        event.retry,
        Some(RESUME_RETRY.as_millis() as u64),
        "{event:?}"
    );
    let (stream, seq) = event.position();
    assert_eq!(seq, 0, "{event:?}");
    stream
}

fn progress_of(event: &Ev) -> u64 {
    let message = event.json();
    assert_eq!(message["method"], "notifications/progress", "{message}");
    assert_eq!(message["params"]["progressToken"], "t");
    message["params"]["progress"].as_u64().unwrap()
}

#[tokio::test]
async fn a_dropped_post_stream_is_resumed_with_last_event_id() {
    let record = tempdir().join("alpha.jsonl");
    let gw = TestGateway::with_fixtures(
        "",
        &[(
            "alpha",
            &["--record", record.to_str().unwrap(), "--test-controls"],
        )],
    )
    .await;
    let client = McpClient::connect(&gw.url).await;
    let mut notifications = client.listen(None).await;
    let streams = gw.gateway().resumable_streams(&client.session).unwrap();

    // The priming event, then progress 1; then the connection goes away.
    let answer = post(
        &client,
        slow_call("call-1", 4, 150),
        "application/json, text/event-stream",
    )
    .await;
    let mut events = Events::new(answer);
    let stream = assert_priming(&events.next().await.unwrap());
    let first = events.next().await.unwrap();
    assert_eq!(first.position(), (stream, 1));
    assert_eq!(first.retry, None);
    assert_eq!(progress_of(&first), 1);
    drop(events);

    // The call goes on without a reader: progress 2 and 3 wait in the
    // session's buffer.
    let mut last = streams.watch_stream(stream).unwrap();
    within(
        "progress while disconnected",
        last.wait_for(|seq| *seq >= 3),
    )
    .await
    .unwrap();

    // Resuming after event 1: 2 and 3 replayed, then 4 and the result, each
    // once, then the stream ends.
    let rest = Events::new(resume(&client, &format!("{stream}-1")).await)
        .rest()
        .await;
    let positions: Vec<(u64, u64)> = rest.iter().map(Ev::position).collect();
    assert_eq!(
        positions,
        [(stream, 2), (stream, 3), (stream, 4), (stream, 5)],
        "{rest:?}"
    );
    let progress: Vec<u64> = rest[..3].iter().map(progress_of).collect();
    assert_eq!(progress, [2, 3, 4]);
    let response = rest[3].json();
    assert_eq!(response["id"], "call-1", "{response}");
    assert_eq!(
        response["result"]["content"][0]["text"], "done after 4 steps",
        "the call was not cancelled by the drop: {response}"
    );

    // A late resume of the finished stream still gets the result; one after
    // the result gets an empty stream that ends.
    let late = Events::new(resume(&client, &format!("{stream}-4")).await)
        .rest()
        .await;
    assert_eq!(late.len(), 1, "{late:?}");
    assert_eq!(late[0].position(), (stream, 5));
    assert_eq!(late[0].json(), response);
    let after_end = Events::new(resume(&client, &format!("{stream}-5")).await)
        .rest()
        .await;
    assert!(after_end.is_empty(), "{after_end:?}");

    // Unknown streams and positions the stream never reached: 410 with a
    // JSON-RPC error.
    for unknown in [format!("{}-1", stream + 100), format!("{stream}-6")] {
        let refused = resume(&client, &unknown).await;
        assert_eq!(refused.status(), StatusCode::GONE, "{unknown}");
        let body: Value = serde_json::from_str(&refused.text().await.unwrap()).unwrap();
        assert_eq!(body["error"]["code"], -32600, "{body}");
    }
    // Resuming left the session's notification stream alone, and plain
    // numbers are still that stream's ids.
    client
        .call_tool("alpha__add_tools", json!({ "count": 1 }))
        .await;
    let (id, note) = notifications.next_event().await.unwrap();
    assert_eq!(note["method"], "notifications/tools/list_changed");
    client.listen(id).await;

    // The upstream never heard of a cancellation (a round trip on the same
    // pipe orders after anything sent before it).
    client
        .call_tool("alpha__echo", json!({ "message": "sync" }))
        .await;
    let log = read_jsonl(&record);
    assert!(
        !log.iter().any(|m| m["method"] == "notifications/cancelled"),
        "{log:?}"
    );

    // The finished stream is kept until the session ends, then freed.
    assert_eq!(streams.len(), 1);
    assert_eq!(client.delete().await, StatusCode::OK);
    assert!(streams.is_empty());
    let mut buffers = streams.watch_buffers();
    within("stream buffers to be freed", buffers.wait_for(|n| *n == 0))
        .await
        .unwrap();
    gw.stop().await;
}

#[tokio::test]
async fn a_single_answer_sent_as_sse_is_primed_and_resumable_too() {
    let gw = TestGateway::with_examples("", &[("alpha", &[])]).await;
    let client = McpClient::connect(&gw.url).await;
    let echo = json!({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": { "name": "alpha__echo", "arguments": { "message": "hi" } }
    });
    let events = Events::new(post(&client, echo.to_string(), "text/event-stream").await)
        .rest()
        .await;
    assert_eq!(events.len(), 2, "{events:?}");
    let stream = assert_priming(&events[0]);
    assert_eq!(events[1].position(), (stream, 1));
    assert_eq!(events[1].json()["result"]["content"][0]["text"], "hi");

    let again = Events::new(resume(&client, &format!("{stream}-0")).await)
        .rest()
        .await;
    assert_eq!(again, events[1..]);
    gw.stop().await;
}

#[tokio::test]
async fn sessions_before_2025_11_25_get_ids_and_retry_but_no_priming_event_to_resume() {
    let gw = TestGateway::with_examples("", &[("alpha", &[])]).await;
    let init = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": { "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "it", "version": "0" } }
    });
    let raw = crate::support::client::post(
        &reqwest::Client::new(),
        &gw.url,
        None,
        &init.to_string(),
        &[],
    )
    .await;
    let session = raw.headers["mcp-session-id"].to_str().unwrap().to_owned();
    let answer = post(
        Session(&gw.url, &session, "2025-06-18"),
        slow_call("old", 2, 10),
        "application/json, text/event-stream",
    )
    .await;
    let events = Events::new(answer).rest().await;
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(events.iter().all(|e| e.data.as_deref() != Some("")));
    let (stream, seq) = events[0].position();
    assert_eq!(seq, 1);
    assert_eq!(events[0].retry, Some(RESUME_RETRY.as_millis() as u64));
    assert!(events[1..].iter().all(|e| e.retry.is_none()));
    assert_eq!(events[2].position(), (stream, 3));
    assert_eq!(events[2].json()["id"], "old");
    gw.stop().await;
}

/// What the proxy saw.
#[derive(Default)]
struct Seen {
    /// The bytes forwarded on the connection it cut, up to the cut.
    cut: Option<String>,
    /// Every `Last-Event-ID` request header that went through.
    last_event_ids: Vec<String>,
}

/// Where the proxy cuts the connection carrying a POST stream.
#[derive(Debug, Clone, Copy)]
enum Cut {
    /// Right after the priming event: the client has nothing but its id.
    AfterPriming,
    /// Right after the first progress notification.
    AfterFirstProgress,
}

impl Cut {
    /// The offset just after the event to cut behind, once it has arrived.
    fn point(self, received: &[u8]) -> Option<usize> {
        let priming = format!("retry: {}\ndata:\n\n", RESUME_RETRY.as_millis());
        let (at, marker) = match self {
            Cut::AfterPriming => (find(received, priming.as_bytes())?, priming.as_bytes()),
            Cut::AfterFirstProgress => (
                find(received, b"notifications/progress")?,
                b"notifications/progress".as_slice(),
            ),
        };
        let from = at + marker.len() - 2;
        find(&received[from..], b"\n\n").map(|end| from + end + 2)
    }
}

/// A TCP proxy on 127.0.0.1:0 in front of `target` that cuts the first
/// connection where `cut` finds its event (and no other).
struct CuttingProxy {
    addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for CuttingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl CuttingProxy {
    async fn start(target: SocketAddr, cut: Cut) -> CuttingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let cut_done = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let seen = seen.clone();
            async move {
                let mut relays = tokio::task::JoinSet::new();
                while let Ok((client, _)) = listener.accept().await {
                    relays.spawn(relay(client, target, cut, seen.clone(), cut_done.clone()));
                }
            }
        });
        CuttingProxy { addr, seen, task }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The values of every complete `Last-Event-ID` header line in `request`.
fn last_event_ids(request: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(request).to_ascii_lowercase();
    text.split("\r\n")
        .filter_map(|line| line.strip_prefix("last-event-id:"))
        .map(|v| v.trim().to_owned())
        .collect()
}

async fn relay(
    client: TcpStream,
    target: SocketAddr,
    cut: Cut,
    seen: Arc<Mutex<Seen>>,
    cut_done: Arc<AtomicBool>,
) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upload = tokio::spawn({
        let seen = seen.clone();
        async move {
            let (mut buf, mut sent, mut recorded) = (vec![0; 16 * 1024], Vec::new(), 0);
            loop {
                let n = match client_read.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                sent.extend_from_slice(&buf[..n]);
                // A header line is complete once its CRLF arrived.
                let complete = &sent[..sent.iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1)];
                let ids = last_event_ids(complete);
                seen.lock()
                    .unwrap()
                    .last_event_ids
                    .extend_from_slice(&ids[recorded..]);
                recorded = ids.len();
                if server_write.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
            let _ = server_write.shutdown().await;
        }
    });
    let (mut buf, mut received) = (vec![0; 16 * 1024], Vec::new());
    loop {
        let n = match server_read.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let start = received.len();
        received.extend_from_slice(&buf[..n]);
        if !cut_done.load(Ordering::SeqCst)
            && let Some(end) = cut.point(&received)
            && !cut_done.swap(true, Ordering::SeqCst)
        {
            let _ = client_write.write_all(&buf[..end - start]).await;
            let _ = client_write.flush().await;
            seen.lock().unwrap().cut = Some(String::from_utf8_lossy(&received[..end]).into_owned());
            // Both connections close: the client's mid-body, the gateway's too.
            upload.abort();
            return;
        }
        if client_write.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = client_write.shutdown().await;
}

/// The Python SDK client calls a slow tool through a proxy that cuts the
/// answer's connection at `cut`; it must resume with GET + Last-Event-ID
/// by itself, from `expected_seq`, and print the result.
async fn python_resumes(cut: Cut, expected_seq: u64) {
    let gw = TestGateway::with_examples("", &[("alpha", &[])]).await;
    let proxy = CuttingProxy::start(gw.gateway().addr(), cut).await;
    let url = format!("http://{}/mcp", proxy.addr);
    let out = run_python(
        "resume_client.py",
        &[&url, "alpha__slow", r#"{"steps": 6, "interval_ms": 300}"#],
    )
    .await;

    assert_eq!(
        out["call"]["content"][0]["text"], "done after 6 steps",
        "{out}"
    );
    let progress: Vec<f64> = out["progress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_f64().unwrap())
        .collect();
    assert_eq!(progress, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "each once: {out}");

    let (forwarded, last_event_ids) = {
        let seen = proxy.seen.lock().unwrap();
        (seen.cut.clone(), seen.last_event_ids.clone())
    };
    let forwarded = forwarded.expect("the proxy cut the call's answer");
    // The client had the priming event (and maybe more) when the connection
    // went away...
    let priming = format!("retry: {}\ndata:\n\n", RESUME_RETRY.as_millis());
    let at = forwarded
        .find(&priming)
        .unwrap_or_else(|| panic!("no priming event before the cut: {forwarded}"));
    let stream = forwarded[..at]
        .rsplit("id: ")
        .next()
        .and_then(|id| id.trim().strip_suffix("-0"))
        .unwrap_or_else(|| panic!("no priming id: {forwarded}"));
    // ...and came back once with GET + Last-Event-ID: the last event it had.
    assert_eq!(
        last_event_ids,
        [format!("{stream}-{expected_seq}")],
        "{cut:?}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn the_python_sdk_resumes_a_stream_cut_after_the_priming_event() {
    python_resumes(Cut::AfterPriming, 0).await;
}

#[tokio::test]
async fn the_python_sdk_resumes_a_stream_cut_after_a_progress_event() {
    python_resumes(Cut::AfterFirstProgress, 1).await;
}
