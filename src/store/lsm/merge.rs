//! Merging sorted sources: the memtables and runs behind a range read, or the runs a
//! compaction combines. On equal keys the newest source wins and the others' entries are
//! skipped.
//!
//! A range read never holds the engine's locks between two entries. It copies the live
//! memtable a chunk at a time, and when it notices that the memtable was frozen since it last
//! looked (which moves entries it has not read yet into a frozen memtable it does not know)
//! it starts over from the current state just after the last key it returned. Like sled's
//! iterators, it sees each key once, in order, with a value at least as new as when the
//! iterator passed it; writes behind it are not seen.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

use super::memtable::Memtable;
use super::run::{BlockEnd, Run, RunIter, RunWriter};
use super::{Entry, Frozen, Shared, Slot, read};
use crate::store::error::StoreError;

/// Entries copied from a memtable per lock.
const CHUNK: usize = 256;

/// A cursor over a memtable, refilled a chunk at a time.
struct MemCursor {
    buf: VecDeque<(Vec<u8>, Slot)>,
    after: Bound<Vec<u8>>,
    exhausted: bool,
}

impl MemCursor {
    fn new(from: Bound<Vec<u8>>) -> Self {
        MemCursor { buf: VecDeque::new(), after: from, exhausted: false }
    }

    fn refill(&mut self, mem: &Memtable, end: Option<&[u8]>) {
        let chunk = mem.chunk(self.after.as_ref().map(Vec::as_slice), end, CHUNK);
        self.exhausted = chunk.len() < CHUNK;
        if let Some((last, _)) = chunk.last() {
            self.after = Bound::Excluded(last.clone());
        }
        self.buf.extend(chunk);
    }
}

/// One sorted source.
enum Source {
    /// The live memtable.
    Active(MemCursor),
    Frozen(Arc<Frozen>, MemCursor),
    Run(Box<RunIter>),
}

/// What a source's next entry turned out to be.
enum Next {
    Entry((Vec<u8>, Slot)),
    End,
    /// The live memtable was frozen since the iterator last looked.
    Rotated,
}

impl Source {
    fn next(&mut self, shared: Option<&Shared>, rotations: u64, end: Option<&[u8]>) -> Result<Next, StoreError> {
        match self {
            Source::Active(c) => {
                if c.buf.is_empty() && !c.exhausted {
                    let shared = shared.expect("a live memtable belongs to an engine");
                    let active = read(&shared.active);
                    if active.rotations != rotations {
                        return Ok(Next::Rotated);
                    }
                    c.refill(&active.mem, end);
                }
                Ok(c.buf.pop_front().map_or(Next::End, Next::Entry))
            }
            Source::Frozen(f, c) => {
                if c.buf.is_empty() && !c.exhausted {
                    c.refill(&f.mem, end);
                }
                Ok(c.buf.pop_front().map_or(Next::End, Next::Entry))
            }
            Source::Run(it) => match it.next() {
                None => Ok(Next::End),
                Some(e) => Ok(Next::Entry(e?)),
            },
        }
    }
}

/// Sources newest first, each with its next entry.
struct Heads {
    sources: Vec<Source>,
    heads: Vec<Option<(Vec<u8>, Slot)>>,
    done: Vec<bool>,
}

impl Heads {
    fn new(sources: Vec<Source>) -> Self {
        let n = sources.len();
        Heads { sources, heads: vec![None; n], done: vec![false; n] }
    }

    /// The smallest key of all sources with the newest source's slot for it; [`Next::End`] at
    /// the end; [`Next::Rotated`] when the live memtable was frozen since the last look.
    fn pop(&mut self, shared: Option<&Shared>, rotations: u64, end: Option<&[u8]>) -> Result<Next, StoreError> {
        for i in 0..self.sources.len() {
            if self.heads[i].is_none() && !self.done[i] {
                match self.sources[i].next(shared, rotations, end)? {
                    Next::Entry(e) => self.heads[i] = Some(e),
                    Next::End => self.done[i] = true,
                    Next::Rotated => return Ok(Next::Rotated),
                }
            }
        }
        let mut min: Option<usize> = None;
        for (i, h) in self.heads.iter().enumerate() {
            if let Some((k, _)) = h
                && min.is_none_or(|m| k < &self.heads[m].as_ref().expect("a head").0)
            {
                min = Some(i);
            }
        }
        let Some(m) = min else { return Ok(Next::End) };
        let winner = self.heads[m].take().expect("a head");
        for h in self.heads.iter_mut() {
            if h.as_ref().is_some_and(|(k, _)| *k == winner.0) {
                *h = None;
            }
        }
        Ok(Next::Entry(winner))
    }
}

/// A range read over the whole engine; see the module docs. Yields full keys and values.
pub(in crate::store) struct LsmIter {
    shared: Arc<Shared>,
    end: Option<Vec<u8>>,
    /// Where the sources start when (re)built: the first key, then just after the last key
    /// taken.
    resume: Bound<Vec<u8>>,
    rotations: u64,
    heads: Option<Heads>,
    finished: bool,
}

impl LsmIter {
    pub(super) fn new(shared: Arc<Shared>, from: &[u8], end: Option<&[u8]>) -> Self {
        let finished = end.is_some_and(|e| e <= from);
        LsmIter {
            shared,
            end: end.map(<[u8]>::to_vec),
            resume: Bound::Included(from.to_vec()),
            rotations: 0,
            heads: None,
            finished,
        }
    }

