//! Issue 15's paired figures: one gateway over two HTTP floors, `fast` and
//! `slow`; `slow` has small `limits` and lists a `stall` tool its floor
//! never answers. In interleaved rounds: the fast upstream's echo latency
//! (2 KB, one client) with `slow` idle, then with `slow` saturated by
//! stalled calls (every slot and every queue place taken, held by tasks
//! that call `stall` again whenever a call ends), and how many more calls to
//! `slow` are refused at once with `-32053`. The stalled calls end by
//! deleting their sessions, which cancels them.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hyper::header::HeaderValue;
use serde_json::{Value, json};

use crate::calls::{self, Target};
use crate::client::{Conn, Session, message_of, preview};
use crate::floor::{ECHO, STALL};
use crate::procs::{self, Scratch};
use crate::report::{Results, percentile_us};
use crate::{Res, fail};

/// `limits.max_in_flight` of the slow upstream.
pub const MAX_IN_FLIGHT: usize = 4;
/// `limits.max_queued` of the slow upstream.
pub const MAX_QUEUED: usize = 4;
/// The documented error of a saturated upstream.
const SATURATED: i64 = -32053;
/// A refusal that comes back within this time counts as "at once".
pub const AT_ONCE: Duration = Duration::from_millis(100);
/// The slow upstream's `timeout`: longer than any round, so the holders'
/// stalled calls keep their slots until the round deletes their sessions.
/// (At 30 s, a round slowed by a busy host outlived them: a slot freed, a
/// probe waiting in the queue took it and stalled, and the run failed.)
const HOLD_TIMEOUT: &str = "600s";
/// Bounds on waiting for the slow upstream to fill up and to drain.
const SETTLE_BOUND: Duration = Duration::from_secs(20);
/// Most `stall` calls one holder makes in a round.
const MAX_HOLDS: u64 = 100_000;

/// What one round runs.
pub struct Shape {
    pub calls: usize,
    pub warmup: usize,
    /// Extra `stall` calls sent, one after another, while `slow` is saturated.
    pub probes: usize,
}

/// The whole part: floors, gateway, `rounds` rounds, teardown.
/// Results: `lat_p50_stall/idle`, `lat_p50_stall/busy` (and p99),
/// `stall_refused`, `stall_probes`, `stall_refusal_us`.
pub async fn run(
    mcpmux: &Path,
    exe: &Path,
    scratch: &Scratch,
    floor_threads: usize,
    shape: &Shape,
    rounds: usize,
    res: &mut Results,
) -> Res<()> {
    let (fast, fast_addr) = procs::floor_http(exe, 2, floor_threads).await?;
    let (slow, slow_addr) = procs::floor_http_with(exe, 2, floor_threads, &["--stall"]).await?;
    let upstreams = format!(
        "{}{}    timeout: \"{HOLD_TIMEOUT}\"\n    limits: {{ max_in_flight: {MAX_IN_FLIGHT}, max_queued: {MAX_QUEUED}, queue_timeout: \"1s\" }}\n    circuit_breaker: {{ failures: 1000000 }}\n",
        crate::http_upstream("fast", fast_addr),
        crate::http_upstream("slow", slow_addr),
    );
    let config = scratch.write("stall.yaml", &crate::gateway_yaml(&upstreams))?;
    let gateway = procs::gateway(mcpmux, &config).await?;
    let outcome = async {
        procs::wait_ready(gateway.addr, gateway.spawned, Duration::from_secs(60)).await?;
        let target = |key| Target {
            key,
            addr: gateway.addr,
            tool: format!("fast__{ECHO}"),
            floor: fast.pid,
            gateway: Some(gateway.proc.pid),
        };
        let (idle, busy) = (target("idle"), target("busy"));
        for round in 0..rounds {
            eprintln!("stall round {}/{rounds}", round + 1);
            drained(gateway.addr).await?;
            calls::latency(&idle, 2048, "stall", shape.calls, shape.warmup, false, res).await?;
            let holders = Holders::start(gateway.addr).await?;
            let busy_outcome = async {
                saturated(gateway.addr).await?;
                calls::latency(&busy, 2048, "stall", shape.calls, shape.warmup, false, res).await?;
                probe(gateway.addr, shape.probes, res).await
            }
            .await;
            holders.stop(gateway.addr).await?;
            busy_outcome?;
        }
        drained(gateway.addr).await
    }
    .await;
    gateway.proc.stop().await;
    fast.stop().await;
    slow.stop().await;
    outcome
}

/// Sessions calling `stall` on the slow upstream, one call at a time each,
/// enough of them to take every slot and every queue place.
struct Holders {
    stop: Arc<AtomicBool>,
    sessions: Vec<HeaderValue>,
    tasks: tokio::task::JoinSet<()>,
}

