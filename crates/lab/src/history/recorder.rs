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
    /// A read saw the lock free.
    Free,
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
    pub lock: String,
    /// The holder identity the request acts for.
    pub client: String,
    pub request_id: Option<String>,
    /// The token a renew or release names.
    pub token: Option<u64>,
    /// Send time of the first attempt, µs on the harness clock.
    pub sent_us: u64,
    /// Time the answer (or the give-up) arrived, µs on the harness clock.
    pub received_us: u64,
    pub result: OpResult,
}

impl Operation {
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
