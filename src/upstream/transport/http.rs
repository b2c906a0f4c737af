//! The remote transports: Streamable HTTP, and legacy HTTP+SSE (2024-11-05)
//! either configured or detected by the spec's fallback rule.
//!
//! One [`HttpLink`] serves one upstream session. Its writer task takes
//! frames from the connection's outbound queue and POSTs each one in its
//! own task (at most [`MAX_CONCURRENT_POSTS`] at once), so many calls run
//! concurrently; only `notifications/initialized` is sent and accepted,
//! and the GET stream it opens answered, before anything after it goes
//! out. A POST answer is JSON, or an SSE stream whose events are
//! dispatched as they arrive; a stream that ends before the request's
//! answer is resumed with `Last-Event-ID` (2025-11-25 polling). After the
//! handshake a GET stream carries server-initiated notifications (a 405
//! means the server has none); each time it opens again, every list is
//! fetched again, since a `list_changed` sent while none was open went
//! nowhere. A 404 for our session means the server
//! forgot it: the link ends as "session expired", the supervisor
//! re-initializes at once, and the calls that failed are retried once.
//! Credentials come only from the config's `headers` and, with an `auth:`
//! section, the link's [`TokenCell`] (a 401 drops that token, so the next
//! request fetches a new one); never from clients.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::BodyExt as _;
use hyper::body::Body as _;
use reqwest::header::{self, HeaderMap, HeaderName, HeaderValue};

use crate::protocol::{SESSION_HEADER, VERSION_HEADER};
use reqwest::{StatusCode, Url};
use serde_json::Value;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::legacy_sse;
use super::poster::{HttpAnswer, Poster, from_reqwest};
use super::remote::{Mode, RemoteSession, SessionState};
use crate::config::{RemoteConfig, RemoteMode};
use crate::credentials::cell::TokenCell;
use crate::protocol::Method;
use crate::sse::SseParser;
use crate::upstream::connection::{Connection, DirectSend, Routed};
use crate::upstream::message::Outgoing;
use crate::upstream::{LinkError, UpstreamError};

/// POSTs in flight at once per upstream; more wait for a slot.
pub(crate) const MAX_CONCURRENT_POSTS: usize = 64;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an idle pooled connection to an upstream is kept.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Largest JSON body accepted from an upstream.
const MAX_BODY: usize = 64 * 1024 * 1024;
/// Resumptions of one POST stream that ended before its answer.
const MAX_RESUMES: usize = 3;
const DEFAULT_RETRY: Duration = Duration::from_secs(1);
/// How long the writer waits for the first GET stream's answer before it
/// sends what follows `initialized` (the lists); a server answers at once,
/// and if it does not, the stream's opening refetches the lists.
const FIRST_LISTEN_WAIT: Duration = Duration::from_secs(2);
const MAX_RETRY: Duration = Duration::from_secs(30);

/// One session with a remote upstream.
pub(crate) struct HttpLink {
    shared: Arc<RemoteSession>,
    writer: JoinHandle<()>,
}

