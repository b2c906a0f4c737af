//! Upstream MCP servers: one supervised actor per configured server, shared
//! by every downstream session.
//!
//! [`spawn`] starts the supervisor task for one upstream and returns its
//! [`UpstreamHandle`], a cheap clone the router uses to reach the live
//! [`Connection`]. The supervisor owns the transport: it starts the child,
//! runs the handshake, publishes the upstream's lists to the catalog,
//! refreshes them on `list_changed`, and when the child dies it fails every
//! in-flight request, withdraws the upstream's items, and restarts it with
//! exponential backoff and jitter. Shutdown never triggers a restart.

pub(crate) mod connection;
mod events;
pub(crate) mod handshake;
pub(crate) mod http;
mod interest;
mod legacy_sse;
pub(crate) mod link;
mod listen;
mod message;
pub(crate) mod noise;
mod remote;
pub(crate) mod stdio;
mod subscriptions;
#[cfg(test)]
pub(crate) mod test_support;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::{ArcSwap, ArcSwapOption};
use serde_json::value::RawValue;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub(crate) use connection::Request;
pub(crate) use connection::{Answer, Connection, ListsChanged, ProgressRoute};
pub(crate) use events::{AskRefused, ClientAnswer, ClientAsk, UpstreamEvents};
pub(crate) use handshake::ServerHello;
pub(crate) use interest::Interest;
pub(crate) use interest::Subscribed;
pub(crate) use message::Origin;
pub(crate) use subscriptions::{SubscriberId, SubscriptionTable};

use crate::catalog::{CatalogStore, ListKind, UpstreamView};
use crate::config::{EraChoice, UpstreamConfig};
use crate::protocol::Method;
use link::Link;

/// Notifications queued from one upstream to its supervisor. When full,
/// further notifications are dropped with a warning (list changes are
/// idempotent: any later one triggers the same refresh).
const NOTIFICATION_CAPACITY: usize = 1024;
/// A child that ran at least this long before dying restarts without delay growth.
const STABLE_AFTER: Duration = Duration::from_secs(30);
const BACKOFF_BASE: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A listen stream that lived this long counts as healthy when it ends.
const STABLE_LISTEN: Duration = Duration::from_secs(5);
/// How long the `server/discover` probe may take before `initialize` is tried.
const DISCOVER_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a request to an upstream failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum UpstreamError {
    #[error("upstream '{upstream}' is unavailable: {reason}")]
    Unavailable { upstream: String, reason: String },
    #[error("upstream '{upstream}' did not answer within {}", humantime::format_duration(*.timeout))]
    Timeout { upstream: String, timeout: Duration },
    #[error("upstream '{upstream}' broke the protocol: {detail}")]
    Protocol { upstream: String, detail: String },
    /// An HTTP upstream forgot our session (404); the gateway re-initializes.
    #[error("upstream '{upstream}' lost the session; it is being re-initialized")]
    SessionExpired { upstream: String },
    /// The gateway withdrew the request: the client cancelled it, its
    /// session ended, or the gateway is shutting down.
    #[error("request cancelled: {reason}")]
    Cancelled { upstream: String, reason: String },
    /// The upstream answered with a JSON-RPC error; it is passed on as is.
    #[error("upstream '{upstream}' answered with an error")]
    Rpc {
        upstream: String,
        error: Box<RawValue>,
    },
}

impl UpstreamError {
    /// What went wrong, without the upstream's name (for a state's reason,
    /// which is shown next to the name already).
    pub(crate) fn cause(&self) -> String {
        match self {
            Self::Unavailable { reason, .. } => reason.clone(),
            Self::Timeout { timeout, .. } => {
                format!("no answer within {}", humantime::format_duration(*timeout))
            }
            Self::Protocol { detail, .. } => detail.clone(),
            Self::SessionExpired { .. } => "it lost the session".into(),
            Self::Cancelled { reason, .. } => format!("cancelled: {reason}"),
            Self::Rpc { error, .. } => format!("it answered with an error: {}", error.get()),
        }
    }
}

