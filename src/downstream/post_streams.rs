//! A session's POST streams: the buffers that hold the frames of a call
//! answered with `text/event-stream`, so the answer can be resumed (the
//! `resume` module writes them to the wire). The session owns its
//! [`PostStreams`]; a pump task writes a stream, and the one connection
//! reading it at a time holds a [`Reader`].
//!
//! Bounds: each stream keeps its last [`EVENTS_PER_STREAM`] events; when
//! full the oldest is dropped (progress only: the response is the last
//! event, so it is never dropped), and a client resuming from before the
//! oldest kept event gets the events from there. A finished stream stays
//! resumable for [`FINISHED_TTL`], and a session keeps at most
//! [`FINISHED_KEPT`] finished streams (the oldest go first); the session
//! sweeper and every new stream enforce both. Closing the session drops
//! every stream from its table; a pump still running keeps its buffer only
//! until its call ends, which the close brings about at once by cancelling
//! the session's calls.
//!
//! A leaf: it imports no other downstream module.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Events kept per POST stream; older ones are dropped first.
pub(crate) const EVENTS_PER_STREAM: usize = 64;
/// Finished POST streams kept per session for a late resume.
pub(crate) const FINISHED_KEPT: usize = 16;
/// How long a finished POST stream stays resumable.
pub(crate) const FINISHED_TTL: Duration = Duration::from_secs(300);

/// A session's POST streams, live and recently finished.
pub(crate) struct PostStreams {
    table: Mutex<Table>,
    /// Stream buffers alive anywhere (table, pump tasks, readers).
    buffers: Arc<watch::Sender<usize>>,
}

impl Default for PostStreams {
    fn default() -> Self {
        Self {
            table: Mutex::default(),
            buffers: Arc::new(watch::Sender::new(0)),
        }
    }
}

#[derive(Default)]
struct Table {
    next_id: u64,
    streams: BTreeMap<u64, Arc<Stream>>,
    /// Set when the session closed: new streams are no longer kept.
    closed: bool,
}

impl Table {
    /// Drops finished streams past their time, then the oldest finished
    /// ones beyond the count.
    fn trim(&mut self, now: Instant) {
        self.streams.retain(|_, s| {
            s.finished_at()
                .is_none_or(|at| now.saturating_duration_since(at) < FINISHED_TTL)
        });
        let mut finished: Vec<(Instant, u64)> = self
            .streams
            .iter()
            .filter_map(|(id, s)| s.finished_at().map(|at| (at, *id)))
            .collect();
        if finished.len() > FINISHED_KEPT {
            finished.sort_unstable();
            let excess = finished.len() - FINISHED_KEPT;
            for (_, id) in &finished[..excess] {
                self.streams.remove(id);
            }
        }
    }
}

/// The resume target named by a `Last-Event-ID` is not there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UnknownStream;

impl PostStreams {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new stream and the reader of its first connection.
    pub(crate) fn open(&self) -> (Arc<Stream>, Reader) {
        let mut table = self.lock();
        table.next_id += 1;
        let stream = Arc::new(Stream::new(table.next_id, self.buffers.clone()));
        if !table.closed {
            table.trim(Instant::now());
            table.streams.insert(stream.id, stream.clone());
        }
        drop(table);
        let reader = stream.attach(0);
        (stream, reader)
    }

    /// A reader of stream `id` from after event `after`, replacing the
    /// stream's current reader.
    pub(crate) fn resume(&self, id: u64, after: u64) -> Result<Reader, UnknownStream> {
        let mut table = self.lock();
        table.trim(Instant::now());
        let stream = table.streams.get(&id).cloned().ok_or(UnknownStream)?;
        drop(table);
        if after > stream.last() {
            return Err(UnknownStream);
        }
        Ok(stream.attach(after))
    }

    /// Forgets every stream (the session closed).
    pub(crate) fn close(&self) {
        let mut table = self.lock();
        table.closed = true;
        table.streams.clear();
    }

