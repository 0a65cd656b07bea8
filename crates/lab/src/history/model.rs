//! The sequential model of leasehold's lock table that the linearizability
//! checker ([`super::linearizability`]) replays histories against: what one
//! operation may answer in a given state, and the state it leaves.
//!
//! The state is a row of [`Slot`]s, one per lock, session, fenced record
//! and gate of one partition of the history, so that the search can undo a
//! step by putting back the few slots it wrote and can fingerprint a state
//! incrementally. A new primitive (a semaphore, an election) is one more
//! kind of slot and one more arm of [`step`].
//!
//! What the model allows, and why it is sound for a cluster that keeps its
//! promises (see `docs/fault-suite.md`, "Linearizability"):
//!
//! - **Grants** carry a token above every earlier token of the lock; a lock
//!   is held by one owner at a time; an acquire by the holder re-grants
//!   under the same token and restarts its lease.
//! - **Expiry** is a step the cluster may take on its own, but only once
//!   the lease's ttl has surely passed in real time: a lease anchored at the
//!   *send* of the request that granted or renewed it (the Tick that expires
//!   it is proposed at least ttl after the grant was proposed, which is
//!   after the send) may expire at a point no earlier than anchor + ttl. A
//!   session expires the same way, with every lock held under it.
//! - **Waiting acquires** are judged at their grant: the queue itself (its
//!   order, reservations for multi-lock waiters) is not modelled, so a
//!   refusal for `wait_timeout`, `reserved` or any multi-lock conflict is
//!   allowed in any state; a single acquire's `held` is not.
//! - **Unknown answers**: an operation whose answer was lost may take effect
//!   at any point after its send, or never; [`step`] gives only its
//!   effects, and never taking effect is the search's business.

use std::hash::{DefaultHasher, Hash, Hasher};

use super::OpKind;

/// The shortest lease or session ttl the cluster accepts: an acquire whose
/// answer was lost may have been granted for that long at least.
pub(super) const SHORTEST_TTL_US: u64 = 3_000_000;

/// Index of a slot in a partition's state.
pub(super) type SlotId = u32;
/// An interned owner (client) name.
pub(super) type OwnerId = u32;

/// What the state holds about one lock, session, record or gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Slot {
    Lock(Lock),
    Session(Session),
    /// The last write to a fenced record, if any.
    Record(Option<Written>),
    /// The lock a gate serves and the highest token it admitted, once it
    /// admitted one.
    Gate(Option<Admission>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(super) struct Lock {
    pub holder: Option<Holder>,
    /// The highest token the lock was granted under (0: none yet).
    pub last_token: u64,
}

/// The current lease of a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Holder {
    pub owner: OwnerId,
    /// `None` for a grant whose answer was lost, until an operation shows it.
    pub token: Option<u64>,
    pub life: Life,
}

/// What a lease lives by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Life {
    /// Its own ttl: it may expire from `deadline_us` on (anchor + ttl).
    Ttl { deadline_us: u64 },
    /// The session in this slot: it ends with it.
    Session(SlotId),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Session {
    /// Its create is not linearized yet.
    Unborn,
    /// Alive; may expire from `deadline_us` on.
    Alive { deadline_us: u64 },
    /// Deleted or expired: sessions never come back.
    Ended,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Written {
    pub token: u64,
    /// The index of the entry that wrote it; `None` for a write whose answer was lost.
    pub index: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Admission {
    pub lock: SlotId,
    pub highest: u64,
}

/// A refusal's code, as far as the model tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    Held,
    NotHeld,
    StaleToken,
    SessionNotFound,
    HeldUnderSession,
    LockMismatch,
    /// Any other definite refusal: nothing changed, in any state.
    Other,
}

impl Refusal {
    pub fn from_code(code: &str) -> Refusal {
        match code {
            "held" => Refusal::Held,
            "not_held" => Refusal::NotHeld,
            "stale_token" => Refusal::StaleToken,
            "session_not_found" => Refusal::SessionNotFound,
            "held_under_session" => Refusal::HeldUnderSession,
            "lock_mismatch" => Refusal::LockMismatch,
            _ => Refusal::Other,
        }
    }
}

/// What the client learned, over interned names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Answer {
    Granted {
        token: u64,
        ttl_us: u64,
    },
    Released,
    Held {
        owner: OwnerId,
        token: u64,
    },
    Free,
    Alive {
        ttl_us: u64,
    },
    Written {
        index: u64,
    },
    Record {
        token: u64,
        index: u64,
    },
    Admitted,
    /// `holder`: the owner a `held` refusal named, if it named one.
    Refused {
        refusal: Refusal,
        holder: Option<OwnerId>,
    },
    Unknown,
}

