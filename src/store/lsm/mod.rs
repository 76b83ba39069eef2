//! A small log-structured merge tree: where the store keeps its high-volume tables (records,
//! blob rows, the provenance indexes and the change log) since store format 8.
//!
//! # Why not sled rows
//! sled 0.34 writes every row several times over — as a log fragment, again in each
//! consolidated page — and keeps the old copies until it cleans their segments. Measured on
//! this machine (docs/STORE.md, "Format 8"): a row of an 80-byte URI key and a 12-byte value
//! takes 428 bytes of disk, a 9-byte key 111; a record with its blob row and its share of the
//! change log took 2,960 bytes and 40 µs. Ten million records would be 30 GB and four minutes
//! per million. Here a record costs what its compressed bytes cost, about a tenth of that.
//!
//! # Shape
//! - Writes go to the **write-ahead log** (synced) and then to the **memtable**, a sorted map in
//!   memory; sled commits, in the same batch as the store's other rows, the log's new end
//!   ([`Lsm::commit`]). sled's batch is atomic, so a crash leaves either the whole batch — its
//!   counters and source state in sled, its records in the log up to the end sled names — or
//!   none of it (see [`wal`]).
//! - A full memtable is **frozen** and a background thread writes it out as a **run**: an
//!   immutable file of sorted, prefix-compressed, lz4-compressed blocks with an index and a
//!   Bloom filter ([`run`]). The run list and where replay starts live in sled (the manifest),
//!   updated only after the run is synced.
//! - Another background thread **merges** runs of similar size (four of a tier become one of the
//!   next), so a store of N records has O(log N) runs and each byte is rewritten a few times.
//!   Deletions are entries until a merge reaches the oldest run.
//! - A read looks at the memtable, the frozen memtables and the runs, newest first; a range
//!   merges all of them ([`merge`]). Iterators hold no lock: they copy the memtable a chunk at a
//!   time and keep the runs they read open, so compaction never waits for a reader.
//!
//! Keys and values are opaque bytes; the store's tables are key prefixes, as in sled.

mod background;
mod encoding;
mod memtable;
mod merge;
mod run;
mod wal;

use std::fs;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use memtable::Memtable;
pub(super) use merge::LsmIter;
use run::Run;
use wal::Wal;

use super::codec;
use super::error::StoreError;

/// An entry's state: a value, or `None` for a deletion that hides older values.
pub(super) type Slot = Option<Vec<u8>>;

/// A key and its value.
pub(super) type Entry = (Vec<u8>, Vec<u8>);

/// What a compare-and-swap found when it did not write: the current value.
type Swap = Result<(), Option<Vec<u8>>>;

/// A position in the write-ahead log: the end of the last committed frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Pos {
    generation: u64,
    offset: u64,
}

impl Pos {
    fn to_bytes(self) -> [u8; 16] {
        let mut b = [0; 16];
        b[..8].copy_from_slice(&self.generation.to_be_bytes());
        b[8..].copy_from_slice(&self.offset.to_be_bytes());
        b
    }

    fn from_bytes(b: &[u8]) -> Option<Pos> {
        let b: &[u8; 16] = b.try_into().ok()?;
        let word = |r: std::ops::Range<usize>| u64::from_be_bytes(b[r].try_into().expect("eight bytes"));
        Some(Pos { generation: word(0..8), offset: word(8..16) })
    }
}

/// Tuning; the defaults suit the service.
#[derive(Debug, Clone)]
pub(super) struct LsmOptions {
    /// A memtable is frozen and written out once its entries take about this much memory.
    pub(super) memtable_bytes: usize,
    /// Commits wait while this many frozen memtables are waiting to be written out.
    pub(super) max_frozen: usize,
}

impl Default for LsmOptions {
    fn default() -> Self {
        LsmOptions { memtable_bytes: 32 << 20, max_frozen: 2 }
    }
}

/// The sled rows the engine keeps beside the store's own (full keys, in the meta table).
#[derive(Debug, Clone)]
pub(super) struct MetaKeys {
    /// The write-ahead log's committed end ([`Pos`]).
    pub(super) wal: Vec<u8>,
    /// The [`Manifest`].
    pub(super) manifest: Vec<u8>,
}

