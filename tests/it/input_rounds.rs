//! A 2025-era upstream asking a 2026-07-28 (stateless) client for input:
//! the gateway parks the call and answers with `input_required`, sealing
//! its `requestState`; the client's retry continues the call. Driven by the
//! Python SDK's modern client (which runs the rounds itself) and by raw
//! requests for the state the gateway must refuse.

use serde_json::{Value, json};

use crate::support::client::{Raw, post};
use crate::support::interop::{everything_upstream, run_python};
use crate::support::{TestGateway, fixture_upstream, within};

/// The conformance fixture, speaking the 2025 era only.
fn legacy_fixture(extra: &str) -> String {
    format!(
        "{}{extra}",
        fixture_upstream("fixture", &["--conformance", "--legacy-only"])
    )
}

/// POSTs a 2026-07-28 `tools/call` of `name` whose client can answer
/// elicitation, with `extra` params (the retry's members).
pub(crate) async fn call(url: &str, name: &str, extra: Value) -> Raw {
    let mut params = json!({
        "name": name,
        "arguments": {},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": { "elicitation": {} },
        },
    });
    if let (Some(params), Value::Object(extra)) = (params.as_object_mut(), extra) {
        params.extend(extra);
    }
    let body = json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params });
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", name),
    ];
    post(
        &reqwest::Client::new(),
        url,
        None,
        &body.to_string(),
        &headers,
    )
    .await
}

/// The one message of a response, JSON or a one-event stream.
pub(crate) fn message(raw: &Raw) -> Value {
    let messages = match raw.body.trim_start().starts_with('{') {
        true => vec![serde_json::from_str(&raw.body).unwrap()],
        false => crate::support::client::sse_messages(&raw.body),
    };
    messages
        .into_iter()
        .rfind(|m| m.get("id").is_some())
        .unwrap_or_else(|| panic!("no response in {}", raw.body))
}

