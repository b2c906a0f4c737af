//! The downstream side: the HTTP routes MCP hosts talk to, origin
//! validation, and the probes.
//!
//! [`app`] builds the axum router over one shared [`AppState`]. The MCP
//! endpoint lives in [`http`]; sessions in [`session`]; what every route
//! shares on the wire (header names, error answers, reading a body) in
//! `wire`, which imports no other downstream module.
//!
//! Imports among these modules go one way, downwards: the handlers
//! (`http`, which hands modern-era requests to `modern`; `stream`,
//! `legacy_sse`, `stdio`) use `dispatch`, `resume`, `authn` and `listen`;
//! those use `session`; `session` uses `post_streams` and `throttle`; and
//! `listener` and `wire` sit at the bottom.

pub(crate) mod authn;
pub(crate) mod authorize;
pub(crate) mod dispatch;
pub(crate) mod endpoint;
pub(crate) mod http;
pub(crate) mod legacy_sse;
pub(crate) mod listen;
pub(crate) mod listener;
pub(crate) mod modern;
pub(crate) mod oauth;
pub(crate) mod post_streams;
pub(crate) mod resume;
pub(crate) mod serve;
pub(crate) mod session;
pub(crate) mod shared;
pub(crate) mod stdio;
pub(crate) mod stream;
pub(crate) mod throttle;
pub(crate) mod ui;
pub(crate) mod wire;

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use crate::config::HttpConfig;
use crate::protocol::code;
use crate::router::Router;
use crate::upstream::UpstreamState;
use session::SessionTable;

/// The authorization server for `config` (none when `auth.oauth_server` is
/// off): `current` when it was built from the same settings, else a new
/// one. A server that cannot start is logged and left off, so its routes
/// answer 404 and its tokens are refused.
pub(crate) fn start_oauth_server(
    config: &crate::config::Config,
    current: Option<Arc<crate::oauth_server::OAuthServer>>,
    shutdown: &tokio_util::sync::CancellationToken,
    tasks: &tokio_util::task::TaskTracker,
) -> Option<Arc<crate::oauth_server::OAuthServer>> {
    let crate::config::AuthConfig::On(settings) = &config.auth else {
        return None;
    };
    if let Some(current) = current.filter(|s| s.built_from(settings)) {
        return Some(current);
    }
    crate::oauth_server::OAuthServer::start(
        settings,
        &config.credentials,
        config.session_store.as_ref(),
        shutdown,
        tasks,
    )
    .inspect_err(|e| tracing::error!(error = %e, "auth.oauth_server cannot start; it is off"))
    .ok()
    .flatten()
}

/// Everything a request handler needs, shared by all connections.
pub(crate) struct AppState {
    pub router: Router,
    pub sessions: Arc<SessionTable>,
    pub http: HttpConfig,
    /// Cancelled at shutdown; ends every notification stream.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// How long calls in flight may still finish when their client is done
    /// (shutdown, or a stdio host closing its input).
    pub drain_grace: std::time::Duration,
    /// Whether the HTTP listener is on a loopback address: then only
    /// loopback `Host` names (and `http.allowed_hosts`) are accepted.
    pub loopback_listener: std::sync::atomic::AtomicBool,
    /// Checks client credentials; none when `auth.mode` is off. Swapped
    /// whole by a reload.
    pub auth: arc_swap::ArcSwapOption<crate::auth::Authenticator>,
    /// Per-client request rates; none without `rate_limit`. Swapped whole
    /// by a reload (the buckets start full again).
    pub throttle: arc_swap::ArcSwapOption<throttle::Throttle>,
    /// The HTTP listener's connection counters, once it serves.
    pub connections: std::sync::OnceLock<Arc<listener::ConnectionCounts>>,
    /// Where the HTTP server listens, once it does.
    pub listen_addr: std::sync::OnceLock<std::net::SocketAddr>,
    /// The gateway's own authorization server (`auth.oauth_server`), if
    /// on; replaced by a reload only when its settings change.
    pub oauth_server: arc_swap::ArcSwapOption<crate::oauth_server::OAuthServer>,
    /// Users' authorization flows (`/oauth/callback`) and their token store.
    pub connector: Arc<crate::credentials::Connector>,
    /// The gateway's task tracker: tasks a request leaves running (a
    /// resumable answer's pump, a legacy SSE POST's call) go on it, so
    /// shutdown waits for them.
    pub tracker: tokio_util::task::TaskTracker,
    /// The config in force and the last reload, for the operator's page.
    pub ui: ui::UiState,
    /// The endpoints served at `/mcp/<name>`; swapped whole by a reload.
    pub endpoints: arc_swap::ArcSwap<endpoint::Endpoints>,
}