/// What survives a restart besides the files: the runs, newest first, and where replay starts.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Manifest {
    next_id: u64,
    /// The first WAL generation whose writes are not all in runs.
    wal_start: u64,
    /// `(id, weight)`, newest first.
    runs: Vec<(u64, u64)>,
}

/// What the engine holds, for `store stats`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct LsmStats {
    pub(super) runs: usize,
    pub(super) run_entries: u64,
    pub(super) run_bytes: u64,
    pub(super) memtable_entries: usize,
    pub(super) memtable_bytes: usize,
    /// Run indexes and Bloom filters, kept in memory.
    pub(super) resident_bytes: usize,
}

/// The engine. Dropping it stops the background threads (an unfinished merge is abandoned;
/// the write-ahead log keeps whatever is still only in memory).
pub(super) struct Lsm {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

struct Shared {
    dir: PathBuf,
    tree: sled::Tree,
    keys: MetaKeys,
    opts: LsmOptions,
    active: RwLock<Active>,
    /// Frozen memtables and runs. Replaced whole, under `active`'s write lock when a memtable
    /// is frozen, so a reader that takes `active` then `levels` never misses the entries in
    /// between.
    levels: RwLock<Arc<Levels>>,
    /// The commit lock: one commit, or one freeze, at a time.
    wal: Mutex<WalState>,
    /// Serialises manifest updates (the flusher's and the merger's).
    manifest: Mutex<Manifest>,
    bg: Mutex<Background>,
    /// Signalled when there is work for the background threads, or room for commits.
    wake: Condvar,
    /// Cleared when the flusher exits, so commits waiting for room give up.
    flusher_alive: AtomicBool,
}

struct WalState {
    wal: Wal,
    /// Set when the log could not be cut back after a failed commit: its tail no longer
    /// matches what sled committed, so nothing more may be appended until the store reopens.
    poisoned: Option<String>,
}

struct Active {
    mem: Memtable,
    /// How many times the memtable has been frozen: iterators notice and re-seek.
    rotations: u64,
}

#[derive(Clone, Default)]
struct Levels {
    /// Newest first.
    frozen: Vec<Arc<Frozen>>,
    /// Newest first; every run is older than every frozen memtable.
    runs: Vec<Arc<Run>>,
}

struct Frozen {
    mem: Memtable,
    /// The last WAL generation holding its writes.
    generation: u64,
}

#[derive(Default)]
struct Background {
    shutdown: bool,
    merge_wanted: bool,
    /// Ids of the runs the mergers are merging (see `background`).
    merging: Vec<u64>,
    /// The last failure to write a run out, until one succeeds.
    error: Option<String>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

impl Lsm {
    /// Opens the engine in `dir` (created if missing): the runs the manifest names, the
    /// write-ahead log replayed up to the end sled committed. Files no manifest names — a run
    /// a crash left unregistered, log generations already in runs or never committed — are
    /// removed.
    pub(super) fn open(dir: &Path, tree: sled::Tree, keys: MetaKeys, opts: LsmOptions) -> Result<Lsm, StoreError> {
        fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
        let manifest = match tree.get(&keys.manifest)? {
            Some(v) => codec::decode("lsm manifest", &v)?,
            None => Manifest { next_id: 1, wal_start: 1, runs: Vec::new() },
        };
        let runs = open_runs(dir, &manifest)?;
        let committed = match tree.get(&keys.wal)? {
            Some(v) => Pos::from_bytes(&v).ok_or_else(|| StoreError::corrupt("lsm log position", hex::encode(&v)))?,
            None => Pos { generation: manifest.wal_start, offset: 0 },
        }
        .max(Pos { generation: manifest.wal_start, offset: 0 });
        let mem = replay(dir, manifest.wal_start, committed)?;
        let wal = Wal::open(dir, committed.generation, committed.offset)?;
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            tree,
            keys,
            opts,
            active: RwLock::new(Active { mem, rotations: 0 }),
            levels: RwLock::new(Arc::new(Levels { frozen: Vec::new(), runs })),
            wal: Mutex::new(WalState { wal, poisoned: None }),
            manifest: Mutex::new(manifest),
            bg: Mutex::new(Background::default()),
            wake: Condvar::new(),
            flusher_alive: AtomicBool::new(true),
        });
        let threads = background::spawn(&shared)?;
        let lsm = Lsm { shared, threads: Mutex::new(threads) };
        lsm.shared.request_merge();
        Ok(lsm)
    }

