//! **Snapshots.** Between checkpoints sled is written by nothing else, so it
//! *is* a consistent cut at the last checkpoint: a snapshot for a follower or
//! a backup is streamed from it into a file (`snapshots/`, format in
//! [`crate::store::snapshot_file`]) only when one is asked for, while the next
//! checkpoint waits. Installing one goes the other way, row by row, into a
//! new generation ([`super::generation`]), so a crash mid-install leaves
//! the old state whole. A restored folder gets its snapshot as
//! `snapshots/installing.snap`, which a node installs when it opens the
//! folder.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use super::{encode, invalid, load_page, meta_rows, row_key, Current, StateStore, META};
use crate::raft::types::SnapshotMeta;
use crate::store::pages::{self, Fnv1a, Page};
use crate::store::snapshot_file::{self, SnapshotReader};
use leasehold_core::{LockTable, TableLoader};

/// The snapshot being installed; its presence at start means an install
/// did not finish.
pub(super) const INSTALLING: &str = "installing.snap";

/// The snapshot file name for `meta`: its log id, so files of different
/// checkpoints never collide.
fn file_name(meta: &SnapshotMeta) -> String {
    match meta.last_log_id {
        Some(id) => format!("{}-{}-{}.snap", id.leader_id.term, id.leader_id.node_id, id.index),
        None => "empty.snap".into(),
    }
}

impl StateStore {
    /// The snapshot file of the last checkpoint, written from sled if it is
    /// not there yet. `meta` must be that checkpoint's: a snapshot that a
    /// newer checkpoint replaced cannot be made any more (openraft then asks
    /// again with the newer one).
    pub(in crate::store) fn snapshot_file(&self, meta: &SnapshotMeta) -> io::Result<(PathBuf, u64)> {
        let current = self.lock();
        if current.meta.as_ref().map(|c| c.last_log_id) != Some(meta.last_log_id) {
            return Err(io::Error::other("the snapshot was replaced by a newer one"));
        }
        self.write_snapshot_file(&current, meta)
    }

    /// The last checkpoint's snapshot file, written if needed, and its size:
    /// a backup. `None` before the first checkpoint.
    pub fn backup(&self) -> io::Result<Option<(PathBuf, u64)>> {
        let current = self.lock();
        let Some(meta) = current.meta.clone() else { return Ok(None) };
        self.write_snapshot_file(&current, &meta).map(Some)
    }

    /// The applied index of the last checkpoint and a digest of its rows
    /// (`None` before the first checkpoint of an applied entry): 64-bit
    /// FNV-1a over every page record in key order, each key and value
    /// preceded by its length (8 bytes, big-endian). Pages are a function of
    /// the rows alone (a row's page is its key's hash; a page's rows are in
    /// key order), so replicas checkpointed at the same index agree (once
    /// each has moved a format-3 folder's request pages, at its start). Streamed
    /// from sled under the checkpoints' lock, not the table's: applying goes
    /// on meanwhile, the next checkpoint waits, and nothing is copied.
    pub fn digest(&self) -> io::Result<Option<(u64, u64)>> {
        let current = self.lock();
        let Some(applied) = current.meta.as_ref().and_then(|meta| meta.last_log_id) else { return Ok(None) };
        let mut hash = Fnv1a::default();
        for record in current.db.range([META + 1]..) {
            let (key, value) = record?;
            for field in [&key, &value] {
                io::Write::write_all(&mut hash, &(field.len() as u64).to_be_bytes())?;
                io::Write::write_all(&mut hash, field)?;
            }
        }
        Ok(Some((applied.index, hash.0)))
    }

    /// `meta`'s file, streamed from sled unless it is there already; under
    /// the lock, so no checkpoint changes the rows meanwhile.
    fn write_snapshot_file(&self, current: &Current, meta: &SnapshotMeta) -> io::Result<(PathBuf, u64)> {
        let path = self.0.snapshots.join(file_name(meta));
        let bytes = match fs::metadata(&path) {
            Ok(found) => found.len(),
            Err(_) => snapshot_file::write_file(&path, meta, |writer| {
                for row in current.db.range([META + 1]..) {
                    let (key, value) = row?;
                    writer.row(&key, &value)?;
                }
                Ok(())
            })?,
        };
        self.0.file_bytes.store(bytes, Ordering::Relaxed);
        Ok((path, bytes))
    }

