//! The lock table: who holds which lock under which fencing token until which
//! tick, who waits for it, and what each request id got.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use super::event::{EventKind, LockEvent};
use super::fence::{Fences, Record};
use super::requests::{RequestKind, Requests, MAX_REQUEST_AGE_MS};
use super::{Command, InvalidCommand, Limits};

/// The Raft log index of the entry that granted a lock. Strictly increasing per
/// lock name (log indexes only grow), not dense, and not unique across names.
pub type FencingToken = u64;

/// Tick period assumed for grants made before the first Tick was applied. It is
/// the smallest period a leader may use, so such a deadline is at least as many
/// ticks away as with any real period: the lease can only run long.
const MIN_TICK_MS: u64 = 10;

/// One held lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Lease {
    owner: String,
    token: FencingToken,
    ttl_ms: u64,
    /// The lease expires when a Tick makes `now_tick >= deadline`.
    deadline: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    request_id: Option<String>,
}

/// One owner waiting in a lock's queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Waiter {
    owner: String,
    /// The ttl its lease gets when the lock passes to it.
    ttl_ms: u64,
    /// The wait ends (unsuccessfully) when a Tick makes `now_tick >= wait_deadline`.
    wait_deadline: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    request_id: Option<String>,
}

/// A successful acquire or renew, as the holder sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub name: String,
    pub owner: String,
    pub token: FencingToken,
    pub ttl_ms: u64,
    /// Real time the lease is guaranteed to last from the commit of the entry
    /// that produced this answer (longer if an election stalls the ticks).
    pub expires_in_ms: u64,
    /// The tick at which the lease expires.
    pub deadline_tick: u64,
}

/// A waiter as a reader sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaiterView {
    pub owner: String,
    /// 1 = next in line.
    pub position: usize,
}

/// A held lock as a reader sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseView {
    pub name: String,
    pub owner: String,
    pub token: FencingToken,
    pub ttl_ms: u64,
    /// Lower bound on the real time left, counted in whole tick periods.
    pub expires_in_ms: u64,
    pub deadline_tick: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The queue, first in line first.
    #[serde(default)]
    pub waiters: Vec<WaiterView>,
}

/// What an applied command did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// A new grant, or the holder's own grant returned again (`reacquired`).
    Granted {
        grant: Grant,
        reacquired: bool,
    },
    /// The owner waits in the queue at `position` (1 = next).
    Queued {
        name: String,
        owner: String,
        position: usize,
    },
    Renewed {
        grant: Grant,
    },
    Released {
        name: String,
        token: FencingToken,
    },
    /// The owner left the queue (`false`: it was not waiting).
    Cancelled {
        name: String,
        owner: String,
        removed: bool,
    },
    /// A fenced record was written by the holder of `lock` under `token`.
    RecordWritten {
        key: String,
        lock: String,
        token: FencingToken,
        index: u64,
    },
    /// A gate admitted `token`.
    GateAdmitted {
        resource: String,
        lock: String,
        token: FencingToken,
    },
    /// The clock advanced to `now_tick`; these leases expired in this entry.
    Ticked {
        now_tick: u64,
        expired: Vec<(String, FencingToken)>,
    },
    /// A Raft entry with no command (leader blank entry, membership change).
    Noop,
}

/// Why a command changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "error", rename_all = "snake_case")]
pub enum LockError {
    #[error("lock {name:?} is held by {holder:?} under token {token}")]
    HeldByOther { name: String, holder: String, token: FencingToken, expires_in_ms: u64 },
    #[error("lock {name:?} is not held")]
    NotHeld { name: String },
    #[error("token {given} is not the current token of lock {name:?} (current: {current})")]
    StaleToken { name: String, given: FencingToken, current: FencingToken },
    /// A fenced write whose token is not the lock's current one (`current`
    /// is `None` when the lock is free).
    #[error("token {given} is not the current token of lock {lock:?} (current: {current:?})")]
    NotCurrent { lock: String, given: FencingToken, current: Option<FencingToken> },
    #[error("gate {resource:?} already admitted token {highest}, higher than {given}")]
    GateRejected { resource: String, given: FencingToken, highest: FencingToken },
    #[error("gate {resource:?} admits tokens of lock {lock:?} only")]
    GateLockMismatch { resource: String, lock: String },
    #[error("no room for more {what} (at most {limit})")]
    Full { what: String, limit: usize },
    #[error("the wait for lock {name:?} ran out before it was granted")]
    WaitTimeout { name: String },
    #[error("request id {request_id:?} was already used for another request")]
    RequestIdReused { request_id: String },
    #[error("invalid command: {0}")]
    Invalid(InvalidCommand),
}

/// The result of applying one entry: the answer for the proposer, and the
/// events the entry caused, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub result: Result<Outcome, LockError>,
    pub events: Vec<LockEvent>,
}

