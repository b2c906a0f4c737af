//! In-process clients of a [`Gateway`](crate::Gateway): requests go straight
//! to the router, with no HTTP, no authentication step and no JSON-RPC
//! framing on the way in.
//!
//! A [`LocalSession`] is a 2025-era session: it has a subscriber in the
//! notify hub, so it can subscribe to resources, set a log level and read
//! its notifications. A [`LocalStateless`] client sends stateless
//! (2026-07-28) requests. Both may carry an [`Identity`], which the policy
//! applies to exactly as it does to an authenticated HTTP client.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;
use serde_json::value::RawValue;

use crate::auth::Identity;
use crate::downstream::AppState;
use crate::notify::Subscriber;
use crate::protocol::{Era, Method};
use crate::router::{InflightCalls, Reply, RequestContext};

/// An in-process 2025-era session (see [`Gateway::local_session`]).
///
/// Dropping it ends the session: its calls in flight are cancelled, and its
/// subscriptions and queued notifications are dropped.
///
/// [`Gateway::local_session`]: crate::Gateway::local_session
pub struct LocalSession {
    state: Arc<AppState>,
    identity: Option<Arc<Identity>>,
    subscriber: Arc<Subscriber>,
    inflight: Arc<InflightCalls>,
    next_id: AtomicU64,
}

/// In-process stateless (2026-07-28) requests (see
/// [`Gateway::local_stateless`]): no session, no notifications.
///
/// [`Gateway::local_stateless`]: crate::Gateway::local_stateless
pub struct LocalStateless {
    state: Arc<AppState>,
    identity: Option<Arc<Identity>>,
    next_id: AtomicU64,
}

impl LocalSession {
    pub(crate) fn new(state: Arc<AppState>, identity: Option<Identity>) -> LocalSession {
        let identity = identity.map(Arc::new);
        let subscriber = state.router.hub().register_as(identity.clone());
        LocalSession {
            state,
            identity,
            subscriber,
            inflight: Arc::default(),
            next_id: AtomicU64::new(1),
        }
    }

    /// Sends one request and returns the JSON-RPC response frame (`result`
    /// or `error`, with an id of the session's choosing). `params` is the
    /// request's `params` member; `Value::Null` sends none. A call that
    /// streams progress is answered with its final frame.
    pub async fn request(&self, method: &str, params: Value) -> Value {
        let ctx = RequestContext {
            inflight: self.inflight.clone(),
            subscriber: Some(self.subscriber.clone()),
            can_stream: false,
            era: Era::Legacy,
            log_level: None,
            identity: self.identity.clone(),
            session_id: None,
            endpoint: None,
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        send(&self.state, &ctx, id, method, &params).await
    }

    /// Stateless requests of the same client (its identity, no session).
    pub fn stateless(&self) -> LocalStateless {
        LocalStateless::new(self.state.clone(), self.identity.clone())
    }

    /// Waits for the session's next notification and returns its JSON-RPC
    /// frame. Notifications are coalesced as for any session: one
    /// `list_changed` per list kind and one `resources/updated` per URI
    /// until read.
    pub async fn next_notification(&self) -> Value {
        let outbox = &self.subscriber.outbox;
        loop {
            if let Some(frame) = self.try_next_notification() {
                return frame;
            }
            outbox.wait().await;
        }
    }

    /// The session's next notification, if one is waiting.
    pub fn try_next_notification(&self) -> Option<Value> {
        let (_, frame) = self.subscriber.outbox.next_event()?;
        Some(serde_json::from_str(&frame).expect("the hub queues JSON frames"))
    }

    /// How many notifications are waiting to be read.
    pub fn pending_notifications(&self) -> usize {
        self.subscriber.outbox.backlog().pending
    }

    /// The (exposed) URIs the session is subscribed to, in no particular
    /// order.
    pub fn subscribed_uris(&self) -> Vec<String> {
        self.state
            .router
            .hub()
            .subscriptions()
            .uris_of(self.subscriber.id)
            .iter()
            .map(|uri| uri.to_string())
            .collect()
    }
}

impl Drop for LocalSession {
    fn drop(&mut self) {
        self.inflight.cancel_all("the local session ended");
        self.state.router.hub().unregister(self.subscriber.id);
    }
}

impl LocalStateless {
    pub(crate) fn new(state: Arc<AppState>, identity: Option<Arc<Identity>>) -> LocalStateless {
        LocalStateless {
            state,
            identity,
            next_id: AtomicU64::new(1),
        }
    }

    /// Sends one stateless request and returns the JSON-RPC response frame;
    /// as [`LocalSession::request`], but results carry the 2026-07-28
    /// `resultType` and caching hints, and methods that need a session
    /// (`resources/subscribe`, `logging/setLevel`) are refused.
    pub async fn request(&self, method: &str, params: Value) -> Value {
        let ctx = RequestContext {
            inflight: Arc::default(),
            subscriber: None,
            can_stream: false,
            era: Era::Modern,
            log_level: None,
            identity: self.identity.clone(),
            session_id: None,
            endpoint: None,
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        send(&self.state, &ctx, id, method, &params).await
    }
}

/// One request through the router; the response frame, parsed.
async fn send(
    state: &AppState,
    ctx: &RequestContext,
    id: u64,
    method: &str,
    params: &Value,
) -> Value {
    let id = RawValue::from_string(id.to_string()).expect("a number is JSON");
    let params = (!params.is_null())
        .then(|| RawValue::from_string(params.to_string()).expect("a Value is JSON"));
    let mut request = crate::protocol::Request::new(
        &id,
        Method::from_name(method),
        params.as_deref().map(crate::protocol::Raw::from),
    );
    let frame = match state.router.request(ctx, &mut request).await {
        Reply::Ready(frame) => frame.into_text(),
        Reply::Page(page) => page.into_text(),
        Reply::Streaming(mut frames) => {
            let mut last = None;
            while let Some(frame) = frames.recv().await {
                last = Some(frame);
            }
            last.expect("a streamed reply ends with its response frame")
        }
    };
    serde_json::from_str(&frame).expect("the router answers with JSON frames")
}
