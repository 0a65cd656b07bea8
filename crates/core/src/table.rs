//! The lock table: who holds which lock under which fencing token until which
//! tick, who waits for it, which sessions keep which locks, and what each
//! request id got.

mod deadlock;
mod election;
mod queue;
mod rows;
mod semaphore;
mod sessions;
mod shared;

pub use self::election::{Leader, MAX_CAMPAIGNS};
pub use self::rows::{Changes, OwnedRowValue, Row, RowValue, TableLoader, Tree};
pub use self::sessions::{MAX_REMEMBERED_NAMES, MAX_SESSIONS, MAX_SESSION_ANSWERS};
#[cfg(test)]
mod tests;
mod types;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::num::NonZeroU64;
use std::sync::Arc;

use super::access::Access;
use super::event::{Actor, EventKind, LockEvent};
use super::fence::{Fences, Record};
use super::requests::{RequestKind, Requests, MAX_REQUEST_AGE_MS};
use super::tracked::Tracked;
use super::{Command, InvalidCommand, Limits, Principal, Quotas};

use self::deadlock::{Resource, WaitFor};
use self::election::Election;
use self::semaphore::{PermitAcquire, Semaphore};
pub use self::types::{
    Applied, Blocker, Conflict, FencingToken, Grant, LeaseView, LockError, Outcome, PermitGrant, PermitHolder,
    PermitWaiterView, SemaphoreView, SessionId, SessionLock, SessionView, TableImage, WaiterView,
};
use self::types::{Asked, Delay, Lease, Session, Waiter};

/// A held lock's name, shared by the table's maps and indexes.
type LockName = Arc<str>;

/// The answer to a change of users or roles that adds no token.
fn changed(result: Result<(), LockError>) -> Result<Outcome, LockError> {
    result.map(|()| Outcome::AccessChanged { token_id: None })
}

/// Tick period assumed for grants made before the first Tick was applied. It is
/// the smallest period a leader may use, so such a deadline is at least as many
/// ticks away as with any real period: the lease can only run long.
const MIN_TICK_MS: u64 = 10;

/// The replicated lock table. See [`LockTable::apply`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockTable {
    /// Committed ticks so far: the cluster's clock.
    now_tick: u64,
    /// Largest tick period seen in the log, used to turn ttls into ticks. It
    /// only grows, so a lease's deadline in ticks never means less real time
    /// than when it was set.
    tick_ms: Option<u64>,
    /// Held locks by name. A name is stored once, shared by this map, the
    /// deadline index and the checkpoint's change notes: at a million live
    /// leases every copy of it costs megabytes.
    leases: Tracked<LockName, Lease>,
    /// `(deadline, name)` of every lease that has its own ttl (not of those
    /// held under a session), so a Tick visits only what expires.
    by_deadline: BTreeSet<(u64, LockName)>,
    sessions: Tracked<SessionId, Session>,
    /// `(deadline, id)` of every session.
    by_session_deadline: BTreeSet<(u64, SessionId)>,
    /// `(index, session, seq)` of every remembered session answer, oldest
    /// first, and the sum of their weights: what
    /// [`MAX_REMEMBERED_NAMES`] bounds.
    answer_order: BTreeSet<(u64, SessionId, u64)>,
    answer_weight: usize,
    /// FIFO queues; a lock has a queue only while it is held, delayed, or
    /// reserved for a multi-acquire first in its queue.
    queues: Tracked<String, VecDeque<Waiter>>,
    /// `(wait_deadline, name, owner)` of every waiter.
    by_wait_deadline: BTreeSet<(u64, String, String)>,
    /// `(name, owner)` of every waiter, so asking whether an owner waits (on
    /// every queued acquire) does not scan a herd of thousands.
    queued: BTreeSet<(String, String)>,
    /// Free locks under a lock delay (never held at the same time).
    delays: Tracked<String, Delay>,
    /// `(until_tick, name)` of every delay, so a Tick visits only the delays it ends.
    by_delay_end: BTreeSet<(u64, String)>,
    requests: Requests,
    fences: Fences,
    /// Shared holders of each lock held in shared mode, by owner.
    shared: Tracked<String, BTreeMap<String, Lease>>,
    /// `(deadline, name, owner)` of every shared lease with its own ttl.
    by_shared_deadline: BTreeSet<(u64, String, String)>,
    semaphores: Tracked<String, Semaphore>,
    /// `(deadline, name, owner)` of every holder of permits with their own ttl.
    by_permit_deadline: BTreeSet<(u64, String, String)>,
    /// `(wait_deadline, name, owner)` of every waiter for permits.
    by_permit_wait_deadline: BTreeSet<(u64, String, String)>,
    /// Who waits for what and who holds anything: the wait-for graph's index.
    wait_for: WaitFor,
    /// The values of elections (see `election.rs`), by election name.
    elections: Tracked<String, Election>,
    /// Users and roles: who may do what to which names (`access.rs`).
    access: Access,
}

impl From<&LockTable> for TableImage {
    fn from(t: &LockTable) -> Self {
        TableImage {
            now_tick: t.now_tick,
            tick_ms: t.tick_ms,
            leases: (*t.leases).clone(),
            queues: (*t.queues).clone(),
            requests: t.requests.clone(),
            fences: t.fences.clone(),
            delays: (*t.delays).clone(),
            sessions: (*t.sessions).clone(),
            shared: (*t.shared).clone(),
            semaphores: (*t.semaphores).clone(),
            elections: (*t.elections).clone(),
            users: (*t.access.users).clone(),
            roles: (*t.access.roles).clone(),
        }
    }
}