impl HttpLink {
    /// Starts the writer; nothing is sent until the handshake's first frame.
    pub(crate) fn start(
        upstream: Arc<str>,
        cfg: &RemoteConfig,
        conn: Arc<Connection>,
        outbound: mpsc::Receiver<Outgoing>,
        tasks: &TaskTracker,
        bearer: Option<Arc<TokenCell>>,
    ) -> Result<HttpLink, LinkError> {
        let url = Url::parse(&cfg.url).map_err(|e| LinkError::Url(e.to_string()))?;
        let mut headers = HeaderMap::new();
        for (name, value) in &cfg.headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|e| LinkError::Header(e.to_string()))?;
            let mut value = HeaderValue::from_str(value.expose())
                .map_err(|e| LinkError::Header(e.to_string()))?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .build()
            .map_err(LinkError::Client)?;
        let mode = match cfg.mode {
            RemoteMode::Auto => Mode::Detect,
            RemoteMode::StreamableHttp => Mode::Streamable,
            // The endpoint is learned from the SSE stream at the first POST.
            RemoteMode::Sse => Mode::Detect,
        };
        let poster = Poster::new(
            client.clone(),
            url.clone(),
            &headers,
            CONNECT_TIMEOUT,
            POOL_IDLE_TIMEOUT,
        );
        let shared = Arc::new(RemoteSession {
            upstream,
            client,
            poster,
            url,
            headers,
            bearer,
            state: Mutex::new(SessionState::new(mode)),
            conn,
            ended: CancellationToken::new(),
            listening: AtomicBool::new(false),
            listen_answered: tokio::sync::Notify::new(),
            listed_before_stream: AtomicBool::new(false),
            session_confirmed: AtomicBool::new(false),
            posts: dashmap::DashMap::default(),
            slots: Arc::new(Semaphore::new(MAX_CONCURRENT_POSTS)),
            tasks: tasks.clone(),
            span: tracing::Span::current(),
        });
        let transport: Arc<dyn DirectSend> = shared.clone();
        shared.conn.set_direct(Arc::downgrade(&transport));
        // Aborted by `stop`; the tracker still sees it end.
        let writer = shared.spawn(write_loop(shared.clone(), outbound, cfg.mode));
        Ok(HttpLink { shared, writer })
    }

    /// Requests whose POST the link can still abort.
    #[cfg(test)]
    pub(super) fn posts_kept(&self) -> usize {
        self.shared.posts.len()
    }

    /// Waits until the link ends and says why.
    pub(crate) async fn wait_ended(&self) -> String {
        self.shared.ended.cancelled().await;
        self.shared.reason()
    }

    /// Whether the server forgot the session (restart without delay).
    pub(crate) fn session_expired(&self) -> bool {
        self.shared.ended.is_cancelled() && self.shared.conn.session_expired()
    }

    /// Ends the session: a best-effort DELETE, then every task stops.
    pub(crate) async fn stop(&mut self) -> String {
        let was_running = !self.shared.ended.is_cancelled();
        self.shared.end("stopped by the gateway");
        self.writer.abort();
        let session = self.shared.state().session_id.clone();
        if was_running && let Some(session) = session {
            let mut headers = self.shared.headers.clone();
            if let Some(bearer) = &self.shared.bearer
                && let Ok(Ok(value)) =
                    tokio::time::timeout(Duration::from_secs(2), bearer.header()).await
            {
                headers.insert(header::AUTHORIZATION, value);
            }
            let delete = self
                .shared
                .client
                .delete(self.shared.url.clone())
                .headers(headers)
                .header(&SESSION_HEADER, session);
            let _ = tokio::time::timeout(Duration::from_secs(2), delete.send()).await;
        }
        "session closed".into()
    }
}

async fn write_loop(
    shared: Arc<RemoteSession>,
    mut outbound: mpsc::Receiver<Outgoing>,
    mode: RemoteMode,
) {
    let slots = shared.slots.clone();
    let mut detected = mode == RemoteMode::StreamableHttp;
    loop {
        let message = tokio::select! {
            () = shared.ended.cancelled() => return,
            message = outbound.recv() => match message {
                Some(m) => m,
                None => return,
            },
        };
        if !detected && message.is(&Method::Initialize) {
            // The initialize POST decides the transport; nothing else is in flight.
            detected = true;
            shared
                .detect_and_send(message, mode == RemoteMode::Sse)
                .await;
            continue;
        }
        if message.is(&Method::Initialized) {
            // Sent and accepted before anything after it goes out: a server
            // may add tools while it handles it (server-everything does), and
            // the lists fetched next must not overtake it. Then the GET
            // stream its acceptance opened: a `list_changed` sent before
            // that stream is open goes nowhere.
            tokio::select! {
                () = shared.send(message) => {}
                () = shared.ended.cancelled() => return,
            }
            if shared.listening.load(Ordering::SeqCst) {
                let wait =
                    tokio::time::timeout(FIRST_LISTEN_WAIT, shared.listen_answered.notified());
                let answered = tokio::select! {
                    answered = wait => answered.is_ok(),
                    () = shared.ended.cancelled() => return,
                };
                if !answered {
                    shared.listed_before_stream.store(true, Ordering::SeqCst);
                }
            }
            continue;
        }
        // A modern request is cancelled by closing its response stream.
        if message.is(&Method::Cancelled) && shared.conn.is_modern() {
            if let Some((_, post)) = message.cancels.and_then(|id| shared.posts.remove(&id)) {
                post.abort();
            }
            continue;
        }
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let id = message.id;
        let task_shared = shared.clone();
        let post = shared.spawn(async move {
            // A POST outlives neither the link nor its slot.
            tokio::select! {
                () = task_shared.send(message) => {}
                () = task_shared.ended.cancelled() => {}
            }
            drop(slot);
        });
        if let Some(id) = id {
            shared.posts.insert(id, post.abort_handle());
            // The POST may have finished before it was registered.
            if post.is_finished() {
                shared.posts.remove(&id);
            }
        }
    }
}

