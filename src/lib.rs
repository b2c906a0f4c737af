//! mcpmux: a standalone MCP gateway.
//!
//! One MCP client per upstream server is shared by every downstream session,
//! and the upstreams' tools, prompts, resources and templates are served as
//! one namespaced view, over Streamable HTTP, legacy SSE or stdio.
//!
//! # Public API
//!
//! The library is what the `mcpmux` binary and the integration tests run;
//! everything else in it is internal. The public API is:
//!
//! - [`Config`] (with [`Lookup`], [`ConfigError`] and its [`Issue`]s, the
//!   [`DEMO_CONFIG`] and [`DEFAULT_LISTEN`]): a validated config file.
//! - [`Gateway`]: a running gateway. [`Gateway::start`] (or [`Gateway::new`]
//!   then [`Gateway::serve_http`] or [`Gateway::serve_stdio`]) starts it,
//!   [`Gateway::reload`] and [`Gateway::watch_config`] apply a new config
//!   (returning a [`ReloadDiff`]), [`Gateway::ready`] and
//!   [`Gateway::settled`] wait for the upstreams, [`Gateway::shutdown`]
//!   stops it. [`run`] does all of it until a signal.
//! - Read-only views: [`Gateway::upstream`] gives an [`Upstream`] (its
//!   [`UpstreamState`], restarts, child pid, protocol era);
//!   [`Gateway::stats`] gives [`Stats`] (sessions, subscribers,
//!   subscriptions and each subscriber's [`Backlog`]);
//!   [`Gateway::resumable_streams`] gives a session's [`ResumableStreams`].
//! - In-process clients: [`Gateway::local_session`] gives a
//!   [`LocalSession`] (a 2025-era session with notifications) and
//!   [`Gateway::local_stateless`] a [`LocalStateless`] one (2026-07-28
//!   requests), each acting for an optional [`Identity`] under the policy.
//! - [`limits`]: bounds a client can observe on the wire.
//! - [`logging`]: the process's non-blocking log; [`raise_fd_limit`].
//! - [`example_server`]: the bundled MCP server behind
//!   `mcpmux example-server`.
//! - [`import`]: a host's MCP server config as mcpmux YAML
//!   (`mcpmux import`); [`CONFIG_SCHEMA`]: the config's JSON Schema
//!   (`mcpmux schema`).
//! - [`UserConnections`]: the accounts users connected at `auth.mode: user`
//!   upstreams, read from the token store ([`Connection`]s) and revoked
//!   (a [`Revocation`]; [`ConnectionsError`]), as `mcpmux connections` does.
//!
//! # Inside
//!
//! The pieces, in the order a request meets them (ARCHITECTURE.md has the
//! tour): `downstream` (the guarded HTTP listener, the axum routes for MCP
//! hosts, sessions, probes), `router` (answers lists from the catalog and
//! forwards calls to exactly one upstream, through its concurrency cap,
//! circuit breaker and the result `cache`), `catalog` (the merged,
//! namespaced snapshot), `policy` (who may see and use what), `notify` (the
//! subscribers and their outboxes), `upstream` (one supervised actor per
//! upstream server), `config`, `reload` and `protocol`.
#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

pub(crate) mod auth;
pub(crate) mod cache;
pub(crate) mod catalog;
pub(crate) mod config;
pub(crate) mod credentials;
pub(crate) mod downstream;
pub mod example_server;
pub(crate) mod hashing;
pub mod import;
pub(crate) mod in_place;
pub(crate) mod inline_wake;
mod inspect;
pub(crate) mod live;
mod local;
pub mod logging;
pub(crate) mod metrics;
pub(crate) mod notify;
pub(crate) mod oauth_server;
pub(crate) mod pattern;
pub(crate) mod policy;
pub(crate) mod protocol;
pub(crate) mod reload;
pub(crate) mod replica;
pub(crate) mod router;
pub(crate) mod seal;
pub(crate) mod session_store;
pub(crate) mod sse;
pub(crate) mod telemetry;
pub(crate) mod upstream;
pub(crate) mod xheader;

