//! The waiting queues of the lock table: joining a lock's queue (or, for a
//! multi-acquire, the queues of all its locks), leaving them, running out of
//! wait time on a Tick (`by_wait_deadline`), and granting a free lock to the
//! first in its queue.

use std::num::NonZeroU64;

use super::super::event::{EventKind, LockEvent};
use super::{event, FencingToken, Lease, LockError, LockTable, Outcome, Resource, Waiter};

impl LockTable {
    /// The waiter the owner of `wanted` (the lease it asks for) becomes,
    /// waiting `wait_ms` for the locks of `set` (empty: one lock).
    pub(super) fn waiter(&self, wanted: Lease, wait_ms: u64, set: Vec<String>) -> Waiter {
        let Lease { owner, ttl_ms, request_id, lock_delay_ms, session, .. } = wanted;
        let wait_deadline = self.now_tick + wait_ms.div_ceil(self.tick_ms());
        Waiter {
            owner: owner.into(),
            ttl_ms,
            wait_deadline,
            request_id: request_id.map(Into::into),
            lock_delay_ms: lock_delay_ms.map(NonZeroU64::get),
            set,
            session: session.map(NonZeroU64::get),
            shared: false,
        }
    }

    /// Puts `waiter` last in the queue of `name`; returns its position.
    pub(super) fn enqueue(&mut self, name: &str, waiter: Waiter, index: u64, events: &mut Vec<LockEvent>) -> usize {
        let queue = self.queues.get_or_insert_with(name.to_owned(), Default::default);
        let owner = waiter.owner.clone();
        self.by_wait_deadline.insert((waiter.wait_deadline, name.to_owned(), owner.clone()));
        self.queued.insert((name.to_owned(), owner.clone()));
        self.wait_for.wait(&owner, Resource::Lock(name.to_owned()));
        if let Some(session) = waiter.session.and_then(|id| self.sessions.get_mut(&id)) {
            session.waits.insert(name.to_owned());
        }
        queue.push_back(waiter);
        let position = queue.len();
        events.push(event(index, name, EventKind::Queued { owner, position }));
        position
    }

    /// `owner`'s waiter in the queue of `name` and its position (1 = next).
    pub(super) fn place(&self, name: &str, owner: &str) -> Option<(usize, &Waiter)> {
        // Only a retry finds its owner queued already: a new waiter costs no scan.
        if !self.is_waiting(name, owner) {
            return None;
        }
        let queue = self.queues.get(name)?;
        queue.iter().enumerate().find(|(_, w)| w.owner == owner).map(|(i, w)| (i + 1, w))
    }

    /// Ends the waits whose `wait_deadline` is the current tick or earlier.
    pub(super) fn time_out_waits(&mut self, index: u64, events: &mut Vec<LockEvent>) {
        while let Some((deadline, _, _)) = self.by_wait_deadline.first() {
            if *deadline > self.now_tick {
                break;
            }
            let (_, name, owner) = self.by_wait_deadline.first().cloned().expect("first() was Some");
            let wait_timeout = |owner: String| EventKind::WaitTimeout { owner };
            let waiter = self.withdraw(&name, &owner, wait_timeout, index, events).expect("wait index matches queues");
            if let Some(id) = &waiter.request_id {
                let name = waiter.names(&name)[0].to_owned();
                self.requests.resolve(id, Err(LockError::WaitTimeout { name }));
            }
        }
    }

