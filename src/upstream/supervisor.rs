//! One upstream's supervisor: the actor task that owns its transport.
//!
//! [`spawn`] starts it on the gateway's tracker. Each life of the upstream
//! starts the link, runs the handshake (discover, else initialize), has
//! [`Interest`] restore what clients hold there, publishes the lists, and
//! then serves: refetching lists on `list_changed`, keeping a modern
//! upstream's listen stream open, and pinging it. When the link ends it
//! marks the upstream down, withdraws its items, fails what is pending, and
//! restarts with backoff (at once for an HTTP session the server forgot).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::link::Link;
use super::{
    Answer, Connection, Interest, ListsChanged, ServerHello, Shared, UpstreamError, UpstreamEvents,
    UpstreamHandle, UpstreamState, connection, handshake, identities, isolated, listen, noise,
};
use crate::catalog::{CatalogStore, ListKind, UpstreamLists, UpstreamView};
use crate::config::{EraChoice, Isolation, UpstreamConfig};
use crate::credentials::UpstreamCredentials;
use crate::credentials::cell::TokenCell;
use crate::protocol::Method;

mod children;

use children::{Parts, identity_starter, instance_starter};

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

/// Starts the supervisor for one upstream on `tracker`: its events go to
/// `events`, and `interest` is what clients want of it. Under `isolation:
/// per-session` its handle also carries the pool of per-session instances,
/// each a supervisor of its own (see [`isolated`]); with an `auth:` that
/// acts as each caller, the pool of per-identity sessions (see
/// [`identities`]), whose tokens `credentials` hands out.
#[allow(clippy::too_many_arguments)]
pub(crate) fn spawn(
    config: UpstreamConfig,
    catalog: Arc<CatalogStore>,
    events: Arc<dyn UpstreamEvents>,
    interest: Arc<Interest>,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
    credentials: Option<Arc<UpstreamCredentials>>,
) -> (UpstreamHandle, tokio::task::JoinHandle<()>) {
    let name: Arc<str> = config.name.as_str().into();
    let noise: Arc<noise::NoiseFilter> = Arc::default();
    let service = credentials.as_ref().and_then(|c| c.service());
    // Acting as each caller with no service identity: nothing to connect
    // as until a caller comes (the shared supervisor only holds the place).
    let placeholder = credentials
        .as_ref()
        .is_some_and(|c| c.mode().per_identity().is_some())
        && service.is_none();
    let parts = Parts {
        config: config.clone(),
        catalog: catalog.clone(),
        events: events.clone(),
        interest: interest.clone(),
        shutdown: shutdown.clone(),
        tracker: tracker.clone(),
        noise: noise.clone(),
    };
    // Set once an identity's session has provided the lists.
    let identity_lists = Arc::new(AtomicBool::new(false));
    let identities = credentials.as_ref().and_then(|credentials| {
        let sessions = credentials.mode().per_identity()?;
        let start = identity_starter(
            parts.clone(),
            credentials.clone(),
            placeholder.then(|| identity_lists.clone()),
        );
        Some(Arc::new(identities::IdentityPool::new(
            name.clone(),
            sessions.max_identities,
            sessions.idle_timeout,
            start,
        )))
    });
    let instances = match &config.transport {
        crate::config::Transport::Stdio(stdio) => match stdio.isolation {
            Isolation::PerSession { max_instances } => {
                let start = instance_starter(parts.clone());
                Some(Arc::new(isolated::Instances::new(
                    name.clone(),
                    max_instances,
                    events.clone(),
                    start,
                )))
            }
            Isolation::Shared => None,
        },
        _ => None,
    };
    let uri_forms = catalog.uri_forms();
    let mut handle = new_handle(
        &config,
        uri_forms,
        noise,
        instances,
        identities,
        credentials,
    );
    if let Some(shared) = Arc::get_mut(&mut handle.shared) {
        shared.identity_lists = identity_lists;
    }
    if let Some(pool) = &handle.shared.identities {
        spawn_sweep(pool.clone(), shutdown.clone(), tracker);
    }
    let supervisor = Supervisor {
        handle: handle.clone(),
        config,
        catalog,
        events,
        interest,
        shutdown,
        tasks: tracker.clone(),
        role: match placeholder {
            true => Role::Placeholder,
            false => Role::Shared,
        },
        bearer: service,
        published: None,
        identity: None,
    };
    let span = tracing::info_span!("upstream", upstream = %name);
    let task = tracker.spawn(tracing::Instrument::instrument(supervisor.run(), span));
    (handle, task)
}

