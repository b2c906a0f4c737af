//! The notify hub: fans upstream changes out to downstream subscribers.
//!
//! Every downstream session (and, later, every modern listen stream) is a
//! [`Subscriber`] with its own bounded [`Outbox`]. The hub is called from
//! upstream reader and supervisor tasks and never waits on a client:
//! `list_changed` goes to every subscriber, `resources/updated` only to the
//! subscribers of that URI (looked up in the [`SubscriptionTable`]), and
//! `notifications/message` only to subscribers whose log level admits it.
//! Which URIs have subscribers, and which log level upstreams are asked
//! for, belongs to [`Interest`] (in `upstream`): the hub reads who watches
//! a URI there, and tells it when a subscriber leaves or changes its level. Under a `policy` ([`Views`]), a
//! subscriber with an identity hears only of its own view: `list_changed`
//! when its view of a kind changed, `resources/updated` for URIs it may
//! read, log messages from upstreams it sees something of. Task status
//! notifications go only to the task's creator ([`tasks`]).

mod asks;
pub(crate) mod outbox;
pub(crate) mod tasks;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use dashmap::DashMap;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

pub(crate) use outbox::Outbox;

use crate::auth::Identity;
use crate::catalog::ListKind;
use crate::policy::{Seen, Views};
use crate::protocol::Method;
use crate::upstream::{
    AskRefused, ClientAnswer, ClientAsk, Interest, SubscriberId, SubscriptionTable, UpstreamEvents,
};

pub(crate) use crate::protocol::LogLevel;

/// One downstream receiver of notifications.
pub(crate) struct Subscriber {
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
    /// The endpoint it belongs to; none: the whole view (`/mcp`).
    endpoint: Option<Arc<str>>,
    /// The views it was last told about.
    seen: Seen,
    /// Requests upstreams asked of this client, waiting for its answers.
    pub(crate) asks: asks::Asks,
    /// The `clientInfo` name and version it declared, if any (set once).
    client_info: std::sync::OnceLock<(Box<str>, Box<str>)>,
    /// When it was registered.
    since: std::time::Instant,
}

/// Which `list_changed` notifications a subscriber asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ListFilter {
    pub tools: bool,
    pub prompts: bool,
    pub resources: bool,
}

impl ListFilter {
    /// Every kind: what a legacy session receives.
    pub(crate) const ALL: ListFilter = ListFilter {
        tools: true,
        prompts: true,
        resources: true,
    };

    pub(crate) fn wants(&self, kind: ListKind) -> bool {
        match kind {
            ListKind::Tools => self.tools,
            ListKind::Prompts => self.prompts,
            ListKind::Resources | ListKind::Templates => self.resources,
        }
    }
}

impl Subscriber {
    pub(crate) fn log_level(&self) -> Option<LogLevel> {
        LogLevel::from_u8(self.log_level.load(Ordering::Relaxed))
    }

    /// The authenticated client it belongs to, if any.
    pub(crate) fn identity(&self) -> Option<&Arc<Identity>> {
        self.identity.get()
    }

    /// The endpoint it belongs to; none: the whole view.
    pub(crate) fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref()
    }

    /// The client's declared name and version, if it sent `clientInfo`.
    pub(crate) fn client_info(&self) -> Option<(&str, &str)> {
        self.client_info.get().map(|(n, v)| (&**n, &**v))
    }

    /// How long ago it was registered.
    pub(crate) fn age(&self) -> std::time::Duration {
        self.since.elapsed()
    }

    /// A modern listen stream (its notifications are tagged).
    pub(crate) fn is_listener(&self) -> bool {
        self.outbox.is_tagged()
    }

    /// A request's log tap rather than a session or stream.
    pub(crate) fn is_log_tap(&self) -> bool {
        self.only_upstream.is_some()
    }

    /// Records a `clientInfo` object's name and version (once; strings
    /// only, each cut to 128 characters).
    pub(crate) fn set_client_info(&self, info: Option<&Value>) {
        let Some(info) = info.and_then(Value::as_object) else {
            return;
        };
        let field = |key: &str| -> Box<str> {
            info.get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .chars()
                .take(128)
                .collect::<String>()
                .into()
        };
        let _ = self.client_info.set((field("name"), field("version")));
    }
}

