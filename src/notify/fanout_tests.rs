//! Unit tests of one `resources/updated` reaching many subscribers: the
//! frame is serialized once and shared by every untagged outbox of the URI,
//! a listen stream still gets its own tagged frame, and coalescing, event
//! ids and replay are what they were.

use std::sync::Arc;

use serde_json::Value;

use super::{ListFilter, NotifyHub, Subscriber};

fn subscribe(hub: &NotifyHub, subscriber: &Subscriber, uri: &str) {
    let upstream: Arc<str> = "notes".into();
    hub.subscriptions()
        .subscribe(subscriber.id, uri, &upstream, "demo://readme");
}

#[test]
fn one_update_is_serialized_once_and_shared_by_untagged_subscribers() {
    let hub = NotifyHub::new(Arc::default());
    let uri = "notes+demo://readme";
    let sessions: Vec<_> = (0..3).map(|_| hub.register()).collect();
    let listener = hub.register_listener(
        ListFilter::ALL,
        r#"{"subscriptionId":"s1"}"#.into(),
        None,
        None,
    );
    for subscriber in sessions.iter().chain([&listener]) {
        subscribe(&hub, subscriber, uri);
    }

    // Twice: the second coalesces into the first in every outbox.
    hub.resource_updated("notes", "demo://readme");
    hub.resource_updated("notes", "demo://readme");

    let frames: Vec<_> = sessions
        .iter()
        .map(|s| {
            let (id, frame) = s.outbox.next_event().expect("one event");
            assert_eq!(id, 1);
            assert!(s.outbox.next_event().is_none(), "coalesced");
            frame
        })
        .collect();
    assert!(
        frames.windows(2).all(|w| Arc::ptr_eq(&w[0], &w[1])),
        "every untagged subscriber holds the same bytes"
    );
    let frame: Value = serde_json::from_str(&frames[0]).unwrap();
    assert_eq!(frame["method"], "notifications/resources/updated");
    assert_eq!(frame["params"], serde_json::json!({ "uri": uri }));
    assert_eq!(
        hub.counts()
            .coalesced
            .load(std::sync::atomic::Ordering::Relaxed),
        4
    );

    let (_, tagged) = listener.outbox.next_event().expect("the listener's event");
    let tagged: Value = serde_json::from_str(&tagged).unwrap();
    assert_eq!(tagged["params"]["uri"], uri);
    assert_eq!(tagged["params"]["_meta"]["subscriptionId"], "s1");

    // Replay hands back the very frame that was delivered.
    let replayed = sessions[0].outbox.replay_after(0).unwrap();
    assert_eq!(replayed.len(), 1);
    assert!(Arc::ptr_eq(&replayed[0].1, &frames[0]));
}

#[test]
fn a_resync_after_a_shared_update_builds_the_frame_again() {
    let hub = NotifyHub::new(Arc::default());
    let uri: Arc<str> = "notes+demo://readme".into();
    let session = hub.register();
    subscribe(&hub, &session, &uri);
    hub.resource_updated("notes", "demo://readme");
    let (_, shared) = session.outbox.next_event().unwrap();

    session.outbox.resync([uri.clone()]);
    let methods: Vec<_> = std::iter::from_fn(|| session.outbox.next_event())
        .map(|(_, f)| f)
        .collect();
    assert_eq!(methods.len(), 4, "three list kinds and the URI");
    assert_eq!(methods[3], shared, "the same text, built at delivery");
    assert!(!Arc::ptr_eq(&methods[3], &shared));
}
