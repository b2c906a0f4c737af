//! Resource subscriptions on per-identity upstream sessions (an upstream
//! whose `auth.mode` acts as each caller): each identity's session is its
//! own upstream session, so a URI is subscribed there once per identity
//! that watches it, and unsubscribed when that identity's last watcher
//! leaves. The subscription table still records every watcher (for
//! delivery, replay and counts); this is the upstream side, by identity.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use super::SubscriberId;

/// One upstream subscription of one identity's session.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Watch {
    pub upstream: Arc<str>,
    pub identity: Arc<str>,
    /// The URI as the upstream knows it.
    pub original: Arc<str>,
}

/// Who watches what on per-identity sessions; a std mutex held for a
/// lookup, never across an `.await`.
#[derive(Default)]
pub(crate) struct IdentityWatches {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    watchers: HashMap<Watch, HashSet<SubscriberId>>,
    /// Each subscriber's watches, by the URI it subscribed to (as exposed).
    by_subscriber: HashMap<SubscriberId, HashMap<Arc<str>, Watch>>,
}

impl IdentityWatches {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds `subscriber` (watching `uri`) to `watch`; true when it is the
    /// first, so the identity's session must subscribe.
    pub(crate) fn add(&self, subscriber: SubscriberId, uri: &str, watch: Watch) -> bool {
        let mut inner = self.lock();
        inner
            .by_subscriber
            .entry(subscriber)
            .or_default()
            .insert(uri.into(), watch.clone());
        let watchers = inner.watchers.entry(watch).or_default();
        watchers.insert(subscriber);
        watchers.len() == 1
    }

    /// Removes `subscriber`'s watch of `uri`; the watch when it was the
    /// last one's, so the identity's session must unsubscribe.
    pub(crate) fn remove(&self, subscriber: SubscriberId, uri: &str) -> Option<Watch> {
        let mut inner = self.lock();
        let mine = inner.by_subscriber.get_mut(&subscriber)?;
        let watch = mine.remove(uri)?;
        if mine.is_empty() {
            inner.by_subscriber.remove(&subscriber);
        }
        inner.release(subscriber, watch)
    }

    /// Removes every watch of `subscriber`; those it was the last one of.
    pub(crate) fn remove_subscriber(&self, subscriber: SubscriberId) -> Vec<Watch> {
        let mut inner = self.lock();
        let mine = inner.by_subscriber.remove(&subscriber).unwrap_or_default();
        mine.into_values()
            .filter_map(|watch| inner.release(subscriber, watch))
            .collect()
    }

    /// The URIs `identity`'s session at `upstream` must watch.
    pub(crate) fn originals(&self, upstream: &str, identity: &str) -> Vec<Arc<str>> {
        self.lock()
            .watchers
            .keys()
            .filter(|w| &*w.upstream == upstream && &*w.identity == identity)
            .map(|w| w.original.clone())
            .collect()
    }
}

impl Inner {
    fn release(&mut self, subscriber: SubscriberId, watch: Watch) -> Option<Watch> {
        let watchers = self.watchers.get_mut(&watch)?;
        watchers.remove(&subscriber);
        if !watchers.is_empty() {
            return None;
        }
        self.watchers.remove(&watch);
        Some(watch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(identity: &str) -> Watch {
        Watch {
            upstream: "crm".into(),
            identity: identity.into(),
            original: "mine://notes".into(),
        }
    }

    #[test]
    fn each_identity_subscribes_once_and_its_last_watcher_unsubscribes() {
        let w = IdentityWatches::default();
        assert!(w.add(1, "crm+mine://notes", watch("alice")));
        assert!(
            !w.add(2, "crm+mine://notes", watch("alice")),
            "alice's second session"
        );
        assert!(
            w.add(3, "crm+mine://notes", watch("bob")),
            "bob's own subscription"
        );
        assert_eq!(w.originals("crm", "alice"), [Arc::from("mine://notes")]);
        assert_eq!(w.remove(1, "crm+mine://notes"), None, "alice still watches");
        assert_eq!(w.remove_subscriber(2), [watch("alice")]);
        assert!(w.originals("crm", "alice").is_empty());
        assert_eq!(w.remove(3, "crm+mine://notes"), Some(watch("bob")));
        assert_eq!(w.remove(3, "crm+mine://notes"), None, "already gone");
    }
}
