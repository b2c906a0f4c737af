//! The gateway benchmark (`cargo bench --bench gateway`, or `scripts/bench.sh`):
//! one binary that is the floor MCP server (re-run as `gateway floor http|stdio`
//! child processes), the bare proxy (`gateway proxy`, the per-call reference),
//! the load client (also alone, as `gateway calls`, the load of
//! `scripts/profile-call.sh`), and the driver that runs the release `mcpmux`
//! as a child process and prints the results as Markdown.
//!
//! What it measures, in interleaved rounds (direct to the floor, through
//! mcpmux to an HTTP floor, through mcpmux to a stdio floor, through the bare
//! proxy to the HTTP floor, R times):
//! latency p50/p99 of `tools/call` echo (2 KB, 32 KB; one client); CPU µs
//! and context switches per call of the gateway and of the floor (from
//! `/proc/<pid>/task/*/schedstat` and `status`, checked against
//! `/proc/<pid>/stat`); throughput at 1, 16
//! and 64 clients; `initialize` cost. Then, each with a fresh gateway: startup
//! to `/readyz` with many stdio floors and the merged `tools/list` of all
//! their tools; fan-out of one `resources/updated` to N open streams, and the
//! gateway's memory per idle session and per session with a stream and a
//! subscription, beside the floor's own streams and one `write()` per socket; and, with one upstream stalled and saturated (issue 15),
//! the other upstream's call latency against the same with it idle; tool
//! search over many upstreams' tools on a progressive endpoint beside a
//! full one (issue 29); and,
//! with `--baseline PATH`, this build against another build in paired rounds.
//!
//! Without `--bench` on its command line (as under `cargo test --all-targets`)
//! it does nothing and exits 0.
#![forbid(unsafe_code)]

mod baseline;
mod calls;
mod catalog;
mod client;
mod fanout;
mod floor;
mod procs;
mod proxy;
mod report;
mod search;
mod stall;
mod tables;
mod words;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use report::Results;

pub type Error = Box<dyn std::error::Error + Send + Sync>;
pub type Res<T> = Result<T, Error>;

pub fn fail(message: impl Into<String>) -> Error {
    message.into().into()
}

/// An error's message prefixed with where it happened (a round, a
/// measurement and a target), for `map_err`.
pub fn failed_at(place: String) -> impl FnOnce(Error) -> Error {
    move |e| fail(format!("{place}: {e}"))
}

const USAGE: &str = "\
usage: cargo bench --bench gateway -- [--quick] [--rounds N] [--out FILE]
                                      [--mcpmux PATH] [--only calls,catalog,search,fanout,stall,baseline]
                                      [--targets direct,http,stdio,proxy]
                                      [--floor-threads N] [--fanout N,M]
                                      [--baseline PATH [--baseline-label TEXT]]
  --quick    a short run (well under a minute) to check the pipeline
  --rounds   rounds of the interleaved per-call measurements (default 9)
  --out      also write the Markdown report to FILE (docs/benchmark.md)
  --mcpmux   the gateway binary (default: $MCPMUX_BIN, else the one cargo built)
  --only     run only these parts
  --targets  per-call targets to measure (default direct,http,stdio,proxy),
             e.g. `--only calls --targets http` to profile one path
  --baseline another gateway binary (e.g. built from an earlier commit): adds
             paired per-call rounds of this build against it
  --baseline-label  what the baseline is, for the report (default: its path)
  --fanout   the fan-out sizes (default 1000,10000; --quick 100,1000)
  --floor-threads  worker threads of the HTTP floor (default: the CPU count;
             1 is a current-thread runtime)";

/// What a run does; `--quick` shrinks every count.
struct Plan {
    rounds: usize,
    warmup: usize,
    calls_2k: usize,
    calls_32k: usize,
    clients: Vec<usize>,
    window: Duration,
    inits: usize,
    catalog: catalog::Shape,
    catalog_rounds: usize,
    search: search::Shape,
    search_rounds: usize,
    fanout: Vec<usize>,
    fanout_rounds: usize,
    stall: stall::Shape,
}

