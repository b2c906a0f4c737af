//! mcpmux: a standalone MCP gateway.
//!
//! One MCP client per upstream server is shared by every downstream session,
//! and the upstreams' tools, prompts, resources and templates are served as
//! one namespaced view. The pieces, in the order a request meets them:
//!
//! - [`downstream`]: the guarded HTTP listener (connection cap, timeouts),
//!   axum routes for MCP hosts (Streamable HTTP, legacy SSE, stdio),
//!   sessions, probes.
//! - [`router`]: answers list requests from the catalog and forwards calls to
//!   exactly one upstream, remapping ids and progress tokens.
//! - [`catalog`]: the merged, namespaced snapshot (`ArcSwap`), and paging.
//! - [`policy`]: who may see and use what; each client's view of the
//!   catalog, derived once per list version and set of rules.
//! - [`upstream`]: one supervised actor per upstream server that owns its
//!   transport (a stdio child or an HTTP session), its handshake, its lists
//!   and its health checks.
//! - [`config`]: the YAML file, validated with line and column in every error.
//! - [`protocol`]: the JSON-RPC envelope, kept raw so unknown fields pass through.
//! - [`logging`]: a log that never blocks the gateway.
//! - [`example_server`]: the small demo MCP server (`mcpmux example-server`)
//!   of the demo and example configs; the tests' fixture binary builds on it.
//!
//! [`Gateway::start`] wires these together; `main` only parses the command
//! line and waits for a signal.
#![forbid(unsafe_code)]

pub mod auth;
pub mod catalog;
pub mod config;
pub mod downstream;
pub mod example_server;
pub mod logging;
pub mod metrics;
pub mod notify;
pub(crate) mod pattern;
pub mod policy;
pub mod protocol;
pub mod reload;
pub mod router;
pub mod sse;
pub mod upstream;
pub mod xheader;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use catalog::CatalogStore;
use config::Config;
use downstream::AppState;
use downstream::session::SessionTable;
use notify::NotifyHub;
use router::Router;
use upstream::{UpstreamHandle, UpstreamSet, UpstreamState};

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
        let upstreams = Arc::new(UpstreamSet::default());
        let views = Arc::new(policy::Views::new(catalog.clone(), config.policy.as_ref()));
        let interest = Arc::new(upstream::Interest::new(upstreams.clone()));
        let hub = Arc::new(NotifyHub::with_views(interest.clone(), views));
        let manager = Arc::new(reload::UpstreamManager::new(
            catalog.clone(),
            upstreams.clone(),
            hub.clone(),
            interest,
            upstream_shutdown.clone(),
            tracker.clone(),
        ));
        manager.start_all(&config.upstreams);
        let sessions = Arc::new(SessionTable::new(hub.clone(), &config.sessions));
        sessions.spawn_sweeper(upstream_shutdown.clone(), &tracker);

        let state = Arc::new(AppState {
            router: Router::new(catalog, upstreams, hub, Arc::default(), config.page_size)
                .with_tasks(tracker.clone()),
            sessions,
            http: config.http.clone(),
            shutdown: http_shutdown.clone(),
            drain_grace: config.shutdown_grace,
            loopback_listener: std::sync::atomic::AtomicBool::new(false),
            auth: arc_swap::ArcSwapOption::from(auth::Authenticator::start(
                &config.auth,
                &upstream_shutdown,
                &tracker,
            )),
            throttle: arc_swap::ArcSwapOption::from(
                config
                    .rate_limit
                    .map(|limit| Arc::new(downstream::throttle::Throttle::new(limit))),
            ),
            connections: std::sync::OnceLock::new(),
            tracker: tracker.clone(),
        });
        spawn_forgetting(state.clone(), upstream_shutdown.clone(), &tracker);
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
        let app = downstream::app(self.state.clone())
            .into_make_service_with_connect_info::<downstream::listener::Peer>();
        let stop = self.http_shutdown.clone();
        let serve = async move {
            let serve = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await });
            if let Err(e) = serve.await {
                tracing::error!(error = %e, "HTTP server failed");
            }
        };
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

    /// Applies a new config's upstreams as a diff, and its policy (see
    /// [`reload`]).
    pub async fn reload(&self, config: &Config) -> reload::Diff {
        let diff = self.manager.apply(&config.upstreams).await;
        self.manager.apply_policy(config.policy.as_ref());
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

    /// State shared by the downstream transports.
    pub fn state(&self) -> &Arc<AppState> {
        &self.state
    }

    /// The handle of a configured upstream.
    pub fn upstream(&self, name: &str) -> Option<UpstreamHandle> {
        self.state.router.upstreams().get(name)
    }

    /// Number of live downstream sessions.
    pub fn session_count(&self) -> usize {
        self.state.sessions.len()
    }

    /// A receiver that sees the session count change.
    pub fn watch_sessions(&self) -> tokio::sync::watch::Receiver<usize> {
        self.state.sessions.watch_count()
    }

    /// The notify hub: subscription tables and per-subscriber backlogs.
    pub fn hub(&self) -> &Arc<NotifyHub> {
        self.state.router.hub()
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
) -> std::io::Result<()> {
    let gateway = Gateway::start(config, listener)?;
    if let Some(path) = config_path {
        gateway.watch_config(path);
    }
    signal.await;
    gateway.shutdown().await;
    Ok(())
}
