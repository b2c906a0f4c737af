//! Forwarding one call to its upstream: id and progress-token remapping,
//! the per-request deadline (restarted by progress), cancellation, and the
//! URI rewrite of the result.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};

use super::rewrite::{self, Params};
use super::{Reply, RequestContext, RouteError};
use crate::protocol::{self, RpcError, code};
use crate::upstream::{Answer, Connection, ProgressRoute, UpstreamError, UpstreamHandle};

/// Frames buffered for a streaming reply. Progress beyond this is dropped
/// (see [`ProgressRoute::sink`]); the final response always gets through.
const STREAM_CAPACITY: usize = 64;

/// A call resolved to its upstream, ready to send.
pub(super) struct Call<'p> {
    pub method: &'static str,
    pub handle: UpstreamHandle,
    pub params: Params<'p>,
    /// The params member that changes (`name`, `uri` or `ref`) and its new JSON.
    pub key: &'static str,
    pub value: String,
}

/// Where a client's in-flight request went upstream.
pub struct InflightCall {
    conn: Weak<Connection>,
    upstream_id: u64,
}

impl InflightCall {
    /// Tells the owning upstream to stop; false if the call already ended.
    pub(super) fn cancel_upstream(&self, reason: &str) -> bool {
        self.conn
            .upgrade()
            .is_some_and(|conn| conn.cancel(self.upstream_id, reason))
    }
}

/// Removes the in-flight entry and the pending upstream request when the
/// call ends in any way, including the client going away mid-call.
struct CallGuard {
    ctx_inflight: Arc<super::InflightCalls>,
    client_id: Box<str>,
    conn: Arc<Connection>,
    upstream_id: u64,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.ctx_inflight.calls.remove(&self.client_id);
        self.conn.forget(self.upstream_id);
    }
}

/// Sends the call and produces its reply: inline when there is no progress
/// to stream, otherwise as a stream of frames fed by a task.
pub(super) async fn run(call: Call<'_>, ctx: &RequestContext, id: &RawValue) -> Reply {
    let conn = match call.handle.connection() {
        Ok(conn) => conn,
        Err(e) => return Reply::Ready(RouteError::from(e).to_frame(id.get())),
    };
    let upstream_id = conn.next_id();
    let client_token = call.params.progress_token().cloned();
    let streaming = ctx.can_stream && client_token.is_some();
    let params = call
        .params
        .build(call.key, &call.value, streaming.then_some(upstream_id));

    // Ids are unique per session while in flight; a reuse would make the
    // first call's cancellation reach the wrong request.
    let client_id = canonical_id(id);
    match ctx.inflight.calls.entry(client_id.clone()) {
        dashmap::Entry::Occupied(_) => {
            let error = RpcError::new(
                code::INVALID_REQUEST,
                format!(
                    "request id {} is already in flight in this session",
                    id.get()
                ),
            );
            return Reply::Ready(protocol::error_frame(Some(id.get()), &error));
        }
        dashmap::Entry::Vacant(slot) => {
            slot.insert(InflightCall {
                conn: Arc::downgrade(&conn),
                upstream_id,
            });
        }
    }
    let guard = CallGuard {
        ctx_inflight: ctx.inflight.clone(),
        client_id,
        conn: conn.clone(),
        upstream_id,
    };

    let exchange = Exchange {
        method: call.method,
        upstream: call.handle.name().to_string(),
        timeout: call.handle.timeout(),
        client_id: id.get().to_owned(),
        started: Instant::now(),
        last_progress: Arc::new(AtomicU64::new(0)),
    };
    if !streaming {
        let rx = conn
            .send_request(upstream_id, call.method, Some(&params), None)
            .await;
        let frame = exchange.finish(&conn, upstream_id, rx).await;
        drop(guard);
        return Reply::Ready(frame);
    }

    let (sink, frames) = mpsc::channel(STREAM_CAPACITY);
    let route = ProgressRoute {
        client_token: serde_json::value::to_raw_value(&client_token.unwrap_or(Value::Null))
            .unwrap_or_else(|_| RawValue::NULL.to_owned()),
        sink: sink.clone(),
        last_progress: exchange.last_progress.clone(),
        started: exchange.started,
    };
    let rx = conn
        .send_request(upstream_id, call.method, Some(&params), Some(route))
        .await;
    tokio::spawn(async move {
        let frame = exchange.finish(&guard.conn, upstream_id, rx).await;
        // The client may have gone; nothing else waits for this frame.
        let _ = sink.send(frame).await;
        drop(guard);
    });
    Reply::Streaming(frames)
}

