//! The state machine's durable form: the lock table's rows in sled, under
//! `DATA/state/`, brought up to date at each checkpoint with the rows that
//! changed since the last one.
//!
//! **Layout.** One sled tree. A row's key is its [`Tree`] id (one byte) and
//! its key in that tree; its value is the row's MessagePack (named fields,
//! so a field added later reads as its default). Rows are stored in pages
//! of the rows whose keys hash alike (one sled record per page, see
//! [`super::pages`] for why). Key byte 0 holds the checkpoint's meta: the
//! applied log id and the membership, as JSON. One tree, not one per kind
//! of row, because a checkpoint must be one atomic batch (sled's batches
//! are per tree) so that the applied id always describes exactly the rows
//! beside it.
//!
//! Here: [`StateStore`], opening it and loading the table, and the rows'
//! keys and meta rows. The rest is by job, each file's comment telling its
//! part of the design:
//! - [`checkpoint`] — checkpoints: the changed rows, written in place or rewritten into a fresh generation;
//! - [`generation`] — generations (`state/<n>/`, `CURRENT`): sled opened, written whole and fsynced;
//! - [`snapshot`] — snapshot and backup files streamed from sled, and installing one (a restored folder's too).

mod checkpoint;
mod generation;
mod snapshot;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use self::generation::open_generation;
use self::snapshot::INSTALLING;
use super::pages;
use crate::raft::types::{LogId, SnapshotMeta, StoredMembership};
use leasehold_core::{LockTable, TableLoader, Tree};

pub(super) use self::checkpoint::Checkpoint;
pub(super) use self::snapshot::{install_path, write_table};

/// Key byte of the checkpoint's meta rows (no [`Tree`] has id 0).
const META: u8 = 0;
const APPLIED: &[u8] = b"\0applied";
const MEMBERSHIP: &[u8] = b"\0membership";

