//! The response body of a `GET /mcp` notification stream: replayed events,
//! then live events pulled from the session's outbox, SSE-encoded, with a
//! keep-alive comment after each quiet interval.
//!
//! Polled by the connection's own task (hyper asks for the next frame): it
//! takes an event when one is pending, else registers the task's waker
//! with the outbox and returns `Pending`, so a delivery costs one wake-up
//! and one small buffer, and no future or waiter node is made per event.
//! The keep-alive timer is moved only when it fires, not per event.

use std::convert::Infallible;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{BufMut as _, Bytes, BytesMut};
use http_body::Frame;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::downstream::session::{Session, StreamGuard};
use crate::notify::outbox::Event;

/// The SSE comment sent after `interval` without an event.
const KEEP_ALIVE: &[u8] = b":\n\n";

/// One open notification stream's body.
pub(super) struct EventStream {
    replay: std::vec::IntoIter<Event>,
    session: Arc<Session>,
    /// Cancelled when a newer stream replaces this one, or on shutdown.
    token: CancellationToken,
    /// `token`, waited on once the outbox is empty.
    replaced: Pin<Box<WaitForCancellationFutureOwned>>,
    /// The session's end, waited on once the outbox is empty.
    closed: Pin<Box<WaitForCancellationFutureOwned>>,
    /// The waker `replaced` and `closed` were last polled with.
    armed: Option<std::task::Waker>,
    keep_alive: Pin<Box<Sleep>>,
    interval: Duration,
    /// When the last event or comment was handed to the connection.
    last_sent: Instant,
    ended: bool,
    /// Keeps the session from idling out while the stream is open.
    _guard: StreamGuard,
}

impl EventStream {
    pub(super) fn new(
        session: Arc<Session>,
        token: CancellationToken,
        guard: StreamGuard,
        replay: Vec<Event>,
        interval: Duration,
    ) -> Self {
        let now = Instant::now();
        Self {
            replay: replay.into_iter(),
            replaced: Box::pin(token.clone().cancelled_owned()),
            closed: Box::pin(session.closed.clone().cancelled_owned()),
            armed: None,
            session,
            token,
            keep_alive: Box::pin(tokio::time::sleep_until(now + interval)),
            interval,
            last_sent: now,
            ended: false,
            _guard: guard,
        }
    }

    fn sent(&mut self, bytes: Bytes) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.last_sent = Instant::now();
        Poll::Ready(Some(Ok(Frame::data(bytes))))
    }

    /// Whether the stream must end (replaced, shut down, session closed).
    fn is_over(&self) -> bool {
        self.token.is_cancelled() || self.session.closed.is_cancelled()
    }
}

impl http_body::Body for EventStream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        if let Some((id, frame)) = this.replay.next() {
            return this.sent(encode(id, &frame));
        }
        if this.is_over() {
            this.ended = true;
            return Poll::Ready(None);
        }
        if let Poll::Ready((id, frame)) = this.session.subscriber.outbox.poll_next_event(cx) {
            return this.sent(encode(id, &frame));
        }
        // Once registered with this task, a cancellation wakes it and
        // `is_over` sees it: no need to poll them again on every wait.
        if !this.armed.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            if this.replaced.as_mut().poll(cx).is_ready()
                || this.closed.as_mut().poll(cx).is_ready()
            {
                this.ended = true;
                return Poll::Ready(None);
            }
            this.armed = Some(cx.waker().clone());
        }
        while this.keep_alive.as_mut().poll(cx).is_ready() {
            let due = this.last_sent + this.interval;
            if Instant::now() >= due {
                this.keep_alive
                    .as_mut()
                    .reset(Instant::now() + this.interval);
                return this.sent(Bytes::from_static(KEEP_ALIVE));
            }
            this.keep_alive.as_mut().reset(due);
        }
        Poll::Pending
    }
}

/// One SSE event: `id: <id>`, then the frame as `data:` lines (a line
/// break in it starts a new `data:` line, as axum's encoder does), then
/// the blank line. One buffer of the exact size.
pub(super) fn encode(id: u64, frame: &str) -> Bytes {
    let mut number = itoa_buf(id);
    let digits = number.digits();
    let breaks = memchr::memchr2_iter(b'\n', b'\r', frame.as_bytes()).count();
    let mut out = BytesMut::with_capacity(4 + digits.len() + 7 + frame.len() + breaks * 6 + 2);
    out.put_slice(b"id: ");
    out.put_slice(digits);
    out.put_slice(b"\ndata: ");
    let bytes = frame.as_bytes();
    let mut last = 0;
    for at in memchr::memchr2_iter(b'\n', b'\r', bytes) {
        out.put_slice(&bytes[last..=at]);
        out.put_slice(b"data: ");
        last = at + 1;
    }
    out.put_slice(&bytes[last..]);
    out.put_slice(b"\n\n");
    out.freeze()
}

/// The decimal digits of a `u64`, without an allocation.
struct Digits {
    buf: [u8; 20],
    start: usize,
}

impl Digits {
    fn digits(&mut self) -> &[u8] {
        &self.buf[self.start..]
    }
}

fn itoa_buf(mut n: u64) -> Digits {
    let mut buf = [0u8; 20];
    let mut start = buf.len();
    loop {
        start -= 1;
        buf[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    Digits { buf, start }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_like_axum() {
        for (id, frame) in [
            (1, r#"{"jsonrpc":"2.0","method":"m"}"#),
            (0, "a\nb"),
            (18_446_744_073_709_551_615, "x\r\ny\rz\n"),
        ] {
            let ours = encode(id, frame);
            let theirs = axum_finalized(id, frame);
            assert_eq!(ours, theirs, "{id} {frame:?}");
        }
    }

    /// What axum's `Sse` sends for the same event.
    fn axum_finalized(id: u64, frame: &str) -> Bytes {
        use axum::response::IntoResponse as _;
        use http_body_util::BodyExt as _;
        let event = axum::response::sse::Event::default()
            .id(id.to_string())
            .data(frame);
        let stream = futures_util::stream::iter([Ok::<_, Infallible>(event)]);
        let response = axum::response::sse::Sse::new(stream).into_response();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime
            .block_on(response.into_body().collect())
            .unwrap()
            .to_bytes()
    }
}
