//! Routes one downstream request: list methods are answered from the catalog
//! snapshot, calls go to exactly one upstream.
//!
//! The router is transport-neutral: the downstream layer hands it a
//! [`RequestContext`] (who is asking, and where their in-flight calls are
//! tracked) and gets back a [`Reply`]. Forwarded calls get a fresh upstream
//! request id; a client's `progressToken` becomes that id upstream and is
//! restored on the way back; `notifications/cancelled` reaches the one
//! upstream that owns the request.

mod apps;
mod cached;
mod call;
mod error;
mod forward;
mod observe;
#[cfg(test)]
mod reads_tests;
mod reply;
mod resolve;
mod retry;
pub(crate) mod rewrite;
mod search;
mod tasks;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::{Value, json};

pub(crate) use error::RouteError;
pub(crate) use forward::InflightCall;
pub(crate) use reply::{Ended, Frame, PageFrame, Reply};

use crate::auth::Identity;
use crate::catalog::{Catalog, CatalogStore, ListKind, Page};
use crate::metrics::{Metrics, Outcome};
use crate::notify::{LogLevel, NotifyHub, Subscriber};
use crate::policy::Grant;
use crate::protocol::hints::CacheHints;
use crate::protocol::{self, Era, Method};
use crate::protocol::{Params, ParamsError, Request};
use crate::upstream::{Subscribed, SubscriberId};
use crate::upstream::{UpstreamError, UpstreamSet};

/// The `mcp_method_name` label of every method the gateway does not know.
const OTHER_METHOD: &str = "other";

/// A request's params, parsed on first use (see [`Request::params`]).
fn params_of<'r, 'a>(request: &'r mut Request<'a>) -> Result<&'r Params<'a>, RouteError> {
    request.params().map_err(RouteError::InvalidParams)
}

/// The catalog list a `*/list` method pages.
fn listed_kind(method: &Method) -> Option<ListKind> {
    match method {
        Method::ToolsList => Some(ListKind::Tools),
        Method::PromptsList => Some(ListKind::Prompts),
        Method::ResourcesList => Some(ListKind::Resources),
        Method::TemplatesList => Some(ListKind::Templates),
        _ => None,
    }
}

/// Who sent a request and what the router may do for them.
#[derive(Clone)]
pub(crate) struct RequestContext {
    /// The session's calls in flight, by the client's request id.
    pub inflight: Arc<InflightCalls>,
    /// Where the session's notifications and subscriptions are kept; none
    /// for a stateless (modern) request.
    pub subscriber: Option<Arc<Subscriber>>,
    /// Whether the reply may stream (the client accepts `text/event-stream`).
    pub can_stream: bool,
    /// The client's protocol era. Modern requests get `resultType` and
    /// caching hints on results, and closing their response stream cancels
    /// the upstream request.
    pub era: Era,
    /// A modern request's `_meta` log level: upstream log messages at or
    /// above it travel on this request's stream.
    pub log_level: Option<LogLevel>,
    /// Who is asking; none when authentication is off.
    pub identity: Option<Arc<crate::auth::Identity>>,
    /// The session's id (`Mcp-Session-Id`), the same on every replica that
    /// serves it; none for a stateless request or an in-process session.
    pub session_id: Option<Arc<str>>,
    /// The endpoint asked (`/mcp/<name>`); none: the whole view (`/mcp`).
    pub endpoint: Option<Arc<str>>,
}

/// Calls one session may have in flight at once; each may hold a task (a
/// streaming reply), so this bounds what one client can make the gateway
/// spawn. Beyond it a call is refused at once.
pub(crate) const MAX_CALLS_IN_FLIGHT: usize = 512;

/// Whether a call may start in a session.
pub(crate) enum Admitted {
    Yes,
    /// Its id is already in flight in this session.
    IdInUse,
    /// The session has `MAX_CALLS_IN_FLIGHT` calls running.
    Full,
    /// The session ended while the call was on its way.
    Ended,
}

