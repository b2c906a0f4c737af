//! The report's tables, built from a run's `Results`: the targets,
//! per call (direct vs through mcpmux), the gateway's own cost, the
//! catalog, fan-out with memory per session, and one upstream stalled.

use crate::Plan;
use crate::report::{self, Results, Table, cell, ratio_cell};

/// The report's tables from what was measured.
pub fn all(res: &Results, plan: &Plan, fanout: &[usize], baseline: Option<&str>) -> Vec<Table> {
    let mut tables = Vec::new();
    let mut per_call = Table::new(
        "Per call: direct to the floor vs through mcpmux",
        &[
            "metric",
            "direct",
            "via mcpmux, HTTP upstream",
            "ratio",
            "via mcpmux, stdio upstream",
            "ratio",
        ],
    );
    let by_target = |metric: &str, label: &str, table: &mut Table| {
        let d = format!("{metric}/direct");
        let h = format!("{metric}/http");
        let s = format!("{metric}/stdio");
        table.row(vec![
            label.to_owned(),
            cell(res.get(&d)),
            cell(res.get(&h)),
            ratio_cell(res.ratio(&h, &d)),
            cell(res.get(&s)),
            ratio_cell(res.ratio(&s, &d)),
        ]);
    };
    for (metric, label) in [
        ("lat_p50_2k", "latency p50, 2 KB (µs)"),
        ("lat_p99_2k", "latency p99, 2 KB (µs)"),
        ("lat_p50_32k", "latency p50, 32 KB (µs)"),
        ("lat_p99_32k", "latency p99, 32 KB (µs)"),
        ("cpu_floor", "floor CPU per call, 2 KB (µs)"),
        ("csw_cpu_floor", "floor context switches per call"),
    ] {
        by_target(metric, label, &mut per_call);
    }
    for &c in &plan.clients {
        by_target(
            &format!("tput_{c}"),
            &format!(
                "throughput, {c} client{} (calls/s)",
                if c == 1 { "" } else { "s" }
            ),
            &mut per_call,
        );
    }
    for (metric, label) in [
        ("init_p50", "initialize + initialized p50 (µs)"),
        ("init_cpu", "server CPU per initialize + initialized (µs)"),
    ] {
        let d = format!("{metric}/direct");
        let g = format!("{metric}/gw");
        per_call.row(vec![
            label.to_owned(),
            cell(res.get(&d)),
            cell(res.get(&g)),
            ratio_cell(res.ratio(&g, &d)),
            "(same gateway)".to_owned(),
            String::new(),
        ]);
    }
    per_call.note(
        "Ratios are through-mcpmux over direct, round by round; for throughput, the \
         fraction of direct throughput kept. CPU is the sum of the process's threads' \
         run time (/proc/<pid>/task/*/schedstat), checked against utime + stime of \
         /proc/<pid>/stat; the floor's is that of the floor answering the calls.",
    );
    tables.push(per_call);

    let mut gateway = Table::new(
        "The gateway's own cost per call",
        &[
            "metric",
            "HTTP upstream",
            "stdio upstream",
            "bare proxy (reference)",
        ],
    );
    // A row with one cell per target through a gateway (mcpmux over HTTP and
    // over stdio, and the bare proxy).
    let row = |label: String, value: &dyn Fn(&str) -> String| -> Vec<String> {
        std::iter::once(label)
            .chain(["http", "stdio", "proxy"].map(value))
            .collect()
    };
    let measured = |metric: String, label: &str| {
        row(label.to_owned(), &|t| {
            cell(res.get(&format!("{metric}/{t}")))
        })
    };
    gateway.row(row(
        "added latency p50, 2 KB (µs over direct)".to_owned(),
        &|t| {
            cell(
                res.difference(&format!("lat_p50_2k/{t}"), "lat_p50_2k/direct")
                    .as_deref(),
            )
        },
    ));
    gateway.row(measured(
        "cpu_gw".to_owned(),
        "gateway CPU per call, 2 KB, 1 client (µs)",
    ));
    gateway.row(measured(
        "cpu_gw_user".to_owned(),
        "of which in user space (µs; the rest is the kernel's)",
    ));
    gateway.row(row(
        "gateway CPU per call ÷ floor CPU per call (direct)".to_owned(),
        &|t| ratio_cell(res.ratio(&format!("cpu_gw/{t}"), "cpu_floor/direct")),
    ));
    gateway.row(measured(
        "csw_cpu_gw".to_owned(),
        "gateway context switches per call",
    ));
    gateway.row(measured(
        "cpu_floor".to_owned(),
        "the floor's CPU per call behind it, 2 KB (µs)",
    ));
    gateway.row(measured(
        "cpu_floor_user".to_owned(),
        "of which in the floor's user space (µs)",
    ));
    gateway.row(measured(
        "csw_cpu_floor".to_owned(),
        "the floor's context switches per call",
    ));
    for &c in plan.clients.iter().filter(|c| **c > 1) {
        gateway.row(measured(
            format!("load{c}_gw"),
            &format!("gateway CPU per call, {c} clients (µs)"),
        ));
        gateway.row(measured(
            format!("load{c}_gw_user"),
            "of which in user space (µs)",
        ));
    }
    for &c in plan.clients.iter().filter(|c| **c > 1) {
        gateway.row(row(
            format!("throughput, {c} clients, fraction of direct"),
            &|t| ratio_cell(res.ratio(&format!("tput_{c}/{t}"), &format!("tput_{c}/direct"))),
        ));
    }
    gateway.note(
        "The bare proxy is the reference for what any gateway on these parts spends: \
         an HTTP/1.1 pass-through in hyper on tokio's multi-thread runtime (as mcpmux \
         runs), one upstream connection per client connection, no MCP and no JSON, in \
         front of the same floor and measured in the same rounds (its \"gateway\" \
         figures are its own process's). The user-space part is the run time split \
         as /proc/<pid>/stat splits utime from stime (10 ms ticks, over the whole \
         window of sequential calls, or of the clients' window under load); the rest is \
         the kernel's work for the process \
         (its sockets, its wake-ups). The floor's rows are the floor's own CPU and \
         context switches per call with each in front of it: it is sent the same \
         bytes either way, and its time is on the call's path too.",
    );
    tables.push(gateway);

    let shape = &plan.catalog;
    let mut catalog = Table::new(
        &format!(
            "Catalog: {} stdio upstreams × {} tools",
            shape.upstreams, shape.tools_each
        ),
        &["metric", "value"],
    );
    for (key, label) in [
        ("startup_ms", "startup: spawn → /readyz 200 (ms)"),
        ("list_ms", "tools/list, every page, one client (ms)"),
        (
            "list_recv_ms",
            "of which waiting for the answers: request sent to last byte (ms)",
        ),
        ("page_us", "tools/list, per page (µs)"),
        ("pages", "pages"),
        ("list_cpu_us", "gateway CPU per whole listing (µs)"),
    ] {
        catalog.row(vec![label.to_owned(), cell(res.get(key))]);
    }
    catalog.note(
        "A whole listing includes the load client scanning each answer to count its \
         tools (a JSON pass over every byte); waiting for the answers is the part spent \
         between sending each request and the last byte of its answer.",
    );
    tables.push(catalog);

    let shape = &plan.search;
    let mut search = Table::new(
        &format!(
            "Tool search: {} stdio upstreams × {} tools, a progressive endpoint beside a full one",
            shape.upstreams, shape.tools_each
        ),
        &["metric", "value"],
    );
    for (key, label) in [
        (
            "search_first_ms",
            "first search, which builds the index (ms)",
        ),
        (
            "search_index_kb",
            "gateway memory added by the first search: the index (KB)",
        ),
        ("search_p50_us", "search_tools latency p50 (µs)"),
        ("search_p99_us", "search_tools latency p99 (µs)"),
        (
            "search_top3_pct",
            "searches from a tool's description with that tool in the top 3 (%)",
        ),
        (
            "search_list_full_kb",
            "tools/list of the full endpoint, every page (KB)",
        ),
        (
            "search_list_find_kb",
            "tools/list of the progressive endpoint (KB)",
        ),
        ("search_listed_find", "tools the progressive endpoint lists"),
        (
            "search_list_full_ms",
            "tools/list of the full endpoint, every page (ms)",
        ),
        (
            "search_list_find_ms",
            "tools/list of the progressive endpoint (ms)",
        ),
    ] {
        search.row(vec![label.to_owned(), cell(res.get(key))]);
    }
    search.note(format!(
        "Each floor is a service whose tools are actions on its objects \
         (`benches/gateway/words.rs`); {} searches per round, each the description of \
         one tool of the full listing that no other tool shares, asking for 3 matches; \
         a search is one `tools/call` of `search_tools` through the gateway, timed by \
         the load client.",
        shape.queries
    ));
    if !search.is_empty() {
        tables.push(search);
    }

    let mut fan = Table::new("Fan-out and memory per session (HTTP upstream)", &[]);
    fan.header = std::iter::once("metric".to_owned())
        .chain(fanout.iter().map(|n| format!("{n} sessions")))
        .collect();
    for (key, label) in [
        ("fan_delivered", "streams that got the notification"),
        ("fan_p50_ms", "delivery latency p50 (ms)"),
        ("fan_p99_ms", "delivery latency p99 (ms)"),
        ("fan_cpu_us", "gateway CPU per delivered notification (µs)"),
        ("idle_kb", "gateway memory per idle session (KB)"),
        (
            "stream_kb",
            "gateway memory per session with an open stream and a subscription (KB)",
        ),
        (
            "floor_fan_p50_ms",
            "reference, the floor's own streams: delivery latency p50 (ms)",
        ),
        (
            "floor_fan_p99_ms",
            "reference, the floor's own streams: delivery latency p99 (ms)",
        ),
        (
            "floor_fan_cpu_us",
            "reference, the floor's own streams: floor CPU per delivery (µs)",
        ),
        (
            "floor_stream_kb",
            "reference, the floor's own streams: floor memory per open stream (KB)",
        ),
        (
            "raw_p50_ms",
            "reference, one write() per socket: delivery latency p50 (ms)",
        ),
        (
            "raw_p99_ms",
            "reference, one write() per socket: delivery latency p99 (ms)",
        ),
        (
            "raw_cpu_us",
            "reference, one write() per socket: writer CPU per delivery (µs)",
        ),
    ] {
        let mut row = vec![label.to_owned()];
        row.extend(fanout.iter().map(|n| cell(res.get(&format!("{key}/{n}")))));
        fan.row(row);
    }
    fan.note(
        "Delivery latency runs from the floor being asked to emit one \
         notifications/resources/updated to each stream's reader seeing it; the \
         readers run in the benchmark process. Each round delivers five notifications \
         one after the other (the next once every stream has the last), and the \
         latencies are over all of them; where both sets of streams fit the open-file \
         limit at once, the gateway's deliveries and the reference floor's alternate. \
         Memory is the gateway's VmRSS growth \
         divided by the number of sessions (a stream's figure includes its connection). \
         The reference rows open as many streams straight on a fresh floor (hyper, \
         one queue and one response body per stream, no session) and have the floor \
         push the same notification to them: the least an MCP server on these parts \
         spends per delivery and per open stream. The one-write() rows are the kernel's \
         own share: one thread writes the same SSE frame once to each of as many \
         connected loopback sockets, a reader waiting on each, with no HTTP and no MCP.",
    );
    tables.push(fan);
    tables.push(stalled(res));
    if let Some(label) = baseline {
        tables.push(compared(res, label));
    }
    tables.insert(0, targets(res, plan, fanout));
    tables.insert(0, against_bare(res, fanout));
    tables.retain(|t| !t.is_empty());
    tables
}

