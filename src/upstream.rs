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
mod identities;
mod interest;
mod isolated;
pub(crate) mod journal;
pub(crate) mod link;
mod listen;
mod message;
pub(crate) mod noise;
pub(crate) mod protect;
mod subscriptions;
mod supervisor;
#[cfg(test)]
pub(crate) mod test_support;
pub(crate) mod transport;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::{ArcSwap, ArcSwapOption};
use serde_json::value::RawValue;
use tokio::sync::watch;

pub(crate) use connection::{
    Answer, CallStream, Connection, ListsChanged, Prepared, ProgressRoute, Sent,
};
pub(crate) use connection::{Payload, Request};
pub(crate) use events::{
    AskRefused, ClientAnswer, ClientAsk, InputAsk, UpstreamEvents, check_declared,
};
pub(crate) use handshake::ServerHello;
pub(crate) use identities::CONNECT_TOOL;
pub(crate) use identities::authorization_required;
pub(crate) use interest::Interest;
pub(crate) use interest::Subscribed;
pub(crate) use message::Origin;
pub(crate) use subscriptions::{SubscriberId, SubscriptionTable};
pub(crate) use supervisor::spawn;

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
    /// `refused`: this request's own POST was refused for it, so the
    /// upstream never ran it.
    #[error("upstream '{upstream}' lost the session; it is being re-initialized")]
    SessionExpired { upstream: String, refused: bool },
    /// Its concurrency cap and wait queue are full (`limits`).
    #[error("upstream '{upstream}' is saturated: {reason}")]
    Overloaded {
        upstream: String,
        reason: String,
        retry_after: Duration,
    },
    /// Its circuit breaker refuses calls for now (`circuit_breaker`).
    #[error("upstream '{upstream}' is not being called: {reason}")]
    CircuitOpen {
        upstream: String,
        reason: String,
        retry_after: Duration,
    },
    /// A failure that would have been retried, and why it was not.
    #[error("upstream '{upstream}' failed ({cause}); not retried: {why}")]
    NotRetried {
        upstream: String,
        cause: String,
        why: String,
    },
    /// The gateway withdrew the request: the client cancelled it, its
    /// session ended, or the gateway is shutting down.
    #[error("request cancelled: {reason}")]
    Cancelled { upstream: String, reason: String },
    /// The upstream refused the gateway's token (HTTP 401); the token is
    /// dropped and the next request fetches another.
    #[error("upstream '{upstream}' refused the request: {detail}")]
    Unauthorized { upstream: String, detail: String },
    /// No token could be had for this upstream (and this caller).
    #[error("upstream '{upstream}' cannot be called: {error}")]
    Credential {
        upstream: String,
        error: Box<crate::credentials::CredentialError>,
    },
    /// The caller must connect their account first (`auth.mode: user`):
    /// the URL to do it at.
    #[error("upstream '{upstream}' acts as each user, and you have not connected your account yet: open {} to connect it, then call again", start.url)]
    AuthorizationRequired {
        upstream: String,
        start: Box<crate::credentials::FlowStart>,
    },
    /// The upstream answered with a JSON-RPC error; it is passed on as is.
    #[error("upstream '{upstream}' answered with an error")]
    Rpc {
        upstream: String,
        /// The error's `code`, read once where the answer came in.
        code: i64,
        error: Box<RawValue>,
    },
}

impl UpstreamError {
    /// When a client refused by the upstream's protection may try again.
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Overloaded { retry_after, .. } | Self::CircuitOpen { retry_after, .. } => {
                Some(*retry_after)
            }
            _ => None,
        }
    }

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
            Self::Overloaded { reason, .. } | Self::CircuitOpen { reason, .. } => reason.clone(),
            Self::NotRetried { cause, .. } => cause.clone(),
            Self::Cancelled { reason, .. } => format!("cancelled: {reason}"),
            Self::Rpc { error, .. } => format!("it answered with an error: {}", error.get()),
            Self::Unauthorized { detail, .. } => detail.clone(),
            Self::Credential { error, .. } => error.to_string(),
            Self::AuthorizationRequired { .. } => "the user has not connected".into(),
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
    /// When the upstream was configured (its first start began).
    created: std::time::Instant,
    /// Whether its first start has ended, ready or failed.
    settled_once: AtomicBool,
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
    /// Which upstreams' URIs are exposed unchanged (the catalog decides).
    uri_forms: Arc<crate::catalog::UriForms>,
    /// Whether `/readyz` waits for it.
    required: bool,
    /// How it is reached, for `/status` (no URL or command: they may hold secrets).
    transport: &'static str,
    /// Items it contributes per list kind, as last published.
    counts: [std::sync::atomic::AtomicUsize; 4],
    /// Its per-session instances (`isolation: per-session`); none for a
    /// shared-only upstream and for an instance itself.
    instances: Option<Arc<isolated::Instances>>,
    /// Its per-identity sessions (an `auth.mode` that acts as each caller).
    identities: Option<Arc<identities::IdentityPool>>,
    /// How it obtains tokens (an `auth:` section); on the shared handle only.
    credentials: Option<Arc<crate::credentials::UpstreamCredentials>>,
    /// Set once one of its identity sessions provided its lists (an
    /// upstream that holds the place: see [`UpstreamHandle::warm`]).
    identity_lists: Arc<AtomicBool>,
    /// Its concurrency cap, circuit breaker and retry budget.
    protect: protect::Protection,
    /// Its uptime and recent errors, for the operator's page.
    journal: journal::Journal,
}

