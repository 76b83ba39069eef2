//! The byte-level pieces the WAL and the runs share: LEB128 varints, entries, and the Bloom
//! filter of a run.
//!
//! The Bloom filter is written here rather than taken from a crate because its bits are
//! persisted in every run: a crate is free to change how it derives probe positions between
//! releases (which would make an old run answer "certainly absent" for keys it holds), while
//! this one is part of the run format. Keys are hashed with XXH3, whose output the algorithm's
//! specification fixes.

use super::Slot;

/// Appends `v` as an unsigned LEB128 varint.
pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a varint at `*pos`, advancing it; `None` when the bytes end first or it overflows.
pub(super) fn get_varint(bytes: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*pos)?;
        *pos += 1;
        v |= u64::from(b & 0x7F) << shift;
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

/// Reads `len` bytes at `*pos`, advancing it.
pub(super) fn take<'a>(bytes: &'a [u8], pos: &mut usize, len: u64) -> Option<&'a [u8]> {
    let len = usize::try_from(len).ok()?;
    let end = pos.checked_add(len)?;
    let out = bytes.get(*pos..end)?;
    *pos = end;
    Some(out)
}

/// A slot's length tag: 0 for a deletion, `len + 1` for a value.
pub(super) fn slot_tag(slot: &Slot) -> u64 {
    slot.as_ref().map_or(0, |v| v.len() as u64 + 1)
}

/// A slot read back from its tag and the bytes after it.
pub(super) fn read_slot(bytes: &[u8], pos: &mut usize, tag: u64) -> Option<Slot> {
    match tag {
        0 => Some(None),
        n => take(bytes, pos, n - 1).map(|v| Some(v.to_vec())),
    }
}

/// The hash a run's Bloom filter is built from.
pub(super) fn key_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// Bits per key: with [`PROBES`] probes, about 0.1% false positives. A false positive costs a
/// block read and its decompression, and a point read asks every run: at ten runs, 1% per run
/// (10 bits, 7 probes) made a tenth of the harvester's lookups of new records read a block.
const BITS_PER_KEY: usize = 14;
const PROBES: u32 = 10;

/// A Bloom filter over a run's keys: "certainly absent" skips the run's block read. Stored
/// as its probe count (u32 LE) and its words, so a later build can change the sizing.
pub(super) struct Bloom {
    probes: u32,
    bits: Vec<u64>,
}

impl Bloom {
    /// A filter sized for `keys` keys.
    pub(super) fn with_capacity(keys: usize) -> Bloom {
        let words = (keys.max(1) * BITS_PER_KEY).div_ceil(64);
        Bloom { probes: PROBES, bits: vec![0; words] }
    }

    /// Probe positions by double hashing (Kirsch–Mitzenmacher) from one 64-bit hash.
    fn positions(probes: u32, words: usize, hash: u64) -> impl Iterator<Item = usize> {
        let n = (words * 64) as u64;
        let (h1, h2) = (hash, hash.rotate_left(32) | 1);
        (0..u64::from(probes)).map(move |i| (h1.wrapping_add(i.wrapping_mul(h2)) % n) as usize)
    }

    pub(super) fn insert(&mut self, hash: u64) {
        for bit in Self::positions(self.probes, self.bits.len(), hash) {
            self.bits[bit / 64] |= 1 << (bit % 64);
        }
    }

    pub(super) fn may_contain(&self, hash: u64) -> bool {
        Self::positions(self.probes, self.bits.len(), hash).all(|bit| self.bits[bit / 64] & (1 << (bit % 64)) != 0)
    }

    pub(super) fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + self.bits.len() * 8);
        out.extend_from_slice(&self.probes.to_le_bytes());
        out.extend(self.bits.iter().flat_map(|w| w.to_le_bytes()));
        out
    }

    /// A filter from [`Bloom::to_bytes`]; `None` when it is malformed.
    pub(super) fn from_bytes(bytes: &[u8]) -> Option<Bloom> {
        let (probes, words) = bytes.split_first_chunk::<4>()?;
        let probes = u32::from_le_bytes(*probes);
        if words.is_empty() || !words.len().is_multiple_of(8) || !(1..=64).contains(&probes) {
            return None;
        }
        let bits = words.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().expect("eight bytes"))).collect();
        Some(Bloom { probes, bits })
    }

    /// Memory the filter takes.
    pub(super) fn bytes(&self) -> usize {
        self.bits.len() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_refuse_truncation() {
        for v in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            let mut pos = 0;
            assert_eq!(get_varint(&b, &mut pos), Some(v));
            assert_eq!(pos, b.len());
            let mut pos = 0;
            assert_eq!(get_varint(&b[..b.len() - 1], &mut pos), None);
        }
    }

    #[test]
    fn the_filter_never_forgets_and_rarely_lies() {
        let mut bloom = Bloom::with_capacity(10_000);
        for i in 0..10_000u32 {
            bloom.insert(key_hash(&i.to_be_bytes()));
        }
        let bloom = Bloom::from_bytes(&bloom.to_bytes()).unwrap();
        assert!((0..10_000u32).all(|i| bloom.may_contain(key_hash(&i.to_be_bytes()))));
        let false_positives = (10_000..110_000u32).filter(|i| bloom.may_contain(key_hash(&i.to_be_bytes()))).count();
        assert!(false_positives < 400, "{false_positives} of 100,000");
    }
}
