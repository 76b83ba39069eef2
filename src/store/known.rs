//! Which blobs the store might hold: a Bloom filter over blob ids, so that a put of new
//! content — nearly every put of a harvest — does not have to ask sled.
//!
//! Why: sled 0.34 holds a process-wide lock for the whole of an `apply_batch`, and once any
//! batch has been applied every read waits for it. A harvest applies a batch of records about
//! half of the time, so a put's dedup read stalled the async fetch workers behind each batch.
//! In back-to-back passes of `scripts/bench-harvest.sh`, `vmstat` showed both CPUs idle 16–20%
//! of the time with the read and 5–10% without (see docs/HARVEST.md, "Speed"). The filter
//! answers "certainly not stored" from memory; "maybe" still reads sled.
//!
//! One rule makes it safe: **an id is added before its row can exist, and again once its row
//! is in sled** — before a pack row becomes pending and when its batch has committed, before
//! and after a file blob's row is written. A filter is filled by a scan of the blob rows on a
//! background thread, started by the first put (read-only commands never pay for it), and
//! until the scan is done it answers "maybe" to everything. Every row is then covered: it was
//! in sled when the scan passed (the scan found it), or it landed later (its second add came
//! after the filter's generation began, so it reached this filter). Ids added before the
//! filter exists (while the scan counts rows, to size it) are kept in a list and moved in. A
//! removed blob stays in the filter; that false positive costs one read.
//!
//! The filter is sized for twice the rows found and at least [`MIN_ITEMS`], at a 1% false
//! positive rate (~1.2 bytes per id). When more ids than that have been added, a new
//! generation is built the same way at the new size; meanwhile every answer is "maybe". The
//! second add is what makes that safe: an id whose first add reached only the old generation
//! and whose row landed after the new scan passed its place reaches the new one on its second.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};

use fastbloom::AtomicBloomFilter;

use super::blob::BlobId;
use super::error::StoreError;
use super::table::Table;

/// The least number of ids a filter is sized for: 1.2 MB, so a small store needs no rebuild
/// for its first million blobs.
const MIN_ITEMS: usize = 1 << 20;

/// False-positive rate the filter is sized for.
const FALSE_POSITIVES: f64 = 0.01;

/// How many rows the scan reads between checks that the store is still open.
const SCAN_STEP: usize = 4096;

/// The blob ids the store might hold. See the module docs.
#[derive(Default)]
pub(super) struct Known {
    /// `None` until the first put starts a build.
    current: RwLock<Option<Arc<Generation>>>,
}

/// One filter and the scan that fills it.
#[derive(Default)]
struct Generation {
    filter: OnceLock<Filter>,
    /// Ids added before `filter` exists; moved into it when it is made.
    early: Mutex<Vec<BlobId>>,
    /// Set once the scan has added every row that existed when it ran.
    complete: AtomicBool,
    /// Ids added or scanned.
    count: AtomicUsize,
}

struct Filter {
    bloom: AtomicBloomFilter,
    /// The ids it was sized for.
    capacity: usize,
}

impl Known {
    /// False only when `id` is certainly not stored; starts the first build.
    pub(super) fn maybe_stored(&self, id: &BlobId, blobs: &Table) -> bool {
        let generation = self.generation(blobs);
        match generation.filter.get() {
            Some(f) if generation.complete.load(Ordering::Acquire) => f.bloom.contains_hash(hash(id)),
            _ => true,
        }
    }

    /// Records `id`: call it before its row can be read, and again once the row is in sled.
    pub(super) fn add(&self, id: &BlobId, blobs: &Table) {
        self.generation(blobs);
        // Under the read lock, so that once a rebuild has swapped generations no add can
        // still reach the old one: every later second add reaches the new generation.
        let current = self.current.read().unwrap_or_else(|p| p.into_inner());
        let Some(generation) = current.as_ref() else { return };
        if generation.add(id) {
            let full = Arc::clone(generation);
            drop(current);
            self.rebuild(&full, blobs);
        }
    }

    /// The current generation, starting the first one if there is none.
    fn generation(&self, blobs: &Table) -> Arc<Generation> {
        if let Some(g) = self.current.read().unwrap_or_else(|p| p.into_inner()).as_ref() {
            return Arc::clone(g);
        }
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        if let Some(g) = current.as_ref() {
            return Arc::clone(g);
        }
        let g = Arc::new(Generation::default());
        *current = Some(Arc::clone(&g));
        start_build(&g, blobs);
        g
    }