/// Once the link speaks Streamable HTTP, a request is POSTed from the
/// caller's task when a slot is free (the common path: no writer hop and
/// no task per POST); the rest goes through the writer in order.
impl DirectSend for RemoteSession {
    fn direct(self: Arc<Self>, message: Outgoing) -> Routed {
        let settled = matches!(self.state().mode, Mode::Streamable);
        if !settled || self.ended.is_cancelled() || message.is(&Method::Initialize) {
            return Routed::Queue(message);
        }
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            return Routed::Queue(message);
        };
        // Not in the link's span: it runs in the caller's request span, and
        // every event on this path names its upstream itself.
        Routed::Direct(crate::in_place::boxed(|| async move {
            // A POST outlives neither the link nor its slot.
            tokio::select! {
                biased;
                () = self.send(message) => {}
                () = self.ended.cancelled() => {}
            }
            drop(slot);
        }))
    }
}

/// A header value, with the spec's `=?base64?…?=` sentinel when needed.
fn header_value(text: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(&crate::xheader::encode(text)).ok()
}

impl RemoteSession {
    fn expire_session(&self, status: StatusCode) {
        self.conn.mark_session_expired();
        self.end(format!(
            "session expired: the server answered {status} for it"
        ));
    }

    /// Whether `status` to a request that carried our session id means the
    /// server no longer knows the session.
    fn lost_session(&self, status: StatusCode, had_session: bool, sent: &Outgoing) -> bool {
        had_session
            && !sent.is(&Method::Initialize)
            && (status == StatusCode::NOT_FOUND
                || (status == StatusCode::BAD_REQUEST
                    && self.session_confirmed.load(Ordering::Relaxed)))
    }

    fn fail(&self, sent: &Outgoing, error: UpstreamError) {
        if let Some(id) = sent.id {
            self.posts.remove(&id);
        }
        match sent.id {
            Some(id) => self.conn.fail(id, error),
            None => {
                let method = sent.method.as_ref().map(Method::name);
                tracing::warn!(upstream = %self.upstream, method = ?method, error = %error, "could not deliver a notification")
            }
        }
    }

    /// The first frame: try Streamable HTTP, fall back to legacy SSE when
    /// the server refuses the POST with 400, 404 or 405.
    async fn detect_and_send(self: &Arc<Self>, sent: Outgoing, force_sse: bool) {
        if !force_sse {
            match self.post(&sent).await {
                Ok((response, _)) if matches!(response.status().as_u16(), 400 | 404 | 405) => {
                    tracing::info!(upstream = %self.upstream, status = %response.status(), "Streamable HTTP refused; trying the legacy HTTP+SSE transport");
                }
                Ok((response, used)) => {
                    self.state().mode = Mode::Streamable;
                    self.handle_response(&sent, response, used).await;
                    return;
                }
                Err(e) => return self.fail(&sent, e),
            }
        }
        match legacy_sse::open(self.clone()).await {
            Ok(post_url) => {
                self.state().mode = Mode::Sse { post_url };
                self.send(sent).await;
            }
            Err(e) => {
                self.fail(&sent, self.unavailable(e.to_string()));
                self.end(e.to_string());
            }
        }
    }

