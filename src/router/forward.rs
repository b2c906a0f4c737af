//! Forwarding one call to its upstream: id and progress-token remapping,
//! the per-request deadline (restarted by progress), cancellation, and the
//! URI rewrite of the result.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

mod bridge;
mod connect;
mod park;

pub(crate) use park::Parking;

use super::call::Call;
use super::rewrite;
use super::{Admitted, Frame, Reply, RequestContext, RouteError};
use crate::metrics::{Metrics, Outcome};
use crate::protocol::Method;
use crate::protocol::Params;
use crate::protocol::{self, Era, RpcError, code};
use crate::upstream::protect::limits::ClientKey;
use crate::upstream::{
    Connection, Origin, ProgressRoute, Request, Sent, UpstreamError, UpstreamHandle,
};

/// Frames buffered for a streaming reply. Progress beyond this is dropped
/// (see [`ProgressRoute::sink`]); the final response always gets through.
const STREAM_CAPACITY: usize = 64;

/// Where a client's in-flight request went upstream.
pub(crate) struct InflightCall {
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
    inflight: Arc<super::InflightCalls>,
    client_id: Box<str>,
    /// The attempt in flight; replaced when a call is retried.
    current: std::sync::Mutex<(Arc<Connection>, u64)>,
    /// Modern clients cancel by closing the response stream: a call dropped
    /// before its answer is cancelled upstream, not just forgotten.
    cancel_on_drop: bool,
}

impl CallGuard {
    /// Points the in-flight entry at a new request on the same connection
    /// (another round of input).
    fn retarget_here(&self, conn: &Connection, upstream_id: u64) {
        let current = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone();
        debug_assert!(std::ptr::eq(Arc::as_ptr(&current), conn));
        self.retarget(&current, upstream_id);
    }

    /// Points the in-flight entry (and so cancellation) at a new attempt.
    fn retarget(&self, conn: &Arc<Connection>, upstream_id: u64) {
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = (conn.clone(), upstream_id);
        self.inflight.retarget(
            &self.client_id,
            InflightCall {
                conn: Arc::downgrade(conn),
                upstream_id,
            },
        );
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        let (conn, id) = &*self.current.lock().unwrap_or_else(|e| e.into_inner());
        // After a cancellation the client may already reuse the id for a
        // new call: remove the entry only if it is still this call's.
        self.inflight.remove_if(&self.client_id, |call| {
            call.upstream_id == *id && std::ptr::eq(call.conn.as_ptr(), Arc::as_ptr(conn))
        });
        // `cancel` only tells the upstream when the call is still pending.
        if self.cancel_on_drop {
            conn.cancel(*id, "the client closed the response stream");
        } else {
            conn.forget(*id);
        }
    }
}

/// Sends the call and produces its reply: inline when there is no progress
/// to stream, otherwise as a stream of frames fed by a task.
pub(super) async fn run(
    call: Call<'_>,
    ctx: &RequestContext,
    id: &RawValue,
    hub: &Arc<crate::notify::NotifyHub>,
    metrics: &Arc<Metrics>,
    tasks: &tokio_util::task::TaskTracker,
    parking: &Arc<Parking>,
) -> Reply {
    let mut call = call;
    connect::strip_own_round(&mut call.params);
    let asked = std::time::Instant::now();
    let deadline = tokio::time::Instant::now() + call.handle.timeout();
    // A kept answer, or one being asked for by an identical request.
    let cached = match super::cached::before(&call, ctx, id, hub.results(), deadline).await {
        super::cached::Before::Hit(frame) => {
            let took = asked.elapsed();
            let upstream = call.handle.name();
            metrics.observe(call.method.name(), upstream, Outcome::Ok, took);
            let client = ctx.identity.as_ref().map(|i| &*i.client);
            audit(
                client,
                call.method.name(),
                upstream,
                &call.item,
                Outcome::Ok,
                took,
                id.get(),
            );
            return Reply::Ready(Frame::result(frame));
        }
        super::cached::Before::Miss(plan) => plan,
    };
    // The upstream's breaker and concurrency cap first (see `upstream::protect`).
    let admitted = call
        .handle
        .protection()
        .admit(client_key(ctx), deadline)
        .await;
    let connected = match &admitted {
        Ok(_) => {
            call.handle
                .connection_for(
                    ctx.subscriber.as_ref().map(|s| s.id),
                    ctx.identity.as_deref(),
                    deadline,
                )
                .await
        }
        Err(e) => Err(e.clone()),
    };
    let (conn, via) = match connected {
        Ok(connected) => connected,
        Err(UpstreamError::AuthorizationRequired { upstream, start }) => {
            drop(admitted);
            let on = Served {
                hub,
                metrics,
                tasks,
                parking,
            };
            return connect::first(call, ctx, id, on, cached, upstream, *start, deadline).await;
        }
        Err(e) => return refused(&call, ctx, id, metrics, e, asked),
    };
    let on = Served {
        hub,
        metrics,
        tasks,
        parking,
    };
    let connected = Connected {
        conn,
        via,
        admission: admitted.ok(),
        cached,
    };
    send(call, ctx, id, on, connected).await
}

