//! Counting semaphores: up to `limit` permits of one name in use at once,
//! each holder's permits a lease of their own with their own ttl (or
//! session) and token (the index of the entry that granted them), a FIFO
//! queue of waiters granted all their permits at once or none, and expiry
//! on Ticks.
//!
//! A semaphore lives while anyone holds or waits for a permit: the acquire
//! that creates it sets its limit, and it is forgotten, limit included,
//! when its last holder and waiter are gone. One row holds all of it; its
//! limit bounds its holders, the waiters quota its queue.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::super::event::{EventKind, LockEvent};
use super::deadlock::Resource;
use super::{
    event, not_granted_before, other_lifetime, FencingToken, LockError, LockTable, Outcome, PermitGrant, PermitHolder,
    PermitWaiterView, Quotas, SemaphoreView, SessionId,
};

/// One semaphore: its limit, holders by owner, and queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Semaphore {
    pub(super) limit: u32,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) holders: BTreeMap<String, Permits>,
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub(super) queue: VecDeque<PermitWaiter>,
}

impl Semaphore {
    fn in_use(&self) -> u32 {
        self.holders.values().map(|p| p.permits).sum()
    }

    /// Whether the first waiter's permits fit now.
    pub(super) fn first_fits(&self) -> bool {
        self.queue.front().is_some_and(|w| self.in_use() + w.permits <= self.limit)
    }
}

/// The permits one owner holds: one lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Permits {
    pub(super) token: FencingToken,
    pub(super) permits: u32,
    pub(super) ttl_ms: u64,
    /// They return when a Tick makes `now_tick >= deadline`.
    pub(super) deadline: u64,
    pub(super) granted_tick: u64,
    /// The session they live by: then, as for a [`Lease`](super::Lease),
    /// `ttl_ms` and `deadline` are unused (not in the deadline index) and
    /// they return when the session ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) session: Option<SessionId>,
}

/// One owner waiting for permits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PermitWaiter {
    pub(super) owner: String,
    pub(super) permits: u32,
    pub(super) ttl_ms: u64,
    pub(super) wait_deadline: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) request_id: Option<String>,
    /// The session its permits will live by (`ttl_ms` is then unused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) session: Option<SessionId>,
}

/// What an `AcquirePermits` asks for.
pub(super) struct PermitAcquire<'a> {
    pub(super) name: &'a str,
    pub(super) owner: &'a str,
    pub(super) limit: u32,
    pub(super) permits: u32,
    pub(super) ttl_ms: Option<u64>,
    pub(super) session: Option<SessionId>,
    pub(super) wait_ms: Option<u64>,
    pub(super) request_id: &'a Option<String>,
}

impl LockTable {
    /// Semaphore `name`, if live.
    pub fn semaphore(&self, name: &str) -> Option<SemaphoreView> {
        self.semaphores.get(name).map(|s| self.semaphore_view(name, s))
    }

    /// Live semaphores whose names start with `prefix`, in name order, at most `limit`.
    pub fn list_semaphores(&self, prefix: &str, limit: usize) -> Vec<SemaphoreView> {
        self.semaphores
            .range::<str, _>((std::ops::Bound::Included(prefix), std::ops::Bound::Unbounded))
            .take_while(|(n, _)| n.starts_with(prefix))
            .take(limit)
            .map(|(n, s)| self.semaphore_view(n, s))
            .collect()
    }

    /// `(name, limit, permits in use, waiters)` of the first `limit` live
    /// semaphores in name order.
    pub fn semaphore_use(&self, limit: usize) -> Vec<(String, u32, u32, usize)> {
        self.semaphores.iter().take(limit).map(|(n, s)| (n.clone(), s.limit, s.in_use(), s.queue.len())).collect()
    }

    /// Whether `owner` waits for permits of semaphore `name`.
    pub fn is_waiting_for_permits(&self, name: &str, owner: &str) -> bool {
        self.semaphores.get(name).is_some_and(|s| s.queue.iter().any(|w| w.owner == owner))
    }

