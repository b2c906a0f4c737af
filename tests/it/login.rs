//! Hosts log in through the gateway (`auth.oauth_server`): a real host
//! (the TypeScript SDK client, and the Python SDK client) with nothing but
//! the gateway's URL registers itself, its user logs in at a real OpenID
//! provider (`oidc-provider`, its own pages in headless Chromium) and
//! agrees on the gateway's consent page, and the host calls tools with the
//! gateway's token, under the policy of the identity the provider named.
//! Then a refresh, and a grant the operator revoked leading back to login.

use std::process::Stdio;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::support::gateway::example_upstream;
use crate::support::interop;
use crate::support::oauth::{LOGIN_CLIENT_ID, LOGIN_CLIENT_SECRET, Provider};
use crate::support::{TestGateway, run_mcpmux, tempdir, within_a_login};

pub const OPS_KEY: &str = "ops-key-0123456789abcdef";

/// Held by each test here while it drives browsers: one login at a time
/// keeps a 2-core machine's Chromium starts from piling up.
static BROWSERS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A gateway whose hosts log in at `provider`: alice (group `ops`) may use
/// the notes tools, bob (group `readers`) only `notes__echo`; the state file
/// and a generated signing key live in `dir`.
pub fn login_config(provider: &Provider, dir: &std::path::Path, extra_server: &str) -> String {
    let key = "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWY=";
    format!(
        "auth:\n  mode: on\n  api_keys:\n    - client: ops\n      key: {OPS_KEY}\n  scopes_supported: [mcp]\n  oauth_server:\n    provider:\n      issuer: {issuer}\n      client_id: {LOGIN_CLIENT_ID}\n      client_secret: {LOGIN_CLIENT_SECRET}\n      scopes: [openid, profile, email, groups]\n    claims:\n      client: preferred_username\n      groups: groups\n    state_path: {state}\n{extra_server}credentials:\n  key: \"{key}\"\n  path: {tokens}\npolicy:\n  default: deny\n  scopes:\n    ops:\n      allow: [\"notes__*\"]\n    readers:\n      allow: [\"notes__echo\"]\nupstreams:\n{notes}",
        issuer = provider.issuer,
        state = dir.join("oauth-server.json").display(),
        tokens = dir.join("tokens.json").display(),
        notes = example_upstream("notes", &[]),
    )
}

