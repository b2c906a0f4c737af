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
use crate::support::interop::{self, run_python};
use crate::support::oauth::{LOGIN_CLIENT_ID, LOGIN_CLIENT_SECRET, Provider};
use crate::support::{TestGateway, tempdir, within};

pub const OPS_KEY: &str = "ops-key-0123456789abcdef";

/// A gateway whose hosts log in at `provider`: alice (group `ops`) may use
/// the notes tools, bob (group `readers`) only `notes__echo`; the state file
/// and a generated signing key live in `dir`.
pub fn login_config(provider: &Provider, dir: &std::path::Path, extra_server: &str) -> String {
    let key = "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWY=";
    format!(
        "auth:\n  mode: on\n  admin: {{ access: key, key: {OPS_KEY} }}\n  api_keys:\n    - client: ops\n      key: {OPS_KEY}\n  scopes_supported: [mcp]\n  oauth_server:\n    provider:\n      issuer: {issuer}\n      client_id: {LOGIN_CLIENT_ID}\n      client_secret: {LOGIN_CLIENT_SECRET}\n      scopes: [openid, profile, email, groups]\n    claims:\n      client: preferred_username\n      groups: groups\n    state_path: {state}\n{extra_server}credentials:\n  key: \"{key}\"\n  path: {tokens}\npolicy:\n  default: deny\n  scopes:\n    ops:\n      allow: [\"notes__*\"]\n    readers:\n      allow: [\"notes__echo\"]\nupstreams:\n{notes}",
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
            .args(["--url", url, "--login", login])
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
        let answer = within("the host's answer", self.lines.next_line())
            .await
            .unwrap()
            .expect("the host answers");
        serde_json::from_str(&answer).unwrap()
    }
}

async fn admin(method: reqwest::Method, url: &str) -> Value {
    let response = reqwest::Client::new()
        .request(method, url)
        .bearer_auth(OPS_KEY)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{url}: {}", response.status());
    serde_json::from_str(&response.text().await.unwrap()).unwrap()
}

fn base(gw: &TestGateway) -> String {
    gw.url.trim_end_matches("/mcp").to_owned()
}

#[tokio::test]
async fn a_typescript_host_logs_in_with_just_the_url_refreshes_and_logs_in_again_after_a_revocation()
{
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
    assert!(names.contains(&"notes__add") && names.contains(&"notes__echo"), "{tools:#}");
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
    let listed = admin(reqwest::Method::GET, &format!("{}/oauth/grants?user=alice", base(&gw))).await;
    let grants = listed["grants"].as_array().unwrap();
    assert_eq!(grants.len(), 1, "{listed:#}");
    assert_eq!(grants[0]["client_id"], state["client_id"], "{listed:#}");
    assert_eq!(grants[0]["consented"], true, "{listed:#}");
    let revoked = admin(
        reqwest::Method::DELETE,
        &format!("{}/oauth/grants?user=alice", base(&gw)),
    )
    .await;
    assert_eq!(revoked["revoked"], 1, "{revoked:#}");

    // Its access token stops working at once and the refresh is refused:
    // the host goes back to the login (and the consent is asked again).
    let called = alice
        .ask(json!({"op": "call", "name": "notes__echo", "arguments": {"message": "again"}}))
        .await;
    assert_eq!(called["ok"], true, "{called:#}");
    let state = alice.ask(json!({"op": "state"})).await;
    assert_eq!(state["authorizations"], 2, "{state:#}");
    assert!(
        state["last_login_pages"].to_string().contains("gateway-consent"),
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
    let provider = Provider::with_groups("carol=ops").await;
    let dir = tempdir();
    let gw = TestGateway::start(&login_config(&provider, &dir, "")).await;
    let node = interop::node().display().to_string();
    let out = run_python(
        "oauth_host.py",
        &[
            "--url",
            &gw.url,
            "--login",
            "carol",
            "--node",
            &node,
            "--call",
            "notes__echo",
            "--arguments",
            r#"{"message": "from python"}"#,
        ],
    )
    .await;
    assert_eq!(out["ok"], true, "{out:#}");
    assert!(out["result"].to_string().contains("from python"), "{out:#}");
    assert!(out["client_id"].as_str().unwrap().starts_with("mcpmux-"), "{out:#}");
    gw.stop().await;
}
