//! Readings of each replica once a second: RSS and open descriptors from
//! /proc, child processes (its stdio upstreams), and from its own
//! `/metrics` the live tasks, sessions, upstream subscriptions and open
//! downstream connections.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::record::Sample;

/// What one replica reads as, idle or not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reading {
    pub rss_kb: u64,
    pub fds: u64,
    pub children: u64,
    pub tasks: Option<u64>,
    /// Session-based sessions and stateless listen streams.
    pub sessions: Option<u64>,
    /// URIs the gateway holds subscribed at its upstreams.
    pub subscribed: Option<u64>,
    /// Open downstream HTTP connections (`mcpmux_http_connections`).
    pub connections: Option<u64>,
}

/// Reads replica `pid` now; `base` is its own address (not HAProxy's).
pub async fn read(http: &reqwest::Client, pid: u32, base: &str) -> Option<Reading> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    let metrics = match http.get(format!("{base}/metrics")).send().await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    let sessions = match (
        metric(&metrics, "mcpmux_sessions{era=\"2025\"}"),
        metric(&metrics, "mcpmux_sessions{era=\"2026-07-28\"}"),
    ) {
        (Some(a), Some(b)) => Some(a + b),
        (a, b) => a.or(b),
    };
    Some(Reading {
        rss_kb,
        fds,
        children: children_of(pid),
        tasks: metric(&metrics, "mcpmux_tasks"),
        sessions,
        subscribed: metric(&metrics, "mcpmux_subscribed_uris"),
        connections: metric(&metrics, "mcpmux_http_connections"),
    })
}

/// The value of the series named exactly `series` in a text exposition.
fn metric(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

/// Live child processes of `pid`.
pub fn children_of(pid: u32) -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            // pid (comm) state ppid ...: comm may hold spaces, so after ')'.
            let Some((_, rest)) = stat.rsplit_once(')') else {
                return false;
            };
            let mut fields = rest.split_whitespace();
            let state = fields.next();
            state != Some("Z") && fields.next().and_then(|p| p.parse::<u32>().ok()) == Some(pid)
        })
        .count() as u64
}

/// The process ids of `pid`'s children whose command line contains `needle`.
pub fn child_pids(pid: u32, needle: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|child| {
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            let parent = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
            let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
            parent == Some(pid) && String::from_utf8_lossy(&cmdline).contains(needle)
        })
        .collect()
}

/// The replica id of the replica at `base` (not HAProxy's address): the
/// prefix of the session id it issues to a probe session, which is then
/// deleted.
async fn replica_id(http: &reqwest::Client, base: &str) -> Option<String> {
    let url = format!("{base}/mcp");
    let initialize = serde_json::json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": crate::wire::LEGACY_VERSION, "capabilities": {},
            "clientInfo": { "name": "soak-sampler", "version": "1" } } });
    let answer = crate::wire::post(http, &url, None, None, initialize.to_string())
        .await
        .ok()?;
    let session = answer.session?;
    let _ = http
        .delete(&url)
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", crate::wire::LEGACY_VERSION)
        .send()
        .await;
    session.split_once('-').map(|(id, _)| id.to_owned())
}

/// Samples every replica once a second until `stop` is cancelled, and
/// learns the replica id of each replica process it sees into `ids`
/// (id → slot), so latencies can be told apart by replica.
pub async fn run(
    pids: Arc<Mutex<Vec<Option<u32>>>>,
    bases: Vec<String>,
    started: std::time::Instant,
    offset_s: f64,
    samples: Arc<Mutex<Vec<Sample>>>,
    ids: Arc<Mutex<HashMap<String, usize>>>,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut known: HashSet<u32> = HashSet::new();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .expect("a reqwest client");
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now: Vec<Option<u32>> = pids.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for (replica, pid) in now.into_iter().enumerate() {
            let Some(pid) = pid else { continue };
            if !known.contains(&pid)
                && let Some(id) = replica_id(&http, &bases[replica]).await
            {
                known.insert(pid);
                ids.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(id, replica);
            }
            if let Some(r) = read(&http, pid, &bases[replica]).await {
                samples
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(Sample {
                        at_s: started.elapsed().as_secs_f64() - offset_s,
                        replica,
                        pid,
                        rss_kb: r.rss_kb,
                        fds: r.fds,
                        tasks: r.tasks,
                        sessions: r.sessions,
                        children: r.children,
                        connections: r.connections,
                    });
            }
        }
    }
}
