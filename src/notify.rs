//! The notify hub: fans upstream changes out to downstream subscribers.
//!
//! Every downstream session (and, later, every modern listen stream) is a
//! [`Subscriber`] with its own bounded [`Outbox`]. The hub is called from
//! upstream reader and supervisor tasks and never waits on a client:
//! `list_changed` goes to every subscriber, `resources/updated` only to the
//! subscribers of that URI (looked up in the [`SubscriptionTable`]), and
//! `notifications/message` only to subscribers whose log level admits it.
//! The hub also asks each upstream for the most verbose log level any
//! subscriber wants, and tells upstreams to unsubscribe when the last
//! subscriber of a URI goes away. Under a `policy` ([`Views`]), a
//! subscriber with an identity hears only of its own view: `list_changed`
//! when its view of a kind changed, `resources/updated` for URIs it may
//! read, log messages from upstreams it sees something of.

pub mod outbox;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dashmap::DashMap;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

pub use outbox::Outbox;

use crate::auth::Identity;
use crate::catalog::{ListKind, naming};
use crate::policy::{Seen, Views};
use crate::subscriptions::{SubscriberId, SubscriptionTable, UpstreamChange};
use crate::upstream::{Connection, ServerHello, UpstreamSet};

/// MCP log levels, least to most severe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Debug = 1,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl LogLevel {
    const ALL: [LogLevel; 8] = [
        Self::Debug,
        Self::Info,
        Self::Notice,
        Self::Warning,
        Self::Error,
        Self::Critical,
        Self::Alert,
        Self::Emergency,
    ];

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Notice => "notice",
            Self::Warning => "warning",
            Self::Error => "error",
            Self::Critical => "critical",
            Self::Alert => "alert",
            Self::Emergency => "emergency",
        }
    }

    fn from_u8(v: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|l| *l as u8 == v)
    }
}

/// One downstream receiver of notifications.
pub struct Subscriber {
    pub id: SubscriberId,
    pub outbox: Outbox,
    /// The client's `logging/setLevel`; 0 until it sets one (no log messages).
    log_level: AtomicU8,
    /// The list kinds it wants `list_changed` for.
    wants: ListFilter,
    /// Log messages only from this upstream (a modern request's log tap).
    only_upstream: Option<Arc<str>>,
    /// The authenticated client it belongs to; set once.
    identity: std::sync::OnceLock<Arc<Identity>>,
    /// The views it was last told about, under a policy.
    seen: Seen,
}

/// Which `list_changed` notifications a subscriber asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListFilter {
    pub tools: bool,
    pub prompts: bool,
    pub resources: bool,
}

impl ListFilter {
    /// Every kind: what a legacy session receives.
    pub const ALL: ListFilter = ListFilter {
        tools: true,
        prompts: true,
        resources: true,
    };

    pub fn wants(&self, kind: ListKind) -> bool {
        match kind {
            ListKind::Tools => self.tools,
            ListKind::Prompts => self.prompts,
            ListKind::Resources | ListKind::Templates => self.resources,
        }
    }
}

impl Subscriber {
    pub fn log_level(&self) -> Option<LogLevel> {
        LogLevel::from_u8(self.log_level.load(Ordering::Relaxed))
    }

    /// The authenticated client it belongs to, if any.
    pub fn identity(&self) -> Option<&Arc<Identity>> {
        self.identity.get()
    }
}

/// Routes upstream notifications to subscribers.
pub struct NotifyHub {
    subscribers: DashMap<SubscriberId, Arc<Subscriber>>,
    /// Notification counts of every outbox, for `/metrics`.
    counts: Arc<crate::metrics::NotificationCounts>,
    /// Open modern listen streams.
    listeners: std::sync::atomic::AtomicUsize,
    subscriptions: SubscriptionTable,
    upstreams: Arc<UpstreamSet>,
    next_id: AtomicU64,
    /// The level last sent to upstreams; changed only under this lock.
    upstream_level: Mutex<Option<LogLevel>>,
    /// The policy and the catalog it filters; none: no policy machinery.
    views: Option<Arc<Views>>,
}

