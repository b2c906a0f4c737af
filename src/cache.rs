//! The result cache: results of `resources/read` and `prompts/get`, per
//! upstream, kept as long as their `ttlMs` (or the upstream's configured
//! `cache.ttl`) allows, at most `cache.max_entries` per upstream (least
//! recently used out first). A `private` result is kept under the client
//! identity that got it and found only by that identity. Concurrent
//! identical misses wait for one leader ([`ResultCache::flight`]).
//!
//! Shared by the router (lookups and stores, in request tasks) and the
//! notify hub (evictions, in upstream reader tasks). Every table is a std
//! mutex held for a few map operations, never across an `.await`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::protocol::hints::HintSpans;

/// What a cached result answers, for evictions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Item {
    /// `resources/read` of this URI (as the upstream knows it).
    Resource(String),
    /// `prompts/get` of some prompt.
    Prompt,
}

/// A result found in the cache.
#[derive(Debug, Clone)]
pub(crate) struct Hit {
    pub body: Arc<str>,
    /// Where the body's own hint members are.
    pub hints: HintSpans,
    /// Left of its time to live.
    pub remaining: Duration,
    /// Kept for one identity only (`cacheScope: private`).
    pub private: bool,
}

/// One result to keep.
pub(crate) struct Store<'a> {
    pub upstream: &'a Arc<str>,
    pub key: &'a str,
    pub item: Item,
    /// `Some`: private to this identity.
    pub identity: Option<&'a Arc<str>>,
    pub body: &'a str,
    /// Where the body's own hint members are.
    pub hints: &'a HintSpans,
    pub ttl: Duration,
    pub max_entries: u64,
}

struct Entry {
    body: Arc<str>,
    hints: HintSpans,
    item: Item,
    expires: Instant,
    tick: u64,
}

/// An entry's key: the request's key and, when private, its identity.
type EntryKey = (Box<str>, Option<Arc<str>>);

/// A request in flight: its upstream and key.
type FlightKey = (Arc<str>, Box<str>);

#[derive(Default)]
struct UpstreamEntries {
    entries: HashMap<EntryKey, Entry>,
    /// Use order: the smallest tick is the least recently used.
    order: BTreeMap<u64, EntryKey>,
    tick: u64,
}

impl UpstreamEntries {
    fn touch(&mut self, key: &EntryKey) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(entry) = self.entries.get_mut(key) {
            self.order.remove(&entry.tick);
            entry.tick = tick;
            self.order.insert(tick, key.clone());
        }
    }

    fn remove(&mut self, key: &EntryKey) {
        if let Some(entry) = self.entries.remove(key) {
            self.order.remove(&entry.tick);
        }
    }

    fn retain(&mut self, keep: impl Fn(&Entry) -> bool) -> u64 {
        let gone: Vec<EntryKey> = self
            .entries
            .iter()
            .filter(|(_, e)| !keep(e))
            .map(|(k, _)| k.clone())
            .collect();
        for key in &gone {
            self.remove(key);
        }
        gone.len() as u64
    }
}

/// Counts, for `/status`.
#[derive(Debug, Default)]
pub(crate) struct CacheCounts {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    /// Requests that waited for an identical one instead of asking.
    pub coalesced: AtomicU64,
    pub evicted: AtomicU64,
}

/// The gateway's result cache.
#[derive(Default)]
pub(crate) struct ResultCache {
    upstreams: Mutex<HashMap<Arc<str>, UpstreamEntries>>,
    /// Requests being asked upstream now, by upstream and key: followers
    /// wait until the leader's sender is dropped.
    flights: Mutex<HashMap<FlightKey, watch::Receiver<()>>>,
    counts: CacheCounts,
}

/// A request's place among identical concurrent misses.
pub(crate) enum Flight {
    /// Ask upstream; identical requests wait until this is dropped.
    Leader(FlightGuard),
    /// Wait for the leader ([`Flight::wait`]), then look again.
    Follower(watch::Receiver<()>),
}

