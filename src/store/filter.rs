//! The blob filter: an in-memory Bloom filter (the `fastbloom` crate) of every blob id the
//! store holds, asked before the `blobs` table whenever a put wants to know whether its content
//! is new.
//!
//! Why: nearly every put of a harvest is of new content, and the table's answer — a search of
//! the memtable's skip list and of each table file's own filter — was about 12% of an ingest's
//! time (docs/BENCHMARKS.md). The filter answers "not held" for all but about 1% of new ids in
//! tens of nanoseconds; "maybe" still goes to the table, so a false positive costs only the
//! lookup the store made before. Nothing is ever decided on a "maybe", so the filter may hold
//! ids whose rows `gc` has since removed.
//!
//! The rule that makes a "no" true: an id is inserted before its row can exist (before it turns
//! pending or is committed on its own), and a store it did not create empty is scanned from a
//! snapshot taken after the filter began taking inserts. Until that scan is done, every question
//! goes to the table. The scan runs on a thread of its own, started only once a process has
//! asked [`SCAN_AFTER`] questions: a short poll of a large store would not win back the scan.
//!
//! Capacity: fastbloom filters have a fixed size, so this is a list of them, each twice the
//! size of the one before; inserts go to the last, a question asks each (at most a few).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

use fastbloom::AtomicBloomFilter;

use super::blob::BlobId;
use super::table::Table;

/// The false-positive rate each part is sized for.
const FALSE_POSITIVES: f64 = 0.01;

/// The capacity of the first part, when the store holds fewer blobs than this: 1.2 MB.
const FIRST_PART: usize = 1 << 20;

/// Questions asked of a store not created empty by this process before its blob ids are
/// scanned: about a millisecond of table lookups, against a scan of every blob row.
pub(super) const SCAN_AFTER: u32 = 1024;

/// See the module docs.
pub(super) struct BlobFilter {
    parts: RwLock<Vec<Part>>,
    /// Every id the store holds is in `parts`.
    ready: AtomicBool,
    /// Questions asked before `ready`, until the scan is started.
    asked: AtomicU32,
    scan: Mutex<Option<Scan>>,
}

struct Part {
    bloom: AtomicBloomFilter,
    capacity: usize,
    items: AtomicUsize,
}

impl Part {
    fn new(capacity: usize) -> Part {
        let bloom = AtomicBloomFilter::with_false_pos(FALSE_POSITIVES).expected_items(capacity);
        Part { bloom, capacity, items: AtomicUsize::new(0) }
    }
}

/// The scanning thread, and how to stop it (the store is closing).
struct Scan {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

/// The filter's hash of an id: its first eight bytes. A sha-256 is uniform already, and content
/// chosen to collide here only sends its puts to the table, as before the filter.
fn hash(id: &BlobId) -> u64 {
    let mut first = [0u8; 8];
    first.copy_from_slice(&id.0[..8]);
    u64::from_le_bytes(first)
}

impl BlobFilter {
    /// A filter for a store holding about `held` blobs; `empty`: it holds none, so the filter is
    /// complete from the start.
    pub(super) fn new(held: usize, empty: bool) -> BlobFilter {
        BlobFilter {
            parts: RwLock::new(vec![Part::new(held.saturating_mul(2).max(FIRST_PART))]),
            ready: AtomicBool::new(empty),
            asked: AtomicU32::new(0),
            scan: Mutex::new(None),
        }
    }

    /// Records that the store may hold `id` from now on. Called before its row can exist.
    pub(super) fn insert(&self, id: &BlobId) {
        let h = hash(id);
        {
            let parts = self.parts.read().unwrap_or_else(|p| p.into_inner());
            let last = parts.last().expect("a filter has a part");
            if last.items.fetch_add(1, Ordering::Relaxed) < last.capacity {
                last.bloom.insert_hash(h);
                return;
            }
        }
        let mut parts = self.parts.write().unwrap_or_else(|p| p.into_inner());
        let last = parts.last().expect("a filter has a part");
        if last.items.load(Ordering::Relaxed) >= last.capacity {
            let capacity = last.capacity.saturating_mul(2);
            parts.push(Part::new(capacity));
        }
        let last = parts.last().expect("a filter has a part");
        last.items.fetch_add(1, Ordering::Relaxed);
        last.bloom.insert_hash(h);
    }

