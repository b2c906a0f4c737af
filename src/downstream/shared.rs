//! 2025-era sessions shared by replicas through the session store
//! (`session_store: redis://...`, see [`crate::session_store`]).
//!
//! Each replica keeps a local [`Session`] for every shared session it
//! serves. A request with an id this replica does not hold loads the
//! record and adopts the session (its version, capabilities, identity and
//! log level); without a store, or for an id the store does not know, the
//! answer stays 404. The replica that holds a session's `GET /mcp` stream
//! subscribes upstream for the session's URIs itself and tells the others,
//! which release theirs; a subscription or log level set on another
//! replica reaches it as an event, and so does a client's answer to a
//! request (sampling, elicitation, roots) that another replica asked it,
//! which waits there on the call that caused it. `DELETE` ends the
//! session everywhere.
//!
//! With the store unreachable, sessions already held here keep working
//! (nothing here is on their path); a new session, or one this replica
//! would have to load, gets 503 saying why. Every function returns at once
//! when no store is configured.

use axum::response::IntoResponse as _;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::AppState;
use super::session::{CloseReason, Session};
use super::wire::{Refusal, SESSION_HEADER};
use crate::catalog::ListKind;
use crate::protocol::{LogLevel, Raw, Request, code, method};
use crate::router::Reply;
use crate::session_store::{Event, Record, SessionStore, StoreError, StoredIdentity};
use crate::upstream::ClientAnswer;

/// Events from other replicas waiting to be applied. When full, the
/// listener drops an event with a warning (see `SessionStore::run`).
const EVENT_QUEUE: usize = 1024;

/// The 503 of a request that needed the store while it is unreachable.
fn unavailable(id: Option<&str>, error: &StoreError) -> Response {
    Refusal::new(
        StatusCode::SERVICE_UNAVAILABLE,
        code::INTERNAL_ERROR,
        format!("{error}; sessions cannot be created or resumed here until it is back"),
    )
    .answering(id)
    .into_response()
}

/// The session with this id, marked as used: held here, or adopted from
/// the store. `Ok(None)`: no such session (404).
pub(crate) async fn touch(state: &AppState, id: &str) -> Result<Option<Arc<Session>>, Response> {
    if let Some(session) = state.sessions.touch(id) {
        return Ok(Some(session));
    }
    let Some(store) = state.sessions.store() else {
        return Ok(None);
    };
    let record = match store.load(id).await {
        Ok(Some(record)) => record,
        Ok(None) => return Ok(None),
        Err(e) => return Err(unavailable(None, &e)),
    };
    let identity = record.identity.as_ref().map(|i| Arc::new(i.to_identity()));
    let session = state
        .sessions
        .adopt(
            id,
            &record.version,
            None,
            identity,
            record.endpoint.as_deref().map(Arc::from),
        )
        .map_err(|e| e.refusal(None))?;
    let hub = state.router.hub();
    let mut params = Map::new();
    params.insert("capabilities".into(), Value::Object(record.capabilities));
    if let Ok(raw) = serde_json::value::to_raw_value(&params) {
        hub.set_client_capabilities(&session.subscriber, Some(Raw::from(&*raw)));
    }
    if let Some(level) = record.log_level.as_deref().and_then(LogLevel::parse) {
        hub.set_log_level(&session.subscriber, level);
    }
    tracing::info!(parent: &session.span, "session adopted from the session store");
    Ok(state.sessions.touch(id))
}

