//! The lock table's value types: the answers it gives (grants, views,
//! outcomes, errors), the fencing token, its snapshot image, and the leases
//! and waiters it stores.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::num::{NonZeroU64, ParseIntError};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::super::event::LockEvent;
use super::super::fence::Fences;
use super::super::requests::{RequestKind, Requests};
use super::super::InvalidCommand;

/// The Raft log index of the entry that granted a lock. Strictly increasing per
/// lock name (log indexes only grow), not dense, and not unique across names.
/// A type of its own so that a token is never taken for another number (a
/// session id, a tick, a log index that granted nothing); on the wire and in
/// stored rows it is the plain number.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FencingToken(u64);

impl FencingToken {
    /// The token of a grant made by the log entry at `index`.
    pub const fn granted_at(index: u64) -> FencingToken {
        FencingToken(index)
    }

    /// The log index of the granting entry: the number on the wire.
    pub const fn get(self) -> u64 {
        self.0
    }
}

/// The bare number, as `NonZeroU64` does: error messages that show an
/// `Option<FencingToken>` with `{:?}` (`NotCurrent`) go on the wire.
impl fmt::Debug for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// The decimal number, as [`Display`](fmt::Display) writes it.
impl FromStr for FencingToken {
    type Err = ParseIntError;

    fn from_str(s: &str) -> Result<FencingToken, ParseIntError> {
        s.parse().map(FencingToken)
    }
}

/// The Raft log index of the entry that created a session: unique and
/// increasing, since an entry creates at most one (see [`Batch`](super::super::Batch)).
pub type SessionId = u64;

/// One held lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Lease {
    // Boxed text, not `String`: no spare capacity, and 8 bytes less in
    // every B-tree node slot (see `LockTable::leases`).
    pub(super) owner: Box<str>,
    pub(super) token: FencingToken,
    pub(super) ttl_ms: u64,
    /// The lease expires when a Tick makes `now_tick >= deadline`.
    pub(super) deadline: u64,
    /// The tick it was granted at, kept across renewals: its end reports
    /// how long it was held, so nothing outside the table has to remember
    /// the grant of every live lease.
    #[serde(default)]
    pub(super) granted_tick: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) request_id: Option<Box<str>>,
    /// How long nobody may take the lock after this lease *expires*; a
    /// delay of 0 is none. (Options of non-zero numbers take 8 bytes, not
    /// 16: a lease is stored a million times over.)
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "non_zero")]
    pub(super) lock_delay_ms: Option<NonZeroU64>,
    /// The session the lease lives by: it then has no deadline of its own
    /// (`deadline` is unused and the lease is not in the deadline index),
    /// and ends when the session does. Session ids are log indexes, never 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) session: Option<NonZeroU64>,
}

impl Lease {
    pub(super) fn session(&self) -> Option<SessionId> {
        self.session.map(NonZeroU64::get)
    }

    pub(super) fn lock_delay_ms(&self) -> Option<u64> {
        self.lock_delay_ms.map(NonZeroU64::get)
    }
}

/// Reads an optional number as a [`Lease`] keeps it: 0 as none (a lock
/// delay of 0 was stored as such before leases kept non-zero numbers).
fn non_zero<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<NonZeroU64>, D::Error> {
    Ok(Option::<u64>::deserialize(d)?.and_then(NonZeroU64::new))
}

