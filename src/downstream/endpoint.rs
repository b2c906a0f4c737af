//! Endpoints at the HTTP edge: `/mcp/<name>` (and `/mcp/<name>/sse` with
//! its `/mcp/<name>/message`) serves one endpoint's view. [`At`] finds the
//! endpoint a request names; an endpoint's `auth` may ask more of a caller
//! than the gateway does (scopes, clients), and a session belongs to the
//! endpoint it was created at.

use axum::response::IntoResponse as _;
use std::sync::Arc;

use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use indexmap::IndexMap;

use super::AppState;
use super::session::Session;
use super::wire::Refusal;
use crate::auth::{AuthError, Identity};
use crate::catalog::ListKind;
use crate::config::EndpointConfig;
use crate::protocol::code;

/// What the edge needs of one endpoint.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub name: Arc<str>,
    /// Scopes a caller must have, besides `auth.required_scopes`.
    required_scopes: Vec<String>,
    /// The only clients it serves; empty: every authenticated one.
    clients: Vec<String>,
}

/// The configured endpoints by name, in config order.
pub(crate) type Endpoints = IndexMap<Arc<str>, Arc<Endpoint>>;

/// The endpoints of a config.
pub(crate) fn endpoints_of(configs: &[EndpointConfig]) -> Endpoints {
    configs
        .iter()
        .map(|c| {
            let name: Arc<str> = c.name.as_str().into();
            let endpoint = Endpoint {
                name: name.clone(),
                required_scopes: c.required_scopes.clone(),
                clients: c.clients.clone(),
            };
            (name, Arc::new(endpoint))
        })
        .collect()
}

/// The prologue every MCP route runs before it reads a body, as one
/// extractor: the endpoint asked ([`At`]), the `Origin` check, who is
/// calling (401, or 403 for what the endpoint requires), and the caller's
/// rate. A handler that takes a `Caller` has passed all four; otherwise the
/// first refusal is the answer.
pub(crate) struct Caller {
    pub(crate) at: At,
    pub(crate) identity: Option<Arc<Identity>>,
}

impl FromRequestParts<Arc<AppState>> for Caller {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let at = At::from_request_parts(parts, state).await?;
        let ip = parts
            .extensions
            .get::<axum::extract::ConnectInfo<super::listener::Peer>>()
            .map(|info| info.0.addr.ip());
        Caller::admit(at, &parts.headers, state, ip).await
    }
}

impl Caller {
    /// The prologue past the endpoint: the `Origin` check, who is calling,
    /// and the caller's rate (`ip`: the connection's remote address).
    pub(crate) async fn admit(
        at: At,
        headers: &HeaderMap,
        state: &Arc<AppState>,
        ip: Option<std::net::IpAddr>,
    ) -> Result<Caller, Response> {
        state.check_origin(headers)?;
        let identity = at.identify(state, headers).await?;
        state.admit_rate(identity.as_ref(), ip)?;
        Ok(Caller { at, identity })
    }
}

/// The endpoint a request names; none for `/mcp`, `/sse` and `/message`.
pub(crate) struct At(pub Option<Arc<Endpoint>>);

impl FromRequestParts<Arc<AppState>> for At {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let params = RawPathParams::from_request_parts(parts, state).await.ok();
        let Some(name) = params
            .as_ref()
            .and_then(|p| p.iter().find(|(key, _)| *key == "endpoint"))
            .map(|(_, value)| value.to_owned())
        else {
            return Ok(At(None));
        };
        match state.endpoints.load().get(name.as_str()) {
            Some(endpoint) => Ok(At(Some(endpoint.clone()))),
            None => Err(Refusal::new(
                StatusCode::NOT_FOUND,
                code::INVALID_REQUEST,
                format!("there is no endpoint {name:?} (see /status for the endpoints)"),
            )
            .into_response()),
        }
    }
}

impl At {
    /// The endpoint's name; none for the whole view.
    pub(crate) fn name(&self) -> Option<&str> {
        self.0.as_ref().map(|e| &*e.name)
    }

    /// The endpoint's name, shared.
    pub(crate) fn shared_name(&self) -> Option<Arc<str>> {
        self.0.as_ref().map(|e| e.name.clone())
    }

    /// Identifies the caller for this endpoint and checks that the
    /// endpoint serves it: 401 as for the gateway, 403 (with an
    /// `insufficient_scope` challenge) for a missing scope, 403 for a client
    /// the endpoint does not serve.
    #[allow(clippy::result_large_err)]
    pub(crate) async fn identify(
        &self,
        state: &AppState,
        headers: &HeaderMap,
    ) -> Result<Option<Arc<Identity>>, Response> {
        let identity = super::authn::identify_at(state, headers, self.name()).await?;
        let (Some(endpoint), Some(caller)) = (&self.0, &identity) else {
            return Ok(identity);
        };
        if let Some(missing) = endpoint
            .required_scopes
            .iter()
            .find(|scope| !caller.scopes.contains(scope))
        {
            let error = AuthError::InsufficientScope(missing.clone());
            return Err(super::authn::refuse_at(state, headers, self.name(), &error));
        }
        if !endpoint.clients.is_empty() && !endpoint.clients.iter().any(|c| **c == *caller.client) {
            tracing::info!(target: "mcpmux::audit", client = %caller.client, endpoint = %endpoint.name, reason = "endpoint", "request refused");
            state.router.metrics().denied(&caller.client, "endpoint");
            return Err(Refusal::new(
                StatusCode::FORBIDDEN,
                code::INVALID_REQUEST,
                format!(
                    "endpoint {:?} does not serve client {:?}",
                    endpoint.name, caller.client
                ),
            )
            .into_response());
        }
        Ok(identity)
    }

