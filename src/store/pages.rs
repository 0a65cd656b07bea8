//! The table's rows grouped into pages, the unit sled stores.
//!
//! sled 0.34 costs memory and time per record, not per byte: a million
//! records of 150 bytes took 2.9 GB of RSS and 12–16 s to insert, while the
//! same bytes in 250 000 records of 600 bytes took 50 MB and 3 s (measured
//! on the 2-core CI machine, batches of 2 000–10 000, flushed or not). So
//! each record holds a page: the rows of one tree whose keys hash to the
//! same one of [`PAGES`] slots, framed as the snapshot file frames rows. A
//! million leases make about four rows a page; a checkpoint rewrites the
//! pages its changed rows fall in, about as many as the rows changed.
//!
//! Request records have far fewer slots ([`REQUEST_PAGES`]). At most
//! `MAX_REQUESTS` (50 000) are kept and, under load, every one of them is
//! replaced between two checkpoints: in 2^18 slots that was a page written
//! for each record gone and each record made, 50 000 to 100 000 sled
//! records per checkpoint, written into a fresh generation (1.1–2.6 s of
//! CPU over the three nodes, measured, every ~30 s under a hot lock). In
//! 4 096 slots a checkpoint rewrites at most 4 096 pages of a dozen records
//! each (about 0.4 s). Data format 3 paged them like the
//! rest; [`super::state`] moves such a folder's request pages at start, and
//! an installed snapshot's as it installs them ([`regroup`]).

use std::collections::BTreeMap;
use std::io;
use std::ops::Bound::{self, Excluded, Included, Unbounded};

use leasehold_core::Tree;

/// Pages per tree: a power of two, so a slot is the hash's low bits.
/// Changing it changes the data format.
const PAGES: u64 = 1 << 18;
/// Pages of the request records' tree (see the module comment). A power of
/// two below [`PAGES`], so a format-3 page's rows all belong in the page
/// its slot's low bits name.
const REQUEST_PAGES: u64 = 1 << 12;

/// The slots of the tree with id `tree`.
fn slots(tree: u8) -> u64 {
    if tree == Tree::Requests.id() {
        REQUEST_PAGES
    } else {
        PAGES
    }
}

/// A page key: the tree id, then the slot, big-endian.
fn page_key(tree: u8, slot: u32) -> Vec<u8> {
    let mut key = Vec::with_capacity(5);
    key.push(tree);
    key.extend_from_slice(&slot.to_be_bytes());
    key
}

