//! The HTTP listener's guard rails, beneath axum so every route is covered:
//! a cap on open connections, header and idle timeouts, and eviction of idle
//! connections when the cap is reached.
//!
//! The **acceptor task** owns the TCP socket. A connection that finds a free
//! slot (one of `http.max_connections`) goes straight to axum. When every
//! slot is taken, the connection that has been idle the longest (no request
//! in progress: a keep-alive socket, or one still sending its headers) is
//! evicted, and the newcomer waits up to [`CONNECTION_WAIT`] for a slot in
//! its own **admission task** (at most [`MAX_WAITING`] of them; beyond that
//! it is closed at once). A newcomer that still finds no slot is answered by
//! a one-request server outside the cap: `/healthz` says `ok` (the process
//! is alive), anything else gets 503 with `Retry-After`.
//! The acceptor and the admission tasks run on the gateway's task tracker,
//! in spans of their own; both end at shutdown.
//!
//! Each admitted socket is a [`GuardedIo`]: while no request is in progress
//! its reads are under a deadline, `http.idle_timeout` from the end of the
//! last request (or the connection's start) until the first byte of the next
//! one, then `http.header_read_timeout` until axum has the request. A
//! request in progress, a long-lived SSE stream included, has no deadline
//! here (the body read timeout is the handlers' business); it holds its slot
//! until its response body is dropped. The server loop
//! ([`super::serve`]) marks requests in progress ([`Peer::begin_request`]).
//! At shutdown the listener drains ([`GuardedListener::drain`]): an idle
//! connection reads end of stream at once, a busy one when its request is
//! over.

use axum::response::IntoResponse as _;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::extract::ConnectInfo;
use axum::response::Response;
use futures_util::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument as _;

use crate::config::HttpConfig;

/// How long a connection that finds every slot taken waits for one.
pub(crate) const CONNECTION_WAIT: Duration = Duration::from_millis(500);
/// Connections waiting for a slot at once (an eighth of the cap, at least
/// 8); more are closed at once. Each holds a file descriptor.
pub(crate) const MAX_WAITING: usize = 256;
/// File descriptors kept free for upstream children, their pipes, HTTP
/// clients and logs when the connection cap is derived from the fd limit:
/// a quarter of the limit, at most this many.
const FD_RESERVE: u64 = 256;
/// How long the over-capacity answer may take, start to end.
const OVERFLOW_DEADLINE: Duration = Duration::from_secs(2);

/// What the guard counts, for `/metrics` and `/status`.
#[derive(Debug, Default)]
pub(crate) struct ConnectionCounts {
    /// Connections holding a slot now.
    pub open: AtomicUsize,
    /// Closed for taking longer than `http.header_read_timeout` to send headers.
    pub header_timeouts: AtomicU64,
    /// Closed after `http.idle_timeout` without a request.
    pub idle_timeouts: AtomicU64,
    /// Closed to make room for a new connection.
    pub evicted: AtomicU64,
    /// Answered by the over-capacity server, or closed unanswered.
    pub refused: AtomicU64,
}

impl ConnectionCounts {
    /// The figures for `/metrics`.
    pub(crate) fn snapshot(&self) -> crate::metrics::ConnectionSnapshot {
        let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
        crate::metrics::ConnectionSnapshot {
            open: self.open.load(Ordering::Relaxed),
            closed: [
                ("header_timeout", get(&self.header_timeouts)),
                ("idle_timeout", get(&self.idle_timeouts)),
                ("evicted", get(&self.evicted)),
                ("refused", get(&self.refused)),
            ],
        }
    }
}

/// The limits in force and the table of admitted connections.
struct Guard {
    slots: Arc<Semaphore>,
    waiting: Arc<Semaphore>,
    header_read_timeout: Duration,
    idle_timeout: Duration,
    max_connections: usize,
    epoch: Instant,
    next_id: AtomicU64,
    /// Admitted connections by id; entries leave when the socket is dropped.
    /// Held only for a scan or an insert, never across an await.
    open: Mutex<std::collections::HashMap<u64, Arc<ConnTrack>>>,
    counts: Arc<ConnectionCounts>,
}

/// The state of one admitted connection, shared by its socket and the
/// middleware that sees its requests.
#[derive(Debug)]
pub(crate) struct ConnTrack {
    id: u64,
    /// Requests whose response body has not been dropped yet.
    active: AtomicUsize,
    /// Milliseconds after the guard's epoch when the connection last became
    /// idle (opened, or its last request ended).
    idle_since: AtomicU64,
    /// Milliseconds after the epoch of the first byte of a request not yet
    /// handed to axum; 0 when none.
    first_byte: AtomicU64,
    /// [`OPEN`], [`EVICTED`] (close now) or [`DRAINING`] (close when idle).
    ending: AtomicU8,
    /// The connection's task while its read waits: woken when `ending` changes.
    reader: AtomicWaker,
    /// The guard's epoch, which the times above count from (tokio's clock,
    /// the one the deadline timer runs on).
    epoch: Instant,
}

