//! Shared (read) mode of a lock: any number of shared holders, each a lease
//! of its own with its own ttl (or session) and token, excluded by an exclusive holder
//! and excluding it. Shared and exclusive acquires wait in the lock's one
//! FIFO queue; [`hand_over`](LockTable::hand_over) grants the shared
//! waiters at its front together, up to the first exclusive one, so a
//! waiting exclusive acquire is never overtaken by later shared ones.

use std::collections::BTreeMap;
use std::num::NonZeroU64;

use super::super::event::{EventKind, LockEvent};
use super::deadlock::Resource;
use super::{
    event, not_granted_before, other_lifetime, refusal, waits_elsewhere, Blocker, FencingToken, Grant, Lease,
    LockError, LockTable, Outcome, Quotas,
};

impl LockTable {
    /// The shared holders of lock `name`, oldest grant first.
    pub fn shared_holders(&self, name: &str) -> Vec<Grant> {
        let mut grants: Vec<Grant> = self
            .shared
            .get(name)
            .into_iter()
            .flatten()
            .map(|(owner, lease)| self.shared_grant(name, owner, lease))
            .collect();
        grants.sort_by(|a, b| (a.token, &a.owner).cmp(&(b.token, &b.owner)));
        grants
    }

    /// Locks held in shared mode whose names start with `prefix`, in name
    /// order, at most `limit`, each with its shared holders.
    pub fn list_shared(&self, prefix: &str, limit: usize) -> Vec<(String, Vec<Grant>)> {
        self.shared
            .range::<str, _>((std::ops::Bound::Included(prefix), std::ops::Bound::Unbounded))
            .take_while(|(n, _)| n.starts_with(prefix))
            .take(limit)
            .map(|(n, _)| (n.clone(), self.shared_holders(n)))
            .collect()
    }

    /// The shared grant of `owner` on `name`, if it holds one.
    pub fn shared_holder(&self, name: &str, owner: &str) -> Option<Grant> {
        self.shared.get(name)?.get(owner).map(|l| self.shared_grant(name, owner, l))
    }

    /// `(name, shared holders)` of the first `limit` locks held in shared
    /// mode, in name order.
    pub fn shared_use(&self, limit: usize) -> Vec<(String, usize)> {
        self.shared.iter().take(limit).map(|(n, h)| (n.clone(), h.len())).collect()
    }

