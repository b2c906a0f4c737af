//! Bad downstream input gets a precise error, and nothing else is affected.

use reqwest::StatusCode;
use serde_json::json;

use crate::support::client::post;
use crate::support::{McpClient, TestGateway};

#[tokio::test]
async fn each_kind_of_bad_input_gets_its_own_error() {
    let gw = TestGateway::with_examples("http:\n  max_body_bytes: 4096", &[("alpha", &[])]).await;
    let client = McpClient::connect(&gw.url).await;
    let http = reqwest::Client::new();
    let ping = json!({ "jsonrpc": "2.0", "id": 1, "method": "ping" }).to_string();

    let malformed = client
        .post_raw("{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ", &[])
        .await;
    assert_eq!(
        (malformed.status, malformed.error_code()),
        (StatusCode::BAD_REQUEST, -32700)
    );

    let not_rpc = client
        .post_raw(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#, &[])
        .await;
    assert_eq!(
        (not_rpc.status, not_rpc.error_code()),
        (StatusCode::BAD_REQUEST, -32600)
    );

    let unknown = client.request("tools/frobnicate", json!({})).await;
    assert_eq!(unknown["error"]["code"], -32601);

    let bad_cursor = client
        .request("tools/list", json!({ "cursor": "not-a-cursor" }))
        .await;
    assert_eq!(bad_cursor["error"]["code"], -32602);
    let wrong_type = client.request("tools/list", json!({ "cursor": 5 })).await;
    assert_eq!(wrong_type["error"]["code"], -32602);

    let no_session = post(&http, &gw.url, None, &ping, &[]).await;
    assert_eq!(
        (no_session.status, no_session.error_code()),
        (StatusCode::BAD_REQUEST, -32600)
    );

    let unknown_session = post(
        &http,
        &gw.url,
        Some(("0123456789abcdef", "2025-11-25")),
        &ping,
        &[],
    )
    .await;
    assert_eq!(unknown_session.status, StatusCode::NOT_FOUND);

    let evil = client
        .post_raw(&ping, &[("origin", "http://evil.example")])
        .await;
    assert_eq!(evil.status, StatusCode::FORBIDDEN);
    let local = client
        .post_raw(&ping, &[("origin", "http://localhost:5173")])
        .await;
    assert_eq!(local.status, StatusCode::OK);

    let big = json!({ "jsonrpc": "2.0", "id": 1, "method": "ping", "params": { "pad": "x".repeat(8192) } });
    let too_big = client.post_raw(&big.to_string(), &[]).await;
    assert_eq!(too_big.status, StatusCode::PAYLOAD_TOO_LARGE);

    let bad_version = client
        .post_raw(&ping, &[("mcp-protocol-version", "1999-01-01")])
        .await;
    assert_eq!(bad_version.status, StatusCode::BAD_REQUEST);
    assert!(
        bad_version.body.contains("2025-11-25"),
        "{}",
        bad_version.body
    );

    let batch = client.post_raw(&format!("[{ping}]"), &[]).await;
    assert_eq!(
        (batch.status, batch.error_code()),
        (StatusCode::BAD_REQUEST, -32600)
    );

    let no_name = client
        .request("tools/call", json!({ "arguments": {} }))
        .await;
    assert_eq!(no_name["error"]["code"], -32602);

    // None of that disturbed the session, the upstream, or a new session.
    let echo = client
        .call_tool("alpha__echo", json!({ "message": "ok" }))
        .await;
    assert_eq!(echo["result"]["content"][0]["text"], "ok");
    let fresh = McpClient::connect(&gw.url).await;
    assert_eq!(fresh.result("ping", json!({})).await, json!({}));
    gw.stop().await;
}

#[tokio::test]
async fn delete_ends_a_session_and_it_is_gone() {
    let gw = TestGateway::with_examples("", &[("alpha", &[])]).await;
    let client = McpClient::connect(&gw.url).await;
    assert_eq!(gw.gateway().session_count(), 1);
    assert_eq!(client.delete().await, StatusCode::OK);
    assert_eq!(gw.gateway().session_count(), 0);
    let after = client
        .post_raw(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, &[])
        .await;
    assert_eq!(after.status, StatusCode::NOT_FOUND);
    assert_eq!(client.delete().await, StatusCode::NOT_FOUND);
    gw.stop().await;
}

#[tokio::test]
async fn unsupported_client_version_is_answered_with_the_latest() {
    let gw = TestGateway::with_examples("", &[("alpha", &[])]).await;
    let http = reqwest::Client::new();
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2099-01-01", "capabilities": {}, "clientInfo": { "name": "x", "version": "1" } } });
    let raw = post(&http, &gw.url, None, &init.to_string(), &[]).await;
    assert_eq!(raw.status, StatusCode::OK);
    assert_eq!(raw.json()["result"]["protocolVersion"], "2025-11-25");
    gw.stop().await;
}