/// What a call is served with: the router's parts.
#[derive(Clone, Copy)]
struct Served<'r> {
    hub: &'r Arc<crate::notify::NotifyHub>,
    metrics: &'r Arc<Metrics>,
    tasks: &'r tokio_util::task::TaskTracker,
    parking: &'r Arc<Parking>,
}

/// A call's way to its upstream, once admitted and connected.
struct Connected {
    conn: Arc<Connection>,
    /// The supervisor of `conn`, where a retry waits for a new connection.
    via: UpstreamHandle,
    admission: Option<crate::upstream::protect::Admission>,
    cached: Option<super::cached::Plan>,
}

/// The reply to a call that could not be sent, counted as it ended.
fn refused(
    call: &Call<'_>,
    ctx: &RequestContext,
    id: &RawValue,
    metrics: &Arc<Metrics>,
    e: UpstreamError,
    asked: std::time::Instant,
) -> Reply {
    let e = RouteError::from(e);
    metrics.observe(
        call.method.name(),
        call.handle.name(),
        e.outcome(),
        asked.elapsed(),
    );
    super::observe::finished(
        metrics,
        &call.handle,
        call.method.name(),
        &call.item,
        Err(&e),
        asked.elapsed(),
    );
    Reply::Ready(e.to_frame(id.get(), ctx.era))
}