impl AppState {
    /// The authenticator in force; none when authentication is off.
    pub(crate) fn auth(&self) -> Option<Arc<crate::auth::Authenticator>> {
        self.auth.load_full()
    }

    /// Puts a reloaded config's `auth` and `rate_limit` in force: the next
    /// request of every client, session or not, is checked by them.
    pub(crate) fn apply_edge(
        &self,
        config: &crate::config::Config,
        shutdown: &tokio_util::sync::CancellationToken,
    ) {
        let current = self.oauth_server.load_full();
        let server = start_oauth_server(config, current, shutdown, &self.tracker);
        if let (Some(server), Some(addr)) = (&server, self.listen_addr.get().copied()) {
            server.listening_on(addr);
        }
        self.oauth_server.store(server.clone());
        self.auth.store(crate::auth::Authenticator::start(
            &config.auth,
            server.map(|s| s as Arc<dyn crate::auth::OwnTokens>),
            shutdown,
            &self.tracker,
        ));
        self.throttle.store(
            config
                .rate_limit
                .map(|limit| Arc::new(throttle::Throttle::new(limit))),
        );
        self.set_endpoints(&config.endpoints);
    }

    /// Puts a reloaded config's endpoints in force. Sessions of an endpoint
    /// that is gone end; those of endpoints that stay are kept.
    pub(crate) fn set_endpoints(&self, configs: &[crate::config::EndpointConfig]) {
        let endpoints = endpoint::endpoints_of(configs);
        if **self.endpoints.load() == endpoints {
            return;
        }
        let orphans: Vec<Arc<str>> = self
            .sessions
            .all()
            .into_iter()
            .filter(|s| {
                s.subscriber
                    .endpoint()
                    .is_some_and(|e| !endpoints.contains_key(e))
            })
            .map(|s| s.id.clone())
            .collect();
        self.endpoints.store(Arc::new(endpoints));
        for id in orphans {
            self.sessions
                .close(&id, session::CloseReason::EndpointRemoved);
        }
    }

    /// Takes one request from the caller's rate budget; the 429 when it
    /// has none left (counted by client).
    #[allow(clippy::result_large_err)]
    pub(crate) fn admit_rate(
        &self,
        identity: Option<&Arc<crate::auth::Identity>>,
        ip: Option<std::net::IpAddr>,
    ) -> Result<(), Response> {
        // No rate limit configured: nothing to count, no key to build.
        let Some(throttle) = self.throttle.load_full() else {
            return Ok(());
        };
        let Some(key) = throttle::client_key(identity, ip) else {
            return Ok(());
        };
        throttle.check(&key).map_err(|wait| {
            let client = identity.map_or_else(|| key.to_string(), |i| i.client.to_string());
            self.router.metrics().denied(&client, "rate_limit");
            tracing::info!(target: "mcpmux::audit", client = %key, reason = "rate_limit", "request refused");
            throttle.refusal(&key, wait)
        })
    }

    /// Rejects a browser `Origin` that is neither loopback nor configured (403),
    /// which stops DNS-rebinding pages from reaching a local gateway.
    #[allow(clippy::result_large_err)]
    pub(crate) fn check_origin(&self, headers: &HeaderMap) -> Result<(), Response> {
        self.check_host(headers)?;
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let origin = origin.to_str().unwrap_or_default();
        if is_loopback_origin(origin)
            || self
                .http
                .allowed_origins
                .iter()
                .any(|o| o == "*" || o.eq_ignore_ascii_case(origin))
        {
            return Ok(());
        }
        tracing::warn!(origin, "request from a disallowed Origin rejected");
        Err(wire::Refusal::new(
            StatusCode::FORBIDDEN,
            code::INVALID_REQUEST,
            format!("Origin {origin:?} is not allowed; add it to http.allowed_origins"),
        )
        .into_response())
    }