/// This build against the `--baseline` build, round by round.
fn compared(res: &Results, label: &str) -> Table {
    let clients = crate::baseline::CLIENTS;
    let mut table = Table::new(
        "This build against a baseline build",
        &["metric", "this build", "baseline", "ratio"],
    );
    for (metric, text) in [
        ("lat_p50_2k", "latency p50, 2 KB (µs)".to_owned()),
        ("lat_p99_2k", "latency p99, 2 KB (µs)".to_owned()),
        (
            "cpu_gw",
            "gateway CPU per call, 2 KB, 1 client (µs)".to_owned(),
        ),
        ("csw_cpu_gw", "gateway context switches per call".to_owned()),
        (
            &format!("tput_{clients}") as &str,
            format!("throughput, {clients} clients (calls/s)"),
        ),
        (
            &format!("load{clients}_gw"),
            format!("gateway CPU per call, {clients} clients (µs)"),
        ),
    ] {
        let head = format!("{metric}/head");
        let base = format!("{metric}/base");
        table.row(vec![
            text,
            cell(res.get(&head)),
            cell(res.get(&base)),
            ratio_cell(res.ratio(&head, &base)),
        ]);
    }
    table.note(format!(
        "Baseline: {label}. Both gateways run the same config (one HTTP floor upstream, \
         no session store, tracing off) in front of the same floor, measured one after \
         the other in each round; ratios are this build over the baseline, round by round."
    ));
    table
}

