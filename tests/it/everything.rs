//! Interop with MCP implementations we did not write: the npm reference
//! server `@modelcontextprotocol/server-everything` as an upstream and the
//! Python `mcp` SDK as the downstream client.

use std::process::Stdio;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::support::interop::{self, everything_documents, everything_upstream, run_python};
use crate::support::{McpClient, TestGateway, example_upstream, within};
use mcpmux::UpstreamState;

async fn gateway_with_everything() -> TestGateway {
    let yaml = format!(
        "upstreams:\n{}{}",
        everything_upstream("everything"),
        example_upstream("local", &[])
    );
    TestGateway::start(&yaml).await
}

/// Calls `tool` on server-everything directly over stdio, without the gateway.
async fn call_everything_directly(tool: &str, arguments: Value) -> Value {
    let mut child = tokio::process::Command::new(interop::node())
        .arg(interop::everything_js())
        .arg("stdio")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "direct", "version": "0" } } });
    let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
    let call = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": { "name": tool, "arguments": arguments } });
    for message in [init, initialized, call] {
        stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .unwrap();
    }
    let result = within("server-everything's direct answer", async {
        loop {
            let line = lines
                .next_line()
                .await
                .unwrap()
                .expect("server-everything answered");
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == 2 {
                return message["result"].clone();
            }
        }
    })
    .await;
    child.kill().await.unwrap();
    result
}

