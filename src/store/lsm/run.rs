//! Runs: immutable files of sorted entries, the bulk of what the engine holds.
//!
//! ```text
//! "TRBRUN01"
//! block*      lz4 of entries: shared varint · unshared varint · tag varint · key suffix · value
//!             (tag 0: deleted; n: a value of n − 1 bytes); each block's first entry shares
//!             nothing, so a block decodes on its own
//! index       count varint, then per block: first key (len varint · bytes), offset varint,
//!             compressed length varint, raw length varint, crc32 of the compressed bytes u32 LE;
//!             then the run's last key (len varint · bytes)
//! bloom       the Bloom filter's words (see `encoding`)
//! footer      index offset, index length, bloom offset, bloom length, entries (u64 LE each),
//!             "TRBRUNFT"
//! ```
//!
//! Keys sharing a prefix with the key before them store only the rest: a Tributary URI differs
//! from its neighbour in a few characters, so a block of records holds little more than their
//! values; lz4 then takes what repeats across values (origins, link targets, times). The index
//! and the filter are read into memory when the run is opened; a point read is one `pread` of
//! one block and its decompression.

use std::fs::{self, File};
use std::io::{BufWriter, Write as _};
use std::ops::Bound;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Slot;
use super::encoding::{Bloom, get_varint, key_hash, put_varint, slot_tag, take};
use crate::store::error::StoreError;
use crate::store::open::sync_dir;

const MAGIC: &[u8; 8] = b"TRBRUN01";
const FOOTER_MAGIC: &[u8; 8] = b"TRBRUNFT";
const FOOTER_LEN: u64 = 48;
/// Raw bytes per block: large enough that lz4 finds what repeats across a few dozen records,
/// small enough that a point read decompresses little.
pub(super) const BLOCK_BYTES: usize = 32 * 1024;

pub(super) fn path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("run-{id:016}.sst"))
}

fn tmp_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("run-{id:016}.tmp"))
}

