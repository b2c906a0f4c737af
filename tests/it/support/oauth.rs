//! A real OAuth authorization server and a protected MCP server for the
//! upstream-identity tests: `oidc-provider` from npm
//! (`tests/interop/oauth_provider.mjs`) and an MCP server on the
//! TypeScript SDK that verifies the provider's JWTs
//! (`tests/interop/protected_server.mjs`). Both bind port 0 on loopback;
//! each process is killed when its value is dropped.

use std::process::Stdio;

use serde_json::Value;
use tokio::process::{Child, ChildStdin, Command};

use super::interop;

/// `oidc-provider` with the gateway's client `mcpmux-gateway`.
pub struct Provider {
    _child: Child,
    /// Held open: the provider exits when its stdin closes.
    _stdin: ChildStdin,
    pub issuer: String,
}

/// The gateway's client at the provider.
pub const CLIENT_ID: &str = "mcpmux-gateway";
pub const CLIENT_SECRET: &str = "gateway-secret";
/// The gateway's login client (`auth.oauth_server.provider`).
pub const LOGIN_CLIENT_ID: &str = "mcpmux-login";
pub const LOGIN_CLIENT_SECRET: &str = "login-secret";

impl Provider {
    /// Access tokens live `access_ttl` seconds; a token exchange trusts
    /// subject tokens signed by the keys in `subject_jwks` (a JWK set).
    pub async fn start(access_ttl: u64, subject_jwks: Option<&Value>) -> Provider {
        Self::start_with(access_ttl, subject_jwks, &[]).await
    }

    /// With people in groups: `groups` is `alice=ops+dev,bob=readers`
    /// (the ID token of the login client `mcpmux-login` carries them).
    pub async fn with_groups(groups: &str) -> Provider {
        Self::start_with(600, None, &["--groups", groups]).await
    }

    async fn start_with(access_ttl: u64, subject_jwks: Option<&Value>, extra: &[&str]) -> Provider {
        let mut command = Command::new(interop::node());
        command
            .arg(interop::dir().join("oauth_provider.mjs"))
            .args(["--access-ttl", &access_ttl.to_string()])
            .args(extra);
        if let Some(jwks) = subject_jwks {
            let path = super::tempdir().join("subject-jwks.json");
            std::fs::write(&path, jwks.to_string()).unwrap();
            command.arg("--subject-jwks").arg(path);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let issuer = super::peer::read_line_after(child.stdout.take().unwrap(), "ISSUER ").await;
        Provider {
            _child: child,
            _stdin: stdin,
            issuer,
        }
    }

    pub fn token_url(&self) -> String {
        format!("{}/token", self.issuer)
    }

    /// Ends every grant and token of `sub` at the provider.
    pub async fn revoke(&self, sub: &str) -> Value {
        reqwest::Client::new()
            .post(format!("{}/test/revoke?sub={sub}", self.issuer))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .map(|t| serde_json::from_str(&t).unwrap())
            .unwrap()
    }

    /// What the token endpoint issued: `[{grant_type, sub, aud, client_id, ...}]`.
    pub async fn log(&self) -> Vec<Value> {
        list(super::get_json(&format!("{}/test/log", self.issuer)).await)
    }
}

/// The protected MCP server: `whoami` answers with the token's claims.
pub struct Protected {
    _child: Child,
    pub port: u16,
}

impl Protected {
    pub async fn start(issuer: &str) -> Protected {
        let mut child = Command::new(interop::node())
            .arg(interop::dir().join("protected_server.mjs"))
            .args(["--issuer", issuer])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let port = super::peer::read_line_after(child.stdout.take().unwrap(), "LISTENING ").await;
        Protected {
            _child: child,
            port: port.parse().unwrap(),
        }
    }

    /// Its MCP endpoint, which is also its resource URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// Every request it got: `[{verified, status, sub, aud, token_sha256, ...}]`.
    pub async fn seen(&self) -> Vec<Value> {
        list(super::get_json(&format!("http://127.0.0.1:{}/test/seen", self.port)).await)
    }

    /// Its log of resource (un)subscriptions: `[{sub, session, uri, action}]`.
    pub async fn subscriptions(&self) -> Vec<Value> {
        list(
            super::get_json(&format!(
                "http://127.0.0.1:{}/test/subscriptions",
                self.port
            ))
            .await,
        )
    }
}

/// A JSON array's items.
fn list(value: Value) -> Vec<Value> {
    match value {
        Value::Array(items) => items,
        other => panic!("not a list: {other}"),
    }
}

/// The hex SHA-256 of `text` (the protected server reports tokens so).
pub fn sha256_hex(text: &str) -> String {
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, text.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
