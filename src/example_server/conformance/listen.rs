//! Change notifications of the conformance fixture: `subscriptions/listen`
//! streams (2026-07-28) and the legacy session's plain notifications.
//!
//! A listen request opens a stream: `notifications/subscriptions/acknowledged`
//! first, naming the honoured part of its filter, then the notifications
//! that filter asks for, each tagged with `_meta`
//! `io.modelcontextprotocol/subscriptionId` = the request's id. The request
//! is answered only when the stream ends because the input closed; over
//! stdio `notifications/cancelled` ends it without an answer.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::{Fixture, error};
use crate::example_server::Server;
use crate::protocol::{code, meta};

/// A change the fixture announces.
pub(super) enum Change {
    Tools,
    Prompts,
}

impl Change {
    fn method(&self) -> &'static str {
        match self {
            Self::Tools => "notifications/tools/list_changed",
            Self::Prompts => "notifications/prompts/list_changed",
        }
    }

    fn filter_key(&self) -> &'static str {
        match self {
            Self::Tools => "toolsListChanged",
            Self::Prompts => "promptsListChanged",
        }
    }
}

/// One open listen stream.
struct Stream {
    key: u64,
    id: Value,
    filter: Map<String, Value>,
    /// Set once the acknowledgment went out; nothing is sent before.
    acknowledged: bool,
}

/// The open listen streams.
#[derive(Default)]
pub(super) struct Listens {
    next: AtomicU64,
    open: Mutex<Vec<Stream>>,
    /// Cancelled when the input closes.
    closing: CancellationToken,
}

/// Removes its stream when the listen request ends (cancelled or dropped).
struct Open<'a> {
    listens: &'a Listens,
    key: u64,
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.listens.streams().retain(|s| s.key != self.key);
    }
}

impl Listens {
    pub(super) fn close(&self) {
        self.closing.cancel();
    }

    fn streams(&self) -> std::sync::MutexGuard<'_, Vec<Stream>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Serves one `subscriptions/listen` request until it is cancelled.
    pub(super) async fn listen(
        &self,
        server: &Server,
        id: &Value,
        params: &Value,
    ) -> Result<Value, Value> {
        let Some(requested) = params.get("notifications").and_then(Value::as_object) else {
            return Err(error(
                code::INVALID_PARAMS,
                "subscriptions/listen needs a notifications filter",
            ));
        };
        let mut honoured = Map::new();
        for key in [
            "toolsListChanged",
            "promptsListChanged",
            "resourcesListChanged",
        ] {
            if requested.get(key) == Some(&Value::Bool(true)) {
                honoured.insert(key.into(), Value::Bool(true));
            }
        }
        if let Some(uris) = requested
            .get("resourceSubscriptions")
            .and_then(Value::as_array)
        {
            let uris: Vec<Value> = uris.iter().filter(|u| u.is_string()).cloned().collect();
            honoured.insert("resourceSubscriptions".into(), Value::Array(uris));
        }
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        self.streams().push(Stream {
            key,
            id: id.clone(),
            filter: honoured.clone(),
            acknowledged: false,
        });
        let open = Open { listens: self, key };
        server
            .notify(
                "notifications/subscriptions/acknowledged",
                json!({ "_meta": { (meta::SUBSCRIPTION_ID): id }, "notifications": honoured }),
            )
            .await;
        if let Some(stream) = self.streams().iter_mut().find(|s| s.key == key) {
            stream.acknowledged = true;
        }
        self.closing.cancelled().await;
        drop(open);
        Ok(json!({ "resultType": "complete" }))
    }

    /// Announces `change` to the legacy session (if there is one) and to
    /// every acknowledged stream whose filter asks for it.
    /// Announces `resources/updated` to a legacy session and to the listen
    /// streams that asked for `uri`.
    pub(super) async fn resource_updated(&self, fixture: &Fixture, server: &Server, uri: &str) {
        if fixture.legacy().initialized {
            server
                .notify("notifications/resources/updated", json!({ "uri": uri }))
                .await;
        }
        let ids: Vec<Value> = self
            .streams()
            .iter()
            .filter(|s| {
                s.acknowledged
                    && s.filter
                        .get("resourceSubscriptions")
                        .and_then(Value::as_array)
                        .is_some_and(|uris| uris.iter().any(|u| u == uri))
            })
            .map(|s| s.id.clone())
            .collect();
        for id in ids {
            let params = json!({ "uri": uri, "_meta": { (meta::SUBSCRIPTION_ID): id } });
            server
                .notify("notifications/resources/updated", params)
                .await;
        }
    }

    pub(super) async fn broadcast(&self, fixture: &Fixture, server: &Server, change: Change) {
        if fixture.legacy().initialized {
            server.notify(change.method(), json!({})).await;
        }
        let ids: Vec<Value> = self
            .streams()
            .iter()
            .filter(|s| {
                s.acknowledged && s.filter.get(change.filter_key()) == Some(&Value::Bool(true))
            })
            .map(|s| s.id.clone())
            .collect();
        for id in ids {
            server
                .notify(
                    change.method(),
                    json!({ "_meta": { (meta::SUBSCRIPTION_ID): id } }),
                )
                .await;
        }
    }
}
