//! The 2024-11-05 HTTP+SSE transport, for hosts that speak only that:
//! `GET /sse` opens a session and its stream, whose first event names the
//! endpoint (`/message?sessionId=…`) for the client's POSTs. Every answer
//! and notification travels on the stream; a POST only gets 202.
//!
//! The session lives as long as its stream: when the client disconnects,
//! the session closes and releases its subscriptions.
//!
//! A POSTed request is answered from a task of its own, on the gateway's
//! task tracker and in the session's span; a session has at most
//! [`MAX_REQUEST_TASKS`] of them at once, and a request beyond that gets 429
//! with `Retry-After`. Notifications and responses are handled before the
//! 202, without a task, so a client at the limit can still cancel.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tracing::Instrument as _;

use super::AppState;
use super::dispatch::{self, Outcome, Outgoing};
use super::listener::{ClientPeer, client_ip};
use super::session::{CloseReason, MAX_REQUEST_TASKS, SessionTable};
use super::wire::{Refusal, parse_message, read_body};
use crate::protocol::{Envelope, MessageKind, code};

/// Answers queued for one SSE session before its request tasks wait.
const REPLY_CAPACITY: usize = 256;

/// Closes the session when its stream goes away.
struct SessionOnStream {
    table: Arc<SessionTable>,
    id: Arc<str>,
}

impl Drop for SessionOnStream {
    fn drop(&mut self) {
        self.table.close(&self.id, CloseReason::Disconnected);
    }
}

pub(crate) async fn open(
    State(state): State<Arc<AppState>>,
    caller: super::endpoint::Caller,
    peer: ClientPeer,
) -> Response {
    let super::endpoint::Caller { at, identity } = caller;
    let (replies_tx, replies_rx) = mpsc::channel(REPLY_CAPACITY);
    let client = client_ip(&peer);
    let session =
        match state
            .sessions
            .create(None, Some(replies_tx), client, identity, at.shared_name())
        {
            Ok(s) => s,
            Err(e) => return e.refusal(None),
        };
    let endpoint = match at.name() {
        Some(name) => format!("/mcp/{name}/message?sessionId={}", session.id),
        None => format!("/message?sessionId={}", session.id),
    };
    let keep = (
        state.sessions.open_stream(&session),
        SessionOnStream {
            table: state.sessions.clone(),
            id: session.id.clone(),
        },
    );
    let stop = state.shutdown.child_token();
    let first =
        futures_util::stream::once(
            async move { Event::default().event("endpoint").data(endpoint) },
        );
    let rest = dispatch::outgoing(session, replies_rx, stop).map(move |out| {
        let _alive = &keep;
        match out {
            Outgoing::Reply(frame) => Event::default().event("message").data(frame),
            Outgoing::Event((id, frame)) => Event::default()
                .event("message")
                .id(id.to_string())
                .data(&*frame),
        }
    });
    let events = first.chain(rest).map(Ok::<_, std::convert::Infallible>);
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(state.http.sse_keepalive))
        .into_response()
}

#[derive(Deserialize)]
pub(crate) struct SessionQuery {
    #[serde(rename = "sessionId")]
    session_id: Option<String>,
}

pub(crate) async fn message(
    State(state): State<Arc<AppState>>,
    caller: super::endpoint::Caller,
    Query(query): Query<SessionQuery>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let super::endpoint::Caller { at, identity } = caller;
    let Some(session_id) = query.session_id else {
        return Refusal::new(
            StatusCode::BAD_REQUEST,
            code::INVALID_REQUEST,
            "missing sessionId query parameter",
        )
        .into_response();
    };
    let Some(session) = state
        .sessions
        .touch(&session_id)
        .filter(|s| at.check_session(s).is_ok())
    else {
        return Refusal::new(
            StatusCode::NOT_FOUND,
            code::INVALID_REQUEST,
            "unknown or closed session",
        )
        .into_response();
    };
    if let Err(refused) = super::authn::check_owner(session.identity.as_ref(), identity.as_ref()) {
        return refused;
    }
    let Some(replies) = session.replies.clone() else {
        return Refusal::new(
            StatusCode::BAD_REQUEST,
            code::INVALID_REQUEST,
            "this session uses Streamable HTTP; POST to /mcp",
        )
        .into_response();
    };
    let bytes = match read_body(&state.http, &headers, body).await {
        Ok(b) => b,
        Err(rejected) => return rejected,
    };
    let (envelope, kind) = match parse_message(&bytes) {
        Ok(parsed) => parsed,
        Err(rejected) => return rejected,
    };
    if kind != MessageKind::Request {
        // Nothing to answer and nothing to wait for: no task needed.
        dispatch::handle(
            &state,
            &session,
            identity.as_ref(),
            &envelope,
            kind,
            true,
            None,
        )
        .await;
        return StatusCode::ACCEPTED.into_response();
    }
    let Ok(permit) = session.request_tasks.clone().try_acquire_owned() else {
        tracing::info!(parent: &session.span, limit = MAX_REQUEST_TASKS, "request refused: too many in progress");
        return too_many_requests(envelope.id);
    };
    // The task owns the body (and parses it again: the envelope borrows it)
    // and answers on the stream; the client waits for 202 only.
    let (tracker, span) = (state.tracker.clone(), session.span.clone());
    let task = async move {
        let _permit = permit;
        let Some(Ok(envelope)) = std::str::from_utf8(&bytes).ok().map(Envelope::parse) else {
            return;
        };
        if let Outcome::Reply(reply) = dispatch::handle(
            &state,
            &session,
            identity.as_ref(),
            &envelope,
            kind,
            true,
            None,
        )
        .await
        {
            dispatch::send_reply(&replies, reply).await;
        }
    };
    tracker.spawn(task.instrument(span));
    StatusCode::ACCEPTED.into_response()
}

/// The 429 for a request beyond [`MAX_REQUEST_TASKS`] of its session.
fn too_many_requests(id: Option<&RawValue>) -> Response {
    let mut response = Refusal::new(StatusCode::TOO_MANY_REQUESTS, code::INTERNAL_ERROR, format!(
            "this session already has {MAX_REQUEST_TASKS} requests in progress, the most it may have; wait for an answer before sending more"
        )).answering(id.map(RawValue::get)).into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

#[cfg(test)]
mod tests;
