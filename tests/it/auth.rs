//! Client authentication with real keys: RSA and EC key pairs made here, a
//! JWKS served on a port-0 server, tokens signed with `jsonwebtoken`, every
//! kind of bad token refused before it reaches an upstream, API keys,
//! RFC 9728 discovery from the 401, and sessions bound to their client.

use std::sync::{Arc, Mutex};

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::signature::KeyPair as _;
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::client::post;
use crate::support::{
    McpClient, TestGateway, example_upstream, fixture_upstream, read_jsonl, tempdir,
};

pub(crate) const ISSUER: &str = "https://idp.test";
pub(crate) const AUDIENCE: &str = "https://mcp.test/mcp";
const OPS_KEY: &str = "ops-key-7f3a91c2d4e5";

/// A signing key and its public JWK.
pub(crate) struct Signer {
    kid: String,
    alg: Algorithm,
    key: EncodingKey,
    pub(crate) jwk: Value,
    /// The public key in PEM (SubjectPublicKeyInfo).
    pub(crate) public_pem: String,
}

fn pem(label: &str, der: &[u8]) -> String {
    format!(
        "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
        STANDARD.encode(der)
    )
}

pub(crate) fn rsa_signer(kid: &str) -> Signer {
    let pair = aws_lc_rs::rsa::KeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).unwrap();
    let pkcs8 = AsDer::<aws_lc_rs::encoding::Pkcs8V1Der>::as_der(&pair).unwrap();
    let components = aws_lc_rs::rsa::PublicKeyComponents::<Vec<u8>>::from(pair.public_key());
    Signer {
        kid: kid.into(),
        alg: Algorithm::RS256,
        key: EncodingKey::from_rsa_pem(pem("PRIVATE KEY", pkcs8.as_ref()).as_bytes()).unwrap(),
        jwk: json!({ "kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig",
                     "n": URL_SAFE_NO_PAD.encode(&components.n), "e": URL_SAFE_NO_PAD.encode(&components.e) }),
        public_pem: pem(
            "PUBLIC KEY",
            AsDer::<aws_lc_rs::encoding::PublicKeyX509Der>::as_der(pair.public_key())
                .unwrap()
                .as_ref(),
        ),
    }
}