/// Closes idle per-identity sessions until `shutdown`.
fn spawn_sweep(
    pool: Arc<identities::IdentityPool>,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) {
    let every = pool.sweep_every();
    let sweep = async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tokio::select! {
                _ = tick.tick() => { pool.sweep(); }
                () = shutdown.cancelled() => return,
            }
        }
    };
    tracker.spawn(tracing::Instrument::instrument(
        sweep,
        tracing::Span::current(),
    ));
}

/// A fresh handle for one supervisor (shared or a session's instance).
fn new_handle(
    config: &UpstreamConfig,
    uri_forms: Arc<crate::catalog::UriForms>,
    noise: Arc<noise::NoiseFilter>,
    instances: Option<Arc<isolated::Instances>>,
    identities: Option<Arc<identities::IdentityPool>>,
    credentials: Option<Arc<UpstreamCredentials>>,
) -> UpstreamHandle {
    UpstreamHandle {
        shared: Arc::new(Shared {
            name: config.name.as_str().into(),
            timeout: config.timeout,
            start_wait: config.start_wait,
            created: std::time::Instant::now(),
            settled_once: AtomicBool::new(false),
            call_timeouts: AtomicU32::new(0),
            call_timeouts_limit: config.health.call_timeouts,
            ping_now: tokio::sync::Notify::new(),
            noise,
            conn: ArcSwapOption::empty(),
            hello: ArcSwapOption::empty(),
            state: watch::Sender::new(UpstreamState::Starting),
            restarts: AtomicU64::new(0),
            pid: AtomicU32::new(0),
            listen_changed: tokio::sync::Notify::new(),
            listen_generation: watch::Sender::new(0),
            reconnect_now: tokio::sync::Notify::new(),
            remote: matches!(config.transport, crate::config::Transport::Remote(_)),
            uri_forms,
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
            instances,
            identities,
            credentials,
            identity_lists: Arc::default(),
            protect: super::protect::Protection::new(config.name.as_str().into(), &config.protect),
            journal: Default::default(),
        }),
    }
}

/// Which supervisor this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The upstream's one shared instance: it provides the catalog, holds
    /// the subscriptions and serves every call not bound to an instance.
    Shared,
    /// A session's own instance (`isolation: per-session`): it serves that
    /// session's calls only, contributes nothing to the catalog, and its
    /// list changes are announced to that session alone.
    Instance,
    /// An upstream that acts as each caller and has no service identity
    /// to connect as: it connects to nothing, and holds the upstream's
    /// place (its state, and the `connect` tool of `mode: user`) until an
    /// identity's session provides the lists.
    Placeholder,
    /// One identity's own session (`auth.mode: token_exchange` or `user`):
    /// it serves that identity's calls only; `publishes`: its lists are the
    /// catalog's (there is no service session to provide them).
    Identity { publishes: bool },
}

impl Role {
    /// Whether this supervisor's lists are the upstream's in the catalog.
    fn publishes(self) -> bool {
        matches!(self, Role::Shared | Role::Identity { publishes: true })
    }
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
    role: Role,
    /// Its bearer token (an upstream with an `auth:` section).
    bearer: Option<Arc<TokenCell>>,
    /// Set when it publishes lists (an identity's session that provides
    /// them; the shared handle reads it).
    published: Option<Arc<AtomicBool>>,
    /// The identity whose own session this is (`Role::Identity`).
    identity: Option<Arc<str>>,
}

impl Supervisor {
    async fn run(self) {
        if self.role == Role::Placeholder {
            return self.hold_place().await;
        }
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
        self.stopped().await;
    }

    /// The end of a supervisor: stopped, and its instances or identity
    /// sessions stopped and awaited.
    async fn stopped(&self) {
        self.handle.set_state(UpstreamState::Stopped);
        if let Some(instances) = &self.handle.shared.instances {
            instances.stop_all().await;
        }
        if let Some(identities) = &self.handle.shared.identities {
            identities.stop_all().await;
        }
    }