/// `tests/interop/oauth_host.mjs`: the TypeScript SDK host, one command a line.
pub struct Host {
    _child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Host {
    pub async fn start(url: &str, login: &str, extra: &[&str]) -> Host {
        let mut child = Command::new(interop::node())
            .arg(interop::dir().join("oauth_host.mjs"))
            .args(["--url", url, "--login", login, "--timeout", "90"])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Host {
            _child: child,
            stdin,
            lines,
        }
    }

    pub async fn ask(&mut self, command: Value) -> Value {
        let line = format!("{command}\n");
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        let answer = within_a_login("the host's answer", self.lines.next_line())
            .await
            .unwrap()
            .expect("the host answers");
        serde_json::from_str(&answer).unwrap()
    }
}

fn base(gw: &TestGateway) -> String {
    gw.url.trim_end_matches("/mcp").to_owned()
}

#[tokio::test]
async fn a_typescript_host_logs_in_with_just_the_url_refreshes_and_logs_in_again_after_a_revocation()
 {
    let _browsers = BROWSERS.lock().await;
    let provider = Provider::with_groups("alice=ops,bob=readers").await;
    let dir = tempdir();
    let gw = TestGateway::start(&login_config(&provider, &dir, "")).await;
    let mut alice = Host::start(&gw.url, "alice", &[]).await;

    // Registration (RFC 7591), the provider's login, the gateway's consent.
    let connected = alice.ask(json!({"op": "connect"})).await;
    assert_eq!(connected["ok"], true, "{connected:#}");
    assert_eq!(connected["registered"], "dcr", "{connected:#}");
    let pages = connected["login_pages"].to_string();
    assert!(pages.contains("\"login\""), "{connected:#}");
    assert!(pages.contains("gateway-consent"), "{connected:#}");

    // The policy is the one of alice's group at the provider.
    let tools = alice.ask(json!({"op": "tools"})).await;
    let mut names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    names.sort_unstable();
    assert!(
        names.contains(&"notes__add") && names.contains(&"notes__echo"),
        "{tools:#}"
    );
    let called = alice
        .ask(json!({"op": "call", "name": "notes__echo", "arguments": {"message": "hi"}}))
        .await;
    assert_eq!(called["ok"], true, "{called:#}");
    assert!(called["result"].to_string().contains("hi"), "{called:#}");

    // An access token that no longer works is refreshed, without a login.
    assert_eq!(alice.ask(json!({"op": "expire_access"})).await["ok"], true);
    let called = alice
        .ask(json!({"op": "call", "name": "notes__add", "arguments": {"a": 2, "b": 3}}))
        .await;
    assert_eq!(called["ok"], true, "{called:#}");
    let state = alice.ask(json!({"op": "state"})).await;
    assert_eq!(state["refreshes"], 1, "{state:#}");
    assert_eq!(state["authorizations"], 1, "{state:#}");

    // The operator sees alice's grant, and revokes it.
    let base = base(&gw);
    let env = [("MCPMUX_ADMIN_KEY", OPS_KEY)];
    let (code, out, err) = run_mcpmux(
        &[
            "grants",
            "list",
            "--gateway",
            &base,
            "--user",
            "alice",
            "--json",
        ],
        &env,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    let grants = listed.as_array().unwrap();
    assert_eq!(grants.len(), 1, "{listed:#}");
    assert_eq!(grants[0]["client_id"], state["client_id"], "{listed:#}");
    assert_eq!(grants[0]["consented"], true, "{listed:#}");
    let (code, out, err) = run_mcpmux(
        &["grants", "revoke", "--gateway", &base, "--user", "alice"],
        &env,
    )
    .await;
    assert_eq!(
        (code, out.trim()),
        (0, "revoked 1 login(s) of alice"),
        "{err}"
    );
    // Without the key: a usage error, nothing sent.
    let (code, _, err) = run_mcpmux(&["grants", "list", "--gateway", &base], &[]).await;
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("MCPMUX_ADMIN_KEY"), "{err}");

    // Its access token stops working at once and the refresh is refused:
    // the host goes back to the login (and the consent is asked again).
    let called = alice
        .ask(json!({"op": "call", "name": "notes__echo", "arguments": {"message": "again"}}))
        .await;
    assert_eq!(called["ok"], true, "{called:#}");
    let state = alice.ask(json!({"op": "state"})).await;
    assert_eq!(state["authorizations"], 2, "{state:#}");
    assert!(
        state["last_login_pages"]
            .to_string()
            .contains("gateway-consent"),
        "{state:#}"
    );

    // bob's group gives him one tool; the other is unknown to him.
    let mut bob = Host::start(&gw.url, "bob", &[]).await;
    assert_eq!(bob.ask(json!({"op": "connect"})).await["ok"], true);
    let tools = bob.ask(json!({"op": "tools"})).await;
    assert_eq!(tools["tools"], json!(["notes__echo"]), "{tools:#}");
    let refused = bob
        .ask(json!({"op": "call", "name": "notes__add", "arguments": {"a": 1, "b": 1}}))
        .await;
    assert_eq!(refused["ok"], false, "{refused:#}");
    gw.stop().await;
}

#[tokio::test]
async fn a_python_host_logs_in_and_calls_a_tool() {
    let _browsers = BROWSERS.lock().await;
    let provider = Provider::with_groups("carol=ops").await;
    let dir = tempdir();
    let gw = TestGateway::start(&login_config(&provider, &dir, "")).await;
    let node = interop::node().display().to_string();
    let run = tokio::process::Command::new(interop::python())
        .arg(interop::dir().join("oauth_host.py"))
        .args([
            "--url",
            &gw.url,
            "--login",
            "carol",
            "--node",
            &node,
            "--timeout",
            "90",
            "--call",
            "notes__echo",
            "--arguments",
            r#"{"message": "from python"}"#,
        ])
        .kill_on_drop(true)
        .output();
    let run = within_a_login("oauth_host.py", run).await.unwrap();
    let out: Value = serde_json::from_slice(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&run.stderr)));
    assert_eq!(out["ok"], true, "{out:#}");
    assert!(out["result"].to_string().contains("from python"), "{out:#}");
    assert!(
        out["client_id"].as_str().unwrap().starts_with("mcpmux-"),
        "{out:#}"
    );
    gw.stop().await;
}