/// Issue 15: the fast upstream's latency with the other one idle vs stalled
/// and saturated, and the calls to the stalled one refused at once.
fn stalled(res: &Results) -> Table {
    use crate::stall::{AT_ONCE, MAX_IN_FLIGHT, MAX_QUEUED};
    let mut table = Table::new(
        "One upstream stalled (issue 15): the other upstream's calls",
        &[
            "metric",
            "other upstream idle",
            "other upstream stalled",
            "ratio",
        ],
    );
    for (metric, label) in [
        ("lat_p50_stall", "fast upstream latency p50, 2 KB (µs)"),
        ("lat_p99_stall", "fast upstream latency p99, 2 KB (µs)"),
    ] {
        let idle = format!("{metric}/idle");
        let busy = format!("{metric}/busy");
        table.row(vec![
            label.to_owned(),
            cell(res.get(&idle)),
            cell(res.get(&busy)),
            ratio_cell(res.ratio(&busy, &idle)),
        ]);
    }
    table.row(vec![
        "more calls to the stalled upstream refused at once with -32053".to_owned(),
        String::new(),
        match (res.get("stall_refused"), res.get("stall_probes")) {
            (Some(refused), Some(probes)) => format!(
                "{} of {} per round",
                cell(Some(refused)),
                report::num(report::median(probes))
            ),
            _ => "—".to_owned(),
        },
        String::new(),
    ]);
    table.row(vec![
        "time to that refusal, p50 (µs)".to_owned(),
        String::new(),
        cell(res.get("stall_refusal_us")),
        String::new(),
    ]);
    table.note(format!(
        "One gateway over two HTTP floors: `fast`, and `slow` with `limits: {{ max_in_flight: \
         {MAX_IN_FLIGHT}, max_queued: {MAX_QUEUED}, queue_timeout: 1s }}` and a `stall` tool its \
         floor never answers. In each round, one client calls `fast`'s echo (2 KB) \
         sequentially with `slow` idle, then again while {} sessions keep `slow` saturated \
         with stalled calls (every slot and queue place taken, as `/readyz` shows, before \
         the calls start); then one more session calls `stall` again and again, and a \
         `-32053` answer within {} ms counts as refused at once. The ratio is stalled over \
         idle, round by round: near 1× means the stalled upstream costs the other nothing.",
        MAX_IN_FLIGHT + MAX_QUEUED,
        AT_ONCE.as_millis()
    ));
    table
}

