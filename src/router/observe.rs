//! What the router reports of its requests: for the operator's page, a
//! finished call's figures (per upstream and item) and, when it failed, a
//! line in its upstream's recent errors (cheap on success: a few atomic
//! adds); and, when tracing is on, each request's server span.

use std::time::Duration;

use std::sync::Arc;

use super::{Reply, RequestContext, RouteError, Router};
use crate::metrics::Metrics;
use crate::telemetry::Telemetry;
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
    if let RouteError::Upstream(UpstreamError::Rpc { code, .. }) = e {
        return *code;
    }
    e.to_rpc(era).1.code
}

impl Router {
    /// Traces every request (and its upstream exchange) with `telemetry`.
    pub(crate) fn with_telemetry(mut self, telemetry: Option<Arc<Telemetry>>) -> Self {
        self.telemetry = telemetry;
        self
    }

    /// The trace exporter, when tracing is on.
    pub(crate) fn telemetry(&self) -> Option<&Arc<Telemetry>> {
        self.telemetry.as_ref()
    }

    /// Serves a request inside its server span (the upstream span of a
    /// call starts below it, from the span's context).
    pub(super) async fn traced(
        &self,
        telemetry: &Telemetry,
        ctx: &RequestContext,
        request: &mut crate::protocol::Request<'_>,
    ) -> Reply {
        let method = request.method.clone();
        let id = request.id;
        let cx = telemetry.server_span(method.name(), id.get(), request.params().ok());
        let served = self.serve(ctx, request);
        let reply = opentelemetry::context::FutureExt::with_context(served, cx.clone()).await;
        let error_code = match &reply {
            Reply::Ready(frame) => frame.error_code(),
            // A list page is a result.
            Reply::Page(_) => None,
            // A streamed answer's span ends when the stream starts.
            Reply::Streaming(_) => None,
        };
        Telemetry::end_server(&cx, error_code);
        reply
    }
}
