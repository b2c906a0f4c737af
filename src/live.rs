//! Live figures for the operator's page (`/ui`): calls, errors and a
//! latency histogram per upstream and item (tool, prompt or URI).
//!
//! Recording is a few relaxed atomic adds under a shared read lock of a
//! two-level map (`upstream` → `item` → [`Figures`]), keyed by `&str`, so a
//! call that hits an existing entry allocates nothing. The page's event
//! stream samples the cumulative counters once a second and turns the
//! difference into calls per second, an error rate and p50/p99.
//!
//! Bounded: at most [`MAX_ITEMS`] items per upstream are kept apart; calls
//! to further items are counted under [`OTHER`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dashmap::DashMap;

use crate::hashing::RandomState;

/// Items per upstream with figures of their own.
pub(crate) const MAX_ITEMS: usize = 1024;
/// The item that counts calls past [`MAX_ITEMS`].
pub(crate) const OTHER: &str = "(other)";
/// Latency buckets: bucket `i` holds calls that took less than
/// `2^i * 100 µs` (the last one: any longer).
pub(crate) const BUCKETS: usize = 20;

/// Cumulative counters of one (upstream, item).
#[derive(Default)]
pub(crate) struct Figures {
    calls: AtomicU64,
    errors: AtomicU64,
    buckets: [AtomicU64; BUCKETS],
}

/// A copy of one [`Figures`] at a moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sample {
    pub upstream: Arc<str>,
    pub item: Arc<str>,
    pub calls: u64,
    pub errors: u64,
    pub buckets: [u64; BUCKETS],
}

/// Every upstream's figures.
#[derive(Default)]
pub(crate) struct Live {
    by_upstream: DashMap<Arc<str>, DashMap<Arc<str>, Figures, RandomState>, RandomState>,
}

fn bucket_of(elapsed: Duration) -> usize {
    let units = elapsed.as_micros() / 100;
    // 0 for < 100 µs, 1 for < 200 µs, 2 for < 400 µs, ...
    let index = (u128::BITS - units.leading_zeros()) as usize;
    index.min(BUCKETS - 1)
}

/// The upper bound of bucket `index`, in milliseconds.
pub(crate) fn bucket_ms(index: usize) -> f64 {
    0.1 * f64::from(1u32 << index.min(30))
}

impl Live {
    /// Counts one finished call.
    pub(crate) fn record(&self, upstream: &str, item: &str, ok: bool, elapsed: Duration) {
        let bucket = bucket_of(elapsed);
        let add = |f: &Figures| {
            f.calls.fetch_add(1, Ordering::Relaxed);
            if !ok {
                f.errors.fetch_add(1, Ordering::Relaxed);
            }
            f.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        };
        if let Some(items) = self.by_upstream.get(upstream) {
            if let Some(figures) = items.get(item) {
                return add(&figures);
            }
            let key: Arc<str> = if items.len() >= MAX_ITEMS {
                OTHER.into()
            } else {
                item.into()
            };
            return add(&items.entry(key).or_default());
        }
        let items = self.by_upstream.entry(upstream.into()).or_default();
        add(&items.entry(item.into()).or_default());
    }

    /// Every (upstream, item)'s counters now, sorted by upstream and item.
    pub(crate) fn sample(&self) -> Vec<Sample> {
        let mut out = Vec::new();
        for upstream in &self.by_upstream {
            for item in upstream.value() {
                let f = item.value();
                out.push(Sample {
                    upstream: upstream.key().clone(),
                    item: item.key().clone(),
                    calls: f.calls.load(Ordering::Relaxed),
                    errors: f.errors.load(Ordering::Relaxed),
                    buckets: std::array::from_fn(|i| f.buckets[i].load(Ordering::Relaxed)),
                });
            }
        }
        out.sort_by(|a, b| (&a.upstream, &a.item).cmp(&(&b.upstream, &b.item)));
        out
    }
}

/// The figures of one interval: the difference of two samples.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Rates {
    pub calls: u64,
    pub errors: u64,
    pub buckets: Vec<u64>,
}

impl Rates {
    /// `now - before` (`before` absent: everything in `now`).
    pub(crate) fn between(now: &Sample, before: Option<&Sample>) -> Rates {
        let zero = [0; BUCKETS];
        let (calls, errors, buckets) =
            before.map_or((0, 0, &zero), |b| (b.calls, b.errors, &b.buckets));
        Rates {
            calls: now.calls.saturating_sub(calls),
            errors: now.errors.saturating_sub(errors),
            buckets: now
                .buckets
                .iter()
                .zip(buckets)
                .map(|(n, b)| n.saturating_sub(*b))
                .collect(),
        }
    }

    /// Adds another interval's figures (an upstream's total).
    pub(crate) fn add(&mut self, other: &Rates) {
        self.calls += other.calls;
        self.errors += other.errors;
        self.buckets.resize(BUCKETS, 0);
        for (mine, theirs) in self.buckets.iter_mut().zip(&other.buckets) {
            *mine += theirs;
        }
    }

    /// The latency (ms, a bucket's upper bound) under which `q` of the
    /// calls finished; none without calls.
    pub(crate) fn quantile_ms(&self, q: f64) -> Option<f64> {
        let total: u64 = self.buckets.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(bucket_ms(i));
            }
        }
        Some(bucket_ms(BUCKETS - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_double_from_a_tenth_of_a_millisecond() {
        assert_eq!(bucket_of(Duration::from_micros(50)), 0);
        assert_eq!(bucket_of(Duration::from_micros(150)), 1);
        assert_eq!(bucket_of(Duration::from_micros(350)), 2);
        assert_eq!(bucket_of(Duration::from_secs(3600)), BUCKETS - 1);
        assert!((bucket_ms(2) - 0.4).abs() < 1e-9);
    }

    #[test]
    fn samples_give_rates_and_quantiles() {
        let live = Live::default();
        let first = live.sample();
        assert!(first.is_empty());
        for _ in 0..98 {
            live.record("a", "t", true, Duration::from_micros(50));
        }
        live.record("a", "t", false, Duration::from_millis(30));
        live.record("a", "t", false, Duration::from_millis(30));
        live.record("b", "u", true, Duration::from_millis(1));
        let now = live.sample();
        assert_eq!(now.len(), 2);
        let rates = Rates::between(&now[0], None);
        assert_eq!((rates.calls, rates.errors), (100, 2));
        assert_eq!(rates.quantile_ms(0.5), Some(0.1));
        assert!(rates.quantile_ms(0.99).unwrap() >= 30.0);
        let later = live.sample();
        assert_eq!(Rates::between(&later[0], Some(&now[0])).calls, 0);
        assert_eq!(Rates::default().quantile_ms(0.5), None);
    }

    #[test]
    fn items_past_the_cap_share_one_entry() {
        let live = Live::default();
        for i in 0..MAX_ITEMS + 10 {
            live.record("a", &format!("t{i}"), true, Duration::ZERO);
        }
        let sample = live.sample();
        assert_eq!(sample.len(), MAX_ITEMS + 1);
        let other = sample.iter().find(|s| &*s.item == OTHER).unwrap();
        assert_eq!(other.calls, 10);
    }
}