/// The run ids of the files in `dir`, and the temporary files a crash left.
pub(super) fn list(dir: &Path) -> Result<(Vec<u64>, Vec<PathBuf>), StoreError> {
    let (mut ids, mut leftovers) = (Vec::new(), Vec::new());
    for entry in fs::read_dir(dir).map_err(|e| StoreError::io(dir, e))? {
        let entry = entry.map_err(|e| StoreError::io(dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Some(stem) = name.strip_prefix("run-") else { continue };
        if let Some(id) = stem.strip_suffix(".sst").and_then(|n| n.parse().ok()) {
            ids.push(id);
        } else if stem.ends_with(".tmp") {
            leftovers.push(entry.path());
        }
    }
    Ok((ids, leftovers))
}

/// Where one block is.
struct BlockHandle {
    first: Box<[u8]>,
    offset: u64,
    clen: u32,
    rlen: u32,
    crc: u32,
}

/// An open run.
pub(super) struct Run {
    pub(super) id: u64,
    /// How many memtables went into it: the merge policy's measure of its size.
    pub(super) weight: u64,
    path: PathBuf,
    file: File,
    index: Vec<BlockHandle>,
    /// The greatest key: where the last block's keys end.
    last: Box<[u8]>,
    bloom: Bloom,
    pub(super) entries: u64,
    /// The file's size.
    pub(super) bytes: u64,
}

/// Where a block's keys end: below the next block's first key, or at the run's last key.
pub(super) enum BlockEnd<'a> {
    Below(&'a [u8]),
    AtMost(&'a [u8]),
}

/// A block as stored, with what a writer needs to take it whole (see [`RunWriter::add_block`]).
pub(super) struct StoredBlock {
    compressed: Vec<u8>,
    crc: u32,
    rlen: u32,
    first: Vec<u8>,
    last: Vec<u8>,
    hashes: Vec<u64>,
    /// Whether any entry is a deletion (a merge dropping deletions cannot take it whole).
    pub(super) has_deletions: bool,
}

/// Writes a run from entries given in strictly increasing key order.
pub(super) struct RunWriter {
    dir: PathBuf,
    id: u64,
    weight: u64,
    file: BufWriter<File>,
    offset: u64,
    block: Vec<u8>,
    block_first: Option<Vec<u8>>,
    last: Vec<u8>,
    index: Vec<BlockHandle>,
    bloom: Bloom,
    entries: u64,
    /// Bytes of entries before compression.
    raw: u64,
}

impl RunWriter {
    /// Starts run `id` in `dir`, with a filter sized for up to `expected` keys.
    pub(super) fn create(dir: &Path, id: u64, weight: u64, expected: usize) -> Result<RunWriter, StoreError> {
        let tmp = tmp_path(dir, id);
        let file = File::create(&tmp).map_err(|e| StoreError::io(&tmp, e))?;
        let mut w = RunWriter {
            dir: dir.to_path_buf(),
            id,
            weight,
            file: BufWriter::with_capacity(256 * 1024, file),
            offset: 0,
            block: Vec::with_capacity(BLOCK_BYTES + 4096),
            block_first: None,
            last: Vec::new(),
            index: Vec::new(),
            bloom: Bloom::with_capacity(expected),
            entries: 0,
            raw: 0,
        };
        w.write(MAGIC)?;
        Ok(w)
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        self.file.write_all(bytes).map_err(|e| StoreError::io(tmp_path(&self.dir, self.id), e))?;
        self.offset += bytes.len() as u64;
        Ok(())
    }

    /// Adds the next entry; its key must be greater than the last one's.
    pub(super) fn add(&mut self, key: &[u8], slot: &Slot) -> Result<(), StoreError> {
        if self.entries > 0 && key <= self.last.as_slice() {
            return Err(StoreError::corrupt("run", "keys written out of order"));
        }
        let shared = if self.block_first.is_none() {
            self.block_first = Some(key.to_vec());
            0
        } else {
            self.last.iter().zip(key).take_while(|(a, b)| a == b).count()
        };
        put_varint(&mut self.block, shared as u64);
        put_varint(&mut self.block, (key.len() - shared) as u64);
        put_varint(&mut self.block, slot_tag(slot));
        self.block.extend_from_slice(&key[shared..]);
        if let Some(v) = slot {
            self.block.extend_from_slice(v);
        }
        self.bloom.insert(key_hash(key));
        self.last.clear();
        self.last.extend_from_slice(key);
        self.entries += 1;
        if self.block.len() >= BLOCK_BYTES {
            self.raw += self.block.len() as u64;
            self.finish_block()?;
        }
        Ok(())
    }

    /// Bytes of entries written so far, before compression (the open block's included).
    pub(super) fn raw_bytes(&self) -> u64 {
        self.raw + self.block.len() as u64
    }

    /// [`RunWriter::finish`], with the run's weight decided now.
    pub(super) fn finish_with_weight(mut self, weight: u64) -> Result<Run, StoreError> {
        self.weight = weight;
        self.finish()
    }

    fn finish_block(&mut self) -> Result<(), StoreError> {
        let Some(first) = self.block_first.take() else { return Ok(()) };
        let compressed = lz4_flex::block::compress(&self.block);
        let rlen = u32::try_from(self.block.len()).map_err(|_| StoreError::corrupt("run", "block over 4 GiB"))?;
        let clen = u32::try_from(compressed.len()).map_err(|_| StoreError::corrupt("run", "block over 4 GiB"))?;
        let handle =
            BlockHandle { first: first.into(), offset: self.offset, clen, rlen, crc: crc32fast::hash(&compressed) };
        self.write(&compressed)?;
        self.index.push(handle);
        self.block.clear();
        Ok(())
    }

    /// Adds a block of another run as it is stored, without decoding and compressing it again:
    /// a merge does this wherever no other input has keys within the block's range. Its keys
    /// must all be greater than the last one added.
    pub(super) fn add_block(&mut self, b: &StoredBlock) -> Result<(), StoreError> {
        if self.entries > 0 && b.first.as_slice() <= self.last.as_slice() {
            return Err(StoreError::corrupt("run", "block written out of order"));
        }
        self.raw += self.block.len() as u64;
        self.finish_block()?;
        let handle = BlockHandle {
            first: b.first.clone().into(),
            offset: self.offset,
            clen: u32::try_from(b.compressed.len()).map_err(|_| StoreError::corrupt("run", "block over 4 GiB"))?,
            rlen: b.rlen,
            crc: b.crc,
        };
        self.write(&b.compressed)?;
        self.index.push(handle);
        for h in &b.hashes {
            self.bloom.insert(*h);
        }
        self.entries += b.hashes.len() as u64;
        self.raw += u64::from(b.rlen);
        self.last.clear();
        self.last.extend_from_slice(&b.last);
        Ok(())
    }

    /// Entries added so far.
    pub(super) fn entries(&self) -> u64 {
        self.entries
    }

    /// Writes the index, filter and footer, syncs the file and gives it its final name.
    pub(super) fn finish(mut self) -> Result<Run, StoreError> {
        self.raw += self.block.len() as u64;
        self.finish_block()?;
        let mut index = Vec::new();
        put_varint(&mut index, self.index.len() as u64);
        for h in &self.index {
            put_varint(&mut index, h.first.len() as u64);
            index.extend_from_slice(&h.first);
            put_varint(&mut index, h.offset);
            put_varint(&mut index, u64::from(h.clen));
            put_varint(&mut index, u64::from(h.rlen));
            index.extend_from_slice(&h.crc.to_le_bytes());
        }
        put_varint(&mut index, self.last.len() as u64);
        index.extend_from_slice(&self.last);
        let index_offset = self.offset;
        self.write(&index)?;
        let bloom = self.bloom.to_bytes();
        let bloom_offset = self.offset;
        self.write(&bloom)?;
        let mut footer = Vec::with_capacity(FOOTER_LEN as usize);
        for v in [index_offset, index.len() as u64, bloom_offset, bloom.len() as u64, self.entries] {
            footer.extend_from_slice(&v.to_le_bytes());
        }
        footer.extend_from_slice(FOOTER_MAGIC);
        self.write(&footer)?;
        let (tmp, path) = (tmp_path(&self.dir, self.id), path(&self.dir, self.id));
        let file = self.file.into_inner().map_err(|e| StoreError::io(&tmp, e.into_error()))?;
        file.sync_all().map_err(|e| StoreError::io(&tmp, e))?;
        drop(file);
        fs::rename(&tmp, &path).map_err(|e| StoreError::io(&path, e))?;
        sync_dir(&self.dir).map_err(|e| StoreError::io(&self.dir, e))?;
        Run::open(&self.dir, self.id, self.weight)
    }

    /// Removes the unfinished file.
    pub(super) fn abandon(self) {
        let tmp = tmp_path(&self.dir, self.id);
        drop(self.file);
        let _ = fs::remove_file(tmp);
    }
}

impl Run {
    /// Opens run `id`, reading its index and filter.
    pub(super) fn open(dir: &Path, id: u64, weight: u64) -> Result<Run, StoreError> {
        let path = path(dir, id);
        let file = File::open(&path).map_err(|e| StoreError::io(&path, e))?;
        let bytes = file.metadata().map_err(|e| StoreError::io(&path, e))?.len();
        let corrupt = |why: &str| StoreError::corrupt("run", format!("{}: {why}", path.display()));
        if bytes < MAGIC.len() as u64 + FOOTER_LEN {
            return Err(corrupt("too short"));
        }
        let mut footer = [0u8; FOOTER_LEN as usize];
        file.read_exact_at(&mut footer, bytes - FOOTER_LEN).map_err(|e| StoreError::io(&path, e))?;
        if &footer[40..] != FOOTER_MAGIC {
            return Err(corrupt("no footer"));
        }
        let word = |i: usize| u64::from_le_bytes(footer[i * 8..i * 8 + 8].try_into().expect("eight bytes"));
        let (index_offset, index_len, bloom_offset, bloom_len, entries) = (word(0), word(1), word(2), word(3), word(4));
        if index_offset.checked_add(index_len) != Some(bloom_offset)
            || bloom_offset.checked_add(bloom_len) != Some(bytes - FOOTER_LEN)
        {
            return Err(corrupt("footer offsets disagree with the file's length"));
        }
        let read = |offset: u64, len: u64| -> Result<Vec<u8>, StoreError> {
            let mut buf = vec![0; usize::try_from(len).map_err(|_| corrupt("section too large"))?];
            file.read_exact_at(&mut buf, offset).map_err(|e| StoreError::io(&path, e))?;
            Ok(buf)
        };
        let (index, last) = decode_index(&read(index_offset, index_len)?).ok_or_else(|| corrupt("malformed index"))?;
        let bloom = Bloom::from_bytes(&read(bloom_offset, bloom_len)?).ok_or_else(|| corrupt("malformed filter"))?;
        Ok(Run { id, weight, path, file, index, last, bloom, entries, bytes })
    }

    /// Memory the run keeps: its index and filter.
    pub(super) fn resident_bytes(&self) -> usize {
        self.bloom.bytes() + self.index.iter().map(|h| h.first.len() + 40).sum::<usize>()
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// The decompressed block `i`, checked against its checksum.
    fn block(&self, i: usize) -> Result<Vec<u8>, StoreError> {
        let compressed = self.compressed_block(i)?;
        self.decompress(i, &compressed)
    }

    /// Block `i` as stored, checked against its checksum.
    fn compressed_block(&self, i: usize) -> Result<Vec<u8>, StoreError> {
        let h = &self.index[i];
        let mut compressed = vec![0; h.clen as usize];
        self.file.read_exact_at(&mut compressed, h.offset).map_err(|e| StoreError::io(&self.path, e))?;
        if crc32fast::hash(&compressed) != h.crc {
            return Err(self.corrupt_block(i, "checksum mismatch"));
        }
        Ok(compressed)
    }

    fn decompress(&self, i: usize, compressed: &[u8]) -> Result<Vec<u8>, StoreError> {
        lz4_flex::block::decompress(compressed, self.index[i].rlen as usize)
            .map_err(|e| StoreError::corrupt("run", format!("{} block {i}: {e}", self.path.display())))
    }

    /// How many blocks the run has.
    pub(super) fn block_count(&self) -> usize {
        self.index.len()
    }

    /// Block `i`'s first key.
    pub(super) fn block_first(&self, i: usize) -> &[u8] {
        &self.index[i].first
    }

    /// Where block `i`'s keys end.
    pub(super) fn block_end(&self, i: usize) -> BlockEnd<'_> {
        match self.index.get(i + 1) {
            Some(next) => BlockEnd::Below(&next.first),
            None => BlockEnd::AtMost(&self.last),
        }
    }

    /// Block `i`'s entries, decoded.
    pub(super) fn block_entries(&self, i: usize) -> Result<Vec<(Vec<u8>, Slot)>, StoreError> {
        let block = self.block(i)?;
        let mut entries = BlockEntries::new(&block);
        let mut out = Vec::new();
        while let Some(e) = entries.next_entry() {
            out.push(e.map_err(|why| self.corrupt_block(i, why))?);
        }
        Ok(out)
    }

    /// Block `i` as stored, for [`RunWriter::add_block`]: it is decompressed once, to hash its
    /// keys for the new run's filter, but not compressed again.
    pub(super) fn stored_block(&self, i: usize) -> Result<StoredBlock, StoreError> {
        let compressed = self.compressed_block(i)?;
        let raw = self.decompress(i, &compressed)?;
        let mut entries = BlockEntries::new(&raw);
        let (mut hashes, mut has_deletions) = (Vec::new(), false);
        while let Some(e) = entries.advance() {
            e.map_err(|why| self.corrupt_block(i, why))?;
            hashes.push(key_hash(&entries.key));
            has_deletions |= entries.value.is_none();
        }
        let h = &self.index[i];
        Ok(StoredBlock {
            compressed,
            crc: h.crc,
            rlen: h.rlen,
            first: h.first.to_vec(),
            last: entries.key,
            hashes,
            has_deletions,
        })
    }

    /// The block that would hold `key`: the last whose first key is at or before it.
    fn block_for(&self, key: &[u8], inclusive: bool) -> Option<usize> {
        let after = self.index.partition_point(|h| if inclusive { &*h.first <= key } else { &*h.first < key });
        after.checked_sub(1)
    }

    /// `key`'s slot here: `None` when the run has no entry for it. `hash` is `key_hash(key)`,
    /// computed once by a caller asking several runs.
    pub(super) fn get(&self, key: &[u8], hash: u64) -> Result<Option<Slot>, StoreError> {
        // Outside the run's keys, the filter need not be asked: two comparisons with keys in
        // memory against its probes' cache misses. Keys often come in order (a listing's
        // URIs, an OAI-PMH provider's record numbers), so a new record's key is often past
        // the last key of every run.
        if key > &*self.last || self.index.first().is_none_or(|h| key < &*h.first) {
            return Ok(None);
        }
        if !self.bloom.may_contain(hash) {
            return Ok(None);
        }
        let Some(i) = self.block_for(key, true) else { return Ok(None) };
        let block = self.block(i)?;
        let mut entries = BlockEntries::new(&block);
        while let Some(e) = entries.advance() {
            e.map_err(|why| self.corrupt_block(i, why))?;
            match entries.key.as_slice().cmp(key) {
                std::cmp::Ordering::Less => continue,
                std::cmp::Ordering::Equal => return Ok(Some(entries.slot())),
                std::cmp::Ordering::Greater => return Ok(None),
            }
        }
        Ok(None)
    }

    /// The greatest entry with `lo <= key` and key within `hi`.
    pub(super) fn floor(&self, lo: &[u8], hi: Bound<&[u8]>) -> Result<Option<(Vec<u8>, Slot)>, StoreError> {
        let (bound, inclusive) = match hi {
            Bound::Included(k) => (k, true),
            Bound::Excluded(k) => (k, false),
            Bound::Unbounded => return self.last_at_or_after(lo),
        };
        let Some(i) = self.block_for(bound, inclusive) else { return Ok(None) };
        let block = self.block(i)?;
        let mut entries = BlockEntries::new(&block);
        let mut best = None;
        while let Some(e) = entries.next_entry() {
            let (k, slot) = e.map_err(|why| self.corrupt_block(i, why))?;
            let within = if inclusive { k.as_slice() <= bound } else { k.as_slice() < bound };
            if !within {
                break;
            }
            best = Some((k, slot));
        }
        Ok(best.filter(|(k, _)| k.as_slice() >= lo))
    }

    fn last_at_or_after(&self, lo: &[u8]) -> Result<Option<(Vec<u8>, Slot)>, StoreError> {
        let Some(i) = self.index.len().checked_sub(1) else { return Ok(None) };
        let block = self.block(i)?;
        let mut entries = BlockEntries::new(&block);
        let mut best = None;
        while let Some(e) = entries.next_entry() {
            best = Some(e.map_err(|why| self.corrupt_block(i, why))?);
        }
        Ok(best.filter(|(k, _)| k.as_slice() >= lo))
    }

    fn corrupt_block(&self, i: usize, why: &'static str) -> StoreError {
        StoreError::corrupt("run", format!("{} block {i}: {why}", self.path.display()))
    }

    /// Reads every block: checksums, key order and the entry count. For `store verify`.
    pub(super) fn verify(&self) -> Result<(), StoreError> {
        let mut last: Option<Vec<u8>> = None;
        let mut count = 0;
        for i in 0..self.index.len() {
            let block = self.block(i)?;
            let mut entries = BlockEntries::new(&block);
            while let Some(e) = entries.next_entry() {
                let (k, _) = e.map_err(|why| self.corrupt_block(i, why))?;
                if last.as_ref().is_some_and(|l| *l >= k) {
                    return Err(self.corrupt_block(i, "keys out of order"));
                }
                if count == 0 && *self.index[i].first != *k {
                    return Err(self.corrupt_block(i, "first key differs from the index"));
                }
                last = Some(k);
                count += 1;
            }
        }
        if last.as_deref().is_some_and(|l| *l != *self.last) {
            return Err(StoreError::corrupt(
                "run",
                format!("{}: the last key differs from the index", self.path.display()),
            ));
        }
        if count != self.entries {
            return Err(StoreError::corrupt(
                "run",
                format!("{}: {count} entries, the footer says {}", self.path.display(), self.entries),
            ));
        }
        Ok(())
    }
}

fn decode_index(bytes: &[u8]) -> Option<(Vec<BlockHandle>, Box<[u8]>)> {
    let mut pos = 0;
    let n = get_varint(bytes, &mut pos)?;
    let mut index = Vec::with_capacity(usize::try_from(n).ok()?.min(1 << 20));
    for _ in 0..n {
        let len = get_varint(bytes, &mut pos)?;
        let first = take(bytes, &mut pos, len)?.into();
        let offset = get_varint(bytes, &mut pos)?;
        let clen = u32::try_from(get_varint(bytes, &mut pos)?).ok()?;
        let rlen = u32::try_from(get_varint(bytes, &mut pos)?).ok()?;
        let crc = u32::from_le_bytes(take(bytes, &mut pos, 4)?.try_into().ok()?);
        index.push(BlockHandle { first, offset, clen, rlen, crc });
    }
    let len = get_varint(bytes, &mut pos)?;
    let last = take(bytes, &mut pos, len)?.into();
    (pos == bytes.len()).then_some((index, last))
}

/// The entries of one decompressed block, in order. [`BlockEntries::advance`] reads the next
/// entry's key into a buffer it reuses and notes where its value is, without copying it: a
/// point read scans up to a block's worth of keys to find one, and only that one is copied.
struct BlockEntries<'a> {
    block: &'a [u8],
    pos: usize,
    key: Vec<u8>,
    /// The current entry's value: `None` for a deletion.
    value: Option<std::ops::Range<usize>>,
}

impl<'a> BlockEntries<'a> {
    fn new(block: &'a [u8]) -> Self {
        BlockEntries { block, pos: 0, key: Vec::new(), value: None }
    }

    /// Moves to the next entry; `None` at the end of the block.
    fn advance(&mut self) -> Option<Result<(), &'static str>> {
        if self.pos >= self.block.len() {
            return None;
        }
        Some(self.decode().ok_or("malformed entry"))
    }

    fn decode(&mut self) -> Option<()> {
        let b = self.block;
        let shared = usize::try_from(get_varint(b, &mut self.pos)?).ok()?;
        let unshared = get_varint(b, &mut self.pos)?;
        let tag = get_varint(b, &mut self.pos)?;
        if shared > self.key.len() {
            return None;
        }
        self.key.truncate(shared);
        self.key.extend_from_slice(take(b, &mut self.pos, unshared)?);
        self.value = match tag {
            0 => None,
            n => {
                let start = self.pos;
                take(b, &mut self.pos, n - 1)?;
                Some(start..self.pos)
            }
        };
        Some(())
    }

    /// The current entry's value, copied.
    fn slot(&self) -> Slot {
        self.value.clone().map(|r| self.block[r].to_vec())
    }

    /// The next entry, copied.
    fn next_entry(&mut self) -> Option<Result<(Vec<u8>, Slot), &'static str>> {
        Some(self.advance()?.map(|()| (self.key.clone(), self.slot())))
    }
}

