//! The soak run written out: `report.md` (what was sent and what came back,
//! the faults, latency per minute, each replica's resources and their trend,
//! the idle figures and the verifier's findings) beside the plots that
//! [`crate::plot`] draws, and a short summary for the terminal.

use std::fmt::{self, Write as _};
use std::path::Path;

use crate::record::{Run, Sample};
use crate::trend;

/// Creates `dir`, draws the plots into it and writes `dir/report.md`. A plot
/// that cannot be drawn (say, the font is missing) is a line in the report,
/// not an error.
pub fn write(run: &Run, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let plots = crate::plot::draw(run, dir).map_err(|e| e.to_string());
    let text = markdown(run, &plots).expect("writing to a String cannot fail");
    std::fs::write(dir.join("report.md"), text)
}

/// A few lines for the terminal: the verdict, the requests, the failures
/// and the checks that failed.
pub fn summary(run: &Run) -> String {
    let verdict = if run.passed() { "PASSED" } else { "FAILED" };
    let failures = || run.outcomes.iter().filter(|(o, _)| *o != "ok");
    let failed: Vec<&str> = run
        .findings
        .iter()
        .filter(|f| !f.passed)
        .map(|f| f.check.as_str())
        .collect();
    let checks = match (run.findings.len(), failed.len()) {
        (0, _) => "none ran".to_owned(),
        (n, 0) => format!("all {n} passed"),
        _ => format!("FAILED {}", failed.join(", ")),
    };
    format!(
        "soak {verdict}: {:.1} min of load, {} faults injected\n\
         requests: {} sent ({})\n\
         failures: {} of {} outcomes ({})\n\
         checks: {checks}",
        run.minutes,
        run.faults.len(),
        run.sent.values().sum::<u64>(),
        list(run.sent.iter().map(pair)),
        failures().map(|(_, n)| n).sum::<u64>(),
        run.outcomes.values().sum::<u64>(),
        list(failures().map(pair)),
    )
}

/// One row of a replica's resource table.
struct Metric {
    name: &'static str,
    value: fn(&Sample) -> Option<f64>,
    decimals: usize,
    /// How the flatness verdict judges the row; rows without
    /// one show the trend but no verdict.
    tolerance: Option<trend::Judge>,
}

const METRICS: [Metric; 7] = [
    Metric {
        name: "RSS (MB)",
        value: |s| Some(trend::rss_mb(s)),
        decimals: 1,
        tolerance: Some(trend::RSS),
    },
    Metric {
        name: "open fds",
        value: |s| Some(s.fds as f64),
        decimals: 0,
        tolerance: None,
    },
    Metric {
        name: "downstream connections",
        value: |s| s.connections.map(|n| n as f64),
        decimals: 0,
        tolerance: None,
    },
    Metric {
        name: "fds besides downstream connections",
        value: trend::own_fds,
        decimals: 0,
        tolerance: Some(trend::FDS),
    },
    Metric {
        name: "tokio tasks",
        value: |s| s.tasks.map(|t| t as f64),
        decimals: 0,
        tolerance: None,
    },
    Metric {
        name: "sessions",
        value: |s| s.sessions.map(|n| n as f64),
        decimals: 0,
        tolerance: None,
    },
    Metric {
        name: "children",
        value: |s| Some(s.children as f64),
        decimals: 0,
        tolerance: None,
    },
];