/// A session's forwarded calls that have not finished, keyed by the raw
/// JSON text of the client's request id. Entries leave when calls end.
///
/// One per session, and a session has few calls at once: a plain map under
/// a std mutex (held for one lookup, never across an await) costs a few
/// dozen bytes where a sharded map would cost a kilobyte per session.
#[derive(Default)]
pub(crate) struct InflightCalls {
    calls: std::sync::Mutex<InflightTable>,
}

#[derive(Default)]
struct InflightTable {
    calls: crate::hashing::HashMap<Arc<str>, InflightCall>,
    /// The session ended ([`InflightCalls::cancel_all`]): a call that gets
    /// this far afterwards (say, one granted a slot after waiting in its
    /// upstream's queue) is refused, not sent where nothing would end it.
    ended: bool,
}

impl InflightCalls {
    fn lock(&self) -> std::sync::MutexGuard<'_, InflightTable> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.lock().calls.is_empty()
    }

    /// Cancels every call upstream (the session ended) and refuses any
    /// later one; returns how many were cancelled.
    pub(crate) fn cancel_all(&self, reason: &str) -> usize {
        let calls: Vec<InflightCall> = {
            let mut table = self.lock();
            table.ended = true;
            table.calls.drain().map(|(_, call)| call).collect()
        };
        calls
            .iter()
            .filter(|call| call.cancel_upstream(reason))
            .count()
    }

    /// Calls in flight.
    pub(crate) fn len(&self) -> usize {
        self.lock().calls.len()
    }

    /// Records a new call, unless the session ended, its id is already in
    /// flight or the session has `MAX_CALLS_IN_FLIGHT` calls running.
    fn insert_new(&self, client_id: Arc<str>, call: InflightCall) -> Admitted {
        let mut table = self.lock();
        if table.ended {
            return Admitted::Ended;
        }
        let full = table.calls.len() >= MAX_CALLS_IN_FLIGHT;
        match table.calls.entry(client_id) {
            std::collections::hash_map::Entry::Occupied(_) => Admitted::IdInUse,
            std::collections::hash_map::Entry::Vacant(_) if full => Admitted::Full,
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(call);
                Admitted::Yes
            }
        }
    }

    /// Points an existing entry at a new attempt (a retry).
    fn retarget(&self, client_id: &str, call: InflightCall) {
        if let Some(entry) = self.lock().calls.get_mut(client_id) {
            *entry = call;
        }
    }

    /// Removes the entry if `still_this` says it is the caller's call.
    fn remove_if(&self, client_id: &str, still_this: impl FnOnce(&InflightCall) -> bool) {
        let mut table = self.lock();
        if table.calls.get(client_id).is_some_and(still_this) {
            table.calls.remove(client_id);
        }
    }

    /// Takes the entry for a cancellation.
    fn take(&self, client_id: &str) -> Option<InflightCall> {
        self.lock().calls.remove(client_id)
    }
}

/// What the gateway offers clients of either era.
pub(crate) fn capabilities() -> Value {
    json!({
        "tools": { "listChanged": true },
        "prompts": { "listChanged": true },
        "resources": { "subscribe": true, "listChanged": true },
        "completions": {},
        "logging": {},
    })
}

/// How long a modern client may cache a merged list page. The gateway
/// announces every change with `list_changed`, so the TTL only bounds how
/// stale a client without a listen stream can be.
pub(crate) const LIST_TTL_MS: u64 = 60_000;

/// The caller's subscriber, which only session-based requests have.
fn subscriber(ctx: &RequestContext) -> Result<&Arc<Subscriber>, RouteError> {
    ctx.subscriber
        .as_ref()
        .ok_or_else(|| RouteError::MethodNotFound("this method needs a session (2025 era)".into()))
}

