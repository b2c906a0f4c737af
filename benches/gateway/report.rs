//! What a run measured (one value per metric per round) and the Markdown
//! it is printed as: median and spread (min–max) across rounds, and ratios
//! against the direct path computed round by round.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

/// Per-round values by key (`"<metric>/<target>"`), in round order.
#[derive(Default)]
pub struct Results {
    values: BTreeMap<String, Vec<f64>>,
}

impl Results {
    pub fn push(&mut self, key: impl Into<String>, value: f64) {
        self.values.entry(key.into()).or_default().push(value);
    }

    pub fn get(&self, key: &str) -> Option<&[f64]> {
        self.values.get(key).map(Vec::as_slice)
    }

    /// Round-by-round `key_a / key_b`.
    pub fn ratio(&self, a: &str, b: &str) -> Option<Vec<f64>> {
        let (a, b) = (self.get(a)?, self.get(b)?);
        let r: Vec<f64> = a
            .iter()
            .zip(b)
            .filter(|(_, b)| **b > 0.0)
            .map(|(a, b)| a / b)
            .collect();
        (!r.is_empty()).then_some(r)
    }

    /// Round-by-round `key_a - key_b`.
    pub fn difference(&self, a: &str, b: &str) -> Option<Vec<f64>> {
        let (a, b) = (self.get(a)?, self.get(b)?);
        Some(a.iter().zip(b).map(|(a, b)| a - b).collect())
    }
}

/// The value at fraction `p` (0..=1) of sorted durations, in µs.
pub fn percentile_us(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1e6
}

