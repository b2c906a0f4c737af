//! What a real server cannot be made to do on demand: refuse a token it
//! accepted a moment ago. A mock authorization server and a mock MCP
//! server (axum, on 127.0.0.1:0) whose accepted tokens the test controls:
//! a 401 drops the gateway's token, the next request carries a new one,
//! and only a request that is safe to repeat is sent again.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde_json::{Value, json};

use crate::support::{McpClient, TestGateway};

/// What the mocks share with the test.
#[derive(Default)]
struct Mocks {
    /// Tokens issued so far (`tok-1`, `tok-2`, ...).
    issued: Vec<String>,
    /// Tokens the MCP server accepts.
    valid: HashSet<String>,
    /// `(tool, token)` of every call that ran.
    ran: Vec<(String, String)>,
    /// Tokens refused with 401.
    refused: Vec<String>,
}

type Shared = Arc<Mutex<Mocks>>;

async fn token(
    axum::extract::State(mocks): axum::extract::State<Shared>,
    headers: HeaderMap,
    body: String,
) -> impl IntoResponse {
    // HTTP Basic with the configured client, and the client-credentials grant.
    let basic = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    if !basic.starts_with("Basic ") || !body.contains("grant_type=client_credentials") {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({ "error": "invalid_request" })),
        );
    }
    let mut mocks = mocks.lock().unwrap();
    let token = format!("tok-{}", mocks.issued.len() + 1);
    mocks.issued.push(token.clone());
    mocks.valid.insert(token.clone());
    (
        StatusCode::OK,
        axum::Json(json!({ "access_token": token, "token_type": "Bearer", "expires_in": 3600 })),
    )
}

async fn mcp(
    axum::extract::State(mocks): axum::extract::State<Shared>,
    headers: HeaderMap,
    body: String,
) -> axum::response::Response {
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
        .to_owned();
    if !mocks.lock().unwrap().valid.contains(&token) {
        mocks.lock().unwrap().refused.push(token);
        return (
            StatusCode::UNAUTHORIZED,
            [("www-authenticate", "Bearer error=\"invalid_token\"")],
        )
            .into_response();
    }
    let request: Value = serde_json::from_str(&body).unwrap();
    let Some(id) = request.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let result = match request["method"].as_str().unwrap_or_default() {
        "initialize" => json!({
            "protocolVersion": "2025-06-18",
            "capabilities": { "tools": {} },
            "serverInfo": { "name": "mock", "version": "0" }
        }),
        "tools/list" => json!({ "tools": [
            { "name": "read", "inputSchema": { "type": "object" },
              "annotations": { "readOnlyHint": true, "idempotentHint": true } },
            { "name": "write", "inputSchema": { "type": "object" } }
        ] }),
        "tools/call" => {
            let tool = request["params"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            mocks.lock().unwrap().ran.push((tool, token.clone()));
            json!({ "content": [{ "type": "text", "text": token }] })
        }
        "ping" => json!({}),
        other => {
            let error = json!({ "code": -32601, "message": format!("no method {other}") });
            return axum::Json(json!({ "jsonrpc": "2.0", "id": id, "error": error }))
                .into_response();
        }
    };
    axum::Json(json!({ "jsonrpc": "2.0", "id": id, "result": result })).into_response()
}

/// The two mocks on one loopback port: `/token` and `/mcp`.
async fn serve_mocks() -> (String, Shared) {
    let mocks: Shared = Arc::default();
    let app = axum::Router::new()
        .route("/token", axum::routing::post(token))
        .route(
            "/mcp",
            axum::routing::post(mcp).get(|| async { StatusCode::METHOD_NOT_ALLOWED }),
        )
        .with_state(mocks.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, mocks)
}

fn text(answer: &Value) -> &str {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text: {answer:#}"))
}

#[tokio::test]
async fn a_refused_token_is_replaced_and_only_a_safe_request_is_sent_again() {
    let (base, mocks) = serve_mocks().await;
    let yaml = format!(
        "upstreams:\n  crm:\n    url: {base}/mcp\n    era: legacy\n    auth:\n      mode: client_credentials\n      token_url: {base}/token\n      client_id: gateway\n      client_secret: s3cret-for-the-mock\n"
    );
    let gw = TestGateway::start(&yaml).await;
    let client = McpClient::connect(&gw.url).await;
    assert_eq!(
        text(&client.call_tool("crm__read", json!({})).await),
        "tok-1"
    );

    // The server stops accepting tok-1: the read is refused once, a new
    // token is fetched, and the read (safe to repeat) runs with it.
    mocks.lock().unwrap().valid.remove("tok-1");
    assert_eq!(
        text(&client.call_tool("crm__read", json!({})).await),
        "tok-2"
    );
    {
        let mocks = mocks.lock().unwrap();
        assert_eq!(mocks.refused, ["tok-1"]);
        assert_eq!(mocks.issued, ["tok-1", "tok-2"]);
    }

    // A write is not safe to repeat: its 401 is answered as an error that
    // says so, the token is still replaced, and the next write works.
    mocks.lock().unwrap().valid.remove("tok-2");
    let refused = client.call_tool("crm__write", json!({})).await;
    assert_eq!(refused["error"]["code"], -32050, "{refused:#}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("not retried"), "{message}");
    assert!(message.contains("401"), "{message}");
    assert_eq!(
        text(&client.call_tool("crm__write", json!({})).await),
        "tok-3"
    );
    let writes: Vec<String> = mocks
        .lock()
        .unwrap()
        .ran
        .iter()
        .filter(|(tool, _)| tool == "write")
        .map(|(_, token)| token.clone())
        .collect();
    assert_eq!(writes, ["tok-3"], "the refused write never ran");
    gw.stop().await;
}
