//! `GET /mcp`: a legacy session's standalone notification stream (SSE).
//!
//! One stream per session: a new GET replaces the previous stream, so each
//! notification goes out on exactly one stream. Every event carries an id
//! unique within the session; a client that reconnects with
//! `Last-Event-ID` first gets the events after that id still in the
//! session's replay ring (or a resync when they have been evicted), then
//! live events (a `Last-Event-ID` of the form `<stream>-<seq>` resumes a
//! POST stream instead, see [`super::resume`]). The stream pulls events
//! from the session's outbox only as fast as the connection takes them, so
//! a client that stops reading holds back nobody else. SSE comments keep
//! idle connections open.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::wire::{Refusal, VERSION_HEADER, session_header};
use crate::protocol::{self, code};

mod events;

pub(crate) async fn get(
    State(state): State<Arc<AppState>>,
    caller: super::endpoint::Caller,
    headers: HeaderMap,
) -> Response {
    let super::endpoint::Caller { at, identity } = caller;
    let accepts_sse = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| v.contains("text/event-stream") || v.contains("*/*"));
    if !accepts_sse {
        return Refusal::new(
            StatusCode::NOT_ACCEPTABLE,
            code::INVALID_REQUEST,
            "GET /mcp opens an SSE stream; Accept must include text/event-stream",
        )
        .into_response();
    }
    let session_id = match session_header(&headers) {
        Ok(id) => id,
        Err(missing) => return missing,
    };
    if let Some(version) = headers.get(&VERSION_HEADER).and_then(|v| v.to_str().ok())
        && !protocol::is_supported_downstream(version)
    {
        return Refusal::new(
            StatusCode::BAD_REQUEST,
            code::INVALID_REQUEST,
            format!("unsupported MCP-Protocol-Version {version:?}"),
        )
        .into_response();
    }
    let Some(session) = (match super::shared::touch(&state, session_id).await {
        Ok(session) => session,
        Err(unavailable) => return unavailable,
    }) else {
        return Refusal::new(
            StatusCode::NOT_FOUND,
            code::INVALID_REQUEST,
            "unknown or expired session",
        )
        .into_response();
    };
    if let Err(refused) = super::authn::check_owner(session.identity.as_ref(), identity.as_ref()) {
        return refused;
    }
    if let Err(elsewhere) = at.check_session(&session) {
        return elsewhere;
    }
    if let Err(mismatch) = session.check_version(headers.get(&VERSION_HEADER), None) {
        return mismatch;
    }

    let outbox = &session.subscriber.outbox;
    // A `Last-Event-ID` of a POST stream resumes that stream, not this one.
    if let Some(resumed) = super::resume::get(&state, &session, &headers) {
        return resumed;
    }
    super::shared::stream_opened(&state, &session).await;
    let token = outbox.attach_stream(&state.shutdown);
    let last_event_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let replay = match last_event_id.map(|id| outbox.replay_after(id)) {
        None => Vec::new(),
        Some(Ok(missed)) => missed,
        Some(Err(_evicted)) => {
            tracing::info!(parent: &session.span, "Last-Event-ID is older than the replay buffer; resyncing");
            outbox.resync(
                state
                    .router
                    .hub()
                    .subscriptions()
                    .uris_of(session.subscriber.id),
            );
            Vec::new()
        }
    };
    tracing::debug!(parent: &session.span, replayed = replay.len(), "notification stream opened");
    let body = events::EventStream::new(
        session.clone(),
        token,
        state.sessions.open_stream(&session),
        replay,
        state.http.sse_keepalive,
    );
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        axum::body::Body::new(body),
    )
        .into_response()
}
