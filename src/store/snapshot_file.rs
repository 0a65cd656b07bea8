//! The snapshot format (version 3): what a follower is sent, what a backup
//! file holds, and what a node installs from. Streamed both ways: written a
//! row at a time, read a row at a time, never whole in memory.
//!
//! ```text
//! magic      8 bytes  "LHSNAP03"
//! head       u32 length (big-endian), then the snapshot meta as JSON
//! row*       u32 key length, key, u32 value length, value
//! end        u32 0xFFFF_FFFF, u64 number of rows, u32 CRC-32 of every row byte
//! ```
//!
//! Each "row" of the file is one of the state's sled records: a page of
//! table rows, keyed by its tree id and slot ([`super::pages`]), as
//! [`super::state`] keeps them, so a snapshot streams from sled and
//! installs into it record by record. The end frame makes
//! a cut-off file fail to read instead of loading part of a table; the CRC
//! catches a damaged one. Version 2 (`LHSNAP02`) was the same but for the
//! request records' pages, which were spread over as many slots as any
//! other tree's; it is still read, and its request pages are regrouped as
//! they are installed ([`super::pages`]). A binary that writes version 2
//! refuses version 3, whose pages it would misplace. Backups of format 1
//! were JSON documents; `restore` still reads those ([`super::backup`]).

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;

use super::sync_dir;
use crate::raft::types::SnapshotMeta;

const MAGIC: &[u8; 8] = b"LHSNAP03";
/// Version 2's magic bytes, still read.
const MAGIC_2: &[u8; 8] = b"LHSNAP02";
const END: u32 = u32::MAX;
/// Larger keys or values than this are not leasehold's (its largest row, a
/// session's answers or a queue of waiters, stays far below it).
const MAX_FIELD: u32 = 64 << 20;

fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// Whether `bytes` start as a snapshot file this binary reads.
pub fn is_snapshot(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC) || bytes.starts_with(MAGIC_2)
}

/// Writes a snapshot file row by row.
pub struct SnapshotWriter<W: Write> {
    out: W,
    rows: u64,
    crc: crc32fast::Hasher,
}

impl<W: Write> SnapshotWriter<W> {
    pub fn new(mut out: W, meta: &SnapshotMeta) -> io::Result<Self> {
        let head = serde_json::to_vec(meta)?;
        out.write_all(MAGIC)?;
        out.write_all(&(head.len() as u32).to_be_bytes())?;
        out.write_all(&head)?;
        Ok(SnapshotWriter { out, rows: 0, crc: crc32fast::Hasher::new() })
    }

    pub fn row(&mut self, key: &[u8], value: &[u8]) -> io::Result<()> {
        for field in [key, value] {
            let len =
                u32::try_from(field.len()).ok().filter(|l| *l <= MAX_FIELD).ok_or_else(|| invalid("row too large"))?;
            let len = len.to_be_bytes();
            self.crc.update(&len);
            self.crc.update(field);
            self.out.write_all(&len)?;
            self.out.write_all(field)?;
        }
        self.rows += 1;
        Ok(())
    }

    /// Writes the end frame; returns the output and the number of rows.
    pub fn finish(mut self) -> io::Result<(W, u64)> {
        self.out.write_all(&END.to_be_bytes())?;
        self.out.write_all(&self.rows.to_be_bytes())?;
        self.out.write_all(&self.crc.finalize().to_be_bytes())?;
        self.out.flush()?;
        Ok((self.out, self.rows))
    }
}

/// Writes the file at `path` whole or not at all: into a temporary file,
/// fsynced, then renamed over (and the folder synced).
pub fn write_file(
    path: &Path,
    meta: &SnapshotMeta,
    rows: impl FnOnce(&mut SnapshotWriter<BufWriter<File>>) -> io::Result<()>,
) -> io::Result<u64> {
    let tmp = path.with_extension("part");
    let mut writer = SnapshotWriter::new(BufWriter::with_capacity(1 << 20, File::create(&tmp)?), meta)?;
    rows(&mut writer)?;
    let (out, _) = writer.finish()?;
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    let bytes = file.metadata()?.len();
    fs::rename(&tmp, path)?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))?;
    Ok(bytes)
}

/// Reads a snapshot file row by row; [`next_row`](Self::next_row) answers
/// `None` only after the end frame checked out.
pub struct SnapshotReader<R: Read> {
    input: R,
    meta: SnapshotMeta,
    rows: u64,
    crc: crc32fast::Hasher,
    done: bool,
}

impl SnapshotReader<BufReader<File>> {
    pub fn open(path: &Path) -> io::Result<Self> {
        SnapshotReader::new(BufReader::with_capacity(1 << 20, File::open(path)?))
    }
}