/// One operation of a partition, its names resolved to slots.
#[derive(Debug, Clone)]
pub(super) struct Call {
    pub kind: OpKind,
    pub owner: OwnerId,
    /// The locks it is about, in the order asked.
    pub locks: Vec<SlotId>,
    /// The session it acts in or on.
    pub session: Option<SlotId>,
    /// The record or gate it is about.
    pub key: Option<SlotId>,
    pub token: Option<u64>,
    pub sent_us: u64,
    /// `u64::MAX` when the answer never came.
    pub received_us: u64,
    pub answer: Answer,
}

/// One way an operation can take effect: the slots it writes, and the
/// earliest real time at which it (and the expiries before it) can have
/// happened.
#[derive(Debug, Clone)]
pub(super) struct Transition {
    pub writes: Vec<(SlotId, Slot)>,
    pub at_us: u64,
}

/// Why an operation cannot be linearized in a state: the slot that
/// contradicts its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Contradiction {
    pub slot: SlotId,
    pub why: &'static str,
}

/// A partition's model state, with an incremental fingerprint.
#[derive(Debug, Clone)]
pub(super) struct State {
    slots: Vec<Slot>,
    fingerprint: u64,
    /// Per session slot, every lock ever acquired under it: the locks its
    /// end may free (fixed for the partition, so no part of the fingerprint).
    session_locks: Vec<Vec<SlotId>>,
}

fn slot_hash(id: SlotId, slot: &Slot) -> u64 {
    let mut h = DefaultHasher::new();
    (id, slot).hash(&mut h);
    h.finish()
}

impl State {
    /// `session_locks`: per slot, the locks ever acquired under it when it
    /// is a session (empty otherwise).
    pub fn new(slots: Vec<Slot>, session_locks: Vec<Vec<SlotId>>) -> State {
        let fingerprint = slots.iter().enumerate().fold(0, |f, (i, s)| f ^ slot_hash(i as SlotId, s));
        State { slots, fingerprint, session_locks }
    }

    /// A hash of every slot, kept up to date by [`set`](State::set).
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    pub fn get(&self, id: SlotId) -> Slot {
        self.slots[id as usize]
    }

    /// Writes `slot`, returning what was there.
    pub fn set(&mut self, id: SlotId, slot: Slot) -> Slot {
        let old = std::mem::replace(&mut self.slots[id as usize], slot);
        self.fingerprint ^= slot_hash(id, &old) ^ slot_hash(id, &slot);
        old
    }
}

/// A state with a step's writes laid over it, not yet applied.
struct View<'a> {
    base: &'a State,
    writes: Vec<(SlotId, Slot)>,
}

impl View<'_> {
    fn get(&self, id: SlotId) -> Slot {
        self.writes.iter().rev().find(|(i, _)| *i == id).map_or_else(|| self.base.get(id), |(_, s)| *s)
    }

    fn set(&mut self, id: SlotId, slot: Slot) {
        self.writes.push((id, slot));
    }

    fn lock(&self, id: SlotId) -> Lock {
        match self.get(id) {
            Slot::Lock(lock) => lock,
            other => unreachable!("slot {id} is a lock, not {other:?}"),
        }
    }

    fn session(&self, id: SlotId) -> Session {
        match self.get(id) {
            Slot::Session(session) => session,
            other => unreachable!("slot {id} is a session, not {other:?}"),
        }
    }

    fn set_holder(&mut self, id: SlotId, holder: Option<Holder>) {
        let mut lock = self.lock(id);
        lock.holder = holder;
        if let Some(token) = holder.and_then(|h| h.token) {
            lock.last_token = lock.last_token.max(token);
        }
        self.set(id, Slot::Lock(lock));
    }

    /// Ends session `id` (deleted or expired) and frees every lock held under it.
    fn end_session(&mut self, id: SlotId) {
        self.set(id, Slot::Session(Session::Ended));
        for &lock in &self.base.session_locks[id as usize] {
            if let Slot::Lock(Lock { holder: Some(h), .. }) = self.get(lock) {
                if h.life == Life::Session(id) {
                    self.set_holder(lock, None);
                }
            }
        }
    }

    fn alive(&self, session: Option<SlotId>) -> bool {
        session.is_none_or(|s| matches!(self.session(s), Session::Alive { .. }))
    }
}

