//! One subscriber's outbound notifications: coalescing, bounds, event ids
//! and the replay buffer.
//!
//! Producers (the notify hub, on upstream reader tasks) never wait: they
//! set a pending flag or push under a short std mutex and wake the
//! stream. The stream task pulls events one at a time as the client's
//! connection takes them. Policy when the client does not read:
//!
//! - `list_changed`: one pending flag per list kind. Any number of changes
//!   collapse into one notification per kind.
//! - `resources/updated`: one pending entry per URI, so a URI updated a
//!   thousand times is delivered once. Bounded by the subscriber's URIs.
//! - other messages (logging): a queue of [`MESSAGE_CAPACITY`]; when full the
//!   oldest is dropped and counted.
//! - delivered events stay in a ring of [`REPLAY_CAPACITY`] for
//!   `Last-Event-ID` resumption. A client that asks for an event older than
//!   the ring gets a resync instead: every list kind and every URI it
//!   watches is marked changed.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use futures_util::task::AtomicWaker;
use indexmap::IndexMap;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::catalog::ListKind;

/// Logging and other messages queued per subscriber before the oldest drop.
pub(crate) const MESSAGE_CAPACITY: usize = 256;
/// Delivered events kept for `Last-Event-ID` replay.
pub(crate) const REPLAY_CAPACITY: usize = 256;

/// The list kinds that have their own `list_changed` (templates share resources').
const NOTIFIED_KINDS: [ListKind; 3] = [ListKind::Tools, ListKind::Prompts, ListKind::Resources];

/// One event handed to a stream: its id and its JSON-RPC frame.
pub(crate) type Event = (u64, Arc<str>);

/// Events a resuming client missed are no longer in the replay ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the requested events are no longer in the replay buffer")]
pub(crate) struct Evicted;

/// Snapshot of one subscriber's outbox: its notifications waiting to be
/// read, those kept for replay, and those dropped. For tests and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backlog {
    /// Notifications waiting to be read (a pending `list_changed` kind or
    /// `resources/updated` URI counts once).
    pub pending: usize,
    /// Delivered events kept for `Last-Event-ID` replay.
    pub replay: usize,
    /// Messages dropped because the queue was full.
    pub dropped: u64,
}

#[derive(Default)]
struct State {
    next_id: u64,
    list_changed: [bool; 3],
    /// Pending URIs, each with the frame the hub built once for every
    /// untagged outbox (none: built here at delivery).
    updated: IndexMap<Arc<str>, Option<Arc<str>>>,
    messages: VecDeque<Arc<str>>,
    dropped: u64,
    replay: VecDeque<Event>,
    /// Cancels the stream currently attached, when another replaces it.
    stream: Option<CancellationToken>,
}

/// A subscriber's pending notifications and delivered-event ring.
#[derive(Default)]
pub(crate) struct Outbox {
    state: Mutex<State>,
    /// Wakes the attached stream; a permit is kept if it is not waiting.
    wake: Notify,
    /// Wakes a `GET /mcp` stream polled directly (`poll_next_event`), which
    /// needs no waiter list and no future per wait.
    waker: AtomicWaker,
    /// `_meta` JSON added to every notification this outbox builds (a
    /// modern listen stream's `subscriptionId`).
    tag: Option<String>,
    /// Shared counts of sent, coalesced and dropped notifications.
    counts: Arc<crate::metrics::NotificationCounts>,
}

impl Outbox {
    /// An outbox counting into `counts`, whose notifications carry `_meta`
    /// `tag` (JSON text) when given.
    pub(crate) fn new(
        counts: Arc<crate::metrics::NotificationCounts>,
        tag: Option<String>,
    ) -> Self {
        Self {
            tag,
            counts,
            ..Self::default()
        }
    }

    /// Whether this is a modern listen stream's outbox.
    pub(crate) fn is_tagged(&self) -> bool {
        self.tag.is_some()
    }

