//! What downstream clients want from upstreams, in one owner: the resource
//! subscription table and the log level asked of upstreams.
//!
//! This is the only place that sends `resources/subscribe`,
//! `resources/unsubscribe` and `logging/setLevel` upstream, and the only
//! one that replays them when an upstream comes back. A modern
//! (2026-07-28) upstream has neither: it watches URIs through its listen
//! stream, which its supervisor reopens when [`Interest`] says the set of
//! watched URIs changed. The router, the notify hub and listen streams
//! call in here; nothing in here calls them back.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use super::subscriptions::{SubscriberId, SubscriptionTable, UpstreamChange};
use super::{Connection, ServerHello, UpstreamError, UpstreamHandle, UpstreamSet};
use crate::catalog::naming;
use crate::protocol::{LogLevel, Method};

/// Subscriptions and the log level, for every upstream.
pub(crate) struct Interest {
    table: SubscriptionTable,
    upstreams: Arc<UpstreamSet>,
    /// The level last asked of session-based upstreams; read and changed
    /// only under this lock, so concurrent changes apply in order.
    level: Mutex<Option<LogLevel>>,
}

/// What became of a subscription.
pub(crate) enum Subscribed {
    /// Done: joined an existing subscription, or the upstream confirmed
    /// (or will be told when it reconnects).
    Done,
    /// The URI is new to a modern upstream: its watch set changed, and the
    /// caller tells it (once, after adding several URIs).
    WatchSetChanged(UpstreamHandle),
}

/// No upstreams yet.
impl Default for Interest {
    fn default() -> Self {
        Self::new(Arc::default())
    }
}

impl Interest {
    pub(crate) fn new(upstreams: Arc<UpstreamSet>) -> Self {
        Self {
            table: SubscriptionTable::default(),
            upstreams,
            level: Mutex::new(None),
        }
    }

    /// The subscription table, to read (who watches a URI, a subscriber's URIs, counts).
    pub(crate) fn table(&self) -> &SubscriptionTable {
        &self.table
    }

    /// The URI clients know for `upstream`'s `original` one.
    pub(crate) fn exposed_uri(&self, upstream: &str, original: &str) -> Arc<str> {
        let plain = self
            .upstreams
            .get(upstream)
            .is_some_and(|h| !h.namespaces_uris());
        match plain {
            true => original.into(),
            false => naming::namespaced_uri(upstream, original).into(),
        }
    }

    /// Adds `subscriber` to the watchers of `uri` (`original` at `handle`).
    /// The first watcher of a URI on a session-based upstream subscribes
    /// it there at once; when that fails, the subscription is undone.
    /// While the upstream is down it is recorded and made on reconnect.
    pub(crate) async fn subscribe(
        &self,
        subscriber: SubscriberId,
        uri: &str,
        handle: &UpstreamHandle,
        original: &str,
    ) -> Result<Subscribed, UpstreamError> {
        let first = self
            .table
            .subscribe(subscriber, uri, handle.name(), original)
            .is_some();
        if !first {
            return Ok(Subscribed::Done);
        }
        if handle.is_modern() {
            return Ok(Subscribed::WatchSetChanged(handle.clone()));
        }
        if let Ok(conn) = handle.connection() {
            let params = json!({ "uri": original }).to_string();
            if let Err(e) = conn
                .request(Method::Subscribe, Some(&params), handle.timeout())
                .await
            {
                self.table.unsubscribe(subscriber, uri);
                return Err(e);
            }
        }
        Ok(Subscribed::Done)
    }

    /// Removes `subscriber` from `uri`; the last one out unsubscribes upstream.
    pub(crate) fn unsubscribe(&self, subscriber: SubscriberId, uri: &str) {
        if let Some(last) = self.table.unsubscribe(subscriber, uri) {
            self.release(&last);
        }
    }

