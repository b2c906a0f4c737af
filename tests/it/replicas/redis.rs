//! Three replicas sharing sessions through a real `redis-server`
//! (`session_store: redis://...`): a session initialized on A is used on B
//! for calls, subscriptions and its notification stream; the replica that
//! holds the stream subscribes upstream itself and the others release
//! their subscription; losing the replica that holds the stream costs the
//! client a reconnect of it and nothing else; DELETE on B ends it on A;
//! with Redis stopped, sessions in memory keep working, new ones get 503
//! and `/readyz` says why.

use std::process::Stdio;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

use super::{Replica, free_port};
use crate::support::client::post;
use crate::support::gateway::with_auth_off;
use crate::support::peer::HttpPeer;
use crate::support::{McpClient, tempdir, within};

/// `redis-server` on a loopback port, no persistence; killed on drop.
pub(crate) struct RedisServer {
    child: Child,
    port: u16,
}

impl RedisServer {
    pub(crate) async fn start(port: u16) -> RedisServer {
        let child = Command::new("/usr/bin/redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let server = RedisServer { child, port };
        within("redis-server to answer PING", async {
            loop {
                if server.ping().await {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        })
        .await;
        server
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    async fn ping(&self) -> bool {
        let Ok(client) = redis::Client::open(self.url()) else {
            return false;
        };
        let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
            return false;
        };
        redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .is_ok()
    }

    async fn stop(mut self) {
        self.child.kill().await.unwrap();
    }
}

async fn get(url: &str) -> (StatusCode, String) {
    let response = within(url, reqwest::get(url)).await.unwrap();
    (response.status(), response.text().await.unwrap())
}

/// Polls `url` until it answers `status`; returns the body.
async fn until_status(url: &str, status: StatusCode) -> String {
    within(&format!("{url} to answer {status}"), async {
        loop {
            let (got, body) = get(url).await;
            if got == status {
                return body;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
}

/// A raw `initialize` POST: status and body.
async fn initialize(url: &str) -> (StatusCode, Value) {
    let init = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": { "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "it", "version": "0" } }
    });
    let raw = post(&reqwest::Client::new(), url, None, &init.to_string(), &[]).await;
    (raw.status, raw.json())
}

/// The next `resources/updated` on `events`, after any `list_changed`.
async fn next_update(events: &mut crate::support::client::SseReader) -> Value {
    within("resources/updated", events.next_skipping_list_changed())
        .await
        .expect("the stream ended")
}

/// Calls the Python server's `touch_all` through `client` until it says
/// exactly one session holds the subscription upstream (the others let
/// theirs go); polled, since releasing is asynchronous.
async fn until_told_once(client: &McpClient, touch_all: &Value) {
    loop {
        let told = client.call_tool("py__touch_all", touch_all.clone()).await;
        if told["result"]["content"][0]["text"] == "told 1" {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn sessions_move_between_replicas_through_redis() {
    let redis = RedisServer::start(free_port()).await;
    let py = HttpPeer::python("streamable-http", 0).await;
    let path = tempdir().join("mcpmux.yaml");
    let yaml = format!(
        "upstreams:\n  py:\n    url: {:?}\n    era: legacy\nsession_store: {:?}\n",
        py.url("/mcp"),
        redis.url()
    );
    std::fs::write(&path, with_auth_off(&yaml)).unwrap();
    let a = Replica::start(&path, 1).await;
    let b = Replica::start(&path, 1).await;
    let mut c = Replica::start(&path, 1).await;
    let uri = "py+py://status";
    let touch_all = json!({ "uri": "py://status" });

    // Initialized on A, used on B: calls and a subscription.
    let on_a = McpClient::connect(&a.url).await;
    let on_b = on_a.on(&b.url);
    let echo = on_b
        .call_tool("py__echo", json!({ "message": "on b" }))
        .await;
    assert_eq!(echo["result"]["content"][0]["text"], "on b", "{echo}");
    on_b.subscribe(uri).await;

    // The stream opens on B: B holds the subscription upstream, and an
    // update caused through A reaches the session on B.
    let mut on_b_events = on_b.listen(None).await;
    let told = on_a.call_tool("py__touch_all", touch_all.clone()).await;
    assert_eq!(told["result"]["content"][0]["text"], "told 1", "{told}");
    let update = next_update(&mut on_b_events).await;
    assert_eq!(
        update["method"], "notifications/resources/updated",
        "{update}"
    );
    assert_eq!(update["params"]["uri"], uri, "{update}");

    // A subscription made through A while B holds the stream: B keeps the
    // upstream subscription, A lets its own go.
    on_a.subscribe(uri).await;
    within(
        "A to release the subscription it made",
        until_told_once(&on_a, &touch_all),
    )
    .await;
    let update = next_update(&mut on_b_events).await;
    assert_eq!(update["params"]["uri"], uri, "{update}");

    // The stream moves to C (the client reconnects there): C subscribes
    // upstream itself, B releases its subscription, and the client hears
    // list_changed (what it missed is unknown), then the update.
    drop(on_b_events);
    let on_c = on_a.on(&c.url);
    let mut on_c_events = on_c.listen(None).await;
    let first = within("list_changed", on_c_events.next()).await.unwrap();
    assert!(
        first["method"].as_str().unwrap().ends_with("/list_changed"),
        "{first}"
    );
    within(
        "B to release its subscription",
        until_told_once(&on_a, &touch_all),
    )
    .await;
    let update = next_update(&mut on_c_events).await;
    assert_eq!(update["params"]["uri"], uri, "{update}");

    // C is lost while it holds the stream: the stream ends, the client
    // reconnects it to A and carries on with the same session (no new
    // initialize), and A takes the subscription over.
    c.served.child.kill().await.unwrap();
    // Its connection breaks (reset, not a clean end of the stream).
    drop(on_c_events);
    let mut on_a_events = on_a.listen(None).await;
    let first = within("list_changed", on_a_events.next()).await.unwrap();
    assert!(
        first["method"].as_str().unwrap().ends_with("/list_changed"),
        "{first}"
    );
    let echo = on_a
        .call_tool("py__echo", json!({ "message": "after c" }))
        .await;
    assert_eq!(echo["result"]["content"][0]["text"], "after c", "{echo}");
    let told = on_b.call_tool("py__touch_all", touch_all.clone()).await;
    assert!(told["result"].is_object(), "{told}");
    let update = next_update(&mut on_a_events).await;
    assert_eq!(update["params"]["uri"], uri, "{update}");

    // DELETE on B ends it on A too.
    assert_eq!(on_b.delete().await, StatusCode::OK);
    within("A to forget the session", async {
        loop {
            let raw = on_a
                .post_raw(
                    &json!({ "jsonrpc": "2.0", "id": 9, "method": "ping" }).to_string(),
                    &[],
                )
                .await;
            if raw.status == StatusCode::NOT_FOUND {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    let after = on_a_events.next().await;
    assert!(
        after.is_none(),
        "A's stream ends with the session: {after:?}"
    );

    // Redis stops: sessions in memory keep working; new ones get 503, and
    // so does a session B would have to load; /readyz, /status and
    // /metrics say why.
    let kept = McpClient::connect(&a.url).await;
    let port = redis.port;
    redis.stop().await;
    let echo = kept
        .call_tool("py__echo", json!({ "message": "still" }))
        .await;
    assert_eq!(echo["result"]["content"][0]["text"], "still", "{echo}");
    let (status, body) = initialize(&b.url).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("session store is unreachable"),
        "{body}"
    );
    let elsewhere = kept
        .on(&b.url)
        .post_raw(
            &json!({ "jsonrpc": "2.0", "id": 9, "method": "ping" }).to_string(),
            &[],
        )
        .await;
    assert_eq!(
        elsewhere.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        elsewhere.body
    );
    let ready = until_status(
        &format!("{}/readyz", b.base),
        StatusCode::SERVICE_UNAVAILABLE,
    )
    .await;
    let ready: Value = serde_json::from_str(&ready).unwrap();
    assert!(
        ready["sessionStore"]
            .as_str()
            .unwrap()
            .contains("unreachable"),
        "{ready}"
    );
    let (_, status) = get(&format!("{}/status", b.base)).await;
    let status: Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["sessionStore"]["kind"], "redis", "{status}");
    assert_eq!(status["sessionStore"]["up"], false, "{status}");
    let (_, metrics) = get(&format!("{}/metrics", b.base)).await;
    assert!(
        metrics.contains("mcpmux_session_store_up{kind=\"redis\"} 0"),
        "{metrics}"
    );

    // Redis back (empty, on the same port): ready again, new sessions work.
    let redis = RedisServer::start(port).await;
    until_status(&format!("{}/readyz", b.base), StatusCode::OK).await;
    let (status, body) = initialize(&b.url).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, metrics) = get(&format!("{}/metrics", b.base)).await;
    assert!(metrics.contains("mcpmux_session_store_up{kind=\"redis\"} 1"));
    redis.stop().await;
}

#[tokio::test]
async fn a_session_keeps_its_endpoint_on_every_replica() {
    let redis = RedisServer::start(free_port()).await;
    let path = tempdir().join("mcpmux.yaml");
    let yaml = format!(
        "upstreams:\n{}{}endpoints:\n  team:\n    upstreams: [alpha]\nsession_store: {:?}\n",
        crate::support::example_upstream("alpha", &[]),
        crate::support::example_upstream("beta", &[]),
        redis.url()
    );
    std::fs::write(&path, with_auth_off(&yaml)).unwrap();
    let a = Replica::start(&path, 2).await;
    let b = Replica::start(&path, 2).await;

    // Initialized at A's /mcp/team, used at B's: B adopts it with its
    // endpoint and serves that endpoint's view.
    let on_a = McpClient::connect(&format!("{}/team", a.url)).await;
    let on_b = on_a.on(&format!("{}/team", b.url));
    let (tools, _) = on_b.list_all("tools/list", "tools").await;
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(!names.is_empty(), "{names:?}");
    assert!(names.iter().all(|n| n.starts_with("alpha__")), "{names:?}");
    // The same session id at B's /mcp is another endpoint's: unknown there.
    let elsewhere = post(
        &reqwest::Client::new(),
        &b.url,
        Some((&on_a.session, &on_a.version)),
        &json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/list" }).to_string(),
        &[],
    )
    .await;
    assert_eq!(
        elsewhere.status,
        StatusCode::NOT_FOUND,
        "{}",
        elsewhere.body
    );
    redis.stop().await;
}

/// Found by the soak: right after a replica restarted, HAProxy sent a
/// client's answer to `elicitation/create` to the replica that had not
/// asked, and the call waited out the upstream's timeout. Here the
/// question comes from server-everything through A, the answer goes to
/// B, and the call on A finishes with it.
#[tokio::test]
async fn an_answer_sent_to_another_replica_reaches_the_call_that_asked() {
    let redis = RedisServer::start(free_port()).await;
    let web = HttpPeer::everything("streamableHttp").await;
    let path = tempdir().join("mcpmux.yaml");
    let yaml = format!(
        "upstreams:\n  web:\n    url: {:?}\n    transport: streamable-http\nsession_store: {:?}\n",
        web.url("/mcp"),
        redis.url()
    );
    std::fs::write(&path, with_auth_off(&yaml)).unwrap();
    let a = Replica::start(&path, 1).await;
    let b = Replica::start(&path, 1).await;

    let on_a = McpClient::connect_declaring(&a.url, json!({ "elicitation": {} }), &[]).await;
    let on_b = on_a.on(&b.url);
    let mut call = on_a
        .open_stream(
            json!(1),
            "tools/call",
            json!({ "name": "web__trigger-elicitation-request", "arguments": {} }),
        )
        .await;
    let question = within("elicitation/create", async {
        loop {
            let message = call.next().await.expect("the call's stream ended");
            if message["method"] == "elicitation/create" {
                return message;
            }
        }
    })
    .await;
    let answer = json!({ "jsonrpc": "2.0", "id": question["id"],
        "result": { "action": "accept", "content": { "name": "Grace Hopper", "check": true } } });
    let sent = on_b.post_raw(&answer.to_string(), &[]).await;
    assert_eq!(sent.status, StatusCode::ACCEPTED, "{}", sent.body);

    let result = within("the call's answer", async {
        loop {
            let message = call.next().await.expect("the call's stream ended");
            if message["id"] == 1 {
                return message;
            }
        }
    })
    .await;
    let text = result["result"]["content"].to_string();
    assert!(text.contains("Name: Grace Hopper"), "{result}");

    // An answer to a question nobody asked is dropped on every replica.
    let stray =
        json!({ "jsonrpc": "2.0", "id": question["id"], "result": { "action": "decline" } });
    let sent = on_b.post_raw(&stray.to_string(), &[]).await;
    assert_eq!(sent.status, StatusCode::ACCEPTED, "{}", sent.body);
    let echo = on_b
        .call_tool("web__echo", json!({ "message": "still here" }))
        .await;
    assert!(
        echo["result"]["content"].to_string().contains("still here"),
        "{echo}"
    );
    redis.stop().await;
}