/// The median of `values`.
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// A number with about three significant digits.
pub fn num(x: f64) -> String {
    if x.is_nan() {
        "—".to_owned()
    } else if x.abs() >= 100.0 || (x.fract() == 0.0 && x.abs() < 1e12) {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// "median (min–max)", or the value alone for one round.
pub fn cell(values: Option<&[f64]>) -> String {
    let Some(values) = values.filter(|v| !v.is_empty()) else {
        return "—".to_owned();
    };
    let m = median(values);
    if values.len() == 1 {
        return num(m);
    }
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{} ({}–{})", num(m), num(min), num(max))
}

/// A ratio cell: "4.52× (4.1–5.0)".
pub fn ratio_cell(values: Option<Vec<f64>>) -> String {
    match values {
        Some(v) if !v.is_empty() => {
            let c = cell(Some(&v));
            match c.split_once(' ') {
                Some((m, spread)) => format!("{m}× {spread}"),
                None => format!("{c}×"),
            }
        }
        _ => "—".to_owned(),
    }
}

/// One table with a title and notes under it.
pub struct Table {
    pub title: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
    pub notes: Vec<String>,
}

impl Table {
    pub fn new(title: &str, header: &[&str]) -> Table {
        Table {
            title: title.to_owned(),
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Whether no row has a figure (its part of the run was skipped).
    pub fn is_empty(&self) -> bool {
        self.rows.iter().all(|row| {
            row.iter()
                .skip(1)
                .all(|c| matches!(c.as_str(), "—" | "" | "(same gateway)" | "not measured"))
        })
    }

    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    fn markdown(&self, out: &mut String) {
        let _ = writeln!(out, "## {}\n", self.title);
        let _ = writeln!(out, "| {} |", self.header.join(" | "));
        let _ = writeln!(
            out,
            "|{}",
            self.header.iter().map(|_| "---|").collect::<String>()
        );
        for row in &self.rows {
            let _ = writeln!(out, "| {} |", row.join(" | "));
        }
        out.push('\n');
        for note in &self.notes {
            let _ = writeln!(out, "{note}\n");
        }
    }
}

/// What the page's figures mean; the end of every generated page (and of
/// the placeholder `docs/benchmark.md`).
const ABOUT: &str = r#"## What it measures

One binary (`benches/gateway/main.rs`, run by `cargo bench --bench gateway`;
`scripts/bench.sh` builds the release gateway too and runs that) plays four
parts:

- the **floor**: the least an MCP server can do, in Rust on hyper 1.x
  (Streamable HTTP, HTTP/1.1) and over stdio: `initialize`, `ping`,
  `tools/list`, `tools/call` of an `echo` tool that returns its text at
  once, `resources/subscribe`, a `GET /mcp` notification stream, and a
  `notify` tool that emits `notifications/resources/updated`. Each floor is
  its own process, so its CPU is counted apart;
- the **bare proxy**: the least any HTTP gateway does, as a reference for
  the gateway's own cost: an HTTP/1.1 pass-through in hyper on tokio's
  multi-thread runtime (as mcpmux runs), one upstream connection per client
  connection, no MCP and no JSON. Its own process too;
- the **load client**: one HTTP/1.1 keep-alive connection and one MCP
  session per simulated client;
- the **driver**: it starts `mcpmux serve` (authentication off, upstreams
  pointing at floors over HTTP and over stdio) as a child process on
  127.0.0.1 with a port the system picks, and reads `/proc` for the CPU
  time (each thread's run time from `/proc/<pid>/task/*/schedstat`, checked
  against utime + stime in `/proc/<pid>/stat`), context switches and
  resident memory of each process.

In interleaved rounds (direct to the floor, through mcpmux to an HTTP floor,
through mcpmux to a stdio floor, through the bare proxy to the HTTP floor),
with medians and the spread across rounds, and ratios against direct taken
round by round:

- latency p50 and p99 of `tools/call` with 2 KB and 32 KB payloads, one
  client calling sequentially;
- CPU µs and context switches per call of the gateway and of the floor, and
  the gateway's (and the bare proxy's) user-space part of its CPU per call;
- throughput with 1, 16 and 64 clients, as a fraction of direct;
- `initialize` (with `notifications/initialized`): latency and server CPU.

Then, each with a fresh gateway:

- startup to a ready catalog (spawn → `/readyz` 200) with 50 stdio
  upstreams of 100 tools each, and one client fetching every page of the
  merged 5,000-tool `tools/list` (at the default page size; the report
  gives the number of pages);
- tool search (issue 29): the same 50 × 100 tools, named and described as
  actions on each upstream's objects, behind two endpoints, one listing
  every tool and one progressive (`search: { mode: progressive }`); the
  first `search_tools` call (which builds the index) and the gateway's
  memory before and after it; `search_tools` latency p50/p99 over 500
  searches, each the description of one tool, and how often that tool was
  in the top 3; the whole `tools/list` of each endpoint, bytes and time;
- fan-out: 1,000 and 10,000 sessions, each with an open `GET /mcp` stream
  and a subscription to one resource; the floor emits
  `resources/updated` five times in a round, each once every stream has
  the one before; delivery latency p50/p99 across streams and deliveries,
  and gateway CPU per delivered notification;
- the gateway's memory per idle session and per session with an open
  stream and a subscription (growth of its VmRSS);
- two references for those figures: the same number of streams opened
  straight on a fresh floor, which pushes the same notification to them
  (its delivery latency, CPU per delivery and memory per open stream: the
  least an MCP server on hyper spends; where the open-file limit allows
  both sets of streams at once, its deliveries alternate with the
  gateway's), and one thread writing the
  notification's SSE frame once to each of as many connected loopback
  sockets, a reader waiting on each (its CPU per write: the kernel's own
  cost of a delivery; run where the open-file limit allows both ends).
- one upstream stalled (issue 15): a gateway over two HTTP floors, one of
  them with small `limits` and a `stall` tool that never answers; the
  other upstream's echo latency (2 KB, one client) with the stalled one
  idle and then saturated (every slot and queue place held by stalled
  calls), round by round, and how many more calls to the stalled upstream
  are refused at once with `-32053`.
- with `--baseline PATH` (another gateway binary, for instance one built
  from an earlier commit): this build and the baseline on the same config
  in front of the same HTTP floor, one after the other in each round:
  2 KB latency, gateway CPU and context switches per call, and throughput
  at 16 clients, with ratios round by round. This is how a feature shows
  that it costs nothing when it is not used.

Options (after `scripts/bench.sh` or `cargo bench --bench gateway --`):
`--quick`, `--rounds N`, `--out FILE`, `--mcpmux PATH`,
`--only calls,catalog,search,fanout,stall,baseline`, `--targets direct,http,stdio,proxy`
(the per-call targets measured; one alone, e.g. `--only calls --targets http`,
keeps a gateway busy on one path for a profiler), `--fanout 1000,10000` (the fan-out sizes),
`--baseline PATH` with `--baseline-label TEXT` (what to call it in the report),
`--floor-threads N` (the HTTP floor's worker threads; default the CPU
count, 1 for a current-thread runtime: cheaper per call, one core at
most). Without `--bench` on its command line, as under
`cargo test --all-targets`, the benchmark binary does nothing.

The gateway measured: `scripts/pgo-build.sh` builds it with
profile-guided optimization. It builds the gateway instrumented, runs this
benchmark's `--quick` pass against it as the training load (calls over
HTTP and stdio from 1, 16 and 64 clients, initialize, the 5,000-tool
listing, tool search, fan-out, a stalled upstream), merges the counts with
the `llvm-profdata` of rustc's own LLVM version and builds it again with
them. The sources and the release profile are the same; the code's layout
and the optimizer's choices (what to inline, which branch is the likely
one) follow the counts, so a call's path runs through fewer cache lines.
Against the plain build of the same commit, with 16 clients calling at
once, callgrind counted 45.6 k instructions per 2 KB call against 55.6 k
and 2,360 L1 instruction-cache misses against 3,530; in 16 paired rounds
it ran 0.81× the CPU per call with one client and 0.83× with 16, and 1.08×
the throughput. The training load is the 2025-era session's; a stateless
(2026-07-28) call, which it does not make, still ran 71 k instructions
against 84 k (one client) and missed the instruction cache 26 % less
often. A loop whose speed depends on a guess of its length can go either
way with the training's mix (one check of every string's bytes ran a byte
at a time in one of three builds, until it was written as fixed-length
blocks), so compare a new profile-guided build's counts with the plain
build's. The bare proxy is built as the benchmark binary is, without a
profile.

Counting rather than timing: `scripts/profile-call.sh` runs the gateway
(or, with `--proxy`, the bare proxy) under valgrind's callgrind in front
of the same floor and prints what one 2 KB call costs it in instructions
and, with `--cache`, in simulated L1 cache misses (32 KB, 8-way, 64-byte
lines), as the difference of two runs of 50 and 50 + N calls. `--d1 KB`
simulates a larger L1 data cache (a power of two): misses that vanish at
64 or 128 KB are data a call touches again after more than 32 KB of other
data, so it sizes a call's working set. `--clients C` has C sessions call
at once, each on its own connection, N / C calls each: a call's cost under
load, where a wake-up or a read is shared by several calls (valgrind runs
one thread at a time, so it counts the work, not how threads overlap).
`--mcpmux PATH` profiles another build; `--out DIR` keeps the outputs for
`callgrind_annotate`. The counts vary by about ±2 % from run to run, far
less than times do; they include the gateway's periodic work, which weighs
more per call under valgrind's slowness and is not linear in N (300 calls
count about 5 k fewer per call than 1,000), so compare builds at the same
N. Work done at most so often in time weighs more too: jemalloc trims a
thread's cache of freed blocks at most every 10 ms, which under valgrind
comes to some 3 k instructions per call with 16 clients; at full speed,
where 10 ms hold a hundred calls or more, to a small fraction of that
(raising the allocation between trims cut the count by 5 % and the CPU per
call in paired rounds by nothing beyond their spread).

