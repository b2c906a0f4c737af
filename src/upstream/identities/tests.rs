//! The per-identity pool: one session per identity, reused; the cap
//! replaces the least recently used idle one or refuses; idle sessions are
//! swept; the caller's latest token is kept. Time is paused.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio_util::sync::CancellationToken;

use super::*;

/// A pool of at most `max` whose sessions are handles with no connection,
/// counting starts, and keeping each started identity's subject slot.
/// What the test sees of each started session: its identity, its token
/// slot and its stop token.
type StartedLog = Arc<Mutex<Vec<(Arc<str>, Arc<SubjectSlot>, CancellationToken)>>>;

fn pool(max: usize, idle: Duration) -> (IdentityPool, Arc<AtomicUsize>, StartedLog) {
    let starts = Arc::new(AtomicUsize::new(0));
    let started: StartedLog = Arc::default();
    let (count, keep) = (starts.clone(), started.clone());
    let start: StartIdentity = Box::new(move |identity, subject| {
        count.fetch_add(1, Ordering::SeqCst);
        let stop = CancellationToken::new();
        keep.lock()
            .unwrap()
            .push((identity.clone(), subject, stop.clone()));
        Started {
            handle: UpstreamHandle::for_test(identity, Duration::from_secs(1), None),
            stop,
            task: tokio::spawn(async {}),
        }
    });
    (
        IdentityPool::new("crm".into(), max, idle, start),
        starts,
        started,
    )
}

fn id(name: &str) -> Arc<str> {
    name.into()
}

#[tokio::test(start_paused = true)]
async fn each_identity_gets_one_session_and_its_latest_token() {
    let (pool, starts, started) = pool(10, Duration::from_secs(60));
    let first = pool.session(&id("alice"), Some("jwt-1")).unwrap();
    let again = pool.session(&id("alice"), Some("jwt-2")).unwrap();
    assert_eq!(first.name(), again.name());
    pool.session(&id("bob"), None).unwrap();
    assert_eq!(starts.load(Ordering::SeqCst), 2);
    assert_eq!(pool.identities(), [id("alice"), id("bob")]);
    let alice_slot = started.lock().unwrap()[0].1.clone();
    let token = alice_slot.get().map(|s| s.expose().to_owned());
    assert_eq!(token.as_deref(), Some("jwt-2"), "the latest token is kept");
}

#[tokio::test(start_paused = true)]
async fn at_the_cap_the_least_recently_used_idle_one_makes_room_or_the_call_is_refused() {
    let (pool, _, started) = pool(2, Duration::from_secs(3600));
    pool.session(&id("alice"), None).unwrap();
    pool.session(&id("bob"), None).unwrap();
    // Both were used just now: nobody is replaced.
    let Err(refused) = pool.session(&id("carol"), None) else {
        panic!("carol should be refused");
    };
    assert!(refused.to_string().contains("max_identities"), "{refused}");

    tokio::time::advance(Duration::from_secs(5)).await;
    pool.session(&id("bob"), None).unwrap();
    tokio::time::advance(Duration::from_secs(5)).await;
    pool.session(&id("carol"), None).unwrap();
    assert_eq!(pool.identities(), [id("bob"), id("carol")]);
    let alice_stop = started.lock().unwrap()[0].2.clone();
    assert!(alice_stop.is_cancelled(), "alice's session was stopped");
}

#[tokio::test(start_paused = true)]
async fn sessions_unused_for_the_idle_timeout_are_closed() {
    let (pool, _, _) = pool(10, Duration::from_secs(60));
    pool.session(&id("alice"), None).unwrap();
    tokio::time::advance(Duration::from_secs(30)).await;
    pool.session(&id("bob"), None).unwrap();
    tokio::time::advance(Duration::from_secs(31)).await;
    assert_eq!(pool.sweep(), 1);
    assert_eq!(pool.identities(), [id("bob")]);
    assert!(pool.close("bob"));
    assert_eq!(pool.len(), 0);
    pool.stop_all().await;
    assert!(
        pool.session(&id("dave"), None).is_err(),
        "stopped: none starts"
    );
}
