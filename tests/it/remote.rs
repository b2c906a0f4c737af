//! Remote upstreams: Streamable HTTP and legacy HTTP+SSE, against
//! server-everything and the Python `mcp` SDK server, next to a stdio one.

use serde_json::{Value, json};

use crate::support::gateway::with_auth_off;
use crate::support::peer::HttpPeer;
use crate::support::{McpClient, TestGateway, example_upstream, fixture_upstream, within};

fn remote(name: &str, url: &str, extra: &str) -> String {
    format!("  {name}:\n    url: {url:?}\n{extra}")
}

async fn progress_call(client: &McpClient, tool: &str, arguments: Value) -> Vec<Value> {
    let params =
        json!({ "name": tool, "arguments": arguments, "_meta": { "progressToken": "tok" } });
    client.exchange(json!("p"), "tools/call", params).await
}

#[tokio::test]
async fn stdio_streamable_http_and_legacy_sse_upstreams_serve_one_view() {
    let web = HttpPeer::everything("streamableHttp").await;
    let legacy = HttpPeer::everything("sse").await;
    let py = HttpPeer::python("streamable-http", 0).await;
    let py_sse = HttpPeer::python("sse", 0).await;
    let yaml = format!(
        "upstreams:\n{}{}{}{}{}",
        example_upstream("local", &[]),
        remote("web", &web.url("/mcp"), ""),
        // No transport given: the gateway detects legacy SSE from the 4xx.
        remote("legacy", &legacy.url("/sse"), ""),
        remote("py", &py.url("/mcp"), "    transport: streamable-http\n"),
        remote("pysse", &py_sse.url("/sse"), "    transport: sse\n"),
    );
    let gw = TestGateway::start(&yaml).await;
    let client = McpClient::connect(&gw.url).await;
    let mut events = client.listen(None).await;

    let (tools, _) = client.list_all("tools/list", "tools").await;
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    for name in [
        "local__echo",
        "web__echo",
        "legacy__echo",
        "py__echo",
        "pysse__echo",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
        let echo = client.call_tool(name, json!({ "message": name })).await;
        // server-everything answers "Echo: <message>", the others the message.
        let text = echo["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text == name || text == format!("Echo: {name}"), "{echo}");
    }

    // Progress through each remote transport.
    for (tool, arguments) in [
        (
            "web__trigger-long-running-operation",
            json!({ "duration": 1, "steps": 3 }),
        ),
        (
            "legacy__trigger-long-running-operation",
            json!({ "duration": 1, "steps": 3 }),
        ),
        ("py__slow", json!({ "steps": 3, "interval_ms": 20 })),
        ("pysse__slow", json!({ "steps": 3, "interval_ms": 20 })),
    ] {
        let messages = progress_call(&client, tool, arguments).await;
        let progress = messages
            .iter()
            .filter(|m| m["method"] == "notifications/progress")
            .count();
        assert_eq!(progress, 3, "{tool}: {messages:?}");
        assert!(
            messages
                .iter()
                .all(|m| m["method"] != "notifications/progress"
                    || m["params"]["progressToken"] == "tok")
        );
        assert!(
            messages.last().unwrap().get("result").is_some(),
            "{tool}: {messages:?}"
        );
    }

    // Subscriptions: server-everything over both transports, the Python server over both.
    let (resources, _) = client.list_all("resources/list", "resources").await;
    let doc = |prefix: &str| {
        resources
            .iter()
            .filter_map(|r| r["uri"].as_str())
            .find(|u| u.starts_with(&format!("{prefix}+demo://resource/static/document/")))
            .unwrap()
            .to_owned()
    };
    for (prefix, toggle) in [
        ("web", "web__toggle-subscriber-updates"),
        ("legacy", "legacy__toggle-subscriber-updates"),
    ] {
        let uri = doc(prefix);
        client.subscribe(&uri).await;
        client.call_tool(toggle, json!({})).await;
        let update = events.next_skipping_list_changed().await.unwrap();
        assert_eq!(update["params"]["uri"], uri.as_str(), "{prefix}");
        client.call_tool(toggle, json!({})).await;
        client
            .result("resources/unsubscribe", json!({ "uri": uri }))
            .await;
    }
    for prefix in ["py", "pysse"] {
        let uri = format!("{prefix}+py://status");
        client.subscribe(&uri).await;
        client
            .call_tool(&format!("{prefix}__touch"), json!({ "uri": "py://status" }))
            .await;
        let update = events.next_skipping_list_changed().await.unwrap();
        assert_eq!(update["params"]["uri"], uri.as_str());
    }

    // list_changed from a remote upstream reaches the session and the view.
    for prefix in ["py", "pysse"] {
        let added = format!("added_on_{prefix}");
        client
            .call_tool(&format!("{prefix}__add_tool"), json!({ "name": added }))
            .await;
        loop {
            let message = events.next().await.unwrap();
            if message["method"] == "notifications/tools/list_changed" {
                break;
            }
        }
        let (tools, _) = client.list_all("tools/list", "tools").await;
        let exposed = format!("{prefix}__{added}");
        assert!(
            tools.iter().any(|t| t["name"] == exposed.as_str()),
            "{exposed} not listed"
        );
    }
    gw.stop().await;
}

/// Restarts the Python server on the same port mid-session and checks the
/// next call and an existing subscription. `era` pins the protocol era.
async fn survive_restart(era: &str) -> u64 {
    let py = HttpPeer::python("streamable-http", 0).await;
    let port = py.port;
    let extra = format!("    timeout: 20s\n    era: {era}\n");
    let yaml = format!("upstreams:\n{}", remote("py", &py.url("/mcp"), &extra));
    let gw = TestGateway::start(&yaml).await;
    let client = McpClient::connect(&gw.url).await;
    let mut events = client.listen(None).await;
    client.subscribe("py+py://status").await;
    assert_eq!(
        client
            .call_tool("py__echo", json!({ "message": "before" }))
            .await["result"]["content"][0]["text"],
        "before"
    );

    // The server restarts on the same port and forgets every session.
    py.kill().await;
    let py = HttpPeer::python("streamable-http", port).await;
    let echo = client
        .call_tool("py__echo", json!({ "message": "after" }))
        .await;
    assert_eq!(
        echo["result"]["content"][0]["text"], "after",
        "{era}: {echo}"
    );

    // The subscription is still in place: updates keep coming.
    client
        .call_tool("py__touch", json!({ "uri": "py://status" }))
        .await;
    let update = events.next_skipping_list_changed().await.unwrap();
    assert_eq!(update["params"]["uri"], "py+py://status");
    let restarts = gw.gateway().upstream("py").unwrap().restarts();
    drop(py);
    gw.stop().await;
    restarts
}

#[tokio::test]
async fn a_restarted_session_upstream_is_reinitialized_transparently() {
    // 404 for the old session: re-initialize at once, replay, retry the call.
    assert!(survive_restart("legacy").await >= 1);
}

#[tokio::test]
async fn a_restarted_stateless_upstream_needs_no_reinitialize() {
    // 2026-07-28 has no sessions: the same link keeps working.
    assert_eq!(survive_restart("auto").await, 0);
}

#[tokio::test]
async fn a_hung_upstream_slows_nobody_and_timeouts_spare_calls_that_report_progress() {
    // Accepts connections and never answers.
    let hung = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hung_url = format!("http://{}/mcp", hung.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = hung.accept().await {
            open.push(socket);
        }
    });
    let py = HttpPeer::python("streamable-http", 0).await;
    let yaml = format!(
        "upstreams:\n{}{}{}",
        remote("hung", &hung_url, "    timeout: 500ms\n"),
        // Long enough for the handshake and for each progress gap below on
        // a loaded machine; far shorter than the 5 s silent call.
        remote("py", &py.url("/mcp"), "    timeout: 2s\n"),
        example_upstream("local", &[]),
    );
    let gw = TestGateway::start_unready(&yaml).await;
    gw.wait_ready("py").await;
    gw.wait_ready("local").await;

    let client = McpClient::connect(&gw.url).await;
    let (tools, _) = client.list_all("tools/list", "tools").await;
    assert!(tools.iter().any(|t| t["name"] == "local__echo"));
    assert!(
        tools
            .iter()
            .all(|t| !t["name"].as_str().unwrap().starts_with("hung__"))
    );
    let echo = client
        .call_tool("local__echo", json!({ "message": "fast" }))
        .await;
    assert_eq!(echo["result"]["content"][0]["text"], "fast");

    // A call that outlives its timeout without progress fails clearly.
    let slow = client
        .call_tool("py__slow", json!({ "steps": 1, "interval_ms": 5000 }))
        .await;
    assert_eq!(slow["error"]["code"], -32051, "{slow}");
    assert!(
        slow["error"]["message"].as_str().unwrap().contains("py"),
        "{slow}"
    );

    // One that keeps reporting progress (every 500 ms) runs for 4 s, well
    // past the 2 s timeout.
    let messages = progress_call(
        &client,
        "py__slow",
        json!({ "steps": 8, "interval_ms": 500 }),
    )
    .await;
    assert_eq!(
        messages.last().unwrap()["result"]["content"][0]["text"],
        "done after 8 steps",
        "{messages:?}"
    );

    let hung_state = gw.gateway().upstream("hung").unwrap().state();
    assert_ne!(hung_state, mcpmux::UpstreamState::Ready);
    held.abort();
    gw.stop().await;
}