impl<R: Read> SnapshotReader<R> {
    pub fn new(mut input: R) -> io::Result<Self> {
        let mut magic = [0; 8];
        input.read_exact(&mut magic).map_err(|_| invalid("not a leasehold snapshot (too short)"))?;
        if !is_snapshot(&magic) {
            return Err(invalid("not a leasehold snapshot of format 2 or 3 (wrong magic bytes)"));
        }
        let len = read_u32(&mut input)?;
        if len > MAX_FIELD {
            return Err(invalid("snapshot head too large"));
        }
        let mut head = vec![0; len as usize];
        input.read_exact(&mut head)?;
        let meta = serde_json::from_slice(&head).map_err(|e| invalid(format!("snapshot head: {e}")))?;
        Ok(SnapshotReader { input, meta, rows: 0, crc: crc32fast::Hasher::new(), done: false })
    }

    pub fn meta(&self) -> &SnapshotMeta {
        &self.meta
    }

    fn field(&mut self, len: u32) -> io::Result<Vec<u8>> {
        if len > MAX_FIELD {
            return Err(invalid("snapshot row too large"));
        }
        let mut field = vec![0; len as usize];
        self.input.read_exact(&mut field)?;
        self.crc.update(&len.to_be_bytes());
        self.crc.update(&field);
        Ok(field)
    }

    /// The next `(key, value)`, or `None` at a valid end.
    pub fn next_row(&mut self) -> io::Result<Option<(Vec<u8>, Vec<u8>)>> {
        if self.done {
            return Ok(None);
        }
        let len = read_u32(&mut self.input)?;
        if len == END {
            let mut count = [0; 8];
            self.input.read_exact(&mut count)?;
            let crc = read_u32(&mut self.input)?;
            if u64::from_be_bytes(count) != self.rows || crc != self.crc.clone().finalize() {
                return Err(invalid("snapshot damaged: row count or checksum does not match"));
            }
            self.done = true;
            return Ok(None);
        }
        let key = self.field(len)?;
        let len = read_u32(&mut self.input)?;
        let value = self.field(len)?;
        self.rows += 1;
        Ok(Some((key, value)))
    }
}

fn read_u32(input: &mut impl Read) -> io::Result<u32> {
    let mut bytes = [0; 4];
    input.read_exact(&mut bytes).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => invalid("snapshot cut off before its end"),
        _ => e,
    })?;
    Ok(u32::from_be_bytes(bytes))
}

/// Reads the whole file once, checking its end frame and checksum, and
/// returns its meta: done before a node installs from it.
pub fn verify(path: &Path) -> io::Result<SnapshotMeta> {
    let mut reader = SnapshotReader::open(path)?;
    while reader.next_row()?.is_some() {}
    Ok(reader.meta.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(index: u64) -> SnapshotMeta {
        let log_id = openraft::LogId::new(crate::raft::types::CommittedLeaderId { term: 2, node_id: 1 }, index);
        SnapshotMeta { last_log_id: Some(log_id), last_membership: Default::default() }
    }

    // Ensures rows come back in order with the meta, and that a cut-off or
    // damaged file is refused rather than read in part.
    #[test]
    fn rows_round_trip_and_damage_is_caught() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("s.snap");
        let rows: Vec<(Vec<u8>, Vec<u8>)> =
            (0..1000u32).map(|i| (i.to_be_bytes().to_vec(), vec![7; i as usize % 50])).collect();
        write_file(&path, &meta(42), |w| rows.iter().try_for_each(|(k, v)| w.row(k, v))).expect("write");
        let mut reader = SnapshotReader::open(&path).expect("open");
        assert_eq!(reader.meta().last_log_id.map(|l| l.index), Some(42));
        let mut read = Vec::new();
        while let Some(row) = reader.next_row().expect("row") {
            read.push(row);
        }
        assert_eq!(read, rows);

        let bytes = fs::read(&path).expect("read");
        fs::write(&path, &bytes[..bytes.len() - 30]).expect("cut");
        assert!(verify(&path).is_err(), "a cut-off file is refused");
        let mut damaged = bytes.clone();
        // A row byte: the head is JSON and checked by parsing it.
        let row_byte = bytes.len() - 40;
        damaged[row_byte] ^= 1;
        fs::write(&path, &damaged).expect("damage");
        assert!(verify(&path).is_err(), "a damaged file is refused");
        fs::write(&path, b"{\"meta\":{}}").expect("json");
        assert!(verify(&path).is_err(), "a format-1 backup is not a format-2 snapshot");
    }
}
