//! Identity flowing upstream, against real parts: `oidc-provider` from npm
//! as the authorization server, an MCP server on the TypeScript SDK that
//! verifies the provider's JWTs and answers `whoami` with the token it got,
//! real JWTs for the gateway's own clients, and the provider's real login
//! and consent pages driven in headless Chromium.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::auth::{AUDIENCE, ISSUER, claims, rsa_signer};
use crate::support::interop::run_node;
use crate::support::oauth::{CLIENT_ID, CLIENT_SECRET, Protected, Provider, sha256_hex};
use crate::support::{McpClient, TestGateway, tempdir, within};

pub(crate) const ALICE_KEY: &str = "alice-key-5b0e7c19a2d3";
pub(crate) const BOB_KEY: &str = "bob-key-8d41f2a6c9e0";

/// The claims `whoami` answered with.
pub(crate) fn whoami(result: &Value) -> Value {
    let text = result["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("not a whoami result: {result:#}"));
    serde_json::from_str(text).unwrap()
}

pub(crate) fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

#[tokio::test]
async fn client_credentials_give_the_upstream_the_gateway_s_service_token_once() {
    let provider = Provider::start(600, None).await;
    let server = Protected::start(&provider.issuer).await;
    let yaml = service_config(&server, &provider);
    let gw = TestGateway::start(&yaml).await;
    let client = McpClient::connect(&gw.url).await;
    for _ in 0..3 {
        let me = whoami(&client.call_tool("crm__whoami", json!({})).await);
        assert_eq!(me["sub"], CLIENT_ID, "{me:#}");
        assert_eq!(me["aud"], server.url(), "audience-bound (RFC 8707): {me:#}");
    }
    let issued: Vec<Value> = provider
        .log()
        .await
        .into_iter()
        .filter(|e| e["grant_type"] == "client_credentials")
        .collect();
    assert_eq!(issued.len(), 1, "one token, kept and reused: {issued:#?}");
    let seen = server.seen().await;
    assert!(!seen.is_empty());
    assert!(
        seen.iter().all(|s| s["verified"] == true),
        "every request carried a token the upstream accepts: {seen:#?}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn token_exchange_gives_each_caller_its_own_upstream_token_and_never_passes_theirs() {
    let signer = rsa_signer("te-1");
    let provider = Provider::start(600, Some(&json!({ "keys": [signer.jwk] }))).await;
    let server = Protected::start(&provider.issuer).await;
    let pem = serde_json::to_string(&signer.public_pem).unwrap();
    let yaml = exchange_config(&server, &provider, &pem, "");
    let gw = TestGateway::start(&yaml).await;
    let alice_jwt = signer.token(claims("alice", |_| {}));
    let bob_jwt = signer.token(claims("bob", |_| {}));
    let alice = McpClient::connect_with(&gw.url, &[("authorization", &bearer(&alice_jwt))]).await;
    let bob = McpClient::connect_with(&gw.url, &[("authorization", &bearer(&bob_jwt))]).await;
    for _ in 0..2 {
        let me = whoami(&alice.call_tool("crm__whoami", json!({})).await);
        assert_eq!(me["sub"], "alice", "{me:#}");
        assert_eq!(me["aud"], server.url());
        let me = whoami(&bob.call_tool("crm__whoami", json!({})).await);
        assert_eq!(me["sub"], "bob", "{me:#}");
    }
    // Each caller's session at the upstream is its own.
    let a = whoami(&alice.call_tool("crm__whoami", json!({})).await);
    let b = whoami(&bob.call_tool("crm__whoami", json!({})).await);
    assert_ne!(a["session"], b["session"], "{a:#} {b:#}");

    // The clients' own tokens never went upstream.
    let seen = server.seen().await;
    for own in [&alice_jwt, &bob_jwt] {
        let digest = sha256_hex(own);
        assert!(
            seen.iter().all(|s| s["token_sha256"] != digest.as_str()),
            "a client's own token reached the upstream: {seen:#?}"
        );
    }
    // One exchange per caller, cached.
    let exchanges = provider
        .log()
        .await
        .into_iter()
        .filter(|e| {
            e["grant_type"]
                .as_str()
                .is_some_and(|g| g.ends_with("token-exchange"))
        })
        .count();
    assert_eq!(exchanges, 2);

    // An API-key client has no token to exchange: a precise refusal.
    let ops = McpClient::connect_with(&gw.url, &[("authorization", &bearer(ALICE_KEY))]).await;
    let refused = ops.call_tool("crm__whoami", json!({})).await;
    assert_eq!(refused["error"]["code"], -32600, "{refused:#}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("API-key client"), "{message}");
    // ... and alice is not affected.
    let me = whoami(&alice.call_tool("crm__whoami", json!({})).await);
    assert_eq!(me["sub"], "alice");

    // Who has a session upstream shows in /status; no token does.
    let status = reqwest::get(gw.url.replace("/mcp", "/status"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let parsed: Value = serde_json::from_str(&status).unwrap();
    let crm = &parsed["upstreams"][0];
    assert_eq!(crm["auth"]["mode"], "token_exchange");
    assert_eq!(crm["auth"]["identitySessions"], json!(["alice", "bob"]));
    assert!(!status.contains("eyJ"), "no token in /status: {status}");
    gw.stop().await;
}

/// A gateway with no client authentication whose upstream `crm` gets the
/// gateway's service token (client credentials).
fn service_config(server: &Protected, provider: &Provider) -> String {
    format!(
        "upstreams:\n  crm:\n    url: {}\n    auth:\n      mode: client_credentials\n      token_url: {}\n      client_id: {CLIENT_ID}\n      client_secret: {CLIENT_SECRET}\n      scopes: [mcp:tools]\n",
        server.url(),
        provider.token_url()
    )
}

/// A gateway whose clients are JWTs signed by the key of `pem` (and the
/// API key client `ops`), and whose upstream `crm` exchanges each caller's
/// JWT (RFC 8693); `extra` adds lines to its `auth` section.
fn exchange_config(server: &Protected, provider: &Provider, pem: &str, extra: &str) -> String {
    format!(
        "auth:\n  mode: on\n  admin: {{ access: open }}\n  api_keys:\n    - client: ops\n      key: {ALICE_KEY}\n  jwt:\n    issuer: {ISSUER}\n    audience: {AUDIENCE}\n    public_keys: [{pem}]\nupstreams:\n  crm:\n    url: {}\n    auth:\n      mode: token_exchange\n      token_url: {}\n      client_id: {CLIENT_ID}\n      client_secret: {CLIENT_SECRET}\n      scopes: [mcp:tools]\n      subject_token_type: urn:ietf:params:oauth:token-type:jwt\n{extra}",
        server.url(),
        provider.token_url()
    )
}

/// A gateway whose upstream `crm` acts as each user (alice and bob, by
/// API key), with the token store in `dir`; the authorization server is
/// discovered from the upstream's 401 (RFC 9728) and its metadata.
pub(crate) fn user_mode_config(server: &Protected, dir: &std::path::Path) -> String {
    format!(
        "auth:\n  mode: on\n  admin: {{ access: open }}\n  api_keys:\n    - client: alice\n      key: {ALICE_KEY}\n    - client: bob\n      key: {BOB_KEY}\ncredentials:\n  key: {key}\n  path: {path}\nupstreams:\n  crm:\n    url: {url}\n    auth:\n      mode: user\n      client_id: {CLIENT_ID}\n      client_secret: {CLIENT_SECRET}\n      scopes: [mcp:tools]\n",
        key = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=",
        path = dir.join("tokens.json").display(),
        url = server.url(),
    )
}

/// The URL a -32042 error sends the user to.
pub(crate) fn elicitation_url(refused: &Value) -> String {
    assert_eq!(refused["error"]["code"], -32042, "{refused:#}");
    let item = &refused["error"]["data"]["elicitations"][0];
    assert_eq!(item["mode"], "url");
    item["url"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_user_connects_in_the_browser_and_then_acts_as_themselves() {
    let provider = Provider::start(600, None).await;
    let server = Protected::start(&provider.issuer).await;
    let dir = tempdir();
    let gw = TestGateway::start(&user_mode_config(&server, &dir)).await;
    let alice = McpClient::connect_with(&gw.url, &[("authorization", &bearer(ALICE_KEY))]).await;
    let bob = McpClient::connect_with(&gw.url, &[("authorization", &bearer(BOB_KEY))]).await;

    // Before anyone connected: one tool, which starts the flow.
    let (tools, _) = alice.list_all("tools/list", "tools").await;
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["crm__connect"]);

    // A client without URL elicitation gets -32042 with the link.
    let url = elicitation_url(&alice.call_tool("crm__connect", json!({})).await);
    let shot = dir.join("login.png");
    let login = run_node(
        "oauth_login.mjs",
        &[&url, "alice", &shot.display().to_string()],
    )
    .await;
    assert_eq!(login["status"], 200, "{login:#}");
    let landed = login["final_url"].as_str().unwrap();
    assert!(landed.contains("/oauth/callback"), "{login:#}");
    assert!(
        login["body_text"]
            .as_str()
            .unwrap()
            .contains("connected for alice"),
        "{login:#}"
    );

    // The call made first works now, as alice; the real tools are listed.
    let connected = alice.call_tool("crm__connect", json!({})).await;
    assert!(
        connected["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("connected"),
        "{connected:#}"
    );
    let me = whoami(&alice.call_tool("crm__whoami", json!({})).await);
    assert_eq!(me["sub"], "alice", "{me:#}");
    assert_eq!(me["aud"], server.url());
    let (tools, _) = bob.list_all("tools/list", "tools").await;
    assert!(
        tools.iter().any(|t| t["name"] == "crm__whoami"),
        "{tools:#?}"
    );

    // bob has not connected: his own link, never alice's token.
    let bob_url = elicitation_url(&bob.call_tool("crm__whoami", json!({})).await);
    assert_ne!(bob_url, url);
    assert!(
        server.seen().await.iter().all(|s| s["sub"] != "bob"),
        "nothing went upstream as bob"
    );

    // A 2026-07-28 request of bob's gets an input round with the link.
    let modern = modern_call(&gw.url, BOB_KEY, "crm__whoami").await;
    assert_eq!(
        modern["result"]["resultType"], "input_required",
        "{modern:#}"
    );
    let requests = modern["result"]["inputRequests"].as_object().unwrap();
    let request = requests.values().next().unwrap();
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["mode"], "url");

    // A replayed or forged state connects nothing.
    let http = reqwest::Client::new();
    let replayed = http.get(landed).send().await.unwrap();
    assert_eq!(replayed.status(), StatusCode::BAD_REQUEST);
    let forged = http
        .get(
            gw.url
                .replace("/mcp", "/oauth/callback?state=forged&code=x"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::BAD_REQUEST);
    let bob_still = bob.call_tool("crm__whoami", json!({})).await;
    assert_eq!(bob_still["error"]["code"], -32042);

    // The token file holds no token in the clear.
    let stored = std::fs::read_to_string(dir.join("tokens.json")).unwrap();
    assert!(stored.contains("alice"), "{stored}");
    assert!(!stored.contains("eyJ"), "a JWT in the clear: {stored}");

    // /status says who connected, never a token.
    let status = http
        .get(gw.url.replace("/mcp", "/status"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let parsed: Value = serde_json::from_str(&status).unwrap();
    assert_eq!(
        parsed["upstreams"][0]["auth"]["connectedUsers"],
        json!(["alice"])
    );
    assert!(!status.contains("eyJ"));

    // alice sees her own connection, and bob none of his.
    let mine = |key: &str| {
        http.get(gw.url.replace("/mcp", "/oauth/connections"))
            .header("authorization", bearer(key))
            .send()
    };
    let listed: Value =
        serde_json::from_str(&mine(ALICE_KEY).await.unwrap().text().await.unwrap()).unwrap();
    assert_eq!(listed["connections"][0]["upstream"], "crm", "{listed:#}");
    assert!(!listed.to_string().contains("eyJ"));
    let bobs: Value =
        serde_json::from_str(&mine(BOB_KEY).await.unwrap().text().await.unwrap()).unwrap();
    assert_eq!(bobs["connections"], json!([]));

    // alice disconnects with the CLI (through the HTTP route, with her own
    // key): she is sent to connect again; a second time there is nothing.
    let disconnect = [
        "connections",
        "disconnect",
        "--gateway",
        &gw.url,
        "--upstream",
        "crm",
    ];
    let (code, out, err) =
        crate::support::run_mcpmux(&disconnect, &[("MCPMUX_BEARER", ALICE_KEY)]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("disconnected from crm"), "{out}");
    let (code, _, err) =
        crate::support::run_mcpmux(&disconnect, &[("MCPMUX_BEARER", ALICE_KEY)]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no connection at upstream \"crm\""), "{err}");
    let (code, _, err) = crate::support::run_mcpmux(&disconnect, &[("MCPMUX_BEARER", "")]).await;
    assert_eq!(code, 64, "{err}");
    let again = alice.call_tool("crm__whoami", json!({})).await;
    let url = elicitation_url(&again);

    // She connects again; the operator lists and revokes her grant with
    // `mcpmux connections`, on the store the gateway is using.
    let login = run_node("oauth_login.mjs", &[&url, "alice"]).await;
    assert_eq!(login["status"], 200, "{login:#}");
    let me = whoami(&alice.call_tool("crm__whoami", json!({})).await);
    assert_eq!(me["sub"], "alice", "{me:#}");
    let config = dir.join("gateway.yaml");
    std::fs::write(&config, user_mode_config(&server, &dir)).unwrap();
    let config = config.to_str().unwrap();
    let cli = |args: &'static [&'static str]| {
        let mut all = vec!["connections"];
        all.extend_from_slice(&args[..1]);
        all.extend(["--config", config]);
        all.extend_from_slice(&args[1..]);
        async move { crate::support::run_mcpmux(&all, &[]).await }
    };
    let (code, listed, stderr) = cli(&["list"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(listed.starts_with("crm\talice\t"), "{listed}");
    assert_eq!(listed.lines().count(), 1, "{listed}");
    assert!(
        listed.trim_end().ends_with("\tyes"),
        "refreshable: {listed}"
    );
    let (code, json, _) = cli(&["list", "--json", "--client", "alice"]).await;
    assert_eq!(code, 0);
    let parsed: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(parsed[0]["upstream"], "crm", "{parsed:#}");
    assert_eq!(parsed[0]["client"], "alice", "{parsed:#}");
    assert!(!listed.contains("eyJ") && !json.contains("eyJ"), "a token");

    let (code, revoked, stderr) = cli(&["revoke", "--upstream", "crm", "--client", "alice"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(revoked, "revoked crm for alice\n");
    // The provider has a revocation endpoint and took the request.
    assert_eq!(stderr, "", "revoked at the provider too");
    let (code, listed, _) = cli(&["list"]).await;
    assert_eq!(
        (code, listed.as_str()),
        (0, ""),
        "alice is no longer listed"
    );
    let (code, _, stderr) = cli(&["revoke", "--upstream", "crm", "--client", "alice"]).await;
    assert_eq!(code, 1, "no grant left: {stderr}");
    // The running gateway reads the store the CLI changed: nobody is
    // connected. (alice's open session keeps its token until it is due.)
    let status = http
        .get(gw.url.replace("/mcp", "/status"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let status: Value = serde_json::from_str(&status).unwrap();
    assert_eq!(
        status["upstreams"][0]["auth"]["connectedUsers"],
        json!([]),
        "{status:#}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_revoked_grant_sends_the_user_back_to_connect_and_refresh_keeps_it_going() {
    // Access tokens of 4 s: refreshed before they expire, and a revoked
    // grant is found out at the next refresh.
    let provider = Provider::start(4, None).await;
    let server = Protected::start(&provider.issuer).await;
    let dir = tempdir();
    let gw = TestGateway::start(&user_mode_config(&server, &dir)).await;
    let alice = McpClient::connect_with(&gw.url, &[("authorization", &bearer(ALICE_KEY))]).await;
    let url = elicitation_url(&alice.call_tool("crm__connect", json!({})).await);
    let login = run_node("oauth_login.mjs", &[&url, "alice"]).await;
    assert_eq!(login["status"], 200, "{login:#}");

    // Calls keep working across several token lifetimes: refreshed.
    let until = tokio::time::Instant::now() + std::time::Duration::from_secs(9);
    let mut calls = 0;
    while tokio::time::Instant::now() < until {
        let me = whoami(&alice.call_tool("crm__whoami", json!({})).await);
        assert_eq!(me["sub"], "alice");
        calls += 1;
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    assert!(calls > 5);
    let refreshes = provider
        .log()
        .await
        .into_iter()
        .filter(|e| e["grant_type"] == "refresh_token")
        .count();
    assert!(refreshes >= 1, "the token was refreshed before it expired");

    // Revoked at the provider: once the current token is due, the refresh
    // is refused and the user is sent back to connect.
    provider.revoke("alice").await;
    let back = within("the revoked grant to be noticed", async {
        loop {
            let answer = alice.call_tool("crm__whoami", json!({})).await;
            if answer.get("error").is_some() {
                return answer;
            }
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    })
    .await;
    elicitation_url(&back);
    gw.stop().await;
}

/// A 2026-07-28 `tools/call` of `tool` by the client of `key`.
async fn modern_call(url: &str, key: &str, tool: &str) -> Value {
    let body = json!({
        "jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {
            "name": tool, "arguments": {},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": { "elicitation": { "url": {} } }
            }
        }
    })
    .to_string();
    let auth = bearer(key);
    let raw = crate::support::client::post(
        &reqwest::Client::new(),
        url,
        None,
        &body,
        &[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", tool),
            ("authorization", &auth),
        ],
    )
    .await;
    raw.json()
}

#[tokio::test]
async fn a_service_token_is_replaced_before_it_expires_so_no_call_is_refused() {
    // Tokens of 6 s, replaced with a quarter (1.5 s) left; calls over
    // more than two of their lifetimes.
    let provider = Provider::start(6, None).await;
    let server = Protected::start(&provider.issuer).await;
    let yaml = service_config(&server, &provider);
    let gw = TestGateway::start(&yaml).await;
    let client = McpClient::connect(&gw.url).await;
    let until = tokio::time::Instant::now() + std::time::Duration::from_secs(13);
    while tokio::time::Instant::now() < until {
        let me = whoami(&client.call_tool("crm__whoami", json!({})).await);
        assert_eq!(me["sub"], CLIENT_ID);
        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    }
    let fetched = provider
        .log()
        .await
        .into_iter()
        .filter(|e| e["grant_type"] == "client_credentials")
        .count();
    assert!(fetched >= 3, "replaced as it came due: {fetched} tokens");
    let seen = server.seen().await;
    assert!(
        seen.iter().all(|s| s["verified"] == true),
        "no request ever carried an expired token: {seen:#?}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn api_key_clients_act_as_the_service_identity_where_configured() {
    let signer = rsa_signer("te-2");
    let provider = Provider::start(600, Some(&json!({ "keys": [signer.jwk] }))).await;
    let server = Protected::start(&provider.issuer).await;
    let pem = serde_json::to_string(&signer.public_pem).unwrap();
    let yaml = exchange_config(&server, &provider, &pem, "      api_key_clients: service\n");
    let gw = TestGateway::start(&yaml).await;
    let ops = McpClient::connect_with(&gw.url, &[("authorization", &bearer(ALICE_KEY))]).await;
    let me = whoami(&ops.call_tool("crm__whoami", json!({})).await);
    assert_eq!(me["sub"], CLIENT_ID, "the service identity: {me:#}");
    let carol_jwt = signer.token(claims("carol", |_| {}));
    let carol = McpClient::connect_with(&gw.url, &[("authorization", &bearer(&carol_jwt))]).await;
    let me = whoami(&carol.call_tool("crm__whoami", json!({})).await);
    assert_eq!(me["sub"], "carol", "a JWT client is still itself: {me:#}");
    gw.stop().await;
}

#[tokio::test]
async fn resource_subscriptions_are_kept_per_identity_upstream() {
    let signer = rsa_signer("te-3");
    let provider = Provider::start(600, Some(&json!({ "keys": [signer.jwk] }))).await;
    let server = Protected::start(&provider.issuer).await;
    let pem = serde_json::to_string(&signer.public_pem).unwrap();
    let yaml = exchange_config(
        &server,
        &provider,
        &pem,
        "      discovery: client_credentials\n",
    );
    let gw = TestGateway::start(&yaml).await;
    let alice_jwt = signer.token(claims("alice", |_| {}));
    let bob_jwt = signer.token(claims("bob", |_| {}));
    let alice = McpClient::connect_with(&gw.url, &[("authorization", &bearer(&alice_jwt))]).await;
    let bob = McpClient::connect_with(&gw.url, &[("authorization", &bearer(&bob_jwt))]).await;
    let uri = "crm+mine://notes";
    let mut alices_stream = alice.listen(None).await;
    alice.subscribe(uri).await;
    bob.subscribe(uri).await;

    // Each identity subscribed on its own upstream session.
    let log = server.subscriptions().await;
    let subscribed: Vec<&str> = log
        .iter()
        .filter(|e| e["action"] == "subscribe")
        .filter_map(|e| e["sub"].as_str())
        .collect();
    assert_eq!(subscribed.len(), 2, "{log:#?}");
    assert!(
        subscribed.contains(&"alice") && subscribed.contains(&"bob"),
        "{log:#?}"
    );

    // alice's change reaches alice, and never bob (his outbox stays as it was).
    let pending = || {
        gw.gateway()
            .stats()
            .backlogs
            .iter()
            .map(|b| b.pending)
            .sum::<usize>()
    };
    let before = pending();
    let touched = alice.call_tool("crm__touch", json!({})).await;
    assert!(
        touched["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("touched alice"),
        "{touched:#}"
    );
    let update = within("alice's update", async {
        loop {
            let message = alices_stream.next().await.unwrap();
            if message["method"] == "notifications/resources/updated" {
                return message;
            }
        }
    })
    .await;
    assert_eq!(update["params"]["uri"], uri);
    assert_eq!(pending(), before, "nothing was queued for bob");
    let read = bob.result("resources/read", json!({ "uri": uri })).await;
    assert_eq!(read["contents"][0]["text"], "notes of bob v1", "{read:#}");

    // bob's last watcher leaving unsubscribes on bob's session alone.
    bob.delete().await;
    let log = within("bob's unsubscribe", async {
        loop {
            let log = server.subscriptions().await;
            if log.iter().any(|e| e["action"] == "unsubscribe") {
                return log;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    let unsubscribed: Vec<&str> = log
        .iter()
        .filter(|e| e["action"] == "unsubscribe")
        .filter_map(|e| e["sub"].as_str())
        .collect();
    assert_eq!(unsubscribed, ["bob"], "{log:#?}");
    gw.stop().await;
}