    /// The permits `owner` holds on semaphore `name`, if any.
    pub fn permits_of(&self, name: &str, owner: &str) -> Option<PermitGrant> {
        let semaphore = self.semaphores.get(name)?;
        semaphore.holders.get(owner).map(|p| self.permit_grant(name, owner, semaphore.limit, p))
    }

    /// The AcquirePermits command, in the entry at `index`.
    pub(super) fn acquire_permits(
        &mut self,
        asked: PermitAcquire<'_>,
        quotas: &Quotas,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Result<Outcome, LockError> {
        let PermitAcquire { name, owner, limit, permits, ttl_ms, session, wait_ms, request_id } = asked;
        self.check_session(session, owner)?;
        if let Some(semaphore) = self.semaphores.get(name) {
            if semaphore.limit != limit {
                return Err(LockError::LimitMismatch { name: name.to_owned(), limit: semaphore.limit, given: limit });
            }
            if let Some(held) = semaphore.holders.get(owner) {
                if held.permits != permits {
                    return Err(other_count(name, held.permits));
                }
                if held.session != session {
                    return Err(other_lifetime(name, held.session));
                }
                let token = held.token;
                let grant = self.restart_permits(name, owner, ttl_ms);
                events.push(event(index, name, EventKind::PermitsRenewed { owner: owner.to_owned(), token }));
                return Ok(Outcome::PermitsGranted { grant, reacquired: true });
            }
            if let Some(i) = semaphore.queue.iter().position(|w| w.owner == owner) {
                let waiter = &semaphore.queue[i];
                if waiter.permits != permits {
                    return Err(other_count(name, waiter.permits));
                }
                if waiter.session != session {
                    return Err(other_lifetime(name, waiter.session));
                }
                return Ok(Outcome::PermitsQueued { name: name.to_owned(), owner: owner.to_owned(), position: i + 1 });
            }
        }
        let (in_use, queued) = self.semaphores.get(name).map_or((0, 0), |s| (s.in_use(), s.queue.len()));
        if queued == 0 && in_use + permits <= limit {
            quotas.room_for_leases(self.holdings(), 1)?;
            let held = Permits {
                token: FencingToken::granted_at(index),
                permits,
                ttl_ms: ttl_ms.unwrap_or_default(),
                deadline: 0,
                granted_tick: self.now_tick,
                session,
            };
            let grant = self.insert_permits(name, limit, owner, held);
            events.push(event(
                index,
                name,
                EventKind::PermitsGranted { owner: owner.to_owned(), token: grant.token, permits },
            ));
            return Ok(Outcome::PermitsGranted { grant, reacquired: false });
        }
        let Some(wait_ms) = wait_ms.filter(|w| *w > 0) else {
            let semaphore = &self.semaphores[name];
            let holders = self.permit_holders(semaphore);
            return Err(LockError::SemaphoreFull { name: name.to_owned(), limit, in_use, waiting: queued, holders });
        };
        self.refuse_deadlock(owner, &[Resource::Semaphore(name.to_owned())], false)?;
        quotas.room_for_waiters(self.waiting(), 1)?;
        let waiter = PermitWaiter {
            owner: owner.to_owned(),
            permits,
            ttl_ms: ttl_ms.unwrap_or_default(),
            wait_deadline: self.now_tick + wait_ms.div_ceil(self.tick_ms()),
            request_id: request_id.clone(),
            session,
        };
        self.by_permit_wait_deadline.insert((waiter.wait_deadline, name.to_owned(), owner.to_owned()));
        self.wait_for.wait(owner, Resource::Semaphore(name.to_owned()));
        if let Some(session) = session.and_then(|id| self.sessions.get_mut(&id)) {
            session.permit_waits.insert(name.to_owned());
        }
        let semaphore = self.semaphores.get_mut(name).expect("a full semaphore is live");
        semaphore.queue.push_back(waiter);
        let position = semaphore.queue.len();
        events.push(event(index, name, EventKind::PermitsQueued { owner: owner.to_owned(), permits, position }));
        Ok(Outcome::PermitsQueued { name: name.to_owned(), owner: owner.to_owned(), position })
    }

    /// The RenewPermits command.
    pub(super) fn renew_permits(
        &mut self,
        name: &str,
        owner: &str,
        token: FencingToken,
        ttl_ms: Option<u64>,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Result<Outcome, LockError> {
        self.check_permits(name, owner, token, index)?;
        if let Some(session) = self.semaphores[name].holders[owner].session {
            return Err(LockError::HeldUnderSession { name: name.to_owned(), session });
        }
        let grant = self.restart_permits(name, owner, ttl_ms);
        events.push(event(index, name, EventKind::PermitsRenewed { owner: owner.to_owned(), token }));
        Ok(Outcome::PermitsRenewed { grant })
    }

    /// The ReleasePermits command.
    pub(super) fn release_permits(
        &mut self,
        name: &str,
        owner: &str,
        token: FencingToken,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Result<Outcome, LockError> {
        self.check_permits(name, owner, token, index)?;
        let held = self.take_permits(name, owner).expect("checked above");
        let kind = EventKind::PermitsReleased { owner: owner.to_owned(), token, permits: held.permits };
        events.push(event(index, name, kind));
        self.grant_waiting_permits(name, index, events);
        Ok(Outcome::PermitsReleased { name: name.to_owned(), owner: owner.to_owned(), token })
    }

    /// The CancelPermits command.
    pub(super) fn cancel_permits(
        &mut self,
        name: &str,
        owner: &str,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Outcome {
        let removed = match self.leave_permit_queue(name, owner, false, index, events) {
            Some(waiter) => {
                if let Some(id) = &waiter.request_id {
                    self.requests.forget(id);
                }
                self.grant_waiting_permits(name, index, events);
                true
            }
            None => false,
        };
        Outcome::PermitsCancelled { name: name.to_owned(), owner: owner.to_owned(), removed }
    }

    /// The SetSemaphoreLimit command.
    pub(super) fn set_semaphore_limit(
        &mut self,
        name: &str,
        limit: u32,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Result<Outcome, LockError> {
        let semaphore =
            self.semaphores.get_mut(name).ok_or_else(|| LockError::SemaphoreNotFound { name: name.to_owned() })?;
        semaphore.limit = limit;
        self.grant_waiting_permits(name, index, events);
        let in_use = self.semaphores.get(name).map_or(0, Semaphore::in_use);
        Ok(Outcome::LimitSet { name: name.to_owned(), limit, in_use })
    }

    /// Returns the permits whose deadline this Tick reaches, granting the
    /// waiters that then fit; adds them to `expired`.
    pub(super) fn expire_permits(
        &mut self,
        expired: &mut Vec<(String, FencingToken)>,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) {
        while let Some((deadline, _, _)) = self.by_permit_deadline.first() {
            if *deadline > self.now_tick {
                break;
            }
            let (_, name, owner) = self.by_permit_deadline.first().cloned().expect("first() was Some");
            let held = self.take_permits(&name, &owner).expect("permit deadline index matches holders");
            let kind = EventKind::PermitsExpired { owner, token: held.token, permits: held.permits };
            events.push(event(index, &name, kind));
            expired.push((name.clone(), held.token));
            self.grant_waiting_permits(&name, index, events);
        }
    }

    /// Ends the permit waits whose deadline this Tick reaches.
    pub(super) fn time_out_permit_waits(&mut self, index: u64, events: &mut Vec<LockEvent>) {
        while let Some((deadline, _, _)) = self.by_permit_wait_deadline.first() {
            if *deadline > self.now_tick {
                break;
            }
            let (_, name, owner) = self.by_permit_wait_deadline.first().cloned().expect("first() was Some");
            let waiter = self.leave_permit_queue(&name, &owner, true, index, events).expect("wait index matches");
            self.grant_waiting_permits(&name, index, events);
            if let Some(id) = &waiter.request_id {
                self.requests.resolve(id, Err(LockError::WaitTimeout { name }));
            }
        }
    }

    /// Takes `owner` out of the queue of semaphore `name` (`timed_out` or
    /// cancelled, or its session ended); the caller then grants whoever
    /// now fits at its front, once nothing else in its entry is still to
    /// leave (see `end_sessions`).
    pub(super) fn leave_permit_queue(
        &mut self,
        name: &str,
        owner: &str,
        timed_out: bool,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Option<PermitWaiter> {
        let semaphore = self.semaphores.get(name)?;
        let at = semaphore.queue.iter().position(|w| w.owner == owner)?;
        let semaphore = self.semaphores.get_mut(name).expect("looked up above");
        let waiter = semaphore.queue.remove(at).expect("position found above");
        self.unindex_permit_waiter(name, &waiter);
        events.push(event(index, name, EventKind::PermitWaitEnded { owner: owner.to_owned(), timed_out }));
        Some(waiter)
    }

    /// Forgets `waiter`, out of the queue of semaphore `name`, in the
    /// indexes of waits: its wait deadline, the wait-for graph, its session.
    fn unindex_permit_waiter(&mut self, name: &str, waiter: &PermitWaiter) {
        self.by_permit_wait_deadline.remove(&(waiter.wait_deadline, name.to_owned(), waiter.owner.clone()));
        self.wait_for.unwait(&waiter.owner, Resource::Semaphore(name.to_owned()));
        if let Some(session) = waiter.session.and_then(|id| self.sessions.get_mut(&id)) {
            session.permit_waits.remove(name);
        }
    }

    /// Grants the waiters at the front of the queue of semaphore `name`
    /// while the first one's permits fit (FIFO: a waiter that would fit
    /// behind one that does not waits too), under `index`; forgets the
    /// semaphore once nobody holds or waits.
    pub(super) fn grant_waiting_permits(&mut self, name: &str, index: u64, events: &mut Vec<LockEvent>) {
        let Some(semaphore) = self.semaphores.get(name) else { return };
        let limit = semaphore.limit;
        if semaphore.first_fits() {
            let token = FencingToken::granted_at(index);
            while self.semaphores.get(name).is_some_and(Semaphore::first_fits) {
                let semaphore = self.semaphores.get_mut(name).expect("checked above");
                let waiter = semaphore.queue.pop_front().expect("first_fits found one");
                self.unindex_permit_waiter(name, &waiter);
                let held = Permits {
                    token,
                    permits: waiter.permits,
                    ttl_ms: waiter.ttl_ms,
                    deadline: 0,
                    granted_tick: self.now_tick,
                    session: waiter.session,
                };
                let grant = self.insert_permits(name, limit, &waiter.owner, held);
                let kind = EventKind::PermitsGranted { owner: waiter.owner.clone(), token, permits: waiter.permits };
                events.push(event(index, name, kind));
                if let Some(id) = &waiter.request_id {
                    self.requests.resolve(id, Ok(Outcome::PermitsGranted { grant, reacquired: false }));
                }
            }
        }
        if self.semaphores.get(name).is_some_and(|s| s.holders.is_empty() && s.queue.is_empty()) {
            self.semaphores.remove(name);
        }
    }

    /// That `owner` holds permits of `name` under `token`, granted before `index`.
    fn check_permits(&self, name: &str, owner: &str, token: FencingToken, index: u64) -> Result<(), LockError> {
        let semaphore =
            self.semaphores.get(name).ok_or_else(|| LockError::SemaphoreNotFound { name: name.to_owned() })?;
        match semaphore.holders.get(owner) {
            None => Err(LockError::NotHeld { name: name.to_owned() }),
            Some(p) if p.token != token => {
                Err(LockError::StaleToken { name: name.to_owned(), given: token, current: p.token })
            }
            Some(_) if token.get() >= index => Err(not_granted_before(token, index)),
            Some(_) => Ok(()),
        }
    }

    /// Restarts the lease of `owner`'s permits on `name`, with `ttl_ms` if given.
    fn restart_permits(&mut self, name: &str, owner: &str, ttl_ms: Option<u64>) -> PermitGrant {
        let mut held = self.take_permits(name, owner).expect("the caller checked the holder");
        held.ttl_ms = ttl_ms.unwrap_or(held.ttl_ms);
        let limit = self.semaphores[name].limit;
        self.insert_permits(name, limit, owner, held)
    }

    /// Stores `owner`'s permits on `name` (creating the semaphore with
    /// `limit`): with a fresh deadline, or among the permits of their
    /// session, which must be alive.
    fn insert_permits(&mut self, name: &str, limit: u32, owner: &str, mut held: Permits) -> PermitGrant {
        match held.session {
            Some(id) => {
                let session = self.sessions.get_mut(&id).expect("acquires and waiters name live sessions only");
                session.permits.insert(name.to_owned());
            }
            None => {
                held.deadline = self.deadline_for(held.ttl_ms);
                self.by_permit_deadline.insert((held.deadline, name.to_owned(), owner.to_owned()));
            }
        }
        self.wait_for.hold(owner);
        let grant = self.permit_grant(name, owner, limit, &held);
        let semaphore = self.semaphores.get_or_insert_with(name.to_owned(), || Semaphore {
            limit,
            holders: BTreeMap::new(),
            queue: VecDeque::new(),
        });
        semaphore.holders.insert(owner.to_owned(), held);
        grant
    }

    /// Removes `owner`'s permits on `name`; the semaphore stays (the caller
    /// grants waiters, then forgets it if it is empty).
    pub(super) fn take_permits(&mut self, name: &str, owner: &str) -> Option<Permits> {
        let held = self.semaphores.get_mut(name)?.holders.remove(owner)?;
        match held.session.and_then(|id| self.sessions.get_mut(&id)) {
            Some(session) => {
                session.permits.remove(name);
            }
            None => {
                self.by_permit_deadline.remove(&(held.deadline, name.to_owned(), owner.to_owned()));
            }
        }
        self.wait_for.unhold(owner);
        Some(held)
    }

    fn permit_grant(&self, name: &str, owner: &str, limit: u32, p: &Permits) -> PermitGrant {
        let (ttl_ms, deadline) = self.lifetime(p.session, p.ttl_ms, p.deadline);
        PermitGrant {
            name: name.to_owned(),
            owner: owner.to_owned(),
            token: p.token,
            permits: p.permits,
            limit,
            ttl_ms,
            expires_in_ms: self.expires_in_ms(deadline),
            deadline_tick: deadline,
        }
    }

    /// The holders of `semaphore`, oldest grant first.
    fn permit_holders(&self, semaphore: &Semaphore) -> Vec<PermitHolder> {
        let mut holders: Vec<PermitHolder> = semaphore
            .holders
            .iter()
            .map(|(owner, p)| PermitHolder {
                owner: owner.clone(),
                token: p.token,
                permits: p.permits,
                expires_in_ms: self.expires_in_ms(self.lifetime(p.session, p.ttl_ms, p.deadline).1),
            })
            .collect();
        holders.sort_by(|a, b| (a.token, &a.owner).cmp(&(b.token, &b.owner)));
        holders
    }

    fn semaphore_view(&self, name: &str, s: &Semaphore) -> SemaphoreView {
        SemaphoreView {
            name: name.to_owned(),
            limit: s.limit,
            in_use: s.in_use(),
            holders: self.permit_holders(s),
            waiters: s
                .queue
                .iter()
                .enumerate()
                .map(|(i, w)| PermitWaiterView { owner: w.owner.clone(), permits: w.permits, position: i + 1 })
                .collect(),
        }
    }
}

/// An owner asks for another number of permits than it holds or waits for.
fn other_count(name: &str, permits: u32) -> LockError {
    LockError::Invalid(super::InvalidCommand {
        field: "permits".into(),
        reason: format!("this owner already holds or waits for {permits} permit(s) of semaphore {name:?}"),
    })
}