/// Why a transport could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum LinkError {
    #[error("could not start {command:?}: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("invalid url: {0}")]
    Url(String),
    /// A configured header's name or value is not valid in HTTP.
    #[error("{0}")]
    Header(String),
    #[error("cannot build the HTTP client: {0}")]
    Client(reqwest::Error),
}

/// Where an upstream is in its life cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamState {
    Starting,
    Ready,
    /// Connected, but pings go unanswered: calls are still sent, and a
    /// stdio child that stays like this is restarted.
    Unresponsive {
        reason: String,
    },
    /// Not connected; `retry_at` is when the next attempt starts.
    Down {
        reason: String,
        retry_at: Option<Instant>,
    },
    Stopped,
}

impl UpstreamState {
    /// One word for `/status` and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            UpstreamState::Starting => "starting",
            UpstreamState::Ready => "ready",
            UpstreamState::Unresponsive { .. } => "unresponsive",
            UpstreamState::Down { .. } => "down",
            UpstreamState::Stopped => "stopped",
        }
    }

    /// The state in words, for errors and `/status`: "starting",
    /// "down (its process was killed by signal 9 (SIGKILL)); next try in 2s".
    pub fn describe(&self) -> String {
        match self {
            UpstreamState::Down { reason, retry_at } => match retry_at {
                Some(at) => {
                    let left = at.saturating_duration_since(Instant::now());
                    // Whole tenths of a second read better than nanoseconds.
                    let left = Duration::from_millis(left.as_millis().div_ceil(100) as u64 * 100);
                    format!(
                        "down ({reason}); next try in {}",
                        humantime::format_duration(left)
                    )
                }
                None => format!("down ({reason})"),
            },
            UpstreamState::Unresponsive { reason } => format!("unresponsive ({reason})"),
            UpstreamState::Starting => "starting".into(),
            UpstreamState::Ready => "ready".into(),
            UpstreamState::Stopped => "stopped (the gateway is shutting down)".into(),
        }
    }
}

/// A cheap, cloneable reference to one upstream's actor.
#[derive(Clone)]
pub(crate) struct UpstreamHandle {
    shared: Arc<Shared>,
}

struct Shared {
    name: Arc<str>,
    timeout: Duration,
    /// How long a call waits for the upstream while it is starting.
    start_wait: Duration,
    /// Calls in a row that timed out; reset by any answer.
    call_timeouts: AtomicU32,
    /// After this many call timeouts in a row, `ping_now` is woken.
    call_timeouts_limit: u32,
    /// Woken to make the supervisor ping at once (the supervisor waits on it).
    ping_now: tokio::sync::Notify,
    /// Rate limit of its stderr and non-JSON-RPC stdout lines in the log.
    noise: Arc<noise::NoiseFilter>,
    /// The live connection; written only by the supervisor.
    conn: ArcSwapOption<Connection>,
    hello: ArcSwapOption<ServerHello>,
    /// Sender held by the supervisor; receivers by anyone watching.
    state: watch::Sender<UpstreamState>,
    restarts: AtomicU64,
    pid: AtomicU32,
    /// Woken when the URIs to watch change (modern upstreams reopen their
    /// listen stream; the supervisor holds the other end).
    listen_changed: tokio::sync::Notify,
    /// Bumped each time a replacement listen stream has been acknowledged
    /// (the supervisor holds the sender).
    listen_generation: watch::Sender<u64>,
    /// Woken by a call to a remote upstream that is down: the supervisor
    /// cuts its backoff short and reconnects now.
    reconnect_now: tokio::sync::Notify,
    /// Remote upstreams reconnect on demand; stdio ones keep their backoff.
    remote: bool,
    /// Whether its resource URIs are exposed as `{upstream}+{uri}`.
    namespace_uris: bool,
    /// Whether `/readyz` waits for it.
    required: bool,
    /// How it is reached, for `/status` (no URL or command: they may hold secrets).
    transport: &'static str,
    /// Items it contributes per list kind, as last published.
    counts: [std::sync::atomic::AtomicUsize; 4],
}

