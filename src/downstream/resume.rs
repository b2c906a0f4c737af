//! Resumable SSE answers to POST /mcp for legacy-era (session) clients, as
//! the 2025-11-25 Streamable HTTP transport allows ("Resumability and
//! Redelivery").
//!
//! Every request of a session that is answered with `text/event-stream`
//! gets a *POST stream* numbered within the session. Its events carry the
//! id `<stream>-<seq>` (`3-0`, `3-1`, ...), which cannot be mistaken for the
//! plain numbers of the session's notification stream (`GET /mcp`, see
//! [`super::stream`]). Sessions that negotiated 2025-11-25 or later get a
//! priming event first: id `<stream>-0`, `retry:` [`RETRY`] and an empty
//! `data:` field; older clients, which may not parse an empty event, get
//! `retry:` on the first real event instead.
//!
//! The frames of the call (progress, then the response) are pumped by a
//! task into a buffer owned by the session, not into the connection, so a
//! call keeps running when its client's connection drops (a 2025-era call
//! is never cancelled by that). `GET /mcp` with `Last-Event-ID:
//! <stream>-<seq>` on the same session replays the buffered events after
//! `seq`, continues live until the response and ends; the newest reader of
//! a stream replaces the one before, so each event goes out on one
//! connection at a time. A `Last-Event-ID` naming no stream of the session
//! (never opened, expired, or an event the stream has not reached) is
//! answered 410 Gone with a JSON-RPC error: not 404, which would tell the
//! client that its whole session is gone.
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
//! the session's calls. While nothing happens, a stream carries an SSE
//! comment every `http.sse_keepalive`.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::AppState;
use super::http::rpc_error_response;
use super::session::Session;
use crate::protocol::code;

/// The reconnection delay sent in the `retry:` field.
pub const RETRY: Duration = Duration::from_millis(1000);
/// Events kept per POST stream; older ones are dropped first.
pub const EVENTS_PER_STREAM: usize = 64;
/// Finished POST streams kept per session for a late resume.
pub const FINISHED_KEPT: usize = 16;
/// How long a finished POST stream stays resumable.
pub const FINISHED_TTL: Duration = Duration::from_secs(300);
/// A floor for the keep-alive interval (`http.sse_keepalive`, never zero
/// when configured).
const MIN_KEEPALIVE: Duration = Duration::from_millis(100);
/// The first protocol version whose clients expect a priming event.
const PRIMING_SINCE: &str = "2025-11-25";

