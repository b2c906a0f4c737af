//! Rows of the fault matrix about upstreams: a child killed while idle and
//! mid-call, garbage on its stdout, a client that never reads its stream
//! while an upstream floods notifications, an invalid config reload, a
//! remote upstream that cannot be reached, and a crash loop.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::{assert_echo, assert_rpc_error, config, end_session, pid_of, reload, run_rows, signal};
use crate::support::matrix::{Subject, children_of};
use crate::support::{McpClient, example_upstream, fixture_upstream, process_exists, within};

/// Faults of an upstream that is up: `alpha` (with the test controls) takes
/// the faults, `beta` serves the bystander.
#[derive(Debug, Clone, Copy)]
enum Fault {
    KillIdle,
    KillMidCall,
    GarbageOnStdout,
    SlowConsumerUnderFlood,
    InvalidReload,
}

#[tokio::test]
async fn faults_of_a_running_upstream() {
    let yaml = config(
        "",
        &[
            fixture_upstream("alpha", &["--test-controls"]),
            example_upstream("beta", &[]),
        ],
    );
    let mut subject = Subject::start(&yaml, &[], "beta__echo").await;
    let rows = [
        Fault::KillIdle,
        Fault::KillMidCall,
        Fault::GarbageOnStdout,
        Fault::SlowConsumerUnderFlood,
        Fault::InvalidReload,
    ];
    run_rows(&mut subject, &rows, async |s: &mut Subject, row: Fault| {
        let name = format!("{row:?}");
        match row {
            Fault::KillIdle => kill_idle(s, &name).await,
            Fault::KillMidCall => kill_mid_call(s, &name).await,
            Fault::GarbageOnStdout => garbage_on_stdout(s, &name).await,
            Fault::SlowConsumerUnderFlood => slow_consumer(s, &name).await,
            Fault::InvalidReload => invalid_reload(s, &name).await,
        }
    })
    .await;
}

/// Waits until `alpha` runs a new child (other than `before`'s) and is
/// ready; the killed child must have been reaped.
async fn wait_restarted(s: &Subject, before: &Value, row: &str) {
    let old = pid_of(before);
    let restarts = before["restarts"].as_u64().unwrap();
    let after = s
        .wait_upstream("alpha", "alpha to restart", |u| {
            u["state"] == "ready"
                && u["pid"] != before["pid"]
                && u["restarts"].as_u64() > Some(restarts)
        })
        .await;
    assert!(
        !process_exists(old),
        "{row}: the killed child {old} was not reaped ({after})"
    );
}

/// kill -9 of the child while no call is in flight: it restarts and
/// answers again.
async fn kill_idle(s: &mut Subject, row: &str) {
    let before = s.upstream_status("alpha").await;
    assert_eq!(before["state"], "ready", "{row}: {before}");
    signal(pid_of(&before), Signal::SIGKILL);
    let client = McpClient::connect(&s.url).await;
    // The other upstream is served while alpha is down or restarting.
    assert_echo(&client, "beta__echo", row).await;
    wait_restarted(s, &before, row).await;
    assert_echo(&client, "alpha__echo", row).await;
    end_session(client, row).await;
}

/// kill -9 of the child during a call: the call ends with -32050 naming
/// the upstream and the signal; it restarts and answers again.
async fn kill_mid_call(s: &mut Subject, row: &str) {
    let before = s.upstream_status("alpha").await;
    let client = McpClient::connect(&s.url).await;
    let call = json!({ "name": "alpha__slow", "arguments": { "steps": 600, "interval_ms": 50 }, "_meta": { "progressToken": "k" } });
    let mut stream = client
        .open_stream(json!("doomed"), "tools/call", call)
        .await;
    let first = stream.next().await.unwrap();
    assert_eq!(first["method"], "notifications/progress", "{row}: {first}");
    signal(pid_of(&before), Signal::SIGKILL);
    let mut last = first;
    // Bounded: at most 600 progress messages come before the end.
    while let Some(message) = stream.next().await {
        last = message;
    }
    assert_rpc_error(
        row,
        &last,
        -32050,
        &json!("doomed"),
        &["upstream 'alpha'", "killed by signal 9"],
    );
    assert_eq!(last["error"]["data"]["upstream"], "alpha", "{row}: {last}");
    assert_echo(&client, "beta__echo", row).await;
    wait_restarted(s, &before, row).await;
    assert_echo(&client, "alpha__echo", row).await;
    drop(stream);
    end_session(client, row).await;
}