/// Routes upstream notifications to subscribers.
pub(crate) struct NotifyHub {
    subscribers: DashMap<SubscriberId, Arc<Subscriber>, crate::hashing::RandomState>,
    /// Notification counts of every outbox, for `/metrics`.
    counts: Arc<crate::metrics::NotificationCounts>,
    /// Open modern listen streams.
    listeners: std::sync::atomic::AtomicUsize,
    /// Subscriptions and the log level upstreams are asked for: the hub
    /// reads who watches what, and tells it when a subscriber leaves or
    /// changes its level.
    interest: Arc<Interest>,
    next_id: AtomicU64,
    /// The counter behind gateway-issued ids of requests for clients.
    next_ask: AtomicU64,
    /// The policy and the catalog it filters; none: no policy machinery.
    views: Option<Arc<Views>>,
    /// Upstream tasks by gateway id, with their creators (see [`tasks`]).
    tasks: tasks::TaskTable,
    /// Cached results, evicted here when an upstream says they changed.
    results: Arc<crate::cache::ResultCache>,
}

impl NotifyHub {
    /// A hub without a policy.
    #[cfg(test)]
    pub(crate) fn new(interest: Arc<Interest>) -> Self {
        Self::build(interest, None)
    }

    /// A hub that filters each subscriber's notifications by its view.
    pub(crate) fn with_views(interest: Arc<Interest>, views: Arc<Views>) -> Self {
        Self::build(interest, Some(views))
    }

    fn build(interest: Arc<Interest>, views: Option<Arc<Views>>) -> Self {
        Self {
            subscribers: DashMap::default(),
            counts: Arc::default(),
            listeners: std::sync::atomic::AtomicUsize::new(0),
            interest,
            next_id: AtomicU64::new(1),
            next_ask: AtomicU64::new(1),
            views,
            tasks: tasks::TaskTable::default(),
            results: Arc::default(),
        }
    }

    /// The result cache (the router reads and fills it).
    pub(crate) fn results(&self) -> &Arc<crate::cache::ResultCache> {
        &self.results
    }

    /// What clients want of upstreams (subscriptions, log level).
    pub(crate) fn interest(&self) -> &Arc<Interest> {
        &self.interest
    }

    /// The policy views, when the hub has them.
    pub(crate) fn views(&self) -> Option<&Arc<Views>> {
        self.views.as_ref()
    }

    pub(crate) fn subscriptions(&self) -> &SubscriptionTable {
        self.interest.table()
    }

    /// Every registered subscriber now, in no particular order.
    pub(crate) fn all_subscribers(&self) -> Vec<Arc<Subscriber>> {
        self.subscribers.iter().map(|s| s.value().clone()).collect()
    }

    pub(crate) fn subscriber_count(&self) -> usize {
        self.subscribers.len()
    }

    /// A new subscriber with an empty outbox that wants every list kind.
    #[cfg(test)]
    pub(crate) fn register(&self) -> Arc<Subscriber> {
        self.register_as(None)
    }

    /// A new subscriber of `identity` (a session of the whole view) that
    /// wants every list kind.
    pub(crate) fn register_as(&self, identity: Option<Arc<Identity>>) -> Arc<Subscriber> {
        self.register_at(None, identity)
    }

    /// A new subscriber of `identity` (a session) of an endpoint's view
    /// (none: the whole one) that wants every list kind.
    pub(crate) fn register_at(
        &self,
        endpoint: Option<Arc<str>>,
        identity: Option<Arc<Identity>>,
    ) -> Arc<Subscriber> {
        let subscriber = self.insert(
            Outbox::new(self.counts.clone(), None),
            ListFilter::ALL,
            None,
            endpoint,
        );
        self.bind_or_baseline(&subscriber, identity);
        subscriber
    }

    /// Binds `identity`, or records the subscriber's view without one.
    fn bind_or_baseline(&self, subscriber: &Subscriber, identity: Option<Arc<Identity>>) {
        match identity {
            Some(identity) => self.bind_identity(subscriber, identity),
            None => {
                if let Some(views) = &self.views {
                    views.baseline(subscriber.endpoint(), None, &subscriber.seen);
                }
            }
        }
    }

    /// A new modern listen stream of `identity`: only the kinds in `wants`,
    /// every notification tagged with `_meta` `tag`.
    pub(crate) fn register_listener(
        &self,
        wants: ListFilter,
        tag: String,
        endpoint: Option<Arc<str>>,
        identity: Option<Arc<Identity>>,
    ) -> Arc<Subscriber> {
        self.listeners.fetch_add(1, Ordering::Relaxed);
        let subscriber = self.insert(
            Outbox::new(self.counts.clone(), Some(tag)),
            wants,
            None,
            endpoint,
        );
        self.bind_or_baseline(&subscriber, identity);
        subscriber
    }

