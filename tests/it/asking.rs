//! Requests an upstream asks of the client whose call caused them
//! (sampling, elicitation), relayed by the gateway, with real peers:
//! server-everything as the upstream (over stdio and Streamable HTTP) and
//! the Python `mcp` SDK as the client, with sampling and elicitation
//! callbacks. The same client talking to server-everything directly is
//! the reference.

use serde_json::Value;

use crate::support::interop::{self, everything_upstream, run_python};
use crate::support::peer::HttpPeer;
use crate::support::{TestGateway, within};

/// What `ask_client.py one` saw, through the gateway or directly.
async fn one(server: &str, prefix: &str) -> Value {
    run_python("ask_client.py", &["one", server, prefix]).await
}

/// server-everything run directly by the client, over stdio.
fn direct() -> String {
    format!(
        "stdio:{}:{}",
        interop::node().display(),
        interop::everything_js().display()
    )
}

/// The callbacks ran once each, and the tools reported what they returned.
fn assert_asked_and_answered(seen: &Value, prefix: &str) {
    let tools: Vec<&str> = seen["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for tool in ["trigger-sampling-request", "trigger-elicitation-request"] {
        assert!(
            tools.contains(&format!("{prefix}{tool}").as_str()),
            "{tool} is offered: {tools:?}"
        );
    }
    assert_eq!(seen["sampled"]["error"], false, "{seen}");
    let sampled = seen["sampled"]["text"].as_str().unwrap();
    assert!(sampled.contains("sampled by the test client"), "{sampled}");
    assert_eq!(seen["sampling_seen"].as_array().unwrap().len(), 1, "{seen}");
    assert!(
        seen["sampling_seen"][0]
            .as_str()
            .unwrap()
            .contains("hello there")
    );
    assert_eq!(seen["elicited"]["error"], false, "{seen}");
    let elicited = seen["elicited"]["text"].as_str().unwrap();
    assert!(elicited.contains("Ada Lovelace"), "{elicited}");
    assert_eq!(
        seen["elicitation_seen"].as_array().unwrap().len(),
        1,
        "{seen}"
    );
}

#[tokio::test]
async fn sampling_and_elicitation_reach_the_calling_client_as_they_do_directly() {
    let reference = one(&direct(), "").await;
    assert_asked_and_answered(&reference, "");

    // A stdio upstream: the one session with a call in flight is asked.
    let yaml = format!("upstreams:\n{}", everything_upstream("everything"));
    let gw = TestGateway::start(&yaml).await;
    let through = one(&gw.url, "everything__").await;
    assert_asked_and_answered(&through, "everything__");
    for key in ["sampled", "elicited"] {
        assert_eq!(
            through[key], reference[key],
            "{key} differs from the direct run"
        );
    }
    assert_eq!(gw.gateway().stats().asks_waiting, 0);
    gw.stop().await;

    // A Streamable HTTP upstream: the request comes on its call's stream.
    let peer = HttpPeer::everything("streamableHttp").await;
    let yaml = format!(
        "upstreams:\n  web:\n    url: \"{}\"\n    transport: streamable-http\n",
        peer.url("/mcp")
    );
    let gw = TestGateway::start(&yaml).await;
    let through = one(&gw.url, "web__").await;
    assert_asked_and_answered(&through, "web__");
    assert_eq!(through["elicited"], reference["elicited"]);
    gw.stop().await;
    peer.kill().await;
}