    /// The value of `key`.
    pub(super) fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.shared.get(key)
    }

    /// The greatest key in `lo..=hi` that has a value, with the value.
    pub(super) fn floor(&self, lo: &[u8], hi: &[u8]) -> Result<Option<Entry>, StoreError> {
        self.shared.floor(lo, hi)
    }

    /// Entries with `from <= key < end` (`end = None`: to the last key), in key order.
    pub(super) fn range(&self, from: &[u8], end: Option<&[u8]>) -> LsmIter {
        LsmIter::new(self.shared.clone(), from, end)
    }

    /// Makes `writes` durable and visible, together with sled `batch` (which may hold the
    /// store's other rows): the log first, synced; then sled's batch with the log's new end;
    /// then the memtable. A failure leaves neither.
    ///
    /// # Errors
    /// [`StoreError::Io`] writing the log, or when runs cannot be written out and the
    /// memtables are full; [`StoreError::Database`] from sled.
    pub(super) fn commit(&self, writes: Vec<(Vec<u8>, Slot)>, batch: sled::Batch) -> Result<(), StoreError> {
        self.shared.commit(writes, batch, None)
    }

    /// Sets `key` to `new` if its value is `old` (both `None`: absent), atomically with respect
    /// to every other commit. `Ok(Err(current))` when it was not.
    pub(super) fn compare_and_swap(&self, key: &[u8], old: Option<&[u8]>, new: Slot) -> Result<Swap, StoreError> {
        let mut outcome = Ok(());
        self.shared.commit(vec![(key.to_vec(), new)], sled::Batch::default(), Some((old, &mut outcome)))?;
        Ok(outcome)
    }

    /// Re-reads every run in full, checking checksums and order.
    pub(super) fn verify(&self) -> Vec<StoreError> {
        let levels = read(&self.shared.levels).clone();
        levels.runs.iter().filter_map(|r| r.verify().err()).collect()
    }

    /// Bytes of the engine's files: runs and write-ahead log.
    pub(super) fn disk_bytes(&self) -> Result<u64, StoreError> {
        let dir = &self.shared.dir;
        let mut total = 0;
        for entry in fs::read_dir(dir).map_err(|e| StoreError::io(dir, e))? {
            let meta = entry.and_then(|e| e.metadata()).map_err(|e| StoreError::io(dir, e))?;
            total += meta.len();
        }
        Ok(total)
    }

    pub(super) fn stats(&self) -> LsmStats {
        let (memtable_entries, mut memtable_bytes) = {
            let a = read(&self.shared.active);
            (a.mem.len(), a.mem.bytes())
        };
        let levels = read(&self.shared.levels).clone();
        let mut s = LsmStats { memtable_entries, ..LsmStats::default() };
        for f in &levels.frozen {
            s.memtable_entries += f.mem.len();
            memtable_bytes += f.mem.bytes();
        }
        s.memtable_bytes = memtable_bytes;
        s.runs = levels.runs.len();
        for r in &levels.runs {
            s.run_entries += r.entries;
            s.run_bytes += r.bytes;
            s.resident_bytes += r.resident_bytes();
        }
        s
    }

    /// Writes `entries` (in key order, each key once) as a run older than every other: how the
    /// rows of a store from before the engine move in (see `open.rs`, the upgrade to format 8).
    pub(super) fn load_oldest(
        &self,
        entries: impl Iterator<Item = Result<Entry, StoreError>>,
        expected: usize,
    ) -> Result<u64, StoreError> {
        let s = &self.shared;
        let mut w = run::RunWriter::create(&s.dir, background::next_id(s), 1, expected)?;
        for e in entries {
            if let Err(e) = e.and_then(|(k, v)| w.add(&k, &Some(v))) {
                w.abandon();
                return Err(e);
            }
        }
        let n = w.entries();
        if n == 0 {
            w.abandon();
            return Ok(0);
        }
        // Weighed as the memtables it would have taken, so merges treat it by its size.
        let weight = (w.raw_bytes() / s.opts.memtable_bytes.max(1) as u64).max(1);
        let run = Arc::new(w.finish_with_weight(weight)?);
        background::install(s, None, None, |runs| {
            runs.push(run);
            Ok(())
        })?;
        Ok(n)
    }

    /// Waits until no frozen memtable is waiting and no merge is due, at most `limit`: for
    /// benchmarks and tests that measure a settled engine.
    pub(super) fn settle(&self, limit: Duration) -> bool {
        self.shared.settle(limit)
    }
}

