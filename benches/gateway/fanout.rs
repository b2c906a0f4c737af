//! Fan-out and memory per session: a fresh gateway in front of one HTTP
//! floor; N sessions (memory per idle session), then each with an open
//! `GET /mcp` stream on its own connection and a subscription to one URI
//! (memory per such session); then the floor emits one
//! `notifications/resources/updated` and every stream's reader task (on the
//! benchmark's runtime) notes when it arrives. Two references for the same
//! figures: as many streams opened straight on a fresh floor, which pushes
//! the notification itself ([`floor_round`]), and one `write()` of its frame
//! to each of as many loopback sockets ([`raw_round`]).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper::header::HeaderValue;
use serde_json::json;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;

use crate::client::{Conn, Session, initialize, rpc};
use crate::floor::{NOTIFY, RESOURCE};
use crate::procs::{self, Scratch, Usage};
use crate::report::{Results, percentile_us};
use crate::{Res, fail};

/// Connections that set up sessions and subscriptions, side by side.
const POOL: usize = 32;
/// Streams being opened at once.
const OPENING: usize = 64;
/// How long every stream may take to receive the notification.
const DELIVERY_BOUND: Duration = Duration::from_secs(60);
/// How long opening every stream may take.
const OPEN_BOUND: Duration = Duration::from_secs(300);
/// Time for the allocator and the gateway's tasks to settle before RSS is read.
const SETTLE: Duration = Duration::from_millis(500);
const MARKER: &[u8] = b"notifications/resources/updated";

/// One round with `n` sessions: `idle_kb/<n>`, `stream_kb/<n>`,
/// `fan_p50_ms/<n>`, `fan_p99_ms/<n>`, `fan_cpu_us/<n>`, `fan_delivered/<n>`.
pub async fn round(
    mcpmux: &Path,
    exe: &Path,
    scratch: &Scratch,
    n: usize,
    floor_threads: usize,
    res: &mut Results,
) -> Res<()> {
    let (floor, floor_addr) = procs::floor_http(exe, 2, floor_threads).await?;
    let upstream = crate::http_upstream("fh", floor_addr);
    let config = scratch.write("fanout.yaml", &crate::gateway_yaml(&upstream))?;
    let gateway = procs::gateway(mcpmux, &config).await?;
    let outcome = measure(&gateway, floor_addr, n, res).await;
    gateway.proc.stop().await;
    floor.stop().await;
    outcome
}

async fn measure(
    gateway: &procs::Gateway,
    floor_addr: std::net::SocketAddr,
    n: usize,
    res: &mut Results,
) -> Res<()> {
    procs::wait_ready(gateway.addr, gateway.spawned, Duration::from_secs(60)).await?;
    let pid = gateway.proc.pid;
    let addr = gateway.addr;

    // The pool, each connection with one session already: the baseline.
    let mut pool = Vec::with_capacity(POOL);
    for _ in 0..POOL {
        let mut conn = Conn::connect(addr).await?;
        initialize(&mut conn).await?;
        pool.push(conn);
    }
    tokio::time::sleep(SETTLE).await;
    let rss0 = procs::rss(pid)?;

    // N idle sessions, set up over the pool.
    let mut setup = JoinSet::new();
    for (p, mut conn) in pool.into_iter().enumerate() {
        let count = n / POOL + usize::from(p < n % POOL);
        setup.spawn(async move {
            let mut ids = Vec::with_capacity(count);
            for _ in 0..count {
                let id = initialize(&mut conn)
                    .await?
                    .ok_or_else(|| fail("the gateway gave no session id"))?;
                ids.push(id);
            }
            Ok::<_, crate::Error>((conn, ids))
        });
    }
    let mut pool = Vec::with_capacity(POOL);
    while let Some(joined) = setup.join_next().await {
        pool.push(joined.map_err(|e| fail(format!("setup task: {e}")))??);
    }
    tokio::time::sleep(SETTLE).await;
    let rss1 = procs::rss(pid)?;
    res.push(
        format!("idle_kb/{n}"),
        rss1.saturating_sub(rss0) as f64 / n as f64 / 1024.0,
    );

    // A stream per session, each on its own connection, and a subscription.
    let (arrived_tx, mut arrived) = mpsc::channel::<Instant>(n.max(1));
    let (opened_tx, mut opened) = mpsc::channel::<Result<(), String>>(n.max(1));
    let limit = Arc::new(Semaphore::new(OPENING));
    let mut readers = JoinSet::new();
    for (_, ids) in &pool {
        for id in ids {
            let (id, arrived, opened, limit) = (
                id.clone(),
                arrived_tx.clone(),
                opened_tx.clone(),
                limit.clone(),
            );
            readers.spawn(read_stream(addr, id, limit, opened, arrived));
        }
    }
    drop((arrived_tx, opened_tx));
    let uri = format!("fh+{RESOURCE}");
    let mut subscribing = JoinSet::new();
    for (conn, ids) in pool {
        let uri = uri.clone();
        subscribing.spawn(async move {
            let mut conn = conn;
            for (i, id) in ids.iter().enumerate() {
                rpc(
                    &mut conn,
                    Some(id),
                    i as u64 + 1,
                    "resources/subscribe",
                    json!({ "uri": uri }),
                )
                .await?;
            }
            Ok::<_, crate::Error>(conn)
        });
    }
    let mut pool = Vec::with_capacity(POOL);
    while let Some(joined) = subscribing.join_next().await {
        pool.push(joined.map_err(|e| fail(format!("subscribe task: {e}")))??);
    }
    wait_opened(&mut opened, n).await?;
    tokio::time::sleep(SETTLE).await;
    let rss2 = procs::rss(pid)?;
    res.push(
        format!("stream_kb/{n}"),
        rss2.saturating_sub(rss0) as f64 / n as f64 / 1024.0,
    );

    // One update from the floor, straight to it (not through the gateway).
    deliver(pid, floor_addr, n, &mut arrived, "fan", res).await?;
    readers.abort_all();
    drop(pool);
    Ok(())
}

