//! The circuit breaker of one upstream (`circuit_breaker`): closed; open
//! after `failures` consecutive failures or timeouts, when calls fail at
//! once; half-open after `cooldown`, when a few probe calls decide whether
//! it closes again (every probe succeeds) or opens for another cool-down
//! (a probe fails).
//!
//! One std mutex, held by the calling task for a few field updates, never
//! across an `.await`. Transitions are logged at the moment they happen.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::config::BreakerConfig;

/// Probe calls let through at once while half-open; this many successes
/// close the breaker.
pub(crate) const PROBES: u32 = 2;

/// How one call ended, for the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The upstream answered (a JSON-RPC error is an answer).
    Success,
    /// A timeout, a broken answer.
    Failure,
    /// The connection (identified by this number) failed or closed while
    /// the call was in flight. Every call in flight then fails at once:
    /// together they count as one failure.
    Lost(usize),
    /// Says nothing about the upstream (cancelled, refused before sending).
    Neutral,
}

/// Why a call was refused at once.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Tripped {
    #[error(
        "its circuit breaker is open after {failures} consecutive failures (last: {last}); it will be tried again in {}", humantime::format_duration(round(*.retry_in))
    )]
    Open {
        failures: u32,
        last: String,
        retry_in: Duration,
    },
    #[error(
        "its circuit breaker is half-open: {PROBES} probe requests are deciding whether it closes; try again in {}", humantime::format_duration(round(*.retry_in))
    )]
    HalfOpen { retry_in: Duration },
}

impl Tripped {
    /// When the client should try again.
    pub(crate) fn retry_in(&self) -> Duration {
        match self {
            Self::Open { retry_in, .. } | Self::HalfOpen { retry_in } => *retry_in,
        }
    }
}

/// Whole tenths of a second read better than nanoseconds.
fn round(d: Duration) -> Duration {
    Duration::from_millis((d.as_millis().div_ceil(100) as u64) * 100)
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen { probing: u32, passed: u32 },
}

struct State {
    phase: Phase,
    /// Bumped on every transition: a call admitted in an earlier phase
    /// does not count in this one.
    generation: u64,
    /// The last failure, for the error and `/status`.
    last_failure: String,
    /// The connection of the last [`Verdict::Lost`] counted.
    last_lost: Option<usize>,
    opened: u64,
    rejected_open: u64,
    rejected_half_open: u64,
}

/// Counts of one breaker, for `/status` and `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BreakerSnapshot {
    /// `closed`, `open` or `half_open`.
    pub state: &'static str,
    pub consecutive_failures: u32,
    /// While open: when it turns half-open.
    pub retry_in: Option<Duration>,
    pub last_failure: Option<String>,
    pub opened: u64,
    pub rejected_open: u64,
    pub rejected_half_open: u64,
}

/// One upstream's breaker.
pub(crate) struct Breaker {
    upstream: Arc<str>,
    config: BreakerConfig,
    state: Mutex<State>,
}

/// A call let through; tell the breaker how it ended with
/// [`Ticket::record`] (dropped unrecorded: [`Verdict::Neutral`]).
pub(crate) struct Ticket {
    breaker: Arc<Breaker>,
    generation: u64,
    probe: bool,
    recorded: bool,
}

impl Ticket {
    pub(crate) fn record(mut self, verdict: Verdict) {
        self.recorded = true;
        self.breaker.record(self.generation, self.probe, verdict);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.recorded {
            self.breaker
                .record(self.generation, self.probe, Verdict::Neutral);
        }
    }
}

