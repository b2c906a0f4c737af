//! What the catalog keeps for MCP Apps (`io.modelcontextprotocol/ui`):
//! a tool's app resource (`_meta.ui.resourceUri`, and the older flat
//! `_meta["ui/resourceUri"]`), namespaced like every other URI so it stays
//! `ui://` and routes back to its upstream; which tools show each app
//! resource (an app resource is visible to a client that may see one of
//! them); and tools by the names their servers gave them, for the calls an
//! app makes by those names.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::naming;

/// The `_meta` key of a tool's app settings (`resourceUri`, `visibility`).
const UI: &str = "ui";
/// The deprecated flat key some servers still set.
const FLAT: &str = "ui/resourceUri";

/// Tools by their servers' own names, and the tools of app resources.
#[derive(Debug, Default)]
pub(crate) struct AppIndex {
    /// Exposed tool names by the name their server gave them.
    by_original: HashMap<Box<str>, Vec<Box<str>>>,
    /// The exposed tools that show each (exposed) app resource URI.
    shown_by: HashMap<Box<str>, Vec<Box<str>>>,
}

impl AppIndex {
    /// Notes tool `exposed` (its policy key `key`, its server's `original`
    /// name), whose app resource, if it has one, is `resource` as exposed.
    pub(super) fn add_tool(
        &mut self,
        exposed: &str,
        key: &str,
        original: &str,
        resource: Option<String>,
    ) {
        self.by_original
            .entry(original.into())
            .or_default()
            .push(exposed.into());
        if let Some(resource) = resource {
            self.shown_by
                .entry(resource.into_boxed_str())
                .or_default()
                .push(key.into());
        }
    }

    /// The exposed names of the tools their servers call `original`.
    pub(crate) fn tools_named(&self, original: &str) -> &[Box<str>] {
        self.by_original.get(original).map_or(&[], |v| v)
    }

    /// The exposed tools that show app resource `uri`; none when it is no
    /// tool's app resource.
    pub(crate) fn shown_by(&self, uri: &str) -> Option<&[Box<str>]> {
        self.shown_by.get(uri).map(|v| &**v)
    }

    /// Whether any tool has an app.
    pub(crate) fn any(&self) -> bool {
        !self.shown_by.is_empty()
    }
}

/// Namespaces a tool's app resource URIs in its `_meta` (when `upstream`'s
/// URIs are namespaced) and returns the URI the tool now names, if any.
/// Only `ui://` URIs are rewritten; the rest of `_meta.ui` is left as is.
pub(super) fn namespace_tool_meta(
    tool: &mut Map<String, Value>,
    upstream: &str,
    namespace: bool,
) -> Option<String> {
    let meta = tool.get_mut("_meta").and_then(Value::as_object_mut)?;
    let rewrite = |value: &mut Value| -> Option<String> {
        let uri = value.as_str()?;
        if !uri.starts_with(naming::UI_SCHEME) {
            return None;
        }
        if namespace {
            *value = Value::String(naming::namespaced_uri(upstream, uri));
        }
        value.as_str().map(str::to_owned)
    };
    let nested = meta
        .get_mut(UI)
        .and_then(Value::as_object_mut)
        .and_then(|ui| ui.get_mut("resourceUri"))
        .and_then(rewrite);
    let flat = meta.get_mut(FLAT).and_then(rewrite);
    nested.or(flat)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    #[test]
    fn both_keys_are_namespaced_and_the_rest_of_meta_is_kept() {
        let mut t = tool(json!({
            "name": "get-time",
            "_meta": {
                "ui": { "resourceUri": "ui://get-time/app.html", "visibility": ["model", "app"], "csp": { "connectDomains": [] } },
                "ui/resourceUri": "ui://get-time/app.html",
                "other": "x"
            }
        }));
        let uri = namespace_tool_meta(&mut t, "apps", true);
        assert_eq!(uri.as_deref(), Some("ui://apps/get-time/app.html"));
        assert_eq!(
            t["_meta"]["ui"]["resourceUri"],
            "ui://apps/get-time/app.html"
        );
        assert_eq!(t["_meta"]["ui/resourceUri"], "ui://apps/get-time/app.html");
        assert_eq!(t["_meta"]["ui"]["visibility"], json!(["model", "app"]));
        assert_eq!(t["_meta"]["other"], "x");
    }

    #[test]
    fn only_ui_uris_are_touched_and_a_plain_upstream_keeps_them() {
        let mut t = tool(json!({ "_meta": { "ui": { "resourceUri": "https://x/app" } } }));
        assert_eq!(namespace_tool_meta(&mut t, "apps", true), None);
        assert_eq!(t["_meta"]["ui"]["resourceUri"], "https://x/app");
        let mut t = tool(json!({ "_meta": { "ui/resourceUri": "ui://a/b" } }));
        assert_eq!(
            namespace_tool_meta(&mut t, "apps", false).as_deref(),
            Some("ui://a/b")
        );
        assert_eq!(t["_meta"]["ui/resourceUri"], "ui://a/b");
    }

    #[test]
    fn the_index_finds_tools_by_their_own_names_and_apps_by_uri() {
        let mut index = AppIndex::default();
        index.add_tool("a__echo", "a__echo", "echo", None);
        index.add_tool("b__echo", "b__echo", "echo", Some("ui://b/echo".into()));
        let named: Vec<&str> = index.tools_named("echo").iter().map(|t| &**t).collect();
        assert_eq!(named, ["a__echo", "b__echo"]);
        assert!(index.tools_named("none").is_empty());
        let shown: Option<Vec<&str>> = index
            .shown_by("ui://b/echo")
            .map(|tools| tools.iter().map(|t| &**t).collect());
        assert_eq!(shown, Some(vec!["b__echo"]));
        assert_eq!(index.shown_by("ui://a/echo"), None);
        assert!(index.any());
    }
}
