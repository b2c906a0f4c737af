//! Per-client request rates (`rate_limit`): a token bucket per client, kept
//! by `governor`, keyed like the session limits (the authenticated client,
//! or the remote address when authentication is off). A client over its
//! rate gets 429 with `Retry-After`; nobody else notices.

use axum::response::IntoResponse as _;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use super::wire::Refusal;
use crate::auth::Identity;
use crate::config::RateLimit;
use crate::protocol::code;

/// Whom a request counts against: its client, else its address.
pub(crate) fn client_key(identity: Option<&Arc<Identity>>, ip: Option<IpAddr>) -> Option<Arc<str>> {
    match (identity, ip) {
        (Some(id), _) => Some(format!("client {}", id.client).into()),
        (None, Some(ip)) => Some(format!("address {ip}").into()),
        (None, None) => None,
    }
}

/// The buckets of every client.
pub(crate) struct Throttle {
    limit: RateLimit,
    buckets: DefaultKeyedRateLimiter<Arc<str>>,
    clock: DefaultClock,
}

impl Throttle {
    pub(crate) fn new(limit: RateLimit) -> Throttle {
        let per_second = NonZeroU32::new(limit.requests_per_second).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(limit.burst).unwrap_or(NonZeroU32::MIN);
        Throttle {
            limit,
            buckets: RateLimiter::keyed(Quota::per_second(per_second).allow_burst(burst)),
            clock: DefaultClock::default(),
        }
    }

    /// Takes one request from `key`'s bucket, or says when to come back.
    pub(crate) fn check(&self, key: &Arc<str>) -> Result<(), Duration> {
        self.buckets
            .check_key(key)
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }

    /// Forgets buckets that are full again (run now and then).
    pub(crate) fn forget_idle(&self) {
        self.buckets.retain_recent();
        self.buckets.shrink_to_fit();
    }

    /// The 429 for `key`, which must wait `wait`.
    pub(crate) fn refusal(&self, key: &str, wait: Duration) -> Response {
        let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        let refusal = Refusal::new(
            StatusCode::TOO_MANY_REQUESTS,
            code::INTERNAL_ERROR,
            format!(
                "rate limit exceeded for {key}: {} requests per second after a burst of {} (rate_limit); retry in {}s",
                self.limit.requests_per_second,
                self.limit.burst,
                seconds.max(1)
            ),
        );
        match HeaderValue::from_str(&seconds.max(1).to_string()) {
            Ok(value) => refusal.with_header(header::RETRY_AFTER, value),
            Err(_) => refusal,
        }
        .into_response()
    }
}