/// The replicated lock table. See [`LockTable::apply`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockTable {
    /// Committed ticks so far: the cluster's clock.
    now_tick: u64,
    /// Largest tick period seen in the log, used to turn ttls into ticks. It
    /// only grows, so a lease's deadline in ticks never means less real time
    /// than when it was set.
    tick_ms: Option<u64>,
    leases: BTreeMap<String, Lease>,
    /// `(deadline, name)` of every lease, so a Tick visits only what expires.
    by_deadline: BTreeSet<(u64, String)>,
    /// FIFO queues; a lock has a queue only while it is held.
    queues: BTreeMap<String, VecDeque<Waiter>>,
    /// `(wait_deadline, name, owner)` of every waiter.
    by_wait_deadline: BTreeSet<(u64, String, String)>,
    requests: Requests,
    fences: Fences,
}

/// The serialized form of a [`LockTable`] (snapshots). The deadline indexes
/// are derived, so they are rebuilt on load instead of being stored twice.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TableImage {
    now_tick: u64,
    tick_ms: Option<u64>,
    leases: BTreeMap<String, Lease>,
    #[serde(default)]
    queues: BTreeMap<String, VecDeque<Waiter>>,
    #[serde(default)]
    requests: Requests,
    #[serde(default)]
    fences: Fences,
}

impl From<&LockTable> for TableImage {
    fn from(t: &LockTable) -> Self {
        TableImage {
            now_tick: t.now_tick,
            tick_ms: t.tick_ms,
            leases: t.leases.clone(),
            queues: t.queues.clone(),
            requests: t.requests.clone(),
            fences: t.fences.clone(),
        }
    }
}