impl Lsm {
    /// Stops the background threads (an unfinished merge is abandoned) and waits for them.
    /// The store calls it when it closes, so no file of the engine is written once the store's
    /// lock is released, even while a reader elsewhere still holds the engine. Reads keep
    /// working; commits that would need a flush fail.
    pub(super) fn shutdown(&self) {
        lock(&self.shared.bg).shutdown = true;
        self.shared.wake.notify_all();
        for t in lock(&self.threads).drain(..) {
            if t.join().is_err() {
                tracing::warn!("a store compaction thread panicked");
            }
        }
    }
}

impl Drop for Lsm {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The manifest's runs, and the removal of run files it does not name.
fn open_runs(dir: &Path, manifest: &Manifest) -> Result<Vec<Arc<Run>>, StoreError> {
    let (ids, leftovers) = run::list(dir)?;
    for path in leftovers {
        fs::remove_file(&path).map_err(|e| StoreError::io(&path, e))?;
    }
    for id in ids.iter().filter(|id| !manifest.runs.iter().any(|(r, _)| r == *id)) {
        let path = run::path(dir, *id);
        fs::remove_file(&path).map_err(|e| StoreError::io(&path, e))?;
    }
    manifest.runs.iter().map(|&(id, weight)| Run::open(dir, id, weight).map(Arc::new)).collect()
}

/// The memtable as it was: every generation from `start` on, the last up to `committed`.
/// Generations before `start` are in runs, those after `committed` were never committed; both
/// are removed.
fn replay(dir: &Path, start: u64, committed: Pos) -> Result<Memtable, StoreError> {
    let mut mem = Memtable::default();
    for generation in wal::generations(dir)? {
        if generation < start || generation > committed.generation {
            let path = wal::path(dir, generation);
            fs::remove_file(&path).map_err(|e| StoreError::io(&path, e))?;
        }
    }
    for generation in start..=committed.generation {
        let len = if generation == committed.generation {
            committed.offset
        } else {
            let path = wal::path(dir, generation);
            fs::metadata(&path).map_err(|e| StoreError::io(&path, e))?.len()
        };
        wal::replay(dir, generation, len, &mut mem)?;
    }
    Ok(mem)
}

impl Shared {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let levels = {
            let active = read(&self.active);
            if let Some(slot) = active.mem.get(key) {
                return Ok(slot.clone());
            }
            read(&self.levels).clone()
        };
        for f in &levels.frozen {
            if let Some(slot) = f.mem.get(key) {
                return Ok(slot.clone());
            }
        }
        let hash = encoding::key_hash(key);
        for r in &levels.runs {
            if let Some(slot) = r.get(key, hash)? {
                return Ok(slot);
            }
        }
        Ok(None)
    }

    fn floor(&self, lo: &[u8], hi: &[u8]) -> Result<Option<Entry>, StoreError> {
        let mut hi: (Vec<u8>, bool) = (hi.to_vec(), true);
        // Each turn either returns or moves `hi` below a deleted key: bounded by the keys.
        loop {
            let bound = if hi.1 { Bound::Included(hi.0.as_slice()) } else { Bound::Excluded(hi.0.as_slice()) };
            let (mut best, levels) = {
                let active = read(&self.active);
                let best = active.mem.floor(lo, bound).map(|(k, v)| (k.to_vec(), v.clone()));
                (best, read(&self.levels).clone())
            };
            // Newest first, so on equal keys the first found wins.
            let mut consider = |cand: Option<(Vec<u8>, Slot)>| {
                if let Some(c) = cand
                    && best.as_ref().is_none_or(|b| c.0 > b.0)
                {
                    best = Some(c);
                }
            };
            for f in &levels.frozen {
                consider(f.mem.floor(lo, bound).map(|(k, v)| (k.to_vec(), v.clone())));
            }
            for r in &levels.runs {
                consider(r.floor(lo, bound)?);
            }
            match best {
                None => return Ok(None),
                Some((k, Some(v))) => return Ok(Some((k, v))),
                Some((k, None)) => hi = (k, false),
            }
        }
    }