/// Sends an admitted, connected call and produces its reply.
async fn send(
    call: Call<'_>,
    ctx: &RequestContext,
    id: &RawValue,
    on: Served<'_>,
    connected: Connected,
) -> Reply {
    let Served {
        hub,
        metrics,
        tasks,
        parking,
    } = on;
    let Connected {
        conn,
        via,
        admission,
        cached,
    } = connected;
    // The placeholder `connect` tool of an upstream that acts as each user:
    // reaching here, the caller has connected.
    if call.method == Method::ToolsCall
        && call.target.as_deref() == Some(crate::upstream::CONNECT_TOOL)
        && call.handle.holds_place()
    {
        let result = connect::connected_result(call.handle.name());
        return Reply::Ready(Frame::result(protocol::response_frame(id.get(), &result)));
    }
    // A stateless client's call to a 2025-era upstream may be asked for
    // input; the client's retry then continues it (see `park`).
    let parkable = ctx.era == Era::Modern
        && !conn.is_modern()
        && matches!(
            call.method,
            Method::ToolsCall | Method::PromptsGet | Method::ResourcesRead
        );
    let mut call = call;
    if !conn.is_modern() {
        // Input rounds are the gateway's business with a 2025-era upstream.
        let state = call.params.take("requestState");
        let responses = call.params.take("inputResponses");
        if let (true, Some(state)) = (parkable, state) {
            let client = ctx.identity.as_ref().map(|i| &*i.client);
            return park::resume(parking, tasks, id, client, &call.item, state, responses).await;
        }
    }
    let upstream_id = conn.next_id();
    let client_token = call.params.progress_token().cloned();
    let streaming = ctx.can_stream && (client_token.is_some() || ctx.log_level.is_some());
    // A session's log level reaches a modern upstream as the per-request
    // `_meta` field, since that era has no logging/setLevel.
    let capabilities = match parkable {
        true => call
            .params
            .meta(protocol::meta::CLIENT_CAPABILITIES)
            .and_then(Value::as_object)
            .cloned(),
        false => None,
    };
    if conn.is_modern() {
        if let Some(level) = ctx.subscriber.as_ref().and_then(|s| s.log_level()) {
            call.params
                .default_meta(protocol::meta::LOG_LEVEL, Value::from(level.as_str()));
        }
        // A session's client says what it can answer (the gateway asks it
        // on the upstream's behalf, see `bridge`).
        if let Some(capabilities) = ctx.subscriber.as_ref().and_then(|s| s.asks.capabilities()) {
            call.params
                .default_meta(protocol::meta::CLIENT_CAPABILITIES, capabilities);
        }
    } else {
        // A session-based upstream must not mistake a modern client's request
        // metadata for its own era's.
        call.params.strip_meta_prefix("io.modelcontextprotocol/");
    }
    let span = crate::telemetry::UpstreamSpan::start(
        call.method.name(),
        call.target.as_deref(),
        call.handle.name(),
    );
    for (key, value) in span.carrier().into_iter().flatten() {
        call.params.set_meta(&key, Value::String(value));
    }
    // A modern upstream's own `_meta` goes in now, so the params are built
    // once and sent as they are.
    let prepared = conn.prepare_modern(&mut call.params, &call.method, call.target.as_deref());
    let params = call
        .params
        .build(call.key, &call.value, streaming.then_some(upstream_id));

    // Ids are unique per session while in flight; a reuse would make the
    // first call's cancellation reach the wrong request.
    let client_id = canonical_id(id);
    let entry = InflightCall {
        conn: Arc::downgrade(&conn),
        upstream_id,
    };
    match ctx.inflight.insert_new(client_id.clone(), entry) {
        Admitted::Yes => {}
        Admitted::IdInUse => {
            let message = format!(
                "request id {} is already in flight in this session",
                id.get()
            );
            return Reply::Ready(refuse_request(id, message));
        }
        Admitted::Full => {
            let message = format!(
                "this session already has {} calls in flight; wait for some to finish",
                super::MAX_CALLS_IN_FLIGHT
            );
            return Reply::Ready(refuse_request(id, message));
        }
    }
    let guard = CallGuard {
        inflight: ctx.inflight.clone(),
        client_id,
        current: std::sync::Mutex::new((conn.clone(), upstream_id)),
        cancel_on_drop: ctx.era == Era::Modern,
    };

    let origin = Origin::Client {
        session: ctx.subscriber.as_ref().map(|s| s.id),
        request: id.get().into(),
    };
    let mut exchange = Exchange {
        method: call.method,
        target: call.target,
        origin,
        timeout: call.handle.timeout(),
        handle: call.handle,
        params,
        prepared,
        client_id: id.get().to_owned(),
        started: Instant::now(),
        last_progress: Arc::new(AtomicU64::new(0)),
        progress: None,
        era: ctx.era,
        log_tap: None,
        metrics: metrics.clone(),
        client: ctx.identity.as_ref().map(|i| i.client.clone()),
        item: call.item,
        asker: None,
        asks: None,
        repeatable: call.repeatable,
        admission,
        cached,
        span,
        via,
    };
    // A 2025-era session's call may be asked back by its upstream
    // (sampling, elicitation, roots): its reply then becomes a stream.
    let askable = ctx.can_stream && ctx.era == Era::Legacy && ctx.subscriber.is_some();
    if askable && conn.is_modern() {
        exchange.asker = ctx.subscriber.as_ref().map(|s| bridge::Asker {
            hub: hub.clone(),
            session: s.id,
        });
    }
    if parkable {
        let (asks, asked) = mpsc::channel(PARK_CAPACITY);
        exchange.asks = Some(asks);
        let (sink, frames) = mpsc::channel(STREAM_CAPACITY);
        let mut token = None;
        if streaming {
            if let Some(level) = ctx.log_level {
                exchange.log_tap = Some(LogTap {
                    subscriber: hub.register_log_tap(exchange.handle.name().clone(), level),
                    hub: hub.clone(),
                });
            }
            token = client_token
                .as_ref()
                .and_then(|t| serde_json::value::to_raw_value(t).ok());
        }
        exchange.progress = Some((token, sink));
        let route = exchange.route();
        let rx = exchange
            .send(&conn, upstream_id, &exchange.params.text, route)
            .await;
        let driver = park::Driver {
            capabilities,
            first_id: id.get().to_owned(),
            answering: id.get().to_owned(),
            client: exchange.client.clone(),
            item: exchange.item.clone(),
            timeout: exchange.timeout,
            last_progress: exchange.last_progress.clone(),
            started: exchange.started,
            frames,
            asks: asked,
            finishing: Box::pin(async move {
                let frame = exchange.finish(&guard, &conn, upstream_id, rx).await;
                drop(guard);
                frame
            }),
        };
        return park::drive(driver, parking, tasks, streaming).await;
    }
    if !streaming && !askable {
        let rx = exchange
            .send(&conn, upstream_id, &exchange.params.text, None)
            .await;
        let frame = exchange.finish(&guard, &conn, upstream_id, rx).await;
        drop(guard);
        return Reply::Ready(frame);
    }
    if !streaming {
        let (sink, frames) = mpsc::channel(STREAM_CAPACITY);
        exchange.progress = Some((None, sink));
        let route = exchange.route();
        let rx = exchange
            .send(&conn, upstream_id, &exchange.params.text, route)
            .await;
        let finishing = Box::pin(async move {
            let frame = exchange.finish(&guard, &conn, upstream_id, rx).await;
            drop(guard);
            frame
        });
        return answer_or_stream(finishing, frames, tasks).await;
    }

    let (sink, frames) = mpsc::channel(STREAM_CAPACITY);
    if let Some(level) = ctx.log_level {
        exchange.log_tap = Some(LogTap {
            subscriber: hub.register_log_tap(exchange.handle.name().clone(), level),
            hub: hub.clone(),
        });
    }
    let client_token = serde_json::value::to_raw_value(&client_token.unwrap_or(Value::Null))
        .unwrap_or_else(|_| RawValue::NULL.to_owned());
    exchange.progress = Some((Some(client_token), sink.clone()));
    let route = exchange.route();
    let rx = exchange
        .send(&conn, upstream_id, &exchange.params.text, route)
        .await;
    // One task per streaming call, at most `MAX_CALLS_IN_FLIGHT` per session.
    let span = tracing::debug_span!("call", upstream = %exchange.handle.name(), method = exchange.method.name());
    let finish = async move {
        let frame = exchange.finish(&guard, &conn, upstream_id, rx).await;
        // The client may have gone; nothing else waits for this frame.
        let _ = sink.send(frame.into_text()).await;
        drop(guard);
    };
    tasks.spawn(tracing::Instrument::instrument(finish, span));
    Reply::Streaming(frames)
}

