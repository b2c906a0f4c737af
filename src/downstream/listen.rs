//! `subscriptions/listen`: a modern client's long-lived notification stream.
//!
//! The stream opens with `notifications/subscriptions/acknowledged` listing
//! what the gateway will honour, then carries only the notification kinds
//! the client asked for, each tagged with `_meta`
//! `io.modelcontextprotocol/subscriptionId` (the listen request's id).
//! `resourceSubscriptions` join the same per-URI table as legacy
//! `resources/subscribe`, so a legacy session and a listen stream watching
//! one URI share one upstream subscription. Closing the stream releases
//! everything it held; at shutdown the gateway ends it gracefully with a
//! `complete` result for the listen request.

use std::sync::Arc;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::AppState;
use crate::notify::{ListFilter, NotifyHub, Subscriber};
use crate::protocol::{self, meta};

/// Unregisters the listener (and its subscriptions) when the stream ends.
struct Listening {
    hub: Arc<NotifyHub>,
    subscriber: Arc<Subscriber>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.hub.unregister(self.subscriber.id);
    }
}

/// Opens a listen stream for `identity` (none while authentication is
/// off): its `list_changed` and `resources/updated` follow that client's view.
pub(crate) async fn open(
    state: &Arc<AppState>,
    identity: Option<Arc<crate::auth::Identity>>,
    endpoint: Option<Arc<str>>,
    id: &RawValue,
    params: Option<crate::protocol::Raw<'_>>,
) -> Response {
    let mut parsed = params.and_then(|p| serde_json::from_str::<Map<String, Value>>(p.get()).ok());
    // Who is listening, for the operator's page.
    let client_info = parsed
        .as_ref()
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(meta::CLIENT_INFO))
        .cloned();
    let filter: Map<String, Value> = parsed
        .take()
        .and_then(|mut p| match p.remove("notifications") {
            Some(Value::Object(filter)) => Some(filter),
            _ => None,
        })
        .unwrap_or_default();
    let flag = |key: &str| filter.get(key).and_then(Value::as_bool).unwrap_or(false);
    let wants = ListFilter {
        tools: flag("toolsListChanged"),
        prompts: flag("promptsListChanged"),
        resources: flag("resourcesListChanged"),
    };
    let tag = format!("{{\"{}\":{}}}", meta::SUBSCRIPTION_ID, id.get());
    let hub = state.router.hub().clone();
    let listening = Listening {
        subscriber: hub.register_listener(wants, tag.clone(), endpoint, identity.clone()),
        hub,
    };
    listening.subscriber.set_client_info(client_info.as_ref());
    // Status notifications of the caller's own tasks (the tasks extension).
    let tasks =
        match state
            .router
            .watch_tasks(listening.subscriber.id, identity.as_deref(), id, params)
        {
            Ok(tasks) => tasks,
            Err(frame) => {
                return (
                    axum::http::StatusCode::BAD_REQUEST,
                    super::wire::json_response(frame),
                )
                    .into_response();
            }
        };

    // Every URI the gateway can watch joins the shared table; the others
    // are left out of the acknowledgment.
    let requested: Vec<String> = filter
        .get("resourceSubscriptions")
        .and_then(Value::as_array)
        .map(|uris| {
            uris.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let mut honoured = Vec::new();
    let mut modern_upstreams: Vec<crate::upstream::UpstreamHandle> = tasks
        .as_ref()
        .map(|t| t.upstreams.clone())
        .unwrap_or_default();
    for uri in requested {
        match state
            .router
            .subscribe_uri(listening.subscriber.id, &uri)
            .await
        {
            Ok(subscribed) => {
                honoured.push(uri);
                if let crate::upstream::Subscribed::WatchSetChanged(handle) = subscribed
                    && !modern_upstreams.iter().any(|h| h.name() == handle.name())
                {
                    modern_upstreams.push(handle);
                }
            }
            Err(e) => tracing::debug!(uri = %uri, error = %e, "resource subscription not honoured"),
        }
    }
    // One listen-stream change per modern upstream, however many URIs.
    let applied = modern_upstreams
        .iter()
        .map(|h| h.watch_set_changed_and_applied(h.timeout()));
    futures_util::future::join_all(applied).await;
    let mut acknowledged = Map::new();
    for (key, on) in [
        ("toolsListChanged", wants.tools),
        ("promptsListChanged", wants.prompts),
        ("resourcesListChanged", wants.resources),
    ] {
        if on {
            acknowledged.insert(key.into(), Value::Bool(true));
        }
    }
    if !honoured.is_empty() {
        acknowledged.insert("resourceSubscriptions".into(), json!(honoured));
    }
    if let Some(tasks) = tasks {
        acknowledged.insert("taskIds".into(), Value::Array(tasks.honoured));
    }
    let tag_value: Value = serde_json::from_str(&tag).unwrap_or(Value::Null);
    let ack = protocol::notification_frame(
        "notifications/subscriptions/acknowledged",
        Some(&json!({ "_meta": tag_value, "notifications": acknowledged }).to_string()),
    );
    let closing = protocol::response_frame(
        id.get(),
        &json!({ "resultType": "complete", "_meta": tag_value }).to_string(),
    );
    tracing::debug!(subscription = id.get(), "listen stream opened");

    let stop = state.shutdown.clone();
    let live = futures_util::stream::unfold(Some(listening), move |listening| {
        let stop = stop.clone();
        let closing = closing.clone();
        async move {
            let listening = listening?;
            loop {
                if let Some((_, frame)) = listening.subscriber.outbox.next_event() {
                    return Some((frame.to_string(), Some(listening)));
                }
                tokio::select! {
                    () = listening.subscriber.outbox.wait() => {}
                    // Graceful end: answer the listen request, then close.
                    () = stop.cancelled() => return Some((closing, None)),
                }
            }
        }
    });
    let events = futures_util::stream::once(async move { ack })
        .chain(live)
        .map(|frame| Ok::<_, std::convert::Infallible>(Event::default().data(frame)));
    let mut response = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(state.http.sse_keepalive))
        .into_response();
    response.headers_mut().insert(
        "x-accel-buffering",
        axum::http::HeaderValue::from_static("no"),
    );
    response
}
