//! Backups and restores of a node's state.
//!
//! A backup is one node's current snapshot file (format 3, see
//! [`super::snapshot_file`]): the locks, queues, records, gates, sessions
//! and request ids as of the snapshot's log index. A node asked for a backup
//! takes a fresh snapshot first (`POST /v1/cluster/snapshot`), so the backup
//! is as recent as its applied state. Backups made by format-1 binaries (one
//! JSON document, `{"meta": .., "data": ..}`) are still restored: that is
//! how a format-1 data folder moves to this binary; so are format-2 files.
//!
//! [`restore`] seeds an EMPTY data folder of a NEW cluster from a backup, the
//! way `etcdutl snapshot restore` does: the snapshot is stored with its
//! membership replaced by the new voters, and the log is marked purged up to
//! the snapshot, as if the node had just installed it from a leader. Every
//! node of the new cluster is seeded from the same file, so they start
//! agreed on it and simply elect a leader. Log indexes, hence fencing tokens,
//! continue above the snapshot's index, or above `min_index` when that is
//! higher: after losing a majority the surviving node may lack grants that
//! were acknowledged, and a token issued after the restore must still be
//! above theirs, or fenced resources would refuse every new holder.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use openraft::Membership;
use serde::Deserialize;

use super::snapshot_file::{self, SnapshotReader};
use super::state::{install_path, write_table};
use super::state_machine::SnapshotImage;
use super::{format, open_stores, OpenError, SNAPSHOT_DIR};
use crate::raft::types::{LogId, Member, NodeId, SnapshotMeta, StorageError, StoredMembership};
use leasehold_core::LockTable;

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("{0} is not empty: restore only seeds a new node's empty data folder")]
    NotEmpty(String),
    #[error("no voters given for the restored cluster")]
    NoVoters,
    #[error("not a leasehold backup: {0}")]
    Format(#[from] serde_json::Error),
    #[error("not a usable leasehold backup: {0}")]
    Snapshot(std::io::Error),
    #[error("the backup holds no snapshot index")]
    NoIndex,
    #[error("invalid membership for the restored cluster: {0}")]
    Membership(String),
    #[error("reading {0}: {1}")]
    Io(String, std::io::Error),
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    #[error(transparent)]
    Open(#[from] OpenError),
}

#[derive(Deserialize)]
struct Backup {
    meta: SnapshotMeta,
    data: SnapshotImage,
}

/// Seeds the empty folder `dir` from `backup` for a new cluster whose voters
/// are `voters`; returns the log id the new cluster continues after.
pub async fn restore(
    dir: &Path,
    backup: &[u8],
    voters: &BTreeMap<NodeId, Member>,
    min_index: u64,
) -> Result<LogId, BackupError> {
    if voters.is_empty() {
        return Err(BackupError::NoVoters);
    }
    let occupied = match std::fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_some(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(BackupError::Io(dir.display().to_string(), e)),
    };
    if occupied {
        return Err(BackupError::NotEmpty(dir.display().to_string()));
    }
    // Later formats start with their magic bytes; format 1 was a JSON document.
    let format_1: Option<Backup> =
        if snapshot_file::is_snapshot(backup) { None } else { Some(serde_json::from_slice(backup)?) };
    let meta = match &format_1 {
        Some(old) => old.meta.clone(),
        None => SnapshotReader::new(backup).map_err(BackupError::Snapshot)?.meta().clone(),
    };
    let mut last = meta.last_log_id.ok_or(BackupError::NoIndex)?;
    last.index = last.index.max(min_index);
    let ids: BTreeSet<NodeId> = voters.keys().copied().collect();
    let membership = Membership::new(vec![ids], voters.clone()).map_err(|e| BackupError::Membership(e.to_string()))?;
    let meta = SnapshotMeta { last_log_id: Some(last), last_membership: StoredMembership::new(Some(last), membership) };
    // The snapshot goes where an interrupted install would be: the node
    // installs it when it opens the folder, just below.
    format::check(dir).map_err(OpenError::from)?;
    let snapshots = dir.join(SNAPSHOT_DIR);
    std::fs::create_dir_all(&snapshots).map_err(|e| BackupError::Io(snapshots.display().to_string(), e))?;
    let written = match format_1 {
        Some(Backup { data: image, .. }) => {
            write_table(&install_path(&snapshots), &meta, &LockTable::from(image.table))
        }
        None => {
            let mut rows = SnapshotReader::new(backup).map_err(BackupError::Snapshot)?;
            snapshot_file::write_file(&install_path(&snapshots), &meta, |writer| {
                while let Some((key, value)) = rows.next_row()? {
                    writer.row(&key, &value)?;
                }
                Ok(())
            })
        }
    };
    written.map_err(BackupError::Snapshot)?;
    // Nobody scrapes a restore: its counters are thrown away.
    let (log, _state_machine) = open_stores(dir, Arc::default(), Arc::new(()))?;
    log.mark_purged_through(last)?;
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_core::{Command, TableImage};

    // Ensures a backup made by a format-1 binary (one JSON document) restores
    // into a folder of the current format holding the same table, its
    // snapshot index and the new membership: the documented way across the
    // format change.
    #[tokio::test]
    async fn a_format_1_json_backup_restores_into_the_current_format() {
        let mut table = LockTable::new();
        table.apply(&Command::Tick { period_ms: 100 }, 1);
        let acquire = Command::Acquire {
            name: "payout".into(),
            owner: "worker".into(),
            ttl_ms: Some(10_000),
            session: None,
            wait_ms: None,
            request_id: Some("req-1".into()),
            lock_delay_ms: None,
            seq: None,
        };
        table.apply(&acquire, 2);
        let old_id = openraft::LogId::new(crate::raft::types::CommittedLeaderId { term: 3, node_id: 1 }, 2);
        let old_meta = SnapshotMeta { last_log_id: Some(old_id), last_membership: Default::default() };
        let image = SnapshotImage {
            last_applied: Some(old_id),
            membership: Default::default(),
            table: TableImage::from(&table),
        };
        let backup = serde_json::to_vec(&serde_json::json!({ "meta": old_meta, "data": image })).expect("JSON");

        let dir = tempfile::tempdir().expect("temp dir");
        let voters = BTreeMap::from([(1, Member { addr: "127.0.0.1:7701".into(), peer_addr: None })]);
        let last = restore(dir.path(), &backup, &voters, 0).await.expect("a format-1 backup restores");
        assert_eq!(last.index, 2);
        let stamped = std::fs::read_to_string(dir.path().join("format")).expect("stamped");
        assert_eq!(stamped.trim(), super::super::format::DATA_FORMAT.to_string());

        let (_log, state_machine) =
            open_stores(dir.path(), Arc::default(), Arc::new(())).expect("the restored folder opens");
        let restored = state_machine.state().read(|t| serde_json::to_value(TableImage::from(t)).expect("JSON"));
        assert_eq!(restored, serde_json::to_value(TableImage::from(&table)).expect("JSON"));
        let meta = state_machine.store().checkpointed().expect("a checkpoint");
        assert_eq!(meta.last_log_id.map(|l| l.index), Some(2));
        assert_eq!(meta.last_membership.membership().voter_ids().collect::<Vec<_>>(), vec![1]);
    }
}
