//! No token anywhere it could leak: a served gateway (the binary, debug
//! logs, traces exported to a test OTLP receiver) with an upstream in each
//! `auth.mode` against `oidc-provider` and the SDK server, used by a JWT
//! client and by a user who connected in headless Chromium; then its logs,
//! `/status`, `/ui` (page and live figures), `/metrics` and every span
//! attribute are searched for any JWT (`eyJ`), the clients' own tokens and
//! the client secret.

use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use serde_json::json;

use crate::auth::{AUDIENCE, ISSUER, claims, rsa_signer};
use crate::support::interop::run_node;
use crate::support::oauth::{CLIENT_ID, CLIENT_SECRET, Protected, Provider};
use crate::support::served::Served;
use crate::support::{McpClient, tempdir, within};
use crate::telemetry::receiver;
use crate::upstream_auth::{ALICE_KEY, bearer, elicitation_url, whoami};

#[tokio::test]
async fn no_token_reaches_the_logs_status_ui_metrics_or_traces() {
    let signer = rsa_signer("secrecy-1");
    let provider = Provider::start(600, Some(&json!({ "keys": [signer.jwk] }))).await;
    let server = Protected::start(&provider.issuer).await;
    let (otlp, spans) = receiver().await;
    let dir = tempdir();
    let pem = serde_json::to_string(&signer.public_pem).unwrap();
    let upstream = |name: &str, mode: &str| {
        format!(
            "  {name}:\n    url: {}\n    auth:\n      mode: {mode}\n      token_url: {token}\n      client_id: {CLIENT_ID}\n      client_secret: {CLIENT_SECRET}\n      scopes: [mcp:tools]\n",
            server.url(),
            token = provider.token_url(),
        )
    };
    let user = format!(
        "  usr:\n    url: {}\n    auth:\n      mode: user\n      client_id: {CLIENT_ID}\n      client_secret: {CLIENT_SECRET}\n      scopes: [mcp:tools]\n",
        server.url()
    );
    let yaml = format!(
        "auth:\n  mode: on\n  admin: {{ access: open }}\n  api_keys:\n    - client: alice\n      key: {ALICE_KEY}\n  jwt:\n    issuer: {ISSUER}\n    audience: {AUDIENCE}\n    public_keys: [{pem}]\ncredentials:\n  key: MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n  path: {}\ntracing:\n  otlp_endpoint: {otlp}\nupstreams:\n{}{}{user}",
        dir.join("tokens.json").display(),
        upstream("svc", "client_credentials"),
        upstream("te", "token_exchange"),
    );
    let config = dir.join("gateway.yaml");
    std::fs::write(&config, yaml).unwrap();
    let mut served = Served::start_with_env(
        &["--config", config.to_str().unwrap()],
        &[("RUST_LOG", "debug")],
    );
    let addr = served.listening_addr().await;
    let base = format!("http://{addr}");
    let url = format!("{base}/mcp");

    // A JWT client through the service and the exchanged tokens ...
    let bob_jwt = signer.token(claims("bob", |_| {}));
    let bob = McpClient::connect_with(&url, &[("authorization", &bearer(&bob_jwt))]).await;
    assert_eq!(
        whoami(&bob.call_tool("svc__whoami", json!({})).await)["sub"],
        CLIENT_ID
    );
    assert_eq!(
        whoami(&bob.call_tool("te__whoami", json!({})).await)["sub"],
        "bob"
    );
    // ... and a user who connects in the browser, then calls as herself.
    let alice = McpClient::connect_with(&url, &[("authorization", &bearer(ALICE_KEY))]).await;
    let link = elicitation_url(&alice.call_tool("usr__connect", json!({})).await);
    let login = run_node("oauth_login.mjs", &[&link, "alice"]).await;
    assert_eq!(login["status"], 200, "{login:#}");
    assert_eq!(
        whoami(&alice.call_tool("usr__whoami", json!({})).await)["sub"],
        "alice"
    );

    let http = reqwest::Client::new();
    let get = |path: &str| {
        let request = http.get(format!("{base}{path}"));
        async move { request.send().await.unwrap().text().await.unwrap() }
    };
    let status = get("/status").await;
    assert!(status.contains("\"connectedUsers\""), "{status}");
    let page = get("/ui").await;
    assert!(
        page.contains("<dt>Connected users</dt><dd>alice</dd>"),
        "the page says who connected: {page}"
    );
    let metrics = get("/metrics").await;
    assert!(
        metrics.contains("mcpmux_upstream_connected_users{upstream=\"usr\"} 1"),
        "who connected, counted: {metrics}"
    );
    assert!(
        metrics.contains("mcpmux_upstream_instances{upstream=\"te\"} 1"),
        "bob's own session at te: {metrics}"
    );
    let mut live = http.get(format!("{base}/ui/events")).send().await.unwrap();
    let figures = within("the operator page's figures", live.chunk())
        .await
        .unwrap()
        .map(|c| String::from_utf8_lossy(&c).into_owned())
        .unwrap_or_default();
    assert!(figures.contains("figures"), "{figures}");
    drop(live);

    // Spans of the calls have arrived (bounded wait), with their attributes.
    let attributes = within("the calls' spans", async {
        loop {
            let texts: Vec<String> = spans
                .lock()
                .unwrap()
                .iter()
                .flat_map(|(_, span)| span.attributes.clone())
                .filter_map(|a| match a.value?.value? {
                    Any::StringValue(s) => Some(format!("{}={s}", a.key)),
                    _ => None,
                })
                .collect();
            if texts
                .iter()
                .any(|t| t.contains("usr__whoami") || t.contains("whoami"))
            {
                return texts.join("\n");
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    })
    .await;

    served.signal(nix::sys::signal::Signal::SIGTERM);
    let (_, logs) = served.finish().await;
    assert!(
        logs.contains("obtained a service token"),
        "debug logs were read"
    );
    assert!(logs.contains("the user connected their account"));
    let stored = std::fs::read_to_string(dir.join("tokens.json")).unwrap();
    for (place, text) in [
        ("logs", &logs),
        ("/status", &status),
        ("/ui", &page),
        ("/ui/events", &figures),
        ("/metrics", &metrics),
        ("span attributes", &attributes),
        ("the token file", &stored),
    ] {
        // A JWT: a JSON header in base64url, then two more dotted parts
        // (a random token that merely contains "eyJ" is not one).
        let jwt_line = text.lines().find(|l| looks_like_jwt(l));
        for near in text
            .lines()
            .filter(|l| l.contains("eyJ") && !looks_like_jwt(l))
        {
            eprintln!("{place}: holds \"eyJ\" but no JWT: {near}");
        }
        assert!(jwt_line.is_none(), "a JWT in {place}: {jwt_line:?}");
        assert!(!text.contains(&bob_jwt), "bob's own token in {place}");
        assert!(
            !text.contains(CLIENT_SECRET),
            "the client secret in {place}"
        );
        assert!(!text.contains(ALICE_KEY), "alice's API key in {place}");
    }
}

/// Whether `line` holds something shaped like a JWT: `eyJ` (a base64url
/// `{"`), at least ten more base64url characters, a dot, a second part,
/// and a dot.
fn looks_like_jwt(line: &str) -> bool {
    let b64 = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    line.match_indices("eyJ").any(|(at, _)| {
        let rest = &line[at..];
        let mut parts = rest.splitn(3, '.');
        let header = parts.next().unwrap_or_default();
        let header_len = header.chars().take_while(|c| b64(*c)).count();
        let payload = parts.next();
        header_len >= 13
            && header_len == header.len()
            && payload.is_some_and(|p| p.len() >= 10 && p.chars().all(b64))
            && parts.next().is_some()
    })
}

#[test]
fn a_jwt_is_told_from_a_token_that_merely_contains_its_prefix() {
    let jwt = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl";
    assert!(looks_like_jwt(&format!("token {jwt} here")));
    assert!(looks_like_jwt(&format!(r#"{{"auth":"Bearer {jwt}"}}"#)));
    assert!(!looks_like_jwt("session 1a2b-Q8zeyJk3mN0pQr5sT7u done"));
    assert!(!looks_like_jwt("code=AbeyJ12_-xyz&state=eyJnotatoken"));
}
