//! Request de-duplication: the replicated record of what each request id got.
//!
//! A client retries a mutation with the same `request_id` when it cannot tell
//! whether the first attempt was applied (a timeout, a leader crash). The
//! retry is answered from this record instead of being applied again, so it
//! gets the original token — also on a new leader, since the record is part of
//! the replicated state and of every snapshot.
//!
//! Bounded: at most [`MAX_REQUESTS`] records, none older than
//! [`MAX_REQUEST_AGE_MS`] of cluster time; the oldest go first. A retry after
//! that is applied as a new request.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{LockError, Outcome};

pub const MAX_REQUESTS: usize = 50_000;
pub const MAX_REQUEST_AGE_MS: u64 = 300_000;

/// What a request asked for, so an id reused for another request is caught.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestKind {
    Acquire,
    Renew,
    Release,
    AcquireMany,
    ReleaseMany,
    PutRecord,
    Gate,
    CreateSession,
    KeepAlive,
    DeleteSession,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    index: u64,
    tick: u64,
    name: String,
    kind: RequestKind,
    result: Result<Outcome, LockError>,
}

/// The de-duplication table. Serialized as its records; the age index is
/// rebuilt on load.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "BTreeMap<String, Record>", into = "BTreeMap<String, Record>")]
pub struct Requests {
    by_id: BTreeMap<String, Record>,
    /// Entry index → request id: oldest first, for eviction.
    by_index: BTreeMap<u64, String>,
}

impl From<BTreeMap<String, Record>> for Requests {
    fn from(by_id: BTreeMap<String, Record>) -> Self {
        let by_index = by_id.iter().map(|(id, r)| (r.index, id.clone())).collect();
        Requests { by_id, by_index }
    }
}

impl From<Requests> for BTreeMap<String, Record> {
    fn from(r: Requests) -> Self {
        r.by_id
    }
}

impl Requests {
    /// The recorded result of `id`, if it was seen; `RequestIdReused` when it
    /// was seen for another lock or operation.
    pub fn replay(&self, id: &str, name: &str, kind: RequestKind) -> Option<Result<Outcome, LockError>> {
        let record = self.by_id.get(id)?;
        if record.name != name || record.kind != kind {
            return Some(Err(LockError::RequestIdReused { request_id: id.to_owned() }));
        }
        Some(record.result.clone())
    }

    pub fn record(
        &mut self,
        id: &str,
        index: u64,
        tick: u64,
        name: &str,
        kind: RequestKind,
        result: &Result<Outcome, LockError>,
    ) {
        let record = Record { index, tick, name: name.to_owned(), kind, result: result.clone() };
        if let Some(old) = self.by_id.insert(id.to_owned(), record) {
            self.by_index.remove(&old.index);
        }
        self.by_index.insert(index, id.to_owned());
    }

    /// Replaces the result of `id` (a queued acquire that was granted or
    /// timed out), keeping its age.
    pub fn resolve(&mut self, id: &str, result: Result<Outcome, LockError>) {
        if let Some(record) = self.by_id.get_mut(id) {
            record.result = result;
        }
    }

    /// Forgets `id`: a cancelled wait may be retried as a new request.
    pub fn forget(&mut self, id: &str) {
        if let Some(old) = self.by_id.remove(id) {
            self.by_index.remove(&old.index);
        }
    }

    /// Drops records beyond the size bound or older than `max_age_ticks`.
    pub fn evict(&mut self, now_tick: u64, max_age_ticks: u64) {
        while let Some((_, id)) = self.by_index.first_key_value() {
            let record = &self.by_id[id];
            if self.by_id.len() <= MAX_REQUESTS && record.tick + max_age_ticks > now_tick {
                break;
            }
            let (_, id) = self.by_index.pop_first().expect("first_key_value was Some");
            self.by_id.remove(&id);
        }
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}
