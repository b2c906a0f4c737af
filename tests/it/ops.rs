//! Running it in production: probes, status, metrics, hot reload and
//! graceful shutdown.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::gateway::with_auth_off;
use crate::support::served::Served;
use crate::support::{McpClient, TestGateway, example_upstream, process_exists, tempdir, within};
use mcpmux::UpstreamState;

async fn get(url: &str) -> (StatusCode, String) {
    let response = within(url, reqwest::get(url)).await.unwrap();
    let status = response.status();
    (status, response.text().await.unwrap())
}

#[tokio::test]
async fn probes_status_and_metrics_follow_the_upstreams() {
    let yaml = format!(
        "upstreams:\n{}    required: true\n  ghost:\n    command: /nonexistent/mcp-server\n    env: {{ GHOST_TOKEN: \"ghost-secret-value\" }}\n",
        example_upstream("alpha", &[])
    );
    let gw = TestGateway::start_unready(&yaml).await;
    gw.wait_ready("alpha").await;
    let base = gw.url.trim_end_matches("/mcp").to_owned();

    assert_eq!(get(&format!("{base}/healthz")).await.0, StatusCode::OK);
    // The ghost never starts, but it is not required.
    let (status, body) = get(&format!("{base}/readyz")).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let client = McpClient::connect(&gw.url).await;
    client
        .call_tool("alpha__echo", json!({ "message": "count me" }))
        .await;
    let (_, metrics) = get(&format!("{base}/metrics")).await;
    for line in [
        r#"mcpmux_requests_total{mcp_method_name="tools/call",upstream="alpha",outcome="ok"} 1"#,
        r#"mcpmux_upstream_up{upstream="alpha"} 1"#,
        r#"mcpmux_upstream_up{upstream="ghost"} 0"#,
        r#"mcpmux_sessions{era="2025"} 1"#,
    ] {
        assert!(metrics.contains(line), "missing {line} in\n{metrics}");
    }
    assert!(
        metrics.contains("mcp_server_operation_duration_seconds_bucket"),
        "{metrics}"
    );

    let (_, status_body) = get(&format!("{base}/status")).await;
    let status: Value = serde_json::from_str(&status_body).unwrap();
    let ghost = status["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == "ghost")
        .unwrap();
    assert_eq!(ghost["state"], "down");
    assert!(
        ghost["reason"]
            .as_str()
            .unwrap()
            .contains("could not start"),
        "{ghost}"
    );
    let alpha = status["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == "alpha")
        .unwrap();
    assert_eq!(
        (alpha["tools"].as_u64(), alpha["transport"].as_str()),
        (Some(4), Some("stdio"))
    );
    assert!(!status_body.contains("ghost-secret-value") && !metrics.contains("ghost-secret-value"));

    // A required upstream going down makes the gateway not ready, until it is back.
    let handle = gw.gateway().upstream("alpha").unwrap();
    let mut state = handle.watch_state();
    let pid = nix::unistd::Pid::from_raw(handle.pid().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    within(
        "alpha to go down",
        state.wait_for(|s| matches!(s, UpstreamState::Down { .. })),
    )
    .await
    .unwrap();
    let (status, body) = get(&format!("{base}/readyz")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    within(
        "alpha to come back",
        state.wait_for(|s| *s == UpstreamState::Ready),
    )
    .await
    .unwrap();
    assert_eq!(get(&format!("{base}/readyz")).await.0, StatusCode::OK);
    gw.stop().await;
}

#[tokio::test]
async fn reload_adds_an_upstream_live_and_rejects_a_broken_file() {
    let path = tempdir().join("mcpmux.yaml");
    let alpha = example_upstream("alpha", &[]);
    std::fs::write(&path, with_auth_off(&format!("upstreams:\n{alpha}"))).unwrap();
    let mut served = Served::start(&["--config", path.to_str().unwrap()]);
    let addr = served.listening_addr().await;
    served.first("upstream ready").await;
    let client = McpClient::connect(&format!("http://{addr}/mcp")).await;
    let mut events = client.listen(None).await;

    // An edit to the file adds an upstream: sessions hear of it and see its tools.
    std::fs::write(
        &path,
        with_auth_off(&format!(
            "upstreams:\n{alpha}{}",
            example_upstream("beta", &[])
        )),
    )
    .unwrap();
    let reloaded = served.first("config reloaded").await;
    assert_eq!(reloaded["added"], "[\"beta\"]", "{reloaded}");
    loop {
        let event = events.next().await.unwrap();
        if event["method"] == "notifications/tools/list_changed" {
            let (tools, _) = client.list_all("tools/list", "tools").await;
            if tools.iter().any(|t| t["name"] == "beta__echo") {
                break;
            }
        }
    }
    assert_eq!(
        client
            .call_tool("alpha__echo", json!({ "message": "same session" }))
            .await["result"]["content"][0]["text"],
        "same session"
    );

    // A broken edit, picked up by SIGHUP, changes nothing and says where it is wrong.
    std::fs::write(
        &path,
        with_auth_off("upstreams:\n  beta:\n    comand: typo\n"),
    )
    .unwrap();
    served.signal(nix::sys::signal::Signal::SIGHUP);
    let rejected = served
        .first("config reload rejected; still serving the previous config")
        .await;
    let problem = rejected["problem"].as_str().unwrap();
    assert!(
        problem.contains(":3:5:") && problem.contains("comand"),
        "{problem}"
    );
    let (tools, _) = client.list_all("tools/list", "tools").await;
    assert!(
        tools.iter().any(|t| t["name"] == "beta__echo")
            && tools.iter().any(|t| t["name"] == "alpha__echo")
    );

    served.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(within("exit", served.child.wait()).await.unwrap().success());
}

#[tokio::test]
async fn sigterm_lets_a_slow_call_finish_then_exits_cleanly() {
    let path = tempdir().join("mcpmux.yaml");
    std::fs::write(
        &path,
        with_auth_off(&format!(
            "shutdown_grace: 20s\nupstreams:\n{}",
            example_upstream("alpha", &[])
        )),
    )
    .unwrap();
    let mut served = Served::start(&["--config", path.to_str().unwrap()]);
    let addr = served.listening_addr().await;
    let pid = served.first("started upstream child").await["pid"]
        .as_u64()
        .unwrap() as u32;
    served.first("upstream ready").await;
    let client = McpClient::connect(&format!("http://{addr}/mcp")).await;
    let call = json!({ "name": "alpha__slow", "arguments": { "steps": 10, "interval_ms": 100 }, "_meta": { "progressToken": 1 } });
    let mut stream = client.open_stream(json!("slow"), "tools/call", call).await;
    assert_eq!(
        stream.next().await.unwrap()["method"],
        "notifications/progress"
    );

    served.signal(nix::sys::signal::Signal::SIGTERM);
    let mut last = Value::Null;
    while let Some(message) = stream.next().await {
        last = message;
    }
    assert_eq!(
        last["result"]["content"][0]["text"], "done after 10 steps",
        "{last}"
    );
    let status = within("exit", served.child.wait()).await.unwrap();
    assert!(status.success(), "{status}");
    assert!(!process_exists(pid), "upstream child outlived the gateway");
}

#[tokio::test]
async fn an_optional_upstream_holds_readiness_only_during_its_first_start_wait() {
    // Neither is required: `sleepy` never finishes its handshake (its first
    // start lasts its start_wait); `broken` fails its first start at once.
    let yaml = format!(
        "upstreams:\n{}  sleepy:\n    command: sleep\n    args: [\"600\"]\n    timeout: 1h\n    start_wait: 1h\n  broken:\n    command: /nonexistent/mcp-server\n",
        example_upstream("alpha", &[])
    );
    let gw = TestGateway::start_unready(&yaml).await;
    gw.wait_ready("alpha").await;
    let base = gw.url.trim_end_matches("/mcp").to_owned();
    let mut broken = gw.gateway().upstream("broken").unwrap().watch_state();
    within(
        "broken's first start to fail",
        broken.wait_for(|s| matches!(s, UpstreamState::Down { .. })),
    )
    .await
    .unwrap();
    let (status, body) = get(&format!("{base}/readyz")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    let mut states: Vec<(&str, &str)> = body["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| (u["name"].as_str().unwrap(), u["state"].as_str().unwrap()))
        .collect();
    states.sort();
    assert_eq!(
        states,
        [
            ("alpha", "ready"),
            ("broken", "down"),
            ("sleepy", "starting")
        ]
    );
    gw.stop().await;

    // The same, with sleepy's first start over (start_wait passed): ready,
    // though sleepy still starts and broken is down.
    let yaml = yaml.replace("start_wait: 1h", "start_wait: 1ms");
    let gw = TestGateway::start_unready(&yaml).await;
    gw.wait_ready("alpha").await;
    let mut broken = gw.gateway().upstream("broken").unwrap().watch_state();
    within(
        "broken's first start to fail",
        broken.wait_for(|s| matches!(s, UpstreamState::Down { .. })),
    )
    .await
    .unwrap();
    let base = gw.url.trim_end_matches("/mcp").to_owned();
    let (status, body) = get(&format!("{base}/readyz")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    gw.stop().await;
}
