//! The replicated state machine: the pure [`LockTable`] in memory, made durable
//! by snapshots kept in sled tree `snapshot` plus the log.
//!
//! Applying an entry writes nothing to disk. That is safe because openraft, on
//! restart, re-applies every committed entry after the state machine's
//! `last_applied`, and the state machine restarts from its last snapshot; log
//! entries are purged only after a snapshot covering them has been flushed. The
//! state machine is therefore durable up to the purge point, as openraft needs.

use std::collections::VecDeque;
use std::io::{self, Cursor};
use std::path::Path;
use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, ErrorSubject, ErrorVerb, OptionalSend, RaftSnapshotBuilder};
use serde::{Deserialize, Serialize};

use tokio::sync::broadcast;
use tokio_stream::{Stream, StreamExt};

use super::snapshot_store::{SnapshotStore, StoredSnapshot};
use super::turns::{Turn, Turns};
use super::{storage_error, Entry, LockResult, LogId, SnapshotMeta, StorageError, StoredMembership, TypeConfig};
use crate::metrics::Metrics;
use leasehold_core::{LockEvent, LockTable, TableImage};

/// Events buffered per subscriber before it is told it lagged.
const EVENT_BUFFER: usize = 4096;

/// Tick apply times kept for [`StoreStats`].
const RECENT_TICKS: usize = 64;

/// The applied state, shared between the state machine (writer) and the API
/// (readers).
#[derive(Debug, Default)]
struct AppliedState {
    last_applied: Option<LogId>,
    membership: StoredMembership,
    table: LockTable,
    /// Apply times of the last [`RECENT_TICKS`] Tick entries, in µs.
    recent_ticks: VecDeque<u64>,
    snapshot: SnapshotStats,
}

/// What the current snapshot is and what making or installing it cost.
#[derive(Debug, Clone, Copy, Default)]
struct SnapshotStats {
    bytes: Option<u64>,
    build_ms: Option<u64>,
    install_ms: Option<u64>,
}

pub use leasehold_proto::cluster::StoreStats;

/// A read handle on the applied lock table and its event stream, for the API.
#[derive(Clone)]
pub struct LockState {
    applied: Arc<RwLock<AppliedState>>,
    events: broadcast::Sender<LockEvent>,
    turns: Arc<Turns>,
}

impl Default for LockState {
    fn default() -> Self {
        LockState { applied: Arc::default(), events: broadcast::channel(EVENT_BUFFER).0, turns: Arc::default() }
    }
}

impl LockState {
    /// Reads the lock table as of the last applied entry.
    pub fn read<T>(&self, f: impl FnOnce(&LockTable) -> T) -> T {
        f(&self.guard().table)
    }

    /// Every event applied on this node from now on, in log order. A
    /// subscriber that falls more than 4096 events behind is told it lagged
    /// (and should re-read the table).
    pub fn subscribe(&self) -> broadcast::Receiver<LockEvent> {
        self.events.subscribe()
    }

    /// The events about `owner` on lock `name` from now on: what a waiting
    /// acquire needs to learn that its wait ended.
    pub fn watch_turn(&self, name: &str, owner: &str) -> Turn {
        self.turns.watch(name, owner)
    }

