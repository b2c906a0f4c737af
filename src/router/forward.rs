//! Forwarding one call to its upstream: admission, the params built once
//! for the upstream's era, id and progress-token remapping, the in-flight
//! table and cancellation, and the shape of the reply (a plain answer, a
//! stream, or a parked stateless call). The wait itself is `exchange`'s.

use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

mod bridge;
mod connect;
mod exchange;
mod park;

use exchange::{Exchange, LogTap};
pub(crate) use park::Parking;

use super::call::Call;
use super::{Admitted, Frame, Reply, RequestContext, RouteError};
use crate::metrics::{Metrics, Outcome};
use crate::protocol::Method;
use crate::protocol::{self, Era, RpcError, code};
use crate::protocol::{Params, Raw};
use crate::upstream::protect::limits::ClientKey;
use crate::upstream::{CallStream, Connection, UpstreamError, UpstreamHandle};

/// A call's answer being finished ([`Flight::finishing`]): on the heap, so
/// a task or a select can hold it while the call's stream is relayed.
type Finishing = std::pin::Pin<Box<dyn std::future::Future<Output = Frame> + Send>>;

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
    client_id: Arc<str>,
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
#[allow(clippy::manual_async_fn)] // held once: see `in_place`
pub(super) fn run(
    mut call: Call<'_>,
    ctx: &RequestContext,
    id: &RawValue,
    hub: &Arc<crate::notify::NotifyHub>,
    metrics: &Arc<Metrics>,
    tasks: &tokio_util::task::TaskTracker,
    parking: &Arc<Parking>,
) -> impl Future<Output = Reply> {
    async move {
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
                let start = *start;
                return crate::in_place::rare(|| {
                    connect::first(call, ctx, id, on, cached, upstream, start, deadline)
                })
                .await;
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
#[allow(clippy::manual_async_fn)] // held once: see `in_place`
fn send(
    mut call: Call<'_>,
    ctx: &RequestContext,
    id: &RawValue,
    on: Served<'_>,
    connected: Connected,
) -> impl Future<Output = Reply> {
    async move {
        let conn = connected.conn.clone();
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
        if !conn.is_modern() {
            // Input rounds are the gateway's business with a 2025-era upstream.
            let state = call.params.take("requestState");
            let responses = call.params.take("inputResponses");
            if let (true, Some(state)) = (parkable, state) {
                let client = ctx.identity.as_ref().map(|i| &*i.client);
                let (parking, tasks) = (on.parking, on.tasks);
                let (state, responses) = (state.get(), responses.map(Raw::get));
                let item = &call.item;
                return crate::in_place::rare(|| {
                    park::resume(parking, tasks, id, client, item, state, responses)
                })
                .await;
            }
        }
        let upstream_id = conn.next_id();
        let client_token = call.params.progress_token().cloned();
        let streaming = ctx.can_stream && (client_token.is_some() || ctx.log_level.is_some());
        let capabilities = match parkable {
            true => call
                .params
                .meta(protocol::meta::CLIENT_CAPABILITIES)
                .and_then(Value::as_object)
                .cloned(),
            false => None,
        };
        let built = build_params(&mut call, ctx, &conn, upstream_id, streaming);
        let guard = match admit_id(ctx, id, &conn, upstream_id) {
            Ok(guard) => guard,
            Err(refused) => return Reply::Ready(refused),
        };
        // The client's id as it spelled it, shared with the in-flight entry
        // when that is the same text (nearly always).
        let client_id = match &*guard.client_id == id.get() {
            true => guard.client_id.clone(),
            false => id.get().into(),
        };
        let exchange = exchange::Exchange::new(call, ctx, client_id, built, on.metrics, connected);
        let flight = Flight {
            exchange,
            guard,
            conn,
            upstream_id,
        };
        // A 2025-era session's call may be asked back by its upstream
        // (sampling, elicitation, roots): its reply then becomes a stream.
        let askable = ctx.can_stream && ctx.era == Era::Legacy && ctx.subscriber.is_some();
        // The rare kinds are boxed and type-erased (see `in_place::rare`).
        match (parkable, streaming, askable) {
            (true, ..) => {
                let parked = || flight.parked(ctx, on, client_token, capabilities, streaming);
                crate::in_place::rare(parked).await
            }
            (false, false, false) => flight.plain().await,
            (false, false, true) => flight.asked(ctx, on).await,
            (false, true, _) => {
                crate::in_place::rare(|| flight.streamed(ctx, on, client_token, askable)).await
            }
        }
    }
}

/// The request as it goes upstream under `upstream_id`, its frame built
/// once around the params: the era's `_meta` (a session's log level and
/// capabilities for a modern upstream; a modern client's keys stripped for
/// a session-based one), the trace context, and, when the reply
/// `streaming`, the id as the progress token.
fn build_params(
    call: &mut Call<'_>,
    ctx: &RequestContext,
    conn: &Connection,
    upstream_id: u64,
    streaming: bool,
) -> exchange::BuiltParams {
    if conn.is_modern() {
        // A session's log level reaches a modern upstream as the per-request
        // `_meta` field, since that era has no logging/setLevel.
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
    let head = crate::protocol::params::RequestHead {
        id: upstream_id,
        method: call.method.name(),
    };
    let progress = streaming.then_some(upstream_id);
    exchange::BuiltParams {
        params: call
            .params
            .build_request(head, call.key, &call.value, progress),
        prepared,
        span,
    }
}

/// Enters the call in the session's in-flight table under the client's
/// id; ids are unique per session while in flight, since a reuse would
/// make the first call's cancellation reach the wrong request.
fn admit_id(
    ctx: &RequestContext,
    id: &RawValue,
    conn: &Arc<Connection>,
    upstream_id: u64,
) -> Result<CallGuard, Frame> {
    let client_id = canonical_id(id.get());
    let entry = InflightCall {
        conn: Arc::downgrade(conn),
        upstream_id,
    };
    match ctx.inflight.insert_new(client_id.clone(), entry) {
        Admitted::Yes => Ok(CallGuard {
            inflight: ctx.inflight.clone(),
            client_id,
            current: std::sync::Mutex::new((conn.clone(), upstream_id)),
            cancel_on_drop: ctx.era == Era::Modern,
        }),
        Admitted::IdInUse => Err(refuse_request(
            id,
            format!(
                "request id {} is already in flight in this session",
                id.get()
            ),
        )),
        Admitted::Ended => Err(refuse_request(
            id,
            "the session ended before this call was sent".to_owned(),
        )),
        Admitted::Full => Err(refuse_request(
            id,
            format!(
                "this session already has {} calls in flight; wait for some to finish",
                super::MAX_CALLS_IN_FLIGHT
            ),
        )),
    }
}

/// A call on its way: its exchange, its in-flight entry, and where it went.
struct Flight {
    exchange: Exchange,
    guard: CallGuard,
    conn: Arc<Connection>,
    upstream_id: u64,
}

impl Flight {
    /// Sends the request with the exchange's progress route.
    async fn sent(&self) -> Result<crate::upstream::Sent, crate::upstream::UpstreamError> {
        let route = self.exchange.route();
        let exchange = &self.exchange;
        exchange
            .send(
                &self.conn,
                self.upstream_id,
                crate::upstream::Payload::Frame(&exchange.params),
                route,
            )
            .await
    }

    /// Waits for the answer and ends the call.
    async fn finish(
        self,
        sent: Result<crate::upstream::Sent, crate::upstream::UpstreamError>,
    ) -> Frame {
        let Flight {
            exchange,
            guard,
            conn,
            upstream_id,
        } = self;
        let frame = exchange.finish(&guard, &conn, upstream_id, sent).await;
        drop(guard);
        frame
    }

    /// [`Flight::finish`] as a future of its own, for a task or a select.
    fn finishing(
        self,
        sent: Result<crate::upstream::Sent, crate::upstream::UpstreamError>,
    ) -> Finishing {
        Box::pin(self.finish(sent))
    }

    /// No progress and nobody to ask: the answer, awaited here.
    #[allow(clippy::manual_async_fn)] // held once: see `in_place`
    fn plain(self) -> impl Future<Output = Reply> {
        async move {
            let sent = self.sent().await;
            Reply::Ready(self.finish(sent).await)
        }
    }

    /// A 2025-era session's call that its upstream may ask things of
    /// (sampling, elicitation, roots): a plain answer unless it does.
    #[allow(clippy::manual_async_fn)] // held once: see `in_place`
    fn asked(mut self, ctx: &RequestContext, on: Served<'_>) -> impl Future<Output = Reply> {
        async move {
            self.ask_back(ctx, on);
            // No channel until the upstream asks something: most calls are
            // asked nothing.
            let stream = CallStream::lazy(STREAM_CAPACITY);
            self.exchange.progress = Some((None, stream.clone()));
            let sent = self.sent().await;
            answer_or_stream(self.finishing(sent), stream, on.tasks).await
        }
    }

    /// A call whose client asked for progress (or a modern log level):
    /// a stream of frames fed by a task until the answer.
    async fn streamed(
        mut self,
        ctx: &RequestContext,
        on: Served<'_>,
        client_token: Option<Value>,
        askable: bool,
    ) -> Reply {
        if askable {
            self.ask_back(ctx, on);
        }
        let (stream, frames) = CallStream::open(STREAM_CAPACITY);
        let sink = stream.sender();
        self.tap_logs(ctx, on);
        let client_token = serde_json::value::to_raw_value(&client_token.unwrap_or(Value::Null))
            .unwrap_or_else(|_| RawValue::NULL.to_owned());
        self.exchange.progress = Some((Some(client_token), stream));
        let sent = self.sent().await;
        // One task per streaming call, at most `MAX_CALLS_IN_FLIGHT` per session.
        let span = tracing::debug_span!("call", upstream = %self.exchange.handle.name(), method = self.exchange.method.name());
        let finishing = self.finishing(sent);
        let finish = async move {
            let frame = finishing.await;
            // The client may have gone; nothing else waits for this frame.
            let _ = sink.send(frame.into_text()).await;
        };
        on.tasks
            .spawn(tracing::Instrument::instrument(finish, span));
        Reply::Streaming(frames)
    }

    /// A stateless call to a 2025-era upstream, which may ask its client
    /// for input: the call parks until the client's retry (see `park`).
    async fn parked(
        mut self,
        ctx: &RequestContext,
        on: Served<'_>,
        client_token: Option<Value>,
        capabilities: Option<serde_json::Map<String, Value>>,
        streaming: bool,
    ) -> Reply {
        let (asks, asked) = mpsc::channel(PARK_CAPACITY);
        self.exchange.asks = Some(asks);
        let (stream, frames) = CallStream::open(STREAM_CAPACITY);
        let mut token = None;
        if streaming {
            self.tap_logs(ctx, on);
            token = client_token
                .as_ref()
                .and_then(|t| serde_json::value::to_raw_value(t).ok());
        }
        self.exchange.progress = Some((token, stream));
        let sent = self.sent().await;
        let exchange = &self.exchange;
        let id = exchange.client_id.to_string();
        let driver = park::Driver {
            capabilities,
            first_id: id.clone(),
            answering: id,
            client: exchange.client.clone(),
            item: exchange.item.clone(),
            timeout: exchange.timeout,
            last_progress: exchange.last_progress.clone(),
            started: exchange.started,
            frames,
            asks: asked,
            finishing: self.finishing(sent),
        };
        park::drive(driver, on.parking, on.tasks, streaming).await
    }

    /// A modern upstream's `input_required` rounds for a 2025-era session's
    /// call are asked of that session's client (see `bridge`).
    fn ask_back(&mut self, ctx: &RequestContext, on: Served<'_>) {
        if self.conn.is_modern() {
            self.exchange.asker = ctx.subscriber.as_ref().map(|s| bridge::Asker {
                hub: on.hub.clone(),
                session: s.id,
            });
        }
    }

    /// Upstream log messages at or above a modern request's level travel
    /// on its stream.
    fn tap_logs(&mut self, ctx: &RequestContext, on: Served<'_>) {
        if let Some(level) = ctx.log_level {
            self.exchange.log_tap = Some(LogTap {
                subscriber: on
                    .hub
                    .register_log_tap(self.exchange.handle.name().clone(), level),
                hub: on.hub.clone(),
            });
        }
    }
}

/// A plain answer, unless the upstream asks the client something first
/// (which opens `stream`): then the reply becomes a stream of those
/// requests and the answer, fed by a task (on the tracker) until the call
/// ends.
async fn answer_or_stream(
    mut finishing: Finishing,
    stream: CallStream,
    tasks: &tokio_util::task::TaskTracker,
) -> Reply {
    let frames = tokio::select! {
        biased;
        frame = &mut finishing => return Reply::Ready(frame),
        frames = stream.opened() => frames,
    };
    drop(stream);
    relay_asked(finishing, frames, tasks)
}

/// The asked call's reply as a stream, fed by a task with the upstream's
/// requests until the answer. Not inlined: most calls are asked nothing,
/// and the channel and the task's spawn would size their poll frame.
#[inline(never)]
fn relay_asked(
    mut finishing: Finishing,
    frames: mpsc::Receiver<String>,
    tasks: &tokio_util::task::TaskTracker,
) -> Reply {
    let (out, reply) = mpsc::channel(STREAM_CAPACITY);
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
pub(super) fn cancel(ctx: &RequestContext, params: Option<crate::protocol::Raw<'_>>) {
    let Ok(params) = Params::parse(params) else {
        return;
    };
    let Some(request_id) = params.raw("requestId") else {
        return;
    };
    let reason = params.optional_string("reason").ok().flatten();
    let Some(call) = ctx.inflight.take(&canonical_id(request_id.get())) else {
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
fn canonical_id(id: &str) -> Arc<str> {
    if is_canonical(id) {
        return id.into();
    }
    match serde_json::from_str::<Value>(id) {
        Ok(value) => value.to_string().into(),
        Err(_) => id.into(),
    }
}

/// Whether an id is spelled as [`canonical_id`] would spell it: a string
/// with no escape in it, or an integer that fits an `i64` (at most 18
/// digits), as nearly every client sends.
fn is_canonical(id: &str) -> bool {
    let bytes = id.as_bytes();
    match bytes {
        [b'"', inner @ .., b'"'] => !inner.iter().any(|b| matches!(b, b'\\' | b'"')),
        [b'-', digits @ ..] => is_plain_integer(digits) && digits[0] != b'0',
        digits => is_plain_integer(digits),
    }
}

/// 1 to 18 digits, with no leading zero unless it is `0` alone.
fn is_plain_integer(digits: &[u8]) -> bool {
    (1..=18).contains(&digits.len())
        && digits.iter().all(u8::is_ascii_digit)
        && (digits.len() == 1 || digits[0] != b'0')
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
    crate::logging::CallAudit {
        client: client.unwrap_or("-"),
        method,
        upstream,
        item,
        outcome: outcome.audit_name(),
        duration_ms: took.as_secs_f64() * 1000.0,
        request_id,
    }
    .log();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shortcut agrees with the full parse wherever it is taken, and
    /// is not taken where the parse spells an id differently.
    #[test]
    fn an_id_already_canonical_is_kept_as_it_is() {
        let spellings = [
            "0",
            "7",
            "-7",
            "123456789012345678",
            "1234567890123456789",
            "-0",
            "1.0",
            "1e2",
            "\"abc\"",
            "\"\"",
            "\"é\"",
            "\"a\\u0062\"",
            "\"a\\\"b\"",
            "\"\\/\"",
            "null",
            "true",
        ];
        let mut shortcut = 0;
        for text in spellings {
            let id = RawValue::from_string(text.to_owned()).unwrap();
            let parsed = serde_json::from_str::<Value>(text).unwrap().to_string();
            if is_canonical(text) {
                shortcut += 1;
                assert_eq!(parsed, text, "{text} is not canonical");
            }
            assert_eq!(&*canonical_id(id.get()), parsed, "{text}");
        }
        assert_eq!(
            shortcut, 7,
            "0, 7, -7, the 18 digits and three plain strings"
        );
    }
}
