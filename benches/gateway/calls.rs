//! Per-call measurements against one target (the floor directly, or the
//! gateway in front of an HTTP or a stdio floor): sequential latency with
//! the CPU and context switches each process spent on those calls,
//! throughput with many clients, and the cost of `initialize`. All run on
//! the benchmark's tokio runtime; each simulated client has its own
//! connection and session.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::{Conn, Payload, Session, initialize};
use crate::procs::Usage;
use crate::report::{Results, percentile_us};
use crate::{Res, fail};

/// Upper bound on calls per client in one throughput window.
const MAX_CALLS_PER_CLIENT: u64 = 50_000_000;

/// Where calls go, and which processes to watch.
pub struct Target {
    /// `direct`, `http` or `stdio`: the key suffix of its results.
    pub key: &'static str,
    pub addr: SocketAddr,
    /// The echo tool's name as this target lists it.
    pub tool: String,
    /// The floor process that answers the calls.
    pub floor: u32,
    /// The gateway process in between, if any.
    pub gateway: Option<u32>,
}

struct Usages {
    floor: Usage,
    gateway: Option<Usage>,
}

impl Target {
    async fn session(&self) -> Res<Session> {
        Session::open(Conn::connect(self.addr).await?).await
    }

    fn usage(&self) -> Res<Usages> {
        Ok(Usages {
            floor: Usage::of(self.floor)?,
            gateway: self.gateway.map(Usage::of).transpose()?,
        })
    }

    /// Records CPU µs and context switches per call since `before`.
    fn record_usage(&self, res: &mut Results, what: &str, before: &Usages, calls: u64) -> Res<()> {
        let now = self.usage()?;
        let calls = calls.max(1) as f64;
        let floor = now.floor.since(before.floor);
        res.push(
            format!("{what}_floor/{}", self.key),
            floor.cpu_us as f64 / calls,
        );
        if let Some(user) = floor.user_cpu_us() {
            res.push(format!("{what}_floor_user/{}", self.key), user / calls);
        }
        res.push(
            format!("csw_{what}_floor/{}", self.key),
            floor.switches as f64 / calls,
        );
        if let (Some(now), Some(before)) = (now.gateway, before.gateway) {
            let gw = now.since(before);
            res.push(format!("{what}_gw/{}", self.key), gw.cpu_us as f64 / calls);
            if let Some(user) = gw.user_cpu_us() {
                res.push(format!("{what}_gw_user/{}", self.key), user / calls);
            }
            res.push(
                format!("csw_{what}_gw/{}", self.key),
                gw.switches as f64 / calls,
            );
        }
        Ok(())
    }
}

/// `calls` sequential echo calls of `size` bytes from one client, after
/// `warmup` more: p50 and p99 (`lat_p50_<label>/<target>`), and with
/// `cpu`, each process's CPU µs and context switches per call.
pub async fn latency(
    target: &Target,
    size: usize,
    label: &str,
    calls: usize,
    warmup: usize,
    cpu: bool,
    res: &mut Results,
) -> Res<()> {
    let mut session = target.session().await?;
    let payload = Payload::echo(&target.tool, size);
    session.echo(&payload, true).await?;
    for _ in 0..warmup {
        session.echo(&payload, false).await?;
    }
    let before = target.usage()?;
    let mut times = Vec::with_capacity(calls);
    for _ in 0..calls {
        let start = Instant::now();
        session.echo(&payload, false).await?;
        times.push(start.elapsed());
    }
    if cpu {
        target.record_usage(res, "cpu", &before, calls as u64)?;
    }
    session.close().await?;
    times.sort_unstable();
    res.push(
        format!("lat_p50_{label}/{}", target.key),
        percentile_us(&times, 0.5),
    );
    res.push(
        format!("lat_p99_{label}/{}", target.key),
        percentile_us(&times, 0.99),
    );
    Ok(())
}

/// `clients` clients calling echo (2 KB) back to back for `window`:
/// calls per second (`tput_<clients>/<target>`), and the CPU per call of
/// each process under that load (`load<clients>_gw/<target>`, ...).
pub async fn throughput(
    target: &Target,
    clients: usize,
    window: Duration,
    res: &mut Results,
) -> Res<()> {
    let payload = Arc::new(Payload::echo(&target.tool, 2048));
    let mut sessions = Vec::with_capacity(clients);
    for _ in 0..clients {
        let mut session = target.session().await?;
        session.echo(&payload, true).await?;
        sessions.push(session);
    }
    let start = Instant::now() + Duration::from_millis(20);
    let deadline = start + window;
    let mut tasks = tokio::task::JoinSet::new();
    for mut session in sessions {
        let payload = payload.clone();
        tasks.spawn(async move {
            tokio::time::sleep_until(start.into()).await;
            let mut calls = 0u64;
            while Instant::now() < deadline && calls < MAX_CALLS_PER_CLIENT {
                session.echo(&payload, false).await?;
                calls += 1;
            }
            let finished = Instant::now();
            Ok::<_, crate::Error>((calls, finished, session))
        });
    }
    tokio::time::sleep_until(start.into()).await;
    let before = target.usage()?;
    let mut total = 0;
    let mut end = start;
    let mut done = Vec::with_capacity(clients);
    while let Some(joined) = tasks.join_next().await {
        let (calls, finished, session) =
            joined.map_err(|e| fail(format!("client task: {e}")))??;
        total += calls;
        end = end.max(finished);
        done.push(session);
    }
    target.record_usage(res, &format!("load{clients}"), &before, total)?;
    for session in done {
        session.close().await?;
    }
    let secs = (end - start).as_secs_f64();
    res.push(
        format!("tput_{clients}/{}", target.key),
        total as f64 / secs,
    );
    Ok(())
}

/// `count` sessions set up one after another on one connection:
/// `initialize` latency p50/p99 (`init_p50/<key>`), and the CPU µs of
/// `pid` per `initialize` + `notifications/initialized`.
pub async fn initialize_cost(
    addr: SocketAddr,
    pid: u32,
    key: &str,
    count: usize,
    res: &mut Results,
) -> Res<()> {
    let mut conn = Conn::connect(addr).await?;
    let mut ids = Vec::with_capacity(count + 1);
    ids.extend(initialize(&mut conn).await?);
    let before = Usage::of(pid)?;
    let mut times = Vec::with_capacity(count);
    for _ in 0..count {
        let start = Instant::now();
        ids.extend(initialize(&mut conn).await?);
        times.push(start.elapsed());
    }
    let used = Usage::of(pid)?.since(before);
    for id in &ids {
        conn.delete(id).await?;
    }
    times.sort_unstable();
    res.push(format!("init_p50/{key}"), percentile_us(&times, 0.5));
    res.push(format!("init_p99/{key}"), percentile_us(&times, 0.99));
    res.push(
        format!("init_cpu/{key}"),
        used.cpu_us as f64 / count.max(1) as f64,
    );
    Ok(())
}