    /// What Ticks and snapshots cost on this node lately.
    pub fn stats(&self) -> StoreStats {
        let state = self.guard();
        let mut ticks: Vec<u64> = state.recent_ticks.iter().copied().collect();
        ticks.sort_unstable();
        StoreStats {
            tick_apply_p50_us: ticks.get(ticks.len() / 2).copied().unwrap_or(0),
            tick_apply_max_us: ticks.last().copied().unwrap_or(0),
            snapshot_bytes: state.snapshot.bytes,
            snapshot_build_ms: state.snapshot.build_ms,
            snapshot_install_ms: state.snapshot.install_ms,
        }
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

/// What a snapshot holds: the table image and the Raft position it reflects.
#[derive(Serialize, Deserialize)]
pub(super) struct SnapshotImage {
    pub last_applied: Option<LogId>,
    pub membership: StoredMembership,
    pub table: TableImage,
}

pub struct StateMachineStore {
    state: LockState,
    metrics: Arc<Metrics>,
    snapshots: SnapshotStore,
}

impl StateMachineStore {
    /// Opens the store with its snapshots under `dir`, and restores the
    /// state from the last snapshot, if any.
    pub(super) fn open(dir: &Path, metrics: Arc<Metrics>) -> Result<Self, StorageError> {
        let snapshots = SnapshotStore::open(dir)?;
        let store = StateMachineStore { state: LockState::default(), metrics, snapshots };
        if let Some(stored) = store.read_snapshot()? {
            store.restore(&stored.data)?;
        }
        Ok(store)
    }

    /// The read handle the API uses.
    pub fn state(&self) -> LockState {
        self.state.clone()
    }

    /// A handle for exporting the stored snapshot while openraft owns this store.
    pub fn exporter(&self) -> SnapshotStore {
        self.snapshots.clone()
    }

    fn read_snapshot(&self) -> Result<Option<StoredSnapshot>, StorageError> {
        self.snapshots.read()
    }

    /// Stores `stored` as the snapshot of a node that has none yet (restore).
    pub(super) async fn seed(&self, stored: &StoredSnapshot) -> Result<(), StorageError> {
        self.snapshots.save(stored).await
    }

    fn restore(&self, data: &[u8]) -> Result<(), StorageError> {
        let image: SnapshotImage = serde_json::from_slice(data)
            .map_err(|e| storage_error(ErrorSubject::Snapshot(None), ErrorVerb::Read, e))?;
        let mut state = self.state.write();
        state.last_applied = image.last_applied;
        state.membership = image.membership;
        state.table = image.table.into();
        state.snapshot.bytes = Some(data.len() as u64);
        Ok(())
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A snapshot's data as openraft carries it: the image, whole, in memory.
pub type SnapshotData = Cursor<Vec<u8>>;

impl StateMachineStore {
    /// Applies one entry to the table and answers with one result per
    /// command. The events go out after the table is updated, so a
    /// subscriber that reads the table on seeing an event finds its effect.
    fn apply_entry(&self, entry: Entry) -> Vec<LockResult> {
        let mut events = Vec::new();
        let results = {
            let mut state = self.state.write();
            state.last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => Vec::new(),
                EntryPayload::Normal(batch) => {
                    // Only Ticks are timed: the clock read stays off
                    // the path of every other entry.
                    let tick_started = batch.is_tick().then(Instant::now);
                    let mut answers = Vec::with_capacity(batch.len());
                    for command in batch.commands() {
                        let applied = state.table.apply(command, entry.log_id.index);
                        self.metrics.applied(&applied.events, state.table.now_tick(), state.table.tick_ms());
                        events.extend(applied.events);
                        answers.push(applied.result);
                    }
                    if let Some(started) = tick_started {
                        if state.recent_ticks.len() == RECENT_TICKS {
                            state.recent_ticks.pop_front();
                        }
                        state.recent_ticks.push_back(micros(started.elapsed()));
                    }
                    answers
                }
                EntryPayload::Membership(m) => {
                    state.membership = StoredMembership::new(Some(entry.log_id), m);
                    Vec::new()
                }
            }
        };
        for event in events {
            self.state.turns.publish(&event);
            // No subscriber is not an error.
            let _ = self.state.events.send(event);
        }
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

    /// Copies the state image now: `build_snapshot` runs concurrently with
    /// later applies, and must describe exactly `last_applied`.
    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        let state = self.state.guard();
        SnapshotBuilder {
            image: SnapshotImage {
                last_applied: state.last_applied,
                membership: state.membership.clone(),
                table: TableImage::from(&state.table),
            },
            snapshots: self.snapshots.clone(),
            state: self.state.clone(),
        }
    }

    async fn install_snapshot(&mut self, meta: &SnapshotMeta, snapshot: SnapshotData) -> Result<(), io::Error> {
        let started = Instant::now();
        let stored = StoredSnapshot { meta: meta.clone(), data: snapshot.into_inner() };
        self.restore(&stored.data)?;
        self.metrics.snapshot_installed();
        self.snapshots.save(&stored).await?;
        let install_ms = started.elapsed().as_millis() as u64;
        self.state.record_snapshot(|s| s.install_ms = Some(install_ms));
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        Ok(self.read_snapshot()?.map(|s| Snapshot { meta: s.meta, snapshot: Cursor::new(s.data) }))
    }
}

/// Builds one snapshot from the image copied when it was made.
pub struct SnapshotBuilder {
    image: SnapshotImage,
    snapshots: SnapshotStore,
    state: LockState,
}

/// A snapshot of this node's state machine.
pub type Snapshot = openraft::type_config::alias::SnapshotOf<TypeConfig, SnapshotData>;

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let started = Instant::now();
        let data = serde_json::to_vec(&self.image)
            .map_err(|e| storage_error(ErrorSubject::Snapshot(None), ErrorVerb::Write, e))?;
        // 0.10 identifies a snapshot by the log id it covers: no id of its own.
        let meta =
            SnapshotMeta { last_log_id: self.image.last_applied, last_membership: self.image.membership.clone() };
        let stored = StoredSnapshot { meta: meta.clone(), data };
        self.snapshots.save(&stored).await?;
        let (bytes, build_ms) = (stored.data.len() as u64, started.elapsed().as_millis() as u64);
        self.state.record_snapshot(|s| (s.bytes, s.build_ms) = (Some(bytes), Some(build_ms)));
        Ok(Snapshot { meta, snapshot: Cursor::new(stored.data) })
    }
}