impl NotifyHub {
    pub fn new(upstreams: Arc<UpstreamSet>) -> Self {
        Self::build(upstreams, None)
    }

    /// A hub that filters each subscriber's notifications by its view.
    pub(crate) fn with_views(upstreams: Arc<UpstreamSet>, views: Arc<Views>) -> Self {
        Self::build(upstreams, Some(views))
    }

    fn build(upstreams: Arc<UpstreamSet>, views: Option<Arc<Views>>) -> Self {
        Self {
            subscribers: DashMap::new(),
            counts: Arc::default(),
            listeners: std::sync::atomic::AtomicUsize::new(0),
            subscriptions: SubscriptionTable::default(),
            upstreams,
            next_id: AtomicU64::new(1),
            upstream_level: Mutex::new(None),
            views,
        }
    }

    /// The policy views, when the hub has them.
    pub(crate) fn views(&self) -> Option<&Arc<Views>> {
        self.views.as_ref()
    }

    pub fn subscriptions(&self) -> &SubscriptionTable {
        &self.subscriptions
    }

    pub fn subscriber_count(&self) -> usize {
        self.subscribers.len()
    }

    /// A new subscriber with an empty outbox that wants every list kind.
    pub fn register(&self) -> Arc<Subscriber> {
        self.register_as(None)
    }

    /// A new subscriber of `identity` (a session) that wants every list kind.
    pub fn register_as(&self, identity: Option<Arc<Identity>>) -> Arc<Subscriber> {
        let subscriber = self.insert(
            Outbox::new(self.counts.clone(), None),
            ListFilter::ALL,
            None,
        );
        if let Some(identity) = identity {
            self.bind_identity(&subscriber, identity);
        }
        subscriber
    }

    /// A new modern listen stream of `identity`: only the kinds in `wants`,
    /// every notification tagged with `_meta` `tag`.
    pub fn register_listener(
        &self,
        wants: ListFilter,
        tag: String,
        identity: Option<Arc<Identity>>,
    ) -> Arc<Subscriber> {
        self.listeners.fetch_add(1, Ordering::Relaxed);
        let subscriber = self.insert(Outbox::new(self.counts.clone(), Some(tag)), wants, None);
        if let Some(identity) = identity {
            self.bind_identity(&subscriber, identity);
        }
        subscriber
    }

    /// Says whose a subscriber is (once; a later call is ignored). From
    /// then on it hears only of what the policy lets that client see.
    pub(crate) fn bind_identity(&self, subscriber: &Subscriber, identity: Arc<Identity>) {
        if subscriber.identity.set(identity).is_ok()
            && let (Some(views), Some(identity)) = (&self.views, subscriber.identity())
        {
            views.baseline(identity, &subscriber.seen);
        }
    }

    /// The identity of subscriber `id`, if it has one.
    pub(crate) fn identity_of(&self, id: SubscriberId) -> Option<Arc<Identity>> {
        self.subscribers.get(&id)?.identity().cloned()
    }

    /// A modern request's log tap: `upstream`'s log messages at `level` or
    /// above, for as long as the request runs. Unregister it when done.
    pub fn register_log_tap(&self, upstream: Arc<str>, level: LogLevel) -> Arc<Subscriber> {
        let none = ListFilter {
            tools: false,
            prompts: false,
            resources: false,
        };
        let tap = self.insert(Outbox::new(self.counts.clone(), None), none, Some(upstream));
        self.set_log_level(&tap, level);
        tap
    }

    fn insert(
        &self,
        outbox: Outbox,
        wants: ListFilter,
        only_upstream: Option<Arc<str>>,
    ) -> Arc<Subscriber> {
        let subscriber = Arc::new(Subscriber {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            outbox,
            log_level: AtomicU8::new(0),
            wants,
            only_upstream,
            identity: std::sync::OnceLock::new(),
            seen: Seen::default(),
        });
        self.subscribers.insert(subscriber.id, subscriber.clone());
        subscriber
    }

