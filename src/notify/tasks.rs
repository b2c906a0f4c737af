//! The gateway's table of upstream tasks: which upstream task each
//! gateway-issued task id stands for, and which client may use it.
//!
//! The router adds an entry when an upstream answers a `tools/call` with a
//! task and looks entries up for `tasks/get`, `tasks/update`,
//! `tasks/result`, `tasks/cancel` and `tasks/list`; the hub reads it to
//! deliver an upstream's task status notification to the task's creator
//! only. One std mutex, held for a few map operations, never across an
//! `.await`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::protocol::Era;
use crate::upstream::SubscriberId;

/// Tasks the table holds. When it is full, the entry used least recently
/// goes (its task lives on upstream, but the gateway forgets it: its id
/// then gets the error of an unknown one).
pub(crate) const MAX_TASKS: usize = 10_000;

/// An entry nobody created, polled or was notified about for this long is
/// dropped (on the next insertion): longer than any upstream's task TTL
/// we have seen, short enough that a gateway running for months does not
/// keep every task ever made.
pub(crate) const IDLE_LIMIT: Duration = Duration::from_secs(24 * 3600);

/// Who created a task, and so who alone may see and touch it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Owner {
    /// A 2025-era session (its hub subscriber).
    Session(SubscriberId),
    /// A 2026-07-28 stateless client, by its authenticated client name.
    Client(Arc<str>),
    /// Every 2026-07-28 client while authentication is off: one identity.
    Anonymous,
}

/// Where a gateway task id leads.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    pub(crate) upstream: Arc<str>,
    pub(crate) upstream_id: Arc<str>,
    pub(crate) era: Era,
}

struct Entry {
    route: Route,
    owner: Owner,
    /// When the gateway first saw the task (for diagnostics and tests).
    #[allow(dead_code, reason = "kept with the entry for inspection")]
    created: Instant,
    last_seen: Instant,
    /// Its key in `recency`.
    seq: u64,
}

#[derive(Default)]
struct State {
    by_id: HashMap<Arc<str>, Entry>,
    /// (upstream, upstream task id) to the gateway id.
    by_upstream: HashMap<(Arc<str>, Arc<str>), Arc<str>>,
    /// Use order: oldest first.
    recency: BTreeMap<u64, Arc<str>>,
    next_seq: u64,
    /// Listen streams watching a task, by gateway id (each a creator's).
    watchers: HashMap<Arc<str>, Vec<SubscriberId>>,
}

impl State {
    fn touch(&mut self, id: &Arc<str>, now: Instant) {
        self.next_seq += 1;
        let seq = self.next_seq;
        if let Some(entry) = self.by_id.get_mut(id) {
            self.recency.remove(&entry.seq);
            entry.seq = seq;
            entry.last_seen = now;
            self.recency.insert(seq, id.clone());
        }
    }

    fn remove(&mut self, id: &str) {
        self.watchers.remove(id);
        if let Some(entry) = self.by_id.remove(id) {
            self.recency.remove(&entry.seq);
            self.by_upstream
                .remove(&(entry.route.upstream, entry.route.upstream_id));
        }
    }

    /// Adds an entry, making room first.
    fn insert(&mut self, id: Arc<str>, route: Route, owner: Owner, now: Instant, limit: usize) {
        self.make_room(now, limit);
        self.next_seq += 1;
        let seq = self.next_seq;
        self.recency.insert(seq, id.clone());
        self.by_upstream.insert(
            (route.upstream.clone(), route.upstream_id.clone()),
            id.clone(),
        );
        self.by_id.insert(
            id,
            Entry {
                route,
                owner,
                created: now,
                last_seen: now,
                seq,
            },
        );
    }

    /// Drops idle entries, then the least recently used ones beyond `room`.
    fn make_room(&mut self, now: Instant, limit: usize) {
        while let Some((_, oldest)) = self.recency.first_key_value() {
            let oldest = oldest.clone();
            let idle = self
                .by_id
                .get(&oldest)
                .is_none_or(|e| now.duration_since(e.last_seen) >= IDLE_LIMIT);
            if !idle && self.by_id.len() < limit {
                break;
            }
            self.remove(&oldest);
        }
    }
}

