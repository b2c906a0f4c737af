//! The Streamable HTTP endpoint (`/mcp`) for legacy-era clients.
//!
//! POST carries one JSON-RPC message. `initialize` creates a session and
//! returns its `Mcp-Session-Id`; every later message must carry that id
//! (400 without, 404 when unknown or expired). Requests are answered with
//! `application/json`, or with `text/event-stream` when a forwarded call
//! streams progress (a resumable stream, see [`super::resume`]). Notifications
//! and responses get 202. DELETE ends a session. Each request runs in its
//! session's tracing span.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::value::RawValue;

use super::AppState;
use super::dispatch::{self, Outcome};
use super::listener::{ClientPeer, client_ip};
use super::session::CloseReason;
use super::wire::{
    SESSION_HEADER, VERSION_HEADER, json_response, page_response, parse_message, read_body,
    rpc_error_response, session_header,
};
use crate::protocol::{self, Envelope, MessageKind, code};
use crate::router::Reply;

/// What the client's `Accept` header allows.
struct Accepts {
    json: bool,
    sse: bool,
}

fn accepts(headers: &HeaderMap) -> Accepts {
    let Some(value) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        // No Accept header: anything goes.
        return Accepts {
            json: true,
            sse: true,
        };
    };
    let has = |t: &str| {
        value
            .split(',')
            .any(|part| part.trim().split(';').next().is_some_and(|m| m.trim() == t))
    };
    let any = has("*/*");
    Accepts {
        json: any || has("application/json") || has("application/*"),
        sse: any || has("text/event-stream") || has("text/*"),
    }
}

pub(crate) async fn post(
    State(state): State<Arc<AppState>>,
    at: super::endpoint::At,
    peer: ClientPeer,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Err(denied) = state.check_origin(&headers) {
        return denied;
    }
    let identity = match at.identify(&state, &headers).await {
        Ok(identity) => identity,
        Err(refused) => return refused,
    };
    if let Err(refused) = state.admit_rate(identity.as_ref(), client_ip(&peer)) {
        return refused;
    }
    let accept = accepts(&headers);
    if !accept.json && !accept.sse {
        return rpc_error_response(
            StatusCode::NOT_ACCEPTABLE,
            None,
            code::INVALID_REQUEST,
            "Accept must include application/json or text/event-stream",
        );
    }
    let bytes = match read_body(&state.http, &headers, body).await {
        Ok(b) => b,
        Err(rejected) => return rejected,
    };
    let (envelope, kind) = match parse_message(&bytes) {
        Ok(parsed) => parsed,
        Err(rejected) => return rejected,
    };
    if super::modern::is_modern(&headers, &envelope) {
        return super::modern::handle(
            &state,
            &headers,
            &envelope,
            kind,
            accept.sse,
            identity,
            at.shared_name(),
        )
        .await;
    }
    let method = envelope.method.as_deref().unwrap_or_default();
    if kind == MessageKind::Request && method == protocol::method::INITIALIZE {
        let response = initialize(
            &state,
            &envelope,
            client_ip(&peer),
            identity,
            at.shared_name(),
        );
        let id = envelope.id.map_or("null", RawValue::get);
        return super::shared::after_initialize(&state, response, id, envelope.params).await;
    }

    let Some(session_id) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return rpc_error_response(
            StatusCode::BAD_REQUEST,
            envelope.id.map(RawValue::get),
            code::INVALID_REQUEST,
            "missing Mcp-Session-Id header; send initialize first",
        );
    };
    if let Some(version) = headers.get(VERSION_HEADER) {
        let version = version.to_str().unwrap_or_default();
        if !protocol::is_supported_downstream(version) {
            return rpc_error_response(
                StatusCode::BAD_REQUEST,
                envelope.id.map(RawValue::get),
                code::INVALID_REQUEST,
                format!(
                    "unsupported MCP-Protocol-Version {version:?}; supported: {}",
                    protocol::DOWNSTREAM_VERSIONS.join(", ")
                ),
            );
        }
    }
    let Some(session) = (match super::shared::touch(&state, session_id).await {
        Ok(session) => session,
        Err(unavailable) => return unavailable,
    }) else {
        return rpc_error_response(
            StatusCode::NOT_FOUND,
            envelope.id.map(RawValue::get),
            code::INVALID_REQUEST,
            "unknown or expired session; initialize a new one",
        );
    };
    if let Err(refused) = super::authn::check_owner(session.identity.as_ref(), identity.as_ref()) {
        return refused;
    }
    if let Err(elsewhere) = at.check_session(&session) {
        return elsewhere;
    }
    if let Err(mismatch) = session.check_version(&headers, envelope.id) {
        return mismatch;
    }
    match dispatch::handle(
        &state,
        &session,
        identity.as_ref(),
        &envelope,
        kind,
        accept.sse,
    )
    .await
    {
        Outcome::Accepted => StatusCode::ACCEPTED.into_response(),
        Outcome::Reply(Reply::Ready(frame)) if accept.json => json_response(frame.into_text()),
        Outcome::Reply(Reply::Page(page)) if accept.json => page_response(page),
        Outcome::Reply(Reply::Page(page)) => {
            super::resume::respond(&state, &session, single(page.into_text()))
        }
        Outcome::Reply(Reply::Ready(frame)) => {
            super::resume::respond(&state, &session, single(frame.into_text()))
        }
        Outcome::Reply(Reply::Streaming(frames)) => {
            super::resume::respond(&state, &session, frames)
        }
    }
}

