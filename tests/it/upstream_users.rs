//! Users connecting their own accounts (`auth.mode: user`), continued:
//! a client that takes URL-mode elicitations is asked on its call's stream
//! and its call goes on once the user has signed in (in headless Chromium,
//! at `oidc-provider`'s real pages); two replicas sharing Redis use a token
//! obtained on either.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::replicas::free_port;
use crate::replicas::redis::RedisServer;
use crate::support::interop::run_node;
use crate::support::oauth::{Protected, Provider};
use crate::support::{McpClient, TestGateway, tempdir, within};
use crate::upstream_auth::{ALICE_KEY, bearer, elicitation_url, user_mode_config, whoami};

#[tokio::test]
async fn a_client_with_url_elicitation_is_asked_and_its_call_goes_on_after_sign_in() {
    let provider = Provider::start(600, None).await;
    let server = Protected::start(&provider.issuer).await;
    let dir = tempdir();
    let gw = TestGateway::start(&user_mode_config(&server, &dir)).await;
    let alice = McpClient::connect_declaring(
        &gw.url,
        json!({ "elicitation": { "form": {}, "url": {} } }),
        &[("authorization", &bearer(ALICE_KEY))],
    )
    .await;
    let mut stream = alice
        .open_stream(
            json!(41),
            "tools/call",
            json!({ "name": "crm__connect", "arguments": {} }),
        )
        .await;
    // The gateway asks on the call's own stream.
    let ask = within("the elicitation", stream.next()).await.unwrap();
    assert_eq!(ask["method"], "elicitation/create", "{ask:#}");
    assert_eq!(ask["params"]["mode"], "url");
    let url = ask["params"]["url"].as_str().unwrap().to_owned();
    let elicitation_id = ask["params"]["elicitationId"].clone();
    // The client accepts (it opened the URL), and the user signs in.
    let accept = json!({ "jsonrpc": "2.0", "id": ask["id"], "result": { "action": "accept" } });
    let posted = alice.post_raw(&accept.to_string(), &[]).await;
    assert_eq!(
        posted.status,
        reqwest::StatusCode::ACCEPTED,
        "{}",
        posted.body
    );
    let login = run_node("oauth_login.mjs", &[&url, "alice"]).await;
    assert_eq!(login["status"], 200, "{login:#}");

    // The same call then finishes: told the elicitation completed, then answered.
    let complete = within("the completion", stream.next()).await.unwrap();
    assert_eq!(
        complete["method"], "notifications/elicitation/complete",
        "{complete:#}"
    );
    assert_eq!(complete["params"]["elicitationId"], elicitation_id);
    let answer = within("the call's answer", stream.next()).await.unwrap();
    assert_eq!(answer["id"], 41, "{answer:#}");
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("connected"), "{answer:#}");
    let me = whoami(&alice.call_tool("crm__whoami", json!({})).await);
    assert_eq!(me["sub"], "alice");

    // Declining is answered at once, with the link for later.
    let bob = McpClient::connect_declaring(
        &gw.url,
        json!({ "elicitation": { "url": {} } }),
        &[("authorization", &bearer(crate::upstream_auth::BOB_KEY))],
    )
    .await;
    let mut stream = bob
        .open_stream(
            json!(7),
            "tools/call",
            json!({ "name": "crm__whoami", "arguments": {} }),
        )
        .await;
    let ask = within("bob's elicitation", stream.next()).await.unwrap();
    let decline = json!({ "jsonrpc": "2.0", "id": ask["id"], "result": { "action": "decline" } });
    bob.post_raw(&decline.to_string(), &[]).await;
    let answer: Value = within("bob's answer", stream.next()).await.unwrap();
    elicitation_url(&answer);
    gw.stop().await;
}

#[tokio::test]
async fn two_replicas_sharing_redis_end_each_others_flows_and_use_each_others_tokens() {
    let redis = RedisServer::start(free_port()).await;
    let provider = Provider::start(600, None).await;
    let server = Protected::start(&provider.issuer).await;
    let dir = tempdir();
    // The redirect URI is the load balancer's; here a listener of the
    // test's, which hands the callback to replica B.
    let (balancer, callbacks) = callback_catcher().await;
    let yaml = format!(
        "{}session_store: {}\n",
        user_mode_config(&server, &dir).replace(
            "credentials:\n",
            &format!("credentials:\n  callback_url: http://{balancer}/oauth/callback\n")
        ),
        redis.url()
    );
    let a = TestGateway::start(&yaml).await;
    let b = TestGateway::start(&yaml).await;
    let on_a = McpClient::connect_with(&a.url, &[("authorization", &bearer(ALICE_KEY))]).await;
    let url = elicitation_url(&on_a.call_tool("crm__connect", json!({})).await);
    let login = run_node("oauth_login.mjs", &[&url, "alice"]).await;
    assert_eq!(login["status"], 200, "{login:#}");
    let query = callbacks
        .lock()
        .unwrap()
        .pop()
        .expect("the browser came back");

    // A flow started on A ends on B (the state is sealed with the shared
    // key), and only once: the same callback on A is refused.
    let callback = |gw: &TestGateway| gw.url.replace("/mcp", &format!("/oauth/callback?{query}"));
    let ended = reqwest::get(callback(&b)).await.unwrap();
    assert_eq!(ended.status(), reqwest::StatusCode::OK);
    assert!(ended.text().await.unwrap().contains("connected for alice"));
    let replayed = reqwest::get(callback(&a)).await.unwrap();
    assert_eq!(replayed.status(), reqwest::StatusCode::BAD_REQUEST);

    // Each replica uses the token obtained on B.
    for gw in [&a, &b] {
        let client =
            McpClient::connect_with(&gw.url, &[("authorization", &bearer(ALICE_KEY))]).await;
        let me = whoami(&client.call_tool("crm__whoami", json!({})).await);
        assert_eq!(me["sub"], "alice", "{me:#}");
    }
    // Nothing went to a file: the tokens live in Redis.
    assert!(!dir.join("tokens.json").exists());
    a.stop().await;
    b.stop().await;
}

