//! Hardening: the rows of the fault matrix that need settings or peers of
//! their own. Each row asserts the precise outcome, that a bystander
//! session on another upstream is still served, and that nothing leaked
//! (children, descriptors, sessions, memory), using `support::matrix`.

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::matrix::Subject;
use crate::support::peer::HttpPeer;
use crate::support::{
    McpClient, example_upstream, fixture_upstream, interop, process_exists, within,
};

/// RSS a row may add for a while (allocator caches, buffers), in KiB.
const RSS_SLACK_KB: u64 = 32 * 1024;

/// The text of a tool result, or the error message.
fn text_of(response: &Value) -> String {
    response["result"]["content"][0]["text"]
        .as_str()
        .or_else(|| response["error"]["message"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// The URI of the next `resources/updated` on `events`.
async fn next_update(events: &mut crate::support::client::SseReader) -> String {
    loop {
        let message = events.next().await.expect("the stream stays open");
        if message["method"] == "notifications/resources/updated" {
            return message["params"]["uri"].as_str().unwrap().to_owned();
        }
    }
}

/// A 127.0.0.1 port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn a_secret_reaches_only_the_upstream_it_is_configured_for() {
    let env_secret = "env-secret-7c1e9a";
    let header_secret = "header-secret-52b0d4";
    let gateway_secret = "gateway-only-secret-e83f10";
    let yaml = format!(
        "upstreams:\n{keeper}    env: {{ KEEPER_TOKEN: \"${{MCPMUX_IT_ENV_SECRET}}\" }}\n{other}{b}  remote:\n    url: \"http://127.0.0.1:{port}/mcp\"\n    headers: {{ Authorization: \"Bearer ${{MCPMUX_IT_HEADER_SECRET}}\" }}\n    required: false\n",
        keeper = interop::everything_upstream("keeper"),
        other = interop::everything_upstream("other"),
        b = example_upstream("b", &[]),
        port = closed_port(),
    );
    let env = [
        ("MCPMUX_IT_ENV_SECRET", env_secret),
        ("MCPMUX_IT_HEADER_SECRET", header_secret),
        ("MCPMUX_IT_GATEWAY_ONLY", gateway_secret),
    ];
    let subject = Subject::start(&yaml, &env, "b__echo").await;
    let client = McpClient::connect(&subject.url).await;

    // server-everything's get-env prints the child's whole environment.
    let other = text_of(
        &client
            .request(
                "tools/call",
                json!({ "name": "other__get-env", "arguments": {} }),
            )
            .await,
    );
    assert!(other.contains("PATH"), "the base set is inherited: {other}");
    for secret in [env_secret, header_secret, gateway_secret] {
        assert!(
            !other.contains(secret),
            "{secret} reached another child: {other}"
        );
    }
    let keeper = text_of(
        &client
            .request(
                "tools/call",
                json!({ "name": "keeper__get-env", "arguments": {} }),
            )
            .await,
    );
    assert!(
        keeper.contains("KEEPER_TOKEN") && keeper.contains(env_secret),
        "{keeper}"
    );
    for secret in [header_secret, gateway_secret] {
        assert!(
            !keeper.contains(secret),
            "{secret} reached the child: {keeper}"
        );
    }

    subject
        .end_row("env secrets", vec![client], RSS_SLACK_KB)
        .await;
    subject.stop().await;
}

/// Reads from `socket` until the peer closes it; the bytes read.
async fn read_until_closed(socket: &mut TcpStream) -> Vec<u8> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return seen,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test]
async fn slow_and_idle_connections_are_closed_and_the_cap_keeps_probes_and_restarts_working() {
    let yaml = format!(
        // The timeouts must fire on the dripping and the silent socket, but
        // not on a client's own keep-alive connection while it waits for an
        // upstream restart (which would race its next request).
        "http:\n  header_read_timeout: 2s\n  idle_timeout: 5s\n  max_connections: 40\nupstreams:\n{}{}",
        fixture_upstream("a", &["--test-controls"]),
        example_upstream("b", &[]),
    );
    let subject = Subject::start(&yaml, &[], "b__echo").await;
    let addr = subject.base.trim_start_matches("http://").to_owned();

    // Slowloris: one header byte every 100 ms never completes a request.
    let mut slow = TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        .await
        .unwrap();
    let (mut reader, mut writer) = slow.into_split();
    let drip = async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(100));
        for _ in 0..200 {
            tick.tick().await;
            if writer.write_all(b"x").await.is_err() {
                return true;
            }
        }
        false
    };
    let closed = async move {
        let mut buf = [0u8; 256];
        !matches!(reader.read(&mut buf).await, Ok(n) if n > 0)
    };
    let cut_short = tokio::select! {
        closed = closed => closed,
        refused = drip => refused,
    };
    assert!(cut_short, "a connection dripping its headers was kept open");

    // A socket that says nothing is closed too.
    let mut idle = TcpStream::connect(&addr).await.unwrap();
    assert!(
        within("the idle socket to be closed", read_until_closed(&mut idle))
            .await
            .is_empty()
    );

    // More idle sockets than the cap: probes, new clients and an upstream
    // restart still work.
    let mut hogs = Vec::new();
    for _ in 0..100 {
        hogs.push(TcpStream::connect(&addr).await.unwrap());
    }
    let health = within(
        "/healthz",
        reqwest::get(format!("{}/healthz", subject.base)),
    )
    .await
    .unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    let client = McpClient::connect(&subject.url).await;
    let before = subject.upstream_status("a").await["restarts"]
        .as_u64()
        .unwrap();
    let crashed = client
        .request("tools/call", json!({ "name": "a__crash", "arguments": {} }))
        .await;
    assert_eq!(crashed["error"]["code"], -32050, "{crashed}");
    subject
        .wait_upstream("a", "a to restart", |a| {
            a["state"] == "ready" && a["restarts"].as_u64() > Some(before)
        })
        .await;
    let echoed = client
        .call_tool("a__echo", json!({ "message": "after the restart" }))
        .await;
    assert!(text_of(&echoed).contains("after the restart"), "{echoed}");

    for reason in ["header_timeout", "idle_timeout", "evicted"] {
        let closed = subject
            .metric(&format!(
                "mcpmux_http_connections_closed_total{{reason=\"{reason}\"}}"
            ))
            .await;
        assert!(closed >= 1.0, "no connection closed for {reason}");
    }
    drop(hogs);
    subject
        .end_row("connection limits", vec![client], RSS_SLACK_KB)
        .await;
    subject.stop().await;
}