impl UpstreamHandle {
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.shared.name
    }

    /// The per-request deadline from config.
    pub(crate) fn timeout(&self) -> Duration {
        self.shared.timeout
    }

    /// The live connection, or why there is none.
    pub(crate) fn connection(&self) -> Result<Arc<Connection>, UpstreamError> {
        self.shared
            .conn
            .load_full()
            .ok_or_else(|| self.unavailable())
    }

    /// The error for a call the upstream cannot take now, naming its state.
    pub(crate) fn unavailable(&self) -> UpstreamError {
        UpstreamError::Unavailable {
            upstream: self.shared.name.to_string(),
            reason: format!("it is {}", self.shared.state.borrow().describe()),
        }
    }

    /// Waits (at most the configured `start_wait`) while the upstream is
    /// starting; true once it is up. Used for names whose items are not in
    /// the catalog because their upstream is not up yet.
    pub(crate) async fn wait_started(&self) -> bool {
        let mut state = self.watch_state();
        let up = state.wait_for(|s| !matches!(s, UpstreamState::Starting));
        match tokio::time::timeout(self.shared.start_wait, up).await {
            Ok(Ok(s)) => matches!(
                *s,
                UpstreamState::Ready | UpstreamState::Unresponsive { .. }
            ),
            _ => false,
        }
    }

    /// Records how a call ended: a run of timeouts makes the supervisor
    /// ping at once; any answer ends the run.
    pub(crate) fn note_call(&self, timed_out: bool) {
        if !timed_out {
            self.shared.call_timeouts.store(0, Ordering::Relaxed);
            return;
        }
        let run = self.shared.call_timeouts.fetch_add(1, Ordering::Relaxed) + 1;
        if run >= self.shared.call_timeouts_limit {
            self.shared.call_timeouts.store(0, Ordering::Relaxed);
            self.shared.ping_now.notify_one();
        }
    }

    /// The live connection; for a remote upstream that is down, one
    /// reconnect attempt is made at once and awaited (until `deadline`), so
    /// the first call after an outage succeeds once the server is back and
    /// fails fast while it is not.
    pub(crate) async fn connection_on_demand(
        &self,
        deadline: tokio::time::Instant,
    ) -> Result<Arc<Connection>, UpstreamError> {
        let unavailable = match self.connection() {
            Ok(conn) => return Ok(conn),
            Err(e) => e,
        };
        if !self.shared.remote && matches!(self.state(), UpstreamState::Starting) {
            return match self.wait_started().await {
                true => self.connection(),
                false => Err(self.unavailable()),
            };
        }
        let mut state = self.watch_state();
        if !self.shared.remote || matches!(*state.borrow(), UpstreamState::Stopped) {
            return Err(unavailable);
        }
        if matches!(*state.borrow(), UpstreamState::Down { .. }) {
            self.shared.reconnect_now.notify_one();
        }
        let mut attempted = false;
        let settled = state.wait_for(|s| match s {
            UpstreamState::Ready | UpstreamState::Unresponsive { .. } | UpstreamState::Stopped => {
                true
            }
            UpstreamState::Starting => {
                attempted = true;
                false
            }
            UpstreamState::Down { .. } => attempted,
        });
        match tokio::time::timeout_at(deadline, settled).await {
            Ok(Ok(_)) => self.connection(),
            _ => Err(unavailable),
        }
    }

    /// Waits (until `deadline`) for a ready connection other than `failed`,
    /// whose session the server forgot: the state may still say ready for
    /// a moment after the old connection failed.
    pub(crate) async fn reconnected(
        &self,
        failed: &Connection,
        deadline: tokio::time::Instant,
    ) -> Result<Arc<Connection>, UpstreamError> {
        let mut state = self.watch_state();
        let fresh = async {
            loop {
                let ready = *state.borrow_and_update() == UpstreamState::Ready;
                if ready
                    && let Some(conn) = self.shared.conn.load_full()
                    && !std::ptr::eq(Arc::as_ptr(&conn), failed)
                {
                    return Ok(conn);
                }
                if state.changed().await.is_err() {
                    return Err(self.unavailable());
                }
            }
        };
        tokio::time::timeout_at(deadline, fresh)
            .await
            .unwrap_or_else(|_| {
                Err(UpstreamError::Timeout {
                    upstream: self.shared.name.to_string(),
                    timeout: self.shared.timeout,
                })
            })
    }

    /// What the upstream declared in its last handshake.
    pub(crate) fn hello(&self) -> Option<Arc<ServerHello>> {
        self.shared.hello.load_full()
    }

    pub(crate) fn state(&self) -> UpstreamState {
        self.shared.state.borrow().clone()
    }

    /// A receiver that sees every state change.
    pub(crate) fn watch_state(&self) -> watch::Receiver<UpstreamState> {
        self.shared.state.subscribe()
    }

    /// How many times the upstream has been restarted.
    pub(crate) fn restarts(&self) -> u64 {
        self.shared.restarts.load(Ordering::Relaxed)
    }

    /// The process id of a stdio upstream's current child.
    pub(crate) fn pid(&self) -> Option<u32> {
        match self.shared.pid.load(Ordering::Relaxed) {
            0 => None,
            pid => Some(pid),
        }
    }

    /// Tells a modern upstream's supervisor that the URIs to watch changed.
    pub(crate) fn watch_set_changed(&self) {
        self.shared.listen_changed.notify_one();
    }

    /// Like [`Self::watch_set_changed`], and waits (at most `timeout`) until
    /// the upstream has acknowledged a listen stream that includes the change.
    pub(crate) async fn watch_set_changed_and_applied(&self, timeout: Duration) {
        let mut generation = self.shared.listen_generation.subscribe();
        let before = *generation.borrow_and_update();
        self.watch_set_changed();
        let applied = generation.wait_for(|g| *g > before);
        if tokio::time::timeout(timeout, applied).await.is_err() {
            tracing::warn!(upstream = %self.name(), "the upstream did not acknowledge the new listen stream in time");
        }
    }

    /// Whether `/readyz` waits for it.
    pub(crate) fn required(&self) -> bool {
        self.shared.required
    }

    /// How it is reached: stdio, http, streamable-http or sse.
    pub(crate) fn transport(&self) -> &'static str {
        self.shared.transport
    }

    /// Tools, prompts, resources and templates it contributes.
    pub(crate) fn item_counts(&self) -> [usize; 4] {
        std::array::from_fn(|i| self.shared.counts[i].load(Ordering::Relaxed))
    }

    /// Whether its resource URIs are exposed as `{upstream}+{uri}`.
    pub(crate) fn namespaces_uris(&self) -> bool {
        self.shared.namespace_uris
    }

    /// Lines of stderr or stray stdout dropped by the log rate limit.
    pub(crate) fn suppressed_lines(&self) -> u64 {
        self.shared.noise.suppressed()
    }

    /// Whether the upstream speaks the modern era (as of its last handshake).
    pub(crate) fn is_modern(&self) -> bool {
        self.hello().is_some_and(|h| h.modern)
    }

    fn set_state(&self, state: UpstreamState) {
        self.shared.state.send_replace(state);
    }
}

