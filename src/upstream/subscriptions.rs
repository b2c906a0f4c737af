//! Per-URI resource subscription tables, shared by every downstream era.
//!
//! The table maps a namespaced URI to the set of subscribers watching it,
//! with two reverse indexes: subscriber → URIs (so a closed session or
//! stream leaves nothing behind) and upstream → URIs (so a restarted
//! upstream gets every URI that still has subscribers). URIs are interned
//! once as `Arc<str>` and shared by all three maps; every operation is a
//! few hash lookups under one short std mutex, never held across `.await`.
//! The table only says *when* the upstream must be told (first subscriber
//! in, last one out); the caller does the telling.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// Who is subscribed: a legacy session or a modern listen stream.
pub(crate) type SubscriberId = u64;

/// A URI's place in the table.
struct Entry {
    upstream: Arc<str>,
    /// The URI as the upstream knows it.
    original: Arc<str>,
    subscribers: HashSet<SubscriberId>,
}

#[derive(Default)]
struct Tables {
    by_uri: HashMap<Arc<str>, Entry>,
    by_subscriber: HashMap<SubscriberId, HashSet<Arc<str>>>,
    by_upstream: HashMap<Arc<str>, HashSet<Arc<str>>>,
}

/// What the caller must tell the upstream after a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UpstreamChange {
    pub upstream: Arc<str>,
    /// The URI as the upstream knows it.
    pub original: Arc<str>,
}

/// URI → subscribers, with reverse indexes.
#[derive(Default)]
pub(crate) struct SubscriptionTable {
    tables: Mutex<Tables>,
}