/// A tiny HTTP server for client metadata documents: `body` on every
/// request, or (`None`) accepting and never answering.
async fn document_server(body: Option<String>) -> (String, tokio::task::JoinHandle<()>) {
    document_server_for(move |_| body).await
}

/// [`document_server`] with a body made from the document's own URL.
async fn document_server_for(
    body: impl FnOnce(&str) -> Option<String>,
) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let url = format!("http://{addr}/client.json");
    let body = body(&url);
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let mut buf = [0u8; 4096];
            let _ = tokio::io::AsyncReadExt::read(&mut socket, &mut buf).await;
            match &body {
                Some(body) => {
                    let response = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(response.as_bytes()).await;
                }
                None => held.push(socket),
            }
        }
    });
    (url, task)
}

/// Logs `user` in through `url` in Chromium (browser_login_cli.mjs) up to
/// `callback`: what the script reported, and the code it was given.
async fn browser_code(url: &str, user: &str, callback: &str) -> (Value, String) {
    let out = tokio::process::Command::new(interop::node())
        .arg(interop::dir().join("browser_login_cli.mjs"))
        .args([url, user, callback, "--timeout", "90"])
        .kill_on_drop(true)
        .output();
    let out = within_a_login("the browser login", out).await.unwrap();
    let answer: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let reached = reqwest::Url::parse(answer["url"].as_str().unwrap()).unwrap();
    let code = reached
        .query_pairs()
        .find(|(k, _)| k == "code")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| panic!("no code: {answer:#}"));
    (answer, code)
}

fn s256(verifier: &str) -> String {
    use base64::Engine as _;
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, verifier.as_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest.as_ref())
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn post_form(url: &str, form: &[(&str, &str)]) -> (u16, Value) {
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form)
        .finish();
    let response = no_redirects()
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (
        status,
        serde_json::from_str(&response.text().await.unwrap()).unwrap_or(Value::Null),
    )
}

/// The `/authorize` URL at `base` of a code request for `resource`, with
/// `verifier`'s S256 challenge.
fn authorize_url(
    base: &str,
    client_id: &str,
    redirect: &str,
    verifier: &str,
    resource: &str,
) -> String {
    let query = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs([
            ("response_type", "code"),
            ("client_id", client_id),
            ("redirect_uri", redirect),
            ("code_challenge", s256(verifier).as_str()),
            ("code_challenge_method", "S256"),
            ("state", "st-1"),
            ("resource", resource),
        ])
        .finish();
    format!("{base}/authorize?{query}")
}

/// Exchanges `code` at `{base}/token` (with `verifier`, if any).
async fn exchange_code(
    base: &str,
    client_id: &str,
    code: &str,
    redirect: &str,
    verifier: Option<&str>,
) -> (u16, Value) {
    let mut form = vec![
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", redirect),
        ("client_id", client_id),
    ];
    form.extend(verifier.map(|v| ("code_verifier", v)));
    post_form(&format!("{base}/token"), &form).await
}

/// Registers a public client with `redirect` at `{base}/register`.
async fn register_public(base: &str, redirect: &str) -> reqwest::Response {
    register(
        base,
        json!({"redirect_uris": [redirect], "token_endpoint_auth_method": "none", "grant_types": ["authorization_code", "refresh_token"]}),
    )
    .await
}

