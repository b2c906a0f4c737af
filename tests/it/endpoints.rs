//! Endpoints over real upstreams (server-everything, the reference Time
//! server and a generated one, both on the Python SDK) and through real clients (the TypeScript SDK, the Inspector CLI, the
//! Python SDK over legacy SSE): each endpoint sees only its part in both
//! eras and every transport, a change outside an endpoint is not announced
//! there, endpoints ask more of callers than the gateway does, a reload
//! adds, removes and changes them without dropping the sessions of those
//! that stay, and `prefix_mode: never` refuses colliding upstreams.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::auth::{AUDIENCE, ISSUER, claims, rsa_signer};
use crate::support::client::{modern_post, open_listen, post};
use crate::support::interop::{
    apps_upstream, everything_upstream, python_upstream, run_inspector, run_node, run_python,
    time_upstream,
};
use crate::support::{
    McpClient, TestGateway, example_upstream, fixture_upstream, get_json, get_text, run_mcpmux,
    tempdir,
};

fn names(items: &[Value], key: &str) -> Vec<String> {
    items
        .iter()
        .map(|i| i[key].as_str().unwrap().to_owned())
        .collect()
}

async fn tool_names(client: &McpClient) -> Vec<String> {
    names(&client.list_all("tools/list", "tools").await.0, "name")
}

