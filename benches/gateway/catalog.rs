//! A gateway over many stdio floors: the time from spawning it to
//! `/readyz` 200, then one client fetching every page of the merged
//! `tools/list`. A fresh gateway (and fresh floors) per round.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::json;

use crate::client::{Conn, Session, message_of, preview};
use crate::procs::{self, Scratch, Usage};
use crate::report::{Results, median};
use crate::{Res, fail};

/// Most pages one listing may take (the catalog's limit is far below).
const MAX_PAGES: usize = 100_000;
/// How long a gateway with every upstream may take to become ready.
const READY_BOUND: Duration = Duration::from_secs(120);

/// What one round runs.
pub struct Shape {
    pub upstreams: usize,
    pub tools_each: usize,
    pub fetches: usize,
}

/// One round: `startup_ms`, `list_ms` (a whole listing), `list_recv_ms`
/// (of which waiting for the answers), `page_us`, `pages`, `list_cpu_us`
/// (gateway CPU per whole listing).
pub async fn round(
    mcpmux: &Path,
    exe: &Path,
    scratch: &Scratch,
    shape: &Shape,
    res: &mut Results,
) -> Res<()> {
    let mut upstreams = String::new();
    for i in 0..shape.upstreams {
        upstreams.push_str(&crate::stdio_upstream(
            &format!("f{i:02}"),
            exe,
            shape.tools_each,
        ));
    }
    let config = scratch.write("catalog.yaml", &crate::gateway_yaml(&upstreams))?;
    let gateway = procs::gateway(mcpmux, &config).await?;
    let outcome = measure(&gateway, shape, res).await;
    gateway.proc.stop().await;
    outcome
}

async fn measure(gateway: &procs::Gateway, shape: &Shape, res: &mut Results) -> Res<()> {
    let startup = procs::wait_ready(gateway.addr, gateway.spawned, READY_BOUND).await?;
    res.push("startup_ms", startup.as_secs_f64() * 1e3);
    let expected = shape.upstreams * shape.tools_each;
    let mut session = Session::open(Conn::connect(gateway.addr).await?).await?;
    let (tools, pages, _) = list_all(&mut session).await?;
    if tools != expected {
        return Err(fail(format!(
            "tools/list gave {tools} tools once ready, not {expected}"
        )));
    }
    let before = Usage::of(gateway.proc.pid)?;
    let mut times = Vec::with_capacity(shape.fetches);
    let mut received = Vec::with_capacity(shape.fetches);
    for _ in 0..shape.fetches {
        let start = Instant::now();
        let (tools, _, waited) = list_all(&mut session).await?;
        times.push(start.elapsed().as_secs_f64());
        received.push(waited.as_secs_f64());
        if tools != expected {
            return Err(fail(format!(
                "tools/list gave {tools} tools, not {expected}"
            )));
        }
    }
    let used = Usage::of(gateway.proc.pid)?.since(before);
    let whole = median(&times);
    res.push("list_ms", whole * 1e3);
    res.push("list_recv_ms", median(&received) * 1e3);
    res.push("page_us", whole * 1e6 / pages as f64);
    res.push("pages", pages as f64);
    res.push(
        "list_cpu_us",
        used.cpu_us as f64 / shape.fetches.max(1) as f64,
    );
    Ok(())
}

/// A `tools/list` answer, read no further than the client needs (the tools
/// are counted, not built), so the client's own parsing weighs little.
#[derive(Deserialize)]
struct Page {
    result: Option<Listed>,
}

#[derive(Deserialize)]
struct Listed {
    tools: Vec<IgnoredAny>,
    #[serde(rename = "nextCursor")]
    next_cursor: Option<String>,
}

/// Every page of `tools/list`: (tools, pages, the time spent waiting for
/// answers, from each request sent to its body's last byte, without the
/// client's own parsing).
pub async fn list_all(session: &mut Session) -> Res<(usize, usize, Duration)> {
    let mut cursor: Option<String> = None;
    let mut tools = 0;
    let mut waited = Duration::ZERO;
    for page in 1..=MAX_PAGES {
        let params = match &cursor {
            Some(c) => json!({ "cursor": c }),
            None => json!({}),
        };
        let sent = Instant::now();
        let body = session.request_raw("tools/list", params).await?;
        waited += sent.elapsed();
        let listed = match serde_json::from_slice::<Page>(&body) {
            Ok(Page { result: Some(l) }) => l,
            // An SSE answer, or an error: the slow path says which.
            _ => serde_json::from_value::<Listed>(
                message_of(&body)?
                    .get("result")
                    .cloned()
                    .ok_or_else(|| fail(format!("tools/list failed: {}", preview(&body))))?,
            )?,
        };
        tools += listed.tools.len();
        cursor = listed.next_cursor;
        if cursor.is_none() {
            return Ok((tools, page, waited));
        }
    }
    Err(fail("tools/list never ended"))
}
