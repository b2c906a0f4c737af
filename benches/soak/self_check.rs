//! The soak's own checks of its pure parts: the trend fit the flatness
//! verdict rests on, percentiles and the ledger's tokens. The soak binary
//! has no test harness (`harness = false`), so `cargo test --all-targets`
//! runs `main` without `--bench`, and `main` runs these instead of the
//! soak. A failed check panics, which fails that test run.

use crate::ledger;
use crate::record::Sample;
use crate::trend::{FDS, RSS, flatness, own_fds, percentile};

/// Runs every check and returns how many ran.
pub fn run() -> usize {
    let checks: [(&str, fn()); 8] = [
        (
            "a level series with flood spikes is flat",
            spikes_do_not_tilt,
        ),
        ("a steady climb is not flat", climb_is_caught),
        (
            "a climb hidden under noise is caught",
            noisy_climb_is_caught,
        ),
        ("a climb that faults reset is caught", sawtooth_is_caught),
        ("a falling or short series is flat", falling_and_short),
        ("percentiles by nearest rank", percentiles),
        ("own descriptors leave the connections out", own_descriptors),
        ("tokens are found in text", tokens),
    ];
    for (name, check) in checks {
        check();
        println!("soak self-check: {name}: ok");
    }
    checks.len()
}

/// Descriptors of a replica over `minutes`, one sample a second: `level`
/// plus `climb_per_min` per minute, a wobble of ±2, and, when `floods`,
/// 2-second floods of +350 at the given minutes.
fn fds(minutes: f64, level: f64, climb_per_min: f64, floods: &[f64]) -> Vec<(f64, f64)> {
    (0..(minutes * 60.0) as u64)
        .map(|s| {
            let t = s as f64;
            let wobble = [0.0, 2.0, -1.0, 1.0, -2.0][(s % 5) as usize];
            let flood = floods
                .iter()
                .any(|&m| (m * 60.0..m * 60.0 + 2.0).contains(&t));
            let v = level + climb_per_min * t / 60.0 + wobble + if flood { 350.0 } else { 0.0 };
            (t, v)
        })
        .collect()
}

fn spikes_do_not_tilt() {
    // The ten-minute run that a least-squares line failed: floods at 3.1
    // and 8.7 minutes on a level of 30.
    let points = fds(10.0, 30.0, 0.0, &[3.1, 8.7]);
    let t = flatness(&points, FDS);
    assert!(t.flat, "{t:?}");
    assert!(t.rise.abs() < 1.0, "{t:?}");
    // The same with the flood in the last bucket of a 2-minute run.
    let points = fds(2.0, 30.0, 0.0, &[1.9]);
    let t = flatness(&points, FDS);
    assert!(t.flat, "{t:?}");
}

fn climb_is_caught() {
    // One descriptor a minute for 30 minutes: 20 over the judged window.
    let points = fds(30.0, 30.0, 1.0, &[]);
    let t = flatness(&points, FDS);
    assert!(!t.flat, "{t:?}");
    assert!((t.rise - 20.0).abs() < 1.0, "{t:?}");
    assert!((t.slope_per_min - 1.0).abs() < 0.05, "{t:?}");
}

fn noisy_climb_is_caught() {
    // The same climb with a flood every three minutes still reads as one.
    let floods: Vec<f64> = (1..10).map(|k| k as f64 * 3.0 + 0.5).collect();
    let points = fds(30.0, 30.0, 1.0, &floods);
    let t = flatness(&points, FDS);
    assert!(!t.flat, "{t:?}");
    assert!((t.rise - 20.0).abs() < 2.0, "{t:?}");
}

fn sawtooth_is_caught() {
    // The legacy SSE leak as the committed report before its fix showed
    // it: RSS of 27 MB climbing 13 MB in each 5.5-minute round, given
    // back when the SSE upstream restarted, with a wobble of ±0.5 MB.
    let round = 5.5 * 60.0;
    let points: Vec<(f64, f64)> = (0..30 * 60)
        .map(|s| {
            let t = s as f64;
            let wobble = [0.0, 0.5, -0.3, 0.2, -0.5][s % 5];
            (t, 27.0 + 13.0 * ((t % round) / round) + wobble)
        })
        .collect();
    let t = flatness(&points, RSS);
    assert!(!t.flat, "{t:?}");
    assert!((t.slope_per_min - 13.0 / 5.5).abs() < 0.3, "{t:?}");
    // The same level with its wobble and no climb is flat.
    let level: Vec<(f64, f64)> = points
        .iter()
        .map(|&(t, _)| (t, 27.0 + [0.0, 0.5, -0.3, 0.2, -0.5][t as usize % 5]))
        .collect();
    let t = flatness(&level, RSS);
    assert!(t.flat && t.rise.abs() < 0.5, "{t:?}");
}

fn falling_and_short() {
    let points = fds(10.0, 200.0, -5.0, &[]);
    let t = flatness(&points, FDS);
    assert!(t.flat && t.rise < 0.0, "{t:?}");
    let t = flatness(&[(0.0, 1.0), (1.0, 500.0)], FDS);
    assert!(t.flat && t.rise == 0.0, "{t:?}");
    let t = flatness(&[(0.0, f64::NAN), (f64::INFINITY, 3.0)], FDS);
    assert!(t.flat, "{t:?}");
}

fn percentiles() {
    let sorted: Vec<u64> = (1..=100).collect();
    assert_eq!(percentile(&sorted, 50.0), 50.0);
    assert_eq!(percentile(&sorted, 99.0), 99.0);
    assert_eq!(percentile(&sorted, 100.0), 100.0);
    assert_eq!(percentile(&sorted, 0.0), 1.0);
    assert_eq!(percentile(&[], 50.0), 0.0);
    assert_eq!(percentile(&[7], 99.0), 7.0);
}

fn tokens() {
    let t = ledger::token(7, 42);
    assert_eq!(t, "t0007x000042");
    assert_eq!(ledger::tokens_in(&format!("Echo: {t}!")), vec![t.as_str()]);
    assert!(ledger::tokens_in("Echo: t12x3").is_empty());
}

fn own_descriptors() {
    let sample = |fds, connections| Sample {
        at_s: 0.0,
        replica: 0,
        pid: 1,
        rss_kb: 0,
        fds,
        tasks: None,
        sessions: None,
        children: 0,
        connections,
    };
    assert_eq!(own_fds(&sample(70, Some(40))), Some(30.0));
    assert_eq!(own_fds(&sample(70, None)), None);
    // Read a moment apart, the count may pass the descriptors.
    assert_eq!(own_fds(&sample(30, Some(31))), Some(0.0));
}
