//! Unit tests for the `policy` section, rule matching, view derivation and
//! caching, and paging of filtered lists. The fixtures marked `pub(crate)`
//! are shared with the notify hub's tests of the `list_changed` decisions
//! under a policy.

use serde_json::{Map, Value, json};

use super::*;
use crate::catalog::{CursorError, UpstreamLists, UpstreamView};
use crate::config::{Config, Lookup};

pub(crate) fn policy_config(policy_yaml: &str) -> PolicyConfig {
    let text =
        format!("upstreams:\n  weather:\n    command: srv\n{policy_yaml}\nauth: {{ mode: off }}\n");
    let config = Config::parse(&text, "test.yaml", &Lookup::from_pairs([("UNUSED", "")]))
        .unwrap_or_else(|e| panic!("{e}"));
    config.policy.expect("a policy section")
}

fn issues(policy_yaml: &str) -> Vec<String> {
    let text =
        format!("upstreams:\n  weather:\n    command: srv\n{policy_yaml}\nauth: {{ mode: off }}\n");
    Config::parse(&text, "test.yaml", &Lookup::from_pairs([("UNUSED", "")]))
        .expect_err("the policy should be rejected")
        .lines()
}

pub(crate) fn who(client: &str, scopes: &[&str]) -> Identity {
    Identity::new(client, scopes.iter().map(|s| (*s).to_owned()).collect())
}

/// The example the docs walk through, plus a scope.
pub(crate) const SECURE: &str = r#"policy:
  default: deny
  clients:
    ops: { allow: ["*"] }
    reader: { allow: ["weather__*"], deny: ["notes+*"] }
  scopes:
    "mcp:read": { allow: ["*__get_*", "*__list_*"] }
"#;

#[test]
fn the_secure_example_gives_ops_everything_reader_weather_tools_and_others_nothing() {
    let policy = Policy::new(&policy_config(SECURE));
    let ops = policy.grant(&who("ops", &[]));
    let reader = policy.grant(&who("reader", &[]));
    let other = policy.grant(&who("mallory", &["unknown-scope"]));
    for key in [
        "weather__forecast",
        "notes__add",
        "notes+demo://notes/readme",
        "x",
    ] {
        assert!(ops.allows(key), "ops: {key}");
        assert!(!other.allows(key), "other: {key}");
    }
    assert!(reader.allows("weather__forecast"));
    assert!(!reader.allows("notes__add"));
    assert!(!reader.allows("notes+demo://notes/readme"));
    assert!(
        !reader.allows("weather+demo://weather/readme"),
        "only tools and prompts"
    );
}

#[test]
fn scopes_add_rules_and_deny_wins() {
    let policy = Policy::new(&policy_config(SECURE));
    let scoped = policy.grant(&who("mallory", &["mcp:read"]));
    assert!(scoped.allows("github__get_issue"));
    assert!(scoped.allows("notes__list_notes"));
    assert!(!scoped.allows("github__delete_repo"));
    // The reader's own rule and a scope's add up; its deny still wins.
    let reader = policy.grant(&who("reader", &["mcp:read"]));
    assert!(reader.allows("weather__forecast") && reader.allows("github__get_issue"));
    assert!(!reader.allows("notes+get_x"));

    let negated = Policy::new(&policy_config(
        "policy:\n  clients:\n    dev: { allow: [\"github__*\", \"!github__delete_*\"] }\n",
    ));
    let dev = negated.grant(&who("dev", &[]));
    assert!(dev.allows("github__create_issue"));
    assert!(!dev.allows("github__delete_repo"), "! in allow denies");
    assert!(!dev.allows("notes__add"));
}

#[test]
fn the_default_stands_in_for_missing_allow_globs() {
    let open = Policy::new(&policy_config(
        "policy:\n  default: allow\n  clients:\n    reader: { deny: [\"notes+*\", \"notes__*\"] }\n    narrow: { allow: [\"weather__*\"] }\n",
    ));
    let anyone = open.grant(&who("anyone", &[]));
    assert!(anyone.allows("notes__add") && anyone.allows("notes+demo://x"));
    let reader = open.grant(&who("reader", &[]));
    assert!(reader.allows("weather__forecast") && reader.allows("weather+demo://w"));
    assert!(!reader.allows("notes__add") && !reader.allows("notes+demo://x"));
    let narrow = open.grant(&who("narrow", &[]));
    assert!(narrow.allows("weather__forecast") && !narrow.allows("notes__add"));

    // Absent, the default is deny: a rule with only denies leaves nothing.
    let closed = Policy::new(&policy_config(
        "policy:\n  clients:\n    reader: { deny: [\"notes+*\"] }\n",
    ));
    assert!(
        !closed
            .grant(&who("reader", &[]))
            .allows("weather__forecast")
    );
    assert!(
        !closed
            .grant(&who("anyone", &[]))
            .allows("weather__forecast")
    );
}

