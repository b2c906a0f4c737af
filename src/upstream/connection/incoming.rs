//! What an upstream sends, message by message: answers to the pending
//! requests, notifications (progress to its call's stream, resource
//! updates, log messages, task status, listen acknowledgements and list
//! changes), and requests for a client, which `ask` relays.

use std::sync::atomic::Ordering;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{Answer, Connection, ListsChanged};
use crate::protocol::{self, Json, MessageKind, Method, RawEnvelope};
use crate::upstream::UpstreamError;

impl Connection {
    /// Handles one message from the upstream.
    pub(crate) async fn dispatch(&self, line: &str) {
        self.dispatch_from(line, None).await;
    }

    /// Handles one message that arrived on the response stream of request
    /// `via` (a Streamable HTTP POST), or on no request's stream.
    pub(crate) async fn dispatch_from(&self, line: &str, via: Option<u64>) {
        // Most messages are answers with a result: read and checked in one
        // pass, they are not parsed again.
        if let Some(answered) = protocol::checked::response(line) {
            return self.answered(Some(answered.id), || Ok(answered.result));
        }
        let envelope = match RawEnvelope::parse_raw(line) {
            Ok(e) => e,
            Err(e) => {
                if let Some(suppressed) = self.noise.admit() {
                    tracing::warn!(upstream = %self.upstream, error = %e, suppressed, "upstream sent a line that is not JSON-RPC; ignored");
                }
                return;
            }
        };
        match envelope.kind() {
            Ok(MessageKind::Response) => self.on_response(&envelope),
            Ok(MessageKind::Notification) => self.on_notification(&envelope),
            Ok(MessageKind::Request) => self.on_request(&envelope, via),
            Err(e) => {
                tracing::warn!(upstream = %self.upstream, error = %e, "invalid message from upstream; ignored");
            }
        }
    }

    fn on_response(&self, envelope: &RawEnvelope<'_>) {
        let id = envelope.id.and_then(|id| id.get().parse::<u64>().ok());
        self.answered(id, || match (envelope.result, envelope.error) {
            (Some(result), _) => Ok(Json::from(result)),
            (None, Some(error)) => Err(UpstreamError::Rpc {
                upstream: self.upstream.to_string(),
                code: protocol::error_code(error),
                error: error.to_owned(),
            }),
            (None, None) => Err(UpstreamError::Protocol {
                upstream: self.upstream.to_string(),
                detail: "response without result or error".into(),
            }),
        });
    }

    /// Hands the answer to request `id` to whoever waits for it.
    fn answered(&self, id: Option<u64>, answer: impl FnOnce() -> Answer) {
        let Some(id) = id else {
            tracing::warn!(upstream = %self.upstream, "response with an id the gateway never sent; ignored");
            return;
        };
        let Some((_, pending)) = self.pending.remove(&id) else {
            tracing::debug!(upstream = %self.upstream, id, "late response (cancelled or timed out); ignored");
            return;
        };
        let _ = pending.reply.send(answer());
    }

    fn on_notification(&self, envelope: &RawEnvelope<'_>) {
        let method = Method::from_name(envelope.method.as_deref().unwrap_or_default());
        match &method {
            Method::Progress => self.on_progress(envelope.params),
            Method::ResourceUpdated => {
                let uri = envelope
                    .params
                    .and_then(|p| serde_json::from_str::<Map<String, Value>>(p.get()).ok())
                    .and_then(|p| p.get("uri").and_then(Value::as_str).map(str::to_owned));
                if let Some(uri) = uri {
                    self.events.resource_updated(&self.upstream, &uri);
                }
            }
            Method::LogMessage => self.events.log_message(&self.upstream, envelope.params),
            Method::ElicitationComplete => self.on_elicitation_complete(envelope.params),
            Method::TaskStatus | Method::TasksNotification => {
                self.events
                    .task_status(&self.upstream, &method, envelope.params)
            }
            Method::ListenAcknowledged => {
                let id = envelope
                    .params
                    .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
                    .and_then(|p| {
                        p.pointer("/_meta/io.modelcontextprotocol~1subscriptionId")
                            .and_then(Value::as_u64)
                    });
                if let Some((_, ack)) = id.and_then(|id| self.acks.remove(&id)) {
                    let _ = ack.send(());
                }
            }
            _ => match ListsChanged::of(&method) {
                Some(note) => {
                    if let Err(e) = self.list_changes.try_send(note) {
                        tracing::warn!(upstream = %self.upstream, method = method.name(), error = %e, "list change queue full; dropped");
                    }
                }
                None => {
                    tracing::debug!(upstream = %self.upstream, method = method.name(), "notification not relayed")
                }
            },
        }
    }

    /// Restores the client's token and hands the notification to the
    /// originating request's stream.
    fn on_progress(&self, params: Option<&RawValue>) {
        let Some(mut params) =
            params.and_then(|p| serde_json::from_str::<Map<String, Value>>(p.get()).ok())
        else {
            return;
        };
        let Some(id) = params.get("progressToken").and_then(Value::as_u64) else {
            return;
        };
        let Some(pending) = self.pending.get(&id) else {
            return;
        };
        let Some(route) = &pending.progress else {
            return;
        };
        let Some(client_token) = &route.client_token else {
            return;
        };
        let token: Value = serde_json::from_str(client_token.get()).unwrap_or(Value::Null);
        params.insert("progressToken".into(), token);
        let elapsed = u64::try_from(route.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        route.last_progress.store(elapsed, Ordering::Relaxed);
        let frame = protocol::notification_frame(
            protocol::method::PROGRESS,
            Some(&Value::Object(params).to_string()),
        );
        if !route.sink.try_send(frame) {
            tracing::debug!(upstream = %self.upstream, id, "client is behind; progress notification dropped");
        }
    }

    /// Answers `ping`; relays what only a client can answer; refuses the rest.
    fn on_request(&self, envelope: &RawEnvelope<'_>, via: Option<u64>) {
        let Some(id) = envelope.id else { return };
        let method = Method::from_name(envelope.method.as_deref().unwrap_or_default());
        match method {
            Method::Ping => self.reply(protocol::response_frame(id.get(), "{}")),
            Method::CreateMessage | Method::Elicit | Method::RootsList => {
                self.on_ask(id, method, envelope.params, via)
            }
            other => self.reply(protocol::error_frame(
                Some(id.get()),
                &protocol::RpcError::new(
                    protocol::code::METHOD_NOT_FOUND,
                    format!(
                        "mcpmux does not relay server-to-client request {:?}",
                        other.name()
                    ),
                ),
            )),
        }
    }
}