impl From<TableImage> for LockTable {
    fn from(image: TableImage) -> Self {
        let by_deadline =
            image.leases.iter().filter(|(_, l)| l.session().is_none()).map(|(n, l)| (l.deadline, n.clone())).collect();
        let by_session_deadline = image.sessions.iter().map(|(id, s)| (s.deadline, *id)).collect();
        let waiters = || image.queues.iter().flat_map(|(n, q)| q.iter().map(move |w| (n, w)));
        let by_wait_deadline = waiters().map(|(n, w)| (w.wait_deadline, n.clone(), w.owner.clone())).collect();
        let queued = waiters().map(|(n, w)| (n.clone(), w.owner.clone())).collect();
        let by_delay_end = image.delays.iter().map(|(n, d)| (d.until_tick, n.clone())).collect();
        let answers = || image.sessions.iter().flat_map(|(id, s)| s.answers.iter().map(move |(seq, a)| (*id, *seq, a)));
        let answer_order = answers().map(|(id, seq, a)| (a.index, id, seq)).collect();
        let answer_weight = answers().map(|(_, _, a)| a.weight()).sum();
        let shared_leases = || image.shared.iter().flat_map(|(n, h)| h.iter().map(move |(o, l)| (n, o, l)));
        let by_shared_deadline = shared_leases()
            .filter(|(_, _, l)| l.session().is_none())
            .map(|(n, o, l)| (l.deadline, n.clone(), o.clone()))
            .collect();
        let permits = || image.semaphores.iter().flat_map(|(n, s)| s.holders.iter().map(move |(o, p)| (n, o, p)));
        let by_permit_deadline = permits()
            .filter(|(_, _, p)| p.session.is_none())
            .map(|(n, o, p)| (p.deadline, n.clone(), o.clone()))
            .collect();
        let permit_waits = || image.semaphores.iter().flat_map(|(n, s)| s.queue.iter().map(move |w| (n, w)));
        let by_permit_wait_deadline =
            permit_waits().map(|(n, w)| (w.wait_deadline, n.clone(), w.owner.clone())).collect();
        let mut wait_for = WaitFor::default();
        for (name, waiter) in waiters() {
            wait_for.wait(&waiter.owner, Resource::Lock(name.clone()));
        }
        for (name, waiter) in permit_waits() {
            wait_for.wait(&waiter.owner, Resource::Semaphore(name.clone()));
        }
        let holders = image.leases.values().map(|l| &*l.owner).chain(shared_leases().map(|(_, o, _)| o.as_str()));
        for owner in holders.chain(permits().map(|(_, o, _)| o.as_str())) {
            wait_for.hold(owner);
        }
        LockTable {
            now_tick: image.now_tick,
            tick_ms: image.tick_ms,
            leases: image.leases.into(),
            by_deadline,
            queues: image.queues.into(),
            by_wait_deadline,
            queued,
            requests: image.requests,
            fences: image.fences,
            delays: image.delays.into(),
            by_delay_end,
            sessions: image.sessions.into(),
            by_session_deadline,
            answer_order,
            answer_weight,
            shared: image.shared.into(),
            by_shared_deadline,
            semaphores: image.semaphores.into(),
            by_permit_deadline,
            by_permit_wait_deadline,
            wait_for,
            elections: image.elections.into(),
            access: Access::from_maps(image.users, image.roles),
        }
    }
}