    /// Rejects a `Host` header a DNS-rebinding page would send (403): on a
    /// loopback listener only loopback names and `http.allowed_hosts` pass;
    /// elsewhere only `http.allowed_hosts` is checked, when it is set.
    #[allow(clippy::result_large_err)]
    fn check_host(&self, headers: &HeaderMap) -> Result<(), Response> {
        let Some(value) = headers.get(header::HOST) else {
            return Ok(());
        };
        let host = value.to_str().unwrap_or_default();
        let allowed = &self.http.allowed_hosts;
        let listed = allowed.iter().any(|h| {
            h == "*" || h.eq_ignore_ascii_case(host) || h.eq_ignore_ascii_case(host_name(host))
        });
        let loopback = self
            .loopback_listener
            .load(std::sync::atomic::Ordering::Relaxed);
        if listed
            || (loopback && is_loopback_host(host_name(host)))
            || (!loopback && allowed.is_empty())
        {
            return Ok(());
        }
        tracing::warn!(host, "request with a disallowed Host header rejected");
        Err(wire::Refusal::new(
            StatusCode::FORBIDDEN,
            code::INVALID_REQUEST,
            format!("Host {host:?} is not allowed; add it to http.allowed_hosts"),
        )
        .into_response())
    }
}

/// The name part of a `Host` value or an origin's authority: without the
/// port, and without the brackets of an IPv6 literal.
fn host_name(authority: &str) -> &str {
    // Up to the first `end`: a byte loop, which costs less than a string
    // search on a name this short (it is read on every request).
    fn until(text: &str, end: u8) -> &str {
        match text.bytes().position(|b| b == end) {
            Some(at) => &text[..at],
            None => text,
        }
    }
    match authority.strip_prefix('[') {
        Some(v6) => until(v6, b']'),
        None => until(authority, b':'),
    }
}

