//! Unit tests for views: endpoints' selections, `prefix_mode`, and
//! progressive listing with search.

use super::*;
use crate::config::{EndpointConfig, Naming, PrefixMode, RuleConfig, SearchConfig};
use serde_json::json;

fn tools(names: &[(&str, &str)]) -> Option<Arc<UpstreamView>> {
    let tools = names
        .iter()
        .map(|(name, description)| {
            json!({ "name": name, "description": description, "inputSchema": {"type": "object"} })
                .as_object()
                .unwrap()
                .clone()
        })
        .collect();
    Some(Arc::new(UpstreamView {
        lists: UpstreamLists {
            tools,
            resources: vec![
                json!({"uri": "file:///a", "name": "a"})
                    .as_object()
                    .unwrap()
                    .clone(),
            ],
            ..UpstreamLists::default()
        },
        instructions: None,
    }))
}

fn store() -> CatalogStore {
    CatalogStore::new([
        ("gh".into(), "gh".to_owned(), None),
        ("jira".into(), "jira".to_owned(), None),
        ("docs".into(), "docs".to_owned(), None),
    ])
}

fn endpoint(name: &str) -> EndpointConfig {
    EndpointConfig {
        name: name.into(),
        upstreams: None,
        items: None,
        naming: Naming::default(),
        required_scopes: Vec::new(),
        clients: Vec::new(),
        policy: None,
        search: SearchConfig::Off,
    }
}

/// Builds the whole view only, naming tools by `names` and URIs by `uris`.
fn whole_only(store: &CatalogStore, names: PrefixMode, uris: PrefixMode) {
    store.set_views(ViewSpec::whole(names), Vec::new(), uris);
}

/// Builds the whole view (always prefixed) and the endpoint `team`.
fn with_endpoint(store: &CatalogStore, team: &EndpointConfig) {
    store.set_views(
        ViewSpec::whole(PrefixMode::Always),
        vec![ViewSpec::endpoint(team)],
        PrefixMode::Always,
    );
}

