//! Who may see and use what: the `policy` config compiled into glob rules,
//! and each client's view of the merged catalog.
//!
//! A request's [`Identity`] picks its rules: its client's, and those of each
//! of its scopes. That set of rules is a `Grant`, shared by every client
//! with the same rules. A grant's view of a list (which items of the merged
//! catalog it may see) is derived once per list generation, on first use,
//! and kept until that list or the policy changes, so listing a filtered
//! list costs what listing the whole one does. [`Views`] holds the current
//! policy behind an `ArcSwap`; a reload swaps in a new one whose caches
//! start empty. The router asks it on request tasks, the notify hub on
//! upstream tasks; its std mutexes are held for a lookup, never across an
//! `.await`.

mod fanout;

use std::collections::HashMap;
use std::hash::Hasher as _;
use std::sync::{Arc, Mutex, OnceLock};

use arc_swap::ArcSwapOption;
use globset::{GlobSet, GlobSetBuilder};

pub(crate) use fanout::{Fanout, Seen};

use crate::auth::Identity;
use crate::catalog::{Catalog, CatalogStore, ListKind, Subset};
use crate::config::{Access, PolicyConfig, RuleConfig};
use crate::pattern::glob;

/// Most grants one policy keeps views for; past it the cache starts over
/// (views in use stay valid; they are derived again when next asked for).
const MAX_GRANTS: usize = 1024;

/// The glob set of `patterns`. Should one not compile (validation makes
/// that impossible), the set fails closed: an allow set then matches
/// nothing, a deny set everything.
fn glob_set(patterns: &[String], deny: bool) -> GlobSet {
    let mut builder = GlobSetBuilder::new();
    for pattern in patterns {
        match glob(pattern) {
            Ok(g) => {
                builder.add(g);
            }
            Err(e) => {
                tracing::error!(pattern = %pattern, error = %e, deny, "policy glob does not compile; failing closed");
                return fail_closed(deny);
            }
        }
    }
    builder.build().unwrap_or_else(|e| {
        tracing::error!(error = %e, deny, "policy globs do not compile; failing closed");
        fail_closed(deny)
    })
}

fn fail_closed(deny: bool) -> GlobSet {
    let mut builder = GlobSetBuilder::new();
    if let Ok(g) = glob(if deny { "*" } else { "" }) {
        builder.add(g);
    }
    builder.build().unwrap_or_else(|_| GlobSet::empty())
}

/// One compiled rule.
struct Rule {
    allow: GlobSet,
    /// Whether the rule has any `allow` glob at all.
    allows_some: bool,
    deny: GlobSet,
}

impl Rule {
    fn new(config: &RuleConfig) -> Rule {
        Rule {
            allow: glob_set(&config.allow, false),
            allows_some: !config.allow.is_empty(),
            deny: glob_set(&config.deny, true),
        }
    }
}

/// A compiled `policy` section and the grants (with their views) handed
/// out under it.
pub(crate) struct Policy {
    config: PolicyConfig,
    /// A digest of the section: cursors issued under another policy are
    /// stale, and replicas with the same policy accept each other's.
    epoch: u32,
    rules: Arc<[Rule]>,
    clients: HashMap<String, u32>,
    scopes: HashMap<String, u32>,
    /// By the sorted indices of the rules that apply. Held for a lookup.
    grants: Mutex<HashMap<Box<[u32]>, Arc<Grant>>>,
}

impl Policy {
    pub(crate) fn new(config: &PolicyConfig) -> Policy {
        let mut rules = Vec::new();
        let mut index = |rule: &RuleConfig| {
            rules.push(Rule::new(rule));
            u32::try_from(rules.len() - 1).unwrap_or(u32::MAX)
        };
        let clients = config
            .clients
            .iter()
            .map(|(name, rule)| (name.clone(), index(rule)))
            .collect();
        let scopes = config
            .scopes
            .iter()
            .map(|(name, rule)| (name.clone(), index(rule)))
            .collect();
        Policy {
            config: config.clone(),
            epoch: policy_epoch(config),
            rules: rules.into(),
            clients,
            scopes,
            grants: Mutex::default(),
        }
    }

    /// The grant of an authenticated client: the rules of its client name
    /// and of each of its scopes.
    pub(crate) fn grant(&self, identity: &Identity) -> Arc<Grant> {
        let mut which: Vec<u32> = self
            .clients
            .get(&*identity.client)
            .copied()
            .into_iter()
            .collect();
        which.extend(identity.scopes.iter().filter_map(|s| self.scopes.get(s)));
        which.sort_unstable();
        which.dedup();
        let mut grants = self.grants.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(grant) = grants.get(which.as_slice()) {
            return grant.clone();
        }
        if grants.len() >= MAX_GRANTS {
            grants.clear();
        }
        let grant = Arc::new(Grant::new(self, which.clone().into()));
        grants.insert(which.into(), grant.clone());
        grant
    }
}

