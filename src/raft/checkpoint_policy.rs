//! When a node checkpoints, beyond openraft's entry count.
//!
//! openraft snapshots (leasehold checkpoints) every `snapshot_every`
//! entries. With client commands batched up to 256 per entry, an entry
//! count alone bounds neither the log on disk nor what a restart replays,
//! so each node also checkpoints once the entries after its last checkpoint
//! take more than [`SNAPSHOT_LOG_BYTES`], or once a restart would cost
//! more than [`RESTART_BUDGET`] (loading the table, then replaying the
//! entries after the checkpoint); openraft then purges the log behind the
//! checkpoint as usual.

use std::time::Duration;

use openraft::async_runtime::WatchReceiver;

use super::Raft;
use crate::store::{LockState, LogStore};
use leasehold_core::LockTable;

/// Log bytes after the last snapshot that make a node take a new one. A
/// snapshot is a checkpoint of the rows changed since the last one; under a
/// steady churn most of those are request records, about the same number
/// at every checkpoint, so fewer checkpoints cost less: at 16 MiB they took
/// 164 µs of server CPU per lock cycle against 117 without (64 clients,
/// distinct names, 3 runs), at 64 MiB 128 against 118 for the format-1
/// binary over 40 s windows. What it costs is log on disk, and replay at
/// restart.
pub const SNAPSHOT_LOG_BYTES: u64 = 64 << 20;

/// About what a restart may cost: loading the table from the last
/// checkpoint, then replaying the entries after it. A node checkpoints
/// once the CPU time it spent applying the entries after its last
/// checkpoint (about what replaying them costs) and the estimated load of
/// its table together pass this. A large table leaves less room for
/// replay: at a million leases (load ~1.4 s) a node checkpoints after
/// about a second of applying; a small one after nearly 2.5 s, which under
/// 64 clients of churn is about as often as 50 000 entries. (By log bytes
/// alone, a follower that had taken a million acquires, 56 MB of log,
/// replayed all of them at restart: 2.8–3.9 s, each a few B-tree searches
/// that miss the cache. With a flat second of replay whatever the table,
/// the small table of a churn checkpointed every ~15 s, each checkpoint
/// rewriting its request records, and lost 4–11 % of its lock cycles.)
pub const RESTART_BUDGET: Duration = Duration::from_millis(2_500);

/// The least replay a node allows itself, however large its table: with
/// less it would checkpoint all the time.
const MIN_REPLAY: Duration = Duration::from_millis(500);

/// Loading a table at restart costs about this per row: a million leases
/// and 50 000 request records loaded in 1.4–1.5 s on two threads of a
/// 2-core VM.
const LOAD_PER_ROW: Duration = Duration::from_nanos(1_400);

/// The replay a node with `rows` rows in its table allows itself between
/// checkpoints.
fn replay_budget(rows: usize) -> Duration {
    let load = LOAD_PER_ROW.saturating_mul(u32::try_from(rows).unwrap_or(u32::MAX));
    RESTART_BUDGET.saturating_sub(load).max(MIN_REPLAY)
}

const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Checks every second whether the log after the last checkpoint is over
/// [`SNAPSHOT_LOG_BYTES`] or applying it took more than the table's
/// [`replay_budget`], and triggers a checkpoint if so, until Raft shuts
/// down.
pub async fn checkpoint_when_due(raft: Raft, log: LogStore, state: LockState) {
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        let snapshot = raft.metrics().borrow_watched().snapshot.map(|s| s.index);
        let replay = replay_budget(state.read(LockTable::row_count));
        if log.bytes_after(snapshot) > SNAPSHOT_LOG_BYTES || state.applying_since_checkpoint() > replay {
            // A snapshot already being built makes this a no-op.
            if raft.trigger().snapshot().await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ensures a small table leaves nearly the whole restart budget to
    // replay, a million rows about a second, and no table less than the
    // least.
    #[test]
    fn larger_tables_leave_less_replay() {
        assert_eq!(replay_budget(0), RESTART_BUDGET);
        assert_eq!(replay_budget(50_000), Duration::from_millis(2_430));
        assert_eq!(replay_budget(1_050_000), Duration::from_millis(1_030));
        assert_eq!(replay_budget(10_000_000), MIN_REPLAY);
    }
}