    /// Takes `owner` out of the queue of `name` and, for a multi-acquire,
    /// out of the queues of its other locks, telling each with `why`; then
    /// grants each of those locks on to whoever is now first, in this entry.
    pub(super) fn withdraw(
        &mut self,
        name: &str,
        owner: &str,
        why: impl Fn(String) -> EventKind,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Option<Waiter> {
        let (waiter, names) = self.leave_queues(name, owner, why, index, events)?;
        for name in &names {
            self.hand_over(name, None, index, events);
        }
        Some(waiter)
    }

    /// The first half of [`withdraw`](Self::withdraw): takes `owner` out of
    /// the queues, telling each with `why`, and returns the waiter and the
    /// locks it left, for the caller to hand over.
    pub(super) fn leave_queues(
        &mut self,
        name: &str,
        owner: &str,
        why: impl Fn(String) -> EventKind,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Option<(Waiter, Vec<String>)> {
        let waiter = self.remove_waiter(name, owner)?;
        let names: Vec<String> = waiter.names(name).into_iter().map(str::to_owned).collect();
        for other in names.iter().filter(|n| *n != name) {
            self.remove_waiter(other, owner).expect("a multi-acquire waits in every queue of its set");
        }
        for name in &names {
            events.push(event(index, name, why(owner.to_owned())));
        }
        Some((waiter, names))
    }

    /// Grants lock `name`, if free and not delayed, to the first in its
    /// queue, with `index` as token: handed over from `previous` (owner,
    /// token), the lease that left it in this entry, or else acquired. A
    /// multi-acquire first in the queue is granted only together with all its
    /// locks, when it is first in each queue and each lock is free; until
    /// then the lock stays free, reserved for it.
    pub(super) fn hand_over(
        &mut self,
        name: &str,
        previous: Option<(String, FencingToken)>,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) {
        if self.leases.contains_key(name) || self.delays.contains_key(name) {
            return;
        }
        let Some(first) = self.queues.get(name).and_then(|q| q.front()) else { return };
        if first.shared {
            return self.grant_shared_run(name, previous, index, events);
        }
        // Shared holders keep an exclusive waiter waiting.
        if self.shared.contains_key(name) {
            return;
        }
        let (owner, set) = (first.owner.clone(), first.set.clone());
        let names: Vec<String> = first.names(name).into_iter().map(str::to_owned).collect();
        let ready = |n: &String| {
            !self.leases.contains_key(n.as_str())
                && !self.delays.contains_key(n)
                && !self.shared.contains_key(n)
                && self.queues.get(n).and_then(|q| q.front()).is_some_and(|w| w.owner == owner && w.set == set)
        };
        if !names.iter().all(ready) {
            return;
        }
        let mut grants = Vec::with_capacity(names.len());
        let mut request_id = None;
        for n in &names {
            let waiter = self.remove_waiter(n, &owner).expect("checked first in the queue");
            request_id = waiter.request_id.clone();
            let lease = Lease {
                owner: owner.as_str().into(),
                token: FencingToken::granted_at(index),
                ttl_ms: waiter.ttl_ms,
                deadline: 0,
                granted_tick: self.now_tick,
                request_id: waiter.request_id.map(Into::into),
                lock_delay_ms: waiter.lock_delay_ms.and_then(NonZeroU64::new),
                session: waiter.session.and_then(NonZeroU64::new),
            };
            grants.push(self.insert(n, lease));
            let (owner, token) = (owner.clone(), FencingToken::granted_at(index));
            let kind = match previous.clone().filter(|_| n == name) {
                Some((from_owner, from_token)) => EventKind::HandedOver { owner, token, from_owner, from_token },
                None => EventKind::Acquired { owner, token },
            };
            events.push(event(index, n, kind));
        }
        if let Some(id) = request_id {
            let answer = if set.is_empty() {
                Outcome::Granted { grant: grants.remove(0), reacquired: false }
            } else {
                Outcome::GrantedMany { grants, reacquired: false }
            };
            self.requests.resolve(&id, Ok(answer));
        }
    }

    /// Removes `owner` from the queue of `name` only.
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
        self.wait_for.unwait(owner, Resource::Lock(name.to_owned()));
        if let Some(session) = waiter.session.and_then(|id| self.sessions.get_mut(&id)) {
            session.waits.remove(name);
        }
        Some(waiter)
    }
}
