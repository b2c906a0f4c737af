//! Per-upstream shaping, compiled: applied to each tool and prompt while
//! the merged catalog is built (which names are exposed, under which name,
//! with which description, title and annotations), and whether the
//! upstream's resources and templates are exposed at all. The same for
//! every client; the per-client policy filters what is left.

use std::collections::HashMap;

use globset::GlobSet;
use serde_json::{Map, Value};

use super::ListKind;
use crate::config::{ItemOverride, ListShape, ShapeConfig};

/// One upstream's shaping.
#[derive(Debug)]
pub(crate) struct Shape {
    tools: CompiledList,
    prompts: CompiledList,
    resources: bool,
}

#[derive(Debug)]
struct CompiledList {
    /// None: every name is allowed.
    allow: Option<GlobSet>,
    deny: GlobSet,
    rename: HashMap<String, String>,
    overrides: HashMap<String, ItemOverride>,
}

impl CompiledList {
    fn new(config: &ListShape) -> CompiledList {
        CompiledList {
            allow: (!config.allow.is_empty()).then(|| globs(&config.allow, "")),
            deny: globs(&config.deny, "*"),
            rename: config.rename.clone().into_iter().collect(),
            overrides: config.overrides.clone().into_iter().collect(),
        }
    }
}

/// A glob set; when a pattern does not compile (validation makes that
/// impossible), `instead` alone, so a broken deny hides everything.
fn globs(patterns: &[String], instead: &str) -> GlobSet {
    let mut builder = globset::GlobSetBuilder::new();
    for pattern in patterns {
        match crate::pattern::glob(pattern) {
            Ok(glob) => {
                builder.add(glob);
            }
            Err(e) => {
                tracing::error!(pattern = %pattern, error = %e, "shaping glob does not compile");
                return globs(&[instead.to_owned()], "");
            }
        }
    }
    builder.build().unwrap_or_else(|_| GlobSet::empty())
}

impl Shape {
    pub(crate) fn new(config: &ShapeConfig) -> Shape {
        Shape {
            tools: CompiledList::new(&config.tools),
            prompts: CompiledList::new(&config.prompts),
            resources: config.resources,
        }
    }

    /// Whether the upstream's resources and templates are exposed.
    pub(crate) fn resources(&self) -> bool {
        self.resources
    }

    /// For a tool or prompt the upstream calls `original`: the name to
    /// expose it under (before the prefix), with its overrides applied to
    /// `item`; none when it is not exposed.
    pub(crate) fn apply(
        &self,
        kind: ListKind,
        original: &str,
        item: &mut Map<String, Value>,
    ) -> Option<String> {
        let list = match kind {
            ListKind::Tools => &self.tools,
            ListKind::Prompts => &self.prompts,
            ListKind::Resources | ListKind::Templates => return Some(original.to_owned()),
        };
        let allowed = list.allow.as_ref().is_none_or(|a| a.is_match(original));
        if !allowed || list.deny.is_match(original) {
            return None;
        }
        if let Some(over) = list.overrides.get(original) {
            apply_override(over, item);
        }
        Some(
            list.rename
                .get(original)
                .map_or(original, String::as_str)
                .to_owned(),
        )
    }
}

