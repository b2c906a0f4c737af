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

use arc_swap::ArcSwap;
use globset::{GlobSet, GlobSetBuilder};

pub(crate) use fanout::{Fanout, Seen};

use crate::auth::Identity;
use crate::catalog::{Catalog, CatalogStore, ListKind, Subset};
use crate::config::{Access, EndpointConfig, PolicyConfig, RuleConfig};
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

/// One compiled `policy` section.
struct Layer {
    rules: Arc<[Rule]>,
    clients: HashMap<String, u32>,
    scopes: HashMap<String, u32>,
    default: Access,
}

impl Layer {
    fn new(config: &PolicyConfig) -> Layer {
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
        Layer {
            rules: rules.into(),
            clients,
            scopes,
            default: config.default,
        }
    }

    /// The indices of the rules that apply to `identity`, sorted.
    fn which(&self, identity: &Identity) -> Vec<u32> {
        let mut which: Vec<u32> = self
            .clients
            .get(&*identity.client)
            .copied()
            .into_iter()
            .collect();
        which.extend(identity.scopes.iter().filter_map(|s| self.scopes.get(s)));
        which.sort_unstable();
        which.dedup();
        which
    }
}

/// The policy of one view: the global `policy` section, and an endpoint's
/// own on top of it (an item must be allowed by both). Hands out grants
/// with their views.
pub(crate) struct Policy {
    /// A digest of the sections: cursors issued under another policy are
    /// stale, and replicas with the same policy accept each other's.
    epoch: u32,
    layers: Box<[Layer]>,
    /// By the sorted indices of the rules that apply in each layer (layers
    /// separated by `u32::MAX`). Held for a lookup.
    grants: Mutex<HashMap<Box<[u32]>, Arc<Grant>>>,
}

impl Policy {
    /// The policy of one section.
    pub(crate) fn new(config: &PolicyConfig) -> Policy {
        Self::layered(std::slice::from_ref(config))
    }

    /// The policy of several sections, each of which must allow an item.
    pub(crate) fn layered(configs: &[PolicyConfig]) -> Policy {
        Policy {
            epoch: policy_epoch(configs),
            layers: configs.iter().map(Layer::new).collect(),
            grants: Mutex::default(),
        }
    }

    /// The grant of an authenticated client: the rules of its client name
    /// and of each of its scopes, in every layer.
    pub(crate) fn grant(&self, identity: &Identity) -> Arc<Grant> {
        let which: Vec<Vec<u32>> = self.layers.iter().map(|l| l.which(identity)).collect();
        let key: Box<[u32]> = which.join(&u32::MAX).into();
        let mut grants = self.grants.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(grant) = grants.get(&key) {
            return grant.clone();
        }
        if grants.len() >= MAX_GRANTS {
            grants.clear();
        }
        let grant = Arc::new(Grant::new(self, which, &key));
        grants.insert(key, grant.clone());
        grant
    }
}

/// The epoch of a policy: a digest of its rules in file order, the same on
/// every replica that loaded the same sections.
fn policy_epoch(configs: &[PolicyConfig]) -> u32 {
    let rules = |rules: &indexmap::IndexMap<String, RuleConfig>| -> Vec<(String, Vec<String>, Vec<String>)> {
        rules
            .iter()
            .map(|(name, r)| (name.clone(), r.allow.clone(), r.deny.clone()))
            .collect()
    };
    let sections: Vec<serde_json::Value> = configs
        .iter()
        .map(|config| {
            let default = matches!(config.default, Access::Allow);
            serde_json::json!([default, rules(&config.clients), rules(&config.scopes)])
        })
        .collect();
    // JSON of the rules in file order: unambiguous and stable. One section
    // is written as it always was, so its epoch is unchanged.
    let text = match sections.as_slice() {
        [one] => one.to_string(),
        several => serde_json::Value::from(several.to_vec()).to_string(),
    };
    (crate::catalog::stable_digest([text.as_bytes()]) >> 32) as u32
}

