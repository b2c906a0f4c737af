//! Per-session instances of a stdio upstream (`isolation: per-session`):
//! the pool that gives a downstream session its own supervised child.
//!
//! A session's first call starts its instance (a supervisor of its own on
//! the gateway's tracker, spawned by the shared upstream's supervisor
//! module through [`Start`]); the session's end ([`Instances::release`],
//! from `Interest::forget_subscriber` when the hub unregisters it) cancels
//! it, and its supervisor stops and reaps the child. At most
//! `max_instances` run at once; a session beyond that gets a clear error
//! and nothing else is affected. What an instance announces reaches only
//! its session ([`SessionEvents`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::value::RawValue;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::events::{AskRefused, ClientAsk, UpstreamEvents};
use super::{SubscriberId, UpstreamError, UpstreamHandle, UpstreamState};
use crate::catalog::ListKind;
use crate::protocol::Method;

/// A running instance, as [`Start`] returns it.
pub(crate) struct Started {
    /// The instance's own handle: its connection, state and pid.
    pub(crate) handle: UpstreamHandle,
    /// Cancelling it stops the instance (its supervisor holds the other end).
    pub(crate) stop: CancellationToken,
    /// The instance's supervisor task, awaited when the pool stops.
    pub(crate) task: JoinHandle<()>,
}

/// Starts the instance of one session (see `supervisor::spawn`).
pub(crate) type Start = Box<dyn Fn(SubscriberId) -> Started + Send + Sync>;

/// The per-session instances of one upstream.
pub(crate) struct Instances {
    upstream: Arc<str>,
    max: usize,
    /// Changed by calls (router tasks), the hub's unregister and the shared
    /// supervisor's end; a std mutex, never held across an `.await`.
    state: Mutex<PoolState>,
}

struct PoolState {
    by_session: HashMap<SubscriberId, Started>,
    /// How instances start, and who says whether a session is still
    /// registered (the hub); both dropped when the upstream stops, after
    /// which no instance starts (and the hub, which reaches this pool
    /// through `Interest`, is no longer held from here).
    open: Option<(Start, Arc<dyn UpstreamEvents>)>,
}