/// The table; see the module docs.
pub(crate) struct TaskTable {
    state: Mutex<State>,
    limit: usize,
}

impl Default for TaskTable {
    fn default() -> Self {
        Self::with_limit(MAX_TASKS)
    }
}

impl TaskTable {
    pub(crate) fn with_limit(limit: usize) -> Self {
        Self {
            state: Mutex::default(),
            limit: limit.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The gateway id for `upstream`'s task `upstream_id`, created by
    /// `owner`: a new one from `mint` (the router seals the route and the
    /// owner into it), or the one already issued to the same owner.
    pub(crate) fn adopt(
        &self,
        route: Route,
        owner: Owner,
        mint: impl FnOnce(&Route) -> Arc<str>,
    ) -> Arc<str> {
        let now = Instant::now();
        let mut state = self.lock();
        let key = (route.upstream.clone(), route.upstream_id.clone());
        if let Some(existing) = state.by_upstream.get(&key).cloned() {
            if state.by_id.get(&existing).is_some_and(|e| e.owner == owner) {
                state.touch(&existing, now);
                return existing;
            }
            // An upstream that reuses an id for another client: the new
            // task replaces the old one, which nobody can reach any more.
            state.remove(&existing);
        }
        let id = mint(&route);
        state.insert(id.clone(), route, owner, now, self.limit);
        id
    }

    /// Takes in a task another replica (or this one, before it forgot the
    /// task) issued as `id`, once the router has opened the id and found
    /// the caller to be its owner: where it leads.
    pub(crate) fn recall(&self, id: Arc<str>, route: Route, owner: Owner) -> Route {
        let now = Instant::now();
        let mut state = self.lock();
        let key = (route.upstream.clone(), route.upstream_id.clone());
        if let Some(existing) = state.by_upstream.get(&key).cloned() {
            state.remove(&existing);
        }
        state.remove(&id);
        state.insert(id, route.clone(), owner, now, self.limit);
        route
    }

    /// Where `id` leads, if `owner` created it. A foreign, unknown or
    /// expired id is `None` alike.
    pub(crate) fn resolve(&self, id: &str, owner: &Owner) -> Option<Route> {
        let now = Instant::now();
        let mut state = self.lock();
        let (key, route) = {
            let (key, entry) = state.by_id.get_key_value(id)?;
            if &entry.owner != owner || now.duration_since(entry.last_seen) >= IDLE_LIMIT {
                return None;
            }
            (key.clone(), entry.route.clone())
        };
        state.touch(&key, now);
        Some(route)
    }

    /// The gateway id and owner of `upstream`'s task `upstream_id`.
    pub(crate) fn owner_of(&self, upstream: &str, upstream_id: &str) -> Option<(Arc<str>, Owner)> {
        let now = Instant::now();
        let mut state = self.lock();
        let id = state
            .by_upstream
            .get(&(Arc::from(upstream), Arc::from(upstream_id)))?
            .clone();
        let owner = state.by_id.get(&id)?.owner.clone();
        state.touch(&id, now);
        Some((id, owner))
    }

    /// The upstreams on which `owner` has tasks of `era`.
    pub(crate) fn upstreams_of(&self, owner: &Owner, era: Era) -> Vec<Arc<str>> {
        let state = self.lock();
        let mut upstreams: Vec<Arc<str>> = state
            .by_id
            .values()
            .filter(|e| &e.owner == owner && e.route.era == era)
            .map(|e| e.route.upstream.clone())
            .collect();
        upstreams.sort();
        upstreams.dedup();
        upstreams
    }

    /// `owner`'s tasks on `upstream`: (gateway id, upstream task id).
    pub(crate) fn owned_on(&self, owner: &Owner, upstream: &str) -> Vec<(Arc<str>, Arc<str>)> {
        let state = self.lock();
        state
            .by_id
            .iter()
            .filter(|(_, e)| &e.owner == owner && &*e.route.upstream == upstream)
            .map(|(id, e)| (id.clone(), e.route.upstream_id.clone()))
            .collect()
    }

    /// Listen stream `subscriber` of `owner` watches task `id`: where the
    /// task lives if it is `owner`'s, else `None` (and nothing is watched).
    pub(crate) fn watch(&self, id: &str, owner: &Owner, subscriber: SubscriberId) -> Option<Route> {
        let route = self.resolve(id, owner)?;
        let mut state = self.lock();
        let key = state.by_id.get_key_value(id)?.0.clone();
        let watchers = state.watchers.entry(key).or_default();
        if !watchers.contains(&subscriber) {
            watchers.push(subscriber);
        }
        Some(route)
    }

    /// The listen streams watching task `id`.
    pub(crate) fn watchers(&self, id: &str) -> Vec<SubscriberId> {
        self.lock().watchers.get(id).cloned().unwrap_or_default()
    }

    /// `upstream`'s task ids that a listen stream watches: what the
    /// upstream's own listen must ask for.
    pub(crate) fn watched_on(&self, upstream: &str) -> Vec<Arc<str>> {
        let state = self.lock();
        let mut ids: Vec<Arc<str>> = state
            .watchers
            .keys()
            .filter_map(|id| state.by_id.get(id))
            .filter(|e| &*e.route.upstream == upstream)
            .map(|e| e.route.upstream_id.clone())
            .collect();
        ids.sort();
        ids
    }

    /// A subscriber left: a session's tasks are forgotten, and a listen
    /// stream stops watching.
    pub(crate) fn forget_subscriber(&self, subscriber: SubscriberId) {
        self.forget_owner(&Owner::Session(subscriber));
        let mut state = self.lock();
        for watchers in state.watchers.values_mut() {
            watchers.retain(|w| *w != subscriber);
        }
        state.watchers.retain(|_, w| !w.is_empty());
    }

    /// Forgets every task of a session that ended.
    pub(crate) fn forget_owner(&self, owner: &Owner) {
        let mut state = self.lock();
        let ids: Vec<Arc<str>> = state
            .by_id
            .iter()
            .filter(|(_, e)| &e.owner == owner)
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            state.remove(&id);
        }
    }

    /// Tasks held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().by_id.len()
    }
}

