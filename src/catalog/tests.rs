//! Unit tests for merging, naming collisions and cursors.

use super::*;
use serde_json::json;

fn items(names: &[&str]) -> Vec<Map<String, Value>> {
    names
        .iter()
        .map(|n| {
            json!({ "name": n, "description": format!("{n} tool") })
                .as_object()
                .unwrap()
                .clone()
        })
        .collect()
}

fn view(tools: &[&str]) -> Option<Arc<UpstreamView>> {
    Some(Arc::new(UpstreamView {
        lists: UpstreamLists {
            tools: items(tools),
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
        ("alpha".into(), "alpha".to_owned(), None),
        ("beta".into(), "".to_owned(), None),
    ])
}

fn all_names(catalog: &Catalog, kind: ListKind, page_size: usize) -> Vec<String> {
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page: Value =
            serde_json::from_str(&catalog.page(kind, cursor.as_deref(), page_size).unwrap())
                .unwrap();
        for item in page[kind.result_key()].as_array().unwrap() {
            names.push(
                item.get("uri")
                    .or(item.get("name"))
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_owned(),
            );
        }
        match page.get("nextCursor") {
            Some(c) => cursor = Some(c.as_str().unwrap().to_owned()),
            None => return names,
        }
    }
}

#[test]
fn merges_in_config_order_with_prefixes() {
    let store = store();
    assert_eq!(
        store.publish("beta", view(&["echo"])),
        vec![ListKind::Tools, ListKind::Resources]
    );
    store.publish("alpha", view(&["echo", "add"]));
    let catalog = store.load();
    assert_eq!(
        all_names(&catalog, ListKind::Tools, 2),
        ["alpha__echo", "alpha__add", "echo"]
    );
    assert_eq!(catalog.tool("echo").unwrap().upstream.as_ref(), "beta");
    assert_eq!(catalog.tool("alpha__add").unwrap().original.as_ref(), "add");
    assert_eq!(
        all_names(&catalog, ListKind::Resources, 10),
        ["alpha+file:///a", "beta+file:///a"]
    );
}

#[test]
fn collisions_get_deterministic_distinct_names() {
    let build_once = || {
        let store = store();
        store.publish("alpha", view(&[]));
        // "alpha__x" exposed by the unprefixed upstream collides with alpha's "x".
        store.publish("beta", view(&["alpha__x"]));
        store.publish("alpha", view(&["x"]));
        all_names(&store.load(), ListKind::Tools, 10)
    };
    let names = build_once();
    assert_eq!(names[0], "alpha__x");
    assert!(
        names[1].starts_with("alpha__x_") && names[1].len() == "alpha__x_".len() + 8,
        "{names:?}"
    );
    assert_eq!(names, build_once());
}

#[test]
fn unchanged_republish_keeps_cursors_valid() {
    let store = store();
    store.publish("alpha", view(&["a", "b", "c"]));
    let first: Value =
        serde_json::from_str(&store.load().page(ListKind::Tools, None, 2).unwrap()).unwrap();
    let cursor = first["nextCursor"].as_str().unwrap().to_owned();
    assert!(store.publish("alpha", view(&["a", "b", "c"])).is_empty());
    assert!(store.load().page(ListKind::Tools, Some(&cursor), 2).is_ok());
    assert_eq!(
        store.publish("alpha", view(&["a", "b"])),
        vec![ListKind::Tools]
    );
    assert_eq!(
        store.load().page(ListKind::Tools, Some(&cursor), 2),
        Err(CursorError::Stale)
    );
}

#[test]
fn another_replica_with_the_same_catalog_accepts_the_cursor() {
    // Replica one saw the upstreams come up in one order, with a change on
    // the way; replica two in the other order. Same lists, same cursors.
    let one = store();
    one.publish("alpha", view(&["a"]));
    one.publish("beta", view(&["x", "y"]));
    one.publish("alpha", view(&["a", "b", "c"]));
    let two = store();
    two.publish("beta", view(&["x", "y"]));
    two.publish("alpha", view(&["a", "b", "c"]));
    let page: Value =
        serde_json::from_str(&one.load().page(ListKind::Tools, None, 2).unwrap()).unwrap();
    let cursor = page["nextCursor"].as_str().unwrap().to_owned();
    let on_two: Value =
        serde_json::from_str(&two.load().page(ListKind::Tools, Some(&cursor), 2).unwrap()).unwrap();
    let names: Vec<&str> = on_two["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha__c", "x"]);
    // A third replica whose list differs calls it stale.
    let three = store();
    three.publish("alpha", view(&["a", "b", "c", "d"]));
    three.publish("beta", view(&["x", "y"]));
    assert_eq!(
        three.load().page(ListKind::Tools, Some(&cursor), 2),
        Err(CursorError::Stale)
    );
}

