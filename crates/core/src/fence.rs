//! Fencing served by the cluster, for resources that cannot check tokens
//! themselves (Chubby's CheckSequencer idea):
//!
//! - **Fenced records**: small values written only by the current holder of a
//!   lock. The token check and the write happen in the same log entry, so no
//!   stale holder can slip a write in between.
//! - **Gates**: a per-resource high-water mark of admitted tokens. A resource
//!   that only sees tokens asks the gate; the gate admits the current token
//!   of its lock, which is at least as high as every token it admitted
//!   before (the storage-side check from Kleppmann's critique of Redlock),
//!   and refuses lower ones and any other.

use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use super::tracked::{Changed, Tracked};
use super::{FencingToken, LockError, Outcome};

/// At most this many records, and this many gates: leasehold keeps payment
/// states and idempotency keys, it is not a general database.
pub const MAX_RECORDS: usize = 100_000;
pub const MAX_GATES: usize = 100_000;

/// A fenced record as stored and as read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub key: String,
    /// JSON text, as the API encoded it.
    pub value: String,
    /// The lock whose holder wrote it, and the holder's token.
    pub lock: String,
    pub token: FencingToken,
    /// Index of the log entry that wrote it.
    pub index: u64,
}

/// A gate's state: which lock's tokens it admits, and the highest admitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct GateState {
    lock: String,
    highest: FencingToken,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fences {
    records: Tracked<String, Record>,
    gates: Tracked<String, GateState>,
}

impl Fences {
    pub(crate) fn from_maps(records: BTreeMap<String, Record>, gates: BTreeMap<String, GateState>) -> Self {
        Fences { records: records.into(), gates: gates.into() }
    }

    /// The records and the gates.
    pub(crate) fn maps(&self) -> (&BTreeMap<String, Record>, &BTreeMap<String, GateState>) {
        (&self.records, &self.gates)
    }

    /// The keys of the records, and of the gates, changed since the last call.
    pub(crate) fn take_changed(&mut self) -> (Changed<String>, Changed<String>) {
        (self.records.take_changed(), self.gates.take_changed())
    }

    pub fn record(&self, key: &str) -> Option<&Record> {
        self.records.get(key)
    }

    /// Writes `value` under `key` if `token` is `current`, the token of the
    /// holder of `lock` when this entry applies. Errors: `NotCurrent` (with
    /// the current token, if the lock is held), `Full`.
    pub fn put(
        &mut self,
        key: &str,
        lock: &str,
        token: FencingToken,
        value: &str,
        current: Option<FencingToken>,
        index: u64,
    ) -> Result<Outcome, LockError> {
        must_be_current(lock, token, current)?;
        if !self.records.contains_key(key) && self.records.len() >= MAX_RECORDS {
            return Err(LockError::Full { what: "records".into(), limit: MAX_RECORDS });
        }
        let record = Record { key: key.to_owned(), value: value.to_owned(), lock: lock.to_owned(), token, index };
        self.records.insert(key.to_owned(), record);
        Ok(Outcome::RecordWritten { key: key.to_owned(), lock: lock.to_owned(), token, index })
    }

    /// Admits `token` of `lock` at gate `resource` if it is `current`, the
    /// token of the holder of `lock` when this entry applies, and at least
    /// the highest token admitted there before. A gate serves one lock: its
    /// first admission fixes which. Errors: `GateLockMismatch`,
    /// `GateRejected` (with the highest), `NotCurrent` (with the current
    /// token, if the lock is held), `Full`; a refused pass creates no gate.
    pub fn pass(
        &mut self,
        resource: &str,
        lock: &str,
        token: FencingToken,
        current: Option<FencingToken>,
    ) -> Result<Outcome, LockError> {
        match self.gates.get(resource) {
            Some(gate) if gate.lock != lock => {
                return Err(LockError::GateLockMismatch { resource: resource.to_owned(), lock: gate.lock.clone() })
            }
            // Answered with the gate's mark, what its resource compares
            // with, before the current token is looked at.
            Some(gate) if token < gate.highest => {
                return Err(LockError::GateRejected {
                    resource: resource.to_owned(),
                    given: token,
                    highest: gate.highest,
                })
            }
            Some(_) => {}
            None if self.gates.len() >= MAX_GATES => {
                return Err(LockError::Full { what: "gates".into(), limit: MAX_GATES })
            }
            None => {}
        }
        // Only the holder's token: any lower bound alone would let a token
        // never granted for this lock (another lock's grant index, say)
        // raise the gate above its real holder's.
        must_be_current(lock, token, current)?;
        // An existing gate (of this lock, checked above) is raised in place:
        // `get_mut` notes the row changed as `insert` would, without the
        // two new strings.
        match self.gates.get_mut(resource) {
            Some(gate) => gate.highest = token,
            None => {
                self.gates.insert(resource.to_owned(), GateState { lock: lock.to_owned(), highest: token });
            }
        }
        Ok(Outcome::GateAdmitted { resource: resource.to_owned(), lock: lock.to_owned(), token })
    }
}

/// `NotCurrent` (with the current token, if the lock is held) unless `token`
/// is `current`, the token of the holder of `lock` when the entry applies.
fn must_be_current(lock: &str, token: FencingToken, current: Option<FencingToken>) -> Result<(), LockError> {
    if current != Some(token) {
        return Err(LockError::NotCurrent { lock: lock.to_owned(), given: token, current });
    }
    Ok(())
}