/// A lease or session that may expire before an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expiry {
    Lease(SlotId),
    Session(SlotId),
}

/// The leases and sessions whose expiry the operation could observe: those
/// of the locks it touches, and its own session. (An expiry that no later
/// operation touches changes nothing; one that a later operation touches can
/// always be moved to just before it, since deadlines only ever allow later
/// expiry.)
fn expiries(state: &State, call: &Call) -> Vec<(Expiry, u64)> {
    let mut found: Vec<(Expiry, u64)> = Vec::new();
    let add_session = |found: &mut Vec<(Expiry, u64)>, s: SlotId| {
        if let Slot::Session(Session::Alive { deadline_us }) = state.get(s) {
            if !found.iter().any(|(e, _)| *e == Expiry::Session(s)) {
                found.push((Expiry::Session(s), deadline_us));
            }
        }
    };
    for &lock in &call.locks {
        if let Slot::Lock(Lock { holder: Some(h), .. }) = state.get(lock) {
            match h.life {
                Life::Ttl { deadline_us } => found.push((Expiry::Lease(lock), deadline_us)),
                Life::Session(s) => add_session(&mut found, s),
            }
        }
    }
    if let Some(s) = call.session {
        add_session(&mut found, s);
    }
    found
}

/// Every way `call` can take effect in `state` when the last point placed
/// so far is `after_us`: for each set of the expiries it could observe
/// (each allowed only from its deadline on), the operation's own effect.
/// An error when none can: the answer contradicts the state.
pub(super) fn step(state: &State, call: &Call, after_us: u64) -> Result<Vec<Transition>, Contradiction> {
    let expirable = expiries(state, call);
    let mut transitions = Vec::new();
    let mut first_error = None;
    for mask in 0u32..(1 << expirable.len()) {
        let chosen = expirable.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, e)| *e);
        let expired_at = chosen.clone().map(|(_, deadline)| deadline).max().unwrap_or(0);
        let at_us = after_us.max(expired_at).max(call.sent_us);
        if at_us > call.received_us {
            continue;
        }
        let mut view = View { base: state, writes: Vec::new() };
        for (expiry, _) in chosen {
            match expiry {
                Expiry::Lease(lock) => view.set_holder(lock, None),
                Expiry::Session(s) => view.end_session(s),
            }
        }
        match apply(&mut view, call) {
            Ok(true) => transitions.push(Transition { writes: view.writes, at_us }),
            Ok(false) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match (transitions.is_empty(), first_error) {
        (true, Some(e)) => Err(e),
        _ => Ok(transitions),
    }
}

fn contradiction(slot: SlotId, why: &'static str) -> Result<bool, Contradiction> {
    Err(Contradiction { slot, why })
}

/// Applies `call` with its answer to `view`: `Ok(true)` when it can take
/// effect (or be answered) so, `Ok(false)` when an operation whose answer
/// was lost would have no effect here.
fn apply(view: &mut View, call: &Call) -> Result<bool, Contradiction> {
    match call.kind {
        OpKind::AcquireTry | OpKind::AcquireWait | OpKind::MultiAcquireTry | OpKind::MultiAcquireWait => {
            acquire(view, call)
        }
        OpKind::Renew => renew(view, call),
        OpKind::Release | OpKind::MultiRelease => release(view, call),
        OpKind::Read => read(view, call),
        OpKind::SessionCreate | OpKind::KeepAlive | OpKind::SessionDelete => session(view, call),
        OpKind::PutRecord | OpKind::GetRecord => record(view, call),
        OpKind::Gate => gate(view, call),
    }
}