#[tokio::test]
async fn legacy_sse_and_stdio_hosts_see_the_same_view_and_notifications() {
    let dir = crate::support::tempdir();
    let config = dir.join("stdio.yaml");
    let yaml = format!(
        "upstreams:\n{}",
        fixture_upstream("alpha", &["--test-controls"])
    );
    std::fs::write(&config, with_auth_off(&yaml)).unwrap();
    let gw = TestGateway::start(&yaml).await;
    let sse_url = gw.url.replace("/mcp", "/sse");

    let over_sse =
        crate::support::interop::run_python("transport_client.py", &["sse", &sse_url]).await;
    let over_stdio = crate::support::interop::run_python(
        "transport_client.py",
        &["stdio", crate::support::exe(), config.to_str().unwrap()],
    )
    .await;
    for out in [&over_sse, &over_stdio] {
        assert!(
            out["tools_before"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t == "alpha__echo"),
            "{out}"
        );
        assert_eq!(out["echo"], "hello", "{out}");
        assert_eq!(
            out["notification"], "notifications/tools/list_changed",
            "{out}"
        );
        assert!(
            out["tools_after"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t == "alpha__late_0"),
            "{out}"
        );
    }
    let before = |out: &Value| out["tools_before"].as_array().unwrap().len();
    assert_eq!(before(&over_sse), before(&over_stdio));
    within(
        "no session left behind",
        gw.gateway().watch_sessions().wait_for(|n| *n == 0),
    )
    .await
    .unwrap();
    gw.stop().await;
}
