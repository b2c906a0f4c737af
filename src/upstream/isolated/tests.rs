//! Unit tests of the per-session instance pool, with fake instances (a
//! handle and a task that ends when stopped) and tokio's paused clock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::*;
use crate::upstream::test_support::{FakeUpstream, Recorder};

/// A pool of at most `max` fake instances; the counter says how many were started.
fn pool(max: usize, events: Arc<Recorder>) -> (Instances, Arc<AtomicUsize>) {
    let started = Arc::new(AtomicUsize::new(0));
    let counter = started.clone();
    let start: Start = Box::new(move |_session| {
        counter.fetch_add(1, Ordering::Relaxed);
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let task = tokio::spawn(async move { stopped.cancelled().await });
        let handle = UpstreamHandle::for_test("fx", Duration::from_secs(5), None);
        Started { handle, stop, task }
    });
    (Instances::new("fx".into(), max, events, start), started)
}

fn same(a: &UpstreamHandle, b: &UpstreamHandle) -> bool {
    Arc::ptr_eq(&a.shared, &b.shared)
}

#[tokio::test]
async fn a_session_keeps_its_instance_and_the_cap_refuses_one_more() {
    let (pool, started) = pool(2, Arc::default());
    let one = pool.instance(1).unwrap();
    let two = pool.instance(2).unwrap();
    assert!(!same(&one, &two));
    assert!(
        same(&pool.instance(1).unwrap(), &one),
        "started once per session"
    );
    assert_eq!(started.load(Ordering::Relaxed), 2);

    let refused = pool.instance(3).err().expect("over the cap");
    let message = refused.to_string();
    assert!(
        message.contains("'fx'")
            && message.contains("2 per-session instances")
            && message.contains("max_instances"),
        "{message}"
    );
    assert_eq!(pool.len(), 2, "the refusal changed nothing");
    assert_eq!(started.load(Ordering::Relaxed), 2);

    // A session's end frees its slot.
    assert!(pool.release(1));
    assert!(!pool.release(1), "released once");
    assert_eq!(pool.len(), 1);
    pool.instance(3).unwrap();
    assert_eq!(pool.len(), 2);
}

#[tokio::test]
async fn releasing_stops_the_instance_and_stop_all_awaits_every_one() {
    let (pool, _) = pool(4, Arc::default());
    let stops: Vec<CancellationToken> = (1..=3)
        .map(|s| {
            pool.instance(s).unwrap();
            pool.lock().by_session[&s].stop.clone()
        })
        .collect();
    pool.release(2);
    assert!(stops[1].is_cancelled());
    assert!(!stops[0].is_cancelled() && !stops[2].is_cancelled());

    pool.stop_all().await;
    assert!(stops.iter().all(CancellationToken::is_cancelled));
    assert_eq!(pool.len(), 0);
    let refused = pool.instance(9).err().expect("stopped");
    assert!(refused.to_string().contains("stopping"), "{refused}");
}

#[tokio::test]
async fn a_call_that_outlives_its_session_leaves_no_instance_behind() {
    let events = Arc::new(Recorder::default());
    events.ended.lock().unwrap().push(7);
    let (pool, started) = pool(4, events);
    let refused = pool.instance(7).err().expect("the session is gone");
    assert!(
        matches!(refused, UpstreamError::Cancelled { .. }),
        "{refused}"
    );
    assert_eq!(started.load(Ordering::Relaxed), 1);
    assert_eq!(pool.len(), 0, "started and stopped at once");
}

#[tokio::test(start_paused = true)]
async fn a_call_waits_for_its_starting_instance_until_its_deadline() {
    let fake = FakeUpstream::new("fx");
    let instance = UpstreamHandle::for_test("fx", Duration::from_secs(5), None);
    instance.set_state(UpstreamState::Starting);
    let later = instance.clone();
    let conn = fake.conn.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        later.replace_connection(Some(conn));
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let got = connection_of(&instance, deadline).await.unwrap();
    assert!(Arc::ptr_eq(&got, &fake.conn));

    // One that never comes up fails at the deadline, saying why.
    let stuck = UpstreamHandle::for_test("fx", Duration::from_secs(5), None);
    stuck.set_state(UpstreamState::Starting);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let refused = connection_of(&stuck, deadline).await.err().unwrap();
    assert!(refused.to_string().contains("starting"), "{refused}");
}

#[test]
fn an_instances_announcements_reach_its_session_alone() {
    let inner = Arc::new(Recorder::default());
    let events = SessionEvents::new(inner.clone(), 4);
    events.lists_changed(&[ListKind::Tools]);
    events.log_message("fx", None);
    events.resource_updated("fx", "file:///a");
    // Scoped calls meant for another session are dropped.
    events.lists_changed_for(5, &[ListKind::Tools]);
    let scoped = inner.scoped.lock().unwrap().clone();
    assert_eq!(scoped.len(), 3, "{scoped:?}");
    assert!(
        scoped.iter().all(|(session, _)| *session == 4),
        "{scoped:?}"
    );
    assert!(
        inner.lists.lock().unwrap().is_empty(),
        "nothing is broadcast"
    );
    assert!(inner.logs.lock().unwrap().is_empty());
    assert!(inner.updated.lock().unwrap().is_empty());

    assert_eq!(
        events.ask_client(5, &Method::RootsList, None).err(),
        Some(AskRefused::SessionGone)
    );
    assert!(events.ask_client(4, &Method::RootsList, None).is_ok());
}
