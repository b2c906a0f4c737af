//! The HTTP/1.1 server loop: every connection the listener admits is
//! served by hyper on a task of its own, with the axum app as its service.
//!
//! Each request carries its [`Peer`] (the handlers' connect info) and is
//! marked in progress on its connection from its headers until its
//! response body is dropped. A connection's task answers its own wake-ups
//! in place ([`crate::inline_wake`]): hyper hands a request's body to the
//! handler through a channel whose wake lands on the very task that is
//! running, and tokio would otherwise requeue that task and wake a second
//! worker thread for nothing, once per request. That wake still polls
//! the connection once more, and hyper polls the request's handler each
//! time; the handler is polled only after one of its own wakers fired
//! ([`crate::inline_wake::own_wakes`]), so the second poll costs hyper's
//! bookkeeping alone, not a walk down the handler's chain of futures.
//!
//! `POST /mcp`, the call path, may skip the axum router ([`DirectPost`]):
//! the connection's service hands it to [`super::http::post_root`], which
//! runs the same prologue and handler, so a call costs no route lookup, no
//! boxed service clone and no extension map. With tracing on, it takes the
//! router like every other request, whose layer gives it its trace context.
//!
//! Draining, once `stop` is cancelled: no more connections are taken,
//! every idle connection reads the end of its stream and closes, a busy
//! one answers its request with `Connection: close` and then closes, and
//! [`serve`] returns when every connection has.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::Service as _;

use super::AppState;
use super::listener::{GuardedListener, Peer};

/// The state `POST /mcp` is served with when it skips the router; none:
/// every request takes the router.
pub(crate) type DirectPost = Option<Arc<AppState>>;

/// Serves `app` on the connections `listener` admits until `stop`, then
/// drains them.
pub(crate) async fn serve(
    mut listener: GuardedListener,
    app: axum::Router,
    direct: DirectPost,
    stop: CancellationToken,
) {
    let connections = TaskTracker::new();
    loop {
        let admitted = tokio::select! {
            admitted = listener.accept() => admitted,
            () = stop.cancelled() => None,
        };
        let Some((io, peer)) = admitted else { break };
        connections.spawn(crate::inline_wake::inline_wakes(serve_connection(
            io,
            peer,
            app.clone(),
            direct.clone(),
        )));
    }
    listener.drain();
    connections.close();
    connections.wait().await;
}

/// A request's answer on its way: from `POST /mcp` served directly, or
/// from the router. The router's future is kept in place (it is a few
/// hundred bytes, and boxing it would cost every routed request an
/// allocation); the direct one is boxed already.
#[allow(clippy::large_enum_variant)]
enum Answer {
    Direct(Pin<Box<dyn Future<Output = Response> + Send>>),
    Routed(axum::routing::future::RouteFuture<Infallible>),
}