    /// Says whose a subscriber is (once; a later call is ignored). From
    /// then on it hears only of what the policy lets that client see.
    pub(crate) fn bind_identity(&self, subscriber: &Subscriber, identity: Arc<Identity>) {
        if subscriber.identity.set(identity).is_ok()
            && let (Some(views), Some(identity)) = (&self.views, subscriber.identity())
        {
            views.baseline(subscriber.endpoint(), Some(identity), &subscriber.seen);
        }
    }

    /// The identity of subscriber `id`, if it has one.
    pub(crate) fn identity_of(&self, id: SubscriberId) -> Option<Arc<Identity>> {
        self.subscribers.get(&id)?.identity().cloned()
    }

    /// The endpoint of subscriber `id`; none: the whole view (or unknown).
    pub(crate) fn endpoint_of(&self, id: SubscriberId) -> Option<Arc<str>> {
        self.subscribers.get(&id)?.endpoint.clone()
    }

    /// A modern request's log tap: `upstream`'s log messages at `level` or
    /// above, for as long as the request runs. Unregister it when done.
    pub(crate) fn register_log_tap(&self, upstream: Arc<str>, level: LogLevel) -> Arc<Subscriber> {
        let none = ListFilter {
            tools: false,
            prompts: false,
            resources: false,
        };
        let tap = self.insert(
            Outbox::new(self.counts.clone(), None),
            none,
            Some(upstream),
            None,
        );
        self.set_log_level(&tap, level);
        tap
    }

    fn insert(
        &self,
        outbox: Outbox,
        wants: ListFilter,
        only_upstream: Option<Arc<str>>,
        endpoint: Option<Arc<str>>,
    ) -> Arc<Subscriber> {
        let subscriber = Arc::new(Subscriber {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            outbox,
            log_level: AtomicU8::new(0),
            wants,
            only_upstream,
            identity: std::sync::OnceLock::new(),
            endpoint,
            seen: Seen::default(),
            asks: asks::Asks::default(),
            client_info: std::sync::OnceLock::new(),
            since: std::time::Instant::now(),
        });
        self.subscribers.insert(subscriber.id, subscriber.clone());
        subscriber
    }

    /// Removes a subscriber and everything it held: its URIs (unsubscribing
    /// upstream where it was the last) and its log level.
    pub(crate) fn unregister(&self, id: SubscriberId) {
        let removed = self.subscribers.remove(&id).map(|(_, s)| s);
        if removed.as_ref().is_some_and(|s| s.outbox.is_tagged()) {
            self.listeners.fetch_sub(1, Ordering::Relaxed);
        }
        let had_level = removed.is_some_and(|s| s.log_level().is_some());
        self.tasks.forget_subscriber(id);
        self.interest.forget_subscriber(id);
        if had_level {
            self.interest.want_level(|| self.wanted_level());
        }
    }

