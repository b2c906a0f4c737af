//! Tasks through the gateway, in both eras, with two clients: the
//! conformance fixture as a 2026-07-28 upstream (`modern`, the tasks
//! extension) and as a 2025-11-25 one (`legacy`, experimental tasks).
//! The creator creates, polls, reads, cancels and lists its tasks; the
//! other client gets the nonexistent-id error for every one of them and
//! never sees them listed or hears their status. Raw HTTP: the Python SDK
//! has no client side for tasks.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::client::{Raw, SseReader, post};
use crate::support::{McpClient, TestGateway, fixture_upstream, within};

pub(crate) const ALICE_KEY: &str = "alice-key-0b7e5d1c9a4f";
pub(crate) const BOB_KEY: &str = "bob-key-6c2a9f0e3d8b17";
const EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// Two clients (API keys), the fixture once per era.
fn config() -> String {
    format!(
        "auth:\n  mode: on\n  api_keys:\n    - client: alice\n      key: {ALICE_KEY}\n    - client: bob\n      key: {BOB_KEY}\nupstreams:\n{}{}    era: legacy\n",
        fixture_upstream("modern", &["--conformance"]),
        fixture_upstream("legacy", &["--conformance"]),
    )
}

fn bearer(key: &str) -> String {
    format!("Bearer {key}")
}

/// A 2026-07-28 client: stateless requests with its API key.
pub(crate) struct Stateless {
    url: String,
    auth: String,
    http: reqwest::Client,
}

impl Stateless {
    pub(crate) fn new(url: &str, key: &str) -> Self {
        Self {
            url: url.to_owned(),
            auth: bearer(key),
            http: reqwest::Client::new(),
        }
    }