    /// Sends one message in the link's mode and handles the answer.
    #[allow(clippy::manual_async_fn)] // held once: see `in_place`
    fn send(self: &Arc<Self>, sent: Outgoing) -> impl Future<Output = ()> {
        async move {
            let mode = self.state().mode.clone();
            if let Mode::Sse { post_url } = mode {
                // Boxed and type-erased: the legacy mode is rare (see
                // `in_place::rare`).
                let frame = sent.frame.clone();
                let posted =
                    crate::in_place::rare(|| legacy_sse::post(self, &post_url, frame)).await;
                if let Err(e) = posted {
                    self.fail(&sent, e);
                }
            } else {
                match self.post(&sent).await {
                    Ok((response, used)) => self.handle_response(&sent, response, used).await,
                    Err(e) => self.fail(&sent, e),
                }
            }
            // Its POST is over (in the legacy mode the answer comes on the
            // stream): the handle to abort it goes, or the link would keep one
            // task per request it ever sent (the soak saw memory grow for as
            // long as an HTTP+SSE upstream stayed connected).
            if let Some(id) = sent.id {
                self.posts.remove(&id);
            }
        }
    }

    /// POSTs a frame with the session headers, and the bearer token it
    /// used (if the link has a [`TokenCell`]). A session-based (legacy)
    /// server that cannot be reached at all ends the link, so the upstream
    /// shows as down and is re-initialized with backoff; a stateless
    /// (modern) one keeps its link, since nothing is lost with the socket.
    async fn post(
        &self,
        sent: &Outgoing,
    ) -> Result<(HttpAnswer, Option<HeaderValue>), UpstreamError> {
        let mut credential = HeaderMap::new();
        let used = self.authorize(&mut credential).await?;
        let add = |extra: &mut HeaderMap| {
            for (name, value) in &credential {
                extra.insert(name.clone(), value.clone());
            }
            self.request_headers(sent, extra);
        };
        self.poster
            .post(sent.frame.clone(), add)
            .await
            .map(|answer| (answer, used))
            .map_err(|e| {
                let reason = format!("request failed: {e}");
                if e.connect && !self.conn.is_modern() {
                    self.end(format!("the server is unreachable ({reason})"));
                }
                self.unavailable(reason)
            })
    }

    /// A request's own headers: its trace context, then a modern
    /// request's mirrored body or a session-based link's session.
    fn request_headers(&self, sent: &Outgoing, extra: &mut HeaderMap) {
        if let Some(traceparent) = sent
            .traceparent
            .as_deref()
            .and_then(|t| HeaderValue::from_str(t).ok())
        {
            extra.insert(crate::telemetry::TRACEPARENT, traceparent);
        }
        // The upstream's era decides, not the frame: a modern client's `_meta`
        // must not turn a call to a session-based upstream into a modern one.
        // The discover probe is modern by definition.
        let modern = self.conn.is_modern() || sent.is(&Method::Discover);
        if modern {
            // A modern request mirrors its body into headers and has no session.
            let version = sent
                .version
                .as_deref()
                .unwrap_or(crate::protocol::MODERN_VERSION);
            if let Some(version) = header_value(version) {
                extra.insert(VERSION_HEADER.clone(), version);
            }
            if let Some(method) = sent.method.as_ref().and_then(|m| header_value(m.name())) {
                extra.insert("mcp-method", method);
            }
            let name = sent
                .target
                .as_deref()
                .filter(|_| sent.method.as_ref().is_some_and(Method::names_its_target));
            if let Some(name) = name.and_then(header_value) {
                extra.insert("mcp-name", name);
            }
            // Tool parameters the upstream wants mirrored into headers.
            for (name, value) in &sent.mirrored {
                let name = HeaderName::from_bytes(name.as_bytes());
                if let (Ok(name), Ok(value)) = (name, HeaderValue::from_str(value)) {
                    extra.append(name, value);
                }
            }
        } else {
            self.session_headers(extra);
        }
    }