/// A run's entries in key order from a starting point, a block at a time.
pub(super) struct RunIter {
    run: Arc<Run>,
    /// The next block to read.
    next_block: usize,
    block: Vec<u8>,
    pos: usize,
    key: Vec<u8>,
    from: Option<(Vec<u8>, bool)>,
}

impl RunIter {
    /// Entries at or after `from` (strictly after when `from` is excluded).
    pub(super) fn new(run: Arc<Run>, from: Bound<&[u8]>) -> RunIter {
        let (start, from) = match from {
            Bound::Included(k) => (run.block_for(k, true).unwrap_or(0), Some((k.to_vec(), true))),
            Bound::Excluded(k) => (run.block_for(k, true).unwrap_or(0), Some((k.to_vec(), false))),
            Bound::Unbounded => (0, None),
        };
        RunIter { run, next_block: start, block: Vec::new(), pos: 0, key: Vec::new(), from }
    }

    fn next_raw(&mut self) -> Option<Result<(Vec<u8>, Slot), StoreError>> {
        loop {
            if self.pos < self.block.len() {
                let mut entries =
                    BlockEntries { block: &self.block, pos: self.pos, key: std::mem::take(&mut self.key), value: None };
                let e = entries.next_entry();
                self.pos = entries.pos;
                self.key = entries.key;
                let block = self.next_block - 1;
                return Some(e?.map_err(|why| self.run.corrupt_block(block, why)));
            }
            if self.next_block >= self.run.index.len() {
                return None;
            }
            match self.run.block(self.next_block) {
                Ok(b) => self.block = b,
                Err(e) => {
                    self.next_block = self.run.index.len();
                    return Some(Err(e));
                }
            }
            self.next_block += 1;
            self.pos = 0;
            self.key.clear();
        }
    }
}

