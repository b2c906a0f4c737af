//! Per-upstream rate limiting of what an upstream writes that is not MCP:
//! stderr lines, and stdout lines that are not JSON-RPC.
//!
//! One [`NoiseFilter`] per upstream, shared by its stderr drain and its
//! connection's dispatch (and kept across restarts, so its count only
//! grows). Lines within the quota are logged; the rest are counted and
//! dropped without being formatted, so a flooding child is drained at the
//! speed of its pipe and never at the speed of the log. The next line
//! logged after a suppression says how many were dropped.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

/// Lines per second logged per upstream, after a burst of [`BURST`].
pub(crate) const LINES_PER_SECOND: u32 = 100;
pub(crate) const BURST: u32 = 200;

/// The quota of one upstream's noise.
pub(crate) struct NoiseFilter {
    limiter: DefaultDirectRateLimiter,
    /// Lines dropped since the last one logged.
    pending: AtomicU64,
    /// Lines dropped in the upstream's whole life, for `/metrics`.
    total: AtomicU64,
}

impl Default for NoiseFilter {
    fn default() -> Self {
        let per_second = NonZeroU32::new(LINES_PER_SECOND).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(BURST).unwrap_or(NonZeroU32::MIN);
        Self {
            limiter: RateLimiter::direct(Quota::per_second(per_second).allow_burst(burst)),
            pending: AtomicU64::new(0),
            total: AtomicU64::new(0),
        }
    }
}

impl NoiseFilter {
    /// Whether to log the next line: `Some(n)` with the lines suppressed
    /// since the last one logged, or `None` to drop it (counted).
    pub(crate) fn admit(&self) -> Option<u64> {
        match self.limiter.check() {
            Ok(()) => Some(self.pending.swap(0, Ordering::Relaxed)),
            Err(_) => {
                self.pending.fetch_add(1, Ordering::Relaxed);
                self.total.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Lines suppressed so far.
    pub(crate) fn suppressed(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_cut_to_the_burst_and_counted() {
        let filter = NoiseFilter::default();
        let admitted = (0..10_000).filter(|_| filter.admit().is_some()).count();
        // The burst, plus whatever the quota refilled while the loop ran.
        assert!(admitted >= BURST as usize, "{admitted}");
        assert!(admitted < 10_000 / 2, "{admitted}");
        assert_eq!(filter.suppressed(), 10_000 - admitted as u64);
    }
}