fn ec_signer(kid: &str) -> Signer {
    use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
    let rng = aws_lc_rs::rand::SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref()).unwrap();
    // An uncompressed point: 0x04, then x and y.
    let point = pair.public_key().as_ref();
    Signer {
        kid: kid.into(),
        alg: Algorithm::ES256,
        key: EncodingKey::from_ec_pem(pem("PRIVATE KEY", pkcs8.as_ref()).as_bytes()).unwrap(),
        jwk: json!({ "kty": "EC", "kid": kid, "alg": "ES256", "use": "sig", "crv": "P-256",
                     "x": URL_SAFE_NO_PAD.encode(&point[1..33]), "y": URL_SAFE_NO_PAD.encode(&point[33..65]) }),
        public_pem: pem(
            "PUBLIC KEY",
            AsDer::<aws_lc_rs::encoding::PublicKeyX509Der>::as_der(pair.public_key())
                .unwrap()
                .as_ref(),
        ),
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

impl Signer {
    pub(crate) fn token(&self, claims: Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = Some(self.kid.clone());
        encode(&header, &claims, &self.key).unwrap()
    }
}

/// Claims of a good token for `sub`, changed by `edit`.
pub(crate) fn claims(sub: &str, edit: impl FnOnce(&mut Value)) -> Value {
    let mut claims = json!({ "iss": ISSUER, "aud": AUDIENCE, "sub": sub, "scope": "mcp:tools",
                             "iat": now(), "nbf": now() - 10, "exp": now() + 600 });
    edit(&mut claims);
    claims
}

/// A JWKS on 127.0.0.1:0 whose keys the test can replace.
async fn jwks_server(keys: Arc<Mutex<Vec<Value>>>) -> String {
    let app = axum::Router::new().route(
        "/jwks",
        axum::routing::get(move || {
            let keys = keys.lock().unwrap().clone();
            async move { axum::Json(json!({ "keys": keys })) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/jwks", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// Initializes with `authorization`; the raw answer.
async fn initialize(url: &str, authorization: Option<&str>) -> crate::support::client::Raw {
    let init = json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": { "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "it", "version": "0" } } });
    let headers: Vec<(&str, &str)> = authorization
        .map(|a| ("authorization", a))
        .into_iter()
        .collect();
    post(
        &reqwest::Client::new(),
        url,
        None,
        &init.to_string(),
        &headers,
    )
    .await
}

async fn get_json(url: &str) -> Value {
    let response = reqwest::get(url).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{url}");
    serde_json::from_str(&response.text().await.unwrap()).unwrap()
}

fn challenge(raw: &crate::support::client::Raw) -> String {
    raw.headers
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn bearer_tokens_and_api_keys_are_checked_and_bad_ones_never_reach_an_upstream() {
    let rsa = rsa_signer("rsa-1");
    let ec = ec_signer("ec-1");
    let keys = Arc::new(Mutex::new(vec![rsa.jwk.clone(), ec.jwk.clone()]));
    let jwks = jwks_server(keys.clone()).await;
    let record = tempdir().join("alpha.jsonl");
    let yaml = format!(
        "auth:\n  mode: on\n  api_keys:\n    - client: ops\n      key: {OPS_KEY}\n  jwt:\n    issuer: {ISSUER}\n    audience: {AUDIENCE}\n    jwks_url: {jwks}\n    jwks_refetch_cooldown: 1ms\n  authorization_servers: [{ISSUER}]\n  scopes_supported: [\"mcp:tools\"]\nupstreams:\n{}",
        fixture_upstream("alpha", &["--record", record.to_str().unwrap()])
    );
    let gw = TestGateway::start(&yaml).await;
    let base = gw.url.trim_end_matches("/mcp").to_owned();

    // No credential: 401 naming the metadata, which says how to get one.
    let missing = initialize(&gw.url, None).await;
    assert_eq!(missing.status, StatusCode::UNAUTHORIZED, "{}", missing.body);
    let metadata_url = format!("{base}/.well-known/oauth-protected-resource/mcp");
    assert_eq!(
        challenge(&missing),
        format!("Bearer resource_metadata=\"{metadata_url}\"")
    );
    let metadata = get_json(&metadata_url).await;
    assert_eq!(metadata["resource"], gw.url);
    assert_eq!(metadata["authorization_servers"], json!([ISSUER]));
    assert_eq!(metadata["bearer_methods_supported"], json!(["header"]));
    let root = get_json(&format!("{base}/.well-known/oauth-protected-resource")).await;
    assert_eq!(root, metadata);

    // Good credentials of each kind.
    for (who, token) in [
        ("ops", OPS_KEY.to_owned()),
        ("alice", rsa.token(claims("alice", |_| {}))),
        ("bob", ec.token(claims("bob", |_| {}))),
    ] {
        let ok = initialize(&gw.url, Some(&format!("Bearer {token}"))).await;
        assert_eq!(ok.status, StatusCode::OK, "{who}: {}", ok.body);
    }

    // Every bad token: 401 invalid_token with the reason; none reach alpha.
    let hs256_with_the_public_key = {
        let secret = rsa.jwk["n"].as_str().unwrap().as_bytes().to_vec();
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("rsa-1".into());
        encode(
            &header,
            &claims("mallory", |_| {}),
            &EncodingKey::from_secret(&secret),
        )
        .unwrap()
    };
    let alg_none = {
        let head = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT","kid":"rsa-1"}"#);
        let body = URL_SAFE_NO_PAD.encode(claims("mallory", |_| {}).to_string());
        format!("{head}.{body}.")
    };
    let bad_signature = {
        let good = rsa.token(claims("alice", |_| {}));
        let (rest, _) = good.rsplit_once('.').unwrap();
        format!("{rest}.{}", URL_SAFE_NO_PAD.encode([7u8; 256]))
    };
    let stranger = rsa_signer("unknown-kid");
    let cases = [
        (
            "expired",
            rsa.token(claims("alice", |c| c["exp"] = json!(now() - 3600))),
            "expired",
        ),
        (
            "not yet valid",
            rsa.token(claims("alice", |c| c["nbf"] = json!(now() + 3600))),
            "not valid yet",
        ),
        (
            "wrong iss",
            rsa.token(claims("alice", |c| c["iss"] = json!("https://evil.test"))),
            "issuer",
        ),
        (
            "wrong aud",
            ec.token(claims("alice", |c| {
                c["aud"] = json!("https://other.test/mcp")
            })),
            "audience",
        ),
        ("bad signature", bad_signature, "signature"),
        ("alg none", alg_none, "not a valid JWT"),
        (
            "HS256 with the RSA public key",
            hs256_with_the_public_key,
            "not accepted",
        ),
        (
            "unknown kid",
            stranger.token(claims("alice", |_| {})),
            "key id",
        ),
        ("malformed", "abc.def.ghi".to_owned(), "not a valid JWT"),
        (
            "unknown API key",
            "not-a-key-0123456789".to_owned(),
            "unknown API key",
        ),
    ];
    for (case, token, says) in cases {
        let refused = initialize(&gw.url, Some(&format!("Bearer {token}"))).await;
        assert_eq!(
            refused.status,
            StatusCode::UNAUTHORIZED,
            "{case}: {}",
            refused.body
        );
        let challenge = challenge(&refused);
        assert!(
            challenge.starts_with("Bearer error=\"invalid_token\"") && challenge.contains(says),
            "{case}: {challenge}"
        );
        assert!(challenge.contains(&metadata_url), "{case}: {challenge}");
    }

    // Key rotation: a token with a new kid is accepted once the JWKS has it.
    let rotated = ec_signer("ec-2");
    keys.lock().unwrap().push(rotated.jwk.clone());
    let after_rotation = initialize(
        &gw.url,
        Some(&format!(
            "Bearer {}",
            rotated.token(claims("carol", |_| {}))
        )),
    )
    .await;
    assert_eq!(
        after_rotation.status,
        StatusCode::OK,
        "{}",
        after_rotation.body
    );

    // Sessions belong to their client; a call with the right one works.
    let alice_token = format!("Bearer {}", rsa.token(claims("alice", |_| {})));
    let bob_token = format!("Bearer {}", ec.token(claims("bob", |_| {})));
    let alice = McpClient::connect_with(&gw.url, &[("authorization", &alice_token)]).await;
    let call = json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": { "name": "alpha__echo", "arguments": { "message": "mine" } } }).to_string();
    let hijack = alice
        .post_raw(&call, &[("authorization", &bob_token)])
        .await;
    assert_eq!(hijack.status, StatusCode::NOT_FOUND, "{}", hijack.body);
    let own = alice
        .post_raw(&call, &[("authorization", &alice_token)])
        .await;
    assert_eq!(
        own.json()["result"]["content"][0]["text"],
        "mine",
        "{}",
        own.body
    );

    // A 2026-07-28 request is authenticated on its own, every time.
    let modern = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list",
        "params": { "_meta": { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} } } }).to_string();
    let http = reqwest::Client::new();
    let modern_headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/list"),
    ];
    let anonymous = post(&http, &gw.url, None, &modern, &modern_headers).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    let mut with_key = modern_headers.to_vec();
    let ops = format!("Bearer {OPS_KEY}");
    with_key.push(("authorization", &ops));
    let listed = post(&http, &gw.url, None, &modern, &with_key).await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.body);

    // /status and /metrics need a client; the probes do not.
    let status = http.get(format!("{base}/status")).send().await.unwrap();
    assert_eq!(status.status(), StatusCode::UNAUTHORIZED);
    let status = http
        .get(format!("{base}/status"))
        .bearer_auth(OPS_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(status.status(), StatusCode::OK);
    assert_eq!(
        http.get(format!("{base}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );

    // Only the one good call reached the upstream, without any credential.
    let seen = read_jsonl(&record);
    let calls: Vec<&Value> = seen
        .iter()
        .filter(|m| m["method"] == "tools/call")
        .collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let text = std::fs::read_to_string(&record).unwrap();
    assert!(
        !text.contains(OPS_KEY) && !text.contains("Bearer"),
        "a credential reached the upstream"
    );
    gw.stop().await;
}

#[tokio::test]
async fn pem_keys_verify_tokens_and_a_missing_required_scope_gets_403() {
    // Keys from the config as PEM, one EC and one RSA, instead of a JWKS.
    let ec = ec_signer("ec-1");
    let rsa = rsa_signer("rsa-1");
    let pem_list = serde_json::to_string(&[&ec.public_pem, &rsa.public_pem]).unwrap();
    let yaml = format!(
        "auth:\n  mode: on\n  jwt:\n    issuer: {ISSUER}\n    audience: {AUDIENCE}\n    public_keys: {pem_list}\n  required_scopes: [\"mcp:tools\"]\nupstreams:\n{}",
        example_upstream("alpha", &[])
    );
    let gw = TestGateway::start(&yaml).await;
    let narrow = ec.token(claims("dave", |c| c["scope"] = json!("profile")));
    let refused = initialize(&gw.url, Some(&format!("Bearer {narrow}"))).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
    let challenge = challenge(&refused);
    assert!(
        challenge.starts_with("Bearer error=\"insufficient_scope\", scope=\"mcp:tools\""),
        "{challenge}"
    );
    for wide in [
        ec.token(claims("dave", |_| {})),
        rsa.token(claims("erin", |_| {})),
    ] {
        let accepted = initialize(&gw.url, Some(&format!("Bearer {wide}"))).await;
        assert_eq!(accepted.status, StatusCode::OK, "{}", accepted.body);
    }
    let stranger = ec_signer("ec-9").token(claims("mallory", |_| {}));
    let refused = initialize(&gw.url, Some(&format!("Bearer {stranger}"))).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED, "{}", refused.body);
    gw.stop().await;
}

#[tokio::test]
async fn rate_limits_audit_lines_and_denial_counters_name_the_client_and_never_a_secret() {
    let yaml = format!(
        "auth:\n  mode: on\n  api_keys:\n    - client: busy\n      key: \"${{MCPMUX_IT_BUSY_KEY}}\"\n    - client: calm\n      key: \"${{MCPMUX_IT_CALM_KEY}}\"\nrate_limit:\n  requests_per_second: 1\n  burst: 5\nupstreams:\n{}",
        example_upstream("alpha", &[])
    );
    let path = tempdir().join("auth.yaml");
    std::fs::write(&path, yaml).unwrap();
    let busy_key = "busy-key-5a1f0c9e7d";
    let calm_key = "calm-key-2b8e4d6f1a";
    let mut served = crate::support::served::Served::start_with_env(
        &["--config", path.to_str().unwrap()],
        &[
            ("MCPMUX_IT_BUSY_KEY", busy_key),
            ("MCPMUX_IT_CALM_KEY", calm_key),
        ],
    );
    let addr = served.listening_addr().await;
    served.first("upstream ready").await;
    let url = format!("http://{addr}/mcp");

    // The calm client makes one call with a secret argument.
    let calm_auth = format!("Bearer {calm_key}");
    let calm = McpClient::connect_with(&url, &[("authorization", &calm_auth)]).await;
    let secret_argument = "the-argument-nobody-logs-3c9d";
    let echoed = calm
        .call_tool("alpha__echo", json!({ "message": secret_argument }))
        .await;
    assert_eq!(echoed["result"]["content"][0]["text"], secret_argument);
    let audit = served.first("call").await;
    assert_eq!(audit["client"], "calm", "{audit}");
    assert_eq!(audit["item"], "alpha__echo", "{audit}");
    assert_eq!(audit["upstream"], "alpha", "{audit}");
    assert_eq!(audit["outcome"], "Ok", "{audit}");

    // The busy client runs out of its rate; the calm one does not notice.
    let http = reqwest::Client::new();
    let ping = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "busy", "version": "0" } } }).to_string();
    let busy_auth = format!("Bearer {busy_key}");
    let mut refused = None;
    for _ in 0..20 {
        let raw = post(&http, &url, None, &ping, &[("authorization", &busy_auth)]).await;
        if raw.status == StatusCode::TOO_MANY_REQUESTS {
            refused = Some(raw);
            break;
        }
    }
    let refused = refused.expect("20 requests at once exceed 1 per second after a burst of 5");
    assert!(
        refused.headers.contains_key("retry-after"),
        "{:?}",
        refused.headers
    );
    assert!(
        refused.body.contains("rate limit exceeded for client busy"),
        "{}",
        refused.body
    );
    let echoed = calm
        .call_tool("alpha__echo", json!({ "message": "still fine" }))
        .await;
    assert_eq!(echoed["result"]["content"][0]["text"], "still fine");

    // An unauthenticated request is refused and counted.
    let anonymous = post(&http, &url, None, &ping, &[]).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    let metrics = http
        .get(format!("http://{addr}/metrics"))
        .bearer_auth(calm_key)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for series in [
        r#"mcpmux_denials_total{client="busy",reason="rate_limit"}"#,
        r#"mcpmux_denials_total{client="unauthenticated",reason="authentication"}"#,
    ] {
        assert!(
            metrics.lines().any(|l| l.starts_with(series)),
            "{series} missing"
        );
    }

    // A reload replaces the keys: the old one stops working, the new one works.
    let rotated_key = "calm-key-rotated-9e2b7c";
    let rotated = std::fs::read_to_string(&path)
        .unwrap()
        .replace("${MCPMUX_IT_CALM_KEY}", rotated_key);
    let next = path.with_extension("next");
    std::fs::write(&next, rotated).unwrap();
    std::fs::rename(&next, &path).unwrap();
    served.signal(nix::sys::signal::Signal::SIGHUP);
    served
        .first("authentication and rate limits reloaded")
        .await;
    let old = post(&http, &url, None, &ping, &[("authorization", &calm_auth)]).await;
    assert_eq!(old.status, StatusCode::UNAUTHORIZED, "{}", old.body);
    let new_auth = format!("Bearer {rotated_key}");
    let new = post(&http, &url, None, &ping, &[("authorization", &new_auth)]).await;
    assert_eq!(new.status, StatusCode::OK, "{}", new.body);

    served.signal(nix::sys::signal::Signal::SIGTERM);
    let (status, log) = served.finish().await;
    assert!(status.success());
    for secret in [busy_key, calm_key, secret_argument, rotated_key] {
        assert!(!log.contains(secret), "{secret} appears in the log");
    }
}