#[test]
fn globs_cross_slashes_and_are_case_sensitive() {
    let policy = Policy::new(&policy_config(
        "policy:\n  clients:\n    docs: { allow: [\"docs+file:///public/*\", \"weather__{get,list}_*\"] }\n",
    ));
    let docs = policy.grant(&who("docs", &[]));
    assert!(docs.allows("docs+file:///public/a/b.md"));
    assert!(!docs.allows("docs+file:///private/a.md"));
    assert!(docs.allows("weather__get_forecast") && docs.allows("weather__list_cities"));
    assert!(!docs.allows("weather__Get_forecast"));
}

#[test]
fn bad_policies_are_refused_with_line_and_column() {
    let bad_default = issues("policy:\n  default: maybe\n");
    assert_eq!(bad_default.len(), 1, "{bad_default:?}");
    assert!(
        bad_default[0].starts_with("test.yaml:5:12: policy.default"),
        "{bad_default:?}"
    );

    let bad = issues("policy:\n  clients:\n    a: { allow: [\"[oops\", \"!\"], deny: [\"!x\"] }\n");
    assert_eq!(bad.len(), 3, "{bad:?}");
    assert!(bad.iter().all(|l| l.starts_with("test.yaml:6:")), "{bad:?}");
    assert!(
        bad[0].contains("policy.clients.a.allow: \"[oops\" is not a valid glob"),
        "{bad:?}"
    );
    assert!(bad[1].contains("empty pattern"), "{bad:?}");
    assert!(bad[2].contains("'!' negates only in allow"), "{bad:?}");

    let unknown = issues("policy:\n  clients:\n    a: { allow: [\"*\"], alow: [] }\n");
    assert_eq!(unknown.len(), 1, "{unknown:?}");
    assert!(unknown[0].contains("alow"), "{unknown:?}");
}

#[test]
fn no_policy_section_means_no_policy() {
    let config = Config::parse(
        "upstreams:\n  weather:\n    command: srv\nauth: { mode: off }\n",
        "test.yaml",
        &Lookup::from_pairs([("UNUSED", "")]),
    )
    .unwrap();
    assert_eq!(config.policy, None);
    let views = Views::new(Arc::new(store()), None, &[]);
    assert!(views.grant(None, Some(&who("anyone", &[]))).is_none());
    assert!(views.allows(None, Some(&who("anyone", &[])), "anything"));
}

// --- views of a catalog ---

fn object(value: Value) -> Map<String, Value> {
    value.as_object().unwrap().clone()
}

pub(crate) fn lists(upstream: &str, tools: &[&str]) -> Option<Arc<UpstreamView>> {
    Some(Arc::new(UpstreamView {
        lists: UpstreamLists {
            tools: tools.iter().map(|t| object(json!({ "name": t }))).collect(),
            prompts: vec![object(json!({ "name": "greeting" }))],
            resources: vec![object(
                json!({ "uri": format!("demo://{upstream}/readme"), "name": "readme" }),
            )],
            templates: vec![object(
                json!({ "uriTemplate": format!("demo://{upstream}/notes/{{id}}"), "name": "note" }),
            )],
        },
        instructions: Some(format!("{upstream} instructions")),
    }))
}

fn store() -> CatalogStore {
    CatalogStore::new([
        ("weather".into(), "weather".to_owned(), None),
        ("notes".into(), "notes".to_owned(), None),
    ])
}

fn tool_names(count: usize, prefix: &str) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}{i:02}")).collect()
}

/// A store with 7 weather tools and 5 notes tools, one of each other kind.
pub(crate) fn filled() -> CatalogStore {
    let store = store();
    let weather = tool_names(7, "forecast_");
    let notes = tool_names(5, "add_");
    store.publish(
        "weather",
        lists(
            "weather",
            &weather.iter().map(String::as_str).collect::<Vec<_>>(),
        ),
    );
    store.publish(
        "notes",
        lists(
            "notes",
            &notes.iter().map(String::as_str).collect::<Vec<_>>(),
        ),
    );
    store
}