/// How a lock stands towards an operation by `owner` naming `token`.
fn is_holder(holder: &Holder, owner: OwnerId, token: u64) -> bool {
    match holder.token {
        Some(t) => t == token,
        // A grant whose answer was lost: only its owner can name its token.
        None => holder.owner == owner,
    }
}

fn acquire(view: &mut View, call: &Call) -> Result<bool, Contradiction> {
    let multi = matches!(call.kind, OpKind::MultiAcquireTry | OpKind::MultiAcquireWait);
    let life = |ttl_us: u64| match call.session {
        Some(s) => Life::Session(s),
        None => Life::Ttl { deadline_us: call.sent_us + ttl_us },
    };
    let all_free = call.locks.iter().all(|l| view.lock(*l).holder.is_none());
    match call.answer {
        Answer::Granted { token, ttl_us } => {
            if !view.alive(call.session) {
                return contradiction(call.session.unwrap_or_default(), "granted under a session that had ended");
            }
            let mine = |h: &Holder| h.owner == call.owner && h.token.is_none_or(|t| t == token);
            let all_mine = call.locks.iter().all(|l| view.lock(*l).holder.is_some_and(|h| mine(&h)));
            // A new grant, or a re-acquire by the holder (same token,
            // restarted lease); one set never mixes the two.
            if !all_free && !all_mine {
                let taken = call.locks.iter().copied().find(|l| view.lock(*l).holder.is_some_and(|h| !mine(&h)));
                return contradiction(taken.unwrap_or(call.locks[0]), "granted while another lease held the lock");
            }
            for &lock in &call.locks {
                let current = view.lock(lock);
                let first_sight = current.holder.is_none_or(|h| h.token.is_none());
                if first_sight && token <= current.last_token {
                    return contradiction(lock, "granted under a token not above the lock's last token");
                }
                let life = match current.holder {
                    Some(Holder { life: Life::Session(s), .. }) => Life::Session(s),
                    _ => life(ttl_us),
                };
                view.set_holder(lock, Some(Holder { owner: call.owner, token: Some(token), life }));
            }
            Ok(true)
        }
        Answer::Refused { refusal: Refusal::Held, holder } if !multi => {
            let lock = call.locks[0];
            match view.lock(lock).holder {
                Some(h) if h.owner != call.owner && holder.is_none_or(|named| named == h.owner) => Ok(true),
                Some(h) if h.owner != call.owner => {
                    contradiction(lock, "refused as held by an owner that did not hold it")
                }
                _ => contradiction(lock, "refused as held while free (or held by the asker)"),
            }
        }
        Answer::Refused { refusal: Refusal::SessionNotFound, .. } if !view.alive(call.session) => Ok(true),
        Answer::Refused { refusal: Refusal::SessionNotFound, .. } => {
            contradiction(call.session.unwrap_or_default(), "refused for an ended session that was alive")
        }
        Answer::Refused { .. } => Ok(true),
        Answer::Unknown if view.alive(call.session) && all_free => {
            for &lock in &call.locks {
                let holder = Holder { owner: call.owner, token: None, life: life(SHORTEST_TTL_US) };
                view.set_holder(lock, Some(holder));
            }
            Ok(true)
        }
        Answer::Unknown => Ok(false),
        _ => contradiction(call.locks[0], "an acquire answered like another operation"),
    }
}

