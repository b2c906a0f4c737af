//! The 2026-07-28 era downstream: a real modern client (the Python `mcp`
//! SDK) in front of a legacy upstream (server-everything), and the shared
//! subscription table across eras.

use serde_json::{Value, json};

use crate::support::interop::{everything_documents, everything_upstream, run_python};
use crate::support::{McpClient, TestGateway, fixture_upstream, read_jsonl, tempdir, within};

use crate::support::client::{MODERN_META as META, modern_post as modern, open_listen};

/// Config with one upstream `fixture`: the conformance fixture refusing
/// `initialize` (2026-07-28 only), recording what it receives to `record`.
fn modern_only_fixture(record: &std::path::Path) -> String {
    let args = [
        "--conformance",
        "--modern-only",
        "--record",
        record.to_str().unwrap(),
    ];
    format!("upstreams:\n{}", fixture_upstream("fixture", &args))
}

#[tokio::test]
async fn a_modern_client_uses_a_legacy_upstream_through_the_gateway() {
    let yaml = format!(
        "upstreams:\n{}{}",
        everything_upstream("everything"),
        fixture_upstream("local", &["--test-controls"])
    );
    let gw = TestGateway::start(&yaml).await;
    let legacy = McpClient::connect(&gw.url).await;
    let doc = everything_documents(&legacy).await.remove(0);

    let out = run_python("modern_client.py", &[&gw.url, &doc]).await;
    assert_eq!(out["protocol_version"], "2026-07-28", "{out}");
    let tools: Vec<&str> = out["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(
        tools.contains(&"everything__echo") && tools.contains(&"local__echo"),
        "{tools:?}"
    );
    assert_eq!(out["echo"], "Echo: modern");
    assert_eq!(out["read_uri"], doc.as_str());
    assert_eq!(out["prompt"], "Hello, Ada!");
    assert_eq!(out["honored_resources"], json!([doc]));
    assert_eq!(out["honored_tools"], true);
    assert_eq!(out["updated"], doc.as_str());
    assert_eq!(out["tools_changed"], true);
    assert!(
        out["tools_after"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "local__modern_0"),
        "{out}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_legacy_session_and_a_listen_stream_share_one_upstream_subscription() {
    let record = tempdir().join("alpha.jsonl");
    let gw = TestGateway::with_fixtures(
        "",
        &[(
            "alpha",
            &["--test-controls", "--record", record.to_str().unwrap()],
        )],
    )
    .await;
    let legacy = McpClient::connect(&gw.url).await;
    let mut legacy_events = legacy.listen(None).await;
    legacy.subscribe("alpha+demo://alpha/readme").await;

    // A raw modern listen stream on the same URI.
    let filter = json!({ "resourceSubscriptions": ["alpha+demo://alpha/readme"], "toolsListChanged": false });
    let mut modern_events = open_listen(&gw.url, json!("listen-1"), filter).await;
    let ack = modern_events.next().await.unwrap();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "listen-1"
    );
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"],
        json!(["alpha+demo://alpha/readme"])
    );
    assert!(
        ack["params"]["notifications"]
            .get("toolsListChanged")
            .is_none()
    );

    legacy
        .call_tool("alpha__touch", json!({ "uri": "demo://alpha/readme" }))
        .await;
    let update = modern_events.next().await.unwrap();
    assert_eq!(update["method"], "notifications/resources/updated");
    assert_eq!(update["params"]["uri"], "alpha+demo://alpha/readme");
    assert_eq!(
        update["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "listen-1"
    );
    assert_eq!(
        legacy_events.next_skipping_list_changed().await.unwrap()["params"]["uri"],
        "alpha+demo://alpha/readme"
    );

    // Only tool changes were not asked for: none arrive on the listen stream.
    legacy
        .call_tool("alpha__add_tools", json!({ "count": 1 }))
        .await;
    legacy
        .call_tool("alpha__touch", json!({ "uri": "demo://alpha/readme" }))
        .await;
    let next = modern_events.next().await.unwrap();
    assert_eq!(
        next["method"], "notifications/resources/updated",
        "no tools/list_changed: {next}"
    );

    let log = read_jsonl(&record);
    let subscribes = log
        .iter()
        .filter(|m| m["method"] == "resources/subscribe")
        .count();
    assert_eq!(subscribes, 1, "one upstream subscription for both eras");

    // Closing the listen stream releases its entry; the legacy one remains.
    drop(modern_events);
    within("the listen stream's entry to go", async {
        while gw.gateway().stats().subscriptions != 1 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    gw.stop().await;
}

#[tokio::test]
async fn modern_requests_get_the_specs_status_and_codes() {
    let gw = TestGateway::with_examples("", &[("alpha", &[])]).await;
    let url = &gw.url;

    let mismatch = modern(
        url,
        "tools/call",
        json!({ "name": "alpha__echo", "arguments": {} }),
        &[("mcp-name", "alpha__add")],
    )
    .await;
    assert_eq!(
        (mismatch.status.as_u16(), mismatch.error_code()),
        (400, -32020)
    );
    let no_name = modern(
        url,
        "tools/call",
        json!({ "name": "alpha__echo", "arguments": {} }),
        &[],
    )
    .await;
    assert_eq!(
        (no_name.status.as_u16(), no_name.error_code()),
        (400, -32020)
    );
    let wrong_method = modern(
        url,
        "tools/list",
        json!({}),
        &[("mcp-method", "prompts/list")],
    )
    .await;
    assert_eq!(
        (wrong_method.status.as_u16(), wrong_method.error_code()),
        (400, -32020)
    );

    let body = json!({ "jsonrpc": "2.0", "id": 3, "method": "server/discover", "params": { "_meta": {
        "io.modelcontextprotocol/protocolVersion": "1999-01-01", "io.modelcontextprotocol/clientCapabilities": {} } } });
    let headers = [
        ("mcp-protocol-version", "1999-01-01"),
        ("mcp-method", "server/discover"),
    ];
    let unsupported = crate::support::client::post(
        &reqwest::Client::new(),
        url,
        None,
        &body.to_string(),
        &headers,
    )
    .await;
    assert_eq!(
        (unsupported.status.as_u16(), unsupported.error_code()),
        (400, -32022)
    );
    assert_eq!(
        unsupported.json()["error"]["data"]["requested"],
        "1999-01-01"
    );
    assert!(
        unsupported.json()["error"]["data"]["supported"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v == "2026-07-28")
    );
    assert_eq!(unsupported.json()["id"], 3);

    for removed in [
        "ping",
        "initialize",
        "logging/setLevel",
        "resources/subscribe",
        "no/such/method",
    ] {
        let raw = modern(url, removed, json!({}), &[]).await;
        assert_eq!(
            (raw.status.as_u16(), raw.error_code()),
            (404, -32601),
            "{removed}: {}",
            raw.body
        );
    }

    let encoded = format!("=?base64?{}?=", base64_of("alpha+demo://alpha/notes/日本"));
    let read = modern(
        url,
        "resources/read",
        json!({ "uri": "alpha+demo://alpha/notes/日本" }),
        &[("mcp-name", &encoded)],
    )
    .await;
    assert_eq!(read.status.as_u16(), 200, "{}", read.body);
    let result = &read.json()["result"];
    assert_eq!(
        (result["resultType"].as_str(), result["cacheScope"].as_str()),
        (Some("complete"), Some("private"))
    );
    assert!(result["ttlMs"].as_u64().is_some());

    let missing = modern(
        url,
        "resources/read",
        json!({ "uri": "nosuch+x://y" }),
        &[("mcp-name", "nosuch+x://y")],
    )
    .await;
    assert_eq!(missing.json()["error"]["code"], -32602);
    assert_eq!(missing.json()["error"]["data"]["uri"], "nosuch+x://y");

    let list = modern(url, "tools/list", json!({}), &[]).await;
    let result = &list.json()["result"];
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["cacheScope"], "public");
    assert!(result["ttlMs"].as_u64().unwrap() > 0);
    gw.stop().await;
}

fn base64_of(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

#[tokio::test]
async fn a_modern_log_level_brings_upstream_logs_onto_that_requests_stream() {
    let gw = TestGateway::with_fixtures("", &[("alpha", &["--test-controls"])]).await;
    let call = json!({ "name": "alpha__log", "arguments": { "level": "warning", "count": 2, "message": "careful" } });
    let mut with_level = call.clone();
    with_level["_meta"] = serde_json::from_str(META).unwrap();
    with_level["_meta"]["io.modelcontextprotocol/logLevel"] = json!("info");
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": with_level })
        .to_string();
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "alpha__log"),
    ];
    let raw =
        crate::support::client::post(&reqwest::Client::new(), &gw.url, None, &body, &headers).await;
    let messages = crate::support::client::sse_messages(&raw.body);
    let logs: Vec<&Value> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .collect();
    assert_eq!(logs.len(), 2, "{messages:?}");
    assert_eq!(logs[0]["params"]["data"], "careful 0");
    assert_eq!(logs[0]["params"]["logger"], "alpha/example");
    assert_eq!(messages.last().unwrap()["result"]["resultType"], "complete");

    // Without a log level: just the answer.
    let plain = modern(&gw.url, "tools/call", call, &[("mcp-name", "alpha__log")]).await;
    let content_type = plain.headers["content-type"].to_str().unwrap().to_owned();
    let messages = if content_type.starts_with("text/event-stream") {
        crate::support::client::sse_messages(&plain.body)
    } else {
        vec![plain.json()]
    };
    assert!(
        messages
            .iter()
            .all(|m| m["method"] != "notifications/message"),
        "{messages:?}"
    );
    // An unknown level is refused.
    let mut bad = json!({ "name": "alpha__echo", "arguments": {} });
    bad["_meta"] = serde_json::from_str(META).unwrap();
    bad["_meta"]["io.modelcontextprotocol/logLevel"] = json!("loud");
    let body =
        json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": bad }).to_string();
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "alpha__echo"),
    ];
    let refused =
        crate::support::client::post(&reqwest::Client::new(), &gw.url, None, &body, &headers).await;
    assert_eq!(
        (refused.status.as_u16(), refused.error_code()),
        (400, -32602)
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_legacy_client_uses_a_modern_only_upstream_through_the_gateway() {
    let record = tempdir().join("fixture.jsonl");
    let yaml = modern_only_fixture(&record);
    let gw = TestGateway::start(&yaml).await;
    assert!(gw.gateway().upstream("fixture").unwrap().is_modern());
    let client = McpClient::connect(&gw.url).await;
    let mut events = client.listen(None).await;

    let (tools, _) = client.list_all("tools/list", "tools").await;
    assert!(
        tools
            .iter()
            .any(|t| t["name"] == "fixture__test_simple_text")
    );
    let call = client
        .call_tool("fixture__test_simple_text", json!({}))
        .await;
    assert_eq!(call["result"]["content"][0]["type"], "text", "{call}");
    let read = client
        .result(
            "resources/read",
            json!({ "uri": "fixture+test://static-text" }),
        )
        .await;
    assert_eq!(read["contents"][0]["uri"], "fixture+test://static-text");
    let prompt = client
        .result(
            "prompts/get",
            json!({ "name": "fixture__test_simple_prompt" }),
        )
        .await;
    assert!(!prompt["messages"].as_array().unwrap().is_empty());

    // Resource updates arrive through the gateway's listen stream upstream.
    client.subscribe("fixture+test://watched-resource").await;
    client
        .call_tool(
            "fixture__touch_resource",
            json!({ "uri": "test://watched-resource" }),
        )
        .await;
    let update = events.next_skipping_list_changed().await.unwrap();
    assert_eq!(update["params"]["uri"], "fixture+test://watched-resource");

    // So do list changes.
    client
        .call_tool("fixture__test_trigger_tool_change", json!({}))
        .await;
    loop {
        if events.next().await.unwrap()["method"] == "notifications/tools/list_changed" {
            let (tools, _) = client.list_all("tools/list", "tools").await;
            if tools
                .iter()
                .any(|t| t["name"] == "fixture__test_dynamic_tool_1")
            {
                break;
            }
        }
    }
    let log = read_jsonl(&record);
    assert!(
        log.iter().all(|m| m["method"] != "initialize"),
        "the gateway spoke 2026-07-28 only"
    );
    assert!(
        log.iter()
            .filter(|m| m["method"] == "subscriptions/listen")
            .count()
            >= 2,
        "listen reopened with the URI"
    );
    assert!(log.iter().all(|m| m["method"] != "resources/subscribe"));
    gw.stop().await;
}

#[tokio::test]
async fn x_mcp_header_parameters_are_validated_and_mirrored_upstream() {
    // back: a gateway serving the fixture; front: a gateway whose upstream is
    // back over modern HTTP. back rejects calls whose Mcp-Param-* headers do
    // not match, so a call through front only works if front mirrors them.
    let back = TestGateway::start(&format!(
        "upstreams:\n{}",
        fixture_upstream("fixture", &["--conformance"])
    ))
    .await;
    let front =
        TestGateway::start(&format!("upstreams:\n  back:\n    url: {:?}\n", back.url)).await;
    assert!(front.gateway().upstream("back").unwrap().is_modern());
    let client = McpClient::connect(&front.url).await;
    let call = client
        .call_tool(
            "back__fixture__test_custom_header",
            json!({ "region": "eu-west 日本" }),
        )
        .await;
    assert_eq!(
        call["result"]["content"][0]["text"], "Region: eu-west 日本",
        "{call}"
    );

    // A modern client that leaves the header out is refused.
    let raw = modern(
        &back.url,
        "tools/call",
        json!({ "name": "fixture__test_custom_header", "arguments": { "region": "x" } }),
        &[("mcp-name", "fixture__test_custom_header")],
    )
    .await;
    assert_eq!((raw.status.as_u16(), raw.error_code()), (400, -32020));
    let ok = modern(
        &back.url,
        "tools/call",
        json!({ "name": "fixture__test_custom_header", "arguments": { "region": "x" } }),
        &[
            ("mcp-name", "fixture__test_custom_header"),
            ("mcp-param-region", "x"),
        ],
    )
    .await;
    assert_eq!(ok.status.as_u16(), 200, "{}", ok.body);
    front.stop().await;
    back.stop().await;
}

#[tokio::test]
async fn a_modern_client_reaches_a_session_based_http_upstream() {
    // The client's 2026-07-28 `_meta` must not turn the call into a modern
    // one upstream: server-everything over Streamable HTTP needs its session.
    let web = crate::support::peer::HttpPeer::everything("streamableHttp").await;
    let yaml = format!(
        "upstreams:\n  everything:\n    url: {:?}\n",
        web.url("/mcp")
    );
    let gw = TestGateway::start(&yaml).await;
    assert!(!gw.gateway().upstream("everything").unwrap().is_modern());
    let call = modern(
        &gw.url,
        "tools/call",
        json!({ "name": "everything__echo", "arguments": { "message": "across eras" } }),
        &[("mcp-name", "everything__echo")],
    )
    .await;
    assert_eq!(call.status.as_u16(), 200, "{}", call.body);
    let result = &call.json()["result"];
    assert_eq!(
        result["content"][0]["text"], "Echo: across eras",
        "{result}"
    );
    assert_eq!(result["resultType"], "complete");
    let prompts = modern(&gw.url, "prompts/list", json!({}), &[]).await;
    let first = prompts.json()["result"]["prompts"][0]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let prompt = modern(
        &gw.url,
        "prompts/get",
        json!({ "name": first, "arguments": {} }),
        &[("mcp-name", &first)],
    )
    .await;
    assert!(
        prompt.json()["result"]["messages"].is_array(),
        "{}",
        prompt.body
    );
    drop(web);
    gw.stop().await;
}

#[tokio::test]
async fn a_listen_stream_with_many_uris_reopens_a_modern_upstream_once() {
    let record = tempdir().join("fixture.jsonl");
    let yaml = modern_only_fixture(&record);
    let gw = TestGateway::start(&yaml).await;
    let uris = [
        "fixture+test://watched-resource",
        "fixture+test://static-text",
        "fixture+test://static-binary",
    ];
    let mut events = open_listen(&gw.url, json!(5), json!({ "resourceSubscriptions": uris })).await;
    let ack = events.next().await.unwrap();
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"],
        json!(uris)
    );

    // The acknowledgment came after the upstream acknowledged its new stream.
    let client = McpClient::connect(&gw.url).await;
    client
        .call_tool(
            "fixture__touch_resource",
            json!({ "uri": "test://static-text" }),
        )
        .await;
    let update = events.next().await.unwrap();
    assert_eq!(update["params"]["uri"], "fixture+test://static-text");
    let listens: Vec<Value> = read_jsonl(&record)
        .into_iter()
        .filter(|m| m["method"] == "subscriptions/listen")
        .collect();
    assert_eq!(
        listens.len(),
        2,
        "the initial stream and one replacement: {listens:?}"
    );
    assert_eq!(
        listens[1]["params"]["notifications"]["resourceSubscriptions"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    gw.stop().await;
}
