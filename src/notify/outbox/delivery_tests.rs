//! Unit tests of one subscriber's [`Outbox`] beyond the basics in
//! `outbox.rs`: the bounded message queue (what is dropped and how it is
//! counted), coalescing of `list_changed` and `resources/updated` with
//! their counts, the `_meta` tag of a listen stream, the replay ring's
//! bounds and resync, replacing the attached stream, and `wait` waking on
//! a push (on tokio's paused clock).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::metrics::NotificationCounts;

fn counted() -> (Arc<NotificationCounts>, Outbox) {
    let counts = Arc::new(NotificationCounts::default());
    (counts.clone(), Outbox::new(counts, None))
}

fn drain(outbox: &Outbox) -> Vec<Value> {
    std::iter::from_fn(|| outbox.next_event())
        .map(|(_, frame)| serde_json::from_str(&frame).unwrap())
        .collect()
}

fn message(n: usize) -> Arc<str> {
    format!(r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"n":{n}}}}}"#).into()
}

#[test]
fn a_full_queue_drops_the_oldest_messages_and_counts_each_drop() {
    let (counts, outbox) = counted();
    for n in 0..MESSAGE_CAPACITY {
        outbox.push_message(message(n));
    }
    assert_eq!(outbox.backlog().dropped, 0, "full, but nothing dropped yet");
    for n in MESSAGE_CAPACITY..MESSAGE_CAPACITY + 3 {
        outbox.push_message(message(n));
    }
    let backlog = outbox.backlog();
    assert_eq!((backlog.pending, backlog.dropped), (MESSAGE_CAPACITY, 3));
    assert_eq!(counts.dropped.load(Ordering::Relaxed), 3);

    // List changes are flags, not queue entries: they are never dropped and
    // go out before the messages.
    outbox.mark_list_changed(ListKind::Tools);
    let delivered = drain(&outbox);
    assert_eq!(delivered.len(), MESSAGE_CAPACITY + 1);
    assert_eq!(delivered[0]["method"], "notifications/tools/list_changed");
    let numbers: Vec<u64> = delivered[1..]
        .iter()
        .map(|m| m["params"]["n"].as_u64().unwrap())
        .collect();
    let expected: Vec<u64> = (3..MESSAGE_CAPACITY as u64 + 3).collect();
    assert_eq!(numbers, expected, "the three oldest went, in order");
    assert_eq!(
        counts.sent.load(Ordering::Relaxed),
        MESSAGE_CAPACITY as u64 + 1
    );
    assert_eq!(outbox.backlog().pending, 0);
}

#[test]
fn list_changes_and_updates_coalesce_until_delivered_and_are_counted() {
    let (counts, outbox) = counted();
    for _ in 0..3 {
        outbox.mark_list_changed(ListKind::Tools);
    }
    // Templates share the resources notification.
    outbox.mark_list_changed(ListKind::Templates);
    outbox.mark_list_changed(ListKind::Resources);
    outbox.mark_updated("a+file:///x".into());
    outbox.mark_updated("a+file:///x".into());
    outbox.mark_updated("a+file:///y".into());
    assert_eq!(counts.coalesced.load(Ordering::Relaxed), 4);
    assert_eq!(outbox.backlog().pending, 4);

    let delivered = drain(&outbox);
    let methods: Vec<&str> = delivered
        .iter()
        .map(|m| m["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        [
            "notifications/tools/list_changed",
            "notifications/resources/list_changed",
            "notifications/resources/updated",
            "notifications/resources/updated",
        ]
    );
    assert_eq!(delivered[2]["params"], json!({ "uri": "a+file:///x" }));
    assert_eq!(delivered[3]["params"], json!({ "uri": "a+file:///y" }));

    // Delivered flags are clear: the next change is a new notification.
    outbox.mark_list_changed(ListKind::Tools);
    outbox.mark_updated("a+file:///x".into());
    assert_eq!(drain(&outbox).len(), 2);
    assert_eq!(counts.coalesced.load(Ordering::Relaxed), 4);
}