/// `localhost`, `127.x.x.x` or `::1`.
fn is_loopback_host(host: &str) -> bool {
    // The address most local clients send, compared before any is parsed.
    host == "127.0.0.1"
        || host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `http(s)://localhost`, `127.x.x.x` or `[::1]`, with any port.
fn is_loopback_origin(origin: &str) -> bool {
    origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .is_some_and(|rest| is_loopback_host(host_name(rest)))
}

/// The axum application.
pub(crate) fn app(state: Arc<AppState>) -> axum::Router {
    let traced = state.router.telemetry().is_some();
    let app = axum::Router::new()
        .route(
            "/mcp",
            get(stream::get).post(http::post).delete(http::delete),
        )
        .route("/sse", get(legacy_sse::open))
        .route("/message", axum::routing::post(legacy_sse::message))
        .route(
            "/mcp/{endpoint}",
            get(stream::get).post(http::post).delete(http::delete),
        )
        .route("/mcp/{endpoint}/sse", get(legacy_sse::open))
        .route(
            "/mcp/{endpoint}/message",
            axum::routing::post(legacy_sse::message),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/status", get(status))
        .route("/metrics", get(metrics))
        .route("/oauth/callback", get(oauth::callback))
        .route("/oauth/connections", get(oauth::list))
        .route(
            "/oauth/connections/{upstream}",
            axum::routing::delete(oauth::disconnect),
        )
        .route("/authorize", get(authorize::authorize))
        .route(
            crate::oauth_server::LOGIN_CALLBACK,
            get(authorize::login_callback),
        )
        .route(
            crate::oauth_server::CONSENT,
            axum::routing::post(authorize::consent),
        )
        .route(
            "/oauth/grants",
            get(authorize::list_grants).delete(authorize::revoke_grants),
        )
        .route("/ui", get(ui::page))
        .route("/ui/events", get(ui::events))
        .route("/ui/{file}", get(ui::asset))
        .merge(authorize::discovery_routes());
    // Only with tracing on: each request's `traceparent` header, for its span.
    let app = match traced {
        true => app.layer(axum::middleware::from_fn(trace_context)),
        false => app,
    };
    app.with_state(state)
}

/// The state `POST /mcp` is served with past the router (see
/// [`serve`]); none with tracing on, where the router's layer gives each
/// request its trace context.
pub(crate) fn direct_post(state: &Arc<AppState>) -> serve::DirectPost {
    state.router.telemetry().is_none().then(|| state.clone())
}

/// Makes a request's `traceparent` and `Mcp-Session-Id` headers known to
/// the span of the MCP request it carries.
async fn trace_context(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let incoming = crate::telemetry::Incoming::from_headers(request.headers());
    incoming.scope(next.run(request)).await
}

/// Each upstream's state as JSON (no URLs, commands or headers: they may
/// hold secrets).
fn upstream_status(state: &AppState) -> Vec<(bool, serde_json::Value)> {
    let mut handles = state.router.upstreams().all();
    handles.sort_by(|a, b| a.name().cmp(b.name()));
    handles
        .iter()
        .map(|h| {
            let state = h.state();
            let reason = match &state {
                UpstreamState::Down { .. } | UpstreamState::Unresponsive { .. } => {
                    Some(state.describe())
                }
                _ => None,
            };
            let reason = reason.or_else(|| {
                h.protection()
                    .is_open()
                    .then(|| "its circuit breaker is open".to_owned())
            });
            let label = state.label();
            let [tools, prompts, resources, templates] = h.item_counts();
            let hello = h.hello();
            let status = json!({
                "name": &**h.name(),
                "state": label,
                "reason": reason,
                "required": h.required(),
                "transport": h.transport(),
                "protocolVersion": hello.as_ref().map(|h| h.protocol_version.clone()),
                "server": hello.as_ref().and_then(|h| h.server_name.clone()),
                "tools": tools,
                "prompts": prompts,
                "resources": resources,
                "resourceTemplates": templates,
                "restarts": h.restarts(),
                "pid": h.pid(),
                "instances": h.instance_count(),
                "suppressedLogLines": h.suppressed_lines(),
                "protection": h.protection().status(),
                "auth": h.credentials().map(|c| json!({
                    "mode": c.mode().name(),
                    "identitySessions": h.identities().map(|ids| ids.iter().map(|i| i.to_string()).collect::<Vec<_>>()),
                })),
            });
            (!h.holds_readiness(), status)
        })
        .collect()
}

/// 200 when every required upstream is ready, else 503; the body lists
/// each upstream's state.
async fn readyz(axum::extract::State(state): axum::extract::State<Arc<AppState>>) -> Response {
    let upstreams = upstream_status(&state);
    let store = shared::not_ready(&state);
    let ready = upstreams.iter().all(|(ok, _)| *ok) && store.is_none();
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let upstreams: Vec<_> = upstreams.into_iter().map(|(_, s)| s).collect();
    let mut body = json!({ "ready": ready, "upstreams": upstreams });
    if let Some(why) = store {
        body["sessionStore"] = json!(why);
    }
    (status, axum::Json(body)).into_response()
}

/// Everything an operator wants at a glance.
async fn status(
    axum::extract::State(state): axum::extract::State<Arc<AppState>>,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = authn::admit_admin(&state, &headers).await {
        return refused;
    }
    let hub = state.router.hub();
    let mut upstreams: Vec<_> = upstream_status(&state)
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    // Who connected which upstream (never a token).
    if let Ok(store) = state.connector.store() {
        for upstream in &mut upstreams {
            let name = upstream["name"].as_str().unwrap_or_default().to_owned();
            if let (Some(auth), Ok(connected)) = (
                upstream.get_mut("auth").and_then(|a| a.as_object_mut()),
                store.connections(None, Some(&name)).await,
            ) {
                let who: Vec<&str> = connected.iter().map(|c| c.identity.as_str()).collect();
                auth.insert("connectedUsers".into(), json!(who));
            }
        }
    }
    let (view, endpoints) = endpoint::status(&state);
    axum::Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "upstreams": upstreams,
        "view": view,
        "endpoints": endpoints,
        "sessions": state.sessions.len(),
        "sessionsEvicted": state.sessions.evicted(),
        "connections": state.connections.get().map(|c| c.open.load(std::sync::atomic::Ordering::Relaxed)),
        "listenStreams": hub.listener_count(),
        "subscriptions": { "uris": hub.subscriptions().uri_count(), "entries": hub.subscriptions().entry_count() },
        "cache": cache_status(hub.results().snapshot()),
        "sessionStore": shared::status(&state),
    }))
    .into_response()
}