/// A listener on 127.0.0.1:0 that answers `/oauth/callback` with 200 and
/// keeps each query string.
async fn callback_catcher() -> (std::net::SocketAddr, Arc<Mutex<Vec<String>>>) {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let keep = seen.clone();
    let app = axum::Router::new().route(
        "/oauth/callback",
        axum::routing::get(move |uri: axum::http::Uri| {
            keep.lock()
                .unwrap()
                .push(uri.query().unwrap_or_default().to_owned());
            async { "callback received" }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, seen)
}

#[tokio::test]
async fn without_a_client_id_the_gateway_registers_itself_and_others_hear_the_tools_arrive() {
    let provider = Provider::start(600, None).await;
    let server = Protected::start(&provider.issuer).await;
    let dir = tempdir();
    // No client_id: dynamic registration (RFC 7591) at the discovered server.
    let yaml = user_mode_config(&server, &dir)
        .replace("      client_id: mcpmux-gateway\n", "")
        .replace("      client_secret: gateway-secret\n", "");
    assert!(!yaml.contains("client_id"), "{yaml}");
    let gw = TestGateway::start(&yaml).await;
    let bob = McpClient::connect_with(
        &gw.url,
        &[("authorization", &bearer(crate::upstream_auth::BOB_KEY))],
    )
    .await;
    let mut bobs_stream = bob.listen(None).await;
    let alice = McpClient::connect_with(&gw.url, &[("authorization", &bearer(ALICE_KEY))]).await;
    let url = elicitation_url(&alice.call_tool("crm__connect", json!({})).await);
    assert!(
        !url.contains("client_id=mcpmux-gateway"),
        "a registered client: {url}"
    );
    let login = run_node("oauth_login.mjs", &[&url, "alice"]).await;
    assert_eq!(login["status"], 200, "{login:#}");
    let me = whoami(&alice.call_tool("crm__whoami", json!({})).await);
    assert_eq!(me["sub"], "alice", "{me:#}");
    assert_ne!(me["client_id"], "mcpmux-gateway", "{me:#}");

    // Bob's view changed (connect gave way to the upstream's tools): told so.
    let changed = within("bob's tools/list_changed", async {
        loop {
            let message = bobs_stream.next().await.expect("the stream stays open");
            if message["method"] == "notifications/tools/list_changed" {
                return message;
            }
        }
    })
    .await;
    assert_eq!(changed["method"], "notifications/tools/list_changed");
    gw.stop().await;
}

#[tokio::test]
async fn two_replicas_refresh_a_users_rotating_token_once_between_them() {
    // Tokens of 4 s with rotating refresh tokens: a refresh token used
    // twice ends the grant, so the replicas must not both refresh.
    let redis = RedisServer::start(free_port()).await;
    let provider = Provider::start(4, None).await;
    let server = Protected::start(&provider.issuer).await;
    let dir = tempdir();
    let yaml = format!(
        "{}session_store: {}\n",
        user_mode_config(&server, &dir),
        redis.url()
    );
    let a = TestGateway::start(&yaml).await;
    let b = TestGateway::start(&yaml).await;
    let on_a = McpClient::connect_with(&a.url, &[("authorization", &bearer(ALICE_KEY))]).await;
    let on_b = McpClient::connect_with(&b.url, &[("authorization", &bearer(ALICE_KEY))]).await;
    let url = elicitation_url(&on_a.call_tool("crm__connect", json!({})).await);
    let login = run_node("oauth_login.mjs", &[&url, "alice"]).await;
    assert_eq!(login["status"], 200, "{login:#}");

    // Both replicas call, together, across three token lifetimes.
    let until = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while tokio::time::Instant::now() < until {
        let (from_a, from_b) = tokio::join!(
            on_a.call_tool("crm__whoami", json!({})),
            on_b.call_tool("crm__whoami", json!({}))
        );
        assert_eq!(whoami(&from_a)["sub"], "alice", "{from_a:#}");
        assert_eq!(whoami(&from_b)["sub"], "alice", "{from_b:#}");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    let refreshes = provider
        .log()
        .await
        .into_iter()
        .filter(|e| e["grant_type"] == "refresh_token")
        .count();
    assert!(refreshes >= 2, "refreshed as it came due: {refreshes}");
    a.stop().await;
    b.stop().await;
}
