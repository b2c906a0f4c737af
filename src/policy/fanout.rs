//! Whether a change is news to a subscriber: each subscriber remembers a
//! digest of each view it was last told about ([`Seen`]), its endpoint's
//! list (or, under a policy, its grant's view of it); a catalog change or a
//! policy reload tells it `list_changed` for a kind only when the digest of
//! its current view differs. A change outside an endpoint is no news there. Runs inside one
//! notify-hub call, on the task that made the change; each grant's views
//! are looked up once per change however many subscribers share it.

use std::collections::HashMap;
use std::hash::{Hash as _, Hasher as _};
use std::sync::{Arc, Mutex};

use serde_json::value::RawValue;

use super::{Grant, Policies};
use crate::auth::Identity;
use crate::catalog::{Catalog, CatalogStore, ListKind};

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
    policies: Arc<Policies>,
    store: Arc<CatalogStore>,
    /// The whole view's catalog and each endpoint's, once asked.
    whole: Option<Arc<Catalog>>,
    endpoints: HashMap<Arc<str>, Arc<Catalog>>,
    /// Digests per grant (by address; the `Arc` keeps it alive; each view
    /// has its own policy, so a grant belongs to one view), once asked.
    grants: HashMap<usize, (Arc<Grant>, [Option<u64>; 4])>,
}

impl Fanout {
    pub(super) fn new(policies: Arc<Policies>, store: Arc<CatalogStore>) -> Fanout {
        Fanout {
            policies,
            store,
            whole: None,
            endpoints: HashMap::new(),
            grants: HashMap::new(),
        }
    }

    fn catalog(&mut self, endpoint: Option<&str>) -> Arc<Catalog> {
        let store = &self.store;
        match endpoint {
            None => self
                .whole
                .get_or_insert_with(|| store.load_view(None))
                .clone(),
            Some(name) => match self.endpoints.get(name) {
                Some(catalog) => catalog.clone(),
                None => {
                    let catalog = store.load_view(Some(name));
                    self.endpoints.insert(name.into(), catalog.clone());
                    catalog
                }
            },
        }
    }

    /// Whether a subscriber of a view (and of `identity`, if any) that has
    /// `seen` is told that `kind` changed: when its view of `kind` is not
    /// the one it was last told about.
    pub(crate) fn tells(
        &mut self,
        endpoint: Option<&str>,
        identity: Option<&Identity>,
        seen: &Seen,
        kind: ListKind,
    ) -> bool {
        seen.update(kind, self.digest(endpoint, identity, kind))
    }

    /// The digest of the current view of `kind` that a subscriber of
    /// `endpoint` and `identity` has. Without a grant that is the view's
    /// whole list, identified by its version (a policy coming or going
    /// therefore counts as a change).
    pub(super) fn digest(
        &mut self,
        endpoint: Option<&str>,
        identity: Option<&Identity>,
        kind: ListKind,
    ) -> u64 {
        let catalog = self.catalog(endpoint);
        let policy = self.policies.of(endpoint).cloned();
        let (Some(policy), Some(identity)) = (policy, identity) else {
            let mut digest = std::hash::DefaultHasher::new();
            catalog.version(kind).hash(&mut digest);
            return digest.finish();
        };
        let grant = policy.grant(identity);
        let (grant, digests) = self
            .grants
            .entry(Arc::as_ptr(&grant) as usize)
            .or_insert_with(|| (grant, [None; 4]));
        *digests[kind as usize].get_or_insert_with(|| grant.list(kind, &catalog).digest())
    }
}