Sizes rather than counts: `scripts/future-sizes.sh` prints how large rustc
lays out each `async fn` body on a call's path (`--layout NAME` shows one
body's suspend points with the arguments and locals each holds). A call's
request future lives in its connection's task, so with many connections a
call writes its levels' states to memory no call touched since that
connection's last one: an argument held both as an `upvar` and as a local
is copied when its body starts, and a larger state is more such writes.
It builds with rustc's unstable `-Zprint-type-sizes` (`RUSTC_BOOTSTRAP=1`,
in its own target directory), for this diagnostic only.

Read the figures with this in mind:

- Issue 30's table is the gateway against the bare references as ratios
  taken round by round; issue 13's table puts each absolute target beside
  the same figure for the bare reference measured in the same run: a
  target below its reference is below what these parts do on this
  machine before any MCP work.
- The load client, the floors and the gateway share the machine's CPUs; on
  a small machine every figure includes that contention, which is why
  ratios against direct, taken in the same round, say more than absolute
  figures.
- Fan-out latency includes the benchmark process reading every stream.
- Memory per session with a stream includes its TCP connection.
- `scripts/bench.sh` measures the profile-guided build that
  `scripts/pgo-build.sh` makes (with `--plain`, the one `cargo build
  --release` makes); the machine table's `gateway build` row names it.
  `cargo bench --bench gateway` alone runs the gateway binary cargo builds
  for benchmarks, with the dev-dependencies' features (tokio's test-util),
  and the row says the build is not named.
"#;

/// The whole page: a header describing the machine and the run, the
/// tables, then what they measure.
pub fn markdown(machine: &[(String, String)], run: &[String], tables: &[Table]) -> String {
    let mut out = String::from("# mcpmux benchmark\n\n");
    out.push_str(
        "Produced by `scripts/bench.sh --out docs/benchmark.md` (`cargo bench --bench\n\
         gateway`); what each figure means is at the end of this page. Ratios matter\n\
         more than absolute figures: every figure is the median over rounds, with the\n\
         spread (min–max) in parentheses, and ratios are taken round by round.\n\n",
    );
    out.push_str("| machine | |\n|---|---|\n");
    for (what, value) in machine {
        let _ = writeln!(out, "| {what} | {value} |");
    }
    out.push('\n');
    for line in run {
        let _ = writeln!(out, "- {line}");
    }
    out.push('\n');
    for table in tables {
        table.markdown(&mut out);
    }
    out.push_str(ABOUT);
    out
}