/// The configured upstreams by name. Swapped whole when the set changes.
#[derive(Default)]
pub(crate) struct UpstreamSet {
    by_name: ArcSwap<HashMap<Arc<str>, UpstreamHandle>>,
}

impl UpstreamSet {
    /// Removes an upstream (a reload dropped it).
    pub(crate) fn remove(&self, name: &str) {
        self.by_name.rcu(|map| {
            let mut map = HashMap::clone(map);
            map.remove(name);
            map
        });
    }

    /// Adds (or replaces) an upstream.
    pub(crate) fn insert(&self, handle: UpstreamHandle) {
        self.by_name.rcu(|map| {
            let mut map = HashMap::clone(map);
            map.insert(handle.name().clone(), handle.clone());
            map
        });
    }

    pub(crate) fn get(&self, name: &str) -> Option<UpstreamHandle> {
        self.by_name.load().get(name).cloned()
    }

    pub(crate) fn all(&self) -> Vec<UpstreamHandle> {
        self.by_name.load().values().cloned().collect()
    }
}

/// Starts the supervisor for one upstream on `tracker`: its events go to
/// `events`, and `interest` is what clients want of it.
pub(crate) fn spawn(
    config: UpstreamConfig,
    catalog: Arc<CatalogStore>,
    events: Arc<dyn UpstreamEvents>,
    interest: Arc<Interest>,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) -> (UpstreamHandle, tokio::task::JoinHandle<()>) {
    let name: Arc<str> = config.name.as_str().into();
    let handle = UpstreamHandle {
        shared: Arc::new(Shared {
            name: name.clone(),
            timeout: config.timeout,
            start_wait: config.start_wait,
            call_timeouts: AtomicU32::new(0),
            call_timeouts_limit: config.health.call_timeouts,
            ping_now: tokio::sync::Notify::new(),
            noise: Arc::default(),
            conn: ArcSwapOption::empty(),
            hello: ArcSwapOption::empty(),
            state: watch::Sender::new(UpstreamState::Starting),
            restarts: AtomicU64::new(0),
            pid: AtomicU32::new(0),
            listen_changed: tokio::sync::Notify::new(),
            listen_generation: watch::Sender::new(0),
            reconnect_now: tokio::sync::Notify::new(),
            remote: matches!(config.transport, crate::config::Transport::Remote(_)),
            namespace_uris: config.namespace_uris,
            required: config.required,
            transport: match &config.transport {
                crate::config::Transport::Stdio(_) => "stdio",
                crate::config::Transport::Remote(r) => match r.mode {
                    crate::config::RemoteMode::Auto => "http",
                    crate::config::RemoteMode::StreamableHttp => "streamable-http",
                    crate::config::RemoteMode::Sse => "sse",
                },
            },
            counts: Default::default(),
        }),
    };
    let supervisor = Supervisor {
        handle: handle.clone(),
        config,
        catalog,
        events,
        interest,
        shutdown,
        tasks: tracker.clone(),
    };
    let span = tracing::info_span!("upstream", upstream = %name);
    let task = tracker.spawn(tracing::Instrument::instrument(supervisor.run(), span));
    (handle, task)
}