/// The refusal of a retry: its `-32602` message.
pub(crate) fn refusal(raw: &Raw) -> String {
    let answer = message(raw);
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    answer["error"]["message"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_legacy_upstreams_requests_become_input_rounds_for_a_modern_client() {
    let yaml = format!(
        "upstreams:\n{}{}",
        legacy_fixture(""),
        everything_upstream("everything")
    );
    let gw = TestGateway::start(&yaml).await;
    assert!(!gw.gateway().upstream("fixture").unwrap().is_modern());

    // Five rounds over two calls: elicitation twice in a row, then
    // elicitation, sampling and roots, one per round.
    let seen = run_python("ask_client.py", &["modern-rounds", &gw.url, "fixture__"]).await;
    assert_eq!(seen["protocol_version"], "2026-07-28", "{seen}");
    assert_eq!(
        seen["multi_round"],
        json!({ "error": false, "text": "Ada's favorite color is green" })
    );
    assert_eq!(
        seen["multiple_inputs"],
        json!({ "error": false, "text": "name=Ada, greeting=hello from the model, roots=file:///work" })
    );
    assert_eq!(
        seen["seen"],
        json!([
            "elicitation: Step 1: What is your name?",
            "elicitation: Step 2: What is your favorite color?",
            "elicitation: What is your name?",
            "sampling: Generate a greeting",
            "roots",
        ])
    );

    // server-everything's own sampling and elicitation tools, as a modern
    // client sees them through the gateway.
    let seen = run_python("ask_client.py", &["modern-one", &gw.url, "everything__"]).await;
    assert_eq!(seen["protocol_version"], "2026-07-28", "{seen}");
    assert_eq!(seen["sampled"]["error"], false, "{seen}");
    assert!(
        seen["sampled"]["text"]
            .as_str()
            .unwrap()
            .contains("sampled by the test client"),
        "{seen}"
    );
    assert_eq!(seen["elicited"]["error"], false, "{seen}");
    assert!(
        seen["elicited"]["text"]
            .as_str()
            .unwrap()
            .contains("Ada Lovelace"),
        "{seen}"
    );
    assert_eq!(
        seen["sampling_seen"],
        json!(["Resource trigger-sampling-request context: hello there"])
    );

    let stats = gw.gateway().stats();
    assert_eq!((stats.parked_calls, stats.asks_waiting), (0, 0));
    gw.stop().await;
}

#[tokio::test]
async fn forged_altered_misused_and_spent_request_state_is_refused() {
    let yaml = format!("upstreams:\n{}", legacy_fixture(""));
    let gw = TestGateway::start(&yaml).await;
    let tool = "fixture__test_input_required_result_elicitation";

    let first = message(&call(&gw.url, tool, json!({})).await);
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    let requests = result["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{first}");
    let (key, request) = requests.iter().next().unwrap();
    assert_eq!(request["method"], "elicitation/create");
    let state = result["requestState"].as_str().unwrap().to_owned();
    assert_eq!(gw.gateway().stats().parked_calls, 1);
    let answer = json!({ key.clone(): { "action": "accept", "content": { "name": "Ada" } } });

    // Not ours, altered, or for another tool: refused, and the call waits on.
    let forged = call(
        &gw.url,
        tool,
        json!({ "requestState": "opaque", "inputResponses": answer }),
    )
    .await;
    assert!(
        refusal(&forged).contains("not issued by this gateway"),
        "{}",
        forged.body
    );
    let mut altered = state.clone().into_bytes();
    let last = altered.len() - 2;
    altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    let altered = call(
        &gw.url,
        tool,
        json!({ "requestState": altered, "inputResponses": answer }),
    )
    .await;
    assert!(refusal(&altered).contains("altered"), "{}", altered.body);
    let elsewhere = call(
        &gw.url,
        "fixture__test_input_required_result_sampling",
        json!({ "requestState": state, "inputResponses": answer }),
    )
    .await;
    assert!(
        refusal(&elsewhere).contains("another call"),
        "{}",
        elsewhere.body
    );
    let unanswered = call(
        &gw.url,
        tool,
        json!({ "requestState": state, "inputResponses": {} }),
    )
    .await;
    assert!(
        refusal(&unanswered).contains(key.as_str()),
        "{}",
        unanswered.body
    );
    assert_eq!(gw.gateway().stats().parked_calls, 1);

    // The real retry completes the call; the same state cannot be spent twice.
    let done = message(
        &call(
            &gw.url,
            tool,
            json!({ "requestState": state, "inputResponses": answer }),
        )
        .await,
    );
    assert_eq!(done["id"], 7, "{done}");
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert!(
        done["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Ada"),
        "{done}"
    );
    let again = call(
        &gw.url,
        tool,
        json!({ "requestState": state, "inputResponses": answer }),
    )
    .await;
    assert!(
        refusal(&again).contains("no longer waiting"),
        "{}",
        again.body
    );
    let stats = gw.gateway().stats();
    assert_eq!((stats.parked_calls, stats.asks_waiting), (0, 0));
    gw.stop().await;
}

#[tokio::test]
async fn a_call_nobody_continues_expires_and_leaves_nothing_behind() {
    // The upstream's timeout bounds how long a parked call waits.
    let yaml = format!("upstreams:\n{}", legacy_fixture("    timeout: 1s\n"));
    let gw = TestGateway::start(&yaml).await;
    let tool = "fixture__test_input_required_result_elicitation";
    let first = message(&call(&gw.url, tool, json!({})).await);
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    let key = first["result"]["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    within("the parked call to expire", async {
        while gw.gateway().stats().parked_calls > 0 {
            tokio::task::yield_now().await;
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    let late = call(
        &gw.url,
        tool,
        json!({ "requestState": state, "inputResponses": { key: { "action": "accept", "content": { "name": "Ada" } } } }),
    )
    .await;
    assert!(refusal(&late).contains("expired"), "{}", late.body);
    // The upstream is served as before.
    let again = message(&call(&gw.url, tool, json!({})).await);
    assert_eq!(again["result"]["resultType"], "input_required", "{again}");
    gw.stop().await;
}
