//! What the gateway sends an upstream: one typed [`Outgoing`] message per
//! frame, built once by the [`Connection`](super::Connection), so the
//! transports read its fields instead of parsing the frame again.
//!
//! Every message says who caused it ([`Origin`]): the gateway itself, or a
//! client's request, with the downstream session it came from. The pending
//! table keeps that origin for as long as a request is in flight.

use std::sync::Arc;

use bytes::Bytes;

use crate::protocol::Method;

/// Who caused a message sent upstream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The gateway's own traffic: handshake, pings, list fetches,
    /// subscriptions, the log level, listen streams.
    #[default]
    Gateway,
    /// A client's request.
    Client {
        /// The downstream session's subscriber id; none for a stateless
        /// (2026-07-28) request, which has no session.
        session: Option<u64>,
        /// The client's own request id (its JSON text).
        request: Arc<str>,
    },
}

/// One message on an upstream's send queue.
#[derive(Debug)]
pub(crate) struct Outgoing {
    /// The method of a request or notification; none for a response to a
    /// server-to-client request.
    pub(crate) method: Option<Method>,
    /// The id of a request on this connection; none otherwise.
    pub(crate) id: Option<u64>,
    /// What a `tools/call` or `prompts/get` names, or the URI a
    /// `resources/read` reads, as the upstream knows it (`Mcp-Name`).
    pub(crate) target: Option<Arc<str>>,
    /// For `notifications/cancelled`: the request it cancels.
    pub(crate) cancels: Option<u64>,
    /// The 2026-07-28 protocol version the message carries in `_meta`.
    pub(crate) version: Option<Arc<str>>,
    /// `Mcp-Param-*` headers mirrored from a modern tool call's arguments.
    pub(crate) mirrored: Vec<(String, String)>,
    /// Who caused it.
    pub(crate) origin: Origin,
    /// The W3C `traceparent` of the exchange's span, sent as an HTTP
    /// header (none when tracing is off).
    pub(crate) traceparent: Option<String>,
    /// The JSON-RPC frame, ready to write.
    pub(crate) frame: Bytes,
}

impl Outgoing {
    /// A message with only its frame and method set.
    pub(crate) fn new(method: Option<Method>, frame: String) -> Self {
        Self::with_frame(method, Bytes::from(frame))
    }

    /// [`Outgoing::new`] with a frame already in bytes (shared, not copied).
    pub(crate) fn with_frame(method: Option<Method>, frame: Bytes) -> Self {
        Self {
            method,
            id: None,
            target: None,
            cancels: None,
            version: None,
            mirrored: Vec::new(),
            origin: Origin::Gateway,
            traceparent: None,
            frame,
        }
    }

    /// Whether this is `method`.
    pub(crate) fn is(&self, method: &Method) -> bool {
        self.method.as_ref() == Some(method)
    }
}
