//! Whether a series stays flat under load, and percentiles.
//!
//! A soak run passes its resource checks when RSS and open file descriptors
//! stop growing once the gateway has warmed up. [`flatness`] looks at the last
//! two thirds of a series (the first third is warm-up: caches, pools and
//! allocator arenas filling), fits a slope that short fault spikes cannot
//! tilt and that a fault resetting a leak now and then cannot hide, and
//! calls the series flat when it rises no more than a tolerance over that
//! window. The
//! report and the verifier judge with the same function and the same
//! tolerances below, so they cannot disagree.

use std::collections::BTreeMap;

use crate::record::{Run, Sample};

/// How a series is judged flat: it may rise `abs` (in its own unit) over
/// the judged window, or `rel` of its mean there, whichever is larger; with
/// `steps`, the slope between neighbouring medians counts too (see
/// [`flatness`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Judge {
    pub abs: f64,
    pub rel: f64,
    pub steps: bool,
}

/// RSS in MB. Its medians move by fractions of a MB, so the median step
/// between neighbours is the climb's wherever there is one.
pub const RSS: Judge = Judge {
    abs: 8.0,
    rel: 0.10,
    steps: true,
};
/// The replica's own descriptors ([`own_fds`]): a few dozen, in whole
/// numbers, each minute's median wandering by one or two as faults come
/// and go. The median step between neighbours of such a series is half a
/// descriptor too often, which over twenty buckets reads as a climb of ten,
/// so they are judged by the overall slope alone.
pub const FDS: Judge = Judge {
    abs: 8.0,
    rel: 0.10,
    steps: false,
};

/// The fitted trend of the last two thirds of a series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trend {
    /// Slope of the fitted line, in value units per minute.
    pub slope_per_min: f64,
    /// Fitted value at the end of the window minus the fitted value at its start.
    pub rise: f64,
    /// Mean of the values in the window.
    pub mean: f64,
    /// Whether `rise` is within tolerance (a falling series is flat).
    pub flat: bool,
}

/// Judges whether the last two thirds (by time span) of `points`, given
/// as `(seconds, value)` in any order, are flat: the fitted rise over that
/// window is at most `judge.abs.max(judge.rel * mean)`, with both
/// tolerances in the units of the values.
///
/// The fit has to see through the faults: a connection flood holds a few
/// hundred descriptors for a second or two, and a least-squares line
/// through one such spike near the end of the window tilts by more than a
/// leak would. So the window is cut into buckets (a twentieth of it, at
/// least [`MIN_BUCKET_S`]), and each bucket is read as its median. A
/// spike shorter than half a bucket does not move its median; a steady
/// climb moves every one.
///
/// The slope is the larger of two robust estimates through the medians
/// (the second only with `judge.steps`):
/// - **overall**: the Theil–Sen slope, the median of the slopes between
///   every pair of medians. It sees a steady climb, and a climb in steps.
/// - **step**: the median of the slopes between neighbouring medians. It
///   sees a climb that a fault resets now and then (a sawtooth: memory
///   held by an upstream's link until that upstream restarts), which the
///   overall slope reads as level because the pairs across a reset slope
///   down. Most neighbours lie between two resets, so their median slope
///   is the climb's.
///
/// The rise is that slope over the window's length: what the series would
/// have gained had nothing reset it.
///
/// Points with a non-finite coordinate are ignored. A window of fewer than
/// three points, or fewer than two buckets, is flat with slope and rise 0.
pub fn flatness(points: &[(f64, f64)], judge: Judge) -> Trend {
    let finite = || {
        points
            .iter()
            .filter(|(t, v)| t.is_finite() && v.is_finite())
    };
    let (first, last) = finite().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &(t, _)| {
        (lo.min(t), hi.max(t))
    });
    let from = first + (last - first) / 3.0;
    let window: Vec<(f64, f64)> = finite().filter(|&&(t, _)| t >= from).copied().collect();

    let n = window.len() as f64;
    let mean = if window.is_empty() {
        0.0
    } else {
        window.iter().map(|&(_, v)| v).sum::<f64>() / n
    };
    let level = Trend {
        slope_per_min: 0.0,
        rise: 0.0,
        mean,
        flat: true,
    };
    if window.len() < 3 {
        return level;
    }
    let medians = bucket_medians(&window, from, last);
    if medians.len() < 2 {
        return level;
    }
    let overall = theil_sen_slope(&medians);
    let slope = match judge.steps {
        true => overall.max(step_slope(&medians)),
        false => overall,
    };
    let rise = slope * (last - from);
    Trend {
        slope_per_min: slope * 60.0,
        rise,
        mean,
        flat: rise <= judge.abs.max(judge.rel * mean),
    }
}

/// The narrowest bucket [`flatness`] reads as one median, in seconds.
pub const MIN_BUCKET_S: f64 = 10.0;

