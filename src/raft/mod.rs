//! Everything that knows openraft and sled: the type configuration, the log
//! store (segment files of its own), the state-machine store (the table's
//! rows in sled, checkpointed; snapshot files streamed from them),
//! the proposer that batches client commands into entries, the registry
//! that wakes each waiting acquire only for its own events,
//! the network to the other nodes (the binary peer transport, `peer.rs`,
//! and HTTP for snapshots), the leader's ticker, and the
//! observer that carries openraft's metrics into Prometheus series.

// `StorageError` is openraft's own (large) error type, returned by the
// store constructors; the helpers here return it unboxed.
#![allow(clippy::result_large_err)]

mod backup;
mod compaction;
mod format;
mod log_store;
mod network;
pub mod observer;
mod pages;
pub mod peer;
mod proposer;
mod snapshot_file;
mod state_machine;
mod state_store;
mod ticker;
mod turns;

use std::path::Path;
use std::sync::Arc;

pub use backup::{restore, BackupError};
pub use compaction::{checkpoint_when_due, SNAPSHOT_LOG_BYTES};
pub use format::FormatError;
pub use log_store::LogStore;
pub use network::{Network, SnapshotHead, APPEND_PATH, SNAPSHOT_PATH, SNAPSHOT_TIMEOUT, VOTE_PATH};
pub use proposer::{ProposeError, Proposer};
pub use state_machine::{LockState, Snapshot, SnapshotData, StateMachineStore, StoreStats};
pub use state_store::StateStore;
pub use ticker::Ticker;
pub use turns::Turn;

use crate::metrics::Metrics;
use leasehold_core::{Batch, LockError, Outcome};

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

pub use leasehold_proto::NodeId;
pub type Node = openraft::BasicNode;
pub type Raft = openraft::Raft<TypeConfig, StateMachineStore>;
/// The leader id a log id carries: (term, node id).
pub type CommittedLeaderId = openraft::type_config::alias::CommittedLeaderIdOf<TypeConfig>;
pub type LogId = openraft::LogId<CommittedLeaderId>;
pub type Vote = openraft::type_config::alias::VoteOf<TypeConfig>;
pub type Entry = openraft::type_config::alias::EntryOf<TypeConfig>;
pub type SnapshotMeta = openraft::type_config::alias::SnapshotMetaOf<TypeConfig>;
pub type StoredMembership = openraft::type_config::alias::StoredMembershipOf<TypeConfig>;
pub type StorageError = openraft::StorageError<TypeConfig>;

/// How long ago a quorum last acknowledged this node as leader, now (`None`
/// when it is not a leader, or not acknowledged yet). From openraft's
/// absolute timestamp: 0.10 deprecates the relative
/// `millis_since_quorum_ack`, which is as old as the metrics report it came in.
pub fn millis_since_quorum_ack(m: &openraft::RaftMetrics<TypeConfig>) -> Option<u64> {
    use openraft::Instant as _;
    m.last_quorum_acked.as_ref().map(|at| u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX))
}

/// The folders of a node's data folder: the Raft log, the state machine's
/// rows (sled), and snapshot files.
const LOG_DIR: &str = "raft-log";
const STATE_DIR: &str = "state";
const SNAPSHOT_DIR: &str = "snapshots";

/// Opens (or creates) a node's stores under `dir`: the Raft log in its own
/// files, the state machine's rows in sled; both report to `metrics`.
/// A folder in another format than this binary's is refused first.
pub fn open_stores(dir: &Path, metrics: Arc<Metrics>) -> Result<(LogStore, StateMachineStore), OpenError> {
    format::check(dir)?;
    Ok((
        LogStore::open(&dir.join(LOG_DIR), metrics.clone())?,
        StateMachineStore::open(&dir.join(STATE_DIR), &dir.join(SNAPSHOT_DIR), metrics)?,
    ))
}

/// Why a node's data folder did not open.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The folder is in another format than this binary's ([`format::DATA_FORMAT`]).
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error("opening the stores: {0}")]
    Storage(#[from] StorageError),
}

/// Runs `work` on a blocking thread: a node may run on a single-threaded
/// runtime, where seconds of snapshot work on it would hold up its
/// heartbeats, and an election would follow.
async fn off_runtime<T: Send + 'static>(
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(work).await.map_err(std::io::Error::other)?
}

/// Makes a folder's entries (files created, renamed or deleted in it) durable.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// A storage error in openraft's terms (what the stores' own API returns;
/// openraft 0.10's storage traits take it as an `io::Error`, via `?`).
fn storage_error(
    subject: openraft::ErrorSubject<TypeConfig>,
    verb: openraft::ErrorVerb,
    e: impl std::error::Error + 'static,
) -> StorageError {
    StorageError::new(subject, verb, openraft::errors::ErrorSource::from_error(&e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::testing::log::{StoreBuilder, Suite};

    struct TempStores;

    impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, tempfile::TempDir> for TempStores {
        async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StateMachineStore), StorageError> {
            let dir = tempfile::tempdir().expect("temp dir");
            let (log, sm) = open_stores(dir.path(), Arc::default()).expect("a new folder opens");
            Ok((dir, log, sm))
        }
    }

    // Ensures the log and state-machine stores meet openraft's storage
    // contract (its own suite; async since 0.10).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stores_pass_openraft_suite() {
        Suite::test_all(TempStores).await.unwrap();
    }
}
