//! Legacy-era downstream sessions: the table keyed by `Mcp-Session-Id`,
//! the sweeper that removes idle sessions, and the HTTP answers about a
//! session (a version it did not negotiate, a session that could not be
//! made).
//!
//! A session that never sends `DELETE` must not leak: the sweeper task runs
//! on the gateway's task tracker and removes any session idle longer than
//! `sessions.idle_timeout` (a session with an open notification stream or a
//! call in flight is not idle). Closing a session cancels its calls in flight and removes its
//! subscriber from the notify hub, which releases its resource subscriptions.
//!
//! Nobody can fill the table and lock others out: a client (a remote
//! address) at `sessions.max_per_client`, or a table at `sessions.max`,
//! makes room by evicting the least recently used *idle* session, of that
//! client or of anyone respectively. Its client gets 404 on its next
//! request and initializes again, as the spec intends. Only when every
//! candidate is busy is the new session refused.

use axum::response::IntoResponse as _;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

// Tokio's clock, so tests can pause and advance it.
use tokio::time::Instant;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use dashmap::DashMap;
use serde_json::value::RawValue;
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument as _;

use super::post_streams::PostStreams;
use super::wire::Refusal;
use crate::notify::{NotifyHub, Subscriber};
use crate::protocol::code;
use crate::router::InflightCalls;

/// Requests one session may have running in tasks of their own at once
/// (the legacy SSE transport answers each POST from a task): enough for a
/// host's parallel calls. Beyond it a POST is refused with 429 and
/// `Retry-After`, like the other per-client limits.
pub(crate) const MAX_REQUEST_TASKS: usize = 64;

/// At a limit, one scan evicts this fraction of the limit at once (at
/// least one session, at most [`MAX_EVICTION_BATCH`]).
const EVICTION_BATCH_DIVISOR: usize = 100;
const MAX_EVICTION_BATCH: usize = 64;

fn eviction_batch(limit: usize) -> usize {
    (limit / EVICTION_BATCH_DIVISOR).clamp(1, MAX_EVICTION_BATCH)
}

/// One client session.
pub(crate) struct Session {
    pub id: Arc<str>,
    /// The protocol version agreed in `initialize` (set once).
    pub protocol_version: std::sync::OnceLock<String>,
    /// For transports whose answers travel on the session's stream (legacy
    /// SSE, stdio): the stream task holds the receiver. Bounded; a request
    /// task waits for room, so only this session's requests slow down.
    pub replies: Option<tokio::sync::mpsc::Sender<String>>,
    /// Calls this session has in flight upstream.
    pub inflight: Arc<InflightCalls>,
    /// The session's outbox and subscriptions in the notify hub.
    pub subscriber: Arc<Subscriber>,
    /// Its resumable POST answers (`text/event-stream`), live and finished.
    pub resumable: PostStreams,
    /// One permit per request running in a task of its own (see
    /// [`MAX_REQUEST_TASKS`]); the task holds it until the answer is queued.
    pub(crate) request_tasks: Arc<Semaphore>,
    /// Milliseconds after the table's epoch of the latest request.
    last_seen: AtomicU64,
    /// Open notification streams; a session with one is never idle.
    streams: AtomicUsize,
    /// Cancelled when the session ends, for tasks serving it.
    pub closed: CancellationToken,
    pub span: tracing::Span,
    /// Whom it counts against for `sessions.max_per_client`: its identity,
    /// or without authentication its remote address (none for stdio).
    client: Option<Arc<str>>,
    /// The authenticated client that created it; every later request on
    /// the session must come from the same one.
    pub identity: Option<Arc<crate::auth::Identity>>,
}

impl Session {
    /// Whether a notification stream of it is open here.
    pub(crate) fn has_stream(&self) -> bool {
        self.streams.load(Ordering::Relaxed) > 0
    }

    /// Open notification streams (`GET /mcp`, `/sse`, stdio).
    pub(crate) fn stream_count(&self) -> usize {
        self.streams.load(Ordering::Relaxed)
    }

    /// Neither a stream open nor a call in flight: it may expire or be evicted.
    fn is_idle(&self) -> bool {
        self.streams.load(Ordering::Relaxed) == 0 && self.inflight.is_empty()
    }

    /// Refuses (400) an `MCP-Protocol-Version` header that differs from the
    /// version the session negotiated. Without the header the client is taken
    /// to speak what it negotiated (2024-11-05 clients never send it).
    #[allow(clippy::result_large_err)]
    pub(crate) fn check_version(
        &self,
        header: Option<&HeaderValue>,
        id: Option<&RawValue>,
    ) -> Result<(), Response> {
        let (Some(header), Some(negotiated)) = (header, self.protocol_version.get()) else {
            return Ok(());
        };
        let header = header.to_str().unwrap_or_default();
        if header == negotiated {
            return Ok(());
        }
        Err(Refusal::new(StatusCode::BAD_REQUEST, code::INVALID_REQUEST, format!(
                "MCP-Protocol-Version {header:?} does not match the version this session negotiated ({negotiated})"
            )).answering(id.map(RawValue::get)).into_response())
    }
}

