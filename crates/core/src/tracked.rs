//! A map that remembers which of its keys changed since it was last asked.
//!
//! The table's durable copy (sled, written by `raft/state_store.rs`) is
//! brought up to date at each checkpoint with the rows that changed, not the
//! whole table: a checkpoint then costs what changed, however many leases are
//! live. Every mutation goes through a method here that notes its key, and
//! reads go through `Deref`, so no mutation can miss the note.

use std::borrow::Borrow;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::ops::Deref;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A `BTreeMap` and the keys inserted, removed or handed out mutably since
/// the last [`take_changed`](Tracked::take_changed).
#[derive(Debug, Clone)]
pub(crate) struct Tracked<K: Ord, V> {
    map: BTreeMap<K, V>,
    changed: Changed<K>,
}

/// Each changed key, and whether it was in the map at the last
/// [`take_changed`](Tracked::take_changed) (so is in the durable copy): a
/// key that was not and is gone again (a request record inserted and
/// evicted between two checkpoints) needs no write at all. Hashed: a note
/// is taken on every mutation, and a checkpoint writes the keys in any order.
pub(crate) type Changed<K> = HashMap<K, bool>;

impl<K: Ord, V> Default for Tracked<K, V> {
    fn default() -> Self {
        Tracked { map: BTreeMap::new(), changed: Changed::new() }
    }
}

/// Equal when the contents are: what changed since a checkpoint is not part
/// of the state.
impl<K: Ord, V: PartialEq> PartialEq for Tracked<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.map == other.map
    }
}

impl<K: Ord, V: Eq> Eq for Tracked<K, V> {}

impl<K: Ord, V> Deref for Tracked<K, V> {
    type Target = BTreeMap<K, V>;

    fn deref(&self) -> &BTreeMap<K, V> {
        &self.map
    }
}

/// Loaded contents count as unchanged: they came from where changes go.
impl<K: Ord, V> From<BTreeMap<K, V>> for Tracked<K, V> {
    fn from(map: BTreeMap<K, V>) -> Self {
        Tracked { map, changed: Changed::new() }
    }
}

/// A note of a key already in the map is a clone of the map's own key, so
/// keys that share their text (`Arc<str>`) are noted without a copy of it.
impl<K: Ord + Hash + Clone, V> Tracked<K, V> {
    pub(crate) fn insert(&mut self, key: K, value: V) -> Option<V> {
        let old = self.map.insert(key.clone(), value);
        self.changed.entry(key).or_insert(old.is_some());
        old
    }

    /// Notes that `key`, stored, changed (only the first note since the
    /// last take counts).
    fn note_stored(changed: &mut Changed<K>, key: &K) {
        if !changed.contains_key(key) {
            changed.insert(key.clone(), true);
        }
    }

    pub(crate) fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.remove_entry(key).map(|(_, value)| value)
    }

    /// Removes `key`, returning the stored key with its value.
    pub(crate) fn remove_entry<Q>(&mut self, key: &Q) -> Option<(K, V)>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let removed = self.map.remove_entry(key)?;
        Self::note_stored(&mut self.changed, &removed.0);
        Some(removed)
    }

    pub(crate) fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let (stored, _) = self.map.get_key_value(key)?;
        Self::note_stored(&mut self.changed, stored);
        self.map.get_mut(key)
    }

    /// The value under `key`, inserted by `make` if there is none.
    pub(crate) fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        match self.map.entry(key) {
            Entry::Occupied(found) => {
                Self::note_stored(&mut self.changed, found.key());
                found.into_mut()
            }
            Entry::Vacant(empty) => {
                if !self.changed.contains_key(empty.key()) {
                    self.changed.insert(empty.key().clone(), false);
                }
                empty.insert(make())
            }
        }
    }

    /// The keys changed since the last call; the map's contents stay.
    pub(crate) fn take_changed(&mut self) -> Changed<K> {
        std::mem::take(&mut self.changed)
    }
}

impl<K: Ord + Serialize, V: Serialize> Serialize for Tracked<K, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.map.serialize(serializer)
    }
}

impl<'de, K: Ord + Deserialize<'de>, V: Deserialize<'de>> Deserialize<'de> for Tracked<K, V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        BTreeMap::deserialize(deserializer).map(Tracked::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ensures every kind of mutation notes its key and whether it was there
    // before, reads note nothing, and taking the notes leaves the contents.
    #[test]
    fn mutations_are_noted_and_reads_are_not() {
        let mut map: Tracked<String, u32> = Tracked::default();
        map.insert("a".into(), 1);
        map.insert("b".into(), 2);
        assert_eq!(map.take_changed(), [("a".to_owned(), false), ("b".to_owned(), false)].into());
        assert_eq!(map.get("a"), Some(&1));
        assert!(map.remove("missing").is_none() && map.get_mut("missing").is_none());
        assert!(map.take_changed().is_empty(), "reads and misses change nothing");
        *map.get_mut("a").expect("present") += 1;
        map.remove("b");
        *map.get_or_insert_with("c".into(), || 0) += 5;
        map.insert("d".into(), 1);
        map.remove("d");
        let changed = [("a", true), ("b", true), ("c", false), ("d", false)].map(|(k, was)| (k.to_owned(), was));
        assert_eq!(map.take_changed(), changed.into(), "whether each was there at the last take");
        assert_eq!(*map, BTreeMap::from([("a".to_owned(), 2), ("c".to_owned(), 5)]));
    }
}