impl Iterator for RunIter {
    type Item = Result<(Vec<u8>, Slot), StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let item = self.next_raw()?;
            if let (Ok((k, _)), Some((from, inclusive))) = (&item, &self.from) {
                let before = if *inclusive { k < from } else { k <= from };
                if before {
                    continue;
                }
                self.from = None;
            }
            return Some(item);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> Vec<u8> {
        format!("rhttp://t/r/s/https/example.org/record/{i:08}").into_bytes()
    }

    fn write(dir: &Path, n: u32) -> Run {
        let mut w = RunWriter::create(dir, 7, 1, n as usize).unwrap();
        for i in 0..n {
            let slot = if i % 10 == 3 { None } else { Some(format!("value {i}").repeat(20).into_bytes()) };
            w.add(&key(i * 2), &slot).unwrap();
        }
        w.finish().unwrap()
    }

    #[test]
    fn point_reads_find_values_and_deletions_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let run = write(dir.path(), 5_000);
        assert!(run.index.len() > 10, "several blocks: {}", run.index.len());
        run.verify().unwrap();
        assert_eq!(
            run.get(&key(200), key_hash(&key(200))).unwrap(),
            Some(Some(format!("value {}", 100).repeat(20).into_bytes()))
        );
        assert_eq!(run.get(&key(6), key_hash(&key(6))).unwrap(), Some(None), "a deletion is an entry");
        assert_eq!(run.get(&key(201), key_hash(&key(201))).unwrap(), None, "between two keys");
        assert_eq!(run.get(b"a", key_hash(b"a")).unwrap(), None, "before the first");
        assert_eq!(run.get(b"z", key_hash(b"z")).unwrap(), None, "after the last");
    }

    #[test]
    fn iterators_and_floors_honour_their_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let run = Arc::new(write(dir.path(), 3_000));
        let from = |b: Bound<&[u8]>| RunIter::new(run.clone(), b).map(|e| e.unwrap().0);
        assert_eq!(from(Bound::Unbounded).count(), 3_000);
        assert_eq!(from(Bound::Included(&key(1000))).next(), Some(key(1000)));
        assert_eq!(from(Bound::Excluded(&key(1000))).next(), Some(key(1002)));
        assert_eq!(from(Bound::Included(&key(1001))).next(), Some(key(1002)));
        assert_eq!(from(Bound::Excluded(&key(5998))).next(), None);
        let floor = |hi: Bound<&[u8]>| run.floor(&key(0), hi).unwrap().map(|(k, _)| k);
        assert_eq!(floor(Bound::Included(&key(1000))), Some(key(1000)));
        assert_eq!(floor(Bound::Excluded(&key(1000))), Some(key(998)));
        assert_eq!(floor(Bound::Included(&key(1001))), Some(key(1000)));
        assert_eq!(floor(Bound::Unbounded), Some(key(5998)));
        assert_eq!(run.floor(&key(1001), Bound::Excluded(&key(1002))).unwrap(), None, "nothing at or after lo");
    }

    #[test]
    fn damage_is_reported_not_read_as_data() {
        let dir = tempfile::tempdir().unwrap();
        let run = write(dir.path(), 2_000);
        let path = run.path().to_path_buf();
        drop(run);
        let mut bytes = fs::read(&path).unwrap();
        bytes[100] ^= 0xFF;
        fs::write(&path, &bytes).unwrap();
        let run = Run::open(dir.path(), 7, 1).unwrap();
        assert!(run.verify().unwrap_err().to_string().contains("checksum"));
        fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        assert!(Run::open(dir.path(), 7, 1).is_err(), "a cut footer");
    }

    #[test]
    fn keys_out_of_order_are_refused_and_an_abandoned_run_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = RunWriter::create(dir.path(), 1, 1, 2).unwrap();
        w.add(b"b", &None).unwrap();
        assert!(w.add(b"a", &None).is_err());
        w.abandon();
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