/// A session's POST streams, live and recently finished.
pub struct PostStreams {
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
pub struct UnknownStream;

impl PostStreams {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new stream and the reader of its first connection.
    fn open(&self) -> (Arc<Stream>, Reader) {
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
    fn resume(&self, id: u64, after: u64) -> Result<Reader, UnknownStream> {
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
    pub fn close(&self) {
        let mut table = self.lock();
        table.closed = true;
        table.streams.clear();
    }

    /// Applies the time and count bounds (called by the session sweeper).
    pub fn expire(&self) {
        self.lock().trim(Instant::now());
    }

    /// Streams kept for resuming, live or finished.
    pub fn len(&self) -> usize {
        self.lock().streams.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of stream buffers still allocated, including those only a
    /// pump task or a reader holds.
    pub fn watch_buffers(&self) -> watch::Receiver<usize> {
        self.buffers.subscribe()
    }

    /// The sequence number of stream `id`'s latest event, as it changes.
    pub fn watch_stream(&self, id: u64) -> Option<watch::Receiver<u64>> {
        self.lock().streams.get(&id).map(|s| s.last.subscribe())
    }
}

/// One POST stream's buffered events.
struct Stream {
    id: u64,
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
    fn push(&self, frame: Arc<str>) {
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
    fn finish(&self) {
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

enum Next {
    Event(u64, Arc<str>),
    Done,
    Wait,
}

/// One connection reading a stream.
struct Reader {
    stream: Arc<Stream>,
    after: u64,
    /// Cancelled when a newer connection takes over the stream.
    token: CancellationToken,
    changed: watch::Receiver<u64>,
}

/// What an SSE body writes before and between the stream's events.
struct SseBody {
    reader: Reader,
    /// The priming event, sent first.
    priming: Option<Bytes>,
    /// Put `retry:` on the first event (when there is no priming event).
    retry_first: bool,
    keepalive: Duration,
}

impl SseBody {
    async fn next(mut self) -> Option<(Bytes, Self)> {
        if let Some(priming) = self.priming.take() {
            return Some((priming, self));
        }
        loop {
            if self.reader.token.is_cancelled() {
                return None;
            }
            match self.reader.stream.next_after(self.reader.after) {
                Next::Event(seq, frame) => {
                    self.reader.after = seq;
                    let retry = std::mem::take(&mut self.retry_first).then_some(RETRY);
                    let id = event_id(self.reader.stream.id, seq);
                    return Some((event(&id, retry, &frame), self));
                }
                Next::Done => return None,
                Next::Wait => {}
            }
            tokio::select! {
                changed = self.reader.changed.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                }
                () = self.reader.token.cancelled() => return None,
                () = tokio::time::sleep(self.keepalive.max(MIN_KEEPALIVE)) => {
                    return Some((Bytes::from_static(b":\n\n"), self));
                }
            }
        }
    }

    fn into_response(self) -> Response {
        let chunks = futures_util::stream::unfold(self, Self::next);
        let chunks = futures_util::StreamExt::map(chunks, Ok::<_, std::convert::Infallible>);
        (
            [
                (header::CONTENT_TYPE, "text/event-stream"),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            Body::from_stream(chunks),
        )
            .into_response()
    }
}

/// `<stream>-<seq>`.
fn event_id(stream: u64, seq: u64) -> String {
    format!("{stream}-{seq}")
}

/// The stream and position a `Last-Event-ID` names, if it names a POST
/// stream at all (the notification stream's ids are plain numbers).
fn parse_event_id(value: &str) -> Option<(u64, u64)> {
    let (stream, seq) = value.trim().split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(stream) || !digits(seq) {
        return None;
    }
    Some((stream.parse().ok()?, seq.parse().ok()?))
}

/// One SSE event. Line breaks in `data` (JSON whitespace) start new `data:`
/// lines; empty `data` is written as an empty `data:` field.
fn event(id: &str, retry: Option<Duration>, data: &str) -> Bytes {
    let mut out = String::with_capacity(data.len() + id.len() + 32);
    let _ = writeln!(out, "id: {id}");
    if let Some(retry) = retry {
        let _ = writeln!(out, "retry: {}", retry.as_millis());
    }
    let mut lines = data
        .split(['\r', '\n'])
        .filter(|l| !l.is_empty())
        .peekable();
    if lines.peek().is_none() {
        out.push_str("data:\n");
    }
    for line in lines {
        let _ = writeln!(out, "data: {line}");
    }
    out.push('\n');
    Bytes::from(out)
}

/// Whether the session's clients expect a priming event.
fn primes(session: &Session) -> bool {
    session
        .protocol_version
        .get()
        .is_none_or(|v| v.as_str() >= PRIMING_SINCE)
}

/// The `text/event-stream` answer to a session's request: the frames go
/// into a new resumable stream of the session, pumped by a task, and this
/// response is that stream's first reader.
pub fn respond(
    state: &AppState,
    session: &Session,
    mut frames: mpsc::Receiver<String>,
) -> Response {
    let (stream, reader) = session.resumable.open();
    tracing::debug!(parent: &session.span, stream = stream.id, "resumable POST stream opened");
    tokio::spawn(async move {
        while let Some(frame) = frames.recv().await {
            stream.push(frame.into());
        }
        stream.finish();
    });
    let primes = primes(session);
    let priming = primes.then(|| event(&event_id(reader.stream.id, 0), Some(RETRY), ""));
    SseBody {
        reader,
        priming,
        retry_first: !primes,
        keepalive: state.http.sse_keepalive,
    }
    .into_response()
}

/// `GET /mcp` whose `Last-Event-ID` names a POST stream: that stream's
/// events after it, then live ones until the response. `None` when the
/// header is absent or names no POST stream (the notification stream
/// handles it).
pub fn get(state: &AppState, session: &Session, headers: &HeaderMap) -> Option<Response> {
    let value = headers.get("last-event-id")?.to_str().ok()?;
    let (id, after) = parse_event_id(value)?;
    Some(match session.resumable.resume(id, after) {
        Ok(reader) => {
            tracing::info!(parent: &session.span, stream = id, after, "POST stream resumed");
            SseBody {
                reader,
                priming: None,
                retry_first: false,
                keepalive: state.http.sse_keepalive,
            }
            .into_response()
        }
        Err(UnknownStream) => {
            tracing::info!(parent: &session.span, last_event_id = value, "resume of an unknown or expired POST stream refused");
            rpc_error_response(
                StatusCode::GONE,
                None,
                code::INVALID_REQUEST,
                format!(
                    "Last-Event-ID {value:?} names no resumable stream of this session (unknown, or expired after its answer)"
                ),
            )
        }
    })
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
    fn event_ids_name_the_stream_and_only_post_streams_parse() {
        assert_eq!(event_id(3, 0), "3-0");
        assert_eq!(parse_event_id(" 3-17 "), Some((3, 17)));
        for other in ["17", "", "-", "3-", "-1", "a-1", "3-1-2", "+3-1", "3--1"] {
            assert_eq!(parse_event_id(other), None, "{other}");
        }
    }

    #[test]
    fn priming_event_has_an_empty_data_field_and_retry() {
        let bytes = event("1-0", Some(RETRY), "");
        assert_eq!(&bytes[..], b"id: 1-0\nretry: 1000\ndata:\n\n");
        let bytes = event("1-1", None, "{\"a\":\n 1}\r\n");
        assert_eq!(&bytes[..], b"id: 1-1\ndata: {\"a\":\ndata:  1}\n\n");
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
