//! The merged, namespaced view of every upstream's tools, prompts, resources
//! and resource templates.
//!
//! Each upstream actor publishes its complete lists as an [`UpstreamLists`]
//! through [`CatalogStore::publish`]. The store rebuilds one immutable
//! [`Catalog`] and swaps it in whole (`ArcSwap`), so list requests read a
//! consistent snapshot without locks. Items are serialized once at rebuild;
//! a list page is a concatenation of pre-serialized items, and a page of a
//! whole list is built once per snapshot and shared (`page`). Pages are
//! addressed by opaque cursors the gateway issues; a cursor is bound to the
//! version of its list, a digest of its content, so a change to that list
//! invalidates it and another replica with the same catalog accepts it.

pub(crate) mod apps;
mod build;
pub(crate) mod naming;
mod page;
pub(crate) use page::Page;
pub(crate) mod search;
mod shape;
mod uris;
pub(crate) mod view;

pub(crate) use view::ViewSpec;

use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use indexmap::IndexMap;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::hashing::{HashMap, HashSet};

/// The four lists an MCP server can expose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ListKind {
    Tools,
    Prompts,
    Resources,
    Templates,
}

impl ListKind {
    pub(crate) const ALL: [ListKind; 4] =
        [Self::Tools, Self::Prompts, Self::Resources, Self::Templates];

    /// The member of a list result that holds the items.
    pub(crate) fn result_key(self) -> &'static str {
        match self {
            Self::Tools => "tools",
            Self::Prompts => "prompts",
            Self::Resources => "resources",
            Self::Templates => "resourceTemplates",
        }
    }

    /// The request that lists this kind.
    pub(crate) fn method(self) -> &'static str {
        match self {
            Self::Tools => "tools/list",
            Self::Prompts => "prompts/list",
            Self::Resources => "resources/list",
            Self::Templates => "resources/templates/list",
        }
    }

    /// The notification that says this kind changed (templates share the resources one).
    pub(crate) fn list_changed_method(self) -> &'static str {
        match self {
            Self::Tools => "notifications/tools/list_changed",
            Self::Prompts => "notifications/prompts/list_changed",
            Self::Resources | Self::Templates => "notifications/resources/list_changed",
        }
    }

    /// The server capability that declares this list.
    pub(crate) fn capability(self) -> &'static str {
        match self {
            Self::Tools => "tools",
            Self::Prompts => "prompts",
            Self::Resources | Self::Templates => "resources",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    fn tag(self) -> char {
        match self {
            Self::Tools => 't',
            Self::Prompts => 'p',
            Self::Resources => 'r',
            Self::Templates => 'u',
        }
    }
}

/// One upstream's complete lists, as the upstream sent them.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct UpstreamLists {
    pub tools: Vec<Map<String, Value>>,
    pub prompts: Vec<Map<String, Value>>,
    pub resources: Vec<Map<String, Value>>,
    pub templates: Vec<Map<String, Value>>,
}

impl UpstreamLists {
    pub(crate) fn get(&self, kind: ListKind) -> &[Map<String, Value>] {
        match kind {
            ListKind::Tools => &self.tools,
            ListKind::Prompts => &self.prompts,
            ListKind::Resources => &self.resources,
            ListKind::Templates => &self.templates,
        }
    }

    pub(crate) fn get_mut(&mut self, kind: ListKind) -> &mut Vec<Map<String, Value>> {
        match kind {
            ListKind::Tools => &mut self.tools,
            ListKind::Prompts => &mut self.prompts,
            ListKind::Resources => &mut self.resources,
            ListKind::Templates => &mut self.templates,
        }
    }
}

/// What a connected upstream contributes to the merged view.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct UpstreamView {
    pub lists: UpstreamLists,
    /// The upstream's `instructions` from `initialize`, if any.
    pub instructions: Option<String>,
}

