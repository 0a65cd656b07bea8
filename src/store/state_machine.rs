//! The replicated state machine: the pure [`LockTable`] in memory, its rows
//! in sled ([`StateStore`]) as of the last checkpoint, and the log after it.
//!
//! Applying an entry changes only the table in memory (it notes which rows
//! changed). openraft's snapshot build is leasehold's checkpoint: the rows
//! changed since the last one are written to sled with the applied log id,
//! durably, and only then may openraft purge the log behind it. At start the
//! table is loaded from sled and openraft re-applies the log after the
//! checkpoint, so the state machine is durable up to the purge point, as
//! openraft needs.

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, ErrorSubject, ErrorVerb, OptionalSend, RaftSnapshotBuilder};
use serde::{Deserialize, Serialize};

use tokio_stream::{Stream, StreamExt};

use super::history::{EventHistory, DEFAULT_EVENT_HISTORY};
use super::off_runtime;
use super::state::{Checkpoint, StateStore};
use crate::metrics::Metrics;
use crate::raft::types::{
    storage_error, Entry, LockResult, LogId, SnapshotMeta, StorageError, StoredMembership, TypeConfig,
};
use leasehold_core::{LockEvent, LockTable, TableImage};

/// Tick apply times kept for [`LockState::recent_tick_apply_us`].
const RECENT_TICKS: usize = 64;

/// The applied state, shared between the state machine (writer) and the API
/// (readers).
#[derive(Debug, Default)]
struct AppliedState {
    last_applied: Option<LogId>,
    membership: StoredMembership,
    table: LockTable,
    /// CPU time spent applying entries since the last checkpoint took the
    /// table's changes (or since the table was loaded or installed): about
    /// what a restart would spend replaying them.
    applying_since_checkpoint: Duration,
    /// Apply times of the last [`RECENT_TICKS`] Tick entries, in µs.
    recent_ticks: VecDeque<u64>,
    snapshot: SnapshotStats,
}

/// What the last snapshot made or installed here cost.
#[derive(Debug, Clone, Copy, Default)]
pub struct SnapshotStats {
    pub build_ms: Option<u64>,
    pub install_ms: Option<u64>,
    pub checkpoint_rows: Option<u64>,
    pub checkpoint_bytes: Option<u64>,
}

/// Who is told of each event as soon as its entry is applied, before the
/// event broadcast: the node's registry of waiting acquires. (A trait so
/// the store does not depend on the node above it.)
pub trait AppliedEvents: Send + Sync {
    fn applied(&self, event: &LockEvent);

    /// The entry at `index` is applied, and its events are out.
    fn entry_applied(&self, _index: u64) {}
}

/// Nobody waits (storage tests, tools that only read the state).
impl AppliedEvents for () {
    fn applied(&self, _: &LockEvent) {}
}

/// A read handle on the applied lock table and its event stream, for the API.
#[derive(Clone)]
pub struct LockState {
    applied: Arc<RwLock<AppliedState>>,
    history: Arc<EventHistory>,
    waiters: Arc<dyn AppliedEvents>,
}

impl LockState {
    fn new(waiters: Arc<dyn AppliedEvents>) -> Self {
        LockState { applied: Arc::default(), history: Arc::new(EventHistory::new(DEFAULT_EVENT_HISTORY)), waiters }
    }

    /// Reads the lock table as of the last applied entry.
    pub fn read<T>(&self, f: impl FnOnce(&LockTable) -> T) -> T {
        f(&self.guard().table)
    }

    /// Reads the lock table as of the last applied entry, with that
    /// entry's index (0 before any).
    pub fn read_at<T>(&self, f: impl FnOnce(&LockTable) -> T) -> (u64, T) {
        let state = self.guard();
        (state.last_applied.map_or(0, |id| id.index), f(&state.table))
    }

    /// The recent events applied on this node, which event streams follow.
    pub fn history(&self) -> &Arc<EventHistory> {
        &self.history
    }

    /// The CPU time (µs) applying each of the last 64 Tick entries took,
    /// oldest first.
    pub fn recent_tick_apply_us(&self) -> Vec<u64> {
        self.guard().recent_ticks.iter().copied().collect()
    }

    /// What the last snapshot made or installed here cost.
    pub fn snapshot_stats(&self) -> SnapshotStats {
        self.guard().snapshot
    }

    /// CPU time spent applying the entries after the last checkpoint:
    /// about what a restart would spend replaying them.
    pub fn applying_since_checkpoint(&self) -> Duration {
        self.guard().applying_since_checkpoint
    }