/// `ConnTrack::ending`: served as usual.
const OPEN: u8 = 0;
/// Closed at its next read, whatever it is doing (eviction picks idle ones).
const EVICTED: u8 = 1;
/// Closed once no request is in progress (the gateway is shutting down).
const DRAINING: u8 = 2;

impl ConnTrack {
    /// Milliseconds after the epoch; never 0, which means "none" in
    /// `first_byte`.
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX) + 1
    }

    /// Moves `ending` from open to `to` and wakes a waiting read; a
    /// connection already ending stays as it is.
    fn end(&self, to: u8) {
        let moved = self
            .ending
            .compare_exchange(OPEN, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if moved {
            self.reader.wake();
        }
    }

    fn draining(&self) -> bool {
        self.ending.load(Ordering::Relaxed) == DRAINING
    }
}

/// Who is on the other end of a request: its address and its connection.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    pub addr: SocketAddr,
    track: Arc<ConnTrack>,
}

impl Peer {
    /// Whether the gateway is draining: the connection closes once its
    /// request is over.
    pub(crate) fn draining(&self) -> bool {
        self.track.draining()
    }

    /// Marks a request in progress on the connection until the returned
    /// guard (kept by the response body, see [`tracked`]) is dropped.
    pub(crate) fn begin_request(&self) -> InProgress {
        InProgress::begin(self.track.clone())
    }
}

/// The remote address of the request's connection, when known (an
/// extractor for handlers).
pub(crate) type ClientPeer = Option<axum::Extension<ConnectInfo<Peer>>>;

/// The IP address sessions and rates are counted against.
pub(crate) fn client_ip(peer: &ClientPeer) -> Option<std::net::IpAddr> {
    peer.as_ref().map(|axum::Extension(info)| info.0.addr.ip())
}

impl Guard {
    /// Closes the admitted connection idle the longest; false if every
    /// connection has a request in progress.
    fn evict_idlest(&self) -> bool {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let idlest = open
            .values()
            .filter(|t| {
                t.active.load(Ordering::Relaxed) == 0 && t.ending.load(Ordering::Relaxed) == OPEN
            })
            .min_by_key(|t| t.idle_since.load(Ordering::Relaxed));
        match idlest {
            Some(track) => {
                track.end(EVICTED);
                self.counts.evicted.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    connection = track.id,
                    "evicted the idlest connection to make room"
                );
                true
            }
            None => false,
        }
    }

    fn admit(self: &Arc<Self>, stream: TcpStream, permit: OwnedSemaphorePermit) -> GuardedIo {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX) + 1;
        let track = Arc::new(ConnTrack {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            active: AtomicUsize::new(0),
            idle_since: AtomicU64::new(now),
            first_byte: AtomicU64::new(0),
            ending: AtomicU8::new(OPEN),
            reader: AtomicWaker::new(),
            epoch: self.epoch,
        });
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(track.id, track.clone());
        self.counts.open.fetch_add(1, Ordering::Relaxed);
        GuardedIo {
            stream,
            track,
            guard: self.clone(),
            deadline: Box::pin(tokio::time::sleep(Duration::ZERO)),
            _slot: permit,
        }
    }
}

/// The listener the server loop takes admitted connections from.
pub(crate) struct GuardedListener {
    admitted: mpsc::Receiver<(GuardedIo, SocketAddr)>,
    guard: Arc<Guard>,
}

impl GuardedListener {
    /// The next admitted connection and who is on its other end; none once
    /// the acceptor has stopped.
    pub(crate) async fn accept(&mut self) -> Option<(GuardedIo, Peer)> {
        let (io, addr) = self.admitted.recv().await?;
        let peer = Peer {
            addr,
            track: io.track.clone(),
        };
        Some((io, peer))
    }

    /// Shutdown: every admitted connection closes once no request is in
    /// progress on it (an idle one at once).
    pub(crate) fn drain(&mut self) {
        self.admitted.close();
        let open = self.guard.open.lock().unwrap_or_else(|e| e.into_inner());
        for track in open.values() {
            track.end(DRAINING);
        }
    }
}