/// 2,000 lines that are not JSON-RPC on the child's stdout: it keeps
/// answering, and what exceeds the log rate limit (100 lines/s, burst 200)
/// is counted as suppressed instead of logged.
async fn garbage_on_stdout(s: &mut Subject, row: &str) {
    const LINES: f64 = 2000.0;
    let series = r#"mcpmux_upstream_log_lines_suppressed_total{upstream="alpha"}"#;
    let before = s.upstream_status("alpha").await;
    let suppressed_before = s.metric(series).await;
    let client = McpClient::connect(&s.url).await;
    let started = Instant::now();
    let answer = client
        .call_tool("alpha__garbage_stdout", json!({ "count": LINES as u64 }))
        .await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "wrote 2000 garbage lines to stdout",
        "{row}: {answer}"
    );
    // The garbage came before the answer on the same pipe: it is all read.
    assert_echo(&client, "alpha__echo", row).await;
    let took = started.elapsed().as_secs_f64();
    let suppressed = s.metric(series).await - suppressed_before;
    let admitted_at_most = 200.0 + 100.0 * took.ceil();
    assert!(
        suppressed >= LINES - admitted_at_most && suppressed <= LINES,
        "{row}: {suppressed} of {LINES} garbage lines suppressed in {took:.2}s"
    );
    let after = s.upstream_status("alpha").await;
    assert_eq!(
        (&after["pid"], &after["restarts"], &after["state"]),
        (&before["pid"], &before["restarts"], &json!("ready")),
        "{row}: the upstream was restarted: {after}"
    );
    assert_eq!(
        after["suppressedLogLines"].as_f64(),
        Some(suppressed_before + suppressed),
        "{row}: {after}"
    );
    // What was admitted is logged, as a warning naming the upstream.
    let logged = s
        .served
        .wait_for("upstream sent a line that is not JSON-RPC; ignored", 1)
        .await;
    assert_eq!(logged[0]["upstream"], "alpha", "{row}: {}", logged[0]);
    end_session(client, row).await;
}

/// A session whose notification stream is open but never read, while an
/// upstream floods log messages: the reading session still gets every
/// message up to the last, the non-reader's queue drops instead of
/// growing, and its memory stays bounded.
async fn slow_consumer(s: &mut Subject, row: &str) {
    const FLOOD: u64 = 3000;
    let dropped = r#"mcpmux_notifications_total{outcome="dropped"}"#;
    let dropped_before = s.metric(dropped).await;

    let sleeper = McpClient::connect(&s.url).await;
    sleeper.set_level("debug").await;
    // A raw GET with a small receive window that is never read.
    let addr: std::net::SocketAddr = s.base.trim_start_matches("http://").parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut raw = socket.connect(addr).await.unwrap();
    let get = format!(
        "GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nMcp-Session-Id: {}\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n",
        sleeper.session
    );
    raw.write_all(get.as_bytes()).await.unwrap();
    // Its response head (the stream is attached), and not a byte more.
    let head = within("the raw stream's response head", async {
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            assert_eq!(raw.read(&mut byte).await.unwrap(), 1, "{row}: closed");
            head.push(byte[0]);
        }
        String::from_utf8(head).unwrap()
    })
    .await;
    assert!(head.starts_with("HTTP/1.1 200"), "{row}: {head}");

    let reader = McpClient::connect(&s.url).await;
    reader.set_level("debug").await;
    let mut events = reader.listen(None).await;

    // About 2 KiB per message, 6 MiB in all: more than socket buffers hold.
    let text = "f".repeat(2000);
    let flood = reader.call_tool(
        "alpha__log",
        json!({ "level": "info", "count": FLOOD, "message": text }),
    );
    let last = format!("{text} {}", FLOOD - 1);
    let heard = async {
        let mut seen = 0u64;
        // Bounded: the upstream sends FLOOD messages, then nothing.
        while let Some(message) = events.next().await {
            if message["method"] == "notifications/message" {
                seen += 1;
                if message["params"]["data"] == last.as_str() {
                    return seen;
                }
            }
        }
        panic!("{row}: the reader's stream ended after {seen} messages");
    };
    let (answer, seen) = tokio::join!(flood, heard);
    assert_eq!(
        answer["result"]["content"][0]["text"],
        format!("logged {FLOOD}"),
        "{row}: {answer}"
    );
    // Every message up to the last reached the reader, or it too fell 256
    // behind and lost the oldest: either way the newest arrives.
    assert!(seen > 0 && seen <= FLOOD, "{row}: the reader saw {seen}");
    // The other upstream answers during the flood's aftermath.
    assert_echo(&reader, "beta__echo", row).await;
    let lost = s.metric(dropped).await - dropped_before;
    assert!(
        lost >= 1.0,
        "{row}: no notification was dropped, so the non-reader's backlog grew with the flood (the reader saw {seen})"
    );
    let now = s.measure();
    assert!(
        now.rss_kb <= s.baseline().rss_kb + super::RSS_SLACK_KB,
        "{row}: RSS grew from {} to {} KiB under the flood",
        s.baseline().rss_kb,
        now.rss_kb
    );
    drop(events);
    drop(raw);
    end_session(sleeper, row).await;
    end_session(reader, row).await;
}

