//! What upstreams report to the rest of the gateway, through one narrow
//! trait: the notify hub implements it, so nothing in `upstream` depends on
//! who listens.
//!
//! Calls come from an upstream's reader task (resource updates, log
//! messages, requests for a client) and its supervisor (list changes); an
//! implementation must not block or wait on a client.

use std::sync::Arc;

use serde_json::value::RawValue;
use tokio::sync::oneshot;

use serde_json::{Map, Value};

use crate::catalog::ListKind;
use crate::protocol::Method;

/// A client's answer to a request an upstream asked of it: its `result`,
/// or its `error` object.
pub(crate) type ClientAnswer = Result<Box<RawValue>, Box<RawValue>>;

/// A request registered with the session it is for.
pub(crate) struct ClientAsk {
    /// The gateway-issued id the client sees (unique in the gateway).
    pub(crate) id: Arc<str>,
    /// Resolves with the client's answer; fails if the session ends.
    pub(crate) answer: oneshot::Receiver<ClientAnswer>,
}

/// Why a request for a client cannot be sent to it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum AskRefused {
    #[error("the session that made this call has ended")]
    SessionGone,
    /// The client did not declare the capability the request needs.
    #[error("the client that made this call does not support {0}")]
    MissingCapability(&'static str),
}

/// A request for the client of a stateless (2026-07-28) call: it has no
/// session to carry it, so the call's own reply asks it, as an
/// `input_required` result, and the client's retry answers it.
pub(crate) struct InputAsk {
    pub(crate) method: Method,
    pub(crate) params: Option<Box<RawValue>>,
    /// Takes the client's answer; dropping it tells the upstream there is none.
    pub(crate) answer: oneshot::Sender<ClientAnswer>,
}

/// Whether a client that declared `declared` can answer `method`:
/// `sampling`, `roots`, or `elicitation` (its `url` mode only if declared
/// as such; an empty `elicitation` object means form mode, as in 2025-06-18).
pub(crate) fn check_declared(
    declared: Option<&Map<String, Value>>,
    method: &Method,
    params: Option<&RawValue>,
) -> Result<(), AskRefused> {
    let has = |name: &str| declared.is_some_and(|c| c.get(name).is_some());
    match method {
        Method::CreateMessage if !has("sampling") => Err(AskRefused::MissingCapability("sampling")),
        Method::RootsList if !has("roots") => Err(AskRefused::MissingCapability("roots")),
        Method::Elicit => {
            let Some(elicitation) = declared.and_then(|c| c.get("elicitation")) else {
                return Err(AskRefused::MissingCapability("elicitation"));
            };
            let url_mode = params
                .and_then(|p| serde_json::from_str::<Map<String, Value>>(p.get()).ok())
                .is_some_and(|p| p.get("mode").and_then(Value::as_str) == Some("url"));
            let form_only = elicitation.get("url").is_none();
            match url_mode && form_only {
                true => Err(AskRefused::MissingCapability("URL-mode elicitation")),
                false => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

/// Receives what upstreams announce.
pub(crate) trait UpstreamEvents: Send + Sync {
    /// `upstream`'s resource `original_uri` (as the upstream knows it) changed.
    fn resource_updated(&self, upstream: &str, original_uri: &str);
    /// A `notifications/message` from `upstream`, its params as sent.
    fn log_message(&self, upstream: &str, params: Option<&RawValue>);
    /// These merged lists changed: an upstream came, went or refreshed.
    fn lists_changed(&self, kinds: &[ListKind]);
    /// Registers a request (`sampling/createMessage`, `elicitation/create`,
    /// `roots/list`) for downstream session `session`, if it can take it.
    fn ask_client(
        &self,
        session: u64,
        method: &Method,
        params: Option<&RawValue>,
    ) -> Result<ClientAsk, AskRefused>;
    /// Forgets a request nobody waits for any more (timed out, or its call ended).
    fn forget_ask(&self, session: u64, id: &str);

    /// The `roots/list` result session `session`'s client gave last, while
    /// it still holds (the client has not said its roots changed).
    fn cached_roots(&self, session: u64) -> Option<Box<RawValue>>;

    /// Keeps `result`, the client's answer to `roots/list`, for the next
    /// upstream that asks (only for a client that announces changes).
    fn remember_roots(&self, session: u64, result: &RawValue);

    /// A URL-mode elicitation session `session` was shown has finished:
    /// `notifications/elicitation/complete` with `params` goes to it alone.
    fn elicitation_complete(&self, session: u64, params: Option<&RawValue>);

    /// A task status notification (`notifications/tasks/status` or
    /// `notifications/tasks`) from `upstream`, its params as sent.
    fn task_status(&self, _upstream: &str, _method: &Method, _params: Option<&RawValue>) {}
    /// The task ids (as `upstream` knows them) whose status notifications
    /// a client listens for: a modern upstream's listen asks for them.
    fn watched_tasks(&self, _upstream: &str) -> Vec<Arc<str>> {
        Vec::new()
    }

    /// Whether downstream session `session` is still registered.
    fn session_alive(&self, session: u64) -> bool;

    /// Like [`Self::resource_updated`], for session `session` alone (its
    /// own instance of a per-session upstream sent it).
    fn resource_updated_for(&self, session: u64, upstream: &str, original_uri: &str);

    /// Like [`Self::log_message`], for session `session` alone.
    fn log_message_for(&self, session: u64, upstream: &str, params: Option<&RawValue>);

    /// Like [`Self::lists_changed`], for session `session` alone.
    fn lists_changed_for(&self, session: u64, kinds: &[ListKind]);

    /// Like [`Self::resource_updated`], for the subscribers that are
    /// `identity` (an identity's own session sent it).
    fn resource_updated_as(&self, _identity: &str, _upstream: &str, _original_uri: &str) {}
}
