//! The waiting queues of the lock table: joining a lock's queue, leaving it,
//! running out of wait time on a Tick (`by_wait_deadline`), and handing a
//! freed lock over to the first waiter.

use super::super::event::{EventKind, LockEvent};
use super::{event, FencingToken, Lease, LockError, LockTable, Outcome, Waiter};

impl LockTable {
    /// Adds the owner of `wanted` (the lease it asks for) to the queue of
    /// `name`, or reports its existing place.
    pub(super) fn enqueue(
        &mut self,
        name: &str,
        wanted: Lease,
        wait_ms: u64,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Outcome {
        let wait_deadline = self.now_tick + wait_ms.div_ceil(self.tick_ms());
        let queue = self.queues.entry(name.to_owned()).or_default();
        let Lease { owner, ttl_ms, request_id, lock_delay_ms, .. } = wanted;
        let position = match queue.iter().position(|w| w.owner == owner) {
            Some(i) => i + 1,
            None => {
                queue.push_back(Waiter { owner: owner.clone(), ttl_ms, wait_deadline, request_id, lock_delay_ms });
                self.by_wait_deadline.insert((wait_deadline, name.to_owned(), owner.clone()));
                events.push(event(index, name, EventKind::Queued { owner: owner.clone(), position: queue.len() }));
                queue.len()
            }
        };
        Outcome::Queued { name: name.to_owned(), owner, position }
    }

    /// Ends the waits whose `wait_deadline` is the current tick or earlier.
    pub(super) fn time_out_waits(&mut self, index: u64, events: &mut Vec<LockEvent>) {
        while let Some((deadline, _, _)) = self.by_wait_deadline.first() {
            if *deadline > self.now_tick {
                break;
            }
            let (_, name, owner) = self.by_wait_deadline.first().cloned().expect("first() was Some");
            let waiter = self.remove_waiter(&name, &owner).expect("wait index matches queues");
            if let Some(id) = &waiter.request_id {
                self.requests.resolve(id, Err(LockError::WaitTimeout { name: name.clone() }));
            }
            events.push(event(index, &name, EventKind::WaitTimeout { owner }));
        }
    }

    /// Grants free lock `name` to its first waiter, with `index` as token:
    /// handed over from `previous` (owner, token), the lease that left it in
    /// this entry, or, with none (a lock delay ended), acquired.
    pub(super) fn hand_over(
        &mut self,
        name: &str,
        previous: Option<(String, FencingToken)>,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) {
        let Some(queue) = self.queues.get_mut(name) else { return };
        let Some(waiter) = queue.pop_front() else { return };
        if queue.is_empty() {
            self.queues.remove(name);
        }
        self.by_wait_deadline.remove(&(waiter.wait_deadline, name.to_owned(), waiter.owner.clone()));
        let lease = Lease {
            owner: waiter.owner.clone(),
            token: index,
            ttl_ms: waiter.ttl_ms,
            deadline: 0,
            request_id: waiter.request_id.clone(),
            lock_delay_ms: waiter.lock_delay_ms,
        };
        let grant = self.insert(name, lease);
        if let Some(id) = &waiter.request_id {
            self.requests.resolve(id, Ok(Outcome::Granted { grant, reacquired: false }));
        }
        let (owner, token) = (waiter.owner, index);
        let kind = match previous {
            Some((from_owner, from_token)) => EventKind::HandedOver { owner, token, from_owner, from_token },
            None => EventKind::Acquired { owner, token },
        };
        events.push(event(index, name, kind));
    }

    pub(super) fn remove_waiter(&mut self, name: &str, owner: &str) -> Option<Waiter> {
        let queue = self.queues.get_mut(name)?;
        let waiter = queue.remove(queue.iter().position(|w| w.owner == owner)?)?;
        if queue.is_empty() {
            self.queues.remove(name);
        }
        self.by_wait_deadline.remove(&(waiter.wait_deadline, name.to_owned(), owner.to_owned()));
        Some(waiter)
    }
}
