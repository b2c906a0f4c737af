//! Tasks across replicas: two replicas with one config and one sealing key
//! in front of a shared HTTP upstream that makes tasks (a third gateway
//! over the conformance fixture, a 2026-07-28 server with the tasks
//! extension). A task made through one replica is polled, cancelled and
//! read through the other by its creator, and stays unknown to another
//! client on either.

use serde_json::{Value, json};

use super::{Replica, SHARED_KEY};
use crate::support::gateway::{fixture_upstream, with_auth_off};
use crate::support::tempdir;
use crate::tasks::{ALICE_KEY, BOB_KEY, Stateless, error_code};

/// The shared upstream: a gateway over the modern conformance fixture.
fn upstream_config() -> std::path::PathBuf {
    let path = tempdir().join("upstream.yaml");
    let yaml = format!(
        "upstreams:\n{}",
        fixture_upstream("modern", &["--conformance", "--modern-only"])
    );
    std::fs::write(&path, with_auth_off(&yaml)).unwrap();
    path
}

/// The replicas' config: two clients, the shared upstream, the shared key.
fn replica_config(upstream: &Replica) -> std::path::PathBuf {
    let path = tempdir().join("replica.yaml");
    let yaml = format!(
        "auth:\n  mode: on\n  api_keys:\n    - client: alice\n      key: {ALICE_KEY}\n    - client: bob\n      key: {BOB_KEY}\nupstreams:\n  shared:\n    url: {:?}\nrequest_state:\n  key: {SHARED_KEY:?}\n",
        upstream.url
    );
    std::fs::write(&path, yaml).unwrap();
    path
}

#[tokio::test]
async fn a_task_made_on_one_replica_is_its_creators_on_every_replica() {
    let upstream = Replica::start(&upstream_config(), 1).await;
    let path = replica_config(&upstream);
    let a = Replica::start(&path, 1).await;
    let b = Replica::start(&path, 1).await;
    let alice = [
        Stateless::new(&a.url, ALICE_KEY),
        Stateless::new(&b.url, ALICE_KEY),
    ];
    let bob = [
        Stateless::new(&a.url, BOB_KEY),
        Stateless::new(&b.url, BOB_KEY),
    ];
    let tool = "shared__modern__slow_compute";

    // Made on A, seen on B by its creator only.
    let long = alice[0]
        .result(
            "tools/call",
            json!({ "name": tool, "arguments": { "seconds": 60, "label": "long" } }),
        )
        .await;
    assert_eq!(long["resultType"], "task", "{long}");
    let long_id = long["taskId"].as_str().unwrap().to_owned();
    assert!(long_id.starts_with("shared."), "{long_id}");
    let on_b = alice[1]
        .result("tasks/get", json!({ "taskId": long_id }))
        .await;
    assert_eq!(on_b["taskId"], long_id.as_str(), "{on_b}");
    assert_eq!(on_b["status"], "working", "{on_b}");
    for client in &bob {
        let refused = client
            .request("tasks/get", json!({ "taskId": long_id }))
            .await;
        assert_eq!(error_code(&refused), -32602, "{refused}");
    }

    // Cancelled on B; A, which made it, sees the upstream's new status.
    let cancelled = alice[1]
        .result("tasks/cancel", json!({ "taskId": long_id }))
        .await;
    assert_eq!(cancelled["resultType"], "complete", "{cancelled}");
    let on_a = alice[0]
        .poll(&long_id, |t: &Value| t["status"] != "working")
        .await;
    assert_eq!(on_a["status"], "cancelled", "{on_a}");

    // Made on B, polled to its end on A (which never saw it made).
    let short = alice[1]
        .result(
            "tools/call",
            json!({ "name": tool, "arguments": { "seconds": 0.1, "label": "short" } }),
        )
        .await;
    let short_id = short["taskId"].as_str().unwrap().to_owned();
    let done = alice[0]
        .poll(&short_id, |t: &Value| t["status"] != "working")
        .await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["taskId"], short_id.as_str(), "{done}");
    assert_eq!(
        done["result"]["content"][0]["text"], "computed short",
        "{done}"
    );

    // An id sealed with another key, or altered, is unknown as any other.
    let mut altered = short_id.clone();
    altered.pop();
    altered.push(if short_id.ends_with('A') { 'B' } else { 'A' });
    let refused = alice[1]
        .request("tasks/get", json!({ "taskId": altered }))
        .await;
    assert_eq!(error_code(&refused), -32602, "{refused}");
}