/// Answers requests from the merged catalog and the upstream set.
pub(crate) struct Router {
    catalog: Arc<CatalogStore>,
    upstreams: Arc<UpstreamSet>,
    hub: Arc<NotifyHub>,
    metrics: Arc<Metrics>,
    page_size: crate::config::PageSizes,
    /// Where a streaming call's task runs: the gateway's tracker.
    tasks: tokio_util::task::TaskTracker,
    /// Stateless calls waiting for their clients' input.
    parking: Arc<forward::Parking>,
    /// Seals what the gateway hands clients to bring back: the parked
    /// calls' `requestState` and the ids of tasks.
    sealer: Arc<crate::seal::Sealer>,
    /// Trace export; none when tracing is off.
    telemetry: Option<Arc<crate::telemetry::Telemetry>>,
}

impl Router {
    pub(crate) fn new(
        catalog: Arc<CatalogStore>,
        upstreams: Arc<UpstreamSet>,
        hub: Arc<NotifyHub>,
        metrics: Arc<Metrics>,
        page_size: crate::config::PageSizes,
    ) -> Self {
        let sealer = Arc::new(crate::seal::Sealer::random());
        let parking = Arc::new(forward::Parking::new(sealer.clone()));
        Self {
            catalog,
            upstreams,
            hub,
            metrics,
            page_size,
            tasks: tokio_util::task::TaskTracker::new(),
            parking,
            sealer,
            telemetry: None,
        }
    }

    /// Runs the tasks of streaming calls on `tasks` (the gateway's tracker).
    pub(crate) fn with_tasks(mut self, tasks: tokio_util::task::TaskTracker) -> Self {
        self.tasks = tasks;
        self
    }

    /// Seals the `requestState` of stateless calls parked for input, and
    /// task ids, with `sealer` (the config's `request_state.key`) instead
    /// of a random key, so that replicas sharing it open each other's.
    pub(crate) fn with_state_sealer(mut self, sealer: crate::seal::Sealer) -> Self {
        self.sealer = Arc::new(sealer);
        self.parking = Arc::new(forward::Parking::new(self.sealer.clone()));
        self
    }

    /// Sends a resolved call to its upstream (see [`forward::run`]).
    async fn forward(&self, call: call::Call<'_>, ctx: &RequestContext, id: &RawValue) -> Reply {
        forward::run(
            call,
            ctx,
            id,
            &self.hub,
            &self.metrics,
            &self.tasks,
            &self.parking,
        )
        .await
    }

    /// Stateless calls waiting for their clients' input now.
    pub(crate) fn parked_calls(&self) -> usize {
        self.parking.len()
    }

    pub(crate) fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub(crate) fn hub(&self) -> &Arc<NotifyHub> {
        &self.hub
    }

    pub(crate) fn catalog(&self) -> &Arc<CatalogStore> {
        &self.catalog
    }

    pub(crate) fn upstreams(&self) -> &Arc<UpstreamSet> {
        &self.upstreams
    }

    /// What the gateway offers clients of `era` at a view (none: the
    /// whole one): [`capabilities`], plus tasks when an upstream of that era
    /// offers them.
    pub(crate) fn capabilities_for(&self, era: Era, endpoint: Option<&str>) -> Value {
        let mut capabilities = capabilities();
        tasks::declare(&mut capabilities, &self.upstreams, era);
        // MCP Apps, once the view shows one (a tool with an app).
        if self.catalog.load_view(endpoint).apps().any() {
            apps::declare_extension(
                &mut capabilities,
                protocol::meta::UI_EXTENSION,
                json!({ "mimeTypes": [protocol::meta::APP_MIME_TYPE] }),
            );
        }
        capabilities
    }

    /// The `initialize` result for a client of a view (none: the whole
    /// one) that agreed on `version`.
    pub(crate) fn initialize_result(
        &self,
        version: &str,
        endpoint: Option<&str>,
        identity: Option<&Identity>,
    ) -> String {
        let mut result = json!({
            "protocolVersion": version,
            "capabilities": self.capabilities_for(Era::Legacy, endpoint),
            "serverInfo": { "name": "mcpmux", "version": env!("CARGO_PKG_VERSION") },
        });
        if let Some(text) = self.instructions(endpoint, identity) {
            result["instructions"] = Value::from(text);
        }
        result.to_string()
    }

