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

use std::collections::BTreeMap;
use std::io;
use std::ops::Bound::{self, Excluded, Included, Unbounded};

/// Pages per tree: a power of two, so a slot is the hash's low bits.
/// Changing it changes the data format.
const PAGES: u64 = 1 << 18;

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
/// then its key): the tree id, then the slot, big-endian.
pub(super) fn page_of(row_key: &[u8]) -> Vec<u8> {
    let mut hash = Fnv1a::default();
    io::Write::write_all(&mut hash, row_key).expect("hashing cannot fail");
    let slot = (hash.0 & (PAGES - 1)) as u32;
    let mut key = Vec::with_capacity(5);
    key.push(row_key[0]);
    key.extend_from_slice(&slot.to_be_bytes());
    key
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
    let first_upper_slot = ((PAGES / 2) as u32).to_be_bytes();
    (1..=u8::MAX).map(move |tree| {
        let middle = [&[tree][..], &first_upper_slot].concat();
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
