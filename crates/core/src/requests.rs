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

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::tracked::{Changed, Tracked};
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

/// What one request id got: a row of the table's durable copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
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
    by_id: Tracked<String, Record>,
    /// (entry index, request id), oldest first, for eviction. The id is part
    /// of the key because one entry carries a batch of commands, each with
    /// its own request id: keyed by index alone, all but one of a batch's
    /// records were unreachable here and never evicted, and under load the
    /// records (and every snapshot) grew without bound.
    by_index: BTreeSet<(u64, String)>,
}

impl From<BTreeMap<String, Record>> for Requests {
    fn from(by_id: BTreeMap<String, Record>) -> Self {
        let by_index = by_id.iter().map(|(id, r)| (r.index, id.clone())).collect();
        Requests { by_id: by_id.into(), by_index }
    }
}

impl From<Requests> for BTreeMap<String, Record> {
    fn from(r: Requests) -> Self {
        (*r.by_id).clone()
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
            self.by_index.remove(&(old.index, id.to_owned()));
        }
        self.by_index.insert((index, id.to_owned()));
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
            self.by_index.remove(&(old.index, id.to_owned()));
        }
    }

    /// Drops records beyond the size bound or older than `max_age_ticks`.
    pub fn evict(&mut self, now_tick: u64, max_age_ticks: u64) {
        while let Some((_, id)) = self.by_index.first() {
            let record = &self.by_id[id];
            if self.by_id.len() <= MAX_REQUESTS && record.tick + max_age_ticks > now_tick {
                break;
            }
            let (_, id) = self.by_index.pop_first().expect("first was Some");
            self.by_id.remove(&id);
        }
    }

    /// The ids whose records changed since the last call.
    pub(crate) fn take_changed(&mut self) -> Changed<String> {
        self.by_id.take_changed()
    }

    pub(crate) fn map(&self) -> &BTreeMap<String, Record> {
        &self.by_id
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn released(name: &str) -> Result<Outcome, LockError> {
        Ok(Outcome::Released { name: name.into(), token: 1 })
    }

    // Ensures records that share an entry (a batch of commands) are all
    // bounded by size and by age, not only the last of each batch.
    #[test]
    fn batched_records_are_evicted_by_size_and_age() {
        let mut requests = Requests::default();
        let batch = 256;
        for n in 0..(MAX_REQUESTS + 2 * batch) {
            let index = (n / batch) as u64 + 1;
            requests.record(&format!("r{n}"), index, 0, "a", RequestKind::Release, &released("a"));
        }
        requests.evict(0, 1_000);
        assert_eq!(requests.len(), MAX_REQUESTS);
        assert!(requests.replay("r0", "a", RequestKind::Release).is_none(), "the oldest go first");
        let newest = format!("r{}", MAX_REQUESTS + 2 * batch - 1);
        assert!(requests.replay(&newest, "a", RequestKind::Release).is_some());
        requests.evict(1_000, 1_000);
        assert!(requests.is_empty(), "every record ages out");
    }

    // Ensures re-recording and forgetting an id of a batch leaves its
    // batch-mates' records in the eviction order.
    #[test]
    fn forgetting_one_record_of_a_batch_keeps_the_others_evictable() {
        let mut requests = Requests::default();
        for id in ["a", "b", "c"] {
            requests.record(id, 7, 0, "n", RequestKind::Release, &released("n"));
        }
        requests.forget("b");
        requests.record("c", 7, 0, "n", RequestKind::Release, &released("n"));
        assert_eq!(requests.len(), 2);
        requests.evict(10, 5);
        assert!(requests.is_empty());
        let image: Requests = BTreeMap::from(requests.clone()).into();
        assert_eq!(image, requests);
    }
}
