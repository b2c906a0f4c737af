//! `${VAR}` and `${VAR:-default}` expansion of config strings.
//!
//! `$$` writes a literal `$`. A variable that is unset and has no default is
//! an error, so a missing secret stops the gateway at startup instead of
//! reaching an upstream as an empty string.

use std::collections::HashMap;

/// Where variable values come from: the process environment plus values the
/// gateway defines itself (such as `MCPMUX_EXE`).
pub struct Lookup {
    overrides: HashMap<String, String>,
    use_process_env: bool,
}

impl Lookup {
    /// The process environment plus `MCPMUX_EXE`, the path of this executable.
    pub fn from_process() -> Self {
        let mut overrides = HashMap::new();
        if let Ok(exe) = std::env::current_exe() {
            overrides.insert("MCPMUX_EXE".to_owned(), exe.display().to_string());
        }
        Self {
            overrides,
            use_process_env: true,
        }
    }

    /// Only the given values: for tests and embedding.
    pub fn from_pairs<I, K, V>(pairs: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        Self {
            overrides: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            use_process_env: false,
        }
    }

    fn get(&self, name: &str) -> Option<String> {
        if let Some(v) = self.overrides.get(name) {
            return Some(v.clone());
        }
        if self.use_process_env {
            return std::env::var(name).ok();
        }
        None
    }
}

/// Why a string could not be expanded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub(super) enum ExpandError {
    #[error(
        "environment variable {0} is not set and has no default (write ${{{0}:-default}} to give one)"
    )]
    Unset(String),
    #[error("unterminated \"${{\"; close it with \"}}\" or write \"$$\" for a literal \"$\"")]
    Unterminated,
    #[error("{0:?} is not a valid variable name")]
    BadName(String),
}

/// Expands every `${...}` in `input`.
pub(super) fn expand(input: &str, lookup: &Lookup) -> Result<String, ExpandError> {
    if !input.contains('$') {
        return Ok(input.to_owned());
    }
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body_start) = after.strip_prefix('{') {
            let end = body_start.find('}').ok_or(ExpandError::Unterminated)?;
            let body = &body_start[..end];
            let (name, default) = match body.split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (body, None),
            };
            let valid = !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(ExpandError::BadName(name.to_owned()));
            }
            match (lookup.get(name), default) {
                (Some(v), Some(d)) if v.is_empty() => out.push_str(d),
                (Some(v), _) => out.push_str(&v),
                (None, Some(d)) => out.push_str(d),
                (None, None) => return Err(ExpandError::Unset(name.to_owned())),
            }
            rest = &body_start[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_defaults_escapes_and_errors() {
        let env = Lookup::from_pairs([("TOKEN", "s3cret"), ("EMPTY", "")]);
        assert_eq!(expand("Bearer ${TOKEN}", &env).unwrap(), "Bearer s3cret");
        assert_eq!(expand("${MISSING:-dflt}/x", &env).unwrap(), "dflt/x");
        assert_eq!(expand("${EMPTY:-dflt}", &env).unwrap(), "dflt");
        assert_eq!(expand("cost: $$5 and $x", &env).unwrap(), "cost: $5 and $x");
        assert_eq!(
            expand("${MISSING}", &env),
            Err(ExpandError::Unset("MISSING".into()))
        );
        assert_eq!(expand("${TOKEN", &env), Err(ExpandError::Unterminated));
        assert_eq!(
            expand("${1X}", &env),
            Err(ExpandError::BadName("1X".into()))
        );
    }
}
