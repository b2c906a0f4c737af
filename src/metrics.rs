//! Prometheus metrics, exposed in the text format at `/metrics`.
//!
//! Request timings follow the MCP semantic conventions of OpenTelemetry
//! (`mcp.server.operation.duration`, label `mcp_method_name`), exported as
//! `mcp_server_operation_duration_seconds`. Counters are updated on the
//! request path (one atomic add per request); gauges that describe state
//! (upstreams, sessions, subscriptions) are read from the live tables when
//! the endpoint is scraped, so nothing has to be kept in sync.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::hashing::HashMap;

mod protection;

pub(crate) use protection::{CacheSnapshot, ProtectionCounts};

/// How a request ended, as a label value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok,
    Error,
    Cancelled,
    Timeout,
    Unavailable,
}

impl Outcome {
    /// How many outcomes there are: the size of [`SeriesByOutcome`].
    const COUNT: usize = 5;

    fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Error => "error",
            Self::Cancelled => "cancelled",
            Self::Timeout => "timeout",
            Self::Unavailable => "unavailable",
        }
    }

    /// Its value in the audit line: the variant's name, as `Debug` spells
    /// it, without going through the formatter on every call.
    pub(crate) fn audit_name(self) -> &'static str {
        match self {
            Self::Ok => "Ok",
            Self::Error => "Error",
            Self::Cancelled => "Cancelled",
            Self::Timeout => "Timeout",
            Self::Unavailable => "Unavailable",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    mcp_method_name: String,
    upstream: String,
    outcome: String,
}

const _: () = assert!(Outcome::Unavailable as usize + 1 == Outcome::COUNT);

/// One (method, upstream)'s histogram and counter per [`Outcome`], once
/// used.
type SeriesByOutcome = [Option<(Histogram, Counter)>; Outcome::COUNT];

/// The series of [`Metrics::observe`] by upstream, then method: handles
/// onto the families' own series (a clone shares its value), so that a
/// finished request finds them with two string look-ups instead of
/// building and hashing a label set for each family. Series are never
/// removed from the families, so a kept handle never goes stale.
#[derive(Default)]
struct OperationSeries(RwLock<HashMap<Box<str>, SeriesByMethod>>);