impl SubscriptionTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds `subscriber` to `uri`. Returns the upstream subscription to make
    /// when this is the URI's first subscriber.
    pub(crate) fn subscribe(
        &self,
        subscriber: SubscriberId,
        uri: &str,
        upstream: &Arc<str>,
        original: &str,
    ) -> Option<UpstreamChange> {
        let mut t = self.lock();
        let (key, first) = match t.by_uri.get_key_value(uri) {
            Some((key, _)) => (key.clone(), false),
            None => {
                let key: Arc<str> = uri.into();
                let entry = Entry {
                    upstream: upstream.clone(),
                    original: original.into(),
                    subscribers: HashSet::new(),
                };
                t.by_uri.insert(key.clone(), entry);
                t.by_upstream
                    .entry(upstream.clone())
                    .or_default()
                    .insert(key.clone());
                (key, true)
            }
        };
        let entry = t.by_uri.get_mut(&key).expect("entry exists");
        entry.subscribers.insert(subscriber);
        let change = first.then(|| UpstreamChange {
            upstream: entry.upstream.clone(),
            original: entry.original.clone(),
        });
        t.by_subscriber.entry(subscriber).or_default().insert(key);
        change
    }

    /// Removes `subscriber` from `uri`. Returns the upstream unsubscription
    /// to make when it was the last subscriber.
    pub(crate) fn unsubscribe(
        &self,
        subscriber: SubscriberId,
        uri: &str,
    ) -> Option<UpstreamChange> {
        let mut t = self.lock();
        if let Some(uris) = t.by_subscriber.get_mut(&subscriber) {
            uris.remove(uri);
            if uris.is_empty() {
                t.by_subscriber.remove(&subscriber);
            }
        }
        remove_from_entry(&mut t, subscriber, uri)
    }

    /// Removes a subscriber from every URI (its session or stream ended).
    /// Returns the upstream unsubscriptions this implies.
    pub(crate) fn remove_subscriber(&self, subscriber: SubscriberId) -> Vec<UpstreamChange> {
        let mut t = self.lock();
        let Some(uris) = t.by_subscriber.remove(&subscriber) else {
            return Vec::new();
        };
        uris.iter()
            .filter_map(|uri| remove_from_entry(&mut t, subscriber, uri))
            .collect()
    }

    /// The subscribers of `uri`.
    pub(crate) fn subscribers(&self, uri: &str) -> Vec<SubscriberId> {
        self.lock()
            .by_uri
            .get(uri)
            .map(|e| e.subscribers.iter().copied().collect())
            .unwrap_or_default()
    }

    /// The URIs `subscriber` watches.
    pub(crate) fn uris_of(&self, subscriber: SubscriberId) -> Vec<Arc<str>> {
        self.lock()
            .by_subscriber
            .get(&subscriber)
            .map(|u| u.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The URI clients subscribed with to `upstream`'s `original` one, if
    /// any did (a few lookups per URI `upstream` has subscribers for).
    pub(crate) fn key_of(&self, upstream: &str, original: &str) -> Option<Arc<str>> {
        let t = self.lock();
        t.by_upstream.get(upstream)?.iter().find_map(|key| {
            t.by_uri
                .get(key)
                .filter(|entry| &*entry.original == original)
                .map(|_| key.clone())
        })
    }

    /// Every URI of `upstream` that has subscribers, as the upstream knows it.
    pub(crate) fn originals_of_upstream(&self, upstream: &str) -> Vec<Arc<str>> {
        let t = self.lock();
        t.by_upstream
            .get(upstream)
            .map(|uris| {
                uris.iter()
                    .filter_map(|u| t.by_uri.get(u))
                    .map(|e| e.original.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Number of URIs with at least one subscriber.
    /// Every subscribed URI with its upstream and subscribers, by URI.
    pub(crate) fn entries(&self) -> Vec<(Arc<str>, Arc<str>, Vec<SubscriberId>)> {
        let tables = self.lock();
        let mut out: Vec<_> = tables
            .by_uri
            .iter()
            .map(|(uri, entry)| {
                let mut subscribers: Vec<_> = entry.subscribers.iter().copied().collect();
                subscribers.sort_unstable();
                (uri.clone(), entry.upstream.clone(), subscribers)
            })
            .collect();
        drop(tables);
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    pub(crate) fn uri_count(&self) -> usize {
        self.lock().by_uri.len()
    }

    /// Number of (URI, subscriber) pairs.
    pub(crate) fn entry_count(&self) -> usize {
        self.lock()
            .by_uri
            .values()
            .map(|e| e.subscribers.len())
            .sum()
    }
}

fn remove_from_entry(
    t: &mut Tables,
    subscriber: SubscriberId,
    uri: &str,
) -> Option<UpstreamChange> {
    let entry = t.by_uri.get_mut(uri)?;
    if !entry.subscribers.remove(&subscriber) || !entry.subscribers.is_empty() {
        return None;
    }
    let (key, entry) = t.by_uri.remove_entry(uri)?;
    if let Some(uris) = t.by_upstream.get_mut(&entry.upstream) {
        uris.remove(&key);
        if uris.is_empty() {
            t.by_upstream.remove(&entry.upstream);
        }
    }
    Some(UpstreamChange {
        upstream: entry.upstream,
        original: entry.original,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(name: &str) -> Arc<str> {
        name.into()
    }

    #[test]
    fn first_in_and_last_out_tell_the_upstream_once() {
        let table = SubscriptionTable::default();
        let docs = up("docs");
        let first = table.subscribe(1, "docs+file:///a", &docs, "file:///a");
        assert_eq!(first.unwrap().original.as_ref(), "file:///a");
        assert_eq!(
            table.subscribe(2, "docs+file:///a", &docs, "file:///a"),
            None
        );
        assert_eq!(
            table.subscribe(2, "docs+file:///a", &docs, "file:///a"),
            None,
            "idempotent"
        );
        let mut subs = table.subscribers("docs+file:///a");
        subs.sort();
        assert_eq!(subs, [1, 2]);
        assert_eq!(table.unsubscribe(1, "docs+file:///a"), None);
        assert_eq!(
            table.unsubscribe(1, "docs+file:///a"),
            None,
            "twice is harmless"
        );
        let last = table.unsubscribe(2, "docs+file:///a").unwrap();
        assert_eq!(
            (last.upstream.as_ref(), last.original.as_ref()),
            ("docs", "file:///a")
        );
        assert_eq!(table.uri_count(), 0);
        assert!(table.originals_of_upstream("docs").is_empty());
    }

    #[test]
    fn removing_a_subscriber_cleans_every_index() {
        let table = SubscriptionTable::default();
        let (a, b) = (up("a"), up("b"));
        table.subscribe(7, "a+x", &a, "x");
        table.subscribe(7, "b+y", &b, "y");
        table.subscribe(8, "b+y", &b, "y");
        let mut gone = table.remove_subscriber(7);
        gone.sort_by(|l, r| l.original.cmp(&r.original));
        assert_eq!(gone.len(), 1, "b+y still has subscriber 8");
        assert_eq!(gone[0].original.as_ref(), "x");
        assert!(table.uris_of(7).is_empty());
        assert_eq!(table.originals_of_upstream("b"), vec![Arc::from("y")]);
        assert!(table.originals_of_upstream("a").is_empty());
        assert_eq!(table.entry_count(), 1);
    }

    #[test]
    fn a_million_entries_stay_cheap() {
        let table = SubscriptionTable::default();
        let upstream = up("big");
        // 1,000 subscribers × 1,000 URIs = 1e6 (URI, subscriber) entries.
        for uri in 0..1_000u64 {
            let namespaced = format!("big+res://{uri}");
            let original = format!("res://{uri}");
            for subscriber in 0..1_000u64 {
                table.subscribe(subscriber, &namespaced, &upstream, &original);
            }
        }
        assert_eq!(table.entry_count(), 1_000_000);
        assert_eq!(table.subscribers("big+res://500").len(), 1_000);
        assert_eq!(table.originals_of_upstream("big").len(), 1_000);
        // Removing all but one subscriber tells the upstream nothing; the last one frees all.
        let mut released = 0;
        for subscriber in 0..1_000u64 {
            released += table.remove_subscriber(subscriber).len();
        }
        assert_eq!(released, 1_000);
        assert_eq!(table.uri_count(), 0);
    }
}

#[cfg(test)]
mod table_tests;
