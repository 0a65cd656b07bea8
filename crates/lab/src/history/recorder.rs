//! The history recorder: one [`Operation`] per client request, with its send
//! and receive times on the harness's monotonic clock.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// The harness's monotonic clock. Times are microseconds since its origin,
/// so a history can be saved, reloaded and compared across tasks.
#[derive(Debug, Clone, Copy)]
pub struct HarnessClock {
    origin: Instant,
}

impl Default for HarnessClock {
    fn default() -> Self {
        Self::new()
    }
}

impl HarnessClock {
    pub fn new() -> Self {
        HarnessClock { origin: Instant::now() }
    }

    /// Microseconds since the origin, now.
    pub fn now_us(&self) -> u64 {
        self.at_us(Instant::now())
    }

    /// Microseconds since the origin at `instant` (0 for earlier instants).
    pub fn at_us(&self, instant: Instant) -> u64 {
        instant.saturating_duration_since(self.origin).as_micros() as u64
    }
}

/// What a client asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// Acquire without waiting.
    AcquireTry,
    /// Acquire, waiting in the lock's queue.
    AcquireWait,
    Renew,
    Release,
    /// A linearizable read of the lock's holder.
    Read,
    /// Atomic acquire of every lock in `names` under one token, without waiting.
    MultiAcquireTry,
    /// Atomic acquire of every lock in `names`, waiting until all can be granted together.
    MultiAcquireWait,
    /// Release of every lock in `names`, all held under `token`.
    MultiRelease,
    /// Opens a session (`session` set once it is known); locks acquired
    /// under it name it in `session`.
    SessionCreate,
    /// Restarts the session's deadline.
    KeepAlive,
    /// Ends the session, releasing every lock held under it.
    SessionDelete,
    /// A fenced record write: record `key` takes the write if `token` is
    /// the current token of `lock`.
    PutRecord,
    /// A read of record `key`.
    GetRecord,
    /// A pass of `token` of `lock` through gate `key`.
    Gate,
}

impl OpKind {
    /// An acquire of one lock or of several.
    pub fn is_acquire(self) -> bool {
        matches!(self, OpKind::AcquireTry | OpKind::AcquireWait | OpKind::MultiAcquireTry | OpKind::MultiAcquireWait)
    }

    /// An operation on a session itself (about no one lock).
    pub fn is_session(self) -> bool {
        matches!(self, OpKind::SessionCreate | OpKind::KeepAlive | OpKind::SessionDelete)
    }
}

/// What the client learned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum OpResult {
    /// An acquire or renew granted the lease under `token` for `ttl_ms`.
    Granted { token: u64, ttl_ms: u64 },
    /// A release took effect.
    Released,
    /// A read saw the lock held by `owner` under `token`.
    Held { owner: String, token: u64 },
    /// A read saw the lock free (or, of a record read, no record).
    Free,
    /// A session create or keepalive took effect: the session lives at
    /// least `ttl_ms` from the request's send time (no early expiry).
    SessionAlive { ttl_ms: u64 },
    /// A fenced record write took effect in the entry at `index`.
    Written { index: u64 },
    /// A record read saw the record written under `token` in the entry at `index`.
    Record { token: u64, index: u64 },
    /// A gate admitted the token.
    Admitted,
    /// A definite refusal (`held`, `stale_token`, `wait_timeout`, ...): nothing changed.
    Refused { code: String },
    /// No answer (timeout, connection lost, unavailable): it may or may not
    /// have taken effect.
    Unknown { reason: String },
}

/// One client request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    pub kind: OpKind,
    /// The lock a single-lock request is about; empty for multi-lock and
    /// session operations.
    pub lock: String,
    /// Every lock of a multi-lock request, in the order asked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// The session the request acts in or on: an acquire under it, a
    /// keepalive, a delete, a create once its id is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<u64>,
    /// The holder identity the request acts for.
    pub client: String,
    pub request_id: Option<String>,
    /// The token a renew, release, record write or gate pass names.
    pub token: Option<u64>,
    /// The record key of a record write or read; the gate of a gate pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The holder a `held` refusal named: what the refused client saw,
    /// which the linearizability checker holds against its model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// Send time of the first attempt, µs on the harness clock.
    pub sent_us: u64,
    /// Time the answer (or the give-up) arrived, µs on the harness clock.
    pub received_us: u64,
    pub result: OpResult,
}

impl Operation {
    /// A single-lock operation on `lock`, not in a session; `sent_us` as its
    /// receive time and result unknown until answered.
    pub fn single(kind: OpKind, lock: &str, client: &str, token: Option<u64>, sent_us: u64) -> Operation {
        Operation {
            kind,
            lock: lock.to_owned(),
            names: Vec::new(),
            session: None,
            client: client.to_owned(),
            request_id: None,
            token,
            key: None,
            holder: None,
            sent_us,
            received_us: sent_us,
            result: OpResult::Unknown { reason: "in flight".into() },
        }
    }

    /// The locks this operation is about: `names` for a multi-lock
    /// operation, `lock` for a single one, none for a session operation.
    pub fn locks(&self) -> impl Iterator<Item = &str> {
        let single = (self.names.is_empty() && !self.lock.is_empty()).then_some(self.lock.as_str());
        self.names.iter().map(String::as_str).chain(single)
    }

    /// An acknowledged grant of one lock or of several.
    pub fn is_grant(&self) -> bool {
        self.kind.is_acquire() && matches!(self.result, OpResult::Granted { .. })
    }

    /// The token this operation saw the lock held under, if it saw one.
    pub fn observed_token(&self) -> Option<u64> {
        match self.result {
            OpResult::Granted { token, .. } | OpResult::Held { token, .. } => Some(token),
            _ => None,
        }
    }
}

/// The shared recorder: clients push operations as they complete.
#[derive(Debug, Clone, Default)]
pub struct History {
    clock: HarnessClock,
    operations: Arc<Mutex<Vec<Operation>>>,
}

impl History {
    pub fn new(clock: HarnessClock) -> Self {
        History { clock, operations: Arc::default() }
    }

    pub fn clock(&self) -> HarnessClock {
        self.clock
    }

    pub fn record(&self, operation: Operation) {
        self.operations.lock().unwrap_or_else(PoisonError::into_inner).push(operation);
    }

    /// Everything recorded so far, in completion order.
    pub fn operations(&self) -> Vec<Operation> {
        self.operations.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}