/// One upstream's series by method.
type SeriesByMethod = HashMap<Box<str>, SeriesByOutcome>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamLabels {
    upstream: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EraLabels {
    era: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NotificationLabels {
    outcome: String,
}

/// Notification counts kept by every outbox, read at scrape time.
#[derive(Debug, Default)]
pub(crate) struct NotificationCounts {
    pub sent: AtomicU64,
    pub coalesced: AtomicU64,
    pub dropped: AtomicU64,
}

/// What the gateway looks like right now, for the state gauges and the
/// counters kept elsewhere (which catch up at scrape).
pub(crate) struct Snapshot {
    pub upstreams: Vec<UpstreamSnapshot>,
    pub legacy_sessions: usize,
    pub listen_streams: usize,
    pub subscription_entries: usize,
    pub subscribed_uris: usize,
    /// Sessions evicted to make room for new ones.
    pub sessions_evicted: u64,
    /// The HTTP listener's connections, when it serves.
    pub connections: Option<ConnectionSnapshot>,
    /// Log lines dropped because stderr could not keep up.
    pub log_lines_dropped: u64,
    /// The result cache.
    pub cache: CacheSnapshot,
}

/// One upstream in a [`Snapshot`].
pub(crate) struct UpstreamSnapshot {
    pub name: String,
    /// Connected and answering.
    pub up: bool,
    pub restarts: u64,
    /// Stderr and stray stdout lines dropped by the log rate limit.
    pub suppressed_lines: u64,
    /// Per-session instances, or per-identity sessions, running
    /// (`isolation: per-session`, or an `auth.mode` that acts as each caller).
    pub instances: Option<usize>,
    /// Users who connected their account here (`auth.mode: user` only).
    pub connected_users: Option<usize>,
    /// Its concurrency cap, circuit breaker and retries.
    pub protection: ProtectionCounts,
}

/// The HTTP listener in a [`Snapshot`].
pub(crate) struct ConnectionSnapshot {
    pub open: usize,
    /// Closed connections by reason: header_timeout, idle_timeout, evicted, refused.
    pub closed: [(&'static str, u64); 4],
}

/// The gateway's metrics registry.
pub(crate) struct Metrics {
    /// Held by the scrape handler only; encoding needs `&Registry`.
    registry: Mutex<Registry>,
    operations: Family<OperationLabels, Histogram>,
    requests: Family<OperationLabels, Counter>,
    /// Handles onto `operations` and `requests`, for the request path.
    operation_series: OperationSeries,
    upstream_up: Family<UpstreamLabels, Gauge>,
    upstream_restarts: Family<UpstreamLabels, Counter>,
    upstream_instances: Family<UpstreamLabels, Gauge>,
    upstream_connected_users: Family<UpstreamLabels, Gauge>,
    sessions: Family<EraLabels, Gauge>,
    subscription_entries: Gauge,
    subscribed_uris: Gauge,
    notifications: Family<NotificationLabels, Counter>,
    suppressed_lines: Family<UpstreamLabels, Counter>,
    sessions_evicted: Counter,
    connections: Gauge,
    connections_closed: Family<ReasonLabels, Counter>,
    log_lines_dropped: Counter,
    tasks: Gauge,
    denials: Family<DenialLabels, Counter>,
    protection: protection::ProtectionMetrics,
    /// Per-upstream and per-item figures for the operator's page.
    pub(crate) live: crate::live::Live,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DenialLabels {
    client: String,
    reason: String,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub(crate) fn new() -> Self {
        let operations = Family::<OperationLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        });
        let metrics = Metrics {
            registry: Mutex::new(Registry::default()),
            operations,
            requests: Family::default(),
            operation_series: OperationSeries::default(),
            upstream_up: Family::default(),
            upstream_restarts: Family::default(),
            upstream_instances: Family::default(),
            upstream_connected_users: Family::default(),
            sessions: Family::default(),
            subscription_entries: Gauge::default(),
            subscribed_uris: Gauge::default(),
            notifications: Family::default(),
            suppressed_lines: Family::default(),
            sessions_evicted: Counter::default(),
            connections: Gauge::default(),
            connections_closed: Family::default(),
            log_lines_dropped: Counter::default(),
            tasks: Gauge::default(),
            denials: Family::default(),
            protection: protection::ProtectionMetrics::default(),
            live: crate::live::Live::default(),
        };
        {
            let mut r = metrics.registry.lock().unwrap_or_else(|e| e.into_inner());
            r.register(
                "mcp_server_operation_duration_seconds",
                "Duration of MCP requests served, by method, upstream and outcome",
                metrics.operations.clone(),
            );
            r.register(
                "mcpmux_requests",
                "MCP requests served, by method, upstream and outcome",
                metrics.requests.clone(),
            );
            r.register(
                "mcpmux_upstream_up",
                "1 when the upstream is connected and ready",
                metrics.upstream_up.clone(),
            );
            r.register(
                "mcpmux_upstream_restarts",
                "Times the upstream was restarted",
                metrics.upstream_restarts.clone(),
            );
            r.register(
                "mcpmux_upstream_instances",
                "Per-session instances (child processes) of upstreams with isolation: per-session, or per-identity upstream sessions of upstreams that act as each caller",
                metrics.upstream_instances.clone(),
            );
            r.register(
                "mcpmux_upstream_connected_users",
                "Users who connected their own account at an upstream with auth.mode: user",
                metrics.upstream_connected_users.clone(),
            );
            r.register(
                "mcpmux_sessions",
                "Open downstream sessions and listen streams, by protocol era",
                metrics.sessions.clone(),
            );
            r.register(
                "mcpmux_subscription_entries",
                "(URI, subscriber) pairs in the subscription table",
                metrics.subscription_entries.clone(),
            );
            r.register(
                "mcpmux_subscribed_uris",
                "URIs with at least one subscriber",
                metrics.subscribed_uris.clone(),
            );
            r.register(
                "mcpmux_notifications",
                "Notifications sent to clients, coalesced into a pending one, or dropped (full queue)",
                metrics.notifications.clone(),
            );
            r.register(
                "mcpmux_upstream_log_lines_suppressed",
                "Upstream stderr and non-JSON-RPC stdout lines dropped by the per-upstream log rate limit",
                metrics.suppressed_lines.clone(),
            );
            r.register(
                "mcpmux_sessions_evicted",
                "Idle sessions evicted to make room for new ones (session table or per-client limit)",
                metrics.sessions_evicted.clone(),
            );
            r.register(
                "mcpmux_http_connections",
                "Open downstream HTTP connections (streams included)",
                metrics.connections.clone(),
            );
            r.register(
                "mcpmux_http_connections_closed",
                "Downstream connections closed by the gateway, by reason",
                metrics.connections_closed.clone(),
            );
            r.register(
                "mcpmux_denials",
                "Requests refused by authentication, policy or rate limits, by client and reason",
                metrics.denials.clone(),
            );
            r.register(
                "mcpmux_log_lines_dropped",
                "Log lines dropped because stderr could not keep up",
                metrics.log_lines_dropped.clone(),
            );
            r.register(
                "mcpmux_tasks",
                "Live tasks of the gateway's async runtime (idle, a steady count; a leak, a rising one)",
                metrics.tasks.clone(),
            );
            metrics.protection.register(&mut r);
        }
        metrics
    }

    /// Counts a request refused for `reason` (`unauthenticated`,
    /// `rate_limit`, `policy`, ...).
    pub(crate) fn denied(&self, client: &str, reason: &str) {
        self.denials
            .get_or_create(&DenialLabels {
                client: client.to_owned(),
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Records one finished request.
    pub(crate) fn observe(
        &self,
        method: &str,
        upstream: &str,
        outcome: Outcome,
        elapsed: Duration,
    ) {
        let seconds = elapsed.as_secs_f64();
        let at = outcome as usize;
        {
            let kept = self
                .operation_series
                .0
                .read()
                .unwrap_or_else(|e| e.into_inner());
            if let Some((histogram, counter)) = kept
                .get(upstream)
                .and_then(|methods| methods.get(method))
                .and_then(|outcomes| outcomes[at].as_ref())
            {
                histogram.observe(seconds);
                counter.inc();
                return;
            }
        }
        let labels = OperationLabels {
            mcp_method_name: method.to_owned(),
            upstream: upstream.to_owned(),
            outcome: outcome.as_str().to_owned(),
        };
        let histogram = self.operations.get_or_create(&labels).clone();
        let counter = self.requests.get_or_create(&labels).clone();
        histogram.observe(seconds);
        counter.inc();
        let mut kept = self
            .operation_series
            .0
            .write()
            .unwrap_or_else(|e| e.into_inner());
        kept.entry(upstream.into())
            .or_default()
            .entry(method.into())
            .or_default()[at] = Some((histogram, counter));
    }

    /// The text exposition, with state gauges read from `snapshot`.
    pub(crate) fn render(&self, snapshot: &Snapshot, counts: &NotificationCounts) -> String {
        for upstream in &snapshot.upstreams {
            let labels = UpstreamLabels {
                upstream: upstream.name.clone(),
            };
            self.upstream_up
                .get_or_create(&labels)
                .set(i64::from(upstream.up));
            catch_up(
                &self.upstream_restarts.get_or_create(&labels),
                upstream.restarts,
            );
            catch_up(
                &self.suppressed_lines.get_or_create(&labels),
                upstream.suppressed_lines,
            );
            self.protection.update(&upstream.name, &upstream.protection);
            if let Some(n) = upstream.instances {
                self.upstream_instances
                    .get_or_create(&labels)
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
            if let Some(n) = upstream.connected_users {
                self.upstream_connected_users
                    .get_or_create(&labels)
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
        }
        self.protection.update_cache(&snapshot.cache);
        catch_up(&self.sessions_evicted, snapshot.sessions_evicted);
        catch_up(&self.log_lines_dropped, snapshot.log_lines_dropped);
        if let Some(connections) = &snapshot.connections {
            self.connections
                .set(i64::try_from(connections.open).unwrap_or(i64::MAX));
            for (reason, value) in connections.closed {
                let labels = ReasonLabels {
                    reason: reason.into(),
                };
                catch_up(&self.connections_closed.get_or_create(&labels), value);
            }
        }
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.sessions
            .get_or_create(&EraLabels { era: "2025".into() })
            .set(gauge(snapshot.legacy_sessions));
        self.sessions
            .get_or_create(&EraLabels {
                era: "2026-07-28".into(),
            })
            .set(gauge(snapshot.listen_streams));
        self.subscription_entries
            .set(gauge(snapshot.subscription_entries));
        self.subscribed_uris.set(gauge(snapshot.subscribed_uris));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            self.tasks.set(gauge(runtime.metrics().num_alive_tasks()));
        }
        for (outcome, value) in [
            ("sent", &counts.sent),
            ("coalesced", &counts.coalesced),
            ("dropped", &counts.dropped),
        ] {
            let counter = self.notifications.get_or_create(&NotificationLabels {
                outcome: outcome.into(),
            });
            catch_up(&counter, value.load(Ordering::Relaxed));
        }
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
            tracing::warn!(error = %e, "could not encode metrics");
        }
        out
    }
}

/// Counts kept elsewhere (the handles, the outboxes, the listener) reach
/// their Prometheus counter at scrape: the counter catches up with `value`.
fn catch_up(counter: &Counter, value: u64) {
    counter.inc_by(value.saturating_sub(counter.get()));
}

impl Metrics {
    /// The registry's text, without the state gauges of a scrape.
    #[cfg(test)]
    pub(crate) fn exposition(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry.lock().unwrap())
            .unwrap();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The audit line spells an outcome as it always has: as `Debug` does.
    #[test]
    fn the_audit_name_is_the_debug_spelling() {
        let all = [
            Outcome::Ok,
            Outcome::Error,
            Outcome::Cancelled,
            Outcome::Timeout,
            Outcome::Unavailable,
        ];
        assert_eq!(all.len(), Outcome::COUNT);
        for outcome in all {
            assert_eq!(outcome.audit_name(), format!("{outcome:?}"));
        }
    }

    #[test]
    fn kept_series_count_with_the_families_they_came_from() {
        let metrics = Metrics::new();
        let took = Duration::from_millis(3);
        metrics.observe("tools/call", "alpha", Outcome::Ok, took);
        metrics.observe("tools/call", "alpha", Outcome::Ok, took);
        metrics.observe("tools/call", "alpha", Outcome::Timeout, took);
        metrics.observe("tools/call", "beta", Outcome::Ok, took);
        metrics.observe("prompts/get", "alpha", Outcome::Ok, took);
        let text = metrics.exposition();
        for line in [
            r#"mcpmux_requests_total{mcp_method_name="tools/call",upstream="alpha",outcome="ok"} 2"#,
            r#"mcpmux_requests_total{mcp_method_name="tools/call",upstream="alpha",outcome="timeout"} 1"#,
            r#"mcpmux_requests_total{mcp_method_name="tools/call",upstream="beta",outcome="ok"} 1"#,
            r#"mcpmux_requests_total{mcp_method_name="prompts/get",upstream="alpha",outcome="ok"} 1"#,
            r#"mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call",upstream="alpha",outcome="ok"} 2"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }
}