    fn record_snapshot(&self, update: impl FnOnce(&mut SnapshotStats)) {
        update(&mut self.write().snapshot);
    }

    fn guard(&self) -> RwLockReadGuard<'_, AppliedState> {
        // A panic while holding the lock cannot leave the table half-updated
        // (apply mutates only on success), so a poisoned lock is still valid.
        self.applied.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, AppliedState> {
        self.applied.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// What a format-1 snapshot held, as JSON: the table image and the Raft
/// position it reflects. Only backups of that format are read any more.
#[derive(Serialize, Deserialize)]
pub(super) struct SnapshotImage {
    pub last_applied: Option<LogId>,
    pub membership: StoredMembership,
    pub table: TableImage,
}

pub struct StateMachineStore {
    state: LockState,
    metrics: Arc<Metrics>,
    store: StateStore,
}

impl StateMachineStore {
    /// Opens the rows under `state_dir` and the snapshot files under
    /// `snapshots`, and loads the table as of the last checkpoint.
    /// `waiters` hears of every applied event first.
    pub(super) fn open(
        state_dir: &Path,
        snapshots: &Path,
        metrics: Arc<Metrics>,
        waiters: Arc<dyn AppliedEvents>,
    ) -> Result<Self, StorageError> {
        let (store, loaded) = StateStore::open(state_dir, snapshots)
            .map_err(|e| storage_error(ErrorSubject::StateMachine, ErrorVerb::Read, e))?;
        let sm = StateMachineStore { state: LockState::new(waiters), metrics, store };
        if let Some(meta) = loaded.meta {
            sm.replace(meta, loaded.table);
        }
        Ok(sm)
    }

    /// The read handle the API uses.
    pub fn state(&self) -> LockState {
        self.state.clone()
    }

    /// A handle on the durable state, for backups while openraft owns this store.
    pub fn store(&self) -> StateStore {
        self.store.clone()
    }

    /// Replaces the state with `table` as of `meta`.
    fn replace(&self, meta: SnapshotMeta, table: LockTable) {
        let mut state = self.state.write();
        state.last_applied = meta.last_log_id;
        state.membership = meta.last_membership;
        state.table = table;
        state.applying_since_checkpoint = Duration::ZERO;
        // Under the state's lock, so no stream reads the new table with the
        // old history's place.
        self.state.history.reset(state.last_applied.map_or(0, |id| id.index));
    }
}

/// CPU time the calling thread has used so far (zero if the clock cannot
/// be read, which Linux never refuses).
fn thread_cpu_time() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(Duration::ZERO, Duration::from)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A snapshot's data: rows in the snapshot format
/// ([`super::snapshot_file`]), either still in a node's sled as of its last
/// checkpoint (made a file only when it is sent or backed up) or already in
/// a file (received from a leader).
pub enum SnapshotData {
    Checkpoint(StateStore),
    File(PathBuf),
}

impl SnapshotData {
    /// The file holding the rows of the snapshot `meta` describes, and its
    /// size. Blocking: it may stream a whole table from sled to disk.
    pub fn into_file(self, meta: &SnapshotMeta) -> io::Result<(PathBuf, u64)> {
        match self {
            SnapshotData::Checkpoint(store) => store.snapshot_file(meta),
            SnapshotData::File(path) => {
                let bytes = std::fs::metadata(&path)?.len();
                Ok((path, bytes))
            }
        }
    }

    /// [`SnapshotData::into_file`] on a blocking thread: it may stream a
    /// whole table to a file when none is there yet.
    pub async fn into_file_off_runtime(self, meta: SnapshotMeta) -> io::Result<(PathBuf, u64)> {
        off_runtime(move || self.into_file(&meta)).await
    }
}

impl StateMachineStore {
    /// Applies one entry to the table and answers with one result per
    /// command. The events go out after the table is updated, so a
    /// subscriber that reads the table on seeing an event finds its effect.
    fn apply_entry(&self, entry: Entry) -> Vec<LockResult> {
        let mut events = Vec::new();
        let index = entry.log_id.index;
        let results = {
            let mut state = self.state.write();
            state.last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => Vec::new(),
                EntryPayload::Normal(batch) => {
                    // The apply's CPU time, not the time it took: on a
                    // busy machine the thread is preempted, and a replay at
                    // restart costs what the apply itself did. One reading
                    // per entry, not per command: an entry carries up to 256.
                    let started = thread_cpu_time();
                    let mut answers = Vec::with_capacity(batch.len());
                    // The limits the entry carries, never this node's own:
                    // every replica answers the entry alike.
                    let quotas = batch.quotas();
                    // Each command's events are stamped with the principal
                    // the entry records for it (the cluster for a Tick).
                    for (command, by) in batch.proposed() {
                        let applied = state.table.apply_by(command, by, entry.log_id.index, &quotas);
                        self.metrics.applied(&applied.events, state.table.now_tick(), state.table.tick_ms());
                        events.extend(applied.events);
                        answers.push(applied.result);
                    }
                    let took = thread_cpu_time().saturating_sub(started);
                    state.applying_since_checkpoint += took;
                    if batch.is_tick() {
                        if state.recent_ticks.len() == RECENT_TICKS {
                            state.recent_ticks.pop_front();
                        }
                        state.recent_ticks.push_back(micros(took));
                    }
                    answers
                }
                EntryPayload::Membership(m) => {
                    state.membership = StoredMembership::new(Some(entry.log_id), m);
                    Vec::new()
                }
            }
        };
        for event in &events {
            self.state.waiters.applied(event);
        }
        self.state.history.append(index, events);
        self.state.waiters.entry_applied(index);
        results
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let state = self.state.guard();
        Ok((state.last_applied, state.membership.clone()))
    }

    /// Applies the entries in order. Each entry's proposer is answered as
    /// soon as that entry is applied (and its events are out).
    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        while let Some(next) = entries.next().await {
            let (entry, responder) = next?;
            let results = self.apply_entry(entry);
            if let Some(responder) = responder {
                responder.send(results);
            }
        }
        Ok(())
    }