    /// Adds the session id and negotiated version of a session-based link.
    fn session_headers(&self, headers: &mut HeaderMap) {
        let state = self.state();
        if let Some(session) = &state.session_id {
            headers.insert(SESSION_HEADER.clone(), session.clone());
        }
        if let Some(version) = &state.version {
            headers.insert(VERSION_HEADER.clone(), version.clone());
        }
    }

    #[allow(clippy::manual_async_fn)] // held once: see `in_place`
    fn handle_response(
        self: &Arc<Self>,
        sent: &Outgoing,
        response: HttpAnswer,
        used: Option<HeaderValue>,
    ) -> impl Future<Output = ()> {
        async move {
            let status = response.status();
            let had_session = {
                let mut state = self.state();
                // Cloned only when it changed: a clone of a header's bytes
                // allocates, and the id stays the same call after call.
                if let Some(session) = response.headers().get(&SESSION_HEADER)
                    && state.session_id.as_ref() != Some(session)
                {
                    state.session_id = Some(session.clone());
                }
                state.session_id.is_some()
            };
            if status == StatusCode::NOT_FOUND && self.lost_session(status, had_session, sent) {
                // Failed first: closing the link would fail it as merely pending.
                self.fail(sent, self.conn_error());
                return self.expire_session(status);
            }
            if status.is_success() && had_session {
                self.session_confirmed.store(true, Ordering::Relaxed);
            }
            if status == StatusCode::UNAUTHORIZED
                && let (Some(bearer), Some(used)) = (&self.bearer, &used)
            {
                // The token is dropped; the next request (or the retry of a
                // request that is safe to repeat) fetches a new one.
                bearer.rejected(used);
                tracing::info!(upstream = %self.upstream, "the upstream refused the gateway's token (401); a new one is fetched for the next request");
                return self.fail(
                    sent,
                    UpstreamError::Unauthorized {
                        upstream: self.upstream.to_string(),
                        detail: "it refused the gateway's token (HTTP 401)".into(),
                    },
                );
            }
            if !status.is_success() {
                let bytes = read_limited(response, MAX_BODY).await.unwrap_or_default();
                let body = body_text(&bytes).unwrap_or_default();
                // A JSON-RPC error answering our request says more than the status.
                let answers = sent.id.is_some_and(|id| {
                    serde_json::from_str::<Value>(body).ok().is_some_and(|v| {
                        v.get("error").is_some() && v.get("id").and_then(Value::as_u64) == Some(id)
                    })
                });
                if answers {
                    return self.deliver(body, sent.id).await;
                }
                if self.lost_session(status, had_session, sent) {
                    let snippet: String = body.chars().take(200).collect();
                    tracing::info!(upstream = %self.upstream, %status, body = %snippet, "the server no longer knows our session; re-initializing");
                    self.fail(sent, self.conn_error());
                    return self.expire_session(status);
                }
                let snippet: String = body.chars().take(200).collect();
                return self.fail(sent, self.protocol(format!("HTTP {status}: {snippet}")));
            }
            if sent.is(&Method::Initialized) && !self.listening.swap(true, Ordering::Relaxed) {
                self.spawn(self.clone().listen());
            }
            let content_type = response
                .headers()
                .get(header::CONTENT_TYPE)
                .map_or(&b""[..], HeaderValue::as_bytes);
            let is = |media: &str| {
                content_type
                    .get(..media.len())
                    .is_some_and(|head| head.eq_ignore_ascii_case(media.as_bytes()))
            };
            if is("text/event-stream") {
                self.post_stream(sent, response).await;
            } else if is("application/json") {
                match read_limited(response, MAX_BODY).await {
                    Ok(bytes) => match body_text(&bytes) {
                        Ok(body) => self.deliver_json(body, sent.id).await,
                        Err(e) => self.fail(sent, self.protocol(e.to_string())),
                    },
                    Err(e) => self.fail(sent, self.protocol(e.to_string())),
                }
            } else if let Some(id) = sent.id {
                // 202 or an empty 200 to a request: the answer must come on a stream.
                tracing::debug!(upstream = %self.upstream, id, %status, "request accepted without a body");
            }
        }
    }

