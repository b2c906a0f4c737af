//! Resumable SSE answers to POST /mcp for legacy-era (session) clients, as
//! the 2025-11-25 Streamable HTTP transport allows ("Resumability and
//! Redelivery").
//!
//! Every request of a session that is answered with `text/event-stream`
//! gets a *POST stream* numbered within the session. Its events carry the
//! id `<stream>-<seq>` (`3-0`, `3-1`, ...), which cannot be mistaken for the
//! plain numbers of the session's notification stream (`GET /mcp` without
//! such an id). Sessions that negotiated 2025-11-25 or later get a
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
//! The buffers and their bounds live in [`super::post_streams`]. The pump
//! runs on the gateway's task tracker, in the session's span. While nothing
//! happens, a stream carries an SSE comment every `http.sse_keepalive`.

use std::fmt::Write as _;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tokio::sync::mpsc;
use tracing::Instrument as _;

use super::AppState;
use super::post_streams::{Next, Reader, UnknownStream};
use super::session::Session;
use super::wire::Refusal;
use crate::protocol::code;

/// The reconnection delay sent in the `retry:` field.
pub(crate) const RETRY: Duration = Duration::from_millis(1000);
/// A floor for the keep-alive interval (`http.sse_keepalive`, never zero
/// when configured).
const MIN_KEEPALIVE: Duration = Duration::from_millis(100);
/// The first protocol version whose clients expect a priming event.
const PRIMING_SINCE: &str = "2025-11-25";

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
            match self.reader.next() {
                Next::Event(seq, frame) => {
                    let retry = std::mem::take(&mut self.retry_first).then_some(RETRY);
                    let id = event_id(self.reader.stream_id(), seq);
                    return Some((event(&id, retry, &frame), self));
                }
                Next::Done => return None,
                Next::Wait => {}
            }
            tokio::select! {
                more = self.reader.wait() => {
                    if !more {
                        return None;
                    }
                }
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
pub(crate) fn respond(
    state: &AppState,
    session: &Session,
    mut frames: mpsc::Receiver<String>,
) -> Response {
    let (stream, reader) = session.resumable.open();
    tracing::debug!(parent: &session.span, stream = stream.id, "resumable POST stream opened");
    // Ends when the call's frames do: the call ends on its own, or is
    // cancelled when the session closes. One pump per call in flight, so it
    // needs no cap of its own.
    let pump = async move {
        while let Some(frame) = frames.recv().await {
            stream.push(frame.into());
        }
        stream.finish();
    };
    state.tracker.spawn(pump.instrument(session.span.clone()));
    let primes = primes(session);
    let priming = primes.then(|| event(&event_id(reader.stream_id(), 0), Some(RETRY), ""));
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
pub(crate) fn get(state: &AppState, session: &Session, headers: &HeaderMap) -> Option<Response> {
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
            Refusal::new(StatusCode::GONE, code::INVALID_REQUEST, format!(
                    "Last-Event-ID {value:?} names no resumable stream of this session (unknown, or expired after its answer)"
                )).into_response()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
