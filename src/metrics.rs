//! Prometheus metrics, exposed in the text format at `/metrics`.
//!
//! Request timings follow the MCP semantic conventions of OpenTelemetry
//! (`mcp.server.operation.duration`, label `mcp_method_name`), exported as
//! `mcp_server_operation_duration_seconds`. Counters are updated on the
//! request path (one atomic add per request); gauges that describe state
//! (upstreams, sessions, subscriptions) are read from the live tables when
//! the endpoint is scraped, so nothing has to be kept in sync.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// How a request ended, as a label value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Error,
    Cancelled,
    Timeout,
    Unavailable,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Error => "error",
            Self::Cancelled => "cancelled",
            Self::Timeout => "timeout",
            Self::Unavailable => "unavailable",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    mcp_method_name: String,
    upstream: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamLabels {
    upstream: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EraLabels {
    era: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NotificationLabels {
    outcome: String,
}

/// Notification counts kept by every outbox, read at scrape time.
#[derive(Debug, Default)]
pub struct NotificationCounts {
    pub sent: AtomicU64,
    pub coalesced: AtomicU64,
    pub dropped: AtomicU64,
}

/// What the gateway looks like right now, for the state gauges.
pub struct Snapshot {
    /// `(name, up, restarts)` per upstream.
    pub upstreams: Vec<(String, bool, u64)>,
    pub legacy_sessions: usize,
    pub listen_streams: usize,
    pub subscription_entries: usize,
    pub subscribed_uris: usize,
}

/// The gateway's metrics registry.
pub struct Metrics {
    /// Held by the scrape handler only; encoding needs `&Registry`.
    registry: Mutex<Registry>,
    operations: Family<OperationLabels, Histogram>,
    requests: Family<OperationLabels, Counter>,
    upstream_up: Family<UpstreamLabels, Gauge>,
    upstream_restarts: Family<UpstreamLabels, Counter>,
    sessions: Family<EraLabels, Gauge>,
    subscription_entries: Gauge,
    subscribed_uris: Gauge,
    notifications: Family<NotificationLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let operations = Family::<OperationLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        });
        let metrics = Metrics {
            registry: Mutex::new(Registry::default()),
            operations,
            requests: Family::default(),
            upstream_up: Family::default(),
            upstream_restarts: Family::default(),
            sessions: Family::default(),
            subscription_entries: Gauge::default(),
            subscribed_uris: Gauge::default(),
            notifications: Family::default(),
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
        }
        metrics
    }

    /// Records one finished request.
    pub fn observe(&self, method: &str, upstream: &str, outcome: Outcome, elapsed: Duration) {
        let labels = OperationLabels {
            mcp_method_name: method.to_owned(),
            upstream: upstream.to_owned(),
            outcome: outcome.as_str().to_owned(),
        };
        self.operations
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        self.requests.get_or_create(&labels).inc();
    }

    /// The text exposition, with state gauges read from `snapshot`.
    pub fn render(&self, snapshot: &Snapshot, counts: &NotificationCounts) -> String {
        for (name, up, restarts) in &snapshot.upstreams {
            let labels = UpstreamLabels {
                upstream: name.clone(),
            };
            self.upstream_up.get_or_create(&labels).set(i64::from(*up));
            // The handle counts; the counter catches up with it at scrape.
            let counter = self.upstream_restarts.get_or_create(&labels);
            counter.inc_by(restarts.saturating_sub(counter.get()));
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
        for (outcome, value) in [
            ("sent", &counts.sent),
            ("coalesced", &counts.coalesced),
            ("dropped", &counts.dropped),
        ] {
            // The outboxes count; the counter catches up with them at scrape.
            let counter = self.notifications.get_or_create(&NotificationLabels {
                outcome: outcome.into(),
            });
            counter.inc_by(value.load(Ordering::Relaxed).saturating_sub(counter.get()));
        }
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
            tracing::warn!(error = %e, "could not encode metrics");
        }
        out
    }
}