impl Plan {
    fn full() -> Plan {
        Plan {
            rounds: 9,
            warmup: 500,
            calls_2k: 5000,
            calls_32k: 1000,
            clients: vec![1, 16, 64],
            window: Duration::from_secs(2),
            inits: 500,
            catalog: catalog::Shape {
                upstreams: 50,
                tools_each: 100,
                fetches: 20,
            },
            catalog_rounds: 9,
            search: search::Shape {
                upstreams: 50,
                tools_each: 100,
                queries: 500,
                fetches: 10,
            },
            search_rounds: 3,
            fanout: vec![1000, 10_000],
            fanout_rounds: 3,
            stall: stall::Shape {
                calls: 5000,
                warmup: 500,
                probes: 100,
            },
        }
    }

    fn quick() -> Plan {
        Plan {
            rounds: 1,
            warmup: 50,
            calls_2k: 300,
            calls_32k: 100,
            clients: vec![1, 16, 64],
            window: Duration::from_millis(300),
            inits: 50,
            catalog: catalog::Shape {
                upstreams: 10,
                tools_each: 100,
                fetches: 3,
            },
            catalog_rounds: 1,
            search: search::Shape {
                upstreams: 10,
                tools_each: 100,
                queries: 100,
                fetches: 2,
            },
            search_rounds: 1,
            fanout: vec![100, 1000],
            fanout_rounds: 1,
            stall: stall::Shape {
                calls: 300,
                warmup: 50,
                probes: 20,
            },
        }
    }
}

struct Options {
    plan: Plan,
    floor_threads: usize,
    quick: bool,
    out: Option<PathBuf>,
    mcpmux: PathBuf,
    only: Option<Vec<String>>,
    /// `--targets`: the per-call targets measured (all when `None`).
    targets: Option<Vec<String>>,
    /// `--baseline` and what to call it in the report.
    baseline: Option<(PathBuf, String)>,
}