async fn serve_connection(
    io: super::listener::GuardedIo,
    peer: Peer,
    app: axum::Router,
    direct: DirectPost,
) {
    let client = peer.addr;
    let own_wakes = crate::inline_wake::WakeFilter::new();
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let in_progress = peer.begin_request();
        let request = request.map(Body::new);
        let answer = match &direct {
            Some(state)
                if request.method() == hyper::Method::POST && request.uri().path() == "/mcp" =>
            {
                let (state, peer) = (state.clone(), peer.clone());
                let post = crate::in_place::boxed(|| super::http::post_root(state, peer, request));
                Answer::Direct(post)
            }
            _ => {
                let mut request = request;
                request.extensions_mut().insert(ConnectInfo(peer.clone()));
                Answer::Routed(app.clone().call(request))
            }
        };
        let peer = peer.clone();
        let answered = async move {
            let mut response = match answer {
                Answer::Direct(post) => post.await,
                Answer::Routed(routed) => {
                    let Ok(response) = routed.await;
                    response
                }
            };
            if peer.draining() {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Ok::<_, Infallible>(super::listener::tracked(response, in_progress))
        };
        crate::inline_wake::own_wakes(answered, &own_wakes)
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    if let Err(e) = connection.await {
        tracing::trace!(%client, error = %e, "connection ended");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use axum::routing::get;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::Notify;

    use super::*;
    use crate::config::HttpConfig;
    use crate::downstream::listener::ClientPeer;

    /// A guard on the tests' reads: a broken drain fails instead of hanging.
    const LIMIT: Duration = Duration::from_secs(10);

    fn http() -> HttpConfig {
        HttpConfig {
            max_body_bytes: 1 << 20,
            allowed_origins: Vec::new(),
            sse_keepalive: Duration::from_secs(15),
            allowed_hosts: Vec::new(),
            header_read_timeout: Duration::from_secs(30),
            body_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(300),
            max_connections: 16,
        }
    }

    /// Sends `GET path` on `stream` (keep-alive) and reads until `until`
    /// has arrived; what was read.
    async fn ask(stream: &mut TcpStream, path: &str, until: &str) -> String {
        let request = format!("GET {path} HTTP/1.1\r\nhost: test\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut read = Vec::new();
        let mut chunk = [0u8; 1024];
        while !String::from_utf8_lossy(&read).contains(until) {
            let n = tokio::time::timeout(LIMIT, stream.read(&mut chunk))
                .await
                .expect("an answer in time")
                .unwrap();
            assert!(
                n > 0,
                "closed before {until:?}: {:?}",
                String::from_utf8_lossy(&read)
            );
            read.extend_from_slice(&chunk[..n]);
        }
        String::from_utf8(read).unwrap()
    }

    async fn rest(stream: &mut TcpStream) -> String {
        let mut rest = Vec::new();
        tokio::time::timeout(LIMIT, stream.read_to_end(&mut rest))
            .await
            .expect("the connection closes")
            .unwrap();
        String::from_utf8(rest).unwrap()
    }

    #[tokio::test]
    async fn draining_closes_idle_connections_at_once_and_busy_ones_after_their_answer() {
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let stop = CancellationToken::new();
        let tracker = TaskTracker::new();
        let (listener, counts) =
            super::super::listener::guard(tcp, &http(), stop.clone(), &tracker).unwrap();
        let (entered, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let (entered_in, release_in) = (entered.clone(), release.clone());
        let app = axum::Router::new()
            .route(
                "/peer",
                get(|peer: ClientPeer| async move {
                    super::super::listener::client_ip(&peer)
                        .map(|ip| ip.to_string())
                        .unwrap_or_default()
                        + "|"
                }),
            )
            .route(
                "/slow",
                get(move || async move {
                    entered_in.notify_one();
                    release_in.notified().await;
                    "done"
                }),
            );
        let server = tokio::spawn(serve(listener, app, None, stop.clone()));

        // The handlers see who called as connect info.
        let mut idle = TcpStream::connect(addr).await.unwrap();
        let answer = ask(&mut idle, "/peer", "127.0.0.1|").await;
        assert!(
            !answer.to_ascii_lowercase().contains("connection: close"),
            "{answer}"
        );
        let mut busy = TcpStream::connect(addr).await.unwrap();
        busy.write_all(b"GET /slow HTTP/1.1\r\nhost: test\r\n\r\n")
            .await
            .unwrap();
        entered.notified().await;

        stop.cancel();
        // The idle keep-alive connection is closed without a word.
        assert_eq!(rest(&mut idle).await, "");
        assert!(!server.is_finished(), "a request is still in progress");
        // The busy one gets its answer, told the connection closes, then closed.
        release.notify_one();
        let answer = rest(&mut busy).await;
        assert!(
            answer.to_ascii_lowercase().contains("connection: close"),
            "{answer}"
        );
        assert!(answer.ends_with("done"), "{answer}");
        tokio::time::timeout(LIMIT, server)
            .await
            .expect("serve returns")
            .unwrap();
        assert_eq!(counts.snapshot().open, 0);
    }

    /// The idle deadline counts from the end of the last request, though
    /// the timer was set before that request (it is re-armed when it fires
    /// early, not moved after every request).
    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_closes_its_idle_timeout_after_its_last_request() {
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let mut config = http();
        config.idle_timeout = Duration::from_secs(10);
        let stop = CancellationToken::new();
        let tracker = TaskTracker::new();
        let (mut listener, counts) =
            super::super::listener::guard(tcp, &config, stop.clone(), &tracker).unwrap();
        let _client = TcpStream::connect(addr).await.unwrap();
        let (mut io, peer) = listener.accept().await.unwrap();
        let mut buf = [0u8; 16];
        // Idle from the start: the read waits, its timer set for 10 s on.
        let waited = tokio::time::timeout(Duration::from_secs(6), io.read(&mut buf)).await;
        assert!(waited.is_err(), "nothing was sent: {waited:?}");
        // A request comes and goes 6 s in: idle again from there.
        drop(peer.begin_request());
        let quiet = tokio::time::Instant::now();
        let ended = io.read(&mut buf).await.unwrap_err();
        assert_eq!(ended.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(quiet.elapsed(), Duration::from_secs(10));
        assert_eq!(counts.snapshot().closed[1], ("idle_timeout", 1));
        stop.cancel();
    }
}