/// The reference for the same figures: N streams opened straight on a
/// fresh floor (hyper, one mpsc queue and one response body per stream, no
/// MCP session), the floor's memory per open stream, and one
/// `resources/updated` pushed to them all: the least an MCP server on these
/// parts spends per stream and per delivery (`floor_stream_kb/<n>`,
/// `floor_fan_p50_ms/<n>`, `floor_fan_p99_ms/<n>`, `floor_fan_cpu_us/<n>`).
pub async fn floor_round(exe: &Path, n: usize, floor_threads: usize, res: &mut Results) -> Res<()> {
    let (floor, floor_addr) = procs::floor_http(exe, 2, floor_threads).await?;
    let outcome = async {
        // One connection first, so the runtime's own first allocations are
        // in the baseline.
        let mut warm = Session::open(Conn::connect(floor_addr).await?).await?;
        warm.request("ping", json!({})).await?;
        tokio::time::sleep(SETTLE).await;
        let rss0 = procs::rss(floor.pid)?;
        let (arrived_tx, mut arrived) = mpsc::channel::<Instant>(n.max(1));
        let (opened_tx, mut opened) = mpsc::channel::<Result<(), String>>(n.max(1));
        let limit = Arc::new(Semaphore::new(OPENING));
        let mut readers = JoinSet::new();
        let id = HeaderValue::from_static("floor-0");
        for _ in 0..n {
            readers.spawn(read_stream(
                floor_addr,
                id.clone(),
                limit.clone(),
                opened_tx.clone(),
                arrived_tx.clone(),
            ));
        }
        drop((arrived_tx, opened_tx));
        wait_opened(&mut opened, n).await?;
        tokio::time::sleep(SETTLE).await;
        let rss1 = procs::rss(floor.pid)?;
        res.push(
            format!("floor_stream_kb/{n}"),
            rss1.saturating_sub(rss0) as f64 / n as f64 / 1024.0,
        );
        deliver(floor.pid, floor_addr, n, &mut arrived, "floor_fan", res).await?;
        readers.abort_all();
        Ok::<_, crate::Error>(())
    }
    .await;
    floor.stop().await;
    outcome
}

/// The least any process spends per delivery on this machine: one blocking
/// `write` of a notification's SSE frame to each of `n` connected loopback
/// sockets, from one thread, with a reader (a task of the benchmark's
/// runtime) waiting on each. No HTTP and no MCP: the kernel's own cost of a
/// delivery, which every server pays once per stream
/// (`raw_p50_ms/<n>`, `raw_p99_ms/<n>`, `raw_cpu_us/<n>`: that thread's
/// CPU per write).
pub async fn raw_round(n: usize, res: &mut Results) -> Res<()> {
    use std::io::Write;
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (arrived_tx, mut arrived) = mpsc::channel::<Instant>(n.max(1));
    let mut readers = JoinSet::new();
    let mut writers = Vec::with_capacity(n);
    for _ in 0..n {
        let client = tokio::net::TcpStream::connect(addr).await?;
        let (server, _) = listener.accept().await?;
        server.set_nodelay(true)?;
        let server = server.into_std()?;
        server.set_nonblocking(false)?;
        writers.push(server);
        let arrived = arrived_tx.clone();
        readers.spawn(async move {
            let mut client = client;
            let mut buf = [0u8; 512];
            if matches!(client.read(&mut buf).await, Ok(read) if read > 0) {
                let _ = arrived.send(Instant::now()).await;
            }
        });
    }
    drop(arrived_tx);
    tokio::time::sleep(SETTLE).await;
    let frame = format!(
        "event: message\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/updated\",\"params\":{{\"uri\":\"fh+{RESOURCE}\"}}}}\n\n"
    );
    let start = Instant::now();
    let writing = tokio::task::spawn_blocking(move || {
        let before = procs::thread_cpu_ns()?;
        for socket in &mut writers {
            socket.write_all(frame.as_bytes())?;
        }
        let spent = procs::thread_cpu_ns()?.saturating_sub(before);
        Ok::<_, crate::Error>((spent, writers))
    });
    let mut times = arrivals(&mut arrived, n, start).await;
    let (spent_ns, writers) = writing
        .await
        .map_err(|e| fail(format!("writer thread: {e}")))??;
    drop(writers);
    readers.abort_all();
    if times.len() < n {
        return Err(fail(format!("{} of {n} raw writes arrived", times.len())));
    }
    times.sort_unstable();
    res.push(format!("raw_p50_ms/{n}"), percentile_us(&times, 0.5) / 1e3);
    res.push(format!("raw_p99_ms/{n}"), percentile_us(&times, 0.99) / 1e3);
    res.push(format!("raw_cpu_us/{n}"), spent_ns as f64 / 1e3 / n as f64);
    Ok(())
}