/// After `initialize` made a session here: stores it, or, when the store
/// is unreachable, ends it and answers 503 instead of `response`.
pub(crate) async fn after_initialize(
    state: &AppState,
    response: Response,
    request_id: &str,
    params: Option<crate::protocol::Raw<'_>>,
) -> Response {
    let Some(store) = state.sessions.store() else {
        return response;
    };
    let Some(id) = response
        .headers()
        .get(&SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
    else {
        return response;
    };
    let Some(session) = state.sessions.get(&id) else {
        return response;
    };
    let mut params: Map<String, Value> = params
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or_default();
    let record = Record {
        version: session.protocol_version.get().cloned().unwrap_or_default(),
        capabilities: match params.remove("capabilities") {
            Some(Value::Object(c)) => c,
            _ => Map::new(),
        },
        client_info: params.remove("clientInfo").unwrap_or(Value::Null),
        identity: session.identity.as_deref().map(StoredIdentity::of),
        endpoint: session.subscriber.endpoint().map(str::to_owned),
        ..Record::default()
    };
    match store.create(&id, &record).await {
        Ok(()) => response,
        Err(e) => {
            tracing::warn!(parent: &session.span, error = %e, "session refused: the session store is unreachable");
            state.sessions.close(&id, CloseReason::Deleted);
            unavailable(Some(request_id), &e)
        }
    }
}

/// After a request of a shared session: records a subscription or a log
/// level it set, for the replica holding its stream.
pub(crate) async fn after_request(
    state: &AppState,
    session: &Session,
    request: &mut Request<'_>,
    reply: &Reply,
) {
    let Some(store) = state.sessions.store() else {
        return;
    };
    let method_name = request.method.name().to_owned();
    let method_name = method_name.as_str();
    if ![method::SUBSCRIBE, method::UNSUBSCRIBE, method::SET_LEVEL].contains(&method_name) {
        return;
    }
    let Reply::Ready(frame) = reply else { return };
    if frame.error_code().is_some() {
        return;
    }
    // The router read these params already; they are not parsed again.
    let Ok(params) = request.params() else {
        return;
    };
    let member = |key: &str| params.optional_string(key).ok().flatten();
    let id = &session.id;
    let stored = match method_name {
        method::SET_LEVEL => match member("level") {
            Some(level) => store.set_level(id, &level).await,
            None => Ok(()),
        },
        _ => match member("uri") {
            Some(uri) => {
                store
                    .set_uri(id, &uri, method_name == method::SUBSCRIBE)
                    .await
            }
            None => Ok(()),
        },
    };
    if let Err(e) = stored {
        tracing::warn!(parent: &session.span, error = %e, method = method_name, "not recorded in the session store; other replicas will not know");
    }
}

/// A `GET /mcp` stream of a shared session opened here: this replica
/// takes the session's subscriptions over from whichever held them, and
/// tells the client to list again (what changed meanwhile is not known).
pub(crate) async fn stream_opened(state: &AppState, session: &Session) {
    let Some(store) = state.sessions.store() else {
        return;
    };
    let record = match store.load(&session.id).await {
        Ok(Some(record)) => record,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(parent: &session.span, error = %e, "stream opened without the session store");
            return;
        }
    };
    if let Err(e) = store.claim_stream(&session.id).await {
        tracing::warn!(parent: &session.span, error = %e, "could not claim the session's stream");
    }
    catch_up(state, session, &record).await;
    if record
        .stream
        .as_deref()
        .is_some_and(|r| r != crate::replica::id())
    {
        // Taken over from another replica: events it had not sent are lost.
        for kind in [ListKind::Tools, ListKind::Prompts, ListKind::Resources] {
            session.subscriber.outbox.mark_list_changed(kind);
        }
    }
}

/// Makes this replica's subscriptions and log level for `session` those
/// of its record.
async fn catch_up(state: &AppState, session: &Session, record: &Record) {
    let hub = state.router.hub();
    let subscriber = session.subscriber.id;
    let held = hub.subscriptions().uris_of(subscriber);
    for uri in &held {
        if !record.uris.contains(&**uri) {
            hub.interest().unsubscribe(subscriber, uri);
            session.subscriber.outbox.forget_updated(uri);
        }
    }
    for uri in &record.uris {
        if held.iter().any(|h| **h == **uri) {
            continue;
        }
        if let Err(e) = state.router.subscribe_uri(subscriber, uri).await {
            tracing::debug!(parent: &session.span, uri, error = %e, "a stored subscription could not be made here");
        }
    }
    if let Some(level) = record.log_level.as_deref().and_then(LogLevel::parse) {
        hub.set_log_level(&session.subscriber, level);
    }
}

/// A client's answer to request `ask`, which no call here waits for:
/// when another replica asked it (its id says which), that replica gets
/// it through the store. True if it was sent on.
pub(crate) async fn relay_answer(
    state: &AppState,
    session: &Session,
    ask: &str,
    answer: ClientAnswer,
) -> bool {
    let Some(store) = state.sessions.store() else {
        return false;
    };
    let Some(replica) = crate::replica::of_ask(ask).filter(|r| *r != crate::replica::id()) else {
        return false;
    };
    let (result, error) = match answer {
        Ok(result) => (Some(result.get().to_owned()), None),
        Err(error) => (None, Some(error.get().to_owned())),
    };
    let event = Event::Answered {
        session: session.id.to_string(),
        replica: replica.to_owned(),
        ask: ask.to_owned(),
        result,
        error,
    };
    match store.relay_answer(&event).await {
        Ok(()) => {
            tracing::debug!(parent: &session.span, ask, replica, "answer to a request another replica asked; sent on to it");
            true
        }
        Err(e) => {
            tracing::warn!(parent: &session.span, ask, replica, error = %e, "answer to a request another replica asked could not be sent on");
            false
        }
    }
}

/// A `DELETE` ended the session here: ends it on every replica. False
/// when the store is unreachable (the caller still ended its own copy).
pub(crate) async fn deleted(state: &AppState, id: &str) {
    if let Some(store) = state.sessions.store()
        && let Err(e) = store.delete(id).await
    {
        tracing::warn!(session = id, error = %e, "deleted here, but not in the session store");
    }
}

