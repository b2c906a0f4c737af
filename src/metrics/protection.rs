//! The upstream protection metrics: slots in flight and queued, the
//! circuit breaker's state, rejections by reason and retries. Filled from
//! the [`ProtectionCounts`] in each upstream's snapshot at scrape time.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::catch_up;

/// The breaker states, each a label value of the state gauge.
pub(crate) const BREAKER_STATES: [&str; 3] = ["closed", "open", "half_open"];

/// One upstream's protection, as read at scrape.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProtectionCounts {
    pub in_flight: usize,
    pub queued: usize,
    /// One of [`BREAKER_STATES`].
    pub breaker_state: &'static str,
    /// Calls refused, by reason (`queue_full`, `client_share`,
    /// `queue_timeout`, `circuit_open`, `circuit_half_open`, `retry_budget`).
    pub rejected: Vec<(&'static str, u64)>,
    pub retries: u64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    upstream: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    upstream: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    upstream: String,
    reason: String,
}

/// The result cache, as read at scrape.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CacheSnapshot {
    pub entries: usize,
    pub hits: u64,
    pub misses: u64,
    pub coalesced: u64,
    pub evicted: u64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

/// The families, registered once.
#[derive(Default)]
pub(crate) struct ProtectionMetrics {
    in_flight: Family<Labels, Gauge>,
    queued: Family<Labels, Gauge>,
    breaker: Family<StateLabels, Gauge>,
    rejected: Family<ReasonLabels, Counter>,
    retries: Family<Labels, Counter>,
    cache_entries: Gauge,
    cache_lookups: Family<OutcomeLabels, Counter>,
}

impl ProtectionMetrics {
    pub(crate) fn register(&self, r: &mut Registry) {
        r.register(
            "mcpmux_upstream_in_flight",
            "Requests in flight to the upstream (at most its limits.max_in_flight)",
            self.in_flight.clone(),
        );
        r.register(
            "mcpmux_upstream_queued",
            "Requests waiting for a slot at the upstream (at most its limits.max_queued)",
            self.queued.clone(),
        );
        r.register(
            "mcpmux_upstream_circuit_state",
            "1 for the circuit breaker's current state (closed, open, half_open), 0 for the others",
            self.breaker.clone(),
        );
        r.register(
            "mcpmux_upstream_rejections",
            "Calls refused at once by the upstream's protection, by reason",
            self.rejected.clone(),
        );
        r.register(
            "mcpmux_upstream_retries",
            "Requests sent to the upstream a second time (safe retries within the budget)",
            self.retries.clone(),
        );
        r.register(
            "mcpmux_cache_entries",
            "Results of resources/read and prompts/get kept in the result cache",
            self.cache_entries.clone(),
        );
        r.register(
            "mcpmux_cache_lookups",
            "Result cache lookups: hit, miss, coalesced (waited for an identical request), evicted (entries dropped)",
            self.cache_lookups.clone(),
        );
    }

    pub(crate) fn update_cache(&self, cache: &CacheSnapshot) {
        self.cache_entries
            .set(i64::try_from(cache.entries).unwrap_or(i64::MAX));
        for (outcome, value) in [
            ("hit", cache.hits),
            ("miss", cache.misses),
            ("coalesced", cache.coalesced),
            ("evicted", cache.evicted),
        ] {
            let labels = OutcomeLabels {
                outcome: outcome.to_owned(),
            };
            catch_up(&self.cache_lookups.get_or_create(&labels), value);
        }
    }

    pub(crate) fn update(&self, upstream: &str, counts: &ProtectionCounts) {
        let labels = Labels {
            upstream: upstream.to_owned(),
        };
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.in_flight
            .get_or_create(&labels)
            .set(gauge(counts.in_flight));
        self.queued.get_or_create(&labels).set(gauge(counts.queued));
        for state in BREAKER_STATES {
            self.breaker
                .get_or_create(&StateLabels {
                    upstream: upstream.to_owned(),
                    state: state.to_owned(),
                })
                .set(i64::from(state == counts.breaker_state));
        }
        for (reason, value) in &counts.rejected {
            let labels = ReasonLabels {
                upstream: upstream.to_owned(),
                reason: (*reason).to_owned(),
            };
            catch_up(&self.rejected.get_or_create(&labels), *value);
        }
        catch_up(&self.retries.get_or_create(&labels), counts.retries);
    }
}