    /// Removes a subscriber and everything it held: its URIs (unsubscribing
    /// upstream where it was the last) and its log level.
    pub fn unregister(&self, id: SubscriberId) {
        let removed = self.subscribers.remove(&id).map(|(_, s)| s);
        if removed.as_ref().is_some_and(|s| s.outbox.is_tagged()) {
            self.listeners.fetch_sub(1, Ordering::Relaxed);
        }
        let had_level = removed.is_some_and(|s| s.log_level().is_some());
        for change in self.subscriptions.remove_subscriber(id) {
            self.unsubscribe_upstream(&change);
        }
        if had_level {
            self.update_upstream_level();
        }
    }

    /// Tells the upstream that nobody watches a URI any more (best effort).
    pub fn unsubscribe_upstream(&self, change: &UpstreamChange) {
        let Some(handle) = self.upstreams.get(&change.upstream) else {
            return;
        };
        if handle.is_modern() {
            // A modern upstream watches URIs through its listen stream.
            handle.watch_set_changed();
            return;
        }
        let Ok(conn) = handle.connection() else {
            return;
        };
        let params = json!({ "uri": &*change.original }).to_string();
        if !conn.send_detached("resources/unsubscribe", Some(&params)) {
            tracing::debug!(upstream = %change.upstream, uri = %change.original, "could not queue resources/unsubscribe");
        }
    }

    /// Every subscriber learns that these lists changed (a subscriber of
    /// an identity: when its view of them changed).
    pub fn lists_changed(&self, kinds: &[ListKind]) {
        if kinds.is_empty() {
            return;
        }
        let mut fanout = self.views.as_ref().map(|v| v.fanout());
        for subscriber in &self.subscribers {
            let identity = subscriber.identity().map(|i| &**i);
            for kind in kinds {
                // Asked for every kind, so what it has seen stays current.
                let news = fanout
                    .as_mut()
                    .is_none_or(|f| f.tells(identity, &subscriber.seen, *kind));
                if news && subscriber.wants.wants(*kind) {
                    subscriber.outbox.mark_list_changed(*kind);
                }
            }
        }
    }

    /// A new policy is in force (a reload): subscribers whose view changed
    /// get `list_changed`, and lose subscriptions to URIs it does not allow.
    pub(crate) fn policy_changed(&self) {
        let Some(views) = &self.views else { return };
        let mut fanout = views.fanout();
        for subscriber in &self.subscribers {
            let Some(identity) = subscriber.identity() else {
                continue;
            };
            for kind in ListKind::ALL {
                if fanout.tells(Some(identity), &subscriber.seen, kind)
                    && subscriber.wants.wants(kind)
                {
                    subscriber.outbox.mark_list_changed(kind);
                }
            }
            for uri in self.subscriptions.uris_of(subscriber.id) {
                if !views.allows(Some(identity), &uri)
                    && let Some(last) = self.subscriptions.unsubscribe(subscriber.id, &uri)
                {
                    self.unsubscribe_upstream(&last);
                }
            }
        }
    }

    /// Whether `subscriber` may hear of `key` (a URI or a name).
    fn may_see(&self, subscriber: &Subscriber, key: &str) -> bool {
        self.views
            .as_ref()
            .is_none_or(|v| v.allows(subscriber.identity().map(|i| &**i), key))
    }

    /// An upstream resource changed: tell exactly its subscribers.
    pub fn resource_updated(&self, upstream: &str, original_uri: &str) {
        let plain = self
            .upstreams
            .get(upstream)
            .is_some_and(|h| !h.namespaces_uris());
        let uri: Arc<str> = match plain {
            true => original_uri.into(),
            false => naming::namespaced_uri(upstream, original_uri).into(),
        };
        for id in self.subscriptions.subscribers(&uri) {
            if let Some(subscriber) = self.subscribers.get(&id)
                && self.may_see(&subscriber, &uri)
            {
                subscriber.outbox.mark_updated(uri.clone());
            }
        }
    }

