//! The retry budget of one upstream: retries may add at most
//! [`RATIO`] of the requests of the last [`WINDOW`] (and at least
//! [`MIN_RETRIES`] in any window), so retries never multiply an outage.
//!
//! A sliding window of one-second buckets under a std mutex, touched once
//! per request and once per retry by the calling task.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How far back requests and retries are counted.
pub(crate) const WINDOW: Duration = Duration::from_secs(10);
/// Retries allowed per request of the window.
pub(crate) const RATIO: f64 = 0.2;
/// Retries allowed in a window however few requests it saw.
pub(crate) const MIN_RETRIES: u64 = 3;

const BUCKETS: usize = 10;

#[derive(Default, Clone, Copy)]
struct Bucket {
    /// Seconds since `start` this bucket counts.
    second: u64,
    requests: u64,
    retries: u64,
}

struct State {
    buckets: [Bucket; BUCKETS],
    exhausted: u64,
    retried: u64,
}

/// One upstream's retry budget.
pub(crate) struct RetryBudget {
    start: Instant,
    state: Mutex<State>,
}

impl Default for RetryBudget {
    fn default() -> Self {
        Self {
            start: Instant::now(),
            state: Mutex::new(State {
                buckets: [Bucket::default(); BUCKETS],
                exhausted: 0,
                retried: 0,
            }),
        }
    }
}

impl RetryBudget {
    fn with_bucket(&self, f: impl FnOnce(&mut State, usize, u64)) {
        let second = self.start.elapsed().as_secs();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let i = (second % BUCKETS as u64) as usize;
        if state.buckets[i].second != second {
            state.buckets[i] = Bucket {
                second,
                ..Bucket::default()
            };
        }
        f(&mut state, i, second);
    }

    /// Counts one request sent upstream.
    pub(crate) fn note_request(&self) {
        self.with_bucket(|state, i, _| state.buckets[i].requests += 1);
    }

    /// Takes one retry from the budget; false (and counted) when spent.
    pub(crate) fn try_spend(&self) -> bool {
        let mut allowed = false;
        self.with_bucket(|state, i, now| {
            let recent = state
                .buckets
                .iter()
                .filter(|b| now.saturating_sub(b.second) < BUCKETS as u64);
            let (requests, retries) =
                recent.fold((0, 0), |(q, r), b| (q + b.requests, r + b.retries));
            let budget = ((requests as f64 * RATIO) as u64).max(MIN_RETRIES);
            allowed = retries < budget;
            match allowed {
                true => {
                    state.buckets[i].retries += 1;
                    state.retried += 1;
                }
                false => state.exhausted += 1,
            }
        });
        allowed
    }

    /// Retries made, and retries refused because the budget was spent.
    pub(crate) fn counts(&self) -> (u64, u64) {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        (state.retried, state.exhausted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn retries_are_a_fraction_of_recent_requests() {
        let budget = RetryBudget::default();
        // Few requests: the minimum applies.
        for _ in 0..MIN_RETRIES {
            assert!(budget.try_spend());
        }
        assert!(!budget.try_spend());
        for _ in 0..50 {
            budget.note_request();
        }
        // 20% of 50 = 10, three of them spent.
        for _ in 0..7 {
            assert!(budget.try_spend());
        }
        assert!(!budget.try_spend());
        assert_eq!(budget.counts(), (10, 2));
        // The window slides: old requests and retries no longer count.
        tokio::time::advance(WINDOW + Duration::from_secs(1)).await;
        for _ in 0..MIN_RETRIES {
            assert!(budget.try_spend());
        }
        assert!(!budget.try_spend());
    }
}