fn invalid(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// The state the rows describe, as of a checkpoint (or nothing yet).
pub(super) struct Loaded {
    pub meta: Option<SnapshotMeta>,
    pub table: LockTable,
}

#[derive(Serialize, Deserialize)]
struct Applied(Option<LogId>);

/// The node's durable state. Cheap to clone: clones share it.
#[derive(Clone)]
pub struct StateStore(Arc<Inner>);

struct Inner {
    root: PathBuf,
    snapshots: PathBuf,
    /// Held while sled is written or streamed.
    current: Mutex<Current>,
    received: AtomicU64,
    /// Size of the last snapshot file written or installed; 0 before one.
    file_bytes: AtomicU64,
    /// Checkpoints and installs under way.
    writing: AtomicUsize,
}

/// The generation in use and the last checkpoint in it.
struct Current {
    generation: u64,
    db: sled::Db,
    /// Its size on disk right after it was written whole.
    compacted_bytes: u64,
    meta: Option<SnapshotMeta>,
}

/// `row`'s key in sled.
fn row_key(tree: Tree, key: &[u8]) -> Vec<u8> {
    let mut stored = Vec::with_capacity(1 + key.len());
    stored.push(tree.id());
    stored.extend_from_slice(key);
    stored
}

fn encode<T: Serialize + ?Sized>(value: &T) -> io::Result<Vec<u8>> {
    rmp_serde::to_vec_named(value).map_err(invalid)
}

/// The checkpoint's own rows: the applied log id and the membership.
fn meta_rows(meta: &SnapshotMeta) -> io::Result<[(&'static [u8], Vec<u8>); 2]> {
    Ok([
        (APPLIED, serde_json::to_vec(&Applied(meta.last_log_id))?),
        (MEMBERSHIP, serde_json::to_vec(&meta.last_membership)?),
    ])
}

impl StateStore {
    /// Opens the rows under `state_dir` (snapshot files under `snapshots`),
    /// installing a restored folder's snapshot first, and loads the table.
    pub(super) fn open(state_dir: &Path, snapshots: &Path) -> io::Result<(StateStore, Loaded)> {
        fs::create_dir_all(snapshots)?;
        // Nothing is being received yet: parts of earlier receives are junk.
        for entry in fs::read_dir(snapshots)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "part") {
                fs::remove_file(path)?;
            }
        }
        let opening = std::time::Instant::now();
        let (generation, db) = open_generation(state_dir)?;
        let opened_ms = opening.elapsed().as_millis() as u64;
        let compacted_bytes = db.size_on_disk()?;
        let current = Current { generation, db, compacted_bytes, meta: None };
        let store = StateStore(Arc::new(Inner {
            root: state_dir.to_owned(),
            snapshots: snapshots.to_owned(),
            current: Mutex::new(current),
            received: AtomicU64::new(0),
            file_bytes: AtomicU64::new(0),
            writing: AtomicUsize::new(0),
        }));
        let installing = snapshots.join(INSTALLING);
        if installing.exists() {
            store.install(&installing)?;
        }
        store.move_misplaced_requests()?;
        let loading = std::time::Instant::now();
        let loaded = store.load()?;
        // Start-up time is sled's open plus this load, then the log replay.
        tracing::info!(
            generation,
            sled_open_ms = opened_ms,
            load_ms = loading.elapsed().as_millis() as u64,
            bytes = compacted_bytes,
            "state loaded"
        );
        store.lock().meta = loaded.meta.clone();
        store.remove_stale_files(loaded.meta.as_ref())?;
        Ok((store, loaded))
    }

    /// Whether a checkpoint or an install is under way.
    pub fn writing(&self) -> bool {
        self.0.writing.load(Ordering::Relaxed) > 0
    }

    /// Counts a checkpoint or an install as under way until the guard is
    /// dropped.
    fn writing_until_dropped(&self) -> Writing<'_> {
        self.0.writing.fetch_add(1, Ordering::Relaxed);
        Writing(&self.0.writing)
    }

    fn lock(&self) -> MutexGuard<'_, Current> {
        // Its fields change only after the disk did: a panic in between
        // leaves an older, still true, description.
        self.0.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves the request records of pages beyond their tree's slots (data
    /// format 3 kept them there, see [`pages`]) into the pages they belong
    /// in, in one batch, made durable before anything else is written. A
    /// crash before it leaves the old pages whole, to be moved at the next
    /// start.
    fn move_misplaced_requests(&self) -> io::Result<()> {
        let current = self.lock();
        let misplaced = current.db.range(pages::misplaced_requests()).collect::<Result<Vec<_>, _>>()?;
        if misplaced.is_empty() {
            return Ok(());
        }
        let mut batch = sled::Batch::default();
        for (key, _) in &misplaced {
            batch.remove(key.clone());
        }
        for (key, mut page) in pages::regroup(misplaced.iter().map(|(_, page)| &page[..]))? {
            if let Some(stored) = current.db.get(&key)? {
                page.extend(pages::decode(&stored)?);
            }
            batch.insert(key, pages::encode(&page));
        }
        current.db.apply_batch(batch)?;
        generation::sync(&current.db, &generation::generation_dir(&self.0.root, current.generation))?;
        tracing::info!(pages = misplaced.len(), "request records moved into their pages (data format 3 to 4)");
        Ok(())
    }

    /// Loads the table from the rows: the pages of each tree's lower half of
    /// slots on one thread and of its upper half on another, each sorted
    /// there, then joined. Decoding and sorting a million leases is most of
    /// a restart, and a node has two cores or more.
    fn load(&self) -> io::Result<Loaded> {
        let (mut applied, mut membership) = (None, StoredMembership::default());
        let db = self.lock().db.clone();
        for row in db.range([META]..[META + 1]) {
            let (key, value) = row?;
            match &*key {
                APPLIED => applied = Some(serde_json::from_slice::<Applied>(&value)?.0),
                MEMBERSHIP => membership = serde_json::from_slice(&value)?,
                _ => return Err(invalid("an unknown meta row in the state")),
            }
        }
        if db.first()?.is_some_and(|(key, _)| key.is_empty()) {
            return Err(invalid("an empty key in the state"));
        }
        let (lower, upper) = std::thread::scope(|scope| {
            let upper = scope.spawn(|| load_pages(&db, pages::Half::Upper));
            let lower = load_pages(&db, pages::Half::Lower);
            (lower, upper.join().map_err(|_| io::Error::other("loading the upper pages panicked")))
        });
        let loader = lower?.join(upper??);
        let meta = applied.map(|last_log_id| SnapshotMeta { last_log_id, last_membership: membership });
        Ok(Loaded { meta, table: loader.finish() })
    }
}