    /// The merged `instructions` of the upstreams `identity` sees something
    /// of in a view.
    pub(crate) fn instructions(
        &self,
        endpoint: Option<&str>,
        identity: Option<&Identity>,
    ) -> Option<String> {
        match self.hub.views() {
            Some(views) => views.instructions(endpoint, identity),
            None => self
                .catalog
                .load_view(endpoint)
                .instructions()
                .map(str::to_owned),
        }
    }

    /// The catalog of the view a request asks.
    fn catalog_for(&self, ctx: &RequestContext) -> Arc<Catalog> {
        self.catalog.load_view(ctx.endpoint.as_deref())
    }

    /// The grant a request is served under: none (everything visible)
    /// without a policy or without an authenticated client.
    fn grant(&self, ctx: &RequestContext) -> Option<Arc<Grant>> {
        self.hub
            .views()?
            .grant(ctx.endpoint.as_deref(), ctx.identity.as_deref())
    }

    /// Whether `identity` is served a view filtered by a policy.
    pub(crate) fn filters(&self, endpoint: Option<&str>, identity: Option<&Identity>) -> bool {
        self.hub
            .views()
            .is_some_and(|views| views.grant(endpoint, identity).is_some())
    }

    /// Whether `identity` may see and use the tool, prompt or URI `key` in
    /// a view. A hidden one is answered exactly like an unknown one.
    pub(crate) fn allows(
        &self,
        endpoint: Option<&str>,
        identity: Option<&Identity>,
        key: &str,
    ) -> bool {
        match self.hub.views() {
            Some(views) => views.allows(endpoint, identity, key),
            None => self.catalog.load_view(endpoint).admits(key),
        }
    }

    /// Answers one request. Wakes that come while the request is being
    /// polled (the answer read by the POST this task drives) re-poll it in
    /// place (see [`crate::inline_wake`]).
    pub(crate) async fn request(&self, ctx: &RequestContext, request: &mut Request<'_>) -> Reply {
        crate::inline_wake::inline_wakes(self.request_here(ctx, request)).await
    }

    async fn request_here(&self, ctx: &RequestContext, request: &mut Request<'_>) -> Reply {
        // A progressive view's own tools: a search is answered here, a call
        // of a found tool goes on as that tool's call.
        if ctx.endpoint.is_some() && request.method == Method::ToolsCall {
            let catalog = self.catalog_for(ctx);
            match self.gateway_call(ctx, &catalog, request) {
                None => {}
                Some(search::GatewayCall::Answered(frame)) => return Reply::Ready(frame),
                Some(search::GatewayCall::Call(inner)) => {
                    // Boxed and type-erased (see `in_place::rare`): this
                    // future would otherwise hold room for a second call.
                    let found = || async move {
                        let params = Some(crate::protocol::Raw::from(&*inner));
                        let mut found = Request::new(request.id, Method::ToolsCall, params);
                        self.traced_or_not(ctx, &mut found).await
                    };
                    return crate::in_place::rare(found).await;
                }
            }
        }
        self.traced_or_not(ctx, request).await
    }

    async fn traced_or_not(&self, ctx: &RequestContext, request: &mut Request<'_>) -> Reply {
        match &self.telemetry {
            None => self.serve(ctx, request).await,
            // Boxed and type-erased (see `in_place::rare`): only a gateway
            // with telemetry takes this path, and its spans cost more than
            // the allocation.
            Some(telemetry) => crate::in_place::rare(|| self.traced(telemetry, ctx, request)).await,
        }
    }