    /// Every subscriber whose view of these lists changed learns so.
    pub(crate) fn lists_changed(&self, kinds: &[ListKind]) {
        if kinds.is_empty() {
            return;
        }
        let mut fanout = self.views.as_ref().map(|v| v.fanout());
        for subscriber in &self.subscribers {
            if subscriber.is_log_tap() {
                continue;
            }
            let identity = subscriber.identity().map(|i| &**i);
            for kind in kinds {
                // Asked for every kind, so what it has seen stays current.
                let news = fanout.as_mut().is_none_or(|f| {
                    f.tells(subscriber.endpoint(), identity, &subscriber.seen, *kind)
                });
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
            if subscriber.is_log_tap() {
                continue;
            }
            let identity = subscriber.identity().map(|i| &**i);
            let endpoint = subscriber.endpoint();
            for kind in ListKind::ALL {
                if fanout.tells(endpoint, identity, &subscriber.seen, kind)
                    && subscriber.wants.wants(kind)
                {
                    subscriber.outbox.mark_list_changed(kind);
                }
            }
            for uri in self.interest.table().uris_of(subscriber.id) {
                if !views.allows(endpoint, identity, &uri) {
                    self.interest.unsubscribe(subscriber.id, &uri);
                }
            }
        }
    }

    /// Whether `subscriber` may hear of `key` (a URI or a name).
    fn may_see(&self, subscriber: &Subscriber, key: &str) -> bool {
        self.views.as_ref().is_none_or(|v| {
            v.allows(
                subscriber.endpoint(),
                subscriber.identity().map(|i| &**i),
                key,
            )
        })
    }

    /// An upstream resource changed: tell exactly its subscribers (only
    /// subscriber `only`, when set).
    pub(crate) fn resource_updated(&self, upstream: &str, original_uri: &str) {
        // An upstream that acts as each caller announces updates on each
        // identity's session (`resource_updated_as`); what its shared
        // session says is nobody's.
        if self.interest.acts_as_each_caller(upstream) {
            return;
        }
        self.resource_updated_to(Audience::All, upstream, original_uri);
    }

    fn resource_updated_to(&self, to: Audience<'_>, upstream: &str, original_uri: &str) {
        let uri = self.interest.exposed_uri(upstream, original_uri);
        // Serialized once, shared by every untagged outbox of the URI.
        let mut frame: Option<Arc<str>> = None;
        for id in self.interest.table().subscribers(&uri) {
            if let Some(subscriber) = self.subscribers.get(&id)
                && to.includes(id, &subscriber)
                && self.may_see(&subscriber, &uri)
            {
                let shared = match subscriber.outbox.is_tagged() {
                    true => None,
                    false => Some(
                        frame
                            .get_or_insert_with(|| outbox::updated_frame(&uri, None))
                            .clone(),
                    ),
                };
                subscriber.outbox.mark_updated_framed(uri.clone(), shared);
            }
        }
    }

    /// An upstream log message: forwarded to subscribers whose level admits
    /// it, with the logger name prefixed by the upstream's.
    pub(crate) fn log_message(&self, upstream: &str, params: Option<&RawValue>) {
        self.log_message_to(None, upstream, params);
    }

    /// [`Self::log_message`], to subscriber `only` alone when set.
    fn log_message_to(
        &self,
        only: Option<SubscriberId>,
        upstream: &str,
        params: Option<&RawValue>,
    ) {
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
            if only.is_some_and(|o| o != subscriber.id) {
                continue;
            }
            let from_its_upstream = subscriber
                .only_upstream
                .as_deref()
                .is_none_or(|u| u == upstream);
            let sees_upstream = || {
                self.views.as_ref().is_none_or(|v| {
                    v.sees_upstream(
                        subscriber.endpoint(),
                        subscriber.identity().map(|i| &**i),
                        upstream,
                    )
                })
            };
            if from_its_upstream
                && subscriber.log_level().is_some_and(|wanted| level >= wanted)
                && sees_upstream()
            {
                subscriber.outbox.push_message(frame.clone());
            }
        }
    }

    /// Session `subscriber`'s client said its roots changed.
    pub(crate) fn roots_changed(&self, subscriber: SubscriberId) {
        if let Some(subscriber) = self.subscribers.get(&subscriber) {
            subscriber.asks.roots_changed();
        }
    }

    /// A client's answer (`result` or `error`) to request `id` the gateway
    /// sent it on behalf of an upstream; given back if no such request
    /// waits for this subscriber here (another session's id is as unknown
    /// as a made-up one; another replica may have asked it).
    pub(crate) fn answer(
        &self,
        subscriber: SubscriberId,
        id: &str,
        answer: ClientAnswer,
    ) -> Result<(), ClientAnswer> {
        match self.subscribers.get(&subscriber) {
            Some(s) => s.asks.answer(id, answer),
            None => Err(answer),
        }
    }

    /// Requests for clients that wait for an answer, over every subscriber.
    pub(crate) fn asks_waiting(&self) -> usize {
        self.subscribers.iter().map(|s| s.asks.len()).sum()
    }

    /// Records the capabilities a session's client declared in `initialize`.
    pub(crate) fn set_client_capabilities(
        &self,
        subscriber: &Subscriber,
        params: Option<crate::protocol::Raw<'_>>,
    ) {
        let mut params =
            params.and_then(|p| serde_json::from_str::<Map<String, Value>>(p.get()).ok());
        if let Some(p) = &params {
            subscriber.set_client_info(p.get("clientInfo"));
        }
        let capabilities = params
            .take()
            .and_then(|mut p| match p.remove("capabilities") {
                Some(Value::Object(c)) => Some(c),
                _ => None,
            })
            .unwrap_or_default();
        subscriber.asks.set_capabilities(capabilities);
    }

    /// Records a subscriber's `logging/setLevel` and updates upstreams.
    pub(crate) fn set_log_level(&self, subscriber: &Subscriber, level: LogLevel) {
        subscriber.log_level.store(level as u8, Ordering::Relaxed);
        self.interest.want_level(|| self.wanted_level());
    }

    /// The most verbose level any subscriber wants.
    pub(crate) fn wanted_level(&self) -> Option<LogLevel> {
        self.subscribers.iter().filter_map(|s| s.log_level()).min()
    }

    /// Notification counts, for `/metrics`.
    pub(crate) fn counts(&self) -> &crate::metrics::NotificationCounts {
        &self.counts
    }

    /// Open modern listen streams.
    pub(crate) fn listener_count(&self) -> usize {
        self.listeners.load(Ordering::Relaxed)
    }