struct Supervisor {
    handle: UpstreamHandle,
    config: UpstreamConfig,
    catalog: Arc<CatalogStore>,
    /// Where its resource updates, log messages and list changes go.
    events: Arc<dyn UpstreamEvents>,
    /// The subscriptions and log level to restore and watch.
    interest: Arc<Interest>,
    /// A child of the gateway's upstream token: cancelled at shutdown or
    /// when a reload removes the upstream.
    shutdown: CancellationToken,
    /// The gateway's tracker, for the transport's I/O tasks.
    tasks: TaskTracker,
}

impl Supervisor {
    async fn run(self) {
        let mut attempt: u32 = 0;
        loop {
            self.handle.set_state(UpstreamState::Starting);
            let started = Instant::now();
            let (reason, restart_now) = self.run_once().await;
            if self.shutdown.is_cancelled() {
                break;
            }
            if started.elapsed() >= STABLE_AFTER {
                attempt = 0;
            }
            if restart_now {
                tracing::info!(reason = %reason, "re-initializing at once");
                self.handle.shared.restarts.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let delay = backoff(attempt);
            attempt = attempt.saturating_add(1);
            self.handle.shared.restarts.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(reason = %reason, retry_in = %humantime::format_duration(delay), "upstream down");
            self.handle.set_state(UpstreamState::Down {
                reason,
                retry_at: Some(Instant::now() + delay),
            });
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.handle.shared.reconnect_now.notified() => {
                    tracing::info!("a call is waiting; reconnecting now");
                }
                () = self.shutdown.cancelled() => break,
            }
        }
        self.handle.set_state(UpstreamState::Stopped);
    }