/// Where an exposed tool or prompt name leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub upstream: Arc<str>,
    pub original: Arc<str>,
    /// `original` as a JSON string, as a call's params carry it upstream.
    pub original_json: Arc<str>,
    /// Its policy key: the name with its upstream's prefix.
    pub key: Box<str>,
}

/// One merged list, serialized item by item.
#[derive(Debug, Default)]
struct MergedList {
    /// A digest of the items, their keys and owners ([`list_digest`]): the
    /// same on every replica with the same content.
    version: u64,
    items: Vec<Box<RawValue>>,
    /// Each item's exposed name (tools, prompts) or namespaced URI or
    /// template (resources, templates), what policy rules match.
    keys: Vec<Box<str>>,
    /// The upstream each item comes from.
    owners: Vec<Arc<str>>,
}

/// A part of a merged list, a client's view of it: which items (indices in
/// list order) and the view's identity, which its cursors carry. A cursor
/// issued for one view is refused by every other view and by the whole list.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Subset<'a> {
    pub(crate) indices: &'a [u32],
    /// Changes when the policy is reloaded: older cursors are stale.
    pub(crate) epoch: u32,
    /// Which view of that policy: another one's cursors are invalid.
    pub(crate) id: u64,
}

/// Who owns the gateway's own items (a progressive view's search tools).
pub(crate) const GATEWAY_OWNER: &str = "mcpmux";

/// An immutable snapshot of one view (the whole one, or an endpoint's).
#[derive(Debug, Default)]
pub(crate) struct Catalog {
    /// What the view shows and how it names it.
    spec: Arc<ViewSpec>,
    lists: [MergedList; 4],
    tools: HashMap<Box<str>, Target>,
    prompts: HashMap<Box<str>, Target>,
    instructions: Option<String>,
    /// Each connected upstream's own instructions, in config order.
    instruction_sections: Vec<(Arc<str>, String)>,
    /// Upstreams whose URIs are exposed unchanged, in config order.
    plain_upstreams: Vec<Arc<str>>,
    /// Their listed resources, by URI.
    plain_uris: HashMap<Box<str>, Arc<str>>,
    /// Tools with `x-mcp-header` parameters, by exposed name.
    tool_headers: HashMap<Box<str>, Arc<[crate::xheader::HeaderParam]>>,
    /// Tools their upstream marks `readOnlyHint` and `idempotentHint`, by
    /// exposed name: safe to send again (see `router::retry`).
    repeatable_tools: HashSet<Box<str>>,
    /// Every configured upstream with a non-empty prefix, as
    /// (`{prefix}__`, upstream), longest prefix first.
    prefixes: Vec<(String, Arc<str>)>,
    /// Upstreams whose resources are hidden by their `resources: false`.
    hidden_resources: Vec<Arc<str>>,
    /// Pages of the whole lists, built once for this snapshot and shared.
    shared_pages: page::SharedPages,
    /// Tools by their servers' names, and which tools show each app.
    apps: apps::AppIndex,
    /// A progressive view's searchable tools; none: every tool is listed.
    search: Option<search::Searchable>,
    /// Items left out because their names collide under `prefix_mode: never`.
    collisions: Vec<String>,
}

/// Why a cursor was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum CursorError {
    #[error("invalid cursor: it was not issued by this gateway for this list")]
    Invalid,
    #[error("stale cursor: the list changed since it was issued; list again from the start")]
    Stale,
}

impl Catalog {
    pub(crate) fn tool(&self, exposed: &str) -> Option<&Target> {
        self.tools.get(exposed)
    }

    /// The endpoint this view is; none for the whole view.
    pub(crate) fn view_name(&self) -> Option<&Arc<str>> {
        self.spec.name.as_ref()
    }

    /// Whether the view shows `upstream`'s items at all.
    pub(crate) fn shows_upstream(&self, upstream: &str) -> bool {
        self.spec.shows_upstream(upstream)
    }

