//! Everything that knows openraft and sled: the type configuration, the log
//! store (segment files of its own), the state-machine store (sled),
//! the proposer that batches client commands into entries, the registry
//! that wakes each waiting acquire only for its own events,
//! the reqwest network to the other nodes, the leader's ticker, and the
//! observer that carries openraft's metrics into Prometheus series.

// `StorageError` is openraft's own (large) error type, required by its storage
// traits; the helpers here return it unboxed to match them.
#![allow(clippy::result_large_err)]

mod backup;
mod compaction;
mod log_store;
mod network;
pub mod observer;
mod proposer;
mod state_machine;
mod ticker;
mod turns;

use std::io::Cursor;
use std::path::Path;
use std::sync::Arc;

pub use backup::{restore, BackupError};
pub use compaction::{snapshot_by_size, SNAPSHOT_LOG_BYTES};
pub use log_store::LogStore;
pub use network::{Network, SnapshotChunkHead, APPEND_PATH, SNAPSHOT_PATH, VOTE_PATH};
pub use proposer::{ProposeError, Proposer};
pub use state_machine::{LockState, SnapshotExport, StateMachineStore, StoreStats};
pub use ticker::Ticker;
pub use turns::Turn;

use crate::lock::{Batch, LockError, Outcome};
use crate::metrics::Metrics;

/// What applying one command answers its proposer.
pub type LockResult = Result<Outcome, LockError>;

openraft::declare_raft_types!(
    /// leasehold's Raft types: node ids are `u64`, nodes are known by their
    /// HTTP address, and a log entry carries a [`Batch`] of lock commands,
    /// answered with one [`LockResult`] per command.
    pub TypeConfig:
        D = Batch,
        R = Vec<LockResult>,
);

pub type NodeId = u64;
pub type Node = openraft::BasicNode;
pub type Raft = openraft::Raft<TypeConfig>;
pub type LogId = openraft::LogId<NodeId>;
pub type StorageError = openraft::StorageError<NodeId>;

/// sled's page cache per node.
const SLED_CACHE_BYTES: u64 = 64 << 20;

/// The folder of the Raft log inside a node's data folder (the rest is sled's).
const LOG_DIR: &str = "raft-log";

/// Opens (or creates) a node's stores under `dir`: the Raft log in its own
/// files under `raft-log/`, the state machine in sled; both report to `metrics`.
pub fn open_stores(dir: &Path, metrics: Arc<Metrics>) -> Result<(LogStore, StateMachineStore), StorageError> {
    let db = sled::Config::new()
        .path(dir)
        // Durability comes from explicit flushes when a snapshot is saved,
        // not from sled's background timer.
        .flush_every_ms(None)
        // sled's page cache defaults to 1 GiB per process; the lock table is
        // already in memory and sled only holds snapshots, so a small cache
        // keeps a node's memory to the table plus this.
        .cache_capacity(SLED_CACHE_BYTES)
        .open()
        .map_err(|e| storage_error(openraft::ErrorSubject::Store, openraft::ErrorVerb::Read, e))?;
    Ok((LogStore::open(&dir.join(LOG_DIR), metrics.clone())?, StateMachineStore::open(&db, dir, metrics)?))
}

fn storage_error(
    subject: openraft::ErrorSubject<NodeId>,
    verb: openraft::ErrorVerb,
    e: impl std::error::Error + 'static,
) -> StorageError {
    openraft::StorageIOError::new(subject, verb, openraft::AnyError::new(&e)).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::testing::{StoreBuilder, Suite};

    struct TempStores;

    impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, tempfile::TempDir> for TempStores {
        async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StateMachineStore), StorageError> {
            let dir = tempfile::tempdir().expect("temp dir");
            let (log, sm) = open_stores(dir.path(), Arc::default())?;
            Ok((dir, log, sm))
        }
    }

    // Ensures the log and state-machine stores meet openraft's storage
    // contract (its own suite).
    #[test]
    fn stores_pass_openraft_suite() {
        Suite::test_all(TempStores).unwrap();
    }
}