pub use auth::Identity;
pub use config::{Config, ConfigError, DEFAULT_LISTEN, DEMO_CONFIG, Issue, Lookup};
pub use credentials::admin::{Connection, ConnectionsError, Revocation, UserConnections};
pub use credentials::own::{DisconnectError, disconnect as disconnect_own};
pub use inspect::{ResumableStreams, Stats, Upstream};
pub use local::{LocalSession, LocalStateless};
pub use notify::outbox::Backlog;
pub use oauth_server::operator::{Grant as LoginGrant, GrantsError, list_grants, revoke_grants};
pub use reload::Diff as ReloadDiff;
pub use upstream::UpstreamState;

/// The JSON Schema of the config file (`mcpmux schema`; also
/// docs/config.schema.json), for editors that validate and complete YAML.
pub const CONFIG_SCHEMA: &str = include_str!("../docs/config.schema.json");

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use catalog::CatalogStore;
use downstream::AppState;
use downstream::session::SessionTable;
use notify::NotifyHub;
use router::Router;
use upstream::UpstreamSet;

/// Bounds a client can observe on the wire, for clients and tests that
/// check them.
pub mod limits {
    use std::time::Duration;

    /// Log and other messages queued per session before the oldest are
    /// dropped (and counted in [`Backlog::dropped`](crate::Backlog)).
    pub const MESSAGE_CAPACITY: usize = crate::notify::outbox::MESSAGE_CAPACITY;
    /// Delivered notifications a session keeps for `Last-Event-ID` replay.
    pub const REPLAY_CAPACITY: usize = crate::notify::outbox::REPLAY_CAPACITY;
    /// The `retry:` a 2025-era answer streamed as SSE advises in its
    /// priming event: how long a client waits before resuming it.
    pub const RESUME_RETRY: Duration = crate::downstream::resume::RETRY;
}

/// Raises the process's soft open-file limit to its hard limit, so the
/// gateway's connection cap (not the kernel) decides when clients are
/// turned away. Returns the limit in force.
pub fn raise_fd_limit() -> u64 {
    downstream::listener::raise_fd_limit()
}

/// A running gateway: the HTTP server, the upstream actors, and the tasks
/// that keep sessions tidy.
pub struct Gateway {
    config: Config,
    /// The upstream supervisors, for reloads.
    manager: Arc<reload::UpstreamManager>,
    state: Arc<AppState>,
    /// Stops accepting connections and ends HTTP streams.
    http_shutdown: CancellationToken,
    /// Stops the upstream supervisors (and their children) and the sweeper.
    upstream_shutdown: CancellationToken,
    tracker: TaskTracker,
    /// The HTTP server, when serving HTTP, and its address.
    server: Option<(SocketAddr, JoinHandle<()>)>,
}

impl Gateway {
    /// Starts upstreams and serves MCP over HTTP on `listener`.
    pub fn start(config: Config, listener: TcpListener) -> std::io::Result<Gateway> {
        let mut gateway = Self::new(config);
        gateway.serve_http(listener)?;
        Ok(gateway)
    }