    /// An upstream log message: forwarded to subscribers whose level admits
    /// it, with the logger name prefixed by the upstream's.
    pub fn log_message(&self, upstream: &str, params: Option<&RawValue>) {
        let Some(mut params) =
            params.and_then(|p| serde_json::from_str::<Map<String, Value>>(p.get()).ok())
        else {
            return;
        };
        let Some(level) = params
            .get("level")
            .and_then(Value::as_str)
            .and_then(LogLevel::parse)
        else {
            return;
        };
        let logger = match params.get("logger").and_then(Value::as_str) {
            Some(inner) => format!("{upstream}/{inner}"),
            None => upstream.to_owned(),
        };
        params.insert("logger".into(), Value::from(logger));
        let frame: Arc<str> = crate::protocol::notification_frame(
            "notifications/message",
            Some(&Value::Object(params).to_string()),
        )
        .into();
        for subscriber in &self.subscribers {
            let from_its_upstream = subscriber
                .only_upstream
                .as_deref()
                .is_none_or(|u| u == upstream);
            let sees_upstream = || {
                self.views
                    .as_ref()
                    .is_none_or(|v| v.sees_upstream(subscriber.identity().map(|i| &**i), upstream))
            };
            if from_its_upstream
                && subscriber.log_level().is_some_and(|wanted| level >= wanted)
                && sees_upstream()
            {
                subscriber.outbox.push_message(frame.clone());
            }
        }
    }

    /// Records a subscriber's `logging/setLevel` and updates upstreams.
    pub fn set_log_level(&self, subscriber: &Subscriber, level: LogLevel) {
        subscriber.log_level.store(level as u8, Ordering::Relaxed);
        self.update_upstream_level();
    }

    /// The most verbose level any subscriber wants.
    pub fn wanted_level(&self) -> Option<LogLevel> {
        self.subscribers.iter().filter_map(|s| s.log_level()).min()
    }

    /// Sends `logging/setLevel` to every connected upstream when the wanted
    /// level changed. Once nobody wants logs, upstreams are asked for
    /// `emergency` only.
    fn update_upstream_level(&self) {
        let mut sent = self
            .upstream_level
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let wanted = self.wanted_level();
        let target = wanted.or(sent.map(|_| LogLevel::Emergency));
        if target == *sent || target.is_none() {
            return;
        }
        *sent = target;
        let Some(level) = target else { return };
        for handle in self.upstreams.all() {
            let (Ok(conn), Some(hello)) = (handle.connection(), handle.hello()) else {
                continue;
            };
            if hello.has("logging") && !hello.modern {
                let params = json!({ "level": level.as_str() }).to_string();
                conn.send_detached("logging/setLevel", Some(&params));
            }
        }
    }

    /// Re-establishes what downstream clients hold on a freshly (re)connected
    /// upstream: every subscribed URI, and the log level.
    pub async fn restore_upstream(
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
            let uris = self.subscriptions.originals_of_upstream(upstream);
            let subscribes = uris.iter().map(|uri| {
                let params = json!({ "uri": &**uri }).to_string();
                async move {
                    (
                        uri,
                        conn.request("resources/subscribe", Some(&params), timeout)
                            .await,
                    )
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
        let level = *self
            .upstream_level
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(level) = level.filter(|_| hello.has("logging")) {
            let params = json!({ "level": level.as_str() }).to_string();
            if let Err(e) = conn
                .request("logging/setLevel", Some(&params), timeout)
                .await
            {
                tracing::warn!(error = %e, "could not restore the log level");
            }
        }
    }

    /// Notification counts, for `/metrics`.
    pub fn counts(&self) -> &crate::metrics::NotificationCounts {
        &self.counts
    }

    /// Open modern listen streams.
    pub fn listener_count(&self) -> usize {
        self.listeners.load(Ordering::Relaxed)
    }

    /// Backlog sizes per subscriber, for tests and metrics.
    pub fn backlogs(&self) -> HashMap<SubscriberId, outbox::Backlog> {
        self.subscribers
            .iter()
            .map(|s| (s.id, s.outbox.backlog()))
            .collect()
    }
}

#[cfg(test)]
mod policy_tests;
