//! The storage engines: the only code that knows sled and files. They
//! implement openraft's two storage traits for `crate::raft::types`, and
//! otherwise name only openraft's storage types.
//!
//! - [`log`] — the Raft log and vote: segment files of its own, one writer
//!   thread, group commit with fdatasync; the vote in a meta file.
//! - [`state_machine`] — the replicated state machine: the pure lock table
//!   in memory, applying entries, snapshots as openraft sees them.
//! - [`history`] — the recent applied events that event streams follow
//!   and resume in.
//! - [`state`] — the table's rows in sled (`state/<generation>/`):
//!   loading (and moving a format-3 folder's request records), checkpoints,
//!   rewriting into a fresh generation, snapshot install and backup files.
//! - [`pages`] — how rows are grouped into sled records (request records
//!   in slots of their own).
//! - [`snapshot_file`] — the one streamed snapshot and backup format.
//! - [`backup`] — `leasehold restore`: a data folder from a backup file.
//! - [`format`] — the data folder's format version, checked before anything opens.

// `StorageError` is openraft's own (large) error type, returned by the
// store constructors; the helpers here return it unboxed.
#![allow(clippy::result_large_err)]

mod backup;
mod format;
mod history;
mod log;
mod pages;
mod snapshot_file;
mod state;
mod state_machine;

use std::path::Path;
use std::sync::Arc;

pub use backup::{restore, BackupError};
pub use format::FormatError;
pub use history::{Compacted, Cursor, EventHistory, PublishedEvent, DEFAULT_EVENT_HISTORY};
pub use log::LogStore;
pub use state::StateStore;
pub use state_machine::{AppliedEvents, LockState, Snapshot, SnapshotData, SnapshotStats, StateMachineStore};

use crate::metrics::Metrics;
use crate::raft::types::StorageError;

/// The folders of a node's data folder: the Raft log, the state machine's
/// rows (sled), and snapshot files.
const LOG_DIR: &str = "raft-log";
const STATE_DIR: &str = "state";
const SNAPSHOT_DIR: &str = "snapshots";

/// Opens (or creates) a node's stores under `dir`: the Raft log in its own
/// files, the state machine's rows in sled; both report to `metrics`.
/// A folder in another format than this binary's is refused first.
pub fn open_stores(
    dir: &Path,
    metrics: Arc<Metrics>,
    events: Arc<dyn AppliedEvents>,
) -> Result<(LogStore, StateMachineStore), OpenError> {
    format::check(dir)?;
    Ok((
        LogStore::open(&dir.join(LOG_DIR), metrics.clone())?,
        StateMachineStore::open(&dir.join(STATE_DIR), &dir.join(SNAPSHOT_DIR), metrics, events)?,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::types::TypeConfig;
    use openraft::testing::log::{StoreBuilder, Suite};

    struct TempStores;

    impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, tempfile::TempDir> for TempStores {
        async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StateMachineStore), StorageError> {
            let dir = tempfile::tempdir().expect("temp dir");
            let (log, sm) = open_stores(dir.path(), Arc::default(), Arc::new(())).expect("a new folder opens");
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
