//! Read-only views of a running [`Gateway`](crate::Gateway), for embedders,
//! health checks and tests: one upstream's life cycle, the notify tables'
//! sizes, and a session's resumable answers. Nothing here changes the
//! gateway.

use std::sync::Arc;

use tokio::sync::watch;

use crate::downstream::session::Session;
use crate::notify::outbox::Backlog;
use crate::upstream::{UpstreamHandle, UpstreamState};

/// One configured upstream server, as the gateway sees it (see
/// [`Gateway::upstream`](crate::Gateway::upstream)). Cheap to clone; it
/// follows the upstream across restarts, but not across a reload that
/// removes or replaces it.
#[derive(Clone)]
pub struct Upstream {
    handle: UpstreamHandle,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("name", &self.name())
            .field("state", &self.state())
            .finish()
    }
}

impl Upstream {
    pub(crate) fn new(handle: UpstreamHandle) -> Upstream {
        Upstream { handle }
    }

    /// Its name in the config.
    pub fn name(&self) -> &str {
        self.handle.name()
    }

    /// Where it is in its life cycle now.
    pub fn state(&self) -> UpstreamState {
        self.handle.state()
    }

    /// A receiver that sees every change of [`state`](Self::state).
    pub fn watch_state(&self) -> watch::Receiver<UpstreamState> {
        self.handle.watch_state()
    }

    /// How many times it was restarted after it went down.
    pub fn restarts(&self) -> u64 {
        self.handle.restarts()
    }

    /// The process id of its child, for a stdio upstream that is running.
    pub fn pid(&self) -> Option<u32> {
        self.handle.pid()
    }

    /// How many per-session instances it runs now; `None` unless it has
    /// `isolation: per-session`.
    pub fn instances(&self) -> Option<usize> {
        self.handle.instance_count()
    }

    /// The process ids of its per-session instances' children.
    pub fn instance_pids(&self) -> Vec<u32> {
        self.handle.instance_pids()
    }

    /// Whether it speaks the stateless 2026-07-28 protocol, as of its last
    /// handshake (it answered `server/discover` with that version).
    pub fn is_modern(&self) -> bool {
        self.handle.is_modern()
    }
}

/// Sizes of the gateway's notification tables at one moment (see
/// [`Gateway::stats`](crate::Gateway::stats)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Live 2025-era sessions.
    pub sessions: usize,
    /// Registered notification subscribers: sessions, modern listen
    /// streams, local sessions and per-request log taps.
    pub subscribers: usize,
    /// Open modern `subscriptions/listen` streams.
    pub listen_streams: usize,
    /// Distinct resource URIs somebody is subscribed to.
    pub subscribed_uris: usize,
    /// Subscriptions: (subscriber, URI) pairs.
    pub subscriptions: usize,
    /// Each subscriber's outbox, in no particular order.
    pub backlogs: Vec<Backlog>,
    /// Requests upstreams asked of clients (sampling, elicitation, roots)
    /// that wait for the client's answer.
    pub asks_waiting: usize,
    /// Stateless (2026-07-28) calls parked until their client's retry
    /// brings the input a 2025-era upstream asked for.
    pub parked_calls: usize,
}

/// A 2025-era session's resumable POST answers (`text/event-stream`
/// replies kept for a `GET` with `Last-Event-ID`), live and recently
/// finished (see [`Gateway::resumable_streams`]). It keeps looking at the
/// same session after the session ends.
///
/// [`Gateway::resumable_streams`]: crate::Gateway::resumable_streams
pub struct ResumableStreams {
    session: Arc<Session>,
}

impl ResumableStreams {
    pub(crate) fn new(session: Arc<Session>) -> ResumableStreams {
        ResumableStreams { session }
    }

    /// Streams kept for resuming, live or finished; none once the session
    /// ended.
    pub fn len(&self) -> usize {
        self.session.resumable.len()
    }

    /// Whether no stream is kept.
    pub fn is_empty(&self) -> bool {
        self.session.resumable.is_empty()
    }

    /// The sequence number of stream `id`'s latest event, as it changes
    /// (the stream id is the part of an SSE event id before the `-`).
    pub fn watch_stream(&self, id: u64) -> Option<watch::Receiver<u64>> {
        self.session.resumable.watch_stream(id)
    }

    /// How many stream buffers are still allocated, including those a call
    /// still running or a reader holds after the session dropped them.
    pub fn watch_buffers(&self) -> watch::Receiver<usize> {
        self.session.resumable.watch_buffers()
    }
}