impl Options {
    fn parse(args: &[String]) -> Res<Options> {
        let quick = args.iter().any(|a| a == "--quick");
        let mut plan = if quick { Plan::quick() } else { Plan::full() };
        let mut out = None;
        let mut mcpmux = std::env::var_os("MCPMUX_BIN").map_or_else(
            || PathBuf::from(env!("CARGO_BIN_EXE_mcpmux")),
            PathBuf::from,
        );
        let mut only = None;
        let mut targets = None;
        let (mut baseline, mut baseline_label) = (None, None);
        let mut floor_threads = std::thread::available_parallelism().map_or(1, usize::from);
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = || {
                args.next()
                    .cloned()
                    .ok_or_else(|| fail(format!("{arg} needs a value\n{USAGE}")))
            };
            match arg.as_str() {
                "--bench" | "--quick" => {}
                "--rounds" => {
                    plan.rounds = value()?.parse()?;
                    plan.catalog_rounds = plan.rounds;
                    plan.search_rounds = plan.rounds.min(plan.search_rounds.max(1));
                    plan.fanout_rounds = plan.rounds.min(plan.fanout_rounds.max(1));
                }
                "--out" => out = Some(PathBuf::from(value()?)),
                "--mcpmux" => mcpmux = PathBuf::from(value()?),
                "--floor-threads" => floor_threads = value()?.parse()?,
                "--fanout" => {
                    plan.fanout = value()?
                        .split(',')
                        .map(str::parse)
                        .collect::<Result<_, _>>()?;
                }
                "--only" => only = Some(value()?.split(',').map(str::to_owned).collect()),
                "--targets" => targets = Some(value()?.split(',').map(str::to_owned).collect()),
                "--baseline" => baseline = Some(PathBuf::from(value()?)),
                "--baseline-label" => baseline_label = Some(value()?),
                "--help" | "-h" => return Err(fail(USAGE)),
                other => return Err(fail(format!("unknown argument {other}\n{USAGE}"))),
            }
        }
        if plan.rounds == 0 {
            return Err(fail("--rounds must be at least 1"));
        }
        let baseline = match (baseline, baseline_label) {
            (Some(path), label) => {
                let label = label.unwrap_or_else(|| path.display().to_string());
                Some((path, label))
            }
            (None, Some(_)) => return Err(fail("--baseline-label needs --baseline")),
            (None, None) => None,
        };
        Ok(Options {
            plan,
            floor_threads,
            quick,
            out,
            mcpmux,
            only,
            targets,
            baseline,
        })
    }

    fn runs(&self, part: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|p| p == part))
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("floor") {
        return floor_main(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("proxy") {
        return proxy_main(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("calls") {
        return calls_main(&args[1..]);
    }
    if !args.iter().any(|a| a == "--bench") {
        println!("gateway benchmark: not run without --bench (cargo bench --bench gateway)");
        return ExitCode::SUCCESS;
    }
    let options = match Options::parse(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(64);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("the tokio runtime starts");
    let outcome = runtime.block_on(run(&options));
    // Children still running (after an error) are killed as their handles drop.
    runtime.shutdown_timeout(Duration::from_secs(5));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gateway benchmark failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `floor http|stdio [--tools N]`: a child process of the benchmark.
fn floor_main(args: &[String]) -> ExitCode {
    let number = |name: &str, default: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1)?.parse().ok())
            .unwrap_or(default)
    };
    let tools = number("--tools", 2);
    let words = args
        .iter()
        .position(|a| a == "--words")
        .and_then(|i| args.get(i + 1)?.parse().ok());
    let outcome = match args.first().map(String::as_str) {
        Some("http") => floor::run_http(
            tools,
            number("--threads", 1),
            args.iter().any(|a| a == "--stall"),
        ),
        Some("stdio") => floor::run_stdio(tools, words),
        _ => Err(fail(
            "usage: gateway floor http [--threads N] [--tools N] [--stall] | stdio [--tools N] [--words SEED]",
        )),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("floor: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `proxy --upstream ADDR [--threads N]`: a child process of the benchmark.
fn proxy_main(args: &[String]) -> ExitCode {
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
    };
    let upstream = value("--upstream").and_then(|a| a.parse().ok());
    let threads = value("--threads").and_then(|n| n.parse().ok()).unwrap_or(0);
    let outcome = match upstream {
        Some(upstream) => proxy::run(upstream, threads),
        None => Err(fail("usage: gateway proxy --upstream ADDR [--threads N]")),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("proxy: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `calls --addr ADDR --tool NAME --count N [--size BYTES] [--wait]`: one
/// session making N sequential echo calls (2 KB by default), each answer
/// checked (the first one whole), then closed; with `--wait`, only once
/// `/readyz` answers 200 (for a gateway just started). The load of
/// `scripts/profile-call.sh`.
fn calls_main(args: &[String]) -> ExitCode {
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
    };
    let addr = value("--addr").and_then(|a| a.parse::<SocketAddr>().ok());
    let tool = value("--tool");
    let count = value("--count").and_then(|n| n.parse::<usize>().ok());
    let size = value("--size").map_or(Some(2048), |n| n.parse::<usize>().ok());
    let wait = args.iter().any(|a| a == "--wait");
    let (Some(addr), Some(tool), Some(count), Some(size)) = (addr, tool, count, size) else {
        eprintln!("usage: gateway calls --addr ADDR --tool NAME --count N [--size BYTES] [--wait]");
        return ExitCode::from(64);
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("calls: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async {
        if wait {
            // A gateway under a profiler starts slowly.
            procs::wait_ready(addr, std::time::Instant::now(), Duration::from_secs(300)).await?;
        }
        let mut session = client::Session::open(client::Conn::connect(addr).await?).await?;
        let payload = client::Payload::echo(tool, size);
        for n in 0..count {
            // The first answer is read whole, the rest checked for size.
            session.echo(&payload, n == 0).await?;
        }
        session.close().await
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("calls: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The gateway config the benchmark runs: no authentication, limits raised
/// so that 10,000 sessions with streams fit, no idle expiry during a run,
/// every upstream `required` (so `/readyz` 200 means all are ready);
/// list page sizes are the defaults (the report says how many pages).
pub fn gateway_yaml(upstreams: &str) -> String {
    format!(
        "auth: {{ mode: off }}\n\
         sessions:\n  idle_timeout: \"1h\"\n  max: 20000\n  max_per_client: 20000\n\
         http:\n  idle_timeout: \"1h\"\n  max_connections: 20000\n\
         upstreams:\n{upstreams}"
    )
}

/// YAML for a stdio floor upstream listing `tools` tools.
pub fn stdio_upstream(name: &str, exe: &Path, tools: usize) -> String {
    stdio_upstream_with(name, exe, tools, &[])
}

/// [`stdio_upstream`] with more floor arguments.
pub fn stdio_upstream_with(name: &str, exe: &Path, tools: usize, more: &[&str]) -> String {
    let command = exe.to_string_lossy().replace('$', "$$");
    let tools = tools.to_string();
    let mut args = vec!["floor", "stdio", "--tools", tools.as_str()];
    args.extend_from_slice(more);
    format!(
        "  {name}:\n    command: {}\n    args: {}\n    required: true\n",
        serde_json::to_string(&command).expect("a string serializes"),
        serde_json::to_string(&args).expect("strings serialize")
    )
}

/// YAML for an HTTP floor upstream.
pub fn http_upstream(name: &str, addr: SocketAddr) -> String {
    format!(
        "  {name}:\n    url: \"http://{addr}/mcp\"\n    transport: \"streamable-http\"\n    required: true\n"
    )
}

async fn run(options: &Options) -> Res<()> {
    let fds = procs::raise_fd_limit();
    let exe = std::env::current_exe()?;
    let mcpmux = &options.mcpmux;
    if !mcpmux.is_file() {
        return Err(fail(format!(
            "no gateway binary at {}: build it with `cargo build --release --bin mcpmux`",
            mcpmux.display()
        )));
    }
    let machine = procs::machine(mcpmux);
    let scratch = procs::Scratch::new()?;
    let plan = &options.plan;
    let mut res = Results::default();
    let mut plan_fanout = plan.fanout.clone();
    let most = plan_fanout.iter().copied().max().unwrap_or(0) as u64;
    // Each stream is one connection of this process (and one of the gateway,
    // which raises its own limit).
    if most + 512 > fds {
        eprintln!("open-file limit {fds} is too low for {most} streams; fan-out limited");
        plan_fanout.retain(|n| (*n as u64) + 512 <= fds);
    }

    if options.runs("calls") {
        calls_part(options, &exe, &scratch, &mut res).await?;
    }
    if options.runs("catalog") {
        for round in 0..plan.catalog_rounds {
            eprintln!("catalog round {}/{}", round + 1, plan.catalog_rounds);
            catalog::round(mcpmux, &exe, &scratch, &plan.catalog, &mut res).await?;
        }
    }
    if options.runs("search") {
        for round in 0..plan.search_rounds {
            eprintln!("search round {}/{}", round + 1, plan.search_rounds);
            search::round(mcpmux, &exe, &scratch, &plan.search, &mut res).await?;
        }
    }
    if options.runs("fanout") {
        for round in 0..plan.fanout_rounds {
            for &n in &plan_fanout {
                eprintln!(
                    "fan-out round {}/{}, {n} streams",
                    round + 1,
                    plan.fanout_rounds
                );
                fanout::round(
                    mcpmux,
                    &exe,
                    &scratch,
                    n,
                    options.floor_threads,
                    fds,
                    &mut res,
                )
                .await?;
                // Both ends of each socket are this process's.
                if fanout::two_sets_fit(n, fds) {
                    fanout::raw_round(n, &mut res).await?;
                } else {
                    eprintln!(
                        "open-file limit {fds} is too low for {n} socket pairs; no raw reference"
                    );
                }
            }
        }
    }
    if options.runs("stall") {
        stall::run(
            mcpmux,
            &exe,
            &scratch,
            options.floor_threads,
            &plan.stall,
            plan.rounds,
            &mut res,
        )
        .await?;
    }

    let mut run_notes = vec![
        format!(
            "Per-call rounds: {}{}; {} sequential 2 KB calls and {} 32 KB calls per target per round; {:?} per throughput window; the HTTP floor has {}.",
            plan.rounds,
            if options.quick { " (--quick)" } else { "" },
            plan.calls_2k,
            plan.calls_32k,
            plan.window,
            if options.floor_threads <= 1 {
                "a current-thread runtime".to_owned()
            } else {
                format!("{} worker threads", options.floor_threads)
            }
        ),
        format!("load average at the end: {}", procs::load_average()),
    ];
    run_notes
        .push("The load client, the floor and the gateway share the machine's CPUs.".to_owned());
    if let Some((base, _)) = &options.baseline
        && options.runs("baseline")
    {
        if !base.is_file() {
            return Err(fail(format!("no baseline binary at {}", base.display())));
        }
        baseline::run(
            mcpmux,
            base,
            &exe,
            &scratch,
            options.floor_threads,
            plan,
            &mut res,
        )
        .await?;
    }
    let baseline_label = options.baseline.as_ref().map(|(_, l)| l.as_str());
    let tables = tables::all(&res, plan, &plan_fanout, baseline_label);
    let text = report::markdown(&machine, &run_notes, &tables);
    println!("{text}");
    if let Some(out) = &options.out {
        std::fs::write(out, &text)?;
        eprintln!("wrote {}", out.display());
    }
    Ok(())
}

/// The per-call part: one floor over HTTP, one gateway with that floor
/// (`fh`) and a stdio floor (`fs`); R interleaved rounds.
async fn calls_part(
    options: &Options,
    exe: &Path,
    scratch: &procs::Scratch,
    res: &mut Results,
) -> Res<()> {
    let plan = &options.plan;
    let (floor, floor_addr) = procs::floor_http(exe, 2, options.floor_threads).await?;
    let upstreams = format!(
        "{}{}",
        http_upstream("fh", floor_addr),
        stdio_upstream("fs", exe, 2)
    );
    let config = scratch.write("calls.yaml", &gateway_yaml(&upstreams))?;
    let gateway = procs::gateway(&options.mcpmux, &config).await?;
    let (proxy, proxy_addr) = procs::proxy(exe, floor_addr).await?;
    let outcome = async {
        procs::wait_ready(gateway.addr, gateway.spawned, Duration::from_secs(60)).await?;
        let stdio_floor = procs::children(gateway.proc.pid)
            .into_iter()
            .next()
            .ok_or_else(|| fail("the gateway has no stdio floor child"))?;
        let mut targets = vec![
            calls::Target {
                key: "direct",
                addr: floor_addr,
                tool: floor::ECHO.to_owned(),
                floor: floor.pid,
                gateway: None,
            },
            calls::Target {
                key: "http",
                addr: gateway.addr,
                tool: format!("fh__{}", floor::ECHO),
                floor: floor.pid,
                gateway: Some(gateway.proc.pid),
            },
            calls::Target {
                key: "stdio",
                addr: gateway.addr,
                tool: format!("fs__{}", floor::ECHO),
                floor: stdio_floor,
                gateway: Some(gateway.proc.pid),
            },
            calls::Target {
                key: "proxy",
                addr: proxy_addr,
                tool: floor::ECHO.to_owned(),
                floor: floor.pid,
                gateway: Some(proxy.pid),
            },
        ];
        if let Some(keep) = &options.targets {
            targets.retain(|t| keep.iter().any(|k| k == t.key));
        }
        for round in 1..=plan.rounds {
            eprintln!("per-call round {round}/{}", plan.rounds);
            // A failure says which round, measurement and target it hit.
            let at = |what: &str, key: &str| {
                failed_at(format!("per-call round {round}, {what}, target {key}"))
            };
            for t in &targets {
                calls::latency(t, 2048, "2k", plan.calls_2k, plan.warmup, true, res)
                    .await
                    .map_err(at("2 KB latency", t.key))?;
            }
            for t in &targets {
                let warmup = plan.warmup / 5;
                calls::latency(t, 32 * 1024, "32k", plan.calls_32k, warmup, false, res)
                    .await
                    .map_err(at("32 KB latency", t.key))?;
            }
            for &clients in &plan.clients {
                for t in &targets {
                    calls::throughput(t, clients, plan.window, res)
                        .await
                        .map_err(at(&format!("throughput, {clients} clients"), t.key))?;
                }
            }
            calls::initialize_cost(floor_addr, floor.pid, "direct", plan.inits, res)
                .await
                .map_err(at("initialize", "direct"))?;
            calls::initialize_cost(gateway.addr, gateway.proc.pid, "gw", plan.inits, res)
                .await
                .map_err(at("initialize", "http"))?;
        }
        Ok::<_, Error>(())
    }
    .await;
    gateway.proc.stop().await;
    proxy.stop().await;
    floor.stop().await;
    outcome
}
