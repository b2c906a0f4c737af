//! One live MCP client connection to an upstream: request ids, the pending
//! table, and what goes out; `incoming` dispatches everything the upstream
//! sends.
//!
//! A transport (a stdio child or an HTTP session) feeds each received
//! message to [`Connection::dispatch`] and drains the connection's outbound
//! queue of typed [`Outgoing`] messages. Many requests run concurrently:
//! each gets a fresh numeric id and waits on a oneshot keyed by it, with
//! the [`Origin`] that caused it. When the transport ends,
//! [`Connection::close`] fails every pending request at once with the reason.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use tokio::time::Instant;

use dashmap::DashMap;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::UpstreamError;
use super::events::UpstreamEvents;
use super::message::{Origin, Outgoing};
use crate::catalog::ListKind;
use crate::protocol::{self, Json, Method};

/// A transport that can send a request from the caller's own task (the
/// Streamable HTTP link): no hop through a writer task, no task per POST.
/// The caller drives the returned [`DirectPost`] while it waits for the
/// answer, which still arrives through [`Connection::dispatch`] and the
/// pending table; dropping the future aborts the POST.
pub(crate) trait DirectSend: Send + Sync {
    /// The POST of `message` as a future for the caller to drive, or the
    /// message back when it must go through the outbound queue (the
    /// transport is not settled yet, or all its POST slots are taken).
    fn direct(self: Arc<Self>, message: Outgoing) -> Routed;
}

/// Where [`DirectSend::direct`] put a message.
pub(crate) enum Routed {
    /// The caller drives this POST.
    Direct(DirectPost),
    /// The message goes through the outbound queue after all.
    Queue(Outgoing),
}

/// One POST that the caller's task drives (see [`DirectSend`]).
pub(crate) type DirectPost = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// A request on its way: the answer's receiver and, when the transport
/// sends from the caller's task, the POST to drive until the answer comes.
pub(crate) struct Sent {
    pub(crate) answer: oneshot::Receiver<Answer>,
    pub(crate) post: Option<DirectPost>,
}

/// Outbound frames waiting for the transport's writer. When full, senders
/// wait: a stalled upstream slows only the callers of that upstream.
pub(crate) const OUTBOUND_CAPACITY: usize = 256;

/// How long a client has to answer a relayed request, unless configured.
const DEFAULT_ASK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// What an upstream answered to one request: its `result`, or an error.
pub(crate) type Answer = Result<Json, UpstreamError>;

/// Where progress for one forwarded request goes.
pub(crate) struct ProgressRoute {
    /// The client's own `progressToken`, restored on the way back; none
    /// when the client asked for no progress (the stream may still carry
    /// requests for the client, see `ask`).
    pub client_token: Option<Box<RawValue>>,
    /// Frames for the client's response stream. Progress is sent with
    /// `try_send`: when the client is this far behind, progress is dropped
    /// (a later progress notification supersedes it); the result never is.
    pub sink: CallStream,
    /// Milliseconds since `started` of the latest progress, so the caller's
    /// timeout can restart on progress.
    pub last_progress: Arc<AtomicU64>,
    pub started: Instant,
    /// For a stateless (2026-07-28) call, where requests for its client go:
    /// the call's reply asks them (see `ask`). None for a session's call.
    pub asks: Option<mpsc::Sender<crate::upstream::InputAsk>>,
}

struct Pending {
    reply: oneshot::Sender<Answer>,
    progress: Option<ProgressRoute>,
    /// Who caused the request.
    origin: Origin,
}

/// The lists a `list_changed` (or a lost listen stream) says are out of
/// date, for the supervisor to refetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ListsChanged(pub &'static [ListKind]);

impl ListsChanged {
    /// Every list: a modern upstream's listen stream was lost.
    pub(crate) const ALL: ListsChanged = ListsChanged(&ListKind::ALL);