#[tokio::test]
async fn a_declared_64_mib_body_is_refused_before_it_is_sent() {
    let yaml = format!("upstreams:\n{}", example_upstream("b", &[]));
    let subject = Subject::start(&yaml, &[], "b__echo").await;
    let addr = subject.base.trim_start_matches("http://").to_owned();
    for expect in ["", "Expect: 100-continue\r\n"] {
        let mut socket = TcpStream::connect(&addr).await.unwrap();
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{expect}Content-Length: {}\r\n\r\n",
            64 * 1024 * 1024
        );
        socket.write_all(head.as_bytes()).await.unwrap();
        // Not one byte of the body is sent: the answer must come anyway.
        let answer =
            String::from_utf8(within("the 413", read_until_closed(&mut socket)).await).unwrap();
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
        assert!(!answer.contains("100 Continue"), "{answer}");
        assert!(
            answer.contains("exceeds the limit of 4194304 bytes"),
            "{answer}"
        );
    }
    subject.assert_bystander_served("declared 64 MiB").await;
    subject
        .assert_nothing_leaked("declared 64 MiB", 1, RSS_SLACK_KB)
        .await;
    subject.stop().await;
}

/// Sends `count` initialize requests, `parallel` at a time; returns the
/// HTTP statuses seen.
async fn abandon_sessions(url: &str, count: usize, parallel: usize) -> Vec<StatusCode> {
    let http = reqwest::Client::new();
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "abandoner", "version": "0" } }
    })
    .to_string();
    let mut statuses = Vec::with_capacity(count);
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..parallel {
        let (http, url, body) = (http.clone(), url.to_owned(), body.clone());
        let share = count / parallel + usize::from(worker < count % parallel);
        tasks.spawn(async move {
            let mut seen = Vec::with_capacity(share);
            for _ in 0..share {
                let response = http
                    .post(&url)
                    .header("content-type", "application/json")
                    .header("accept", "application/json, text/event-stream")
                    .body(body.clone())
                    .send()
                    .await
                    .unwrap();
                seen.push(response.status());
            }
            seen
        });
    }
    while let Some(seen) = tasks.join_next().await {
        statuses.extend(seen.unwrap());
    }
    statuses
}