    /// Whether the view shows the item with policy key `key` (a URI read
    /// or subscribed need not be listed): an app resource with a tool that
    /// shows it, anything else as the view's `items` say.
    pub(crate) fn admits(&self, key: &str) -> bool {
        match self.apps.shown_by(key) {
            Some(_) => true,
            None => self.spec.selects(key),
        }
    }

    /// Whether the view selects items by `items` globs (else it shows all
    /// of its upstreams' items, and [`Self::admits`] is always true).
    pub(crate) fn selects_items(&self) -> bool {
        self.spec.items.is_some()
    }

    /// The policy key of a tool or prompt the client named: its key when
    /// the view has it, else the name itself.
    pub(crate) fn key_of<'n>(&'n self, kind: ListKind, exposed: &'n str) -> &'n str {
        let target = match kind {
            ListKind::Tools => self.tools.get(exposed),
            ListKind::Prompts => self.prompts.get(exposed),
            _ => None,
        };
        target.map_or(exposed, |t| &t.key)
    }

    /// A progressive view's searchable tools.
    pub(crate) fn searchable(&self) -> Option<&search::Searchable> {
        self.search.as_ref()
    }

    /// Whether `key` is one of the gateway's own tools of a progressive
    /// view (always visible: they only reach what the caller may see).
    pub(crate) fn is_gateway_tool(&self, key: &str) -> bool {
        self.search.is_some() && (key == search::SEARCH_TOOL || key == search::CALL_TOOL)
    }

    /// Items left out because their names collide under `prefix_mode: never`.
    pub(crate) fn collisions(&self) -> &[String] {
        &self.collisions
    }

    /// Appends one item to a list.
    fn push(&mut self, kind: ListKind, raw: Box<RawValue>, key: &str, owner: &Arc<str>) {
        let list = &mut self.lists[kind.index()];
        list.items.push(raw);
        list.keys.push(key.into());
        list.owners.push(owner.clone());
    }

    /// Tools by their servers' own names, and the tools of app resources.
    pub(crate) fn apps(&self) -> &apps::AppIndex {
        &self.apps
    }

    /// The configured upstream whose prefix an exposed tool or prompt name
    /// carries, whether or not that upstream is up.
    pub(crate) fn owner_by_prefix(&self, exposed: &str) -> Option<&Arc<str>> {
        self.prefixes
            .iter()
            .find(|(prefix, _)| exposed.starts_with(prefix.as_str()))
            .map(|(_, upstream)| upstream)
    }

    pub(crate) fn prompt(&self, exposed: &str) -> Option<&Target> {
        self.prompts.get(exposed)
    }

    /// Items in one list (a progressive view's listed tools only).
    pub(crate) fn len(&self, kind: ListKind) -> usize {
        self.lists[kind.index()].items.len()
    }

    /// How the view names tools and prompts.
    pub(crate) fn prefix_mode(&self) -> crate::config::PrefixMode {
        self.spec.prefix_mode
    }

    /// The upstreams the view shows; none: all of them.
    pub(crate) fn upstream_selection(&self) -> Option<&[Arc<str>]> {
        self.spec.upstreams.as_deref()
    }

