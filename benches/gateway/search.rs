//! Tool search (issue 29): one gateway over many stdio floors whose tools
//! have words in them (`words`), with two endpoints over the same tools:
//! `full` lists them all, `find` lists them progressively. It measures the
//! first search (which builds the index) and the gateway's memory before
//! and after it, then searches built from the descriptions of a sample of
//! the tools (latency p50 and p99, and whether the tool was in the top 3),
//! and the whole `tools/list` of each endpoint (bytes and time).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::client::{Conn, Session, message_of};
use crate::procs::{self, Scratch};
use crate::report::{Results, median, percentile_us};
use crate::{Res, fail};

const READY_BOUND: Duration = Duration::from_secs(120);

/// What one round runs.
pub struct Shape {
    pub upstreams: usize,
    pub tools_each: usize,
    /// Searches timed per round (each built from one tool's description).
    pub queries: usize,
    /// Whole listings timed per endpoint per round.
    pub fetches: usize,
}

/// One round with a fresh gateway and fresh floors.
pub async fn round(
    mcpmux: &Path,
    exe: &Path,
    scratch: &Scratch,
    shape: &Shape,
    res: &mut Results,
) -> Res<()> {
    let mut upstreams = String::new();
    for i in 0..shape.upstreams {
        upstreams.push_str(&crate::stdio_upstream_with(
            &format!("s{i:02}"),
            exe,
            shape.tools_each,
            &["--words", &i.to_string()],
        ));
    }
    let yaml = format!(
        "{}endpoints:\n  full: {{}}\n  find:\n    search: {{ mode: progressive, results: 3 }}\n",
        crate::gateway_yaml(&upstreams)
    );
    let config = scratch.write("search.yaml", &yaml)?;
    let gateway = procs::gateway(mcpmux, &config).await?;
    let outcome = measure(&gateway, shape, res).await;
    gateway.proc.stop().await;
    outcome
}

async fn session(gateway: &procs::Gateway, path: &str) -> Res<Session> {
    Session::open(Conn::connect(gateway.addr).await?.at(path)).await
}

async fn measure(gateway: &procs::Gateway, shape: &Shape, res: &mut Results) -> Res<()> {
    procs::wait_ready(gateway.addr, gateway.spawned, READY_BOUND).await?;
    let expected = shape.upstreams * shape.tools_each;
    let mut full = session(gateway, "/mcp/full").await?;
    let mut find = session(gateway, "/mcp/find").await?;
    let (tools, full_bytes) = list_all(&mut full).await?;
    if tools.len() != expected {
        return Err(fail(format!(
            "/mcp/full listed {} tools, not {expected}",
            tools.len()
        )));
    }
    let (listed, find_bytes) = list_all(&mut find).await?;
    res.push("search_list_full_kb", full_bytes as f64 / 1024.0);
    res.push("search_list_find_kb", find_bytes as f64 / 1024.0);
    res.push("search_listed_find", listed.len() as f64);

    // The first search builds the index.
    let before = procs::rss(gateway.proc.pid)?;
    let started = Instant::now();
    search(&mut find, "create an issue in github").await?;
    res.push("search_first_ms", started.elapsed().as_secs_f64() * 1e3);
    let after = procs::rss(gateway.proc.pid)?;
    res.push(
        "search_index_kb",
        after.saturating_sub(before) as f64 / 1024.0,
    );

    // Only tools with a description of their own have one right answer
    // (every floor's `echo` and `notify` are alike).
    let mut seen = std::collections::HashMap::new();
    for (_, description) in &tools {
        *seen.entry(description.as_str()).or_insert(0usize) += 1;
    }
    let distinct: Vec<&(String, String)> = tools
        .iter()
        .filter(|(_, description)| seen[description.as_str()] == 1)
        .collect();
    let step = (distinct.len() / shape.queries.max(1)).max(1);
    let mut times = Vec::with_capacity(shape.queries);
    let mut hits = 0usize;
    let sample: Vec<&(String, String)> = distinct
        .into_iter()
        .step_by(step)
        .take(shape.queries)
        .collect();
    for (name, description) in &sample {
        let started = Instant::now();
        let found = search(&mut find, description).await?;
        times.push(started.elapsed());
        hits += usize::from(found.iter().any(|f| f == name));
    }
    times.sort();
    res.push("search_p50_us", percentile_us(&times, 0.50));
    res.push("search_p99_us", percentile_us(&times, 0.99));
    res.push(
        "search_top3_pct",
        100.0 * hits as f64 / sample.len().max(1) as f64,
    );

    // Timed as the catalog round times a listing: the tools are counted,
    // not built, so the client's own parsing weighs little.
    for (session, key) in [
        (&mut full, "search_list_full_ms"),
        (&mut find, "search_list_find_ms"),
    ] {
        let mut fetches = Vec::with_capacity(shape.fetches);
        for _ in 0..shape.fetches {
            let started = Instant::now();
            crate::catalog::list_all(session).await?;
            fetches.push(started.elapsed().as_secs_f64() * 1e3);
        }
        res.push(key, median(&fetches));
    }
    Ok(())
}

/// Every page of `tools/list`, read whole: each tool's name and
/// description, and the bytes of the answers.
async fn list_all(session: &mut Session) -> Res<(Vec<(String, String)>, usize)> {
    let mut cursor: Option<String> = None;
    let mut tools = Vec::new();
    let mut bytes = 0;
    loop {
        let params = match &cursor {
            Some(c) => json!({ "cursor": c }),
            None => json!({}),
        };
        let body = session.request_raw("tools/list", params).await?;
        bytes += body.len();
        let message = message_of(&body)?;
        let result = &message["result"];
        for tool in result["tools"].as_array().into_iter().flatten() {
            let text = |key: &str| tool[key].as_str().unwrap_or_default().to_owned();
            tools.push((text("name"), text("description")));
        }
        cursor = result["nextCursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            return Ok((tools, bytes));
        }
    }
}

/// The names `search_tools` finds for `query`, best first.
async fn search(session: &mut Session, query: &str) -> Res<Vec<String>> {
    let result: Value = session
        .request(
            "tools/call",
            json!({ "name": "search_tools", "arguments": { "query": query, "limit": 3 } }),
        )
        .await?;
    let found = result["structuredContent"]["tools"]
        .as_array()
        .ok_or_else(|| fail(format!("search_tools answered {result}")))?;
    Ok(found
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect())
}
