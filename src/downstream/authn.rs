//! Authentication at the HTTP edge: who sent a request, the 401 and 403
//! answers (RFC 6750 `WWW-Authenticate`, naming the RFC 9728 metadata), the
//! protected-resource metadata document itself, and access to `/status`
//! and `/metrics`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::AppState;
use super::wire::Refusal;
use crate::auth::{AuthError, Identity};
use crate::protocol::code;

/// Where RFC 9728 metadata lives, before the resource's path.
const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The client behind a request: `None` when authentication is off.
#[allow(clippy::result_large_err)]
pub(crate) async fn identify(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<Option<Arc<Identity>>, Response> {
    identify_at(state, headers, None).await
}

/// [`identify`] for a request to an endpoint (none: `/mcp`), whose
/// resource URI is its own (`.../mcp/<name>`).
#[allow(clippy::result_large_err)]
pub(crate) async fn identify_at(
    state: &AppState,
    headers: &HeaderMap,
    endpoint: Option<&str>,
) -> Result<Option<Arc<Identity>>, Response> {
    let Some(auth) = state.auth() else {
        return Ok(None);
    };
    match auth
        .authenticate(authorization(headers), || {
            resource_uri_at(state, headers, endpoint)
        })
        .await
    {
        Ok(identity) => Ok(Some(identity)),
        Err(e) => Err(refuse_at(state, headers, endpoint, &e)),
    }
}

/// Refuses a request whose session belongs to another client: exactly like
/// an unknown session, so sessions cannot be probed.
#[allow(clippy::result_large_err)]
pub(crate) fn check_owner(
    owner: Option<&Arc<Identity>>,
    caller: Option<&Arc<Identity>>,
) -> Result<(), Response> {
    if owner.map(|i| &i.client) == caller.map(|i| &i.client) {
        return Ok(());
    }
    tracing::warn!(owner = ?owner.map(|i| &i.client), caller = ?caller.map(|i| &i.client), "a client used another client's session");
    Err(Refusal::new(
        StatusCode::NOT_FOUND,
        code::INVALID_REQUEST,
        "unknown or expired session; initialize a new one",
    )
    .into_response())
}

fn authorization(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
}

/// 401 (or 403 for a missing scope) with the `WWW-Authenticate` challenge.
fn refuse(state: &AppState, headers: &HeaderMap, error: &AuthError) -> Response {
    refuse_at(state, headers, None, error)
}

/// [`refuse`] for a request to an endpoint, naming the endpoint's metadata.
pub(crate) fn refuse_at(
    state: &AppState,
    headers: &HeaderMap,
    endpoint: Option<&str>,
    error: &AuthError,
) -> Response {
    let metadata = metadata_url(&resource_uri_at(state, headers, endpoint));
    let (status, challenge) = match error {
        AuthError::Missing => (
            StatusCode::UNAUTHORIZED,
            format!("Bearer resource_metadata=\"{metadata}\""),
        ),
        AuthError::InsufficientScope(scope) => (
            StatusCode::FORBIDDEN,
            format!(
                "Bearer error=\"insufficient_scope\", scope=\"{}\", resource_metadata=\"{metadata}\"",
                quoted(scope)
            ),
        ),
        other => (
            StatusCode::UNAUTHORIZED,
            format!(
                "Bearer error=\"invalid_token\", error_description=\"{}\", resource_metadata=\"{metadata}\"",
                quoted(&other.to_string())
            ),
        ),
    };
    tracing::info!(target: "mcpmux::audit", %status, reason = %error, "request refused by authentication");
    state
        .router
        .metrics()
        .denied("unauthenticated", "authentication");
    let refusal = Refusal::new(status, code::INVALID_REQUEST, error.to_string());
    let mut response = match HeaderValue::from_str(&challenge) {
        Ok(value) => refusal.with_header(header::WWW_AUTHENTICATE, value),
        Err(_) => refusal,
    }
    .into_response();
    // Refused before its body was read: the connection is not reused (a
    // client that sent its next request on it would see it closed under
    // it), and saying so lets the client open a new one.
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Text safe inside a quoted-string of a challenge.
fn quoted(text: &str) -> String {
    text.chars()
        .filter(|c| *c != '"' && *c != '\\' && !c.is_control())
        .collect()
}

/// The gateway's resource URI: configured, or `http://HOST/mcp`.
fn resource_uri(state: &AppState, headers: &HeaderMap) -> String {
    resource_uri_at(state, headers, None)
}

/// An endpoint's resource URI: the gateway's with `/<name>` appended.
fn resource_uri_at(state: &AppState, headers: &HeaderMap, endpoint: Option<&str>) -> String {
    let base = match state.auth().and_then(|a| a.settings().resource.clone()) {
        Some(resource) => resource,
        None => {
            let host = headers
                .get(header::HOST)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("localhost");
            format!("http://{host}/mcp")
        }
    };
    match endpoint {
        Some(name) => format!("{}/{name}", base.trim_end_matches('/')),
        None => base,
    }
}

/// RFC 9728 §3.1: the well-known path goes between the origin and the
/// resource's path.
fn metadata_url(resource: &str) -> String {
    match reqwest::Url::parse(resource) {
        Ok(url) => {
            let path = url.path().trim_end_matches('/');
            format!("{}{WELL_KNOWN}{path}", url.origin().ascii_serialization())
        }
        Err(_) => format!("{resource}{WELL_KNOWN}"),
    }
}

/// `GET /.well-known/oauth-protected-resource[/mcp[/<endpoint>]]`: how to
/// get a token for the gateway or one of its endpoints.
pub(crate) async fn protected_resource(
    State(state): State<Arc<AppState>>,
    resource: Option<axum::extract::Path<String>>,
    headers: HeaderMap,
) -> Response {
    // `/mcp/<name>` after the well-known path names an endpoint.
    let endpoint = resource.and_then(|axum::extract::Path(path)| {
        path.strip_prefix("mcp/")
            .map(|name| name.trim_end_matches('/').to_owned())
    });
    if let Some(name) = &endpoint
        && !state.endpoints.load().contains_key(name.as_str())
    {
        return Refusal::new(
            StatusCode::NOT_FOUND,
            code::INVALID_REQUEST,
            format!("there is no endpoint {name:?}"),
        )
        .into_response();
    }
    let Some(auth) = state.auth() else {
        return Refusal::new(
            StatusCode::NOT_FOUND,
            code::INVALID_REQUEST,
            "authentication is off: there is no protected resource",
        )
        .into_response();
    };
    let settings = auth.settings();
    // The gateway's own authorization server comes first.
    let mut servers: Vec<String> = state
        .oauth_server
        .load_full()
        .map(|s| s.issuer())
        .into_iter()
        .collect();
    servers.extend(settings.authorization_servers.iter().cloned());
    let document = json!({
        "resource": resource_uri_at(&state, &headers, endpoint.as_deref()),
        "authorization_servers": servers,
        "scopes_supported": settings.scopes_supported,
        "bearer_methods_supported": ["header"],
        "resource_name": "mcpmux",
    });
    (
        [(header::CACHE_CONTROL, "max-age=300")],
        axum::Json(document),
    )
        .into_response()
}

/// `/status` and `/metrics` as `auth.admin` says.
#[allow(clippy::result_large_err)]
pub(crate) async fn admit_admin(state: &AppState, headers: &HeaderMap) -> Result<(), Response> {
    let Some(auth) = state.auth() else {
        return Ok(());
    };
    auth.admits_admin(authorization(headers), || resource_uri(state, headers))
        .await
        .map_err(|e| refuse(state, headers, &e))
}

#[cfg(test)]
mod tests {
    use super::metadata_url;

    #[test]
    fn the_metadata_url_inserts_the_well_known_path() {
        assert_eq!(
            metadata_url("https://mcp.example.com/mcp"),
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            metadata_url("http://127.0.0.1:8080/"),
            "http://127.0.0.1:8080/.well-known/oauth-protected-resource"
        );
    }
}
