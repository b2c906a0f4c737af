//! The concurrency cap of one upstream (`limits`): at most `max_in_flight`
//! requests at once, `max_queued` more waiting up to `queue_timeout`, and a
//! fair share per client when the upstream is saturated.
//!
//! A concurrency limiter, not a rate limiter: it counts requests in flight,
//! never requests per second. Its state is one std mutex held for a few
//! map lookups by the calling task, never across an `.await`. Fairness:
//! one client holds at most [`Limiter::per_client`] slots (three quarters
//! of them, at least one), so a client flooding a stalled upstream leaves
//! slots for the others; a client may also fill at most that share of the
//! queue; and a freed slot goes to the waiter whose client holds the
//! fewest slots (first come first served among equals).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::config::LimitsConfig;
use crate::hashing::HashMap;

/// Who a slot is counted against: a client identity, a session, or the
/// anonymous stateless clients together. Built per call without formatting
/// or allocating (an identity's name is shared).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum ClientKey {
    Client(Arc<str>),
    Session(crate::upstream::SubscriberId),
    Anonymous,
}

/// Why a request got no slot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    #[error(
        "{in_flight} requests in flight (limits.max_in_flight {max_in_flight}) and {queued} waiting (limits.max_queued {max_queued})"
    )]
    QueueFull {
        in_flight: usize,
        max_in_flight: usize,
        queued: usize,
        max_queued: usize,
    },
    #[error(
        "this client already holds {held} of its fair share of {share} slots (limits.max_in_flight {max_in_flight}) and has {queued} requests waiting"
    )]
    ClientShare {
        held: usize,
        share: usize,
        max_in_flight: usize,
        queued: usize,
    },
    #[error(
        "no slot freed within {} (limits.queue_timeout {}, or the call's timeout if sooner; limits.max_in_flight {max_in_flight})", humantime::format_duration(*.waited), humantime::format_duration(*.queue_timeout)
    )]
    QueueTimeout {
        waited: Duration,
        queue_timeout: Duration,
        max_in_flight: usize,
    },
}

/// Counts of one limiter, for `/status` and `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LimiterSnapshot {
    pub in_flight: usize,
    pub queued: usize,
    pub max_in_flight: usize,
    pub max_queued: usize,
    pub rejected_queue_full: u64,
    pub rejected_client_share: u64,
    pub rejected_queue_timeout: u64,
}

struct Waiter {
    ticket: u64,
    client: ClientKey,
    /// Sent (under the lock) when the slot is granted to this waiter.
    grant: oneshot::Sender<()>,
}

/// Up to this many clients keep an entry in `State::held` while they
/// hold no slot.
const KEPT_IDLE_CLIENTS: usize = 64;

#[derive(Default)]
struct State {
    in_flight: usize,
    held: HashMap<ClientKey, usize>,
    queue: VecDeque<Waiter>,
    next_ticket: u64,
    rejected: [u64; 3],
}

impl State {
    fn queued_by(&self, client: &ClientKey) -> usize {
        self.queue.iter().filter(|w| &w.client == client).count()
    }

    fn held_by(&self, client: &ClientKey) -> usize {
        self.held.get(client).copied().unwrap_or(0)
    }

    fn take(&mut self, client: &ClientKey) {
        self.in_flight += 1;
        match self.held.get_mut(client) {
            Some(n) => *n += 1,
            None => {
                self.held.insert(client.clone(), 1);
            }
        }
    }

    fn give_back(&mut self, client: &ClientKey) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if let Some(n) = self.held.get_mut(client) {
            *n -= 1;
            // While few clients have an entry, an idle one keeps it at 0,
            // so a client calling one call at a time does not remove and
            // add it again per call; beyond that, idle entries go.
            if *n == 0 && self.held.len() > KEPT_IDLE_CLIENTS {
                self.held.remove(client);
            }
        }
    }

    fn count(&mut self, refused: &Refused) {
        let i = match refused {
            Refused::QueueFull { .. } => 0,
            Refused::ClientShare { .. } => 1,
            Refused::QueueTimeout { .. } => 2,
        };
        self.rejected[i] += 1;
    }
}

/// One upstream's concurrency cap and wait queue.
pub(crate) struct Limiter {
    config: LimitsConfig,
    state: Mutex<State>,
}

/// A slot; given back when dropped.
pub(crate) struct Permit {
    limiter: Arc<Limiter>,
    client: ClientKey,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.limiter.release(&self.client);
    }
}