    /// Starts the upstreams and the session sweeper; serves nothing yet.
    /// Call it (and [`Gateway::start`]) inside a tokio runtime.
    pub fn new(config: Config) -> Gateway {
        // One cancellation tree: the root stops everything; the HTTP side
        // is its child, cancelled first at shutdown so requests can drain
        // while upstreams are still up.
        let upstream_shutdown = CancellationToken::new();
        let http_shutdown = upstream_shutdown.child_token();
        let tracker = TaskTracker::new();

        let catalog = Arc::new(CatalogStore::new(config.upstreams.iter().map(|u| {
            (
                Arc::from(u.name.as_str()),
                u.prefix.clone(),
                u.namespace_uris,
            )
        })));
        catalog.set_shapes(config.upstreams.iter().map(|u| (u.name.as_str(), &u.shape)));
        catalog.set_views(
            catalog::ViewSpec::whole(config.naming.mode),
            config
                .endpoints
                .iter()
                .map(catalog::ViewSpec::endpoint)
                .collect(),
            config.uri_naming.mode,
        );
        let upstreams = Arc::new(UpstreamSet::default());
        let views = Arc::new(policy::Views::new(
            catalog.clone(),
            config.policy.as_ref(),
            &config.endpoints,
        ));
        let interest = Arc::new(upstream::Interest::new(upstreams.clone()));
        let hub = Arc::new(NotifyHub::with_views(interest.clone(), views));
        let connector = credentials::connector_for(&config);
        let manager = Arc::new(reload::UpstreamManager::new(
            catalog.clone(),
            upstreams.clone(),
            hub.clone(),
            interest,
            upstream_shutdown.clone(),
            tracker.clone(),
            connector.clone(),
        ));
        manager.start_all(&config.upstreams);
        let mut sessions = SessionTable::new(hub.clone(), &config.sessions);
        let store = config.session_store.as_ref().and_then(|url| {
            // The config checked the URL; connecting is lazy.
            session_store::SessionStore::open(url.expose(), config.sessions.idle_timeout)
                .inspect_err(|e| tracing::error!(error = %e, "session_store: not used"))
                .ok()
        });
        if let Some(store) = &store {
            sessions = sessions.with_store(store.clone());
        }
        let sessions = Arc::new(sessions);
        sessions.spawn_sweeper(upstream_shutdown.clone(), &tracker);
        let oauth_server =
            downstream::start_oauth_server(&config, None, &upstream_shutdown, &tracker);

        let state = Arc::new(AppState {
            router: {
                let telemetry = telemetry::Telemetry::start(&config.tracing).unwrap_or_else(|e| {
                    tracing::error!(error = %e, "tracing is off");
                    None
                });
                let router = Router::new(catalog, upstreams, hub, Arc::default(), config.page_size)
                    .with_tasks(tracker.clone())
                    .with_telemetry(telemetry);
                match &config.request_state_key {
                    Some(key) => router.with_state_sealer(seal::Sealer::new(key.bytes())),
                    None => router,
                }
            },
            sessions,
            http: config.http.clone(),
            shutdown: http_shutdown.clone(),
            drain_grace: config.shutdown_grace,
            loopback_listener: std::sync::atomic::AtomicBool::new(false),
            auth: arc_swap::ArcSwapOption::from(auth::Authenticator::start(
                &config.auth,
                oauth_server.clone().map(|s| s as Arc<dyn auth::OwnTokens>),
                &upstream_shutdown,
                &tracker,
            )),
            oauth_server: arc_swap::ArcSwapOption::from(oauth_server),
            listen_addr: std::sync::OnceLock::new(),
            throttle: arc_swap::ArcSwapOption::from(
                config
                    .rate_limit
                    .map(|limit| Arc::new(downstream::throttle::Throttle::new(limit))),
            ),
            connections: std::sync::OnceLock::new(),
            connector,
            tracker: tracker.clone(),
            ui: downstream::ui::UiState::new(&config),
            endpoints: arc_swap::ArcSwap::from_pointee(downstream::endpoint::endpoints_of(
                &config.endpoints,
            )),
        });
        spawn_forgetting(state.clone(), upstream_shutdown.clone(), &tracker);
        if let Some(store) = &store {
            downstream::shared::spawn(
                &state,
                store,
                config.sessions.idle_timeout,
                &tracker,
                &upstream_shutdown,
            );
        }
        if config.policy.is_some() && config.auth == config::AuthConfig::Off {
            tracing::warn!(
                "a policy is configured but authentication is off: clients have no identity, so the policy restricts nobody"
            );
        }
        Gateway {
            config,
            manager,
            state,
            http_shutdown,
            upstream_shutdown,
            tracker,
            server: None,
        }
    }

    /// Serves the HTTP endpoints on `listener`.
    pub fn serve_http(&mut self, listener: TcpListener) -> std::io::Result<SocketAddr> {
        let addr = listener.local_addr()?;
        self.state.loopback_listener.store(
            addr.ip().is_loopback(),
            std::sync::atomic::Ordering::Relaxed,
        );
        let (listener, counts) = downstream::listener::guard(
            listener,
            &self.config.http,
            self.http_shutdown.clone(),
            &self.tracker,
        )?;
        let _ = self.state.connections.set(counts);
        self.state.connector.listening_on(addr);
        let _ = self.state.listen_addr.set(addr);
        if let Some(server) = self.state.oauth_server.load_full() {
            server.listening_on(addr);
        }
        let app = downstream::app(self.state.clone());
        let direct = downstream::direct_post(&self.state);
        let serve = downstream::serve::serve(listener, app, direct, self.http_shutdown.clone());
        let span = tracing::info_span!("http", %addr);
        let server = self
            .tracker
            .spawn(tracing::Instrument::instrument(serve, span));
        tracing::info!(%addr, upstreams = self.config.upstreams.len(), "mcpmux listening; MCP endpoint at /mcp");
        if self.state.auth().is_none() && !addr.ip().is_loopback() {
            tracing::warn!(%addr, "AUTHENTICATION IS OFF on a non-loopback address: anyone who can reach it may call every tool of every upstream; configure `auth` (see config/secure.yaml)");
        }
        self.server = Some((addr, server));
        Ok(addr)
    }