    /// See [`Lsm::commit`]; with `cas`, the write happens only if the key's value is `cas.0`.
    fn commit(
        &self,
        writes: Vec<(Vec<u8>, Slot)>,
        mut batch: sled::Batch,
        cas: Option<(Option<&[u8]>, &mut Swap)>,
    ) -> Result<(), StoreError> {
        if writes.is_empty() {
            return Ok(self.tree.apply_batch(batch)?);
        }
        let mut w = lock(&self.wal);
        if let Some(why) = &w.poisoned {
            return Err(self.io_error(format!("the write-ahead log is unusable until the store is reopened: {why}")));
        }
        if let Some((expected, outcome)) = cas {
            let current = self.get(&writes[0].0)?;
            if current.as_deref() != expected {
                *outcome = Err(current);
                return Ok(());
            }
        }
        self.wait_for_room()?;
        let before = w.wal.len;
        let end = w.wal.append(&writes)?;
        batch.insert(self.keys.wal.as_slice(), &end.to_bytes()[..]);
        if let Err(e) = self.tree.apply_batch(batch) {
            if let Err(cut) = w.wal.rollback_to(before) {
                w.poisoned = Some(crate::error::chain(&cut).to_string());
            }
            return Err(e.into());
        }
        let full = {
            let mut active = write(&self.active);
            for (k, v) in writes {
                active.mem.apply(k, v);
            }
            active.mem.bytes() >= self.opts.memtable_bytes
        };
        if full {
            self.freeze(&mut w);
        }
        Ok(())
    }

    /// Starts a new log generation and hands the memtable to the flusher. A failure to start
    /// the generation is logged and tried again at the next commit: nothing is lost, the
    /// memtable only grows.
    fn freeze(&self, w: &mut WalState) {
        let generation = w.wal.generation;
        if let Err(e) = w.wal.rotate() {
            tracing::warn!(error = %crate::error::chain(&e), "could not start a new write-ahead log file");
            return;
        }
        {
            let mut active = write(&self.active);
            let mem = std::mem::take(&mut active.mem);
            active.rotations += 1;
            let mut levels = write(&self.levels);
            let mut next = (**levels).clone();
            next.frozen.insert(0, Arc::new(Frozen { mem, generation }));
            *levels = Arc::new(next);
        }
        self.notify();
    }

    /// Waits while the flusher is behind; fails when it cannot write runs at all.
    fn wait_for_room(&self) -> Result<(), StoreError> {
        let mut bg = lock(&self.bg);
        loop {
            if read(&self.levels).frozen.len() < self.opts.max_frozen {
                return Ok(());
            }
            if let Some(e) = &bg.error {
                return Err(self.io_error(format!("memory is full and runs cannot be written: {e}")));
            }
            if !self.flusher_alive.load(Ordering::Acquire) || bg.shutdown {
                return Err(self.io_error("memory is full and the store is closing".into()));
            }
            bg = self.wake.wait_timeout(bg, Duration::from_millis(100)).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    fn io_error(&self, why: String) -> StoreError {
        StoreError::io(&self.dir, std::io::Error::other(why))
    }

    fn request_merge(&self) {
        lock(&self.bg).merge_wanted = true;
        self.wake.notify_all();
    }

    /// Wakes every waiter. Taking the lock the waiters check their condition under means a
    /// waiter that has just found no room is already waiting when this runs: no wake-up is lost.
    fn notify(&self) {
        let _bg = lock(&self.bg);
        self.wake.notify_all();
    }

    fn settle(&self, limit: Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let idle = {
                let bg = lock(&self.bg);
                !bg.merge_wanted && read(&self.levels).frozen.is_empty() && !background::merge_due(&self.levels)
            };
            if idle {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[cfg(test)]
mod tests;
