//! How each upstream's resource URIs are exposed, gateway-wide (URIs are
//! the keys of the subscription table, so every view shows one URI the same
//! way). An upstream's own `namespace_uris: true | false` decides for it;
//! the others follow the top-level `namespace_uris` mode: `always`
//! namespaces them, `never` leaves them unchanged, and `on_collision`
//! leaves an upstream's URIs unchanged unless one of the URIs or templates
//! it lists is also listed unchanged by another upstream. An upstream that
//! is down counts with what it listed when last up, so forms do not flip
//! while it restarts.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use indexmap::IndexMap;
use serde_json::Value;

use super::{ListKind, SourceEntry};
use crate::config::PrefixMode;

/// The URIs and templates an upstream lists (now, or when last up).
fn listed(entry: &SourceEntry) -> Vec<&str> {
    let Some(view) = entry.view.as_ref().or(entry.last_view.as_ref()) else {
        return Vec::new();
    };
    if entry.shape.as_deref().is_some_and(|s| !s.resources()) {
        return Vec::new();
    }
    let resources = view.lists.get(ListKind::Resources).iter();
    let templates = view.lists.get(ListKind::Templates).iter();
    resources
        .filter_map(|r| r.get("uri").and_then(Value::as_str))
        .chain(templates.filter_map(|t| t.get("uriTemplate").and_then(Value::as_str)))
        .collect()
}

/// The upstreams whose URIs are exposed unchanged under `mode`, and the
/// URIs that collide among them (each said once, naming both upstreams).
pub(super) fn forms(
    order: &IndexMap<Arc<str>, SourceEntry>,
    mode: PrefixMode,
) -> (HashSet<Arc<str>>, Vec<String>) {
    let candidates = |entry: &SourceEntry| match entry.namespace_uris {
        Some(own) => !own,
        None => mode != PrefixMode::Always,
    };
    let mut owners: HashMap<&str, Vec<&Arc<str>>> = HashMap::new();
    for (name, entry) in order.iter().filter(|(_, e)| candidates(e)) {
        let mut own: Vec<&str> = listed(entry);
        own.sort_unstable();
        own.dedup();
        for uri in own {
            owners.entry(uri).or_default().push(name);
        }
    }
    let plain: HashSet<Arc<str>> = order
        .iter()
        .filter(|(name, entry)| match (entry.namespace_uris, mode) {
            (Some(own), _) => !own,
            (None, PrefixMode::Always) => false,
            (None, PrefixMode::Never) => true,
            (None, PrefixMode::OnCollision) => listed(entry)
                .iter()
                .all(|uri| owners.get(uri).is_none_or(|o| o.iter().all(|n| n == name))),
        })
        .map(|(name, _)| name.clone())
        .collect();
    let mut collisions: Vec<String> = owners
        .iter()
        .filter(|(_, names)| names.iter().filter(|n| plain.contains(**n)).count() > 1)
        .map(|(uri, names)| {
            let names: Vec<&str> = names
                .iter()
                .filter(|n| plain.contains(**n))
                .map(|n| &***n)
                .collect();
            format!(
                "resource URI {uri:?} of upstream {} collides with {}'s",
                names[1], names[0]
            )
        })
        .collect();
    collisions.sort();
    (plain, collisions)
}
