//! The HTTP/1.1 connections of one plain `http://` upstream, kept open
//! between POSTs.
//!
//! A POST takes an idle connection (or opens one), sends on it from the
//! caller's task, and hands the connection back when the answer's body has
//! been read to its end. Nothing is spawned per request: the only task is
//! hyper's own per connection, which owns the socket. A connection whose
//! answer was dropped unread is closed rather than reused; one idle longer
//! than the idle timeout, or closed by the server, is dropped when the
//! pool is next used.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::http;
use hyper_util::rt::TokioIo;

/// Idle connections kept per upstream; more are closed when handed back.
/// It matches the POSTs one link may have in flight.
const MAX_IDLE: usize = 64;

/// Why a POST through the pool got no answer.
#[derive(Debug, thiserror::Error)]
pub(super) enum PoolError {
    /// No connection could be opened: nothing was sent.
    #[error("could not connect to {authority}: {detail}")]
    Connect { authority: String, detail: String },
    /// The exchange failed on an open connection.
    #[error("{0}")]
    Exchange(#[source] hyper::Error),
}

impl PoolError {
    /// Whether the server could not be reached at all.
    pub(super) fn is_connect(&self) -> bool {
        matches!(self, PoolError::Connect { .. })
    }
}

/// One upstream's idle connections and how to open more.
pub(super) struct Pool {
    shared: Arc<Shared>,
}

struct Shared {
    /// `host:port` as the URL names it, for `Host` and for connecting.
    authority: http::uri::Authority,
    /// The `Host` header every request carries, built once.
    host: http::HeaderValue,
    port: u16,
    connect_timeout: Duration,
    idle_timeout: Duration,
    /// Idle connections, the most recently used last.
    idle: Mutex<Vec<Idle>>,
}

struct Idle {
    sender: SendRequest<Full<Bytes>>,
    since: Instant,
}

impl Pool {
    /// A pool for `authority` (which must have a host); none when the URL
    /// has no usable authority.
    pub(super) fn new(
        uri: &http::Uri,
        connect_timeout: Duration,
        idle_timeout: Duration,
    ) -> Option<Pool> {
        let authority = uri.authority()?.clone();
        let port = authority.port_u16().unwrap_or(80);
        let host = http::HeaderValue::from_str(authority.as_str())
            .unwrap_or_else(|_| http::HeaderValue::from_static("localhost"));
        Some(Pool {
            shared: Arc::new(Shared {
                authority,
                host,
                port,
                connect_timeout,
                idle_timeout,
                idle: Mutex::new(Vec::new()),
            }),
        })
    }

    /// Sends `request` (origin-form URI, `Host` set here) and returns the
    /// answer, whose body hands the connection back when read to its end.
    /// A reused connection the server had closed before it took the
    /// request is replaced by a new one, once.
    pub(super) async fn send(
        &self,
        mut request: http::Request<Full<Bytes>>,
    ) -> Result<http::Response<PooledBody>, PoolError> {
        request
            .headers_mut()
            .insert(http::header::HOST, self.shared.host.clone());
        let mut reused = self.checkout();
        loop {
            let was_reused = reused.is_some();
            let mut sender = match reused.take() {
                Some(sender) => sender,
                // Boxed: opening a connection is rare, and its future
                // would otherwise size every call's.
                None => Box::pin(self.connect()).await?,
            };
            if let Err(e) = sender.ready().await {
                match was_reused {
                    // Closed while idle: open another.
                    true => continue,
                    false => return Err(PoolError::Exchange(e)),
                }
            }
            match sender.try_send_request(request).await {
                Ok(answer) => {
                    let pool = Arc::downgrade(&self.shared);
                    return Ok(answer.map(|body| PooledBody {
                        inner: body,
                        home: Some((sender, pool)),
                    }));
                }
                Err(mut failed) => match failed.take_message() {
                    // Never written: safe to send on a new connection.
                    Some(back) if was_reused => request = back,
                    _ => return Err(PoolError::Exchange(failed.into_error())),
                },
            }
        }
    }

    /// The most recently used idle connection that is still open.
    fn checkout(&self) -> Option<SendRequest<Full<Bytes>>> {
        let mut idle = self.shared.idle.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        while let Some(entry) = idle.pop() {
            if entry.sender.is_closed() || now - entry.since > self.shared.idle_timeout {
                continue;
            }
            return Some(entry.sender);
        }
        None
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, PoolError> {
        let shared = &self.shared;
        let failed = |detail: String| PoolError::Connect {
            authority: shared.authority.to_string(),
            detail,
        };
        let host = shared.authority.host().trim_start_matches('[');
        let host = host.trim_end_matches(']');
        let opened = tokio::time::timeout(shared.connect_timeout, async {
            let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host, shared.port))
                .await?
                .collect();
            let mut last = std::io::Error::other("no address");
            for address in addresses {
                match tokio::net::TcpStream::connect(address).await {
                    Ok(stream) => return Ok(stream),
                    Err(e) => last = e,
                }
            }
            Err(last)
        })
        .await;
        let stream = match opened {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Err(failed(e.to_string())),
            Err(_) => return Err(failed("timed out".into())),
        };
        let _ = stream.set_nodelay(true);
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| failed(e.to_string()))?;
        // hyper's task for the socket; it ends when the sender is dropped
        // or the server closes.
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "upstream HTTP connection ended");
            }
        });
        Ok(sender)
    }
}

