//! The shared state of one remote upstream session, for the Streamable
//! HTTP link and the legacy HTTP+SSE transport it may fall back to: the
//! client, URL and configured headers, the session id and version headers,
//! the end of the link and why, and the POSTs in flight.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use reqwest::Url;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::upstream::UpstreamError;
use crate::upstream::connection::Connection;

/// Which wire the link speaks; decided by the first (initialize) POST.
#[derive(Debug, Clone)]
pub(super) enum Mode {
    Detect,
    Streamable,
    Sse { post_url: Url },
}

/// What one session with a remote upstream knows of itself, behind one
/// lock ([`RemoteSession::state`]). It is held only to read or write these
/// fields, never across an await, and nothing else is locked while it is.
pub(super) struct SessionState {
    pub(super) mode: Mode,
    /// The server's `Mcp-Session-Id` (session-based servers).
    pub(super) session_id: Option<HeaderValue>,
    /// The negotiated `MCP-Protocol-Version`, from the initialize answer.
    pub(super) version: Option<HeaderValue>,
    /// Why the link ended, once it has (the first reason wins).
    pub(super) end_reason: Option<String>,
    /// The last event id of the standalone notification stream.
    pub(super) last_event_id: Option<String>,
}

impl SessionState {
    pub(super) fn new(mode: Mode) -> SessionState {
        SessionState {
            mode,
            session_id: None,
            version: None,
            end_reason: None,
            last_event_id: None,
        }
    }
}

/// The state of one session with a remote upstream, shared by the link's
/// tasks: the writer, one task per POST, and the notification streams.
pub(super) struct RemoteSession {
    pub(super) upstream: Arc<str>,
    pub(super) client: reqwest::Client,
    /// POSTs, through the fast client when the URL allows.
    pub(super) poster: super::poster::Poster,
    pub(super) url: Url,
    /// Configured headers (credentials marked sensitive).
    pub(super) headers: HeaderMap,
    /// The bearer token of an upstream with an `auth:` section.
    pub(super) bearer: Option<Arc<crate::credentials::cell::TokenCell>>,
    /// The session's own state: the one lock, see [`SessionState`]; read
    /// and written through [`RemoteSession::state`].
    pub(super) state: Mutex<SessionState>,
    pub(super) conn: Arc<Connection>,
    /// Cancelled when the link ends; `end_reason` says why.
    pub(super) ended: CancellationToken,
    /// Whether the GET stream was started (once `initialized` was accepted).
    pub(super) listening: AtomicBool,
    /// Told each time a GET for that stream has its answer (a stream, a
    /// refusal or an error). The writer waits for the first, briefly,
    /// before what follows `initialized`.
    pub(super) listen_answered: tokio::sync::Notify,
    /// Set when the writer stopped waiting for that first answer: the
    /// lists went out before the stream opened, so its opening refetches them.
    pub(super) listed_before_stream: AtomicBool,
    /// Set once a request carrying our session id succeeded: from then on
    /// a 400 that does not answer the request means the session is gone
    /// (real servers answer a lost session with 400 as well as 404).
    pub(super) session_confirmed: AtomicBool,
    /// Requests whose POST is in flight, so a modern cancellation can close
    /// the response stream. Entries leave when the POST ends.
    pub(super) posts: dashmap::DashMap<u64, tokio::task::AbortHandle, crate::hashing::RandomState>,
    /// POSTs in flight at once, from the writer and from callers' tasks.
    pub(super) slots: Arc<tokio::sync::Semaphore>,
    /// The gateway's task tracker: every task of the link runs on it, in
    /// the supervisor's span.
    pub(super) tasks: TaskTracker,
    pub(super) span: tracing::Span,
}

impl RemoteSession {
    /// The session's state, locked (see [`SessionState`]).
    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, SessionState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs one of the link's tasks on the tracker, in the link's span.
    pub(super) fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tasks
            .spawn(tracing::Instrument::instrument(task, self.span.clone()))
    }

    /// Adds the link's bearer token to `headers`, and returns it (none
    /// without an `auth:` section). No token means the request cannot go.
    pub(super) async fn authorize(
        &self,
        headers: &mut reqwest::header::HeaderMap,
    ) -> Result<Option<HeaderValue>, UpstreamError> {
        let Some(bearer) = &self.bearer else {
            return Ok(None);
        };
        let value = bearer
            .header()
            .await
            .map_err(|error| UpstreamError::Credential {
                upstream: self.upstream.to_string(),
                error: Box::new(error),
            })?;
        headers.insert(reqwest::header::AUTHORIZATION, value.clone());
        Ok(Some(value))
    }

    pub(super) fn reason(&self) -> String {
        self.state()
            .end_reason
            .clone()
            .unwrap_or_else(|| "the link ended".into())
    }

    /// Ends the link (first reason wins).
    pub(super) fn end(&self, reason: impl Into<String>) {
        let reason = self
            .state()
            .end_reason
            .get_or_insert_with(|| reason.into())
            .clone();
        self.ended.cancel();
        // Calls must not pick this connection up while the supervisor tears down.
        self.conn.close(reason);
    }

    pub(super) fn unavailable(&self, reason: String) -> UpstreamError {
        UpstreamError::Unavailable {
            upstream: self.upstream.to_string(),
            reason,
        }
    }

    pub(super) fn protocol(&self, detail: String) -> UpstreamError {
        UpstreamError::Protocol {
            upstream: self.upstream.to_string(),
            detail,
        }
    }

    /// Hands one received message to the connection, noting the protocol
    /// version the initialize answer carries. `via` is the request whose
    /// POST stream carried it (none: the standalone or legacy stream).
    pub(super) async fn deliver(&self, message: &str, via: Option<u64>) {
        self.note_version(message);
        self.conn.dispatch_from(message, via).await;
    }

    /// Notes the protocol version a session-based link negotiated, from
    /// its initialize answer, until it is known. A modern link has none
    /// (each request names its own) and its answers are not read here: they
    /// are read once, by the connection.
    fn note_version(&self, message: &str) {
        if self.conn.is_modern()
            || self.state().version.is_some()
            || !message.contains("\"protocolVersion\"")
        {
            return;
        }
        #[cfg(test)]
        crate::protocol::note_envelope_parse();
        if let Ok(value) = serde_json::from_str::<Value>(message)
            && let Some(version) = value
                .pointer("/result/protocolVersion")
                .and_then(Value::as_str)
            && let Some(header) = version_header(version)
        {
            self.state().version = Some(header);
        }
    }
}

/// `version` as the `MCP-Protocol-Version` value of every later request:
/// a version the gateway knows is the static text, whose clone per request
/// copies a pointer instead of counting a shared buffer's owners.
fn version_header(version: &str) -> Option<HeaderValue> {
    match crate::protocol::ALL_VERSIONS
        .iter()
        .find(|&&known| known == version)
    {
        Some(known) => Some(HeaderValue::from_static(known)),
        None => HeaderValue::from_str(version).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::version_header;

    #[test]
    fn a_negotiated_version_becomes_its_header_value_known_or_not() {
        for known in crate::protocol::ALL_VERSIONS {
            assert_eq!(version_header(known).expect("a value"), *known);
        }
        assert_eq!(version_header("2099-01-01").expect("a value"), "2099-01-01");
        assert!(version_header("bad\nvalue").is_none());
    }
}
