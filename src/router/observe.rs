//! The router's one hook for the operator's page: a finished call's
//! figures (per upstream and item) and, when it failed, a line in its
//! upstream's recent errors. Cheap on success: a few atomic adds.

use std::time::Duration;

use super::RouteError;
use crate::metrics::Metrics;
use crate::upstream::{UpstreamError, UpstreamHandle};

/// Records how a call to `item` on `handle` ended.
pub(super) fn finished(
    metrics: &Metrics,
    handle: &UpstreamHandle,
    method: &str,
    item: &str,
    answer: Result<(), &RouteError>,
    elapsed: Duration,
) {
    metrics
        .live
        .record(handle.name(), item, answer.is_ok(), elapsed);
    if let Err(e) = answer {
        // A withdrawn call is the client's doing, not the upstream's.
        if matches!(
            e,
            RouteError::Cancelled | RouteError::Upstream(UpstreamError::Cancelled { .. })
        ) {
            return;
        }
        let cause = match e {
            RouteError::Upstream(e) => e.cause(),
            other => other.to_string(),
        };
        handle.journal().error(&format!("{method} {item}: {cause}"));
    }
}

/// The JSON-RPC error code a failed call ends with: the upstream's own, or
/// the gateway's.
pub(super) fn error_code(e: &RouteError, era: crate::protocol::Era) -> i64 {
    if let RouteError::Upstream(UpstreamError::Rpc { error, .. }) = e
        && let Some(code) = serde_json::from_str::<serde_json::Value>(error.get())
            .ok()
            .and_then(|v| v.get("code").and_then(serde_json::Value::as_i64))
    {
        return code;
    }
    e.to_rpc(era).1.code
}