/// A plain answer, unless the upstream asks the client something first:
/// then the reply becomes a stream of those requests and the answer, fed
/// by a task (on the tracker) until the call ends.
async fn answer_or_stream(
    mut finishing: std::pin::Pin<Box<dyn std::future::Future<Output = Frame> + Send>>,
    mut frames: mpsc::Receiver<String>,
    tasks: &tokio_util::task::TaskTracker,
) -> Reply {
    let first = tokio::select! {
        frame = &mut finishing => return Reply::Ready(frame),
        first = frames.recv() => first,
    };
    let (out, reply) = mpsc::channel(STREAM_CAPACITY);
    if let Some(first) = first {
        let _ = out.try_send(first);
    }
    let feed = async move {
        let mut frames = Some(frames);
        loop {
            let next = async {
                match frames.as_mut() {
                    Some(f) => f.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                frame = &mut finishing => {
                    let _ = out.send(frame.into_text()).await;
                    return;
                }
                more = next => {
                    let delivered = match more {
                        Some(frame) => out.send(frame).await.is_ok(),
                        None => false,
                    };
                    // The client is gone: its call's stream closes, which
                    // ends the requests waiting on it.
                    if !delivered {
                        frames = None;
                    }
                }
            }
        }
    };
    tasks.spawn(tracing::Instrument::instrument(
        feed,
        tracing::debug_span!("asked call"),
    ));
    Reply::Streaming(reply)
}

/// The bookkeeping of one forwarded request while it waits.
struct Exchange {
    method: Method,
    /// What the request names, as the upstream knows it.
    target: Option<Arc<str>>,
    /// The session and request that caused it.
    origin: Origin,
    handle: UpstreamHandle,
    /// The params as sent upstream (with the first attempt's progress token).
    params: crate::protocol::params::Built,
    /// Set when `params` were built for a modern upstream (its `_meta` in).
    prepared: Option<crate::upstream::Prepared>,
    timeout: Duration,
    client_id: String,
    started: Instant,
    /// Milliseconds after `started` of the latest progress (written by the
    /// connection's reader).
    last_progress: Arc<AtomicU64>,
    /// The client's progress token (if it asked for progress) and the
    /// call's stream, when the reply streams or may become a stream.
    progress: Option<(Option<Box<RawValue>>, mpsc::Sender<String>)>,
    era: Era,
    /// Upstream log messages for this request's stream (modern `logLevel`).
    log_tap: Option<LogTap>,
    metrics: Arc<Metrics>,
    /// The authenticated client, and what it asked for: the audit line.
    client: Option<Arc<str>>,
    item: String,
    /// For a 2025-era session's call to a modern upstream: who answers
    /// the upstream's `input_required` requests.
    asker: Option<bridge::Asker>,
    /// For a stateless call to a 2025-era upstream: where the upstream's
    /// requests for the client go (see `park`).
    asks: Option<mpsc::Sender<crate::upstream::InputAsk>>,
    /// Safe to send twice (see `retry`).
    repeatable: bool,
    /// Its slot at the upstream and its breaker ticket, held until the
    /// exchange ends.
    admission: Option<crate::upstream::protect::Admission>,
    /// Where its answer is kept, if it may be (see `cached`).
    cached: Option<super::cached::Plan>,
    /// The exchange's trace span (empty when tracing is off).
    span: crate::telemetry::UpstreamSpan,
    /// The supervisor of its connection (the shared one, a session's
    /// instance or an identity's session): a retry waits there.
    via: UpstreamHandle,
}

/// Resolves when the tap may have log messages; never without a tap.
async fn log_waiting(tap: &Option<LogTap>) {
    match tap {
        Some(tap) => tap.subscriber.outbox.wait().await,
        None => std::future::pending().await,
    }
}

/// A temporary hub subscriber feeding one request's stream.
struct LogTap {
    subscriber: Arc<crate::notify::Subscriber>,
    hub: Arc<crate::notify::NotifyHub>,
}

impl Drop for LogTap {
    fn drop(&mut self) {
        self.hub.unregister(self.subscriber.id);
    }
}

impl LogTap {
    /// Moves every queued log message to the request's stream.
    fn drain(&self, sink: &mpsc::Sender<String>) {
        while let Some((_, frame)) = self.subscriber.outbox.next_event() {
            if sink.try_send(frame.to_string()).is_err() {
                tracing::debug!("client is behind; log notification dropped");
            }
        }
    }
}

impl Exchange {
    /// Queues the request; waiting for room in a stalled upstream's queue
    /// counts against the call's deadline like waiting for its answer.
    async fn send(
        &self,
        conn: &Connection,
        upstream_id: u64,
        params: &str,
        route: Option<ProgressRoute>,
    ) -> Result<Sent, UpstreamError> {
        let deadline = self.started + self.timeout;
        let request = Request {
            method: self.method.clone(),
            params: Some(params),
            target: self.target.clone(),
            origin: self.origin.clone(),
            progress: route,
            prepared: self.prepared.clone(),
        };
        let queued = self
            .span
            .in_scope(conn.send_request_direct(upstream_id, request));
        match tokio::time::timeout_at(deadline, queued).await {
            Ok(rx) => rx,
            Err(_) => {
                conn.forget(upstream_id);
                Err(UpstreamError::Timeout {
                    upstream: self.handle.name().to_string(),
                    timeout: self.timeout,
                })
            }
        }
    }

    fn route(&self) -> Option<ProgressRoute> {
        self.progress.as_ref().map(|(token, sink)| ProgressRoute {
            client_token: token.clone(),
            sink: sink.clone(),
            last_progress: self.last_progress.clone(),
            started: self.started,
            asks: self.asks.clone(),
        })
    }

    /// Waits for the answer and turns it into the client's response frame.
    /// When an HTTP upstream lost its session, the call is sent once more
    /// after the gateway has re-initialized it.
    async fn finish(
        &self,
        guard: &CallGuard,
        conn: &Connection,
        upstream_id: u64,
        rx: Result<Sent, UpstreamError>,
    ) -> Frame {
        let mut answer = self.answer(conn, upstream_id, rx).await;
        if let Err(RouteError::Upstream(e)) = &answer
            && let Some(next) = super::retry::decide(e, self.repeatable, self.handle.protection())
        {
            // A refused token leaves the connection up: the retry uses it
            // with a new token.
            let same = matches!(e, UpstreamError::Unauthorized { .. });
            answer = match next {
                Ok(()) => self.retry(guard, conn, same).await,
                Err(e) => Err(RouteError::Upstream(e)),
            };
        }
        if let Err(RouteError::Upstream(UpstreamError::Credential { error, .. })) = &answer
            && error.is_final()
            && let Some(frame) = self.connect_again().await
        {
            return frame;
        }
        if let Some(admission) = &self.admission {
            let conn_id = std::ptr::from_ref(conn) as usize;
            match &answer {
                Ok(_) => admission.record(Ok(()), conn_id),
                Err(RouteError::Upstream(e)) => admission.record(Err(e), conn_id),
                Err(_) => {}
            }
        }
        if let Ok(result) = answer {
            answer = self.bridge_input(guard, conn, result).await;
        }
        match &answer {
            Err(RouteError::Upstream(UpstreamError::Timeout { .. })) => self.handle.note_call(true),
            Ok(_) | Err(RouteError::Upstream(UpstreamError::Rpc { .. })) => {
                self.handle.note_call(false)
            }
            Err(_) => {}
        }
        let outcome = match &answer {
            Ok(_) => Outcome::Ok,
            Err(e) => e.outcome(),
        };
        self.metrics.observe(
            self.method.name(),
            self.handle.name(),
            outcome,
            self.started.elapsed(),
        );
        super::observe::finished(
            &self.metrics,
            &self.handle,
            self.method.name(),
            &self.item,
            answer.as_ref().map(|_| ()),
            self.started.elapsed(),
        );
        self.span.end(
            answer
                .as_ref()
                .err()
                .map(|e| super::observe::error_code(e, self.era)),
        );
        audit(
            self.client.as_deref(),
            self.method.name(),
            self.handle.name(),
            &self.item,
            outcome,
            self.started.elapsed(),
            &self.client_id,
        );
        // Log messages that came before the answer go out before it.
        if let (Some(tap), Some((_, sink))) = (&self.log_tap, &self.progress) {
            tap.drain(sink);
        }
        match answer {
            Ok(result) => {
                let upstream = self.handle.name();
                let body = match self.handle.namespaces_uris() {
                    true => rewrite::namespace_result(self.method.name(), upstream, &result),
                    false => std::borrow::Cow::Borrowed(result.get()),
                };
                let body = match &self.cached {
                    Some(plan) => plan.store(body, self.era),
                    None => body,
                };
                Frame::result(match self.era {
                    Era::Legacy => protocol::response_frame(&self.client_id, &body),
                    Era::Modern => protocol::response_frame(
                        &self.client_id,
                        &rewrite::modern_result(self.method.name(), &body),
                    ),
                })
            }
            Err(e) => e.to_frame(&self.client_id, self.era),
        }
    }

    async fn answer(
        &self,
        conn: &Connection,
        upstream_id: u64,
        rx: Result<Sent, UpstreamError>,
    ) -> Result<Box<RawValue>, RouteError> {
        match rx {
            Ok(rx) => self.wait(conn, upstream_id, rx).await,
            Err(e) => Err(RouteError::Upstream(e)),
        }
    }

    /// The one retry: wait (within the deadline) for the re-initialized
    /// upstream, then send again with a fresh id.
    async fn retry(
        &self,
        guard: &CallGuard,
        failed: &Connection,
        same: bool,
    ) -> Result<Box<RawValue>, RouteError> {
        // A restart is waited for as long as a start would be.
        let deadline = (self.started + self.timeout).min(Instant::now() + self.handle.start_wait());
        let conn = match same {
            true => self.via.connection()?,
            false => self.via.reconnected(failed, deadline).await?,
        };
        // The params were built for one era; an upstream that came back
        // speaking the other gets a fresh call from its client instead.
        if conn.is_modern() != self.prepared.is_some() {
            return Err(RouteError::Upstream(conn.unavailable()));
        }
        let upstream_id = conn.next_id();
        let params = self.params.with_token(upstream_id);
        guard.retarget(&conn, upstream_id);
        tracing::info!(upstream = %self.handle.name(), method = self.method.name(), "retrying once on the reconnected upstream");
        let rx = self.send(&conn, upstream_id, &params, self.route()).await;
        self.answer(&conn, upstream_id, rx).await
    }

    async fn wait(
        &self,
        conn: &Connection,
        upstream_id: u64,
        sent: Sent,
    ) -> Result<Box<RawValue>, RouteError> {
        let Sent {
            answer: mut rx,
            mut post,
        } = sent;
        let mut deadline = self.started + self.timeout;
        // A modern client that closes its response stream cancels the call.
        let client_gone = async {
            match (&self.progress, self.era) {
                (Some((_, sink)), Era::Modern) => sink.closed().await,
                _ => std::future::pending().await,
            }
        };
        tokio::pin!(client_gone);
        loop {
            tokio::select! {
                // The POST this task drives; its answer comes through `rx`.
                () = async { post.as_mut().expect("guarded").await }, if post.is_some() => {
                    post = None;
                    continue;
                }
                () = &mut client_gone => return Err(RouteError::Cancelled),
                () = log_waiting(&self.log_tap) => {
                    if let (Some(tap), Some((_, sink))) = (&self.log_tap, &self.progress) {
                        tap.drain(sink);
                    }
                    continue;
                }
                answer = &mut rx => return match answer {
                    Ok(answer) => answer.map_err(RouteError::Upstream),
                    // The pending entry was removed without an answer: cancelled.
                    Err(_) => Err(RouteError::Cancelled),
                },
                () = tokio::time::sleep_until(deadline) => {
                    let progressed = self.started + Duration::from_millis(self.last_progress.load(Ordering::Relaxed));
                    if progressed + self.timeout > deadline {
                        deadline = progressed + self.timeout;
                        continue;
                    }
                    conn.cancel(upstream_id, "mcpmux: request timed out");
                    return Err(RouteError::Upstream(UpstreamError::Timeout {
                        upstream: self.handle.name().to_string(),
                        timeout: self.timeout,
                    }));
                }
            }
        }
    }
}

/// A request refused before it was sent: -32600 and why.
fn refuse_request(id: &RawValue, message: String) -> Frame {
    let error = RpcError::new(code::INVALID_REQUEST, message);
    Frame::error(
        protocol::error_frame(Some(id.get()), &error),
        code::INVALID_REQUEST,
        None,
    )
}

/// Requests for a stateless call's client queued at once; beyond it, the
/// upstream's further requests wait (in their relay tasks, never in the
/// upstream's reader) within their timeout.
const PARK_CAPACITY: usize = 8;

/// Who a call counts against at a saturated upstream: the authenticated
/// client, else the session, else every anonymous stateless client as one.
fn client_key(ctx: &RequestContext) -> ClientKey {
    match (&ctx.identity, &ctx.subscriber) {
        (Some(identity), _) => ClientKey::Client(identity.client.clone()),
        (None, Some(subscriber)) => ClientKey::Session(subscriber.id),
        (None, None) => ClientKey::Anonymous,
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
    let Some(call) = ctx.inflight.take(&canonical_id(request_id)) else {
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

/// The audit line of one call: who, what, where, how it ended, how long.
/// Arguments are never logged.
pub(super) fn audit(
    client: Option<&str>,
    method: &str,
    upstream: &str,
    item: &str,
    outcome: Outcome,
    took: Duration,
    request_id: &str,
) {
    tracing::info!(
        target: "mcpmux::audit",
        client = client.unwrap_or("-"),
        method,
        upstream,
        item,
        outcome = ?outcome,
        duration_ms = took.as_secs_f64() * 1000.0,
        request_id,
        "call"
    );
}
