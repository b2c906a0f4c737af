//! What one view of the catalog shows and how it names it: the whole view
//! (`/mcp`) or an endpoint (`/mcp/<name>`). A [`ViewSpec`] is compiled from
//! the config once per load; the store builds one [`super::Catalog`] per
//! spec from the same upstream lists.

use std::sync::Arc;

use globset::{GlobSet, GlobSetBuilder};

use crate::config::{EndpointConfig, PrefixMode, RuleConfig, SearchConfig};
use crate::pattern::glob;

/// Globs on item keys (the keys policy rules match): an item is selected
/// when no `deny` glob matches it and, if there are `allow` globs, one does.
#[derive(Debug)]
pub(crate) struct Selection {
    allow: GlobSet,
    allows_some: bool,
    deny: GlobSet,
}

/// A glob set of `patterns` (checked by the config), failing closed: a
/// pattern that does not compile matches every key (so it hides, never shows).
fn globs(patterns: &[String]) -> (GlobSet, bool) {
    let mut builder = GlobSetBuilder::new();
    for pattern in patterns {
        match glob(pattern) {
            Ok(g) => {
                builder.add(g);
            }
            Err(_) => return (GlobSet::empty(), false),
        }
    }
    (builder.build().unwrap_or_else(|_| GlobSet::empty()), true)
}

impl Selection {
    pub(crate) fn new(rule: &RuleConfig) -> Selection {
        let (allow, allow_ok) = globs(&rule.allow);
        let (deny, deny_ok) = globs(&rule.deny);
        Selection {
            allow,
            // A broken allow list selects nothing rather than everything.
            allows_some: !rule.allow.is_empty() || !allow_ok,
            deny: if deny_ok {
                deny
            } else {
                globs(&["*".to_owned()]).0
            },
        }
    }

    pub(crate) fn admits(&self, key: &str) -> bool {
        !self.deny.is_match(key) && (!self.allows_some || self.allow.is_match(key))
    }
}

/// How a progressive view lists its tools.
#[derive(Debug)]
pub(crate) struct SearchSpec {
    /// Tools (by key) listed besides the gateway's two.
    pub pinned: GlobSet,
    /// Most matches one search returns.
    pub results: usize,
}

/// One view: which upstreams and items, and how they are named.
#[derive(Debug, Default)]
pub(crate) struct ViewSpec {
    /// The endpoint's name; none for the whole view.
    pub name: Option<Arc<str>>,
    /// The upstreams shown; none: all.
    pub upstreams: Option<Vec<Arc<str>>>,
    /// The items shown; none: all of those upstreams'.
    pub items: Option<Selection>,
    pub prefix_mode: PrefixMode,
    /// Progressive tool listing; none: every tool is listed.
    pub search: Option<SearchSpec>,
}

impl ViewSpec {
    /// The whole view, named by `prefix_mode`.
    pub(crate) fn whole(prefix_mode: PrefixMode) -> ViewSpec {
        ViewSpec {
            prefix_mode,
            ..ViewSpec::default()
        }
    }

    /// An endpoint's view.
    pub(crate) fn endpoint(config: &EndpointConfig) -> ViewSpec {
        ViewSpec {
            name: Some(config.name.as_str().into()),
            upstreams: config
                .upstreams
                .as_ref()
                .map(|names| names.iter().map(|n| Arc::from(n.as_str())).collect()),
            items: config.items.as_ref().map(Selection::new),
            prefix_mode: config.naming.mode,
            search: match &config.search {
                SearchConfig::Off => None,
                SearchConfig::Progressive { pinned, results } => Some(SearchSpec {
                    pinned: globs(pinned).0,
                    results: *results,
                }),
            },
        }
    }

    /// Whether the view shows `upstream`'s items.
    pub(crate) fn shows_upstream(&self, upstream: &str) -> bool {
        self.upstreams
            .as_ref()
            .is_none_or(|names| names.iter().any(|n| &**n == upstream))
    }

    /// Whether the view shows the item with policy key `key`.
    pub(crate) fn selects(&self, key: &str) -> bool {
        self.items.as_ref().is_none_or(|s| s.admits(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selection_allows_what_it_names_and_excludes_what_it_negates() {
        let rule = RuleConfig {
            allow: vec!["github__*".into(), "docs+*".into()],
            deny: vec!["*delete*".into()],
        };
        let s = Selection::new(&rule);
        assert!(s.admits("github__search"));
        assert!(s.admits("docs+file:///a"));
        assert!(!s.admits("github__delete_repo"));
        assert!(!s.admits("jira__search"));
        // Only exclusions: everything else is selected.
        let only_deny = Selection::new(&RuleConfig {
            allow: vec![],
            deny: vec!["*delete*".into()],
        });
        assert!(only_deny.admits("jira__search"));
        assert!(!only_deny.admits("jira__delete"));
    }
}