/// The time from `start` to each of at most `n` arrivals, waiting at most
/// [`DELIVERY_BOUND`] in all.
async fn arrivals(
    arrived: &mut mpsc::Receiver<Instant>,
    n: usize,
    start: Instant,
) -> Vec<Duration> {
    let mut times = Vec::with_capacity(n);
    let deadline = start + DELIVERY_BOUND;
    while times.len() < n {
        match tokio::time::timeout_at(deadline.into(), arrived.recv()).await {
            Ok(Some(at)) => times.push(at.saturating_duration_since(start)),
            _ => break,
        }
    }
    times
}

/// Waits until `n` streams said they are open.
async fn wait_opened(opened: &mut mpsc::Receiver<Result<(), String>>, n: usize) -> Res<()> {
    let deadline = Instant::now() + OPEN_BOUND;
    for _ in 0..n {
        match tokio::time::timeout_at(deadline.into(), opened.recv()).await {
            Ok(Some(Ok(()))) => {}
            Ok(Some(Err(e))) => return Err(fail(format!("opening a stream: {e}"))),
            _ => return Err(fail("streams did not all open in time")),
        }
    }
    Ok(())
}

/// Asks the floor at `floor_addr` to emit one `resources/updated` and
/// collects the `n` arrivals: `<key>_delivered/<n>`, `<key>_p50_ms/<n>`,
/// `<key>_p99_ms/<n>`, and `<key>_cpu_us/<n>`, the CPU process `pid` spent
/// per delivery meanwhile.
async fn deliver(
    pid: u32,
    floor_addr: std::net::SocketAddr,
    n: usize,
    arrived: &mut mpsc::Receiver<Instant>,
    key: &str,
    res: &mut Results,
) -> Res<()> {
    let mut trigger = Session::open(Conn::connect(floor_addr).await?).await?;
    let before = Usage::of(pid)?;
    let start = Instant::now();
    let reached = trigger
        .request(
            "tools/call",
            json!({ "name": NOTIFY, "arguments": { "uri": RESOURCE } }),
        )
        .await?;
    if reached.pointer("/structuredContent/reached") == Some(&json!(0)) {
        return Err(fail("the floor holds no notification stream"));
    }
    let mut times = arrivals(arrived, n, start).await;
    let used = Usage::of(pid)?.since(before);
    let delivered = times.len();
    times.sort_unstable();
    res.push(format!("{key}_delivered/{n}"), delivered as f64);
    res.push(
        format!("{key}_p50_ms/{n}"),
        percentile_us(&times, 0.5) / 1e3,
    );
    res.push(
        format!("{key}_p99_ms/{n}"),
        percentile_us(&times, 0.99) / 1e3,
    );
    res.push(
        format!("{key}_cpu_us/{n}"),
        used.cpu_us as f64 / delivered.max(1) as f64,
    );
    if delivered < n {
        return Err(fail(format!(
            "{delivered} of {n} streams got the notification within {}s",
            DELIVERY_BOUND.as_secs()
        )));
    }
    Ok(())
}

/// Opens session `id`'s stream (within `limit`), says so on `opened`, then
/// reads it and sends the arrival time of the first `resources/updated` on
/// `arrived`; keeps reading until the stream ends or the task is aborted.
async fn read_stream(
    addr: std::net::SocketAddr,
    id: HeaderValue,
    limit: Arc<Semaphore>,
    opened: mpsc::Sender<Result<(), String>>,
    arrived: mpsc::Sender<Instant>,
) {
    let permit = limit.acquire_owned().await;
    let stream = async {
        let mut conn = Conn::connect(addr).await?;
        let body = conn.open_stream(&id).await?;
        Ok::<_, crate::Error>((conn, body))
    }
    .await;
    drop(permit);
    let (_conn, mut body) = match stream {
        Ok(s) => s,
        Err(e) => {
            let _ = opened.send(Err(e.to_string())).await;
            return;
        }
    };
    let _ = opened.send(Ok(())).await;
    let mut seen = Vec::<u8>::new();
    let mut told = false;
    while let Some(Ok(frame)) = body.frame().await {
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if told {
            continue;
        }
        seen.extend_from_slice(&data);
        if contains(&seen, MARKER) {
            told = true;
            let _ = arrived.send(Instant::now()).await;
        } else if seen.len() > 64 * 1024 {
            seen = seen.split_off(seen.len() - MARKER.len());
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
