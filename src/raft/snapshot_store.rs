//! Where a node keeps its snapshot of the lock table: a sled database of its
//! own per snapshot, under `snapshots/<generation>/`.
//!
//! One database per snapshot, not one database for all of them: sled
//! reclaims the space of replaced values only as later writes fill and clean
//! its segments, and with the Raft log in files of its own, sled sees writes
//! only when a snapshot is saved. Rewriting snapshots in one database left
//! most of every old snapshot on disk (`tests/storage_bound.rs` saw a node's
//! folder grow by ~30 MiB per 20 000 entries). A new generation is written
//! and made durable, and only then is the previous one deleted whole.
//!
//! Within a generation the data is stored in chunks below sled's threshold
//! for separate blob files, in one batch with the meta, which marks the
//! generation complete.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::{ErrorSubject, ErrorVerb};

use super::{sync_dir, SnapshotMeta, StorageError};

const META: &[u8] = b"meta";
/// Chunks are stored under `data/<8-digit number>`.
const DATA: &str = "data/";
/// Below sled's threshold for keeping a value in a blob file of its own.
const CHUNK_BYTES: usize = 32 << 10;
/// sled's page cache per generation; a generation is read once at start and
/// for backups, so it needs little.
const CACHE_BYTES: u64 = 4 << 20;

/// A snapshot as stored: the meta as JSON, and the data.
pub(super) struct StoredSnapshot {
    pub meta: SnapshotMeta,
    pub data: Vec<u8>,
}

/// The node's current snapshot generation. Cheap to clone: clones share it.
#[derive(Clone)]
pub struct SnapshotStore {
    root: Arc<PathBuf>,
    current: Arc<Mutex<Option<Generation>>>,
}

struct Generation {
    number: u64,
    db: sled::Db,
}

fn error(verb: ErrorVerb, e: &dyn std::error::Error) -> StorageError {
    StorageError::new(ErrorSubject::Snapshot(None), verb, openraft::errors::ErrorSource::from_string(e))
}

