//! What stands between callers and one upstream: its circuit breaker, its
//! concurrency cap with a fair wait queue, and its retry budget. Held by
//! the upstream's handle; the router asks [`Protection::admit`] before a
//! call and records how the call ended on the [`Admission`].

pub(crate) mod breaker;
pub(crate) mod limits;
mod retry_budget;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::UpstreamError;
use crate::config::ProtectConfig;
use breaker::{Breaker, BreakerSnapshot, Ticket, Verdict};
use limits::{ClientKey, Limiter, LimiterSnapshot, Permit};
use retry_budget::RetryBudget;
pub(crate) use retry_budget::{MIN_RETRIES, RATIO as RETRY_RATIO, WINDOW as RETRY_WINDOW};

/// When a client refused for saturation should try again.
pub(crate) const OVERLOAD_RETRY_AFTER: Duration = Duration::from_secs(1);

/// One upstream's protection.
pub(crate) struct Protection {
    upstream: Arc<str>,
    limiter: Arc<Limiter>,
    breaker: Arc<Breaker>,
    budget: RetryBudget,
    /// Its `cache` settings (the router's result cache reads them).
    cache: crate::config::CacheConfig,
}

/// A call let through: its slot (given back when dropped) and its breaker
/// ticket (until [`Admission::record`]).
pub(crate) struct Admission {
    _permit: Permit,
    ticket: Mutex<Option<Ticket>>,
    breaker: Arc<Breaker>,
}

impl Admission {
    /// Tells the breaker how the call on connection `conn` (any number
    /// unique to it) ended; only the first record counts.
    pub(crate) fn record(&self, outcome: Result<(), &UpstreamError>, conn: usize) {
        let verdict = match outcome {
            Ok(()) | Err(UpstreamError::Rpc { .. }) => Verdict::Success,
            Err(e @ (UpstreamError::Timeout { .. } | UpstreamError::Protocol { .. })) => {
                self.breaker.note_failure(e.cause());
                Verdict::Failure
            }
            Err(
                e @ (UpstreamError::Unavailable { .. }
                | UpstreamError::SessionExpired { .. }
                | UpstreamError::NotRetried { .. }),
            ) => {
                self.breaker.note_failure(e.cause());
                Verdict::Lost(conn)
            }
            Err(_) => Verdict::Neutral,
        };
        let ticket = self.ticket.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(ticket) = ticket {
            ticket.record(verdict);
        }
    }
}

/// A protection's state, for `/status` and `/metrics`.
#[derive(Debug, Clone)]
pub(crate) struct ProtectionSnapshot {
    pub limits: LimiterSnapshot,
    pub breaker: BreakerSnapshot,
    pub retries: u64,
    pub retry_budget_exhausted: u64,
}

impl Protection {
    pub(crate) fn new(upstream: Arc<str>, config: &ProtectConfig) -> Self {
        Self {
            limiter: Limiter::new(config.limits),
            breaker: Breaker::new(upstream.clone(), config.breaker),
            budget: RetryBudget::default(),
            cache: config.cache,
            upstream,
        }
    }

    /// Lets a call of `client` through: refused at once while the breaker
    /// is open (or its probes are out), else a slot now or after a wait in
    /// the queue, or refused when the queue is full or the wait too long.
    /// A queued call waits until `deadline` at most (its own timeout).
    pub(crate) async fn admit(
        &self,
        client: ClientKey,
        deadline: tokio::time::Instant,
    ) -> Result<Admission, UpstreamError> {
        let ticket = self
            .breaker
            .admit()
            .map_err(|tripped| UpstreamError::CircuitOpen {
                upstream: self.upstream.to_string(),
                reason: tripped.to_string(),
                retry_after: tripped.retry_in(),
            })?;
        let permit = self
            .limiter
            .acquire(client, deadline)
            .await
            .map_err(|refused| UpstreamError::Overloaded {
                upstream: self.upstream.to_string(),
                reason: refused.to_string(),
                retry_after: OVERLOAD_RETRY_AFTER,
            })?;
        self.budget.note_request();
        Ok(Admission {
            _permit: permit,
            ticket: Mutex::new(Some(ticket)),
            breaker: self.breaker.clone(),
        })
    }

    /// Its `cache` settings.
    pub(crate) fn cache_config(&self) -> crate::config::CacheConfig {
        self.cache
    }