    /// Which upstream a client-visible URI belongs to, and the URI that
    /// upstream knows: `{upstream}+{uri}` for a namespacing upstream, else
    /// an un-namespaced upstream that lists the URI, else the first one.
    pub(crate) fn route_uri<'u>(
        &self,
        uri: &'u str,
        is_upstream: impl Fn(&str) -> bool,
    ) -> Option<(Arc<str>, std::borrow::Cow<'u, str>)> {
        let hidden = |upstream: &str| self.hidden_resources.iter().any(|h| &**h == upstream);
        if let Some((upstream, original)) = naming::split_uri(uri)
            && is_upstream(upstream)
            && self.shows_upstream(upstream)
            && !self.plain_upstreams.iter().any(|p| &**p == upstream)
            && !hidden(upstream)
        {
            return Some((upstream.into(), original));
        }
        if let Some(upstream) = self.plain_uris.get(uri) {
            return Some((upstream.clone(), uri.into()));
        }
        self.plain_upstreams
            .iter()
            .find(|upstream| !hidden(upstream))
            .map(|upstream| (upstream.clone(), uri.into()))
    }

    /// The `x-mcp-header` parameters of an exposed tool.
    pub(crate) fn tool_headers(&self, exposed: &str) -> Option<&[crate::xheader::HeaderParam]> {
        self.tool_headers.get(exposed).map(|p| &**p)
    }

    /// Whether the upstream marks an exposed tool both `readOnlyHint` and
    /// `idempotentHint` (shaping overrides do not count).
    pub(crate) fn tool_repeatable(&self, exposed: &str) -> bool {
        self.repeatable_tools.contains(exposed)
    }

    /// Whether `upstream`'s URIs are exposed as `{upstream}+{uri}`.
    #[cfg(test)]
    pub(crate) fn namespaces_uris(&self, upstream: &str) -> bool {
        !self.plain_upstreams.iter().any(|p| &**p == upstream)
    }

    /// The merged `instructions` of the connected upstreams.
    pub(crate) fn instructions(&self) -> Option<&str> {
        self.instructions.as_deref()
    }

    /// The merged `instructions` of the connected upstreams that `shown`
    /// admits (those a client sees something of).
    pub(crate) fn instructions_of(&self, shown: impl Fn(&str) -> bool) -> Option<String> {
        merged_instructions(
            self.instruction_sections
                .iter()
                .filter(|(upstream, _)| shown(upstream)),
        )
    }

    /// The version of one list, a digest of its content: equal versions
    /// mean equal content, in this process and on every replica.
    pub(crate) fn version(&self, kind: ListKind) -> u64 {
        self.lists[kind.index()].version
    }

    /// What policy rules match for each item of a list, in list order.
    pub(crate) fn keys(&self, kind: ListKind) -> &[Box<str>] {
        &self.lists[kind.index()].keys
    }

    /// Item `index` of a list and the upstream it comes from.
    pub(crate) fn item(&self, kind: ListKind, index: usize) -> (&RawValue, &Arc<str>) {
        let list = &self.lists[kind.index()];
        (&list.items[index], &list.owners[index])
    }
}

/// Holds the current [`Catalog`] of each view and the per-upstream inputs
/// they are built from.
pub(crate) struct CatalogStore {
    snapshot: ArcSwap<Snapshots>,
    uri_forms: Arc<UriForms>,
    /// Config order of upstreams and their views (None while an upstream
    /// is down), and the views to build. Held only by a rebuild, never
    /// across an await.
    sources: Mutex<Sources>,
}

/// The catalogs of one moment: the whole view and each endpoint's.
#[derive(Default)]
struct Snapshots {
    whole: Arc<Catalog>,
    endpoints: IndexMap<Arc<str>, Arc<Catalog>>,
}

struct Sources {
    order: IndexMap<Arc<str>, SourceEntry>,
    whole: Arc<ViewSpec>,
    endpoints: Vec<Arc<ViewSpec>>,
    /// How the URIs of upstreams without their own `namespace_uris` are
    /// exposed (the same in every view).
    uri_mode: crate::config::PrefixMode,
}

/// Which upstreams' resource URIs are exposed unchanged now, shared with
/// the upstream handles (which rewrite URIs in results) and the hub (which
/// maps an upstream's `resources/updated` to the URI clients know).
#[derive(Debug, Default)]
pub(crate) struct UriForms {
    plain: ArcSwap<std::collections::HashSet<Arc<str>>>,
}

impl UriForms {
    /// Whether `upstream`'s URIs are exposed as `{upstream}+{uri}`.
    pub(crate) fn namespaces(&self, upstream: &str) -> bool {
        !self.plain.load().contains(upstream)
    }
}

