//! MCP Apps through the gateway, with the ext-apps SDK's own example server
//! from npm (`get-time`, whose app is `ui://get-time/mcp-app.html`) beside
//! other upstreams, default naming: the app's URI stays `ui://` and reads
//! back, the app's own call by its server-side name works, an ambiguous
//! one is refused, a policy-hidden tool stays hidden under its own name and
//! hides its app; both eras; and end to end in headless Chromium with the
//! ext-apps SDK's host bridge.

use serde_json::{Value, json};

use crate::support::interop::{apps_upstream, run_node};
use crate::support::peer::HttpPeer;
use crate::support::{McpClient, TestGateway, fixture_upstream};

const APP: &str = "ui://apps/get-time/mcp-app.html";

fn tool<'t>(tools: &'t [Value], name: &str) -> &'t Value {
    tools
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {tools:#?}"))
}

#[tokio::test]
async fn an_app_keeps_its_ui_uri_reads_back_and_calls_its_tool_by_its_own_name() {
    let yaml = format!(
        "upstreams:\n{}{}",
        apps_upstream("apps"),
        fixture_upstream("notes", &[])
    );
    let gw = TestGateway::start(&yaml).await;
    let client = McpClient::connect(&gw.url).await;

    // Listed with its app's URI namespaced and still ui://, both keys.
    let (tools, _) = client.list_all("tools/list", "tools").await;
    let get_time = tool(&tools, "apps__get-time");
    assert_eq!(get_time["_meta"]["ui"]["resourceUri"], APP, "{get_time:#}");
    assert_eq!(get_time["_meta"]["ui/resourceUri"], APP);
    let (resources, _) = client.list_all("resources/list", "resources").await;
    assert!(resources.iter().any(|r| r["uri"] == APP), "{resources:#?}");

    // The host reads exactly the URI it was given.
    let read = client.result("resources/read", json!({ "uri": APP })).await;
    let content = &read["contents"][0];
    assert_eq!(content["uri"], APP, "contents carry the namespaced URI");
    assert_eq!(content["mimeType"], "text/html;profile=mcp-app");
    assert!(content["text"].as_str().unwrap().contains("<html"));

    // The app's own call, by the name its server gave the tool.
    let answer = client.call_tool("get-time", json!({})).await;
    let time = answer["result"]["structuredContent"]["time"].as_str();
    assert!(time.is_some_and(|t| t.contains('T')), "{answer:#}");

    // The gateway says it serves apps.
    let init = crate::support::client::post(
        &reqwest::Client::new(),
        &gw.url,
        None,
        &json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "t", "version": "0" } } })
        .to_string(),
        &[],
    )
    .await
    .json();
    let declared = &init["result"]["capabilities"]["extensions"]["io.modelcontextprotocol/ui"];
    assert_eq!(
        declared["mimeTypes"],
        json!(["text/html;profile=mcp-app"]),
        "{init:#}"
    );

    // Non-app items are as they were.
    assert!(tools.iter().any(|t| t["name"] == "notes__echo"));
    assert!(
        resources
            .iter()
            .any(|r| r["uri"].as_str().unwrap().starts_with("notes+"))
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_server_side_name_several_upstreams_have_is_refused_naming_them() {
    let yaml = format!(
        "upstreams:\n{}{}",
        apps_upstream("apps"),
        apps_upstream("clock")
    );
    let gw = TestGateway::start(&yaml).await;
    let client = McpClient::connect(&gw.url).await;
    let refused = client.call_tool("get-time", json!({})).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused:#}");
    assert_eq!(
        refused["error"]["data"]["candidates"],
        json!(["apps__get-time", "clock__get-time"])
    );
    // Each app's URI routes to its own upstream.
    for (upstream, uri) in [("apps", APP), ("clock", "ui://clock/get-time/mcp-app.html")] {
        let read = client.result("resources/read", json!({ "uri": uri })).await;
        assert_eq!(read["contents"][0]["uri"], uri, "{upstream}");
    }
    gw.stop().await;
}

#[tokio::test]
async fn a_hidden_tool_stays_hidden_under_its_own_name_and_hides_its_app() {
    let yaml = format!(
        "auth:\n  mode: on\n  api_keys:\n    - client: timekeeper\n      key: timekeeper-key-0123\n    - client: notetaker\n      key: notetaker-key-0123\npolicy:\n  default: deny\n  clients:\n    timekeeper:\n      allow: [\"apps__*\"]\n    notetaker:\n      allow: [\"notes__*\", \"notes+*\"]\nupstreams:\n{}{}",
        apps_upstream("apps"),
        fixture_upstream("notes", &[])
    );
    let gw = TestGateway::start(&yaml).await;
    // Allowed the tool: its app comes with it, with no rule for the URI.
    let timekeeper =
        McpClient::connect_with(&gw.url, &[("authorization", "Bearer timekeeper-key-0123")]).await;
    let read = timekeeper
        .result("resources/read", json!({ "uri": APP }))
        .await;
    assert_eq!(read["contents"][0]["uri"], APP);
    assert!(
        timekeeper
            .call_tool("get-time", json!({}))
            .await
            .get("result")
            .is_some()
    );
    let (resources, _) = timekeeper.list_all("resources/list", "resources").await;
    assert!(resources.iter().any(|r| r["uri"] == APP));

    // Not allowed the tool: neither its own name nor its app exists for it.
    let notetaker =
        McpClient::connect_with(&gw.url, &[("authorization", "Bearer notetaker-key-0123")]).await;
    let unknown = notetaker.call_tool("get-time", json!({})).await;
    assert_eq!(unknown["error"]["code"], -32602);
    assert!(
        unknown["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool"),
        "{unknown:#}"
    );
    let hidden = notetaker
        .request("resources/read", json!({ "uri": APP }))
        .await;
    assert_eq!(hidden["error"]["code"], -32002, "{hidden:#}");
    let (resources, _) = notetaker.list_all("resources/list", "resources").await;
    assert!(resources.iter().all(|r| r["uri"] != APP), "{resources:#?}");
    gw.stop().await;
}

/// A 2026-07-28 request to the gateway.
async fn modern(url: &str, method: &str, mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": { "io.modelcontextprotocol/ui": { "mimeTypes": ["text/html;profile=mcp-app"] } }
        }
    });
    let name = params["name"]
        .as_str()
        .or(params["uri"].as_str())
        .map(str::to_owned);
    let mut headers = vec![
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", method),
    ];
    if let Some(name) = &name {
        headers.push(("mcp-name", name));
    }
    let body = json!({ "jsonrpc": "2.0", "id": 3, "method": method, "params": params }).to_string();
    crate::support::client::post(&reqwest::Client::new(), url, None, &body, &headers)
        .await
        .json()
}

