//! The memtable: the newest writes, sorted in memory until they are written out as a run.
//!
//! A plain `BTreeMap` behind the engine's locks. Readers never hold a lock while they stream:
//! an iterator copies a bounded chunk of entries at a time ([`Memtable::chunk`]), so a long
//! Resource List walk never blocks the harvester's commits.

use std::collections::BTreeMap;
use std::ops::Bound;

use super::Slot;

/// What one entry costs beyond its bytes (the map's node share and two vector headers): only
/// for deciding when the memtable is full, so an estimate is enough.
const ENTRY_OVERHEAD: usize = 64;

#[derive(Default)]
pub(super) struct Memtable {
    map: BTreeMap<Vec<u8>, Slot>,
    bytes: usize,
}

impl Memtable {
    /// Sets `key` to `slot` (a value, or `None`: deleted).
    pub(super) fn apply(&mut self, key: Vec<u8>, slot: Slot) {
        let (key_len, new_len) = (key.len(), slot_len(&slot));
        match self.map.insert(key, slot) {
            None => self.bytes += key_len + new_len + ENTRY_OVERHEAD,
            // The key and its overhead are counted already; only the value changed.
            Some(old) => self.bytes = self.bytes + new_len - slot_len(&old),
        }
    }

    /// The newest slot of `key`, if this memtable has one.
    pub(super) fn get(&self, key: &[u8]) -> Option<&Slot> {
        self.map.get(key)
    }

    /// The greatest key within the bounds, with its slot.
    pub(super) fn floor(&self, lo: &[u8], hi: Bound<&[u8]>) -> Option<(&[u8], &Slot)> {
        self.map.range::<[u8], _>((Bound::Included(lo), hi)).next_back().map(|(k, v)| (k.as_slice(), v))
    }

    /// Up to `max` entries from `from` on, before `end` (`None`: to the end), copied.
    pub(super) fn chunk(&self, from: Bound<&[u8]>, end: Option<&[u8]>, max: usize) -> Vec<(Vec<u8>, Slot)> {
        let end = end.map_or(Bound::Unbounded, Bound::Excluded);
        if bounds_empty(from, end) {
            return Vec::new();
        }
        self.map.range::<[u8], _>((from, end)).take(max).map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// Every entry in key order, for writing the memtable out.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&Vec<u8>, &Slot)> {
        self.map.iter()
    }

    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// About how much memory the entries take.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }
}

fn slot_len(slot: &Slot) -> usize {
    slot.as_ref().map_or(0, Vec::len)
}

/// Whether a range with these bounds is empty or inverted (which `BTreeMap::range` panics on).
pub(super) fn bounds_empty(from: Bound<&[u8]>, end: Bound<&[u8]>) -> bool {
    match (from, end) {
        (Bound::Included(a), Bound::Excluded(b)) => a >= b,
        (Bound::Excluded(a), Bound::Excluded(b)) => a >= b,
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Excluded(a), Bound::Included(b)) => a >= b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacing_a_value_counts_only_the_new_bytes() {
        let mut m = Memtable::default();
        m.apply(b"k".to_vec(), Some(vec![0; 100]));
        let one = m.bytes();
        m.apply(b"k".to_vec(), Some(vec![0; 10]));
        assert_eq!(m.bytes(), one - 90);
        m.apply(b"k".to_vec(), None);
        assert_eq!(m.bytes(), one - 100);
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn chunks_and_floors_respect_their_bounds() {
        let mut m = Memtable::default();
        for k in [b"a", b"b", b"c", b"d"] {
            m.apply(k.to_vec(), Some(k.to_vec()));
        }
        let keys = |c: Vec<(Vec<u8>, Slot)>| c.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
        assert_eq!(keys(m.chunk(Bound::Excluded(b"a"), Some(b"d"), 10)), [b"b".to_vec(), b"c".to_vec()]);
        assert_eq!(keys(m.chunk(Bound::Included(b"a"), None, 1)), [b"a".to_vec()]);
        assert!(m.chunk(Bound::Included(b"d"), Some(b"c"), 10).is_empty(), "inverted: empty, no panic");
        assert_eq!(m.floor(b"a", Bound::Included(b"c")).map(|(k, _)| k), Some(&b"c"[..]));
        assert_eq!(m.floor(b"a", Bound::Excluded(b"c")).map(|(k, _)| k), Some(&b"b"[..]));
        assert_eq!(m.floor(b"e", Bound::Included(b"z")), None);
    }
}
