//! The operator's page (`/ui`): rendered in headless Chromium against a
//! gateway with one upstream up and one down, a session and a
//! subscription, with a live update seen after a call; and refused without
//! the admin credential when authentication is on.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::interop::run_node;
use crate::support::{McpClient, TestGateway, fixture_upstream, within};

#[tokio::test]
async fn the_page_shows_states_sessions_subscriptions_and_live_figures_in_chromium() {
    let yaml = format!(
        "upstreams:\n{}  broken:\n    command: /nonexistent/mcp-server-that-is-not-there\n",
        fixture_upstream("ok", &[])
    );
    let gw = TestGateway::start_unready(&yaml).await;
    gw.wait_ready("ok").await;
    let mut broken = gw.gateway().upstream("broken").unwrap().watch_state();
    within(
        "the broken upstream to be down",
        broken.wait_for(|s| matches!(s, mcpmux::UpstreamState::Down { .. })),
    )
    .await
    .unwrap();
    let base = gw.url.trim_end_matches("/mcp").to_owned();

    // A session with a subscription.
    let client = McpClient::connect(&gw.url).await;
    let (resources, _) = client.list_all("resources/list", "resources").await;
    let readme = resources
        .iter()
        .map(|r| r["uri"].as_str().unwrap().to_owned())
        .find(|u| u.ends_with("readme"))
        .expect("the fixture's readme");
    client.subscribe(&readme).await;

    let screenshot = crate::support::artifact_path("ui-screenshot.png");
    let _ = std::fs::remove_file(&screenshot);
    let seen: Value = run_node(
        "ui_browser.mjs",
        &[&base, &screenshot.display().to_string(), "ok__echo"],
    )
    .await;

    assert_eq!(seen["status"], 200, "{seen:#}");
    let upstreams = seen["upstreams"].as_array().unwrap();
    let by_name = |name: &str| {
        upstreams
            .iter()
            .find(|u| u["name"] == name)
            .unwrap_or_else(|| panic!("no {name} on the page: {seen:#}"))
    };
    assert_eq!(by_name("ok")["state"], "ready", "{seen:#}");
    assert!(by_name("ok")["reason"].is_null(), "{seen:#}");
    assert!(
        by_name("ok")["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "ok__echo"),
        "{seen:#}"
    );
    assert_eq!(by_name("broken")["state"], "down", "{seen:#}");
    let reason = by_name("broken")["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("could not start"), "{reason}");
    assert!(
        !by_name("broken")["errors"].as_array().unwrap().is_empty(),
        "the down upstream lists its recent errors: {seen:#}"
    );
    let clients = seen["clients"].as_array().unwrap();
    assert!(
        clients.iter().any(|row| {
            row[0] == "session"
                && row[2] == "it 0"
                && row[3] == "/mcp"
                && row[4] == client.version.as_str()
        }),
        "the session is listed with its client name and era: {seen:#}"
    );
    let subscriptions = seen["subscriptions"].as_array().unwrap();
    assert!(
        subscriptions
            .iter()
            .any(|row| row[0] == readme.as_str() && row[1] == "ok" && row[2] != ""),
        "the subscription is listed with its upstream and subscriber: {seen:#}"
    );
    assert_eq!(seen["filtered"], json!(["ok__echo"]), "{seen:#}");
    assert_eq!(seen["callResult"], "seen live", "{seen:#}");
    assert_eq!(seen["callsBefore"], "0", "{seen:#}");
    assert_ne!(seen["callsAfter"], "0", "{seen:#}");
    assert!(
        !seen["chartPoints"].as_str().unwrap_or_default().is_empty(),
        "{seen:#}"
    );
    assert_eq!(seen["problems"], json!([]), "the page logged errors");
    let png = std::fs::read(&screenshot).expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    gw.stop().await;
}

#[tokio::test]
async fn the_page_needs_the_admin_credential_when_authentication_is_on() {
    const KEY: &str = "ui-admin-key-5d1e2f3a4b";
    let yaml = format!(
        "auth:\n  mode: on\n  api_keys:\n    - client: ops\n      key: {KEY}\nupstreams:\n{}",
        fixture_upstream("ok", &[])
    );
    let gw = TestGateway::start(&yaml).await;
    let base = gw.url.trim_end_matches("/mcp").to_owned();
    let http = reqwest::Client::new();
    for path in ["/ui", "/ui/events", "/ui/ui.js", "/ui/ui.css"] {
        let refused = http.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED, "{path}");
        let wrong = http
            .get(format!("{base}{path}"))
            .bearer_auth("not-the-key-at-all-0000")
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
    let page = http
        .get(format!("{base}/ui"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    assert!(html.contains("data-upstream=\"ok\""), "{html}");
    assert!(
        html.contains("Last reload: <span id=\"last-reload\">none since start"),
        "{html}"
    );
    // The key is masked in the config shown.
    assert!(!html.contains(KEY), "the page shows a secret");

    // A reload's time and result appear on the page.
    let config =
        mcpmux::Config::parse(&yaml, "test.yaml", &mcpmux::Lookup::from_process()).unwrap();
    gw.gateway().reload(&config).await;
    let html = http
        .get(format!("{base}/ui"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(html.contains("applied: no upstream changed"), "{html}");
    gw.stop().await;
}
