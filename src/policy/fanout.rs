//! Whether a change is news to a subscriber: each subscriber under a policy
//! remembers a digest of each view it was last told about ([`Seen`]); a
//! catalog change or a policy reload tells it `list_changed` for a kind
//! only when the digest of its current view differs. Runs inside one
//! notify-hub call, on the task that made the change; each grant's views
//! are looked up once per change however many subscribers share it.

use std::collections::HashMap;
use std::hash::{Hash as _, Hasher as _};
use std::sync::{Arc, Mutex};

use serde_json::value::RawValue;

use super::{Grant, Policy};
use crate::auth::Identity;
use crate::catalog::{Catalog, ListKind};

/// Adds one list item to a view's digest.
pub(super) fn hash_item(digest: &mut std::hash::DefaultHasher, item: &RawValue) {
    digest.write(item.get().as_bytes());
    digest.write_u8(0xff);
}

/// The digests of the views one subscriber was last told about, one per
/// list kind (none: not known yet). Held for one update.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    digests: Mutex<[Option<u64>; 4]>,
}

impl Seen {
    fn lock(&self) -> std::sync::MutexGuard<'_, [Option<u64>; 4]> {
        self.digests.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `digest` as the view of `kind`; true when that is news.
    fn update(&self, kind: ListKind, digest: u64) -> bool {
        self.lock()[kind as usize].replace(digest) != Some(digest)
    }

    /// Records `digests` for the kinds nothing was recorded for yet.
    pub(super) fn baseline(&self, digests: [u64; 4]) {
        for (known, digest) in self.lock().iter_mut().zip(digests) {
            known.get_or_insert(digest);
        }
    }
}

/// The current views, for one fan-out.
pub(crate) struct Fanout {
    policy: Option<Arc<Policy>>,
    catalog: Arc<Catalog>,
    /// Digests per grant (by address; the `Arc` keeps it alive), once asked.
    grants: HashMap<usize, (Arc<Grant>, [Option<u64>; 4])>,
}

impl Fanout {
    pub(super) fn new(policy: Option<Arc<Policy>>, catalog: Arc<Catalog>) -> Fanout {
        Fanout {
            policy,
            catalog,
            grants: HashMap::new(),
        }
    }

    /// Whether a subscriber of `identity` that has `seen` is told that
    /// `kind` changed: always without an identity; otherwise when its view
    /// of `kind` is not the one it was last told about (a subscriber of an
    /// identity is kept up to date even while no policy is in force).
    pub(crate) fn tells(
        &mut self,
        identity: Option<&Identity>,
        seen: &Seen,
        kind: ListKind,
    ) -> bool {
        match identity {
            None => true,
            Some(identity) => seen.update(kind, self.digest(identity, kind)),
        }
    }

    /// The digest of `identity`'s current view of `kind`. Without a policy
    /// that is the whole list, identified by its version (a policy coming
    /// or going therefore counts as a change).
    pub(super) fn digest(&mut self, identity: &Identity, kind: ListKind) -> u64 {
        let Some(policy) = &self.policy else {
            let mut digest = std::hash::DefaultHasher::new();
            self.catalog.version(kind).hash(&mut digest);
            return digest.finish();
        };
        let grant = policy.grant(identity);
        let (grant, digests) = self
            .grants
            .entry(Arc::as_ptr(&grant) as usize)
            .or_insert_with(|| (grant, [None; 4]));
        let catalog = &self.catalog;
        *digests[kind as usize].get_or_insert_with(|| grant.list(kind, catalog).digest())
    }
}