/// The epoch of a policy: a digest of its rules in file order, the same on
/// every replica that loaded the same section.
fn policy_epoch(config: &PolicyConfig) -> u32 {
    let rules = |rules: &indexmap::IndexMap<String, RuleConfig>| -> Vec<(String, Vec<String>, Vec<String>)> {
        rules
            .iter()
            .map(|(name, r)| (name.clone(), r.allow.clone(), r.deny.clone()))
            .collect()
    };
    let default = matches!(config.default, Access::Allow);
    // JSON of the rules in file order: unambiguous and stable.
    let text =
        serde_json::json!([default, rules(&config.clients), rules(&config.scopes)]).to_string();
    (crate::catalog::stable_digest([text.as_bytes()]) >> 32) as u32
}

/// The rules that apply to a client, and its views of the catalog's lists.
///
/// An item (an exposed tool or prompt name, a client-visible resource URI
/// or template) is visible when no `deny` glob of these rules matches it and
/// an `allow` glob does; when none of the rules has an `allow` glob, the
/// policy's `default` stands in for them (everything, or nothing).
pub(crate) struct Grant {
    rules: Arc<[Rule]>,
    which: Box<[u32]>,
    /// Whether an item no `allow` glob speaks about is visible: only when
    /// no rule has an `allow` glob and the default is allow.
    default_allows: bool,
    /// The policy's epoch, and this grant's id in cursors.
    epoch: u32,
    id: u64,
    /// The current view of each list kind. Held for a swap, not while the
    /// view is derived (that waits on the view's `OnceLock`).
    lists: [Mutex<Option<Arc<ListView>>>; 4],
    /// How many views were derived, for tests of the cache.
    #[cfg(test)]
    derivations: std::sync::atomic::AtomicUsize,
}

impl Grant {
    fn new(policy: &Policy, which: Box<[u32]>) -> Grant {
        let has_allows = which.iter().any(|i| policy.rules[*i as usize].allows_some);
        let which_bytes: Vec<[u8; 4]> = which.iter().map(|i| i.to_be_bytes()).collect();
        Grant {
            rules: policy.rules.clone(),
            default_allows: !has_allows && policy.config.default == Access::Allow,
            which,
            epoch: policy.epoch,
            id: crate::catalog::stable_digest(which_bytes.iter().map(|b| &b[..])),
            lists: Default::default(),
            #[cfg(test)]
            derivations: Default::default(),
        }
    }

    fn rules(&self) -> impl Iterator<Item = &Rule> + Clone {
        self.which.iter().map(|i| &self.rules[*i as usize])
    }

    /// Whether the client may see and use the item named `key`.
    pub(crate) fn allows(&self, key: &str) -> bool {
        let mut rules = self.rules();
        if rules.clone().any(|r| r.deny.is_match(key)) {
            return false;
        }
        self.default_allows || rules.any(|r| r.allow.is_match(key))
    }

    /// Whether the client may see and use `key` of `catalog`: an app
    /// resource (a tool's `_meta.ui.resourceUri`) follows the tools that
    /// show it, so the app of a hidden tool is hidden too, and allowing a
    /// tool allows its app.
    pub(crate) fn allows_in(&self, catalog: &Catalog, key: &str) -> bool {
        match catalog.apps().shown_by(key) {
            Some(tools) => tools.iter().any(|tool| self.allows(tool)),
            None => self.allows(key),
        }
    }

    /// This grant's view of one list of `catalog`, derived on first use per
    /// list version and shared by every caller until the list changes.
    pub(crate) fn list(&self, kind: ListKind, catalog: &Catalog) -> Arc<ListView> {
        let version = catalog.version(kind);
        let view = {
            let mut slot = self.lists[kind as usize]
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            match &*slot {
                Some(view) if view.version == version => view.clone(),
                _ => {
                    let view = Arc::new(ListView {
                        version,
                        derived: OnceLock::new(),
                    });
                    *slot = Some(view.clone());
                    view
                }
            }
        };
        view.derived.get_or_init(|| self.derive(kind, catalog));
        view
    }

    fn derive(&self, kind: ListKind, catalog: &Catalog) -> Derived {
        #[cfg(test)]
        self.derivations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut indices = Vec::new();
        let mut upstreams: Vec<Arc<str>> = Vec::new();
        let mut digest = std::hash::DefaultHasher::new();
        for (i, key) in catalog.keys(kind).iter().enumerate() {
            if !self.allows_in(catalog, key) {
                continue;
            }
            let (item, owner) = catalog.item(kind, i);
            fanout::hash_item(&mut digest, item);
            if !upstreams.contains(owner) {
                upstreams.push(owner.clone());
            }
            indices.push(u32::try_from(i).unwrap_or(u32::MAX));
        }
        Derived {
            indices: indices.into(),
            digest: digest.finish(),
            upstreams: upstreams.into(),
        }
    }