#[tokio::test]
async fn a_2026_client_reads_the_app_and_calls_by_the_server_side_name_over_http() {
    let server = HttpPeer::apps().await;
    let yaml = format!(
        "upstreams:\n  apps:\n    url: {}\n{}",
        server.url("/mcp"),
        fixture_upstream("notes", &[])
    );
    // The app's HTML is kept like any read (cache.ttl for a 2025-era server).
    let yaml = yaml.replace(
        &format!("    url: {}\n", server.url("/mcp")),
        &format!(
            "    url: {}\n    cache: {{ ttl: 60s }}\n",
            server.url("/mcp")
        ),
    );
    let gw = TestGateway::start(&yaml).await;
    let tools = modern(&gw.url, "tools/list", json!({})).await;
    let tools = tools["result"]["tools"].as_array().unwrap().clone();
    assert_eq!(
        tool(&tools, "apps__get-time")["_meta"]["ui"]["resourceUri"],
        APP
    );
    let read = modern(&gw.url, "resources/read", json!({ "uri": APP })).await;
    assert_eq!(read["result"]["contents"][0]["uri"], APP, "{read:#}");
    let again = modern(&gw.url, "resources/read", json!({ "uri": APP })).await;
    assert_eq!(again["result"]["contents"], read["result"]["contents"]);
    let status: Value = reqwest::get(gw.url.replace("/mcp", "/status"))
        .await
        .unwrap()
        .text()
        .await
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap();
    assert_eq!(
        status["cache"]["hits"], 1,
        "the second read came from the cache: {status:#}"
    );
    let called = modern(
        &gw.url,
        "tools/call",
        json!({ "name": "get-time", "arguments": {} }),
    )
    .await;
    assert!(
        called["result"]["structuredContent"]["time"].is_string(),
        "{called:#}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn the_app_renders_in_chromium_and_its_own_call_comes_back_through_the_gateway() {
    let server = HttpPeer::apps().await;
    let yaml = format!(
        "upstreams:\n  apps:\n    url: {}\n{}{}",
        server.url("/mcp"),
        fixture_upstream("notes", &[]),
        apps_upstream("clock-stdio")
    );
    // Two upstreams have `get-time`: only one is this gateway's bare name,
    // so the host's upstream is alone under a prefix the other lacks.
    let yaml = yaml.replace(
        "  clock-stdio:\n",
        "  clock-stdio:\n    tools: { deny: [\"get-time\"] }\n",
    );
    let gw = TestGateway::start(&yaml).await;
    let shot = crate::support::artifact_path("apps-screenshot.png");
    let _ = std::fs::remove_file(&shot);
    let seen = run_node(
        "apps_host.mjs",
        &[&gw.url, "apps__get-time", &shot.display().to_string()],
    )
    .await;
    assert_eq!(seen["resourceUri"], APP, "{seen:#}");
    assert_eq!(seen["mime_type"], "text/html;profile=mcp-app");
    let call = &seen["app_calls"][0];
    assert_eq!(
        call["name"], "get-time",
        "the app used its server's name: {seen:#}"
    );
    let time = call["result_text"].as_str().unwrap_or_default();
    assert!(time.contains('T'), "{seen:#}");
    assert!(
        seen["shown_text"].as_str().unwrap().contains(time),
        "the app shows the answer: {seen:#}"
    );
    assert!(
        std::fs::metadata(&shot).unwrap().len() > 10_000,
        "a screenshot"
    );
    gw.stop().await;
}
