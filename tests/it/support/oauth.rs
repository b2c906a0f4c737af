//! A real OAuth authorization server and a protected MCP server for the
//! upstream-identity tests: `oidc-provider` from npm
//! (`tests/interop/oauth_provider.mjs`) and an MCP server on the
//! TypeScript SDK that verifies the provider's JWTs
//! (`tests/interop/protected_server.mjs`). Both bind port 0 on loopback;
//! each process is killed when its value is dropped.

use std::process::Stdio;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

use super::interop;
use super::within;

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

impl Provider {
    /// Access tokens live `access_ttl` seconds; a token exchange trusts
    /// subject tokens signed by the keys in `subject_jwks` (a JWK set).
    pub async fn start(access_ttl: u64, subject_jwks: Option<&Value>) -> Provider {
        let mut command = Command::new(interop::node());
        command
            .arg(interop::dir().join("oauth_provider.mjs"))
            .args(["--access-ttl", &access_ttl.to_string()]);
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
        let issuer = first_word_after(child.stdout.take().unwrap(), "ISSUER ").await;
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
        reqwest::Client::new()
            .get(format!("{}/test/log", self.issuer))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .map(|t| serde_json::from_str(&t).unwrap())
            .unwrap()
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
        let port = first_word_after(child.stdout.take().unwrap(), "LISTENING ").await;
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
        reqwest::Client::new()
            .get(format!("http://127.0.0.1:{}/test/seen", self.port))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .map(|t| serde_json::from_str(&t).unwrap())
            .unwrap()
    }
}

/// Reads lines until one starts with `prefix`; returns the rest of it and
/// keeps draining the pipe so the peer never blocks on it.
async fn first_word_after(
    pipe: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    prefix: &str,
) -> String {
    let mut lines = BufReader::new(pipe).lines();
    let found = within("the peer to say where it listens", async {
        loop {
            let line = lines
                .next_line()
                .await
                .unwrap()
                .expect("peer exited before listening");
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.trim().to_owned();
            }
        }
    })
    .await;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    found
}

/// The hex SHA-256 of `text` (the protected server reports tokens so).
pub fn sha256_hex(text: &str) -> String {
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, text.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