#[tokio::test]
async fn ten_thousand_abandoned_sessions_lock_nobody_out_and_leave_no_memory_behind() {
    // The default limits (10,000 sessions, 1,000 per client), with a short
    // idle timeout so that the test can watch them expire.
    let yaml = format!(
        "sessions:\n  idle_timeout: 5s\nupstreams:\n{}",
        example_upstream("b", &[])
    );
    let mut subject = Subject::start(&yaml, &[], "b__echo").await;
    // Warm up (connection pools, worker threads, table capacity), then measure.
    let warm = within("the warm-up", abandon_sessions(&subject.url, 500, 8)).await;
    assert!(warm.iter().all(|s| *s == StatusCode::OK));
    subject
        .assert_nothing_leaked("warm-up", 1, RSS_SLACK_KB)
        .await;
    subject.rebaseline();
    let baseline = subject.baseline();

    // A bounded load: its own deadline, longer than one wait's.
    let flood = abandon_sessions(&subject.url, 10_000, 16);
    let statuses = tokio::time::timeout(std::time::Duration::from_secs(180), flood)
        .await
        .expect("10,000 initialize requests within 3 minutes");
    assert_eq!(statuses.len(), 10_000);
    assert!(
        statuses.iter().all(|s| *s == StatusCode::OK),
        "a session was refused: {:?}",
        statuses.iter().find(|s| **s != StatusCode::OK)
    );
    let status = subject.status().await;
    // One client reached its limit: its least recently used idle sessions
    // made room. (How many were evicted rather than expired depends on how
    // fast the flood ran against the 5 s idle timeout, so only that
    // eviction happened is asserted.)
    assert!(status["sessions"].as_u64().unwrap() <= 1001, "{status}");
    assert!(status["sessionsEvicted"].as_u64().unwrap() > 0, "{status}");

    // A newcomer is never locked out.
    let newcomer = McpClient::connect(&subject.url).await;
    let echoed = newcomer
        .call_tool("b__echo", json!({ "message": "let me in" }))
        .await;
    assert!(text_of(&echoed).contains("let me in"), "{echoed}");
    assert_eq!(newcomer.delete().await, StatusCode::OK);
    drop(newcomer);

    subject
        .assert_bystander_served("10,000 abandoned sessions")
        .await;
    // Every abandoned session expires; memory returns within 10%.
    subject
        .assert_nothing_leaked("10,000 abandoned sessions", 1, baseline.rss_kb / 10)
        .await;
    subject.stop().await;
}

