//! A future that answers its own wake-ups in place.
//!
//! A call's answer usually arrives while the call's own task is being
//! polled: the POST it drives reads the answer and completes the oneshot
//! the same task waits on, and ending the exchange closes a channel the
//! same task listens to. Each such wake marks the running task notified,
//! and tokio then re-queues it as if it had yielded and wakes a parked
//! worker thread to share the work: a futex wake and a thread that wakes
//! up to find nothing, per call. [`InlineWakes`] polls its future with a
//! waker of its own: a wake that comes while that very poll runs only
//! asks for one more poll on the spot; any other wake goes to the task's
//! waker as usual. After a few polls in a row it yields as before, so a
//! future that keeps waking itself (tokio's cooperative budget) still
//! gives the worker back.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// Polls in a row before a self-wake goes to the scheduler after all.
const MAX_POLLS_IN_PLACE: usize = 4;

/// Wraps `future` so that wakes during its own poll re-poll it in place.
pub(crate) fn inline_wakes<F: Future>(future: F) -> InlineWakes<F> {
    InlineWakes {
        future,
        state: Arc::new(State {
            task: AtomicWaker::new(),
            polling: AtomicBool::new(false),
            woken: AtomicBool::new(false),
        }),
        waker: None,
    }
}

pin_project_lite::pin_project! {
    /// See [`inline_wakes`]. The future is held in place, not boxed.
    pub(crate) struct InlineWakes<F> {
        #[pin]
        future: F,
        state: Arc<State>,
        // The waker handed to the inner future, built once.
        waker: Option<Waker>,
    }
}

struct State {
    /// The waker of the task that polls us.
    task: AtomicWaker,
    /// Set while the inner future is being polled.
    polling: AtomicBool,
    /// A wake came while `polling` was set.
    woken: AtomicBool,
}

impl Wake for State {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.polling.load(Ordering::SeqCst) {
            self.woken.store(true, Ordering::SeqCst);
            // The poll may have ended before it could see `woken`.
            if self.polling.load(Ordering::SeqCst) {
                return;
            }
        }
        self.task.wake();
    }
}

impl<F: Future> Future for InlineWakes<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut this = self.project();
        let state: &Arc<State> = this.state;
        state.task.register(cx.waker());
        let waker = this
            .waker
            .get_or_insert_with(|| Waker::from(state.clone()))
            .clone();
        let mut inner = Context::from_waker(&waker);
        for _ in 0..MAX_POLLS_IN_PLACE {
            state.woken.store(false, Ordering::SeqCst);
            state.polling.store(true, Ordering::SeqCst);
            let polled = this.future.as_mut().poll(&mut inner);
            state.polling.store(false, Ordering::SeqCst);
            if polled.is_ready() {
                return polled;
            }
            if !state.woken.swap(false, Ordering::SeqCst) {
                return Poll::Pending;
            }
        }
        // Still waking itself: let the scheduler run others first.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A future that wakes itself `times` times during its own polls.
    struct SelfWaking {
        times: usize,
        polls: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Future for SelfWaking {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.times == 0 {
                return Poll::Ready(());
            }
            self.times -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    /// Counts the wakes the outer task gets.
    struct Counter(std::sync::atomic::AtomicUsize);
    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_wake_during_the_poll_is_answered_in_place() {
        let polls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut future = inline_wakes(SelfWaking {
            times: 2,
            polls: polls.clone(),
        });
        let outer = Arc::new(Counter(0.into()));
        let waker = Waker::from(outer.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut future).poll(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 3);
        assert_eq!(outer.0.load(Ordering::SeqCst), 0, "the task was not woken");
    }

    #[test]
    fn a_future_that_keeps_waking_itself_still_yields() {
        let polls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut future = inline_wakes(SelfWaking {
            times: 100,
            polls: polls.clone(),
        });
        let outer = Arc::new(Counter(0.into()));
        let waker = Waker::from(outer.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut future).poll(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), MAX_POLLS_IN_PLACE);
        assert_eq!(outer.0.load(Ordering::SeqCst), 1, "it yielded once");
    }

    #[tokio::test]
    async fn a_wake_from_elsewhere_reaches_the_task() {
        let (tx, rx) = tokio::sync::oneshot::channel::<u8>();
        let waiting = tokio::spawn(inline_wakes(rx));
        tokio::task::yield_now().await;
        tx.send(7).expect("the receiver waits");
        assert_eq!(waiting.await.expect("no panic").expect("sent"), 7);
    }
}
