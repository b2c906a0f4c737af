//! The merged view and call routing, against the demo server and the test
//! fixture.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::support::{McpClient, TestGateway, read_jsonl, tempdir, within};

/// Whether `name` is acceptable to the strictest hosts: 1 to 64 ASCII
/// letters, digits, `_` or `-`. The gateway promises this of every tool
/// and prompt name it exposes.
pub(crate) fn is_valid_exposed_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn names(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn every_tool_of_a_paginated_upstream_appears_exactly_once() {
    let gw = TestGateway::with_fixtures(
        "page_size: 50",
        &[
            ("big", &["--tools", "250", "--page-size", "7"]),
            ("small", &[]),
        ],
    )
    .await;
    let client = McpClient::connect(&gw.url).await;
    let (tools, pages) = client.list_all("tools/list", "tools").await;
    let names = names(&tools);
    let unique: HashSet<&String> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "duplicates across pages");
    for i in 0..250 {
        let expected = format!("big__gen_{i:04}");
        assert!(unique.contains(&expected), "{expected} missing");
    }
    // 250 generated + 4 built-in tools on `big`, 4 on `small`.
    assert_eq!(names.len(), 258);
    assert_eq!(pages, 6, "258 tools at 50 per page");
    assert!(names.iter().all(|n| is_valid_exposed_name(n)));
    gw.stop().await;
}

