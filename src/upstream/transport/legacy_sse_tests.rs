//! A link over the legacy HTTP+SSE transport against a minimal server of
//! that transport on 127.0.0.1:0 (hyper): what the link keeps per request.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::{Frame, Incoming};

use super::http::HttpLink;
use super::test_server::{self, Chunks, Reply};
use crate::config::{RemoteConfig, RemoteMode};
use crate::protocol::Method;
use crate::upstream::test_support::FakeUpstream;

/// Serves `GET /sse` (its `endpoint` event, then the answers) and `POST
/// /message` (202; an empty result for each request, on the stream).
async fn legacy_server() -> std::net::SocketAddr {
    let stream: Arc<Mutex<Option<Chunks>>> = Arc::default();
    test_server::serve(move |request| {
        let stream = stream.clone();
        async move { answer(request, &stream).await }
    })
    .await
}

async fn answer(request: hyper::Request<Incoming>, stream: &Mutex<Option<Chunks>>) -> Reply {
    if request.method() == hyper::Method::GET {
        let (tx, reply) = test_server::event_stream();
        tx.send(Ok(Frame::data(Bytes::from_static(
            b"event: endpoint\ndata: /message\n\n",
        ))))
        .await
        .unwrap();
        *stream.lock().unwrap() = Some(tx);
        return reply;
    }
    let body = request.into_body().collect().await.unwrap().to_bytes();
    let message: serde_json::Value = serde_json::from_slice(&body).unwrap();
    if let Some(id) = message.get("id") {
        let result = match message["method"].as_str() {
            Some("initialize") => serde_json::json!({
                "protocolVersion": "2024-11-05", "capabilities": {},
                "serverInfo": { "name": "legacy", "version": "1" } }),
            _ => serde_json::json!({}),
        };
        let event = format!(
            "data: {}\n\n",
            serde_json::json!({ "jsonrpc": "2.0", "id": id, "result": result })
        );
        let tx = stream.lock().unwrap().clone().expect("the stream is open");
        tx.send(Ok(Frame::data(Bytes::from(event)))).await.unwrap();
    }
    test_server::status(202)
}

/// Found by the soak (docs/soak.md): each request's abort handle was kept
/// for the life of a legacy link, so memory grew with every request for as
/// long as such an upstream stayed connected.
#[tokio::test]
async fn a_legacy_link_keeps_nothing_of_the_requests_it_has_sent() {
    let addr = legacy_server().await;
    let FakeUpstream { conn, sent, .. } = FakeUpstream::new("legacy");
    let cfg = RemoteConfig {
        url: format!("http://{addr}/sse"),
        headers: BTreeMap::new(),
        mode: RemoteMode::Sse,
        auth: None,
    };
    let tasks = tokio_util::task::TaskTracker::new();
    let mut link =
        HttpLink::start("legacy".into(), &cfg, conn.clone(), sent, &tasks, None).unwrap();
    let wait = Duration::from_secs(30);
    let params = r#"{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"t","version":"1"}}"#;
    conn.request(Method::Initialize, Some(params), wait)
        .await
        .unwrap();
    for _ in 0..20 {
        let answer = conn.request(Method::Ping, None, wait).await.unwrap();
        assert_eq!(answer.get(), "{}");
    }
    assert_eq!(link.posts_kept(), 0, "abort handles kept after their POSTs");
    link.stop().await;
}