/// 64-bit FNV-1a, fed as a writer: fast, tiny, and the same everywhere
/// (std's hashers are not promised to stay the same across Rust releases).
pub(super) struct Fnv1a(pub u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl io::Write for Fnv1a {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        for byte in bytes {
            self.0 = (self.0 ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The sled key of the page holding the row `row_key` (its tree id byte,
/// then its key).
pub(super) fn page_of(row_key: &[u8]) -> Vec<u8> {
    page_among(row_key, slots(row_key[0]))
}

/// The key of the page of `row_key` among `slots` slots of its tree.
fn page_among(row_key: &[u8], slots: u64) -> Vec<u8> {
    let mut hash = Fnv1a::default();
    io::Write::write_all(&mut hash, row_key).expect("hashing cannot fail");
    page_key(row_key[0], (hash.0 & (slots - 1)) as u32)
}

/// The sled key range of pages of the request records' tree beyond its
/// slots: where data format 3 kept most of them.
pub(super) fn misplaced_requests() -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let tree = Tree::Requests.id();
    (Included(page_key(tree, REQUEST_PAGES as u32)), Excluded(vec![tree + 1]))
}

/// Whether the page keyed `page_key` holds request records, whose rows
/// may belong in other pages (in a format-3 snapshot, say).
pub(super) fn of_requests(page_key: &[u8]) -> bool {
    page_key.first() == Some(&Tree::Requests.id())
}

/// The rows of `pages`, grouped into the pages they belong in.
pub(super) fn regroup<'a>(pages: impl IntoIterator<Item = &'a [u8]>) -> io::Result<BTreeMap<Vec<u8>, Page>> {
    let mut grouped: BTreeMap<Vec<u8>, Page> = BTreeMap::new();
    for page in pages {
        for row in rows(page) {
            let (key, value) = row?;
            if key.is_empty() {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "an empty row key in a page"));
            }
            grouped.entry(page_of(key)).or_default().insert(key.to_vec(), value.to_vec());
        }
    }
    Ok(grouped)
}

/// One half of the slots of every tree: pages loaded on two threads.
#[derive(Debug, Clone, Copy)]
pub(super) enum Half {
    Lower,
    Upper,
}

/// The sled key ranges of the pages in `half` of each tree's slots (for
/// every possible tree id byte, so that a page of an unknown tree is still
/// read, and refused).
pub(super) fn ranges(half: Half) -> impl Iterator<Item = (Bound<Vec<u8>>, Bound<Vec<u8>>)> {
    (1..=u8::MAX).map(move |tree| {
        let middle = page_key(tree, (slots(tree) / 2) as u32);
        match half {
            Half::Lower => (Included(vec![tree]), Excluded(middle)),
            Half::Upper => (Included(middle), tree.checked_add(1).map_or(Unbounded, |next| Excluded(vec![next]))),
        }
    })
}

/// A page's rows, keyed by row key.
pub(super) type Page = BTreeMap<Vec<u8>, Vec<u8>>;

/// Encodes `page`: for each row, its key and its value, each as a 4-byte
/// big-endian length and the bytes.
pub(super) fn encode(page: &Page) -> Vec<u8> {
    let mut out = Vec::with_capacity(page.iter().map(|(k, v)| 8 + k.len() + v.len()).sum());
    for field in page.iter().flat_map(|(k, v)| [k, v]) {
        out.extend_from_slice(&(field.len() as u32).to_be_bytes());
        out.extend_from_slice(field);
    }
    out
}

/// The rows of an encoded page, in key order.
pub(super) fn rows(mut page: &[u8]) -> impl Iterator<Item = io::Result<(&[u8], &[u8])>> {
    let mut field = move || -> io::Result<Option<&[u8]>> {
        if page.is_empty() {
            return Ok(None);
        }
        let damaged = || io::Error::new(io::ErrorKind::InvalidData, "a damaged page in the state");
        let (len, rest) = page.split_first_chunk::<4>().ok_or_else(damaged)?;
        let len = u32::from_be_bytes(*len) as usize;
        let (bytes, rest) = rest.split_at_checked(len).ok_or_else(damaged)?;
        page = rest;
        Ok(Some(bytes))
    };
    std::iter::from_fn(move || match field() {
        Ok(Some(key)) => match field() {
            Ok(Some(value)) => Some(Ok((key, value))),
            Ok(None) => Some(Err(io::Error::new(io::ErrorKind::InvalidData, "a page row without a value"))),
            Err(e) => Some(Err(e)),
        },
        Ok(None) => None,
        Err(e) => Some(Err(e)),
    })
}

/// Decodes a page whole.
pub(super) fn decode(page: &[u8]) -> io::Result<Page> {
    rows(page).map(|row| row.map(|(k, v)| (k.to_vec(), v.to_vec()))).collect()
}

/// The page data format 3 kept the row `row_key` in: its tree's slots
/// were [`PAGES`], whatever the tree.
#[cfg(test)]
pub(super) fn format_3_page_of(row_key: &[u8]) -> Vec<u8> {
    page_among(row_key, PAGES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ops::RangeBounds;

    // Ensures a page round-trips, rows of one tree stay in that tree's
    // pages, and a cut page is an error, not a short page.
    #[test]
    fn pages_round_trip_and_damage_is_caught() {
        let page: Page = (0..50u8).map(|i| (vec![2, i, i], vec![i; i as usize])).collect();
        let bytes = encode(&page);
        assert_eq!(decode(&bytes).expect("decodes"), page);
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode(&bytes[..bytes.len() - 3 - 49]).is_err());
        assert_eq!(page_of(b"\x02order/1")[0], 2);
        assert_eq!(page_of(b"\x02order/1"), page_of(b"\x02order/1"));
        let slots: std::collections::BTreeSet<_> =
            (0..1000).map(|i| page_of(format!("\x02l/{i}").as_bytes())).collect();
        assert!(slots.len() > 990, "keys spread over the pages: {}", slots.len());
    }

    // Ensures request records take their tree's few slots and no more, other
    // trees keep theirs, and format-3 pages regroup whole into this
    // format's, none of them in the range of misplaced pages.
    #[test]
    fn request_records_take_few_pages_and_format_3_pages_regroup() {
        let keys: Vec<Vec<u8>> = (0..50_000).map(|i| format!("\x06client-7/req-{i}").into_bytes()).collect();
        let slots: std::collections::BTreeSet<_> = keys.iter().map(|k| page_of(k)).collect();
        assert_eq!(slots.len() as u64, REQUEST_PAGES, "every slot used, none beyond");
        let leases: std::collections::BTreeSet<_> =
            (0..50_000).map(|i| page_of(format!("\x02lock-{i}").as_bytes())).collect();
        assert!(leases.len() as u64 > REQUEST_PAGES * 8, "other trees keep their slots: {}", leases.len());

        let mut old: BTreeMap<Vec<u8>, Page> = BTreeMap::new();
        for key in &keys[..3_000] {
            old.entry(format_3_page_of(key)).or_default().insert(key.clone(), key[1..].to_vec());
        }
        let misplaced = misplaced_requests();
        assert!(old.keys().filter(|k| misplaced.contains(*k)).count() > 2_000, "format 3 kept most beyond");
        let encoded: Vec<Vec<u8>> = old.values().map(encode).collect();
        let grouped = regroup(encoded.iter().map(Vec::as_slice)).expect("regroups");
        assert_eq!(grouped.values().map(BTreeMap::len).sum::<usize>(), 3_000, "every row kept");
        for (page, rows) in &grouped {
            assert!(!misplaced.contains(page) && of_requests(page));
            assert!(rows.iter().all(|(key, value)| &page_of(key) == page && key[1..] == value[..]));
        }
    }
}