    /// Takes one retry from the budget; false when it is spent.
    pub(crate) fn try_retry(&self) -> bool {
        self.budget.try_spend()
    }

    /// Whether the breaker is open now (`/readyz` for required upstreams).
    pub(crate) fn is_open(&self) -> bool {
        self.breaker.is_open()
    }

    /// Its counts for `/metrics`.
    pub(crate) fn counts(&self) -> crate::metrics::ProtectionCounts {
        let s = self.snapshot();
        crate::metrics::ProtectionCounts {
            in_flight: s.limits.in_flight,
            queued: s.limits.queued,
            breaker_state: s.breaker.state,
            rejected: vec![
                ("queue_full", s.limits.rejected_queue_full),
                ("client_share", s.limits.rejected_client_share),
                ("queue_timeout", s.limits.rejected_queue_timeout),
                ("circuit_open", s.breaker.rejected_open),
                ("circuit_half_open", s.breaker.rejected_half_open),
                ("retry_budget", s.retry_budget_exhausted),
            ],
            retries: s.retries,
        }
    }

    /// Its state for `/status` and `/readyz`.
    pub(crate) fn status(&self) -> serde_json::Value {
        let s = self.snapshot();
        serde_json::json!({
            "limits": {
                "inFlight": s.limits.in_flight,
                "queued": s.limits.queued,
                "maxInFlight": s.limits.max_in_flight,
                "maxQueued": s.limits.max_queued,
                "perClient": self.limiter.per_client(),
                "rejected": {
                    "queueFull": s.limits.rejected_queue_full,
                    "clientShare": s.limits.rejected_client_share,
                    "queueTimeout": s.limits.rejected_queue_timeout,
                },
            },
            "circuitBreaker": {
                "state": s.breaker.state,
                "consecutiveFailures": s.breaker.consecutive_failures,
                "retryInMs": s.breaker.retry_in.map(|d| d.as_millis() as u64),
                "lastFailure": s.breaker.last_failure,
                "opened": s.breaker.opened,
                "rejected": {
                    "open": s.breaker.rejected_open,
                    "halfOpen": s.breaker.rejected_half_open,
                },
            },
            "retries": {
                "made": s.retries,
                "budgetExhausted": s.retry_budget_exhausted,
            },
        })
    }

    pub(crate) fn snapshot(&self) -> ProtectionSnapshot {
        let (retries, retry_budget_exhausted) = self.budget.counts();
        ProtectionSnapshot {
            limits: self.limiter.snapshot(),
            breaker: self.breaker.snapshot(),
            retries,
            retry_budget_exhausted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn far() -> tokio::time::Instant {
        tokio::time::Instant::now() + Duration::from_secs(3600)
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_breaker_refuses_before_taking_a_slot() {
        let mut config = ProtectConfig::default();
        config.breaker.failures = 1;
        config.limits.max_in_flight = 1;
        let p = Protection::new("slow".into(), &config);
        let first = p.admit(ClientKey::Client("a".into()), far()).await.unwrap();
        first.record(
            Err(&UpstreamError::Timeout {
                upstream: "slow".into(),
                timeout: Duration::from_secs(1),
            }),
            1,
        );
        drop(first);
        let Err(UpstreamError::CircuitOpen { reason, .. }) =
            p.admit(ClientKey::Client("a".into()), far()).await
        else {
            panic!("open")
        };
        assert!(reason.contains("no answer within 1s"), "{reason}");
        let s = p.snapshot();
        assert_eq!((s.limits.in_flight, s.breaker.state), (0, "open"));
    }

    #[tokio::test(start_paused = true)]
    async fn saturation_names_the_limit() {
        let mut config = ProtectConfig::default();
        config.limits.max_in_flight = 1;
        config.limits.max_queued = 0;
        let p = Protection::new("slow".into(), &config);
        let _held = p.admit(ClientKey::Client("a".into()), far()).await.unwrap();
        let Err(e @ UpstreamError::Overloaded { .. }) =
            p.admit(ClientKey::Client("b".into()), far()).await
        else {
            panic!("saturated")
        };
        let text = e.to_string();
        assert!(text.contains("upstream 'slow'"), "{text}");
        assert!(text.contains("limits.max_in_flight 1"), "{text}");
    }
}