/// Held by the leader of a flight while it asks upstream.
pub(crate) struct FlightGuard {
    cache: Arc<ResultCache>,
    key: FlightKey,
    _done: watch::Sender<()>,
}

impl Drop for FlightGuard {
    fn drop(&mut self) {
        self.cache
            .flights
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key);
    }
}

impl Flight {
    /// A follower waits for its leader (at most until `deadline`).
    pub(crate) async fn wait(receiver: &mut watch::Receiver<()>, deadline: Instant) {
        // The leader never sends: `changed` ends when its sender is dropped.
        let _ = tokio::time::timeout_at(deadline, receiver.changed()).await;
    }
}

impl ResultCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, UpstreamEntries>> {
        self.upstreams.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The live result for `key` at `upstream`: a shared one, or one
    /// private to `identity`.
    pub(crate) fn get(
        &self,
        upstream: &str,
        key: &str,
        identity: Option<&Arc<str>>,
    ) -> Option<Hit> {
        let now = Instant::now();
        let mut upstreams = self.lock();
        let entries = upstreams.get_mut(upstream)?;
        let candidates = [
            Some((Box::from(key), None)),
            identity.map(|i| (Box::from(key), Some(i.clone()))),
        ];
        for entry_key in candidates.into_iter().flatten() {
            let Some(entry) = entries.entries.get(&entry_key) else {
                continue;
            };
            if entry.expires <= now {
                entries.remove(&entry_key);
                continue;
            }
            let hit = Hit {
                body: entry.body.clone(),
                hints: entry.hints.clone(),
                remaining: entry.expires - now,
                private: entry_key.1.is_some(),
            };
            entries.touch(&entry_key);
            self.counts.hits.fetch_add(1, Ordering::Relaxed);
            return Some(hit);
        }
        self.counts.misses.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// Keeps a result, making room by dropping the least recently used.
    pub(crate) fn put(&self, store: Store<'_>) {
        if store.ttl.is_zero() {
            return;
        }
        let mut upstreams = self.lock();
        let entries = upstreams.entry(store.upstream.clone()).or_default();
        let key: EntryKey = (store.key.into(), store.identity.cloned());
        entries.remove(&key);
        while entries.entries.len() as u64 >= store.max_entries.max(1) {
            let Some((_, oldest)) = entries.order.pop_first() else {
                break;
            };
            entries.entries.remove(&oldest);
            self.counts.evicted.fetch_add(1, Ordering::Relaxed);
        }
        entries.tick += 1;
        let tick = entries.tick;
        entries.order.insert(tick, key.clone());
        entries.entries.insert(
            key,
            Entry {
                body: store.body.into(),
                hints: store.hints.clone(),
                item: store.item,
                expires: Instant::now() + store.ttl,
                tick,
            },
        );
    }

    /// The leader of identical misses, or a follower of the one in flight.
    pub(crate) fn flight(self: &Arc<Self>, upstream: &Arc<str>, key: &str) -> Flight {
        let mut flights = self.flights.lock().unwrap_or_else(|e| e.into_inner());
        let flight_key = (upstream.clone(), Box::from(key));
        if let Some(receiver) = flights.get(&flight_key) {
            self.counts.coalesced.fetch_add(1, Ordering::Relaxed);
            return Flight::Follower(receiver.clone());
        }
        let (done, receiver) = watch::channel(());
        flights.insert(flight_key.clone(), receiver);
        Flight::Leader(FlightGuard {
            cache: self.clone(),
            key: flight_key,
            _done: done,
        })
    }

    /// `notifications/resources/updated` for `uri` at `upstream`.
    pub(crate) fn resource_updated(&self, upstream: &str, uri: &str) {
        if let Some(entries) = self.lock().get_mut(upstream) {
            let n = entries.retain(|e| !matches!(&e.item, Item::Resource(u) if u == uri));
            self.counts.evicted.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// A list changed: results of that kind may be stale everywhere
    /// (`resources`: every read; `prompts`: every prompt).
    pub(crate) fn kind_changed(&self, resources: bool, prompts: bool) {
        for entries in self.lock().values_mut() {
            let n = entries.retain(|e| match e.item {
                Item::Resource(_) => !resources,
                Item::Prompt => !prompts,
            });
            self.counts.evicted.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Results kept now.
    pub(crate) fn len(&self) -> usize {
        self.lock().values().map(|e| e.entries.len()).sum()
    }

    #[cfg(test)]
    pub(crate) fn counts(&self) -> &CacheCounts {
        &self.counts
    }

    /// Its size and counts, for `/metrics` and `/status`.
    pub(crate) fn snapshot(&self) -> crate::metrics::CacheSnapshot {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        crate::metrics::CacheSnapshot {
            entries: self.len(),
            hits: n(&self.counts.hits),
            misses: n(&self.counts.misses),
            coalesced: n(&self.counts.coalesced),
            evicted: n(&self.counts.evicted),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static NO_HINTS: HintSpans = HintSpans::none();

    fn store<'a>(
        upstream: &'a Arc<str>,
        key: &'a str,
        identity: Option<&'a Arc<str>>,
        max: u64,
    ) -> Store<'a> {
        Store {
            upstream,
            key,
            item: Item::Resource(key.to_owned()),
            identity,
            body: "{\"contents\":[]}",
            hints: &NO_HINTS,
            ttl: Duration::from_secs(30),
            max_entries: max,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn entries_live_their_ttl_and_private_ones_stay_with_their_identity() {
        let cache = ResultCache::default();
        let (up, alice, bob): (Arc<str>, Arc<str>, Arc<str>) =
            ("docs".into(), "alice".into(), "bob".into());
        cache.put(store(&up, "a", None, 10));
        cache.put(store(&up, "p", Some(&alice), 10));
        tokio::time::advance(Duration::from_secs(10)).await;
        let hit = cache.get("docs", "a", Some(&bob)).unwrap();
        assert_eq!(
            (hit.remaining, hit.private),
            (Duration::from_secs(20), false)
        );
        assert!(cache.get("docs", "p", Some(&alice)).unwrap().private);
        assert!(cache.get("docs", "p", Some(&bob)).is_none());
        assert!(cache.get("docs", "p", None).is_none());
        tokio::time::advance(Duration::from_secs(20)).await;
        assert!(cache.get("docs", "a", None).is_none());
        assert_eq!(cache.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_least_recently_used_goes_first_and_updates_evict() {
        let cache = ResultCache::default();
        let up: Arc<str> = "docs".into();
        cache.put(store(&up, "a", None, 2));
        cache.put(store(&up, "b", None, 2));
        cache.get("docs", "a", None).unwrap();
        cache.put(store(&up, "c", None, 2));
        assert!(
            cache.get("docs", "b", None).is_none(),
            "b was least recently used"
        );
        assert!(cache.get("docs", "a", None).is_some());
        cache.resource_updated("docs", "a");
        assert!(cache.get("docs", "a", None).is_none());
        assert!(cache.get("docs", "c", None).is_some());
        cache.kind_changed(true, false);
        assert_eq!(cache.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn identical_misses_follow_one_leader() {
        let cache = Arc::new(ResultCache::default());
        let up: Arc<str> = "docs".into();
        let Flight::Leader(leader) = cache.flight(&up, "a") else {
            panic!("first is the leader")
        };
        let Flight::Follower(mut follower) = cache.flight(&up, "a") else {
            panic!("second follows")
        };
        let waiting = tokio::spawn(async move {
            Flight::wait(&mut follower, Instant::now() + Duration::from_secs(60)).await;
        });
        cache.put(store(&up, "a", None, 10));
        drop(leader);
        waiting.await.unwrap();
        assert!(cache.get("docs", "a", None).is_some());
        assert!(matches!(cache.flight(&up, "a"), Flight::Leader(_)));
        assert_eq!(cache.counts().coalesced.load(Ordering::Relaxed), 1);
    }
}