    /// Brings up the caller's own session at each upstream that acts as
    /// each caller and has no lists yet (see [`UpstreamHandle::warm`]);
    /// true if one did.
    async fn warm(&self, ctx: &RequestContext) -> bool {
        let Some(identity) = ctx.identity.as_deref() else {
            return false;
        };
        let mut warmed = false;
        for handle in self.upstreams.holding_place() {
            warmed |= handle.warm(Some(identity)).await;
        }
        warmed
    }

    /// [`Router::request`] without tracing.
    pub(super) async fn serve(&self, ctx: &RequestContext, request: &mut Request<'_>) -> Reply {
        let started = std::time::Instant::now();
        if let (Some(subscriber), Some(identity)) = (&ctx.subscriber, &ctx.identity)
            && subscriber.identity().is_none()
        {
            // A session's notifications follow its client's view.
            self.hub.bind_identity(subscriber, identity.clone());
        }
        let grant = self.grant(ctx);
        let grant = grant.as_deref();
        let catalog = self.catalog_for(ctx);
        let listing = listed_kind(&request.method);
        if listing.is_some() {
            self.warm(ctx).await;
        }
        // The params are parsed here, once, by the methods that read them.
        let outcome = match request.method.clone() {
            _ if let Some(kind) = listing => {
                params_of(request).and_then(|params| self.list(&catalog, grant, kind, params))
            }
            Method::Ping => Ok(Page::from("{}".to_owned())),
            Method::Subscribe => match params_of(request) {
                Ok(params) => self
                    .subscribe(ctx, &catalog, grant, params)
                    .await
                    .map(Page::from),
                Err(e) => Err(e),
            },
            Method::Unsubscribe => params_of(request)
                .and_then(|params| self.unsubscribe(ctx, params))
                .map(Page::from),
            Method::SetLevel => params_of(request)
                .and_then(|params| self.set_level(ctx, params))
                .map(Page::from),
            task @ (Method::TasksGet
            | Method::TasksUpdate
            | Method::TasksResult
            | Method::TasksCancel
            | Method::TasksList) => {
                let raw = request.raw_params();
                return self.task_request(ctx, request.id, task, raw).await;
            }
            Method::ToolsCall | Method::PromptsGet | Method::ResourcesRead | Method::Complete => {
                return self
                    .serve_call(ctx, request, &catalog, grant, started)
                    .await;
            }
            other => Err(RouteError::MethodNotFound(other.name().to_owned())),
        };
        self.answer(
            ctx,
            request,
            outcome,
            listing.is_some(),
            grant.is_some(),
            started,
        )
    }

    /// The reply to a request the router answered itself (a list page, or
    /// a small result), counted as it ended.
    fn answer(
        &self,
        ctx: &RequestContext,
        request: &Request<'_>,
        outcome: Result<Page, RouteError>,
        listing: bool,
        filtered: bool,
        started: std::time::Instant,
    ) -> Reply {
        let measured = match &outcome {
            Ok(_) => Outcome::Ok,
            Err(e) => e.outcome(),
        };
        // A name the gateway does not know is counted under one label, so
        // that clients cannot add series to `/metrics` at will.
        let method = match &request.method {
            Method::Other(_) => OTHER_METHOD,
            known => known.name(),
        };
        self.metrics
            .observe(method, "mcpmux", measured, started.elapsed());
        // A view filtered for one client is no one else's to cache.
        let scope = if filtered { "private" } else { "public" };
        let hints = (ctx.era == Era::Modern).then_some(CacheHints {
            ttl_ms: LIST_TTL_MS,
            scope,
        });
        let id = request.id.get();
        match outcome {
            Ok(page) if listing => Reply::Page(PageFrame::new(id, page, hints)),
            Ok(result) => Reply::Ready(Frame::result(match hints {
                Some(hints) => protocol::response_frame(
                    id,
                    &rewrite::cacheable(&result, hints.ttl_ms, hints.scope),
                ),
                None => protocol::response_frame(id, &result),
            })),
            Err(e) => Reply::Ready(e.to_frame(id, ctx.era)),
        }
    }

