//! Per-upstream shaping, the same for every client: which of an upstream's
//! tools and prompts are exposed, under which names, with which
//! descriptions and annotations, and whether its resources are. Parsed and
//! checked here; applied by the catalog while it builds the merged lists.

use indexmap::IndexMap;
use serde::Deserialize;
use serde_saphyr::Spanned;

use super::Problems;

/// How one upstream's items are exposed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShapeConfig {
    pub tools: ListShape,
    pub prompts: ListShape,
    /// `false` hides the upstream's resources and templates: they are not
    /// listed, and reading or subscribing to its URIs is refused like an
    /// unknown URI.
    pub resources: bool,
}

impl Default for ShapeConfig {
    fn default() -> Self {
        Self {
            tools: ListShape::default(),
            prompts: ListShape::default(),
            resources: true,
        }
    }
}

impl ShapeConfig {
    /// Whether it changes nothing.
    pub(crate) fn is_identity(&self) -> bool {
        *self == Self::default()
    }
}

/// Shaping of an upstream's tools or prompts, by their original names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ListShape {
    /// Globs of the names exposed; empty: every name.
    pub allow: Vec<String>,
    /// Globs of names not exposed (a `!glob` in `allow` lands here).
    pub deny: Vec<String>,
    /// Original name → the name exposed (before the prefix).
    pub rename: IndexMap<String, String>,
    /// Original name → what replaces the upstream's own fields.
    pub overrides: IndexMap<String, ItemOverride>,
}

/// Fields of one tool or prompt replaced by the config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ItemOverride {
    pub title: Option<String>,
    pub description: Option<String>,
    /// Tools only: merged into the tool's `annotations`.
    pub annotations: Option<Annotations>,
}

/// MCP tool annotations (hints) that an override sets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Annotations {
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub read_only_hint: Option<bool>,
    #[serde(default)]
    pub destructive_hint: Option<bool>,
    #[serde(default)]
    pub idempotent_hint: Option<bool>,
    #[serde(default)]
    pub open_world_hint: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawListShape {
    #[serde(default)]
    allow: Vec<Spanned<String>>,
    #[serde(default)]
    deny: Vec<Spanned<String>>,
    #[serde(default)]
    rename: IndexMap<Spanned<String>, Spanned<String>>,
    #[serde(default, rename = "override")]
    overrides: IndexMap<Spanned<String>, RawOverride>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOverride {
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    annotations: Option<Spanned<Annotations>>,
}

impl RawListShape {
    /// Checks globs and names; `what` is `upstreams.NAME.tools` or `.prompts`.
    pub(super) fn validate(&self, what: &str, tools: bool, p: &mut Problems) -> ListShape {
        let mut shape = ListShape::default();
        for pattern in &self.allow {
            match pattern.value.strip_prefix('!') {
                Some(denied) if glob_ok(pattern, denied, &format!("{what}.allow"), p) => {
                    shape.deny.push(denied.to_owned());
                }
                None if glob_ok(pattern, &pattern.value, &format!("{what}.allow"), p) => {
                    shape.allow.push(pattern.value.clone());
                }
                _ => {}
            }
        }
        for pattern in &self.deny {
            if glob_ok(pattern, &pattern.value, &format!("{what}.deny"), p) {
                shape.deny.push(pattern.value.clone());
            }
        }
        for (original, exposed) in &self.rename {
            if exposed.value.is_empty() {
                p.at(
                    exposed.referenced,
                    format_args!(
                        "{what}.rename.{}: the new name is empty",
                        original.value.escape_debug()
                    ),
                );
            }
            shape
                .rename
                .insert(original.value.clone(), exposed.value.clone());
        }
        for (name, raw) in &self.overrides {
            if let (false, Some(annotations)) = (tools, &raw.annotations) {
                p.at(
                    annotations.referenced,
                    format_args!(
                        "{what}.override.{}.annotations: only tools have annotations",
                        name.value.escape_debug()
                    ),
                );
            }
            shape.overrides.insert(
                name.value.clone(),
                ItemOverride {
                    title: raw.title.clone(),
                    description: raw.description.clone(),
                    annotations: raw.annotations.as_ref().map(|a| a.value.clone()),
                },
            );
        }
        shape
    }
}

fn glob_ok(written: &Spanned<String>, glob: &str, what: &str, p: &mut Problems) -> bool {
    let problem = match crate::pattern::glob(glob) {
        _ if glob.is_empty() => "is an empty pattern".to_owned(),
        Ok(_) => return true,
        Err(e) => format!("is not a valid glob: {}", e.kind()),
    };
    p.at(
        written.referenced,
        format_args!("{what}: {:?} {problem}", written.value),
    );
    false
}