#[tokio::test]
async fn server_everything_restarted_on_the_same_port_serves_the_same_session_again() {
    let peer = HttpPeer::everything("streamableHttp").await;
    let port = peer.port;
    let yaml = format!(
        "upstreams:\n  everything:\n    url: \"{}\"\n    transport: streamable-http\n{}",
        peer.url("/mcp"),
        example_upstream("b", &[])
    );
    let subject = Subject::start(&yaml, &[], "b__echo").await;
    let client = McpClient::connect(&subject.url).await;
    let mut events = client.listen(None).await;
    let docs = interop::everything_documents(&client).await;
    let watched = docs[0].clone();
    client.subscribe(&watched).await;

    let toggled = client
        .call_tool("everything__toggle-subscriber-updates", json!({}))
        .await;
    assert!(toggled.get("error").is_none(), "{toggled}");
    assert_eq!(within("an update", next_update(&mut events)).await, watched);

    // The server dies and a new one takes its port: it knows nothing of
    // the gateway's session and answers it with 400.
    peer.kill().await;
    let _peer = HttpPeer::everything_on("streamableHttp", port).await;
    let echoed = client
        .request(
            "tools/call",
            json!({ "name": "everything__echo", "arguments": { "message": "are you back?" } }),
        )
        .await;
    assert!(text_of(&echoed).contains("are you back?"), "{echoed}");
    // The subscription was replayed by the gateway on the new server.
    let toggled = client
        .call_tool("everything__toggle-subscriber-updates", json!({}))
        .await;
    assert!(toggled.get("error").is_none(), "{toggled}");
    assert_eq!(
        within("an update after the restart", next_update(&mut events)).await,
        watched
    );
    let everything = subject.upstream_status("everything").await;
    assert!(everything["restarts"].as_u64() >= Some(1), "{everything}");

    drop(events);
    subject
        .end_row("restarted remote upstream", vec![client], RSS_SLACK_KB)
        .await;
    subject.stop().await;
}

#[tokio::test]
async fn a_stderr_flood_with_the_gateways_own_stderr_blocked_delays_no_one() {
    let yaml = format!(
        // Room for every session: this row is about the log, not eviction.
        // The abandoned sessions expire before the leak check (which waits
        // 30 s); a live client pausing under the flood's load does not.
        "sessions:\n  idle_timeout: 5s\n  max_per_client: 100000\nupstreams:\n{}{}",
        fixture_upstream("a", &["--test-controls"]),
        example_upstream("b", &[])
    );
    let subject = Subject::start(&yaml, &[], "b__echo").await;
    subject.served.stop_reading_logs();
    let flooder = McpClient::connect(&subject.url).await;
    let url = subject.url.clone();
    let flood = tokio::spawn(async move {
        let result = flooder
            .call_tool("a__flood_stderr", json!({ "bytes": 2_000_000 }))
            .await;
        assert_eq!(flooder.delete().await, StatusCode::OK);
        result
    });
    // Every new session logs a line: more than the log queue holds, so
    // with stderr blocked the gateway must drop lines rather than wait.
    let sessions = {
        let url = url.clone();
        tokio::spawn(async move { abandon_sessions(&url, 6000, 8).await })
    };
    // While it floods, the other upstream answers and the probes too.
    let other = McpClient::connect(&url).await;
    for i in 0..100 {
        let echoed = within(
            "b__echo during the flood",
            other.call_tool("b__echo", json!({ "message": format!("call {i}") })),
        )
        .await;
        assert!(text_of(&echoed).contains(&format!("call {i}")), "{echoed}");
    }
    assert_eq!(other.delete().await, StatusCode::OK);
    drop(other);
    let health = within(
        "/healthz",
        reqwest::get(format!("{}/healthz", subject.base)),
    )
    .await
    .unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    let flooded = within("the flood to finish", flood).await.unwrap();
    assert!(text_of(&flooded).contains("wrote 2000"), "{flooded}");
    let created = within("the sessions to be made", sessions).await.unwrap();
    assert!(created.iter().all(|s| *s == StatusCode::OK));

    let suppressed = subject
        .metric("mcpmux_upstream_log_lines_suppressed_total{upstream=\"a\"}")
        .await;
    assert!(suppressed > 0.0, "the flood was not rate limited");
    let dropped = subject.metric("mcpmux_log_lines_dropped_total").await;
    assert!(
        dropped > 0.0,
        "the log never backed up, so this test showed nothing"
    );

    subject
        .assert_bystander_served("stderr flood, blocked log")
        .await;
    subject
        .assert_nothing_leaked("stderr flood, blocked log", 1, RSS_SLACK_KB)
        .await;
    subject.stop().await;
}

