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
//!
//! [`COMPACT_FACTOR`]: super::checkpoint::COMPACT_FACTOR
//! [`SLED_BYTES_PER_BYTE`]: super::checkpoint::SLED_BYTES_PER_BYTE
//! [`MAX_BATCH_RECORDS`]: super::checkpoint::MAX_BATCH_RECORDS

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{invalid, Current, StateStore};
use crate::store::sync_dir;

/// sled's page cache: the table itself is in memory, so sled's cache only
/// needs to hold what a checkpoint or a snapshot stream touches.
const CACHE_BYTES: u64 = 16 << 20;
/// Rows per sled batch while installing a snapshot or copying a generation.
const BATCH_ROWS: usize = 10_000;
/// Records written through one handle of a fresh generation before it is
/// opened afresh (see [`GenerationWriter`]).
const REOPEN_ROWS: usize = 50_000;
const CURRENT: &str = "CURRENT";

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
pub(super) fn wait_out_lock<T>(mut open: impl FnMut() -> io::Result<T>) -> io::Result<T> {
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

pub(super) fn generation_dir(root: &Path, generation: u64) -> PathBuf {
    root.join(generation.to_string())
}

/// Names `generation` as the one in use, durably and whole.
fn write_current(root: &Path, generation: u64) -> io::Result<()> {
    let tmp = root.join(format!("{CURRENT}.tmp"));
    let mut file = fs::File::create(&tmp)?;
    io::Write::write_all(&mut file, format!("{generation}\n").as_bytes())?;
    file.sync_all()?;
    crash_point!("generation-before-rename");
    fs::rename(&tmp, root.join(CURRENT))?;
    sync_dir(root)
}

/// Opens the generation `CURRENT` names (a new folder gets generation 0),
/// deleting any other: an older one a crash left behind after the switch,
/// or a newer one it left half-written before it.
pub(super) fn open_generation(root: &Path) -> io::Result<(u64, sled::Db)> {
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

impl StateStore {
    /// Writes a new generation with `fill`, makes it durable, switches to
    /// it and deletes the old one.
    pub(super) fn switch(
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
}

/// Flushes `db` (in `dir`) and fsyncs its files.
pub(super) fn sync(db: &sled::Db, dir: &Path) -> io::Result<()> {
    db.flush()?;
    fsync_sled_files(dir)
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
    pub(super) fn insert(&mut self, key: Vec<u8>, value: Vec<u8>) -> io::Result<()> {
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
