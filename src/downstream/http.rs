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
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::value::RawValue;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;

use super::AppState;
use super::dispatch::{self, Outcome};
use super::session::CloseReason;
use crate::protocol::{self, Envelope, MessageKind, RpcError, code};
use crate::router::Reply;

pub const SESSION_HEADER: &str = "mcp-session-id";
pub const VERSION_HEADER: &str = "mcp-protocol-version";

/// An HTTP error whose body is a JSON-RPC error with the given id (or null).
pub fn rpc_error_response(
    status: StatusCode,
    id: Option<&str>,
    code: i64,
    message: impl Into<String>,
) -> Response {
    let body = protocol::error_frame(id, &RpcError::new(code, message));
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn json_response(frame: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], frame).into_response()
}

/// The `Mcp-Session-Id` header, or the 400 its absence gets.
#[allow(clippy::result_large_err)]
pub fn session_header(headers: &HeaderMap) -> Result<&str, Response> {
    headers
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| {
            rpc_error_response(
                StatusCode::BAD_REQUEST,
                None,
                code::INVALID_REQUEST,
                "missing Mcp-Session-Id header",
            )
        })
}

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

/// Checks the content type and reads the body within the size limit.
#[allow(clippy::result_large_err)]
pub async fn read_body(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<bytes::Bytes, Response> {
    if let Some(ct) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        && !ct
            .trim_start()
            .to_ascii_lowercase()
            .starts_with("application/json")
    {
        return Err(rpc_error_response(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            None,
            code::INVALID_REQUEST,
            format!("Content-Type must be application/json, not {ct:?}"),
        ));
    }
    let limit = state.http.max_body_bytes;
    let too_large = || {
        rpc_error_response(
            StatusCode::PAYLOAD_TOO_LARGE,
            None,
            code::INVALID_REQUEST,
            format!("request body exceeds the limit of {limit} bytes"),
        )
    };
    // A declared length over the limit is refused before a byte of the body
    // is read (and before `100 Continue` invites the client to send it).
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let timeout = state.http.body_read_timeout;
    match tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) if is_length_limit(&e) => Err(too_large()),
        Ok(Err(e)) => Err(rpc_error_response(
            StatusCode::BAD_REQUEST,
            None,
            code::INVALID_REQUEST,
            format!("the request body could not be read: {e}"),
        )),
        Err(_) => Err(rpc_error_response(
            StatusCode::REQUEST_TIMEOUT,
            None,
            code::INVALID_REQUEST,
            format!(
                "the request body did not arrive within {} (http.body_read_timeout)",
                humantime::format_duration(timeout)
            ),
        )),
    }
}

/// Whether a body error is the size limit rather than the connection.
fn is_length_limit(error: &axum::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cause = e.source();
    }
    false
}

/// Parses one JSON-RPC message (batches are refused) and checks its shape.
#[allow(clippy::result_large_err)]
pub fn parse_message(bytes: &[u8]) -> Result<(Envelope<'_>, MessageKind), Response> {
    let bad = |code, message: String, id: Option<&str>| {
        rpc_error_response(StatusCode::BAD_REQUEST, id, code, message)
    };
    let text = std::str::from_utf8(bytes)
        .map_err(|_| bad(code::PARSE_ERROR, "body is not valid UTF-8".into(), None))?;
    if protocol::nesting_exceeds(text, protocol::MAX_NESTING) {
        let error = protocol::too_deep();
        let id = Envelope::parse(text)
            .ok()
            .and_then(|e| e.id)
            .map(RawValue::get);
        return Err(bad(error.code, error.message, id));
    }
    // Only valid JSON is a batch; broken JSON is a parse error like any other.
    if text.trim_start().starts_with('[')
        && serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
    {
        return Err(bad(
            code::INVALID_REQUEST,
            "JSON-RPC batches are not supported; send one message per request".into(),
            None,
        ));
    }
    let envelope = Envelope::parse(text)
        .map_err(|e| bad(code::PARSE_ERROR, format!("parse error: {e}"), None))?;
    match envelope.kind() {
        Ok(kind) => Ok((envelope, kind)),
        Err(e) => Err(bad(
            code::INVALID_REQUEST,
            e.to_string(),
            envelope.id.map(RawValue::get),
        )),
    }
}

/// The remote address of the request's connection, when known.
pub type ClientPeer = Option<axum::Extension<axum::extract::ConnectInfo<super::listener::Peer>>>;

/// The IP address sessions are counted against.
pub fn client_ip(peer: &ClientPeer) -> Option<std::net::IpAddr> {
    peer.as_ref().map(|axum::Extension(info)| info.0.addr.ip())
}