    /// A call (`tools/call`, `prompts/get`, `resources/read`,
    /// `completion/complete`): resolved to its upstream, then forwarded.
    async fn serve_call(
        &self,
        ctx: &RequestContext,
        request: &mut Request<'_>,
        catalog: &Catalog,
        grant: Option<&Grant>,
        started: std::time::Instant,
    ) -> Reply {
        let id = request.id;
        let method = request.method.clone();
        let prepared = match request.take_params() {
            Ok(params) => self.resolve(ctx, method, params, catalog, grant).await,
            Err(e) => Err(RouteError::InvalidParams(e)),
        };
        let call = match prepared {
            Ok(call) => call,
            Err(e) => {
                // Refused before reaching an upstream: counted here.
                let method = request.method.name();
                self.metrics
                    .observe(method, "mcpmux", e.outcome(), started.elapsed());
                forward::audit(
                    ctx.identity.as_ref().map(|i| &*i.client),
                    method,
                    "mcpmux",
                    &e.to_string(),
                    e.outcome(),
                    started.elapsed(),
                    id.get(),
                );
                return Reply::Ready(e.to_frame(id.get(), ctx.era));
            }
        };
        let creates = (call.method == Method::ToolsCall && tasks::may_create(ctx, &call.params))
            .then(|| call.handle.name().clone());
        let reply = self.forward(call, ctx, id).await;
        match creates {
            Some(upstream) => tasks::adopt_reply(
                reply,
                self.hub.clone(),
                self.sealer.clone(),
                upstream,
                tasks::Caller::of(ctx),
                ctx.era,
                &self.tasks,
            ),
            None => reply,
        }
    }

    /// Handles a client notification.
    pub(crate) fn notification(
        &self,
        ctx: &RequestContext,
        method: &str,
        params: Option<crate::protocol::Raw<'_>>,
    ) {
        match Method::from_name(method) {
            Method::Cancelled => forward::cancel(ctx, params),
            Method::RootsListChanged => {
                if let Some(subscriber) = &ctx.subscriber {
                    self.hub.roots_changed(subscriber.id);
                }
            }
            _ => {}
        }
    }

    /// One page of a list (built once per catalog snapshot and shared), or
    /// of the grant's view of it (derived once per list version and grant,
    /// see [`crate::policy`]).
    fn list(
        &self,
        catalog: &Catalog,
        grant: Option<&Grant>,
        kind: ListKind,
        params: &Params<'_>,
    ) -> Result<Page, RouteError> {
        let cursor = params
            .optional_string("cursor")
            .map_err(RouteError::InvalidParams)?;
        let page_size = match kind {
            ListKind::Tools => self.page_size.tools,
            ListKind::Prompts => self.page_size.prompts,
            ListKind::Resources => self.page_size.resources,
            ListKind::Templates => self.page_size.templates,
        };
        let page = match grant {
            None => catalog.page(kind, cursor.as_deref(), page_size)?,
            Some(grant) => {
                let view = grant.list(kind, catalog);
                let subset = grant.subset(&view);
                catalog.page_in(kind, Some(subset), cursor.as_deref(), page_size)?
            }
        };
        Ok(page)
    }

    /// `resources/subscribe`: the first subscriber of a URI subscribes
    /// upstream; later ones only join the table. While the upstream is down
    /// the subscription is recorded and made when it reconnects.
    async fn subscribe(
        &self,
        ctx: &RequestContext,
        catalog: &Catalog,
        grant: Option<&Grant>,
        params: &Params<'_>,
    ) -> Result<String, RouteError> {
        let uri = params
            .string("uri")
            .map_err(RouteError::InvalidParams)?
            .into_owned();
        if !catalog.admits(&uri) || grant.is_some_and(|g| !g.allows_in(catalog, &uri)) {
            return Err(RouteError::ResourceNotFound(uri));
        }
        if let Subscribed::WatchSetChanged(modern) =
            self.subscribe_uri(subscriber(ctx)?.id, &uri).await?
        {
            modern.watch_set_changed_and_applied(modern.timeout()).await;
        }
        Ok("{}".to_owned())
    }

