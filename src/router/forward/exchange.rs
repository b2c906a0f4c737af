//! One forwarded request while it waits for its answer: sending it on
//! its connection, the deadline (restarted by progress), the one retry, the
//! client's stream and log tap, and turning the answer into the client's
//! frame and its reports.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::super::rewrite;
use super::super::{Frame, RouteError};
use super::{CallGuard, bridge};
use crate::metrics::{Metrics, Outcome};
use crate::protocol::{self, Era, Json, Method};
use crate::upstream::{
    CallStream, Connection, Origin, Payload, ProgressRoute, Request, Sent, UpstreamError,
    UpstreamHandle,
};

/// What [`super::build_params`] made of a call's params.
pub(super) struct BuiltParams {
    pub(super) params: crate::protocol::params::Built,
    pub(super) prepared: Option<crate::upstream::Prepared>,
    pub(super) span: crate::telemetry::UpstreamSpan,
}

/// The bookkeeping of one forwarded request while it waits.
pub(super) struct Exchange {
    pub(super) method: Method,
    /// What the request names, as the upstream knows it.
    pub(super) target: Option<Arc<str>>,
    /// The session and request that caused it.
    pub(super) origin: Origin,
    pub(super) handle: UpstreamHandle,
    /// The request as sent upstream (the first attempt's frame, id and
    /// progress token).
    pub(super) params: crate::protocol::params::Built,
    /// Set when `params` were built for a modern upstream (its `_meta` in).
    pub(super) prepared: Option<crate::upstream::Prepared>,
    pub(super) timeout: Duration,
    pub(super) client_id: Arc<str>,
    pub(super) started: Instant,
    /// Milliseconds after `started` of the latest progress (written by the
    /// connection's reader).
    pub(super) last_progress: Arc<AtomicU64>,
    /// The client's progress token (if it asked for progress) and the
    /// call's stream, when the reply streams or may become a stream.
    pub(super) progress: Option<(Option<Box<RawValue>>, CallStream)>,
    pub(super) era: Era,
    /// Upstream log messages for this request's stream (modern `logLevel`).
    pub(super) log_tap: Option<LogTap>,
    pub(super) metrics: Arc<Metrics>,
    /// The authenticated client, and what it asked for: the audit line.
    pub(super) client: Option<Arc<str>>,
    pub(super) item: String,
    /// For a 2025-era session's call to a modern upstream: who answers
    /// the upstream's `input_required` requests.
    pub(super) asker: Option<bridge::Asker>,
    /// For a stateless call to a 2025-era upstream: where the upstream's
    /// requests for the client go (see `park`).
    pub(super) asks: Option<mpsc::Sender<crate::upstream::InputAsk>>,
    /// Safe to send twice (see `retry`).
    pub(super) repeatable: bool,
    /// Its slot at the upstream and its breaker ticket, held until the
    /// exchange ends.
    pub(super) admission: Option<crate::upstream::protect::Admission>,
    /// Where its answer is kept, if it may be (see `cached`).
    pub(super) cached: Option<super::super::cached::Plan>,
    /// The exchange's trace span (empty when tracing is off).
    pub(super) span: crate::telemetry::UpstreamSpan,
    /// The supervisor of its connection (the shared one, a session's
    /// instance or an identity's session): a retry waits there.
    pub(super) via: UpstreamHandle,
}

/// Resolves when the tap may have log messages; never without a tap.
pub(super) async fn log_waiting(tap: &Option<LogTap>) {
    match tap {
        Some(tap) => tap.subscriber.outbox.wait().await,
        None => std::future::pending().await,
    }
}

/// A temporary hub subscriber feeding one request's stream.
pub(super) struct LogTap {
    pub(super) subscriber: Arc<crate::notify::Subscriber>,
    pub(super) hub: Arc<crate::notify::NotifyHub>,
}

impl Drop for LogTap {
    fn drop(&mut self) {
        self.hub.unregister(self.subscriber.id);
    }
}