    fn conn_error(&self) -> UpstreamError {
        UpstreamError::SessionExpired {
            upstream: self.upstream.to_string(),
            refused: true,
        }
    }

    async fn deliver_json(&self, body: &str, via: Option<u64>) {
        // Only a body that starts as an array can be a batch.
        let batch = match body.trim_start().starts_with('[') {
            true => serde_json::from_str::<Vec<&serde_json::value::RawValue>>(body).ok(),
            false => None,
        };
        match batch {
            Some(batch) => {
                for message in batch {
                    self.deliver(message.get(), via).await;
                }
            }
            None => self.deliver(body, via).await,
        }
    }

    /// Reads a POST's SSE answer; resumes it with GET + `Last-Event-ID`
    /// when it ends before the request's answer arrived.
    async fn post_stream(self: &Arc<Self>, sent: &Outgoing, response: HttpAnswer) {
        let mut last_id = None;
        let mut retry = DEFAULT_RETRY;
        let mut response = response;
        for attempt in 0..=MAX_RESUMES {
            if let Err(e) = self
                .read_events(response, &mut last_id, &mut retry, sent.id)
                .await
            {
                tracing::debug!(upstream = %self.upstream, error = %e, "POST stream broke");
            }
            let Some(id) = sent.id.filter(|id| self.conn.is_pending(*id)) else {
                return;
            };
            let Some(resume_from) = last_id.clone().filter(|_| attempt < MAX_RESUMES) else {
                return self.fail(
                    sent,
                    self.protocol(format!(
                        "the stream for request {id} ended without an answer"
                    )),
                );
            };
            tokio::select! {
                () = tokio::time::sleep(retry) => {}
                () = self.ended.cancelled() => return,
            }
            match self.get(Some(&resume_from)).await {
                Ok(r) if r.status().is_success() => response = r,
                Ok(r) => {
                    return self.fail(
                        sent,
                        self.protocol(format!("resuming the stream failed: HTTP {}", r.status())),
                    );
                }
                Err(e) => return self.fail(sent, e),
            }
        }
    }

    async fn get(&self, last_event_id: Option<&str>) -> Result<HttpAnswer, UpstreamError> {
        let mut headers = self.headers.clone();
        self.authorize(&mut headers).await?;
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        if let Some(id) = last_event_id.and_then(|id| HeaderValue::from_str(id).ok()) {
            headers.insert("last-event-id", id);
        }
        self.session_headers(&mut headers);
        self.client
            .get(self.url.clone())
            .headers(headers)
            .send()
            .await
            .map(from_reqwest)
            .map_err(|e| self.unavailable(format!("request failed: {}", e.without_url())))
    }

    /// Dispatches every event of an SSE body until it ends or the link does;
    /// `via` is the request whose POST the body answers.
    pub(super) async fn read_events(
        &self,
        response: HttpAnswer,
        last_id: &mut Option<String>,
        retry: &mut Duration,
        via: Option<u64>,
    ) -> Result<(), BodyError> {
        let mut parser = SseParser::default();
        let mut body = response.into_body();
        loop {
            let frame = tokio::select! {
                () = self.ended.cancelled() => return Ok(()),
                frame = body.frame() => match frame {
                    Some(Ok(frame)) => frame,
                    Some(Err(e)) => return Err(BodyError::Read(e.to_string())),
                    None => return Ok(()),
                },
            };
            let Ok(chunk) = frame.into_data() else {
                continue;
            };
            for event in parser.push(&chunk)? {
                if let Some(id) = event.id {
                    *last_id = Some(id);
                }
                if let Some(ms) = event.retry {
                    *retry = Duration::from_millis(ms).min(MAX_RETRY);
                }
                let is_message = event.event.as_deref().is_none_or(|e| e == "message");
                if is_message && !event.data.trim().is_empty() {
                    self.deliver(&event.data, via).await;
                }
            }
        }
    }