/// A config file rewritten with an error: the gateway logs where, keeps
/// serving, and restarts nothing; restoring the file changes nothing.
async fn invalid_reload(s: &mut Subject, row: &str) {
    let before = s.status().await["upstreams"].clone();
    let original = std::fs::read_to_string(&s.config).unwrap();
    let rejected = reload(
        s,
        "upstreams:\n  alpha:\n    comand: typo\n",
        "config reload rejected; still serving the previous config",
        |l| l["problem"].as_str().is_some_and(|p| p.contains("comand")),
    )
    .await;
    let problem = rejected["problem"].as_str().unwrap();
    assert!(
        problem.contains(":3:5:"),
        "{row}: no line and column in {problem}"
    );
    let client = McpClient::connect(&s.url).await;
    assert_echo(&client, "alpha__echo", row).await;
    assert_echo(&client, "beta__echo", row).await;
    let ready = reqwest::get(format!("{}/readyz", s.base)).await.unwrap();
    assert_eq!(ready.status(), reqwest::StatusCode::OK, "{row}");

    let reloaded = reload(s, &original, "config reloaded", |_| true).await;
    for key in ["added", "removed", "changed"] {
        assert_eq!(reloaded[key], "[]", "{row}: {reloaded}");
    }
    let after = s.status().await["upstreams"].clone();
    for (old, new) in before
        .as_array()
        .unwrap()
        .iter()
        .zip(after.as_array().unwrap())
    {
        assert_eq!(
            (&new["name"], &new["pid"], &new["restarts"], &new["state"]),
            (&old["name"], &old["pid"], &old["restarts"], &json!("ready")),
            "{row}: an upstream was restarted"
        );
    }
    end_session(client, row).await;
}

/// Upstreams that are down: `far` is a remote whose port is closed
/// (`required: false`); `loop` is added by a reload and exits at once.
#[derive(Debug, Clone, Copy)]
enum Down {
    UnreachableRemote,
    CrashLoop,
}

/// A `127.0.0.1` URL on which nothing listens: a port the system gave us,
/// closed again.
fn closed_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/mcp")
}

#[tokio::test]
async fn upstreams_that_are_down() {
    let far = format!(
        "  far:\n    url: \"{}\"\n    required: false\n",
        closed_port_url()
    );
    let yaml = config("", &[example_upstream("beta", &[]), far]);
    let mut subject = Subject::start(&yaml, &[], "beta__echo").await;
    let rows = [Down::UnreachableRemote, Down::CrashLoop];
    run_rows(&mut subject, &rows, async |s: &mut Subject, row: Down| {
        let name = format!("{row:?}");
        match row {
            Down::UnreachableRemote => unreachable_remote(s, &name).await,
            Down::CrashLoop => crash_loop(s, &name).await,
        }
    })
    .await;
}