#[test]
fn garbage_and_foreign_cursors_are_invalid() {
    let store = store();
    store.publish("alpha", view(&["a", "b", "c"]));
    let catalog = store.load();
    let page: Value =
        serde_json::from_str(&catalog.page(ListKind::Tools, None, 1).unwrap()).unwrap();
    let cursor = page["nextCursor"].as_str().unwrap();
    assert_eq!(
        catalog.page(ListKind::Prompts, Some(cursor), 1),
        Err(CursorError::Invalid)
    );
    assert_eq!(
        catalog.page(ListKind::Tools, Some("!!!"), 1),
        Err(CursorError::Invalid)
    );
    assert_eq!(
        catalog.page(ListKind::Tools, Some("dDox"), 1),
        Err(CursorError::Invalid)
    );
}

#[test]
fn down_upstream_leaves_the_view() {
    let store = store();
    store.publish("alpha", view(&["a"]));
    store.publish("beta", view(&["b"]));
    store.publish("alpha", None);
    assert_eq!(all_names(&store.load(), ListKind::Tools, 10), ["b"]);
    assert!(store.load().tool("alpha__a").is_none());
}

#[test]
fn plain_uri_upstreams_expose_and_route_uris_unchanged() {
    let store = CatalogStore::new([
        ("alpha".into(), "alpha".to_owned(), None),
        ("plain".into(), "".to_owned(), Some(false)),
    ]);
    store.publish("alpha", view(&[]));
    store.publish("plain", view(&[]));
    let catalog = store.load();
    assert_eq!(
        all_names(&catalog, ListKind::Resources, 10),
        ["alpha+file:///a", "file:///a"]
    );
    let known = |u: &str| u == "alpha" || u == "plain";
    assert_eq!(
        catalog.route_uri("alpha+file:///a", known),
        Some(("alpha".into(), "file:///a".into()))
    );
    assert_eq!(
        catalog.route_uri("file:///a", known),
        Some(("plain".into(), "file:///a".into()))
    );
    // Not listed anywhere: the first plain upstream gets it (it may be a template expansion).
    assert_eq!(
        catalog.route_uri("test://template/7", known),
        Some(("plain".into(), "test://template/7".into()))
    );
    assert!(!catalog.namespaces_uris("plain"));
}

#[test]
fn a_whole_list_page_is_built_once_per_snapshot_and_shared() {
    let store = store();
    store.publish("alpha", view(&["a", "b", "c"]));
    let catalog = store.load();
    let shared = |page: Page| match page {
        Page::Shared(text) => text,
        Page::Owned(text) => panic!("a page of the whole list built per request: {text}"),
    };
    let first = shared(catalog.page(ListKind::Tools, None, 2).unwrap());
    let again = shared(catalog.page(ListKind::Tools, None, 2).unwrap());
    assert!(Arc::ptr_eq(&first, &again), "the same page is built twice");
    // Another page size is another page, with its own cursor.
    let whole = shared(catalog.page(ListKind::Tools, None, 10).unwrap());
    assert!(!whole.contains("nextCursor") && first.contains("nextCursor"));
    // The second page, reached by the first's cursor, is shared too.
    let cursor = serde_json::from_str::<Value>(&first).unwrap()["nextCursor"]
        .as_str()
        .unwrap()
        .to_owned();
    let second = shared(catalog.page(ListKind::Tools, Some(&cursor), 2).unwrap());
    let second_again = shared(catalog.page(ListKind::Tools, Some(&cursor), 2).unwrap());
    assert!(Arc::ptr_eq(&second, &second_again));
    let items: Value = serde_json::from_str(&second).unwrap();
    assert_eq!(items["tools"].as_array().unwrap().len(), 1);
    // A new snapshot has pages of its own: the old ones are not served.
    store.publish("alpha", view(&["a", "b", "c", "d"]));
    let rebuilt = shared(store.load().page(ListKind::Tools, None, 10).unwrap());
    assert!(!Arc::ptr_eq(&whole, &rebuilt));
    let listed: Value = serde_json::from_str(&rebuilt).unwrap();
    assert_eq!(listed["tools"].as_array().unwrap().len(), 4);
}
