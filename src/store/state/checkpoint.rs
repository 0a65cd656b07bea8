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

use std::collections::BTreeMap;
use std::io;
use std::time::Instant;

use super::generation::{generation_dir, sync, GenerationWriter};
use super::{encode, meta_rows, row_key, Current, StateStore};
use crate::raft::types::SnapshotMeta;
use crate::store::pages::{self, Page};
use leasehold_core::{LockTable, OwnedRowValue};

/// Bytes sled takes on disk per byte of records written into it, about:
/// a fresh generation of the soak's rows took 3× their bytes.
pub(super) const SLED_BYTES_PER_BYTE: u64 = 3;
/// The most records a checkpoint writes in one sled batch (which must be
/// one, to be atomic). sled holds a batch's records in memory far longer
/// than their bytes: a million records in one batch left 7.6 GB of RSS,
/// in batches of 10 000 2.9 GB. A larger checkpoint (the first after a
/// bulk load, say) is written into a fresh generation, in batches.
pub(super) const MAX_BATCH_RECORDS: usize = 50_000;
/// A generation is rewritten when it grows past this multiple of its size
/// after the last rewrite ...
pub(super) const COMPACT_FACTOR: u64 = 2;
/// ... and past this size: below it, the rewrite is not worth its cost.
#[cfg(not(test))]
const COMPACT_FLOOR: u64 = 8 << 20;
/// Small in unit tests, so that a table of a few thousand rows gets rewritten.
#[cfg(test)]
const COMPACT_FLOOR: u64 = 1 << 20;

/// A row's key and its new value, `None` when it was deleted.
type Change<V> = (Vec<u8>, Option<V>);

/// The rows a checkpoint writes, copied from the table under the apply
/// lock (and encoded later, off it).
pub(in crate::store) struct Checkpoint {
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
pub(in crate::store) struct Written {
    pub rows: u64,
    pub bytes: u64,
}

impl StateStore {
    /// Takes the rows changed in `table` since the last checkpoint, as of
    /// `meta`. Call with nothing applied meanwhile (under the apply lock).
    pub(in crate::store) fn take_checkpoint(table: &mut LockTable, meta: SnapshotMeta) -> Checkpoint {
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
    pub(in crate::store) fn checkpoint(&self, checkpoint: Checkpoint) -> io::Result<Written> {
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
        crash_point!("checkpoint-before-flush");
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

    /// The last checkpoint's meta.
    pub(in crate::store) fn checkpointed(&self) -> Option<SnapshotMeta> {
        self.lock().meta.clone()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::state::tests::{acquire, meta, open};
    use leasehold_core::{Command, FencingToken};
    use std::collections::BTreeSet;
    use std::fs;

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
                    &Command::Release {
                        name: name.clone(),
                        token: FencingToken::granted_at(*token),
                        request_id: None,
                        session: None,
                        seq: None,
                    },
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
            let (name, token) = (format!("old-{lock}"), FencingToken::granted_at(lock + 2));
            index += 1;
            let release = Command::Release { name, token, request_id: None, session: None, seq: None };
            assert!(table.apply(&release, index).result.is_ok(), "old-{lock} is released");
        }
        // A lease each (their request records share the few thousand pages
        // of their tree): more changed pages than a batch.
        for lock in 0..MAX_BATCH_RECORDS + 2_000 {
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