#[test]
fn a_listen_streams_notifications_carry_its_tag() {
    let tag = r#"{"io.modelcontextprotocol/subscriptionId":"s-1"}"#;
    let outbox = Outbox::new(Arc::default(), Some(tag.to_owned()));
    assert!(outbox.is_tagged());
    outbox.mark_list_changed(ListKind::Prompts);
    outbox.mark_updated("a+file:///x".into());
    let delivered = drain(&outbox);
    let tag: Value = serde_json::from_str(tag).unwrap();
    assert_eq!(delivered[0]["params"], json!({ "_meta": tag }));
    assert_eq!(
        delivered[1]["params"],
        json!({ "uri": "a+file:///x", "_meta": tag })
    );
}

#[test]
fn the_replay_ring_keeps_the_newest_events_and_says_when_older_are_gone() {
    let outbox = Outbox::default();
    let total = REPLAY_CAPACITY as u64 + 10;
    let mut delivered = Vec::new();
    for n in 0..total as usize {
        outbox.push_message(message(n));
        delivered.push(outbox.next_event().unwrap());
    }
    let ids: Vec<u64> = delivered.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, (1..=total).collect::<Vec<_>>(), "ids count up from 1");
    assert_eq!(outbox.backlog().replay, REPLAY_CAPACITY);

    // The ring starts at event 11: a client that saw 10 missed nothing it
    // cannot get back; one that saw only 9 did.
    let replayed = outbox.replay_after(10).unwrap();
    assert_eq!(replayed.len(), REPLAY_CAPACITY);
    assert_eq!(replayed, delivered[10..]);
    assert_eq!(outbox.replay_after(9), Err(Evicted));
    assert_eq!(
        outbox.replay_after(total - 2).unwrap(),
        delivered[delivered.len() - 2..]
    );
    assert!(outbox.replay_after(total).unwrap().is_empty());
    assert!(
        outbox.replay_after(total + 1_000).unwrap().is_empty(),
        "an id from another life of the stream"
    );
}

#[test]
fn a_resync_marks_every_kind_and_every_watched_uri() {
    let outbox = Outbox::default();
    outbox.resync(["a+x".into(), "b+y".into()]);
    let delivered = drain(&outbox);
    let methods: Vec<&str> = delivered
        .iter()
        .map(|m| m["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        [
            "notifications/tools/list_changed",
            "notifications/prompts/list_changed",
            "notifications/resources/list_changed",
            "notifications/resources/updated",
            "notifications/resources/updated",
        ]
    );
    assert_eq!(delivered[3]["params"]["uri"], "a+x");
    assert_eq!(delivered[4]["params"]["uri"], "b+y");
}

#[test]
fn attaching_a_stream_ends_the_one_before() {
    let outbox = Outbox::default();
    let parent = CancellationToken::new();
    let first = outbox.attach_stream(&parent);
    let second = outbox.attach_stream(&parent);
    assert!(first.is_cancelled());
    assert!(!second.is_cancelled());
    parent.cancel();
    assert!(second.is_cancelled(), "the parent (shutdown) ends it too");
}

#[tokio::test(start_paused = true)]
async fn wait_sleeps_until_something_is_pushed() {
    let outbox = Arc::new(Outbox::default());
    let started = tokio::time::Instant::now();
    let waiter = {
        let outbox = outbox.clone();
        tokio::spawn(async move {
            outbox.wait().await;
            tokio::time::Instant::now()
        })
    };
    // An hour of nothing: the waiter still sleeps.
    tokio::time::sleep(Duration::from_secs(3_600)).await;
    assert!(!waiter.is_finished());

    outbox.push_message(message(1));
    let woke = tokio::time::timeout(Duration::from_secs(1), waiter)
        .await
        .expect("the push woke the waiter")
        .unwrap();
    assert!(woke >= started + Duration::from_secs(3_600));
    assert!(outbox.next_event().is_some());

    // A push while nobody waits leaves a wake-up for the next wait...
    outbox.mark_list_changed(ListKind::Tools);
    let now = tokio::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(1), outbox.wait())
        .await
        .expect("the stored wake-up");
    assert_eq!(tokio::time::Instant::now(), now, "at once");
    // ...but only one.
    let again = tokio::time::timeout(Duration::from_secs(60), outbox.wait()).await;
    assert!(again.is_err(), "no second wake-up without a push");
}