struct SourceEntry {
    prefix: String,
    /// Its own `namespace_uris`; none: as the gateway's mode decides.
    namespace_uris: Option<bool>,
    /// Whether its URIs are namespaced now (decided at each rebuild).
    namespaces: bool,
    view: Option<Arc<UpstreamView>>,
    /// Its view when it was last up: names it had still count as taken
    /// under `prefix_mode: on_collision` while it is down.
    last_view: Option<Arc<UpstreamView>>,
    /// Its `tools`, `prompts` and `resources` shaping; none: as it is.
    shape: Option<Arc<shape::Shape>>,
}

impl CatalogStore {
    /// A store for these upstreams `(name, prefix, namespace_uris)`, in
    /// config order, all down, and the whole view only.
    pub(crate) fn new(
        upstreams: impl IntoIterator<Item = (Arc<str>, String, Option<bool>)>,
    ) -> Self {
        let order: IndexMap<Arc<str>, SourceEntry> = upstreams
            .into_iter()
            .map(|(name, prefix, namespace_uris)| {
                let entry = SourceEntry {
                    prefix,
                    namespace_uris,
                    namespaces: namespace_uris.unwrap_or(true),
                    view: None,
                    last_view: None,
                    shape: None,
                };
                (name, entry)
            })
            .collect();
        let sources = Sources {
            order,
            whole: Arc::new(ViewSpec::default()),
            endpoints: Vec::new(),
            uri_mode: crate::config::PrefixMode::Always,
        };
        let store = Self {
            snapshot: ArcSwap::from_pointee(Snapshots::default()),
            uri_forms: Arc::default(),
            sources: Mutex::new(sources),
        };
        {
            let mut sources = store.lock();
            store.rebuild(&mut sources);
        }
        store
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Sources> {
        self.sources.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replaces the configured upstreams (a reload): views of upstreams that
    /// stay are kept, removed ones leave the view, new ones start empty.
    /// Returns the list kinds whose merged content changed in any view.
    pub(crate) fn set_upstreams(
        &self,
        upstreams: impl IntoIterator<Item = (Arc<str>, String, Option<bool>)>,
    ) -> Vec<ListKind> {
        let mut sources = self.lock();
        let mut previous = std::mem::take(&mut sources.order);
        sources.order = upstreams
            .into_iter()
            .map(|(name, prefix, namespace_uris)| {
                let (view, last_view, shape) = previous
                    .shift_remove(&name)
                    .map_or((None, None, None), |e| (e.view, e.last_view, e.shape));
                let entry = SourceEntry {
                    prefix,
                    namespace_uris,
                    namespaces: namespace_uris.unwrap_or(true),
                    view,
                    last_view,
                    shape,
                };
                (name, entry)
            })
            .collect();
        self.rebuild(&mut sources)
    }

    /// Sets the views to build: the whole one and the endpoints, and how
    /// URIs are exposed (a start or a reload). Returns the list kinds whose
    /// content changed in any view.
    pub(crate) fn set_views(
        &self,
        whole: ViewSpec,
        endpoints: Vec<ViewSpec>,
        uri_mode: crate::config::PrefixMode,
    ) -> Vec<ListKind> {
        let mut sources = self.lock();
        sources.whole = Arc::new(whole);
        sources.endpoints = endpoints.into_iter().map(Arc::new).collect();
        sources.uri_mode = uri_mode;
        self.rebuild(&mut sources)
    }

    /// Which upstreams' URIs are exposed unchanged, kept current.
    pub(crate) fn uri_forms(&self) -> Arc<UriForms> {
        self.uri_forms.clone()
    }

    /// The URIs that would collide now among upstreams whose URIs `mode`
    /// leaves unchanged (to refuse a `namespace_uris: never` config).
    pub(crate) fn uri_collisions(&self, mode: crate::config::PrefixMode) -> Vec<String> {
        uris::forms(&self.lock().order, mode).1
    }

    /// Sets how each named upstream's items are exposed (its `tools`,
    /// `prompts` and `resources` settings) and rebuilds once. Returns the
    /// list kinds whose merged content changed.
    pub(crate) fn set_shapes<'c>(
        &self,
        shapes: impl IntoIterator<Item = (&'c str, &'c crate::config::ShapeConfig)>,
    ) -> Vec<ListKind> {
        let mut sources = self.lock();
        for (name, config) in shapes {
            if let Some(entry) = sources.order.get_mut(name) {
                entry.shape = (!config.is_identity()).then(|| Arc::new(shape::Shape::new(config)));
            }
        }
        self.rebuild(&mut sources)
    }

    /// The current snapshot of the whole view.
    pub(crate) fn load(&self) -> Arc<Catalog> {
        self.snapshot.load().whole.clone()
    }

    /// The current snapshot of a view: the whole one (none), or an
    /// endpoint's (an empty catalog once the endpoint is gone).
    pub(crate) fn load_view(&self, endpoint: Option<&str>) -> Arc<Catalog> {
        let snapshots = self.snapshot.load();
        match endpoint {
            None => snapshots.whole.clone(),
            Some(name) => snapshots.endpoints.get(name).cloned().unwrap_or_default(),
        }
    }

    /// The catalog `spec` would have now, without putting it in force (to
    /// check a config before it is applied).
    pub(crate) fn preview(&self, spec: &ViewSpec) -> Catalog {
        build::build(&self.lock().order, spec)
    }

    /// Every endpoint's current snapshot, in config order.
    pub(crate) fn endpoints(&self) -> Vec<Arc<Catalog>> {
        self.snapshot.load().endpoints.values().cloned().collect()
    }

    /// Replaces one upstream's view (`None` when it goes down) and swaps in
    /// the rebuilt catalogs. Returns the list kinds whose content changed.
    pub(crate) fn publish(&self, upstream: &str, view: Option<Arc<UpstreamView>>) -> Vec<ListKind> {
        let mut sources = self.lock();
        let Some(entry) = sources.order.get_mut(upstream) else {
            return Vec::new();
        };
        if view.is_some() {
            entry.last_view = view.clone();
        }
        entry.view = view;
        self.rebuild(&mut sources)
    }

    /// Swaps in catalogs built from `sources`; returns the kinds that
    /// changed in any view.
    fn rebuild(&self, sources: &mut Sources) -> Vec<ListKind> {
        let (plain, _) = uris::forms(&sources.order, sources.uri_mode);
        for (name, entry) in sources.order.iter_mut() {
            entry.namespaces = !plain.contains(name);
        }
        self.uri_forms.plain.store(Arc::new(plain));
        let old = self.snapshot.load();
        let mut changed = Vec::new();
        let mut next = |spec: &Arc<ViewSpec>, old: Option<&Catalog>| {
            let mut catalog = build::build(&sources.order, spec);
            catalog.spec = spec.clone();
            for kind in ListKind::ALL {
                let fresh = finish_version(&mut catalog, old, kind);
                if fresh && !changed.contains(&kind) {
                    changed.push(kind);
                }
            }
            Arc::new(catalog)
        };
        let whole = next(&sources.whole, Some(&old.whole));
        let endpoints = sources
            .endpoints
            .iter()
            .filter_map(|spec| {
                let name = spec.name.clone()?;
                let previous = old.endpoints.get(&name).map(|c| &**c);
                Some((name, next(spec, previous)))
            })
            .collect();
        // An endpoint that went away changed everything its clients saw.
        if old.endpoints.keys().any(|name| {
            !sources
                .endpoints
                .iter()
                .any(|s| s.name.as_ref() == Some(name))
        }) {
            for kind in ListKind::ALL {
                if !changed.contains(&kind) {
                    changed.push(kind);
                }
            }
        }
        self.snapshot
            .store(Arc::new(Snapshots { whole, endpoints }));
        changed
    }
}

/// Gives `next`'s list of `kind` its version: the old one when its content
/// is the same (a progressive view's searchable tools included), else a
/// digest of it. True when it changed.
fn finish_version(next: &mut Catalog, old: Option<&Catalog>, kind: ListKind) -> bool {
    let i = kind.index();
    let same_items = |a: &[Box<RawValue>], b: &[Box<RawValue>]| {
        a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.get() == b.get())
    };
    let same = old.is_some_and(|old| {
        same_items(&old.lists[i].items, &next.lists[i].items)
            && (kind != ListKind::Tools
                || match (&old.search, &next.search) {
                    (None, None) => true,
                    (Some(a), Some(b)) => same_items(&a.items, &b.items),
                    _ => false,
                })
    });
    match (same, old) {
        (true, Some(old)) => {
            next.lists[i].version = old.lists[i].version;
            false
        }
        _ => {
            let mut version = list_digest(&next.lists[i]);
            if let (ListKind::Tools, Some(search)) = (kind, &next.search) {
                version ^= stable_digest(search.items.iter().map(|item| item.get().as_bytes()));
            }
            next.lists[i].version = version;
            old.is_some() || version != 0
        }
    }
}