/// A session: an owner's liveness, kept by keepalives, that any number of
/// leases live by. Its one deadline stands for all of them, so keeping a
/// session of a thousand locks alive touches one deadline, not a thousand.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Session {
    pub(super) owner: String,
    pub(super) ttl_ms: u64,
    /// The session expires when a Tick makes `now_tick >= deadline` (the
    /// rule of lease deadlines).
    pub(super) deadline: u64,
    /// Locks held (exclusively) under the session.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub(super) locks: BTreeSet<String>,
    /// Locks in whose queue a waiter of the session stands (shared or
    /// exclusive).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub(super) waits: BTreeSet<String>,
    /// Locks held in shared mode under the session.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub(super) shared: BTreeSet<String>,
    /// Semaphores whose permits are held under the session.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub(super) permits: BTreeSet<String>,
    /// Semaphores in whose queue a waiter of the session stands.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub(super) permit_waits: BTreeSet<String>,
    /// The answers to the session's last sequence numbers (at most
    /// [`MAX_SESSION_ANSWERS`](super::MAX_SESSION_ANSWERS), and fewer when
    /// the table's [`MAX_REMEMBERED_NAMES`](super::MAX_REMEMBERED_NAMES)
    /// is reached), by seq, for retries.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) answers: BTreeMap<u64, Answer>,
    /// Every sequence number below this one was forgotten, or never used.
    #[serde(default)]
    pub(super) forgotten_below: u64,
    /// The user that opened the session; `None` for a built-in principal
    /// (and sessions from before sessions kept it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) by: Option<String>,
}

/// A remembered answer of a session, with the index of the entry that gave
/// it (the table forgets the oldest answers first when it must) and what it
/// answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "AnswerForm")]
pub(super) struct Answer {
    pub(super) index: u64,
    /// `None` in answers stored before answers recorded it: those are
    /// replayed to any request with their seq, as they were then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) asked: Option<Asked>,
    pub(super) result: Result<Outcome, LockError>,
}

/// What a session's answer answered, so a seq reused for another request
/// is refused instead of given this answer: the kind of request and the
/// key its request id is recorded under (its lock, a multi-request's names,
/// a keepalive's session).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Asked {
    pub(super) kind: RequestKind,
    pub(super) key: String,
}

impl Answer {
    /// Its share of [`MAX_REMEMBERED_NAMES`](super::MAX_REMEMBERED_NAMES):
    /// the lock names it carries (at least one), which is what its size
    /// grows with.
    pub(super) fn weight(&self) -> usize {
        let names = match &self.result {
            Ok(Outcome::GrantedMany { grants, .. }) => grants.len(),
            Ok(Outcome::QueuedMany { positions, .. }) => positions.len(),
            Ok(Outcome::ReleasedMany { names, .. }) => names.len(),
            Err(LockError::Conflicts { conflicts }) => conflicts.len(),
            _ => 1,
        };
        names.max(1)
    }
}

/// How an [`Answer`] is read: images written before answers carried their
/// index hold the bare result, which then counts as the oldest.
#[derive(Deserialize)]
#[serde(untagged)]
enum AnswerForm {
    Indexed {
        index: u64,
        #[serde(default)]
        asked: Option<Asked>,
        result: Result<Outcome, LockError>,
    },
    Bare(Result<Outcome, LockError>),
}

impl From<AnswerForm> for Answer {
    fn from(form: AnswerForm) -> Self {
        match form {
            AnswerForm::Indexed { index, asked, result } => Answer { index, asked, result },
            AnswerForm::Bare(result) => Answer { index: 0, asked: None, result },
        }
    }
}

/// A free lock nobody may take before `until_tick`: the lease of `owner`
/// under `token`, granted with a lock delay, expired.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Delay {
    pub(super) until_tick: u64,
    pub(super) owner: String,
    pub(super) token: FencingToken,
}

/// One owner waiting in a lock's queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Waiter {
    pub(super) owner: String,
    /// The ttl its lease gets when the lock passes to it.
    pub(super) ttl_ms: u64,
    /// The wait ends (unsuccessfully) when a Tick makes `now_tick >= wait_deadline`.
    pub(super) wait_deadline: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) request_id: Option<String>,
    /// The lock delay its lease gets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) lock_delay_ms: Option<u64>,
    /// A multi-acquire's locks, this one among them, all granted at once
    /// (the waiter stands in each of their queues); empty for an acquire.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) set: Vec<String>,
    /// The session its lease will live by (`ttl_ms` is then unused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) session: Option<SessionId>,
    /// A shared (read) acquire; exclusive when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) shared: bool,
}