/// Starts the acceptor on `listener` (until `shutdown`, on `tracker`) and
/// returns the listener for axum and the counters.
pub(crate) fn guard(
    listener: TcpListener,
    http: &HttpConfig,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) -> io::Result<(GuardedListener, Arc<ConnectionCounts>)> {
    let local = listener.local_addr()?;
    let max_connections = effective_max_connections(http.max_connections);
    let counts = Arc::new(ConnectionCounts::default());
    let guard = Arc::new(Guard {
        slots: Arc::new(Semaphore::new(max_connections)),
        waiting: Arc::new(Semaphore::new((max_connections / 8).clamp(8, MAX_WAITING))),
        header_read_timeout: http.header_read_timeout,
        idle_timeout: http.idle_timeout,
        max_connections,
        epoch: Instant::now(),
        next_id: AtomicU64::new(1),
        open: Mutex::default(),
        counts: counts.clone(),
    });
    // The server loop takes each admitted connection at once; a few in
    // hand suffice.
    let (admit_tx, admitted) = mpsc::channel(16);
    let span = tracing::info_span!("acceptor", %local);
    tracker.spawn(
        accept_loop(listener, guard.clone(), admit_tx, shutdown, tracker.clone()).instrument(span),
    );
    Ok((GuardedListener { admitted, guard }, counts))
}

/// The configured cap, lowered to what the open-file limit allows.
fn effective_max_connections(configured: usize) -> usize {
    let fds = fd_limit();
    let reserve = (fds / 4).min(FD_RESERVE);
    let allowed = usize::try_from(fds.saturating_sub(reserve).max(16)).unwrap_or(usize::MAX);
    if configured > allowed {
        tracing::warn!(
            configured,
            allowed,
            fd_limit = fds,
            "http.max_connections is above what the open-file limit allows; using the lower value"
        );
        return allowed;
    }
    configured
}

/// The soft limit on open files.
fn fd_limit() -> u64 {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(soft, _)| soft)
}

/// Raises the soft open-file limit to the hard limit, so the connection cap
/// (not the kernel) decides when clients are turned away. Returns the limit
/// in force.
pub(crate) fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => hard,
            Err(e) => {
                tracing::warn!(soft, hard, error = %e, "cannot raise the open-file limit");
                soft
            }
        },
        Ok((soft, _)) => soft,
        Err(_) => 1024,
    }
}

async fn accept_loop(
    listener: TcpListener,
    guard: Arc<Guard>,
    admit: mpsc::Sender<(GuardedIo, SocketAddr)>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    tracing::debug!(
        max_connections = guard.max_connections,
        "accepting connections"
    );
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => return,
        };
        let (stream, addr) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // EMFILE and the like: free a descriptor if one is idle, and
                // do not spin while the condition lasts.
                tracing::warn!(error = %e, "accept failed");
                guard.evict_idlest();
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        if let Ok(permit) = guard.slots.clone().try_acquire_owned() {
            if admit
                .send((guard.admit(stream, permit), addr))
                .await
                .is_err()
            {
                return;
            }
            continue;
        }
        guard.evict_idlest();
        let Ok(waiting) = guard.waiting.clone().try_acquire_owned() else {
            guard.counts.refused.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let (guard, admit, stop) = (guard.clone(), admit.clone(), shutdown.clone());
        // At most `MAX_WAITING` of these (the `waiting` permit), each over
        // within `CONNECTION_WAIT` + `OVERFLOW_DEADLINE`, or at shutdown.
        let admission = async move {
            let slot =
                tokio::time::timeout(CONNECTION_WAIT, guard.slots.clone().acquire_owned()).await;
            match slot {
                Ok(Ok(permit)) => {
                    let _ = admit.send((guard.admit(stream, permit), addr)).await;
                }
                _ => {
                    guard.counts.refused.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%addr, max_connections = guard.max_connections, "connection limit reached; refusing a connection");
                    let _ = tokio::time::timeout(
                        OVERFLOW_DEADLINE,
                        overflow(stream, guard.max_connections),
                    )
                    .await;
                }
            }
            drop(waiting);
        };
        let span = tracing::debug_span!("admission", %addr);
        tracker.spawn(
            async move {
                tokio::select! {
                    () = admission => {}
                    () = stop.cancelled() => {}
                }
            }
            .instrument(span),
        );
    }
}

/// Answers one request on a connection that found no slot: `/healthz`
/// still says the process is alive; everything else gets 503.
async fn overflow(stream: TcpStream, max_connections: usize) {
    let service = hyper::service::service_fn(
        move |request: hyper::Request<hyper::body::Incoming>| {
            let response = if request.uri().path() == "/healthz" {
                Response::new(Body::from("ok"))
            } else {
                super::wire::Refusal::new(axum::http::StatusCode::SERVICE_UNAVAILABLE, crate::protocol::code::INTERNAL_ERROR, format!(
                        "the gateway has reached its limit of {max_connections} connections; retry shortly"
                    )).into_response()
            };
            let mut response = response;
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
            std::future::ready(Ok::<_, std::convert::Infallible>(response))
        },
    );
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.keep_alive(false);
    let io = hyper_util::rt::TokioIo::new(stream);
    if let Err(e) = builder.serve_connection(io, service).await {
        tracing::debug!(error = %e, "over-capacity connection ended");
    }
}