/// A call to a remote upstream that cannot be reached fails with -32050
/// naming it; the gateway stays ready (it is not required).
async fn unreachable_remote(s: &mut Subject, row: &str) {
    let client = McpClient::connect(&s.url).await;
    let answer = client
        .call_tool("far__echo", json!({ "message": "anyone?" }))
        .await;
    let id = answer["id"].clone();
    assert!(id.is_u64(), "{row}: {answer}");
    assert_rpc_error(
        row,
        &answer,
        -32050,
        &id,
        &["upstream 'far'", "it is down", "unreachable"],
    );
    // The call made it try again at once; it is down again after that.
    let far = s
        .wait_upstream("far", "far to be down", |u| u["state"] != "starting")
        .await;
    assert_eq!(far["state"], "down", "{row}: {far}");
    let reason = far["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("unreachable"), "{row}: {far}");
    let ready = reqwest::get(format!("{}/readyz", s.base)).await.unwrap();
    assert_eq!(ready.status(), reqwest::StatusCode::OK, "{row}");
    assert_echo(&client, "beta__echo", row).await;
    end_session(client, row).await;
}

/// Every child process of `pid`, zombies included.
fn all_children(pid: u32) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            // "pid (comm) state ppid ...": comm may hold spaces.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1));
            ppid.and_then(|p| p.parse::<u32>().ok()) == Some(pid)
        })
        .count()
}

/// An upstream whose command exits at once, added by a reload: it is
/// retried on a growing backoff without children piling up, its calls get
/// -32050 saying it is down and when it is tried next, and `/readyz` is 503
/// while it is required; removing it makes the gateway ready again.
async fn crash_loop(s: &mut Subject, row: &str) {
    let original = std::fs::read_to_string(&s.config).unwrap();
    let with_loop = original.replacen(
        "upstreams:\n",
        "upstreams:\n  loop:\n    command: \"false\"\n    required: true\n",
        1,
    );
    reload(s, &with_loop, "config reloaded", |l| {
        l["added"] == r#"["loop"]"#
    })
    .await;

    let pid = s.pid();
    let base = s.baseline().children;
    let mut most = 0;
    let looping = s
        .wait_upstream("loop", "loop to fail three times", |u| {
            most = most.max(all_children(pid));
            u["state"] == "down" && u["restarts"].as_u64() >= Some(3)
        })
        .await;
    most = most.max(all_children(pid));
    assert!(
        most <= base + 1,
        "{row}: up to {most} children (zombies included), {base} before the loop"
    );
    let reason = looping["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("exited with status 1"), "{row}: {looping}");

    let ready = reqwest::get(format!("{}/readyz", s.base)).await.unwrap();
    assert_eq!(
        ready.status(),
        reqwest::StatusCode::SERVICE_UNAVAILABLE,
        "{row}"
    );
    let body: Value = serde_json::from_str(&ready.text().await.unwrap()).unwrap();
    let listed = body["upstreams"].as_array().unwrap();
    assert!(
        listed
            .iter()
            .any(|u| u["name"] == "loop" && u["state"] == "down"),
        "{row}: {body}"
    );

    let client = McpClient::connect(&s.url).await;
    let answer = client
        .call_tool("loop__echo", json!({ "message": "x" }))
        .await;
    let id = answer["id"].clone();
    assert_rpc_error(
        row,
        &answer,
        -32050,
        &id,
        &[
            "upstream 'loop'",
            "it is down (",
            "exited with status 1",
            "next try in",
        ],
    );
    assert_echo(&client, "beta__echo", row).await;
    assert!(children_of(pid).len() <= base + 1, "{row}");

    reload(s, &original, "config reloaded", |l| {
        l["removed"] == r#"["loop"]"#
    })
    .await;
    within("the gateway to be ready again", async {
        loop {
            let ready = reqwest::get(format!("{}/readyz", s.base)).await.unwrap();
            if ready.status().is_success() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    end_session(client, row).await;
}
