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

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::tracked::Changed;
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
    AcquireShared,
    RenewShared,
    ReleaseShared,
    AcquirePermits,
    RenewPermits,
    ReleasePermits,
    Campaign,
    Proclaim,
    Resign,
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

/// The de-duplication table. Serialized as its records (in id order); the
/// eviction order is rebuilt on load.
///
/// Every command with a request id looks one up and most add one, on every
/// replica, so this is on the apply path of nearly every entry: the records
/// are hashed, not kept in a B-tree (ids of one client share a long prefix,
/// which a B-tree compares at every level), and the eviction order is a
/// queue, since records are made in log order.
#[derive(Debug, Clone, Default)]
pub struct Requests {
    by_id: HashMap<String, Record>,
    /// `(entry index, request id)` of every record, oldest first, for
    /// eviction; records of one entry (a batch of commands) by id. An id
    /// recorded again or forgotten leaves its old place behind, skipped
    /// when it comes up ([`Requests::evict`]): a place is live only while
    /// its id's record has its index. The order is the same on every
    /// replica, and the same after a reload, which sorts the records so.
    order: VecDeque<(u64, String)>,
    /// What changed since the last [`take_changed`](Requests::take_changed),
    /// kept so that noting it costs next to nothing on the apply path (a
    /// map of every id noted cost a hashed insert with a cache miss per
    /// command, in a map that grew until the checkpoint): the records made
    /// since are those with a later index than `taken_at` (in `order`);
    /// what else changed is listed here, for the stored records only.
    since_take: SinceTake,
}

/// What changed in the stored records since the last take.
#[derive(Debug, Clone, Default)]
struct SinceTake {
    /// The newest record's index at the last take: records with a later
    /// index were made since, and are not in the durable copy.
    taken_at: u64,
    /// The newest index recorded so far.
    newest: u64,
    /// Stored records dropped (evicted, forgotten or recorded over).
    gone: Vec<String>,
    /// Stored records whose result changed.
    resolved: Vec<String>,
}

/// Equal when the records are: the eviction order follows from them, and
/// what changed since a checkpoint is not part of the state.
impl PartialEq for Requests {
    fn eq(&self, other: &Self) -> bool {
        self.by_id == other.by_id
    }
}

impl Eq for Requests {}

impl Serialize for Requests {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.sorted())
    }
}

impl<'de> Deserialize<'de> for Requests {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        BTreeMap::<String, Record>::deserialize(deserializer).map(Requests::from)
    }
}

impl From<BTreeMap<String, Record>> for Requests {
    fn from(records: BTreeMap<String, Record>) -> Self {
        let mut order: Vec<(u64, String)> = records.iter().map(|(id, r)| (r.index, id.clone())).collect();
        order.sort_unstable();
        // Loaded records are the durable copy.
        let newest = order.last().map_or(0, |(index, _)| *index);
        let since_take = SinceTake { taken_at: newest, newest, ..SinceTake::default() };
        Requests { by_id: records.into_iter().collect(), order: order.into(), since_take }
    }
}

