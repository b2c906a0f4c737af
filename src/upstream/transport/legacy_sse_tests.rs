//! A link over the legacy HTTP+SSE transport against a minimal server of
//! that transport on 127.0.0.1:0 (hyper): what the link keeps per request.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Either, Empty, StreamBody};
use hyper::body::{Frame, Incoming};
use tokio::sync::mpsc;

use super::http::HttpLink;
use crate::config::{RemoteConfig, RemoteMode};
use crate::protocol::Method;
use crate::upstream::test_support::FakeUpstream;

type Events = mpsc::Sender<Result<Frame<Bytes>, Infallible>>;

/// Serves `GET /sse` (its `endpoint` event, then the answers) and `POST
/// /message` (202; an empty result for each request, on the stream).
async fn legacy_server() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stream: Arc<Mutex<Option<Events>>> = Arc::default();
    tokio::spawn(async move {
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            let stream = stream.clone();
            let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
                let stream = stream.clone();
                async move { Ok::<_, Infallible>(answer(request, &stream).await) }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(socket), service),
            );
        }
    });
    addr
}

type Reply = hyper::Response<
    Either<
        StreamBody<tokio_stream::wrappers::ReceiverStream<Result<Frame<Bytes>, Infallible>>>,
        Empty<Bytes>,
    >,
>;

async fn answer(request: hyper::Request<Incoming>, stream: &Mutex<Option<Events>>) -> Reply {
    if request.method() == hyper::Method::GET {
        let (tx, rx) = mpsc::channel(64);
        tx.send(Ok(Frame::data(Bytes::from_static(
            b"event: endpoint\ndata: /message\n\n",
        ))))
        .await
        .unwrap();
        *stream.lock().unwrap() = Some(tx);
        let body = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx));
        return hyper::Response::builder()
            .header("content-type", "text/event-stream")
            .body(Either::Left(body))
            .unwrap();
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
    hyper::Response::builder()
        .status(202)
        .body(Either::Right(Empty::new()))
        .unwrap()
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