    /// Applies a new config's upstreams as a diff (added, removed and
    /// changed upstreams restart; a change of shaping alone does not), and
    /// its policy: the next request of every client is served under it, and
    /// clients whose view changed are told.
    pub async fn reload(&self, config: &Config) -> ReloadDiff {
        let diff = self.manager.apply(&config.upstreams).await;
        self.manager.apply_views(config);
        self.state.set_endpoints(&config.endpoints);
        self.state.ui.reloaded(Some(config), diff.summary());
        diff
    }

    /// Reloads `path` on change or SIGHUP until shutdown.
    pub fn watch_config(&self, path: std::path::PathBuf) {
        let watcher = reload::watch(
            path,
            self.manager.clone(),
            self.state.clone(),
            self.config.clone(),
            self.upstream_shutdown.clone(),
        );
        self.tracker.spawn(watcher);
    }

    /// The address the gateway serves HTTP on.
    ///
    /// # Panics
    /// If it serves no HTTP (the stdio transport).
    pub fn addr(&self) -> SocketAddr {
        self.server
            .as_ref()
            .map(|(addr, _)| *addr)
            .expect("the gateway serves HTTP")
    }

    /// Serves one MCP session (2025 era, newline-delimited JSON-RPC) on
    /// `input` and `output`, as `mcpmux stdio` does on stdin and stdout,
    /// until `input` ends or `signal` resolves; calls still running then get
    /// `shutdown_grace` to finish.
    pub async fn serve_stdio<R, W>(
        &self,
        input: R,
        output: W,
        signal: impl Future<Output = ()>,
    ) -> std::io::Result<()>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let stop = CancellationToken::new();
        let served = downstream::stdio::run(self.state.clone(), input, output, stop.clone());
        tokio::pin!(served, signal);
        tokio::select! {
            result = &mut served => result,
            () = &mut signal => {
                stop.cancel();
                served.await
            }
        }
    }

    /// A configured upstream, by its name in the config.
    pub fn upstream(&self, name: &str) -> Option<Upstream> {
        self.state.router.upstreams().get(name).map(Upstream::new)
    }

    /// Number of live downstream sessions (2025 era, any transport).
    pub fn session_count(&self) -> usize {
        self.state.sessions.len()
    }

    /// A receiver that sees the session count change.
    pub fn watch_sessions(&self) -> tokio::sync::watch::Receiver<usize> {
        self.state.sessions.watch_count()
    }

    /// The sizes of the notification tables now.
    pub fn stats(&self) -> Stats {
        let hub = self.state.router.hub();
        let table = hub.subscriptions();
        Stats {
            sessions: self.state.sessions.len(),
            subscribers: hub.subscriber_count(),
            listen_streams: hub.listener_count(),
            subscribed_uris: table.uri_count(),
            subscriptions: table.entry_count(),
            backlogs: hub.backlogs().into_values().collect(),
            asks_waiting: hub.asks_waiting(),
            parked_calls: self.state.router.parked_calls(),
        }
    }

    /// The resumable answers of the session with this `Mcp-Session-Id`;
    /// none if there is no such session.
    pub fn resumable_streams(&self, session_id: &str) -> Option<ResumableStreams> {
        self.state
            .sessions
            .get(session_id)
            .map(ResumableStreams::new)
    }

    /// An in-process 2025-era session acting for `identity` (none: an
    /// anonymous client, as with authentication off). Its requests skip
    /// HTTP and authentication, but not the policy.
    pub fn local_session(&self, identity: Option<Identity>) -> LocalSession {
        LocalSession::new(self.state.clone(), identity)
    }

    /// In-process stateless (2026-07-28) requests acting for `identity`.
    pub fn local_stateless(&self, identity: Option<Identity>) -> LocalStateless {
        LocalStateless::new(self.state.clone(), identity.map(Arc::new))
    }

    /// Resolves once every upstream has completed its handshake.
    pub async fn ready(&self) {
        for handle in self.state.router.upstreams().all() {
            let mut state = handle.watch_state();
            let _ = state.wait_for(|s| *s == UpstreamState::Ready).await;
        }
    }

    /// Resolves once every upstream's first start has settled: it is ready,
    /// or it failed (and is retrying). Hosts that read the tool list once at
    /// start see every upstream that can come up.
    pub async fn settled(&self) {
        for handle in self.state.router.upstreams().all() {
            let mut state = handle.watch_state();
            let _ = state.wait_for(|s| *s != UpstreamState::Starting).await;
        }
    }

    /// Once every upstream's first start settled, the names that collide in
    /// a view that names items by `prefix_mode: never` (none: the config
    /// holds). Resolves at once when no view does.
    pub async fn naming_conflicts_once_settled(&self) -> Vec<Issue> {
        let never = std::iter::once(self.config.naming)
            .chain(self.config.endpoints.iter().map(|e| e.naming))
            .any(|n| n.mode == config::PrefixMode::Never)
            || self.config.uri_naming.mode == config::PrefixMode::Never;
        if !never {
            return Vec::new();
        }
        self.settled().await;
        reload::naming_conflicts(self.state.router.catalog(), &self.config)
    }

    /// Graceful shutdown: stop accepting, let in-flight requests finish
    /// within `shutdown_grace`, then stop every upstream child.
    pub async fn shutdown(self) {
        tracing::info!("shutting down");
        self.http_shutdown.cancel();
        let grace = self.config.shutdown_grace;
        if let Some((_, mut server)) = self.server
            && tokio::time::timeout(grace, &mut server).await.is_err()
        {
            tracing::warn!(grace = %humantime::format_duration(grace), "requests still running after the grace period; closing them");
            server.abort();
        }
        self.state.sessions.close_all();
        self.upstream_shutdown.cancel();
        self.tracker.close();
        self.tracker.wait().await;
        // Spans still queued go to the collector (a blocking call).
        if let Some(telemetry) = self.state.router.telemetry().cloned() {
            let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
        }
        tracing::info!("shutdown complete");
    }
}

