//! Per-identity sessions of a remote upstream that acts as each caller
//! (`auth.mode: token_exchange` or `user`): one upstream MCP session per
//! (upstream, identity), each with its own bearer token.
//!
//! A caller's first call starts its session (a supervisor of its own, like
//! the per-session instances of [`super::isolated`], started through
//! [`StartIdentity`]). Every call notes the caller's latest token in the
//! member's [`SubjectSlot`] and its use time. At most `max_identities` run
//! at once: a new identity beyond it replaces the least recently used
//! member that has no request in flight, or is refused with an error that
//! says so. [`IdentityPool::sweep`], run by the shared supervisor, closes
//! members unused for `idle_timeout`. Nothing of one identity's session is
//! used for another's call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use serde_json::value::RawValue;

use super::events::{AskRefused, ClientAsk, UpstreamEvents};
use super::isolated::Started;
use super::{UpstreamError, UpstreamHandle};
use crate::auth::Identity;
use crate::catalog::ListKind;
use crate::config::AuthMode;
use crate::credentials::{CredentialError, SubjectSlot, UpstreamCredentials};
use crate::protocol::Method;

/// Starts the session of one identity (see `supervisor::spawn`).
pub(crate) type StartIdentity = Box<dyn Fn(&Arc<str>, Arc<SubjectSlot>) -> Started + Send + Sync>;

/// A member that was used this recently is never replaced to make room.
const REPLACE_AFTER: Duration = Duration::from_secs(1);

/// The per-identity sessions of one upstream.
pub(crate) struct IdentityPool {
    upstream: Arc<str>,
    max: usize,
    idle: Duration,
    /// Changed by calls (router tasks), the sweep and the shared
    /// supervisor's end; a std mutex, never held across an `.await`.
    state: Mutex<PoolState>,
}

struct PoolState {
    members: HashMap<Arc<str>, Member>,
    /// How sessions start; dropped when the upstream stops, after which
    /// none starts.
    start: Option<StartIdentity>,
}

struct Member {
    started: Started,
    subject: Arc<SubjectSlot>,
    last_used: Instant,
}