    /// Sources for the engine as it is now, from `resume` on.
    fn build(&mut self) {
        let (rotations, levels) = {
            let active = read(&self.shared.active);
            (active.rotations, read(&self.shared.levels).clone())
        };
        self.rotations = rotations;
        let from = self.resume.as_ref().map(Vec::as_slice);
        let mut sources = vec![Source::Active(MemCursor::new(self.resume.clone()))];
        for f in &levels.frozen {
            sources.push(Source::Frozen(f.clone(), MemCursor::new(self.resume.clone())));
        }
        for r in &levels.runs {
            sources.push(Source::Run(Box::new(RunIter::new(r.clone(), from))));
        }
        self.heads = Some(Heads::new(sources));
    }

    fn next_entry(&mut self) -> Result<Option<Entry>, StoreError> {
        // Each turn takes an entry (or rebuilds after a freeze, which happens only as often as
        // commits fill a memtable): bounded by the entries in range.
        loop {
            if self.heads.is_none() {
                self.build();
            }
            let heads = self.heads.as_mut().expect("built above");
            match heads.pop(Some(&self.shared), self.rotations, self.end.as_deref())? {
                Next::Rotated => self.heads = None,
                Next::End => return Ok(None),
                Next::Entry((k, slot)) => {
                    if self.end.as_ref().is_some_and(|e| k >= *e) {
                        return Ok(None);
                    }
                    self.resume = Bound::Excluded(k.clone());
                    if let Some(v) = slot {
                        return Ok(Some((k, v)));
                    }
                }
            }
        }
    }
}

impl Iterator for LsmIter {
    type Item = Result<Entry, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.finished {
            return None;
        }
        match self.next_entry() {
            Ok(Some(e)) => Some(Ok(e)),
            Ok(None) => {
                self.finished = true;
                None
            }
            Err(e) => {
                self.finished = true;
                Some(Err(e))
            }
        }
    }
}

/// One input of a merge: a run read a block at a time.
struct MergeInput {
    run: Arc<Run>,
    next_block: usize,
    /// The entries left of the block being read, when it had to be decoded.
    entries: VecDeque<(Vec<u8>, Slot)>,
}

impl MergeInput {
    /// The smallest key this input has left, and whether it is the first key of a block not yet
    /// decoded (then the block might be copied whole).
    fn head(&self) -> Option<(&[u8], bool)> {
        if let Some((k, _)) = self.entries.front() {
            return Some((k, false));
        }
        (self.next_block < self.run.block_count()).then(|| (self.run.block_first(self.next_block), true))
    }

    fn at_block(&self) -> bool {
        self.head().is_some_and(|(_, block)| block)
    }

    fn decode_next(&mut self) -> Result<(), StoreError> {
        self.entries = self.run.block_entries(self.next_block)?.into();
        self.next_block += 1;
        Ok(())
    }
}

/// Merges `runs` (newest first) into `w`; on equal keys the newest wins. A block whose key range
/// no other input reaches into is copied as stored ([`RunWriter::add_block`]): runs of a sorted
/// harvest, and always the change log's chunks, hold disjoint ranges, so most of a merge is
/// copying instead of decoding, comparing and compressing again. `Ok(false)`: `stop` said to
/// stop (asked every few thousand steps).
pub(super) fn merge_into(
    runs: &[Arc<Run>],
    w: &mut RunWriter,
    drop_deletions: bool,
    mut stop: impl FnMut() -> bool,
) -> Result<bool, StoreError> {
    let mut inputs: Vec<MergeInput> =
        runs.iter().map(|r| MergeInput { run: r.clone(), next_block: 0, entries: VecDeque::new() }).collect();
    let mut steps = 0u64;
    // Each turn writes an entry or a block, or decodes a block: bounded by the inputs' size.
    loop {
        steps += 1;
        if steps.is_multiple_of(4096) && stop() {
            return Ok(false);
        }
        // The newest input holding the smallest key.
        let mut best: Option<usize> = None;
        for i in 0..inputs.len() {
            if let Some((k, _)) = inputs[i].head()
                && best.is_none_or(|b| k < inputs[b].head().expect("a head").0)
            {
                best = Some(i);
            }
        }
        let Some(b) = best else { return Ok(true) };
        let min = inputs[b].head().expect("a head").0;
        let ties: Vec<usize> =
            (b + 1..inputs.len()).filter(|&j| inputs[j].head().is_some_and(|(k, _)| k == min)).collect();
        // Every input holding the key must have it decoded before the newest one's is taken.
        if let Some(&j) = ties.iter().find(|&&j| inputs[j].at_block()) {
            inputs[j].decode_next()?;
            continue;
        }
        if inputs[b].at_block() {
            if ties.is_empty() && block_is_clear(&inputs, b) {
                let block = inputs[b].run.stored_block(inputs[b].next_block)?;
                if !(drop_deletions && block.has_deletions) {
                    w.add_block(&block)?;
                    inputs[b].next_block += 1;
                    continue;
                }
            }
            inputs[b].decode_next()?;
            continue;
        }
        let (k, slot) = inputs[b].entries.pop_front().expect("a decoded head");
        for j in ties {
            inputs[j].entries.pop_front();
        }
        if !(slot.is_none() && drop_deletions) {
            w.add(&k, &slot)?;
        }
    }
}

/// Whether no input but `s` has a key within the range of `s`'s next block.
fn block_is_clear(inputs: &[MergeInput], s: usize) -> bool {
    let (run, block) = (&inputs[s].run, inputs[s].next_block);
    let end = run.block_end(block);
    inputs.iter().enumerate().filter(|(i, _)| *i != s).all(|(_, other)| match other.head() {
        None => true,
        // Whatever `other` has left is at or after its head.
        Some((k, _)) => match end {
            BlockEnd::Below(end) => end <= k,
            BlockEnd::AtMost(last) => last < k,
        },
    })
}
