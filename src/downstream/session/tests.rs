//! Unit tests of the session table's limits: eviction of the least recently
//! used idle session, per-client caps, and refusal when everyone is busy.
//! Time is tokio's paused clock, advanced by hand.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use super::*;
use crate::config::SessionConfig;

fn table(max: usize, max_per_client: usize) -> Arc<SessionTable> {
    let hub = Arc::new(NotifyHub::new(Arc::default()));
    Arc::new(SessionTable::new(
        hub,
        &SessionConfig {
            idle_timeout: Duration::from_secs(60),
            max,
            max_per_client,
        },
    ))
}

const A: Option<IpAddr> = Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
const B: Option<IpAddr> = Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));

/// Creates a session for `client` one millisecond after the previous one.
async fn create(table: &SessionTable, client: Option<IpAddr>) -> Arc<Session> {
    tokio::time::advance(Duration::from_millis(1)).await;
    table
        .create(None, None, client, None, None)
        .expect("room for a session")
}

#[tokio::test(start_paused = true)]
async fn a_full_table_evicts_its_least_recently_used_idle_session() {
    let table = table(3, 100);
    let first = create(&table, A).await;
    let second = create(&table, B).await;
    let third = create(&table, A).await;
    // The first is used again: the second is now the least recently used.
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(table.touch(&first.id).is_some());

    let fourth = create(&table, B).await;
    assert_eq!(table.len(), 3);
    assert!(
        table.touch(&second.id).is_none(),
        "the LRU session was evicted"
    );
    assert!(second.closed.is_cancelled());
    for kept in [&first, &third, &fourth] {
        assert!(table.touch(&kept.id).is_some());
    }
    assert_eq!(table.evicted(), 1);
}

#[tokio::test(start_paused = true)]
async fn busy_sessions_are_never_evicted_and_a_busy_table_refuses() {
    let table = table(2, 100);
    let streaming = create(&table, A).await;
    let _stream = table.open_stream(&streaming);
    let idle = create(&table, B).await;
    // The idle one goes even though the streaming one is older.
    let newer = create(&table, B).await;
    assert!(table.touch(&idle.id).is_none());
    assert!(table.touch(&streaming.id).is_some());

    let _second_stream = table.open_stream(&newer);
    let refused = table.create(None, None, A, None, None);
    assert!(matches!(refused, Err(TooManySessions::Table(2))));
    assert_eq!(table.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn one_client_at_its_cap_recycles_its_own_sessions_only() {
    let table = table(100, 2);
    let other = create(&table, B).await;
    let oldest = create(&table, A).await;
    let _newer = create(&table, A).await;
    let third = create(&table, A).await;
    assert!(table.touch(&oldest.id).is_none(), "A's oldest made room");
    assert!(table.touch(&other.id).is_some(), "B's session is untouched");
    assert!(table.touch(&third.id).is_some());

    // With both of A's sessions busy, A is refused, and B is not.
    let mut streams = Vec::new();
    for id in [_newer.id.clone(), third.id.clone()] {
        streams.push(table.open_stream(&table.touch(&id).unwrap()));
    }
    assert!(matches!(
        table.create(None, None, A, None, None),
        Err(TooManySessions::Client(2))
    ));
    assert!(table.create(None, None, B, None, None).is_ok());
    // Closing a session frees its place in the client's count.
    assert!(table.close(&other.id, CloseReason::Deleted));
    assert_eq!(
        table.per_client.get("address 10.0.0.2").map(|n| *n),
        Some(1)
    );
}

#[tokio::test(start_paused = true)]
async fn idle_sessions_expire_and_streams_keep_them_alive() {
    let table = table(10, 10);
    let idle = create(&table, A).await;
    let watched = create(&table, A).await;
    let _stream = table.open_stream(&watched);
    tokio::time::advance(Duration::from_secs(61)).await;
    assert_eq!(table.expire_idle(), 1);
    assert!(table.touch(&idle.id).is_none());
    assert!(table.touch(&watched.id).is_some());
    assert!(
        table
            .per_client
            .get("address 10.0.0.1")
            .is_some_and(|n| *n == 1)
    );
}