#[tokio::test]
async fn the_python_sdk_discovers_the_metadata_from_the_401_and_connects_with_a_key_in_both_eras() {
    let yaml = format!(
        "auth:\n  mode: on\n  api_keys:\n    - client: py\n      key: {OPS_KEY}\n  authorization_servers: [{ISSUER}]\nupstreams:\n{}",
        example_upstream("alpha", &[])
    );
    let gw = TestGateway::start(&yaml).await;
    for mode in ["legacy", "2026-07-28"] {
        let out =
            crate::support::interop::run_python("auth_client.py", &[&gw.url, OPS_KEY, mode]).await;
        let discovery = &out["discovery"];
        assert_eq!(discovery["status"], 401, "{out}");
        assert!(
            discovery["resource_metadata"]
                .as_str()
                .is_some_and(|u| u.ends_with("/.well-known/oauth-protected-resource/mcp")),
            "{out}"
        );
        assert_eq!(discovery["metadata"]["resource"], gw.url, "{out}");
        assert_eq!(
            discovery["metadata"]["authorization_servers"][0]
                .as_str()
                .map(|s| s.trim_end_matches('/')),
            Some(ISSUER),
            "{out}"
        );
        assert!(
            out["tools"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t == "alpha__echo"),
            "{out}"
        );
        assert_eq!(out["echo"], "with a token", "{out}");
        let expected_version = if mode == "legacy" { "2025-11-25" } else { mode };
        assert_eq!(out["protocol_version"], expected_version, "{mode}: {out}");
    }
    gw.stop().await;
}

