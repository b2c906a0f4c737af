//! `isolation: per-session`: each 2025-era session's calls go to a child
//! process of its own, started on its first call, stopped and reaped when
//! the session ends (DELETE, or the client going away), capped at
//! `max_instances`. The fixture's `pid` tool says which child answered;
//! server-everything shows that server-to-client requests become exact.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::interop::{everything_upstream, run_python};
use crate::support::{McpClient, TestGateway, fixture_upstream, process_exists, within};

/// YAML for the fixture (with its test controls) as upstream `fx`, one
/// child per session, at most `max` of them.
fn isolated_fixture(max: usize) -> String {
    format!(
        "upstreams:\n{}    isolation: per-session\n    max_instances: {max}\n",
        fixture_upstream("fx", &["--test-controls"])
    )
}

/// The pid of the child that answered this session's `fx__pid` call.
async fn pid_of(client: &McpClient) -> u32 {
    let response = client.call_tool("fx__pid", json!({})).await;
    let text = response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no pid in {response}"));
    text.parse().unwrap()
}

/// Polls (bounded by the test deadline) until `done` holds.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let poll = async {
        while !done() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    within(what, poll).await;
}

async fn get(url: &str) -> String {
    within(url, reqwest::get(url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test]
async fn each_session_gets_its_own_child_reaped_when_it_is_deleted_and_capped() {
    let gw = TestGateway::start(&isolated_fixture(2)).await;
    let upstream = gw.gateway().upstream("fx").unwrap();
    let shared = upstream.pid().expect("the shared child runs");
    assert_eq!(upstream.instances(), Some(0), "none before a first call");

    let a = McpClient::connect(&gw.url).await;
    let b = McpClient::connect(&gw.url).await;
    let pid_a = pid_of(&a).await;
    let pid_b = pid_of(&b).await;
    assert_ne!(pid_a, pid_b, "each session has its own child");
    assert!(
        pid_a != shared && pid_b != shared,
        "neither is the shared one"
    );
    assert_eq!(pid_of(&a).await, pid_a, "a session keeps its child");
    assert_eq!(upstream.instances(), Some(2));
    let mut pids = upstream.instance_pids();
    pids.sort_unstable();
    let mut expected = vec![pid_a, pid_b];
    expected.sort_unstable();
    assert_eq!(pids, expected);
    // The catalog is the shared child's, with nothing added by instances.
    let (tools, _) = a.list_all("tools/list", "tools").await;
    assert_eq!(
        tools.iter().filter(|t| t["name"] == "fx__pid").count(),
        1,
        "{tools:?}"
    );

    // Operators see the count.
    let base = gw.url.trim_end_matches("/mcp").to_owned();
    let status: Value = serde_json::from_str(&get(&format!("{base}/status")).await).unwrap();
    assert_eq!(status["upstreams"][0]["instances"], 2, "{status}");
    let metrics = get(&format!("{base}/metrics")).await;
    let line = r#"mcpmux_upstream_instances{upstream="fx"} 2"#;
    assert!(metrics.contains(line), "missing {line} in\n{metrics}");

    // A third session is over the cap: a clear error, and nothing else changes.
    let c = McpClient::connect(&gw.url).await;
    let refused = c.call_tool("fx__pid", json!({})).await;
    assert_eq!(refused["error"]["code"], -32050, "{refused}");
    assert_eq!(refused["error"]["data"]["upstream"], "fx", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("'fx'") && message.contains("max_instances") && message.contains('2'),
        "{refused}"
    );
    assert_eq!(pid_of(&a).await, pid_a);
    assert_eq!(pid_of(&b).await, pid_b);
    assert_eq!(upstream.instances(), Some(2));

    // A stateless (2026-07-28) request has no session: the shared child answers.
    let meta = json!({ "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} });
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": { "name": "fx__pid", "arguments": {}, "_meta": meta } });
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "fx__pid"),
    ];
    let raw = crate::support::client::post(
        &reqwest::Client::new(),
        &gw.url,
        None,
        &body.to_string(),
        &headers,
    )
    .await;
    let answered = raw.json()["result"]["content"][0]["text"].clone();
    assert_eq!(answered, shared.to_string(), "{}", raw.body);

    // DELETE ends A's session: its child is stopped and reaped, B's runs on.
    assert_eq!(a.delete().await, StatusCode::OK);
    eventually("A's child to be reaped", || !process_exists(pid_a)).await;
    assert_eq!(upstream.instances(), Some(1));
    assert!(process_exists(pid_b));
    assert_eq!(pid_of(&b).await, pid_b);
    // The slot is free again: C gets a child of its own.
    let pid_c = pid_of(&c).await;
    assert!(![pid_a, pid_b, shared].contains(&pid_c), "{pid_c}");

    gw.stop().await;
    for pid in [pid_b, pid_c, shared] {
        assert!(!process_exists(pid), "{pid} outlived the gateway");
    }
}

/// A minimal legacy HTTP+SSE client: the `GET /sse` stream and the
/// endpoint it names for POSTs.
struct SseSession {
    http: reqwest::Client,
    endpoint: String,
    stream:
        std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: String,
}

impl SseSession {
    async fn open(base: &str) -> SseSession {
        let http = reqwest::Client::new();
        let response = within("GET /sse", http.get(format!("{base}/sse")).send())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let mut session = SseSession {
            http,
            endpoint: String::new(),
            stream: Box::pin(response.bytes_stream()),
            buffer: String::new(),
        };
        let (event, data) = session.next_event().await;
        assert_eq!(event, "endpoint");
        session.endpoint = format!("{base}{data}");
        session
    }

    /// The next event's name and data.
    async fn next_event(&mut self) -> (String, String) {
        use futures_util::StreamExt as _;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                let field = |name: &str| {
                    event
                        .lines()
                        .filter_map(|l| l.strip_prefix(name))
                        .map(|v| v.trim_start().to_owned())
                        .collect::<Vec<_>>()
                        .join("\n")
                };
                if event.lines().all(|l| l.starts_with(':') || l.is_empty()) {
                    continue;
                }
                return (field("event:"), field("data:"));
            }
            let chunk = within("an SSE event", self.stream.next()).await;
            let chunk = chunk.expect("the stream is open").unwrap();
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// Sends a request and waits for its answer on the stream.
    async fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        self.post(body).await;
        loop {
            let (_, data) = self.next_event().await;
            let message: Value = serde_json::from_str(&data).unwrap();
            if message["id"] == id {
                return message;
            }
        }
    }

    async fn post(&self, body: Value) {
        let sent = self
            .http
            .post(&self.endpoint)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send();
        let status = within("POST /message", sent).await.unwrap().status();
        assert!(status.is_success(), "{status}");
    }
}

#[tokio::test]
async fn a_client_that_goes_away_takes_its_child_with_it() {
    let gw = TestGateway::start(&isolated_fixture(4)).await;
    let upstream = gw.gateway().upstream("fx").unwrap();
    let base = gw.url.trim_end_matches("/mcp").to_owned();

    let mut sse = SseSession::open(&base).await;
    let init = json!({ "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": { "name": "it", "version": "0" } });
    sse.request(0, "initialize", init).await;
    sse.post(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
        .await;
    let answer = sse
        .request(
            1,
            "tools/call",
            json!({ "name": "fx__pid", "arguments": {} }),
        )
        .await;
    let pid: u32 = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"))
        .parse()
        .unwrap();
    assert_ne!(Some(pid), upstream.pid());
    assert_eq!(upstream.instance_pids(), vec![pid]);

    // The client disconnects without a word: the session ends, and its child.
    drop(sse);
    let mut sessions = gw.gateway().watch_sessions();
    within("the /sse session to close", sessions.wait_for(|n| *n == 0))
        .await
        .unwrap();
    eventually("the child to be reaped", || !process_exists(pid)).await;
    assert_eq!(upstream.instances(), Some(0));
    gw.stop().await;
}

#[tokio::test]
async fn two_sessions_asked_at_once_each_get_their_own_elicitation() {
    let yaml = format!(
        "upstreams:\n{}    isolation: per-session\n",
        everything_upstream("everything")
    );
    let gw = TestGateway::start(&yaml).await;
    // A's elicitation is held open while B calls the same tool: on a
    // shared child B is refused ("several sessions"); here both are asked.
    let seen = run_python("ask_client.py", &["two", &gw.url, "everything__"]).await;
    for who in ["a", "b"] {
        assert_eq!(
            seen[format!("{who}_seen")].as_array().unwrap().len(),
            1,
            "{who} is asked once: {seen}"
        );
        assert_eq!(seen[who]["error"], false, "{seen}");
        let text = seen[who]["text"].as_str().unwrap();
        assert!(text.contains("Ada Lovelace"), "{who}: {text}");
    }
    assert_eq!(gw.gateway().stats().asks_waiting, 0);
    // The SDK deleted both sessions on the way out: no instance is left.
    let upstream = gw.gateway().upstream("everything").unwrap();
    let mut sessions = gw.gateway().watch_sessions();
    within("the sessions to close", sessions.wait_for(|n| *n == 0))
        .await
        .unwrap();
    assert_eq!(upstream.instances(), Some(0));
    gw.stop().await;
}

#[tokio::test]
async fn a_reload_that_changes_max_instances_restarts_the_upstream_and_its_instances() {
    let gw = TestGateway::start(&isolated_fixture(1)).await;
    let upstream = gw.gateway().upstream("fx").unwrap();
    let a = McpClient::connect(&gw.url).await;
    let old = pid_of(&a).await;

    let config = mcpmux::Config::parse(
        &crate::support::gateway::with_auth_off(&isolated_fixture(3)),
        "reload.yaml",
        &mcpmux::Lookup::from_process(),
    )
    .unwrap();
    let diff = within("reload", gw.gateway().reload(&config)).await;
    assert_eq!(diff.changed, ["fx"], "{diff:?}");
    // The old upstream was stopped and awaited, its instance with it.
    assert!(!process_exists(old), "the old instance outlived the reload");
    assert_eq!(upstream.instances(), Some(0));
    gw.wait_ready("fx").await;
    let upstream = gw.gateway().upstream("fx").unwrap();

    // The session lives on and gets a fresh child from the new pool, whose cap is 3.
    let b = McpClient::connect(&gw.url).await;
    let c = McpClient::connect(&gw.url).await;
    let pids = [pid_of(&a).await, pid_of(&b).await, pid_of(&c).await];
    assert!(!pids.contains(&old), "{pids:?}");
    assert_eq!(upstream.instances(), Some(3));
    gw.stop().await;
}

#[tokio::test]
async fn an_instances_list_changes_reach_its_own_session_only() {
    let gw = TestGateway::start(&isolated_fixture(2)).await;
    let a = McpClient::connect(&gw.url).await;
    let b = McpClient::connect(&gw.url).await;
    let mut a_events = a.listen(None).await;
    let mut b_events = b.listen(None).await;

    // A's own child adds a tool: A is told to look again.
    let added = a.call_tool("fx__add_tools", json!({ "count": 1 })).await;
    assert!(added.get("error").is_none(), "{added}");
    let told = within("A's list_changed", a_events.next()).await.unwrap();
    assert_eq!(told["method"], "notifications/tools/list_changed", "{told}");

    // B's own child adds a prompt: the first thing B hears is that, so
    // A's tools change never reached it (pending flags go out together).
    let added = b
        .call_tool("fx__add_prompt", json!({ "name": "mine" }))
        .await;
    assert!(added.get("error").is_none(), "{added}");
    let told = within("B's list_changed", b_events.next()).await.unwrap();
    assert_eq!(
        told["method"], "notifications/prompts/list_changed",
        "{told}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_crashed_instance_is_restarted_for_its_session_and_nothing_else_moves() {
    let gw = TestGateway::start(&isolated_fixture(2)).await;
    let upstream = gw.gateway().upstream("fx").unwrap();
    let shared = upstream.pid().unwrap();
    let a = McpClient::connect(&gw.url).await;
    let b = McpClient::connect(&gw.url).await;
    let (pid_a, pid_b) = (pid_of(&a).await, pid_of(&b).await);

    let crashed = a.call_tool("fx__crash", json!({})).await;
    assert!(crashed.get("error").is_some(), "{crashed}");
    eventually("the crashed child to be reaped", || !process_exists(pid_a)).await;
    // Supervised like a shared child: back after its backoff, with a new
    // process; calls meanwhile fail with the instance's state.
    let restarted = within("A's instance to come back", async {
        loop {
            let response = a.call_tool("fx__pid", json!({})).await;
            if let Some(text) = response["result"]["content"][0]["text"].as_str() {
                return text.parse::<u32>().unwrap();
            }
            let message = response["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("'fx'"), "{response}");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(![pid_a, pid_b, shared].contains(&restarted), "{restarted}");
    assert_eq!(pid_of(&b).await, pid_b, "B's child was not touched");
    assert_eq!(upstream.pid(), Some(shared), "nor the shared one");
    assert_eq!(upstream.instances(), Some(2));
    gw.stop().await;
}

#[tokio::test]
async fn an_idle_session_that_expires_takes_its_child_with_it() {
    let yaml = format!("sessions:\n  idle_timeout: 1s\n{}", isolated_fixture(2));
    let gw = TestGateway::start(&yaml).await;
    let upstream = gw.gateway().upstream("fx").unwrap();
    let a = McpClient::connect(&gw.url).await;
    let pid = pid_of(&a).await;
    // Nothing more from A: the sweeper ends the session, and its child.
    let mut sessions = gw.gateway().watch_sessions();
    within("the idle session to expire", sessions.wait_for(|n| *n == 0))
        .await
        .unwrap();
    eventually("the child to be reaped", || !process_exists(pid)).await;
    assert_eq!(upstream.instances(), Some(0));
    assert!(
        upstream.pid().is_some_and(process_exists),
        "the shared one runs on"
    );
    gw.stop().await;
}

#[tokio::test]
async fn over_sse_and_mcpmux_stdio_a_sessions_own_child_asks_it() {
    let yaml = format!(
        "upstreams:\n{}    isolation: per-session\n",
        everything_upstream("everything")
    );
    let asked = |seen: &Value| {
        assert_eq!(seen["sampled"]["error"], false, "{seen}");
        assert_eq!(seen["elicited"]["error"], false, "{seen}");
        assert_eq!(seen["sampling_seen"].as_array().unwrap().len(), 1, "{seen}");
        assert_eq!(
            seen["elicitation_seen"].as_array().unwrap().len(),
            1,
            "{seen}"
        );
    };
    let gw = TestGateway::start(&yaml).await;
    let sse = format!("sse:{}", gw.url.replace("/mcp", "/sse"));
    asked(&run_python("ask_client.py", &["one", &sse, "everything__"]).await);
    let mut sessions = gw.gateway().watch_sessions();
    within("the /sse session to close", sessions.wait_for(|n| *n == 0))
        .await
        .unwrap();
    assert_eq!(
        gw.gateway().upstream("everything").unwrap().instances(),
        Some(0)
    );
    gw.stop().await;

    let config = crate::support::tempdir().join("isolated-stdio.yaml");
    std::fs::write(&config, crate::support::gateway::with_auth_off(&yaml)).unwrap();
    let spec = format!("mcpmux:{}:{}", crate::support::exe(), config.display());
    asked(&run_python("ask_client.py", &["one", &spec, "everything__"]).await);
}

#[tokio::test]
async fn an_instances_log_messages_reach_its_own_session_only() {
    let gw = TestGateway::start(&isolated_fixture(2)).await;
    let a = McpClient::connect(&gw.url).await;
    let b = McpClient::connect(&gw.url).await;
    a.set_level("debug").await;
    b.set_level("debug").await;
    let mut a_events = a.listen(None).await;
    let mut b_events = b.listen(None).await;
    let log = |message: &str| json!({ "level": "warning", "message": message });

    let logged = a.call_tool("fx__log", log("from-a")).await;
    assert!(logged.get("error").is_none(), "{logged}");
    let heard = within("A's log", a_events.next_skipping_list_changed())
        .await
        .unwrap();
    assert_eq!(heard["params"]["data"], "from-a 0", "{heard}");

    // Messages queue in order: had A's reached B, B would hear it first.
    let logged = b.call_tool("fx__log", log("from-b")).await;
    assert!(logged.get("error").is_none(), "{logged}");
    let heard = within("B's log", b_events.next_skipping_list_changed())
        .await
        .unwrap();
    assert_eq!(heard["params"]["data"], "from-b 0", "{heard}");
    gw.stop().await;
}