/// The version of a list: the first 8 bytes of a SHA-256 over its items,
/// keys and owners, each followed by a separator byte no JSON text or name
/// contains. Deterministic, so replicas with the same catalog agree; the
/// empty list is 0, as in a catalog nothing was published to.
fn list_digest(list: &MergedList) -> u64 {
    if list.items.is_empty() {
        return 0;
    }
    stable_digest(list.items.iter().enumerate().flat_map(|(i, item)| {
        [
            item.get().as_bytes(),
            list.keys[i].as_bytes(),
            list.owners[i].as_bytes(),
        ]
    }))
}

/// The first 8 bytes of a SHA-256 over `parts`, each followed by `0xff`
/// (a byte UTF-8 never contains): the same in every process and build, so
/// it can go into tokens another replica checks.
pub(crate) fn stable_digest<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    let mut context = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    for part in parts {
        context.update(part);
        context.update(&[0xff]);
    }
    let digest = context.finish();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest.as_ref()[..8]);
    u64::from_be_bytes(first)
}

/// A progressive view's two tools, as `(name, JSON)`.
fn meta_tools() -> [(&'static str, Box<RawValue>); 2] {
    let search = serde_json::json!({
        "name": search::SEARCH_TOOL,
        "title": "Search tools",
        "description": "Searches the tools of this server by what they do and returns the best matches with their full input schemas. Call a match with call_tool.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": { "type": "string", "description": "What the tool should do, in a few words" },
                "limit": { "type": "integer", "minimum": 1, "maximum": crate::config::MAX_SEARCH_RESULTS, "description": "Most matches to return" }
            },
            "required": ["query"]
        },
        "annotations": { "readOnlyHint": true, "idempotentHint": true, "openWorldHint": false }
    });
    let call = serde_json::json!({
        "name": search::CALL_TOOL,
        "title": "Call a tool",
        "description": "Calls a tool found with search_tools, by its name, with its arguments.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "name": { "type": "string", "description": "The tool's name, as search_tools gave it" },
                "arguments": { "type": "object", "description": "The tool's arguments, as its input schema says" }
            },
            "required": ["name"]
        }
    });
    let raw = |v: Value| serde_json::value::to_raw_value(&v).expect("static JSON");
    [
        (search::SEARCH_TOOL, raw(search)),
        (search::CALL_TOOL, raw(call)),
    ]
}

/// One `instructions` text from upstreams' sections, or none without any.
fn merged_instructions<'a>(
    sections: impl Iterator<Item = &'a (Arc<str>, String)>,
) -> Option<String> {
    let sections: Vec<String> = sections
        .map(|(name, text)| format!("## {name}\n{text}"))
        .collect();
    (!sections.is_empty()).then(|| {
        format!(
            "This server is an MCP gateway (mcpmux) in front of the servers below; each section holds that server's own instructions.\n\n{}",
            sections.join("\n\n")
        )
    })
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod view_tests;