#[tokio::test]
async fn the_typescript_sdk_connects_with_a_bearer_token_and_is_refused_without() {
    let yaml = format!(
        "auth:\n  mode: on\n  api_keys:\n    - client: ts\n      key: {OPS_KEY}\nupstreams:\n{}",
        example_upstream("alpha", &[])
    );
    let gw = TestGateway::start(&yaml).await;
    let out = crate::support::interop::run_node("ts_bearer_client.mjs", &[&gw.url, OPS_KEY]).await;
    assert!(
        out["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "alpha__echo"),
        "{out}"
    );
    assert_eq!(out["echo"], "from typescript", "{out}");
    assert!(out["anonymous"].as_str().unwrap().contains("401"), "{out}");
    gw.stop().await;
}

/// The names in every page of `method` for a client.
async fn all_names(client: &McpClient, method: &str, key: &str, field: &str) -> Vec<String> {
    let (items, _) = client.list_all(method, key).await;
    items
        .iter()
        .filter_map(|i| i[field].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn config_secure_yaml_gives_each_client_its_own_view_in_both_eras() {
    let signer = rsa_signer("secure-1");
    let keys = Arc::new(Mutex::new(vec![signer.jwk.clone()]));
    let jwks = jwks_server(keys).await;
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/secure.yaml");
    let mut served = crate::support::served::Served::start_with_env(
        &["--config", config],
        &[
            ("MCPMUX_OPS_KEY", OPS_KEY),
            ("MCPMUX_JWT_ISSUER", ISSUER),
            ("MCPMUX_JWT_AUDIENCE", AUDIENCE),
            ("MCPMUX_JWKS_URL", &jwks),
        ],
    );
    let addr = served.listening_addr().await;
    served.wait_for("upstream ready", 2).await;
    let url = format!("http://{addr}/mcp");

    let ops_auth = format!("Bearer {OPS_KEY}");
    let reader_auth = format!("Bearer {}", signer.token(claims("reader", |_| {})));
    let stranger_auth = format!("Bearer {}", signer.token(claims("stranger", |_| {})));
    let ops = McpClient::connect_with(&url, &[("authorization", &ops_auth)]).await;
    let reader = McpClient::connect_with(&url, &[("authorization", &reader_auth)]).await;
    let stranger = McpClient::connect_with(&url, &[("authorization", &stranger_auth)]).await;

    let ops_tools = all_names(&ops, "tools/list", "tools", "name").await;
    assert!(
        ops_tools.iter().any(|t| t.starts_with("notes__"))
            && ops_tools.iter().any(|t| t.starts_with("weather__")),
        "{ops_tools:?}"
    );
    let ops_resources = all_names(&ops, "resources/list", "resources", "uri").await;
    assert!(
        ops_resources.iter().any(|u| u.starts_with("notes+")),
        "{ops_resources:?}"
    );

    let reader_tools = all_names(&reader, "tools/list", "tools", "name").await;
    assert!(
        !reader_tools.is_empty() && reader_tools.iter().all(|t| t.starts_with("weather__")),
        "{reader_tools:?}"
    );
    let reader_resources = all_names(&reader, "resources/list", "resources", "uri").await;
    assert!(
        reader_resources.iter().all(|u| !u.starts_with("notes+")),
        "{reader_resources:?}"
    );
    assert!(
        all_names(&stranger, "tools/list", "tools", "name")
            .await
            .is_empty()
    );

    // A hidden tool answers exactly like one that does not exist.
    let hidden = reader
        .request(
            "tools/call",
            json!({ "name": "notes__echo", "arguments": { "message": "x" } }),
        )
        .await;
    let unknown = reader
        .request(
            "tools/call",
            json!({ "name": "nowhere__echo", "arguments": { "message": "x" } }),
        )
        .await;
    assert_eq!(
        hidden["error"]["code"], unknown["error"]["code"],
        "{hidden} / {unknown}"
    );
    assert_eq!(hidden["error"]["code"], -32602, "{hidden}");
    let allowed = reader
        .call_tool("weather__echo", json!({ "message": "sunny" }))
        .await;
    assert_eq!(
        allowed["result"]["content"][0]["text"], "sunny",
        "{allowed}"
    );
    // The refusal is counted as what it is, for the operator only.
    let metrics = reqwest::Client::new()
        .get(format!("http://{addr}/metrics"))
        .bearer_auth(OPS_KEY)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with(r#"mcpmux_denials_total{client="reader",reason="policy"}"#)),
        "no policy denial counted"
    );

    // The same views for stateless 2026-07-28 requests.
    let http = reqwest::Client::new();
    let modern = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list",
        "params": { "_meta": { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} } } }).to_string();
    for (auth, expect_notes) in [(&ops_auth, true), (&reader_auth, false)] {
        let raw = post(
            &http,
            &url,
            None,
            &modern,
            &[
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/list"),
                ("authorization", auth),
            ],
        )
        .await;
        assert_eq!(raw.status, StatusCode::OK, "{}", raw.body);
        let names: Vec<String> = raw.json()["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(
            names.iter().any(|t| t.starts_with("notes__")),
            expect_notes,
            "{names:?}"
        );
        assert!(
            names.iter().any(|t| t.starts_with("weather__")),
            "{names:?}"
        );
    }

    served.signal(nix::sys::signal::Signal::SIGTERM);
    let (status, _) = served.finish().await;
    assert!(status.success());
}
