//! A minimal HTTP/1.1 server on 127.0.0.1:0 (hyper) for the remote
//! transports' tests: every request goes to one handler, which answers
//! with JSON, a bare status, or an event stream the test writes into.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Empty, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use tokio::sync::mpsc;

/// Where a test writes an event stream's bytes; dropping it ends the stream.
pub(super) type Chunks = mpsc::Sender<Result<Frame<Bytes>, Infallible>>;

/// What a handler answers.
pub(super) type Reply = hyper::Response<BoxBody<Bytes, Infallible>>;

/// Serves every connection to the returned address with `handler`.
pub(super) async fn serve<H, F>(handler: H) -> SocketAddr
where
    H: Fn(hyper::Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Reply> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            let handler = handler.clone();
            let service = hyper::service::service_fn(move |request| {
                let answer = handler(request);
                async move { Ok::<_, Infallible>(answer.await) }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(socket), service),
            );
        }
    });
    addr
}

/// A 200 `text/event-stream` answer, and where to write its events.
pub(super) fn event_stream() -> (Chunks, Reply) {
    let (tx, rx) = mpsc::channel(64);
    let body = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    let reply = hyper::Response::builder()
        .header("content-type", "text/event-stream")
        .body(body.boxed())
        .unwrap();
    (tx, reply)
}

/// A 200 `application/json` answer with `headers`.
pub(super) fn json(body: String, headers: &[(&str, &str)]) -> Reply {
    let mut reply = hyper::Response::builder().header("content-type", "application/json");
    for (name, value) in headers {
        reply = reply.header(*name, *value);
    }
    reply.body(Full::new(Bytes::from(body)).boxed()).unwrap()
}

/// An empty answer with `status`.
pub(super) fn status(status: u16) -> Reply {
    hyper::Response::builder()
        .status(status)
        .body(Empty::new().boxed())
        .unwrap()
}