impl Instances {
    pub(crate) fn new(
        upstream: Arc<str>,
        max: usize,
        events: Arc<dyn UpstreamEvents>,
        start: Start,
    ) -> Self {
        Self {
            upstream,
            max,
            state: Mutex::new(PoolState {
                by_session: HashMap::new(),
                open: Some((start, events)),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The instance of `session`, started now if it has none.
    pub(crate) fn instance(&self, session: SubscriberId) -> Result<UpstreamHandle, UpstreamError> {
        let (handle, events) = {
            let mut state = self.lock();
            if let Some(running) = state.by_session.get(&session) {
                return Ok(running.handle.clone());
            }
            let Some((start, events)) = &state.open else {
                return Err(self.unavailable("it is stopping".into()));
            };
            if state.by_session.len() >= self.max {
                return Err(self.unavailable(format!(
                    "it already runs {} per-session instances, its max_instances; try again when another session has ended",
                    self.max
                )));
            }
            let started = start(session);
            let events = events.clone();
            let handle = started.handle.clone();
            state.by_session.insert(session, started);
            (handle, events)
        };
        tracing::info!(upstream = %self.upstream, session, "per-session instance started");
        // The session may have ended while its call got here. Its release
        // comes after the hub forgot it, so either that release found the
        // instance, or this check sees the session gone.
        if !events.session_alive(session) {
            self.release(session);
            return Err(UpstreamError::Cancelled {
                upstream: self.upstream.to_string(),
                reason: "the session ended".into(),
            });
        }
        Ok(handle)
    }

    fn unavailable(&self, reason: String) -> UpstreamError {
        UpstreamError::Unavailable {
            upstream: self.upstream.to_string(),
            reason,
        }
    }

    /// Stops the instance of `session` (its session ended); false if it had none.
    pub(crate) fn release(&self, session: SubscriberId) -> bool {
        let Some(running) = self.lock().by_session.remove(&session) else {
            return false;
        };
        running.stop.cancel();
        tracing::info!(upstream = %self.upstream, session, "per-session instance stopping: its session ended");
        true
    }

    /// Instances running now.
    pub(crate) fn len(&self) -> usize {
        self.lock().by_session.len()
    }

    /// The instances' handles.
    pub(crate) fn handles(&self) -> Vec<UpstreamHandle> {
        self.lock()
            .by_session
            .values()
            .map(|r| r.handle.clone())
            .collect()
    }

    /// The process ids of the instances' current children.
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.lock()
            .by_session
            .values()
            .filter_map(|r| r.handle.pid())
            .collect()
    }

    /// Stops every instance and waits for their supervisors (the upstream
    /// is stopping); no instance starts after this.
    pub(crate) async fn stop_all(&self) {
        let running: Vec<Started> = {
            let mut state = self.lock();
            state.open = None;
            state.by_session.drain().map(|(_, r)| r).collect()
        };
        for r in &running {
            r.stop.cancel();
        }
        for r in running {
            let _ = r.task.await;
        }
    }
}

/// The connection of a session's instance: waits while it starts (until
/// the call's `deadline`), then it is up or the error says why not.
pub(crate) async fn connection_of(
    instance: &UpstreamHandle,
    deadline: tokio::time::Instant,
) -> Result<Arc<super::Connection>, UpstreamError> {
    if let Ok(conn) = instance.connection() {
        return Ok(conn);
    }
    let mut state = instance.watch_state();
    let started = state.wait_for(|s| !matches!(s, UpstreamState::Starting));
    let _ = tokio::time::timeout_at(deadline, started).await;
    instance.connection()
}

/// What an instance announces, scoped to the session it belongs to.
pub(crate) struct SessionEvents {
    inner: Arc<dyn UpstreamEvents>,
    session: SubscriberId,
}

impl SessionEvents {
    pub(crate) fn new(inner: Arc<dyn UpstreamEvents>, session: SubscriberId) -> Self {
        Self { inner, session }
    }
}

impl UpstreamEvents for SessionEvents {
    fn resource_updated(&self, upstream: &str, original_uri: &str) {
        self.inner
            .resource_updated_for(self.session, upstream, original_uri);
    }

    fn log_message(&self, upstream: &str, params: Option<&RawValue>) {
        self.inner.log_message_for(self.session, upstream, params);
    }

    fn lists_changed(&self, kinds: &[ListKind]) {
        self.inner.lists_changed_for(self.session, kinds);
    }

    fn ask_client(
        &self,
        session: u64,
        method: &Method,
        params: Option<&RawValue>,
    ) -> Result<ClientAsk, AskRefused> {
        // Only this session's calls run here, so no other can be the origin.
        if session != self.session {
            return Err(AskRefused::SessionGone);
        }
        self.inner.ask_client(session, method, params)
    }

    fn forget_ask(&self, session: u64, id: &str) {
        self.inner.forget_ask(session, id);
    }

    fn cached_roots(&self, session: u64) -> Option<Box<RawValue>> {
        self.inner.cached_roots(session)
    }

    fn remember_roots(&self, session: u64, result: &RawValue) {
        self.inner.remember_roots(session, result);
    }

    fn elicitation_complete(&self, session: u64, params: Option<&RawValue>) {
        // An elicitation of this instance was only ever shown to its session.
        if session == self.session {
            self.inner.elicitation_complete(session, params);
        }
    }

    fn task_status(&self, upstream: &str, method: &Method, params: Option<&RawValue>) {
        // A task's notifications go to the client that created it.
        self.inner.task_status(upstream, method, params);
    }

    fn watched_tasks(&self, upstream: &str) -> Vec<Arc<str>> {
        self.inner.watched_tasks(upstream)
    }

    fn session_alive(&self, session: u64) -> bool {
        self.inner.session_alive(session)
    }

    fn resource_updated_for(&self, session: u64, upstream: &str, original_uri: &str) {
        if session == self.session {
            self.inner
                .resource_updated_for(session, upstream, original_uri);
        }
    }

    fn log_message_for(&self, session: u64, upstream: &str, params: Option<&RawValue>) {
        if session == self.session {
            self.inner.log_message_for(session, upstream, params);
        }
    }

    fn lists_changed_for(&self, session: u64, kinds: &[ListKind]) {
        if session == self.session {
            self.inner.lists_changed_for(session, kinds);
        }
    }
}

#[cfg(test)]
mod tests;
