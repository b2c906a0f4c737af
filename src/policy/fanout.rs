//! Which subscribers hear of a change under the policy: a catalog change's
//! `list_changed` ([`Fanout`]) and a policy reload ([`PolicyChange`]).
//! Both run inside one notify-hub call, on the task that made the change;
//! each grant's views are derived once however many subscribers share it.

use std::collections::HashMap;
use std::hash::Hasher;
use std::sync::Arc;

use serde_json::value::RawValue;

use super::{Grant, Policy};
use crate::auth::Identity;
use crate::catalog::{Catalog, ListKind};

/// Adds one list item to a view's digest.
pub(super) fn hash_item(digest: &mut std::hash::DefaultHasher, item: &RawValue) {
    digest.write(item.get().as_bytes());
    digest.write_u8(0xff);
}

/// One catalog change's `list_changed` decisions.
pub(crate) struct Fanout {
    policy: Option<Arc<Policy>>,
    catalog: Arc<Catalog>,
    /// Per grant (by address; the `Arc` keeps it alive), whether its view
    /// of each kind changed, once asked.
    seen: HashMap<usize, (Arc<Grant>, [Option<bool>; 4])>,
}

impl Fanout {
    pub(super) fn new(policy: Option<Arc<Policy>>, catalog: Arc<Catalog>) -> Fanout {
        Fanout {
            policy,
            catalog,
            seen: HashMap::new(),
        }
    }

    /// Whether a subscriber of `identity` is told that `kind` changed:
    /// always without a policy or an identity; otherwise only when its
    /// view of `kind` is not the one it was last told about.
    pub(crate) fn tells(&mut self, identity: Option<&Identity>, kind: ListKind) -> bool {
        let (Some(policy), Some(identity)) = (&self.policy, identity) else {
            return true;
        };
        let grant = policy.grant(identity);
        let (grant, seen) = self
            .seen
            .entry(Arc::as_ptr(&grant) as usize)
            .or_insert_with(|| (grant, [None; 4]));
        let catalog = &self.catalog;
        *seen[kind as usize].get_or_insert_with(|| grant.announce(kind, catalog))
    }
}

/// A policy reload: which subscribers' views changed, and which of their
/// subscriptions the new policy no longer allows.
pub(crate) struct PolicyChange {
    old: Option<Arc<Policy>>,
    new: Option<Arc<Policy>>,
    catalog: Arc<Catalog>,
    /// Digests of whole lists (the view without a policy), once asked.
    whole: HashMap<ListKind, u64>,
}

impl PolicyChange {
    pub(super) fn new(
        old: Option<Arc<Policy>>,
        new: Option<Arc<Policy>>,
        catalog: Arc<Catalog>,
    ) -> PolicyChange {
        PolicyChange {
            old,
            new,
            catalog,
            whole: HashMap::new(),
        }
    }

    /// The list kinds whose view changed for a subscriber of `identity`.
    pub(crate) fn changed_kinds(&mut self, identity: &Identity) -> Vec<ListKind> {
        let old = self.old.as_ref().map(|p| p.grant(identity));
        let new = self.new.as_ref().map(|p| p.grant(identity));
        if let Some(grant) = &new {
            grant.baseline(&self.catalog);
        }
        ListKind::ALL
            .into_iter()
            .filter(|kind| self.digest(old.as_deref(), *kind) != self.digest(new.as_deref(), *kind))
            .collect()
    }

    /// Whether `identity` may still use `uri` under the new policy.
    pub(crate) fn keeps(&self, identity: &Identity, uri: &str) -> bool {
        self.new
            .as_ref()
            .is_none_or(|p| p.grant(identity).allows(uri))
    }

    fn digest(&mut self, grant: Option<&Grant>, kind: ListKind) -> u64 {
        match grant {
            Some(grant) => grant.list(kind, &self.catalog).digest(),
            None => *self.whole.entry(kind).or_insert_with(|| {
                let mut digest = std::hash::DefaultHasher::new();
                for i in 0..self.catalog.keys(kind).len() {
                    hash_item(&mut digest, self.catalog.item(kind, i).0);
                }
                digest.finish()
            }),
        }
    }
}