/// Forgets the rate buckets of clients gone quiet, every minute.
fn spawn_forgetting(state: Arc<AppState>, shutdown: CancellationToken, tracker: &TaskTracker) {
    tracker.spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(60));
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    if let Some(throttle) = state.throttle.load_full() {
                        throttle.forget_idle();
                    }
                }
                () = shutdown.cancelled() => return,
            }
        }
    });
}

/// Serves until `signal` resolves, then shuts down gracefully. With a
/// `config_path`, the file is reloaded on change or SIGHUP.
pub async fn run(
    config: Config,
    listener: TcpListener,
    signal: impl Future<Output = ()>,
    config_path: Option<std::path::PathBuf>,
) -> Result<(), RunError> {
    let gateway = Gateway::start(config, listener)?;
    if let Some(path) = config_path {
        gateway.watch_config(path);
    }
    let mut signal = std::pin::pin!(signal);
    let refused = {
        let conflicts = std::pin::pin!(gateway.naming_conflicts_once_settled());
        match futures_util::future::select(signal.as_mut(), conflicts).await {
            futures_util::future::Either::Left(((), _)) => None,
            futures_util::future::Either::Right((issues, _)) => Some(issues),
        }
    };
    match refused {
        Some(issues) if !issues.is_empty() => {
            gateway.shutdown().await;
            return Err(RunError::Names(issues));
        }
        Some(_) => signal.await,
        None => {}
    }
    gateway.shutdown().await;
    Ok(())
}

/// Why [`run`] ended before its signal.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// Names collide in a view that names items by `prefix_mode: never`,
    /// each at the line and column of that `prefix_mode`.
    #[error("{}", .0.iter().map(|i| format!("{}:{}: {}", i.line, i.column, i.message)).collect::<Vec<_>>().join("\n"))]
    Names(Vec<Issue>),
}
