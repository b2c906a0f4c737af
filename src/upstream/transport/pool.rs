//! The HTTP/1.1 connections of one plain `http://` upstream, kept open
//! between POSTs.
//!
//! A POST takes an idle connection (or opens one), runs its exchange
//! (`http1`) from the caller's task, and hands the connection back when
//! the answer's body has been read to its end, if its framing allows.
//! Nothing is spawned, per request or per connection. A connection whose
//! answer was dropped unread or failed is closed rather than reused; one
//! idle longer than the idle timeout, or closed by the server while idle,
//! is let go when the pool is next used.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::http;

use super::http1::{Connection, Framing, Post, WireError};

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
    Exchange(#[source] WireError),
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
    idle: Mutex<VecDeque<Idle>>,
}

struct Idle {
    connection: Connection,
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
                idle: Mutex::new(VecDeque::new()),
            }),
        })
    }

    /// Sends `post` (`Host` is the pool's) and returns the answer, whose
    /// body hands the connection back when read to its end. A reused
    /// connection that failed before one byte of the request was written
    /// is replaced by a new one, once.
    pub(super) async fn send(
        &self,
        post: Post<'_>,
    ) -> Result<http::Response<PooledBody>, PoolError> {
        let mut reused = self.checkout();
        loop {
            let was_reused = reused.is_some();
            let mut connection = match reused.take() {
                Some(connection) => connection,
                // Boxed and type-erased: opening a connection is rare
                // (see `in_place::rare`).
                None => crate::in_place::rare(|| self.connect()).await?,
            };
            match connection.write_request(&post, &self.shared.host).await {
                Ok(()) => {}
                Err(failed) if failed.untouched && was_reused => continue,
                Err(failed) => return Err(PoolError::Exchange(failed.error)),
            }
            let head = connection.read_head().await.map_err(PoolError::Exchange)?;
            let mut body = PooledBody {
                connection: Some(connection),
                framing: head.framing,
                reusable: head.reusable,
                home: Arc::downgrade(&self.shared),
            };
            if body.framing.is_end() {
                // No body to read: the connection is free now.
                body.release();
            }
            let mut answer = http::Response::new(body);
            *answer.status_mut() = head.status;
            *answer.version_mut() = head.version;
            *answer.headers_mut() = head.headers;
            return Ok(answer);
        }
    }

    /// The most recently used idle connection that is still open.
    fn checkout(&self) -> Option<Connection> {
        let now = Instant::now();
        loop {
            let entry = self
                .shared
                .idle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop_back()?;
            let Idle {
                mut connection,
                since,
            } = entry;
            if now - since <= self.shared.idle_timeout && connection.is_usable() {
                return Some(connection);
            }
        }
    }

    async fn connect(&self) -> Result<Connection, PoolError> {
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
        Ok(Connection::new(stream))
    }
}

impl Shared {
    fn give_back(&self, connection: Connection) {
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        // Connections idle too long go now (the oldest are first), so a
        // quiet pool does not hold them; one the server closed is found
        // out when next taken.
        while idle
            .front()
            .is_some_and(|entry| now - entry.since > self.idle_timeout)
        {
            idle.pop_front();
        }
        if idle.len() < MAX_IDLE {
            idle.push_back(Idle {
                connection,
                since: now,
            });
        }
    }
}

/// An answer's body; at its end the connection goes back to the pool.
pub(super) struct PooledBody {
    /// None once the body has ended (or failed) and the connection was
    /// handed back or closed.
    connection: Option<Connection>,
    framing: Framing,
    reusable: bool,
    home: Weak<Shared>,
}

impl PooledBody {
    /// The connection goes back to the pool if it may carry another
    /// request, and is closed otherwise.
    fn release(&mut self) {
        if let Some(connection) = self.connection.take()
            && self.reusable
            && self.framing.is_end()
            && let Some(pool) = self.home.upgrade()
        {
            pool.give_back(connection);
        }
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = WireError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, WireError>>> {
        let this = &mut *self;
        let Some(connection) = this.connection.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = connection.poll_body(&mut this.framing, cx);
        match polled {
            Poll::Ready(Some(Ok(data))) => {
                if this.framing.is_end() {
                    this.release();
                }
                Poll::Ready(Some(Ok(Frame::data(data))))
            }
            Poll::Ready(None) => {
                this.release();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                this.connection = None;
                Poll::Ready(Some(Err(e)))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.connection.is_none() || self.framing.is_end()
    }

    fn size_hint(&self) -> SizeHint {
        match self.framing.exact() {
            Some(left) => SizeHint::with_exact(left),
            None => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http_body_util::{BodyExt as _, Full};
    use hyper::body::Incoming;
    use hyper_util::rt::TokioIo;

    use super::super::http1::FixedFields;
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

    /// POSTs `text` to `/mcp` with no fields of its own.
    async fn send(pool: &Pool, text: &str) -> Result<http::Response<PooledBody>, PoolError> {
        let none = http::HeaderMap::new();
        let fixed = FixedFields::new(&none);
        let post = Post {
            method: &http::Method::POST,
            target: "/mcp",
            fixed: &fixed,
            extra: &none,
            body: text.as_bytes(),
        };
        pool.send(post).await
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
            assert_eq!(read(send(&pool, text).await.expect("answer")).await, text);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_is_replaced() {
        let (uri, accepted) = server(true).await;
        let pool = pool(&uri);
        for text in ["one", "two"] {
            assert_eq!(read(send(&pool, text).await.expect("answer")).await, text);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn an_answer_dropped_unread_does_not_give_its_connection_back() {
        let (uri, accepted) = server(false).await;
        let pool = pool(&uri);
        drop(send(&pool, "dropped").await.expect("answer"));
        assert_eq!(
            read(send(&pool, "next").await.expect("answer")).await,
            "next"
        );
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_connection_idle_past_the_timeout_is_not_reused() {
        let (uri, accepted) = server(false).await;
        let pool = Pool::new(&uri, Duration::from_secs(5), Duration::ZERO).expect("authority");
        for text in ["one", "two"] {
            assert_eq!(read(send(&pool, text).await.expect("answer")).await, text);
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
        match send(&pool(&uri), "x").await {
            Err(failed) => assert!(failed.is_connect(), "{failed}"),
            Ok(_) => panic!("nothing listens there"),
        }
    }
}