#[tokio::test]
async fn the_typescript_sdk_client_is_asked_through_the_gateway() {
    let yaml = format!("upstreams:\n{}", everything_upstream("everything"));
    let gw = TestGateway::start(&yaml).await;
    let seen =
        crate::support::interop::run_node("ask_client.mjs", &[&gw.url, "everything__"]).await;
    assert_eq!(seen["sampled"]["error"], false, "{seen}");
    let sampled = seen["sampled"]["text"].as_str().unwrap();
    assert!(
        sampled.contains("sampled by the typescript client"),
        "{sampled}"
    );
    assert!(
        seen["sampling_seen"][0]
            .as_str()
            .unwrap()
            .contains("hello from typescript")
    );
    assert_eq!(seen["elicited"]["error"], false, "{seen}");
    assert!(
        seen["elicited"]["text"]
            .as_str()
            .unwrap()
            .contains("Grace Hopper"),
        "{seen}"
    );
    assert_eq!(
        seen["elicitation_seen"].as_array().unwrap().len(),
        1,
        "{seen}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn over_legacy_sse_and_mcpmux_stdio_the_single_stream_carries_them() {
    let yaml = format!("upstreams:\n{}", everything_upstream("everything"));
    let gw = TestGateway::start(&yaml).await;
    let sse = gw.url.replace("/mcp", "/sse");
    let over_sse = one(&format!("sse:{sse}"), "everything__").await;
    assert_asked_and_answered(&over_sse, "everything__");
    gw.stop().await;

    let config = crate::support::tempdir().join("ask-stdio.yaml");
    std::fs::write(&config, crate::support::gateway::with_auth_off(&yaml)).unwrap();
    let spec = format!("mcpmux:{}:{}", crate::support::exe(), config.display());
    let over_stdio = one(&spec, "everything__").await;
    assert_asked_and_answered(&over_stdio, "everything__");
}

#[tokio::test]
async fn a_modern_upstreams_input_rounds_become_requests_on_a_legacy_session() {
    let yaml = format!(
        "upstreams:\n{}    prefix: \"\"\n    namespace_uris: false\n",
        crate::support::fixture_upstream("fixture", &["--conformance"])
    );
    let gw = TestGateway::start(&yaml).await;
    assert!(gw.gateway().upstream("fixture").unwrap().is_modern());
    let seen = run_python("ask_client.py", &["rounds", &gw.url, ""]).await;
    assert_eq!(seen["result"]["error"], false, "{seen}");
    assert_eq!(
        seen["result"]["text"], "Ada's favorite color is green",
        "{seen}"
    );
    let asked: Vec<&str> = seen["elicitation_seen"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        asked,
        [
            "Step 1: What is your name?",
            "Step 2: What is your favorite color?"
        ],
        "two rounds, in order"
    );
    assert_eq!(gw.gateway().stats().asks_waiting, 0);
    gw.stop().await;
}

#[tokio::test]
async fn two_sessions_on_one_shared_stdio_upstream_never_get_each_others_requests() {
    let yaml = format!("upstreams:\n{}", everything_upstream("everything"));
    let gw = TestGateway::start(&yaml).await;
    let seen = run_python("ask_client.py", &["two", &gw.url, "everything__"]).await;
    // A was asked once and answered; its call got its own answer.
    assert_eq!(seen["a_seen"].as_array().unwrap().len(), 1, "{seen}");
    assert_eq!(seen["a"]["error"], false, "{seen}");
    assert!(seen["a"]["text"].as_str().unwrap().contains("Ada Lovelace"));
    // B's request could have been A's or B's on the wire: refused, not guessed.
    assert!(seen["b_seen"].as_array().unwrap().is_empty(), "{seen}");
    assert_eq!(seen["b"]["error"], true, "{seen}");
    let why = seen["b"]["text"].as_str().unwrap();
    assert!(why.contains("several sessions"), "{why}");
    assert_eq!(gw.gateway().stats().asks_waiting, 0);
    gw.stop().await;
}

#[tokio::test]
async fn a_client_that_leaves_with_an_elicitation_pending_leaves_nothing_behind() {
    let yaml = format!("upstreams:\n{}", everything_upstream("everything"));
    let gw = TestGateway::start(&yaml).await;
    let seen = run_python("ask_client.py", &["leave", &gw.url, "everything__"]).await;
    assert_eq!(
        seen["elicitation_seen"].as_array().unwrap().len(),
        1,
        "{seen}"
    );
    // The session is closed (the SDK deletes it); its request is dropped
    // and the upstream answered, so the table empties.
    let mut sessions = gw.gateway().watch_sessions();
    within("the session to close", sessions.wait_for(|n| *n == 0))
        .await
        .unwrap();
    assert_eq!(gw.gateway().stats().asks_waiting, 0);
    // The upstream is not stuck on the abandoned request.
    let again = one(&gw.url, "everything__").await;
    assert_asked_and_answered(&again, "everything__");
    gw.stop().await;
}
