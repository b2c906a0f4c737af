//! A link over Streamable HTTP against a minimal server on 127.0.0.1:0
//! (hyper) that adds tools when no stream is open to say so: one while it
//! handles `notifications/initialized` (as server-everything does), one
//! while it answers the first GET stream, one while it answers the next.
//! Found by the soak (docs/soak.md): one replica's `web` sometimes came up
//! without its conditional tools until it restarted.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use serde_json::{Value, json};

use super::http::HttpLink;
use super::test_server::{self, Chunks, Reply};
use crate::config::{RemoteConfig, RemoteMode};
use crate::upstream::ListsChanged;
use crate::upstream::handshake;
use crate::upstream::test_support::FakeUpstream;

/// How long the server takes over `notifications/initialized` and the
/// first GET: long enough that a list request sent without waiting for
/// them arrives first.
const SLOW: Duration = Duration::from_millis(300);

/// The server's tools, and the GET streams it holds open.
#[derive(Default)]
struct Server {
    tools: Mutex<Vec<&'static str>>,
    streams: Mutex<Vec<Chunks>>,
    gets: AtomicUsize,
}

async fn serve() -> (std::net::SocketAddr, Arc<Server>) {
    let server = Arc::new(Server {
        tools: Mutex::new(vec!["early"]),
        ..Server::default()
    });
    let shared = server.clone();
    let addr = test_server::serve(move |request| {
        let server = shared.clone();
        async move { server.answer(request).await }
    })
    .await;
    (addr, server)
}

impl Server {
    async fn answer(&self, request: hyper::Request<Incoming>) -> Reply {
        if request.method() == hyper::Method::GET {
            // Tools added while no stream was open to carry their
            // `list_changed` (the SDKs drop such a notification).
            let first = self.gets.fetch_add(1, Ordering::SeqCst) == 0;
            if first {
                tokio::time::sleep(SLOW).await;
            }
            let added = if first { "later" } else { "latest" };
            self.tools.lock().unwrap().push(added);
            let (tx, reply) = test_server::event_stream();
            self.streams.lock().unwrap().push(tx);
            return reply;
        }
        let body = request.into_body().collect().await.unwrap().to_bytes();
        let message: Value = serde_json::from_slice(&body).unwrap();
        let result = match message["method"].as_str() {
            Some("initialize") => json!({
                "protocolVersion": "2025-11-25",
                "capabilities": { "tools": { "listChanged": true } },
                "serverInfo": { "name": "late-tools", "version": "1" } }),
            Some("notifications/initialized") => {
                tokio::time::sleep(SLOW).await;
                self.tools.lock().unwrap().push("late");
                return test_server::status(202);
            }
            Some("tools/list") => {
                let tools: Vec<Value> = self
                    .tools
                    .lock()
                    .unwrap()
                    .iter()
                    .map(|name| json!({ "name": name, "inputSchema": { "type": "object" } }))
                    .collect();
                json!({ "tools": tools })
            }
            _ => json!({}),
        };
        let answer = json!({ "jsonrpc": "2.0", "id": message["id"], "result": result });
        test_server::json(answer.to_string(), &[("mcp-session-id", "s-1")])
    }
}

/// A Streamable HTTP link for `conn` to the server at `addr`.
fn start_link(
    name: &str,
    addr: std::net::SocketAddr,
    conn: &Arc<crate::upstream::connection::Connection>,
    sent: tokio::sync::mpsc::Receiver<crate::upstream::message::Outgoing>,
) -> HttpLink {
    let cfg = RemoteConfig {
        url: format!("http://{addr}/mcp"),
        headers: BTreeMap::new(),
        mode: RemoteMode::StreamableHttp,
        auth: None,
    };
    let tasks = tokio_util::task::TaskTracker::new();
    HttpLink::start(name.into(), &cfg, conn.clone(), sent, &tasks, None).unwrap()
}

fn names(lists: &crate::catalog::UpstreamLists) -> Vec<&str> {
    lists
        .tools
        .iter()
        .filter_map(|tool| tool.get("name")?.as_str())
        .collect()
}

#[tokio::test]
async fn tools_added_while_no_stream_was_open_are_listed() {
    let (addr, server) = serve().await;
    let FakeUpstream {
        conn,
        sent,
        mut list_changes,
        ..
    } = FakeUpstream::new("web");
    let mut link = start_link("web", addr, &conn, sent);
    let wait = Duration::from_secs(30);

    let hello = handshake::initialize(&conn, wait).await.unwrap();
    let lists = handshake::fetch_lists(&conn, &hello, wait).await.unwrap();
    assert_eq!(
        names(&lists),
        ["early", "late", "later"],
        "the lists overtook notifications/initialized or the first stream"
    );
    assert!(
        list_changes.try_recv().is_err(),
        "the lists followed the first stream: nothing to fetch again"
    );

    // The stream ends; the link opens another, and fetches every list again.
    server.streams.lock().unwrap().clear();
    let told = tokio::time::timeout(wait, list_changes.recv()).await;
    assert_eq!(
        told.ok().flatten(),
        Some(ListsChanged::ALL),
        "the reopened stream did not make the lists fetched again"
    );
    let lists = handshake::fetch_lists(&conn, &hello, wait).await.unwrap();
    assert_eq!(names(&lists), ["early", "late", "later", "latest"]);
    link.stop().await;
}

/// A modern (2026-07-28) server: `server/discover`, then calls answered
/// with a result; no session.
async fn serve_modern() -> std::net::SocketAddr {
    test_server::serve(|request: hyper::Request<Incoming>| async move {
        let body = request.into_body().collect().await.unwrap().to_bytes();
        let message: Value = serde_json::from_slice(&body).unwrap();
        let result = match message["method"].as_str() {
            Some("server/discover") => json!({
                "supportedVersions": [crate::protocol::MODERN_VERSION],
                "capabilities": { "tools": {} },
                "serverInfo": { "name": "modern", "version": "1" } }),
            _ => json!({ "content": [{ "type": "text", "text": "protocolVersion" }] }),
        };
        let answer = json!({ "jsonrpc": "2.0", "id": message["id"], "result": result });
        test_server::json(answer.to_string(), &[])
    })
    .await
}

/// A modern upstream's answer is read once, by the connection: the link
/// looks for a negotiated version only in a session-based link's answers
/// (it read every modern answer in full before, looking for one).
#[tokio::test]
async fn a_modern_answer_is_read_once() {
    let addr = serve_modern().await;
    let FakeUpstream { conn, sent, .. } = FakeUpstream::new("modern");
    let mut link = start_link("modern", addr, &conn, sent);
    let wait = Duration::from_secs(30);
    assert!(handshake::discover(&conn, wait).await.is_some());
    conn.set_modern(handshake::modern_meta());
    let before = crate::protocol::envelopes_parsed();
    let answer = conn
        .request(
            crate::protocol::Method::ToolsCall,
            Some(r#"{"name":"echo","arguments":{}}"#),
            wait,
        )
        .await
        .unwrap();
    assert!(answer.get().contains("protocolVersion"));
    assert_eq!(crate::protocol::envelopes_parsed() - before, 1);
    link.stop().await;
}