impl UpstreamHandle {
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.shared.name
    }

    /// Its concurrency cap, circuit breaker and retry budget.
    pub(crate) fn protection(&self) -> &protect::Protection {
        &self.shared.protect
    }

    /// How long a call waits for the upstream while it (re)starts.
    pub(crate) fn start_wait(&self) -> Duration {
        self.shared.start_wait
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

    /// The connection a call of downstream session `session` by `caller`
    /// goes to: the caller's own upstream session when the upstream acts
    /// as each caller (started on first use), the session's own instance
    /// under `isolation: per-session` (started on its first call), each
    /// waited for until `deadline`; else the shared one (as
    /// [`Self::connection_on_demand`]). Stateless requests (no session)
    /// use the shared one, or the caller's own. Also returns the handle of
    /// the connection's supervisor, where a retry waits for a new one.
    pub(crate) async fn connection_for(
        &self,
        session: Option<SubscriberId>,
        caller: Option<&crate::auth::Identity>,
        deadline: tokio::time::Instant,
    ) -> Result<(Arc<Connection>, UpstreamHandle), UpstreamError> {
        if let (Some(identities), Some(credentials)) =
            (&self.shared.identities, &self.shared.credentials)
        {
            let session =
                match identities::session_for(self, identities, credentials, caller).await? {
                    Some(session) => session,
                    None => return Ok((self.connection_on_demand(deadline).await?, self.clone())),
                };
            let conn = isolated::connection_of(&session, deadline).await?;
            return Ok((conn, session));
        }
        match (session, &self.shared.instances) {
            (Some(session), Some(instances)) => {
                let instance = instances.instance(session)?;
                let conn = isolated::connection_of(&instance, deadline).await?;
                Ok((conn, instance))
            }
            _ => Ok((self.connection_on_demand(deadline).await?, self.clone())),
        }
    }

    /// Whether it acts as each caller (`auth.mode: token_exchange` or
    /// `user`): each caller's calls go to its own upstream session.
    pub(crate) fn acts_as_each_caller(&self) -> bool {
        self.shared.identities.is_some()
    }

    /// Whether it acts as each caller with no service identity: its own
    /// supervisor connects to nothing (see `supervisor::Role::Placeholder`).
    pub(crate) fn holds_place(&self) -> bool {
        self.shared
            .credentials
            .as_ref()
            .is_some_and(|c| c.mode().per_identity().is_some() && c.service().is_none())
    }

    /// For an upstream that holds the place and has no lists yet: brings up
    /// `caller`'s own session (if the caller can have one without being
    /// asked anything), whose lists then fill the catalog; waits up to
    /// `start_wait`. True if it did.
    pub(crate) async fn warm(&self, caller: Option<&crate::auth::Identity>) -> bool {
        if !self.holds_place() || self.shared.identity_lists.load(Ordering::Relaxed) {
            return false;
        }
        let (Some(caller), Some(credentials)) = (caller, &self.shared.credentials) else {
            return false;
        };
        let ready = match credentials.mode() {
            crate::config::AuthMode::User { .. } => {
                credentials.connected(&caller.client).await.unwrap_or(false)
            }
            _ => caller.subject_token().is_some(),
        };
        if !ready {
            return false;
        }
        let deadline = tokio::time::Instant::now() + self.shared.start_wait;
        self.connection_for(None, Some(caller), deadline)
            .await
            .is_ok()
    }

    /// How it obtains tokens, if it has an `auth:` section.
    pub(crate) fn credentials(&self) -> Option<&Arc<crate::credentials::UpstreamCredentials>> {
        self.shared.credentials.as_ref()
    }

    /// The identities with a session of their own here now (an upstream
    /// that acts as each caller), sorted; none otherwise.
    pub(crate) fn identities(&self) -> Option<Vec<Arc<str>>> {
        self.shared.identities.as_ref().map(|p| p.identities())
    }

    /// `identity`'s own session here, if it has one now.
    pub(crate) fn identity_session(&self, identity: &str) -> Option<UpstreamHandle> {
        self.shared.identities.as_ref()?.existing(identity)
    }

    /// Closes `identity`'s own session here (it disconnected).
    pub(crate) fn close_identity(&self, identity: &str) -> bool {
        self.shared
            .identities
            .as_ref()
            .is_some_and(|p| p.close(identity))
    }

    /// Stops session `session`'s own instance, if it has one here (the
    /// session ended).
    pub(crate) fn release_instance(&self, session: SubscriberId) {
        if let Some(instances) = &self.shared.instances {
            instances.release(session);
        }
    }

    /// Per-session instances (or per-identity sessions) running now; none
    /// unless `isolation: per-session` (or an `auth.mode` that acts as each
    /// caller).
    pub(crate) fn instance_count(&self) -> Option<usize> {
        match (&self.shared.instances, &self.shared.identities) {
            (Some(i), _) => Some(i.len()),
            (None, Some(p)) => Some(p.len()),
            (None, None) => None,
        }
    }

    /// The handles of its per-session instances and per-identity sessions
    /// running now.
    pub(crate) fn instance_handles(&self) -> Vec<UpstreamHandle> {
        let mut handles = self
            .shared
            .instances
            .as_ref()
            .map_or_else(Vec::new, |i| i.handles());
        if let Some(identities) = &self.shared.identities {
            handles.extend(identities.handles());
        }
        handles
    }

    /// The process ids of its per-session instances' children.
    pub(crate) fn instance_pids(&self) -> Vec<u32> {
        self.shared
            .instances
            .as_ref()
            .map_or_else(Vec::new, |i| i.pids())
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

    /// Whether it keeps the gateway out of `/readyz` now. A required
    /// upstream does while it is not ready. Any other does only during its
    /// first start, and for at most its `start_wait`: a new replica then
    /// takes traffic with a full catalog, and an optional upstream that is
    /// down (on every replica, say) never takes the replicas out.
    pub(crate) fn holds_readiness(&self) -> bool {
        let state = self.state();
        if self.shared.required {
            return state != UpstreamState::Ready || self.shared.protect.is_open();
        }
        state == UpstreamState::Starting
            && !self.shared.settled_once.load(Ordering::Relaxed)
            && self.shared.created.elapsed() < self.shared.start_wait
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
        self.shared.uri_forms.namespaces(self.name())
    }

    /// Lines of stderr or stray stdout dropped by the log rate limit.
    pub(crate) fn suppressed_lines(&self) -> u64 {
        self.shared.noise.suppressed()
    }

    /// Whether the upstream speaks the modern era (as of its last handshake).
    pub(crate) fn is_modern(&self) -> bool {
        self.hello().is_some_and(|h| h.modern)
    }

    /// Since when it has been ready, and its recent errors.
    pub(crate) fn journal(&self) -> &journal::Journal {
        &self.shared.journal
    }

    fn set_state(&self, state: UpstreamState) {
        if state != UpstreamState::Starting {
            self.shared.settled_once.store(true, Ordering::Relaxed);
        }
        match &state {
            UpstreamState::Down { reason, .. } => {
                self.shared.journal.error(&format!("down: {reason}"))
            }
            UpstreamState::Unresponsive { reason } => self
                .shared
                .journal
                .error(&format!("unresponsive: {reason}")),
            _ => {}
        }
        self.shared.journal.state_changed(matches!(
            state,
            UpstreamState::Ready | UpstreamState::Unresponsive { .. }
        ));
        self.shared.state.send_replace(state);
    }
}

/// The configured upstreams by name. Swapped whole when the set changes.
#[derive(Default)]
pub(crate) struct UpstreamSet {
    by_name: ArcSwap<crate::hashing::HashMap<Arc<str>, UpstreamHandle>>,
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

    /// The upstreams that act as each caller and hold the place (none
    /// allocates nothing: it is asked on every list request).
    pub(crate) fn holding_place(&self) -> Vec<UpstreamHandle> {
        self.by_name
            .load()
            .values()
            .filter(|h| h.holds_place())
            .cloned()
            .collect()
    }
}
