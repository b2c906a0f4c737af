//! Interop with MCP implementations we did not write: the npm reference
//! server `@modelcontextprotocol/server-everything` as an upstream and the
//! Python `mcp` SDK as the downstream client.

use std::process::Stdio;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::support::interop::{self, everything_upstream, run_python};
use crate::support::{McpClient, TestGateway, example_upstream, within};

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
        names
            .iter()
            .all(|n| mcpmux::catalog::naming::is_valid_exposed_name(n)),
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
