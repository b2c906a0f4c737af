//! Third-party MCP servers run over HTTP for a test: server-everything in
//! its `streamableHttp` and `sse` modes, and the Python SDK server. Each
//! binds port 0 and reports the port it got; the process is killed when
//! the peer is dropped.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::interop;
use super::within;

pub struct HttpPeer {
    child: Child,
    pub port: u16,
}

impl HttpPeer {
    /// server-everything in `mode` ("streamableHttp" or "sse").
    pub async fn everything(mode: &str) -> HttpPeer {
        Self::everything_on(mode, 0).await
    }

    /// server-everything in `mode` on `port` (0 for any): a server
    /// restarted on the port of one that was killed.
    pub async fn everything_on(mode: &str, port: u16) -> HttpPeer {
        Self::node(&[], &interop::everything_js(), &[mode], port).await
    }

    /// The ext-apps example server over Streamable HTTP, made to bind
    /// loopback (it listens on every interface otherwise).
    pub async fn apps() -> HttpPeer {
        Self::node(&["listen-loopback.cjs"], &interop::apps_js(), &[], 0).await
    }

    /// A Node server `script` with `args` on `PORT=port`, with the
    /// `preloads` of `tests/interop/` and `report-port.cjs`, which says the
    /// port it bound.
    async fn node(
        preloads: &[&str],
        script: &std::path::Path,
        args: &[&str],
        port: u16,
    ) -> HttpPeer {
        let mut command = Command::new(interop::node());
        for preload in preloads.iter().chain(&["report-port.cjs"]) {
            command.arg("-r").arg(interop::dir().join(preload));
        }
        let mut child = command
            .arg(script)
            .args(args)
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let port = read_port(child.stderr.take().unwrap(), "LISTENING_PORT=").await;
        HttpPeer { child, port }
    }

    /// The Python `mcp` SDK server (`tests/interop/py_http_server.py`) in
    /// `transport` ("streamable-http" or "sse") on `port` (0 for any).
    pub async fn python(transport: &str, port: u16) -> HttpPeer {
        Self::python_with(transport, port, &[]).await
    }

    /// Like [`Self::python`], with `extra` arguments (`--private-read-ttl-ms`).
    pub async fn python_with(transport: &str, port: u16, extra: &[&str]) -> HttpPeer {
        let mut child = Command::new(interop::python())
            .arg(interop::dir().join("py_http_server.py"))
            .args(["--transport", transport, "--port", &port.to_string()])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let port = read_port(child.stdout.take().unwrap(), "LISTENING ").await;
        HttpPeer { child, port }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Kills the server at once (SIGKILL) and reaps it.
    pub async fn kill(mut self) {
        self.child.kill().await.unwrap();
    }
}

/// Reads lines until one starts with `prefix` followed by the port.
async fn read_port(pipe: impl tokio::io::AsyncRead + Unpin + Send + 'static, prefix: &str) -> u16 {
    read_line_after(pipe, prefix).await.parse().unwrap()
}

/// Reads lines until one starts with `prefix`, returns the rest of it
/// (trimmed), then keeps draining the pipe so the peer never blocks on it.
pub async fn read_line_after(
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