    /// One life of the upstream: start, handshake, serve, tear down.
    /// Returns why it ended, and whether to restart without a backoff.
    async fn run_once(&self) -> (String, bool) {
        let name = self.handle.name().clone();
        let (out_tx, out_rx) = mpsc::channel(connection::OUTBOUND_CAPACITY);
        let (note_tx, mut note_rx) = mpsc::channel(NOTIFICATION_CAPACITY);
        let noise = self.handle.shared.noise.clone();
        let conn = Arc::new(
            Connection::new(
                name.clone(),
                out_tx,
                note_tx,
                self.events.clone(),
                noise.clone(),
            )
            .with_asks(self.tasks.clone(), self.config.timeout),
        );
        let mut child = match Link::start(
            name.clone(),
            &self.config.transport,
            conn.clone(),
            out_rx,
            noise,
            &self.tasks,
        ) {
            Ok(link) => link,
            Err(e) => return (e.to_string(), false),
        };
        self.handle
            .shared
            .pid
            .store(child.pid().unwrap_or(0), Ordering::Relaxed);
        let timeout = self.config.timeout;

        let setup = async {
            let hello = self.handshake(&conn).await?;
            let lists = handshake::fetch_lists(&conn, &hello, timeout).await?;
            Ok::<_, UpstreamError>((hello, lists))
        };
        let reason = tokio::select! {
            setup = setup => match setup {
                Ok((hello, lists)) => {
                    let counts: Vec<usize> = ListKind::ALL.iter().map(|k| lists.get(*k).len()).collect();
                    tracing::info!(version = %hello.protocol_version, tools = counts[0], prompts = counts[1], resources = counts[2], templates = counts[3], "upstream ready");
                    let view = UpstreamView { lists, instructions: hello.instructions.clone() };
                    let hello = Arc::new(hello);
                    self.handle.shared.hello.store(Some(hello.clone()));
                    self.handle.shared.conn.store(Some(conn.clone()));
                    // Subscriptions and the log level are back in place before
                    // the upstream counts as ready. The connection is visible
                    // first, so a subscription made meanwhile goes straight to
                    // it rather than into a gap.
                    self.interest.restore(&name, &conn, &hello, timeout).await;
                    self.publish(Some(&view));
                    self.handle.set_state(UpstreamState::Ready);
                    self.serve(&conn, &hello, view, &mut child, &mut note_rx).await
                }
                Err(e) => format!("handshake failed: {}", e.cause()),
            },
            ended = child.wait_ended() => format!("{ended} during the handshake"),
            () = self.shutdown.cancelled() => "the gateway is shutting down".into(),
        };

        // Down before the view changes, so whoever hears the list_changed
        // also sees the upstream as not ready.
        if !self.shutdown.is_cancelled() {
            self.handle.set_state(UpstreamState::Down {
                reason: reason.clone(),
                retry_at: None,
            });
        }
        self.handle.shared.conn.store(None);
        self.publish(None);
        conn.close(reason.clone());
        let restart_now = child.restart_now();
        let stopped = child.stop().await;
        tracing::debug!(link = %stopped, "upstream transport stopped");
        self.handle.shared.pid.store(0, Ordering::Relaxed);
        (reason, restart_now)
    }

    /// Picks the era: `server/discover` first (unless configured or the
    /// transport is legacy-only), `initialize` when that is not answered.
    async fn handshake(&self, conn: &Connection) -> Result<ServerHello, UpstreamError> {
        let timeout = self.config.timeout;
        let legacy_only = matches!(
            &self.config.transport,
            crate::config::Transport::Remote(r) if r.mode == crate::config::RemoteMode::Sse
        );
        let probe = match self.config.era {
            EraChoice::Legacy => None,
            _ if legacy_only => None,
            _ => handshake::discover(conn, timeout.min(DISCOVER_TIMEOUT)).await,
        };
        let hello = match (probe, self.config.era) {
            (Some(hello), _) => hello,
            (None, EraChoice::Modern) => {
                return Err(UpstreamError::Protocol {
                    upstream: conn.upstream().to_string(),
                    detail: "it is configured as era: modern but does not answer server/discover for 2026-07-28".into(),
                });
            }
            (None, _) => handshake::initialize(conn, timeout).await?,
        };
        if hello.modern {
            conn.set_modern(handshake::modern_meta());
        }
        Ok(hello)
    }

