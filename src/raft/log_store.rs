//! The Raft log and vote in sled, with group commit.
//!
//! Entries live in tree `raft_log` under their index as 8 big-endian bytes, so
//! sled's key order is log order. The vote, the committed id and the last
//! purged id live in tree `raft_meta`.
//!
//! Group commit: `append` writes the entries into sled (readable at once) and
//! hands the "persisted" callback to one flusher thread. The flusher takes every
//! callback queued so far, flushes the Db once and completes them all, so
//! concurrent appends share one fsync. sled flushes a prefix of its writes in
//! order, so completing a callback after a later flush is always correct.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::mpsc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{ErrorSubject, ErrorVerb, RaftLogReader, Vote};
use serde::{de::DeserializeOwned, Serialize};

use super::{storage_error, LogId, NodeId, StorageError, TypeConfig};

type Entry = openraft::Entry<TypeConfig>;

const VOTE: &[u8] = b"vote";
const COMMITTED: &[u8] = b"committed";
const LAST_PURGED: &[u8] = b"last_purged";

/// The sled log store. Cheap to clone: clones share the trees and the flusher.
#[derive(Clone)]
pub struct LogStore {
    db: sled::Db,
    log: sled::Tree,
    meta: sled::Tree,
    flusher: mpsc::Sender<LogFlushed<TypeConfig>>,
}

impl LogStore {
    pub(super) fn open(db: &sled::Db) -> Result<Self, StorageError> {
        let open_tree =
            |name: &str| db.open_tree(name).map_err(|e| storage_error(ErrorSubject::Store, ErrorVerb::Read, e));
        let (tx, rx) = mpsc::channel();
        let flush_db = db.clone();
        std::thread::Builder::new()
            .name("leasehold-log-flusher".into())
            .spawn(move || group_commit(flush_db, rx))
            .map_err(|e| storage_error(ErrorSubject::Store, ErrorVerb::Write, e))?;
        Ok(LogStore { db: db.clone(), log: open_tree("raft_log")?, meta: open_tree("raft_meta")?, flusher: tx })
    }

    fn get_meta<T: DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>, StorageError> {
        let subject = || ErrorSubject::Store;
        match self.meta.get(key).map_err(|e| storage_error(subject(), ErrorVerb::Read, e))? {
            None => Ok(None),
            Some(bytes) => {
                serde_json::from_slice(&bytes).map(Some).map_err(|e| storage_error(subject(), ErrorVerb::Read, e))
            }
        }
    }

    fn put_meta<T: Serialize>(&self, key: &[u8], value: &T) -> Result<(), StorageError> {
        let bytes = serde_json::to_vec(value).map_err(|e| storage_error(ErrorSubject::Store, ErrorVerb::Write, e))?;
        self.meta.insert(key, bytes).map_err(|e| storage_error(ErrorSubject::Store, ErrorVerb::Write, e))?;
        Ok(())
    }

    fn last_purged(&self) -> Result<Option<LogId>, StorageError> {
        self.get_meta(LAST_PURGED)
    }
}

/// The flusher thread: one Db flush for every batch of queued callbacks.
fn group_commit(db: sled::Db, rx: mpsc::Receiver<LogFlushed<TypeConfig>>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        batch.extend(rx.try_iter());
        let result = db.flush().map(|_| ());
        for callback in batch {
            let r = result.as_ref().map(|_| ()).map_err(|e| std::io::Error::other(e.to_string()));
            callback.log_io_completed(r);
        }
    }
}

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let start = match range.start_bound() {
            Bound::Included(i) => Bound::Included(index_key(*i)),
            Bound::Excluded(i) => Bound::Excluded(index_key(*i)),
            Bound::Unbounded => Bound::Unbounded,
        };
        let end = match range.end_bound() {
            Bound::Included(i) => Bound::Included(index_key(*i)),
            Bound::Excluded(i) => Bound::Excluded(index_key(*i)),
            Bound::Unbounded => Bound::Unbounded,
        };
        self.log
            .range::<[u8; 8], _>((start, end))
            .map(|kv| {
                let (_, bytes) = kv.map_err(|e| storage_error(ErrorSubject::Logs, ErrorVerb::Read, e))?;
                serde_json::from_slice(&bytes).map_err(|e| storage_error(ErrorSubject::Logs, ErrorVerb::Read, e))
            })
            .collect()
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged_log_id = self.last_purged()?;
        let last = self.log.last().map_err(|e| storage_error(ErrorSubject::Logs, ErrorVerb::Read, e))?;
        let last_log_id = match last {
            None => last_purged_log_id,
            Some((_, bytes)) => {
                let entry: Entry = serde_json::from_slice(&bytes)
                    .map_err(|e| storage_error(ErrorSubject::Logs, ErrorVerb::Read, e))?;
                Some(entry.log_id)
            }
        };
        Ok(LogState { last_purged_log_id, last_log_id })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    /// Durable before returning: a vote forgotten in a crash could let this
    /// node vote twice in one term.
    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        self.put_meta(VOTE, vote)?;
        self.db.flush_async().await.map_err(|e| storage_error(ErrorSubject::Vote, ErrorVerb::Write, e))?;
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        self.get_meta(VOTE)
    }

    /// Not flushed on its own: it rides on the next log flush. Losing it only
    /// means re-applying fewer entries at start until the leader commits again.
    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        self.put_meta(COMMITTED, &committed)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.get_meta::<Option<LogId>>(COMMITTED)?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        // One insert per entry, not a `sled::Batch`: sled applies a batch under
        // its global write lock, which waits for any flush in progress, so
        // every append would wait out the previous group commit's fsync and
        // no two appends could ever share one. Inserts only take the read
        // side. A crash mid-append can keep a prefix of these entries (sled
        // recovers its writes in order), which Raft treats as unflushed.
        for entry in entries {
            let bytes =
                serde_json::to_vec(&entry).map_err(|e| storage_error(ErrorSubject::Logs, ErrorVerb::Write, e))?;
            self.log
                .insert(index_key(entry.log_id.index), bytes)
                .map_err(|e| storage_error(ErrorSubject::Logs, ErrorVerb::Write, e))?;
        }
        if let Err(mpsc::SendError(callback)) = self.flusher.send(callback) {
            // The flusher only exits when every sender is gone; this store is one.
            callback.log_io_completed(Err(std::io::Error::other("log flusher stopped")));
        }
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.remove_range(index_key(log_id.index)..)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        // Record the purge point first: a crash between the two steps then
        // leaves extra entries behind, never a hole before the first entry.
        self.put_meta(LAST_PURGED, &log_id)?;
        self.remove_range(..=index_key(log_id.index))
    }
}

impl LogStore {
    /// Marks the log purged and committed through `last` in an empty store:
    /// a restored node starts as if it had just installed a snapshot at
    /// `last` (the snapshot's own save flushes both).
    pub(super) fn mark_purged_through(&self, last: LogId) -> Result<(), StorageError> {
        self.put_meta(LAST_PURGED, &last)?;
        self.put_meta(COMMITTED, &Some(last))
    }

    fn remove_range(&self, range: impl RangeBounds<[u8; 8]>) -> Result<(), StorageError> {
        let mut batch = sled::Batch::default();
        for kv in self.log.range(range) {
            let (key, _) = kv.map_err(|e| storage_error(ErrorSubject::Logs, ErrorVerb::Read, e))?;
            batch.remove(key);
        }
        self.log.apply_batch(batch).map_err(|e| storage_error(ErrorSubject::Logs, ErrorVerb::Delete, e))
    }
}