impl Waiter {
    /// The locks this waiter is granted together: its set, or `name` alone.
    pub(super) fn names<'a>(&'a self, name: &'a str) -> Vec<&'a str> {
        if self.set.is_empty() {
            vec![name]
        } else {
            self.set.iter().map(String::as_str).collect()
        }
    }
}

/// One lock of a multi-acquire that cannot be granted now, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conflict {
    pub name: String,
    #[serde(flatten)]
    pub blocker: Blocker,
}

/// What keeps a lock from a new acquire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Blocker {
    Held {
        holder: String,
        token: FencingToken,
        expires_in_ms: u64,
    },
    /// Free, under the lock delay of an expired lease.
    Delayed {
        delayed_until_tick: u64,
    },
    /// Free, and kept for the multi-acquire first in its queue, which waits
    /// for its other locks; or, for a shared acquire, someone waits first.
    Reserved {
        first_waiter: String,
    },
    /// Held in shared mode by `holders` owners, the newest grant under `token`.
    Shared {
        holders: usize,
        token: FencingToken,
    },
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

/// A session as a reader (or its creator) sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionView {
    pub session: SessionId,
    pub owner: String,
    pub ttl_ms: u64,
    /// Lower bound on the real time left, counted in whole tick periods.
    pub expires_in_ms: u64,
    pub deadline_tick: u64,
    /// Number of locks held under the session.
    pub lock_count: usize,
    /// Number of locks a waiter of the session is queued for.
    pub waiting_count: usize,
    /// The locks held under the session, in name order: given by a read of
    /// one session, left out of lists and of write answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locks: Option<Vec<SessionLock>>,
}

/// A lock held under a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionLock {
    pub name: String,
    pub token: FencingToken,
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
    /// The session the lease lives by, if any (then `ttl_ms` and the
    /// deadline are the session's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionId>,
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
    /// Every lock of a multi-acquire, in the order asked, under one token.
    GrantedMany {
        grants: Vec<Grant>,
        reacquired: bool,
    },
    /// The owner waits in the queue of every lock of a multi-acquire:
    /// `(name, position)` in the order asked.
    QueuedMany {
        owner: String,
        positions: Vec<(String, usize)>,
    },
    Renewed {
        grant: Grant,
    },
    Released {
        name: String,
        token: FencingToken,
    },
    ReleasedMany {
        names: Vec<String>,
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
    /// The clock advanced to `now_tick`; these leases expired in this entry
    /// (those of expired sessions among them), and these sessions.
    Ticked {
        now_tick: u64,
        expired: Vec<(String, FencingToken)>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        expired_sessions: Vec<SessionId>,
    },
    SessionCreated {
        session: SessionView,
    },
    /// A keepalive restarted the session's deadline.
    KeptAlive {
        session: SessionView,
    },
    /// The session ended on request; `released` are the locks it held, each
    /// handed to its first waiter in this entry.
    SessionDeleted {
        session: SessionId,
        released: Vec<String>,
    },
    /// Permits of a semaphore, new or the holder's own again (`reacquired`).
    PermitsGranted {
        grant: PermitGrant,
        reacquired: bool,
    },
    /// The owner waits for permits at `position` (1 = next).
    PermitsQueued {
        name: String,
        owner: String,
        position: usize,
    },
    PermitsRenewed {
        grant: PermitGrant,
    },
    PermitsReleased {
        name: String,
        owner: String,
        token: FencingToken,
    },
    /// The owner left the semaphore's queue (`false`: it was not waiting).
    PermitsCancelled {
        name: String,
        owner: String,
        removed: bool,
    },
    /// The semaphore's limit is now `limit`.
    LimitSet {
        name: String,
        limit: u32,
        in_use: u32,
    },
    /// The leader of an election announced a value.
    Proclaimed {
        leader: super::Leader,
    },
    /// Users or roles changed; `token_id` is the id of a token the entry
    /// added (the entry's index), if it added one.
    AccessChanged {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token_id: Option<u64>,
    },
    /// A Raft entry with no command (leader blank entry, membership change).
    Noop,
}