/// `(bucket middle, median value)` of each non-empty bucket of `window`
/// (which spans `from..=to`), in time order.
fn bucket_medians(window: &[(f64, f64)], from: f64, to: f64) -> Vec<(f64, f64)> {
    let width = ((to - from) / 20.0).max(MIN_BUCKET_S);
    let mut buckets: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for &(t, v) in window {
        let index = ((t - from) / width).floor().max(0.0) as u64;
        buckets.entry(index).or_default().push(v);
    }
    buckets
        .into_iter()
        .map(|(index, mut values)| {
            values.sort_by(f64::total_cmp);
            let middle = from + (index as f64 + 0.5) * width;
            (middle, median_of_sorted(&values))
        })
        .collect()
}

/// The median slope between neighbours of `points` (in time order).
fn step_slope(points: &[(f64, f64)]) -> f64 {
    let mut slopes: Vec<f64> = points
        .windows(2)
        .filter(|w| w[1].0 != w[0].0)
        .map(|w| (w[1].1 - w[0].1) / (w[1].0 - w[0].0))
        .collect();
    slopes.sort_by(f64::total_cmp);
    median_of_sorted(&slopes)
}

/// The median slope between every pair of `points` with distinct times.
fn theil_sen_slope(points: &[(f64, f64)]) -> f64 {
    let mut slopes = Vec::new();
    for (i, &(t1, v1)) in points.iter().enumerate() {
        for &(t2, v2) in &points[i + 1..] {
            if t2 != t1 {
                slopes.push((v2 - v1) / (t2 - t1));
            }
        }
    }
    slopes.sort_by(f64::total_cmp);
    median_of_sorted(&slopes)
}

/// The median of an ascending slice (the mean of the middle two for an
/// even length); 0.0 when empty.
fn median_of_sorted(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// The `p`th percentile (`p` in percent, 0 to 100) of an ascending slice by
/// the nearest-rank method; 0.0 when the slice is empty.
pub fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let n = sorted.len();
    // Nearest rank: the smallest rank r (1-based) with r >= p/100 * n.
    let rank = (p / 100.0 * n as f64).ceil();
    let index = if rank.is_nan() || rank < 1.0 {
        0
    } else {
        (rank as usize).min(n) - 1
    };
    sorted[index] as f64
}

/// When the load ended, in seconds since it started: `run.minutes`, or the
/// last sample's time when the run length is unknown.
pub fn load_end_s(run: &Run) -> f64 {
    if run.minutes > 0.0 {
        run.minutes * 60.0
    } else {
        run.samples.iter().map(|s| s.at_s).fold(0.0, f64::max)
    }
}

/// One replica slot's `(seconds, value)` points while the load ran
/// (`0 <= at_s <= load_end_s`), in sample order, of the process `pid` or,
/// with `None`, of every process the slot had; samples for which `value`
/// gives `None` are left out. Feed it to [`flatness`].
pub fn load_series(
    run: &Run,
    replica: usize,
    pid: Option<u32>,
    value: impl Fn(&Sample) -> Option<f64>,
) -> Vec<(f64, f64)> {
    let end = load_end_s(run);
    run.samples
        .iter()
        .filter(|s| s.replica == replica && pid.is_none_or(|p| p == s.pid))
        .filter(|s| (0.0..=end).contains(&s.at_s))
        .filter_map(|s| value(s).map(|v| (s.at_s, v)))
        .collect()
}

/// The process of a replica slot that ran longest under load (by the time
/// between its first and last sample then): the one whose trend tells, when
/// the slot's process was restarted.
pub fn longest_process(run: &Run, replica: usize) -> Option<u32> {
    let end = load_end_s(run);
    let mut spans: BTreeMap<u32, (f64, f64)> = BTreeMap::new();
    for s in run
        .samples
        .iter()
        .filter(|s| s.replica == replica && (0.0..=end).contains(&s.at_s))
    {
        let span = spans.entry(s.pid).or_insert((s.at_s, s.at_s));
        *span = (span.0.min(s.at_s), span.1.max(s.at_s));
    }
    let length = |(from, to): (f64, f64)| to - from;
    spans
        .into_iter()
        .max_by(|a, b| length(a.1).total_cmp(&length(b.1)))
        .map(|(pid, _)| pid)
}

/// RSS of a sample in MB (1 MB = 1024 KiB), the unit of [`RSS`]'s tolerance.
pub fn rss_mb(sample: &Sample) -> f64 {
    sample.rss_kb as f64 / 1024.0
}

/// The descriptors a replica holds for itself: all of them but its open
/// downstream connections, which follow how HAProxy spreads the clients
/// (a restarted replica wins its share back over minutes) and a flood's
/// hundreds. `None` when the connection count could not be read. Whether
/// the connections themselves are let go shows at idle, where every
/// descriptor is counted.
pub fn own_fds(sample: &Sample) -> Option<f64> {
    let connections = sample.connections?;
    Some(sample.fds.saturating_sub(connections) as f64)
}
