//! One client message within an existing session, whatever the transport:
//! Streamable HTTP, legacy HTTP+SSE and stdio all come through here.
//!
//! Also the merge of a session's two outbound flows for transports that
//! have a single stream: answers to its requests (which are never dropped)
//! and notifications from its outbox (which coalesce as the outbox decides).

use std::sync::Arc;

use futures_util::Stream;
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::AppState;
use super::session::Session;
use crate::notify::outbox::Event;
use crate::protocol::{self, Envelope, MessageKind, Method, Request, RpcError, code};
use crate::router::{Frame, Reply, RequestContext};

/// What became of one message.
pub(crate) enum Outcome {
    /// A request's answer.
    Reply(Reply),
    /// A notification or a response: nothing to send back.
    Accepted,
}

/// Handles one message of `session`. `initialize` here only negotiates the
/// version (the session already exists); `can_stream` says whether the
/// transport can carry progress before the answer. `caller` is who sent
/// this request (the session's owner, checked by the caller), carrying
/// the token it sent this time; none: the session's identity. `request`
/// is the message as a typed request, when the transport built it already.
#[allow(clippy::too_many_arguments, clippy::manual_async_fn)] // held once: see `in_place`
pub(crate) fn handle(
    state: &AppState,
    session: &Session,
    caller: Option<&Arc<crate::auth::Identity>>,
    envelope: &Envelope<'_>,
    kind: MessageKind,
    can_stream: bool,
    request: Option<Request<'_>>,
) -> impl Future<Output = Outcome> {
    async move {
        let method = envelope.method.as_deref().unwrap_or_default();
        let ctx = RequestContext {
            inflight: session.inflight.clone(),
            subscriber: Some(session.subscriber.clone()),
            can_stream,
            era: protocol::Era::Legacy,
            log_level: None,
            identity: caller.or(session.identity.as_ref()).cloned(),
            session_id: Some(session.id.clone()),
            endpoint: session.subscriber.endpoint().map(Arc::from),
        };
        match (kind, envelope.id) {
            (MessageKind::Notification, _) => {
                state.router.notification(&ctx, method, envelope.params);
                Outcome::Accepted
            }
            // A client's answer to a request an upstream asked of it, by the
            // gateway-issued id; only this session's own requests match.
            (MessageKind::Response, Some(id)) => {
                let answer = match (envelope.result, envelope.error) {
                    (Some(result), _) => Ok(result.to_owned()),
                    (None, Some(error)) => Err(error.to_owned()),
                    (None, None) => return Outcome::Accepted,
                };
                let id: String = serde_json::from_str(id.get()).unwrap_or_default();
                let hub = state.router.hub();
                if let Err(answer) = hub.answer(session.subscriber.id, &id, answer)
                    && !super::shared::relay_answer(state, session, &id, answer).await
                {
                    tracing::debug!(parent: &session.span, id, "answer to no request of this session; ignored");
                }
                Outcome::Accepted
            }
            (MessageKind::Response, None) | (MessageKind::Request, None) => Outcome::Accepted,
            (MessageKind::Request, Some(id)) if method == protocol::method::INITIALIZE => {
                Outcome::Reply(Reply::Ready(initialize(
                    state,
                    session,
                    id,
                    envelope.params,
                )))
            }
            (MessageKind::Request, Some(id)) => {
                let span = tracing::debug_span!(parent: &session.span, "request", method);
                let mut request = request.unwrap_or_else(|| {
                    Request::new(id, Method::from_name(method), envelope.params)
                });
                let reply =
                    tracing::Instrument::instrument(state.router.request(&ctx, &mut request), span)
                        .await;
                super::shared::after_request(state, session, &mut request, &reply).await;
                Outcome::Reply(reply)
            }
        }
    }
}

/// The version to agree on: the client's if supported, else the latest.
pub(crate) fn negotiate(
    params: Option<crate::protocol::Raw<'_>>,
) -> Result<&'static str, RpcError> {
    let requested = params
        .and_then(|p| {
            serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(p.get()).ok()
        })
        .and_then(|p| {
            p.get("protocolVersion")
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        })
        .ok_or_else(|| {
            RpcError::new(
                code::INVALID_PARAMS,
                "initialize needs params.protocolVersion",
            )
        })?;
    Ok(protocol::DOWNSTREAM_VERSIONS
        .iter()
        .copied()
        .find(|v| *v == requested)
        .unwrap_or(protocol::LATEST_VERSION))
}

fn initialize(
    state: &AppState,
    session: &Session,
    id: &RawValue,
    params: Option<crate::protocol::Raw<'_>>,
) -> Frame {
    match negotiate(params) {
        Ok(version) => {
            let _ = session.protocol_version.set(version.to_owned());
            state
                .router
                .hub()
                .set_client_capabilities(&session.subscriber, params);
            Frame::result(protocol::response_frame(
                id.get(),
                &state.router.initialize_result(
                    version,
                    session.subscriber.endpoint(),
                    session.identity.as_deref(),
                ),
            ))
        }
        Err(e) => Frame::error(protocol::error_frame(Some(id.get()), &e), e.code, None),
    }
}

/// Sends a reply's frames to the session's reply channel, in order.
pub(crate) async fn send_reply(replies: &mpsc::Sender<String>, reply: Reply) {
    match reply {
        Reply::Ready(frame) => {
            let _ = replies.send(frame.into_text()).await;
        }
        Reply::Page(page) => {
            let _ = replies.send(page.into_text()).await;
        }
        Reply::Streaming(mut frames) => {
            while let Some(frame) = frames.recv().await {
                if replies.send(frame).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// One thing to write to a single-stream transport.
pub(crate) enum Outgoing {
    /// An answer (or progress) for a request.
    Reply(String),
    /// A notification from the outbox, with its event id.
    Event(Event),
}

/// Answers first, then notifications, until `stop` or the session ends.
pub(crate) fn outgoing(
    session: Arc<Session>,
    replies: mpsc::Receiver<String>,
    stop: CancellationToken,
) -> impl Stream<Item = Outgoing> {
    futures_util::stream::unfold(
        (session, replies, stop),
        |(session, mut replies, stop)| async move {
            loop {
                if let Ok(frame) = replies.try_recv() {
                    return Some((Outgoing::Reply(frame), (session, replies, stop)));
                }
                if let Some(event) = session.subscriber.outbox.next_event() {
                    return Some((Outgoing::Event(event), (session, replies, stop)));
                }
                tokio::select! {
                    frame = replies.recv() => match frame {
                        Some(frame) => return Some((Outgoing::Reply(frame), (session, replies, stop))),
                        None => return None,
                    },
                    () = session.subscriber.outbox.wait() => {}
                    () = stop.cancelled() => return None,
                    () = session.closed.cancelled() => return None,
                }
            }
        },
    )
}