/// POSTs client metadata to `{base}/register`.
async fn register(base: &str, metadata: Value) -> reqwest::Response {
    no_redirects()
        .post(format!("{base}/register"))
        .header("content-type", "application/json")
        .body(metadata.to_string())
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn bad_clients_redirects_verifiers_and_codes_are_refused_with_the_rfc_errors() {
    let _browsers = BROWSERS.lock().await;
    let provider = Provider::with_groups("dave=ops").await;
    let dir = tempdir();
    let gw = TestGateway::start(&login_config(
        &provider,
        &dir,
        "    registration:\n      metadata_timeout: 1s\n      metadata_max_bytes: 1024\n",
    ))
    .await;
    let base = base(&gw);
    let resource = gw.url.clone();
    let http = no_redirects();

    // Registration: a plain-http redirect URI to another host is refused.
    let refused = register(
        &base,
        json!({"redirect_uris": ["http://evil.example/cb"], "token_endpoint_auth_method": "none"}),
    )
    .await;
    assert_eq!(refused.status(), 400);
    let body: Value = serde_json::from_str(&refused.text().await.unwrap()).unwrap();
    assert_eq!(body["error"], "invalid_redirect_uri", "{body:#}");
    let callback = "http://127.0.0.1:9/cb";
    let registered = register_public(&base, callback).await;
    assert_eq!(registered.status(), 201);
    // A web host reads it too (CORS, no cookies).
    assert_eq!(registered.headers()["access-control-allow-origin"], "*");
    let client: Value = serde_json::from_str(&registered.text().await.unwrap()).unwrap();
    let client_id = client["client_id"].as_str().unwrap().to_owned();
    let preflight = http
        .request(reqwest::Method::OPTIONS, format!("{base}/token"))
        .header("origin", "https://inspector.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.status(), 204);
    assert_eq!(preflight.headers()["access-control-allow-origin"], "*");
    assert!(
        preflight.headers()["access-control-allow-methods"]
            .to_str()
            .unwrap()
            .contains("POST")
    );

    let authorize = |client_id: &str, redirect: &str, verifier: &str| {
        authorize_url(&base, client_id, redirect, verifier, &resource)
    };
    // A redirect URI the client did not register: a page, never a redirect.
    let wrong = http
        .get(authorize(&client_id, "http://127.0.0.1:9/other", "v"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 400);
    assert!(wrong.headers().get("location").is_none());
    assert!(wrong.text().await.unwrap().contains("redirect_uri"));

    // Client metadata documents that cannot be used.
    let not_https = http
        .get(authorize("http://client.example/c.json", callback, "v"))
        .send()
        .await
        .unwrap();
    assert_eq!(not_https.status(), 400);
    assert!(not_https.text().await.unwrap().contains("must be https"));
    let (too_big, big_server) = document_server(Some(format!(
        "{{\"client_id\":\"x\",\"pad\":\"{}\"}}",
        "a".repeat(4000)
    )))
    .await;
    let (mismatched, mismatch_server) = document_server(Some(
        json!({"client_id": "https://other.example/c.json", "redirect_uris": [callback]})
            .to_string(),
    ))
    .await;
    let (slow, slow_server) = document_server(None).await;
    for (url, why) in [
        (&too_big, "larger than 1024 bytes"),
        (&mismatched, "not the URL it was fetched from"),
        (&slow, "not fetched within 1s"),
    ] {
        let answer = http
            .get(authorize(url, callback, "v"))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 400, "{url}");
        let page = answer.text().await.unwrap();
        assert!(
            page.contains("invalid_client") && page.contains(why),
            "{why}: {page}"
        );
    }
    big_server.abort();
    mismatch_server.abort();
    slow_server.abort();

    // Codes from real logins at the provider.
    let login = |verifier: &'static str| {
        let url = authorize(&client_id, callback, verifier);
        async move { browser_code(&url, "dave", callback).await.1 }
    };
    let token = format!("{base}/token");
    let exchange = |code: String, verifier: Option<&'static str>| {
        let (base, client_id) = (base.clone(), client_id.clone());
        async move { exchange_code(&base, &client_id, &code, callback, verifier).await }
    };
    let verifier = "a-verifier-of-enough-length-0123456789-abcdefghijkl";
    let (status, body) = exchange(login(verifier).await, None).await;
    assert_eq!(status, 400, "{body:#}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("invalid_")),
        "{body:#}"
    );
    let (status, body) = exchange(
        login(verifier).await,
        Some("another-verifier-of-enough-length-0123456789-abc"),
    )
    .await;
    assert_eq!(status, 400, "{body:#}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("invalid_")),
        "{body:#}"
    );
    let code = login(verifier).await;
    let (status, tokens) = exchange(code.clone(), Some(verifier)).await;
    assert_eq!(status, 200, "{tokens:#}");
    assert_eq!(
        tokens["token_type"]
            .as_str()
            .map(str::to_lowercase)
            .as_deref(),
        Some("bearer")
    );
    let refresh = tokens["refresh_token"].as_str().unwrap().to_owned();
    // The access token works at /mcp.
    let ok = reqwest::Client::new()
        .post(&gw.url)
        .bearer_auth(tokens["access_token"].as_str().unwrap())
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    // It is no operator's credential (`auth.admin.access: clients`).
    let operator = reqwest::Client::new()
        .get(format!("{base}/oauth/grants"))
        .bearer_auth(tokens["access_token"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(operator.status(), 401);
    // A replayed code is refused, and revokes what it produced.
    let (status, body) = exchange(code, Some(verifier)).await;
    assert_eq!(status, 400, "{body:#}");
    assert_eq!(body["error"], "invalid_grant", "{body:#}");
    let (status, body) = post_form(
        &token,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", &refresh),
            ("client_id", &client_id),
        ],
    )
    .await;
    assert_eq!(status, 400, "{body:#}");
    assert_eq!(body["error"], "invalid_grant", "{body:#}");
    // A host whose client_id is its metadata document's URL logs in too.
    let (document, document_task) = document_server_for(|url| {
        Some(json!({"client_id": url, "client_name": "document host", "redirect_uris": [callback], "token_endpoint_auth_method": "none"}).to_string())
    })
    .await;
    let url = authorize(&document, callback, verifier);
    let (answer, code) = browser_code(&url, "dave", callback).await;
    assert!(
        answer["pages"].to_string().contains("gateway-consent"),
        "{answer:#}"
    );
    let (status, tokens) = exchange_code(&base, &document, &code, callback, Some(verifier)).await;
    assert_eq!(status, 200, "{tokens:#}");
    assert!(tokens["refresh_token"].is_string(), "{tokens:#}");
    document_task.abort();

    // An unknown grant type.
    let (status, body) = post_form(&token, &[("grant_type", "password")]).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"], "unsupported_grant_type");
    gw.stop().await;
}

/// `initialize` at `mcp` with `token`: the HTTP status.
async fn initialize_status(mcp: &str, token: &str) -> u16 {
    reqwest::Client::new()
        .post(mcp)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
                .to_string(),
        )
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn two_replicas_sharing_redis_serve_each_step_of_a_login_and_share_refresh_rotation() {
    let _browsers = BROWSERS.lock().await;
    use crate::replicas::free_port;
    use crate::replicas::redis::RedisServer;
    let redis = RedisServer::start(free_port()).await;
    let provider = Provider::with_groups("erin=ops").await;
    let store = format!("session_store: {}\n", redis.url());
    let a = TestGateway::start(&format!(
        "{}{store}",
        login_config(&provider, &tempdir(), "")
    ))
    .await;
    let base_a = base(&a);
    // Behind a balancer both replicas are one issuer and one resource.
    let config_b = login_config(&provider, &tempdir(), &format!("    issuer: {base_a}\n")).replace(
        "  scopes_supported: [mcp]\n",
        &format!("  scopes_supported: [mcp]\n  resource: {}\n", a.url),
    );
    let b = TestGateway::start(&format!("{config_b}{store}")).await;
    let base_b = base(&b);
    let callback = "http://127.0.0.1:9/cb";

    // Registered at B.
    let registered = register_public(&base_b, callback).await;
    assert_eq!(registered.status(), 201);
    let client: Value = serde_json::from_str(&registered.text().await.unwrap()).unwrap();
    let client_id = client["client_id"].as_str().unwrap().to_owned();

    // Authorized at B, whose login comes back to A's callback (one issuer):
    // A takes the login B stored, asks the consent and issues the code.
    let verifier = "replica-verifier-of-enough-length-0123456789-abcdef";
    let url = authorize_url(&base_b, &client_id, callback, verifier, &a.url);
    let (answer, code) = browser_code(&url, "erin", callback).await;
    assert!(
        answer["pages"].to_string().contains("gateway-consent"),
        "{answer:#}"
    );
    // The code is exchanged at B.
    let (status, tokens) =
        exchange_code(&base_b, &client_id, &code, callback, Some(verifier)).await;
    assert_eq!(status, 200, "{tokens:#}");
    let access = tokens["access_token"].as_str().unwrap();
    assert_eq!(initialize_status(&b.url, access).await, 200);
    assert_eq!(initialize_status(&a.url, access).await, 200);

    // Refreshed at A; the old refresh token replayed at B ends the login.
    let old = tokens["refresh_token"].as_str().unwrap().to_owned();
    let refresh = |base: String, token: String, client_id: String| async move {
        post_form(
            &format!("{base}/token"),
            &[
                ("grant_type", "refresh_token"),
                ("refresh_token", &token),
                ("client_id", &client_id),
            ],
        )
        .await
    };
    let (status, renewed) = refresh(base_a.clone(), old.clone(), client_id.clone()).await;
    assert_eq!(status, 200, "{renewed:#}");
    let (status, body) = refresh(base_b.clone(), old, client_id.clone()).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_grant")),
        "{body:#}"
    );
    let newer = renewed["refresh_token"].as_str().unwrap().to_owned();
    let (status, _) = refresh(base_a.clone(), newer, client_id.clone()).await;
    assert_eq!(status, 400, "the whole login ended");
    a.stop().await;
    b.stop().await;
}