    /// Replaces the generation `full` with an empty one and builds that.
    fn rebuild(&self, full: &Arc<Generation>, blobs: &Table) {
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        if !current.as_ref().is_some_and(|g| Arc::ptr_eq(g, full)) {
            return; // replaced already
        }
        let g = Arc::new(Generation::default());
        *current = Some(Arc::clone(&g));
        start_build(&g, blobs);
        tracing::debug!(ids = full.count.load(Ordering::Relaxed), "blob filter full: rebuilding it larger");
    }

    /// True once the current generation's scan has completed.
    #[cfg(test)]
    fn is_complete(&self) -> bool {
        let current = self.current.read().unwrap_or_else(|p| p.into_inner());
        current.as_ref().is_some_and(|g| g.complete.load(Ordering::Acquire))
    }
}

impl Generation {
    /// Adds `id`; true when this made the filter hold more ids than it was sized for.
    fn add(&self, id: &BlobId) -> bool {
        let n = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(f) = self.filter.get() {
            f.bloom.insert_hash(hash(id));
            return n == f.capacity + 1;
        }
        let mut early = self.early.lock().unwrap_or_else(|p| p.into_inner());
        // The filter may have been made while we waited for the list.
        match self.filter.get() {
            Some(f) => {
                f.bloom.insert_hash(hash(id));
            }
            None => early.push(*id),
        }
        false
    }

    /// Makes the filter for `rows` existing rows and moves the early ids into it.
    fn make_filter(&self, rows: usize) {
        let capacity = rows.saturating_mul(2).max(MIN_ITEMS);
        let bloom = AtomicBloomFilter::with_false_pos(FALSE_POSITIVES).expected_items(capacity);
        let mut early = self.early.lock().unwrap_or_else(|p| p.into_inner());
        for id in early.drain(..) {
            bloom.insert_hash(hash(&id));
        }
        self.count.fetch_add(rows, Ordering::Relaxed);
        let _ = self.filter.set(Filter { bloom, capacity });
    }

    /// A generation whose scan failed stays incomplete — every answer "maybe" — but gets a
    /// filter, so ids added meanwhile do not pile up in the early list.
    fn give_up(&self) {
        if self.filter.get().is_none() {
            self.make_filter(0);
        }
    }
}

/// Counts the blob rows, makes the filter, adds every row, then marks the generation
/// complete; on a thread of its own. It holds the generation only between steps and stops
/// once the store is closed (the generation dropped), so its handle on sled does not outlive
/// the store by more than one step.
fn start_build(generation: &Arc<Generation>, blobs: &Table) {
    let weak = Arc::downgrade(generation);
    let blobs = blobs.clone();
    let spawned = std::thread::Builder::new().name("blob-filter".into()).spawn(move || {
        if let Err(e) = build(&weak, &blobs) {
            tracing::warn!(error = %crate::error::chain(&e), "could not build the blob filter; puts read the store instead");
            weak.upgrade().inspect(|g| g.give_up());
        }
    });
    if let Err(e) = spawned {
        tracing::warn!(error = %crate::error::chain(&e), "could not start building the blob filter; puts read the store instead");
        generation.give_up();
    }
}

fn build(weak: &Weak<Generation>, blobs: &Table) -> Result<(), StoreError> {
    let Some(rows) = scan(weak, blobs, |_, _| {})? else { return Ok(()) };
    match weak.upgrade() {
        Some(g) => g.make_filter(rows),
        None => return Ok(()),
    }
    let add = |g: &Generation, id: &BlobId| {
        if let Some(f) = g.filter.get() {
            f.bloom.insert_hash(hash(id));
        }
    };
    if scan(weak, blobs, add)?.is_some()
        && let Some(g) = weak.upgrade()
    {
        g.complete.store(true, Ordering::Release);
    }
    Ok(())
}