impl From<TableImage> for LockTable {
    fn from(image: TableImage) -> Self {
        let by_deadline = image.leases.iter().map(|(n, l)| (l.deadline, n.clone())).collect();
        let by_wait_deadline = image
            .queues
            .iter()
            .flat_map(|(n, q)| q.iter().map(move |w| (w.wait_deadline, n.clone(), w.owner.clone())))
            .collect();
        LockTable {
            now_tick: image.now_tick,
            tick_ms: image.tick_ms,
            leases: image.leases,
            by_deadline,
            queues: image.queues,
            by_wait_deadline,
            requests: image.requests,
            fences: image.fences,
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

    /// Number of owners waiting in queues, over all locks.
    pub fn waiting(&self) -> usize {
        self.by_wait_deadline.len()
    }

    /// Number of request ids remembered for de-duplication.
    pub fn remembered_requests(&self) -> usize {
        self.requests.len()
    }

    /// Applies `command`, carried by the log entry at `index`. Deterministic:
    /// reads no clock, and every error leaves the table unchanged.
    pub fn apply(&mut self, command: &Command, index: u64) -> Applied {
        let mut events = Vec::new();
        let result = self.apply_inner(command, index, &mut events);
        Applied { result, events }
    }

    fn apply_inner(
        &mut self,
        command: &Command,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Result<Outcome, LockError> {
        command.validate(&Limits::DEFAULT).map_err(LockError::Invalid)?;
        let (name, request_id, kind) = match command {
            Command::Acquire { name, request_id, .. } => (name, request_id, RequestKind::Acquire),
            Command::Renew { name, request_id, .. } => (name, request_id, RequestKind::Renew),
            Command::Release { name, request_id, .. } => (name, request_id, RequestKind::Release),
            Command::PutRecord { key, request_id, .. } => (key, request_id, RequestKind::PutRecord),
            Command::Gate { resource, request_id, .. } => (resource, request_id, RequestKind::Gate),
            Command::Cancel { name, owner } => return Ok(self.cancel(name, owner, index, events)),
            Command::Tick { period_ms } => return Ok(self.tick(*period_ms, index, events)),
        };
        if let Some(id) = request_id {
            if let Some(replayed) = self.requests.replay(id, name, kind) {
                return replayed;
            }
        }
        let result = match command {
            Command::Acquire { name, owner, ttl_ms, wait_ms, request_id } => {
                self.acquire(name, owner, *ttl_ms, *wait_ms, request_id, index, events)
            }
            Command::Renew { name, token, ttl_ms, .. } => self.renew(name, *token, *ttl_ms, index, events),
            Command::Release { name, token, .. } => self.release(name, *token, index, events),
            Command::PutRecord { key, lock, token, value, .. } => {
                let current = self.leases.get(lock).map(|l| l.token);
                self.fences.put(key, lock, *token, value, current, index)
            }
            Command::Gate { resource, lock, token, .. } => {
                if *token >= index {
                    return Err(not_granted_before(*token, index));
                }
                self.fences.pass(resource, lock, *token)
            }
            Command::Cancel { .. } | Command::Tick { .. } => unreachable!("answered above"),
        };
        if let Some(id) = request_id {
            self.requests.record(id, index, self.now_tick, name, kind, &result);
        }
        result
    }

    /// The lease of `name` with its queue, if held.
    pub fn get(&self, name: &str) -> Option<LeaseView> {
        self.leases.get(name).map(|l| self.view(name, l))
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

    /// Whether `owner` waits in the queue of `name`.
    pub fn is_waiting(&self, name: &str, owner: &str) -> bool {
        self.queues.get(name).is_some_and(|q| q.iter().any(|w| w.owner == owner))
    }

    #[allow(clippy::too_many_arguments)] // the fields of one Acquire command
    fn acquire(
        &mut self,
        name: &str,
        owner: &str,
        ttl_ms: u64,
        wait_ms: Option<u64>,
        request_id: &Option<String>,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Result<Outcome, LockError> {
        let holder = self.leases.get(name).map(|l| (l.owner.clone(), l.token, l.deadline));
        match holder {
            None => {
                let lease = Lease {
                    owner: owner.to_owned(),
                    token: index,
                    ttl_ms,
                    deadline: 0,
                    request_id: request_id.clone(),
                };
                let grant = self.insert(name, lease);
                events.push(event(index, name, EventKind::Acquired { owner: owner.to_owned(), token: index }));
                Ok(Outcome::Granted { grant, reacquired: false })
            }
            // Same owner: keep the token, restart the lease.
            Some((holder, token, _)) if holder == owner => {
                let mut lease = self.take_current(name, token).expect("holder checked above");
                lease.ttl_ms = ttl_ms;
                let grant = self.insert(name, lease);
                events.push(event(index, name, EventKind::Renewed { owner: owner.to_owned(), token }));
                Ok(Outcome::Granted { grant, reacquired: true })
            }
            Some((holder, token, deadline)) => match wait_ms.filter(|w| *w > 0) {
                None => Err(LockError::HeldByOther {
                    name: name.to_owned(),
                    holder,
                    token,
                    expires_in_ms: self.expires_in_ms(deadline),
                }),
                Some(wait_ms) => Ok(self.enqueue(name, owner, ttl_ms, wait_ms, request_id, index, events)),
            },
        }
    }

    /// Adds `owner` to the queue of `name`, or reports its existing place.
    #[allow(clippy::too_many_arguments)]
    fn enqueue(
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
        let position = match queue.iter().position(|w| w.owner == owner) {
            Some(i) => i + 1,
            None => {
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

    fn renew(
        &mut self,
        name: &str,
        token: FencingToken,
        ttl_ms: Option<u64>,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Result<Outcome, LockError> {
        let mut lease = self.take_granted_before(name, token, index)?;
        lease.ttl_ms = ttl_ms.unwrap_or(lease.ttl_ms);
        let owner = lease.owner.clone();
        let grant = self.insert(name, lease);
        events.push(event(index, name, EventKind::Renewed { owner, token }));
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
        events.push(event(index, name, EventKind::Released { owner: lease.owner.clone(), token }));
        self.hand_over(name, lease, index, events);
        Ok(Outcome::Released { name: name.to_owned(), token })
    }

    fn cancel(&mut self, name: &str, owner: &str, index: u64, events: &mut Vec<LockEvent>) -> Outcome {
        let removed = match self.remove_waiter(name, owner) {
            Some(waiter) => {
                if let Some(id) = &waiter.request_id {
                    self.requests.forget(id);
                }
                events.push(event(index, name, EventKind::Cancelled { owner: owner.to_owned() }));
                true
            }
            None => false,
        };
        Outcome::Cancelled { name: name.to_owned(), owner: owner.to_owned(), removed }
    }

    fn tick(&mut self, period_ms: u64, index: u64, events: &mut Vec<LockEvent>) -> Outcome {
        self.now_tick += 1;
        self.tick_ms = Some(self.tick_ms.unwrap_or(0).max(period_ms.max(MIN_TICK_MS)));
        // Expire first, so a waiter whose wait ends on this same Tick still
        // gets the lock it waited for.
        let mut expired = Vec::new();
        while let Some((deadline, _)) = self.by_deadline.first() {
            if *deadline > self.now_tick {
                break;
            }
            let (_, name) = self.by_deadline.pop_first().expect("first() was Some");
            let lease = self.leases.remove(&name).expect("deadline index matches leases");
            expired.push((name.clone(), lease.token));
            events.push(event(index, &name, EventKind::Expired { owner: lease.owner.clone(), token: lease.token }));
            self.hand_over(&name, lease, index, events);
        }
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
        self.requests.evict(self.now_tick, MAX_REQUEST_AGE_MS.div_ceil(self.tick_ms()));
        Outcome::Ticked { now_tick: self.now_tick, expired }
    }

    /// After `previous` left lock `name` in the entry at `index`, grants the
    /// lock to the first waiter, with `index` as its token.
    fn hand_over(&mut self, name: &str, previous: Lease, index: u64, events: &mut Vec<LockEvent>) {
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

    fn remove_waiter(&mut self, name: &str, owner: &str) -> Option<Waiter> {
        let queue = self.queues.get_mut(name)?;
        let waiter = queue.remove(queue.iter().position(|w| w.owner == owner)?)?;
        if queue.is_empty() {
            self.queues.remove(name);
        }
        self.by_wait_deadline.remove(&(waiter.wait_deadline, name.to_owned(), owner.to_owned()));
        Some(waiter)
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
        if token >= index && self.leases.get(name).is_some_and(|l| l.token == token) {
            return Err(not_granted_before(token, index));
        }
        self.take_current(name, token)
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
        let lease = self.leases.remove(name).expect("checked above");
        self.by_deadline.remove(&(lease.deadline, name.to_owned()));
        Ok(lease)
    }

    /// Stores `lease` with a deadline freshly computed from its ttl.
    fn insert(&mut self, name: &str, mut lease: Lease) -> Grant {
        lease.deadline = self.deadline_for(lease.ttl_ms);
        let grant = Grant {
            name: name.to_owned(),
            owner: lease.owner.clone(),
            token: lease.token,
            ttl_ms: lease.ttl_ms,
            expires_in_ms: self.expires_in_ms(lease.deadline),
            deadline_tick: lease.deadline,
        };
        self.by_deadline.insert((lease.deadline, name.to_owned()));
        self.leases.insert(name.to_owned(), lease);
        grant
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

    fn view(&self, name: &str, l: &Lease) -> LeaseView {
        let waiters = self.queues.get(name).map_or_else(Vec::new, |q| {
            q.iter().enumerate().map(|(i, w)| WaiterView { owner: w.owner.clone(), position: i + 1 }).collect()
        });
        LeaseView {
            name: name.to_owned(),
            owner: l.owner.clone(),
            token: l.token,
            ttl_ms: l.ttl_ms,
            expires_in_ms: self.expires_in_ms(l.deadline),
            deadline_tick: l.deadline,
            request_id: l.request_id.clone(),
            waiters,
        }
    }
}

fn event(index: u64, name: &str, kind: EventKind) -> LockEvent {
    LockEvent { index, name: name.to_owned(), kind }
}

/// A token names the entry that granted it, so one at or above `index` was
/// not granted by any entry before the one being applied.
fn not_granted_before(token: FencingToken, index: u64) -> LockError {
    LockError::Invalid(InvalidCommand {
        field: "token".into(),
        reason: format!("{token} was never granted (the log is at {index})"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EventKind, LockEvent, MAX_REQUEST_AGE_MS};

    const TICK: u64 = 100;

    /// A table fed by a fake log: every command gets the next index.
    struct Log {
        table: LockTable,
        index: u64,
    }

    impl Log {
        /// A table that has applied one Tick of `TICK` ms, as a running cluster has.
        fn new() -> Self {
            let mut log = Log { table: LockTable::new(), index: 0 };
            log.tick();
            log
        }
        fn apply(&mut self, c: Command) -> Result<Outcome, LockError> {
            self.apply_with_events(c).result
        }
        fn apply_with_events(&mut self, c: Command) -> Applied {
            self.index += 1;
            self.table.apply(&c, self.index)
        }
        fn acquire(&mut self, name: &str, owner: &str, ttl_ms: u64) -> Result<Outcome, LockError> {
            self.apply(Command::Acquire {
                name: name.into(),
                owner: owner.into(),
                ttl_ms,
                wait_ms: None,
                request_id: None,
            })
        }
        fn token(&mut self, name: &str, owner: &str, ttl_ms: u64) -> FencingToken {
            match self.acquire(name, owner, ttl_ms) {
                Ok(Outcome::Granted { grant, .. }) => grant.token,
                other => panic!("expected a grant, got {other:?}"),
            }
        }
        fn renew(&mut self, name: &str, token: u64, ttl_ms: Option<u64>) -> Result<Outcome, LockError> {
            self.apply(Command::Renew { name: name.into(), token, ttl_ms, request_id: None })
        }
        fn release(&mut self, name: &str, token: u64) -> Result<Outcome, LockError> {
            self.apply(Command::Release { name: name.into(), token, request_id: None })
        }
        fn tick(&mut self) -> Vec<(String, FencingToken)> {
            match self.apply(Command::Tick { period_ms: TICK }) {
                Ok(Outcome::Ticked { expired, .. }) => expired,
                other => panic!("tick failed: {other:?}"),
            }
        }
        fn ticks(&mut self, n: u64) -> Vec<(String, FencingToken)> {
            (0..n).flat_map(|_| self.tick()).collect()
        }
    }

    // Ensures a free lock is granted with the index of the granting entry as token.
    #[test]
    fn free_lock_is_granted_with_entry_index_as_token() {
        let mut log = Log::new();
        let token = log.token("a", "alice", 3000);
        assert_eq!(token, log.index);
        let view = log.table.get("a").unwrap();
        assert_eq!((view.owner.as_str(), view.token), ("alice", token));
    }

    // Ensures a same-owner acquire returns the same token and restarts the lease.
    #[test]
    fn same_owner_reacquire_keeps_token_and_restarts_lease() {
        let mut log = Log::new();
        let token = log.token("a", "alice", 3000);
        log.ticks(10);
        match log.acquire("a", "alice", 3000).unwrap() {
            Outcome::Granted { grant, reacquired } => {
                assert!(reacquired);
                assert_eq!(grant.token, token);
                assert_eq!(grant.ttl_ms, 3000);
                assert_eq!(grant.deadline_tick, log.table.now_tick() + 30 + 1);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(log.table.len(), 1);
        // The old deadline is gone from the index: nothing expires at it.
        assert!(log.ticks(30).is_empty());
        assert_eq!(log.tick(), vec![("a".to_string(), token)]);
    }

    // Ensures another owner is refused and told who holds the lock.
    #[test]
    fn other_owner_is_refused_with_the_holder() {
        let mut log = Log::new();
        let token = log.token("a", "alice", 3000);
        let err = log.acquire("a", "bob", 3000).unwrap_err();
        assert_eq!(
            err,
            LockError::HeldByOther { name: "a".into(), holder: "alice".into(), token, expires_in_ms: 3000 }
        );
        assert_eq!(log.table.get("a").unwrap().owner, "alice");
    }

    // Ensures expiry happens exactly at the deadline tick: ceil(ttl/tick) + 1 ticks later.
    #[test]
    fn lease_expires_exactly_at_deadline_tick() {
        let mut log = Log::new();
        let token = log.token("a", "alice", 3050); // ceil(3050/100) = 31 ticks, + 1
        assert!(log.ticks(31).is_empty(), "expired before the deadline");
        assert!(log.table.get("a").is_some());
        assert_eq!(log.tick(), vec![("a".to_string(), token)]);
        assert!(log.table.get("a").is_none());
    }

    // Ensures tokens grow over grant -> expire -> grant, and the old token is stale.
    #[test]
    fn tokens_increase_over_grant_expire_grant() {
        let mut log = Log::new();
        let first = log.token("a", "alice", 3000);
        assert_eq!(log.ticks(31).len(), 1);
        let second = log.token("a", "bob", 3000);
        assert!(second > first);
        assert!(matches!(
            log.renew("a", first, None),
            Err(LockError::StaleToken { given, current, .. }) if given == first && current == second
        ));
        log.release("a", second).unwrap();
        let third = log.token("a", "alice", 3000);
        assert!(third > second);
    }

    // Ensures renew keeps the token, moves the deadline, and may change the ttl.
    #[test]
    fn renew_keeps_token_and_moves_deadline() {
        let mut log = Log::new();
        let token = log.token("a", "alice", 3000);
        log.ticks(15);
        match log.renew("a", token, None).unwrap() {
            Outcome::Renewed { grant } => {
                assert_eq!(grant.token, token);
                assert_eq!(grant.deadline_tick, log.table.now_tick() + 31);
            }
            other => panic!("{other:?}"),
        }
        assert!(log.ticks(30).is_empty());
        log.renew("a", token, Some(5000)).unwrap();
        assert!(log.ticks(50).is_empty());
        assert_eq!(log.tick().len(), 1);
    }

    // Ensures renew and release of a free lock say NotHeld, with a wrong token StaleToken,
    // and change nothing.
    #[test]
    fn renew_and_release_with_unknown_or_stale_token_fail_clearly() {
        let mut log = Log::new();
        assert_eq!(log.renew("a", 1, None), Err(LockError::NotHeld { name: "a".into() }));
        assert_eq!(log.release("a", 1), Err(LockError::NotHeld { name: "a".into() }));
        let token = log.token("a", "alice", 3000);
        let before = log.table.clone();
        assert!(matches!(log.renew("a", token + 1, None), Err(LockError::StaleToken { .. })));
        assert!(matches!(log.release("a", token - 1), Err(LockError::StaleToken { .. })));
        assert_eq!(log.table, before);
        assert!(matches!(log.release("a", token), Ok(Outcome::Released { .. })));
        assert!(log.table.is_empty());
        assert_eq!(log.release("a", token), Err(LockError::NotHeld { name: "a".into() }));
    }

    // Ensures nothing expires without Ticks, however many other entries are applied.
    #[test]
    fn nothing_expires_without_ticks() {
        let mut log = Log::new();
        log.token("a", "alice", 3000);
        for i in 0..1000 {
            let _ = log.acquire(&format!("other{i}"), "bob", 3000);
        }
        assert_eq!(log.table.get("a").unwrap().owner, "alice");
    }

    // Ensures a Tick visits only the leases it expires (the deadline index stays in step).
    #[test]
    fn tick_expires_only_due_leases_in_deadline_order() {
        let mut log = Log::new();
        let t3 = log.token("c", "x", 4000);
        let t2 = log.token("b", "x", 3000);
        let t2b = log.token("a", "x", 3000);
        let expired = log.ticks(31);
        assert_eq!(expired, vec![("a".to_string(), t2b), ("b".to_string(), t2)]);
        assert_eq!(log.table.len(), 1);
        assert_eq!(log.ticks(10), vec![("c".to_string(), t3)]);
        assert!(log.table.by_deadline.is_empty());
    }

    // Ensures a longer tick period only lengthens leases, and a shorter one is ignored.
    #[test]
    fn tick_period_only_grows() {
        let mut log = Log::new();
        log.apply(Command::Tick { period_ms: 50 }).unwrap();
        assert_eq!(log.table.tick_ms(), TICK);
        log.apply(Command::Tick { period_ms: 200 }).unwrap();
        assert_eq!(log.table.tick_ms(), 200);
        let token = log.token("a", "alice", 3000); // 15 ticks of 200 ms, + 1
        assert!(log.ticks(15).is_empty());
        assert_eq!(log.tick(), vec![("a".to_string(), token)]);
    }

    // Ensures a grant before the first Tick assumes the smallest period, so it can only run long.
    #[test]
    fn grant_before_first_tick_runs_long() {
        let mut table = LockTable::new();
        let c = Command::Acquire { name: "a".into(), owner: "o".into(), ttl_ms: 3000, wait_ms: None, request_id: None };
        match table.apply(&c, 5).result.unwrap() {
            Outcome::Granted { grant, .. } => assert_eq!(grant.deadline_tick, 3000 / MIN_TICK_MS + 1),
            other => panic!("{other:?}"),
        }
    }

    // Ensures invalid commands that reach the log are refused deterministically.
    #[test]
    fn invalid_command_in_log_changes_nothing() {
        let mut log = Log::new();
        let before = log.table.clone();
        assert!(matches!(log.acquire("", "alice", 3000), Err(LockError::Invalid(_))));
        assert!(matches!(log.acquire("a", "alice", 1), Err(LockError::Invalid(_))));
        assert_eq!(log.table, before);
    }

    // Ensures list filters by prefix, keeps name order and honours the limit.
    #[test]
    fn list_by_prefix_and_limit() {
        let mut log = Log::new();
        for name in ["pay/2", "pay/1", "job/1", "pay/3", "pb"] {
            log.token(name, "o", 3000);
        }
        let names = |v: Vec<LeaseView>| v.into_iter().map(|l| l.name).collect::<Vec<_>>();
        assert_eq!(names(log.table.list("pay/", 10)), ["pay/1", "pay/2", "pay/3"]);
        assert_eq!(names(log.table.list("pay/", 2)), ["pay/1", "pay/2"]);
        assert_eq!(log.table.list("", 100).len(), 5);
        assert!(log.table.list("zzz", 10).is_empty());
    }

    // Ensures a snapshot image round-trips, deadline index included.
    #[test]
    fn image_round_trip_rebuilds_deadline_index() {
        let mut log = Log::new();
        log.token("a", "alice", 3000);
        log.token("b", "bob", 4000);
        let json = serde_json::to_vec(&TableImage::from(&log.table)).unwrap();
        let image: TableImage = serde_json::from_slice(&json).unwrap();
        assert_eq!(LockTable::from(image), log.table);
    }

    impl Log {
        fn wait(&mut self, name: &str, owner: &str, wait_ms: u64, request_id: Option<&str>) -> Applied {
            self.apply_with_events(Command::Acquire {
                name: name.into(),
                owner: owner.into(),
                ttl_ms: 3000,
                wait_ms: Some(wait_ms),
                request_id: request_id.map(Into::into),
            })
        }
        fn holder(&self, name: &str) -> Option<(String, FencingToken)> {
            self.table.get(name).map(|v| (v.owner, v.token))
        }
    }

    // Ensures waiters are granted in arrival order, each in the entry that frees
    // the lock, with that entry's index as token.
    #[test]
    fn waiters_are_granted_in_fifo_order_with_hand_over_index_as_token() {
        let mut log = Log::new();
        let mut token = log.token("a", "w0", 3000);
        for i in 1..=5 {
            let queued = log.wait("a", &format!("w{i}"), 60_000, None).result.unwrap();
            assert_eq!(queued, Outcome::Queued { name: "a".into(), owner: format!("w{i}"), position: i });
        }
        let view = log.table.get("a").unwrap();
        assert_eq!(view.waiters.iter().map(|w| w.position).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
        for i in 1..=5 {
            let applied = log.apply_with_events(Command::Release { name: "a".into(), token, request_id: None });
            let handed = applied.events.last().unwrap().clone();
            assert_eq!(
                handed,
                LockEvent {
                    index: log.index,
                    name: "a".into(),
                    kind: EventKind::HandedOver {
                        owner: format!("w{i}"),
                        token: log.index,
                        from_owner: format!("w{}", i - 1),
                        from_token: token
                    }
                }
            );
            assert_eq!(log.holder("a"), Some((format!("w{i}"), log.index)));
            assert!(log.index > token);
            token = log.index;
        }
        log.release("a", token).unwrap();
        assert!(log.table.get("a").is_none() && log.table.queues.is_empty() && log.table.by_wait_deadline.is_empty());
    }

    // Ensures an expiry hands the lock over in the Tick entry that expires it.
    #[test]
    fn expiry_hands_over_in_the_tick_entry() {
        let mut log = Log::new();
        let first = log.token("a", "holder", 3000);
        log.wait("a", "next", 60_000, None);
        assert!(log.ticks(30).is_empty());
        assert_eq!(log.tick(), vec![("a".to_string(), first)]);
        assert_eq!(log.holder("a"), Some(("next".to_string(), log.index)));
    }

    // Ensures a wait that runs out is removed on a Tick, answered wait_timeout
    // through its request id, and never becomes holder.
    #[test]
    fn wait_runs_out_on_a_tick() {
        let mut log = Log::new();
        let token = log.token("a", "holder", 60_000);
        log.wait("a", "late", 1000, Some("req-1"));
        let timed_out =
            (0..10).flat_map(|_| log.apply_with_events(Command::Tick { period_ms: TICK }).events).collect::<Vec<_>>();
        assert_eq!(timed_out.len(), 1);
        assert_eq!(timed_out[0].kind, EventKind::WaitTimeout { owner: "late".into() });
        assert!(!log.table.is_waiting("a", "late"));
        assert_eq!(log.wait("a", "late", 1000, Some("req-1")).result, Err(LockError::WaitTimeout { name: "a".into() }));
        log.release("a", token).unwrap();
        assert!(log.table.get("a").is_none(), "a timed-out waiter became holder");
    }

    // Ensures a cancelled waiter leaves the queue, never becomes holder, and its
    // request id may be used again.
    #[test]
    fn cancelled_waiter_never_becomes_holder() {
        let mut log = Log::new();
        let token = log.token("a", "holder", 60_000);
        log.wait("a", "gone", 60_000, Some("req-gone"));
        log.wait("a", "stays", 60_000, None);
        let cancel = log.apply(Command::Cancel { name: "a".into(), owner: "gone".into() }).unwrap();
        assert_eq!(cancel, Outcome::Cancelled { name: "a".into(), owner: "gone".into(), removed: true });
        let again = log.apply(Command::Cancel { name: "a".into(), owner: "gone".into() }).unwrap();
        assert_eq!(again, Outcome::Cancelled { name: "a".into(), owner: "gone".into(), removed: false });
        log.release("a", token).unwrap();
        assert_eq!(log.holder("a").unwrap().0, "stays");
        assert!(matches!(log.wait("b", "gone", 60_000, Some("req-gone")).result, Ok(Outcome::Granted { .. })));
    }

    // Ensures a queued owner that asks again keeps its place.
    #[test]
    fn queued_owner_keeps_its_place() {
        let mut log = Log::new();
        log.token("a", "holder", 60_000);
        log.wait("a", "w1", 60_000, None);
        log.wait("a", "w2", 60_000, None);
        let again = log.wait("a", "w1", 60_000, None);
        assert_eq!(again.result, Ok(Outcome::Queued { name: "a".into(), owner: "w1".into(), position: 1 }));
        assert!(again.events.is_empty());
    }

    // Ensures a retried request id returns the original result without applying
    // again, including a queued acquire later granted.
    #[test]
    fn request_id_replays_the_original_result() {
        let mut log = Log::new();
        let acquire = |id: &str| Command::Acquire {
            name: "a".into(),
            owner: "alice".into(),
            ttl_ms: 3000,
            wait_ms: None,
            request_id: Some(id.into()),
        };
        let first = log.apply(acquire("r1")).unwrap();
        log.ticks(5);
        let before = log.table.clone();
        assert_eq!(log.apply(acquire("r1")).unwrap(), first);
        assert_eq!(log.table, before, "a replay changed the table");
        let token = log.holder("a").unwrap().1;
        let release = Command::Release { name: "a".into(), token, request_id: Some("r2".into()) };
        log.apply(release.clone()).unwrap();
        assert_eq!(log.apply(release).unwrap(), Outcome::Released { name: "a".into(), token });
        assert!(matches!(log.apply(acquire("r2")), Err(LockError::RequestIdReused { .. })));

        let holder = log.token("b", "holder", 3000);
        log.wait("b", "bob", 60_000, Some("r3"));
        log.release("b", holder).unwrap();
        let handed = log.index;
        match log.wait("b", "bob", 60_000, Some("r3")).result.unwrap() {
            Outcome::Granted { grant, .. } => assert_eq!(grant.token, handed),
            other => panic!("{other:?}"),
        }
    }

    // Ensures the de-duplication table forgets requests older than its age bound.
    #[test]
    fn request_records_age_out() {
        let mut log = Log::new();
        log.apply(Command::Acquire {
            name: "a".into(),
            owner: "o".into(),
            ttl_ms: 3000,
            wait_ms: None,
            request_id: Some("old".into()),
        })
        .unwrap();
        assert_eq!(log.table.remembered_requests(), 1);
        log.ticks(MAX_REQUEST_AGE_MS / TICK);
        assert_eq!(log.table.remembered_requests(), 0);
    }

    // Ensures every change emits its event with the entry index, in order.
    #[test]
    fn events_tell_the_story_in_log_order() {
        let mut log = Log::new();
        let kinds = |a: Applied| a.events.into_iter().map(|e| (e.index, e.kind)).collect::<Vec<_>>();
        let acquired = kinds(log.apply_with_events(Command::Acquire {
            name: "a".into(),
            owner: "x".into(),
            ttl_ms: 3000,
            wait_ms: None,
            request_id: None,
        }));
        let token = log.index;
        assert_eq!(acquired, [(token, EventKind::Acquired { owner: "x".into(), token })]);
        let renewed =
            kinds(log.apply_with_events(Command::Renew { name: "a".into(), token, ttl_ms: None, request_id: None }));
        assert_eq!(renewed, [(log.index, EventKind::Renewed { owner: "x".into(), token })]);
        let released = kinds(log.apply_with_events(Command::Release { name: "a".into(), token, request_id: None }));
        assert_eq!(released, [(log.index, EventKind::Released { owner: "x".into(), token })]);
        log.token("a", "y", 3000);
        let expired: Vec<_> =
            (0..31).flat_map(|_| kinds(log.apply_with_events(Command::Tick { period_ms: TICK }))).collect();
        assert_eq!(expired, [(log.index, EventKind::Expired { owner: "y".into(), token: log.index - 31 })]);
    }

    // Ensures queues and request records survive a snapshot image round trip.
    #[test]
    fn image_round_trip_keeps_queues_and_requests() {
        let mut log = Log::new();
        log.token("a", "holder", 3000);
        log.wait("a", "w1", 60_000, Some("q1"));
        log.wait("a", "w2", 5_000, None);
        let json = serde_json::to_vec(&TableImage::from(&log.table)).unwrap();
        let restored = LockTable::from(serde_json::from_slice::<TableImage>(&json).unwrap());
        assert_eq!(restored, log.table);
    }

    impl Log {
        fn put(&mut self, key: &str, lock: &str, token: FencingToken, value: &str) -> Result<Outcome, LockError> {
            let value = value.to_owned();
            self.apply(Command::PutRecord { key: key.into(), lock: lock.into(), token, value, request_id: None })
        }
        fn gate(&mut self, resource: &str, lock: &str, token: FencingToken) -> Result<Outcome, LockError> {
            self.apply(Command::Gate { resource: resource.into(), lock: lock.into(), token, request_id: None })
        }
    }

    // Ensures a fenced record is written only under the current token of its
    // lock: after release, after expiry and with another lock's token it is refused.
    #[test]
    fn fenced_record_needs_the_current_token_of_its_lock() {
        let mut log = Log::new();
        let a = log.token("acct-1", "w1", 3000);
        let b = log.token("acct-2", "w2", 3000);
        assert!(matches!(log.put("balance-1", "acct-1", a, "100"), Ok(Outcome::RecordWritten { .. })));
        let written = log.index;
        let record = log.table.record("balance-1").unwrap().clone();
        assert_eq!((record.token, record.index, record.value), (a, written, "100".to_string()));
        // Another lock's (higher) token does not count for acct-1.
        assert_eq!(
            log.put("balance-1", "acct-1", b, "0"),
            Err(LockError::NotCurrent { lock: "acct-1".into(), given: b, current: Some(a) })
        );
        log.release("acct-1", a).unwrap();
        assert_eq!(
            log.put("balance-1", "acct-1", a, "1"),
            Err(LockError::NotCurrent { lock: "acct-1".into(), given: a, current: None })
        );
        log.ticks(31);
        assert!(matches!(log.put("balance-2", "acct-2", b, "1"), Err(LockError::NotCurrent { .. })));
        assert_eq!(log.table.record("balance-1").unwrap().value, "100", "refused writes changed nothing");
        assert!(log.table.record("balance-2").is_none());
    }

    // Ensures a gate admits equal or higher tokens, refuses lower ones, serves one
    // lock, and refuses tokens that were never granted.
    #[test]
    fn gate_admits_tokens_that_never_go_down() {
        let mut log = Log::new();
        let first = log.token("job", "a", 3000);
        log.release("job", first).unwrap();
        let second = log.token("job", "b", 3000);
        assert!(log.gate("printer", "job", first).is_ok());
        assert!(log.gate("printer", "job", second).is_ok());
        assert!(log.gate("printer", "job", second).is_ok(), "the same holder writes twice");
        assert_eq!(
            log.gate("printer", "job", first),
            Err(LockError::GateRejected { resource: "printer".into(), given: first, highest: second })
        );
        assert!(matches!(log.gate("printer", "other-lock", second + 1), Err(LockError::GateLockMismatch { .. })));
        assert!(matches!(log.gate("printer", "job", 1_000_000), Err(LockError::Invalid(_))));
        let json = serde_json::to_vec(&TableImage::from(&log.table)).unwrap();
        assert_eq!(LockTable::from(serde_json::from_slice::<TableImage>(&json).unwrap()), log.table);
    }
}
