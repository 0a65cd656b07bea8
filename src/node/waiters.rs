//! The registry of waiting acquires, each woken only by the events about
//! its own wait (`acquire.rs` waits on it).
//!
//! A waiting acquire used to watch the node's whole event stream for its
//! grant, so every event woke every waiter: one hot lock with 64 waiters cost
//! 64 task wakeups per event, most of a core at a few hundred hand-offs a
//! second. Here a waiter registers its (lock, owner) pair, and the state
//! machine hands it only the events about that pair, found by the pair
//! itself: a herd of thousands of waiters on one lock costs each event one
//! lookup, not a scan of the herd.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::mpsc;

use crate::store::AppliedEvents;
use leasehold_core::LockEvent;

/// The registered waiters of one node, by (lock name, owner). One pair may
/// have several (a client's retry arriving while its first attempt waits).
#[derive(Default)]
pub struct Waiters {
    waiting: Mutex<HashMap<(String, String), Vec<Watcher>>>,
    next_id: AtomicU64,
}

struct Watcher {
    id: u64,
    events: mpsc::UnboundedSender<LockEvent>,
}

impl Waiters {
    fn lock(&self) -> MutexGuard<'_, HashMap<(String, String), Vec<Watcher>>> {
        // Each update is a single insert or removal: a panic cannot leave
        // the map half-changed.
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a waiter for the events about `owner` on lock `name`, from
    /// now on, until the returned [`Waiter`] is dropped.
    pub fn watch(self: &Arc<Self>, name: &str, owner: &str) -> Waiter {
        let (tx, rx) = mpsc::unbounded_channel();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let pair = (name.to_owned(), owner.to_owned());
        self.lock().entry(pair.clone()).or_default().push(Watcher { id, events: tx });
        Waiter { waiters: self.clone(), pair, id, events: rx }
    }
}

impl AppliedEvents for Waiters {
    /// Hands `event` to the waiters of its (lock, owner) pair, if any.
    fn applied(&self, event: &LockEvent) {
        let waiting = self.lock();
        if waiting.is_empty() {
            return;
        }
        // The key is built only when someone waits: most entries have no waiter.
        let pair = (event.name.clone(), event.kind.owner().to_owned());
        for watcher in waiting.get(&pair).into_iter().flatten() {
            // A waiter that stopped listening is removed by its own drop.
            let _ = watcher.events.send(event.clone());
        }
    }
}

/// One waiter's registration: the events about its (lock, owner) pair.
pub struct Waiter {
    waiters: Arc<Waiters>,
    pair: (String, String),
    id: u64,
    events: mpsc::UnboundedReceiver<LockEvent>,
}

impl Waiter {
    /// The next event about this waiter's pair, in log order.
    pub async fn next(&mut self) -> Option<LockEvent> {
        self.events.recv().await
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut waiting = self.waiters.lock();
        if let Some(watchers) = waiting.get_mut(&self.pair) {
            watchers.retain(|w| w.id != self.id);
            if watchers.is_empty() {
                waiting.remove(&self.pair);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_core::EventKind;

    fn event(name: &str, owner: &str) -> LockEvent {
        LockEvent { index: 1, name: name.into(), kind: EventKind::WaitTimeout { owner: owner.into() } }
    }

    // Ensures a waiter gets only its own pair's events, and that dropping it
    // removes its registration.
    #[tokio::test]
    async fn waiters_get_only_their_own_events() {
        let waiters = Arc::new(Waiters::default());
        let mut mine = waiters.watch("a", "x");
        let other = waiters.watch("a", "y");
        waiters.applied(&event("b", "x"));
        waiters.applied(&event("a", "y"));
        waiters.applied(&event("a", "x"));
        assert_eq!(mine.next().await, Some(event("a", "x")));
        assert!(mine.events.try_recv().is_err(), "nothing else was for x on a");
        drop(other);
        drop(mine);
        assert!(waiters.lock().is_empty());
    }
}
