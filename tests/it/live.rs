//! Live changes: the notification stream, list_changed fan-out, per-URI
//! subscriptions, supervision and slow consumers, against the test
//! fixture's controls.

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::support::{McpClient, TestGateway, read_jsonl, tempdir, within};
use mcpmux::UpstreamState;
use mcpmux::limits::{MESSAGE_CAPACITY, REPLAY_CAPACITY};

const README: &str = "alpha+demo://alpha/readme";
const STATUS: &str = "alpha+demo://alpha/status";

async fn touch(client: &McpClient, upstream_uri: &str) {
    let touched = client
        .call_tool("alpha__touch", json!({ "uri": upstream_uri }))
        .await;
    assert!(touched.get("error").is_none(), "{touched}");
}

fn count(log: &[Value], method: &str, uri: &str) -> usize {
    log.iter()
        .filter(|m| m["method"] == method && m["params"]["uri"] == uri)
        .count()
}

#[tokio::test]
async fn two_sessions_share_one_upstream_subscription_until_both_leave() {
    let record = tempdir().join("alpha.jsonl");
    let gw = TestGateway::with_fixtures(
        // Short enough to watch B expire, long enough that no session
        // idles out between its own requests on a loaded machine.
        "sessions:\n  idle_timeout: 2s",
        &[(
            "alpha",
            &["--test-controls", "--record", record.to_str().unwrap()],
        )],
    )
    .await;
    let a = McpClient::connect(&gw.url).await;
    let b = McpClient::connect(&gw.url).await;
    let mut a_events = a.listen(None).await;
    let mut b_events = b.listen(None).await;
    a.subscribe(README).await;
    b.subscribe(README).await;
    a.subscribe(STATUS).await;

    touch(&a, "demo://alpha/readme").await;
    for events in [&mut a_events, &mut b_events] {
        let update = events.next_skipping_list_changed().await.unwrap();
        assert_eq!(update["method"], "notifications/resources/updated");
        assert_eq!(update["params"]["uri"], README);
    }

    // After A unsubscribes only B hears about the readme. A's next update is
    // the status one that was touched later, so no readme update was queued.
    a.result("resources/unsubscribe", json!({ "uri": README }))
        .await;
    touch(&a, "demo://alpha/readme").await;
    touch(&a, "demo://alpha/status").await;
    assert_eq!(
        b_events.next_skipping_list_changed().await.unwrap()["params"]["uri"],
        README
    );
    assert_eq!(
        a_events.next_skipping_list_changed().await.unwrap()["params"]["uri"],
        STATUS
    );

    // A leaves by DELETE, B by idle expiry once its stream closes.
    let mut sessions = gw.gateway().watch_sessions();
    assert_eq!(a.delete().await, reqwest::StatusCode::OK);
    drop(b_events);
    within("B to expire", sessions.wait_for(|n| *n == 0))
        .await
        .unwrap();
    assert_eq!(gw.gateway().stats().subscriptions, 0);

    // A round trip on the same pipe orders after the unsubscribes.
    let c = McpClient::connect(&gw.url).await;
    c.call_tool("alpha__echo", json!({ "message": "sync" }))
        .await;
    let log = read_jsonl(&record);
    assert_eq!(
        count(&log, "resources/subscribe", "demo://alpha/readme"),
        1,
        "one upstream subscription"
    );
    assert_eq!(
        count(&log, "resources/unsubscribe", "demo://alpha/readme"),
        1,
        "one upstream unsubscription"
    );
    assert_eq!(
        count(&log, "resources/unsubscribe", "demo://alpha/status"),
        1
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_subscriber_of_one_uri_never_hears_of_another() {
    let gw = TestGateway::with_fixtures("", &[("alpha", &["--test-controls"])]).await;
    let a = McpClient::connect(&gw.url).await;
    let b = McpClient::connect(&gw.url).await;
    let mut a_events = a.listen(None).await;
    let mut b_events = b.listen(None).await;
    a.subscribe(README).await;
    b.subscribe(STATUS).await;
    touch(&a, "demo://alpha/readme").await;
    touch(&a, "demo://alpha/status").await;
    assert_eq!(
        a_events.next_skipping_list_changed().await.unwrap()["params"]["uri"],
        README
    );
    // B's first update is its own URI, although the readme was touched first.
    assert_eq!(
        b_events.next_skipping_list_changed().await.unwrap()["params"]["uri"],
        STATUS
    );
    gw.stop().await;
}

#[tokio::test]
async fn list_changes_reach_every_session_and_bursts_coalesce() {
    let gw = TestGateway::with_fixtures("", &[("alpha", &["--test-controls"])]).await;
    let a = McpClient::connect(&gw.url).await;
    let b = McpClient::connect(&gw.url).await;
    let mut streams = vec![a.listen(None).await, b.listen(None).await];

    // 100 upstream tools/list_changed, then one prompts/list_changed as a marker.
    a.call_tool(
        "alpha__add_tools",
        json!({ "count": 100, "prefix": "burst_" }),
    )
    .await;
    a.call_tool("alpha__add_prompt", json!({ "name": "marker" }))
        .await;
    for events in &mut streams {
        let mut tool_changes = 0;
        loop {
            let message = events.next().await.expect("stream open");
            match message["method"].as_str().unwrap() {
                "notifications/tools/list_changed" => tool_changes += 1,
                "notifications/prompts/list_changed" => break,
                other => panic!("unexpected {other}"),
            }
        }
        assert!(
            (1..=3).contains(&tool_changes),
            "{tool_changes} tools/list_changed for a burst of 100"
        );
    }
    let (tools, _) = a.list_all("tools/list", "tools").await;
    let added = tools
        .iter()
        .filter(|t| t["name"].as_str().unwrap().starts_with("alpha__burst_"))
        .count();
    assert_eq!(added, 100);
    let (prompts, _) = b.list_all("prompts/list", "prompts").await;
    assert!(prompts.iter().any(|p| p["name"] == "alpha__marker"));
    gw.stop().await;
}

#[tokio::test]
async fn a_killed_upstream_restarts_and_its_subscribers_keep_receiving() {
    let record = tempdir().join("alpha.jsonl");
    let gw = TestGateway::with_fixtures(
        "",
        &[
            (
                "alpha",
                &["--test-controls", "--record", record.to_str().unwrap()],
            ),
            ("beta", &[]),
        ],
    )
    .await;
    let client = McpClient::connect(&gw.url).await;
    let mut events = client.listen(None).await;
    client.subscribe(README).await;
    let alpha = gw.gateway().upstream("alpha").unwrap();
    let mut state = alpha.watch_state();

    let call = json!({ "name": "alpha__slow", "arguments": { "steps": 500, "interval_ms": 20 }, "_meta": { "progressToken": 1 } });
    let mut slow = client.open_stream(json!(1), "tools/call", call).await;
    slow.next().await.unwrap();
    let pid = nix::unistd::Pid::from_raw(alpha.pid().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    let mut failed = Value::Null;
    while let Some(message) = slow.next().await {
        failed = message;
    }
    assert_eq!(failed["error"]["code"], -32050, "{failed}");

    // Its tools leave the view and every session hears of it.
    assert_eq!(
        events.next().await.unwrap()["method"],
        "notifications/tools/list_changed"
    );
    within(
        "alpha to restart",
        state.wait_for(|s| *s == UpstreamState::Ready),
    )
    .await
    .unwrap();
    assert_eq!(alpha.restarts(), 1);

    // The subscription was re-established upstream without the client acting.
    touch(&client, "demo://alpha/readme").await;
    let update = events.next_skipping_list_changed().await.unwrap();
    assert_eq!(
        (update["method"].as_str(), update["params"]["uri"].as_str()),
        (Some("notifications/resources/updated"), Some(README))
    );
    let log = read_jsonl(&record);
    assert_eq!(
        count(&log, "resources/subscribe", "demo://alpha/readme"),
        2,
        "once per life of the child"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_session_that_never_reads_delays_nobody_and_stays_bounded() {
    let gw = TestGateway::with_fixtures("", &[("alpha", &["--test-controls"])]).await;
    let stalled = McpClient::connect(&gw.url).await;
    let reader = McpClient::connect(&gw.url).await;
    stalled.set_level("debug").await;
    reader.set_level("debug").await;

    // The stalled client opens its stream over a raw socket and never reads it.
    let addr = gw
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let mut socket = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let request = format!(
        "GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nMcp-Session-Id: {}\r\n\r\n",
        stalled.session
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut events = reader.listen(None).await;

    // ~16 MB of log notifications: far more than the stalled socket buffers.
    let message = "x".repeat(2000);
    let flood = reader
        .call_tool(
            "alpha__log",
            json!({ "level": "info", "count": 8000, "message": message }),
        )
        .await;
    assert!(flood.get("error").is_none(), "{flood}");
    let last = format!("{message} 7999");
    within("the reading client to get the last message", async {
        loop {
            let event = events.next().await.expect("stream open");
            if event["params"]["data"] == last.as_str() {
                break;
            }
        }
    })
    .await;

    let backlogs = gw.gateway().stats().backlogs;
    assert_eq!(backlogs.len(), 2);
    let stalled_backlog = backlogs.iter().max_by_key(|b| b.dropped).unwrap();
    assert!(
        stalled_backlog.dropped > 0,
        "the stalled client's oldest messages were dropped: {backlogs:?}"
    );
    for backlog in &backlogs {
        assert!(backlog.pending <= MESSAGE_CAPACITY + 3, "{backlog:?}");
        assert!(backlog.replay <= REPLAY_CAPACITY, "{backlog:?}");
    }
    drop(socket);
    gw.stop().await;
}

#[tokio::test]
async fn last_event_id_replays_missed_events_and_nothing_twice() {
    let gw = TestGateway::with_fixtures("", &[("alpha", &["--test-controls"])]).await;
    let client = McpClient::connect(&gw.url).await;
    client.set_level("info").await;
    let mut events = client.listen(None).await;
    client
        .call_tool("alpha__log", json!({ "count": 3, "message": "first" }))
        .await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(events.next_event().await.unwrap());
    }
    let ids: Vec<u64> = seen.iter().map(|(id, _)| id.unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    drop(events);

    // Resume after the first: the two later events come again, then live ones once.
    let mut resumed = client.listen(Some(ids[0])).await;
    assert_eq!(resumed.next_event().await.unwrap(), seen[1]);
    assert_eq!(resumed.next_event().await.unwrap(), seen[2]);
    client
        .call_tool("alpha__log", json!({ "count": 2, "message": "second" }))
        .await;
    let (id4, m4) = resumed.next_event().await.unwrap();
    let (id5, m5) = resumed.next_event().await.unwrap();
    assert_eq!(
        (m4["params"]["data"].as_str(), m5["params"]["data"].as_str()),
        (Some("second 0"), Some("second 1"))
    );
    assert!(id4.unwrap() > ids[2] && id5.unwrap() > id4.unwrap());
    assert_eq!(m4["params"]["logger"], "alpha/example");
    gw.stop().await;
}

#[tokio::test]
async fn log_messages_follow_each_sessions_level() {
    let gw = TestGateway::with_fixtures("", &[("alpha", &["--test-controls"])]).await;
    let verbose = McpClient::connect(&gw.url).await;
    let quiet = McpClient::connect(&gw.url).await;
    verbose.set_level("debug").await;
    quiet.set_level("error").await;
    let mut verbose_events = verbose.listen(None).await;
    let mut quiet_events = quiet.listen(None).await;
    verbose
        .call_tool(
            "alpha__log",
            json!({ "level": "debug", "message": "detail" }),
        )
        .await;
    verbose
        .call_tool(
            "alpha__log",
            json!({ "level": "error", "message": "broken" }),
        )
        .await;
    assert_eq!(
        verbose_events.next().await.unwrap()["params"]["data"],
        "detail 0"
    );
    assert_eq!(
        verbose_events.next().await.unwrap()["params"]["data"],
        "broken 0"
    );
    assert_eq!(
        quiet_events.next().await.unwrap()["params"]["data"],
        "broken 0"
    );
    let bad = verbose
        .request("logging/setLevel", json!({ "level": "loud" }))
        .await;
    assert_eq!(bad["error"]["code"], -32602);
    gw.stop().await;
}

#[tokio::test]
async fn subscribing_where_the_upstream_cannot_is_a_clear_error() {
    let record = tempdir().join("plain.jsonl");
    let gw = TestGateway::with_fixtures(
        "",
        &[
            ("alpha", &[]),
            (
                "plain",
                &["--no-subscribe", "--record", record.to_str().unwrap()],
            ),
        ],
    )
    .await;
    let client = McpClient::connect(&gw.url).await;
    let refused = client
        .request(
            "resources/subscribe",
            json!({ "uri": "plain+demo://plain/readme" }),
        )
        .await;
    assert_eq!(refused["error"]["code"], -32601, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("plain") && message.contains("resources/subscribe"),
        "{message}"
    );
    assert_eq!(
        gw.gateway().stats().subscriptions,
        0,
        "nothing left in the table"
    );

    let unknown = client
        .request("resources/subscribe", json!({ "uri": "nosuch+demo://x" }))
        .await;
    assert_eq!(unknown["error"]["code"], -32002);
    let missing = client.request("resources/subscribe", json!({})).await;
    assert_eq!(missing["error"]["code"], -32602);
    client.subscribe(README).await;
    // The refused subscription never reached the upstream that cannot take it.
    client
        .call_tool("plain__echo", json!({ "message": "sync" }))
        .await;
    assert!(
        read_jsonl(&record)
            .iter()
            .all(|m| m["method"] != "resources/subscribe")
    );
    gw.stop().await;
}
