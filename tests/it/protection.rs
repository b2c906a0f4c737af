//! Upstreams that struggle, with real children: a stalled upstream
//! saturated next to a fast one (its cap, its queue, the fair share per
//! client, HTTP 503 for 2026-07-28 requests), the circuit breaker opening
//! and closing again, and a plain `tools/call` never sent twice.

use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::support::{
    McpClient, TestGateway, example_upstream, fixture_upstream, read_jsonl, tempdir, within,
};

/// `http://127.0.0.1:PORT` of a gateway under test.
fn base(gw: &TestGateway) -> String {
    gw.url.trim_end_matches("/mcp").to_owned()
}

async fn get_json(url: &str) -> (reqwest::StatusCode, Value) {
    let response = reqwest::get(url).await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap())
}

/// `/status`'s entry for `name`.
async fn upstream_status(gw: &TestGateway, name: &str) -> Value {
    let (_, status) = get_json(&format!("{}/status", base(gw))).await;
    status["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no upstream {name} in {status}"))
}

/// Polls `/status` until `name`'s entry satisfies `done`.
async fn wait_status(
    gw: &TestGateway,
    name: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    within(what, async {
        loop {
            let status = upstream_status(gw, name).await;
            if done(&status) {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// The value of one metric line (`name{labels}`), 0 when absent.
async fn metric(gw: &TestGateway, series: &str) -> f64 {
    let text = reqwest::get(format!("{}/metrics", base(gw)))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

/// A call that hangs at the stalled upstream, in a task.
fn hang(client: &std::sync::Arc<McpClient>, n: usize) -> tokio::task::JoinHandle<Value> {
    let client = client.clone();
    tokio::spawn(async move {
        client
            .call_tool("slow__echo", json!({ "message": format!("hang {n}") }))
            .await
    })
}

fn assert_saturated(answer: &Value, says: &str) {
    assert_eq!(answer["error"]["code"], -32053, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("upstream 'slow' is saturated"),
        "{message}"
    );
    assert!(message.contains(says), "{message}");
    assert_eq!(answer["error"]["data"]["upstream"], "slow", "{answer}");
}

#[tokio::test]
async fn a_stalled_upstream_is_saturated_alone_and_one_client_cannot_take_every_slot() {
    // Calls to the stalled upstream never end on their own during the test
    // (a long timeout, no pings): only the limits decide.
    let yaml = format!(
        "upstreams:\n{}    timeout: 5m\n    health: {{ ping_interval: 1h }}\n    limits: {{ max_in_flight: 4, max_queued: 2, queue_timeout: 5m }}\n{}",
        fixture_upstream("slow", &["--test-controls"]),
        example_upstream("fast", &[]),
    );
    let gw = TestGateway::start(&yaml).await;
    let flood = std::sync::Arc::new(McpClient::connect(&gw.url).await);
    let other = std::sync::Arc::new(McpClient::connect(&gw.url).await);
    flood.call_tool("slow__stall", json!({})).await;

    // The flooding client gets three of the four slots (its fair share)...
    let mut hanging: Vec<_> = (0..3).map(|n| hang(&flood, n)).collect();
    wait_status(&gw, "slow", "3 calls in flight", |u| {
        u["protection"]["limits"]["inFlight"] == 3
    })
    .await;
    // ... and then waits in the queue, though a slot is free ...
    hanging.extend((3..5).map(|n| hang(&flood, n)));
    wait_status(&gw, "slow", "2 calls queued", |u| {
        u["protection"]["limits"]["queued"] == 2
    })
    .await;
    // ... and beyond the queue, it is refused at once.
    let refused = flood
        .call_tool("slow__echo", json!({ "message": "one more" }))
        .await;
    assert_saturated(&refused, "(limits.max_queued 2)");

    // The other client still gets the slot left.
    hanging.push(hang(&other, 5));
    let status = wait_status(&gw, "slow", "the 4th slot taken", |u| {
        u["protection"]["limits"]["inFlight"] == 4
    })
    .await;
    assert_eq!(status["protection"]["limits"]["perClient"], 3, "{status}");
    let refused = other
        .call_tool("slow__echo", json!({ "message": "no room" }))
        .await;
    assert_saturated(&refused, "4 requests in flight (limits.max_in_flight 4)");

    // Calls to the other upstream are unaffected while the stall lasts.
    for client in [&flood, &other] {
        for n in 0..5 {
            let message = format!("fast {n}");
            let call = client.call_tool("fast__echo", json!({ "message": message }));
            let echo = within("an echo from the fast upstream", call).await;
            assert_eq!(echo["result"]["content"][0]["text"], message, "{echo}");
        }
    }

    // A 2026-07-28 request gets HTTP 503 with Retry-After.
    let body = json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "slow__echo", "arguments": { "message": "modern" },
        "_meta": { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} } } });
    let modern = crate::support::client::post(
        &reqwest::Client::new(),
        &gw.url,
        None,
        &body.to_string(),
        &[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "slow__echo"),
        ],
    )
    .await;
    assert_eq!(
        modern.status,
        reqwest::StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        modern.body
    );
    assert_eq!(modern.headers["retry-after"], "1", "{:?}", modern.headers);
    assert_saturated(&modern.json(), "limits.max_queued 2");

    // /status and /metrics count it all.
    let status = upstream_status(&gw, "slow").await;
    assert_eq!(
        status["protection"]["limits"]["rejected"]["queueFull"], 3,
        "{status}"
    );
    assert_eq!(
        metric(
            &gw,
            r#"mcpmux_upstream_rejections_total{upstream="slow",reason="queue_full"}"#
        )
        .await,
        3.0
    );
    assert_eq!(
        metric(&gw, r#"mcpmux_upstream_in_flight{upstream="slow"}"#).await,
        4.0
    );
    assert_eq!(
        metric(&gw, r#"mcpmux_upstream_queued{upstream="slow"}"#).await,
        2.0
    );
    assert_eq!(
        metric(&gw, r#"mcpmux_upstream_in_flight{upstream="fast"}"#).await,
        0.0
    );

    for task in &hanging {
        task.abort();
    }
    gw.stop().await;
}

#[tokio::test]
async fn the_breaker_opens_after_timeouts_fails_fast_and_closes_once_the_upstream_recovers() {
    let yaml = format!(
        "upstreams:\n{}    timeout: 1s\n    required: true\n    health: {{ ping_interval: 1h }}\n    circuit_breaker: {{ failures: 2, cooldown: 1s }}\n{}",
        fixture_upstream("slow", &["--test-controls"]),
        example_upstream("fast", &[]),
    );
    let gw = TestGateway::start(&yaml).await;
    let client = McpClient::connect(&gw.url).await;
    let before = upstream_status(&gw, "slow").await;
    assert_eq!(
        before["protection"]["circuitBreaker"]["state"], "closed",
        "{before}"
    );
    client.call_tool("slow__stall", json!({})).await;

    // Two timeouts in a row open it.
    for n in 0..2 {
        let answer = client
            .call_tool("slow__echo", json!({ "message": n }))
            .await;
        assert_eq!(answer["error"]["code"], -32051, "{answer}");
    }
    let open = upstream_status(&gw, "slow").await;
    assert_eq!(
        open["protection"]["circuitBreaker"]["state"], "open",
        "{open}"
    );
    assert_eq!(open["reason"], "its circuit breaker is open", "{open}");
    // While open, calls fail at once saying so and when it is tried again.
    let refused = client
        .call_tool("slow__echo", json!({ "message": "refused" }))
        .await;
    assert_eq!(refused["error"]["code"], -32054, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("upstream 'slow' is not being called: its circuit breaker is open after 2 consecutive failures"), "{message}");
    assert!(message.contains("no answer within 1s"), "{message}");
    assert!(message.contains("it will be tried again in"), "{message}");
    assert!(
        refused["error"]["data"]["retryAfterMs"].as_u64().unwrap() <= 1000,
        "{refused}"
    );
    assert_eq!(
        metric(
            &gw,
            r#"mcpmux_upstream_circuit_state{upstream="slow",state="open"}"#
        )
        .await,
        1.0
    );
    assert!(
        metric(
            &gw,
            r#"mcpmux_upstream_rejections_total{upstream="slow",reason="circuit_open"}"#
        )
        .await
            >= 1.0
    );
    // A required upstream with an open breaker holds readiness.
    let (ready, _) = get_json(&format!("{}/readyz", base(&gw))).await;
    assert_eq!(ready, reqwest::StatusCode::SERVICE_UNAVAILABLE);
    // The other upstream never noticed.
    let echo = client
        .call_tool("fast__echo", json!({ "message": "fine" }))
        .await;
    assert_eq!(echo["result"]["content"][0]["text"], "fine", "{echo}");

    // The upstream recovers (its stalled child is replaced)...
    let pid = before["pid"].as_u64().unwrap() as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    wait_status(&gw, "slow", "a new child", |u| {
        u["state"] == "ready" && u["pid"] != before["pid"]
    })
    .await;
    // ... and after the cool-down, probe calls close the breaker.
    let mut passed = 0;
    within("the breaker to close", async {
        while passed < 2 {
            let answer = client
                .call_tool("slow__echo", json!({ "message": "probe" }))
                .await;
            match answer["error"]["code"].as_i64() {
                None => passed += 1,
                Some(-32054) => tokio::time::sleep(Duration::from_millis(50)).await,
                Some(_) => panic!("{answer}"),
            }
        }
    })
    .await;
    let closed = upstream_status(&gw, "slow").await;
    assert_eq!(
        closed["protection"]["circuitBreaker"]["state"], "closed",
        "{closed}"
    );
    assert_eq!(
        closed["protection"]["circuitBreaker"]["opened"], 1,
        "{closed}"
    );
    let (ready, _) = get_json(&format!("{}/readyz", base(&gw))).await;
    assert_eq!(ready, reqwest::StatusCode::OK);
    gw.stop().await;
}

#[tokio::test]
async fn a_tools_call_without_both_hints_is_never_sent_twice() {
    let record = tempdir().join("received.jsonl");
    let yaml = format!(
        "upstreams:\n{}{}",
        fixture_upstream(
            "alpha",
            &["--test-controls", "--record", record.to_str().unwrap()]
        ),
        example_upstream("beta", &[]),
    );
    let gw = TestGateway::start(&yaml).await;
    let before = upstream_status(&gw, "alpha").await;
    let client = McpClient::connect(&gw.url).await;
    let call = json!({ "name": "alpha__slow", "arguments": { "steps": 600, "interval_ms": 50 }, "_meta": { "progressToken": "k" } });
    let mut stream = client.open_stream(json!("once"), "tools/call", call).await;
    let first = stream.next().await.unwrap();
    assert_eq!(first["method"], "notifications/progress", "{first}");
    // The transport fails mid-call: the child is killed.
    let pid = before["pid"].as_u64().unwrap() as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    let mut last = first;
    // Bounded: at most 600 progress messages come before the end.
    while let Some(message) = stream.next().await {
        last = message;
    }
    assert_eq!(last["error"]["code"], -32050, "{last}");
    let message = last["error"]["message"].as_str().unwrap();
    assert!(message.contains("upstream 'alpha' failed"), "{message}");
    assert!(
        message.contains("not retried: it may have run already"),
        "{message}"
    );

    // The restarted child answers again, and never got the call a second time.
    wait_status(&gw, "alpha", "a new child", |u| {
        u["state"] == "ready" && u["pid"] != before["pid"]
    })
    .await;
    let echo = client
        .call_tool("alpha__echo", json!({ "message": "after" }))
        .await;
    assert_eq!(echo["result"]["content"][0]["text"], "after", "{echo}");
    let received = read_jsonl(&record);
    let slow_calls = received
        .iter()
        .filter(|m| m["method"] == "tools/call" && m["params"]["name"] == "slow")
        .count();
    assert!(
        received.iter().any(|m| m["params"]["name"] == "echo"),
        "the record holds both lives: {received:?}"
    );
    assert_eq!(slow_calls, 1, "{received:?}");
    let status = upstream_status(&gw, "alpha").await;
    assert_eq!(status["protection"]["retries"]["made"], 0, "{status}");
    gw.stop().await;
}

#[tokio::test]
async fn a_half_open_breaker_lets_two_probes_through_and_a_failed_probe_opens_it_again() {
    let yaml = format!(
        "upstreams:\n{}    timeout: 3s\n    health: {{ ping_interval: 1h }}\n    circuit_breaker: {{ failures: 1, cooldown: 300ms }}\n",
        fixture_upstream("slow", &["--test-controls"]),
    );
    let gw = TestGateway::start(&yaml).await;
    let client = std::sync::Arc::new(McpClient::connect(&gw.url).await);
    client.call_tool("slow__stall", json!({})).await;
    let timed_out = client
        .call_tool("slow__echo", json!({ "message": "late" }))
        .await;
    assert_eq!(timed_out["error"]["code"], -32051, "{timed_out}");
    wait_status(&gw, "slow", "the cool-down to end", |u| {
        u["protection"]["circuitBreaker"]["state"] == "half_open"
    })
    .await;

    // Two probes go through (and hang at the stalled upstream)...
    let probes: Vec<_> = (0..2).map(|n| hang(&client, n)).collect();
    wait_status(&gw, "slow", "two probes in flight", |u| {
        u["protection"]["limits"]["inFlight"] == 2
    })
    .await;
    // ... a third call is refused at once while they decide.
    let refused = client
        .call_tool("slow__echo", json!({ "message": "third" }))
        .await;
    assert_eq!(refused["error"]["code"], -32054, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("its circuit breaker is half-open: 2 probe requests are deciding"),
        "{message}"
    );
    let status = upstream_status(&gw, "slow").await;
    assert_eq!(
        status["protection"]["circuitBreaker"]["rejected"]["halfOpen"], 1,
        "{status}"
    );
    let series = r#"mcpmux_upstream_rejections_total{upstream="slow",reason="circuit_half_open"}"#;
    assert_eq!(metric(&gw, series).await, 1.0);

    // The probes time out: the breaker opens again.
    for probe in probes {
        let answer = within("a probe to time out", probe).await.unwrap();
        assert_eq!(answer["error"]["code"], -32051, "{answer}");
    }
    let status = upstream_status(&gw, "slow").await;
    let breaker = &status["protection"]["circuitBreaker"];
    assert_eq!(breaker["opened"], 2, "{status}");
    assert_eq!(breaker["lastFailure"], "no answer within 3s", "{status}");
    gw.stop().await;
}

#[tokio::test]
async fn reads_lost_with_a_crash_are_retried_within_the_retry_budget() {
    const READS: usize = 20;
    let record = tempdir().join("received.jsonl");
    let yaml = format!(
        "upstreams:\n{}    timeout: 2m\n    health: {{ ping_interval: 1h }}\n",
        fixture_upstream(
            "alpha",
            &["--test-controls", "--record", record.to_str().unwrap()]
        ),
    );
    let gw = TestGateway::start(&yaml).await;
    let before = upstream_status(&gw, "alpha").await;
    let client = std::sync::Arc::new(McpClient::connect(&gw.url).await);
    client.call_tool("alpha__stall", json!({})).await;
    // Reads wait at the stalled child (it no longer reads its input).
    let reads: Vec<_> = (0..READS)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .request(
                        "resources/read",
                        json!({ "uri": "alpha+demo://alpha/readme" }),
                    )
                    .await
            })
        })
        .collect();
    wait_status(&gw, "alpha", "every read in flight", |u| {
        u["protection"]["limits"]["inFlight"] == READS
    })
    .await;
    let pid = before["pid"].as_u64().unwrap() as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL).unwrap();

    let mut answered = 0;
    let mut refused = 0;
    for read in reads {
        let answer = within("a read to end", read).await.unwrap();
        if answer.get("result").is_some() {
            answered += 1;
            continue;
        }
        assert_eq!(answer["error"]["code"], -32050, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("not retried: the upstream's retry budget is spent"),
            "{message}"
        );
        refused += 1;
    }
    // Retries may add 20% of the recent requests (at least 3): a few of the
    // lost reads went again, the rest got the budget's error.
    assert!((3..READS / 2).contains(&answered), "{answered} retried");
    assert_eq!(answered + refused, READS);
    let status = upstream_status(&gw, "alpha").await;
    assert_eq!(
        status["protection"]["retries"]["made"], answered,
        "{status}"
    );
    assert_eq!(
        status["protection"]["retries"]["budgetExhausted"], refused,
        "{status}"
    );
    let series = r#"mcpmux_upstream_rejections_total{upstream="alpha",reason="retry_budget"}"#;
    assert_eq!(metric(&gw, series).await, refused as f64);
    assert_eq!(
        metric(&gw, r#"mcpmux_upstream_retries_total{upstream="alpha"}"#).await,
        answered as f64
    );
    // The new child got exactly the retried reads (the stalled one recorded none).
    let received = read_jsonl(&record);
    let reads_received = received
        .iter()
        .filter(|m| m["method"] == "resources/read")
        .count();
    assert_eq!(reads_received, answered, "{received:?}");
    // Lost together with one connection, they counted as one failure.
    assert_eq!(
        status["protection"]["circuitBreaker"]["state"], "closed",
        "{status}"
    );
    gw.stop().await;
}
