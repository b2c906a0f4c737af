//! Boxing a large future where it is built.
//!
//! `Box::pin(make())` builds the future on the stack and then copies all
//! of it to the heap: every byte of its largest state, although a future
//! that has not started holds only its arguments. The call path's
//! outermost future is about 10 KB, so that copy was the largest single
//! `memcpy` of a call. [`boxed`] allocates first and builds the future in
//! the allocation, which lets the compiler write it there directly (for
//! that future, callgrind counts 11 k fewer `memcpy` instructions a call).
//!
//! [`rare`] is for the paths a call seldom takes (opening a connection,
//! a retry, a parked or streamed call). `Box::pin(rare_path()).await`
//! moves the future's state to the heap but still polls the concrete
//! type, so the compiler may inline that poll into the caller's, and the
//! caller's stack frame grows by the rare path's locals. Measured on the
//! call path, that made one poll frame 44 KB and a call's stack about
//! 70 KB deep, more than the L1 data cache holds. [`rare`] erases the
//! type, so the rare poll is an indirect call with a frame of its own,
//! and builds the future in a frame of its own too.
//!
//! An `async fn` holds each argument twice: as passed, in the part of its
//! state every suspend point keeps, and as bound in its body, where the
//! first thing the body does is copy it. A function on the call path that
//! takes a large value (the request, the resolved call, a flight) is
//! therefore a plain function returning an `async move` block, which uses
//! what it captured in place: `scripts/future-sizes.sh --layout NAME`
//! shows an argument as both an `upvar` and a local when it is held
//! twice.

use std::future::Future;
use std::pin::Pin;

/// `Box::pin(make())`, with the future built in its allocation.
#[inline(always)]
pub(crate) fn boxed<F: Future>(make: impl FnOnce() -> F) -> Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}

/// A rare path's future: on the heap, polled through its vtable.
pub(crate) type Rare<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// `Box::pin(make())` for a path a call seldom takes, type-erased so its
/// poll is never inlined into the caller's (see the header).
#[inline(never)]
pub(crate) fn rare<'a, F>(make: impl FnOnce() -> F) -> Rare<'a, F::Output>
where
    F: Future + Send + 'a,
{
    boxed(make)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_boxed_future_runs_to_its_output() {
        let mut word = String::from("in");
        let joined = boxed(|| async move {
            tokio::task::yield_now().await;
            word.push_str(" place");
            word
        })
        .await;
        assert_eq!(joined, "in place");
    }

    #[tokio::test]
    async fn a_rare_future_runs_to_its_output() {
        let base = 40;
        let answer = rare(|| async move {
            tokio::task::yield_now().await;
            base + 2
        })
        .await;
        assert_eq!(answer, 42);
    }
}
