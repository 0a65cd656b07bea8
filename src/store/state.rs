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
//! **Checkpoints.** Applying an entry writes nothing here. A checkpoint
//! (openraft's snapshot build, every 64 MiB of log or on request) takes the
//! changed rows from the table under the apply lock, then, off the runtime,
//! writes them with the applied id in one batch, flushes sled and fsyncs its
//! files (sled's own flush ends in `sync_file_range`, which a power cut does
//! not respect). openraft purges the log only behind a snapshot, hence
//! behind a checkpoint. At start, the rows are loaded (on two threads, each
//! taking half of every tree's pages) and openraft replays the log after
//! the checkpoint. A checkpoint costs what changed since the
//! last one, however many leases are live.
//!
//! **Snapshots.** Between checkpoints sled is written by nothing else, so it
//! *is* a consistent cut at the last checkpoint: a snapshot for a follower or
//! a backup is streamed from it into a file (`snapshots/`, format in
//! [`super::snapshot_file`]) only when one is asked for, while the next
//! checkpoint waits. Installing one goes the other way, row by row, into a
//! new generation (below), so a crash mid-install leaves the old state whole.
//! A restored folder gets its snapshot as `snapshots/installing.snap`, which
//! a node installs when it opens the folder.
//!
//! **Generations.** sled 0.34 hardly reclaims the space of replaced rows
//! (measured: rewriting 70 000 rows of 150–250 bytes twelve times took a
//! database from 44 to 240 MiB, in either of its modes and with 512 KiB or
//! 8 MiB segments), and a fresh database already takes about 3× its rows'
//! bytes. So the rows live in `state/<generation>/`, named by
//! `state/CURRENT`. A checkpoint that would take the database past
//! [`COMPACT_FACTOR`] × its size after the last rewrite (judged by its bytes
//! × [`SLED_BYTES_PER_BYTE`]), or one of more than [`MAX_BATCH_RECORDS`]
//! pages, is written into a fresh generation instead:
//! each row once, the checkpoint's value where it has one and the current
//! one otherwise, through a handle opened afresh every [`REOPEN_ROWS`]
//! records ([`GenerationWriter`]); then the new database is synced, `CURRENT` switched
//! (written whole: temporary file, fsync, rename) and the old one deleted.
//! A rewrite costs
//! the table's size but comes only after about as many bytes of changes,
//! so per change it is constant; and the folder stays within a fixed
//! multiple of the live rows (cluster/README.md, "Snapshots and disk").

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::pages::{self, Fnv1a, Page};
use super::snapshot_file::{self, SnapshotReader};
use super::sync_dir;
use crate::raft::types::{LogId, SnapshotMeta, StoredMembership};
use leasehold_core::{LockTable, OwnedRowValue, TableLoader, Tree};

/// Key byte of the checkpoint's meta rows (no [`Tree`] has id 0).
const META: u8 = 0;
const APPLIED: &[u8] = b"\0applied";
const MEMBERSHIP: &[u8] = b"\0membership";
/// The snapshot being installed; its presence at start means an install
/// did not finish.
const INSTALLING: &str = "installing.snap";
/// sled's page cache: the table itself is in memory, so sled's cache only
/// needs to hold what a checkpoint or a snapshot stream touches.
const CACHE_BYTES: u64 = 16 << 20;
/// Rows per sled batch while installing a snapshot or copying a generation.
const BATCH_ROWS: usize = 10_000;
/// Records written through one handle of a fresh generation before it is
/// opened afresh (see [`GenerationWriter`]).
const REOPEN_ROWS: usize = 50_000;
/// Bytes sled takes on disk per byte of records written into it, about:
/// a fresh generation of the soak's rows took 3× their bytes.
const SLED_BYTES_PER_BYTE: u64 = 3;
/// The most records a checkpoint writes in one sled batch (which must be
/// one, to be atomic). sled holds a batch's records in memory far longer
/// than their bytes: a million records in one batch left 7.6 GB of RSS,
/// in batches of 10 000 2.9 GB. A larger checkpoint (the first after a
/// bulk load, say) is written into a fresh generation, in batches.
const MAX_BATCH_RECORDS: usize = 50_000;
/// A generation is rewritten when it grows past this multiple of its size
/// after the last rewrite ...
const COMPACT_FACTOR: u64 = 2;
/// ... and past this size: below it, the rewrite is not worth its cost.
#[cfg(not(test))]
const COMPACT_FLOOR: u64 = 8 << 20;
/// Small in unit tests, so that a table of a few thousand rows gets rewritten.
#[cfg(test)]
const COMPACT_FLOOR: u64 = 1 << 20;
const CURRENT: &str = "CURRENT";