    /// Sends `method`; the client declares the tasks extension when `tasks`.
    async fn send(&self, method: &str, mut params: Value, tasks: bool) -> Raw {
        let extensions = if tasks {
            json!({ EXTENSION: {} })
        } else {
            json!({})
        };
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": { "extensions": extensions },
        });
        let name = params
            .get("taskId")
            .or_else(|| params.get("name"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let body =
            json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params }).to_string();
        let mut headers = vec![
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", method),
            ("authorization", self.auth.as_str()),
        ];
        if let Some(name) = &name {
            headers.push(("mcp-name", name));
        }
        post(&self.http, &self.url, None, &body, &headers).await
    }

    /// The response message of `method` (the last SSE event, or the JSON body).
    pub(crate) async fn request(&self, method: &str, params: Value) -> Value {
        let raw = self.send(method, params, true).await;
        let messages = crate::support::client::sse_messages(&raw.body);
        messages.last().cloned().unwrap_or_else(|| raw.json())
    }

    pub(crate) async fn result(&self, method: &str, params: Value) -> Value {
        let response = self.request(method, params).await;
        assert!(response.get("error").is_none(), "{method}: {response}");
        response["result"].clone()
    }

    /// Opens a listen stream for the status of `tasks`.
    async fn listen(&self, id: u64, tasks: &[&str], declare: bool) -> reqwest::Response {
        let extensions = if declare {
            json!({ EXTENSION: {} })
        } else {
            json!({})
        };
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": {
            "notifications": { "taskIds": tasks },
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": { "extensions": extensions },
            } } });
        self.http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "subscriptions/listen")
            .header("authorization", &self.auth)
            .body(body.to_string())
            .send()
            .await
            .unwrap()
    }

    /// Polls `tasks/get` until `done` holds (bounded by the test deadline).
    pub(crate) async fn poll(&self, task: &str, done: impl Fn(&Value) -> bool) -> Value {
        within(&format!("task {task}"), async {
            loop {
                let state = self.result("tasks/get", json!({ "taskId": task })).await;
                if done(&state) {
                    return state;
                }
                // A poll interval, not a synchronisation: the deadline bounds it.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
    }
}

pub(crate) fn error_code(response: &Value) -> i64 {
    response["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("expected an error: {response}"))
}

#[tokio::test]
async fn modern_tasks_are_relayed_and_only_their_creator_can_use_them() {
    let gw = TestGateway::start(&config()).await;
    let alice = Stateless::new(&gw.url, ALICE_KEY);
    let bob = Stateless::new(&gw.url, BOB_KEY);

    // The extension is declared because an upstream offers it.
    let discover = alice.result("server/discover", json!({})).await;
    assert!(
        discover["capabilities"]["extensions"][EXTENSION].is_object(),
        "{discover}"
    );

    // Create: a long task and a short one.
    let long = alice
        .result(
            "tools/call",
            json!({ "name": "modern__slow_compute", "arguments": { "seconds": 60, "label": "long" } }),
        )
        .await;
    assert_eq!(long["resultType"], "task", "{long}");
    let long_id = long["taskId"].as_str().unwrap().to_owned();
    assert!(long_id.starts_with("modern."), "namespaced: {long_id}");
    assert!(
        !long_id.starts_with("modern.task-"),
        "not the upstream's id"
    );
    let short = alice
        .result(
            "tools/call",
            json!({ "name": "modern__slow_compute", "arguments": { "seconds": 0.1, "label": "short" } }),
        )
        .await;
    let short_id = short["taskId"].as_str().unwrap().to_owned();
    assert_ne!(short_id, long_id);

    // Poll to the end; the inlined result comes back with the gateway id.
    let done = alice.poll(&short_id, |t| t["status"] != "working").await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["taskId"], short_id.as_str());
    assert_eq!(done["result"]["content"][0]["text"], "computed short");

    // Input through tasks/update.
    let confirm = alice
        .result(
            "tools/call",
            json!({ "name": "modern__confirm_delete", "arguments": { "filename": "a.txt" } }),
        )
        .await;
    let confirm_id = confirm["taskId"].as_str().unwrap().to_owned();
    let waiting = alice
        .poll(&confirm_id, |t| t["status"] == "input_required")
        .await;
    let key = waiting["inputRequests"]
        .as_object()
        .and_then(|r| r.keys().next().cloned())
        .expect("an input request");
    let ack = alice
        .result(
            "tasks/update",
            json!({ "taskId": confirm_id, "inputResponses": { key: { "action": "accept", "content": { "confirm": true } } } }),
        )
        .await;
    assert_eq!(ack["resultType"], "complete");
    let confirmed = alice
        .poll(&confirm_id, |t| t["status"] == "completed")
        .await;
    assert_eq!(confirmed["result"]["content"][0]["text"], "Deleted a.txt");

    // Bob gets exactly what a nonexistent id gets, for every method.
    let nonexistent = bob
        .request("tasks/get", json!({ "taskId": "modern.00000000" }))
        .await;
    assert_eq!(error_code(&nonexistent), -32602);
    for id in [&long_id, &short_id, &confirm_id] {
        for (method, mut params) in [
            ("tasks/get", json!({})),
            ("tasks/cancel", json!({})),
            ("tasks/update", json!({ "inputResponses": {} })),
        ] {
            params["taskId"] = Value::from(id.as_str());
            let refused = bob.request(method, params).await;
            assert_eq!(error_code(&refused), -32602, "{method} {id}: {refused}");
            assert_eq!(
                refused["error"]["message"],
                format!("unknown task: {id}"),
                "{refused}"
            );
        }
    }
    // Bob's refusals left Alice's long task running.
    let still = alice
        .result("tasks/get", json!({ "taskId": long_id }))
        .await;
    assert_eq!(still["status"], "working");

    // Status notifications: Alice listens for her long task; Bob asks
    // for it too and for a task of his own, and gets only his.
    let refused = alice.listen(7, &[&long_id], false).await;
    assert_eq!(refused.status(), reqwest::StatusCode::BAD_REQUEST);
    let refused: Value = serde_json::from_str(&refused.text().await.unwrap()).unwrap();
    assert_eq!(error_code(&refused), -32021, "{refused}");
    let mut alice_listen = SseReader::from_response(alice.listen(7, &[&long_id], true).await);
    let ack = alice_listen.next().await.unwrap();
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([long_id]),
        "{ack}"
    );
    let bobs = bob
        .result(
            "tools/call",
            json!({ "name": "modern__confirm_delete", "arguments": { "filename": "b.txt" } }),
        )
        .await;
    let bobs_id = bobs["taskId"].as_str().unwrap().to_owned();
    let bobs_key = bob
        .poll(&bobs_id, |t| t["status"] == "input_required")
        .await["inputRequests"]
        .as_object()
        .and_then(|r| r.keys().next().cloned())
        .unwrap();
    let mut bob_listen = SseReader::from_response(bob.listen(8, &[&long_id, &bobs_id], true).await);
    let ack = bob_listen.next().await.unwrap();
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([bobs_id]),
        "{ack}"
    );

    // Cancel: an empty ack, then the status says so, on Alice's stream too.
    let ack = alice
        .result("tasks/cancel", json!({ "taskId": long_id }))
        .await;
    assert_eq!(ack, json!({ "resultType": "complete" }));
    let note = alice_listen.next().await.unwrap();
    assert_eq!(note["method"], "notifications/tasks", "{note}");
    assert_eq!(note["params"]["taskId"], long_id.as_str());
    assert_eq!(note["params"]["status"], "cancelled");
    assert_eq!(
        note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        7
    );
    let cancelled = alice.poll(&long_id, |t| t["status"] != "working").await;
    assert_eq!(cancelled["status"], "cancelled");

    // Bob's task finishes after that: its notification is the first thing
    // on his stream, so Alice's never reached him.
    bob.result(
        "tasks/update",
        json!({ "taskId": bobs_id, "inputResponses": { bobs_key: { "action": "accept", "content": { "confirm": false } } } }),
    )
    .await;
    let note = within("bob's task notification", async {
        loop {
            let note = bob_listen.next().await.unwrap();
            assert_eq!(
                note["params"]["taskId"],
                bobs_id.as_str(),
                "bob heard: {note}"
            );
            if note["params"]["status"] == "completed" {
                return note;
            }
        }
    })
    .await;
    assert_eq!(note["params"]["result"]["content"][0]["text"], "Kept b.txt");
    assert_eq!(
        note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        8
    );

    // Without the extension declared: -32021; tasks/list is not in this era.
    let gated = alice
        .send("tasks/get", json!({ "taskId": short_id }), false)
        .await;
    assert_eq!(gated.error_code(), -32021, "{}", gated.body);
    let list = alice.request("tasks/list", json!({})).await;
    assert_eq!(error_code(&list), -32601, "{list}");
    gw.stop().await;
}