impl LogTap {
    /// Moves every queued log message to the request's stream.
    pub(super) fn drain(&self, sink: &CallStream) {
        while let Some((_, frame)) = self.subscriber.outbox.next_event() {
            if !sink.try_send(frame.to_string()) {
                tracing::debug!("client is behind; log notification dropped");
            }
        }
    }
}

impl Exchange {
    /// The exchange of `call`, sent under `built` params on `connected`.
    pub(super) fn new(
        call: super::Call<'_>,
        ctx: &super::RequestContext,
        client_id: Arc<str>,
        built: BuiltParams,
        metrics: &Arc<Metrics>,
        connected: super::Connected,
    ) -> Exchange {
        Exchange {
            method: call.method,
            target: call.target,
            origin: Origin::Client {
                session: ctx.subscriber.as_ref().map(|s| s.id),
                request: client_id.clone(),
            },
            timeout: call.handle.timeout(),
            handle: call.handle,
            params: built.params,
            prepared: built.prepared,
            client_id,
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
            admission: connected.admission,
            cached: connected.cached,
            span: built.span,
            via: connected.via,
        }
    }

    /// Queues the request; waiting for room in a stalled upstream's queue
    /// counts against the call's deadline like waiting for its answer.
    pub(super) async fn send(
        &self,
        conn: &Connection,
        upstream_id: u64,
        params: Payload<'_>,
        route: Option<ProgressRoute>,
    ) -> Result<Sent, UpstreamError> {
        let deadline = self.started + self.timeout;
        let request = Request {
            method: self.method.clone(),
            params,
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

    pub(super) fn route(&self) -> Option<ProgressRoute> {
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
    pub(super) async fn finish(
        &self,
        guard: &CallGuard,
        conn: &Connection,
        upstream_id: u64,
        rx: Result<Sent, UpstreamError>,
    ) -> Frame {
        let mut answer = self.answer(conn, upstream_id, rx).await;
        if let Err(RouteError::Upstream(e)) = &answer
            && let Some(next) =
                super::super::retry::decide(e, self.repeatable, self.handle.protection())
        {
            // A refused token leaves the connection up: the retry uses it
            // with a new token.
            let same = matches!(e, UpstreamError::Unauthorized { .. });
            // Boxed and type-erased, as are the other rare turns below
            // (see `in_place::rare`).
            answer = match next {
                Ok(()) => crate::in_place::rare(|| self.retry(guard, conn, same)).await,
                Err(e) => Err(RouteError::Upstream(e)),
            };
        }
        if let Err(RouteError::Upstream(UpstreamError::Credential { error, .. })) = &answer
            && error.is_final()
            && let Some(frame) = crate::in_place::rare(|| self.connect_again()).await
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
            answer = match self.may_ask_input(&result) {
                true => crate::in_place::rare(|| self.bridge_input(guard, conn, result)).await,
                false => Ok(result),
            };
        }
        self.report(&answer);
        // Log messages that came before the answer go out before it.
        if let (Some(tap), Some((_, sink))) = (&self.log_tap, &self.progress) {
            tap.drain(sink);
        }
        match answer {
            Ok(result) => self.result_frame(&result),
            Err(e) => e.to_frame(&self.client_id, self.era),
        }
    }

    /// Counts how the call ended: the upstream's health, metrics, the
    /// operator's page, the trace span and the audit line.
    fn report(&self, answer: &Result<Json, RouteError>) {
        match answer {
            Err(RouteError::Upstream(UpstreamError::Timeout { .. })) => self.handle.note_call(true),
            Ok(_) | Err(RouteError::Upstream(UpstreamError::Rpc { .. })) => {
                self.handle.note_call(false)
            }
            Err(_) => {}
        }
        let outcome = match answer {
            Ok(_) => Outcome::Ok,
            Err(e) => e.outcome(),
        };
        let took = self.started.elapsed();
        let method = self.method.name();
        self.metrics
            .observe(method, self.handle.name(), outcome, took);
        super::super::observe::finished(
            &self.metrics,
            &self.handle,
            method,
            &self.item,
            answer.as_ref().map(|_| ()),
            took,
        );
        self.span.end(
            answer
                .as_ref()
                .err()
                .map(|e| super::super::observe::error_code(e, self.era)),
        );
        super::audit(
            self.client.as_deref(),
            method,
            self.handle.name(),
            &self.item,
            outcome,
            took,
            &self.client_id,
        );
    }

    /// The client's response frame for the upstream's `result`: its URIs
    /// namespaced, kept if it may be, in the client's era. The result is
    /// read again only to rewrite URIs in it; its hint members are found
    /// where the one-pass check (or the rewrite's writing) noted them.
    fn result_frame(&self, result: &Json) -> Frame {
        // A result the one-pass check found no `uri` key in has none to
        // rewrite.
        let rewritten = match self.handle.namespaces_uris() && !result.has_no_uri_key() {
            true => rewrite::namespace_result(&self.method, self.handle.name(), result.get()),
            false => None,
        };
        let (text, spans) = match (rewritten, result.hints()) {
            (Some((text, spans)), _) => (Cow::Owned(text), Cow::Owned(spans)),
            (None, Some(spans)) => (Cow::Borrowed(result.get()), Cow::Borrowed(spans)),
            // A result serde read (not the common answer): a 2025-era
            // client that nothing keeps it for needs nothing of it.
            (None, None) if self.era == Era::Legacy && self.cached.is_none() => {
                return Frame::result(protocol::response_frame(&self.client_id, result.get()));
            }
            (None, None) => {
                let (text, spans) = crate::protocol::hints::learn(result.get());
                (Cow::Owned(text), Cow::Owned(spans))
            }
        };
        let cache = match &self.cached {
            Some(plan) => plan.store(&text, &spans, self.era),
            None => None,
        };
        Frame::result(match self.era {
            Era::Legacy => protocol::response_frame(&self.client_id, &text),
            Era::Modern => {
                rewrite::modern_frame(&self.client_id, &self.method, &text, &spans, cache)
            }
        })
    }

    pub(super) async fn answer(
        &self,
        conn: &Connection,
        upstream_id: u64,
        rx: Result<Sent, UpstreamError>,
    ) -> Result<Json, RouteError> {
        match rx {
            Ok(rx) => self.wait(conn, upstream_id, rx).await,
            Err(e) => Err(RouteError::Upstream(e)),
        }
    }

    /// The one retry: wait (within the deadline) for the re-initialized
    /// upstream, then send again with a fresh id.
    pub(super) async fn retry(
        &self,
        guard: &CallGuard,
        failed: &Connection,
        same: bool,
    ) -> Result<Json, RouteError> {
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
        let rx = self
            .send(
                &conn,
                upstream_id,
                Payload::Params(Some(&params)),
                self.route(),
            )
            .await;
        self.answer(&conn, upstream_id, rx).await
    }

    pub(super) async fn wait(
        &self,
        conn: &Connection,
        upstream_id: u64,
        sent: Sent,
    ) -> Result<Json, RouteError> {
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
        // One timer for the whole wait, moved when progress extends it.
        let expiry = tokio::time::sleep_until(deadline);
        tokio::pin!(expiry);
        loop {
            tokio::select! {
                // In this order: the common path polls the POST and the
                // answer first, and nothing else until they are pending.
                biased;
                // The POST this task drives; its answer comes through `rx`.
                () = async { post.as_mut().expect("guarded").await }, if post.is_some() => {
                    post = None;
                    continue;
                }
                answer = &mut rx => return match answer {
                    Ok(answer) => answer.map_err(RouteError::Upstream),
                    // The pending entry was removed without an answer: cancelled.
                    Err(_) => Err(RouteError::Cancelled),
                },
                () = &mut client_gone => return Err(RouteError::Cancelled),
                () = log_waiting(&self.log_tap) => {
                    if let (Some(tap), Some((_, sink))) = (&self.log_tap, &self.progress) {
                        tap.drain(sink);
                    }
                    continue;
                }
                () = expiry.as_mut() => {
                    let progressed = self.started + Duration::from_millis(self.last_progress.load(Ordering::Relaxed));
                    if progressed + self.timeout > deadline {
                        deadline = progressed + self.timeout;
                        expiry.as_mut().reset(deadline);
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