/// Every item key of `grant`'s view of `kind`, page by page, and the cursors.
fn walk(
    catalog: &Catalog,
    grant: &Grant,
    kind: ListKind,
    page_size: usize,
) -> (Vec<String>, Vec<String>) {
    let (mut keys, mut cursors) = (Vec::new(), Vec::new());
    let mut cursor: Option<String> = None;
    loop {
        let view = grant.list(kind, catalog);
        let page = catalog
            .page_in(
                kind,
                Some(grant.subset(&view)),
                cursor.as_deref(),
                page_size,
            )
            .unwrap();
        let page: Value = serde_json::from_str(&page).unwrap();
        for item in page[kind.result_key()].as_array().unwrap() {
            let key = ["uriTemplate", "uri", "name"]
                .iter()
                .find_map(|k| item.get(*k))
                .unwrap();
            keys.push(key.as_str().unwrap().to_owned());
        }
        match page.get("nextCursor") {
            Some(next) => {
                cursor = Some(next.as_str().unwrap().to_owned());
                cursors.push(cursor.clone().unwrap());
            }
            None => return (keys, cursors),
        }
    }
}

#[test]
fn a_filtered_list_pages_through_exactly_the_visible_items() {
    let store = filled();
    let catalog = store.load();
    let policy = Policy::new(&policy_config(SECURE));
    let reader = policy.grant(&who("reader", &[]));
    let ops = policy.grant(&who("ops", &[]));

    let (keys, cursors) = walk(&catalog, &reader, ListKind::Tools, 3);
    let expected: Vec<String> = tool_names(7, "weather__forecast_");
    assert_eq!(keys, expected);
    assert_eq!(cursors.len(), 2, "7 items in pages of 3");
    let (all, _) = walk(&catalog, &ops, ListKind::Tools, 5);
    assert_eq!(all.len(), 12);
    assert_eq!(
        walk(&catalog, &reader, ListKind::Resources, 3).0,
        Vec::<String>::new()
    );
    assert_eq!(
        walk(&catalog, &ops, ListKind::Templates, 1).0,
        [
            "weather+demo://weather/notes/{id}",
            "notes+demo://notes/notes/{id}"
        ]
    );
}

#[test]
fn a_cursor_from_another_view_or_the_whole_list_is_invalid() {
    let store = filled();
    let catalog = store.load();
    let policy = Policy::new(&policy_config(SECURE));
    let reader = policy.grant(&who("reader", &[]));
    let ops = policy.grant(&who("ops", &[]));
    let (_, reader_cursors) = walk(&catalog, &reader, ListKind::Tools, 3);
    let (_, ops_cursors) = walk(&catalog, &ops, ListKind::Tools, 3);
    let whole: Value =
        serde_json::from_str(&catalog.page(ListKind::Tools, None, 3).unwrap()).unwrap();
    let whole_cursor = whole["nextCursor"].as_str().unwrap();

    let ops_view = ops.list(ListKind::Tools, &catalog);
    let reader_view = reader.list(ListKind::Tools, &catalog);
    let page = |grant: &Grant, view: &ListView, cursor: &str| {
        catalog.page_in(ListKind::Tools, Some(grant.subset(view)), Some(cursor), 3)
    };
    assert_eq!(
        page(&ops, &ops_view, &reader_cursors[0]),
        Err(CursorError::Invalid)
    );
    assert_eq!(
        page(&reader, &reader_view, &ops_cursors[0]),
        Err(CursorError::Invalid)
    );
    assert_eq!(
        page(&reader, &reader_view, whole_cursor),
        Err(CursorError::Invalid)
    );
    assert_eq!(
        catalog.page(ListKind::Tools, Some(&reader_cursors[0]), 3),
        Err(CursorError::Invalid)
    );
    // Another identity under the same rules shares the view, and its cursors.
    let reader_too = policy.grant(&who("reader", &["no-such-scope"]));
    assert!(Arc::ptr_eq(&reader, &reader_too));
    assert!(page(&reader_too, &reader_view, &reader_cursors[0]).is_ok());
}