    /// The standalone GET stream for server-initiated messages, reconnected
    /// with `Last-Event-ID` until the link ends.
    async fn listen(self: Arc<Self>) {
        let mut delay = DEFAULT_RETRY;
        let mut first = true;
        while !self.ended.is_cancelled() {
            let from = self.state().last_event_id.clone();
            let answer = self.get(from.as_deref()).await;
            // A `list_changed` sent while no stream was open went nowhere:
            // a stream that opens later than the first try, or after the
            // writer stopped waiting for it, has every list fetched again.
            let stale = matches!(&answer, Ok(r) if r.status().is_success())
                && (!first || self.listed_before_stream.load(Ordering::SeqCst));
            first = false;
            self.listen_answered.notify_one();
            match answer {
                Ok(r) if r.status() == StatusCode::METHOD_NOT_ALLOWED => {
                    tracing::debug!(upstream = %self.upstream, "no standalone notification stream (405); notifications arrive on POST streams");
                    return;
                }
                Ok(r)
                    if r.status() == StatusCode::NOT_FOUND
                        || (r.status() == StatusCode::BAD_REQUEST
                            && self.session_confirmed.load(Ordering::Relaxed)) =>
                {
                    return self.expire_session(r.status());
                }
                Ok(r) if r.status().is_success() => {
                    delay = DEFAULT_RETRY;
                    if stale {
                        self.conn.lists_may_be_stale();
                    }
                    let mut last = from;
                    let mut retry = DEFAULT_RETRY;
                    if let Err(e) = self.read_events(r, &mut last, &mut retry, None).await {
                        tracing::debug!(upstream = %self.upstream, error = %e, "notification stream broke");
                    }
                    self.state().last_event_id = last;
                    delay = delay.max(retry);
                }
                Ok(r) => {
                    tracing::warn!(upstream = %self.upstream, status = %r.status(), "notification stream refused")
                }
                Err(e) => {
                    tracing::debug!(upstream = %self.upstream, error = %e, "notification stream unreachable")
                }
            }
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.ended.cancelled() => return,
            }
            delay = (delay * 2).min(MAX_RETRY);
        }
    }
}

/// Why a response body could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(super) enum BodyError {
    #[error("{0}")]
    Read(String),
    #[error("response body larger than {0} bytes")]
    TooLarge(usize),
    #[error("response body is not UTF-8")]
    NotUtf8,
    #[error(transparent)]
    Events(#[from] crate::sse::LineTooLong),
}

/// Reads a body up to `limit` bytes. A body that comes in one frame (the
/// usual answer with a `Content-Length`) is kept as that frame's bytes,
/// not copied; only a body of several frames is joined into one buffer.
pub(super) async fn read_limited(
    response: HttpAnswer,
    limit: usize,
) -> Result<bytes::Bytes, BodyError> {
    let mut first = bytes::Bytes::new();
    let mut joined: Option<Vec<u8>> = None;
    let mut stream = response.into_body();
    while let Some(frame) = stream.frame().await {
        let frame = frame.map_err(|e| BodyError::Read(e.to_string()))?;
        let Ok(chunk) = frame.into_data() else {
            continue;
        };
        let read = joined.as_ref().map_or(first.len(), Vec::len);
        if read + chunk.len() > limit {
            return Err(BodyError::TooLarge(limit));
        }
        match &mut joined {
            Some(body) => body.extend_from_slice(&chunk),
            None if first.is_empty() => first = chunk,
            None => {
                let mut body = Vec::with_capacity(read + chunk.len());
                body.extend_from_slice(&first);
                body.extend_from_slice(&chunk);
                joined = Some(body);
            }
        }
        // A body whose length is known ends with its last byte: another
        // frame would only tell what the length already says (and, should
        // hyper not have closed the channel yet, wait for it to).
        if stream.is_end_stream() {
            break;
        }
    }
    Ok(joined.map_or(first, bytes::Bytes::from))
}

/// A body read by [`read_limited`] as text, checked with the CPU's vector
/// units where it has them.
fn body_text(body: &[u8]) -> Result<&str, BodyError> {
    simdutf8::basic::from_utf8(body).map_err(|_| BodyError::NotUtf8)
}
