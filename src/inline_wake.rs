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
//!
//! [`OwnWakes`] is the other half, for a future that shares its task
//! with others polled in the same poll: hyper's connection polls a
//! request's handler each time the connection's task runs, and the task
//! runs once per request for nothing but hyper's own bookkeeping (taking
//! the request body's last chunk wakes the connection that sent it). The
//! handler is a deep chain of futures down to the upstream's answer;
//! [`OwnWakes`] polls it only when one of its own wakers fired since its
//! last poll, and answers `Pending` at once otherwise.

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

/// Whether the future an [`OwnWakes`] holds was woken since its last
/// poll, and the task to wake when it is. One per connection: its
/// requests are handled one at a time, and a late wake left over from an
/// earlier one costs the next at most a poll it did not need.
pub(crate) struct WakeFilter {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl WakeFilter {
    pub(crate) fn new() -> Arc<WakeFilter> {
        Arc::new(WakeFilter {
            woken: AtomicBool::new(false),
            task: AtomicWaker::new(),
        })
    }
}

impl Wake for WakeFilter {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        self.task.wake();
    }
}

/// Wraps `future` so that it is polled first, and then only after one of
/// its own wakers fired.
pub(crate) fn own_wakes<F: Future>(future: F, filter: &Arc<WakeFilter>) -> OwnWakes<F> {
    OwnWakes {
        future,
        filter: filter.clone(),
        waker: Waker::from(filter.clone()),
        started: false,
    }
}

pin_project_lite::pin_project! {
    /// See [`own_wakes`]. The future is held in place, not boxed.
    pub(crate) struct OwnWakes<F> {
        #[pin]
        future: F,
        filter: Arc<WakeFilter>,
        // The waker handed to the inner future: the filter's.
        waker: Waker,
        started: bool,
    }
}

impl<F: Future> Future for OwnWakes<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        // Registered before the flag is read: a wake between the two is
        // seen in the flag, one after it reaches the task.
        this.filter.task.register(cx.waker());
        let woken = this.filter.woken.swap(false, Ordering::SeqCst);
        if *this.started && !woken {
            return Poll::Pending;
        }
        *this.started = true;
        this.future.poll(&mut Context::from_waker(this.waker))
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

    /// Pending until its own waker has fired `times` times; counts polls
    /// and hands its waker out.
    struct WaitsForWakes {
        times: usize,
        polls: Arc<std::sync::atomic::AtomicUsize>,
        waker: Arc<std::sync::Mutex<Option<Waker>>>,
        woken: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Future for WaitsForWakes {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.woken.load(Ordering::SeqCst) >= self.times {
                return Poll::Ready(());
            }
            *self.waker.lock().expect("not poisoned") = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    #[test]
    fn a_future_is_polled_again_only_after_its_own_wake() {
        let polls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let handed = Arc::new(std::sync::Mutex::new(None::<Waker>));
        let woken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let filter = WakeFilter::new();
        let mut future = std::pin::pin!(own_wakes(
            WaitsForWakes {
                times: 2,
                polls: polls.clone(),
                waker: handed.clone(),
                woken: woken.clone(),
            },
            &filter,
        ));
        let outer = Arc::new(Counter(0.into()));
        let waker = Waker::from(outer.clone());
        let mut cx = Context::from_waker(&waker);
        let wake_inner = || {
            woken.fetch_add(1, Ordering::SeqCst);
            let inner = handed.lock().expect("not poisoned").clone();
            inner.expect("the future handed out its waker").wake();
        };
        assert!(future.as_mut().poll(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), 1, "the first poll goes in");
        // The task polled again for another reason: the future is not.
        for _ in 0..3 {
            assert!(future.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(polls.load(Ordering::SeqCst), 1);
        assert_eq!(outer.0.load(Ordering::SeqCst), 0);
        // Its own wake reaches the task, and the next poll goes in.
        wake_inner();
        assert_eq!(outer.0.load(Ordering::SeqCst), 1, "the task was woken");
        assert!(future.as_mut().poll(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
        assert!(future.as_mut().poll(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
        wake_inner();
        assert!(future.as_mut().poll(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn own_wakes_reach_a_spawned_task() {
        let filter = WakeFilter::new();
        let (tx, rx) = tokio::sync::oneshot::channel::<u8>();
        let waiting = tokio::spawn(own_wakes(rx, &filter));
        tokio::task::yield_now().await;
        tx.send(9).expect("the receiver waits");
        assert_eq!(waiting.await.expect("no panic").expect("sent"), 9);
    }
}