/// Permits of a semaphore, as their holder sees them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermitGrant {
    pub name: String,
    pub owner: String,
    pub token: FencingToken,
    pub permits: u32,
    pub limit: u32,
    pub ttl_ms: u64,
    /// Real time the lease is guaranteed to last from the commit of the
    /// entry that produced this answer.
    pub expires_in_ms: u64,
    pub deadline_tick: u64,
}

/// One holder of permits, as refusals and readers see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermitHolder {
    pub owner: String,
    pub token: FencingToken,
    pub permits: u32,
    /// Lower bound on the real time left, counted in whole tick periods.
    pub expires_in_ms: u64,
}

/// One owner waiting for permits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermitWaiterView {
    pub owner: String,
    pub permits: u32,
    /// 1 = next in line.
    pub position: usize,
}

/// A live semaphore as a reader sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SemaphoreView {
    pub name: String,
    pub limit: u32,
    pub in_use: u32,
    /// In token order (oldest grant first).
    pub holders: Vec<PermitHolder>,
    /// The queue, first in line first.
    pub waiters: Vec<PermitWaiterView>,
}

/// Why a command changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "error", rename_all = "snake_case")]
pub enum LockError {
    #[error("lock {name:?} is held by {holder:?} under token {token}")]
    HeldByOther { name: String, holder: String, token: FencingToken, expires_in_ms: u64 },
    #[error("lock {name:?} is not held")]
    NotHeld { name: String },
    /// Free, but kept for `first_waiter`, a multi-acquire first in its queue
    /// that waits for its other locks.
    #[error("lock {name:?} is free but reserved for {first_waiter:?}, first in its queue")]
    Reserved { name: String, first_waiter: String },
    /// A multi-acquire without `wait_ms` of which these locks cannot be granted now.
    #[error("{} of the locks asked for cannot be granted now: {}", conflicts.len(), describe(conflicts))]
    Conflicts { conflicts: Vec<Conflict> },
    /// The lock is free, but its last lease expired with a lock delay that
    /// runs until the Tick `delayed_until_tick`.
    #[error("lock {name:?} is delayed until tick {delayed_until_tick} (its last lease expired)")]
    LockDelayed { name: String, delayed_until_tick: u64 },
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
    /// No live session has this id (never created, expired or deleted).
    #[error("session {session} does not exist (it expired, was deleted, or never existed)")]
    SessionNotFound { session: SessionId },
    /// A renew of a lock (shared or not) or of permits held under a
    /// session: the session's keepalive keeps it, it has no lease of its
    /// own to restart.
    #[error("{name:?} is held under session {session}: keep the session alive instead of renewing it")]
    HeldUnderSession { name: String, session: SessionId },
    /// A sequence number of `session` older than those it remembers: its
    /// answer is forgotten, and applying it again could apply it twice.
    #[error("seq {seq} of session {session} is older than the answers it remembers (from {oldest})")]
    SeqTooOld { session: SessionId, seq: u64, oldest: u64 },
    /// A sequence number of `session` that answered another request
    /// (another kind of request, or about other locks): a client that
    /// reused it would otherwise be given that request's answer.
    #[error("seq {seq} of session {session} was already used for another request")]
    SeqReused { session: SessionId, seq: u64 },
    #[error("request id {request_id:?} was already used for another request")]
    RequestIdReused { request_id: String },
    /// Lock `name` is held in shared mode and an exclusive acquire did not wait.
    #[error("lock {name:?} is held shared by {holders} owner(s), the newest under token {token}")]
    HeldShared { name: String, holders: usize, token: FencingToken },
    /// Waiting would close a cycle of owners each waiting for the next
    /// (the last for the first, the asking owner): none of them could ever
    /// be granted. `cycle[0]` is the asking owner.
    #[error("waiting would deadlock: {}", cycle.join(" waits for ") + " waits for " + cycle.first().map_or("", String::as_str))]
    Deadlock { cycle: Vec<String> },
    /// No `permits` of semaphore `name` free now (or others wait first), and
    /// the acquire did not wait.
    #[error("semaphore {name:?} has {in_use} of {limit} permits in use{}", if *waiting > 0 { format!(" and {waiting} waiting") } else { String::new() })]
    SemaphoreFull { name: String, limit: u32, in_use: u32, waiting: usize, holders: Vec<PermitHolder> },
    /// An acquire named another limit than the live semaphore's.
    #[error("semaphore {name:?} has limit {limit}, not {given}")]
    LimitMismatch { name: String, limit: u32, given: u32 },
    /// Nobody holds or waits for a permit of semaphore `name`.
    #[error("semaphore {name:?} does not exist (nobody holds or waits for a permit)")]
    SemaphoreNotFound { name: String },
    /// A change of users or roles named a user that does not exist.
    #[error("no user {user:?}")]
    NoUser { user: String },
    /// A change of roles or of a user's roles named a role that does not exist.
    #[error("no role {role:?}")]
    NoRole { role: String },
    /// A revoke named a token id the user does not have.
    #[error("user {user:?} has no token {token_id}")]
    NoToken { user: String, token_id: u64 },
    /// A user or role of that name exists already (or the token is in use).
    #[error("{what} {name:?} exists already")]
    Exists { what: String, name: String },
    #[error("invalid command: {0}")]
    Invalid(InvalidCommand),
}