    /// Runs while the upstream is up: refreshes lists on `list_changed`.
    async fn serve(
        &self,
        conn: &Connection,
        hello: &ServerHello,
        mut view: UpstreamView,
        child: &mut Link,
        notes: &mut mpsc::Receiver<ListsChanged>,
    ) -> String {
        let watched = || self.interest.watched_on(conn.upstream());
        let mut listen_failures: u32 = 0;
        let mut listening = match hello.modern {
            true => listen::open(conn, hello, watched()).await,
            false => None,
        };
        let mut health = Health::new(&self.config.health);
        loop {
            let listen_ended = async {
                match listening.as_mut() {
                    Some(l) => {
                        let _ = (&mut l.answer).await;
                    }
                    None => std::future::pending().await,
                }
            };
            let pinging = health.ping.is_some();
            let ping_answered = async {
                match health.ping.as_mut() {
                    Some(ping) => ping.await,
                    None => std::future::pending().await,
                }
            };
            let note = tokio::select! {
                ended = child.wait_ended() => return ended,
                () = self.shutdown.cancelled() => return "the gateway is shutting down".into(),
                () = tokio::time::sleep_until(health.next_ping), if !pinging => {
                    health.ping = Some(Box::pin(conn.request(Method::Ping, None, self.config.health.ping_timeout)));
                    continue;
                }
                () = self.handle.shared.ping_now.notified(), if !pinging => {
                    tracing::info!("calls keep timing out; pinging the upstream now");
                    health.ping = Some(Box::pin(conn.request(Method::Ping, None, self.config.health.ping_timeout)));
                    continue;
                }
                answer = ping_answered => {
                    health.ping = None;
                    if let Some(reason) = self.ping_answered(&mut health, answer) {
                        return reason;
                    }
                    continue;
                }
                () = self.handle.shared.listen_changed.notified(), if hello.modern => {
                    // New stream first, acknowledged, then drop the old one: no gap.
                    let mut next = listen::open(conn, hello, watched()).await;
                    if let Some(new) = next.as_mut()
                        && tokio::time::timeout(self.config.timeout, &mut new.acknowledged)
                            .await
                            .is_err()
                    {
                        tracing::warn!("the upstream did not acknowledge the new listen stream");
                        conn.forget_ack(new.id);
                    }
                    if let Some(old) = std::mem::replace(&mut listening, next) {
                        conn.forget_ack(old.id);
                        conn.cancel(old.id, "subscriptions changed");
                    }
                    self.handle.shared.listen_generation.send_modify(|g| *g += 1);
                    continue;
                }
                () = listen_ended => {
                    // A stream that dies at once (the server is gone) is
                    // retried with backoff, not in a hot loop.
                    let lasted = listening.as_ref().map_or(Duration::ZERO, |l| l.opened.elapsed());
                    listen_failures = if lasted < STABLE_LISTEN { listen_failures.saturating_add(1) } else { 0 };
                    let delay = if listen_failures == 0 { Duration::ZERO } else { backoff(listen_failures - 1) };
                    tracing::info!(retry_in = %humantime::format_duration(delay), "upstream listen stream ended; reopening it and refetching lists");
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = self.shutdown.cancelled() => return "the gateway is shutting down".into(),
                    }
                    if let Some(old) = &listening {
                        conn.forget_ack(old.id);
                    }
                    listening = listen::open(conn, hello, watched()).await;
                    ListsChanged::ALL
                }
                note = notes.recv() => match note {
                    Some(note) => note,
                    None => return "its connection closed".into(),
                },
            };
            // Coalesce a burst: take everything already queued before refetching.
            let mut stale = Vec::new();
            collect_stale(&note, &mut stale);
            while let Ok(more) = notes.try_recv() {
                collect_stale(&more, &mut stale);
            }
            if stale.is_empty() {
                continue;
            }
            for kind in stale {
                if !hello.has(kind.capability()) {
                    continue;
                }
                match handshake::fetch_list(conn, kind, self.config.timeout).await {
                    Ok(items) => *view.lists.get_mut(kind) = items,
                    Err(e) => {
                        tracing::warn!(error = %e, list = kind.result_key(), "list refresh failed; keeping the previous list")
                    }
                }
            }
            self.publish(Some(&view));
        }
    }

    /// Moves the upstream between ready and unresponsive by a ping's
    /// outcome. Returns why to restart it: a stdio child unresponsive for
    /// longer than `health.restart_after`.
    fn ping_answered(&self, health: &mut Health, answer: Answer) -> Option<String> {
        let cfg = &self.config.health;
        health.next_ping = tokio::time::Instant::now() + cfg.ping_interval;
        match answer {
            // Any answer, an error too, shows the upstream reads and writes.
            Ok(_) | Err(UpstreamError::Rpc { .. }) => {
                if health.unresponsive_since.take().is_some() {
                    tracing::info!("upstream answers again");
                    self.handle.set_state(UpstreamState::Ready);
                }
                None
            }
            Err(UpstreamError::Timeout { .. }) => {
                let since = *health.unresponsive_since.get_or_insert_with(Instant::now);
                let silent = since.elapsed() + cfg.ping_timeout;
                let reason = format!(
                    "no answer to ping for {}",
                    humantime::format_duration(Duration::from_secs(silent.as_secs()))
                );
                if !matches!(self.handle.state(), UpstreamState::Unresponsive { .. }) {
                    tracing::warn!(ping_timeout = %humantime::format_duration(cfg.ping_timeout), "upstream does not answer ping; marked unresponsive");
                }
                self.handle.set_state(UpstreamState::Unresponsive {
                    reason: reason.clone(),
                });
                let stdio = !self.handle.shared.remote;
                (stdio && silent >= cfg.restart_after)
                    .then(|| format!("it was unresponsive ({reason}); restarting it"))
            }
            // The connection is going away; the link's end says why.
            Err(_) => None,
        }
    }

    /// Publishes this upstream's view (None: it left) and tells every
    /// subscriber which merged lists changed.
    fn publish(&self, view: Option<&UpstreamView>) {
        if let (Some(view), Some(conn)) = (view, self.handle.shared.conn.load_full()) {
            let headers = view
                .lists
                .tools
                .iter()
                .filter_map(|tool| {
                    let name = tool.get("name")?.as_str()?.to_owned();
                    let params = crate::xheader::from_schema(tool.get("inputSchema")?).ok()?;
                    (!params.is_empty()).then(|| (name, params.into()))
                })
                .collect();
            conn.set_tool_headers(headers);
        }
        for (i, kind) in ListKind::ALL.iter().enumerate() {
            let n = view.map_or(0, |v| v.lists.get(*kind).len());
            self.handle.shared.counts[i].store(n, Ordering::Relaxed);
        }
        let changed = self
            .catalog
            .publish(self.handle.name(), view.map(|v| Arc::new(v.clone())));
        self.events.lists_changed(&changed);
    }
}