    /// Refuses a session created at another endpoint exactly like an
    /// unknown one.
    #[allow(clippy::result_large_err)]
    pub(crate) fn check_session(&self, session: &Session) -> Result<(), Response> {
        if session.subscriber.endpoint() == self.name() {
            return Ok(());
        }
        Err(Refusal::new(
            StatusCode::NOT_FOUND,
            code::INVALID_REQUEST,
            "unknown or expired session; initialize a new one",
        )
        .into_response())
    }
}

/// The whole view's and each endpoint's figures, for `/status`.
pub(crate) fn status(state: &AppState) -> (serde_json::Value, Vec<serde_json::Value>) {
    let store = state.router.catalog();
    let sessions = state.sessions.all();
    let view = |catalog: &crate::catalog::Catalog| {
        let name = catalog.view_name().map(|n| &**n);
        let mut figures = serde_json::json!({
            "prefixMode": catalog.prefix_mode().as_str(),
            "tools": catalog.len(ListKind::Tools),
            "prompts": catalog.len(ListKind::Prompts),
            "resources": catalog.len(ListKind::Resources),
            "resourceTemplates": catalog.len(ListKind::Templates),
            "sessions": sessions.iter().filter(|s| s.subscriber.endpoint() == name).count(),
            "collisions": catalog.collisions(),
        });
        if let Some(name) = name {
            figures["name"] = name.into();
            figures["path"] = format!("/mcp/{name}").into();
            figures["upstreams"] = match catalog.upstream_selection() {
                Some(names) => names.iter().map(|n| n.to_string()).collect(),
                None => serde_json::Value::from("all"),
            };
        }
        if let Some(searchable) = catalog.searchable() {
            figures["search"] = serde_json::json!({
                "mode": "progressive",
                "searchableTools": searchable.len(),
                "results": searchable.results(),
            });
        }
        figures
    };
    let whole = view(&store.load());
    let endpoints = store.endpoints().iter().map(|c| view(c)).collect();
    (whole, endpoints)
}

/// Each endpoint's figures, in the Prometheus text format.
pub(crate) fn metrics(state: &AppState) -> String {
    use std::fmt::Write as _;
    let store = state.router.catalog();
    let endpoints = store.endpoints();
    let mut out = String::new();
    let sessions = state.sessions.all();
    let whole = store.load();
    let _ = write!(
        out,
        "# HELP mcpmux_name_collisions Items left out because their names collide under prefix_mode: never, by view (\"\" is /mcp).\n# TYPE mcpmux_name_collisions gauge\nmcpmux_name_collisions{{endpoint=\"\"}} {}\n",
        whole.collisions().len()
    );
    for catalog in &endpoints {
        if let Some(name) = catalog.view_name() {
            let _ = writeln!(
                out,
                "mcpmux_name_collisions{{endpoint=\"{name}\"}} {}",
                catalog.collisions().len()
            );
        }
    }
    if endpoints.is_empty() {
        return out;
    }
    out.push_str("# HELP mcpmux_endpoint_items Items an endpoint lists, by kind; kind=\"searchable\" counts a progressive endpoint's searchable tools.\n# TYPE mcpmux_endpoint_items gauge\n");
    for catalog in &endpoints {
        let Some(name) = catalog.view_name() else {
            continue;
        };
        for kind in ListKind::ALL {
            let _ = writeln!(
                out,
                "mcpmux_endpoint_items{{endpoint=\"{name}\",kind=\"{}\"}} {}",
                kind.result_key(),
                catalog.len(kind)
            );
        }
        if let Some(searchable) = catalog.searchable() {
            let _ = writeln!(
                out,
                "mcpmux_endpoint_items{{endpoint=\"{name}\",kind=\"searchable\"}} {}",
                searchable.len()
            );
        }
    }
    out.push_str("# HELP mcpmux_endpoint_sessions Legacy sessions open at each endpoint.\n# TYPE mcpmux_endpoint_sessions gauge\n");
    for catalog in &endpoints {
        let Some(name) = catalog.view_name() else {
            continue;
        };
        let open = sessions
            .iter()
            .filter(|s| s.subscriber.endpoint() == Some(&**name))
            .count();
        let _ = writeln!(
            out,
            "mcpmux_endpoint_sessions{{endpoint=\"{name}\"}} {open}"
        );
    }
    out
}
