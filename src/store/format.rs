//! The data folder's format version, in `DATA/format`.
//!
//! A node opens its folder only if it was written in the format this binary
//! reads ([`DATA_FORMAT`]); any other version is refused at start, before
//! anything in the folder is touched, with what to do instead. A new folder
//! is stamped with the current version; a folder from before the file
//! existed (a `raft-log` or `snapshots` folder, no `format` file) holds
//! format 1, the only layout written before, and is stamped as such.
//!
//! Bump [`DATA_FORMAT`] with every change to what the folder holds that an
//! older binary would misread, and say in `cluster/README.md` ("Upgrades")
//! how to move a folder across it. A folder of a version this binary reads
//! all of ([`UPGRADED_IN_PLACE`]) is stamped with the current version at
//! start instead of refused: from then on only this version or a newer one
//! opens it.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::{sync_dir, LOG_DIR, SNAPSHOT_DIR};

/// The format this binary writes and reads: the Raft log in segment files
/// under `raft-log/`, its frames in MessagePack (format 2's were JSON), the
/// lock table's rows in one sled database under `state/`, the request
/// records' in pages of their own slots (format 3 spread them like any
/// other rows, see `store/pages.rs`), snapshot files of version 3 under
/// `snapshots/`. Format 1 kept the table only in snapshots: a sled database
/// per snapshot holding JSON.
pub const DATA_FORMAT: u32 = 4;

/// Older formats this binary reads whole, and so upgrades by a new stamp:
/// format 2 differs only in its log frames, which are still read; formats
/// 2 and 3 in where request records are paged, which the state store
/// moves when it opens the folder.
const UPGRADED_IN_PLACE: &[u32] = &[2, 3];

const FORMAT_FILE: &str = "format";

#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error(
        "data folder {dir} is in format {found}, written by a newer leasehold; this binary reads format \
         {DATA_FORMAT}. Run the newer version on it, or take a backup with that version (`leasehold backup`) \
         and restore it into an empty folder (cluster/README.md, \"Upgrades\")"
    )]
    Newer { dir: String, found: u32 },
    #[error(
        "data folder {dir} is in format {found}, written by an older leasehold; this binary reads format \
         {DATA_FORMAT}. Take a backup with the older version (`leasehold backup`) and restore it into an \
         empty folder with this one (cluster/README.md, \"Upgrades\")"
    )]
    Older { dir: String, found: u32 },
    #[error("data folder {dir}: {file} does not hold a format version ({text:?}); is this a leasehold data folder?")]
    Unreadable { dir: String, file: String, text: String },
    #[error("data folder {1}: {0}")]
    Io(io::Error, String),
}

/// Checks that `dir` is in [`DATA_FORMAT`], stamping it first if it is new
/// or from before the stamp existed.
pub fn check(dir: &Path) -> Result<(), FormatError> {
    let shown = dir.display().to_string();
    let io_err = |e: io::Error| FormatError::Io(e, shown.clone());
    let path = dir.join(FORMAT_FILE);
    let found = match fs::read_to_string(&path) {
        Ok(text) => text.trim().parse::<u32>().map_err(|_| FormatError::Unreadable {
            dir: shown.clone(),
            file: FORMAT_FILE.into(),
            text: text.chars().take(40).collect(),
        })?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // Only format 1 was ever written without the stamp.
            let old = dir.join(LOG_DIR).exists() || dir.join(SNAPSHOT_DIR).exists();
            let version = if old { 1 } else { DATA_FORMAT };
            stamp(dir, &path, version).map_err(io_err)?;
            version
        }
        Err(e) => return Err(io_err(e)),
    };
    match found {
        DATA_FORMAT => Ok(()),
        found if UPGRADED_IN_PLACE.contains(&found) => {
            tracing::info!(dir = %shown, from = found, to = DATA_FORMAT, "data folder upgraded in place");
            stamp(dir, &path, DATA_FORMAT).map_err(io_err)
        }
        found if found > DATA_FORMAT => Err(FormatError::Newer { dir: shown, found }),
        found => Err(FormatError::Older { dir: shown, found }),
    }
}

/// Writes the version durably: a temporary file, fsynced, renamed over.
fn stamp(dir: &Path, path: &Path, version: u32) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    let tmp: PathBuf = dir.join(format!("{FORMAT_FILE}.tmp"));
    let mut file = fs::File::create(&tmp)?;
    writeln!(file, "{version}")?;
    file.sync_all()?;
    fs::rename(&tmp, path)?;
    sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ensures a new folder is stamped with the current format and opens
    // again, and that a folder from before the stamp counts as format 1,
    // which this binary refuses untouched, saying what to do.
    #[test]
    fn new_and_unstamped_folders_are_stamped() {
        let dir = tempfile::tempdir().expect("temp dir");
        check(dir.path()).expect("a new folder opens");
        assert_eq!(fs::read_to_string(dir.path().join(FORMAT_FILE)).unwrap(), format!("{DATA_FORMAT}\n"));
        check(dir.path()).expect("and opens again");

        let old = tempfile::tempdir().expect("temp dir");
        fs::create_dir(old.path().join(LOG_DIR)).unwrap();
        let refused = check(old.path()).expect_err("format 1 is not this binary's").to_string();
        assert!(refused.contains("format 1") && refused.contains("leasehold backup"), "{refused}");
        assert_eq!(fs::read_to_string(old.path().join(FORMAT_FILE)).unwrap(), "1\n");
    }

    // Ensures format-2 and format-3 folders, which this binary still reads,
    // are stamped with the current format instead of refused.
    #[test]
    fn formats_2_and_3_are_upgraded_in_place() {
        for old in ["2\n", "3\n"] {
            let dir = tempfile::tempdir().expect("temp dir");
            fs::write(dir.path().join(FORMAT_FILE), old).unwrap();
            check(dir.path()).expect("an older format opens");
            assert_eq!(fs::read_to_string(dir.path().join(FORMAT_FILE)).unwrap(), format!("{DATA_FORMAT}\n"));
        }
    }

    // Ensures other versions and garbage are refused with what to do, and
    // the folder is left as it was.
    #[test]
    fn other_formats_are_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join(FORMAT_FILE);
        for (text, expect) in [("99\n", "newer leasehold"), ("0\n", "older leasehold"), ("lock\n", "does not hold")] {
            fs::write(&file, text).unwrap();
            let refused = check(dir.path()).expect_err(text).to_string();
            assert!(refused.contains(expect) && refused.contains("leasehold"), "{text}: {refused}");
            assert_eq!(fs::read_to_string(&file).unwrap(), text, "the folder is untouched");
        }
    }
}