/// Issue 30's targets: the gateway against the least these parts do,
/// measured in the same run (ratios round by round, medians).
fn against_bare(res: &Results, fanout: &[usize]) -> Table {
    let mut table = Table::new(
        "Targets (issue 30, against the bare references in the same run)",
        &["target", "ratio (median, spread)", "met"],
    );
    let mut target = |what: &str, ratios: Option<Vec<f64>>, ok: &dyn Fn(f64) -> bool| {
        let met = match ratios.as_ref().filter(|r| !r.is_empty()) {
            Some(r) if ok(report::median(r)) => "yes",
            Some(_) => "no",
            None => "—",
        };
        table.row(vec![
            what.to_owned(),
            report::ratio_cell(ratios),
            met.to_owned(),
        ]);
    };
    target(
        "gateway CPU per 2 KB call ≤ 1.25× the bare proxy's",
        res.ratio("cpu_gw/http", "cpu_gw/proxy"),
        &|v| v <= 1.25,
    );
    let added = |key: &str| res.difference(key, "lat_p50_2k/direct");
    let added_ratio = match (added("lat_p50_2k/http"), added("lat_p50_2k/proxy")) {
        (Some(gw), Some(bare)) => Some(
            gw.iter()
                .zip(&bare)
                .filter(|(_, b)| **b > 0.0)
                .map(|(g, b)| g / b)
                .collect(),
        ),
        _ => None,
    };
    target(
        "added latency p50 ≤ 1.25× the bare proxy's added p50",
        added_ratio,
        &|v| v <= 1.25,
    );
    for c in [16, 64] {
        target(
            &format!("throughput at {c} clients ≥ 0.8× the bare proxy's"),
            res.ratio(&format!("tput_{c}/http"), &format!("tput_{c}/proxy")),
            &|v| v >= 0.8,
        );
    }
    let n = fanout
        .iter()
        .copied()
        .find(|n| *n == 1000)
        .or(fanout.first().copied());
    if let Some(n) = n {
        target(
            &format!("CPU per fan-out delivery ({n} streams) ≤ 1.2× the floor's own streams"),
            res.ratio(&format!("fan_cpu_us/{n}"), &format!("floor_fan_cpu_us/{n}")),
            &|v| v <= 1.2,
        );
        target(
            "a session with an open stream and a subscription ≤ 1.3× a bare hyper stream",
            res.ratio(&format!("stream_kb/{n}"), &format!("floor_stream_kb/{n}")),
            &|v| v <= 1.3,
        );
    }
    table.note(
        "Each ratio is the gateway's figure over the same figure of its bare reference, \
         taken round by round: for calls, the bare proxy (an HTTP/1.1 pass-through in \
         hyper with no MCP, in front of the same floor); for fan-out and memory, the \
         floor's own notification streams (hyper and one queue per stream, no session). \
         Added latency is each one's p50 over the direct p50.",
    );
    table
}