/// The text of `report.md`; `plots` is what drawing the plots gave.
fn markdown(run: &Run, plots: &Result<Vec<String>, String>) -> Result<String, fmt::Error> {
    let mut out = String::new();
    let verdict = if run.passed() { "PASSED" } else { "FAILED" };
    writeln!(out, "# Soak test: {verdict}\n")?;
    let slots = replica_slots(run);
    writeln!(
        out,
        "The load ran {:.1} minutes against {} replica slot(s); {} resource samples.\n",
        run.minutes,
        slots.len(),
        run.samples.len()
    )?;

    writeln!(out, "## Machine\n")?;
    if run.machine.is_empty() {
        writeln!(out, "Not recorded.")?;
    }
    for line in &run.machine {
        writeln!(out, "- {line}")?;
    }

    writeln!(out, "\n## Requests sent\n")?;
    let mut rows: Vec<_> = run
        .sent
        .iter()
        .map(|(k, n)| vec![cell(k), n.to_string()])
        .collect();
    rows.push(vec![
        "**total**".into(),
        run.sent.values().sum::<u64>().to_string(),
    ]);
    table(&mut out, "lr", &["kind", "sent"], rows, "")?;

    writeln!(out, "\n## Outcomes\n")?;
    let outcomes: u64 = run.outcomes.values().sum();
    let share = |n: u64| format!("{:.3} %", 100.0 * n as f64 / outcomes.max(1) as f64);
    let mut rows: Vec<_> = run
        .outcomes
        .iter()
        .map(|(o, n)| vec![cell(o), n.to_string(), share(*n)])
        .collect();
    rows.push(vec![
        "**total**".into(),
        outcomes.to_string(),
        String::new(),
    ]);
    table(&mut out, "lrr", &["outcome", "count", "share"], rows, "")?;

    writeln!(out, "\n## Faults injected\n")?;
    let rows = run
        .faults
        .iter()
        .map(|f| vec![mmss(f.at_s), cell(&f.what)])
        .collect();
    table(&mut out, "rl", &["at (mm:ss)", "what"], rows, "None.")?;

    writeln!(out, "\n## Latency per minute\n")?;
    let ms = |us: f64| format!("{:.2}", us / 1000.0);
    let rows = run
        .latency
        .iter()
        .map(|m| {
            vec![
                m.minute.to_string(),
                m.calls.to_string(),
                ms(m.p50_us),
                ms(m.p99_us),
            ]
        })
        .collect();
    let heads = ["minute", "calls", "p50 (ms)", "p99 (ms)"];
    table(&mut out, "rrrr", &heads, rows, "No calls timed.")?;

    writeln!(out, "\n## Replicas\n")?;
    writeln!(
        out,
        "Load start and end are the first and last samples taken while the load ran. The trend \
         is read through the medians of twentieths of the last two thirds of the load (at least \
         {} s each), so a flood's spike of a second or two cannot tilt it. Its slope is the \
         Theil–Sen slope through those medians and, for RSS, the median slope between neighbouring \
         ones if larger, which a climb that faults reset now and then cannot hide from; the rise \
         is that slope over the window. Flat means it rose at most \
         max({} MB, {:.0} % of the mean) for RSS and max({}, {:.0} % of the mean) for the fds \
         besides downstream connections (how many connections a replica holds follows how \
         HAProxy spreads the clients; that they are all let go shows at idle).",
        trend::MIN_BUCKET_S,
        trend::RSS.abs,
        trend::RSS.rel * 100.0,
        trend::FDS.abs,
        trend::FDS.rel * 100.0,
    )?;
    for slot in slots {
        replica_table(&mut out, run, slot)?;
    }

    writeln!(out, "\n## Idle\n")?;
    let rows = run
        .idle
        .iter()
        .map(|(what, before, after)| vec![cell(what), before.to_string(), after.to_string()])
        .collect();
    let heads = ["what", "before load", "after load"];
    table(&mut out, "lrr", &heads, rows, "No idle figures.")?;

    writeln!(out, "\n## Verifier findings\n")?;
    let result = |passed| if passed { "passed" } else { "**FAILED**" };
    let rows = run
        .findings
        .iter()
        .map(|f| vec![cell(&f.check), result(f.passed).into(), cell(&f.detail)])
        .collect();
    let none = "No checks ran, so the run cannot pass.";
    table(&mut out, "lll", &["check", "result", "detail"], rows, none)?;

    writeln!(out, "\n## Plots\n")?;
    match plots {
        Ok(files) if files.is_empty() => writeln!(out, "No data to plot.")?,
        Ok(files) => {
            for file in files {
                let name = file.trim_end_matches(".png");
                writeln!(out, "![{name}]({file})\n")?;
            }
        }
        Err(e) => writeln!(out, "Plots could not be drawn: {}", e.replace('\n', " "))?,
    }
    Ok(out)
}

