//! Requests an upstream asks of a client (`sampling/createMessage`,
//! `elicitation/create`, `roots/list`): finding the client that caused
//! them, relaying them on that call's stream, and answering the upstream.
//!
//! The origin is never guessed. A request that arrives on the stream of a
//! call (a Streamable HTTP POST) belongs to that call. Otherwise (stdio, a
//! standalone stream) it belongs to the one session whose calls are in
//! flight on this upstream; when calls of several sessions are in flight,
//! or none, it is refused with a clear error. One task per relayed request
//! (on the gateway's tracker) waits for the client's answer, the call's
//! end, or the timeout, and always answers the upstream under its own id.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::value::RawValue;
use tokio::sync::mpsc;

use super::{Connection, Outgoing};
use crate::protocol::{self, Method, RpcError, code};
use crate::upstream::events::{AskRefused, ClientAsk, InputAsk};
use crate::upstream::message::Origin;
use serde_json::Value;

/// URL-mode elicitations remembered per upstream for their completion
/// notification; the oldest is forgotten first.
const MAX_URL_ELICITATIONS: usize = 256;
use tokio::sync::oneshot;

/// Why a request for a client was not relayed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum NotRelayed {
    #[error("no client call is in flight on this upstream to ask")]
    NoCall,
    #[error(
        "calls of several sessions are in flight on this upstream and its transport does not say which one this request is for; mcpmux does not guess"
    )]
    Ambiguous,
    #[error("the call it belongs to cannot carry requests to its client (no event stream)")]
    NoStream,
    #[error(transparent)]
    Refused(#[from] AskRefused),
}

impl NotRelayed {
    /// The JSON-RPC error the upstream gets.
    fn to_rpc(&self, method: &Method) -> RpcError {
        let code = match self {
            NotRelayed::Refused(AskRefused::MissingCapability(_)) => code::METHOD_NOT_FOUND,
            _ => code::INTERNAL_ERROR,
        };
        RpcError::new(
            code,
            format!("mcpmux cannot relay {}: {self}", method.name()),
        )
    }
}

/// The call a request for a client is relayed through.
struct Target {
    client: Client,
    last_progress: Arc<std::sync::atomic::AtomicU64>,
    started: tokio::time::Instant,
}

/// Who answers, and how the request reaches them.
enum Client {
    /// A session, on its call's stream; `ask` is registered with the
    /// session once the session can take it.
    Session {
        session: u64,
        sink: super::CallStream,
        ask: Option<ClientAsk>,
    },
    /// A stateless call, through its reply (an `input_required` result);
    /// the call checks what its client declared when it asks.
    Stateless(mpsc::Sender<InputAsk>),
}

impl Connection {
    /// Relays a request for a client, or answers it at once with why not.
    /// `via` is the request whose stream carried it, when the transport says.
    pub(super) fn on_ask(
        &self,
        id: &RawValue,
        method: Method,
        params: Option<&RawValue>,
        via: Option<u64>,
    ) {
        let target = self.asked_through(via);
        // A session's roots, as its client last gave them, while they hold.
        if let (
            Method::RootsList,
            Ok(Target {
                client: Client::Session { session, .. },
                ..
            }),
        ) = (&method, &target)
            && let Some(roots) = self.events.cached_roots(*session)
        {
            return self.reply(protocol::response_frame(id.get(), roots.get()));
        }
        let asked = target.and_then(|mut t| {
            if let Client::Session { session, ask, .. } = &mut t.client {
                *ask = Some(self.events.ask_client(*session, &method, params)?);
            }
            Ok(t)
        });
        let target = match asked {
            Ok(found) => found,
            Err(NotRelayed::NoCall) if method == Method::RootsList => {
                // Asked outside any call (say, right after the handshake):
                // the roots the config gives this upstream, if any.
                return self.reply(protocol::response_frame(id.get(), &self.config_roots));
            }
            Err(why) => {
                tracing::info!(upstream = %self.upstream, method = method.name(), reason = %why, "request for a client refused");
                return self.reply(protocol::error_frame(Some(id.get()), &why.to_rpc(&method)));
            }
        };
        if let (Method::Elicit, Client::Session { session, .. }) = (&method, &target.client) {
            self.note_url_elicitation(*session, params);
        }
        let task = Relay {
            upstream: self.upstream.clone(),
            outbound: self.outbound.clone(),
            events: self.events.clone(),
            upstream_id: id.to_owned(),
            method,
            params: params.map(ToOwned::to_owned),
            target,
            timeout: self.ask_timeout,
        }
        .run();
        let span = tracing::info_span!("ask", upstream = %self.upstream);
        match &self.tasks {
            Some(tasks) => {
                tasks.spawn(tracing::Instrument::instrument(task, span));
            }
            // Only a connection built without a supervisor (unit tests) has no tracker.
            None => {
                tokio::spawn(tracing::Instrument::instrument(task, span));
            }
        }
    }