impl Breaker {
    pub(crate) fn new(upstream: Arc<str>, config: BreakerConfig) -> Arc<Self> {
        Arc::new(Self {
            upstream,
            config,
            state: Mutex::new(State {
                phase: Phase::Closed { failures: 0 },
                generation: 0,
                last_failure: String::new(),
                last_lost: None,
                opened: 0,
                rejected_open: 0,
                rejected_half_open: 0,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lets a call through, or says why not.
    pub(crate) fn admit(self: &Arc<Self>) -> Result<Ticket, Tripped> {
        let mut state = self.lock();
        let now = Instant::now();
        if let Phase::Open { until } = state.phase {
            if now < until {
                state.rejected_open += 1;
                return Err(Tripped::Open {
                    failures: self.config.failures,
                    last: state.last_failure.clone(),
                    retry_in: until - now,
                });
            }
            state.phase = Phase::HalfOpen {
                probing: 0,
                passed: 0,
            };
            state.generation += 1;
            tracing::info!(upstream = %self.upstream, "circuit breaker half-open: probing the upstream");
        }
        let probe = match &mut state.phase {
            Phase::HalfOpen { probing, .. } if *probing >= PROBES => {
                state.rejected_half_open += 1;
                return Err(Tripped::HalfOpen {
                    retry_in: Duration::from_secs(1),
                });
            }
            Phase::HalfOpen { probing, .. } => {
                *probing += 1;
                true
            }
            _ => false,
        };
        Ok(Ticket {
            breaker: self.clone(),
            generation: state.generation,
            probe,
            recorded: false,
        })
    }

    /// Records a failure seen outside any call (none yet), or a call's end.
    fn record(&self, generation: u64, probe: bool, verdict: Verdict) {
        let mut state = self.lock();
        if generation != state.generation {
            return;
        }
        let verdict = match verdict {
            // Another call lost with the same connection: already counted.
            Verdict::Lost(conn) if state.last_lost == Some(conn) && !probe => Verdict::Neutral,
            Verdict::Lost(conn) => {
                state.last_lost = Some(conn);
                Verdict::Failure
            }
            other => other,
        };
        match (&mut state.phase, verdict) {
            (Phase::Closed { failures }, Verdict::Success) => *failures = 0,
            (Phase::Closed { failures }, Verdict::Failure) => {
                *failures += 1;
                if *failures >= self.config.failures {
                    let failures = *failures;
                    self.open(&mut state);
                    tracing::warn!(upstream = %self.upstream, failures, cooldown = %humantime::format_duration(self.config.cooldown), last = %state.last_failure, "circuit breaker open: calls fail at once until the cool-down ends");
                }
            }
            (Phase::HalfOpen { probing, passed }, Verdict::Success) if probe => {
                *probing -= 1;
                *passed += 1;
                if *passed >= PROBES {
                    state.phase = Phase::Closed { failures: 0 };
                    state.generation += 1;
                    tracing::info!(upstream = %self.upstream, "circuit breaker closed: the probes succeeded");
                }
            }
            (Phase::HalfOpen { .. }, Verdict::Failure) if probe => {
                self.open(&mut state);
                tracing::warn!(upstream = %self.upstream, last = %state.last_failure, "circuit breaker open again: a probe failed");
            }
            (Phase::HalfOpen { probing, .. }, Verdict::Neutral) if probe => *probing -= 1,
            _ => {}
        }
    }

    fn open(&self, state: &mut State) {
        state.phase = Phase::Open {
            until: Instant::now() + self.config.cooldown,
        };
        state.generation += 1;
        state.opened += 1;
    }

    /// Remembers what the last failure was (before it is recorded).
    pub(crate) fn note_failure(&self, what: String) {
        self.lock().last_failure = what;
    }

    pub(crate) fn snapshot(&self) -> BreakerSnapshot {
        let state = self.lock();
        let now = Instant::now();
        let (label, failures, retry_in) = match state.phase {
            Phase::Closed { failures } => ("closed", failures, None),
            Phase::Open { until } if until > now => {
                ("open", self.config.failures, Some(until - now))
            }
            // The next call turns it half-open.
            Phase::Open { .. } => ("half_open", 0, None),
            Phase::HalfOpen { .. } => ("half_open", 0, None),
        };
        BreakerSnapshot {
            state: label,
            consecutive_failures: failures,
            retry_in,
            last_failure: (!state.last_failure.is_empty()).then(|| state.last_failure.clone()),
            opened: state.opened,
            rejected_open: state.rejected_open,
            rejected_half_open: state.rejected_half_open,
        }
    }

    /// Whether calls fail at once now (open and cooling down).
    pub(crate) fn is_open(&self) -> bool {
        matches!(self.lock().phase, Phase::Open { until } if until > Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker(failures: u32) -> Arc<Breaker> {
        Breaker::new(
            "slow".into(),
            BreakerConfig {
                failures,
                cooldown: Duration::from_secs(10),
            },
        )
    }

    fn fail(b: &Arc<Breaker>) {
        b.note_failure("no answer within 1s".into());
        b.admit().unwrap().record(Verdict::Failure);
    }

    #[tokio::test(start_paused = true)]
    async fn opens_after_consecutive_failures_only() {
        let b = breaker(3);
        fail(&b);
        fail(&b);
        b.admit().unwrap().record(Verdict::Success);
        fail(&b);
        fail(&b);
        assert_eq!(b.snapshot().state, "closed");
        assert_eq!(b.snapshot().consecutive_failures, 2);
        fail(&b);
        assert_eq!(b.snapshot().state, "open");
        let Err(tripped) = b.admit() else {
            panic!("open breakers refuse")
        };
        let text = tripped.to_string();
        assert!(text.contains("open after 3 consecutive failures"), "{text}");
        assert!(text.contains("no answer within 1s"), "{text}");
        assert!(text.contains("tried again in 10s"), "{text}");
        assert_eq!(b.snapshot().rejected_open, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn probes_close_it_after_the_cooldown() {
        let b = breaker(1);
        fail(&b);
        tokio::time::advance(Duration::from_secs(4)).await;
        let Err(Tripped::Open { retry_in, .. }) = b.admit() else {
            panic!("still open")
        };
        assert_eq!(retry_in, Duration::from_secs(6));
        tokio::time::advance(Duration::from_secs(6)).await;
        let p1 = b.admit().unwrap();
        let p2 = b.admit().unwrap();
        assert_eq!(b.snapshot().state, "half_open");
        // Only PROBES calls at once while half-open.
        let Err(more) = b.admit() else {
            panic!("a third call waits for the probes")
        };
        assert!(matches!(more, Tripped::HalfOpen { .. }));
        assert!(more.to_string().contains("half-open"), "{more}");
        p1.record(Verdict::Success);
        assert_eq!(b.snapshot().state, "half_open");
        p2.record(Verdict::Success);
        assert_eq!(b.snapshot().state, "closed");
        assert!(b.admit().is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_probe_opens_it_again() {
        let b = breaker(2);
        fail(&b);
        fail(&b);
        tokio::time::advance(Duration::from_secs(10)).await;
        let probe = b.admit().unwrap();
        b.note_failure("it crashed".into());
        probe.record(Verdict::Failure);
        assert_eq!(b.snapshot().state, "open");
        assert_eq!(b.snapshot().opened, 2);
        assert!(b.is_open());
        // A dropped (cancelled) probe frees its place without deciding.
        tokio::time::advance(Duration::from_secs(10)).await;
        drop(b.admit().unwrap());
        assert_eq!(b.snapshot().state, "half_open");
        b.admit().unwrap().record(Verdict::Success);
        b.admit().unwrap().record(Verdict::Success);
        assert_eq!(b.snapshot().state, "closed");
    }

    #[tokio::test(start_paused = true)]
    async fn calls_lost_with_one_connection_count_once() {
        let b = breaker(2);
        for _ in 0..5 {
            b.admit().unwrap().record(Verdict::Lost(7));
        }
        assert_eq!(b.snapshot().state, "closed");
        b.admit().unwrap().record(Verdict::Lost(8));
        assert_eq!(b.snapshot().state, "open");
    }

    #[tokio::test(start_paused = true)]
    async fn late_results_of_an_earlier_phase_do_not_count() {
        let b = breaker(1);
        let early = b.admit().unwrap();
        fail(&b);
        tokio::time::advance(Duration::from_secs(10)).await;
        let probe = b.admit().unwrap();
        // A call admitted while closed fails now: the probes decide.
        early.record(Verdict::Failure);
        assert_eq!(b.snapshot().state, "half_open");
        probe.record(Verdict::Success);
    }
}