    /// A view as a part of its list, for paging with cursors of this grant.
    pub(crate) fn subset<'v>(&self, view: &'v ListView) -> Subset<'v> {
        Subset {
            indices: view.indices(),
            epoch: self.epoch,
            id: self.id,
        }
    }

    /// Whether the client sees any item of `upstream` in any list.
    pub(crate) fn sees_upstream(&self, upstream: &str, catalog: &Catalog) -> bool {
        ListKind::ALL.into_iter().any(|kind| {
            self.list(kind, catalog)
                .derived()
                .upstreams
                .iter()
                .any(|u| &**u == upstream)
        })
    }

    /// The `instructions` of the upstreams the client sees something of.
    pub(crate) fn instructions(&self, catalog: &Catalog) -> Option<String> {
        catalog.instructions_of(|upstream| self.sees_upstream(upstream, catalog))
    }
}

/// One grant's view of one version of a list.
pub(crate) struct ListView {
    version: u64,
    /// Set once by the first caller; others wait for it.
    derived: OnceLock<Derived>,
}

struct Derived {
    /// Indices of the visible items in the catalog's list.
    indices: Box<[u32]>,
    /// A hash of the visible items' JSON, in order: equal views, equal digests.
    digest: u64,
    /// The upstreams the visible items come from.
    upstreams: Box<[Arc<str>]>,
}

impl ListView {
    fn derived(&self) -> &Derived {
        // `Grant::list` derives before it hands a view out.
        self.derived.get().expect("derived before use")
    }

    pub(crate) fn indices(&self) -> &[u32] {
        &self.derived().indices
    }

    pub(crate) fn digest(&self) -> u64 {
        self.derived().digest
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.derived().indices.len()
    }
}

/// The current policy (none: everything is visible to everyone) and the
/// catalog it filters. Shared by the router and the notify hub.
pub(crate) struct Views {
    catalog: Arc<CatalogStore>,
    policy: ArcSwapOption<Policy>,
}

impl Views {
    pub(crate) fn new(catalog: Arc<CatalogStore>, config: Option<&PolicyConfig>) -> Views {
        Views {
            catalog,
            policy: ArcSwapOption::new(config.map(|c| Arc::new(Policy::new(c)))),
        }
    }

    /// The grant a request from `identity` is served under; none (the whole
    /// catalog) without a policy or without an authenticated client.
    pub(crate) fn grant(&self, identity: Option<&Identity>) -> Option<Arc<Grant>> {
        let identity = identity?;
        self.policy.load().as_ref().map(|p| p.grant(identity))
    }

    /// Whether `identity` may see and use the item named `key`.
    pub(crate) fn allows(&self, identity: Option<&Identity>, key: &str) -> bool {
        self.grant(identity)
            .is_none_or(|g| g.allows_in(&self.catalog.load(), key))
    }

    /// Whether `identity` sees any item of `upstream`.
    pub(crate) fn sees_upstream(&self, identity: Option<&Identity>, upstream: &str) -> bool {
        self.grant(identity)
            .is_none_or(|g| g.sees_upstream(upstream, &self.catalog.load()))
    }

    /// The `instructions` `identity` is shown.
    pub(crate) fn instructions(&self, identity: Option<&Identity>) -> Option<String> {
        let catalog = self.catalog.load();
        match self.grant(identity) {
            Some(grant) => grant.instructions(&catalog),
            None => catalog.instructions().map(str::to_owned),
        }
    }

    /// Records what a new subscriber of `identity` sees now, so that only
    /// later changes of its view are news to it.
    pub(crate) fn baseline(&self, identity: &Identity, seen: &Seen) {
        let mut fanout = self.fanout();
        seen.baseline(ListKind::ALL.map(|kind| fanout.digest(identity, kind)));
    }

    /// The current views, for one fan-out of changes.
    pub(crate) fn fanout(&self) -> Fanout {
        Fanout::new(self.policy.load_full(), self.catalog.load())
    }

    /// Puts `config` in force (a reload); false when it is the policy in
    /// force already. Requests use the new one from their next lookup.
    pub(crate) fn replace(&self, config: Option<&PolicyConfig>) -> bool {
        let old = self.policy.load();
        if old.as_ref().map(|p| &p.config) == config {
            return false;
        }
        self.policy.store(config.map(|c| Arc::new(Policy::new(c))));
        true
    }
}

#[cfg(test)]
pub(crate) mod tests;
