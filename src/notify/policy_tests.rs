//! Unit tests of the hub under a `policy`: `list_changed` reaches a
//! subscriber only when its own view changed, and a policy reload tells
//! whose view changed and drops subscriptions it no longer allows; a URI
//! hidden from a subscriber is never announced to it, even from the
//! subscription table. The catalog and policy fixtures are the policy
//! tests' own.

use std::sync::Arc;

use serde_json::Value;

use super::{NotifyHub, Subscriber};
use crate::catalog::CatalogStore;
use crate::policy::Views;
use crate::policy::tests::{SECURE, filled, lists, policy_config, who};

/// The list_changed methods waiting in a subscriber's outbox.
fn told(subscriber: &Subscriber) -> Vec<String> {
    std::iter::from_fn(|| subscriber.outbox.next_event())
        .map(|(_, frame)| {
            let frame: Value = serde_json::from_str(&frame).unwrap();
            frame["method"].as_str().unwrap().to_owned()
        })
        .collect()
}

fn hub(store: &Arc<CatalogStore>, policy: &str) -> NotifyHub {
    let views = Views::new(store.clone(), Some(&policy_config(policy)), &[]);
    NotifyHub::with_views(Arc::default(), Arc::new(views))
}

const TOOLS: &str = "notifications/tools/list_changed";
const RESOURCES: &str = "notifications/resources/list_changed";

#[test]
fn list_changed_reaches_a_subscriber_only_when_its_view_changed() {
    let store = Arc::new(filled());
    let hub = hub(&store, SECURE);
    let ops = hub.register_as(Some(Arc::new(who("ops", &[]))));
    let reader = hub.register_as(Some(Arc::new(who("reader", &[]))));
    let anonymous = hub.register();

    // A notes tool appears: the reader sees no notes tools.
    let kinds = store.publish("notes", lists("notes", &["add_00", "new"]));
    hub.lists_changed(&kinds);
    assert_eq!(
        (told(&ops), told(&reader)),
        (vec![TOOLS.to_owned()], vec![])
    );
    assert_eq!(told(&anonymous), [TOOLS]);

    // A weather tool appears: news to everyone, a second reader included.
    let second = hub.register_as(Some(Arc::new(who("reader", &[]))));
    let kinds = store.publish("weather", lists("weather", &["new"]));
    hub.lists_changed(&kinds);
    for subscriber in [&ops, &reader, &second, &anonymous] {
        assert_eq!(told(subscriber), [TOOLS]);
    }

    // A reader joining after a change nobody of its rules heard of is told
    // when the list changes back.
    hub.unregister(reader.id);
    hub.unregister(second.id);
    hub.lists_changed(&store.publish("weather", lists("weather", &["other"])));
    let late = hub.register_as(Some(Arc::new(who("reader", &[]))));
    hub.lists_changed(&store.publish("weather", lists("weather", &["new"])));
    assert_eq!(told(&late), [TOOLS]);
}

#[test]
fn a_policy_reload_tells_whose_view_changed_and_drops_what_it_no_longer_allows() {
    let store = Arc::new(filled());
    let hub = hub(&store, SECURE);
    let views = hub.views().unwrap().clone();
    let ops = hub.register_as(Some(Arc::new(who("ops", &[]))));
    let reader = hub.register_as(Some(Arc::new(who("reader", &[]))));
    let anonymous = hub.register();
    assert!(
        !views.replace(Some(&policy_config(SECURE)), &[]),
        "the same policy"
    );

    let widened = policy_config(
        "policy:\n  clients:\n    ops: { allow: [\"*\"] }\n    reader: { allow: [\"weather__*\", \"weather+*\"] }\n",
    );
    assert!(views.replace(Some(&widened), &[]));
    hub.policy_changed();
    assert_eq!(
        told(&reader),
        [RESOURCES],
        "resources and templates, told once"
    );
    assert_eq!((told(&ops), told(&anonymous)), (vec![], vec![]));
    let weather: Arc<str> = "weather".into();
    let uri = "weather+demo://weather/readme";
    hub.subscriptions()
        .subscribe(reader.id, uri, &weather, "demo://weather/readme");
    hub.subscriptions()
        .subscribe(ops.id, uri, &weather, "demo://weather/readme");

    let narrowed = policy_config(
        "policy:\n  clients:\n    ops: { allow: [\"*\"] }\n    reader: { allow: [\"notes__*\"] }\n",
    );
    assert!(views.replace(Some(&narrowed), &[]));
    hub.policy_changed();
    assert_eq!(
        told(&reader),
        [TOOLS, "notifications/prompts/list_changed", RESOURCES]
    );
    assert!(hub.subscriptions().uris_of(reader.id).is_empty());
    assert_eq!(hub.subscriptions().uris_of(ops.id).len(), 1);
    assert!(
        views
            .grant(None, Some(&who("reader", &[])))
            .unwrap()
            .allows("notes__add_00")
    );

    // Without a policy the reader sees everything again.
    assert!(views.replace(None, &[]));
    hub.policy_changed();
    assert_eq!(told(&reader).len(), 3);
    assert!(views.grant(None, Some(&who("reader", &[]))).is_none());
}

#[test]
fn a_hidden_uri_in_the_table_is_never_announced() {
    let store = Arc::new(filled());
    let hub = hub(
        &store,
        "policy:\n  clients:\n    ops: { allow: [\"*\"] }\n    reader: { allow: [\"weather__*\", \"weather+*\"], deny: [\"notes+*\"] }\n",
    );
    let ops = hub.register_as(Some(Arc::new(who("ops", &[]))));
    let reader = hub.register_as(Some(Arc::new(who("reader", &[]))));
    // A subscription the router would refuse got into the table anyway
    // (say, one racing a policy reload).
    let subscribe = |subscriber: &Subscriber, upstream: &str| {
        let name: Arc<str> = upstream.into();
        let original = format!("demo://{upstream}/readme");
        let uri = format!("{upstream}+{original}");
        hub.subscriptions()
            .subscribe(subscriber.id, &uri, &name, &original);
    };
    for subscriber in [&ops, &reader] {
        subscribe(subscriber, "notes");
        subscribe(subscriber, "weather");
    }

    hub.resource_updated("notes", "demo://notes/readme");
    hub.resource_updated("weather", "demo://weather/readme");
    let updated = |subscriber: &Subscriber| -> Vec<(String, String)> {
        std::iter::from_fn(|| subscriber.outbox.next_event())
            .map(|(_, frame)| {
                let frame: Value = serde_json::from_str(&frame).unwrap();
                let method = frame["method"].as_str().unwrap().to_owned();
                (method, frame["params"]["uri"].as_str().unwrap().to_owned())
            })
            .collect()
    };
    let of = |uri: &str| ("notifications/resources/updated".to_owned(), uri.to_owned());
    assert_eq!(
        updated(&reader),
        [of("weather+demo://weather/readme")],
        "the notes URI stays hidden"
    );
    assert_eq!(
        updated(&ops),
        [
            of("notes+demo://notes/readme"),
            of("weather+demo://weather/readme")
        ]
    );
}
