//! Where frames for one client call go while the call is in flight: its
//! progress, the requests its upstream asks of its client, its log messages.
//!
//! A call that streams from the start (its client asked for progress, or a
//! modern call's log level) has an open channel. A 2025-era session's call
//! that its upstream only may ask something has a lazy one: no channel
//! exists until the first frame is sent, so the common call, asked
//! nothing, allocates and polls no channel at all. Its reply waits for the
//! answer or for [`CallStream::opened`], whichever comes first.

use std::sync::{Arc, Mutex, OnceLock};
use std::task::Poll;

use futures_util::task::AtomicWaker;
use tokio::sync::mpsc;

/// A call's frames for its client; cheap to clone, as routes and relays
/// each hold one.
#[derive(Clone)]
pub(crate) enum CallStream {
    /// The channel exists; the reply holds its receiver.
    Open(mpsc::Sender<String>),
    /// Opened by the first frame sent.
    Lazy(Arc<LazyStream>),
}

/// The channel of a [`CallStream::Lazy`], made when first needed.
pub(crate) struct LazyStream {
    capacity: usize,
    sender: OnceLock<mpsc::Sender<String>>,
    /// The receiving end, from the first frame until the reply takes it.
    receiver: Mutex<Option<mpsc::Receiver<String>>>,
    /// The reply waiting in [`CallStream::opened`].
    waiting: AtomicWaker,
}

impl CallStream {
    /// An open stream of `capacity` frames and its receiving end.
    pub(crate) fn open(capacity: usize) -> (CallStream, mpsc::Receiver<String>) {
        let (sender, receiver) = mpsc::channel(capacity);
        (CallStream::Open(sender), receiver)
    }

    /// A stream whose channel (of `capacity` frames) is made by the first
    /// frame sent on it.
    pub(crate) fn lazy(capacity: usize) -> CallStream {
        CallStream::Lazy(Arc::new(LazyStream {
            capacity,
            sender: OnceLock::new(),
            receiver: Mutex::new(None),
            waiting: AtomicWaker::new(),
        }))
    }

    /// The channel's sending end, opening a lazy stream: what is sent on
    /// it turns the call's reply into a stream.
    pub(crate) fn sender(&self) -> mpsc::Sender<String> {
        match self {
            CallStream::Open(sender) => sender.clone(),
            CallStream::Lazy(lazy) => lazy.sender(),
        }
    }

    /// Whether a frame has been sent (or the stream was open from the start).
    #[cfg(test)]
    pub(crate) fn is_open(&self) -> bool {
        match self {
            CallStream::Open(_) => true,
            CallStream::Lazy(lazy) => lazy.sender.get().is_some(),
        }
    }

    /// Queues `frame` without waiting; false when the client is this far
    /// behind or gone (the frame is dropped).
    pub(crate) fn try_send(&self, frame: String) -> bool {
        match self {
            CallStream::Open(sender) => sender.try_send(frame).is_ok(),
            CallStream::Lazy(lazy) => lazy.sender().try_send(frame).is_ok(),
        }
    }

    /// Resolves when the client's end is gone. A lazy stream that was
    /// never opened has no client end yet: it never resolves.
    pub(crate) async fn closed(&self) {
        match self {
            CallStream::Open(sender) => sender.closed().await,
            CallStream::Lazy(lazy) => match lazy.sender.get() {
                Some(sender) => sender.closed().await,
                None => std::future::pending().await,
            },
        }
    }

    /// For the call's reply: the receiving end, once the first frame has
    /// opened a lazy stream. An open stream's receiver is the reply's
    /// already, so this never resolves for one.
    pub(crate) async fn opened(&self) -> mpsc::Receiver<String> {
        let CallStream::Lazy(lazy) = self else {
            return std::future::pending().await;
        };
        std::future::poll_fn(|cx| {
            lazy.waiting.register(cx.waker());
            match lazy.take_receiver() {
                Some(receiver) => Poll::Ready(receiver),
                None => Poll::Pending,
            }
        })
        .await
    }
}

impl LazyStream {
    fn sender(&self) -> mpsc::Sender<String> {
        self.sender
            .get_or_init(|| {
                let (sender, receiver) = mpsc::channel(self.capacity);
                *self.receiver.lock().unwrap_or_else(|e| e.into_inner()) = Some(receiver);
                self.waiting.wake();
                sender
            })
            .clone()
    }

    fn take_receiver(&self) -> Option<mpsc::Receiver<String>> {
        self.receiver
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nothing is allocated for the channel until a frame is sent; the
    /// reply waiting for it is woken by that frame and reads it.
    #[tokio::test]
    async fn a_lazy_stream_opens_with_its_first_frame() {
        let stream = CallStream::lazy(4);
        let CallStream::Lazy(lazy) = &stream else {
            unreachable!()
        };
        assert!(lazy.sender.get().is_none());
        let waiting = tokio::spawn({
            let stream = stream.clone();
            async move {
                let mut frames = stream.opened().await;
                frames.recv().await
            }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        let relay = stream.clone();
        assert!(relay.try_send("first".into()));
        assert_eq!(waiting.await.unwrap().as_deref(), Some("first"));
    }

    /// A frame sent before the reply waits is not lost: the reply finds
    /// the receiver at its first poll.
    #[tokio::test]
    async fn a_frame_sent_before_the_reply_waits_is_kept() {
        let stream = CallStream::lazy(4);
        stream.sender().send("early".into()).await.unwrap();
        let mut frames = stream.opened().await;
        assert_eq!(frames.recv().await.as_deref(), Some("early"));
    }

    /// `closed` follows the client's end once the stream is open, and an
    /// unopened lazy stream is not closed.
    #[tokio::test(start_paused = true)]
    async fn closed_follows_the_receiver_once_open() {
        let stream = CallStream::lazy(1);
        let unopened = tokio::time::timeout(std::time::Duration::from_secs(5), stream.closed());
        assert!(unopened.await.is_err(), "an unopened stream is not closed");
        let sender = stream.sender();
        drop(stream.opened().await);
        stream.closed().await;
        assert!(sender.is_closed());
        let (open, receiver) = CallStream::open(1);
        drop(receiver);
        open.closed().await;
        assert!(!open.try_send("late".into()));
    }
}