/// The result cache in `/status`.
fn cache_status(c: crate::metrics::CacheSnapshot) -> serde_json::Value {
    json!({ "entries": c.entries, "hits": c.hits, "misses": c.misses, "coalesced": c.coalesced, "evicted": c.evicted })
}

/// Prometheus text exposition.
async fn metrics(
    axum::extract::State(state): axum::extract::State<Arc<AppState>>,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = authn::admit_admin(&state, &headers).await {
        return refused;
    }
    let hub = state.router.hub();
    let connected = ui::connected_users(&state).await;
    let snapshot = crate::metrics::Snapshot {
        upstreams: state
            .router
            .upstreams()
            .all()
            .iter()
            .map(|h| crate::metrics::UpstreamSnapshot {
                name: h.name().to_string(),
                up: h.state() == UpstreamState::Ready,
                restarts: h.restarts(),
                suppressed_lines: h.suppressed_lines(),
                instances: h.instance_count(),
                connected_users: h
                    .credentials()
                    .filter(|c| matches!(c.mode(), crate::config::AuthMode::User { .. }))
                    .map(|_| connected.get(&**h.name()).map_or(0, Vec::len)),
                protection: h.protection().counts(),
            })
            .collect(),
        legacy_sessions: state.sessions.len(),
        listen_streams: hub.listener_count(),
        subscription_entries: hub.subscriptions().entry_count(),
        subscribed_uris: hub.subscriptions().uri_count(),
        sessions_evicted: state.sessions.evicted(),
        connections: state.connections.get().map(|c| c.snapshot()),
        log_lines_dropped: crate::logging::dropped_lines(),
        cache: hub.results().snapshot(),
    };
    let mut body = state.router.metrics().render(&snapshot, hub.counts());
    body.extend(shared::metrics(&state));
    body.push_str(&endpoint::metrics(&state));
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::{host_name, is_loopback_host, is_loopback_origin};

    #[test]
    fn loopback_origins() {
        for ok in [
            "http://localhost:3000",
            "https://127.0.0.1",
            "http://[::1]:8080",
            "http://LOCALHOST",
        ] {
            assert!(is_loopback_origin(ok), "{ok}");
        }
        for bad in [
            "http://evil.example",
            "http://localhost.evil.example",
            "null",
            "http://10.0.0.1",
            "file://",
        ] {
            assert!(!is_loopback_origin(bad), "{bad}");
        }
    }

    #[test]
    fn loopback_hosts() {
        for ok in [
            "localhost:8080",
            "127.0.0.1",
            "127.1.2.3:9",
            "[::1]:8080",
            "LocalHost",
        ] {
            assert!(is_loopback_host(host_name(ok)), "{ok}");
        }
        for bad in [
            "evil.example",
            "localhost.evil.example:80",
            "10.0.0.1",
            "[::2]",
            "",
        ] {
            assert!(!is_loopback_host(host_name(bad)), "{bad}");
        }
        for (authority, name) in [
            ("example.com:443", "example.com"),
            ("example.com", "example.com"),
            ("[::1]:8080", "::1"),
            ("[fe80::1", "fe80::1"),
            (":80", ""),
            ("", ""),
        ] {
            assert_eq!(host_name(authority), name, "{authority}");
        }
    }
}
