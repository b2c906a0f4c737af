//! Unit tests of the [`SubscriptionTable`] beyond the basics in
//! `subscriptions.rs`: first in and last out reported exactly once per
//! cycle, what `remove_subscriber` reports, requests that change nothing,
//! the per-upstream index, and the counts.

use super::*;

fn up(name: &str) -> Arc<str> {
    name.into()
}

fn sorted(mut changes: Vec<UpstreamChange>) -> Vec<(String, String)> {
    changes.sort_by(|l, r| (&l.upstream, &l.original).cmp(&(&r.upstream, &r.original)));
    changes
        .into_iter()
        .map(|c| (c.upstream.to_string(), c.original.to_string()))
        .collect()
}

#[test]
fn a_uri_emptied_and_watched_again_is_subscribed_again() {
    let table = SubscriptionTable::default();
    let docs = up("docs");
    for round in 0..3 {
        let first = table.subscribe(1, "docs+x", &docs, "x");
        assert_eq!(
            first,
            Some(UpstreamChange {
                upstream: docs.clone(),
                original: "x".into()
            }),
            "round {round}: first in"
        );
        assert_eq!(table.subscribe(2, "docs+x", &docs, "x"), None);
        assert_eq!(table.unsubscribe(1, "docs+x"), None, "2 still watches");
        assert!(table.unsubscribe(2, "docs+x").is_some(), "last out");
        assert_eq!((table.uri_count(), table.entry_count()), (0, 0));
    }
}

#[test]
fn leaving_what_one_never_joined_changes_nothing() {
    let table = SubscriptionTable::default();
    let docs = up("docs");
    table.subscribe(1, "docs+x", &docs, "x");
    assert_eq!(table.unsubscribe(2, "docs+x"), None, "2 never joined");
    assert_eq!(table.unsubscribe(1, "docs+unknown"), None);
    assert_eq!(table.subscribers("docs+x"), [1]);
    assert_eq!(table.uris_of(1), [Arc::from("docs+x")]);
    assert!(table.uris_of(2).is_empty());
    assert_eq!((table.uri_count(), table.entry_count()), (1, 1));
    assert!(table.remove_subscriber(2).is_empty());
    assert_eq!(table.subscribers("docs+x"), [1]);
}

#[test]
fn removing_a_subscriber_reports_every_uri_it_was_last_on() {
    let table = SubscriptionTable::default();
    let (a, b) = (up("a"), up("b"));
    table.subscribe(1, "a+x", &a, "x");
    table.subscribe(1, "a+y", &a, "y");
    table.subscribe(1, "b+z", &b, "z");
    table.subscribe(2, "a+y", &a, "y");
    assert_eq!((table.uri_count(), table.entry_count()), (3, 4));

    let gone = sorted(table.remove_subscriber(1));
    assert_eq!(
        gone,
        [
            ("a".to_owned(), "x".to_owned()),
            ("b".to_owned(), "z".to_owned())
        ]
    );
    assert_eq!((table.uri_count(), table.entry_count()), (1, 1));
    assert_eq!(table.originals_of_upstream("a"), [Arc::from("y")]);
    assert!(table.originals_of_upstream("b").is_empty());
    assert!(
        table.remove_subscriber(1).is_empty(),
        "nothing left to report"
    );

    let last = sorted(table.remove_subscriber(2));
    assert_eq!(last, [("a".to_owned(), "y".to_owned())]);
    assert_eq!((table.uri_count(), table.entry_count()), (0, 0));
}

#[test]
fn one_original_uri_on_two_upstreams_stays_apart() {
    let table = SubscriptionTable::default();
    let (a, b) = (up("a"), up("b"));
    assert!(table.subscribe(1, "a+file:///x", &a, "file:///x").is_some());
    assert!(
        table.subscribe(1, "b+file:///x", &b, "file:///x").is_some(),
        "a different namespaced URI is a first subscription of its own"
    );
    let change = table.unsubscribe(1, "a+file:///x").unwrap();
    assert_eq!(&*change.upstream, "a");
    assert!(table.originals_of_upstream("a").is_empty());
    assert_eq!(table.originals_of_upstream("b"), [Arc::from("file:///x")]);
    assert_eq!(table.uris_of(1), [Arc::from("b+file:///x")]);
}

#[test]
fn counts_follow_uris_and_pairs() {
    let table = SubscriptionTable::default();
    let a = up("a");
    for subscriber in 0..4 {
        for uri in 0..3 {
            table.subscribe(subscriber, &format!("a+{uri}"), &a, &uri.to_string());
        }
    }
    assert_eq!((table.uri_count(), table.entry_count()), (3, 12));
    // Subscribing again is not counted twice.
    table.subscribe(0, "a+0", &a, "0");
    assert_eq!(table.entry_count(), 12);
    table.unsubscribe(0, "a+0");
    assert_eq!((table.uri_count(), table.entry_count()), (3, 11));
    assert!(table.remove_subscriber(1).is_empty());
    assert_eq!((table.uri_count(), table.entry_count()), (3, 8));
    let mut originals = table.originals_of_upstream("a");
    originals.sort();
    assert_eq!(originals, [Arc::from("0"), Arc::from("1"), Arc::from("2")]);
}