fn describe(conflicts: &[Conflict]) -> String {
    let one = |c: &Conflict| match &c.blocker {
        Blocker::Held { holder, token, .. } => format!("{:?} held by {holder:?} under token {token}", c.name),
        Blocker::Delayed { delayed_until_tick } => format!("{:?} delayed until tick {delayed_until_tick}", c.name),
        Blocker::Reserved { first_waiter } => format!("{:?} reserved for {first_waiter:?}", c.name),
        Blocker::Shared { holders, .. } => format!("{:?} held shared by {holders}", c.name),
    };
    conflicts.iter().map(one).collect::<Vec<_>>().join(", ")
}

/// The result of applying one entry: the answer for the proposer, and the
/// events the entry caused, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub result: Result<Outcome, LockError>,
    pub events: Vec<LockEvent>,
}

/// The serialized form of a [`LockTable`](super::LockTable) (snapshots). The deadline indexes
/// are derived, so they are rebuilt on load instead of being stored twice.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TableImage {
    pub(super) now_tick: u64,
    pub(super) tick_ms: Option<u64>,
    pub(super) leases: BTreeMap<super::LockName, Lease>,
    #[serde(default)]
    pub(super) queues: BTreeMap<String, VecDeque<Waiter>>,
    #[serde(default)]
    pub(super) requests: Requests,
    #[serde(default)]
    pub(super) fences: Fences,
    /// Absent from snapshots taken before lock delays existed.
    #[serde(default)]
    pub(super) delays: BTreeMap<String, Delay>,
    /// Absent from snapshots taken before sessions existed.
    #[serde(default)]
    pub(super) sessions: BTreeMap<SessionId, Session>,
    /// Shared holders by lock, then owner; absent before shared locks existed.
    #[serde(default)]
    pub(super) shared: BTreeMap<String, BTreeMap<String, Lease>>,
    /// Absent from snapshots taken before semaphores existed.
    #[serde(default)]
    pub(super) semaphores: BTreeMap<String, super::semaphore::Semaphore>,
    /// Absent from snapshots taken before elections existed.
    #[serde(default)]
    pub(super) elections: BTreeMap<String, super::election::Election>,
    /// Absent from snapshots taken before users and roles existed.
    #[serde(default)]
    pub(super) users: BTreeMap<String, crate::access::User>,
    #[serde(default)]
    pub(super) roles: BTreeMap<String, crate::access::Role>,
}