/// A row's key and its new value, `None` when it was deleted.
type Change<V> = (Vec<u8>, Option<V>);

fn invalid(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// The state the rows describe, as of a checkpoint (or nothing yet).
pub(super) struct Loaded {
    pub meta: Option<SnapshotMeta>,
    pub table: LockTable,
}

/// The rows a checkpoint writes, copied from the table under the apply
/// lock (and encoded later, off it).
pub(super) struct Checkpoint {
    meta: SnapshotMeta,
    rows: Vec<Change<OwnedRowValue>>,
}

impl Checkpoint {
    pub fn meta(&self) -> &SnapshotMeta {
        &self.meta
    }
}

/// What writing a checkpoint took: rows written or deleted (the clock
/// included), and bytes of their keys and values.
pub(super) struct Written {
    pub rows: u64,
    pub bytes: u64,
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

fn open_db(dir: &Path) -> io::Result<sled::Db> {
    // Durability comes from the explicit flush and fsyncs of each checkpoint.
    Ok(sled::Config::new().path(dir).flush_every_ms(None).cache_capacity(CACHE_BYTES).open()?)
}

/// How long [`wait_out_lock`] waits for a dropped handle's file lock.
const RELOCK_WAIT: Duration = Duration::from_secs(30);

/// Runs `open` until it is not refused sled's file lock, for at most
/// [`RELOCK_WAIT`]. Right after a handle of the same folder was dropped,
/// sled's background threads hold its file lock a little longer (sled's own
/// tests block on it for that reason).
fn wait_out_lock<T>(mut open: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    let waiting = Instant::now();
    loop {
        match open() {
            Err(e) if e.to_string().contains("could not acquire lock") && waiting.elapsed() < RELOCK_WAIT => {
                std::thread::sleep(Duration::from_millis(10));
            }
            opened => return opened,
        }
    }
}

/// Opens `dir` again right after its handle was dropped.
fn reopen_db(dir: &Path) -> io::Result<sled::Db> {
    wait_out_lock(|| open_db(dir))
}

fn generation_dir(root: &Path, generation: u64) -> PathBuf {
    root.join(generation.to_string())
}

/// Names `generation` as the one in use, durably and whole.
fn write_current(root: &Path, generation: u64) -> io::Result<()> {
    let tmp = root.join(format!("{CURRENT}.tmp"));
    let mut file = fs::File::create(&tmp)?;
    io::Write::write_all(&mut file, format!("{generation}\n").as_bytes())?;
    file.sync_all()?;
    fs::rename(&tmp, root.join(CURRENT))?;
    sync_dir(root)
}

/// Opens the generation `CURRENT` names (a new folder gets generation 0),
/// deleting any other: an older one a crash left behind after the switch,
/// or a newer one it left half-written before it.
fn open_generation(root: &Path) -> io::Result<(u64, sled::Db)> {
    fs::create_dir_all(root)?;
    let generation = match fs::read_to_string(root.join(CURRENT)) {
        Ok(text) => text.trim().parse().map_err(|_| invalid(format!("{CURRENT} holds {text:?}")))?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            write_current(root, 0)?;
            0
        }
        Err(e) => return Err(e),
    };
    for entry in fs::read_dir(root)? {
        let entry = entry?;
        let other = entry.file_name().to_str().and_then(|n| n.parse::<u64>().ok()).is_some_and(|g| g != generation);
        if other {
            fs::remove_dir_all(entry.path())?;
        }
    }
    Ok((generation, open_db(&generation_dir(root, generation))?))
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

/// The snapshot file name for `meta`: its log id, so files of different
/// checkpoints never collide.
fn file_name(meta: &SnapshotMeta) -> String {
    match meta.last_log_id {
        Some(id) => format!("{}-{}-{}.snap", id.leader_id.term, id.leader_id.node_id, id.index),
        None => "empty.snap".into(),
    }
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

    /// Takes the rows changed in `table` since the last checkpoint, as of
    /// `meta`. Call with nothing applied meanwhile (under the apply lock).
    pub(super) fn take_checkpoint(table: &mut LockTable, meta: SnapshotMeta) -> Checkpoint {
        let changes = table.take_changes();
        let rows = table
            .changed_rows(&changes)
            .map(|row| (row_key(row.tree, &row.key), row.value.map(|v| v.to_owned())))
            .collect();
        Checkpoint { meta, rows }
    }

    /// Writes `checkpoint` durably, then rewrites the generation if it has
    /// grown too far past its rows. A checkpoint older than the state (an
    /// install overtook it) is dropped: its rows describe a replaced table.
    pub(super) fn checkpoint(&self, checkpoint: Checkpoint) -> io::Result<Written> {
        let _writing = self.writing_until_dropped();
        // Encoded and grouped by page before the lock is taken.
        let mut changes: BTreeMap<Vec<u8>, Vec<Change<Vec<u8>>>> = BTreeMap::new();
        let changed_rows = checkpoint.rows.len() as u64;
        for (key, value) in checkpoint.rows {
            let value = value.map(|v| encode(&v)).transpose()?;
            changes.entry(pages::page_of(&key)).or_default().push((key, value));
        }
        let mut current = self.lock();
        if current.meta.as_ref().is_some_and(|c| c.last_log_id >= checkpoint.meta.last_log_id) {
            return Ok(Written { rows: 0, bytes: 0 });
        }
        let mut written = Written { rows: changed_rows, bytes: 0 };
        let size = current.db.size_on_disk()?;
        // A checkpoint goes into a fresh generation when it is too large for
        // one batch (which it must be, to be atomic), or would take the
        // database past the limit: each record written once, edited where
        // the checkpoint changed it, copied otherwise. So a generation
        // never grows much past the limit, the next starts at the live
        // rows' size, and the fresh one counts only once it is whole.
        let rewrite: Option<BTreeMap<Vec<u8>, Edit>> = if changes.len() > MAX_BATCH_RECORDS {
            // Each page edited as it is copied: reading them all first kept
            // every edited page of a million-lease table in memory at once.
            Some(changes.into_iter().map(|(page_key, rows)| (page_key, Edit::Rows(rows))).collect())
        } else {
            let mut pages = BTreeMap::new();
            for (page_key, rows) in changes {
                let value = edit_page(current.db.get(&page_key)?.as_deref(), rows)?;
                written.bytes += (page_key.len() + value.as_ref().map_or(0, Vec::len)) as u64;
                pages.insert(page_key, value);
            }
            let limit = COMPACT_FLOOR.max(COMPACT_FACTOR * current.compacted_bytes);
            if size + SLED_BYTES_PER_BYTE * written.bytes <= limit {
                self.write_in_place(&current, &checkpoint.meta, pages)?;
                None
            } else {
                Some(pages.into_iter().map(|(page_key, value)| (page_key, Edit::Record(value))).collect())
            }
        };
        if let Some(edits) = rewrite {
            self.rewrite(&mut current, size, &checkpoint.meta, edits, &mut written.bytes)?;
        }
        self.remove_stale_files(Some(&checkpoint.meta))?;
        current.meta = Some(checkpoint.meta);
        Ok(written)
    }

    /// Writes the edited `pages` (a `None` deletes one) and `meta` into the
    /// current generation in one batch, and makes them durable.
    fn write_in_place(
        &self,
        current: &Current,
        meta: &SnapshotMeta,
        pages: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    ) -> io::Result<()> {
        let mut batch = sled::Batch::default();
        for (key, value) in meta_rows(meta)? {
            batch.insert(key, value);
        }
        for (key, value) in pages {
            match value {
                Some(value) => batch.insert(key, value),
                None => batch.remove(key),
            }
        }
        current.db.apply_batch(batch)?;
        sync(&current.db, &generation_dir(&self.0.root, current.generation))
    }

    /// Writes the current generation's records (`before` bytes on disk)
    /// with `edits` and `meta` into a fresh one and switches to it; adds the
    /// bytes of the pages it edits to `bytes`.
    fn rewrite(
        &self,
        current: &mut Current,
        before: u64,
        meta: &SnapshotMeta,
        mut edits: BTreeMap<Vec<u8>, Edit>,
        bytes: &mut u64,
    ) -> io::Result<()> {
        for (key, value) in meta_rows(meta)? {
            edits.insert(key.to_vec(), Edit::Record(Some(value)));
        }
        let started = Instant::now();
        let db = current.db.clone();
        self.switch(current, |next| merge_edits(db.iter(), edits, next, bytes))?;
        tracing::info!(
            before,
            after = current.compacted_bytes,
            ms = started.elapsed().as_millis() as u64,
            "rewrote the state into a new generation"
        );
        Ok(())
    }

    /// Writes a new generation with `fill`, makes it durable, switches to
    /// it and deletes the old one.
    fn switch(
        &self,
        current: &mut Current,
        fill: impl FnOnce(&mut GenerationWriter) -> io::Result<()>,
    ) -> io::Result<()> {
        let next = current.generation + 1;
        let dir = generation_dir(&self.0.root, next);
        if dir.exists() {
            fs::remove_dir_all(&dir)?;
        }
        let mut writer = GenerationWriter::open(dir.clone())?;
        fill(&mut writer)?;
        let db = writer.finish()?;
        sync(&db, &dir)?;
        // Taken before reopening: a reopened sled reports its files rounded
        // up to whole segments.
        let compacted_bytes = db.size_on_disk()?;
        // Opened afresh: sled 0.34 keeps every node just written in memory,
        // past its cache capacity and for as long as the handle lives (a
        // heap profile of a follower at 743 000 leases found 570 MB of it,
        // more than the lock table itself); a reopened one reads them back
        // only when asked.
        drop(db);
        let db = reopen_db(&dir)?;
        write_current(&self.0.root, next)?;
        let old = std::mem::replace(&mut current.db, db);
        drop(old);
        fs::remove_dir_all(generation_dir(&self.0.root, current.generation))?;
        current.generation = next;
        current.compacted_bytes = compacted_bytes;
        Ok(())
    }

    /// The last checkpoint's meta.
    pub(super) fn checkpointed(&self) -> Option<SnapshotMeta> {
        self.lock().meta.clone()
    }

    /// The snapshot file of the last checkpoint, written from sled if it is
    /// not there yet. `meta` must be that checkpoint's: a snapshot that a
    /// newer checkpoint replaced cannot be made any more (openraft then asks
    /// again with the newer one).
    pub(super) fn snapshot_file(&self, meta: &SnapshotMeta) -> io::Result<(PathBuf, u64)> {
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
    /// key order), so replicas checkpointed at the same index agree. Streamed
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
    pub(super) fn install(&self, source: &Path) -> io::Result<(SnapshotMeta, LockTable)> {
        let _writing = self.writing_until_dropped();
        snapshot_file::verify(source)?;
        self.0.file_bytes.store(fs::metadata(source)?.len(), Ordering::Relaxed);
        let mut current = self.lock();
        let mut reader = SnapshotReader::open(source)?;
        let meta = reader.meta().clone();
        let mut loader = TableLoader::default();
        self.switch(&mut current, |next| {
            while let Some((key, value)) = reader.next_row()? {
                if key.first().is_none_or(|&id| id == META) {
                    return Err(invalid("a snapshot record that is not a page"));
                }
                load_page(&mut loader, &value)?;
                next.insert(key, value)?;
            }
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
    fn remove_stale_files(&self, keep: Option<&SnapshotMeta>) -> io::Result<()> {
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

/// Flushes `db` (in `dir`) and fsyncs its files.
fn sync(db: &sled::Db, dir: &Path) -> io::Result<()> {
    db.flush()?;
    fsync_sled_files(dir)
}

/// One checkpoint or install under way, until dropped.
struct Writing<'a>(&'a AtomicUsize);

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a checkpoint does to one sled record.
enum Edit {
    /// Changes to the rows of the page stored there (a `None` value
    /// deletes a row).
    Rows(Vec<Change<Vec<u8>>>),
    /// The record's new value, `None` to delete it: a page already edited,
    /// or a meta row.
    Record(Option<Vec<u8>>),
}

/// The page `stored` (none: an empty one) with `changes` made to it,
/// encoded; `None` once it has no rows left.
fn edit_page(stored: Option<&[u8]>, changes: Vec<Change<Vec<u8>>>) -> io::Result<Option<Vec<u8>>> {
    let mut page = match stored {
        Some(stored) => pages::decode(stored)?,
        None => Page::new(),
    };
    for (key, value) in changes {
        match value {
            Some(value) => _ = page.insert(key, value),
            None => _ = page.remove(&key),
        }
    }
    Ok((!page.is_empty()).then(|| pages::encode(&page)))
}

/// Copies the records of `old` into the empty generation `next`, each with
/// its edit where `edits` has one, and writes the records only `edits`
/// has; adds the bytes of the pages it edits row by row to `bytes`.
fn merge_edits(
    old: sled::Iter,
    edits: BTreeMap<Vec<u8>, Edit>,
    next: &mut GenerationWriter,
    bytes: &mut u64,
) -> io::Result<()> {
    let mut edited = |next: &mut GenerationWriter, key: Vec<u8>, edit: Edit, stored: Option<&[u8]>| {
        let value = match edit {
            Edit::Rows(rows) => {
                let value = edit_page(stored, rows)?;
                *bytes += (key.len() + value.as_ref().map_or(0, Vec::len)) as u64;
                value
            }
            Edit::Record(value) => value,
        };
        match value {
            Some(value) => next.insert(key, value),
            None => Ok(()),
        }
    };
    let mut edits = edits.into_iter().peekable();
    for record in old {
        let (key, value) = record?;
        while let Some((new_key, edit)) = edits.next_if(|(k, _)| k.as_slice() < &*key) {
            edited(next, new_key, edit, None)?;
        }
        match edits.next_if(|(k, _)| k.as_slice() == &*key) {
            Some((key, edit)) => edited(next, key, edit, Some(&value))?,
            None => next.insert(key.to_vec(), value.to_vec())?,
        }
    }
    for (key, edit) in edits {
        edited(next, key, edit, None)?;
    }
    Ok(())
}

/// A fresh generation being written whole, in batches, opened afresh every
/// [`REOPEN_ROWS`] records: sled 0.34 keeps every node written through a
/// handle in memory for as long as the handle lives, so a handle that wrote
/// a million leases' pages held hundreds of MB more than the table itself
/// until it was dropped.
pub(super) struct GenerationWriter {
    dir: PathBuf,
    /// `None` only while it is being reopened.
    db: Option<sled::Db>,
    batch: sled::Batch,
    in_batch: usize,
    since_open: usize,
}

impl GenerationWriter {
    fn open(dir: PathBuf) -> io::Result<GenerationWriter> {
        let db = open_db(&dir)?;
        Ok(GenerationWriter { dir, db: Some(db), batch: sled::Batch::default(), in_batch: 0, since_open: 0 })
    }

    fn db(&self) -> io::Result<&sled::Db> {
        self.db.as_ref().ok_or_else(|| io::Error::other("a generation failed to reopen"))
    }

    /// Adds the record `key`; writes a batch every [`BATCH_ROWS`], and
    /// opens the generation afresh every [`REOPEN_ROWS`].
    fn insert(&mut self, key: Vec<u8>, value: Vec<u8>) -> io::Result<()> {
        self.batch.insert(key, value);
        self.in_batch += 1;
        if self.in_batch == BATCH_ROWS {
            self.write_batch()?;
            if self.since_open >= REOPEN_ROWS {
                self.reopen()?;
            }
        }
        Ok(())
    }

    fn write_batch(&mut self) -> io::Result<()> {
        let batch = std::mem::take(&mut self.batch);
        self.db()?.apply_batch(batch)?;
        self.since_open += std::mem::take(&mut self.in_batch);
        Ok(())
    }

    /// Flushes and drops the handle, giving back what sled kept of the
    /// records written through it, and opens the generation again.
    fn reopen(&mut self) -> io::Result<()> {
        self.db()?.flush()?;
        drop(self.db.take());
        self.db = Some(reopen_db(&self.dir)?);
        self.since_open = 0;
        Ok(())
    }

    /// Writes what is left; the generation is whole but not yet synced.
    fn finish(mut self) -> io::Result<sled::Db> {
        self.write_batch()?;
        self.db().cloned()
    }
}

/// Writes every row of `table` to a snapshot file at `path`, as of `meta`:
/// how a format-1 backup (JSON) becomes one a node installs.
pub(super) fn write_table(path: &Path, meta: &SnapshotMeta, table: &LockTable) -> io::Result<u64> {
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

/// The path a restored folder's snapshot is placed at, to be installed
/// when the node first opens it.
pub(super) fn install_path(snapshots: &Path) -> PathBuf {
    snapshots.join(INSTALLING)
}

/// fsyncs sled's files and folders under `dir`. sled's own flush ends with
/// `sync_file_range`, which leaves the disk's write cache and the files'
/// metadata unflushed, and it never syncs its blob files at all. A
/// checkpoint is what lets the log be purged, so it must be durable first.
fn fsync_sled_files(dir: &Path) -> io::Result<()> {
    let blobs = dir.join("blobs");
    let mut paths = vec![dir.join("db"), dir.join("conf")];
    match fs::read_dir(&blobs) {
        Ok(entries) => {
            for entry in entries {
                paths.push(entry?.path());
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    paths.push(blobs);
    paths.push(dir.to_owned());
    for path in paths {
        match fs::File::open(&path) {
            Ok(f) => f.sync_all()?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_core::Command;
    use std::collections::BTreeSet;

    fn meta(index: u64) -> SnapshotMeta {
        let log_id = openraft::LogId::new(crate::raft::types::CommittedLeaderId { term: 1, node_id: 1 }, index);
        SnapshotMeta { last_log_id: Some(log_id), last_membership: Default::default() }
    }

    fn acquire(name: &str) -> Command {
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
    fn open(dir: &Path) -> (StateStore, Loaded) {
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

    // Ensures a churn that rewrites every row at each checkpoint keeps the
    // database near its live rows (new generations replace old ones, the
    // old deleted) and that the table survives the switches.
    #[test]
    fn churn_is_rewritten_into_new_generations_and_disk_levels_off() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (store, _) = open(dir.path());
        let mut table = LockTable::new();
        table.apply(&Command::Tick { period_ms: 100 }, 1);
        let (mut index, mut tokens, mut sizes) = (1, vec![0; 4_000], Vec::new());
        for round in 0..30 {
            for (lock, token) in tokens.iter_mut().enumerate() {
                let name = format!("lock-{lock}");
                index += 1;
                table.apply(
                    &Command::Release { name: name.clone(), token: *token, request_id: None, session: None, seq: None },
                    index,
                );
                // Every seventh lock stays released for a round: rows deleted.
                if (lock as u64 + round) % 7 == 0 {
                    *token = 0;
                    continue;
                }
                let mut command = acquire(&name);
                if let Command::Acquire { request_id, ttl_ms, .. } = &mut command {
                    // A new ttl each round: every lease row changes, and no
                    // request records pile up, so the live rows stay the same.
                    (*request_id, *ttl_ms) = (None, Some(10_000 + round));
                }
                index += 1;
                table.apply(&command, index);
                *token = index;
            }
            store.checkpoint(StateStore::take_checkpoint(&mut table, meta(index))).expect("checkpoint");
            let current = store.lock();
            sizes.push((current.generation, current.compacted_bytes, current.db.size_on_disk().expect("size")));
        }
        assert!(sizes.last().expect("rounds").0 >= 1, "the churn was rewritten into new generations: {sizes:?}");
        let fresh = sizes.iter().map(|s| s.1).max().expect("rounds");
        // The first checkpoint wrote every row once into an empty database:
        // a rewrite must cost no more (writing rows twice took ~1.5×).
        assert!(4 * fresh <= 5 * sizes[0].2, "a rewrite writes each live row once: {sizes:?}");
        let limit = COMPACT_FLOOR.max(COMPACT_FACTOR * fresh);
        assert!(sizes.iter().all(|s| s.2 <= limit + fresh), "no generation grows past its limit: {sizes:?}");
        let on_disk: Vec<_> = fs::read_dir(dir.path().join("state")).expect("list").flatten().collect();
        assert_eq!(on_disk.len(), 2, "CURRENT and one generation");
        drop(store);
        assert_eq!(open(dir.path()).1.table, table, "the last generation holds the table");
    }

    // Ensures a checkpoint of more pages than one batch may hold is written
    // into a fresh generation with each page edited as it is copied: pages
    // only the old generation has are kept, pages both have get the changed
    // rows (a released lease deleted), new pages are added, and a reopened
    // store loads exactly the table.
    #[test]
    fn a_checkpoint_too_large_for_a_batch_edits_pages_as_it_copies_them() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (store, _) = open(dir.path());
        let mut table = LockTable::new();
        table.apply(&Command::Tick { period_ms: 100 }, 1);
        let mut index = 1;
        for lock in 0..2_000 {
            index += 1;
            table.apply(&acquire(&format!("old-{lock}")), index);
        }
        store.checkpoint(StateStore::take_checkpoint(&mut table, meta(index))).expect("checkpoint");
        let generation = store.lock().generation;
        for lock in (0..2_000).step_by(3) {
            // Its token is the index of the entry that granted it.
            let (name, token) = (format!("old-{lock}"), lock + 2);
            index += 1;
            let release = Command::Release { name, token, request_id: None, session: None, seq: None };
            assert!(table.apply(&release, index).result.is_ok(), "old-{lock} is released");
        }
        // A lease and a request record each: more changed pages than a batch.
        for lock in 0..MAX_BATCH_RECORDS / 2 + 2_000 {
            index += 1;
            table.apply(&acquire(&format!("new-{lock}")), index);
        }
        let checkpoint = StateStore::take_checkpoint(&mut table, meta(index));
        let pages: BTreeSet<_> = checkpoint.rows.iter().map(|(key, _)| pages::page_of(key)).collect();
        assert!(pages.len() > MAX_BATCH_RECORDS, "{} pages", pages.len());
        store.checkpoint(checkpoint).expect("checkpoint");
        assert_eq!(store.lock().generation, generation + 1, "a checkpoint too large for a batch is a new generation");
        drop(store);
        assert_eq!(open(dir.path()).1.table, table);
    }
}