    /// A listen stream's `_meta` tag (JSON object text).
    pub(crate) fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn mark_list_changed(&self, kind: ListKind) {
        let slot = match kind {
            ListKind::Tools => 0,
            ListKind::Prompts => 1,
            ListKind::Resources | ListKind::Templates => 2,
        };
        let already = std::mem::replace(&mut self.lock().list_changed[slot], true);
        if already {
            self.counts
                .coalesced
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.wake();
    }

    /// Queues `resources/updated` for a namespaced URI (once per URI).
    #[cfg(test)]
    pub(crate) fn mark_updated(&self, uri: Arc<str>) {
        self.mark_updated_framed(uri, None);
    }

    /// [`Self::mark_updated`] with the untagged frame already built
    /// ([`updated_frame`]), shared by every subscriber of the URI; a tagged
    /// outbox builds its own at delivery.
    pub(crate) fn mark_updated_framed(&self, uri: Arc<str>, frame: Option<Arc<str>>) {
        let frame = frame.filter(|_| self.tag.is_none());
        let fresh = match self.lock().updated.entry(uri) {
            indexmap::map::Entry::Occupied(_) => false,
            indexmap::map::Entry::Vacant(slot) => {
                slot.insert(frame);
                true
            }
        };
        if !fresh {
            self.counts
                .coalesced
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.wake();
    }

    /// Drops a pending `resources/updated` for `uri`, not yet delivered:
    /// the subscription that queued it is no longer this outbox's to serve
    /// (the session's stream moved to another replica, which delivers it).
    pub(crate) fn forget_updated(&self, uri: &str) {
        self.lock().updated.shift_remove(uri);
    }

    /// Wakes whichever consumer waits: a [`Self::wait`]er or a stream that
    /// registered its waker in [`Self::poll_next_event`].
    fn wake(&self) {
        self.wake.notify_one();
        self.waker.wake();
    }

    /// Queues any other notification frame; drops the oldest when full.
    pub(crate) fn push_message(&self, frame: Arc<str>) {
        let mut state = self.lock();
        if state.messages.len() >= MESSAGE_CAPACITY {
            state.messages.pop_front();
            state.dropped += 1;
            self.counts
                .dropped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        state.messages.push_back(frame);
        drop(state);
        self.wake();
    }

    /// Takes the next pending notification, gives it an id and keeps it in
    /// the replay ring. List changes go first, then updates, then messages.
    pub(crate) fn next_event(&self) -> Option<Event> {
        let mut state = self.lock();
        let frame: Arc<str> = if let Some(slot) = state.list_changed.iter().position(|p| *p) {
            state.list_changed[slot] = false;
            match &self.tag {
                None => untagged_list_changed()[slot].clone(),
                Some(tag) => {
                    let method = NOTIFIED_KINDS[slot].list_changed_method();
                    let params = format!("{{\"_meta\":{tag}}}");
                    crate::protocol::notification_frame(method, Some(&params)).into()
                }
            }
        } else if let Some((uri, frame)) = state.updated.shift_remove_index(0) {
            match frame {
                Some(frame) => frame,
                None => updated_frame(&uri, self.tag.as_deref()),
            }
        } else {
            state.messages.pop_front()?
        };
        state.next_id += 1;
        self.counts
            .sent
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let event = (state.next_id, frame);
        if state.replay.len() >= REPLAY_CAPACITY {
            state.replay.pop_front();
        }
        state.replay.push_back(event.clone());
        Some(event)
    }

    /// Events after `last_id` still in the ring, or [`Evicted`] when some
    /// were already dropped from it (the caller should resync).
    pub(crate) fn replay_after(&self, last_id: u64) -> Result<Vec<Event>, Evicted> {
        let state = self.lock();
        let oldest = state
            .replay
            .front()
            .map_or(state.next_id + 1, |(id, _)| *id);
        if last_id < state.next_id && last_id + 1 < oldest {
            return Err(Evicted);
        }
        Ok(state
            .replay
            .iter()
            .filter(|(id, _)| *id > last_id)
            .cloned()
            .collect())
    }

    /// Marks everything a client could have missed as changed.
    pub(crate) fn resync(&self, watched: impl IntoIterator<Item = Arc<str>>) {
        let mut state = self.lock();
        state.list_changed = [true; 3];
        for uri in watched {
            state.updated.entry(uri).or_insert(None);
        }
        drop(state);
        self.wake();
    }

    /// Attaches a new stream, ending the one attached before (a message is
    /// delivered on exactly one stream). Returns the new stream's token.
    pub(crate) fn attach_stream(&self, parent: &CancellationToken) -> CancellationToken {
        let token = parent.child_token();
        if let Some(previous) = self.lock().stream.replace(token.clone()) {
            previous.cancel();
        }
        token
    }

    /// Waits until something may be pending.
    pub(crate) async fn wait(&self) {
        self.wake.notified().await;
    }

    /// The next event, or `Pending` with `cx`'s waker registered to be woken
    /// when something is queued. For one stream polled directly (the
    /// attached `GET /mcp` stream): no future, waiter node or lock per wait.
    pub(crate) fn poll_next_event(
        &self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Event> {
        // Registered before looking, so a push after the look wakes it.
        self.waker.register(cx.waker());
        match self.next_event() {
            Some(event) => std::task::Poll::Ready(event),
            None => std::task::Poll::Pending,
        }
    }

    pub(crate) fn backlog(&self) -> Backlog {
        let state = self.lock();
        Backlog {
            pending: state.list_changed.iter().filter(|p| **p).count()
                + state.updated.len()
                + state.messages.len(),
            replay: state.replay.len(),
            dropped: state.dropped,
        }
    }
}

/// The `notifications/resources/updated` frame of `uri`, with `_meta`
/// `tag` when given. The hub builds the untagged one once per update and
/// shares it with every subscriber of the URI.
pub(crate) fn updated_frame(uri: &str, tag: Option<&str>) -> Arc<str> {
    let mut params = String::with_capacity(uri.len() + 64);
    params.push_str("{\"uri\":");
    crate::protocol::push_json_string(&mut params, uri);
    if let Some(tag) = tag {
        params.push_str(",\"_meta\":");
        params.push_str(tag);
    }
    params.push('}');
    crate::protocol::notification_frame("notifications/resources/updated", Some(&params)).into()
}

/// The three untagged `list_changed` frames, built once for the process.
fn untagged_list_changed() -> &'static [Arc<str>; 3] {
    static FRAMES: std::sync::OnceLock<[Arc<str>; 3]> = std::sync::OnceLock::new();
    FRAMES.get_or_init(|| {
        NOTIFIED_KINDS.map(|kind| {
            crate::protocol::notification_frame(kind.list_changed_method(), None).into()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn methods(outbox: &Outbox) -> Vec<String> {
        std::iter::from_fn(|| outbox.next_event())
            .map(|(_, f)| {
                serde_json::from_str::<serde_json::Value>(&f).unwrap()["method"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    }

    #[test]
    fn bursts_coalesce_per_kind_and_per_uri() {
        let outbox = Outbox::default();
        for _ in 0..100 {
            outbox.mark_list_changed(ListKind::Tools);
            outbox.mark_list_changed(ListKind::Templates);
            outbox.mark_updated("a+x".into());
        }
        assert_eq!(
            methods(&outbox),
            [
                "notifications/tools/list_changed",
                "notifications/resources/list_changed",
                "notifications/resources/updated"
            ]
        );
    }

    #[test]
    fn a_forgotten_update_is_not_delivered_and_others_are() {
        let outbox = Outbox::default();
        outbox.mark_updated("a+x".into());
        outbox.mark_updated("a+y".into());
        outbox.forget_updated("a+x");
        let delivered: Vec<String> = std::iter::from_fn(|| outbox.next_event())
            .map(|(_, f)| {
                serde_json::from_str::<serde_json::Value>(&f).unwrap()["params"]["uri"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(delivered, ["a+y"]);
    }

    #[test]
    fn messages_drop_oldest_when_full() {
        let outbox = Outbox::default();
        for i in 0..(MESSAGE_CAPACITY + 10) {
            outbox.push_message(format!("{{\"method\":\"m\",\"n\":{i}}}").into());
        }
        let backlog = outbox.backlog();
        assert_eq!((backlog.pending, backlog.dropped), (MESSAGE_CAPACITY, 10));
        let (_, first) = outbox.next_event().unwrap();
        assert!(first.contains("\"n\":10"), "{first}");
    }

    #[test]
    fn replay_returns_missed_events_or_asks_for_resync() {
        let outbox = Outbox::default();
        for i in 0..3 {
            outbox.push_message(format!("{{\"n\":{i}}}").into());
        }
        let ids: Vec<u64> = std::iter::from_fn(|| outbox.next_event())
            .map(|(id, _)| id)
            .collect();
        assert_eq!(ids, [1, 2, 3]);
        let replayed: Vec<u64> = outbox
            .replay_after(1)
            .unwrap()
            .iter()
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(replayed, [2, 3]);
        assert!(outbox.replay_after(3).unwrap().is_empty());
        for i in 0..(REPLAY_CAPACITY + 5) {
            outbox.push_message(format!("{{\"n\":{i}}}").into());
            outbox.next_event();
        }
        assert!(outbox.replay_after(1).is_err());
    }
}

#[cfg(test)]
mod delivery_tests;