/// The health-check state of one upstream life.
struct Health<'c> {
    /// When the next periodic ping is due.
    next_ping: tokio::time::Instant,
    /// The ping in flight, if any.
    ping: Option<std::pin::Pin<Box<dyn std::future::Future<Output = Answer> + Send + 'c>>>,
    /// When the first unanswered ping of the current silence was sent.
    unresponsive_since: Option<Instant>,
}

impl Health<'_> {
    fn new(cfg: &crate::config::HealthConfig) -> Self {
        Self {
            next_ping: tokio::time::Instant::now() + cfg.ping_interval,
            ping: None,
            unresponsive_since: None,
        }
    }
}

/// Adds the list kinds a notification says are out of date.
fn collect_stale(note: &ListsChanged, out: &mut Vec<ListKind>) {
    for kind in note.0 {
        if !out.contains(kind) {
            out.push(*kind);
        }
    }
}

/// Exponential backoff with ±25% jitter: 250 ms doubling up to 30 s.
fn backoff(attempt: u32) -> Duration {
    let exp = BACKOFF_BASE.saturating_mul(1u32 << attempt.min(16));
    let capped = exp.min(BACKOFF_MAX);
    let jitter = rand::random_range(0.75..1.25);
    capped.mul_f64(jitter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_caps() {
        assert!(backoff(0) <= Duration::from_millis(313));
        assert!(backoff(3) >= Duration::from_millis(1500));
        for attempt in [10, 20, 40, u32::MAX] {
            assert!(backoff(attempt) <= BACKOFF_MAX.mul_f64(1.25));
        }
    }
}
