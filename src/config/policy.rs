//! The `policy` section: who may see and use which tools, prompts,
//! resources and templates. Parsed like the rest of the file (unknown keys
//! are errors, every problem has a line and column); the globs are checked
//! here and compiled into rules by the `policy` module.

use indexmap::IndexMap;
use serde::Deserialize;
use serde_saphyr::Spanned;

use super::Problems;

/// What a client gets when no rule names it or any of its scopes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Everything.
    Allow,
    /// Nothing.
    Deny,
}

/// The validated `policy` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PolicyConfig {
    /// For an authenticated client that no rule applies to.
    pub default: Access,
    /// Rules by client name (`Identity::client`), in file order.
    pub clients: IndexMap<String, RuleConfig>,
    /// Rules by scope or group (any of `Identity::scopes`), in file order.
    pub scopes: IndexMap<String, RuleConfig>,
}

/// One rule: globs on exposed tool and prompt names and on client-visible
/// resource URIs and templates. A `!pattern` written in `allow` is kept
/// here in `deny`, without the `!`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RuleConfig {
    pub allow: Vec<String>,
    pub deny: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPolicy {
    #[serde(default)]
    default: Option<Spanned<String>>,
    #[serde(default)]
    clients: IndexMap<Spanned<String>, Option<RawRule>>,
    #[serde(default)]
    scopes: IndexMap<Spanned<String>, Option<RawRule>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    #[serde(default)]
    allow: Vec<Spanned<String>>,
    #[serde(default)]
    deny: Vec<Spanned<String>>,
}

impl RawPolicy {
    /// Checks every name and glob; patterns and names are not expanded.
    pub(super) fn validate(&self, p: &mut Problems) -> PolicyConfig {
        self.validate_as("policy", p)
    }

    /// [`Self::validate`] for a section at `label` (an endpoint's policy).
    pub(super) fn validate_as(&self, label: &str, p: &mut Problems) -> PolicyConfig {
        let default = match self.default.as_ref().map(|d| (d, d.value.as_str())) {
            None | Some((_, "deny")) => Access::Deny,
            Some((_, "allow")) => Access::Allow,
            Some((d, other)) => {
                p.at(
                    d.referenced,
                    format_args!("{label}.default: {other:?} is not \"allow\" or \"deny\""),
                );
                Access::Deny
            }
        };
        PolicyConfig {
            default,
            clients: rules(&self.clients, label, "clients", p),
            scopes: rules(&self.scopes, label, "scopes", p),
        }
    }
}

fn rules(
    raw: &IndexMap<Spanned<String>, Option<RawRule>>,
    policy: &str,
    section: &str,
    p: &mut Problems,
) -> IndexMap<String, RuleConfig> {
    let mut out = IndexMap::new();
    for (name, rule) in raw {
        let label = format!("{policy}.{section}.{}", name.value.escape_debug());
        if name.value.is_empty() {
            p.at(
                name.referenced,
                format_args!("{policy}.{section}: a name is empty"),
            );
        }
        let mut config = RuleConfig::default();
        if let Some(rule) = rule {
            for pattern in &rule.allow {
                match pattern.value.strip_prefix('!') {
                    Some(denied) => {
                        if check_glob(pattern, denied, &format!("{label}.allow"), p) {
                            config.deny.push(denied.to_owned());
                        }
                    }
                    None => {
                        if check_glob(pattern, &pattern.value, &format!("{label}.allow"), p) {
                            config.allow.push(pattern.value.clone());
                        }
                    }
                }
            }
            for pattern in &rule.deny {
                let what = format!("{label}.deny");
                if pattern.value.starts_with('!') {
                    p.at(
                        pattern.referenced,
                        format_args!("{what}: {:?}: '!' negates only in allow; here write the pattern itself", pattern.value),
                    );
                } else if check_glob(pattern, &pattern.value, &what, p) {
                    config.deny.push(pattern.value.clone());
                }
            }
        }
        out.insert(name.value.clone(), config);
    }
    out
}

/// Whether `glob` (the pattern without any `!`) is a valid glob.
pub(super) fn check_glob(
    written: &Spanned<String>,
    glob: &str,
    what: &str,
    p: &mut Problems,
) -> bool {
    if glob.is_empty() {
        p.at(
            written.referenced,
            format_args!("{what}: {:?} is an empty pattern", written.value),
        );
        return false;
    }
    match crate::pattern::glob(glob) {
        Ok(_) => true,
        Err(e) => {
            p.at(
                written.referenced,
                format_args!(
                    "{what}: {:?} is not a valid glob: {}",
                    written.value,
                    e.kind()
                ),
            );
            false
        }
    }
}
