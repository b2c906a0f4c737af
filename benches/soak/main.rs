//! The soak: a day in production, compressed. `scripts/soak.sh --minutes N`
//! builds this binary and runs it with `--bench`. It starts the rig (Redis,
//! two replicas behind the shipped HAProxy config, upstreams of every
//! transport), reads each replica idle, runs the load of both eras with the
//! fault schedule for N minutes, waits for the replicas to be idle again,
//! verifies the ledger and writes the report with its plots. It exits 0
//! only when every check of the verifier passed. Loopback only; it stops by
//! itself.

mod faults;
mod ledger;
mod load;
mod plot;
mod record;
mod report;
mod rig;
mod sample;
mod self_check;
mod trend;
mod verify;
mod wire;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// An error with `message`.
pub fn fail(message: impl Into<String>) -> Box<dyn std::error::Error + Send + Sync> {
    message.into().into()
}

/// The command line.
struct Options {
    minutes: f64,
    clients: usize,
    out: PathBuf,
    mcpmux: PathBuf,
    fixture: PathBuf,
}

impl Options {
    fn parse(args: &[String]) -> Res<Options> {
        let value = |name: &str| {
            args.iter()
                .position(|a| a == name)
                .and_then(|i| args.get(i + 1))
        };
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let minutes: f64 = match value("--minutes") {
            Some(m) => m
                .parse()
                .map_err(|_| fail(format!("--minutes {m}: not a number")))?,
            None => {
                return Err(fail(
                    "usage: soak --bench --minutes N [--clients C] [--out DIR] [--mcpmux BIN] [--fixture BIN]",
                ));
            }
        };
        if !(0.5..=24.0 * 60.0).contains(&minutes) {
            return Err(fail("--minutes: from 0.5 to 1440"));
        }
        Ok(Options {
            minutes,
            clients: match value("--clients") {
                Some(c) => c
                    .parse()
                    .map_err(|_| fail(format!("--clients {c}: not a number")))?,
                None => 200,
            },
            out: value("--out").map_or_else(|| root.join("target/soak"), PathBuf::from),
            mcpmux: value("--mcpmux")
                .map_or_else(|| root.join("target/release/mcpmux"), PathBuf::from),
            fixture: value("--fixture")
                .map_or_else(|| root.join("target/release/mcpmux-fixture"), PathBuf::from),
        })
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench") {
        // `cargo test` runs this binary without `--bench`: check the pure
        // parts instead of soaking.
        let checks = self_check::run();
        println!(
            "soak: {checks} self-checks passed; the soak itself runs with --bench (scripts/soak.sh --minutes N)"
        );
        return ExitCode::SUCCESS;
    }
    let options = match Options::parse(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("soak: {e}");
            return ExitCode::from(64);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("the tokio runtime starts");
    let outcome = runtime.block_on(soak(&options));
    runtime.shutdown_timeout(Duration::from_secs(5));
    match outcome {
        Ok(run) => {
            println!("{}", report::summary(&run));
            println!("report: {}", options.out.join("report.md").display());
            match run.passed() {
                true => ExitCode::SUCCESS,
                false => ExitCode::FAILURE,
            }
        }
        Err(e) => {
            eprintln!("soak failed: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn soak(options: &Options) -> Res<record::Run> {
    let programs = rig::Programs {
        mcpmux: options.mcpmux.clone(),
        fixture: options.fixture.clone(),
        interop: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop"),
    };
    // The parts' logs and records stay out of the report's folder (which
    // may be under docs/), in the build's own.
    let work = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/soak-work");
    let _ = std::fs::remove_dir_all(&work);
    for old in [
        "report.md",
        "rss.png",
        "fds.png",
        "tasks.png",
        "latency.png",
        "latency-p50.png",
        "latency-p99.png",
    ] {
        let _ = std::fs::remove_file(options.out.join(old));
    }
    println!(
        "soak: starting Redis, HAProxy, 2 replicas and the upstreams (logs in {})",
        work.display()
    );
    let rig = rig::Rig::start(programs, work.clone()).await?;
    let (pids, bases, front) = (
        rig.pids.clone(),
        vec![rig.replica_base(0), rig.replica_base(1)],
        rig.front.clone(),
    );
    let idle_before = verify::settle_idle(&pids, &bases, None).await?;

    let started = Instant::now();
    let until = started + Duration::from_secs_f64(options.minutes * 60.0);
    let ledger = Arc::new(ledger::Ledger::new(started));
    let samples = Arc::new(Mutex::new(Vec::new()));
    let ids = Arc::new(Mutex::new(std::collections::HashMap::new()));
    let faults = Arc::new(Mutex::new(Vec::new()));
    let stop = tokio_util::sync::CancellationToken::new();
    let sampler = tokio::spawn(sample::run(
        pids.clone(),
        bases.clone(),
        started,
        0.0,
        samples.clone(),
        ids.clone(),
        stop.clone(),
    ));
    println!(
        "soak: {} clients for {} minutes through {front}",
        options.clients, options.minutes
    );
    let rig = Arc::new(tokio::sync::Mutex::new(rig));
    let schedule = tokio::spawn(faults::run(
        rig.clone(),
        ledger.clone(),
        until,
        faults.clone(),
    ));
    let url = format!("{front}/mcp");
    let plan = Arc::new(load::Plan {
        watched: load::listed_uri(&url).await?,
        url,
        clients: options.clients,
        until,
    });
    load::run(plan, ledger.clone()).await;
    let _ = schedule.await;
    let load_ended_s = ledger.now();
    println!("soak: load ended after {load_ended_s:.0} s; waiting for the replicas to be idle");
    let idle_after = verify::settle_idle(&pids, &bases, Some(&idle_before)).await;
    stop.cancel();
    let _ = sampler.await;

    let faults = faults.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let samples = samples.lock().unwrap_or_else(|e| e.into_inner()).clone();
    std::fs::write(work.join("samples.csv"), record::samples_csv(&samples))?;
    let records = verify::records(&work)?;
    let mut findings = ledger.verify(&records, &faults);
    findings.extend(verify::idle_findings(&idle_before, &idle_after));
    // Judged over the window the report's trends use (see trend::load_end_s),
    // so the two cannot disagree.
    findings.extend(verify::flat_findings(&samples, options.minutes * 60.0));
    let (sent, outcomes) = ledger.tallies();
    let run = record::Run {
        minutes: options.minutes,
        machine: verify::machine(),
        sent,
        outcomes,
        faults,
        samples,
        latency: verify::latency_minutes(&ledger.latencies(|_| true)),
        latency_by: latency_by_replica(&ledger, &ids, bases.len()),
        findings,
        idle: verify::idle_table(&idle_before, idle_after.as_ref().ok()),
    };
    report::write(&run, &options.out)?;
    drop(rig);
    Ok(run)
}

/// Latency per minute of the calls of each replica slot's sessions (by the
/// replica that issued the session, `ids` mapping replica ids to slots),
/// then of the stateless calls, which HAProxy balances one by one.
fn latency_by_replica(
    ledger: &ledger::Ledger,
    ids: &Mutex<std::collections::HashMap<String, usize>>,
    slots: usize,
) -> Vec<(String, Vec<record::LatencyMinute>)> {
    let ids = ids.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let slot_of = |replica: Option<&str>| replica.and_then(|r| ids.get(r).copied());
    let mut by = Vec::new();
    for slot in 0..slots {
        let latencies = ledger.latencies(|r| slot_of(r) == Some(slot));
        by.push((
            format!("replica {slot}"),
            verify::latency_minutes(&latencies),
        ));
    }
    let stateless = ledger.latencies(|r| r.is_none());
    by.push(("stateless".to_owned(), verify::latency_minutes(&stateless)));
    by
}