/// The next notification on a session's GET stream that is not a
/// `list_changed`.
async fn next_note(stream: &mut SseReader) -> Value {
    stream
        .next_skipping_list_changed()
        .await
        .expect("the stream ended")
}

#[tokio::test]
async fn legacy_tasks_are_relayed_and_only_their_session_can_use_them() {
    let gw = TestGateway::start(&config()).await;
    let (alice_auth, bob_auth) = (bearer(ALICE_KEY), bearer(BOB_KEY));
    let alice = McpClient::connect_with(&gw.url, &[("authorization", &alice_auth)]).await;
    let bob = McpClient::connect_with(&gw.url, &[("authorization", &bob_auth)]).await;
    let mut alice_stream = alice.listen(None).await;
    let mut bob_stream = bob.listen(None).await;
    // Bob hears log messages: the marker that ends his watch below.
    bob.set_level("info").await;

    // Declared because the legacy upstream offers tasks.
    let init = crate::support::client::post(
        &reqwest::Client::new(),
        &gw.url,
        None,
        &json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "it", "version": "0" } } })
        .to_string(),
        &[("authorization", &alice_auth)],
    )
    .await;
    assert!(
        init.json()["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"].is_object(),
        "{}",
        init.body
    );

    let create = |seconds: f64, label: &str| {
        json!({ "name": "legacy__slow_compute", "arguments": { "seconds": seconds, "label": label },
                "task": { "ttl": 60000 } })
    };
    let long = alice.result("tools/call", create(60.0, "long")).await;
    let long_id = long["task"]["taskId"].as_str().unwrap().to_owned();
    assert!(long_id.starts_with("legacy."), "{long}");
    let short = alice.result("tools/call", create(0.1, "short")).await;
    let short_id = short["task"]["taskId"].as_str().unwrap().to_owned();

    // Its status notification reaches Alice's stream, with her id.
    let note = within("a task status notification", async {
        loop {
            let note = next_note(&mut alice_stream).await;
            if note["method"] == "notifications/tasks/status"
                && note["params"]["status"] != "working"
            {
                return note;
            }
        }
    })
    .await;
    assert_eq!(note["params"]["taskId"], short_id.as_str(), "{note}");
    assert_eq!(note["params"]["status"], "completed");

    // Poll and fetch the result; its related-task names the gateway id.
    let state = alice
        .result("tasks/get", json!({ "taskId": short_id }))
        .await;
    assert_eq!(state["status"], "completed");
    assert_eq!(state["taskId"], short_id.as_str());
    let payload = alice
        .result("tasks/result", json!({ "taskId": short_id }))
        .await;
    assert_eq!(payload["content"][0]["text"], "computed short");
    assert_eq!(
        payload["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        short_id.as_str()
    );

    // Bob makes a task of his own on the same upstream session.
    let bobs = bob.result("tools/call", create(60.0, "bob")).await;
    let bobs_id = bobs["task"]["taskId"].as_str().unwrap().to_owned();

    // Alice's list has her two tasks (not Bob's), by gateway id.
    let listed = alice.result("tasks/list", json!({})).await;
    let mut ids: Vec<&str> = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["taskId"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    let mut mine = vec![long_id.as_str(), short_id.as_str()];
    mine.sort_unstable();
    assert_eq!(ids, mine, "{listed}");

    // Bob: the nonexistent-id error everywhere, an empty list.
    let nonexistent = bob
        .request("tasks/get", json!({ "taskId": "legacy.0000" }))
        .await;
    assert_eq!(error_code(&nonexistent), -32602);
    for id in [&long_id, &short_id] {
        for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
            let refused = bob.request(method, json!({ "taskId": id })).await;
            assert_eq!(error_code(&refused), -32602, "{method}: {refused}");
            assert_eq!(refused["error"]["message"], format!("unknown task: {id}"));
        }
    }
    let bob_list = bob.result("tasks/list", json!({})).await;
    assert_eq!(
        bob_list["tasks"].as_array().map(Vec::len),
        Some(1),
        "{bob_list}"
    );
    assert_eq!(bob_list["tasks"][0]["taskId"], bobs_id.as_str());
    // Bob's own task is his alone: Alice cannot reach it either.
    let refused = alice
        .request("tasks/cancel", json!({ "taskId": bobs_id }))
        .await;
    assert_eq!(error_code(&refused), -32602);

    // Cancel Alice's long task: the answer and the notification carry her id.
    let cancelled = alice
        .result("tasks/cancel", json!({ "taskId": long_id }))
        .await;
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(cancelled["taskId"], long_id.as_str());
    let note = within("the cancellation's notification", async {
        loop {
            let note = next_note(&mut alice_stream).await;
            if note["method"] == "notifications/tasks/status" {
                return note;
            }
        }
    })
    .await;
    assert_eq!(note["params"]["taskId"], long_id.as_str());

    // Bob never heard of Alice's tasks. A log message sent after all of
    // the above reaches him through the same queue, so anything meant
    // for him would have come first.
    alice
        .result(
            "tools/call",
            json!({ "name": "legacy__test_tool_with_logging", "arguments": {} }),
        )
        .await;
    within("bob's log marker", async {
        loop {
            let note = next_note(&mut bob_stream).await;
            if note["method"] == "notifications/message" {
                return;
            }
            if note["method"] == "notifications/tasks/status" {
                assert_eq!(
                    note["params"]["taskId"],
                    bobs_id.as_str(),
                    "bob heard of another client's task: {note}"
                );
            }
        }
    })
    .await;
    gw.stop().await;
}