impl LockTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Committed ticks so far.
    pub fn now_tick(&self) -> u64 {
        self.now_tick
    }

    /// The tick period the table converts ttls with: the largest seen in the
    /// log, or the minimum period before the first Tick.
    pub fn tick_ms(&self) -> u64 {
        self.tick_ms.unwrap_or(MIN_TICK_MS)
    }

    /// Number of held locks.
    pub fn len(&self) -> usize {
        self.leases.len()
    }

    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// Number of places in queues, over all locks and semaphores.
    pub fn waiting(&self) -> usize {
        self.by_wait_deadline.len() + self.by_permit_wait_deadline.len()
    }

    /// Number of leases of every kind: exclusive and shared holders of
    /// locks, holders of permits. What the `max_leases` quota counts.
    pub fn holdings(&self) -> usize {
        self.wait_for.holdings()
    }

    /// Number of fenced records, and of gates.
    pub fn records_and_gates(&self) -> (usize, usize) {
        let (records, gates) = self.fences.maps();
        (records.len(), gates.len())
    }

    /// Number of request ids remembered for de-duplication.
    pub fn remembered_requests(&self) -> usize {
        self.requests.len()
    }

    /// Applies `command`, carried by the log entry at `index`, without
    /// limits on leases and waiters (as entries from before entries carried
    /// them are applied). Deterministic: reads no clock, and every error
    /// leaves the table unchanged.
    pub fn apply(&mut self, command: &Command, index: u64) -> Applied {
        self.apply_within(command, index, &Quotas::UNLIMITED)
    }

    /// Applies `command` as [`apply`](Self::apply) does, under the limits
    /// `quotas` its entry carries: a new grant or a new wait past them is
    /// [`LockError::Full`], naming the quota; nothing else is ever refused
    /// for room (see [`Quotas`]).
    pub fn apply_within(&mut self, command: &Command, index: u64, quotas: &Quotas) -> Applied {
        self.apply_by(command, None, index, quotas)
    }

    /// Applies `command` as [`apply_within`](Self::apply_within) does, and
    /// stamps every event it makes with who caused it ([`Actor::of`]):
    /// `by`, the principal its entry records for it, for all the command
    /// does, hand-overs to waiters included; the cluster for a Tick's;
    /// [`Actor::Unknown`] for a client command recorded without one (an
    /// entry from before entries carried them).
    pub fn apply_by(&mut self, command: &Command, by: Option<&Principal>, index: u64, quotas: &Quotas) -> Applied {
        let mut events = Vec::new();
        // Validated before its request key is made: a multi-request's key
        // joins its whole list, which validation bounds.
        let result = match command.validate(&Limits::DEFAULT) {
            Err(invalid) => Err(LockError::Invalid(invalid)),
            Ok(()) => match Request::of(command) {
                Some(request) => self.once(command, index, request, |t| t.rule(command, index, quotas, &mut events)),
                None => self.rule(command, index, quotas, &mut events),
            },
        };
        if result.is_ok() {
            let changed = EventKind::access_changed(command, index);
            events.extend(changed.map(|kind| LockEvent { index, name: String::new(), kind, by: Actor::default() }));
        }
        self.follow_elections(&mut events);
        let actor = Actor::of(command, by);
        for event in &mut events {
            event.by = actor.clone();
        }
        Applied { result, events }
    }

    /// Each command's rule. For the commands [`Request::of`] names, a
    /// retry is answered by [`LockTable::once`] and never reaches it.
    fn rule(
        &mut self,
        command: &Command,
        index: u64,
        quotas: &Quotas,
        events: &mut Vec<LockEvent>,
    ) -> Result<Outcome, LockError> {
        match command {
            Command::Acquire { name, owner, ttl_ms, session, wait_ms, request_id, lock_delay_ms, .. } => {
                let lease = self.wanted(owner, *ttl_ms, *session, request_id, *lock_delay_ms, index)?;
                self.acquire(name, lease, *wait_ms, quotas, index, events)
            }
            Command::AcquireMany { names, owner, ttl_ms, session, wait_ms, request_id, lock_delay_ms, .. } => {
                let lease = self.wanted(owner, *ttl_ms, *session, request_id, *lock_delay_ms, index)?;
                self.acquire_many(names, lease, *wait_ms, quotas, index, events)
            }
            Command::Renew { name, token, ttl_ms, .. } => self.renew(name, *token, *ttl_ms, index, events),
            Command::Release { name, token, session, .. } => {
                self.held_under(name, *session)?;
                self.release(name, *token, index, events)
            }
            Command::ReleaseMany { names, token, session, .. } => {
                names.iter().try_for_each(|name| self.held_under(name, *session))?;
                self.release_many(names, *token, index, events)
            }
            Command::PutRecord { key, lock, token, value, .. } => {
                let current = self.current_token(lock);
                self.fences.put(key, lock, *token, value, current, index)
            }
            Command::Gate { resource, lock, token, .. } => {
                let current = self.current_token(lock);
                self.fences.pass(resource, lock, *token, current)
            }
            Command::CreateSession { owner, ttl_ms, by, .. } => {
                self.create_session(owner, *ttl_ms, by.as_deref(), index, events)
            }
            Command::KeepAlive { session, ttl_ms, .. } => self.keep_alive(*session, *ttl_ms),
            Command::DeleteSession { session, .. } => self.delete_session(*session, index, events),
            Command::Cancel { name, owner } => Ok(self.cancel(name, owner, index, events)),
            Command::AcquireShared { name, owner, ttl_ms, session, wait_ms, request_id, .. } => {
                let lease = self.wanted(owner, *ttl_ms, *session, request_id, None, index)?;
                self.acquire_shared(name, lease, *wait_ms, quotas, index, events)
            }
            Command::RenewShared { name, owner, token, ttl_ms, .. } => {
                self.renew_shared(name, owner, *token, *ttl_ms, index, events)
            }
            Command::ReleaseShared { name, owner, token, .. } => {
                self.release_shared(name, owner, *token, index, events)
            }
            Command::AcquirePermits { name, owner, limit, permits, ttl_ms, session, wait_ms, request_id, .. } => {
                let asked = PermitAcquire {
                    name,
                    owner,
                    limit: *limit,
                    permits: permits.unwrap_or(1),
                    ttl_ms: *ttl_ms,
                    session: *session,
                    wait_ms: *wait_ms,
                    request_id,
                };
                self.acquire_permits(asked, quotas, index, events)
            }
            Command::RenewPermits { name, owner, token, ttl_ms, .. } => {
                self.renew_permits(name, owner, *token, *ttl_ms, index, events)
            }
            Command::ReleasePermits { name, owner, token, .. } => {
                self.release_permits(name, owner, *token, index, events)
            }
            Command::CancelPermits { name, owner } => Ok(self.cancel_permits(name, owner, index, events)),
            Command::SetSemaphoreLimit { name, limit } => self.set_semaphore_limit(name, *limit, index, events),
            Command::Tick { period_ms } => Ok(self.tick(*period_ms, index, events)),
            Command::Campaign {
                name, candidate, value, ttl_ms, session, wait_ms, request_id, lock_delay_ms, ..
            } => {
                let lease = self.wanted(candidate, *ttl_ms, *session, request_id, *lock_delay_ms, index)?;
                self.campaign(name, value, lease, *wait_ms, quotas, index, events)
            }
            Command::Proclaim { name, candidate, token, value, .. } => {
                self.proclaim(name, candidate, *token, value, index, events)
            }
            Command::Resign { name, candidate, token, .. } => self.resign(name, candidate, *token, index, events),
            Command::AddUser { user, token } => {
                self.access.add_user(user, token.as_ref(), index)?;
                Ok(Outcome::AccessChanged { token_id: token.as_ref().map(|_| index) })
            }
            Command::AddToken { user, token } => {
                self.access.add_token(user, token, index)?;
                Ok(Outcome::AccessChanged { token_id: Some(index) })
            }
            Command::RemoveUser { user } => changed(self.access.remove_user(user)),
            Command::RevokeToken { user, token_id } => changed(self.access.revoke_token(user, *token_id)),
            Command::AddRole { role } => changed(self.access.add_role(role)),
            Command::RemoveRole { role } => changed(self.access.remove_role(role)),
            Command::GrantPermission { role, permission, prefix } => {
                changed(self.access.grant(role, *permission, prefix))
            }
            Command::RevokePermission { role, permission, prefix } => {
                changed(self.access.revoke(role, *permission, prefix))
            }
            Command::AssignRole { user, role } => changed(self.access.assign(user, role)),
            Command::UnassignRole { user, role } => changed(self.access.unassign(user, role)),
        }
    }

    /// Users and roles: who may do what (see [`Access::may`]).
    pub fn access(&self) -> &Access {
        &self.access
    }

    /// The lease of `name` with its queue, if held.
    pub fn get(&self, name: &str) -> Option<LeaseView> {
        self.leases.get(name).map(|l| self.view(name, l))
    }

    /// The current grant of `name`, if held, without its queue: what a
    /// waiter handed the lock is told, which must not cost a copy of a
    /// herd of thousands of waiters.
    pub fn holder(&self, name: &str) -> Option<Grant> {
        self.leases.get(name).map(|l| self.grant_of(name, l))
    }

    /// Whether `command`, applied now, would queue behind another holder: a
    /// waiting exclusive acquire of a lock someone else holds. Nothing it
    /// does can hand anyone a lock, and its own turn comes only with a
    /// later command (a release, a cancel) or a Tick (an expiry), so the
    /// proposer may let it wait for the next entry rather than make one of
    /// its own (`src/raft/proposer.rs`). A guess from this replica's table:
    /// a wrong one delays the command a little and changes nothing else.
    pub fn would_queue(&self, command: &Command) -> bool {
        match command {
            Command::Acquire { name, owner, wait_ms: Some(wait), .. } if *wait > 0 => {
                self.leases.get(name.as_str()).is_some_and(|l| &*l.owner != owner.as_str())
            }
            _ => false,
        }
    }

    /// Held locks whose names start with `prefix`, in name order, at most `limit`.
    pub fn list(&self, prefix: &str, limit: usize) -> Vec<LeaseView> {
        self.leases
            .range::<str, _>((std::ops::Bound::Included(prefix), std::ops::Bound::Unbounded))
            .take_while(|(n, _)| n.starts_with(prefix))
            .take(limit)
            .map(|(n, l)| self.view(n, l))
            .collect()
    }

    /// The token of the current holder of `name`, if held.
    pub fn current_token(&self, name: &str) -> Option<FencingToken> {
        self.leases.get(name).map(|l| l.token)
    }

    /// The fenced record `key`, if written.
    pub fn record(&self, key: &str) -> Option<&Record> {
        self.fences.record(key)
    }

    /// The tick until which free lock `name` is delayed, if it is.
    pub fn delayed_until(&self, name: &str) -> Option<u64> {
        self.delays.get(name).map(|d| d.until_tick)
    }

    /// Whether `owner` waits in the queue of `name`.
    pub fn is_waiting(&self, name: &str, owner: &str) -> bool {
        self.queued.contains(&(name.to_owned(), owner.to_owned()))
    }

    /// The token under which the waiting acquire `command` was granted, as
    /// its request record says (the record is resolved when the wait ends):
    /// how a waiter that finds itself neither waiting nor holder tells
    /// "granted, and the lease already gone again" from "the wait ended
    /// without a grant". `None` without a request id, its record, or a grant.
    pub fn granted_by_record(&self, command: &Command) -> Option<FencingToken> {
        let request = Request::of(command)?;
        match self.requests.replay(request.id?, &request.key, request.kind)? {
            Ok(Outcome::Granted { grant, .. }) => Some(grant.token),
            Ok(Outcome::GrantedMany { grants, .. }) => grants.first().map(|g| g.token),
            Ok(Outcome::PermitsGranted { grant, .. }) => Some(grant.token),
            _ => None,
        }
    }

    /// The lease an acquire of `owner` asks for (token = `index`): with its
    /// own ttl, or under a live session of the same owner.
    fn wanted(
        &self,
        owner: &str,
        ttl_ms: Option<u64>,
        session: Option<SessionId>,
        request_id: &Option<String>,
        lock_delay_ms: Option<u64>,
        index: u64,
    ) -> Result<Lease, LockError> {
        self.check_session(session, owner)?;
        Ok(Lease {
            owner: owner.into(),
            token: FencingToken::granted_at(index),
            ttl_ms: ttl_ms.unwrap_or_default(),
            deadline: 0,
            granted_tick: self.now_tick,
            request_id: request_id.as_deref().map(Into::into),
            lock_delay_ms: lock_delay_ms.and_then(NonZeroU64::new),
            session: session.and_then(NonZeroU64::new),
        })
    }

    /// The Acquire command: `wanted` is the lease it would get (token =
    /// `index`); a new grant or wait must fit in `quotas`.
    fn acquire(
        &mut self,
        name: &str,
        wanted: Lease,
        wait_ms: Option<u64>,
        quotas: &Quotas,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Result<Outcome, LockError> {
        // Same owner: keep the token, restart the lease.
        if let Some(held) = self.leases.get(name).filter(|l| l.owner == wanted.owner) {
            if held.session() != wanted.session() {
                return Err(other_lifetime(name, held.session()));
            }
            let token = held.token;
            let mut lease = self.take_current(name, token).expect("holder checked above");
            lease.ttl_ms = wanted.ttl_ms;
            let grant = self.insert(name, lease);
            events.push(event(index, name, EventKind::Renewed { owner: wanted.owner.into(), token }));
            return Ok(Outcome::Granted { grant, reacquired: true });
        }
        let owner = wanted.owner.clone();
        match (self.blocker(name), wait_ms.filter(|w| *w > 0)) {
            (None, _) => {
                quotas.room_for_leases(self.holdings(), 1)?;
                let grant = self.insert(name, wanted);
                events.push(event(
                    index,
                    name,
                    EventKind::Acquired { owner: owner.into(), token: FencingToken::granted_at(index) },
                ));
                Ok(Outcome::Granted { grant, reacquired: false })
            }
            (Some(blocker), None) => Err(refusal(name, blocker)),
            (Some(_), Some(wait_ms)) => {
                let position = match self.place(name, &owner) {
                    Some((_, waiter)) if !waiter.set.is_empty() || waiter.session != wanted.session() => {
                        return Err(waits_elsewhere(name))
                    }
                    Some((position, _)) => position,
                    None => {
                        self.refuse_deadlock(&owner, &[Resource::Lock(name.to_owned())], false)?;
                        quotas.room_for_waiters(self.waiting(), 1)?;
                        let waiter = self.waiter(wanted, wait_ms, Vec::new());
                        self.enqueue(name, waiter, index, events)
                    }
                };
                Ok(Outcome::Queued { name: name.to_owned(), owner: owner.into(), position })
            }
        }
    }

    /// What keeps lock `name` from a new acquire, if anything: a holder, a
    /// lock delay, or a queue (free with a queue: reserved for its first).
    fn blocker(&self, name: &str) -> Option<Blocker> {
        if let Some(l) = self.leases.get(name) {
            let expires_in_ms = self.expires_in_ms(self.lifetime(l.session(), l.ttl_ms, l.deadline).1);
            return Some(Blocker::Held { holder: l.owner.to_string(), token: l.token, expires_in_ms });
        }
        if let Some(holders) = self.shared.get(name) {
            let token = holders.values().map(|l| l.token).max().expect("shared locks have holders");
            return Some(Blocker::Shared { holders: holders.len(), token });
        }
        if let Some(delayed_until_tick) = self.delayed_until(name) {
            return Some(Blocker::Delayed { delayed_until_tick });
        }
        let first_waiter = self.queues.get(name)?.front()?.owner.clone();
        Some(Blocker::Reserved { first_waiter })
    }

    /// The AcquireMany command: `wanted` is the lease each lock would get;
    /// new grants or waits must fit in `quotas`, all of them.
    fn acquire_many(
        &mut self,
        names: &[String],
        wanted: Lease,
        wait_ms: Option<u64>,
        quotas: &Quotas,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Result<Outcome, LockError> {
        let owner = wanted.owner.clone();
        if let Some(token) = self.held_together(names, &owner) {
            if let Some(held) = self.leases.get(names[0].as_str()).filter(|l| l.session() != wanted.session()) {
                return Err(other_lifetime(&names[0], held.session()));
            }
            let grants = names
                .iter()
                .map(|name| {
                    let mut lease = self.take_current(name, token).expect("held_together checked it");
                    lease.ttl_ms = wanted.ttl_ms;
                    events.push(event(index, name, EventKind::Renewed { owner: owner.to_string(), token }));
                    self.insert(name, lease)
                })
                .collect();
            return Ok(Outcome::GrantedMany { grants, reacquired: true });
        }
        let conflicts: Vec<Conflict> = names
            .iter()
            .filter_map(|name| Some(Conflict { name: name.clone(), blocker: self.blocker(name)? }))
            .collect();
        if conflicts.is_empty() {
            quotas.room_for_leases(self.holdings(), names.len())?;
            let grants = names
                .iter()
                .map(|name| {
                    events.push(event(
                        index,
                        name,
                        EventKind::Acquired { owner: owner.to_string(), token: FencingToken::granted_at(index) },
                    ));
                    self.insert(name, Lease { token: FencingToken::granted_at(index), ..wanted.clone() })
                })
                .collect();
            return Ok(Outcome::GrantedMany { grants, reacquired: false });
        }
        let Some(wait_ms) = wait_ms.filter(|w| *w > 0) else { return Err(LockError::Conflicts { conflicts }) };
        // Already waiting for this very set (a retry without request id): keep the places.
        let places: Vec<_> = names.iter().map(|name| self.place(name, &owner)).collect();
        if let Some(elsewhere) = names.iter().zip(&places).find_map(|(name, place)| match place {
            Some((_, waiter)) if waiter.set != names || waiter.session != wanted.session() => Some(name),
            _ => None,
        }) {
            return Err(waits_elsewhere(elsewhere));
        }
        let known: Option<Vec<usize>> = places.iter().map(|p| p.map(|(position, _)| position)).collect();
        let positions = match known {
            Some(positions) => positions,
            None => {
                let resources: Vec<Resource> = names.iter().cloned().map(Resource::Lock).collect();
                self.refuse_deadlock(&owner, &resources, false)?;
                quotas.room_for_waiters(self.waiting(), names.len())?;
                let waiter = self.waiter(wanted, wait_ms, names.to_vec());
                names.iter().map(|name| self.enqueue(name, waiter.clone(), index, events)).collect()
            }
        };
        Ok(Outcome::QueuedMany { owner: owner.into(), positions: names.iter().cloned().zip(positions).collect() })
    }

    /// The token under which `owner` holds every lock of `names`, if it
    /// holds them all under one.
    fn held_together(&self, names: &[String], owner: &str) -> Option<FencingToken> {
        let token = self.leases.get(names[0].as_str()).filter(|l| *l.owner == *owner)?.token;
        names
            .iter()
            .all(|n| self.leases.get(n.as_str()).is_some_and(|l| *l.owner == *owner && l.token == token))
            .then_some(token)
    }

    fn renew(
        &mut self,
        name: &str,
        token: FencingToken,
        ttl_ms: Option<u64>,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Result<Outcome, LockError> {
        self.check_granted_before(name, token, index)?;
        if let Some(session) = self.leases.get(name).and_then(|l| l.session()) {
            return Err(LockError::HeldUnderSession { name: name.to_owned(), session });
        }
        let mut lease = self.take_current(name, token)?;
        lease.ttl_ms = ttl_ms.unwrap_or(lease.ttl_ms);
        let owner = lease.owner.clone();
        let grant = self.insert(name, lease);
        events.push(event(index, name, EventKind::Renewed { owner: owner.into(), token }));
        Ok(Outcome::Renewed { grant })
    }

    fn release(
        &mut self,
        name: &str,
        token: FencingToken,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Result<Outcome, LockError> {
        let lease = self.take_granted_before(name, token, index)?;
        events.push(event(index, name, self.released(&lease)));
        self.hand_over(name, Some((lease.owner.into(), lease.token)), index, events);
        Ok(Outcome::Released { name: name.to_owned(), token })
    }

    /// The ReleaseMany command: all of `names` or none.
    fn release_many(
        &mut self,
        names: &[String],
        token: FencingToken,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Result<Outcome, LockError> {
        for name in names {
            self.check_granted_before(name, token, index)?;
        }
        let mut previous = Vec::with_capacity(names.len());
        for name in names {
            let lease = self.take_current(name, token).expect("checked above");
            events.push(event(index, name, self.released(&lease)));
            previous.push(lease.owner);
        }
        // Handed on only once all are free, so a multi-acquire waiting for
        // several of them is granted in this entry too.
        for (name, owner) in names.iter().zip(previous) {
            self.hand_over(name, Some((owner.into(), token)), index, events);
        }
        Ok(Outcome::ReleasedMany { names: names.to_vec(), token })
    }

    fn cancel(&mut self, name: &str, owner: &str, index: u64, events: &mut Vec<LockEvent>) -> Outcome {
        let cancelled = |owner: String| EventKind::Cancelled { owner };
        let removed = match self.withdraw(name, owner, cancelled, index, events) {
            Some(waiter) => {
                if let Some(id) = &waiter.request_id {
                    self.requests.forget(id);
                }
                true
            }
            None => false,
        };
        Outcome::Cancelled { name: name.to_owned(), owner: owner.to_owned(), removed }
    }

    fn tick(&mut self, period_ms: u64, index: u64, events: &mut Vec<LockEvent>) -> Outcome {
        self.now_tick += 1;
        self.tick_ms = Some(self.tick_ms.unwrap_or(0).max(period_ms.max(MIN_TICK_MS)));
        // Sessions first: what they free, and what the rest of this Tick
        // frees, must not go to a waiter of a session that ends in it.
        let mut expired = Vec::new();
        let expired_sessions = self.expire_sessions(&mut expired, index, events);
        // Delays end before leases expire: a delay that a lease expiring now
        // starts cannot end on this Tick (it lasts at least one).
        self.end_delays(index, events);
        // Expire before waits run out, so a waiter whose wait ends on this
        // same Tick still gets the lock it waited for.
        while let Some((deadline, _)) = self.by_deadline.first() {
            if *deadline > self.now_tick {
                break;
            }
            let (_, name) = self.by_deadline.pop_first().expect("first() was Some");
            let lease = self.leases.remove(&name).expect("deadline index matches leases");
            self.wait_for.unhold(&lease.owner);
            expired.push((name.to_string(), lease.token));
            let delayed_until_tick = self.delay_after_expiry(&name, &lease);
            let held_ticks = self.held_ticks(&lease);
            let (owner, token) = (lease.owner, lease.token);
            events.push(event(
                index,
                &name,
                EventKind::Expired { owner: owner.to_string(), token, delayed_until_tick, held_ticks },
            ));
            if delayed_until_tick.is_none() {
                self.hand_over(&name, Some((owner.into(), token)), index, events);
            }
        }
        self.expire_shared(&mut expired, index, events);
        self.expire_permits(&mut expired, index, events);
        self.time_out_waits(index, events);
        self.time_out_permit_waits(index, events);
        self.requests.evict(self.now_tick, MAX_REQUEST_AGE_MS.div_ceil(self.tick_ms()));
        Outcome::Ticked { now_tick: self.now_tick, expired, expired_sessions }
    }

    /// Starts the lock delay of `lease`, which just expired on lock `name`,
    /// if it has one: `ceil(delay / tick)` ticks from now, the rule of lease
    /// deadlines without their `+1`, since the delay starts at this entry
    /// rather than at a request's send time. Returns the tick it ends at.
    fn delay_after_expiry(&mut self, name: &str, lease: &Lease) -> Option<u64> {
        let delay_ms = lease.lock_delay_ms()?;
        let until_tick = self.now_tick + delay_ms.div_ceil(self.tick_ms());
        let delay = Delay { until_tick, owner: lease.owner.to_string(), token: lease.token };
        self.delays.insert(name.to_owned(), delay);
        self.by_delay_end.insert((until_tick, name.to_owned()));
        Some(until_tick)
    }

    /// Ends the delays this Tick reaches, granting each lock to its first waiter.
    fn end_delays(&mut self, index: u64, events: &mut Vec<LockEvent>) {
        while let Some((until_tick, _)) = self.by_delay_end.first() {
            if *until_tick > self.now_tick {
                break;
            }
            let (_, name) = self.by_delay_end.pop_first().expect("first() was Some");
            let delay = self.delays.remove(&name).expect("delay index matches delays");
            events.push(event(index, &name, EventKind::DelayEnded { owner: delay.owner, token: delay.token }));
            self.hand_over(&name, None, index, events);
        }
    }

    /// What renew and release take: the lease of `name` if `token` is its
    /// current token and was granted by an entry before `index`.
    ///
    /// A grant made in this very entry (several commands share an entry, see
    /// [`Batch`](super::Batch)) cannot be renewed or released in it: its
    /// holder had not been told of it when this command was sent. Refusing
    /// that is what keeps one entry from granting a lock twice (a release in
    /// the granting entry would hand the lock on under the same token).
    fn take_granted_before(&mut self, name: &str, token: FencingToken, index: u64) -> Result<Lease, LockError> {
        self.check_granted_before(name, token, index)?;
        self.take_current(name, token)
    }

    /// The checks of [`take_granted_before`](Self::take_granted_before), without taking.
    fn check_granted_before(&self, name: &str, token: FencingToken, index: u64) -> Result<(), LockError> {
        match self.leases.get(name) {
            None => Err(LockError::NotHeld { name: name.to_owned() }),
            Some(l) if l.token != token => {
                Err(LockError::StaleToken { name: name.to_owned(), given: token, current: l.token })
            }
            Some(_) if token.get() >= index => Err(not_granted_before(token, index)),
            Some(_) => Ok(()),
        }
    }

    /// Removes and returns the lease of `name` if `token` is its current token.
    fn take_current(&mut self, name: &str, token: FencingToken) -> Result<Lease, LockError> {
        let current = match self.leases.get(name) {
            None => return Err(LockError::NotHeld { name: name.to_owned() }),
            Some(l) => l.token,
        };
        if current != token {
            return Err(LockError::StaleToken { name: name.to_owned(), given: token, current });
        }
        let (name, lease) = self.leases.remove_entry(name).expect("checked above");
        self.wait_for.unhold(&lease.owner);
        match lease.session().and_then(|id| self.sessions.get_mut(&id)) {
            Some(session) => {
                session.locks.remove(&*name);
            }
            None => {
                self.by_deadline.remove(&(lease.deadline, name));
            }
        }
        Ok(lease)
    }

    /// Stores `lease`: with a deadline freshly computed from its ttl, or
    /// among the locks of its session, which must be alive.
    fn insert(&mut self, name: &str, mut lease: Lease) -> Grant {
        let name: LockName = name.into();
        match lease.session() {
            Some(id) => {
                let session = self.sessions.get_mut(&id).expect("acquires and waiters name live sessions only");
                session.locks.insert(name.to_string());
            }
            None => {
                lease.deadline = self.deadline_for(lease.ttl_ms);
                self.by_deadline.insert((lease.deadline, name.clone()));
            }
        }
        let grant = self.grant_of(&name, &lease);
        self.wait_for.hold(&lease.owner);
        self.leases.insert(name, lease);
        grant
    }

    /// How long `lease` has been held, in ticks.
    fn held_ticks(&self, lease: &Lease) -> u64 {
        self.now_tick.saturating_sub(lease.granted_tick)
    }

    /// The event of `lease`'s release.
    fn released(&self, lease: &Lease) -> EventKind {
        EventKind::Released { owner: lease.owner.to_string(), token: lease.token, held_ticks: self.held_ticks(lease) }
    }

    /// The ttl and deadline a lease (of a lock, shared or not, or of
    /// permits) lives by: those of its `session`, or else its own.
    fn lifetime(&self, session: Option<SessionId>, ttl_ms: u64, deadline: u64) -> (u64, u64) {
        match session.and_then(|id| self.sessions.get(&id)) {
            Some(session) => (session.ttl_ms, session.deadline),
            None => (ttl_ms, deadline),
        }
    }

    /// `now_tick + ceil(ttl / tick) + 1`. The Tick that completes the period in
    /// progress may already have been proposed when this entry was, so it does
    /// not count: the (N+1)-th Tick after this entry is proposed at least N tick
    /// periods after it, hence at least `ttl_ms` later.
    fn deadline_for(&self, ttl_ms: u64) -> u64 {
        self.now_tick + ttl_ms.div_ceil(self.tick_ms()) + 1
    }

    /// Whole tick periods left before the deadline, not counting the one in
    /// progress: a lower bound on the real time the lease still has.
    fn expires_in_ms(&self, deadline: u64) -> u64 {
        deadline.saturating_sub(self.now_tick + 1) * self.tick_ms()
    }

    fn grant_of(&self, name: &str, l: &Lease) -> Grant {
        let (ttl_ms, deadline) = self.lifetime(l.session(), l.ttl_ms, l.deadline);
        Grant {
            name: name.to_owned(),
            owner: l.owner.to_string(),
            token: l.token,
            ttl_ms,
            expires_in_ms: self.expires_in_ms(deadline),
            deadline_tick: deadline,
        }
    }

    fn view(&self, name: &str, l: &Lease) -> LeaseView {
        let waiters = self.queues.get(name).map_or_else(Vec::new, |q| {
            q.iter().enumerate().map(|(i, w)| WaiterView { owner: w.owner.clone(), position: i + 1 }).collect()
        });
        let (ttl_ms, deadline) = self.lifetime(l.session(), l.ttl_ms, l.deadline);
        LeaseView {
            name: name.to_owned(),
            owner: l.owner.to_string(),
            token: l.token,
            ttl_ms,
            expires_in_ms: self.expires_in_ms(deadline),
            deadline_tick: deadline,
            request_id: l.request_id.as_deref().map(str::to_owned),
            session: l.session(),
            waiters,
        }
    }
}

/// The refusal of a try-acquire of one lock.
fn refusal(name: &str, blocker: Blocker) -> LockError {
    let name = name.to_owned();
    match blocker {
        Blocker::Held { holder, token, expires_in_ms } => LockError::HeldByOther { name, holder, token, expires_in_ms },
        Blocker::Delayed { delayed_until_tick } => LockError::LockDelayed { name, delayed_until_tick },
        Blocker::Reserved { first_waiter } => LockError::Reserved { name, first_waiter },
        Blocker::Shared { holders, token } => LockError::HeldShared { name, holders, token },
    }
}

/// An owner waits for each lock in one request at most: two would be
/// granted the lock as one owner, under two answers.
fn waits_elsewhere(name: &str) -> LockError {
    LockError::Invalid(InvalidCommand {
        field: "owner".into(),
        reason: format!("already waits for lock {name:?} in another acquire"),
    })
}

/// A re-acquire by the holder (or a waiter) that names another session (or
/// none) than its grant (or wait) lives by: one lease never changes what it
/// lives by.
fn other_lifetime(name: &str, held: Option<SessionId>) -> LockError {
    let how = held.map_or_else(|| "with its own ttl_ms".to_owned(), |id| format!("under session {id}"));
    LockError::Invalid(InvalidCommand {
        field: "session".into(),
        reason: format!("this owner holds or waits for {name:?} {how}; acquire it again the same way"),
    })
}

impl LockTable {
    /// Applies `command`, one a client may retry at most once: a retry with
    /// the request id or session `seq` of one already applied gets that
    /// first answer instead of being applied again. Answers from the
    /// session's or the request records if the command was applied before
    /// (`SeqReused` or `RequestIdReused` if its seq or request id answered
    /// another command; the request record also once its session ended);
    /// else runs `rule` and records its answer under `request` (and the
    /// session's `seq`).
    fn once(
        &mut self,
        command: &Command,
        index: u64,
        request: Request<'_>,
        rule: impl FnOnce(&mut LockTable) -> Result<Outcome, LockError>,
    ) -> Result<Outcome, LockError> {
        let Request { id, key, kind } = request;
        let session_seq = command.session_seq();
        // An ended session forgot its answers, but the request record
        // outlives it: a retry of a request that took effect before its
        // session ended (a waiter granted, then the session expired while
        // the answer was lost) gets what it got, not `session_not_found`,
        // which would say it never took effect.
        let session_ended = match session_seq.and_then(|(session, seq)| self.replay_seq(session, seq, kind, &key)) {
            Some(Err(ended @ LockError::SessionNotFound { .. })) => Some(ended),
            Some(replayed) => return replayed,
            None => None,
        };
        if let Some(id) = id {
            if let Some(replayed) = self.requests.replay(id, &key, kind) {
                return replayed;
            }
        }
        if let Some(ended) = session_ended {
            return Err(ended);
        }
        let result = rule(self);
        if let Some(id) = id {
            self.requests.record(id, index, self.now_tick, &key, kind, &result);
        }
        if let Some((session, seq)) = session_seq {
            self.remember_seq(session, seq, Asked { kind, key: key.into_owned() }, &result, index);
        }
        result
    }
}

/// What the answer to a command a client may retry is recorded under: its
/// request id (if it has one), the name it acts on (a multi-acquire's or
/// multi-release's whole list, a session's id), and its kind. A retry is
/// answered from the record only if all three match.
struct Request<'a> {
    id: Option<&'a str>,
    key: Cow<'a, str>,
    kind: RequestKind,
}

impl<'a> Request<'a> {
    /// `None` for the commands no client retries: cancels, Ticks, limits
    /// and access changes (each is idempotent, or the cluster's own).
    fn of(command: &'a Command) -> Option<Request<'a>> {
        let session_key = |session: &SessionId| Cow::Owned(session.to_string());
        let (id, key, kind) = match command {
            Command::Acquire { name, request_id, .. } => (request_id, lock_key(name), RequestKind::Acquire),
            Command::AcquireMany { names, request_id, .. } => (request_id, names_key(names), RequestKind::AcquireMany),
            Command::Renew { name, request_id, .. } => (request_id, lock_key(name), RequestKind::Renew),
            Command::Release { name, request_id, .. } => (request_id, lock_key(name), RequestKind::Release),
            Command::ReleaseMany { names, request_id, .. } => (request_id, names_key(names), RequestKind::ReleaseMany),
            Command::PutRecord { key, request_id, .. } => (request_id, lock_key(key), RequestKind::PutRecord),
            Command::Gate { resource, request_id, .. } => (request_id, lock_key(resource), RequestKind::Gate),
            Command::CreateSession { owner, request_id, .. } => {
                (request_id, lock_key(owner), RequestKind::CreateSession)
            }
            Command::KeepAlive { session, request_id, .. } => {
                (request_id, session_key(session), RequestKind::KeepAlive)
            }
            Command::DeleteSession { session, request_id } => {
                (request_id, session_key(session), RequestKind::DeleteSession)
            }
            Command::AcquireShared { name, request_id, .. } => (request_id, lock_key(name), RequestKind::AcquireShared),
            Command::RenewShared { name, request_id, .. } => (request_id, lock_key(name), RequestKind::RenewShared),
            Command::ReleaseShared { name, request_id, .. } => (request_id, lock_key(name), RequestKind::ReleaseShared),
            Command::AcquirePermits { name, request_id, .. } => {
                (request_id, lock_key(name), RequestKind::AcquirePermits)
            }
            Command::RenewPermits { name, request_id, .. } => (request_id, lock_key(name), RequestKind::RenewPermits),
            Command::ReleasePermits { name, request_id, .. } => {
                (request_id, lock_key(name), RequestKind::ReleasePermits)
            }
            Command::Campaign { name, request_id, .. } => (request_id, lock_key(name), RequestKind::Campaign),
            Command::Proclaim { name, request_id, .. } => (request_id, lock_key(name), RequestKind::Proclaim),
            Command::Resign { name, request_id, .. } => (request_id, lock_key(name), RequestKind::Resign),
            Command::Cancel { .. }
            | Command::CancelPermits { .. }
            | Command::SetSemaphoreLimit { .. }
            | Command::Tick { .. }
            | Command::AddUser { .. }
            | Command::AddToken { .. }
            | Command::RemoveUser { .. }
            | Command::RevokeToken { .. }
            | Command::AddRole { .. }
            | Command::RemoveRole { .. }
            | Command::GrantPermission { .. }
            | Command::RevokePermission { .. }
            | Command::AssignRole { .. }
            | Command::UnassignRole { .. } => return None,
        };
        Some(Request { id: id.as_deref(), key, kind })
    }
}

fn lock_key(name: &str) -> Cow<'_, str> {
    Cow::Borrowed(name)
}

/// What a multi-request's id is recorded under: its whole list.
fn names_key(names: &[String]) -> Cow<'_, str> {
    Cow::Owned(names.join("\n"))
}

/// An event of the command being applied; [`LockTable::apply_by`] stamps
/// who caused it once the command is done.
fn event(index: u64, name: &str, kind: EventKind) -> LockEvent {
    LockEvent { index, name: name.to_owned(), kind, by: Actor::Cluster }
}

/// A token names the entry that granted it, so one at or above `index` was
/// not granted by any entry before the one being applied.
fn not_granted_before(token: FencingToken, index: u64) -> LockError {
    LockError::Invalid(InvalidCommand {
        field: "token".into(),
        reason: format!("{token} was never granted (the log is at {index})"),
    })
}
