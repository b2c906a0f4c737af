//! Exposed names and URIs: how upstream items are namespaced, and back.
//!
//! Tools and prompts become `{prefix}__{name}`, limited to
//! `^[a-zA-Z0-9_-]{1,64}$` (what the strictest hosts accept): other characters
//! map to `_`, and over-long names are cut and given a short hash suffix, so
//! the result is deterministic. Resource URIs and templates become
//! `{upstream}+{original}`, still a valid RFC 3986 URI because `+` is legal in
//! a scheme. An MCP Apps resource (`ui://…`) stays `ui://`, because hosts
//! accept nothing else there: `ui://{host}/{path}` becomes
//! `ui://{upstream}/{host}/{path}`. The original name or URI is what
//! reaches the upstream.

use std::borrow::Cow;

/// The longest name hosts accept.
pub(crate) const MAX_NAME_LEN: usize = 64;

/// Separator between a prefix and an upstream's own tool or prompt name.
pub(crate) const NAME_SEPARATOR: &str = "__";

/// Separator between an upstream name and an upstream's own URI.
pub(crate) const URI_SEPARATOR: char = '+';

/// The name a tool or prompt is exposed under before collision handling.
pub(crate) fn exposed_name(prefix: &str, original: &str) -> String {
    let mut joined = String::with_capacity(prefix.len() + NAME_SEPARATOR.len() + original.len());
    if !prefix.is_empty() {
        joined.push_str(prefix);
        joined.push_str(NAME_SEPARATOR);
    }
    joined.push_str(original);

    let mut name: String = joined
        .chars()
        .map(|c| if is_name_char(c) { c } else { '_' })
        .collect();
    let changed = name != joined || name.is_empty();
    if name.is_empty() {
        name.push('_');
    }
    // Mapped characters can make two originals equal; a hash of the original
    // keeps mapped names distinct.
    if changed || name.len() > MAX_NAME_LEN {
        return with_hash_suffix(&name, &joined);
    }
    name
}

/// `base` cut to fit, then `_` and eight hex digits of a hash of `seed`.
pub(crate) fn with_hash_suffix(base: &str, seed: &str) -> String {
    let suffix = format!("_{:08x}", fnv1a(seed.as_bytes()) as u32);
    // `base` holds only ASCII here, so byte slicing is on char boundaries.
    let keep = base.len().min(MAX_NAME_LEN - suffix.len());
    let mut out = String::with_capacity(MAX_NAME_LEN);
    out.push_str(&base[..keep]);
    out.push_str(&suffix);
    out
}

/// Whether `name` is acceptable to the strictest hosts (what
/// [`exposed_name`] guarantees).
#[cfg(test)]
pub(crate) fn is_valid_exposed_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME_LEN && name.chars().all(is_name_char)
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// 64-bit FNV-1a: stable across releases and platforms, unlike `DefaultHasher`.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The scheme of MCP Apps resources, kept when they are namespaced.
pub(crate) const UI_SCHEME: &str = "ui://";

/// `{upstream}+{uri}`, or `ui://{upstream}/{rest}` for `ui://{rest}`.
pub(crate) fn namespaced_uri(upstream: &str, uri: &str) -> String {
    let mut out = String::with_capacity(upstream.len() + 2 + uri.len());
    match uri.strip_prefix(UI_SCHEME) {
        Some(rest) => {
            out.push_str(UI_SCHEME);
            out.push_str(upstream);
            out.push('/');
            out.push_str(rest);
        }
        None => {
            out.push_str(upstream);
            out.push(URI_SEPARATOR);
            out.push_str(uri);
        }
    }
    out
}

/// Splits a namespaced URI into the upstream and the URI it knows:
/// `{upstream}+{uri}` (upstream names cannot contain `+`, so the first `+`
/// is the separator), or `ui://{upstream}/{rest}` into `ui://{rest}`.
pub(crate) fn split_uri(namespaced: &str) -> Option<(&str, Cow<'_, str>)> {
    if let Some(rest) = namespaced.strip_prefix(UI_SCHEME) {
        let (upstream, original) = rest.split_once('/')?;
        return Some((upstream, Cow::Owned(format!("{UI_SCHEME}{original}"))));
    }
    let (upstream, original) = namespaced.split_once(URI_SEPARATOR)?;
    Some((upstream, Cow::Borrowed(original)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_and_keeps_valid_names() {
        assert_eq!(exposed_name("everything", "echo"), "everything__echo");
        assert_eq!(exposed_name("", "echo"), "echo");
        assert_eq!(exposed_name("a", "get-sum_2"), "a__get-sum_2");
    }

    #[test]
    fn maps_characters_and_stays_distinct() {
        let dotted = exposed_name("fs", "read.file");
        let slashed = exposed_name("fs", "read/file");
        assert!(dotted.starts_with("fs__read_file_"), "{dotted}");
        assert!(is_valid_exposed_name(&dotted));
        assert_ne!(dotted, slashed);
        assert!(is_valid_exposed_name(&exposed_name("", "")));
        assert!(is_valid_exposed_name(&exposed_name("x", "ünïcödé tööl")));
    }

    #[test]
    fn shortens_long_names_deterministically() {
        let long = "a".repeat(100);
        let first = exposed_name("upstream", &long);
        assert_eq!(first.len(), MAX_NAME_LEN);
        assert!(is_valid_exposed_name(&first));
        assert_eq!(first, exposed_name("upstream", &long));
        assert_ne!(first, exposed_name("upstream", &"a".repeat(101)));
        // Exactly 64 characters fit without a suffix.
        let exact = "b".repeat(64 - "up__".len());
        assert_eq!(exposed_name("up", &exact), format!("up__{exact}"));
    }

    #[test]
    fn uris_round_trip() {
        let uri = namespaced_uri("docs", "file:///a+b.txt");
        assert_eq!(uri, "docs+file:///a+b.txt");
        assert_eq!(split_uri(&uri), Some(("docs", "file:///a+b.txt".into())));
        assert_eq!(split_uri("nouri"), None);
    }

    #[test]
    fn app_uris_stay_ui_and_round_trip() {
        let uri = namespaced_uri("apps", "ui://get-time/mcp-app.html");
        assert_eq!(uri, "ui://apps/get-time/mcp-app.html");
        assert_eq!(
            split_uri(&uri),
            Some(("apps", "ui://get-time/mcp-app.html".into()))
        );
        // An empty authority, and one with a `+`, round-trip too.
        for original in ["ui:///app.html", "ui://a+b/c", "ui://x"] {
            let namespaced = namespaced_uri("up", original);
            assert!(namespaced.starts_with("ui://up/"), "{namespaced}");
            assert_eq!(split_uri(&namespaced), Some(("up", original.into())));
        }
        assert_eq!(split_uri("ui://no-slash"), None);
    }
}