fn renew(view: &mut View, call: &Call) -> Result<bool, Contradiction> {
    let lock = call.locks[0];
    let token = call.token.unwrap_or_default();
    let holder = view.lock(lock).holder;
    let held = holder.filter(|h| is_holder(h, call.owner, token));
    match (call.answer, held) {
        (Answer::Granted { token: renewed, ttl_us }, Some(h)) if renewed == token => {
            if let Life::Session(_) = h.life {
                return contradiction(lock, "renewed a lease that lives by its session");
            }
            let life = Life::Ttl { deadline_us: call.sent_us + ttl_us };
            view.set_holder(lock, Some(Holder { token: Some(token), life, ..h }));
            Ok(true)
        }
        (Answer::Granted { .. }, _) => contradiction(lock, "renewed a lease that was not current"),
        (Answer::Refused { refusal: Refusal::NotHeld, .. }, _) if holder.is_some() => {
            contradiction(lock, "refused as not held while held")
        }
        (Answer::Refused { refusal: Refusal::StaleToken, .. }, Some(_)) => {
            contradiction(lock, "refused as stale while the token was current")
        }
        (Answer::Refused { refusal: Refusal::HeldUnderSession, .. }, h)
            if !matches!(h, Some(Holder { life: Life::Session(_), .. })) =>
        {
            contradiction(lock, "refused as held under a session while it was not")
        }
        (Answer::Refused { .. }, _) => Ok(true),
        // A renew whose answer was lost only ever makes expiry later: the
        // checker leaves it out, and so it never reaches here.
        (Answer::Unknown, _) => Ok(false),
        _ => contradiction(lock, "a renew answered like another operation"),
    }
}

fn release(view: &mut View, call: &Call) -> Result<bool, Contradiction> {
    let token = call.token.unwrap_or_default();
    let not_current =
        call.locks.iter().copied().find(|l| !view.lock(*l).holder.is_some_and(|h| is_holder(&h, call.owner, token)));
    match (call.answer, not_current) {
        (Answer::Released | Answer::Unknown, None) => {
            for &lock in &call.locks {
                view.set_holder(lock, None);
            }
            Ok(true)
        }
        (Answer::Released, Some(lock)) => contradiction(lock, "released a lease that was not current"),
        (Answer::Unknown, Some(_)) => Ok(false),
        (Answer::Refused { refusal: Refusal::NotHeld | Refusal::StaleToken, .. }, None) => {
            contradiction(call.locks[0], "refused while the token was current")
        }
        (Answer::Refused { .. }, _) => Ok(true),
        _ => contradiction(call.locks[0], "a release answered like another operation"),
    }
}

fn read(view: &mut View, call: &Call) -> Result<bool, Contradiction> {
    let lock = call.locks[0];
    let current = view.lock(lock);
    match (call.answer, current.holder) {
        (Answer::Free, None) => Ok(true),
        (Answer::Free, Some(_)) => contradiction(lock, "read free while held"),
        (Answer::Held { .. }, None) => contradiction(lock, "read held while free"),
        (Answer::Held { owner, token }, Some(h)) if h.owner == owner => match h.token {
            Some(t) if t == token => Ok(true),
            Some(_) => contradiction(lock, "read the holder under another token"),
            // The first sight of a grant whose answer was lost: it must be
            // above the lock's earlier tokens.
            None if token > current.last_token => {
                view.set_holder(lock, Some(Holder { token: Some(token), ..h }));
                Ok(true)
            }
            None => contradiction(lock, "read a token not above the lock's last token"),
        },
        (Answer::Held { .. }, Some(_)) => contradiction(lock, "read another owner than the holder"),
        (Answer::Refused { .. } | Answer::Unknown, _) => Ok(false),
        _ => contradiction(lock, "a read answered like another operation"),
    }
}

fn session(view: &mut View, call: &Call) -> Result<bool, Contradiction> {
    let Some(id) = call.session else {
        // A create whose answer was lost names no session: nothing to check.
        return Ok(false);
    };
    let current = view.session(id);
    let alive = matches!(current, Session::Alive { .. });
    match (call.kind, call.answer) {
        (OpKind::SessionCreate, Answer::Alive { ttl_us }) if current == Session::Unborn => {
            view.set(id, Slot::Session(Session::Alive { deadline_us: call.sent_us + ttl_us }));
            Ok(true)
        }
        (OpKind::SessionCreate, Answer::Alive { .. }) => contradiction(id, "a session created twice"),
        (OpKind::KeepAlive, Answer::Alive { ttl_us }) if alive => {
            view.set(id, Slot::Session(Session::Alive { deadline_us: call.sent_us + ttl_us }));
            Ok(true)
        }
        (OpKind::KeepAlive, Answer::Alive { .. }) => contradiction(id, "kept alive a session that had ended"),
        (OpKind::SessionDelete, Answer::Released | Answer::Unknown) if alive => {
            view.end_session(id);
            Ok(true)
        }
        (OpKind::SessionDelete, Answer::Released) => contradiction(id, "deleted a session that had ended"),
        (_, Answer::Refused { refusal: Refusal::SessionNotFound, .. }) if alive => {
            contradiction(id, "refused as ended while alive")
        }
        (_, Answer::Refused { .. }) => Ok(true),
        (_, Answer::Unknown) => Ok(false),
        _ => contradiction(id, "a session operation answered like another operation"),
    }
}

