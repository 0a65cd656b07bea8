//! The segment files' frame format (`[length][crc32][entry]` per entry: the
//! entry in MessagePack, fields by position and its commands in their
//! compact binary form; frames written by data format 2 hold JSON, read
//! still), and the scan that recovers the log index from the segments
//! after a restart.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::{Entry, LogIndex, Meta, Position, CACHED_ENTRIES, SEGMENT_BYTES};

pub(super) const FRAME_HEAD: usize = 8;

pub(super) fn segment_path(dir: &Path, first: u64) -> PathBuf {
    dir.join(format!("{first:020}.seg"))
}

pub(super) fn corrupt(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// Damage to entries that were written and synced, which the node may have
/// acknowledged: recovery refuses to go on rather than drop them, and says
/// what to do.
fn damaged(path: &Path, what: String) -> io::Error {
    corrupt(format!(
        "{}: {what}; the raft log is damaged before its end, so the node will not start without entries it may \
         have acknowledged: replace it from its peers (docs/operations.md, \"A damaged Raft log\")",
        path.display()
    ))
}

/// The segments under `dir`, by first index.
pub(super) fn segments(dir: &Path) -> io::Result<Vec<u64>> {
    let mut found = Vec::new();
    for dirent in fs::read_dir(dir)? {
        let name = dirent?.file_name();
        let name = name.to_string_lossy();
        if let Some(first) = name.strip_suffix(".seg").and_then(|n| n.parse().ok()) {
            found.push(first);
        }
    }
    found.sort_unstable();
    Ok(found)
}

/// Rebuilds the index from the segments.
pub(super) fn recover(dir: &Path, meta: Meta) -> io::Result<LogIndex> {
    let purged_through = meta.last_purged.map(|l| l.index);
    let mut index = LogIndex {
        positions: VecDeque::new(),
        recent: VecDeque::new(),
        active: purged_through.map_or(0, |i| i + 1),
        end: 0,
        segment_bytes: SEGMENT_BYTES,
        meta,
    };
    let found = segments(dir)?;
    for (n, &segment) in found.iter().enumerate() {
        let path = segment_path(dir, segment);
        let bytes = fs::read(&path)?;
        let last_segment = n + 1 == found.len();
        let mut offset = 0usize;
        while offset < bytes.len() {
            // A segment made from a zero-filled spare ends where the zeros begin.
            if bytes[offset..].iter().take(FRAME_HEAD).all(|&b| b == 0) {
                break;
            }
            let entry = match read_frame(&bytes[offset..]) {
                Ok(entry) => entry,
                // A crash in the middle of an append leaves the part of its
                // frames that reached the disk, over the zeros of a spare or
                // up to the end of the file: never reported persisted, so
                // not part of the log. Only the last segment can end so (a
                // rotation syncs the segment it completes), and only with
                // no whole frame past the bad one: one there means frames
                // were written after it, so the bad frame is damage to
                // synced, possibly acknowledged data. (A power cut that
                // persisted a later page of an unsynced append but not an
                // earlier one looks the same: refusing is the safe mistake.)
                Err(e) if !last_segment => return Err(damaged(&path, format!("offset {offset}: {e}"))),
                Err(e) => match whole_frame_after(&bytes, offset) {
                    None => {
                        tracing::warn!(segment = %path.display(), offset, error = %e, "cutting off a torn log tail");
                        break;
                    }
                    Some(next) => {
                        let what = format!("offset {offset}: {e}, yet a whole frame starts at offset {next}");
                        return Err(damaged(&path, what));
                    }
                },
            };
            let len = frame_len(&bytes[offset..]);
            let log_id = entry.log_id;
            offset += len;
            if purged_through.is_some_and(|p| log_id.index <= p) {
                continue;
            }
            if !index.positions.is_empty() && log_id.index != index.first() + index.positions.len() as u64 {
                return Err(damaged(&path, format!("entry {} does not follow the log", log_id.index)));
            }
            index.positions.push_back(Position { log_id, segment, offset: (offset - len) as u64, len: len as u32 });
            if index.recent.len() == CACHED_ENTRIES {
                index.recent.pop_front();
            }
            index.recent.push_back(entry);
        }
        if last_segment && bytes[offset..].iter().any(|&b| b != 0) {
            // Appends go on from the last whole frame. Whatever else lies
            // past it (a torn frame; bytes of frames never reported
            // persisted, which a torn write may leave behind the zeros of a
            // spare) goes, so no later scan can mistake it for part of the
            // log. Zeros alone stay: appends overwrite them.
            let file = OpenOptions::new().write(true).open(&path)?;
            file.set_len(offset as u64)?;
            file.sync_all()?;
        }
        index.active = segment;
        index.end = offset as u64;
    }
    Ok(index)
}

/// Where the first whole frame (its head, checksum and entry all good)
/// after `from` in `bytes` starts, if any: a frame's body is never empty,
/// so the zeros of a spare are passed over at a glance.
fn whole_frame_after(bytes: &[u8], from: usize) -> Option<usize> {
    let last_start = bytes.len().saturating_sub(FRAME_HEAD + 1);
    (from + 1..=last_start).find(|&at| bytes[at..at + 4] != [0; 4] && read_frame(&bytes[at..]).is_ok())
}

/// The length of the frame at the start of `bytes` (its head must be there).
pub(super) fn frame_len(bytes: &[u8]) -> usize {
    FRAME_HEAD + u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize
}

/// Decodes the frame at the start of `bytes`, checking its length and crc.
pub(super) fn read_frame(bytes: &[u8]) -> io::Result<Entry> {
    if bytes.len() < FRAME_HEAD {
        return Err(corrupt("frame head cut short".into()));
    }
    let len = frame_len(bytes);
    let body = bytes.get(FRAME_HEAD..len).ok_or_else(|| corrupt("frame cut short".into()))?;
    let crc = u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    if crc32fast::hash(body) != crc {
        return Err(corrupt("frame checksum mismatch".into()));
    }
    let decoded = match body.first() {
        // A JSON object: a frame of data format 2. (MessagePack writes an
        // entry as an array, whose first byte is never `{`.)
        Some(b'{') => serde_json::from_slice(body).map_err(|e| e.to_string()),
        _ => rmp_serde::from_slice(body).map_err(|e| e.to_string()),
    };
    decoded.map_err(|e| corrupt(format!("frame does not decode: {e}")))
}

/// Appends the frame of `entry` to `out`.
pub(super) fn write_frame(entry: &Entry, out: &mut Vec<u8>) -> Result<(), rmp_serde::encode::Error> {
    let start = out.len();
    out.extend_from_slice(&[0; FRAME_HEAD]);
    rmp_serde::encode::write(&mut *out, entry)?;
    let body = &out[start + FRAME_HEAD..];
    let (len, crc) = ((body.len() as u32).to_be_bytes(), crc32fast::hash(body).to_be_bytes());
    out[start..start + 4].copy_from_slice(&len);
    out[start + 4..start + FRAME_HEAD].copy_from_slice(&crc);
    Ok(())
}

/// Reads one written entry back from its segment.
pub(super) fn read_entry(dir: &Path, position: Position) -> io::Result<Entry> {
    let mut frame = vec![0; position.len as usize];
    File::open(segment_path(dir, position.segment))?.read_exact_at(&mut frame, position.offset)?;
    read_frame(&frame)
}
