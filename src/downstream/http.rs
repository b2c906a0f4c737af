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

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::value::RawValue;

use super::AppState;
use super::dispatch::{self, Outcome};
use super::listener::{ClientPeer, client_ip};
use super::session::CloseReason;
use super::wire::{
    Refusal, RequestHeaders, SESSION_HEADER, json_response, page_response, parse_message,
    read_found_body, session_header,
};
use crate::protocol::{self, Envelope, MessageKind, Method, Request, code};
use crate::router::Reply;

/// What the client's `Accept` header allows.
struct Accepts {
    json: bool,
    sse: bool,
}

/// What a request's `Accept` value (its first) allows.
fn accepts(accept: Option<&HeaderValue>) -> Accepts {
    let Some(value) = accept.and_then(|v| v.to_str().ok()) else {
        // No Accept header: anything goes.
        return Accepts {
            json: true,
            sse: true,
        };
    };
    // What the SDKs send, as the spec spells it: no need to split it.
    if value == "application/json, text/event-stream" {
        return Accepts {
            json: true,
            sse: true,
        };
    }
    // One pass over the media ranges; their parameters (`;q=…`) are not read.
    let mut accepts = Accepts {
        json: false,
        sse: false,
    };
    for range in value.split(',') {
        match range.split(';').next().unwrap_or_default().trim() {
            "*/*" => {
                return Accepts {
                    json: true,
                    sse: true,
                };
            }
            "application/json" | "application/*" => accepts.json = true,
            "text/event-stream" | "text/*" => accepts.sse = true,
            _ => {}
        }
    }
    accepts
}

/// `POST /mcp` as the connection's own service serves it, past the axum
/// router (see [`super::serve`]): the same prologue as the [`Caller`]
/// extractor runs (no endpoint is named), then [`post`].
///
/// [`Caller`]: super::endpoint::Caller
#[allow(clippy::manual_async_fn)] // held once: see `in_place`
pub(crate) fn post_root(
    state: Arc<AppState>,
    peer: super::listener::Peer,
    http_request: axum::extract::Request,
) -> impl Future<Output = Response> {
    async move {
        let at = super::endpoint::At(None);
        let ip = Some(peer.addr.ip());
        let caller = super::endpoint::Caller::admit(at, http_request.headers(), &state, ip).await;
        match caller {
            Ok(caller) => {
                let peer = Some(axum::Extension(axum::extract::ConnectInfo(peer)));
                post(State(state), caller, peer, http_request).await
            }
            Err(refused) => refused,
        }
    }
}

pub(crate) async fn post(
    State(state): State<Arc<AppState>>,
    caller: super::endpoint::Caller,
    peer: ClientPeer,
    http_request: axum::extract::Request,
) -> Response {
    let super::endpoint::Caller { at, identity } = caller;
    // The headers are read in place (a `HeaderMap` extractor would copy them).
    let (parts, body) = http_request.into_parts();
    let headers = &parts.headers;
    // The headers the steps below read, found in one pass.
    let request_headers = RequestHeaders::of(headers);
    let accept = accepts(request_headers.accept);
    if !accept.json && !accept.sse {
        return Refusal::new(
            StatusCode::NOT_ACCEPTABLE,
            code::INVALID_REQUEST,
            "Accept must include application/json or text/event-stream",
        )
        .into_response();
    }
    let bytes = match read_found_body(&state.http, request_headers, headers, body).await {
        Ok(b) => b,
        Err(rejected) => return rejected,
    };
    let (mut envelope, kind) = match parse_message(&bytes) {
        Ok(parsed) => parsed,
        Err(rejected) => return rejected,
    };
    let found = envelope.param_members.take();
    let method = envelope.method.as_deref().unwrap_or_default();
    // A request is carried typed from here; its params are parsed at most
    // once, by whichever step first reads them.
    let mut request = match (kind, envelope.id) {
        (MessageKind::Request, Some(id)) => {
            Some(Request::new(id, Method::from_name(method), envelope.params).with_members(found))
        }
        _ => None,
    };
    if super::modern::is_modern(request_headers, &envelope, request.as_mut()) {
        return super::modern::handle(
            &state,
            headers,
            &envelope,
            kind,
            accept.sse,
            identity,
            at.shared_name(),
            request,
        )
        .await;
    }
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

    let session =
        match session_of(&state, &at, identity.as_ref(), request_headers, envelope.id).await {
            Ok(session) => session,
            Err(refused) => return refused,
        };
    match dispatch::handle(
        &state,
        &session,
        identity.as_ref(),
        &envelope,
        kind,
        accept.sse,
        request,
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

/// The session a 2025-era message belongs to: its `Mcp-Session-Id`, a
/// supported version header, a live session this caller owns at this
/// endpoint, and the version it negotiated; else the refusal.
async fn session_of(
    state: &AppState,
    at: &super::endpoint::At,
    identity: Option<&Arc<crate::auth::Identity>>,
    headers: RequestHeaders<'_>,
    id: Option<&RawValue>,
) -> Result<Arc<super::session::Session>, Response> {
    let refuse = |status, message: String| {
        Refusal::new(status, code::INVALID_REQUEST, message)
            .answering(id.map(RawValue::get))
            .into_response()
    };
    let Some(session_id) = headers.session.and_then(|v| v.to_str().ok()) else {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "missing Mcp-Session-Id header; send initialize first".into(),
        ));
    };
    if let Some(version) = headers.version {
        let version = version.to_str().unwrap_or_default();
        if !protocol::is_supported_downstream(version) {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                format!(
                    "unsupported MCP-Protocol-Version {version:?}; supported: {}",
                    protocol::DOWNSTREAM_VERSIONS.join(", ")
                ),
            ));
        }
    }
    let Some(session) = super::shared::touch(state, session_id).await? else {
        return Err(refuse(
            StatusCode::NOT_FOUND,
            "unknown or expired session; initialize a new one".into(),
        ));
    };
    super::authn::check_owner(session.identity.as_ref(), identity)?;
    at.check_session(&session)?;
    session.check_version(headers.version, id)?;
    Ok(session)
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
        Err(e) => {
            return Refusal::new(StatusCode::BAD_REQUEST, e.code, e.message)
                .answering(Some(id))
                .into_response();
        }
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
        response.headers_mut().insert(SESSION_HEADER.clone(), value);
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
        Refusal::new(
            StatusCode::NOT_FOUND,
            code::INVALID_REQUEST,
            "unknown or expired session",
        )
        .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::header;

    fn read(accept: Option<&'static str>) -> (bool, bool) {
        let mut headers = HeaderMap::new();
        if let Some(value) = accept {
            headers.insert(header::ACCEPT, HeaderValue::from_static(value));
        }
        let accepts = accepts(headers.get(header::ACCEPT));
        (accepts.json, accepts.sse)
    }

    #[test]
    fn the_accept_header_is_read_range_by_range() {
        assert_eq!(read(None), (true, true));
        assert_eq!(
            read(Some("application/json, text/event-stream")),
            (true, true)
        );
        assert_eq!(read(Some("application/json")), (true, false));
        assert_eq!(read(Some(" text/event-stream ;q=0.5")), (false, true));
        assert_eq!(read(Some("text/html, */*;q=0.1")), (true, true));
        assert_eq!(read(Some("application/*, text/plain")), (true, false));
        assert_eq!(read(Some("text/*")), (false, true));
        assert_eq!(read(Some("text/html, image/png")), (false, false));
        assert_eq!(read(Some("")), (false, false));
    }
}