/// The rules of one layer that apply to a client.
struct GrantLayer {
    rules: Arc<[Rule]>,
    which: Box<[u32]>,
    /// Whether an item no `allow` glob speaks about is visible: only when
    /// no rule has an `allow` glob and the default is allow.
    default_allows: bool,
}

impl GrantLayer {
    fn allows(&self, key: &str) -> bool {
        let mut rules = self.which.iter().map(|i| &self.rules[*i as usize]);
        if rules.clone().any(|r| r.deny.is_match(key)) {
            return false;
        }
        self.default_allows || rules.any(|r| r.allow.is_match(key))
    }
}

/// The rules that apply to a client, and its views of the catalog's lists.
///
/// An item (an exposed tool or prompt name, a client-visible resource URI
/// or template) is visible when no `deny` glob of these rules matches it and
/// an `allow` glob does; when none of the rules has an `allow` glob, the
/// policy's `default` stands in for them (everything, or nothing).
pub(crate) struct Grant {
    layers: Box<[GrantLayer]>,
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
    fn new(policy: &Policy, which: Vec<Vec<u32>>, key: &[u32]) -> Grant {
        let layers = policy
            .layers
            .iter()
            .zip(which)
            .map(|(layer, which)| {
                let has_allows = which.iter().any(|i| layer.rules[*i as usize].allows_some);
                GrantLayer {
                    rules: layer.rules.clone(),
                    default_allows: !has_allows && layer.default == Access::Allow,
                    which: which.into(),
                }
            })
            .collect();
        let key_bytes: Vec<[u8; 4]> = key.iter().map(|i| i.to_be_bytes()).collect();
        Grant {
            layers,
            epoch: policy.epoch,
            id: crate::catalog::stable_digest(key_bytes.iter().map(|b| &b[..])),
            lists: Default::default(),
            #[cfg(test)]
            derivations: Default::default(),
        }
    }

    /// Whether the client may see and use the item named `key`.
    pub(crate) fn allows(&self, key: &str) -> bool {
        self.layers.iter().all(|layer| layer.allows(key))
    }

