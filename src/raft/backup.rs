//! Backups and restores of a node's state.
//!
//! A backup is one node's latest snapshot as one JSON document,
//! `{"meta": <snapshot meta>, "data": <snapshot image>}`: the locks, queues,
//! records, gates and request ids as of the snapshot's log index. A node
//! asked for a backup takes a fresh snapshot first (`POST
//! /v1/cluster/snapshot`), so the backup is as recent as its applied state.
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

use super::snapshot_store::{SnapshotStore, StoredSnapshot};
use super::state_machine::SnapshotImage;
use super::{open_stores, LogId, Node, NodeId, SnapshotMeta, StorageError, StoredMembership};

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("{0} is not empty: restore only seeds a new node's empty data folder")]
    NotEmpty(String),
    #[error("no voters given for the restored cluster")]
    NoVoters,
    #[error("not a leasehold backup: {0}")]
    Format(#[from] serde_json::Error),
    #[error("the backup holds no snapshot index")]
    NoIndex,
    #[error("invalid membership for the restored cluster: {0}")]
    Membership(String),
    #[error("reading {0}: {1}")]
    Io(String, std::io::Error),
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
}

#[derive(Deserialize)]
struct Backup {
    meta: SnapshotMeta,
    data: SnapshotImage,
}

impl SnapshotStore {
    /// The stored snapshot as a backup document, or `None` before the first
    /// snapshot. The data is JSON already, so it is spliced in unparsed.
    pub fn backup(&self) -> Result<Option<Vec<u8>>, StorageError> {
        let Some(stored) = self.read()? else { return Ok(None) };
        let meta = serde_json::to_vec(&stored.meta)
            .map_err(|e| super::storage_error(openraft::ErrorSubject::Snapshot(None), openraft::ErrorVerb::Read, e))?;
        let mut out = Vec::with_capacity(stored.data.len() + meta.len() + 20);
        out.extend_from_slice(b"{\"meta\":");
        out.extend_from_slice(&meta);
        out.extend_from_slice(b",\"data\":");
        out.extend_from_slice(&stored.data);
        out.push(b'}');
        Ok(Some(out))
    }
}

/// Seeds the empty folder `dir` from `backup` for a new cluster whose voters
/// are `voters`; returns the log id the new cluster continues after.
pub async fn restore(
    dir: &Path,
    backup: &[u8],
    voters: &BTreeMap<NodeId, String>,
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
    let Backup { meta, data: mut image } = serde_json::from_slice(backup)?;
    let mut last = meta.last_log_id.ok_or(BackupError::NoIndex)?;
    last.index = last.index.max(min_index);
    let nodes: BTreeMap<NodeId, Node> = voters.iter().map(|(id, addr)| (*id, Node { addr: addr.clone() })).collect();
    let ids: BTreeSet<NodeId> = nodes.keys().copied().collect();
    let membership = Membership::new(vec![ids], nodes).map_err(|e| BackupError::Membership(e.to_string()))?;
    let membership = StoredMembership::new(Some(last), membership);
    image.last_applied = Some(last);
    image.membership = membership.clone();
    let stored = StoredSnapshot {
        meta: SnapshotMeta { last_log_id: Some(last), last_membership: membership },
        data: serde_json::to_vec(&image)?,
    };
    // Nobody scrapes a restore: its counters are thrown away.
    let (log, state_machine) = open_stores(dir, Arc::default())?;
    log.mark_purged_through(last)?;
    state_machine.seed(&stored).await?;
    Ok(last)
}
