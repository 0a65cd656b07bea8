//! Snapshots by the log's size, not only by its entry count.
//!
//! openraft snapshots every `snapshot_every` entries. With client
//! commands batched up to 256 per entry, an entry count alone no longer
//! bounds the log on disk, so each node also snapshots once the entries after
//! its last snapshot take more than [`SNAPSHOT_LOG_BYTES`]; openraft then
//! purges the log behind the snapshot as usual.

use std::time::Duration;

use openraft::async_runtime::WatchReceiver;

use super::{LogStore, Raft};

/// Log bytes after the last snapshot that make a node take a new one. A
/// snapshot is a checkpoint of the rows changed since the last one; under a
/// steady churn most of those are request records, about the same number
/// at every checkpoint, so fewer checkpoints cost less: at 16 MiB they took
/// 164 µs of server CPU per lock cycle against 117 without (64 clients,
/// distinct names, 3 runs), at 64 MiB 128 against 118 for the format-1
/// binary over 40 s windows. What it costs is log on disk, and replay at
/// restart.
pub const SNAPSHOT_LOG_BYTES: u64 = 64 << 20;

const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Checks the log's size every second, triggering a snapshot when it is
/// over `limit`, until Raft shuts down.
pub async fn snapshot_by_size(raft: Raft, log: LogStore, limit: u64) {
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        let snapshot = raft.metrics().borrow_watched().snapshot.map(|s| s.index);
        if log.bytes_after(snapshot) > limit {
            // A snapshot already being built makes this a no-op.
            if raft.trigger().snapshot().await.is_err() {
                return;
            }
        }
    }
}