/// An admitted connection's socket. Holds its slot until dropped.
pub(crate) struct GuardedIo {
    stream: TcpStream,
    track: Arc<ConnTrack>,
    guard: Arc<Guard>,
    /// The read deadline while no request is in progress.
    deadline: Pin<Box<tokio::time::Sleep>>,
    _slot: OwnedSemaphorePermit,
}

impl Drop for GuardedIo {
    fn drop(&mut self) {
        self.guard
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.track.id);
        self.guard.counts.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl GuardedIo {
    /// What a read gets once the connection is ending: an error when
    /// evicted, the end of the stream when drained and idle.
    fn ended(&self) -> Option<io::Result<()>> {
        match self.track.ending.load(Ordering::Acquire) {
            EVICTED => Some(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "evicted to make room for a new connection",
            ))),
            DRAINING if self.track.active.load(Ordering::Acquire) == 0 => Some(Ok(())),
            _ => None,
        }
    }

    /// While no request is in progress: the error that ends the connection
    /// if its deadline has passed, else `Pending` with the timer armed.
    fn poll_idle_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        if self.track.active.load(Ordering::Relaxed) > 0 {
            return Poll::Pending;
        }
        let first_byte = self.track.first_byte.load(Ordering::Relaxed);
        let (from, limit, timeouts, what) = match first_byte {
            0 => (
                self.track.idle_since.load(Ordering::Relaxed),
                self.guard.idle_timeout,
                &self.guard.counts.idle_timeouts,
                "idle",
            ),
            started => (
                started,
                self.guard.header_read_timeout,
                &self.guard.counts.header_timeouts,
                "request headers not received",
            ),
        };
        let limit_ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX);
        let elapsed = self.track.now_ms().saturating_sub(from);
        if elapsed >= limit_ms {
            timeouts.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                connection = self.track.id,
                what,
                "closing the connection after its timeout"
            );
            return Poll::Ready(io::Error::new(io::ErrorKind::TimedOut, what));
        }
        let at = Instant::now() + Duration::from_millis(limit_ms - elapsed);
        // The timer moves only when it would fire too late (a header
        // deadline inside an idle one); one that fires early is re-armed
        // here. A busy keep-alive connection therefore does not register
        // its timer again after every request.
        if self.deadline.deadline() > at {
            self.deadline.as_mut().reset(at);
        }
        loop {
            match self.deadline.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(()) if self.deadline.deadline() >= at => {
                    timeouts.fetch_add(1, Ordering::Relaxed);
                    return Poll::Ready(io::Error::new(io::ErrorKind::TimedOut, what));
                }
                Poll::Ready(()) => self.deadline.as_mut().reset(at),
            }
        }
    }
}

impl AsyncRead for GuardedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(ended) = self.ended() {
            return Poll::Ready(ended);
        }
        let before = buf.filled().len();
        match Pin::new(&mut self.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let idle = self.track.active.load(Ordering::Relaxed) == 0;
                if idle && buf.filled().len() > before {
                    let now = self.track.now_ms();
                    let _ = self.track.first_byte.compare_exchange(
                        0,
                        now,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                // Registered before `ending` is read again, so an eviction
                // or a drain between the two is not missed.
                self.track.reader.register(cx.waker());
                if let Some(ended) = self.ended() {
                    return Poll::Ready(ended);
                }
                match self.poll_idle_deadline(cx) {
                    Poll::Ready(e) => Poll::Ready(Err(e)),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl AsyncWrite for GuardedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// A request in progress on a connection, from its headers until its
/// response body is dropped.
pub(crate) struct InProgress {
    track: Arc<ConnTrack>,
}

impl InProgress {
    fn begin(track: Arc<ConnTrack>) -> Self {
        track.active.fetch_add(1, Ordering::Relaxed);
        track.first_byte.store(0, Ordering::Relaxed);
        Self { track }
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        self.track
            .idle_since
            .store(self.track.now_ms(), Ordering::Relaxed);
        if self.track.active.fetch_sub(1, Ordering::AcqRel) == 1 && self.track.draining() {
            // Its read may be waiting with the request over: it ends now.
            self.track.reader.wake();
        }
    }
}

/// `response` with a body that keeps its request counted as in progress
/// (an SSE stream, say) until it is dropped.
pub(crate) fn tracked(response: Response, in_progress: InProgress) -> Response {
    response.map(|body| {
        Body::new(Tracked {
            body,
            _in_progress: in_progress,
        })
    })
}

/// A response body that keeps its request counted as in progress.
struct Tracked {
    body: Body,
    _in_progress: InProgress,
}

impl HttpBody for Tracked {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