/// Why a session ended, for logs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CloseReason {
    Deleted,
    Idle,
    /// Made room for a new session (table or per-client limit).
    Evicted,
    /// The transport that carried the session went away.
    Disconnected,
    Shutdown,
    /// Its endpoint is no longer configured (a reload removed it).
    EndpointRemoved,
}

impl CloseReason {
    /// What a call still in flight is told when its session ends.
    fn why_calls_end(self) -> &'static str {
        match self {
            CloseReason::Deleted => "the client ended its session",
            CloseReason::Idle => "the session expired",
            CloseReason::Evicted => "the session was evicted to make room",
            CloseReason::Disconnected => "the client disconnected",
            CloseReason::Shutdown => "the gateway is shutting down",
            CloseReason::EndpointRemoved => "its endpoint was removed from the configuration",
        }
    }
}

/// Every live session. Guards are never held across an await.
pub(crate) struct SessionTable {
    sessions: DashMap<Arc<str>, Arc<Session>, crate::hashing::RandomState>,
    hub: Arc<NotifyHub>,
    epoch: Instant,
    idle_timeout: Duration,
    max_sessions: usize,
    max_per_client: usize,
    /// Sessions per client (identity or remote address); entries leave at zero.
    per_client: DashMap<Arc<str>, usize, crate::hashing::RandomState>,
    /// Sessions evicted so far, for `/metrics`.
    evicted: AtomicU64,
    /// Held by a creator from the limit checks to the insert, so limits are
    /// exact and concurrent creators never pick the same victim. Held for
    /// a few lookups, or one scan of the table when a limit is reached.
    admitting: std::sync::Mutex<()>,
    /// The number of sessions, for anyone who wants to watch it change.
    count: watch::Sender<usize>,
    /// Where sessions are shared with other replicas (`session_store`);
    /// none: they live here only. See `super::shared`.
    store: Option<Arc<crate::session_store::SessionStore>>,
}

/// Counts an open notification stream for as long as it lives.
pub(crate) struct StreamGuard {
    session: Arc<Session>,
    table: Arc<SessionTable>,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.session.streams.fetch_sub(1, Ordering::Relaxed);
        // Idle time starts when the last stream closes.
        self.session
            .last_seen
            .store(self.table.now_ms(), Ordering::Relaxed);
    }
}

/// No session could be made: the limit is reached and every session that
/// counts against it is busy (a stream open or a call in flight).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum TooManySessions {
    #[error(
        "the gateway has reached its limit of {0} sessions (sessions.max), all of them busy; retry later"
    )]
    Table(usize),
    #[error(
        "this client has reached its limit of {0} sessions (sessions.max_per_client), all of them busy; close one or retry later"
    )]
    Client(usize),
}

impl TooManySessions {
    /// The answer to a session that could not be made: 429 when the client
    /// is at its own limit, 503 when the gateway is; both say when to retry.
    pub(crate) fn refusal(&self, id: Option<&str>) -> Response {
        let status = match self {
            TooManySessions::Client(_) => StatusCode::TOO_MANY_REQUESTS,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        };
        let mut response = Refusal::new(status, code::INTERNAL_ERROR, self.to_string())
            .answering(id)
            .into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        response
    }
}

impl SessionTable {
    pub(crate) fn new(hub: Arc<NotifyHub>, config: &crate::config::SessionConfig) -> Self {
        Self {
            sessions: DashMap::default(),
            hub,
            epoch: Instant::now(),
            idle_timeout: config.idle_timeout,
            max_sessions: config.max,
            max_per_client: config.max_per_client,
            per_client: DashMap::default(),
            evicted: AtomicU64::new(0),
            admitting: std::sync::Mutex::new(()),
            count: watch::Sender::new(0),
            store: None,
        }
    }