    /// Removes a subscriber from every URI it watched (its session or
    /// stream ended), unsubscribing upstream where it was the last, and
    /// stops the per-session instances it had.
    pub(crate) fn forget_subscriber(&self, subscriber: SubscriberId) {
        for handle in self.upstreams.all() {
            handle.release_instance(subscriber);
        }
        for last in self.table.remove_subscriber(subscriber) {
            self.release(&last);
        }
    }

    /// The URIs `upstream` must watch (as it knows them), for its listen stream.
    pub(crate) fn watched_on(&self, upstream: &str) -> Vec<Arc<str>> {
        self.table.originals_of_upstream(upstream)
    }

    /// Tells the upstream that nobody watches a URI any more (best effort).
    fn release(&self, change: &UpstreamChange) {
        let Some(handle) = self.upstreams.get(&change.upstream) else {
            return;
        };
        if handle.is_modern() {
            handle.watch_set_changed();
            return;
        }
        let Ok(conn) = handle.connection() else {
            return;
        };
        let params = json!({ "uri": &*change.original }).to_string();
        if !conn.send_detached(Method::Unsubscribe, Some(&params)) {
            tracing::debug!(upstream = %change.upstream, uri = %change.original, "could not queue resources/unsubscribe");
        }
    }

    /// Asks session-based upstreams for the most verbose level any client
    /// wants (`wanted`, read under the lock), when that changed. Once nobody
    /// wants logs, upstreams are asked for `emergency` only.
    pub(crate) fn want_level(&self, wanted: impl FnOnce() -> Option<LogLevel>) {
        let mut sent = self.level.lock().unwrap_or_else(|e| e.into_inner());
        let target = wanted().or(sent.map(|_| LogLevel::Emergency));
        if target == *sent {
            return;
        }
        *sent = target;
        let Some(level) = target else { return };
        let params = json!({ "level": level.as_str() }).to_string();
        let with_instances = self
            .upstreams
            .all()
            .into_iter()
            .flat_map(|h| std::iter::once(h.clone()).chain(h.instance_handles()));
        for handle in with_instances {
            let (Ok(conn), Some(hello)) = (handle.connection(), handle.hello()) else {
                continue;
            };
            if hello.has("logging") && !hello.modern {
                conn.send_detached(Method::SetLevel, Some(&params));
            }
        }
    }

    /// Re-establishes on a freshly (re)connected session-based upstream
    /// what clients hold there: every subscribed URI, and the log level.
    pub(crate) async fn restore(
        &self,
        upstream: &str,
        conn: &Connection,
        hello: &ServerHello,
        timeout: Duration,
    ) {
        // A modern upstream gets its URIs through the listen stream its
        // supervisor opens, and has no session-wide log level.
        if hello.modern {
            return;
        }
        if hello.can_subscribe() {
            let uris = self.table.originals_of_upstream(upstream);
            let subscribes = uris.iter().map(|uri| {
                let params = json!({ "uri": &**uri }).to_string();
                async move {
                    let outcome = conn.request(Method::Subscribe, Some(&params), timeout);
                    (uri, outcome.await)
                }
            });
            let mut restored = 0;
            for (uri, outcome) in futures_util::future::join_all(subscribes).await {
                match outcome {
                    Ok(_) => restored += 1,
                    Err(e) => {
                        tracing::warn!(uri = %uri, error = %e, "could not re-subscribe after reconnect")
                    }
                }
            }
            if restored > 0 {
                tracing::info!(restored, "re-subscribed resources");
            }
        }
        self.restore_level(conn, hello, timeout).await;
    }

    /// Asks a freshly (re)connected session-based upstream (or per-session
    /// instance) for the log level last asked of upstreams, if any.
    pub(crate) async fn restore_level(
        &self,
        conn: &Connection,
        hello: &ServerHello,
        timeout: Duration,
    ) {
        let level = *self.level.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(level) = level.filter(|_| hello.has("logging") && !hello.modern) {
            let params = json!({ "level": level.as_str() }).to_string();
            if let Err(e) = conn.request(Method::SetLevel, Some(&params), timeout).await {
                tracing::warn!(error = %e, "could not restore the log level");
            }
        }
    }
}