    /// Backlog sizes per subscriber, for tests and metrics.
    pub(crate) fn backlogs(&self) -> HashMap<SubscriberId, outbox::Backlog> {
        self.subscribers
            .iter()
            .map(|s| (s.id, s.outbox.backlog()))
            .collect()
    }
}

/// Which of a URI's subscribers hear of an update.
enum Audience<'a> {
    All,
    /// One session (its own per-session instance sent it).
    Session(SubscriberId),
    /// The subscribers of one identity (its own upstream session sent it).
    Identity(&'a str),
}

impl Audience<'_> {
    fn includes(&self, id: SubscriberId, subscriber: &Subscriber) -> bool {
        match self {
            Audience::All => true,
            Audience::Session(only) => *only == id,
            Audience::Identity(who) => subscriber.identity().is_some_and(|i| &*i.client == *who),
        }
    }
}

/// What upstreams announce reaches subscribers through the hub.
impl UpstreamEvents for NotifyHub {
    fn resource_updated(&self, upstream: &str, original_uri: &str) {
        self.results.resource_updated(upstream, original_uri);
        NotifyHub::resource_updated(self, upstream, original_uri);
    }

    fn log_message(&self, upstream: &str, params: Option<&RawValue>) {
        NotifyHub::log_message(self, upstream, params);
    }

    fn lists_changed(&self, kinds: &[ListKind]) {
        self.results.kind_changed(
            kinds.contains(&ListKind::Resources),
            kinds.contains(&ListKind::Prompts),
        );
        NotifyHub::lists_changed(self, kinds);
    }

    fn ask_client(
        &self,
        session: u64,
        method: &Method,
        params: Option<&RawValue>,
    ) -> Result<ClientAsk, AskRefused> {
        let subscriber = self
            .subscribers
            .get(&session)
            .map(|s| s.clone())
            .ok_or(AskRefused::SessionGone)?;
        let id: Arc<str> =
            crate::replica::ask_id(self.next_ask.fetch_add(1, Ordering::Relaxed)).into();
        subscriber.asks.register(id, method, params)
    }

    fn forget_ask(&self, session: u64, id: &str) {
        if let Some(subscriber) = self.subscribers.get(&session) {
            subscriber.asks.forget(id);
        }
    }

    fn cached_roots(&self, session: u64) -> Option<Box<RawValue>> {
        let subscriber = self.subscribers.get(&session)?;
        subscriber.asks.cached_roots().map(|r| (*r).to_owned())
    }

    fn remember_roots(&self, session: u64, result: &RawValue) {
        if let Some(subscriber) = self.subscribers.get(&session) {
            subscriber.asks.remember_roots(result);
        }
    }

    fn elicitation_complete(&self, session: u64, params: Option<&RawValue>) {
        let Some(subscriber) = self.subscribers.get(&session).map(|s| s.clone()) else {
            return;
        };
        let frame = crate::protocol::notification_frame(
            crate::protocol::method::ELICITATION_COMPLETE,
            params.map(RawValue::get),
        );
        subscriber.outbox.push_message(frame.into());
    }

    fn session_alive(&self, session: u64) -> bool {
        self.subscribers.contains_key(&session)
    }

    fn resource_updated_as(&self, identity: &str, upstream: &str, original_uri: &str) {
        self.results.resource_updated(upstream, original_uri);
        self.resource_updated_to(Audience::Identity(identity), upstream, original_uri);
    }

    fn resource_updated_for(&self, session: u64, upstream: &str, original_uri: &str) {
        self.resource_updated_to(Audience::Session(session), upstream, original_uri);
    }

    fn log_message_for(&self, session: u64, upstream: &str, params: Option<&RawValue>) {
        self.log_message_to(Some(session), upstream, params);
    }

    /// A session's own instance changed its lists: the catalog (from the
    /// shared instance) did not, but the session is told to look again.
    fn lists_changed_for(&self, session: u64, kinds: &[ListKind]) {
        if let Some(subscriber) = self.subscribers.get(&session) {
            for kind in kinds {
                if subscriber.wants.wants(*kind) {
                    subscriber.outbox.mark_list_changed(*kind);
                }
            }
        }
    }

    fn task_status(&self, upstream: &str, method: &Method, params: Option<&RawValue>) {
        NotifyHub::task_status(self, upstream, method, params);
    }

    fn watched_tasks(&self, upstream: &str) -> Vec<Arc<str>> {
        self.tasks.watched_on(upstream)
    }
}

#[cfg(test)]
mod fanout_tests;
#[cfg(test)]
mod policy_tests;