    /// Remembers which session a URL-mode elicitation went to (by its
    /// `elicitationId`), for its completion notification.
    fn note_url_elicitation(&self, session: u64, params: Option<&RawValue>) {
        let Some(params) = params.and_then(|p| serde_json::from_str::<Value>(p.get()).ok()) else {
            return;
        };
        if params.get("mode").and_then(Value::as_str) != Some("url") {
            return;
        }
        let Some(elicitation) = params.get("elicitationId").and_then(Value::as_str) else {
            return;
        };
        let mut noted = self
            .url_elicitations
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if noted.len() >= MAX_URL_ELICITATIONS {
            noted.pop_front();
        }
        noted.push_back((elicitation.into(), session));
    }

    /// Sends `notifications/elicitation/complete` to the session that was
    /// shown that elicitation, and to nobody else; an unknown id is dropped.
    pub(super) fn on_elicitation_complete(&self, params: Option<&RawValue>) {
        let elicitation = params
            .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
            .and_then(|p| {
                p.get("elicitationId")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            });
        let session = elicitation.and_then(|wanted| {
            let mut noted = self
                .url_elicitations
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let at = noted.iter().position(|(id, _)| **id == *wanted)?;
            noted.remove(at).map(|(_, session)| session)
        });
        match session {
            Some(session) => self.events.elicitation_complete(session, params),
            None => {
                tracing::debug!(upstream = %self.upstream, "completion of an elicitation no session was shown; dropped")
            }
        }
    }

    /// Queues an answer to the upstream without waiting (the reader never waits).
    pub(super) fn reply(&self, frame: String) {
        if self.outbound.try_send(Outgoing::new(None, frame)).is_err() {
            tracing::debug!(upstream = %self.upstream, "outbound queue full; reply dropped");
        }
    }

    /// The call whose client a request is for: the one whose stream carried
    /// it, or else the one session with calls in flight here.
    fn asked_through(&self, via: Option<u64>) -> Result<Target, NotRelayed> {
        if let Some(entry) = via.and_then(|id| self.pending.get(&id)) {
            return target_of(&entry.origin, entry.progress.as_ref());
        }
        let mut found: Option<(u64, Target)> = None;
        let mut sessions = std::collections::HashSet::new();
        for entry in &self.pending {
            let Origin::Client { session, .. } = &entry.origin else {
                continue;
            };
            // Each stateless call is a client of its own.
            sessions.insert(session.ok_or(*entry.key()));
            if sessions.len() > 1 {
                return Err(NotRelayed::Ambiguous);
            }
            // The newest call of the session carries it.
            if found.as_ref().is_none_or(|(id, _)| *entry.key() > *id) {
                found = Some((
                    *entry.key(),
                    target_of(&entry.origin, entry.progress.as_ref())?,
                ));
            }
        }
        found.map(|(_, t)| t).ok_or(NotRelayed::NoCall)
    }
}