    /// Adds `subscriber` to the watchers of a namespaced URI, shared by
    /// legacy sessions and modern listen streams alike. A session-based
    /// upstream is subscribed at once; a modern one must be told the URIs it
    /// watches changed (a caller adding several URIs tells it once).
    pub(crate) async fn subscribe_uri(
        &self,
        subscriber: SubscriberId,
        uri: &str,
    ) -> Result<Subscribed, RouteError> {
        // A URI its client may not read is answered like an unknown one.
        let endpoint = self.hub.endpoint_of(subscriber);
        let endpoint = endpoint.as_deref();
        if !self.allows(endpoint, self.hub.identity_of(subscriber).as_deref(), uri) {
            return Err(RouteError::ResourceNotFound(uri.to_owned()));
        }
        let catalog = self.catalog.load_view(endpoint);
        let (upstream, original) = self
            .split_uri(&catalog, uri)
            .ok_or_else(|| RouteError::ResourceNotFound(uri.to_owned()))?;
        let handle = self.upstream(&upstream)?;
        if handle.hello().is_some_and(|h| !h.can_subscribe()) {
            return Err(RouteError::NotSupported {
                upstream: upstream.to_string(),
                feature: "resources/subscribe",
            });
        }
        let interest = self.hub.interest();
        let identity = self.hub.identity_of(subscriber);
        Ok(interest
            .subscribe(subscriber, uri, &handle, &original, identity.as_deref())
            .await?)
    }

    /// `resources/unsubscribe`: the last subscriber leaving unsubscribes upstream.
    fn unsubscribe(&self, ctx: &RequestContext, params: &Params<'_>) -> Result<String, RouteError> {
        let uri = params
            .string("uri")
            .map_err(RouteError::InvalidParams)?
            .into_owned();
        self.hub.interest().unsubscribe(subscriber(ctx)?.id, &uri);
        Ok("{}".to_owned())
    }

    /// `logging/setLevel` for this session only.
    fn set_level(&self, ctx: &RequestContext, params: &Params<'_>) -> Result<String, RouteError> {
        let level = params.string("level").map_err(RouteError::InvalidParams)?;
        let level = LogLevel::parse(&level)
            .ok_or_else(|| ParamsError::UnknownLogLevel(level.into_owned()))?;
        self.hub.set_log_level(subscriber(ctx)?, level);
        Ok("{}".to_owned())
    }

    /// The configured upstream whose prefix `name` carries, when that
    /// upstream is not up (so its items are not in the catalog).
    fn owner_not_up(
        &self,
        catalog: &Catalog,
        name: &str,
    ) -> Option<crate::upstream::UpstreamHandle> {
        let handle = self.upstreams.get(catalog.owner_by_prefix(name)?)?;
        let up = matches!(
            handle.state(),
            crate::upstream::UpstreamState::Ready
                | crate::upstream::UpstreamState::Unresponsive { .. }
        );
        (!up).then_some(handle)
    }

    fn upstream(&self, name: &str) -> Result<crate::upstream::UpstreamHandle, RouteError> {
        self.upstreams.get(name).ok_or_else(|| {
            RouteError::Upstream(UpstreamError::Unavailable {
                upstream: name.to_owned(),
                reason: "it is not configured".into(),
            })
        })
    }

    /// Splits a namespaced URI whose prefix is a configured upstream.
    fn split_uri<'u>(
        &self,
        catalog: &Catalog,
        uri: &'u str,
    ) -> Option<(Arc<str>, std::borrow::Cow<'u, str>)> {
        catalog.route_uri(uri, |u| self.upstreams.get(u).is_some())
    }
}
