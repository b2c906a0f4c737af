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
pub(crate) mod naming;
mod page;
pub(crate) use page::Page;
mod shape;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use indexmap::IndexMap;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

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
    pub original: Box<str>,
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

/// An immutable snapshot of the merged view.
#[derive(Debug, Default)]
pub(crate) struct Catalog {
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
    repeatable_tools: std::collections::HashSet<Box<str>>,
    /// Every configured upstream with a non-empty prefix, as
    /// (`{prefix}__`, upstream), longest prefix first.
    prefixes: Vec<(String, Arc<str>)>,
    /// Upstreams whose resources are hidden by their `resources: false`.
    hidden_resources: Vec<Arc<str>>,
    /// Pages of the whole lists, built once for this snapshot and shared.
    shared_pages: page::SharedPages,
    /// Tools by their servers' names, and which tools show each app.
    apps: apps::AppIndex,
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

    /// Items in one list.
    #[cfg(test)]
    pub(crate) fn len(&self, kind: ListKind) -> usize {
        self.lists[kind.index()].items.len()
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

/// Holds the current [`Catalog`] and the per-upstream inputs it is built from.
pub(crate) struct CatalogStore {
    snapshot: ArcSwap<Catalog>,
    /// Config order of upstreams and their views (None while an upstream is down).
    /// Held only by `publish`, never across an await.
    sources: Mutex<Sources>,
}

struct Sources {
    order: IndexMap<Arc<str>, SourceEntry>,
}

struct SourceEntry {
    prefix: String,
    namespace_uris: bool,
    view: Option<Arc<UpstreamView>>,
    /// Its `tools`, `prompts` and `resources` shaping; none: as it is.
    shape: Option<Arc<shape::Shape>>,
}

impl CatalogStore {
    /// A store for these upstreams `(name, prefix, namespace_uris)`, in
    /// config order, all down.
    pub(crate) fn new(upstreams: impl IntoIterator<Item = (Arc<str>, String, bool)>) -> Self {
        let order: IndexMap<Arc<str>, SourceEntry> = upstreams
            .into_iter()
            .map(|(name, prefix, namespace_uris)| {
                let entry = SourceEntry {
                    prefix,
                    namespace_uris,
                    view: None,
                    shape: None,
                };
                (name, entry)
            })
            .collect();
        let plain_upstreams = order
            .iter()
            .filter(|(_, e)| !e.namespace_uris)
            .map(|(name, _)| name.clone())
            .collect();
        Self {
            snapshot: ArcSwap::from_pointee(Catalog {
                prefixes: prefixes_of(&order),
                plain_upstreams,
                ..Catalog::default()
            }),
            sources: Mutex::new(Sources { order }),
        }
    }

    /// Replaces the configured upstreams (a reload): views of upstreams that
    /// stay are kept, removed ones leave the view, new ones start empty.
    /// Returns the list kinds whose merged content changed.
    pub(crate) fn set_upstreams(
        &self,
        upstreams: impl IntoIterator<Item = (Arc<str>, String, bool)>,
    ) -> Vec<ListKind> {
        let mut sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        let mut previous = std::mem::take(&mut sources.order);
        sources.order = upstreams
            .into_iter()
            .map(|(name, prefix, namespace_uris)| {
                let (view, shape) = previous
                    .shift_remove(&name)
                    .map_or((None, None), |e| (e.view, e.shape));
                let entry = SourceEntry {
                    prefix,
                    namespace_uris,
                    view,
                    shape,
                };
                (name, entry)
            })
            .collect();
        self.rebuild(&mut sources)
    }

    /// Sets how each named upstream's items are exposed (its `tools`,
    /// `prompts` and `resources` settings) and rebuilds once. Returns the
    /// list kinds whose merged content changed.
    pub(crate) fn set_shapes<'c>(
        &self,
        shapes: impl IntoIterator<Item = (&'c str, &'c crate::config::ShapeConfig)>,
    ) -> Vec<ListKind> {
        let mut sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        for (name, config) in shapes {
            if let Some(entry) = sources.order.get_mut(name) {
                entry.shape = (!config.is_identity()).then(|| Arc::new(shape::Shape::new(config)));
            }
        }
        self.rebuild(&mut sources)
    }

    /// The current snapshot.
    pub(crate) fn load(&self) -> Arc<Catalog> {
        self.snapshot.load_full()
    }

    /// Replaces one upstream's view (`None` when it goes down) and swaps in
    /// the rebuilt catalog. Returns the list kinds whose merged content changed.
    pub(crate) fn publish(&self, upstream: &str, view: Option<Arc<UpstreamView>>) -> Vec<ListKind> {
        let mut sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        let Some(entry) = sources.order.get_mut(upstream) else {
            return Vec::new();
        };
        entry.view = view;
        self.rebuild(&mut sources)
    }

    /// Swaps in a catalog built from `sources`; returns the changed kinds.
    fn rebuild(&self, sources: &mut Sources) -> Vec<ListKind> {
        let old = self.snapshot.load();
        let mut next = build(&sources.order);
        let mut changed = Vec::new();
        for kind in ListKind::ALL {
            let i = kind.index();
            let same = old.lists[i].items.len() == next.lists[i].items.len()
                && old.lists[i]
                    .items
                    .iter()
                    .zip(&next.lists[i].items)
                    .all(|(a, b)| a.get() == b.get());
            if same {
                next.lists[i].version = old.lists[i].version;
            } else {
                next.lists[i].version = list_digest(&next.lists[i]);
                changed.push(kind);
            }
        }
        self.snapshot.store(Arc::new(next));
        changed
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

/// The configured name prefixes, longest first (so `a-b__` wins over `a__`
/// only when it is the real one).
fn prefixes_of(order: &IndexMap<Arc<str>, SourceEntry>) -> Vec<(String, Arc<str>)> {
    let mut prefixes: Vec<(String, Arc<str>)> = order
        .iter()
        .filter(|(_, e)| !e.prefix.is_empty())
        .map(|(name, e)| {
            (
                format!("{}{}", e.prefix, naming::NAME_SEPARATOR),
                name.clone(),
            )
        })
        .collect();
    prefixes.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
    prefixes
}

/// Builds a merged catalog from the upstream views in config order.
fn build(order: &IndexMap<Arc<str>, SourceEntry>) -> Catalog {
    let mut catalog = Catalog {
        plain_upstreams: order
            .iter()
            .filter(|(_, e)| !e.namespace_uris)
            .map(|(name, _)| name.clone())
            .collect(),
        prefixes: prefixes_of(order),
        ..Catalog::default()
    };
    // An upstream listing one URI twice would otherwise show it twice.
    let mut seen_uris = HashSet::new();
    for (name, entry) in order {
        let shape = entry.shape.as_deref();
        if shape.is_some_and(|s| !s.resources()) {
            catalog.hidden_resources.push(name.clone());
        }
        let Some(view) = &entry.view else { continue };
        if let Some(text) = view
            .instructions
            .as_deref()
            .filter(|t| !t.trim().is_empty())
        {
            catalog
                .instruction_sections
                .push((name.clone(), text.trim().to_owned()));
        }
        for kind in ListKind::ALL {
            if matches!(kind, ListKind::Resources | ListKind::Templates)
                && shape.is_some_and(|s| !s.resources())
            {
                continue;
            }
            for item in view.lists.get(kind) {
                let mut item = item.clone();
                match kind {
                    ListKind::Tools | ListKind::Prompts => {
                        let header_params = match kind {
                            ListKind::Tools => {
                                match item.get("inputSchema").map(crate::xheader::from_schema) {
                                    Some(Err(why)) => {
                                        tracing::warn!(upstream = %name, tool = ?item.get("name"), reason = %why, "tool left out: invalid x-mcp-header annotation");
                                        continue;
                                    }
                                    Some(Ok(params)) => params,
                                    None => Vec::new(),
                                }
                            }
                            _ => Vec::new(),
                        };
                        let original = item
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned();
                        let hint = |key: &str| {
                            item.get("annotations").and_then(|a| a.get(key))
                                == Some(&Value::Bool(true))
                        };
                        let repeatable = kind == ListKind::Tools
                            && hint("readOnlyHint")
                            && hint("idempotentHint");
                        // Shaping may leave it out, rename it, override fields.
                        let shown = match shape {
                            Some(shape) => match shape.apply(kind, &original, &mut item) {
                                Some(shown) => shown,
                                None => continue,
                            },
                            None => original.clone(),
                        };
                        let names = if kind == ListKind::Tools {
                            &mut catalog.tools
                        } else {
                            &mut catalog.prompts
                        };
                        let exposed = unique_name(names, &entry.prefix, name, &shown, kind);
                        item.insert("name".into(), Value::String(exposed.clone()));
                        if kind == ListKind::Tools {
                            let app =
                                apps::namespace_tool_meta(&mut item, name, entry.namespace_uris);
                            catalog.apps.add_tool(&exposed, &original, app);
                        }
                        if !header_params.is_empty() {
                            catalog
                                .tool_headers
                                .insert(exposed.clone().into_boxed_str(), header_params.into());
                        }
                        if repeatable {
                            catalog
                                .repeatable_tools
                                .insert(exposed.clone().into_boxed_str());
                        }
                        names.insert(
                            exposed.into_boxed_str(),
                            Target {
                                upstream: name.clone(),
                                original: original.into_boxed_str(),
                            },
                        );
                    }
                    ListKind::Resources => {
                        if entry.namespace_uris {
                            namespace_member(&mut item, "uri", name);
                        }
                        let Some(uri) = item.get("uri").and_then(Value::as_str) else {
                            continue;
                        };
                        if !seen_uris.insert(uri.to_owned()) {
                            continue;
                        }
                        if !entry.namespace_uris {
                            catalog.plain_uris.insert(uri.into(), name.clone());
                        }
                    }
                    ListKind::Templates if entry.namespace_uris => {
                        namespace_member(&mut item, "uriTemplate", name);
                    }
                    ListKind::Templates => {}
                }
                if let Ok(raw) = serde_json::value::to_raw_value(&item) {
                    let key_member = match kind {
                        ListKind::Tools | ListKind::Prompts => "name",
                        ListKind::Resources => "uri",
                        ListKind::Templates => "uriTemplate",
                    };
                    let key = item.get(key_member).and_then(Value::as_str);
                    let list = &mut catalog.lists[kind.index()];
                    list.items.push(raw);
                    list.keys.push(key.unwrap_or_default().into());
                    list.owners.push(name.clone());
                }
            }
        }
    }
    catalog.instructions = merged_instructions(catalog.instruction_sections.iter());
    catalog
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

/// The exposed name for `original`, made unique among `taken` deterministically.
fn unique_name(
    taken: &HashMap<Box<str>, Target>,
    prefix: &str,
    upstream: &str,
    original: &str,
    kind: ListKind,
) -> String {
    let base = naming::exposed_name(prefix, original);
    if !taken.contains_key(base.as_str()) {
        return base;
    }
    let mut seed = format!("{upstream}\0{original}");
    loop {
        let candidate = naming::with_hash_suffix(&base, &seed);
        if !taken.contains_key(candidate.as_str()) {
            tracing::warn!(
                upstream = %upstream,
                original = %original,
                exposed = %candidate,
                kind = kind.result_key(),
                "name collision: exposing under a hashed name"
            );
            return candidate;
        }
        seed.push('\0');
    }
}

fn namespace_member(item: &mut Map<String, Value>, key: &str, upstream: &str) {
    if let Some(Value::String(uri)) = item.get_mut(key) {
        *uri = naming::namespaced_uri(upstream, uri);
    }
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