fn names(catalog: &Catalog, kind: ListKind) -> Vec<String> {
    let page: Value = serde_json::from_str(&catalog.page(kind, None, 1000).unwrap()).unwrap();
    page[kind.result_key()]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            i.get("uri")
                .or(i.get("name"))
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

fn with_three_upstreams() -> CatalogStore {
    let store = store();
    store.publish(
        "gh",
        tools(&[("search", "Search code"), ("create_issue", "Open an issue")]),
    );
    store.publish(
        "jira",
        tools(&[("search", "Search tickets"), ("assign", "Assign a ticket")]),
    );
    store.publish("docs", tools(&[("read_page", "Read a page")]));
    store
}

#[test]
fn on_collision_prefixes_only_the_names_two_upstreams_share() {
    let store = with_three_upstreams();
    whole_only(&store, PrefixMode::OnCollision, PrefixMode::Always);
    let whole = store.load();
    assert_eq!(
        names(&whole, ListKind::Tools),
        [
            "gh__search",
            "create_issue",
            "jira__search",
            "assign",
            "read_page"
        ]
    );
    assert_eq!(
        whole.tool("create_issue").unwrap().original.as_ref(),
        "create_issue"
    );
    // The policy key keeps the prefix whatever the view shows.
    assert_eq!(
        &*whole.tool("create_issue").unwrap().key,
        "gh__create_issue"
    );
    assert_eq!(whole.key_of(ListKind::Tools, "assign"), "jira__assign");

    // An upstream that goes down keeps its names taken: no flip-flop.
    store.publish("jira", None);
    assert_eq!(
        names(&store.load(), ListKind::Tools),
        ["gh__search", "create_issue", "read_page"]
    );
    // Removed from the config, it no longer counts.
    store.set_upstreams([
        ("gh".into(), "gh".to_owned(), None),
        ("docs".into(), "docs".to_owned(), None),
    ]);
    assert_eq!(
        names(&store.load(), ListKind::Tools),
        ["search", "create_issue", "read_page"]
    );
}

#[test]
fn never_leaves_a_colliding_name_out_and_says_so() {
    let store = with_three_upstreams();
    whole_only(&store, PrefixMode::Never, PrefixMode::Always);
    let whole = store.load();
    assert_eq!(
        names(&whole, ListKind::Tools),
        ["search", "create_issue", "assign", "read_page"]
    );
    assert_eq!(whole.tool("search").unwrap().upstream.as_ref(), "gh");
    assert_eq!(whole.collisions().len(), 1, "{:?}", whole.collisions());
    assert!(whole.collisions()[0].contains("jira"));
}

#[test]
fn an_endpoint_shows_its_upstreams_and_items_and_names_them_its_own_way() {
    let store = with_three_upstreams();
    let mut team = endpoint("team");
    team.upstreams = Some(vec!["gh".into(), "jira".into()]);
    team.items = Some(RuleConfig {
        allow: vec![
            "gh__*".into(),
            "jira__*".into(),
            "gh+*".into(),
            "jira+*".into(),
        ],
        deny: vec!["*assign*".into()],
    });
    team.naming.mode = PrefixMode::OnCollision;
    with_endpoint(&store, &team);
    let view = store.load_view(Some("team"));
    assert_eq!(
        names(&view, ListKind::Tools),
        ["gh__search", "create_issue", "jira__search"]
    );
    assert_eq!(
        names(&view, ListKind::Resources),
        ["gh+file:///a", "jira+file:///a"]
    );
    assert!(view.shows_upstream("gh") && !view.shows_upstream("docs"));
    assert!(view.route_uri("docs+file:///a", |_| true).is_none());
    assert!(!view.admits("jira__assign"));
    // The whole view is untouched.
    assert_eq!(store.load().len(ListKind::Tools), 5);
    assert!(store.load().tool("gh__create_issue").is_some());
    // A gone endpoint is an empty view.
    whole_only(&store, PrefixMode::Always, PrefixMode::Always);
    assert_eq!(store.load_view(Some("team")).len(ListKind::Tools), 0);
}

#[test]
fn a_change_outside_an_endpoint_keeps_its_versions() {
    let store = with_three_upstreams();
    let mut team = endpoint("team");
    team.upstreams = Some(vec!["docs".into()]);
    with_endpoint(&store, &team);
    let before = store.load_view(Some("team")).version(ListKind::Tools);
    let whole_before = store.load().version(ListKind::Tools);
    store.publish("gh", tools(&[("search", "Search code")]));
    assert_eq!(
        store.load_view(Some("team")).version(ListKind::Tools),
        before
    );
    assert_ne!(store.load().version(ListKind::Tools), whole_before);
    store.publish(
        "docs",
        tools(&[("read_page", "Read a page"), ("edit_page", "Edit")]),
    );
    assert_ne!(
        store.load_view(Some("team")).version(ListKind::Tools),
        before
    );
}

#[test]
fn a_progressive_endpoint_lists_pinned_tools_and_its_own_two_and_finds_the_rest() {
    let store = with_three_upstreams();
    let mut team = endpoint("team");
    team.search = SearchConfig::Progressive {
        pinned: vec!["docs__*".into()],
        results: 3,
    };
    with_endpoint(&store, &team);
    let view = store.load_view(Some("team"));
    assert_eq!(
        names(&view, ListKind::Tools),
        ["docs__read_page", "search_tools", "call_tool"]
    );
    // Every tool can still be called by name.
    assert!(view.tool("gh__create_issue").is_some());
    assert!(view.is_gateway_tool("call_tool"));
    let searchable = view.searchable().unwrap();
    assert_eq!(searchable.len(), 5);
    let found = searchable.search("open an issue", 3, |_| true);
    assert_eq!(found[0].key, "gh__create_issue");
    let hidden = searchable.search("open an issue", 3, |k| k != "gh__create_issue");
    assert!(hidden.iter().all(|f| f.key != "gh__create_issue"));

    // A tool added upstream is searchable, and the tools list counts as changed.
    let version = view.version(ListKind::Tools);
    let changed = store.publish(
        "jira",
        tools(&[
            ("search", "Search tickets"),
            ("assign", "Assign a ticket"),
            ("transition", "Move a ticket to another status"),
        ]),
    );
    assert!(changed.contains(&ListKind::Tools));
    let view = store.load_view(Some("team"));
    assert_ne!(view.version(ListKind::Tools), version);
    let found = view
        .searchable()
        .unwrap()
        .search("move ticket status", 1, |_| true);
    assert_eq!(found[0].key, "jira__transition");
}

#[test]
fn a_progressive_view_reserves_its_tool_names() {
    let store = CatalogStore::new([("x".into(), "".to_owned(), None)]);
    store.publish("x", tools(&[("search_tools", "its own search")]));
    let mut team = endpoint("team");
    team.search = SearchConfig::Progressive {
        pinned: vec!["*".into()],
        results: 3,
    };
    with_endpoint(&store, &team);
    let listed = names(&store.load_view(Some("team")), ListKind::Tools);
    assert_eq!(listed.len(), 3);
    assert!(listed[0].starts_with("search_tools_"), "{listed:?}");
    assert_eq!(&listed[1..], ["search_tools", "call_tool"]);
}

fn with_resources(uris: &[&str]) -> Option<Arc<UpstreamView>> {
    Some(Arc::new(UpstreamView {
        lists: UpstreamLists {
            resources: uris
                .iter()
                .map(|u| json!({"uri": u, "name": u}).as_object().unwrap().clone())
                .collect(),
            ..UpstreamLists::default()
        },
        instructions: None,
    }))
}

#[test]
fn namespace_uris_on_collision_leaves_unique_uris_bare() {
    let store = CatalogStore::new([
        ("a".into(), "a".to_owned(), None),
        ("b".into(), "b".to_owned(), None),
        ("c".into(), "c".to_owned(), None),
        ("d".into(), "d".to_owned(), Some(true)),
    ]);
    store.publish("a", with_resources(&["file:///shared", "file:///only-a"]));
    store.publish("b", with_resources(&["file:///shared"]));
    store.publish("c", with_resources(&["file:///only-c"]));
    store.publish("d", with_resources(&["file:///only-c"]));
    whole_only(&store, PrefixMode::Always, PrefixMode::OnCollision);
    let whole = store.load();
    assert_eq!(
        names(&whole, ListKind::Resources),
        [
            "a+file:///shared",
            "a+file:///only-a",
            "b+file:///shared",
            "file:///only-c",
            "d+file:///only-c"
        ]
    );
    let forms = store.uri_forms();
    assert!(forms.namespaces("a") && forms.namespaces("b") && forms.namespaces("d"));
    assert!(!forms.namespaces("c"));
    assert_eq!(
        whole
            .route_uri("file:///only-c", |_| true)
            .unwrap()
            .0
            .as_ref(),
        "c"
    );
    assert!(store.uri_collisions(PrefixMode::OnCollision).is_empty());
    // Under never the same lists collide; a's and b's share one URI.
    let collisions = store.uri_collisions(PrefixMode::Never);
    assert_eq!(collisions.len(), 1, "{collisions:?}");
    assert!(
        collisions[0].contains("\"file:///shared\""),
        "{collisions:?}"
    );
    // Always: everything without its own setting is namespaced again.
    whole_only(&store, PrefixMode::Always, PrefixMode::Always);
    assert!(store.uri_forms().namespaces("c"));
}
