//! `endpoints:` (more views of the gateway, each at `/mcp/<name>`), and the
//! naming setting they share with the whole view, `prefix_mode`.
//!
//! An endpoint selects upstreams and items (globs on the same keys policy
//! rules match), names them by its own `prefix_mode`, may require scopes
//! or clients on top of `auth`, may add its own `policy`, and may answer
//! `tools/list` progressively (`search`). Every problem is reported at its
//! line and column like the rest of the file.

use indexmap::IndexMap;
use serde::Deserialize;
use serde_saphyr::Spanned;

use super::policy::{PolicyConfig, RawPolicy, RuleConfig, check_glob};
use super::{AuthConfig, Problems};

/// How tool and prompt names carry their upstream's prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum PrefixMode {
    /// Always `{prefix}__{name}` (the default).
    #[default]
    Always,
    /// Bare names, unless two upstreams of the view have the name: then
    /// those get their prefix.
    OnCollision,
    /// Bare names; upstreams whose names collide are refused.
    Never,
}

impl PrefixMode {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Always => "always",
            Self::OnCollision => "on_collision",
            Self::Never => "never",
        }
    }

    fn parse(text: &str) -> Option<PrefixMode> {
        match text {
            "always" => Some(Self::Always),
            "on_collision" => Some(Self::OnCollision),
            "never" => Some(Self::Never),
            _ => None,
        }
    }
}

/// A naming mode (a view's `prefix_mode`, or the gateway's
/// `namespace_uris`), and where it was written (for the error that names a
/// collision under `never`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Naming {
    pub mode: PrefixMode,
    /// Line and column of the `prefix_mode` value; none for the default.
    pub at: Option<(u64, u64)>,
}

/// How an endpoint answers `tools/list`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum SearchConfig {
    /// Every tool (the default).
    #[default]
    Off,
    /// Pinned tools and the gateway's search and call tools.
    Progressive {
        /// Globs on tool keys: these are listed as well.
        pinned: Vec<String>,
        /// Matches one search returns unless the caller asks for another
        /// number (at most [`MAX_SEARCH_RESULTS`]).
        results: usize,
    },
}

/// The most matches a search may be configured to return.
pub(crate) const MAX_SEARCH_RESULTS: usize = 50;

