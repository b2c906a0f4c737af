//! Unit tests of session expiry by the sweeper task, on tokio's paused
//! clock: an idle session is closed once `idle_timeout` has passed (and
//! not before), an open notification stream keeps a session, its idle
//! time starts when the stream closes, a request (`touch`) restarts the
//! clock, and the sweeper stops at shutdown.

use std::time::Duration;

use super::*;
use crate::config::SessionConfig;

const IDLE: Duration = Duration::from_secs(60);
/// How often the sweeper looks: a quarter of the idle timeout.
const PERIOD: Duration = Duration::from_secs(15);

struct Swept {
    table: Arc<SessionTable>,
    hub: Arc<NotifyHub>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

/// A table with its sweeper running.
fn swept() -> Swept {
    let hub = Arc::new(NotifyHub::new(Arc::default()));
    let config = SessionConfig {
        idle_timeout: IDLE,
        max: 100,
        max_per_client: 100,
    };
    let table = Arc::new(SessionTable::new(hub.clone(), &config));
    let (shutdown, tracker) = (CancellationToken::new(), TaskTracker::new());
    table.spawn_sweeper(shutdown.clone(), &tracker);
    Swept {
        table,
        hub,
        shutdown,
        tracker,
    }
}

fn create(table: &SessionTable) -> Arc<Session> {
    table.create(None, None, None, None, None).expect("room")
}

/// Lets the clock run (the sweeper with it) until `n` sessions are left;
/// fails after a virtual day.
async fn until_count(table: &SessionTable, n: usize) {
    let mut count = table.watch_count();
    let left = count.wait_for(|left| *left == n);
    tokio::time::timeout(Duration::from_secs(86_400), left)
        .await
        .unwrap_or_else(|_| panic!("{} sessions left after a day, not {n}", table.len()))
        .expect("the table lives");
}

#[tokio::test(start_paused = true)]
async fn the_sweeper_closes_a_session_once_it_has_been_idle_for_the_timeout() {
    let swept = swept();
    let session = create(&swept.table);
    let created = Instant::now();
    assert_eq!(swept.hub.subscriber_count(), 1);

    for _ in 0..59 {
        tokio::time::advance(Duration::from_secs(1)).await;
    }
    assert!(!session.closed.is_cancelled(), "not before the timeout");
    assert_eq!(swept.table.len(), 1);

    until_count(&swept.table, 0).await;
    let idle_for = created.elapsed();
    assert!(idle_for >= IDLE, "closed after {idle_for:?}");
    assert!(idle_for <= IDLE + PERIOD, "closed after {idle_for:?}");
    assert!(session.closed.is_cancelled());
    assert_eq!(
        swept.hub.subscriber_count(),
        0,
        "its subscriber left the hub"
    );
    assert!(swept.table.touch(&session.id).is_none());
}

#[tokio::test(start_paused = true)]
async fn an_open_stream_keeps_a_session_and_idle_time_starts_when_it_closes() {
    let swept = swept();
    let session = create(&swept.table);
    let stream = swept.table.open_stream(&session);

    let mut count = swept.table.watch_count();
    let an_hour = tokio::time::timeout(Duration::from_secs(3_600), count.wait_for(|n| *n == 0));
    assert!(an_hour.await.is_err(), "an hour of sweeps left it alone");
    assert!(!session.closed.is_cancelled());

    drop(stream);
    let released = Instant::now();
    until_count(&swept.table, 0).await;
    let idle_for = released.elapsed();
    assert!(
        (IDLE..=IDLE + PERIOD).contains(&idle_for),
        "closed {idle_for:?} after its stream"
    );
    assert!(session.closed.is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn a_request_restarts_the_idle_clock() {
    let swept = swept();
    let used = create(&swept.table);
    let unused = create(&swept.table);
    let created = Instant::now();

    tokio::time::advance(Duration::from_secs(45)).await;
    assert!(swept.table.touch(&used.id).is_some());

    until_count(&swept.table, 1).await;
    assert!(unused.closed.is_cancelled());
    assert!(
        !used.closed.is_cancelled(),
        "the one used later is still there"
    );

    until_count(&swept.table, 0).await;
    let lived = created.elapsed();
    let expected = Duration::from_secs(45) + IDLE;
    assert!(
        (expected..=expected + PERIOD).contains(&lived),
        "closed {lived:?} after creation"
    );
}

#[tokio::test(start_paused = true)]
async fn the_sweeper_stops_at_shutdown() {
    let swept = swept();
    swept.shutdown.cancel();
    swept.tracker.close();
    swept.tracker.wait().await;

    let session = create(&swept.table);
    tokio::time::sleep(IDLE * 10).await;
    assert!(!session.closed.is_cancelled(), "nobody sweeps any more");
    assert_eq!(swept.table.len(), 1);
    // Expiry itself still works when asked for.
    assert_eq!(swept.table.expire_idle(), 1);
}