impl Shared {
    fn give_back(&self, sender: SendRequest<Full<Bytes>>) {
        if sender.is_closed() {
            return;
        }
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        // Connections idle too long, or closed by the server, go now (at
        // most `MAX_IDLE` to look at), so a quiet pool does not hold them.
        idle.retain(|entry| !entry.sender.is_closed() && now - entry.since <= self.idle_timeout);
        if idle.len() < MAX_IDLE {
            idle.push(Idle { sender, since: now });
        }
    }
}

/// An answer's body; at its end the connection goes back to the pool.
pub(super) struct PooledBody {
    inner: Incoming,
    home: Option<(SendRequest<Full<Bytes>>, Weak<Shared>)>,
}

impl PooledBody {
    fn release(&mut self) {
        if let Some((sender, pool)) = self.home.take()
            && let Some(pool) = pool.upgrade()
        {
            pool.give_back(sender);
        }
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => self.release(),
            Poll::Ready(Some(Ok(_))) if self.inner.is_end_stream() => self.release(),
            // A broken body: the connection is not reused.
            Poll::Ready(Some(Err(_))) => self.home = None,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http_body_util::BodyExt as _;

    use super::*;

    /// An HTTP/1.1 server on port 0 that echoes the body; it counts the
    /// connections it accepted and, with `close`, ends each after one answer.
    async fn server(close: bool) -> (http::Uri, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                let service =
                    hyper::service::service_fn(|request: http::Request<Incoming>| async move {
                        let body = request.into_body().collect().await?.to_bytes();
                        Ok::<_, hyper::Error>(http::Response::new(Full::new(body)))
                    });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .keep_alive(!close)
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        let uri = format!("http://{addr}/mcp").parse().expect("uri");
        (uri, accepted)
    }

    fn post(text: &'static str) -> http::Request<Full<Bytes>> {
        let mut request = http::Request::new(Full::new(Bytes::from_static(text.as_bytes())));
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = "/mcp".parse().expect("path");
        request
    }

    async fn read(answer: http::Response<PooledBody>) -> String {
        let body = answer.into_body().collect().await.expect("body").to_bytes();
        String::from_utf8(body.to_vec()).expect("utf-8")
    }

    fn pool(uri: &http::Uri) -> Pool {
        Pool::new(uri, Duration::from_secs(5), Duration::from_secs(60)).expect("authority")
    }

    #[tokio::test]
    async fn a_connection_is_reused_once_its_answer_was_read() {
        let (uri, accepted) = server(false).await;
        let pool = pool(&uri);
        for text in ["one", "two", "three"] {
            assert_eq!(
                read(pool.send(post(text)).await.expect("answer")).await,
                text
            );
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_is_replaced() {
        let (uri, accepted) = server(true).await;
        let pool = pool(&uri);
        for text in ["one", "two"] {
            assert_eq!(
                read(pool.send(post(text)).await.expect("answer")).await,
                text
            );
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn an_answer_dropped_unread_does_not_give_its_connection_back() {
        let (uri, accepted) = server(false).await;
        let pool = pool(&uri);
        drop(pool.send(post("dropped")).await.expect("answer"));
        assert_eq!(
            read(pool.send(post("next")).await.expect("answer")).await,
            "next"
        );
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_connection_idle_past_the_timeout_is_not_reused() {
        let (uri, accepted) = server(false).await;
        let pool = Pool::new(&uri, Duration::from_secs(5), Duration::ZERO).expect("authority");
        for text in ["one", "two"] {
            assert_eq!(
                read(pool.send(post(text)).await.expect("answer")).await,
                text
            );
        }
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            2,
            "a new connection each time"
        );
        assert!(
            pool.shared.idle.lock().unwrap().len() <= 1,
            "the expired one was let go"
        );
    }

    #[tokio::test]
    async fn nothing_listening_is_a_connect_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let uri: http::Uri = format!("http://{}/mcp", listener.local_addr().expect("addr"))
            .parse()
            .expect("uri");
        drop(listener);
        match pool(&uri).send(post("x")).await {
            Err(failed) => assert!(failed.is_connect(), "{failed}"),
            Ok(_) => panic!("nothing listens there"),
        }
    }
}