impl IdentityPool {
    pub(crate) fn new(
        upstream: Arc<str>,
        max: usize,
        idle: Duration,
        start: StartIdentity,
    ) -> Self {
        Self {
            upstream,
            max,
            idle,
            state: Mutex::new(PoolState {
                members: HashMap::new(),
                start: Some(start),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The session of `identity`, started now if it has none; `subject` is
    /// the token the caller sent with this call (a JWT), if any.
    pub(crate) fn session(
        &self,
        identity: &Arc<str>,
        subject: Option<&str>,
    ) -> Result<UpstreamHandle, UpstreamError> {
        let mut state = self.lock();
        if let Some(member) = state.members.get_mut(identity) {
            member.last_used = Instant::now();
            if let Some(token) = subject {
                member.subject.set(token);
            }
            return Ok(member.started.handle.clone());
        }
        if state.start.is_none() {
            return Err(self.unavailable("it is stopping".into()));
        }
        if state.members.len() >= self.max {
            let replaceable = state
                .members
                .iter()
                .filter(|(_, m)| m.last_used.elapsed() >= REPLACE_AFTER && m.idle_now())
                .min_by_key(|(_, m)| m.last_used)
                .map(|(id, _)| id.clone());
            let Some(oldest) = replaceable else {
                return Err(self.unavailable(format!(
                    "it already holds sessions for {} identities (its auth.max_identities), all in use; try again shortly",
                    self.max
                )));
            };
            if let Some(member) = state.members.remove(&oldest) {
                member.started.stop.cancel();
                tracing::info!(upstream = %self.upstream, client = %oldest, "per-identity session closed to make room for another identity");
            }
        }
        let subject_slot = Arc::new(SubjectSlot::default());
        if let Some(token) = subject {
            subject_slot.set(token);
        }
        let start = state.start.as_ref().expect("checked above");
        let started = start(identity, subject_slot.clone());
        let handle = started.handle.clone();
        state.members.insert(
            identity.clone(),
            Member {
                started,
                subject: subject_slot,
                last_used: Instant::now(),
            },
        );
        drop(state);
        tracing::info!(upstream = %self.upstream, client = %identity, "per-identity session started");
        Ok(handle)
    }

    fn unavailable(&self, reason: String) -> UpstreamError {
        UpstreamError::Unavailable {
            upstream: self.upstream.to_string(),
            reason,
        }
    }

    /// Closes the sessions unused for the idle timeout; returns how many.
    pub(crate) fn sweep(&self) -> usize {
        let mut state = self.lock();
        let idle: Vec<Arc<str>> = state
            .members
            .iter()
            .filter(|(_, m)| m.last_used.elapsed() >= self.idle && m.idle_now())
            .map(|(id, _)| id.clone())
            .collect();
        for id in &idle {
            if let Some(member) = state.members.remove(id) {
                member.started.stop.cancel();
                tracing::info!(upstream = %self.upstream, client = %id, "per-identity session closed: idle");
            }
        }
        idle.len()
    }

    /// `identity`'s session, if it has one now (none is started).
    pub(crate) fn existing(&self, identity: &str) -> Option<UpstreamHandle> {
        self.lock()
            .members
            .get(identity)
            .map(|m| m.started.handle.clone())
    }

    /// Whether `identity` has a session now.
    pub(crate) fn has(&self, identity: &str) -> bool {
        self.lock().members.contains_key(identity)
    }

    /// Closes `identity`'s session (it disconnected, or its grant ended).
    pub(crate) fn close(&self, identity: &str) -> bool {
        let Some(member) = self.lock().members.remove(identity) else {
            return false;
        };
        member.started.stop.cancel();
        true
    }

    /// How often [`Self::sweep`] should run.
    pub(crate) fn sweep_every(&self) -> Duration {
        (self.idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(60))
    }

    /// Identities with a session now, sorted.
    pub(crate) fn identities(&self) -> Vec<Arc<str>> {
        let mut ids: Vec<Arc<str>> = self.lock().members.keys().cloned().collect();
        ids.sort();
        ids
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().members.len()
    }

    /// The sessions' handles.
    pub(crate) fn handles(&self) -> Vec<UpstreamHandle> {
        self.lock()
            .members
            .values()
            .map(|m| m.started.handle.clone())
            .collect()
    }

    /// Stops every session and waits for their supervisors (the upstream
    /// is stopping); none starts after this.
    pub(crate) async fn stop_all(&self) {
        let members: Vec<Member> = {
            let mut state = self.lock();
            state.start = None;
            state.members.drain().map(|(_, m)| m).collect()
        };
        for m in &members {
            m.started.stop.cancel();
        }
        for m in members {
            let _ = m.started.task.await;
        }
    }
}

impl Member {
    /// No request of this session is waiting for an answer.
    fn idle_now(&self) -> bool {
        self.started
            .handle
            .connection()
            .map_or(true, |conn| conn.pending_len() == 0)
    }
}

/// What an identity's session announces: list changes as usual (the
/// catalog is shared), its resource updates to that identity's
/// subscribers alone, and its log messages to no one (they were meant for
/// that identity, and log levels are not kept per identity).
pub(crate) struct IdentityEvents {
    inner: Arc<dyn UpstreamEvents>,
    identity: Arc<str>,
}

impl IdentityEvents {
    pub(crate) fn new(inner: Arc<dyn UpstreamEvents>, identity: Arc<str>) -> Self {
        Self { inner, identity }
    }
}

impl UpstreamEvents for IdentityEvents {
    fn resource_updated(&self, upstream: &str, original_uri: &str) {
        // To this identity's subscribers of the URI, and no one else.
        self.inner
            .resource_updated_as(&self.identity, upstream, original_uri);
    }

    fn log_message(&self, upstream: &str, _params: Option<&RawValue>) {
        tracing::debug!(
            upstream,
            "a per-identity session's log message is not fanned out"
        );
    }

    fn lists_changed(&self, kinds: &[ListKind]) {
        self.inner.lists_changed(kinds);
    }

    fn ask_client(
        &self,
        session: u64,
        method: &Method,
        params: Option<&RawValue>,
    ) -> Result<ClientAsk, AskRefused> {
        // Only calls of this identity run on its session, and the asking
        // call's own session is the one asked.
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
        self.inner.elicitation_complete(session, params);
    }

    fn task_status(&self, upstream: &str, method: &Method, params: Option<&RawValue>) {
        self.inner.task_status(upstream, method, params);
    }

    fn watched_tasks(&self, upstream: &str) -> Vec<Arc<str>> {
        self.inner.watched_tasks(upstream)
    }

    fn session_alive(&self, session: u64) -> bool {
        self.inner.session_alive(session)
    }

    fn resource_updated_for(&self, session: u64, upstream: &str, original_uri: &str) {
        self.inner
            .resource_updated_for(session, upstream, original_uri);
    }

    fn log_message_for(&self, session: u64, upstream: &str, params: Option<&RawValue>) {
        self.inner.log_message_for(session, upstream, params);
    }

    fn lists_changed_for(&self, session: u64, kinds: &[ListKind]) {
        self.inner.lists_changed_for(session, kinds);
    }
}

/// The session of its own that a call of `caller` to the upstream of
/// `shared` uses (started now if it has none), or none when the call goes
/// to the shared (service) connection. A caller who cannot be served gets
/// the error that says why: no identity, no JWT to exchange, or, in
/// `mode: user`, not connected yet (with the URL to connect at).
pub(crate) async fn session_for(
    shared: &UpstreamHandle,
    pool: &IdentityPool,
    credentials: &Arc<UpstreamCredentials>,
    caller: Option<&Identity>,
) -> Result<Option<UpstreamHandle>, UpstreamError> {
    let upstream = shared.name().to_string();
    let refuse = |error: CredentialError| UpstreamError::Credential {
        upstream: upstream.clone(),
        error: Box::new(error),
    };
    let Some(caller) = caller else {
        return Err(refuse(CredentialError::Unusable(
            "it acts as each caller, and this request has no authenticated client",
        )));
    };
    match credentials.mode() {
        AuthMode::ClientCredentials => Ok(None),
        AuthMode::TokenExchange { .. } => match caller.subject_token() {
            Some(token) => pool.session(&caller.client, Some(token)).map(Some),
            None if credentials.api_key_clients_as_service() => Ok(None),
            None => Err(refuse(CredentialError::NoSubjectToken)),
        },
        AuthMode::User { .. } => {
            if !pool.has(&caller.client)
                && !credentials
                    .connected(&caller.client)
                    .await
                    .map_err(&refuse)?
            {
                return Err(authorization_required(credentials, &caller.client).await);
            }
            pool.session(&caller.client, None).map(Some)
        }
    }
}

/// The error that sends `identity` to connect its account at the
/// upstream of `credentials`: a new flow's URL, or why there is none.
pub(crate) async fn authorization_required(
    credentials: &Arc<UpstreamCredentials>,
    identity: &Arc<str>,
) -> UpstreamError {
    let upstream = credentials.upstream().to_string();
    match credentials.start_flow(identity).await {
        Ok(start) => UpstreamError::AuthorizationRequired {
            upstream,
            start: Box::new(start),
        },
        Err(error) => UpstreamError::Credential {
            upstream,
            error: Box::new(error),
        },
    }
}

/// The tool of an upstream in `auth.mode: user` with no discovery
/// credential: calling it starts the caller's authorization flow.
pub(super) fn connect_tool(upstream: &str) -> serde_json::Map<String, serde_json::Value> {
    let tool = serde_json::json!({
        "name": CONNECT_TOOL,
        "title": format!("Connect your {upstream} account"),
        "description": format!("Connect your own {upstream} account to this gateway (you sign in at {upstream}'s authorization server in your browser). Its tools appear once someone has connected."),
        "inputSchema": { "type": "object", "properties": {} },
        "annotations": { "readOnlyHint": true, "idempotentHint": true, "openWorldHint": false },
    });
    match tool {
        serde_json::Value::Object(map) => map,
        _ => unreachable!("a JSON object literal"),
    }
}

/// The name of [`connect_tool`] as the upstream's own.
pub(crate) const CONNECT_TOOL: &str = "connect";

#[cfg(test)]
mod tests;