#[tokio::test]
async fn two_sessions_with_the_same_request_ids_get_their_own_answers() {
    let gw = TestGateway::with_examples("", &[("alpha", &[])]).await;
    let a = McpClient::connect(&gw.url).await;
    let b = McpClient::connect(&gw.url).await;
    let mut tasks = Vec::new();
    for round in 0..20 {
        for (who, client) in [("a", &a), ("b", &b)] {
            let message = format!("{who}-{round}");
            tasks.push(async move {
                // Same JSON-RPC id from both sessions, all in flight together.
                let params = json!({ "name": "alpha__echo", "arguments": { "message": message } });
                let messages = client.exchange(json!(round), "tools/call", params).await;
                let text = messages.last().unwrap()["result"]["content"][0]["text"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                assert_eq!(text, message);
                assert_eq!(messages.last().unwrap()["id"], json!(round));
            });
        }
    }
    within("concurrent calls", futures_util::future::join_all(tasks)).await;
    gw.stop().await;
}

#[tokio::test]
async fn progress_uses_the_clients_token_and_arrives_before_the_result() {
    let gw = TestGateway::with_examples("", &[("alpha", &[])]).await;
    let client = McpClient::connect(&gw.url).await;
    for token in [json!("client-token-1"), json!(98765)] {
        let params = json!({
            "name": "alpha__slow",
            "arguments": { "steps": 3, "interval_ms": 10 },
            "_meta": { "progressToken": token },
        });
        let messages = client.exchange(json!("req-1"), "tools/call", params).await;
        assert_eq!(messages.len(), 4, "{messages:?}");
        for (i, progress) in messages[..3].iter().enumerate() {
            assert_eq!(progress["method"], "notifications/progress");
            assert_eq!(progress["params"]["progressToken"], token);
            assert_eq!(progress["params"]["progress"], json!(i + 1));
        }
        assert_eq!(messages[3]["id"], "req-1");
        assert_eq!(
            messages[3]["result"]["content"][0]["text"],
            "done after 3 steps"
        );
    }
    gw.stop().await;
}

#[tokio::test]
async fn cancellation_reaches_the_owning_upstream_with_its_own_id() {
    let dir = tempdir();
    let alpha_log = dir.join("alpha.jsonl");
    let beta_log = dir.join("beta.jsonl");
    let gw = TestGateway::with_fixtures(
        "",
        &[
            ("alpha", &["--record", alpha_log.to_str().unwrap()]),
            ("beta", &["--record", beta_log.to_str().unwrap()]),
        ],
    )
    .await;
    let client = McpClient::connect(&gw.url).await;
    let params = json!({
        "name": "alpha__slow",
        "arguments": { "steps": 500, "interval_ms": 20 },
        "_meta": { "progressToken": "p" },
    });
    let mut stream = client
        .open_stream(json!("call-to-cancel"), "tools/call", params)
        .await;
    // The first progress proves the upstream is running the call.
    let first = stream.next().await.unwrap();
    assert_eq!(first["method"], "notifications/progress");
    client
        .notify(
            "notifications/cancelled",
            Some(json!({ "requestId": "call-to-cancel", "reason": "user pressed stop" })),
        )
        .await;
    // The stream ends with a cancellation error instead of running 10 s.
    let mut last = first;
    while let Some(message) = stream.next().await {
        last = message;
    }
    assert_eq!(last["error"]["code"], -32800, "{last}");

    // A later round trip on the same pipe orders after the cancellation.
    client
        .call_tool("alpha__echo", json!({ "message": "after" }))
        .await;
    client
        .call_tool("beta__echo", json!({ "message": "after" }))
        .await;
    let alpha = read_jsonl(&alpha_log);
    let call = alpha
        .iter()
        .find(|m| m["method"] == "tools/call" && m["params"]["name"] == "slow")
        .expect("alpha received the call");
    assert!(
        call["id"].is_u64(),
        "the upstream sees the gateway's own id: {call}"
    );
    assert_eq!(
        call["params"]["_meta"]["progressToken"], call["id"],
        "token remapped to the upstream id"
    );
    let cancels: Vec<&Value> = alpha
        .iter()
        .filter(|m| m["method"] == "notifications/cancelled")
        .collect();
    assert_eq!(cancels.len(), 1, "{cancels:?}");
    assert_eq!(cancels[0]["params"]["requestId"], call["id"]);
    assert_eq!(cancels[0]["params"]["reason"], "user pressed stop");
    let beta = read_jsonl(&beta_log);
    assert!(
        beta.iter()
            .all(|m| m["method"] != "notifications/cancelled"),
        "no broadcast: {beta:?}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_child_flooding_stderr_keeps_answering() {
    let gw = TestGateway::with_fixtures("", &[("noisy", &["--test-controls"])]).await;
    let client = McpClient::connect(&gw.url).await;
    let flood = client
        .call_tool("noisy__flood_stderr", json!({ "bytes": 1_200_000 }))
        .await;
    assert!(
        flood["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("wrote 1200000"),
        "{flood}"
    );
    let echo = client
        .call_tool("noisy__echo", json!({ "message": "still here" }))
        .await;
    assert_eq!(echo["result"]["content"][0]["text"], "still here");
    gw.stop().await;
}

#[tokio::test]
async fn a_killed_upstream_fails_its_calls_clearly_and_spares_the_others() {
    let gw = TestGateway::with_examples("", &[("alpha", &[]), ("beta", &[])]).await;
    let client = McpClient::connect(&gw.url).await;
    let alpha = gw.gateway().upstream("alpha").unwrap();
    let pid = alpha.pid().expect("alpha runs as a child");

    let params = json!({ "name": "alpha__slow", "arguments": { "steps": 500, "interval_ms": 20 }, "_meta": { "progressToken": 1 } });
    let mut stream = client.open_stream(json!(7), "tools/call", params).await;
    assert_eq!(
        stream.next().await.unwrap()["method"],
        "notifications/progress"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let mut last = Value::Null;
    while let Some(message) = stream.next().await {
        last = message;
    }
    assert_eq!(last["error"]["code"], -32050, "{last}");
    let message = last["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("alpha") && message.contains("SIGKILL"),
        "{message}"
    );
    assert_eq!(last["error"]["data"]["upstream"], "alpha");

    // The other upstream is untouched.
    let echo = client
        .call_tool("beta__echo", json!({ "message": "fine" }))
        .await;
    assert_eq!(echo["result"]["content"][0]["text"], "fine");
    let read = client
        .result(
            "resources/read",
            json!({ "uri": "beta+demo://beta/readme" }),
        )
        .await;
    assert_eq!(read["contents"][0]["uri"], "beta+demo://beta/readme");
    gw.stop().await;
}

#[tokio::test]
async fn uris_are_namespaced_in_every_place_they_appear() {
    let gw = TestGateway::with_examples("", &[("docs", &[])]).await;
    let client = McpClient::connect(&gw.url).await;
    let (resources, _) = client.list_all("resources/list", "resources").await;
    assert!(
        resources
            .iter()
            .any(|r| r["uri"] == "docs+demo://docs/readme"),
        "{resources:?}"
    );
    let (templates, _) = client
        .list_all("resources/templates/list", "resourceTemplates")
        .await;
    assert_eq!(templates[0]["uriTemplate"], "docs+demo://docs/notes/{id}");

    let read = client
        .result(
            "resources/read",
            json!({ "uri": "docs+demo://docs/notes/42" }),
        )
        .await;
    assert_eq!(read["contents"][0]["uri"], "docs+demo://docs/notes/42");
    assert_eq!(read["contents"][0]["text"], "Note 42");

    let link = client.call_tool("docs__link", json!({})).await;
    assert_eq!(
        link["result"]["content"][0]["uri"],
        "docs+demo://docs/readme"
    );
    assert_eq!(
        link["result"]["content"][1]["resource"]["uri"],
        "docs+demo://docs/readme"
    );

    let prompt = client
        .result("prompts/get", json!({ "name": "docs__summarize_readme" }))
        .await;
    assert_eq!(
        prompt["messages"][1]["content"]["resource"]["uri"],
        "docs+demo://docs/readme"
    );
    let greeting = client
        .result(
            "prompts/get",
            json!({ "name": "docs__greeting", "arguments": { "name": "Ada" } }),
        )
        .await;
    assert_eq!(greeting["messages"][0]["content"]["text"], "Hello, Ada!");

    let completion = client
        .result(
            "completion/complete",
            json!({ "ref": { "type": "ref/resource", "uri": "docs+demo://docs/notes/{id}" }, "argument": { "name": "id", "value": "2" } }),
        )
        .await;
    assert_eq!(completion["completion"]["values"], json!(["2"]));
    let completion = client
        .result(
            "completion/complete",
            json!({ "ref": { "type": "ref/prompt", "name": "docs__greeting" }, "argument": { "name": "name", "value": "b" } }),
        )
        .await;
    assert_eq!(completion["completion"]["values"], json!(["bob"]));

    let missing = client
        .request("resources/read", json!({ "uri": "nosuch+demo://x" }))
        .await;
    assert_eq!(missing["error"]["code"], -32002);
    let unknown_tool = client.call_tool("docs__nope", json!({})).await;
    assert_eq!(unknown_tool["error"]["code"], -32602);
    gw.stop().await;
}

#[tokio::test]
async fn a_request_id_still_in_flight_cannot_be_reused_in_the_same_session() {
    let gw = TestGateway::with_examples("", &[("alpha", &[])]).await;
    let client = McpClient::connect(&gw.url).await;
    let slow = json!({ "name": "alpha__slow", "arguments": { "steps": 500, "interval_ms": 20 }, "_meta": { "progressToken": "t" } });
    let mut first = client.open_stream(json!(5), "tools/call", slow).await;
    first.next().await.unwrap();
    let reuse = client
        .exchange(
            json!(5),
            "tools/call",
            json!({ "name": "alpha__echo", "arguments": { "message": "x" } }),
        )
        .await;
    assert_eq!(reuse[0]["error"]["code"], -32600, "{reuse:?}");
    // The first call is still the one a cancellation reaches.
    client
        .notify("notifications/cancelled", Some(json!({ "requestId": 5 })))
        .await;
    let mut last = Value::Null;
    while let Some(message) = first.next().await {
        last = message;
    }
    assert_eq!(last["error"]["code"], -32800);
    gw.stop().await;
}

#[tokio::test]
async fn calls_to_an_upstream_that_stopped_reading_time_out_instead_of_hanging() {
    // The stuck upstream gets a 2 s timeout: every call after the stall
    // must hit it, but the handshake and the stall call itself must not (a
    // stall that timed out unanswered could let an echo through before it
    // takes hold), even on a loaded machine. Its circuit breaker would
    // refuse calls after 5 timeouts (see tests/it/protection.rs): here every
    // call must reach the stalled upstream.
    let yaml = format!(
        "upstreams:\n{}    timeout: 2s\n    circuit_breaker: {{ failures: 1000 }}\n{}",
        crate::support::fixture_upstream("stuck", &["--test-controls"]),
        crate::support::example_upstream("fine", &[])
    );
    let gw = TestGateway::start(&yaml).await;
    let client = McpClient::connect(&gw.url).await;
    client.call_tool("stuck__stall", json!({})).await;
    // Far more than its stdin pipe and the gateway's outbound queue hold.
    let big = "x".repeat(100_000);
    let calls = (0..320).map(|_| client.call_tool("stuck__echo", json!({ "message": big })));
    let answers = within("every call to end", futures_util::future::join_all(calls)).await;
    assert!(
        answers.iter().all(|a| a["error"]["code"] == -32051),
        "{}",
        answers[0]
    );
    // The other upstream never noticed.
    let echo = client
        .call_tool("fine__echo", json!({ "message": "ok" }))
        .await;
    assert_eq!(echo["result"]["content"][0]["text"], "ok");
    gw.stop().await;
}