/// One validated endpoint.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EndpointConfig {
    /// `[a-z0-9][a-z0-9_-]{0,62}`; served at `/mcp/<name>`.
    pub name: String,
    /// The upstreams it shows; none: all of them.
    pub upstreams: Option<Vec<String>>,
    /// Which of their items it shows (globs on policy keys; `!` excludes);
    /// none: all of them.
    pub items: Option<RuleConfig>,
    pub naming: Naming,
    /// Scopes a caller must have, on top of `auth.required_scopes`.
    pub required_scopes: Vec<String>,
    /// The only clients that may use it; empty: any authenticated client.
    pub clients: Vec<String>,
    /// Rules on top of the global `policy` (both must allow an item).
    pub policy: Option<PolicyConfig>,
    pub search: SearchConfig,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEndpoint {
    #[serde(default)]
    upstreams: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    items: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    prefix_mode: Option<Spanned<String>>,
    #[serde(default)]
    auth: Option<RawEndpointAuth>,
    #[serde(default)]
    policy: Option<RawPolicy>,
    #[serde(default)]
    search: Option<RawSearch>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEndpointAuth {
    #[serde(default)]
    required_scopes: Vec<Spanned<String>>,
    #[serde(default)]
    clients: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSearch {
    mode: Spanned<String>,
    #[serde(default)]
    pinned: Vec<Spanned<String>>,
    #[serde(default)]
    results: Option<Spanned<u64>>,
}

/// Reads a `prefix_mode` (or top-level `namespace_uris`) value.
pub(super) fn naming(raw: Option<&Spanned<String>>, what: &str, p: &mut Problems) -> Naming {
    let Some(raw) = raw else {
        return Naming::default();
    };
    let at = Some((raw.referenced.line(), raw.referenced.column()));
    match PrefixMode::parse(raw.value.trim()) {
        Some(mode) => Naming { mode, at },
        None => {
            p.at(
                raw.referenced,
                format_args!(
                    "{what}: {:?} is not always, on_collision or never",
                    raw.value
                ),
            );
            Naming::default()
        }
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 63
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// Globs with `!` exclusions, as a rule (the policy's syntax).
fn globs(raw: &[Spanned<String>], what: &str, p: &mut Problems) -> RuleConfig {
    let mut rule = RuleConfig::default();
    for pattern in raw {
        match pattern.value.strip_prefix('!') {
            Some(denied) => {
                if check_glob(pattern, denied, what, p) {
                    rule.deny.push(denied.to_owned());
                }
            }
            None => {
                if check_glob(pattern, &pattern.value, what, p) {
                    rule.allow.push(pattern.value.clone());
                }
            }
        }
    }
    rule
}

/// Validates `endpoints:` against the configured upstream names and `auth`.
pub(super) fn validate(
    raw: &Spanned<IndexMap<Spanned<String>, RawEndpoint>>,
    upstream_names: &[&str],
    auth: Option<&AuthConfig>,
    global: Naming,
    p: &mut Problems,
) -> Vec<EndpointConfig> {
    let mut out = Vec::new();
    for (name, endpoint) in &raw.value {
        let label = format!("endpoints.{}", name.value.escape_debug());
        if !valid_name(&name.value) {
            p.at(
                name.referenced,
                format_args!("{label}: an endpoint name is 1 to 63 characters of a-z, 0-9, '-' and '_', starting with a letter or digit"),
            );
        }
        if let Some(config) =
            endpoint.validate(&name.value, &label, upstream_names, auth, global, p)
        {
            out.push(config);
        }
    }
    out
}

impl RawEndpoint {
    fn validate(
        &self,
        name: &str,
        label: &str,
        upstream_names: &[&str],
        auth: Option<&AuthConfig>,
        global: Naming,
        p: &mut Problems,
    ) -> Option<EndpointConfig> {
        let upstreams = self.upstreams.as_ref().map(|list| {
            let mut names: Vec<String> = Vec::new();
            for upstream in list {
                if !upstream_names.contains(&upstream.value.as_str()) {
                    p.at(
                        upstream.referenced,
                        format_args!(
                            "{label}.upstreams: {:?} is not a configured upstream",
                            upstream.value
                        ),
                    );
                } else if !names.contains(&upstream.value) {
                    names.push(upstream.value.clone());
                }
            }
            names
        });
        let items = self
            .items
            .as_ref()
            .map(|raw| globs(raw, &format!("{label}.items"), p));
        let naming = match &self.prefix_mode {
            Some(raw) => naming(Some(raw), &format!("{label}.prefix_mode"), p),
            None => global,
        };
        let (required_scopes, clients) = match &self.auth {
            None => (Vec::new(), Vec::new()),
            Some(raw) => {
                let strings = |list: &[Spanned<String>], what: &str, p: &mut Problems| {
                    list.iter()
                        .filter_map(|s| {
                            if s.value.trim().is_empty() {
                                p.at(s.referenced, format_args!("{label}.auth.{what}: empty"));
                                return None;
                            }
                            Some(s.value.clone())
                        })
                        .collect::<Vec<String>>()
                };
                let scopes = strings(&raw.required_scopes, "required_scopes", p);
                let clients = strings(&raw.clients, "clients", p);
                let asks = !scopes.is_empty() || !clients.is_empty();
                if asks && !matches!(auth, Some(AuthConfig::On(_))) {
                    let at = raw
                        .required_scopes
                        .first()
                        .or(raw.clients.first())
                        .map(|s| s.referenced);
                    if let Some(at) = at {
                        p.at(at, format_args!("{label}.auth: needs auth.mode: on (clients have no identity otherwise)"));
                    }
                }
                (scopes, clients)
            }
        };
        let policy = self
            .policy
            .as_ref()
            .map(|raw| raw.validate_as(&format!("{label}.policy"), p));
        let search = match &self.search {
            None => SearchConfig::Off,
            Some(raw) => raw.validate(label, p),
        };
        Some(EndpointConfig {
            name: name.to_owned(),
            upstreams,
            items,
            naming,
            required_scopes,
            clients,
            policy,
            search,
        })
    }
}

impl RawSearch {
    fn validate(&self, label: &str, p: &mut Problems) -> SearchConfig {
        let results = p.count_or(
            self.results.as_ref(),
            5,
            1,
            MAX_SEARCH_RESULTS as u64,
            &format!("{label}.search.results"),
        );
        let pinned = globs(&self.pinned, &format!("{label}.search.pinned"), p);
        for excluded in self.pinned.iter().filter(|s| s.value.starts_with('!')) {
            p.at(
                excluded.referenced,
                format_args!("{label}.search.pinned: {:?}: pinned takes globs of tools to list; '!' has no meaning here", excluded.value),
            );
        }
        match self.mode.value.trim() {
            "off" => SearchConfig::Off,
            "progressive" => SearchConfig::Progressive {
                pinned: pinned.allow,
                results: usize::try_from(results).unwrap_or(MAX_SEARCH_RESULTS),
            },
            other => {
                p.at(
                    self.mode.referenced,
                    format_args!("{label}.search.mode: {other:?} is not off or progressive"),
                );
                SearchConfig::Off
            }
        }
    }
}

/// Where a `prefix_mode` was written, as a location for an issue.
pub(crate) fn naming_issue(naming: &Naming, message: impl Into<String>) -> super::Issue {
    let (line, column) = naming.at.unwrap_or((1, 1));
    super::Issue {
        line,
        column,
        message: message.into(),
    }
}