    /// `false` when the store certainly holds no row of `id`; `true` when it may (ask the
    /// table). The first questions of a store not created empty start the scan of `blobs`.
    pub(super) fn may_hold(self: &Arc<Self>, id: &BlobId, blobs: &Table) -> bool {
        if !self.ready.load(Ordering::Acquire) {
            if self.asked.fetch_add(1, Ordering::Relaxed) == SCAN_AFTER {
                self.start_scan(blobs);
            }
            return true;
        }
        let h = hash(id);
        self.parts.read().unwrap_or_else(|p| p.into_inner()).iter().any(|p| p.bloom.contains_hash(h))
    }

    /// Whether every id the store holds is in the filter.
    #[cfg(test)]
    pub(super) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Inserts every blob id of a snapshot of `blobs` taken now, on a thread, then marks the
    /// filter ready. Ids put meanwhile are inserted by their puts.
    fn start_scan(self: &Arc<Self>, blobs: &Table) {
        let mut slot = self.scan.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_some() {
            return;
        }
        // The snapshot is taken here, after the filter began taking inserts (at open).
        let keys = blobs.iter().keys();
        let stop = Arc::new(AtomicBool::new(false));
        let (this, stopping) = (Arc::clone(self), Arc::clone(&stop));
        let spawned = std::thread::Builder::new().name("store-filter".into()).spawn(move || this.fill(keys, &stopping));
        match spawned {
            Ok(thread) => *slot = Some(Scan { stop, thread }),
            Err(e) => tracing::warn!(error = %e, "could not start the blob filter's scan; puts ask the table"),
        }
    }

    /// The scan: every id of `keys`, then ready, unless stopped or a read fails (then the
    /// table keeps being asked).
    fn fill(&self, keys: impl Iterator<Item = Result<super::table::Bytes, super::StoreError>>, stop: &AtomicBool) {
        for (n, key) in keys.enumerate() {
            if n % 4096 == 0 && stop.load(Ordering::Relaxed) {
                return;
            }
            match key.map(|k| <[u8; 32]>::try_from(k.as_ref())) {
                Ok(Ok(id)) => self.insert(&BlobId(id)),
                // Not a blob id: `verify` reports it; the filter cannot miss it, as no put asks.
                Ok(Err(_)) => {}
                Err(e) => {
                    tracing::warn!(error = %crate::error::chain(&e), "the blob filter's scan failed; puts ask the table");
                    return;
                }
            }
        }
        self.ready.store(true, Ordering::Release);
    }

    /// Stops a scan still running and waits for it (the store is closing: the scan holds the
    /// database open).
    pub(super) fn stop(&self) {
        let scan = self.scan.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(Scan { stop, thread }) = scan {
            stop.store(true, Ordering::Relaxed);
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Expected, Store, StoreOptions};

    /// A new store's filter is complete at once; a reopened store's is filled by its scan once
    /// puts have asked enough, and until then every put asks the table. Either way content the
    /// store holds is found, and new content is not mistaken for it.
    #[test]
    fn a_reopened_store_scans_its_blob_ids_once_asked_enough_and_finds_them_all() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let content = |i: u32| format!("content {i}").into_bytes();
        {
            let store = Store::open_with(&path, &StoreOptions::small()).unwrap();
            assert!(store.inner.filter.is_ready(), "a new store holds no blob");
            for i in 0..100 {
                assert!(!store.put(&content(i)[..], &Expected::none()).unwrap().deduplicated);
            }
            store.flush().unwrap();
        }
        let store = Store::open_with(&path, &StoreOptions::small()).unwrap();
        assert!(!store.inner.filter.is_ready());
        for i in 0..100 {
            assert!(store.put(&content(i)[..], &Expected::none()).unwrap().deduplicated, "blob {i}");
        }
        for i in 100..100 + SCAN_AFTER + 1 {
            assert!(!store.put(&content(i)[..], &Expected::none()).unwrap().deduplicated, "blob {i}");
        }
        let waited = std::time::Instant::now();
        while !store.inner.filter.is_ready() {
            assert!(waited.elapsed() < std::time::Duration::from_secs(30), "the scan did not finish");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        for i in (0..100).chain(100..100 + SCAN_AFTER + 1) {
            assert!(store.put(&content(i)[..], &Expected::none()).unwrap().deduplicated, "blob {i}");
        }
        assert!(!store.put(&b"new"[..], &Expected::none()).unwrap().deduplicated);
        assert!(store.verify().unwrap().is_clean());
    }
}