    /// The AcquireShared command, in the entry at `index`: `wanted` is the
    /// lease it would get (token = `index`).
    pub(super) fn acquire_shared(
        &mut self,
        name: &str,
        wanted: Lease,
        wait_ms: Option<u64>,
        quotas: &Quotas,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Result<Outcome, LockError> {
        let owner = wanted.owner.to_string();
        let owner = owner.as_str();
        if let Some(held) = self.shared.get(name).and_then(|h| h.get(owner)) {
            if held.session() != wanted.session() {
                return Err(other_lifetime(name, held.session()));
            }
            let mut lease = self.take_shared(name, owner).expect("holder checked above");
            lease.ttl_ms = wanted.ttl_ms;
            let token = lease.token;
            let grant = self.insert_shared(name, lease);
            events.push(event(index, name, EventKind::Renewed { owner: owner.to_owned(), token }));
            return Ok(Outcome::Granted { grant, reacquired: true });
        }
        if self.leases.get(name).is_some_and(|l| *l.owner == *owner) {
            return Err(LockError::Invalid(super::InvalidCommand {
                field: "mode".into(),
                reason: format!("this owner holds lock {name:?} exclusively; release it before a shared acquire"),
            }));
        }
        if let Some((position, waiter)) = self.place(name, owner) {
            if !waiter.shared || waiter.session != wanted.session() {
                return Err(waits_elsewhere(name));
            }
            return Ok(Outcome::Queued { name: name.to_owned(), owner: owner.to_owned(), position });
        }
        match (self.shared_blocker(name), wait_ms.filter(|w| *w > 0)) {
            (None, _) => {
                quotas.room_for_leases(self.holdings(), 1)?;
                let grant = self.insert_shared(name, wanted);
                events.push(event(index, name, EventKind::Acquired { owner: owner.to_owned(), token: grant.token }));
                Ok(Outcome::Granted { grant, reacquired: false })
            }
            (Some(blocker), None) => Err(refusal(name, blocker)),
            (Some(_), Some(wait_ms)) => {
                self.refuse_deadlock(owner, &[Resource::Lock(name.to_owned())], true)?;
                quotas.room_for_waiters(self.waiting(), 1)?;
                let mut waiter = self.waiter(wanted, wait_ms, Vec::new());
                waiter.shared = true;
                let position = self.enqueue(name, waiter, index, events);
                Ok(Outcome::Queued { name: name.to_owned(), owner: owner.to_owned(), position })
            }
        }
    }

    /// What keeps lock `name` from a new shared acquire: an exclusive
    /// holder, a lock delay, or anyone waiting (who came first).
    fn shared_blocker(&self, name: &str) -> Option<Blocker> {
        if let Some(Blocker::Held { holder, token, expires_in_ms }) = self.blocker(name) {
            return Some(Blocker::Held { holder, token, expires_in_ms });
        }
        if let Some(delayed_until_tick) = self.delayed_until(name) {
            return Some(Blocker::Delayed { delayed_until_tick });
        }
        let first_waiter = self.queues.get(name)?.front()?.owner.clone();
        Some(Blocker::Reserved { first_waiter })
    }

    /// The RenewShared command.
    pub(super) fn renew_shared(
        &mut self,
        name: &str,
        owner: &str,
        token: FencingToken,
        ttl_ms: Option<u64>,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Result<Outcome, LockError> {
        self.check_shared(name, owner, token, index)?;
        if let Some(session) = self.shared[name][owner].session() {
            return Err(LockError::HeldUnderSession { name: name.to_owned(), session });
        }
        let mut lease = self.take_shared(name, owner).expect("checked above");
        lease.ttl_ms = ttl_ms.unwrap_or(lease.ttl_ms);
        let grant = self.insert_shared(name, lease);
        events.push(event(index, name, EventKind::Renewed { owner: owner.to_owned(), token }));
        Ok(Outcome::Renewed { grant })
    }

    /// The ReleaseShared command: the last shared holder to leave hands
    /// the lock on.
    pub(super) fn release_shared(
        &mut self,
        name: &str,
        owner: &str,
        token: FencingToken,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Result<Outcome, LockError> {
        self.check_shared(name, owner, token, index)?;
        let lease = self.take_shared(name, owner).expect("checked above");
        events.push(event(index, name, self.released(&lease)));
        self.hand_over(name, Some((owner.to_owned(), token)), index, events);
        Ok(Outcome::Released { name: name.to_owned(), token })
    }

    /// That `owner` holds `name` shared under `token`, granted before `index`.
    fn check_shared(&self, name: &str, owner: &str, token: FencingToken, index: u64) -> Result<(), LockError> {
        match self.shared.get(name).and_then(|h| h.get(owner)) {
            None => Err(LockError::NotHeld { name: name.to_owned() }),
            Some(l) if l.token != token => {
                Err(LockError::StaleToken { name: name.to_owned(), given: token, current: l.token })
            }
            Some(_) if token.get() >= index => Err(not_granted_before(token, index)),
            Some(_) => Ok(()),
        }
    }

    /// Grants lock `name`, free, to the shared waiters at the front of its
    /// queue, up to the first exclusive one, under `index`: handed over from
    /// `previous` (the lease that left it in this entry), or else acquired.
    pub(super) fn grant_shared_run(
        &mut self,
        name: &str,
        previous: Option<(String, FencingToken)>,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) {
        let token = FencingToken::granted_at(index);
        while let Some(first) = self.queues.get(name).and_then(|q| q.front()).filter(|w| w.shared) {
            let owner = first.owner.clone();
            let waiter = self.remove_waiter(name, &owner).expect("first in the queue");
            let lease = Lease {
                owner: owner.as_str().into(),
                token,
                ttl_ms: waiter.ttl_ms,
                deadline: 0,
                granted_tick: self.now_tick,
                request_id: waiter.request_id.as_deref().map(Into::into),
                lock_delay_ms: None,
                session: waiter.session.and_then(NonZeroU64::new),
            };
            let grant = self.insert_shared(name, lease);
            let kind = match &previous {
                Some((from_owner, from_token)) => {
                    EventKind::HandedOver { owner, token, from_owner: from_owner.clone(), from_token: *from_token }
                }
                None => EventKind::Acquired { owner, token },
            };
            events.push(event(index, name, kind));
            if let Some(id) = &waiter.request_id {
                self.requests.resolve(id, Ok(Outcome::Granted { grant, reacquired: false }));
            }
        }
    }

    /// Ends the shared leases this Tick reaches; adds them to `expired`.
    pub(super) fn expire_shared(
        &mut self,
        expired: &mut Vec<(String, FencingToken)>,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) {
        while let Some((deadline, _, _)) = self.by_shared_deadline.first() {
            if *deadline > self.now_tick {
                break;
            }
            let (_, name, owner) = self.by_shared_deadline.first().cloned().expect("first() was Some");
            let lease = self.take_shared(&name, &owner).expect("shared deadline index matches holders");
            let held_ticks = self.held_ticks(&lease);
            let kind =
                EventKind::Expired { owner: owner.clone(), token: lease.token, delayed_until_tick: None, held_ticks };
            events.push(event(index, &name, kind));
            expired.push((name.clone(), lease.token));
            self.hand_over(&name, Some((owner, lease.token)), index, events);
        }
    }

    /// Stores the shared `lease` of lock `name`: with a fresh deadline, or
    /// among the shared locks of its session, which must be alive.
    fn insert_shared(&mut self, name: &str, mut lease: Lease) -> Grant {
        let owner = lease.owner.to_string();
        match lease.session() {
            Some(id) => {
                let session = self.sessions.get_mut(&id).expect("acquires and waiters name live sessions only");
                session.shared.insert(name.to_owned());
            }
            None => {
                lease.deadline = self.deadline_for(lease.ttl_ms);
                self.by_shared_deadline.insert((lease.deadline, name.to_owned(), owner.clone()));
            }
        }
        self.wait_for.hold(&owner);
        let grant = self.shared_grant(name, &owner, &lease);
        self.shared.get_or_insert_with(name.to_owned(), BTreeMap::new).insert(owner, lease);
        grant
    }

    /// Removes the shared lease of `owner` on `name`, if it holds one.
    pub(super) fn take_shared(&mut self, name: &str, owner: &str) -> Option<Lease> {
        let holders = self.shared.get_mut(name)?;
        let lease = holders.remove(owner)?;
        if holders.is_empty() {
            self.shared.remove(name);
        }
        match lease.session().and_then(|id| self.sessions.get_mut(&id)) {
            Some(session) => {
                session.shared.remove(name);
            }
            None => {
                self.by_shared_deadline.remove(&(lease.deadline, name.to_owned(), owner.to_owned()));
            }
        }
        self.wait_for.unhold(owner);
        Some(lease)
    }

    fn shared_grant(&self, name: &str, owner: &str, l: &Lease) -> Grant {
        Grant { owner: owner.to_owned(), ..self.grant_of(name, l) }
    }
}
