//! The verifier's checks beyond the ledger: the replicas idle again after
//! the load (sessions, upstream subscriptions, tasks, child processes,
//! descriptors and RSS back to their readings before it), RSS and
//! descriptors flat
//! over the last two thirds of the run, what the fixtures received, and
//! the latency per minute.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::record::{Finding, LatencyMinute, Sample};
use crate::sample::{Reading, read};
use crate::{Res, fail};

/// How long the replicas get to become idle after the load: longer than
/// the soak config's session idle timeout (15 s) and HTTP idle timeout (20 s).
const IDLE_WAIT: Duration = Duration::from_secs(60);
/// Descriptors an idle replica may hold beyond its count before the load:
/// pooled connections to the HTTP upstreams come and go.
const SPARE_FDS: u64 = 6;
/// RSS an idle replica may hold beyond its reading before the load, in
/// KiB, or [`SPARE_RSS_FRACTION`] of that reading if more: what the load
/// leaves behind that is meant to stay (bounded caches and journals, the
/// allocator's slabs and thread caches). A leak over a run of minutes
/// goes past it.
const SPARE_RSS_KB: u64 = 4 * 1024;
const SPARE_RSS_FRACTION: f64 = 0.15;

/// Waits until every replica reads idle, and returns what it read. With no
/// `before` (at the start), idle is no sessions, and the same reading
/// twice in a row; after the load it is also tasks, children and
/// descriptors back to `before`'s.
pub async fn settle_idle(
    pids: &Arc<Mutex<Vec<Option<u32>>>>,
    bases: &[String],
    before: Option<&[Reading]>,
) -> Res<Vec<Reading>> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()?;
    let deadline = tokio::time::Instant::now() + IDLE_WAIT;
    let mut last: Vec<Reading> = Vec::new();
    loop {
        let now: Vec<Option<u32>> = pids.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut readings = Vec::new();
        for (slot, pid) in now.iter().enumerate() {
            let pid = pid.ok_or_else(|| fail(format!("replica {slot} is not running")))?;
            readings.push(
                read(&http, pid, &bases[slot])
                    .await
                    .ok_or_else(|| fail(format!("replica {slot} could not be read")))?,
            );
        }
        let idle = readings.iter().enumerate().all(|(slot, r)| {
            let quiet = r.sessions == Some(0) && r.subscribed == Some(0);
            match before {
                None => quiet,
                Some(before) => quiet && back_to(r, &before[slot]),
            }
        });
        let steady = before.is_some()
            || readings
                .iter()
                .zip(&last)
                .all(|(a, b)| a.tasks == b.tasks && a.children == b.children);
        if idle && steady && !last.is_empty() {
            return Ok(readings);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(fail(format!("not idle within {IDLE_WAIT:?}: {readings:?}")));
        }
        last = readings;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn back_to(now: &Reading, before: &Reading) -> bool {
    now.tasks <= before.tasks
        && now.children == before.children
        && now.fds <= before.fds + SPARE_FDS
        && now.rss_kb <= before.rss_kb + spare_rss_kb(before)
}

fn spare_rss_kb(before: &Reading) -> u64 {
    SPARE_RSS_KB.max((before.rss_kb as f64 * SPARE_RSS_FRACTION) as u64)
}

/// The idle table: each figure of each replica, before and after.
pub fn idle_table(before: &[Reading], after: Option<&Vec<Reading>>) -> Vec<(String, u64, u64)> {
    let mut rows = Vec::new();
    for (slot, b) in before.iter().enumerate() {
        let a = after.and_then(|a| a.get(slot));
        let mut row = |what: &str, f: fn(&Reading) -> Option<u64>| {
            rows.push((
                format!("replica {slot}: {what}"),
                f(b).unwrap_or(0),
                a.and_then(f).unwrap_or(u64::MAX),
            ));
        };
        row("sessions", |r| r.sessions);
        row("upstream subscriptions", |r| r.subscribed);
        row("tasks", |r| r.tasks);
        row("child processes", |r| Some(r.children));
        row("file descriptors", |r| Some(r.fds));
        row("RSS (KiB)", |r| Some(r.rss_kb));
    }
    rows
}

pub fn idle_findings(before: &[Reading], after: &Res<Vec<Reading>>) -> Vec<Finding> {
    let detail = match after {
        Ok(after) => before
            .iter()
            .zip(after)
            .enumerate()
            .map(|(slot, (b, a))| {
                format!(
                    "replica {slot}: sessions {:?}→{:?}, subscriptions {:?}→{:?}, tasks {:?}→{:?}, children {}→{}, fds {}→{}, RSS {}→{} KiB (allowed {})",
                    b.sessions, a.sessions, b.subscribed, a.subscribed, b.tasks, a.tasks, b.children, a.children, b.fds, a.fds,
                    b.rss_kb, a.rss_kb, b.rss_kb + spare_rss_kb(b)
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
        Err(e) => e.to_string(),
    };
    vec![Finding {
        check: format!(
            "after the load, sessions, upstream subscriptions, tasks and child processes return to their idle counts, descriptors to within {SPARE_FDS}, RSS to within max({} MiB, {:.0} %)",
            SPARE_RSS_KB / 1024,
            SPARE_RSS_FRACTION * 100.0
        ),
        passed: after.is_ok(),
        detail,
    }]
}

/// RSS and the replica's own descriptors ([`crate::trend::own_fds`]) flat
/// over the last two thirds of the load, for every replica process that
/// lived through at least half of it.
pub fn flat_findings(samples: &[Sample], load_ended_s: f64) -> Vec<Finding> {
    let mut findings = Vec::new();
    let mut runs: Vec<(usize, u32)> = samples.iter().map(|s| (s.replica, s.pid)).collect();
    runs.dedup();
    runs.sort_unstable();
    runs.dedup();
    let mut judged = 0;
    for (replica, pid) in runs {
        let mine: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.replica == replica && s.pid == pid && s.at_s <= load_ended_s)
            .collect();
        let (Some(first), Some(last)) = (mine.first(), mine.last()) else {
            continue;
        };
        if last.at_s - first.at_s < load_ended_s / 2.0 {
            continue;
        }
        judged += 1;
        let rss: Vec<(f64, f64)> = mine
            .iter()
            .map(|s| (s.at_s, s.rss_kb as f64 / 1024.0))
            .collect();
        let fds: Vec<(f64, f64)> = mine
            .iter()
            .filter_map(|s| Some((s.at_s, crate::trend::own_fds(s)?)))
            .collect();
        for (what, points, judge, unit) in [
            ("RSS", rss, crate::trend::RSS, "MB"),
            (
                "descriptors besides downstream connections",
                fds,
                crate::trend::FDS,
                "",
            ),
        ] {
            let t = crate::trend::flatness(&points, judge);
            findings.push(Finding {
                check: format!("replica {replica} (pid {pid}): {what} flat over the last two thirds of the load"),
                passed: t.flat,
                detail: format!(
                    "fitted rise {:.1}{unit} ({:+.2}{unit}/min) over a mean of {:.1}{unit}; allowed {:.1}{unit}",
                    t.rise,
                    t.slope_per_min,
                    t.mean,
                    judge.abs.max(judge.rel * t.mean)
                ),
            });
        }
    }
    if judged == 0 {
        findings.push(Finding {
            check: "a replica process lived through the load, so its trend could be judged".into(),
            passed: false,
            detail: "no replica process lived through half of the load".into(),
        });
    }
    findings
}

/// Per upstream (`fx`, `fy`), how many `tools/call`s each token reached
/// its fixture children with (both replicas' children append to the same
/// record).
pub fn records(dir: &Path) -> Res<HashMap<&'static str, HashMap<String, u64>>> {
    let mut out = HashMap::new();
    for upstream in ["fx", "fy"] {
        let mut counts: HashMap<String, u64> = HashMap::new();
        let text = std::fs::read_to_string(dir.join(format!("{upstream}.record.jsonl")))
            .unwrap_or_default();
        for line in text.lines() {
            let Ok(message) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if message["method"] != "tools/call" {
                continue;
            }
            if let Some(token) = message["params"]["arguments"]["message"].as_str() {
                *counts.entry(token.to_owned()).or_default() += 1;
            }
        }
        out.insert(upstream, counts);
    }
    Ok(out)
}

/// Calls answered `ok`, per minute of the load: count, p50, p99.
pub fn latency_minutes(latencies: &[(f64, u64)]) -> Vec<LatencyMinute> {
    let mut by_minute: std::collections::BTreeMap<u32, Vec<u64>> =
        std::collections::BTreeMap::new();
    for (at, us) in latencies {
        by_minute.entry((at / 60.0) as u32).or_default().push(*us);
    }
    by_minute
        .into_iter()
        .map(|(minute, mut all)| {
            all.sort_unstable();
            LatencyMinute {
                minute,
                calls: all.len() as u64,
                p50_us: crate::trend::percentile(&all, 50.0),
                p99_us: crate::trend::percentile(&all, 99.0),
            }
        })
        .collect()
}

/// The machine, as the report describes it.
pub fn machine() -> Vec<String> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_default();
    let cpus = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let memory = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or_else(String::new, |kb| {
            format!("{:.1} GiB", kb as f64 / 1024.0 / 1024.0)
        });
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    vec![
        format!("CPU: {model} × {cpus}"),
        format!("memory: {memory}"),
        format!("kernel: Linux {}", kernel.trim()),
    ]
}