fn single(frame: String) -> tokio::sync::mpsc::Receiver<String> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let _ = tx.try_send(frame);
    rx
}

fn initialize(
    state: &AppState,
    envelope: &Envelope<'_>,
    client: Option<std::net::IpAddr>,
    identity: Option<Arc<crate::auth::Identity>>,
    endpoint: Option<Arc<str>>,
) -> Response {
    let id = envelope.id.map_or("null", RawValue::get);
    let version = match dispatch::negotiate(envelope.params) {
        Ok(v) => v,
        Err(e) => return rpc_error_response(StatusCode::BAD_REQUEST, Some(id), e.code, e.message),
    };
    let session = match state
        .sessions
        .create(Some(version), None, client, identity, endpoint)
    {
        Ok(s) => s,
        Err(e) => return e.refusal(Some(id)),
    };
    state
        .router
        .hub()
        .set_client_capabilities(&session.subscriber, envelope.params);
    let frame = protocol::response_frame(
        id,
        &state.router.initialize_result(
            version,
            session.subscriber.endpoint(),
            session.identity.as_deref(),
        ),
    );
    let mut response = json_response(frame);
    if let Ok(value) = HeaderValue::from_str(&session.id) {
        response.headers_mut().insert(SESSION_HEADER, value);
    }
    response
}

pub(crate) async fn delete(
    State(state): State<Arc<AppState>>,
    at: super::endpoint::At,
    headers: HeaderMap,
) -> Response {
    if let Err(denied) = state.check_origin(&headers) {
        return denied;
    }
    let identity = match at.identify(&state, &headers).await {
        Ok(identity) => identity,
        Err(refused) => return refused,
    };
    let session_id = match session_header(&headers) {
        Ok(id) => id,
        Err(missing) => return missing,
    };
    let owned = match super::shared::touch(&state, session_id).await {
        Ok(session) => session.map(|s| {
            super::authn::check_owner(s.identity.as_ref(), identity.as_ref()).is_ok()
                && at.check_session(&s).is_ok()
        }),
        Err(unavailable) => return unavailable,
    };
    if owned == Some(true) && state.sessions.close(session_id, CloseReason::Deleted) {
        super::shared::deleted(&state, session_id).await;
        StatusCode::OK.into_response()
    } else {
        rpc_error_response(
            StatusCode::NOT_FOUND,
            None,
            code::INVALID_REQUEST,
            "unknown or expired session",
        )
    }
}