/// Issue 13's targets for the hot path, each against what this run measured
/// (HTTP upstream, medians).
fn targets(res: &Results, plan: &Plan, fanout: &[usize]) -> Table {
    let mut table = Table::new(
        "Targets (issue 13, HTTP upstream)",
        &[
            "target",
            "measured (median)",
            "met",
            "the same for the bare reference",
        ],
    );
    let shown = |value: Option<f64>, unit: &str| match value.filter(|v| !v.is_nan()) {
        Some(v) => format!("{}{unit}", report::num(v)),
        None => "not measured".to_owned(),
    };
    let mut target = |what: &str,
                      value: Option<f64>,
                      reference: Option<Option<f64>>,
                      unit: &str,
                      ok: &dyn Fn(f64) -> bool| {
        let met = match value.filter(|v| !v.is_nan()) {
            Some(v) if ok(v) => "yes",
            Some(_) => "no",
            None => "—",
        };
        table.row(vec![
            what.to_owned(),
            shown(value, unit),
            met.to_owned(),
            reference.map_or_else(|| "—".to_owned(), |r| shown(r, unit)),
        ]);
    };
    let med = |v: Option<Vec<f64>>| v.map(|v| report::median(&v));
    target(
        "gateway CPU per 2 KB call ≤ 2× the floor's",
        med(res.ratio("cpu_gw/http", "cpu_floor/direct")),
        Some(med(res.ratio("cpu_gw/proxy", "cpu_floor/direct"))),
        "×",
        &|v| v <= 2.0,
    );
    target(
        "added latency p50 ≤ 60 µs",
        med(res.difference("lat_p50_2k/http", "lat_p50_2k/direct")),
        Some(med(res.difference("lat_p50_2k/proxy", "lat_p50_2k/direct"))),
        " µs",
        &|v| v <= 60.0,
    );
    for c in [16, 64] {
        target(
            &format!("throughput at {c} clients ≥ 0.5× direct"),
            med(res.ratio(&format!("tput_{c}/http"), &format!("tput_{c}/direct"))),
            Some(med(res.ratio(
                &format!("tput_{c}/proxy"),
                &format!("tput_{c}/direct"),
            ))),
            "×",
            &|v| v >= 0.5,
        );
    }
    let n = fanout
        .iter()
        .copied()
        .find(|n| *n == 1000)
        .or(fanout.first().copied());
    if let Some(n) = n {
        let at = |key: &str| res.get(&format!("{key}/{n}")).map(report::median);
        target(
            &format!("fan-out to {n} streams: p99 ≤ 5 ms"),
            at("fan_p99_ms"),
            Some(at("floor_fan_p99_ms")),
            " ms",
            &|v| v <= 5.0,
        );
        target(
            &format!("fan-out to {n} streams: ≤ 5 µs gateway CPU per delivery"),
            at("fan_cpu_us"),
            Some(at("raw_cpu_us")),
            " µs",
            &|v| v <= 5.0,
        );
        target(
            "a session with an open stream and one subscription ≤ 8 KB",
            at("stream_kb"),
            Some(at("floor_stream_kb")),
            " KB",
            &|v| v <= 8.0,
        );
    }
    let tools = plan.catalog.upstreams * plan.catalog.tools_each;
    target(
        &format!(
            "tools/list of one client over a {tools}-tool catalog ≤ 1 ms \
             (every page, each request sent to its answer's last byte)"
        ),
        res.get("list_recv_ms").map(report::median),
        None,
        " ms",
        &|v| v <= 1.0,
    );
    table.note(
        "Each target as issue 13 states it; `met` compares the median of this run. \
         Latencies run from sending a request to its answer's last byte, as a call's \
         do; the load client's own scan of a listing (see the catalog table) is the \
         client's time, not the gateway's. Figures from a busy machine say nothing \
         about the targets. The last column is the same figure for the least these \
         parts do, measured in the same run: for calls, the bare proxy (an HTTP/1.1 \
         pass-through in hyper with no MCP, in front of the same floor; see the \
         gateway's own cost); for fan-out latency and memory, the floor's own streams (the same \
         notification pushed by the floor straight to as many open streams; its \
         memory per open stream: hyper and one queue, no session); for CPU per \
         delivery, one write() of the notification's frame to each of as many \
         loopback sockets, no HTTP (the kernel's own cost per delivery). The fan-out \
         table has both references in full.",
    );
    table
}