#[tokio::test]
async fn down_starting_and_unresponsive_upstreams_are_named_with_their_state() {
    // Pings are frequent, but a ping timeout must fire only on a stopped
    // child, never on a busy machine's slow answer: a spurious restart of c
    // would race the SIGSTOP below.
    let fast_health = "    health: { ping_interval: 200ms, ping_timeout: 1s, restart_after: 1h }\n";
    let restarting = "    health: { ping_interval: 200ms, ping_timeout: 1s, restart_after: 3s }\n";
    let yaml = format!(
        "upstreams:\n{a}    required: true\n{fast_health}{c}{restarting}{b}  sleepy:\n    command: sleep\n    args: [\"600\"]\n    timeout: 1h\n    start_wait: 300ms\n    required: false\n  broken:\n    command: /nonexistent/mcp-server\n    required: false\n",
        a = example_upstream("a", &[]),
        c = example_upstream("c", &[]),
        b = example_upstream("b", &[]),
    );
    let subject = Subject::start(&yaml, &[], "b__echo").await;
    let client = McpClient::connect(&subject.url).await;

    // Starting: the call waits start_wait, then names the upstream and its state.
    let starting = client
        .request(
            "tools/call",
            json!({ "name": "sleepy__anything", "arguments": {} }),
        )
        .await;
    assert_eq!(starting["error"]["code"], -32050, "{starting}");
    assert_eq!(
        starting["error"]["data"]["upstream"], "sleepy",
        "{starting}"
    );
    assert!(text_of(&starting).contains("it is starting"), "{starting}");

    // Down: the reason and when it is tried next.
    let down = client
        .request(
            "tools/call",
            json!({ "name": "broken__anything", "arguments": {} }),
        )
        .await;
    assert_eq!(down["error"]["code"], -32050, "{down}");
    let message = text_of(&down);
    assert!(
        message.contains("'broken'")
            && message.contains("down (could not start")
            && message.contains("next try in"),
        "{message}"
    );

    // SIGSTOP: unresponsive once a ping goes unanswered, ready again after SIGCONT.
    let stop = |pid: u64, signal| {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal).unwrap();
    };
    let a_pid = subject.upstream_status("a").await["pid"].as_u64().unwrap();
    stop(a_pid, nix::sys::signal::Signal::SIGSTOP);
    let a = subject
        .wait_upstream("a", "a to be unresponsive", |a| {
            a["state"] == "unresponsive"
        })
        .await;
    assert!(
        a["reason"].as_str().unwrap().contains("no answer to ping"),
        "{a}"
    );
    let ready = reqwest::get(format!("{}/readyz", subject.base))
        .await
        .unwrap();
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
    subject.assert_bystander_served("SIGSTOP").await;
    stop(a_pid, nix::sys::signal::Signal::SIGCONT);
    subject
        .wait_upstream("a", "a to answer again", |a| a["state"] == "ready")
        .await;
    assert_eq!(
        subject.upstream_status("a").await["pid"].as_u64(),
        Some(a_pid)
    );

    // Unresponsive past restart_after: the child is killed and replaced.
    let c_pid = subject.upstream_status("c").await["pid"].as_u64().unwrap();
    stop(c_pid, nix::sys::signal::Signal::SIGSTOP);
    let c = subject
        .wait_upstream("c", "c to be restarted", |c| {
            c["state"] == "ready" && c["pid"].as_u64().is_some_and(|p| p != c_pid)
        })
        .await;
    assert!(c["restarts"].as_u64() >= Some(1), "{c}");
    assert!(
        !process_exists(c_pid as u32),
        "the stuck child {c_pid} was not reaped"
    );
    let echoed = client
        .call_tool("c__echo", json!({ "message": "fresh" }))
        .await;
    assert!(text_of(&echoed).contains("fresh"), "{echoed}");

    subject
        .end_row("down, starting, unresponsive", vec![client], RSS_SLACK_KB)
        .await;
    subject.stop().await;
}