/// A test certificate authority and a certificate for 127.0.0.1 it signed,
/// written to `dir`: (CA PEM path, certificate path, key path).
fn test_certificates(dir: &std::path::Path) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "mcpmux test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    (
        write("ca.pem", ca.pem()),
        write("host.pem", leaf.pem()),
        write("host-key.pem", key.serialize_pem()),
    )
}

#[tokio::test]
async fn a_typescript_host_registers_by_its_client_metadata_document_over_https() {
    let _browsers = BROWSERS.lock().await;
    let provider = Provider::with_groups("frank=ops").await;
    let dir = tempdir();
    let (ca, cert, key) = test_certificates(&dir);
    let config = dir.join("mcpmux.yaml");
    std::fs::write(&config, login_config(&provider, &dir, "")).unwrap();
    // The gateway binary, trusting the test CA as a company would its own.
    let mut served = crate::support::served::Served::start_with_env(
        &["--config", config.to_str().unwrap()],
        &[("SSL_CERT_FILE", ca.as_str())],
    );
    let addr = served.listening_addr().await;
    served.wait_for("upstream ready", 1).await;
    let url = format!("http://{addr}/mcp");

    let mut host = Host::start(
        &url,
        "frank",
        &["--cimd", "--tls-cert", &cert, "--tls-key", &key],
    )
    .await;
    let info = host.ask(json!({"op": "info"})).await;
    let document = info["client_metadata_url"].as_str().unwrap().to_owned();
    assert!(document.starts_with("https://127.0.0.1:"), "{info:#}");
    let connected = host.ask(json!({"op": "connect"})).await;
    assert_eq!(connected["ok"], true, "{connected:#}");
    assert_eq!(connected["registered"], "cimd", "{connected:#}");
    assert_eq!(connected["client_id"], document.as_str(), "{connected:#}");
    let called = host
        .ask(json!({"op": "call", "name": "notes__echo", "arguments": {"message": "cimd"}}))
        .await;
    assert_eq!(called["ok"], true, "{called:#}");
    let state = host.ask(json!({"op": "state"})).await;
    assert!(state["cimd_fetches"].as_u64().unwrap() >= 1, "{state:#}");
}