/// Calls `each` for every blob id, [`SCAN_STEP`] ids at a time; the number of rows, or `None`
/// when the store was closed.
fn scan(
    weak: &Weak<Generation>,
    blobs: &Table,
    each: impl Fn(&Generation, &BlobId),
) -> Result<Option<usize>, StoreError> {
    let mut n = 0;
    let mut step = Vec::with_capacity(SCAN_STEP);
    let mut keys = blobs.iter().keys();
    loop {
        step.clear();
        let mut read = 0;
        for key in keys.by_ref().take(SCAN_STEP) {
            read += 1;
            // Rows whose key is not an id are `verify`'s business, not the filter's.
            if let Ok(id) = <[u8; 32]>::try_from(&key?[..]) {
                step.push(BlobId(id));
            }
        }
        let Some(g) = weak.upgrade() else { return Ok(None) };
        step.iter().for_each(|id| each(&g, id));
        n += step.len();
        if read < SCAN_STEP {
            return Ok(Some(n));
        }
    }
}

/// A blob id is a sha-256: its first eight bytes are already a uniform hash.
fn hash(id: &BlobId) -> u64 {
    let mut first = [0; 8];
    first.copy_from_slice(&id.0[..8]);
    u64::from_le_bytes(first)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// A blob table holding the rows of ids `id(0, 0)..id(rows, 0)`.
    fn tree(rows: u64) -> (sled::Db, Table) {
        let db = sled::Config::new().temporary(true).open().expect("temporary sled");
        let tree = db.open_tree("main").expect("tree");
        let table = Table::new(&tree, b'b');
        for n in 0..rows {
            table.insert(id(n, 0).0, vec![1]).unwrap();
        }
        (db, table)
    }

    fn id(n: u64, salt: u8) -> BlobId {
        use sha2::Digest as _;
        BlobId(sha2::Sha256::digest([&n.to_le_bytes()[..], &[salt]].concat()).into())
    }

    /// Waits (at most 30 s) for the current build to complete.
    fn settle(known: &Known) {
        let start = Instant::now();
        while !known.is_complete() {
            assert!(start.elapsed() < Duration::from_secs(30), "the filter was never built");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn every_stored_and_added_id_is_maybe_and_most_new_ones_are_not() {
        let (_db, blobs) = tree(5_000);
        let known = Known::default();
        // The first call starts the scan on a thread, which on a loaded machine may finish
        // before the call looks: so only a "no" from an incomplete filter is wrong.
        let first = known.maybe_stored(&id(0, 9), &blobs);
        assert!(first || known.is_complete(), "until the scan is done, everything is maybe");
        settle(&known);
        for n in 0..1_000 {
            known.add(&id(n, 1), &blobs);
        }
        assert!((0..5_000).all(|n| known.maybe_stored(&id(n, 0), &blobs)), "a stored id was missed");
        assert!((0..1_000).all(|n| known.maybe_stored(&id(n, 1), &blobs)), "an added id was missed");
        let false_positives = (0..10_000).filter(|&n| known.maybe_stored(&id(n, 2), &blobs)).count();
        assert!(false_positives < 500, "{false_positives} of 10000 new ids were maybe");
    }

    #[test]
    fn ids_added_while_the_filter_is_built_are_kept() {
        let (_db, blobs) = tree(200_000);
        let known = Known::default();
        // The first add starts the build; the rest race its count and its fill.
        for n in 0..20_000 {
            known.add(&id(n, 1), &blobs);
        }
        settle(&known);
        assert!((0..20_000).all(|n| known.maybe_stored(&id(n, 1), &blobs)), "an id added during the build was missed");
        assert!((0..200_000).step_by(7).all(|n| known.maybe_stored(&id(n, 0), &blobs)));
    }

    #[test]
    fn a_full_filter_is_rebuilt_from_the_rows() {
        let (_db, blobs) = tree(10);
        let known = Known::default();
        known.add(&id(0, 0), &blobs);
        settle(&known);
        // A put whose row is still pending when the filter fills up.
        let late = id(7, 3);
        known.add(&late, &blobs);
        // One past the capacity starts a new generation, which scans the rows again; the
        // added ids had no rows, so only the rows' ids must be maybe afterwards.
        for n in 0..=MIN_ITEMS as u64 {
            known.add(&id(n, 1), &blobs);
        }
        settle(&known);
        let current = known.current.read().unwrap().clone().unwrap();
        assert!(current.count.load(Ordering::Relaxed) < 1_000, "still the full generation");
        assert!((0..10).all(|n| known.maybe_stored(&id(n, 0), &blobs)));
        // Its row lands after the new scan passed: the second add is what covers it.
        blobs.insert(late.0, vec![1]).unwrap();
        known.add(&late, &blobs);
        assert!(known.maybe_stored(&late, &blobs));
    }
}