impl From<Requests> for BTreeMap<String, Record> {
    fn from(r: Requests) -> Self {
        r.by_id.into_iter().collect()
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
            self.dropped(id, old.index);
        }
        self.since_take.newest = self.since_take.newest.max(index);
        // Records come in log order, so this one goes at the back, after
        // any of its own entry whose ids sort after it.
        let place = self.order.len()
            - self.order.iter().rev().take_while(|(i, other)| (*i, other.as_str()) > (index, id)).count();
        self.order.insert(place, (index, id.to_owned()));
    }

    /// Replaces the result of `id` (a queued acquire that was granted or
    /// timed out), keeping its age.
    pub fn resolve(&mut self, id: &str, result: Result<Outcome, LockError>) {
        if let Some(record) = self.by_id.get_mut(id) {
            record.result = result;
            if record.index <= self.since_take.taken_at {
                self.since_take.resolved.push(id.to_owned());
            }
        }
    }

    /// Forgets `id`: a cancelled wait may be retried as a new request.
    pub fn forget(&mut self, id: &str) {
        if let Some(old) = self.by_id.remove(id) {
            self.dropped(id, old.index);
        }
    }

    /// Drops records beyond the size bound or older than `max_age_ticks`.
    pub fn evict(&mut self, now_tick: u64, max_age_ticks: u64) {
        while let Some((index, id)) = self.order.front() {
            match self.by_id.get(id) {
                // A place left behind by a record made again or forgotten.
                Some(record) if record.index != *index => {}
                None => {}
                Some(record) if self.by_id.len() <= MAX_REQUESTS && record.tick + max_age_ticks > now_tick => break,
                Some(_) => {
                    self.by_id.remove(id);
                    let (index, id) = self.order.pop_front().expect("front was Some");
                    if index <= self.since_take.taken_at {
                        self.since_take.gone.push(id);
                    }
                    continue;
                }
            }
            self.order.pop_front();
        }
    }

    /// Notes that the record of `id` made at `index` is gone; only a
    /// stored one needs a note.
    fn dropped(&mut self, id: &str, index: u64) {
        if index <= self.since_take.taken_at {
            self.since_take.gone.push(id.to_owned());
        }
    }

    /// The ids whose records changed since the last call, and whether each
    /// was stored (see [`Changed`]): the stored ones dropped or resolved,
    /// and every record made since.
    pub(crate) fn take_changed(&mut self) -> Changed<String> {
        let since = std::mem::take(&mut self.since_take);
        let mut changed = Changed::with_capacity(since.gone.len() + since.resolved.len());
        for id in since.gone.into_iter().chain(since.resolved) {
            changed.insert(id, true);
        }
        for (index, id) in self.order.iter().rev().take_while(|(index, _)| *index > since.taken_at) {
            if self.by_id.get(id).is_some_and(|r| r.index == *index) {
                changed.entry(id.clone()).or_insert(false);
            }
        }
        self.since_take = SinceTake { taken_at: since.newest, newest: since.newest, ..SinceTake::default() };
        changed
    }

    /// The record of `id`, if any.
    pub(crate) fn get(&self, id: &str) -> Option<&Record> {
        self.by_id.get(id)
    }

    /// Every record, in id order.
    pub(crate) fn sorted(&self) -> impl Iterator<Item = (&String, &Record)> {
        let mut records: Vec<_> = self.by_id.iter().collect();
        records.sort_unstable_by(|a, b| a.0.cmp(b.0));
        records.into_iter()
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
    use crate::FencingToken;

    fn released(name: &str) -> Result<Outcome, LockError> {
        Ok(Outcome::Released { name: name.into(), token: FencingToken::granted_at(1) })
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

    // Ensures a replica that reloaded its records evicts the same ones as a
    // replica that made them, also where one entry's ids came out of order.
    #[test]
    fn eviction_is_the_same_after_a_reload() {
        let mut live = Requests::default();
        for n in 0..MAX_REQUESTS {
            // Four commands per entry, their ids in descending order.
            let index = (n / 4) as u64 + 1;
            live.record(
                &format!("id-{:06}", 4 * (n / 4) + 3 - n % 4),
                index,
                0,
                "a",
                RequestKind::Release,
                &released("a"),
            );
        }
        live.forget("id-000002");
        live.record("id-000002", 9_999_999, 0, "a", RequestKind::Release, &released("a"));
        let mut reloaded: Requests = BTreeMap::from(live.clone()).into();
        for requests in [&mut live, &mut reloaded] {
            for n in 0..6 {
                requests.record(&format!("new-{n}"), 20_000_000, 0, "a", RequestKind::Release, &released("a"));
            }
            requests.evict(0, 1_000);
        }
        assert_eq!(live, reloaded);
        assert!(live.replay("id-000000", "a", RequestKind::Release).is_none(), "the oldest go first");
        // Six go: 0, 1 and 3 of the first entry (2 was recorded again), then
        // 4, 5 and 6 of the second, by id although they were made 7, 6, 5, 4.
        assert!(live.replay("id-000006", "a", RequestKind::Release).is_none(), "by id within an entry");
        assert!(live.replay("id-000007", "a", RequestKind::Release).is_some());
        assert!(live.replay("id-000002", "a", RequestKind::Release).is_some(), "recorded again, younger");
    }

    // Ensures the changes taken at each checkpoint bring a durable copy to
    // exactly the records held, through records made, resolved, forgotten,
    // made again and evicted, across several checkpoints.
    #[test]
    fn taken_changes_keep_a_durable_copy_exact() {
        let mut requests = Requests::default();
        let mut durable: BTreeMap<String, Record> = BTreeMap::new();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for index in 1..4_000u64 {
            for _ in 0..next(4) {
                let id = format!("r{}", next(3_000));
                match next(10) {
                    0 => requests.forget(&id),
                    1 => requests.resolve(&id, released("b")),
                    _ if requests.get(&id).is_none() => {
                        requests.record(&id, index, index / 10, "a", RequestKind::Release, &released("a"))
                    }
                    _ => {}
                }
            }
            requests.evict(index / 10, 150);
            if next(50) == 0 {
                for (id, stored) in requests.take_changed() {
                    match requests.get(&id) {
                        Some(record) => {
                            durable.insert(id, record.clone());
                        }
                        None => assert!(durable.remove(&id).is_some() == stored, "{id} stored: {stored}"),
                    }
                }
                assert_eq!(durable, BTreeMap::from(requests.clone()));
            }
        }
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
