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

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{mpsc, oneshot};

use crate::store::AppliedEvents;
use leasehold_core::LockEvent;

/// The registered waiters of one node, by (lock name, owner). One pair may
/// have several (a client's retry arriving while its first attempt waits).
///
/// Also the proposals this node handed to the leader, each waiting until
/// this node has applied the entry the leader answered with
/// ([`Waiters::until_applied`]): woken once, by that entry's apply, not by
/// every change of openraft's metrics.
#[derive(Default)]
pub struct Waiters {
    waiting: Mutex<HashMap<(String, String), Vec<Watcher>>>,
    next_id: AtomicU64,
    /// The last entry applied here (0 before the first, or until this
    /// process applies one: a snapshot installed or loaded does not move it).
    applied: AtomicU64,
    /// Who waits for which entry to be applied.
    for_entries: Mutex<BTreeMap<u64, Vec<oneshot::Sender<()>>>>,
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

    /// Whether any waiting acquire is registered here.
    pub fn any(&self) -> bool {
        !self.lock().is_empty()
    }

    /// A signal for when the entry at `index` is applied here; `None` when
    /// it is already.
    pub fn when_applied(&self, index: u64) -> Option<oneshot::Receiver<()>> {
        if self.applied.load(Ordering::Acquire) >= index {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        let mut for_entries = self.for_entries.lock().unwrap_or_else(|p| p.into_inner());
        // Again under the lock `entry_applied` takes after storing the
        // index: either it sees this registration, or this sees its index.
        if self.applied.load(Ordering::Acquire) >= index {
            return None;
        }
        for_entries.entry(index).or_default().push(tx);
        Some(rx)
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

    /// Wakes whoever waits for an entry up to `index`.
    fn entry_applied(&self, index: u64) {
        self.applied.fetch_max(index, Ordering::AcqRel);
        let mut for_entries = self.for_entries.lock().unwrap_or_else(|p| p.into_inner());
        if for_entries.first_key_value().is_none_or(|(first, _)| *first > index) {
            return;
        }
        let later = for_entries.split_off(&(index + 1));
        let due = std::mem::replace(&mut *for_entries, later);
        drop(for_entries);
        for tx in due.into_values().flatten() {
            let _ = tx.send(());
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
        let kind = EventKind::WaitTimeout { owner: owner.into() };
        LockEvent { index: 1, name: name.into(), kind, by: leasehold_core::Actor::Cluster }
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

    // Ensures a wait for an entry ends when that entry (or a later one) is
    // applied, not before, and a wait for an applied entry does not start.
    #[tokio::test]
    async fn waits_for_entries_end_when_they_are_applied() {
        let waiters = Waiters::default();
        let mut five = waiters.when_applied(5).expect("not applied yet");
        let seven = waiters.when_applied(7).expect("not applied yet");
        waiters.entry_applied(4);
        assert!(five.try_recv().is_err(), "entry 5 is not applied yet");
        waiters.entry_applied(6);
        assert!(five.await.is_ok());
        assert!(waiters.when_applied(6).is_none(), "already applied");
        waiters.entry_applied(7);
        assert!(seven.await.is_ok());
    }
}