fn apply_override(over: &ItemOverride, item: &mut Map<String, Value>) {
    if let Some(title) = &over.title {
        item.insert("title".into(), Value::from(title.as_str()));
    }
    if let Some(description) = &over.description {
        item.insert("description".into(), Value::from(description.as_str()));
    }
    let Some(annotations) = &over.annotations else {
        return;
    };
    let target = item
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Some(target) = target.as_object_mut() else {
        return;
    };
    if let Some(title) = &annotations.title {
        target.insert("title".into(), Value::from(title.as_str()));
    }
    for (key, hint) in [
        ("readOnlyHint", annotations.read_only_hint),
        ("destructiveHint", annotations.destructive_hint),
        ("idempotentHint", annotations.idempotent_hint),
        ("openWorldHint", annotations.open_world_hint),
    ] {
        if let Some(hint) = hint {
            target.insert(key.into(), Value::Bool(hint));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use crate::catalog::{CatalogStore, ListKind, UpstreamLists, UpstreamView};
    use crate::config::{Config, Lookup, ShapeConfig};

    /// The config with `upstream_yaml` under one upstream, or its error
    /// lines as `mcpmux check` prints them (what the tests compare).
    fn parse(upstream_yaml: &str) -> Result<Config, Vec<String>> {
        let text = format!(
            "upstreams:\n  weather:\n    command: srv\n{upstream_yaml}\nauth: {{ mode: off }}\n"
        );
        Config::parse(&text, "test.yaml", &Lookup::from_pairs([("UNUSED", "")]))
            .map_err(|e| e.lines())
    }

    const SHAPED: &str = r#"    tools:
      allow: ["*"]
      deny: ["delete_*"]
      rename: { echo: say }
      override:
        echo:
          description: "Says it back."
          annotations: { readOnlyHint: true }
    prompts:
      allow: ["greeting", "!secret_*"]
      override: { greeting: { title: "Hello" } }
    resources: false
"#;

    fn shaped() -> ShapeConfig {
        parse(SHAPED).unwrap().upstreams[0].shape.clone()
    }

    #[test]
    fn the_config_keeps_globs_renames_and_overrides() {
        let shape = shaped();
        assert_eq!(shape.tools.deny, ["delete_*"]);
        assert_eq!(shape.tools.rename["echo"], "say");
        let echo = &shape.tools.overrides["echo"];
        assert_eq!(echo.description.as_deref(), Some("Says it back."));
        assert_eq!(
            echo.annotations.as_ref().unwrap().read_only_hint,
            Some(true)
        );
        assert_eq!(shape.prompts.allow, ["greeting"]);
        assert_eq!(shape.prompts.deny, ["secret_*"]);
        assert!(!shape.resources);
        assert!(parse("").unwrap().upstreams[0].shape.is_identity());
    }

    #[test]
    fn bad_shaping_is_refused_with_line_and_column() {
        let issues = parse(
            "    prompts:\n      allow: [\"[x\"]\n      override: { greeting: { annotations: { readOnlyHint: true } } }\n    tools: { rename: { echo: \"\" } }\n",
        )
        .unwrap_err();
        assert_eq!(issues.len(), 3, "{issues:?}");
        assert!(
            issues[0].starts_with(
                "test.yaml:5:15: upstreams.weather.prompts.allow: \"[x\" is not a valid glob"
            ),
            "{issues:?}"
        );
        assert!(
            issues[1].contains("only tools have annotations"),
            "{issues:?}"
        );
        assert!(
            issues[2].contains("upstreams.weather.tools.rename.echo: the new name is empty"),
            "{issues:?}"
        );
        let unknown =
            parse("    tools: { override: { echo: { annotations: { readonly: true } } } }\n")
                .unwrap_err();
        assert!(unknown[0].contains("readonly"), "{unknown:?}");
    }

    fn view() -> Option<Arc<UpstreamView>> {
        let item = |v: serde_json::Value| v.as_object().unwrap().clone();
        Some(Arc::new(UpstreamView {
            lists: UpstreamLists {
                tools: vec![
                    item(
                        json!({ "name": "echo", "description": "Echo.", "annotations": { "title": "Echo" } }),
                    ),
                    item(json!({ "name": "delete_all" })),
                    item(json!({ "name": "add" })),
                ],
                prompts: vec![
                    item(json!({ "name": "greeting" })),
                    item(json!({ "name": "secret_plan" })),
                    item(json!({ "name": "other" })),
                ],
                resources: vec![item(json!({ "uri": "demo://w/readme", "name": "readme" }))],
                templates: vec![item(json!({ "uriTemplate": "demo://w/{id}", "name": "t" }))],
            },
            instructions: None,
        }))
    }

    #[test]
    fn shaping_filters_renames_and_overrides_while_the_catalog_is_built() {
        let store = CatalogStore::new([
            ("weather".into(), "weather".to_owned(), None),
            ("plain".into(), "plain".to_owned(), None),
        ]);
        store.set_shapes([("weather", &shaped())]);
        store.publish("weather", view());
        store.publish("plain", view());
        let catalog = store.load();
        let tools: Vec<&str> = catalog.keys(ListKind::Tools).iter().map(|k| &**k).collect();
        assert_eq!(
            tools,
            [
                "weather__say",
                "weather__add",
                "plain__echo",
                "plain__delete_all",
                "plain__add"
            ]
        );
        let target = catalog.tool("weather__say").unwrap();
        assert_eq!((&*target.upstream, &*target.original), ("weather", "echo"));
        assert!(catalog.tool("weather__echo").is_none());
        let say: serde_json::Value =
            serde_json::from_str(catalog.item(ListKind::Tools, 0).0.get()).unwrap();
        assert_eq!(say["description"], "Says it back.");
        assert_eq!(
            say["annotations"],
            json!({ "title": "Echo", "readOnlyHint": true })
        );
        let prompts: Vec<&str> = catalog
            .keys(ListKind::Prompts)
            .iter()
            .map(|k| &**k)
            .collect();
        assert_eq!(
            prompts,
            [
                "weather__greeting",
                "plain__greeting",
                "plain__secret_plan",
                "plain__other"
            ]
        );
        let greeting: serde_json::Value =
            serde_json::from_str(catalog.item(ListKind::Prompts, 0).0.get()).unwrap();
        assert_eq!(greeting["title"], "Hello");

        // Its resources are neither listed nor routed.
        let uris: Vec<&str> = catalog
            .keys(ListKind::Resources)
            .iter()
            .map(|k| &**k)
            .collect();
        assert_eq!(uris, ["plain+demo://w/readme"]);
        assert_eq!(catalog.keys(ListKind::Templates).len(), 1);
        assert!(
            catalog
                .route_uri("weather+demo://w/readme", |_| true)
                .is_none()
        );
        assert!(
            catalog
                .route_uri("plain+demo://w/readme", |_| true)
                .is_some()
        );

        // Shaping taken away: everything is back, announced as changed.
        let changed = store.set_shapes([("weather", &ShapeConfig::default())]);
        assert_eq!(changed, ListKind::ALL);
        assert!(store.load().tool("weather__echo").is_some());
    }
}