    /// Applies the time and count bounds (called by the session sweeper).
    pub(crate) fn expire(&self) {
        self.lock().trim(Instant::now());
    }

    /// Streams kept for resuming, live or finished.
    pub(crate) fn len(&self) -> usize {
        self.lock().streams.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of stream buffers still allocated, including those only a
    /// pump task or a reader holds.
    pub(crate) fn watch_buffers(&self) -> watch::Receiver<usize> {
        self.buffers.subscribe()
    }

    /// The sequence number of stream `id`'s latest event, as it changes.
    pub(crate) fn watch_stream(&self, id: u64) -> Option<watch::Receiver<u64>> {
        self.lock().streams.get(&id).map(|s| s.last.subscribe())
    }
}

/// One POST stream's buffered events; its pump task writes it.
pub(crate) struct Stream {
    pub(crate) id: u64,
    buf: Mutex<Buf>,
    /// The sequence number of the latest event; bumped also when the stream
    /// finishes, so readers wake for both.
    last: watch::Sender<u64>,
    buffers: Arc<watch::Sender<usize>>,
}

#[derive(Default)]
struct Buf {
    /// `(seq, frame)`, seq counting from 1 (0 is the priming event).
    events: VecDeque<(u64, Arc<str>)>,
    /// Events dropped from the front because the buffer was full.
    evicted: u64,
    /// When the response was added (the frames ended).
    finished: Option<Instant>,
    /// Cancels the connection currently reading, when another replaces it.
    reader: Option<CancellationToken>,
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.buffers.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Stream {
    fn new(id: u64, buffers: Arc<watch::Sender<usize>>) -> Self {
        buffers.send_modify(|n| *n += 1);
        Self {
            id,
            buf: Mutex::default(),
            last: watch::Sender::new(0),
            buffers,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Buf> {
        self.buf.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn last(&self) -> u64 {
        *self.last.borrow()
    }

    fn finished_at(&self) -> Option<Instant> {
        self.lock().finished
    }

    /// Appends one frame; when full, the oldest event makes room.
    pub(crate) fn push(&self, frame: Arc<str>) {
        let mut buf = self.lock();
        if buf.events.len() >= EVENTS_PER_STREAM {
            buf.events.pop_front();
            buf.evicted += 1;
        }
        let seq = self.last() + 1;
        buf.events.push_back((seq, frame));
        drop(buf);
        self.last.send_replace(seq);
    }

    /// Marks the stream complete: its last event was the response.
    pub(crate) fn finish(&self) {
        self.lock().finished = Some(Instant::now());
        self.last.send_modify(|_| {});
    }

    fn attach(self: &Arc<Self>, after: u64) -> Reader {
        let token = CancellationToken::new();
        if let Some(previous) = self.lock().reader.replace(token.clone()) {
            previous.cancel();
        }
        Reader {
            stream: self.clone(),
            after,
            token,
            changed: self.last.subscribe(),
        }
    }

    /// The first event after `after`, or whether the stream is over.
    fn next_after(&self, after: u64) -> Next {
        let buf = self.lock();
        let start = buf.events.partition_point(|(seq, _)| *seq <= after);
        match buf.events.get(start) {
            Some((seq, frame)) => {
                if *seq > after + 1 {
                    tracing::debug!(
                        stream = self.id,
                        missed = *seq - after - 1,
                        "resumed before the oldest kept event; those events were dropped"
                    );
                }
                Next::Event(*seq, frame.clone())
            }
            None if buf.finished.is_some() => Next::Done,
            None => Next::Wait,
        }
    }
}

/// What a reader finds next.
pub(crate) enum Next {
    /// The event with this sequence number.
    Event(u64, Arc<str>),
    /// The stream is over, or a newer reader took it over.
    Done,
    /// Nothing yet: wait with [`Reader::wait`].
    Wait,
}

/// One connection reading a stream.
pub(crate) struct Reader {
    stream: Arc<Stream>,
    after: u64,
    /// Cancelled when a newer connection takes over the stream.
    token: CancellationToken,
    changed: watch::Receiver<u64>,
}

impl Reader {
    /// The number of the stream it reads.
    pub(crate) fn stream_id(&self) -> u64 {
        self.stream.id
    }

    /// The next event after the last one taken (and takes it), or whether
    /// the stream is over for this reader.
    pub(crate) fn next(&mut self) -> Next {
        if self.token.is_cancelled() {
            return Next::Done;
        }
        let next = self.stream.next_after(self.after);
        if let Next::Event(seq, _) = &next {
            self.after = *seq;
        }
        next
    }

    /// Waits until the stream changes; false once a newer reader took the
    /// stream over (or its writer is gone).
    pub(crate) async fn wait(&mut self) -> bool {
        tokio::select! {
            changed = self.changed.changed() => changed.is_ok(),
            () = self.token.cancelled() => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(streams: &PostStreams, id: u64, after: u64) -> Vec<(u64, String)> {
        let reader = streams.resume(id, after).unwrap();
        let mut out = Vec::new();
        let mut at = after;
        while let Next::Event(seq, frame) = reader.stream.next_after(at) {
            out.push((seq, frame.to_string()));
            at = seq;
        }
        out
    }

    #[test]
    fn a_full_stream_drops_old_progress_but_never_the_response() {
        let streams = PostStreams::default();
        let (stream, _reader) = streams.open();
        for i in 0..(EVENTS_PER_STREAM + 10) {
            stream.push(format!("p{i}").into());
        }
        stream.push("response".into());
        stream.finish();
        let all = frames(&streams, stream.id, 0);
        assert_eq!(all.len(), EVENTS_PER_STREAM);
        assert_eq!(all.last().unwrap().1, "response");
        assert_eq!(all[0].0, 12, "the 11 oldest were dropped");
        let last = stream.last();
        assert_eq!(
            frames(&streams, stream.id, last - 1),
            [(last, "response".into())]
        );
        assert!(frames(&streams, stream.id, last).is_empty());
        assert_eq!(
            streams.resume(stream.id, last + 1).err(),
            Some(UnknownStream)
        );
    }

    #[test]
    fn a_newer_reader_replaces_the_older() {
        let streams = PostStreams::default();
        let (stream, first) = streams.open();
        let second = streams.resume(stream.id, 0).unwrap();
        assert!(first.token.is_cancelled());
        assert!(!second.token.is_cancelled());
    }

    #[test]
    fn finished_streams_are_bounded_in_count_and_time_and_freed_on_close() {
        let streams = PostStreams::default();
        let mut ids = Vec::new();
        for _ in 0..(FINISHED_KEPT + 3) {
            let (stream, _) = streams.open();
            stream.push("response".into());
            stream.finish();
            ids.push(stream.id);
        }
        let (live, live_reader) = streams.open();
        assert_eq!(streams.len(), FINISHED_KEPT + 1, "the oldest finished went");
        assert_eq!(streams.resume(ids[0], 0).err(), Some(UnknownStream));
        assert!(streams.resume(ids[ids.len() - 1], 0).is_ok());

        streams
            .lock()
            .trim(Instant::now() + FINISHED_TTL + Duration::from_secs(1));
        assert_eq!(streams.len(), 1, "only the live stream outlives the TTL");
        assert!(streams.resume(live.id, 0).is_ok());

        streams.close();
        assert!(streams.is_empty());
        assert_eq!(*streams.watch_buffers().borrow(), 1, "only `live` is held");
        drop(live);
        drop(live_reader);
        assert_eq!(*streams.watch_buffers().borrow(), 0);
        // A stream opened after the close still works but is not kept.
        let (late, _) = streams.open();
        assert!(streams.is_empty());
        assert_eq!(streams.resume(late.id, 0).err(), Some(UnknownStream));
    }
}