#[test]
fn cursors_go_stale_when_the_list_or_the_policy_changes() {
    let store = filled();
    let policy = Policy::new(&policy_config(SECURE));
    let reader = policy.grant(&who("reader", &[]));
    let (_, cursors) = walk(&store.load(), &reader, ListKind::Tools, 3);

    store.publish("weather", lists("weather", &["only"]));
    let catalog = store.load();
    let view = reader.list(ListKind::Tools, &catalog);
    let stale = catalog.page_in(
        ListKind::Tools,
        Some(reader.subset(&view)),
        Some(&cursors[0]),
        3,
    );
    assert_eq!(stale, Err(CursorError::Stale));

    let store = filled();
    let catalog = store.load();
    let (_, cursors) = walk(&catalog, &reader, ListKind::Tools, 3);
    // The same section loaded by another replica (or again): same cursors.
    let replica = Policy::new(&policy_config(SECURE));
    let reader = replica.grant(&who("reader", &[]));
    let view = reader.list(ListKind::Tools, &catalog);
    let same = catalog.page_in(
        ListKind::Tools,
        Some(reader.subset(&view)),
        Some(&cursors[0]),
        3,
    );
    assert!(same.is_ok(), "{same:?}");
    // A changed section, even where this reader's rules did not change.
    let changed = format!("{SECURE}    \"mcp:write\": {{ allow: [\"notes__*\"] }}\n");
    let reloaded = Policy::new(&policy_config(&changed));
    let reader = reloaded.grant(&who("reader", &[]));
    let view = reader.list(ListKind::Tools, &catalog);
    let stale = catalog.page_in(
        ListKind::Tools,
        Some(reader.subset(&view)),
        Some(&cursors[0]),
        3,
    );
    assert_eq!(stale, Err(CursorError::Stale));
}

#[test]
fn a_view_is_derived_once_per_list_version_and_grant() {
    let store = filled();
    let policy = Policy::new(&policy_config(SECURE));
    let reader = policy.grant(&who("reader", &[]));
    let catalog = store.load();
    let first = reader.list(ListKind::Tools, &catalog);
    assert!(Arc::ptr_eq(&first, &reader.list(ListKind::Tools, &catalog)));
    assert!(Arc::ptr_eq(
        &first,
        &policy
            .grant(&who("reader", &[]))
            .list(ListKind::Tools, &catalog)
    ));

    // A rebuild that leaves the tools alone keeps their view.
    let mut notes = lists(
        "notes",
        &tool_names(5, "add_")
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    Arc::make_mut(&mut notes)
        .lists
        .prompts
        .push(object(json!({ "name": "new" })));
    store.publish("notes", Some(notes));
    let rebuilt = store.load();
    assert!(!Arc::ptr_eq(&catalog, &rebuilt));
    assert!(Arc::ptr_eq(&first, &reader.list(ListKind::Tools, &rebuilt)));
    // A change to the tools derives a new one.
    store.publish("weather", lists("weather", &["one", "two"]));
    let changed = reader.list(ListKind::Tools, &store.load());
    assert!(!Arc::ptr_eq(&first, &changed));
    assert_eq!(changed.len(), 2);
    assert_eq!(first.len(), 7);
}

#[test]
fn deriving_a_view_of_five_thousand_tools_happens_once() {
    let store = store();
    let names = tool_names(5000, "t");
    store.publish(
        "weather",
        lists(
            "weather",
            &names.iter().map(String::as_str).collect::<Vec<_>>(),
        ),
    );
    let policy = Policy::new(&policy_config(
        "policy:\n  clients:\n    some: { allow: [\"weather__t1*\"], deny: [\"*7\"] }\n",
    ));
    let grant = policy.grant(&who("some", &[]));
    let catalog = store.load();
    let view = grant.list(ListKind::Tools, &catalog);
    let expected = names
        .iter()
        .filter(|n| n.starts_with("t1") && !n.ends_with('7'))
        .count();
    assert_eq!((view.len(), expected), (999, 999));
    for _ in 0..1000 {
        assert!(Arc::ptr_eq(&view, &grant.list(ListKind::Tools, &catalog)));
    }
    assert_eq!(
        grant.derivations.load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

#[test]
fn instructions_and_upstreams_follow_the_view() {
    let store = filled();
    let catalog = store.load();
    let policy = Policy::new(&policy_config(SECURE));
    let reader = policy.grant(&who("reader", &[]));
    assert!(reader.sees_upstream("weather", &catalog));
    assert!(!reader.sees_upstream("notes", &catalog));
    let text = reader.instructions(&catalog).unwrap();
    assert!(
        text.contains("## weather") && !text.contains("notes"),
        "{text}"
    );
    let other = policy.grant(&who("mallory", &[]));
    assert_eq!(other.instructions(&catalog), None);
    let ops = policy.grant(&who("ops", &[]));
    assert_eq!(
        ops.instructions(&catalog).as_deref(),
        catalog.instructions()
    );
}