    /// Takes the rows changed since the last checkpoint now: the build runs
    /// concurrently with later applies, and must describe exactly
    /// `last_applied`. Costs what changed, not the table's size.
    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        let mut state = self.state.write();
        let meta = SnapshotMeta { last_log_id: state.last_applied, last_membership: state.membership.clone() };
        let checkpoint = StateStore::take_checkpoint(&mut state.table, meta);
        state.applying_since_checkpoint = Duration::ZERO;
        drop(state);
        SnapshotBuilder { checkpoint: Some(checkpoint), store: self.store.clone(), state: self.state.clone() }
    }

    /// Installs the snapshot from its file (received whole before this is
    /// called), row by row into sled and the new table.
    async fn install_snapshot(&mut self, meta: &SnapshotMeta, snapshot: SnapshotData) -> Result<(), io::Error> {
        let started = Instant::now();
        let (store, wanted) = (self.store.clone(), meta.clone());
        let (installed, table) = off_runtime(move || store.install(&snapshot.into_file(&wanted)?.0)).await?;
        if installed.last_log_id != meta.last_log_id {
            return Err(io::Error::other("the installed snapshot is not the one openraft announced"));
        }
        self.replace(meta.clone(), table);
        self.metrics.snapshot_installed();
        let install_ms = started.elapsed().as_millis() as u64;
        self.state.record_snapshot(|s| s.install_ms = Some(install_ms));
        // An install replaces the whole table: worth a line in the node's log.
        let index = meta.last_log_id.map(|id| id.index);
        tracing::info!(index, install_ms, "snapshot from the leader installed");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        let store = self.store.clone();
        Ok(store.checkpointed().map(|meta| Snapshot { meta, snapshot: SnapshotData::Checkpoint(store) }))
    }
}

/// Builds one snapshot, i.e. writes one checkpoint, from the rows taken
/// when it was made.
pub struct SnapshotBuilder {
    /// Taken by the one build.
    checkpoint: Option<Checkpoint>,
    store: StateStore,
    state: LockState,
}

/// A snapshot of this node's state machine.
pub type Snapshot = openraft::type_config::alias::SnapshotOf<TypeConfig, SnapshotData>;

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let started = Instant::now();
        let checkpoint = self.checkpoint.take().ok_or_else(|| io::Error::other("a snapshot builder builds once"))?;
        let meta = checkpoint.meta().clone();
        let store = self.store.clone();
        let written = off_runtime(move || store.checkpoint(checkpoint)).await?;
        let build_ms = started.elapsed().as_millis() as u64;
        self.state.record_snapshot(|s| {
            (s.build_ms, s.checkpoint_rows, s.checkpoint_bytes) =
                (Some(build_ms), Some(written.rows), Some(written.bytes))
        });
        Ok(Snapshot { meta, snapshot: SnapshotData::Checkpoint(self.store.clone()) })
    }
}