    /// Size of the last snapshot file this node wrote (for a follower or a
    /// backup) or installed; `None` before the first.
    pub fn snapshot_file_bytes(&self) -> Option<u64> {
        Some(self.0.file_bytes.load(Ordering::Relaxed)).filter(|&b| b > 0)
    }

    /// A fresh path in the snapshot folder for a snapshot being received.
    pub fn receiving_path(&self) -> PathBuf {
        let n = self.0.received.fetch_add(1, Ordering::Relaxed);
        self.0.snapshots.join(format!("received-{n}.part"))
    }

    /// Makes the snapshot file at `source` the state: checked whole, then
    /// written row by row into a new generation, which replaces the current
    /// one only once it is durable. Returns its meta and the table it holds.
    /// A file in this node's snapshot folder becomes the snapshot file of
    /// the new checkpoint.
    pub(in crate::store) fn install(&self, source: &Path) -> io::Result<(SnapshotMeta, LockTable)> {
        let _writing = self.writing_until_dropped();
        snapshot_file::verify(source)?;
        self.0.file_bytes.store(fs::metadata(source)?.len(), Ordering::Relaxed);
        let mut current = self.lock();
        let mut reader = SnapshotReader::open(source)?;
        let meta = reader.meta().clone();
        let mut loader = TableLoader::default();
        self.switch(&mut current, |next| {
            // Request records' pages, written once the rows of all of them
            // are in the pages they belong in: a format-2 file spreads them
            // over more slots than this binary's.
            let mut requests = Vec::new();
            while let Some((key, value)) = reader.next_row()? {
                if key.first().is_none_or(|&id| id == META) {
                    return Err(invalid("a snapshot record that is not a page"));
                }
                load_page(&mut loader, &value)?;
                if pages::of_requests(&key) {
                    requests.push(value);
                } else {
                    next.insert(key, value)?;
                }
            }
            for (key, page) in pages::regroup(requests.iter().map(Vec::as_slice))? {
                next.insert(key, pages::encode(&page))?;
            }
            crash_point!("snapshot-install-midway");
            for (key, value) in meta_rows(&meta)? {
                next.insert(key.to_vec(), value)?;
            }
            Ok(())
        })?;
        current.meta = Some(meta.clone());
        if source.parent() == Some(self.0.snapshots.as_path()) {
            fs::rename(source, self.0.snapshots.join(file_name(&meta)))?;
        }
        self.remove_stale_files(Some(&meta))?;
        Ok((meta, loader.finish()))
    }

    /// Deletes the snapshot files of older checkpoints.
    pub(super) fn remove_stale_files(&self, keep: Option<&SnapshotMeta>) -> io::Result<()> {
        let keep = keep.map(file_name);
        for entry in fs::read_dir(&self.0.snapshots)? {
            let name = entry?.file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".snap") && name != INSTALLING && Some(name.as_ref()) != keep.as_deref() {
                fs::remove_file(self.0.snapshots.join(name.as_ref()))?;
            }
        }
        Ok(())
    }
}

/// Writes every row of `table` to a snapshot file at `path`, as of `meta`:
/// how a format-1 backup (JSON) becomes one a node installs.
pub(in crate::store) fn write_table(path: &Path, meta: &SnapshotMeta, table: &LockTable) -> io::Result<u64> {
    let mut by_page: BTreeMap<Vec<u8>, Page> = BTreeMap::new();
    for row in table.rows() {
        let value = row.value.ok_or_else(|| invalid("a full dump has every value"))?;
        let key = row_key(row.tree, &row.key);
        by_page.entry(pages::page_of(&key)).or_default().insert(key, encode(&value)?);
    }
    snapshot_file::write_file(path, meta, |writer| {
        for (page_key, page) in &by_page {
            writer.row(page_key, &pages::encode(page))?;
        }
        Ok(())
    })
}

/// The path a restored folder's snapshot is placed at, to be installed
/// when the node first opens it.
pub(in crate::store) fn install_path(snapshots: &Path) -> PathBuf {
    snapshots.join(INSTALLING)
}