impl super::NotifyHub {
    /// The table of upstream tasks.
    pub(crate) fn tasks(&self) -> &TaskTable {
        &self.tasks
    }

    /// Delivers an upstream's task status notification to the session
    /// that created the task, with the gateway's task id; nobody else
    /// hears of it. A notification for a task the gateway does not know
    /// (made before a restart, evicted, or not made through it) is dropped.
    pub(crate) fn task_status(
        &self,
        upstream: &str,
        method: &crate::protocol::Method,
        params: Option<&serde_json::value::RawValue>,
    ) {
        use serde_json::{Map, Value};
        let Some(mut params) =
            params.and_then(|p| serde_json::from_str::<Map<String, Value>>(p.get()).ok())
        else {
            return;
        };
        let Some(owned) = params
            .get("taskId")
            .and_then(Value::as_str)
            .and_then(|task| self.tasks.owner_of(upstream, task))
        else {
            tracing::debug!(
                upstream,
                "status of a task the gateway does not know; dropped"
            );
            return;
        };
        let (id, owner) = owned;
        params.insert("taskId".into(), Value::from(&*id));
        // The upstream's listen tag is not the client's.
        if let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) {
            meta.remove(crate::protocol::meta::SUBSCRIPTION_ID);
        }
        let frame_for = |tag: Option<&str>| -> Arc<str> {
            let mut params = params.clone();
            if let Some(tag) = tag.and_then(|t| serde_json::from_str::<Map<String, Value>>(t).ok())
            {
                let meta = params
                    .entry("_meta")
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Some(meta) = meta.as_object_mut() {
                    meta.extend(tag);
                }
            }
            crate::protocol::notification_frame(
                method.name(),
                Some(&Value::Object(params).to_string()),
            )
            .into()
        };
        let to = match owner {
            // On the session's stream (its GET stream, /sse or stdio).
            Owner::Session(session) => vec![session],
            // On the creator's listen streams that asked for this task.
            Owner::Client(_) | Owner::Anonymous => self.tasks.watchers(&id),
        };
        for subscriber in to {
            if let Some(subscriber) = self.subscribers.get(&subscriber) {
                // In its message queue: bounded, the oldest dropped when full.
                subscriber
                    .outbox
                    .push_message(frame_for(subscriber.outbox.tag()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(upstream: &str, id: &str) -> Route {
        Route {
            upstream: upstream.into(),
            upstream_id: id.into(),
            era: Era::Modern,
        }
    }

    /// Ids as a test makes them (the router seals them).
    fn mint(route: &Route) -> Arc<str> {
        format!("{}.{:032x}", route.upstream, rand::random::<u128>()).into()
    }

    #[test]
    fn an_id_is_bound_to_its_owner() {
        let table = TaskTable::default();
        let alice = Owner::Client("alice".into());
        let id = table.adopt(route("notes", "t1"), alice.clone(), mint);
        assert!(id.starts_with("notes."), "{id}");
        assert_eq!(&*table.resolve(&id, &alice).unwrap().upstream_id, "t1");
        assert!(table.resolve(&id, &Owner::Anonymous).is_none());
        assert!(table.resolve(&id, &Owner::Session(1)).is_none());
        assert!(table.resolve("notes.t1", &alice).is_none());
        // The same task adopted again by its owner keeps its id.
        assert_eq!(table.adopt(route("notes", "t1"), alice.clone(), mint), id);
        let other = table.adopt(route("other", "t1"), alice.clone(), mint);
        assert_ne!(other, id);
        assert_eq!(table.owner_of("notes", "t1"), Some((id, alice)));
    }

    #[test]
    fn a_recalled_task_takes_its_issued_id_and_replaces_a_stale_one() {
        let table = TaskTable::default();
        let alice = Owner::Client("alice".into());
        let stale = table.adopt(route("notes", "t1"), Owner::Anonymous, mint);
        let issued: Arc<str> = "notes.issued-elsewhere".into();
        let back = table.recall(issued.clone(), route("notes", "t1"), alice.clone());
        assert_eq!(&*back.upstream_id, "t1");
        assert_eq!(&*table.resolve(&issued, &alice).unwrap().upstream_id, "t1");
        assert!(table.resolve(&stale, &Owner::Anonymous).is_none());
        assert_eq!(table.owner_of("notes", "t1"), Some((issued, alice)));
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn only_the_owners_listen_streams_watch_and_they_leave_nothing_behind() {
        let table = TaskTable::default();
        let alice = Owner::Client("alice".into());
        let id = table.adopt(route("up", "t9"), alice.clone(), mint);
        assert!(table.watch(&id, &Owner::Anonymous, 5).is_none());
        assert!(table.watchers(&id).is_empty());
        assert!(table.watch(&id, &alice, 6).is_some());
        assert_eq!(table.watchers(&id), vec![6]);
        assert_eq!(table.watched_on("up"), vec![Arc::<str>::from("t9")]);
        assert!(table.watched_on("other").is_empty());
        table.forget_subscriber(6);
        assert!(table.watchers(&id).is_empty());
        assert!(table.watched_on("up").is_empty());
        assert!(table.resolve(&id, &alice).is_some(), "the task stays");
    }

    #[test]
    fn the_least_recently_used_task_goes_when_full() {
        let table = TaskTable::with_limit(2);
        let owner = Owner::Session(7);
        let a = table.adopt(route("u", "a"), owner.clone(), mint);
        let b = table.adopt(route("u", "b"), owner.clone(), mint);
        assert!(table.resolve(&a, &owner).is_some());
        let c = table.adopt(route("u", "c"), owner.clone(), mint);
        assert_eq!(table.len(), 2);
        assert!(
            table.resolve(&b, &owner).is_none(),
            "b was least recently used"
        );
        assert!(table.resolve(&a, &owner).is_some());
        assert!(table.resolve(&c, &owner).is_some());
        assert!(table.owner_of("u", "b").is_none());
        table.forget_owner(&owner);
        assert_eq!(table.len(), 0);
    }
}