#[tokio::test]
async fn two_endpoints_over_real_upstreams_each_see_only_their_part_everywhere() {
    let yaml = format!(
        "upstreams:\n{}{}{}{}{}endpoints:\n  demo:\n    upstreams: [everything, alpha]\n  python:\n    upstreams: [py, time]\n    prefix_mode: on_collision\n",
        everything_upstream("everything"),
        fixture_upstream("alpha", &["--test-controls"]),
        python_upstream("py", "many_tools_server.py", &["40"]),
        time_upstream("time"),
        apps_upstream("apps"),
    );
    let gw = TestGateway::start(&yaml).await;
    let demo_url = format!("{}/demo", gw.url);
    let python_url = format!("{}/python", gw.url);
    let whole = McpClient::connect(&gw.url).await;
    let demo = McpClient::connect(&demo_url).await;
    let python = McpClient::connect(&python_url).await;

    // The MCP Apps extension is declared where the view shows an app (the
    // ext-apps example server is only in the whole view).
    let ui = "io.modelcontextprotocol/ui";
    let whole_init = McpClient::connect_raw(&gw.url).await.json();
    assert!(
        whole_init["result"]["capabilities"]["extensions"][ui].is_object(),
        "{whole_init}"
    );
    let python_init = McpClient::connect_raw(&python_url).await.json();
    assert!(
        python_init["result"]["capabilities"]["extensions"][ui].is_null(),
        "{python_init}"
    );

    // Each endpoint lists exactly its upstreams' items, named its own way.
    let all = tool_names(&whole).await;
    let demo_tools = tool_names(&demo).await;
    let python_tools = tool_names(&python).await;
    let expected_demo: Vec<String> = all
        .iter()
        .filter(|n| n.starts_with("everything__") || n.starts_with("alpha__"))
        .cloned()
        .collect();
    assert_eq!(demo_tools, expected_demo);
    assert!(demo_tools.contains(&"everything__echo".to_owned()));
    let expected_python: Vec<String> = all
        .iter()
        .filter_map(|n| {
            n.strip_prefix("py__")
                .or_else(|| n.strip_prefix("time__"))
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(python_tools.len(), 43, "{python_tools:?}");
    assert_eq!(
        python_tools, expected_python,
        "no name collides: every name is bare"
    );
    assert!(python_tools.contains(&"get_current_time".to_owned()));
    let now = python
        .call_tool("get_current_time", json!({ "timezone": "UTC" }))
        .await;
    assert!(now.to_string().contains("UTC"), "{now}");
    let (demo_resources, _) = demo.list_all("resources/list", "resources").await;
    assert!(
        names(&demo_resources, "uri")
            .iter()
            .all(|u| u.starts_with("everything+") || u.starts_with("alpha+")),
        "{demo_resources:?}"
    );
    let (python_resources, _) = python.list_all("resources/list", "resources").await;
    assert!(python_resources.is_empty(), "{python_resources:?}");
    // A tool of another endpoint is unknown here, and a call reaches the
    // right upstream under its own name.
    let refused = python
        .request(
            "tools/call",
            json!({ "name": "everything__echo", "arguments": { "message": "x" } }),
        )
        .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let echoed = demo
        .call_tool("everything__echo", json!({ "message": "via demo" }))
        .await;
    assert!(echoed.to_string().contains("via demo"), "{echoed}");

    // A change outside an endpoint is not announced there.
    let mut whole_events = whole.listen(None).await;
    let mut demo_events = demo.listen(None).await;
    let mut python_events = python.listen(None).await;
    let mut python_listen = open_listen(
        &python_url,
        json!("l1"),
        json!({ "toolsListChanged": true }),
    )
    .await;
    assert_eq!(
        python_listen.next().await.unwrap()["method"],
        "notifications/subscriptions/acknowledged"
    );
    python
        .call_tool(
            "add_tool",
            json!({ "name": "late_tool", "description": "A tool that came late" }),
        )
        .await;
    assert_eq!(
        python_events.next().await.unwrap()["method"],
        "notifications/tools/list_changed"
    );
    assert_eq!(
        whole_events.next().await.unwrap()["method"],
        "notifications/tools/list_changed"
    );
    let tagged = python_listen.next().await.unwrap();
    assert_eq!(tagged["method"], "notifications/tools/list_changed");
    assert_eq!(
        tagged["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "l1",
        "{tagged}"
    );
    assert!(tool_names(&python).await.contains(&"late_tool".to_owned()));
    // The hub marked every view it changed in the same step as python's; a
    // pending tools flag would come out before a prompts one, so demo's
    // first event being prompts/list_changed shows it had none.
    demo.call_tool("alpha__add_prompt", json!({ "name": "marker" }))
        .await;
    assert_eq!(
        demo_events.next().await.unwrap()["method"],
        "notifications/prompts/list_changed"
    );
    assert_eq!(
        python.list_all("prompts/list", "prompts").await.0.len(),
        0,
        "python has no prompts"
    );

    // The 2026-07-28 era sees the same views.
    let stateless = modern_post(&python_url, "tools/list", json!({}), &[]).await;
    assert_eq!(stateless.status, StatusCode::OK, "{}", stateless.body);
    let listed = names(
        stateless.json()["result"]["tools"].as_array().unwrap(),
        "name",
    );
    assert_eq!(listed.len(), 44, "{listed:?}");
    assert!(listed.iter().all(|n| !n.contains("__")), "{listed:?}");

    // A session belongs to the endpoint it was created at.
    let init_elsewhere = json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/list" });
    let stray = post(
        &reqwest::Client::new(),
        &python_url,
        Some((&demo.session, &demo.version)),
        &init_elsewhere.to_string(),
        &[],
    )
    .await;
    assert_eq!(stray.status, StatusCode::NOT_FOUND, "{}", stray.body);
    let nowhere = McpClient::connect_raw(&format!("{}/nowhere", gw.url)).await;
    assert_eq!(nowhere.status, StatusCode::NOT_FOUND, "{}", nowhere.body);

    // Real clients: the Python SDK over legacy SSE at /mcp/demo/sse ...
    let over_sse = run_python("transport_client.py", &["sse", &format!("{demo_url}/sse")]).await;
    let before: Vec<String> = serde_json::from_value(over_sse["tools_before"].clone()).unwrap();
    assert!(
        before
            .iter()
            .all(|n| n.starts_with("everything__") || n.starts_with("alpha__")),
        "{before:?}"
    );
    assert!(
        over_sse["tools_after"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "alpha__late_0"),
        "{over_sse}"
    );
    // ... the TypeScript SDK ...
    let ts = run_node("endpoint_client.mjs", &[&python_url, "--call", "late_tool"]).await;
    let ts_tools: Vec<String> = serde_json::from_value(ts["tools"].clone()).unwrap();
    assert_eq!(ts_tools, tool_names(&python).await);
    assert!(ts["call"].to_string().contains("late_tool"), "{ts}");
    // ... and the Inspector CLI.
    let inspected =
        run_inspector(&[&demo_url, "--transport", "http", "--method", "tools/list"]).await;
    let inspected = names(inspected["tools"].as_array().unwrap(), "name");
    assert_eq!(inspected, tool_names(&demo).await);

    // The operator sees the endpoints.
    let status = get_json(&gw.url.replace("/mcp", "/status")).await;
    let endpoints = status["endpoints"].as_array().unwrap();
    assert_eq!(endpoints.len(), 2, "{status}");
    assert_eq!(endpoints[1]["name"], "python");
    assert_eq!(endpoints[1]["prefixMode"], "on_collision");
    assert_eq!(endpoints[1]["tools"], 44);
    assert!(endpoints[0]["sessions"].as_u64().unwrap() >= 1, "{status}");
    let metrics = get_text(&gw.url.replace("/mcp", "/metrics")).await;
    assert!(
        metrics.contains("mcpmux_endpoint_items{endpoint=\"python\",kind=\"tools\"} 44"),
        "{metrics}"
    );
    let page = get_text(&gw.url.replace("/mcp", "/ui")).await;
    assert!(
        page.contains("<code>/mcp/python</code>"),
        "the page lists the endpoint"
    );
    gw.stop().await;
}

/// A token for `sub` with `scope`, and the config part that trusts it.
fn jwt_auth(signer: &crate::auth::Signer) -> String {
    let pem = serde_json::to_string(&[&signer.public_pem]).unwrap();
    format!(
        "auth:\n  mode: on\n  jwt:\n    issuer: {ISSUER}\n    audience: {AUDIENCE}\n    public_keys: {pem}\n"
    )
}

fn bearer(signer: &crate::auth::Signer, sub: &str, scope: &str) -> String {
    format!(
        "Bearer {}",
        signer.token(claims(sub, |c| c["scope"] = json!(scope)))
    )
}

#[tokio::test]
async fn endpoints_ask_more_of_callers_and_a_reload_keeps_the_sessions_of_those_that_stay() {
    let signer = rsa_signer("rsa-ep");
    let upstreams = format!(
        "upstreams:\n{}{}",
        example_upstream("alpha", &[]),
        fixture_upstream("beta", &["--test-controls"]),
    );
    let endpoints = |named_mode: &str, with_team: bool, with_fresh: bool| {
        let mut text = format!(
            "endpoints:\n  ops:\n    auth: {{ required_scopes: [ops] }}\n  named:\n    prefix_mode: {named_mode}\n"
        );
        if with_team {
            text.push_str("  team:\n    auth: { clients: [alice] }\n");
        }
        if with_fresh {
            text.push_str("  fresh:\n    upstreams: [alpha]\n");
        }
        text
    };
    let yaml = format!(
        "{}{upstreams}{}",
        jwt_auth(&signer),
        endpoints("on_collision", true, false)
    );
    let gw = TestGateway::start(&yaml).await;
    let alice = bearer(&signer, "alice", "mcp");
    let bob = bearer(&signer, "bob", "mcp ops");
    let url = |name: &str| format!("{}/{name}", gw.url);

    // A missing scope: 403 with the challenge naming it and the endpoint's
    // own metadata; a client the endpoint does not serve: 403.
    let refused = McpClient::connect_raw_with(&url("ops"), &[("authorization", &alice)]).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
    let challenge = refused.headers["www-authenticate"].to_str().unwrap();
    assert!(
        challenge.starts_with("Bearer error=\"insufficient_scope\", scope=\"ops\""),
        "{challenge}"
    );
    assert!(
        challenge.contains("/.well-known/oauth-protected-resource/mcp/ops\""),
        "{challenge}"
    );
    let metadata = get_json(&format!(
        "{}/.well-known/oauth-protected-resource/mcp/ops",
        gw.url.trim_end_matches("/mcp")
    ))
    .await;
    assert!(
        metadata["resource"].as_str().unwrap().ends_with("/mcp/ops"),
        "{metadata}"
    );
    McpClient::connect_with(&url("ops"), &[("authorization", &bob)]).await;
    let not_served = McpClient::connect_raw_with(&url("team"), &[("authorization", &bob)]).await;
    assert_eq!(
        not_served.status,
        StatusCode::FORBIDDEN,
        "{}",
        not_served.body
    );
    assert!(
        not_served.body.contains("does not serve client"),
        "{}",
        not_served.body
    );
    let team = McpClient::connect_with(&url("team"), &[("authorization", &alice)]).await;

    // on_collision: the names both upstreams have get prefixes, the rest
    // stay bare, the same on every listing.
    let named = McpClient::connect_with(&url("named"), &[("authorization", &alice)]).await;
    let listed = tool_names(&named).await;
    assert!(listed.contains(&"alpha__echo".to_owned()), "{listed:?}");
    assert!(listed.contains(&"beta__echo".to_owned()), "{listed:?}");
    assert!(listed.contains(&"add_tools".to_owned()), "{listed:?}");
    let reached = named
        .call_tool("beta__echo", json!({ "message": "hi" }))
        .await;
    assert!(reached.to_string().contains("hi"), "{reached}");
    let mut named_events = named.listen(None).await;

    // A reload removes team, changes named's naming, adds fresh.
    let next = format!(
        "{}{upstreams}{}",
        jwt_auth(&signer),
        endpoints("always", false, true)
    );
    let config =
        mcpmux::Config::parse(&next, "next.yaml", &mcpmux::Lookup::from_process()).unwrap();
    gw.gateway().reload(&config).await;
    assert_eq!(
        named_events.next().await.unwrap()["method"],
        "notifications/tools/list_changed"
    );
    let renamed = tool_names(&named).await;
    assert!(
        renamed.contains(&"beta__add_tools".to_owned()),
        "{renamed:?}"
    );
    assert!(!renamed.contains(&"add_tools".to_owned()), "{renamed:?}");
    let gone = post(
        &reqwest::Client::new(),
        &url("team"),
        Some((&team.session, &team.version)),
        &json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/list" }).to_string(),
        &[("authorization", &alice)],
    )
    .await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND, "{}", gone.body);
    let fresh = McpClient::connect_with(&url("fresh"), &[("authorization", &alice)]).await;
    let fresh_tools = tool_names(&fresh).await;
    assert!(
        !fresh_tools.is_empty() && fresh_tools.iter().all(|n| n.starts_with("alpha__")),
        "{fresh_tools:?}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn prefix_mode_never_refuses_upstreams_whose_names_collide() {
    let dir = tempdir();
    let path = dir.join("never.yaml");
    let yaml = format!(
        "auth: {{ mode: off }}\nprefix_mode: never\nupstreams:\n{}{}",
        example_upstream("alpha", &[]),
        example_upstream("beta", &[]),
    );
    std::fs::write(&path, &yaml).unwrap();
    let path = path.to_str().unwrap();
    // The file is valid as text; the names collide only once both run.
    let (code, _, err) = run_mcpmux(&["check", path], &[]).await;
    assert_eq!(code, 0, "{err}");
    let (code, _, err) =
        run_mcpmux(&["serve", "--config", path, "--listen", "127.0.0.1:0"], &[]).await;
    assert_eq!(code, 64, "{err}");
    assert!(
        err.contains(&format!(
            "{path}:2:14: prefix_mode: never, but the tool \"echo\" of upstream beta collides with alpha's"
        )),
        "{err}"
    );
    // A value that is no mode is refused by check, at its line and column.
    std::fs::write(dir.join("bad.yaml"), yaml.replace("never", "sometimes")).unwrap();
    let bad = dir.join("bad.yaml");
    let (code, _, err) = run_mcpmux(&["check", bad.to_str().unwrap()], &[]).await;
    assert_eq!(code, 64, "{err}");
    assert!(
        err.contains(":2:14: prefix_mode: \"sometimes\" is not always, on_collision or never"),
        "{err}"
    );
}

#[tokio::test]
async fn namespace_uris_on_collision_namespaces_only_uris_two_servers_share() {
    let yaml = format!(
        "namespace_uris: on_collision\nupstreams:\n{}{}{}",
        everything_upstream("everything"),
        everything_upstream("twin"),
        fixture_upstream("alpha", &["--test-controls"]),
    );
    let gw = TestGateway::start(&yaml).await;
    let client = McpClient::connect(&gw.url).await;
    let (resources, _) = client.list_all("resources/list", "resources").await;
    let uris = names(&resources, "uri");
    // server-everything twice: every URI collides, so both are namespaced;
    // the fixture's are its own and stay as it wrote them.
    assert!(
        uris.iter().any(|u| u.starts_with("everything+demo://")),
        "{uris:?}"
    );
    assert!(
        uris.iter().any(|u| u.starts_with("twin+demo://")),
        "{uris:?}"
    );
    assert!(uris.contains(&"demo://alpha/readme".to_owned()), "{uris:?}");
    assert!(!uris.iter().any(|u| u.starts_with("alpha+")), "{uris:?}");
    let read = client
        .result("resources/read", json!({ "uri": "demo://alpha/readme" }))
        .await;
    assert_eq!(read["contents"][0]["uri"], "demo://alpha/readme", "{read}");
    // A subscription to the bare URI hears its updates.
    let mut events = client.listen(None).await;
    client.subscribe("demo://alpha/readme").await;
    client
        .call_tool("alpha__touch", json!({ "uri": "demo://alpha/readme" }))
        .await;
    let update = events.next_skipping_list_changed().await.unwrap();
    assert_eq!(update["method"], "notifications/resources/updated");
    assert_eq!(update["params"]["uri"], "demo://alpha/readme", "{update}");
    gw.stop().await;

    // Under never, the same two servers are refused at start.
    let path = tempdir().join("never-uris.yaml");
    let never = format!(
        "auth: {{ mode: off }}\nnamespace_uris: never\nupstreams:\n{}{}",
        everything_upstream("everything"),
        everything_upstream("twin"),
    );
    std::fs::write(&path, &never).unwrap();
    let path = path.to_str().unwrap();
    let (code, _, err) =
        run_mcpmux(&["serve", "--config", path, "--listen", "127.0.0.1:0"], &[]).await;
    assert_eq!(code, 64, "{err}");
    assert!(
        err.contains(&format!(
            "{path}:2:17: namespace_uris: never, but the resource URI \"demo://"
        )),
        "{err}"
    );
    assert!(
        err.contains("of upstream twin collides with everything's"),
        "{err}"
    );
}