/// `/status`'s `sessionStore`, when one is configured.
pub(crate) fn status(state: &AppState) -> Option<Value> {
    let store = state.sessions.store()?;
    serde_json::to_value(store.health()).ok()
}

/// `/readyz`: why this replica is not ready because of the store, if it is not.
pub(crate) fn not_ready(state: &AppState) -> Option<String> {
    let health = state.sessions.store()?.health();
    (!health.up).then(|| {
        format!(
            "the session store ({}) is unreachable: {}",
            health.kind,
            health.error.unwrap_or_default()
        )
    })
}

/// Lines for `/metrics`: `mcpmux_session_store_up`.
pub(crate) fn metrics(state: &AppState) -> Option<String> {
    let health = state.sessions.store()?.health();
    Some(format!(
        "# HELP mcpmux_session_store_up Whether the session store answered its last command or check.\n# TYPE mcpmux_session_store_up gauge\nmcpmux_session_store_up{{kind=\"{}\"}} {}\n",
        health.kind,
        u8::from(health.up)
    ))
}

/// Starts the store's tasks on `tracker` until `stop`: its health check
/// and event listener, the application of other replicas' events, and the
/// TTL refresh of the sessions served here (every quarter of `ttl`).
pub(crate) fn spawn(
    state: &Arc<AppState>,
    store: &Arc<SessionStore>,
    ttl: Duration,
    tracker: &TaskTracker,
    stop: &CancellationToken,
) {
    let (events, mut incoming) = tokio::sync::mpsc::channel(EVENT_QUEUE);
    tracker.spawn(store.clone().run(events, stop.clone()));

    let applier = state.clone();
    let until = stop.clone();
    tracker.spawn(async move {
        loop {
            let event = tokio::select! {
                () = until.cancelled() => return,
                event = incoming.recv() => match event {
                    Some(event) => event,
                    None => return,
                },
            };
            apply(&applier, event).await;
        }
    });

    let refresher = state.clone();
    let store = store.clone();
    let until = stop.clone();
    tracker.spawn(async move {
        let mut every = tokio::time::interval((ttl / 4).max(Duration::from_secs(1)));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut since = 0;
        loop {
            tokio::select! {
                () = until.cancelled() => return,
                _ = every.tick() => {}
            }
            let now = refresher.sessions.clock();
            let ids = refresher.sessions.used_since(since);
            if store.refresh(&ids).await.is_ok() {
                since = now;
            }
        }
    });
}

/// One event from another replica.
async fn apply(state: &AppState, event: Event) {
    match event {
        Event::Deleted { session } => {
            state.sessions.close(&session, CloseReason::Deleted);
        }
        Event::StreamMoved { session, replica } if replica != crate::replica::id() => {
            let Some(local) = state.sessions.get(&session) else {
                return;
            };
            let hub = state.router.hub();
            let subscriber = local.subscriber.id;
            for uri in hub.subscriptions().uris_of(subscriber) {
                hub.interest().unsubscribe(subscriber, &uri);
                // The stream's replica delivers its updates now: one queued
                // here would reach the client twice if the stream came back.
                local.subscriber.outbox.forget_updated(&uri);
            }
            tracing::debug!(parent: &local.span, replica, "the session's stream moved to another replica; its subscriptions here are released");
        }
        Event::Changed { session, replica } if replica != crate::replica::id() => {
            let Some(local) = state.sessions.get(&session).filter(|s| s.has_stream()) else {
                return;
            };
            let Some(store) = state.sessions.store() else {
                return;
            };
            if let Ok(Some(record)) = store.load(&session).await {
                catch_up(state, &local, &record).await;
                // Claimed again, so the replica that made the change
                // releases the upstream subscription it made for it.
                let _ = store.claim_stream(&session).await;
            }
        }
        Event::Answered {
            session,
            replica,
            ask,
            result,
            error,
        } if replica == crate::replica::id() => {
            let Some(local) = state.sessions.get(&session) else {
                return;
            };
            let raw = |text: String| RawValue::from_string(text).ok();
            let answer = match (result.and_then(raw), error.and_then(raw)) {
                (Some(result), _) => Ok(result),
                (None, Some(error)) => Err(error),
                (None, None) => return,
            };
            if state
                .router
                .hub()
                .answer(local.subscriber.id, &ask, answer)
                .is_err()
            {
                tracing::debug!(parent: &local.span, ask, "answer relayed by another replica to no request waiting here; ignored");
            }
        }
        Event::StreamMoved { .. } | Event::Changed { .. } | Event::Answered { .. } => {}
    }
}