/// The answer to a session that could not be made: 429 when the client is
/// at its own limit, 503 when the gateway is; both say when to retry.
pub fn session_refused(error: &super::session::TooManySessions, id: Option<&str>) -> Response {
    let status = match error {
        super::session::TooManySessions::Client(_) => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    let mut response = rpc_error_response(status, id, code::INTERNAL_ERROR, error.to_string());
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

pub async fn post(
    State(state): State<Arc<AppState>>,
    peer: ClientPeer,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Err(denied) = state.check_origin(&headers) {
        return denied;
    }
    let identity = match super::authn::identify(&state, &headers).await {
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
    let bytes = match read_body(&state, &headers, body).await {
        Ok(b) => b,
        Err(rejected) => return rejected,
    };
    let (envelope, kind) = match parse_message(&bytes) {
        Ok(parsed) => parsed,
        Err(rejected) => return rejected,
    };
    if super::modern::is_modern(&headers, &envelope) {
        return super::modern::handle(&state, &headers, &envelope, kind, accept.sse, identity)
            .await;
    }
    let method = envelope.method.as_deref().unwrap_or_default();
    if kind == MessageKind::Request && method == protocol::method::INITIALIZE {
        return initialize(&state, &envelope, client_ip(&peer), identity);
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
    let Some(session) = state.sessions.touch(session_id) else {
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
    if let Err(mismatch) = check_session_version(&headers, &session, envelope.id) {
        return mismatch;
    }
    match dispatch::handle(&state, &session, &envelope, kind, accept.sse).await {
        Outcome::Accepted => StatusCode::ACCEPTED.into_response(),
        Outcome::Reply(Reply::Ready(frame)) if accept.json => json_response(frame),
        Outcome::Reply(Reply::Ready(frame)) => {
            super::resume::respond(&state, &session, single(frame))
        }
        Outcome::Reply(Reply::Streaming(frames)) => {
            super::resume::respond(&state, &session, frames)
        }
    }
}

/// Refuses (400) an `MCP-Protocol-Version` header that differs from the
/// version the session negotiated. Without the header the client is taken
/// to speak what it negotiated (2024-11-05 clients never send it).
#[allow(clippy::result_large_err)]
pub fn check_session_version(
    headers: &HeaderMap,
    session: &super::session::Session,
    id: Option<&RawValue>,
) -> Result<(), Response> {
    let (Some(header), Some(negotiated)) =
        (headers.get(VERSION_HEADER), session.protocol_version.get())
    else {
        return Ok(());
    };
    let header = header.to_str().unwrap_or_default();
    if header == negotiated {
        return Ok(());
    }
    Err(rpc_error_response(
        StatusCode::BAD_REQUEST,
        id.map(RawValue::get),
        code::INVALID_REQUEST,
        format!(
            "MCP-Protocol-Version {header:?} does not match the version this session negotiated ({negotiated})"
        ),
    ))
}

fn single(frame: String) -> tokio::sync::mpsc::Receiver<String> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let _ = tx.try_send(frame);
    rx
}

pub fn sse_response(frames: ReceiverStream<String>) -> Response {
    let events =
        frames.map(|frame| Ok::<_, std::convert::Infallible>(Event::default().data(frame)));
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn initialize(
    state: &AppState,
    envelope: &Envelope<'_>,
    client: Option<std::net::IpAddr>,
    identity: Option<Arc<crate::auth::Identity>>,
) -> Response {
    let id = envelope.id.map_or("null", RawValue::get);
    let version = match dispatch::negotiate(envelope.params) {
        Ok(v) => v,
        Err(e) => return rpc_error_response(StatusCode::BAD_REQUEST, Some(id), e.code, e.message),
    };
    let session = match state.sessions.create(Some(version), None, client, identity) {
        Ok(s) => s,
        Err(e) => return session_refused(&e, Some(id)),
    };
    let frame = protocol::response_frame(
        id,
        &state
            .router
            .initialize_result(version, session.identity.as_deref()),
    );
    let mut response = json_response(frame);
    if let Ok(value) = HeaderValue::from_str(&session.id) {
        response.headers_mut().insert(SESSION_HEADER, value);
    }
    response
}

pub async fn delete(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(denied) = state.check_origin(&headers) {
        return denied;
    }
    let identity = match super::authn::identify(&state, &headers).await {
        Ok(identity) => identity,
        Err(refused) => return refused,
    };
    let session_id = match session_header(&headers) {
        Ok(id) => id,
        Err(missing) => return missing,
    };
    let owned = state
        .sessions
        .touch(session_id)
        .map(|s| super::authn::check_owner(s.identity.as_ref(), identity.as_ref()).is_ok());
    if owned == Some(true) && state.sessions.close(session_id, CloseReason::Deleted) {
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

#[cfg(test)]
mod proptests;