impl Holders {
    async fn start(addr: SocketAddr) -> Res<Holders> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut sessions = Vec::new();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..MAX_IN_FLIGHT + MAX_QUEUED {
            let mut session = Session::open(Conn::connect(addr).await?).await?;
            sessions.push(
                session
                    .id
                    .clone()
                    .ok_or_else(|| fail("the gateway gave no session id"))?,
            );
            let stop = stop.clone();
            tasks.spawn(async move {
                let call = json!({ "name": format!("slow__{STALL}"), "arguments": {} });
                for _ in 0..MAX_HOLDS {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let start = Instant::now();
                    // Ends when the call times out in its queue, or when its
                    // session is deleted (then the next request fails).
                    if session
                        .request_raw("tools/call", call.clone())
                        .await
                        .is_err()
                    {
                        break;
                    }
                    if start.elapsed() < AT_ONCE {
                        // Refused at once (a probe holds its place): not a busy loop.
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            });
        }
        Ok(Holders {
            stop,
            sessions,
            tasks,
        })
    }

    /// Stops the holders: deleting their sessions cancels their calls.
    async fn stop(mut self, addr: SocketAddr) -> Res<()> {
        self.stop.store(true, Ordering::Relaxed);
        let mut conn = Conn::connect(addr).await?;
        for session in &self.sessions {
            conn.delete(session).await?;
        }
        let all = async { while self.tasks.join_next().await.is_some() {} };
        tokio::time::timeout(SETTLE_BOUND, all)
            .await
            .map_err(|_| fail("the stalled calls did not end once their sessions were deleted"))
    }
}

/// The slow upstream's `protection` from `/readyz`: (in flight, queued).
async fn protection(conn: &mut Conn) -> Res<(u64, u64)> {
    let body = conn.get_json("/readyz").await?;
    let slow = body
        .get("upstreams")
        .and_then(Value::as_array)
        .and_then(|all| all.iter().find(|u| u["name"] == "slow"))
        .ok_or_else(|| fail(format!("/readyz lists no upstream 'slow': {body}")))?;
    let count = |key: &str| {
        slow.pointer(&format!("/protection/limits/{key}"))
            .and_then(Value::as_u64)
    };
    match (count("inFlight"), count("queued")) {
        (Some(in_flight), Some(queued)) => Ok((in_flight, queued)),
        _ => Err(fail(format!("/readyz has no protection counts: {slow}"))),
    }
}

/// Waits until `check` holds for the slow upstream's counts.
async fn settle(addr: SocketAddr, what: &str, check: impl Fn(u64, u64) -> bool) -> Res<()> {
    let mut conn = Conn::connect(addr).await?;
    let deadline = Instant::now() + SETTLE_BOUND;
    loop {
        let (in_flight, queued) = protection(&mut conn).await?;
        if check(in_flight, queued) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(fail(format!(
                "the slow upstream never became {what}: {in_flight} in flight, {queued} queued"
            )));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn saturated(addr: SocketAddr) -> Res<()> {
    let (slots, queue) = (MAX_IN_FLIGHT as u64, MAX_QUEUED as u64);
    settle(addr, "saturated", |f, q| f == slots && q == queue).await
}

async fn drained(addr: SocketAddr) -> Res<()> {
    settle(addr, "idle", |f, q| f == 0 && q == 0).await
}

/// `probes` more `stall` calls, one after another, from a session of their
/// own: how many were refused with `-32053` within [`AT_ONCE`], and the
/// median time to a refusal.
async fn probe(addr: SocketAddr, probes: usize, res: &mut Results) -> Res<()> {
    let mut session = Session::open(Conn::connect(addr).await?).await?;
    let call = json!({ "name": format!("slow__{STALL}"), "arguments": {} });
    let mut refused = Vec::with_capacity(probes);
    for _ in 0..probes {
        let start = Instant::now();
        let body = session.request_raw("tools/call", call.clone()).await?;
        let took = start.elapsed();
        let message = message_of(&body)?;
        match message.pointer("/error/code").and_then(Value::as_i64) {
            Some(SATURATED) if took < AT_ONCE => refused.push(took),
            Some(SATURATED) => {}
            _ => {
                return Err(fail(format!(
                    "a call to the saturated upstream was not refused: {}",
                    preview(&body)
                )));
            }
        }
    }
    session.close().await?;
    res.push("stall_probes", probes as f64);
    res.push("stall_refused", refused.len() as f64);
    refused.sort_unstable();
    if !refused.is_empty() {
        res.push("stall_refusal_us", percentile_us(&refused, 0.5));
    }
    Ok(())
}