fn target_of(origin: &Origin, route: Option<&super::ProgressRoute>) -> Result<Target, NotRelayed> {
    let Origin::Client { session, .. } = origin else {
        return Err(NotRelayed::NoCall);
    };
    let route = route.ok_or(NotRelayed::NoStream)?;
    let client = match (session, &route.asks) {
        (Some(session), _) => Client::Session {
            session: *session,
            sink: route.sink.clone(),
            ask: None,
        },
        (None, Some(asks)) => Client::Stateless(asks.clone()),
        (None, None) => return Err(NotRelayed::NoStream),
    };
    Ok(Target {
        client,
        last_progress: route.last_progress.clone(),
        started: route.started,
    })
}

/// One relayed request, owned by its task.
struct Relay {
    upstream: Arc<str>,
    outbound: mpsc::Sender<Outgoing>,
    events: Arc<dyn crate::upstream::UpstreamEvents>,
    /// The upstream's own id for the request, answered with.
    upstream_id: Box<RawValue>,
    method: Method,
    params: Option<Box<RawValue>>,
    target: Target,
    timeout: std::time::Duration,
}

impl Relay {
    /// Sends the request to the client on its call's stream, waits for the
    /// answer, and answers the upstream with it (or with why there is none).
    async fn run(self) {
        let Relay {
            upstream,
            outbound,
            events,
            upstream_id,
            method,
            params,
            mut target,
            timeout,
        } = self;
        // Waiting for a person counts as progress of the call.
        let touch = |t: &Target| {
            let elapsed = u64::try_from(t.started.elapsed().as_millis()).unwrap_or(u64::MAX);
            t.last_progress.store(elapsed, Ordering::Relaxed);
        };
        touch(&target);
        // One deadline for both: a client that does not read its stream
        // holds the request no longer than one that does not answer.
        let mut session_ask = None;
        let exchange = async {
            match &mut target.client {
                Client::Session { session, sink, ask } => {
                    let ask = ask.take().expect("registered before the relay starts");
                    session_ask = Some((*session, ask.id.clone()));
                    let frame =
                        protocol::request_frame_with_id(&ask.id, method.name(), params.as_deref());
                    // The first request for the client opens the call's stream.
                    let sink = sink.sender();
                    if sink.send(frame).await.is_err() {
                        return Err("the client's stream for the call closed");
                    }
                    tokio::select! {
                        answer = ask.answer => answer.map_err(|_| "the client's session ended"),
                        () = sink.closed() => Err("the call it belongs to ended"),
                    }
                }
                Client::Stateless(asks) => {
                    let (answer, answered) = oneshot::channel();
                    let ask = InputAsk {
                        method: method.clone(),
                        params: params.clone(),
                        answer,
                    };
                    if asks.send(ask).await.is_err() {
                        return Err("the call it belongs to ended");
                    }
                    answered
                        .await
                        .map_err(|_| "the client did not send the answer back")
                }
            }
        };
        let outcome = tokio::time::timeout(timeout, exchange)
            .await
            .unwrap_or(Err("the client did not answer in time"));
        touch(&target);
        let id = upstream_id.get();
        let frame = match outcome {
            Ok(Ok(result)) => {
                if let (Method::RootsList, Some((session, _))) = (&method, &session_ask) {
                    events.remember_roots(*session, &result);
                }
                protocol::response_frame(id, result.get())
            }
            Ok(Err(error)) => format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{}}}"#, error.get()),
            Err(why) => {
                if let Some((session, id)) = session_ask {
                    events.forget_ask(session, &id);
                }
                tracing::info!(upstream = %upstream, method = method.name(), reason = why, "request for a client ended without an answer");
                let error =
                    RpcError::new(code::INTERNAL_ERROR, format!("{}: {why}", method.name()));
                protocol::error_frame(Some(id), &error)
            }
        };
        if outbound.send(Outgoing::new(None, frame)).await.is_err() {
            tracing::debug!(upstream = %upstream, "the upstream is gone; answer dropped");
        }
    }
}