    /// This table with sessions shared through `store`.
    pub(crate) fn with_store(mut self, store: Arc<crate::session_store::SessionStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// The session store, when sessions are shared with other replicas.
    pub(crate) fn store(&self) -> Option<&Arc<crate::session_store::SessionStore>> {
        self.store.as_ref()
    }

    /// Ids of the sessions used since `since` (a [`Self::clock`] reading)
    /// or with a stream open.
    pub(crate) fn used_since(&self, since: u64) -> Vec<Arc<str>> {
        self.sessions
            .iter()
            .filter(|s| {
                s.streams.load(Ordering::Relaxed) > 0
                    || s.last_seen.load(Ordering::Relaxed) >= since
            })
            .map(|s| s.key().clone())
            .collect()
    }

    /// Milliseconds on the table's clock, for [`Self::used_since`].
    pub(crate) fn clock(&self) -> u64 {
        self.now_ms()
    }

    /// Sessions evicted to make room so far.
    pub(crate) fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// Evicts the least recently used idle sessions (of `client` only, when
    /// given): one scan of the table closes up to `batch` of them, so a
    /// table kept full by a flood is scanned once per `batch` creations.
    /// False when no session could be evicted.
    fn evict_lru(&self, client: Option<&Arc<str>>, batch: usize) -> bool {
        let mut idle: Vec<(u64, Arc<str>)> = self
            .sessions
            .iter()
            .filter(|s| client.is_none() || s.client.as_ref() == client)
            .filter(|s| s.is_idle())
            .map(|s| (s.last_seen.load(Ordering::Relaxed), s.key().clone()))
            .collect();
        let batch = batch.clamp(1, idle.len().max(1));
        if idle.len() > batch {
            idle.select_nth_unstable(batch - 1);
            idle.truncate(batch);
        }
        // A session closed meanwhile (DELETE, expiry) is simply skipped.
        let evicted = idle
            .iter()
            .filter(|(_, id)| self.close(id, CloseReason::Evicted))
            .count();
        self.evicted.fetch_add(evicted as u64, Ordering::Relaxed);
        evicted > 0
    }

    /// Makes room for one more session of `client`, evicting if needed.
    fn make_room(&self, client: Option<&Arc<str>>) -> Result<(), TooManySessions> {
        if let Some(key) = client {
            let held = self.per_client.get(key).map_or(0, |n| *n);
            if held >= self.max_per_client
                && !self.evict_lru(Some(key), eviction_batch(self.max_per_client))
            {
                return Err(TooManySessions::Client(self.max_per_client));
            }
        }
        if self.sessions.len() >= self.max_sessions
            && !self.evict_lru(None, eviction_batch(self.max_sessions))
        {
            return Err(TooManySessions::Table(self.max_sessions));
        }
        Ok(())
    }

    /// A receiver of the session count.
    pub(crate) fn watch_count(&self) -> watch::Receiver<usize> {
        self.count.subscribe()
    }

    /// Marks a notification stream open on `session` until the guard drops.
    pub(crate) fn open_stream(self: &Arc<Self>, session: &Arc<Session>) -> StreamGuard {
        session.streams.fetch_add(1, Ordering::Relaxed);
        StreamGuard {
            session: session.clone(),
            table: self.clone(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    pub(crate) fn len(&self) -> usize {
        self.sessions.len()
    }

    /// Every open session now, in no particular order.
    pub(crate) fn all(&self) -> Vec<Arc<Session>> {
        self.sessions.iter().map(|s| s.value().clone()).collect()
    }

    /// Creates a session with a fresh unguessable id for `identity` (from
    /// remote address `ip`; neither for stdio), evicting an idle session
    /// when a limit is reached. Sessions are counted per identity, or per
    /// address when authentication is off.
    pub(crate) fn create(
        &self,
        protocol_version: Option<&str>,
        replies: Option<tokio::sync::mpsc::Sender<String>>,
        ip: Option<IpAddr>,
        identity: Option<Arc<crate::auth::Identity>>,
        endpoint: Option<Arc<str>>,
    ) -> Result<Arc<Session>, TooManySessions> {
        // Prefixed with the replica it lives on (see `crate::replica`).
        let id: Arc<str> =
            format!("{}-{:032x}", crate::replica::id(), rand::random::<u128>()).into();
        self.insert_new(id, protocol_version, replies, ip, identity, endpoint)
    }

    /// A local copy of a session another replica created, under its id;
    /// the existing copy if another request adopted it first.
    pub(crate) fn adopt(
        &self,
        id: &str,
        protocol_version: &str,
        ip: Option<IpAddr>,
        identity: Option<Arc<crate::auth::Identity>>,
        endpoint: Option<Arc<str>>,
    ) -> Result<Arc<Session>, TooManySessions> {
        self.insert_new(
            id.into(),
            Some(protocol_version),
            None,
            ip,
            identity,
            endpoint,
        )
    }

    fn insert_new(
        &self,
        id: Arc<str>,
        protocol_version: Option<&str>,
        replies: Option<tokio::sync::mpsc::Sender<String>>,
        ip: Option<IpAddr>,
        identity: Option<Arc<crate::auth::Identity>>,
        endpoint: Option<Arc<str>>,
    ) -> Result<Arc<Session>, TooManySessions> {
        let client = super::throttle::client_key(identity.as_ref(), ip);
        let admitting = self.admitting.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(existing) = self.sessions.get(&id) {
            return Ok(existing.clone());
        }
        self.make_room(client.as_ref())?;
        let session = Arc::new(Session {
            id: id.clone(),
            protocol_version: protocol_version
                .map(str::to_owned)
                .map_or_else(Default::default, Into::into),
            replies,
            inflight: Arc::default(),
            subscriber: self.hub.register_at(endpoint, identity.clone()),
            resumable: PostStreams::default(),
            request_tasks: Arc::new(Semaphore::new(MAX_REQUEST_TASKS)),
            last_seen: AtomicU64::new(self.now_ms()),
            streams: AtomicUsize::new(0),
            closed: CancellationToken::new(),
            span: tracing::info_span!("session", session = %id),
            client: client.clone(),
            identity,
        });
        if let Some(identity) = &session.identity {
            // Its notifications follow its client's view.
            self.hub
                .bind_identity(&session.subscriber, identity.clone());
        }
        if let Some(key) = client {
            *self.per_client.entry(key).or_insert(0) += 1;
        }
        self.sessions.insert(id, session.clone());
        drop(admitting);
        self.count.send_replace(self.sessions.len());
        tracing::info!(parent: &session.span, version = ?protocol_version, "session created");
        Ok(session)
    }

    /// The session with this id, left as it is (not marked as used).
    pub(crate) fn get(&self, id: &str) -> Option<Arc<Session>> {
        self.sessions.get(id).map(|s| s.clone())
    }

    /// The session with this id, marked as just used.
    pub(crate) fn touch(&self, id: &str) -> Option<Arc<Session>> {
        let Some(session) = self.sessions.get(id).map(|s| s.clone()) else {
            if let Some(other) =
                crate::replica::of_session(id).filter(|r| *r != crate::replica::id())
            {
                // A load balancer sent it here: the caller answers 404 and
                // the client initializes again on this replica.
                tracing::debug!(replica = other, "a session of another replica");
            }
            return None;
        };
        session.last_seen.store(self.now_ms(), Ordering::Relaxed);
        Some(session)
    }

    /// Ends a session; returns false if there was none.
    pub(crate) fn close(&self, id: &str, reason: CloseReason) -> bool {
        match self.sessions.remove(id) {
            Some((_, session)) => {
                if let Some(key) = &session.client {
                    self.per_client.remove_if_mut(key, |_, n| {
                        *n = n.saturating_sub(1);
                        *n == 0
                    });
                }
                session.closed.cancel();
                let cancelled = session.inflight.cancel_all(reason.why_calls_end());
                session.resumable.close();
                self.hub.unregister(session.subscriber.id);
                self.count.send_replace(self.sessions.len());
                tracing::info!(parent: &session.span, ?reason, cancelled, "session closed");
                true
            }
            None => false,
        }
    }

    /// Ends every session idle longer than the timeout; returns how many.
    pub(crate) fn expire_idle(&self) -> usize {
        let limit = u64::try_from(self.idle_timeout.as_millis()).unwrap_or(u64::MAX);
        let now = self.now_ms();
        self.sessions.iter().for_each(|s| s.resumable.expire());
        let idle: Vec<Arc<str>> = self
            .sessions
            .iter()
            .filter(|s| s.is_idle())
            .filter(|s| now.saturating_sub(s.last_seen.load(Ordering::Relaxed)) >= limit)
            .map(|s| s.key().clone())
            .collect();
        idle.iter()
            .filter(|id| self.close(id, CloseReason::Idle))
            .count()
    }

    /// Ends every session (shutdown).
    pub(crate) fn close_all(&self) {
        let ids: Vec<Arc<str>> = self.sessions.iter().map(|s| s.key().clone()).collect();
        for id in ids {
            self.close(&id, CloseReason::Shutdown);
        }
    }

    /// Runs [`Self::expire_idle`] periodically until `shutdown`.
    pub(crate) fn spawn_sweeper(
        self: &Arc<Self>,
        shutdown: CancellationToken,
        tracker: &TaskTracker,
    ) {
        let table = self.clone();
        let period =
            (self.idle_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
        let sweep = async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        let expired = table.expire_idle();
                        if expired > 0 {
                            tracing::info!(expired, "idle sessions expired");
                        }
                    }
                    () = shutdown.cancelled() => break,
                }
            }
        };
        tracker.spawn(sweep.instrument(tracing::info_span!("session_sweeper")));
    }
}

#[cfg(test)]
mod sweeper_tests;
#[cfg(test)]
mod tests;
