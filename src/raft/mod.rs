//! Everything that knows openraft and sled: the type configuration, the sled
//! log store and state-machine store (one `Db` per process, separate trees),
//! the reqwest network to the other nodes, and the leader's ticker.

// `StorageError` is openraft's own (large) error type, required by its storage
// traits; the helpers here return it unboxed to match them.
#![allow(clippy::result_large_err)]

mod backup;
mod log_store;
mod network;
mod state_machine;
mod ticker;

use std::io::Cursor;
use std::path::Path;

pub use backup::{restore, BackupError};
pub use log_store::LogStore;
pub use network::{Network, SnapshotChunkHead, APPEND_PATH, SNAPSHOT_PATH, VOTE_PATH};
pub use state_machine::{LockState, SnapshotExport, StateMachineStore, StoreStats};
pub use ticker::Ticker;

use crate::lock::{Command, LockError, Outcome};

/// What applying one log entry answers its proposer.
pub type LockResult = Result<Outcome, LockError>;

openraft::declare_raft_types!(
    /// leasehold's Raft types: node ids are `u64`, nodes are known by their
    /// HTTP address, and the log carries lock [`Command`]s.
    pub TypeConfig:
        D = Command,
        R = LockResult,
);

pub type NodeId = u64;
pub type Node = openraft::BasicNode;
pub type Raft = openraft::Raft<TypeConfig>;
pub type LogId = openraft::LogId<NodeId>;
pub type StorageError = openraft::StorageError<NodeId>;

/// Opens (or creates) the sled database under `dir` and builds both stores on it.
pub fn open_stores(dir: &Path) -> Result<(LogStore, StateMachineStore), StorageError> {
    let db = sled::Config::new()
        .path(dir)
        // Durability comes from our explicit flushes (group commit), not
        // from sled's background timer.
        .flush_every_ms(None)
        .open()
        .map_err(|e| storage_error(openraft::ErrorSubject::Store, openraft::ErrorVerb::Read, e))?;
    Ok((LogStore::open(&db)?, StateMachineStore::open(&db)?))
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

    struct SledBuilder;

    impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, tempfile::TempDir> for SledBuilder {
        async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StateMachineStore), StorageError> {
            let dir = tempfile::tempdir().expect("temp dir");
            let (log, sm) = open_stores(dir.path())?;
            Ok((dir, log, sm))
        }
    }

    // Ensures the sled stores meet openraft's storage contract (its own suite).
    #[test]
    fn sled_stores_pass_openraft_suite() {
        Suite::test_all(SledBuilder).unwrap();
    }
}
