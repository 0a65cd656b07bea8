//! The waiting queues of the lock table: joining a lock's queue, leaving it,
//! running out of wait time on a Tick (`by_wait_deadline`), and handing a
//! freed lock over to the first waiter.

use super::super::event::{EventKind, LockEvent};
use super::{event, Lease, LockError, LockTable, Outcome, Waiter};

impl LockTable {
    /// Adds `owner` to the queue of `name`, or reports its existing place.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn enqueue(
        &mut self,
        name: &str,
        owner: &str,
        ttl_ms: u64,
        wait_ms: u64,
        request_id: &Option<String>,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Outcome {
        let wait_deadline = self.now_tick + wait_ms.div_ceil(self.tick_ms());
        let queue = self.queues.entry(name.to_owned()).or_default();
        let pair = (name.to_owned(), owner.to_owned());
        // Only a retry finds its owner queued already: a new waiter costs no scan.
        let position = match self.queued.contains(&pair).then(|| queue.iter().position(|w| w.owner == owner)).flatten()
        {
            Some(i) => i + 1,
            None => {
                self.queued.insert(pair);
                queue.push_back(Waiter {
                    owner: owner.to_owned(),
                    ttl_ms,
                    wait_deadline,
                    request_id: request_id.clone(),
                });
                self.by_wait_deadline.insert((wait_deadline, name.to_owned(), owner.to_owned()));
                events.push(event(index, name, EventKind::Queued { owner: owner.to_owned(), position: queue.len() }));
                queue.len()
            }
        };
        Outcome::Queued { name: name.to_owned(), owner: owner.to_owned(), position }
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

    /// After `previous` left lock `name` in the entry at `index`, grants the
    /// lock to the first waiter, with `index` as its token.
    pub(super) fn hand_over(&mut self, name: &str, previous: Lease, index: u64, events: &mut Vec<LockEvent>) {
        let Some(queue) = self.queues.get_mut(name) else { return };
        let Some(waiter) = queue.pop_front() else { return };
        if queue.is_empty() {
            self.queues.remove(name);
        }
        self.by_wait_deadline.remove(&(waiter.wait_deadline, name.to_owned(), waiter.owner.clone()));
        self.queued.remove(&(name.to_owned(), waiter.owner.clone()));
        let lease = Lease {
            owner: waiter.owner.clone(),
            token: index,
            ttl_ms: waiter.ttl_ms,
            deadline: 0,
            request_id: waiter.request_id.clone(),
        };
        let grant = self.insert(name, lease);
        if let Some(id) = &waiter.request_id {
            self.requests.resolve(id, Ok(Outcome::Granted { grant, reacquired: false }));
        }
        events.push(event(
            index,
            name,
            EventKind::HandedOver {
                owner: waiter.owner,
                token: index,
                from_owner: previous.owner,
                from_token: previous.token,
            },
        ));
    }

    pub(super) fn remove_waiter(&mut self, name: &str, owner: &str) -> Option<Waiter> {
        if !self.queued.remove(&(name.to_owned(), owner.to_owned())) {
            return None;
        }
        let queue = self.queues.get_mut(name)?;
        let waiter = queue.remove(queue.iter().position(|w| w.owner == owner)?)?;
        if queue.is_empty() {
            self.queues.remove(name);
        }
        self.by_wait_deadline.remove(&(waiter.wait_deadline, name.to_owned(), owner.to_owned()));
        Some(waiter)
    }
}