impl SnapshotStore {
    /// Opens the newest complete generation under `root`, deleting the
    /// others (older ones, and a newer one a crash left half-written).
    pub(super) fn open(root: &Path) -> Result<SnapshotStore, StorageError> {
        let err = |e: &dyn std::error::Error| error(ErrorVerb::Read, e);
        fs::create_dir_all(root).map_err(|e| err(&e))?;
        let mut numbers: Vec<u64> = fs::read_dir(root)
            .map_err(|e| err(&e))?
            .filter_map(|d| d.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        numbers.sort_unstable_by(|a, b| b.cmp(a));
        let mut current = None;
        for number in numbers {
            let path = root.join(number.to_string());
            if current.is_none() {
                let db = open_db(&path).map_err(|e| err(&e))?;
                if db.contains_key(META).map_err(|e| err(&e))? {
                    current = Some(Generation { number, db });
                    continue;
                }
            }
            fs::remove_dir_all(&path).map_err(|e| err(&e))?;
        }
        Ok(SnapshotStore { root: Arc::new(root.to_owned()), current: Arc::new(Mutex::new(current)) })
    }

    fn lock(&self) -> MutexGuard<'_, Option<Generation>> {
        // Replaced in one assignment: a panic cannot leave it half-changed.
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current snapshot, if any.
    pub(super) fn read(&self) -> Result<Option<StoredSnapshot>, StorageError> {
        let err = |e: &dyn std::error::Error| error(ErrorVerb::Read, e);
        let current = self.lock();
        let Some(generation) = current.as_ref() else { return Ok(None) };
        let Some(meta) = generation.db.get(META).map_err(|e| err(&e))? else { return Ok(None) };
        let mut data = Vec::new();
        for chunk in generation.db.scan_prefix(DATA).values() {
            data.extend_from_slice(&chunk.map_err(|e| err(&e))?);
        }
        Ok(Some(StoredSnapshot { meta: serde_json::from_slice(&meta).map_err(|e| err(&e))?, data }))
    }

    /// Saves `stored` as a new generation, makes it durable, then drops the
    /// previous one: logs it covers may be purged as soon as this returns.
    pub(super) async fn save(&self, stored: &StoredSnapshot) -> Result<(), StorageError> {
        let err = |e: &dyn std::error::Error| error(ErrorVerb::Write, e);
        let number = self.lock().as_ref().map_or(0, |g| g.number + 1);
        let path = self.root.join(number.to_string());
        let db = open_db(&path).map_err(|e| err(&e))?;
        let mut batch = sled::Batch::default();
        for (n, chunk) in stored.data.chunks(CHUNK_BYTES).enumerate() {
            batch.insert(format!("{DATA}{n:08}").as_bytes(), chunk);
        }
        batch.insert(META, serde_json::to_vec(&stored.meta).map_err(|e| err(&e))?);
        db.apply_batch(batch).map_err(|e| err(&e))?;
        db.flush_async().await.map_err(|e| err(&e))?;
        let (root, dir) = (self.root.to_path_buf(), path.clone());
        tokio::task::spawn_blocking(move || fsync_sled_files(&dir).and_then(|()| sync_dir(&root)))
            .await
            .map_err(|e| err(&e))?
            .map_err(|e| err(&e))?;
        let previous = self.lock().replace(Generation { number, db });
        if let Some(previous) = previous {
            let old = self.root.join(previous.number.to_string());
            drop(previous);
            fs::remove_dir_all(&old).map_err(|e| err(&e))?;
        }
        Ok(())
    }
}

fn open_db(path: &Path) -> sled::Result<sled::Db> {
    // Durability comes from the explicit flush and fsyncs in `save`.
    sled::Config::new().path(path).flush_every_ms(None).cache_capacity(CACHE_BYTES).open()
}

/// fsyncs sled's files and folders under `dir`. sled's own flush ends with
/// `sync_file_range`, which leaves the disk's write cache and the files'
/// metadata unflushed, and it never syncs its blob files at all. A snapshot
/// is what lets the log be purged, so it must be durable before that.
fn fsync_sled_files(dir: &Path) -> std::io::Result<()> {
    let blobs = dir.join("blobs");
    let mut paths = vec![dir.join("db"), dir.join("conf")];
    match fs::read_dir(&blobs) {
        Ok(entries) => {
            for entry in entries {
                paths.push(entry?.path());
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    paths.push(blobs);
    paths.push(dir.to_owned());
    for path in paths {
        match fs::File::open(&path) {
            Ok(f) => f.sync_all()?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_id(index: u64) -> super::super::LogId {
        openraft::LogId::new(super::super::CommittedLeaderId { term: 1, node_id: 1 }, index)
    }

    /// 0.10's snapshot meta has no id: the log id it covers tells them apart.
    fn snapshot(id: u64, data: Vec<u8>) -> StoredSnapshot {
        let meta = SnapshotMeta { last_log_id: Some(log_id(id)), last_membership: Default::default() };
        StoredSnapshot { meta, data }
    }

    // Ensures a saved snapshot, chunked, reads back whole after a restart,
    // and that saving a new one deletes the previous generation.
    #[tokio::test]
    async fn snapshots_survive_restart_and_replace_each_other() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SnapshotStore::open(dir.path()).expect("open");
        assert!(store.read().expect("read").is_none());
        let big: Vec<u8> = (0..3 * CHUNK_BYTES + 7).map(|i| i as u8).collect();
        store.save(&snapshot(1, vec![1, 2, 3])).await.expect("save");
        store.save(&snapshot(2, big.clone())).await.expect("save");
        drop(store);
        let generations = fs::read_dir(dir.path()).expect("list").count();
        assert_eq!(generations, 1, "the older generation is deleted");
        let store = SnapshotStore::open(dir.path()).expect("reopen");
        let read = store.read().expect("read").expect("a snapshot");
        assert_eq!((read.meta.last_log_id, read.data), (Some(log_id(2)), big));
    }
}