#[tokio::test]
async fn tasks_pass_through_a_chain_of_gateways_over_streamable_http() {
    // The inner gateway serves the fixture; the outer one reaches it as a
    // 2026-07-28 Streamable HTTP upstream, so task requests carry Mcp-Name
    // (the inner gateway refuses them without it) and task ids are
    // rewritten twice.
    let inner = TestGateway::start(&format!(
        "upstreams:\n{}",
        fixture_upstream("modern", &["--conformance"])
    ))
    .await;
    let outer = TestGateway::start(&format!(
        "auth:\n  mode: on\n  api_keys:\n    - client: alice\n      key: {ALICE_KEY}\nupstreams:\n  inner:\n    url: {:?}\n",
        inner.url
    ))
    .await;
    let alice = Stateless::new(&outer.url, ALICE_KEY);
    let discover = alice.result("server/discover", json!({})).await;
    assert!(
        discover["capabilities"]["extensions"][EXTENSION].is_object(),
        "{discover}"
    );
    let created = alice
        .result(
            "tools/call",
            json!({ "name": "inner__modern__confirm_delete", "arguments": { "filename": "c.txt" } }),
        )
        .await;
    let id = created["taskId"].as_str().unwrap().to_owned();
    assert!(id.starts_with("inner."), "{created}");
    let mut listen = SseReader::from_response(alice.listen(3, &[&id], true).await);
    let ack = listen.next().await.unwrap();
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([id]),
        "{ack}"
    );
    let waiting = alice.poll(&id, |t| t["status"] == "input_required").await;
    let key = waiting["inputRequests"]
        .as_object()
        .and_then(|r| r.keys().next().cloned())
        .unwrap();
    alice
        .result(
            "tasks/update",
            json!({ "taskId": id, "inputResponses": { key: { "action": "accept", "content": { "confirm": true } } } }),
        )
        .await;
    let note = within("the task's notification through both gateways", async {
        loop {
            let note = listen.next().await.unwrap();
            assert_eq!(note["params"]["taskId"], id.as_str(), "{note}");
            if note["params"]["status"] == "completed" {
                return note;
            }
        }
    })
    .await;
    assert_eq!(
        note["params"]["result"]["content"][0]["text"],
        "Deleted c.txt"
    );
    let done = alice.result("tasks/get", json!({ "taskId": id })).await;
    assert_eq!(done["status"], "completed");
    outer.stop().await;
    inner.stop().await;
}
