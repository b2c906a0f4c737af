//! Two replicas behind a real HAProxy running the shipped
//! `deploy/haproxy/haproxy.cfg` (only its bind address and server lines
//! replaced): session-based clients of the Python SDK stick to the replica
//! their session id names; when that replica is killed, each of its clients
//! gets 404 once, initializes again on the other one and carries on.

use std::process::Stdio;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use super::{Replica, free_port};
use crate::support::gateway::{example_upstream, with_auth_off};
use crate::support::interop;
use crate::support::{McpClient, tempdir, within};

const HAPROXY: &str = "/usr/sbin/haproxy";

fn shipped() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/haproxy/haproxy.cfg");
    std::fs::read_to_string(path).unwrap()
}

/// The replica id a session id starts with.
fn replica_of(session: &str) -> &str {
    let (replica, rest) = session
        .split_once('-')
        .expect("a {replica}-{random} session id");
    assert_eq!(replica.len(), 8, "{session}");
    assert!(replica.bytes().all(|b| b.is_ascii_hexdigit()), "{session}");
    assert_eq!(rest.len(), 32, "{session}");
    replica
}

#[tokio::test]
async fn the_shipped_haproxy_config_is_valid() {
    let output = Command::new(HAPROXY)
        .args(["-c", "-f"])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/deploy/haproxy/haproxy.cfg"
        ))
        .output();
    let output = within("haproxy -c", output).await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("Configuration file is valid"));
}

#[tokio::test]
async fn sessions_stick_through_haproxy_and_survive_a_lost_replica_with_one_initialize() {
    let path = tempdir().join("mcpmux.yaml");
    let yaml = format!("upstreams:\n{}", example_upstream("demo", &[]));
    std::fs::write(&path, with_auth_off(&yaml)).unwrap();
    let mut a = Replica::start(&path, 1).await;
    let b = Replica::start(&path, 1).await;
    let a_id = replica_of(&McpClient::connect(&a.url).await.session).to_owned();
    let b_id = replica_of(&McpClient::connect(&b.url).await.session).to_owned();
    assert_ne!(a_id, b_id);

    // The shipped config, listening on a free loopback port, with the two
    // replicas as its servers.
    let port = free_port();
    let host = |r: &Replica| r.base.trim_start_matches("http://").to_owned();
    let config: String = shipped()
        .lines()
        .filter(|l| !l.trim_start().starts_with("server "))
        .map(|l| match l.trim() {
            "bind :8080" => format!("    bind 127.0.0.1:{port}\n"),
            "default_backend mcpmux" => format!("{l}\n"),
            _ if l.trim_start().starts_with("default-server") => format!(
                "{l}\n    server a {}\n    server b {}\n",
                host(&a),
                host(&b)
            ),
            _ => format!("{l}\n"),
        })
        .collect();
    assert!(
        config.contains(&format!("server a {}", host(&a))),
        "{config}"
    );
    let dir = tempdir();
    eprintln!("haproxy config and log in {}", dir.display());
    let cfg = dir.join("haproxy.cfg");
    std::fs::write(&cfg, &config).unwrap();
    let mut haproxy = Command::new(HAPROXY)
        .args(["-db", "-f"])
        .arg(&cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("haproxy.log")).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let front = format!("http://127.0.0.1:{port}");
    within("haproxy to serve /readyz", async {
        loop {
            if let Some(exit) = haproxy.try_wait().unwrap() {
                let log = std::fs::read_to_string(dir.join("haproxy.log")).unwrap_or_default();
                panic!("haproxy exited ({exit}):\n{log}");
            }
            if let Ok(r) = reqwest::get(format!("{front}/readyz")).await
                && r.status() == reqwest::StatusCode::OK
            {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;

    let mut client = Command::new(interop::python())
        .arg(interop::dir().join("sticky_client.py"))
        .args([&format!("{front}/mcp"), "4", "demo__echo"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
    let mut next_line = async || -> Value {
        let line = within("the client's next report", lines.next_line())
            .await
            .unwrap();
        serde_json::from_str(&line.expect("the client ended early")).unwrap()
    };
    let before = next_line().await;
    let sessions: Vec<String> = before["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect();
    let on_a: Vec<bool> = sessions.iter().map(|s| replica_of(s) == a_id).collect();
    // Round robin spreads the four initializes; three calls each stuck.
    assert!(
        on_a.iter().any(|x| *x) && !on_a.iter().all(|x| *x),
        "{before}"
    );
    assert!(
        sessions
            .iter()
            .all(|s| [&a_id, &b_id].contains(&&replica_of(s).to_owned()))
    );

    // Replica A dies. Its clients get 404 once and initialize again on B;
    // B's clients notice nothing.
    a.served.child.kill().await.unwrap();
    let mut stdin = client.stdin.take().unwrap();
    stdin.write_all(b"go\n").await.unwrap();
    stdin.flush().await.unwrap();
    let after = next_line().await;
    let after = after["after"].as_array().unwrap();
    assert_eq!(after.len(), sessions.len());
    for (i, entry) in after.iter().enumerate() {
        assert_eq!(entry["text"], format!("{i}.after"), "{entry}");
        assert_eq!(entry["reinitialized"], on_a[i], "{entry}");
        let now = entry["session"].as_str().unwrap();
        assert_eq!(replica_of(now), b_id, "{entry}");
        if on_a[i] {
            assert!(
                entry["error"]
                    .as_str()
                    .unwrap()
                    .contains("initialize a new one"),
                "{entry}"
            );
            assert_ne!(now, sessions[i]);
        } else {
            assert_eq!(now, sessions[i]);
        }
    }
    let status = within("the client to exit", client.wait()).await.unwrap();
    assert!(status.success());
    haproxy.kill().await.unwrap();
}