    /// Whether the client may see and use `key` of `catalog`: an app
    /// resource (a tool's `_meta.ui.resourceUri`) follows the tools that
    /// show it, so the app of a hidden tool is hidden too, and allowing a
    /// tool allows its app.
    pub(crate) fn allows_in(&self, catalog: &Catalog, key: &str) -> bool {
        if catalog.is_gateway_tool(key) {
            return true;
        }
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
        // A progressive view lists few tools; what it can find is part of
        // the view too.
        if let (ListKind::Tools, Some(searchable)) = (kind, catalog.searchable()) {
            for (item, key, owner) in searchable.tools() {
                if self.allows(key) {
                    fanout::hash_item(&mut digest, item);
                    if !upstreams.contains(owner) {
                        upstreams.push(owner.clone());
                    }
                }
            }
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

/// The policy of each view: the whole one's (the global `policy`) and each
/// endpoint's (the global one with the endpoint's own on top). A view with
/// neither has none.
#[derive(Default)]
pub(crate) struct Policies {
    global: Option<PolicyConfig>,
    /// Each endpoint's own section, by name.
    own: Vec<(Arc<str>, Option<PolicyConfig>)>,
    whole: Option<Arc<Policy>>,
    endpoints: HashMap<Arc<str>, Arc<Policy>>,
}

impl Policies {
    pub(crate) fn new(global: Option<&PolicyConfig>, endpoints: &[EndpointConfig]) -> Policies {
        let own: Vec<(Arc<str>, Option<PolicyConfig>)> = endpoints
            .iter()
            .map(|e| (Arc::from(e.name.as_str()), e.policy.clone()))
            .collect();
        let endpoints = own
            .iter()
            .filter_map(|(name, own)| {
                let sections: Vec<PolicyConfig> = global
                    .into_iter()
                    .cloned()
                    .chain(own.iter().cloned())
                    .collect();
                (!sections.is_empty()).then(|| (name.clone(), Arc::new(Policy::layered(&sections))))
            })
            .collect();
        Policies {
            global: global.cloned(),
            own,
            whole: global.map(|c| Arc::new(Policy::new(c))),
            endpoints,
        }
    }

    /// The policy of a view (none: the whole one).
    pub(crate) fn of(&self, endpoint: Option<&str>) -> Option<&Arc<Policy>> {
        match endpoint {
            None => self.whole.as_ref(),
            Some(name) => self.endpoints.get(name),
        }
    }

    fn same_as(&self, other: &Policies) -> bool {
        self.global == other.global && self.own == other.own
    }
}

/// The current policies and the catalogs they filter. Shared by the router
/// and the notify hub.
pub(crate) struct Views {
    catalog: Arc<CatalogStore>,
    policies: ArcSwap<Policies>,
}

impl Views {
    pub(crate) fn new(
        catalog: Arc<CatalogStore>,
        config: Option<&PolicyConfig>,
        endpoints: &[EndpointConfig],
    ) -> Views {
        Views {
            catalog,
            policies: ArcSwap::from_pointee(Policies::new(config, endpoints)),
        }
    }

    /// The catalog of a view (none: the whole one).
    pub(crate) fn catalog(&self, endpoint: Option<&str>) -> Arc<Catalog> {
        self.catalog.load_view(endpoint)
    }

    /// The grant a request from `identity` to a view is served under; none
    /// (the whole view) without a policy or without an authenticated client.
    pub(crate) fn grant(
        &self,
        endpoint: Option<&str>,
        identity: Option<&Identity>,
    ) -> Option<Arc<Grant>> {
        let identity = identity?;
        self.policies.load().of(endpoint).map(|p| p.grant(identity))
    }

    /// Whether `identity` may see and use the item named `key` in a view.
    pub(crate) fn allows(
        &self,
        endpoint: Option<&str>,
        identity: Option<&Identity>,
        key: &str,
    ) -> bool {
        let catalog = self.catalog(endpoint);
        catalog.admits(key)
            && self
                .grant(endpoint, identity)
                .is_none_or(|g| g.allows_in(&catalog, key))
    }

    /// Whether `identity` sees any item of `upstream` in a view.
    pub(crate) fn sees_upstream(
        &self,
        endpoint: Option<&str>,
        identity: Option<&Identity>,
        upstream: &str,
    ) -> bool {
        let catalog = self.catalog(endpoint);
        catalog.shows_upstream(upstream)
            && self
                .grant(endpoint, identity)
                .is_none_or(|g| g.sees_upstream(upstream, &catalog))
    }

    /// The `instructions` `identity` is shown in a view.
    pub(crate) fn instructions(
        &self,
        endpoint: Option<&str>,
        identity: Option<&Identity>,
    ) -> Option<String> {
        let catalog = self.catalog(endpoint);
        match self.grant(endpoint, identity) {
            Some(grant) => grant.instructions(&catalog),
            None => catalog.instructions().map(str::to_owned),
        }
    }

    /// Records what a new subscriber of a view sees now, so that only later
    /// changes of its view are news to it.
    pub(crate) fn baseline(
        &self,
        endpoint: Option<&str>,
        identity: Option<&Identity>,
        seen: &Seen,
    ) {
        let mut fanout = self.fanout();
        seen.baseline(ListKind::ALL.map(|kind| fanout.digest(endpoint, identity, kind)));
    }

    /// The current views, for one fan-out of changes.
    pub(crate) fn fanout(&self) -> Fanout {
        Fanout::new(self.policies.load_full(), self.catalog.clone())
    }

    /// Puts the policies of `config` and `endpoints` in force (a reload);
    /// false when they are the ones in force already. Requests use the new
    /// ones from their next lookup.
    pub(crate) fn replace(
        &self,
        config: Option<&PolicyConfig>,
        endpoints: &[EndpointConfig],
    ) -> bool {
        let next = Policies::new(config, endpoints);
        if self.policies.load().same_as(&next) {
            return false;
        }
        self.policies.store(Arc::new(next));
        true
    }
}

#[cfg(test)]
pub(crate) mod tests;
