//! When a node checkpoints, beyond openraft's entry count.
//!
//! openraft snapshots (leasehold checkpoints) every `snapshot_every`
//! entries. With client commands batched up to 256 per entry, an entry
//! count alone bounds neither the log on disk nor what a restart replays,
//! so each node also checkpoints once the entries after its last checkpoint
//! take more than [`SNAPSHOT_LOG_BYTES`], or once applying them took more
//! than [`REPLAY_BUDGET`]; openraft then purges the log behind the
//! checkpoint as usual.

use std::time::Duration;

use openraft::async_runtime::WatchReceiver;

use super::{LockState, LogStore, Raft};

/// Log bytes after the last snapshot that make a node take a new one. A
/// snapshot is a checkpoint of the rows changed since the last one; under a
/// steady churn most of those are request records, about the same number
/// at every checkpoint, so fewer checkpoints cost less: at 16 MiB they took
/// 164 µs of server CPU per lock cycle against 117 without (64 clients,
/// distinct names, 3 runs), at 64 MiB 128 against 118 for the format-1
/// binary over 40 s windows. What it costs is log on disk, and replay at
/// restart.
pub const SNAPSHOT_LOG_BYTES: u64 = 64 << 20;

/// CPU time spent applying entries since the last checkpoint that makes a
/// node take a new one. A restart loads the checkpoint, then replays the
/// entries after it, which costs about what applying them did: this
/// bounds that replay to about a second, whatever the commands cost. (By
/// log bytes alone, a follower that had taken a million acquires, 56 MB
/// of log, replayed all of them at restart: 2.8–3.9 s, each a few B-tree
/// searches that miss the cache in a table of a million leases. A bound
/// on commands instead would checkpoint a node whose small table applies
/// a command in a fraction of that as often, for nothing: under a steady
/// churn each checkpoint writes about the same rows, so its cost is per
/// checkpoint.) It also bounds the changes the table notes for the next
/// checkpoint.
pub const REPLAY_BUDGET: Duration = Duration::from_secs(1);

const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Checks every second whether the log after the last checkpoint is over
/// [`SNAPSHOT_LOG_BYTES`] or applying it took over [`REPLAY_BUDGET`], and
/// triggers a checkpoint if so, until Raft shuts down.
pub async fn checkpoint_when_due(raft: Raft, log: LogStore, state: LockState) {
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        let snapshot = raft.metrics().borrow_watched().snapshot.map(|s| s.index);
        if log.bytes_after(snapshot) > SNAPSHOT_LOG_BYTES || state.applying_since_checkpoint() > REPLAY_BUDGET {
            // A snapshot already being built makes this a no-op.
            if raft.trigger().snapshot().await.is_err() {
                return;
            }
        }
    }
}