    /// The lists an upstream's `list_changed` notification names.
    fn of(method: &Method) -> Option<ListsChanged> {
        let kinds: &'static [ListKind] = match method {
            Method::ToolsListChanged => &[ListKind::Tools],
            Method::PromptsListChanged => &[ListKind::Prompts],
            Method::ResourcesListChanged => &[ListKind::Resources, ListKind::Templates],
            _ => return None,
        };
        Some(ListsChanged(kinds))
    }
}

/// A request for [`Connection::send_request`].
pub(crate) struct Request<'a> {
    pub(crate) method: Method,
    pub(crate) params: Payload<'a>,
    /// The tool or prompt name, or the URI, as the upstream knows it.
    pub(crate) target: Option<Arc<str>>,
    pub(crate) origin: Origin,
    pub(crate) progress: Option<ProgressRoute>,
    /// Set when the params were built for a modern upstream with its
    /// `_meta` already in them ([`Connection::prepare_modern`]): they go
    /// out as they are, never read again.
    pub(crate) prepared: Option<Prepared>,
}

/// What a request carries.
#[derive(Clone, Copy)]
pub(crate) enum Payload<'a> {
    /// The params object as JSON text, if any.
    Params(Option<&'a str>),
    /// The whole frame as the caller built it around the params: sent as
    /// it is when it carries this request's id and was built for this
    /// connection's era, so that neither is built again.
    Frame(&'a protocol::params::Built),
}

impl<'a> Request<'a> {
    /// The gateway's own request, about nothing in particular.
    pub(crate) fn new(method: Method, params: Option<&'a str>) -> Self {
        Self {
            method,
            params: Payload::Params(params),
            target: None,
            origin: Origin::Gateway,
            progress: None,
            prepared: None,
        }
    }
}

/// What the transport needs to know of a client's params built for a
/// modern upstream: the protocol version they name and the tool
/// parameters mirrored into headers.
#[derive(Debug, Clone, Default)]
pub(crate) struct Prepared {
    pub(crate) version: Option<Arc<str>>,
    pub(crate) mirrored: Vec<(String, String)>,
}

/// The `x-mcp-header` parameters of an upstream's tools, by tool name.
pub(crate) type ToolHeaders = crate::hashing::HashMap<String, Arc<[crate::xheader::HeaderParam]>>;

/// The gateway's client state for one upstream transport session.
pub(crate) struct Connection {
    upstream: Arc<str>,
    /// Drained by the transport's writer task.
    outbound: mpsc::Sender<Outgoing>,
    /// The transport, when it can send from the caller's task; weak, since
    /// the transport holds this connection.
    direct: OnceLock<std::sync::Weak<dyn DirectSend>>,
    pending: DashMap<u64, Pending, crate::hashing::RandomState>,
    next_id: AtomicU64,
    closed: CancellationToken,
    close_reason: OnceLock<String>,
    /// The `_meta` every request carries once the upstream is known to speak
    /// the modern (2026-07-28) era; unset for legacy upstreams.
    modern_meta: OnceLock<Map<String, Value>>,
    /// Set by an HTTP transport when the upstream forgot our session (404):
    /// requests failed by it may be retried once after re-initializing.
    session_expired: AtomicBool,
    /// The upstream's tools with `x-mcp-header` parameters, by original
    /// name (set by the supervisor from the lists; read by HTTP links).
    tool_headers: arc_swap::ArcSwap<ToolHeaders>,
    /// Listen requests waiting for their `notifications/subscriptions/acknowledged`.
    acks: DashMap<u64, oneshot::Sender<()>, crate::hashing::RandomState>,
    /// `list_changed` notifications for the supervisor; when full they are
    /// dropped with a warning (the refresh already queued covers them).
    list_changes: mpsc::Sender<ListsChanged>,
    /// Resource updates and log messages go straight to whoever listens.
    events: Arc<dyn UpstreamEvents>,
    /// Rate limit of the warnings about lines that are not JSON-RPC.
    noise: Arc<super::noise::NoiseFilter>,
    /// Where relayed requests for clients wait (the gateway's tracker);
    /// unset only for a connection without a supervisor (unit tests).
    tasks: Option<tokio_util::task::TaskTracker>,
    /// How long a client has to answer a relayed request.
    ask_timeout: std::time::Duration,
    /// The `roots/list` result for requests no client's call caused: the
    /// upstream's configured `roots`, or none.
    config_roots: Arc<str>,
    /// URL-mode elicitations relayed to sessions, by `elicitationId`, so
    /// their `notifications/elicitation/complete` reaches only that session.
    url_elicitations: std::sync::Mutex<std::collections::VecDeque<(Box<str>, u64)>>,
}

impl Connection {
    pub(crate) fn new(
        upstream: Arc<str>,
        outbound: mpsc::Sender<Outgoing>,
        list_changes: mpsc::Sender<ListsChanged>,
        events: Arc<dyn UpstreamEvents>,
        noise: Arc<super::noise::NoiseFilter>,
    ) -> Self {
        Self {
            upstream,
            outbound,
            direct: OnceLock::new(),
            pending: DashMap::default(),
            next_id: AtomicU64::new(1),
            closed: CancellationToken::new(),
            close_reason: OnceLock::new(),
            modern_meta: OnceLock::new(),
            session_expired: AtomicBool::new(false),
            acks: DashMap::default(),
            tool_headers: Default::default(),
            list_changes,
            events,
            noise,
            tasks: None,
            ask_timeout: DEFAULT_ASK_TIMEOUT,
            config_roots: Arc::from(r#"{"roots":[]}"#),
            url_elicitations: Default::default(),
        }
    }

    /// Runs relayed requests for clients on `tasks`, each waiting at most
    /// `timeout` for the client's answer; `roots` (a `roots/list` result)
    /// answers requests for roots that no client's call caused.
    pub(crate) fn with_asks(
        mut self,
        tasks: tokio_util::task::TaskTracker,
        timeout: std::time::Duration,
        roots: Arc<str>,
    ) -> Self {
        self.tasks = Some(tasks);
        self.ask_timeout = timeout;
        self.config_roots = roots;
        self
    }

    pub(crate) fn upstream(&self) -> &Arc<str> {
        &self.upstream
    }

    /// Requests waiting for an answer.
    pub(crate) fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Whether the connection has closed (tests look).
    #[cfg(test)]
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// A fresh request id on this connection.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn unavailable(&self) -> UpstreamError {
        if self.session_expired.load(Ordering::Relaxed) {
            return UpstreamError::SessionExpired {
                upstream: self.upstream.to_string(),
                refused: false,
            };
        }
        UpstreamError::Unavailable {
            upstream: self.upstream.to_string(),
            reason: self
                .close_reason
                .get()
                .cloned()
                .unwrap_or_else(|| "connection closed".into()),
        }
    }

    /// From now on every request carries `meta` in its `_meta` (the
    /// upstream speaks 2026-07-28).
    pub(crate) fn set_modern(&self, meta: Map<String, Value>) {
        let _ = self.modern_meta.set(meta);
    }

    /// Task ids of this upstream that clients listen for (see
    /// [`UpstreamEvents::watched_tasks`]).
    pub(crate) fn watched_tasks(&self) -> Vec<Arc<str>> {
        self.events.watched_tasks(&self.upstream)
    }

    pub(crate) fn is_modern(&self) -> bool {
        self.modern_meta.get().is_some()
    }

    /// For a modern upstream: merges its `_meta` into a client's params
    /// (keys the client set win) before they are built, and says what the
    /// transport needs of them. `arguments` are read only for a tool that
    /// mirrors some into headers. None for a session-based upstream.
    pub(crate) fn prepare_modern(
        &self,
        params: &mut protocol::Params<'_>,
        method: &Method,
        target: Option<&str>,
    ) -> Option<Prepared> {
        let meta = self.modern_meta.get()?;
        for (key, value) in meta {
            params.default_meta(key, value.clone());
        }
        let version = params
            .meta(protocol::meta::PROTOCOL_VERSION)
            .and_then(Value::as_str)
            .map(Arc::from);
        let mirrored = match (method, target) {
            (Method::ToolsCall, Some(tool)) => self
                .tool_headers(tool)
                .map(|headers| {
                    let arguments = crate::xheader::arguments(
                        params.raw("arguments").map(crate::protocol::Raw::get),
                    );
                    crate::xheader::headers_for(&headers, &arguments)
                })
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        Some(Prepared { version, mirrored })
    }

    /// The message for one request (`id`) or notification: the frame,
    /// with the modern `_meta` merged into its params (keys the caller set
    /// win), and what the transports need to know of it.
    fn outgoing(&self, id: Option<u64>, method: Method, params: Option<&str>) -> Outgoing {
        let Some(meta) = self.modern_meta.get() else {
            let frame = match id {
                Some(id) => protocol::request_frame(id, method.name(), params),
                None => protocol::notification_frame(method.name(), params),
            };
            // The discover probe speaks the modern era before the upstream does.
            let version = (method == Method::Discover).then(|| protocol::MODERN_VERSION.into());
            let mut message = Outgoing::new(Some(method), frame);
            message.id = id;
            message.version = version;
            return message;
        };
        let mut object: Map<String, Value> = params
            .and_then(|p| serde_json::from_str(p).ok())
            .unwrap_or_default();
        let slot = object
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        let mut version = None;
        if let Value::Object(existing) = slot {
            for (key, value) in meta {
                existing.entry(key.clone()).or_insert_with(|| value.clone());
            }
            version = existing
                .get(protocol::meta::PROTOCOL_VERSION)
                .and_then(Value::as_str)
                .map(Arc::from);
        }
        let name_key = match method {
            Method::ToolsCall | Method::PromptsGet => Some("name"),
            Method::ResourcesRead => Some("uri"),
            Method::TasksGet | Method::TasksUpdate | Method::TasksCancel => Some("taskId"),
            _ => None,
        };
        let target: Option<Arc<str>> = name_key
            .and_then(|key| object.get(key))
            .and_then(Value::as_str)
            .map(Arc::from);
        // Tool parameters the upstream wants mirrored into headers.
        let mirrored = match (&method, &target) {
            (Method::ToolsCall, Some(tool)) => self
                .tool_headers(tool)
                .map(|params| {
                    let arguments = object.get("arguments").unwrap_or(&Value::Null);
                    crate::xheader::headers_for(&params, arguments)
                })
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        let params = Value::Object(object).to_string();
        let frame = match id {
            Some(id) => protocol::request_frame(id, method.name(), Some(&params)),
            None => protocol::notification_frame(method.name(), Some(&params)),
        };
        let mut message = Outgoing::new(Some(method), frame);
        message.id = id;
        message.version = version;
        message.target = target;
        message.mirrored = mirrored;
        message
    }

    /// Lets requests sent with [`Self::send_request_direct`] go out from
    /// the caller's task through `transport` (set once, by the transport).
    pub(crate) fn set_direct(&self, transport: std::sync::Weak<dyn DirectSend>) {
        let _ = self.direct.set(transport);
    }

    /// Sends request `id` and returns the receiver for its answer. The
    /// pending entry is removed by the answer, by [`Self::forget`], or by close.
    pub(crate) async fn send_request(
        &self,
        id: u64,
        request: Request<'_>,
    ) -> Result<oneshot::Receiver<Answer>, UpstreamError> {
        let (answer, message) = self.register(id, request)?;
        self.queue(id, message).await?;
        Ok(answer)
    }

    /// Like [`Self::send_request`], but a transport that can send from the
    /// caller's task hands back the POST to drive instead of queueing it.
    pub(crate) async fn send_request_direct(
        &self,
        id: u64,
        request: Request<'_>,
    ) -> Result<Sent, UpstreamError> {
        let (answer, message) = self.register(id, request)?;
        let message = match self.direct.get().and_then(std::sync::Weak::upgrade) {
            Some(transport) => match transport.direct(message) {
                Routed::Direct(post) => {
                    return Ok(Sent {
                        answer,
                        post: Some(post),
                    });
                }
                Routed::Queue(message) => message,
            },
            None => message,
        };
        self.queue(id, message).await?;
        Ok(Sent { answer, post: None })
    }

    /// Enters request `id` in the pending table and builds its message.
    fn register(
        &self,
        id: u64,
        request: Request<'_>,
    ) -> Result<(oneshot::Receiver<Answer>, Outgoing), UpstreamError> {
        let Request {
            method,
            params,
            target,
            origin,
            progress,
            prepared,
        } = request;
        let (tx, rx) = oneshot::channel();
        self.pending.insert(
            id,
            Pending {
                reply: tx,
                progress,
                origin: origin.clone(),
            },
        );
        // Close cancels first and drains second, so either we see it here or
        // the drain sees our entry.
        if self.closed.is_cancelled() {
            self.pending.remove(&id);
            return Err(self.unavailable());
        }
        // A frame built for this id and for this connection's era (a
        // modern one's `_meta` in, a session-based one's left alone).
        let ready = match params {
            Payload::Frame(built) if prepared.is_some() == self.is_modern() => built.frame_for(id),
            _ => None,
        };
        // Otherwise the params are built into a frame here.
        let params = || match params {
            Payload::Params(params) => params,
            Payload::Frame(built) => Some(built.params()),
        };
        let mut message = match (prepared, ready) {
            // A client's params built for this (modern) upstream: as they are.
            (Some(prepared), ready) if self.is_modern() => {
                let mut message = match ready {
                    Some(frame) => Outgoing::with_frame(Some(method), frame),
                    None => {
                        let frame = protocol::request_frame(id, method.name(), params());
                        Outgoing::new(Some(method), frame)
                    }
                };
                message.id = Some(id);
                message.version = prepared.version;
                message.mirrored = prepared.mirrored;
                message
            }
            // Built for a session-based upstream, to which nothing is added.
            (None, Some(frame)) if method != Method::Discover => {
                let mut message = Outgoing::with_frame(Some(method), frame);
                message.id = Some(id);
                message
            }
            _ => self.outgoing(Some(id), method, params()),
        };
        message.origin = origin;
        message.traceparent = crate::telemetry::current_traceparent();
        if target.is_some() {
            message.target = target;
        }
        Ok((rx, message))
    }

    /// Queues request `id`'s message for the transport's writer.
    async fn queue(&self, id: u64, message: Outgoing) -> Result<(), UpstreamError> {
        if self.outbound.send(message).await.is_err() {
            self.pending.remove(&id);
            return Err(self.unavailable());
        }
        Ok(())
    }

    /// Sends a request and waits for its answer, up to `timeout`.
    pub(crate) async fn request(
        &self,
        method: Method,
        params: Option<&str>,
        timeout: std::time::Duration,
    ) -> Answer {
        let id = self.next_id();
        let rx = self.send_request(id, Request::new(method, params)).await?;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(self.unavailable()),
            Err(_) => {
                self.cancel(id, "timed out");
                Err(UpstreamError::Timeout {
                    upstream: self.upstream.to_string(),
                    timeout,
                })
            }
        }
    }

    /// Sends a notification; errors only if the connection is gone.
    pub(crate) async fn notify(
        &self,
        method: Method,
        params: Option<&str>,
    ) -> Result<(), UpstreamError> {
        let message = self.outgoing(None, method, params);
        self.outbound
            .send(message)
            .await
            .map_err(|_| self.unavailable())
    }

    /// Tells the supervisor to fetch every list again: notifications of
    /// changes may have been lost (a listen stream was not open).
    pub(crate) fn lists_may_be_stale(&self) {
        if let Err(e) = self.list_changes.try_send(ListsChanged::ALL) {
            tracing::debug!(upstream = %self.upstream, error = %e, "list change queue full; a refetch is already due");
        }
    }

    /// Queues a request whose answer nobody waits for (the reader drops
    /// it as unknown). Keeps its place in line with later requests, so it
    /// reaches the upstream before them. False if the queue is full or closed.
    pub(crate) fn send_detached(&self, method: Method, params: Option<&str>) -> bool {
        let message = self.outgoing(Some(self.next_id()), method, params);
        self.outbound.try_send(message).is_ok()
    }

    /// Marks the upstream session as forgotten by the server; pending and
    /// later failures report [`UpstreamError::SessionExpired`].
    pub(crate) fn mark_session_expired(&self) {
        self.session_expired.store(true, Ordering::Relaxed);
    }

    /// Whether the server forgot our session ([`Self::mark_session_expired`]).
    pub(crate) fn session_expired(&self) -> bool {
        self.session_expired.load(Ordering::Relaxed)
    }

    /// Records which of the upstream's tools mirror parameters into headers.
    pub(crate) fn set_tool_headers(&self, map: ToolHeaders) {
        self.tool_headers.store(Arc::new(map));
    }

    /// The `x-mcp-header` parameters of one of the upstream's tools.
    pub(crate) fn tool_headers(&self, tool: &str) -> Option<Arc<[crate::xheader::HeaderParam]>> {
        self.tool_headers.load().get(tool).cloned()
    }

    /// Resolves when the upstream acknowledges listen request `id`.
    pub(crate) fn expect_ack(&self, id: u64) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.acks.insert(id, tx);
        rx
    }

    /// Stops waiting for listen request `id`'s acknowledgment.
    pub(crate) fn forget_ack(&self, id: u64) {
        self.acks.remove(&id);
    }

    /// Whether request `id` is still waiting for its answer.
    pub(crate) fn is_pending(&self, id: u64) -> bool {
        self.pending.contains_key(&id)
    }

    /// Fails request `id` with `error` (the transport could not deliver it).
    pub(crate) fn fail(&self, id: u64, error: UpstreamError) {
        if let Some((_, pending)) = self.pending.remove(&id) {
            let _ = pending.reply.send(Err(error));
        }
    }

    /// Drops the pending entry for `id` without telling the upstream.
    pub(crate) fn forget(&self, id: u64) {
        self.pending.remove(&id);
    }

    /// Stops waiting for `id` and sends `notifications/cancelled` for it.
    /// Returns false if the request had already finished.
    pub(crate) fn cancel(&self, id: u64, reason: &str) -> bool {
        let Some((_, pending)) = self.pending.remove(&id) else {
            return false;
        };
        // Whoever waits learns why.
        let _ = pending.reply.send(Err(UpstreamError::Cancelled {
            upstream: self.upstream.to_string(),
            reason: reason.to_owned(),
        }));
        let params = serde_json::json!({ "requestId": id, "reason": reason }).to_string();
        let mut message = self.outgoing(None, Method::Cancelled, Some(&params));
        message.cancels = Some(id);
        message.origin = pending.origin;
        // Best effort: a full queue means the upstream is stalled anyway.
        if self.outbound.try_send(message).is_err() {
            tracing::debug!(upstream = %self.upstream, id, "could not queue cancellation");
        }
        true
    }

    /// Marks the connection closed and fails every pending request.
    pub(crate) fn close(&self, reason: impl Into<String>) {
        let _ = self.close_reason.set(reason.into());
        self.closed.cancel();
        let ids: Vec<u64> = self.pending.iter().map(|e| *e.key()).collect();
        for id in ids {
            if let Some((_, pending)) = self.pending.remove(&id) {
                let _ = pending.reply.send(Err(self.unavailable()));
            }
        }
    }
}

mod ask;
#[cfg(test)]
mod ask_tests;
mod incoming;
mod stream;

pub(crate) use stream::CallStream;
#[cfg(test)]
mod tests;