/// The head of a replica's resource table.
const REPLICA_HEAD: &str = "| | load start | load end | slope /min | rise | trend |\n\
                            | --- | ---: | ---: | ---: | ---: | --- |";

/// One replica slot's table: each metric at load start and at load end
/// (whichever process the slot had then), and its trend over the last two
/// thirds of the load of the process that ran longest during it.
fn replica_table(out: &mut String, run: &Run, slot: usize) -> fmt::Result {
    let mut pids: Vec<u32> = Vec::new();
    for s in run.samples.iter().filter(|s| s.replica == slot) {
        if !pids.contains(&s.pid) {
            pids.push(s.pid);
        }
    }
    let longest = trend::longest_process(run, slot);
    let pids_text = list(pids.iter().map(u32::to_string));
    writeln!(
        out,
        "\n### Replica {slot}\n\nProcess ids in order: {pids_text}."
    )?;
    if let (Some(pid), 2..) = (longest, pids.len()) {
        writeln!(
            out,
            "The trend is that of pid {pid}, which ran longest under load."
        )?;
    }
    writeln!(out, "\n{REPLICA_HEAD}")?;
    for metric in &METRICS {
        let points = trend::load_series(run, slot, None, metric.value);
        let first = points.iter().min_by(|a, b| a.0.total_cmp(&b.0));
        let last = points.iter().max_by(|a, b| a.0.total_cmp(&b.0));
        let (Some(&(_, start)), Some(&(_, end))) = (first, last) else {
            writeln!(out, "| {} | – | – | – | – | no samples |", metric.name)?;
            continue;
        };
        let judged = trend::load_series(run, slot, longest, metric.value);
        let judge = metric.tolerance.unwrap_or(trend::Judge {
            abs: f64::INFINITY,
            rel: 0.0,
            steps: false,
        });
        let t = trend::flatness(&judged, judge);
        let verdict = match metric.tolerance {
            None => "–",
            Some(_) if t.flat => "flat",
            Some(_) => "**GROWING**",
        };
        let (d, rise_d) = (metric.decimals, metric.decimals.max(1));
        writeln!(
            out,
            "| {} | {start:.d$} | {end:.d$} | {:+.2} | {:+.rise_d$} | {verdict} |",
            metric.name, t.slope_per_min, t.rise
        )?;
    }
    Ok(())
}

/// The replica slots that have samples, ascending.
fn replica_slots(run: &Run) -> Vec<usize> {
    let mut slots: Vec<usize> = run.samples.iter().map(|s| s.replica).collect();
    slots.sort_unstable();
    slots.dedup();
    slots
}

/// Seconds as `mm:ss`, with a minus sign before the load started.
fn mmss(seconds: f64) -> String {
    let sign = if seconds < 0.0 { "-" } else { "" };
    let total = seconds.abs().round() as u64;
    format!("{sign}{:02}:{:02}", total / 60, total % 60)
}

/// A Markdown table: `align` has an `l` or an `r` per column; with no rows,
/// the line `empty` instead.
fn table(
    out: &mut String,
    align: &str,
    heads: &[&str],
    rows: Vec<Vec<String>>,
    empty: &str,
) -> fmt::Result {
    if rows.is_empty() {
        return writeln!(out, "{empty}");
    }
    writeln!(out, "| {} |", heads.join(" | "))?;
    let rule = align.chars().map(|a| if a == 'r' { "---:" } else { "---" });
    writeln!(out, "| {} |", rule.collect::<Vec<_>>().join(" | "))?;
    for row in rows {
        writeln!(out, "| {} |", row.join(" | "))?;
    }
    Ok(())
}

/// Text made safe for a Markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', "<br>")
}

/// Items separated by commas, or `none`.
fn list(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join(", ")
    }
}

/// A count as `what n`.
fn pair((what, n): (&String, &u64)) -> String {
    format!("{what} {n}")
}