    /// [`Role::Placeholder`]: ready without a connection; the catalog
    /// shows the `connect` tool of `mode: user` until an identity's
    /// session publishes the upstream's own lists.
    async fn hold_place(self) {
        let connect = self
            .handle
            .shared
            .credentials
            .as_ref()
            .is_some_and(|c| matches!(c.mode(), crate::config::AuthMode::User { .. }));
        if connect {
            let mut lists = UpstreamLists::default();
            lists
                .tools
                .push(identities::connect_tool(&self.config.name));
            let view = UpstreamView {
                lists,
                instructions: None,
            };
            self.publish_view(Some(&view));
        }
        self.handle.set_state(UpstreamState::Ready);
        self.shutdown.cancelled().await;
        self.publish_view(None);
        self.stopped().await;
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
            .with_asks(
                self.tasks.clone(),
                self.config.timeout,
                self.config.roots_result().into(),
            ),
        );
        let mut child = match Link::start(
            name.clone(),
            &self.config.transport,
            conn.clone(),
            out_rx,
            noise,
            &self.tasks,
            self.bearer.clone(),
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
            // An instance's lists are the shared instance's (the catalog).
            let lists = match self.role.publishes() {
                true => handshake::fetch_lists(&conn, &hello, timeout).await?,
                false => UpstreamLists::default(),
            };
            Ok::<_, UpstreamError>((hello, lists))
        };
        let reason = tokio::select! {
            setup = setup => match setup {
                Ok((hello, lists)) => {
                    let counts: Vec<usize> = ListKind::ALL.iter().map(|k| lists.get(*k).len()).collect();
                    match self.role {
                        Role::Shared => tracing::info!(version = %hello.protocol_version, tools = counts[0], prompts = counts[1], resources = counts[2], templates = counts[3], "upstream ready"),
                        Role::Instance => tracing::info!(version = %hello.protocol_version, pid = child.pid(), "per-session instance ready"),
                        Role::Identity { .. } | Role::Placeholder => tracing::info!(version = %hello.protocol_version, tools = counts[0], "per-identity session ready"),
                    }
                    let view = UpstreamView { lists, instructions: hello.instructions.clone() };
                    let hello = Arc::new(hello);
                    self.handle.shared.hello.store(Some(hello.clone()));
                    self.handle.shared.conn.store(Some(conn.clone()));
                    // Subscriptions and the log level are back in place before
                    // the upstream counts as ready. The connection is visible
                    // first, so a subscription made meanwhile goes straight to
                    // it rather than into a gap.
                    match (self.role, &self.identity) {
                        (Role::Shared, _) => self.interest.restore(&name, &conn, &hello, timeout).await,
                        (Role::Identity { .. }, Some(identity)) => {
                            self.interest.restore_as(&name, identity, &conn, &hello, timeout).await
                        }
                        // Its session's subscriptions live on the shared instance.
                        _ => self.interest.restore_level(&conn, &hello, timeout).await,
                    }
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
        // Subscriptions live on the shared instance.
        let watched = || match (self.role, &self.identity) {
            (Role::Shared, _) => self.interest.watched_on(conn.upstream()),
            (Role::Identity { .. }, Some(identity)) => {
                self.interest.watched_as(conn.upstream(), identity)
            }
            _ => Vec::new(),
        };
        let mut listen_failures: u32 = 0;
        let mut listening = match hello.modern {
            true => listen::open(conn, hello, watched(), conn.watched_tasks()).await,
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
                    let mut next = listen::open(conn, hello, watched(), conn.watched_tasks()).await;
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
                    listening = listen::open(conn, hello, watched(), conn.watched_tasks()).await;
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
            if !self.role.publishes() {
                // The session lists from the catalog; it is told to look again.
                self.events.lists_changed(&stale);
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
    /// subscriber which merged lists changed. An identity's session that
    /// provides the lists keeps them in the catalog when it ends: the next
    /// identity's session refreshes them, and calls still find the items.
    fn publish(&self, view: Option<&UpstreamView>) {
        match (self.role, view) {
            (Role::Identity { publishes: true }, Some(_)) | (Role::Shared, _) => {
                self.publish_view(view);
                if let Some(published) = &self.published {
                    published.store(true, Ordering::Relaxed);
                }
            }
            _ => {}
        }
    }

    fn publish_view(&self, view: Option<&UpstreamView>) {
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