impl Limiter {
    pub(crate) fn new(config: LimitsConfig) -> Arc<Self> {
        Arc::new(Self {
            config,
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Slots one client may hold at once: three quarters of them (at least one).
    pub(crate) fn per_client(&self) -> usize {
        let n = self.config.max_in_flight;
        (n - n / 4).max(1)
    }

    /// Waiting requests one client may have: three quarters of the queue.
    fn queued_per_client(&self) -> usize {
        let n = self.config.max_queued;
        n - n / 4
    }

    /// A slot for `client`: at once when one is free and the client is
    /// within its share, else after waiting in the queue (at most
    /// `queue_timeout`, and never past `deadline`), else refused at once.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        client: ClientKey,
        deadline: Instant,
    ) -> Result<Permit, Refused> {
        let (ticket, granted) = {
            let mut state = self.lock();
            let held = state.held_by(&client);
            let share = self.per_client();
            if state.in_flight < self.config.max_in_flight && held < share {
                state.take(&client);
                return Ok(self.permit(client));
            }
            let queued = state.queued_by(&client);
            let refused = if state.queue.len() >= self.config.max_queued {
                Some(Refused::QueueFull {
                    in_flight: state.in_flight,
                    max_in_flight: self.config.max_in_flight,
                    queued: state.queue.len(),
                    max_queued: self.config.max_queued,
                })
            } else if queued >= self.queued_per_client() {
                Some(Refused::ClientShare {
                    held,
                    share,
                    max_in_flight: self.config.max_in_flight,
                    queued,
                })
            } else {
                None
            };
            if let Some(refused) = refused {
                state.count(&refused);
                return Err(refused);
            }
            let ticket = state.next_ticket;
            state.next_ticket += 1;
            let (grant, granted) = oneshot::channel();
            state.queue.push_back(Waiter {
                ticket,
                client: client.clone(),
                grant,
            });
            (ticket, granted)
        };
        let mut waiting = Waiting {
            limiter: self,
            ticket,
            client: &client,
            granted,
            done: false,
        };
        let queued_at = Instant::now();
        let deadline = deadline.min(queued_at + self.config.queue_timeout);
        match tokio::time::timeout_at(deadline, &mut waiting.granted).await {
            Ok(Ok(())) => {
                waiting.done = true;
                Ok(self.permit(client.clone()))
            }
            _ => {
                if waiting.leave_queue() {
                    let refused = Refused::QueueTimeout {
                        waited: queued_at.elapsed(),
                        queue_timeout: self.config.queue_timeout,
                        max_in_flight: self.config.max_in_flight,
                    };
                    self.lock().count(&refused);
                    waiting.done = true;
                    return Err(refused);
                }
                // Granted just as the wait ended: take it.
                waiting.done = true;
                Ok(self.permit(client.clone()))
            }
        }
    }

    fn permit(self: &Arc<Self>, client: ClientKey) -> Permit {
        Permit {
            limiter: self.clone(),
            client,
        }
    }

    /// Gives a slot back and hands it to the fairest waiter.
    fn release(&self, client: &ClientKey) {
        let mut state = self.lock();
        state.give_back(client);
        self.hand_over(&mut state);
    }

    /// While slots are free, grants one to the waiter whose client holds
    /// the fewest (and is within its share).
    fn hand_over(&self, state: &mut State) {
        let share = self.per_client();
        while state.in_flight < self.config.max_in_flight {
            let best = state
                .queue
                .iter()
                .enumerate()
                .filter(|(_, w)| state.held_by(&w.client) < share)
                .min_by_key(|(i, w)| (state.held_by(&w.client), *i))
                .map(|(i, _)| i);
            let Some(waiter) = best.and_then(|i| state.queue.remove(i)) else {
                return;
            };
            state.take(&waiter.client);
            if waiter.grant.send(()).is_err() {
                // Its waiter is gone (see `Waiting::drop`): undo.
                state.give_back(&waiter.client);
            }
        }
    }

    pub(crate) fn snapshot(&self) -> LimiterSnapshot {
        let state = self.lock();
        LimiterSnapshot {
            in_flight: state.in_flight,
            queued: state.queue.len(),
            max_in_flight: self.config.max_in_flight,
            max_queued: self.config.max_queued,
            rejected_queue_full: state.rejected[0],
            rejected_client_share: state.rejected[1],
            rejected_queue_timeout: state.rejected[2],
        }
    }
}

/// A request in the queue. Dropped before it got its slot (the client went
/// away), it leaves the queue, or gives back a slot granted meanwhile.
struct Waiting<'a> {
    limiter: &'a Arc<Limiter>,
    ticket: u64,
    client: &'a ClientKey,
    granted: oneshot::Receiver<()>,
    done: bool,
}

impl Waiting<'_> {
    /// Leaves the queue; false when the slot was already granted.
    fn leave_queue(&mut self) -> bool {
        let mut state = self.limiter.lock();
        match state.queue.iter().position(|w| w.ticket == self.ticket) {
            Some(i) => {
                state.queue.remove(i);
                true
            }
            None => false,
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.done || self.leave_queue() {
            return;
        }
        if self.granted.try_recv().is_ok() {
            self.limiter.release(self.client);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(max_in_flight: usize, max_queued: usize) -> Arc<Limiter> {
        Limiter::new(LimitsConfig {
            max_in_flight,
            max_queued,
            queue_timeout: Duration::from_secs(2),
        })
    }

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(3600)
    }

    fn key(s: &str) -> ClientKey {
        ClientKey::Client(s.into())
    }

    /// A client holding no slot keeps its count at 0 while few clients
    /// have one, and the counts stay bounded however many clients come.
    #[tokio::test(start_paused = true)]
    async fn idle_clients_counts_stay_bounded() {
        let l = limiter(4, 0);
        for _ in 0..3 {
            drop(l.acquire(key("steady"), far()).await.unwrap());
        }
        assert_eq!(l.lock().held.get(&key("steady")), Some(&0));
        for n in 0..500 {
            drop(l.acquire(key(&format!("c{n}")), far()).await.unwrap());
        }
        let held = l.lock().held.len();
        assert!(held <= KEPT_IDLE_CLIENTS + 1, "{held} counts kept");
        // A count at 0 reads as none: the share check is unchanged.
        let _a = l.acquire(key("steady"), far()).await.unwrap();
        assert_eq!(l.lock().held_by(&key("steady")), 1);
        assert_eq!(l.snapshot().in_flight, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn caps_queues_and_refuses_beyond() {
        let l = limiter(2, 1);
        let _a = l.acquire(key("a"), far()).await.unwrap();
        let _b = l.acquire(key("b"), far()).await.unwrap();
        let waiting = tokio::spawn({
            let l = l.clone();
            async move { l.acquire(key("c"), far()).await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        assert_eq!(l.snapshot().queued, 1);
        let full = l.acquire(key("d"), far()).await.err().unwrap();
        assert!(matches!(full, Refused::QueueFull { .. }), "{full}");
        assert!(full.to_string().contains("limits.max_queued 1"), "{full}");
        // Nothing frees a slot: the waiter times out after queue_timeout.
        let timed_out = waiting.await.unwrap().unwrap_err();
        assert!(matches!(timed_out, Refused::QueueTimeout { .. }));
        let s = l.snapshot();
        assert_eq!((s.in_flight, s.queued), (2, 0));
        assert_eq!((s.rejected_queue_full, s.rejected_queue_timeout), (1, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_freed_slot_goes_to_the_waiter() {
        let l = limiter(1, 4);
        let a = l.acquire(key("a"), far()).await.unwrap();
        let waiting = tokio::spawn({
            let l = l.clone();
            async move { l.acquire(key("b"), far()).await.is_ok() }
        });
        tokio::task::yield_now().await;
        drop(a);
        assert!(waiting.await.unwrap());
        assert_eq!(l.snapshot().in_flight, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn one_client_cannot_take_every_slot() {
        let l = limiter(4, 8);
        assert_eq!(l.per_client(), 3);
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(l.acquire(key("flood"), far()).await.unwrap());
        }
        // The flooding client's fourth request waits, though a slot is free...
        let flood = tokio::spawn({
            let l = l.clone();
            async move { l.acquire(key("flood"), far()).await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        assert_eq!(l.snapshot().queued, 1);
        // ... which another client gets at once.
        let other = l.acquire(key("other"), far()).await.unwrap();
        assert_eq!(l.snapshot().in_flight, 4);
        drop(other);
        assert!(flood.await.unwrap().is_err(), "still over its share");
    }

    #[tokio::test(start_paused = true)]
    async fn freed_slots_go_to_the_client_holding_fewest() {
        let l = limiter(2, 8);
        let a1 = l.acquire(key("a"), far()).await.unwrap();
        let _b1 = l.acquire(key("b"), far()).await.unwrap();
        // "b" (holding one) queues first, then "c" (holding none).
        let b2 = tokio::spawn({
            let l = l.clone();
            async move { l.acquire(key("b"), far()).await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        let c = tokio::spawn({
            let l = l.clone();
            async move { l.acquire(key("c"), far()).await.map(std::mem::forget) }
        });
        tokio::task::yield_now().await;
        assert_eq!(l.snapshot().queued, 2);
        drop(a1);
        c.await.unwrap().unwrap();
        let s = l.snapshot();
        assert_eq!((s.in_flight, s.queued), (2, 1), "c got the slot, b waits");
        assert!(b2.await.unwrap().is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_goes_away_leaves_no_slot_behind() {
        let l = limiter(1, 4);
        let a = l.acquire(key("a"), far()).await.unwrap();
        let waiting = tokio::spawn({
            let l = l.clone();
            async move { l.acquire(key("b"), far()).await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        waiting.abort();
        let _ = waiting.await;
        assert_eq!(l.snapshot().queued, 0);
        drop(a);
        let s = l.snapshot();
        assert_eq!((s.in_flight, s.queued), (0, 0));
        let _again = l.acquire(key("c"), far()).await.unwrap();
    }
}