/// The current token of `lock`, if its holder's token is known.
fn current_token(view: &View, lock: SlotId) -> Option<u64> {
    view.lock(lock).holder.and_then(|h| h.token)
}

fn record(view: &mut View, call: &Call) -> Result<bool, Contradiction> {
    let key = call.key.expect("a record operation names its key");
    let Slot::Record(last) = view.get(key) else { unreachable!("slot {key} is a record") };
    if call.kind == OpKind::GetRecord {
        return match (call.answer, last) {
            (Answer::Free, None) => Ok(true),
            (Answer::Record { token, index }, Some(w)) if w.token == token && w.index.is_none_or(|i| i == index) => {
                view.set(key, Slot::Record(Some(Written { token, index: Some(index) })));
                Ok(true)
            }
            (Answer::Free | Answer::Record { .. }, _) => {
                contradiction(key, "read a record other than the last written")
            }
            (Answer::Refused { .. } | Answer::Unknown, _) => Ok(false),
            _ => contradiction(key, "a record read answered like another operation"),
        };
    }
    let lock = call.locks[0];
    let token = call.token.unwrap_or_default();
    let current = current_token(view, lock) == Some(token);
    match call.answer {
        Answer::Written { index }
            if current && index > token && last.is_none_or(|w| w.index.is_none_or(|i| index > i)) =>
        {
            view.set(key, Slot::Record(Some(Written { token, index: Some(index) })));
            Ok(true)
        }
        Answer::Written { .. } if current => {
            contradiction(key, "a record written at an index not after its grant and the last write")
        }
        Answer::Written { .. } => contradiction(lock, "a record written under a token that was not current"),
        Answer::Refused { refusal: Refusal::StaleToken, .. } if current => {
            contradiction(lock, "a record write refused while its token was current")
        }
        Answer::Refused { .. } => Ok(true),
        Answer::Unknown if current => {
            view.set(key, Slot::Record(Some(Written { token, index: None })));
            Ok(true)
        }
        Answer::Unknown => Ok(false),
        _ => contradiction(key, "a record write answered like another operation"),
    }
}

fn gate(view: &mut View, call: &Call) -> Result<bool, Contradiction> {
    let key = call.key.expect("a gate pass names its gate");
    let Slot::Gate(admitted) = view.get(key) else { unreachable!("slot {key} is a gate") };
    let lock = call.locks[0];
    let token = call.token.unwrap_or_default();
    let same_lock = admitted.is_none_or(|a| a.lock == lock);
    let admissible =
        same_lock && current_token(view, lock) == Some(token) && admitted.is_none_or(|a| token >= a.highest);
    match call.answer {
        Answer::Admitted | Answer::Unknown if admissible => {
            view.set(key, Slot::Gate(Some(Admission { lock, highest: token })));
            Ok(true)
        }
        Answer::Admitted => contradiction(key, "a gate admitted a token that was not current or below its highest"),
        Answer::Refused { refusal: Refusal::StaleToken, .. } if admissible => {
            contradiction(key, "a gate refused a current token")
        }
        Answer::Refused { refusal: Refusal::LockMismatch, .. } if same_lock => {
            contradiction(key, "a gate refused its own lock as another's")
        }
        Answer::Refused { .. } => Ok(true),
        Answer::Unknown => Ok(false),
        _ => contradiction(key, "a gate pass answered like another operation"),
    }
}
