//! The fault matrix: every row is a fault or a bad input, and every row
//! asserts three things about the `mcpmux serve` process under test
//! (`support::matrix::Subject`):
//!
//! 1. the precise error: the JSON-RPC code or HTTP status, the request's id
//!    where it had one, and a message naming the cause;
//! 2. a second session and a second upstream were unaffected: the
//!    bystander's call to its own upstream succeeds after the row (and the
//!    fault rows also call that upstream while their fault is on);
//! 3. nothing leaked: the gateway is back to its child processes, open file
//!    descriptors and `/status` sessions of before the rows, and its RSS is
//!    within a bound.
//!
//! Rows that share a config run in one test, one after the other, over one
//! gateway: [`upstreams`] for faults of upstreams, [`bad_inputs`] for bad
//! requests, and the shutdown row here. Each row drops its own clients and
//! DELETEs its sessions before its leak check.

mod bad_inputs;
mod upstreams;

use std::time::Instant;

use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::support::gateway::with_auth_off;
use crate::support::matrix::Subject;
use crate::support::{McpClient, example_upstream, process_exists, within};

/// How far RSS may grow over the baseline during a row and still count as
/// not leaking (allocator caches and lazily built tables grow once).
const RSS_SLACK_KB: u64 = 8 * 1024;

/// Sessions in `/status` between rows: the bystander's.
const SESSIONS: u64 = 1;

/// Runs `rows` in order against `subject`: each row, then checks (2) and (3).
async fn run_rows<R: std::fmt::Debug + Copy>(
    subject: &mut Subject,
    rows: &[R],
    run: impl AsyncFn(&mut Subject, R),
) {
    assert!(!rows.is_empty(), "the fault matrix has no rows");
    for &row in rows {
        let name = format!("{row:?}");
        let started = Instant::now();
        run(subject, row).await;
        subject.assert_bystander_served(&name).await;
        subject
            .assert_nothing_leaked(&name, SESSIONS, RSS_SLACK_KB)
            .await;
        eprintln!(
            "row {name}: {:?}, baseline {:?}, now {:?}",
            started.elapsed(),
            subject.baseline(),
            subject.measure()
        );
    }
}

/// YAML of a config with `head` (top-level settings) and `upstreams`.
fn config(head: &str, upstreams: &[String]) -> String {
    format!("{head}\nupstreams:\n{}", upstreams.concat())
}

/// Sends `signal` to process `pid`.
fn signal(pid: u32, signal: Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal).unwrap();
}

/// The pid of an upstream's child in its `/status` entry.
fn pid_of(upstream: &Value) -> u32 {
    upstream["pid"]
        .as_u64()
        .unwrap_or_else(|| panic!("no pid in {upstream}")) as u32
}

/// Asserts that `message` is the JSON-RPC error `code` for request `id`,
/// and that its message contains every one of `says`.
fn assert_rpc_error(row: &str, message: &Value, code: i64, id: &Value, says: &[&str]) {
    assert_eq!(message["error"]["code"], code, "{row}: {message}");
    assert_eq!(&message["id"], id, "{row}: the id is not echoed: {message}");
    let text = message["error"]["message"].as_str().unwrap_or_default();
    for needle in says {
        assert!(
            text.contains(needle),
            "{row}: the message does not say {needle:?}: {message}"
        );
    }
}

/// Calls `tool` (an echo tool) and asserts the echo.
async fn assert_echo(client: &McpClient, tool: &str, row: &str) {
    let text = format!("{row} via {tool}");
    let answer = client.call_tool(tool, json!({ "message": text })).await;
    assert_eq!(
        answer["result"]["content"][0]["text"], text,
        "{row}: {tool} did not answer: {answer}"
    );
}

/// Ends a row's session with DELETE (and drops its client and sockets).
async fn end_session(client: McpClient, row: &str) {
    assert_eq!(
        client.delete().await,
        reqwest::StatusCode::OK,
        "{row}: DELETE of its session failed"
    );
}

/// Replaces the config file in one step (so the reload poll never reads
/// half a file), sends SIGHUP so it is reloaded now, and waits for a log
/// line `message` logged after that which satisfies `matches`; returns its
/// fields.
async fn reload(
    subject: &mut Subject,
    text: &str,
    message: &str,
    matches: impl Fn(&Value) -> bool,
) -> Value {
    let before = subject.served.wait_for(message, 0).await.len();
    let next = subject.config.with_extension("next");
    std::fs::write(&next, with_auth_off(text)).unwrap();
    std::fs::rename(&next, &subject.config).unwrap();
    subject.served.signal(Signal::SIGHUP);
    within(message, async {
        let mut n = before + 1;
        loop {
            let lines = subject.served.wait_for(message, n).await;
            if let Some(line) = lines[before..].iter().find(|l| matches(l)) {
                return line.clone();
            }
            n = lines.len() + 1;
        }
    })
    .await
}

/// Row: SIGTERM while two calls are in flight. The call that fits in the
/// shutdown grace finishes; the one that does not gets -32800 when the
/// grace ends; the process exits 0 and no upstream child survives it.
#[tokio::test]
async fn sigterm_with_calls_in_flight() {
    let yaml = config(
        "shutdown_grace: 3s",
        &[
            example_upstream("alpha", &[]),
            example_upstream("beta", &[]),
        ],
    );
    let mut subject = Subject::start(&yaml, &[], "beta__echo").await;
    let status = subject.status().await;
    let children: Vec<u32> = status["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .map(pid_of)
        .collect();
    assert_eq!(children.len(), 2, "{status}");

    let finishing = McpClient::connect(&subject.url).await;
    let cut = McpClient::connect(&subject.url).await;
    let slow = |tool: &str, steps: u64, token: &str| json!({ "name": tool, "arguments": { "steps": steps, "interval_ms": 100 }, "_meta": { "progressToken": token } });
    // 1 s of work, well within the grace; and 100 s, far beyond it.
    let mut short = finishing
        .open_stream(json!("short"), "tools/call", slow("alpha__slow", 10, "s"))
        .await;
    let mut long = cut
        .open_stream(json!("long"), "tools/call", slow("beta__slow", 1000, "l"))
        .await;
    for stream in [&mut short, &mut long] {
        let first = stream.next().await.unwrap();
        assert_eq!(first["method"], "notifications/progress", "{first}");
    }
    // The bystander is served while both calls run.
    subject.assert_bystander_served("calls in flight").await;

    subject.served.signal(Signal::SIGTERM);
    let last = |mut stream: crate::support::client::SseReader| async move {
        let mut last = Value::Null;
        // Bounded: the upstream sends at most `steps` progress messages.
        while let Some(message) = stream.next().await {
            last = message;
        }
        last
    };
    let (short_last, long_last) = tokio::join!(last(short), last(long));
    assert_eq!(short_last["id"], "short", "{short_last}");
    assert_eq!(
        short_last["result"]["content"][0]["text"], "done after 10 steps",
        "the call within the grace did not finish: {short_last}"
    );
    assert_rpc_error(
        "sigterm",
        &long_last,
        -32800,
        &json!("long"),
        &["request cancelled: the gateway is shutting down"],
    );

    let exit = within("the gateway to exit", subject.served.child.wait())
        .await
        .unwrap();
    assert!(exit.success(), "the gateway exited with {exit}");
    for pid in children {
        assert!(
            !process_exists(pid),
            "upstream child {pid} outlived the gateway"
        );
    }
    drop((finishing, cut));
}
