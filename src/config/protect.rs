//! An upstream's protection keys: `limits` (concurrency cap and wait
//! queue), `circuit_breaker` and `cache`, as written and validated.

use std::time::Duration;

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::{Lookup, Problems};

/// At most `max_in_flight` requests at once; `max_queued` more wait up to
/// `queue_timeout` for a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LimitsConfig {
    pub max_in_flight: usize,
    pub max_queued: usize,
    pub queue_timeout: Duration,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_in_flight: 256,
            max_queued: 1024,
            queue_timeout: Duration::from_secs(5),
        }
    }
}

/// Opens after `failures` consecutive failures or timeouts; tries again
/// (half-open) after `cooldown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BreakerConfig {
    pub failures: u32,
    pub cooldown: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failures: 5,
            cooldown: Duration::from_secs(10),
        }
    }
}

/// The result cache: `ttl` for results of legacy upstreams (none: not
/// cached; modern upstreams send their own `ttlMs`), at most `max_entries`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CacheConfig {
    pub ttl: Option<Duration>,
    pub max_entries: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            ttl: None,
            max_entries: 1000,
        }
    }
}

/// The three sections together, as an upstream holds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ProtectConfig {
    pub limits: LimitsConfig,
    pub breaker: BreakerConfig,
    pub cache: CacheConfig,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    #[serde(default)]
    max_in_flight: Option<Spanned<u64>>,
    #[serde(default)]
    max_queued: Option<Spanned<u64>>,
    #[serde(default)]
    queue_timeout: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBreaker {
    #[serde(default)]
    failures: Option<Spanned<u64>>,
    #[serde(default)]
    cooldown: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCache {
    #[serde(default)]
    ttl: Option<Spanned<String>>,
    #[serde(default)]
    max_entries: Option<Spanned<u64>>,
}

/// Validates the three optional sections of upstream `label`.
pub(super) fn validate(
    limits: Option<&RawLimits>,
    breaker: Option<&RawBreaker>,
    cache: Option<&RawCache>,
    label: &str,
    lookup: &Lookup,
    p: &mut Problems,
) -> Option<ProtectConfig> {
    let d = ProtectConfig::default();
    let count = |p: &mut Problems, v: Option<&Spanned<u64>>, def: u64, min, max, key: &str| {
        p.count_or(v, def, min, max, &format!("{label}.{key}"))
    };
    let limits = match limits {
        None => Some(d.limits),
        Some(raw) => {
            let max_in_flight = count(
                p,
                raw.max_in_flight.as_ref(),
                d.limits.max_in_flight as u64,
                1,
                100_000,
                "limits.max_in_flight",
            );
            let max_queued = count(
                p,
                raw.max_queued.as_ref(),
                d.limits.max_queued as u64,
                0,
                1_000_000,
                "limits.max_queued",
            );
            p.duration_or(
                raw.queue_timeout.as_ref(),
                d.limits.queue_timeout,
                &format!("{label}.limits.queue_timeout"),
                lookup,
            )
            .map(|queue_timeout| LimitsConfig {
                max_in_flight: max_in_flight as usize,
                max_queued: max_queued as usize,
                queue_timeout,
            })
        }
    };
    let breaker = match breaker {
        None => Some(d.breaker),
        Some(raw) => {
            let failures = count(
                p,
                raw.failures.as_ref(),
                u64::from(d.breaker.failures),
                1,
                1_000_000,
                "circuit_breaker.failures",
            );
            p.duration_or(
                raw.cooldown.as_ref(),
                d.breaker.cooldown,
                &format!("{label}.circuit_breaker.cooldown"),
                lookup,
            )
            .map(|cooldown| BreakerConfig {
                failures: u32::try_from(failures).unwrap_or(u32::MAX),
                cooldown,
            })
        }
    };
    let cache = match cache {
        None => Some(d.cache),
        Some(raw) => {
            let max_entries = count(
                p,
                raw.max_entries.as_ref(),
                d.cache.max_entries,
                1,
                10_000_000,
                "cache.max_entries",
            );
            let ttl = match &raw.ttl {
                None => Some(None),
                Some(t) => p
                    .duration(t, &format!("{label}.cache.ttl"), lookup)
                    .map(Some),
            };
            ttl.map(|ttl| CacheConfig { ttl, max_entries })
        }
    };
    Some(ProtectConfig {
        limits: limits?,
        breaker: breaker?,
        cache: cache?,
    })
}
