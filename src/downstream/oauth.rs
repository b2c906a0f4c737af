//! The routes of users connecting their own accounts at upstreams that act
//! as each user (`auth.mode: user`):
//!
//! - `GET /oauth/callback`: where the authorization server sends the
//!   user's browser back; ends the flow its `state` names (see
//!   `credentials::flows`) and says in a small page what happened.
//! - `GET /oauth/connections`: the caller's own connections (which
//!   upstreams, since when; never a token), authenticated like `/mcp`.
//! - `DELETE /oauth/connections/{upstream}`: the caller disconnects its
//!   account there (the grant is removed and revoked at the server).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::AppState;
use super::wire::Refusal;
use crate::protocol::code;

/// What the authorization server puts on the redirect (RFC 6749 §4.1.2).
#[derive(Debug, Deserialize)]
pub(crate) struct CallbackQuery {
    state: Option<String>,
    code: Option<String>,
    error: Option<String>,
}

/// `GET /oauth/callback?state=…&code=…`.
pub(crate) async fn callback(
    State(state): State<Arc<AppState>>,
    Query(query): Query<CallbackQuery>,
) -> Response {
    let Some(flow) = query.state.as_deref().filter(|s| !s.is_empty()) else {
        return page(
            StatusCode::BAD_REQUEST,
            "Not connected",
            "This address is where your sign-in comes back to, and this request has no state. Start again from your MCP client.",
        );
    };
    match state
        .connector
        .complete(flow, query.code.as_deref(), query.error.as_deref())
        .await
    {
        Ok(connected) => page(
            StatusCode::OK,
            "Connected",
            &format!(
                "Your {} account is now connected for {}. You can close this page and go back to your MCP client.",
                connected.upstream, connected.identity
            ),
        ),
        Err(crate::credentials::flows::CallbackError::UnknownState) => page(
            StatusCode::BAD_REQUEST,
            "Not connected",
            &crate::credentials::flows::CallbackError::UnknownState.to_string(),
        ),
        Err(e) => {
            tracing::warn!(error = %e, "an authorization callback failed");
            page(StatusCode::BAD_GATEWAY, "Not connected", &e.to_string())
        }
    }
}

/// A small HTML page: a title and one sentence, both escaped.
fn page(status: StatusCode, title: &str, text: &str) -> Response {
    let body = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>mcpmux: {title}</title></head><body><h1>{title}</h1><p>{text}</p></body></html>",
        title = html_escape::encode_text(title),
        text = html_escape::encode_text(text),
    );
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        body,
    )
        .into_response()
}

/// The caller of a connections route, authenticated as on `/mcp`.
async fn caller(state: &AppState, headers: &HeaderMap) -> Result<Arc<str>, Response> {
    match super::authn::identify(state, headers).await? {
        Some(identity) => Ok(identity.client.clone()),
        None => Err(Refusal::new(
            StatusCode::NOT_FOUND,
            code::INVALID_REQUEST,
            "authentication is off: there are no users' connections",
        )
        .into_response()),
    }
}

/// `GET /oauth/connections`: the caller's own connections.
pub(crate) async fn list(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let identity = match caller(&state, &headers).await {
        Ok(identity) => identity,
        Err(refused) => return refused,
    };
    let Ok(store) = state.connector.store() else {
        return axum::Json(json!({ "connections": [] })).into_response();
    };
    match store.connections(Some(&identity), None).await {
        Ok(connections) => axum::Json(json!({ "connections": connections })).into_response(),
        Err(e) => unavailable(&e.to_string()),
    }
}

/// `DELETE /oauth/connections/{upstream}`: the caller disconnects.
pub(crate) async fn disconnect(
    State(state): State<Arc<AppState>>,
    Path(upstream): Path<String>,
    headers: HeaderMap,
) -> Response {
    let identity = match caller(&state, &headers).await {
        Ok(identity) => identity,
        Err(refused) => return refused,
    };
    let Some(handle) = state.router.upstreams().get(&upstream) else {
        return not_connected(&upstream);
    };
    let Some(credentials) = handle.credentials() else {
        return not_connected(&upstream);
    };
    match credentials.disconnect(&identity).await {
        Ok(true) => {
            handle.close_identity(&identity);
            axum::Json(json!({ "disconnected": upstream })).into_response()
        }
        Ok(false) => not_connected(&upstream),
        Err(e) => unavailable(&e.to_string()),
    }
}

fn not_connected(upstream: &str) -> Response {
    Refusal::new(
        StatusCode::NOT_FOUND,
        code::INVALID_REQUEST,
        format!("you have no connection at {upstream:?}"),
    )
    .into_response()
}

fn unavailable(why: &str) -> Response {
    Refusal::new(
        StatusCode::SERVICE_UNAVAILABLE,
        code::INTERNAL_ERROR,
        format!("the token store is unavailable: {why}"),
    )
    .into_response()
}