/// One checkpoint or install under way, until dropped.
struct Writing<'a>(&'a AtomicUsize);

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The rows of the pages in `half` of every tree's slots, sorted.
fn load_pages(db: &sled::Db, half: pages::Half) -> io::Result<TableLoader> {
    let mut loader = TableLoader::default();
    for range in pages::ranges(half) {
        for row in db.range(range) {
            load_page(&mut loader, &row?.1)?;
        }
    }
    loader.sort();
    Ok(loader)
}

/// Adds the rows of the encoded page `page` to `loader`.
fn load_page(loader: &mut TableLoader, page: &[u8]) -> io::Result<()> {
    for row in pages::rows(page) {
        let (key, value) = row?;
        let (&id, key) = key.split_first().ok_or_else(|| invalid("an empty row key in a page"))?;
        let tree = Tree::from_id(id).ok_or_else(|| invalid(format!("rows of an unknown kind ({id})")))?;
        loader.load(tree, key, &mut rmp_serde::Deserializer::new(value)).map_err(invalid)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::generation::wait_out_lock;
    use super::*;
    use leasehold_core::Command;
    use std::collections::BTreeMap;

    pub(super) fn meta(index: u64) -> SnapshotMeta {
        let log_id = openraft::LogId::new(crate::raft::types::CommittedLeaderId { term: 1, node_id: 1 }, index);
        SnapshotMeta { last_log_id: Some(log_id), last_membership: Default::default() }
    }

    pub(super) fn acquire(name: &str) -> Command {
        Command::Acquire {
            name: name.into(),
            owner: "worker".into(),
            ttl_ms: Some(10_000),
            session: None,
            wait_ms: None,
            request_id: Some(format!("req-{name}")),
            lock_delay_ms: None,
            seq: None,
        }
    }

    /// Opens the store in `dir`, waiting out the file lock of a store of
    /// the same folder this test has just dropped.
    pub(super) fn open(dir: &Path) -> (StateStore, Loaded) {
        wait_out_lock(|| StateStore::open(&dir.join("state"), &dir.join("snapshots"))).expect("open")
    }

    // Ensures checkpoints bring sled up to date with only what changed, a
    // reopened store loads exactly the checkpointed table, a snapshot file
    // streamed from one node installs on another (into a new generation,
    // the old one deleted), and a restored folder's snapshot is installed
    // at the next start.
    #[test]
    fn checkpoints_reload_and_snapshots_install_elsewhere() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (store, loaded) = open(dir.path());
        assert!(loaded.meta.is_none() && loaded.table.is_empty());
        let mut table = LockTable::new();
        table.apply(&Command::Tick { period_ms: 100 }, 1);
        for (i, name) in ["a", "b", "c"].iter().enumerate() {
            table.apply(&acquire(name), 2 + i as u64);
        }
        let first = store.checkpoint(StateStore::take_checkpoint(&mut table, meta(4))).expect("checkpoint");
        assert_eq!(first.rows, 1 + 3 + 3, "the clock, three leases, three request records");
        table.apply(&acquire("d"), 5);
        let second = store.checkpoint(StateStore::take_checkpoint(&mut table, meta(5))).expect("checkpoint");
        assert_eq!(second.rows, 1 + 1 + 1, "only what changed since");
        let (path, _) = store.snapshot_file(&meta(5)).expect("snapshot file");
        assert!(store.snapshot_file(&meta(4)).is_err(), "a replaced checkpoint has no snapshot any more");
        drop(store);

        let (store, loaded) = open(dir.path());
        assert_eq!(loaded.meta.as_ref().and_then(|m| m.last_log_id).map(|l| l.index), Some(5));
        assert_eq!(loaded.table, table);
        let stale = StateStore::take_checkpoint(&mut table.clone(), meta(3));
        store.checkpoint(stale).expect("a stale checkpoint is dropped");
        assert_eq!(store.checkpointed().and_then(|m| m.last_log_id).map(|l| l.index), Some(5));

        let other = tempfile::tempdir().expect("temp dir");
        let (follower, _) = open(other.path());
        let (installed, installed_table) = follower.install(&path).expect("install");
        assert_eq!((installed.last_log_id, &installed_table), (meta(5).last_log_id, &table));
        drop(follower);
        assert_eq!(open(other.path()).1.table, table, "the install is durable");
        let generations: Vec<_> =
            fs::read_dir(other.path().join("state")).expect("list").flatten().map(|e| e.file_name()).collect();
        assert_eq!(generations.len(), 2, "CURRENT and the one generation installed into: {generations:?}");

        // A restored folder: the snapshot waits where `restore` puts it.
        let crashed = tempfile::tempdir().expect("temp dir");
        fs::create_dir_all(crashed.path().join("snapshots")).expect("mkdir");
        fs::copy(&path, install_path(&crashed.path().join("snapshots"))).expect("copy");
        let (_, loaded) = open(crashed.path());
        assert_eq!(loaded.table, table, "the snapshot is installed at start");
        assert!(!install_path(&crashed.path().join("snapshots")).exists());
    }

    /// Puts every request record of `store` where data format 3 kept it.
    fn page_requests_as_format_3(store: &StateStore) {
        let current = store.lock();
        let tree = Tree::Requests.id();
        let stored = current.db.range([tree]..[tree + 1]).collect::<Result<Vec<_>, _>>().expect("read");
        let mut old: BTreeMap<Vec<u8>, pages::Page> = BTreeMap::new();
        for (key, page) in &stored {
            current.db.remove(key).expect("remove");
            for (row_key, value) in pages::decode(page).expect("decode") {
                old.entry(pages::format_3_page_of(&row_key)).or_default().insert(row_key, value);
            }
        }
        for (key, page) in old {
            current.db.insert(key, pages::encode(&page)).expect("insert");
        }
        current.db.flush().expect("flush");
    }

    /// The number of pages `store` keeps beyond the request records' slots.
    fn misplaced(store: &StateStore) -> usize {
        store.lock().db.range(pages::misplaced_requests()).count()
    }

    /// Ticks `table` past the age of every request record, then checkpoints
    /// it into `store` as of the last tick's index.
    fn age_out_requests(store: &StateStore, table: &mut LockTable, from: u64) {
        let ticks = leasehold_core::MAX_REQUEST_AGE_MS / 100 + 1;
        for index in from..from + ticks {
            table.apply(&Command::Tick { period_ms: 100 }, index);
        }
        store.checkpoint(StateStore::take_checkpoint(table, meta(from + ticks - 1))).expect("checkpoint");
        assert!(table.rows().all(|row| row.tree != Tree::Requests), "every record aged out");
    }

    // Ensures a folder whose request records are paged as data format 3
    // kept them has them moved at start, so that later checkpoints delete
    // them where they are (a record left behind would come back at the next
    // start), and that a format-2 snapshot file, paged so too, installs
    // into this format's pages.
    #[test]
    fn format_3_request_pages_are_moved() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (store, _) = open(dir.path());
        let mut table = LockTable::new();
        table.apply(&Command::Tick { period_ms: 100 }, 1);
        for n in 0..3_000u64 {
            table.apply(&acquire(&format!("lock-{n}")), 2 + n);
        }
        store.checkpoint(StateStore::take_checkpoint(&mut table, meta(3_001))).expect("checkpoint");
        page_requests_as_format_3(&store);
        assert!(misplaced(&store) > 2_000, "format 3 kept most request pages beyond the slots");
        let (path, _) = store.snapshot_file(&meta(3_001)).expect("snapshot file");
        let mut bytes = fs::read(&path).expect("read");
        bytes[..8].copy_from_slice(b"LHSNAP02");
        let format_2 = dir.path().join("format-2.snap");
        fs::write(&format_2, bytes).expect("write");
        drop(store);

        let (store, loaded) = open(dir.path());
        assert_eq!(misplaced(&store), 0, "moved");
        assert!(loaded.table == table, "every record kept");
        let snapshot_table = table.clone();
        age_out_requests(&store, &mut table, 3_002);
        drop(store);
        assert!(open(dir.path()).1.table == table, "aged-out records are gone from where they were moved to");

        let other = tempfile::tempdir().expect("temp dir");
        let (follower, _) = open(other.path());
        let (_, installed) = follower.install(&format_2).expect("a format-2 snapshot installs");
        assert_eq!(misplaced(&follower), 0, "installed into this format's pages");
        assert!(installed == snapshot_table, "every record installed");
        let mut table = snapshot_table;
        age_out_requests(&follower, &mut table, 3_002);
        drop(follower);
        assert!(open(other.path()).1.table == table, "aged-out records are gone from where they were installed");
    }
}