/// The bookkeeping of one forwarded request while it waits.
struct Exchange {
    method: &'static str,
    upstream: String,
    timeout: Duration,
    client_id: String,
    started: Instant,
    /// Milliseconds after `started` of the latest progress (written by the
    /// connection's reader).
    last_progress: Arc<AtomicU64>,
}

impl Exchange {
    /// Waits for the answer, restarting the deadline whenever progress
    /// arrives, and turns it into the client's response frame.
    async fn finish(
        &self,
        conn: &Connection,
        upstream_id: u64,
        rx: Result<oneshot::Receiver<Answer>, UpstreamError>,
    ) -> String {
        let answer = match rx {
            Ok(rx) => self.wait(conn, upstream_id, rx).await,
            Err(e) => Err(RouteError::Upstream(e)),
        };
        match answer {
            Ok(result) => {
                let body = rewrite::namespace_result(self.method, &self.upstream, &result);
                protocol::response_frame(&self.client_id, &body)
            }
            Err(e) => e.to_frame(&self.client_id),
        }
    }

    async fn wait(
        &self,
        conn: &Connection,
        upstream_id: u64,
        mut rx: oneshot::Receiver<Answer>,
    ) -> Result<Box<RawValue>, RouteError> {
        let mut deadline = self.started + self.timeout;
        loop {
            tokio::select! {
                answer = &mut rx => return match answer {
                    Ok(answer) => answer.map_err(RouteError::Upstream),
                    // The pending entry was removed without an answer: cancelled.
                    Err(_) => Err(RouteError::Cancelled),
                },
                () = tokio::time::sleep_until(deadline.into()) => {
                    let progressed = self.started + Duration::from_millis(self.last_progress.load(Ordering::Relaxed));
                    if progressed + self.timeout > deadline {
                        deadline = progressed + self.timeout;
                        continue;
                    }
                    conn.cancel(upstream_id, "mcpmux: request timed out");
                    return Err(RouteError::Upstream(UpstreamError::Timeout {
                        upstream: self.upstream.clone(),
                        timeout: self.timeout,
                    }));
                }
            }
        }
    }
}

/// Handles the client's `notifications/cancelled`: the owning upstream gets
/// a cancellation for its own request id; nobody else hears of it.
pub(super) fn cancel(ctx: &RequestContext, params: Option<&RawValue>) {
    let Ok(params) = Params::parse(params) else {
        return;
    };
    let Some(request_id) = params.raw("requestId") else {
        return;
    };
    let reason = params.optional_string("reason").ok().flatten();
    let Some((_, call)) = ctx.inflight.calls.remove(&canonical_id(request_id)) else {
        tracing::debug!(
            request_id = request_id.get(),
            "cancellation for a request that is not in flight"
        );
        return;
    };
    call.cancel_upstream(reason.as_deref().unwrap_or("cancelled by the client"));
}

/// A request id in one spelling, so `1`, `1.0`-free integers and strings
/// with different escapes match between a request and its cancellation.
fn canonical_id(id: &RawValue) -> Box<str> {
    match serde_json::from_str::<Value>(id.get()) {
        Ok(value) => value.to_string().into_boxed_str(),
        Err(_) => id.get().into(),
    }
}
