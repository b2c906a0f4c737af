//! Building one view's [`Catalog`] from the upstreams' lists, in three
//! passes: tools and prompts are collected (shaped, keyed, selected), then
//! named by the view's `prefix_mode` and serialized, then resources and
//! templates follow (an app resource with the tools that show it).
//!
//! An item's policy key is its name with its upstream's prefix
//! (`{prefix}__{name}`, what `prefix_mode: always` shows), or its URI as
//! exposed, whatever the view shows: policy rules and endpoint `items`
//! globs mean the same item in every view.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use indexmap::IndexMap;
use serde_json::{Map, Value};

use super::search::{CALL_TOOL, SEARCH_TOOL, Searchable};
use super::view::ViewSpec;
use super::{Catalog, ListKind, SourceEntry, Target, apps, merged_instructions, naming};
use crate::config::PrefixMode;

/// A tool or prompt on its way into the catalog, before it has a name.
struct Candidate {
    upstream: Arc<str>,
    prefix: String,
    item: Map<String, Value>,
    original: String,
    /// Its name after shaping, before any prefix.
    shown: String,
    key: String,
    header_params: Vec<crate::xheader::HeaderParam>,
    repeatable: bool,
    /// The app resource it shows, if any.
    app: Option<String>,
}

/// The configured name prefixes of the view's upstreams, longest first (so
/// `a-b__` wins over `a__` only when it is the real one).
pub(super) fn prefixes_of(
    order: &IndexMap<Arc<str>, SourceEntry>,
    spec: &ViewSpec,
) -> Vec<(String, Arc<str>)> {
    if spec.prefix_mode != PrefixMode::Always {
        return Vec::new();
    }
    let mut prefixes: Vec<(String, Arc<str>)> = order
        .iter()
        .filter(|(name, e)| !e.prefix.is_empty() && spec.shows_upstream(name))
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

/// The view's upstreams whose URIs are exposed unchanged, in config order.
pub(super) fn plain_upstreams(
    order: &IndexMap<Arc<str>, SourceEntry>,
    spec: &ViewSpec,
) -> Vec<Arc<str>> {
    order
        .iter()
        .filter(|(name, e)| !e.namespaces && spec.shows_upstream(name))
        .map(|(name, _)| name.clone())
        .collect()
}

/// Builds the catalog of `spec` from the upstream views in config order.
pub(super) fn build(order: &IndexMap<Arc<str>, SourceEntry>, spec: &ViewSpec) -> Catalog {
    let mut catalog = Catalog {
        plain_upstreams: plain_upstreams(order, spec),
        prefixes: prefixes_of(order, spec),
        search: spec.search.as_ref().map(|s| Searchable::new(s.results)),
        ..Catalog::default()
    };
    let mut candidates: [Vec<Candidate>; 2] = [Vec::new(), Vec::new()];
    // App resources of every tool, shown or not: one is shown only with a
    // tool that shows it.
    let mut app_uris: HashSet<String> = HashSet::new();
    for (name, entry) in order.iter().filter(|(n, _)| spec.shows_upstream(n)) {
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
        for kind in [ListKind::Tools, ListKind::Prompts] {
            for item in view.lists.get(kind) {
                if let Some(candidate) = collect(name, entry, kind, item, spec, &mut app_uris) {
                    candidates[kind.index()].push(candidate);
                }
            }
        }
    }
    for kind in [ListKind::Tools, ListKind::Prompts] {
        let reserved: &[&str] = match (kind, &catalog.search) {
            (ListKind::Tools, Some(_)) => &[SEARCH_TOOL, CALL_TOOL],
            _ => &[],
        };
        let names = assign_names(
            &candidates[kind.index()],
            spec.prefix_mode,
            order,
            spec,
            reserved,
            &mut catalog.collisions,
            kind,
        );
        let taken = std::mem::take(&mut candidates[kind.index()]);
        for (candidate, exposed) in taken.into_iter().zip(names) {
            if let Some(exposed) = exposed {
                emit(&mut catalog, kind, candidate, exposed, spec);
            }
        }
    }
    if catalog.search.is_some() {
        let gateway: Arc<str> = Arc::from(super::GATEWAY_OWNER);
        for (name, raw) in super::meta_tools() {
            catalog.push(ListKind::Tools, raw, name, &gateway);
        }
    }
    resources(&mut catalog, order, spec, &app_uris);
    catalog.instructions = merged_instructions(catalog.instruction_sections.iter());
    catalog
}

/// Shapes one tool or prompt and decides whether the view selects it.
fn collect(
    upstream: &Arc<str>,
    entry: &SourceEntry,
    kind: ListKind,
    item: &Map<String, Value>,
    spec: &ViewSpec,
    app_uris: &mut HashSet<String>,
) -> Option<Candidate> {
    let mut item = item.clone();
    let header_params = match kind {
        ListKind::Tools => match item.get("inputSchema").map(crate::xheader::from_schema) {
            Some(Err(why)) => {
                tracing::warn!(upstream = %upstream, tool = ?item.get("name"), reason = %why, "tool left out: invalid x-mcp-header annotation");
                return None;
            }
            Some(Ok(params)) => params,
            None => Vec::new(),
        },
        _ => Vec::new(),
    };
    let original = item
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let hint =
        |key: &str| item.get("annotations").and_then(|a| a.get(key)) == Some(&Value::Bool(true));
    let repeatable = kind == ListKind::Tools && hint("readOnlyHint") && hint("idempotentHint");
    // Shaping may leave it out, rename it, override fields.
    let shown = match entry.shape.as_deref() {
        Some(shape) => shape.apply(kind, &original, &mut item)?,
        None => original.clone(),
    };
    let app = match kind {
        ListKind::Tools => apps::namespace_tool_meta(&mut item, upstream, entry.namespaces),
        _ => None,
    };
    if let Some(app) = &app {
        app_uris.insert(app.clone());
    }
    let key = naming::exposed_name(&entry.prefix, &shown);
    if !spec.selects(&key) {
        return None;
    }
    Some(Candidate {
        upstream: upstream.clone(),
        prefix: entry.prefix.clone(),
        item,
        original,
        shown,
        key,
        header_params,
        repeatable,
        app,
    })
}

/// Each candidate's exposed name (none: left out, a collision under
/// `never`), in order. Under `on_collision` a name is bare unless another
/// upstream of the view has it too, now or as last seen while it was up,
/// so names do not flip while an upstream restarts.
fn assign_names(
    candidates: &[Candidate],
    mode: PrefixMode,
    order: &IndexMap<Arc<str>, SourceEntry>,
    spec: &ViewSpec,
    reserved: &[&str],
    collisions: &mut Vec<String>,
    kind: ListKind,
) -> Vec<Option<String>> {
    let mut taken: HashMap<String, Arc<str>> = reserved
        .iter()
        .map(|r| ((*r).to_owned(), Arc::from("mcpmux")))
        .collect();
    let shared = match mode {
        PrefixMode::OnCollision => shared_names(order, spec, kind),
        _ => HashSet::new(),
    };
    candidates
        .iter()
        .map(|c| {
            let base = match mode {
                PrefixMode::Always => naming::exposed_name(&c.prefix, &c.shown),
                PrefixMode::OnCollision if shared.contains(c.shown.as_str()) => {
                    naming::exposed_name(&c.prefix, &c.shown)
                }
                PrefixMode::OnCollision | PrefixMode::Never => naming::exposed_name("", &c.shown),
            };
            if let Some(owner) = taken.get(&base) {
                if mode == PrefixMode::Never {
                    let what = match kind {
                        ListKind::Prompts => "prompt",
                        _ => "tool",
                    };
                    let collision = format!(
                        "{what} {base:?} of upstream {} collides with {}'s",
                        c.upstream, owner
                    );
                    tracing::warn!(view = ?spec.name, "{collision} under prefix_mode: never; left out");
                    collisions.push(collision);
                    return None;
                }
                let exposed = unique_name(&taken, &base, &c.upstream, &c.original, kind);
                taken.insert(exposed.clone(), c.upstream.clone());
                return Some(exposed);
            }
            taken.insert(base.clone(), c.upstream.clone());
            Some(base)
        })
        .collect()
}

/// Names (after shaping) that more than one of the view's upstreams has,
/// counting an upstream that is down by its lists when last up.
fn shared_names(
    order: &IndexMap<Arc<str>, SourceEntry>,
    spec: &ViewSpec,
    kind: ListKind,
) -> HashSet<String> {
    let mut owners: HashMap<String, Arc<str>> = HashMap::new();
    let mut shared = HashSet::new();
    for (name, entry) in order.iter().filter(|(n, _)| spec.shows_upstream(n)) {
        let Some(view) = entry.view.as_ref().or(entry.last_view.as_ref()) else {
            continue;
        };
        let mut own = HashSet::new();
        for item in view.lists.get(kind) {
            let original = item.get("name").and_then(Value::as_str).unwrap_or_default();
            let shown = match entry.shape.as_deref() {
                Some(shape) => match shape.apply(kind, original, &mut item.clone()) {
                    Some(shown) => shown,
                    None => continue,
                },
                None => original.to_owned(),
            };
            if !spec.selects(&naming::exposed_name(&entry.prefix, &shown)) {
                continue;
            }
            own.insert(shown);
        }
        for shown in own {
            match owners.get(&shown) {
                Some(other) if other != name => {
                    shared.insert(shown);
                }
                Some(_) => {}
                None => {
                    owners.insert(shown, name.clone());
                }
            }
        }
    }
    shared
}

/// Adds a named tool or prompt to the catalog.
fn emit(catalog: &mut Catalog, kind: ListKind, c: Candidate, exposed: String, spec: &ViewSpec) {
    let mut item = c.item;
    item.insert("name".into(), Value::String(exposed.clone()));
    if kind == ListKind::Tools {
        catalog
            .apps
            .add_tool(&exposed, &c.key, &c.original, c.app.clone());
        if !c.header_params.is_empty() {
            catalog
                .tool_headers
                .insert(exposed.clone().into_boxed_str(), c.header_params.into());
        }
        if c.repeatable {
            catalog
                .repeatable_tools
                .insert(exposed.clone().into_boxed_str());
        }
    }
    let names = match kind {
        ListKind::Tools => &mut catalog.tools,
        _ => &mut catalog.prompts,
    };
    names.insert(
        exposed.into_boxed_str(),
        Target {
            upstream: c.upstream.clone(),
            original_json: {
                let mut json = String::with_capacity(c.original.len() + 2);
                crate::protocol::push_json_string(&mut json, &c.original);
                json.into()
            },
            original: c.original.into(),
            key: c.key.clone().into_boxed_str(),
        },
    );
    let Ok(raw) = serde_json::value::to_raw_value(&item) else {
        return;
    };
    if let (ListKind::Tools, Some(search), Some(searchable)) =
        (kind, &spec.search, &mut catalog.search)
    {
        let listed = search.pinned.is_match(&c.key);
        if listed {
            catalog.lists[kind.index()].items.push(raw.clone());
            catalog.lists[kind.index()].keys.push(c.key.as_str().into());
            catalog.lists[kind.index()].owners.push(c.upstream.clone());
        }
        searchable.push(raw, &c.key, &c.upstream, &item);
        return;
    }
    catalog.push(kind, raw, &c.key, &c.upstream);
}

/// Adds the view's resources and templates.
fn resources(
    catalog: &mut Catalog,
    order: &IndexMap<Arc<str>, SourceEntry>,
    spec: &ViewSpec,
    app_uris: &HashSet<String>,
) {
    // An upstream listing one URI twice would otherwise show it twice.
    let mut seen_uris = HashSet::new();
    for (name, entry) in order.iter().filter(|(n, _)| spec.shows_upstream(n)) {
        if entry.shape.as_deref().is_some_and(|s| !s.resources()) {
            continue;
        }
        let Some(view) = &entry.view else { continue };
        for kind in [ListKind::Resources, ListKind::Templates] {
            for item in view.lists.get(kind) {
                let mut item = item.clone();
                let member = match kind {
                    ListKind::Resources => "uri",
                    _ => "uriTemplate",
                };
                if entry.namespaces {
                    namespace_member(&mut item, member, name);
                }
                let Some(key) = item.get(member).and_then(Value::as_str).map(str::to_owned) else {
                    continue;
                };
                let shown = match app_uris.contains(&key) {
                    // An app resource is shown with a tool that shows it.
                    true => catalog.apps.shown_by(&key).is_some(),
                    false => spec.selects(&key),
                };
                if !shown {
                    continue;
                }
                if kind == ListKind::Resources {
                    if !seen_uris.insert(key.clone()) {
                        continue;
                    }
                    if !entry.namespaces {
                        catalog.plain_uris.insert(key.as_str().into(), name.clone());
                    }
                }
                if let Ok(raw) = serde_json::value::to_raw_value(&item) {
                    catalog.push(kind, raw, &key, name);
                }
            }
        }
    }
}

/// The exposed name for `original`, made unique among `taken` deterministically.
fn unique_name(
    taken: &HashMap<String, Arc<str>>,
    base: &str,
    upstream: &str,
    original: &str,
    kind: ListKind,
) -> String {
    let mut seed = format!("{upstream}\0{original}");
    loop {
        let candidate = naming::with_hash_suffix(base, &seed);
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
