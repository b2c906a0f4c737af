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

mod identity;

use identity::{IdentityWatches, Watch};

/// Subscriptions and the log level, for every upstream.
pub(crate) struct Interest {
    table: SubscriptionTable,
    /// The upstream side of subscriptions to upstreams that act as each
    /// caller: per identity's session (see [`identity`]).
    identities: IdentityWatches,
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
            identities: IdentityWatches::default(),
            upstreams,
            level: Mutex::new(None),
        }
    }

    /// The subscription table, to read (who watches a URI, a subscriber's URIs, counts).
    pub(crate) fn table(&self) -> &SubscriptionTable {
        &self.table
    }

    /// The URI clients know for `upstream`'s `original` one: the one they
    /// subscribed with (its form may have changed since, under
    /// `namespace_uris: on_collision`), else its form now.
    pub(crate) fn exposed_uri(&self, upstream: &str, original: &str) -> Arc<str> {
        if let Some(key) = self.table.key_of(upstream, original) {
            return key;
        }
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
        identity: Option<&crate::auth::Identity>,
    ) -> Result<Subscribed, UpstreamError> {
        if handle.acts_as_each_caller() {
            return self
                .subscribe_as(subscriber, uri, handle, original, identity)
                .await;
        }
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

    /// [`Self::subscribe`] at an upstream that acts as each caller: the
    /// first watcher of a URI among an identity's subscribers subscribes it
    /// on that identity's own session (started if need be).
    async fn subscribe_as(
        &self,
        subscriber: SubscriberId,
        uri: &str,
        handle: &UpstreamHandle,
        original: &str,
        identity: Option<&crate::auth::Identity>,
    ) -> Result<Subscribed, UpstreamError> {
        let refused = |why: &'static str| UpstreamError::Credential {
            upstream: handle.name().to_string(),
            error: Box::new(crate::credentials::CredentialError::Unusable(why)),
        };
        let identity = identity.ok_or_else(|| {
            refused("it acts as each caller, and this subscription has no authenticated client")
        })?;
        // The identity's session first: one started now restores the
        // watches it already has, and this one is added after.
        let deadline = tokio::time::Instant::now() + handle.timeout();
        let (conn, session) = handle
            .connection_for(None, Some(identity), deadline)
            .await?;
        if session.acts_as_each_caller() {
            // The service identity's session: its updates are nobody's.
            return Err(refused(
                "a client acting as the service identity cannot subscribe to resources of an upstream that acts as each caller",
            ));
        }
        self.table
            .subscribe(subscriber, uri, handle.name(), original);
        let watch = Watch {
            upstream: handle.name().clone(),
            identity: identity.client.clone(),
            original: original.into(),
        };
        if !self.identities.add(subscriber, uri, watch) {
            return Ok(Subscribed::Done);
        }
        let subscribed = async {
            if session.is_modern() {
                return Ok(Subscribed::WatchSetChanged(session));
            }
            let params = json!({ "uri": original }).to_string();
            conn.request(Method::Subscribe, Some(&params), handle.timeout())
                .await
                .map(|_| Subscribed::Done)
        };
        match subscribed.await {
            Ok(done) => Ok(done),
            Err(e) => {
                self.table.unsubscribe(subscriber, uri);
                self.identities.remove(subscriber, uri);
                Err(e)
            }
        }
    }

    /// Removes `subscriber` from `uri`; the last one out unsubscribes upstream.
    pub(crate) fn unsubscribe(&self, subscriber: SubscriberId, uri: &str) {
        if let Some(last) = self.table.unsubscribe(subscriber, uri) {
            self.release(&last);
        }
        if let Some(watch) = self.identities.remove(subscriber, uri) {
            self.release_as(&watch);
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
        for watch in self.identities.remove_subscriber(subscriber) {
            self.release_as(&watch);
        }
    }

    /// The URIs `identity`'s own session at `upstream` must watch.
    pub(crate) fn watched_as(&self, upstream: &str, identity: &str) -> Vec<Arc<str>> {
        self.identities.originals(upstream, identity)
    }

    /// Tells an identity's session that its last watcher of a URI left.
    fn release_as(&self, watch: &Watch) {
        let Some(session) = self
            .upstreams
            .get(&watch.upstream)
            .and_then(|h| h.identity_session(&watch.identity))
        else {
            return;
        };
        if session.is_modern() {
            session.watch_set_changed();
            return;
        }
        if let Ok(conn) = session.connection() {
            let params = json!({ "uri": &*watch.original }).to_string();
            conn.send_detached(Method::Unsubscribe, Some(&params));
        }
    }

    /// The URIs `upstream` must watch (as it knows them), for its listen stream.
    pub(crate) fn watched_on(&self, upstream: &str) -> Vec<Arc<str>> {
        self.table.originals_of_upstream(upstream)
    }

    /// Tells the upstream that nobody watches a URI any more (best effort).
    /// Per-identity sessions are told by [`Self::release_as`].
    fn release(&self, change: &UpstreamChange) {
        let Some(handle) = self
            .upstreams
            .get(&change.upstream)
            .filter(|h| !h.acts_as_each_caller())
        else {
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

    /// Re-establishes on an identity's freshly (re)connected session what
    /// that identity's clients hold there: its subscribed URIs, and the
    /// log level.
    pub(crate) async fn restore_as(
        &self,
        upstream: &str,
        identity: &str,
        conn: &Connection,
        hello: &ServerHello,
        timeout: Duration,
    ) {
        if !hello.modern && hello.can_subscribe() {
            for uri in self.identities.originals(upstream, identity) {
                let params = json!({ "uri": &*uri }).to_string();
                if let Err(e) = conn
                    .request(Method::Subscribe, Some(&params), timeout)
                    .await
                {
                    tracing::warn!(uri = %uri, error = %e, "could not re-subscribe after reconnect");
                }
            }
        }
        self.restore_level(conn, hello, timeout).await;
    }

    /// Whether `upstream` acts as each caller: what its shared session
    /// announces about resources is nobody's.
    pub(crate) fn acts_as_each_caller(&self, upstream: &str) -> bool {
        self.upstreams
            .get(upstream)
            .is_some_and(|h| h.acts_as_each_caller())
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