#[tokio::test]
async fn server_everything_is_merged_and_prefixed_and_echo_matches_a_direct_call() {
    let gw = gateway_with_everything().await;
    let client = McpClient::connect(&gw.url).await;
    let (tools, _) = client.list_all("tools/list", "tools").await;
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"everything__echo"), "{names:?}");
    assert!(names.contains(&"local__echo"), "{names:?}");
    assert!(
        names
            .iter()
            .all(|n| n.starts_with("everything__") || n.starts_with("local__")),
        "{names:?}"
    );
    assert!(
        names.iter().all(|n| crate::core::is_valid_exposed_name(n)),
        "{names:?}"
    );
    assert!(
        names
            .iter()
            .filter(|n| n.starts_with("everything__"))
            .count()
            >= 10,
        "{names:?}"
    );

    let arguments = json!({ "message": "hello through the gateway" });
    let via_gateway = client
        .call_tool("everything__echo", arguments.clone())
        .await;
    let direct = call_everything_directly("echo", arguments).await;
    assert_eq!(
        via_gateway["result"], direct,
        "gateway and direct answers differ"
    );

    let resources = client.list_all("resources/list", "resources").await.0;
    assert!(
        resources
            .iter()
            .any(|r| r["uri"].as_str().unwrap().starts_with("everything+")),
        "{resources:?}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn python_sdk_client_lists_calls_with_progress_and_reads_through_the_gateway() {
    let gw = gateway_with_everything().await;
    let out = run_python(
        "legacy_client.py",
        &[
            &gw.url,
            "everything__trigger-long-running-operation",
            r#"{"duration": 1, "steps": 3}"#,
        ],
    )
    .await;
    assert_eq!(out["protocol_version"], "2025-11-25");
    let tools: Vec<&str> = out["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(
        tools.contains(&"everything__echo") && tools.contains(&"local__add"),
        "{tools:?}"
    );
    assert_eq!(out["progress"].as_array().unwrap().len(), 3, "{out}");
    let text = out["call"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("completed"), "{text}");
    let first_uri = out["resources"][0].as_str().unwrap();
    assert!(first_uri.starts_with("everything+"), "{first_uri}");
    assert_eq!(out["read"]["contents"][0]["uri"], first_uri);
    assert!(
        out["prompts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p == "local__greeting")
    );
    gw.stop().await;
}

/// Reads log messages until one mentions `marker`; returns the texts before it.
async fn logs_until(events: &mut crate::support::client::SseReader, marker: &str) -> Vec<String> {
    let mut texts = Vec::new();
    loop {
        let message = events.next().await.expect("stream open");
        if message["method"] != "notifications/message" {
            continue;
        }
        let text = message["params"]["data"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if text.contains(marker) {
            return texts;
        }
        texts.push(text);
    }
}

#[tokio::test]
async fn server_everything_sees_one_subscription_for_two_sessions_and_one_unsubscription() {
    let gw = gateway_with_everything().await;
    let observer = McpClient::connect(&gw.url).await;
    observer.set_level("info").await;
    let mut log = observer.listen(None).await;
    let docs = everything_documents(&observer).await;
    assert!(docs.len() >= 2, "{docs:?}");
    let (watched, marker) = (&docs[0], &docs[1]);
    let original = watched.trim_start_matches("everything+");
    let marker_original = marker.trim_start_matches("everything+");

    let a = McpClient::connect(&gw.url).await;
    let b = McpClient::connect(&gw.url).await;
    a.subscribe(watched).await;
    b.subscribe(watched).await;
    observer.subscribe(marker).await;
    let acknowledged = logs_until(
        &mut log,
        &format!("Subscribe Resource request for URI: {marker_original}"),
    )
    .await;
    let subscribes = acknowledged
        .iter()
        .filter(|t| t.contains("Subscribe") && t.contains(original))
        .count();
    assert_eq!(subscribes, 1, "server-everything saw: {acknowledged:?}");

    a.result(
        "resources/unsubscribe",
        serde_json::json!({ "uri": watched }),
    )
    .await;
    assert_eq!(b.delete().await, reqwest::StatusCode::OK);
    observer
        .result(
            "resources/unsubscribe",
            serde_json::json!({ "uri": marker }),
        )
        .await;
    let acknowledged = logs_until(
        &mut log,
        &format!("Unsubscribe Resource request: {marker_original}"),
    )
    .await;
    let unsubscribes = acknowledged
        .iter()
        .filter(|t| t.contains("Unsubscribe") && t.contains(original))
        .count();
    assert_eq!(unsubscribes, 1, "server-everything saw: {acknowledged:?}");
    // The logger names the upstream.
    gw.stop().await;
}

#[tokio::test]
async fn server_everything_updates_reach_both_subscribers_and_survive_its_restart() {
    let gw = gateway_with_everything().await;
    let a = McpClient::connect(&gw.url).await;
    let b = McpClient::connect(&gw.url).await;
    let mut a_events = a.listen(None).await;
    let mut b_events = b.listen(None).await;
    let docs = everything_documents(&a).await;
    let watched = &docs[0];
    a.subscribe(watched).await;
    b.subscribe(watched).await;

    // The toggle sends one round of updates at once, then one every 5 s.
    let toggled = a
        .call_tool("everything__toggle-subscriber-updates", json!({}))
        .await;
    assert!(toggled.get("error").is_none(), "{toggled}");
    for events in [&mut a_events, &mut b_events] {
        let update = events.next_skipping_list_changed().await.unwrap();
        assert_eq!(update["method"], "notifications/resources/updated");
        assert_eq!(update["params"]["uri"], watched.as_str());
    }

    // kill -9 the real server: sessions hear its tools leave, it restarts,
    // and the gateway subscribes again on its own.
    let everything = gw.gateway().upstream("everything").unwrap();
    let mut state = everything.watch_state();
    let pid = nix::unistd::Pid::from_raw(everything.pid().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    // The view loses its tools first; only then is the upstream not ready.
    assert_eq!(
        a_events.next().await.unwrap()["method"],
        "notifications/tools/list_changed"
    );
    within(
        "server-everything to restart",
        state.wait_for(|s| *s == UpstreamState::Ready),
    )
    .await
    .unwrap();
    assert_eq!(everything.restarts(), 1);
    let mut saw_tools_changed = false;
    let toggled = a
        .call_tool("everything__toggle-subscriber-updates", json!({}))
        .await;
    assert!(toggled.get("error").is_none(), "{toggled}");
    for events in [&mut b_events, &mut a_events] {
        loop {
            let message = events.next().await.unwrap();
            match message["method"].as_str().unwrap() {
                "notifications/tools/list_changed" => saw_tools_changed = true,
                "notifications/resources/updated" => {
                    assert_eq!(message["params"]["uri"], watched.as_str());
                    break;
                }
                _ => {}
            }
        }
    }
    assert!(saw_tools_changed, "b was told the tools changed too");
    gw.stop().await;
}
