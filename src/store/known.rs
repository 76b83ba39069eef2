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
//! until that first scan is done every answer is "maybe". Every row is then covered: it was
//! in sled when the scan passed (the scan found it), or it landed later (its second add came
//! after the filter's generation began, so it reached this filter). Ids added before the
//! first filter exists (while the scan counts rows, to size it) are kept in a list and moved
//! in. A removed blob stays in the filter; that false positive costs one read.
//!
//! A filter is sized for twice the ids it starts with and at least [`MIN_ITEMS`], at
//! [`BITS_PER_ID`] bits per id (about 0.5% false positives); only an id's first add counts
//! towards that. It is a split-block Bloom filter (the layout Parquet specifies): an id's
//! eight bits all lie in one 32-byte block, so a check or an add touches one cache line
//! however large the filter grows. (fastbloom's filter, used before, spreads an id's seven
//! bits over the whole array: at 10 million ids, a put's check and two adds were 21 cache
//! misses, and the filter 14% of an ingest's time.)
//!
//! Once more ids than that have been added, a larger generation is built beside it, sized
//! from the count, by one scan at the lowest priority. **The full filter goes on answering**
//! while it is built: every add still reaches it, so it still holds every stored id, and only
//! its false positives creep up. (Answering "maybe" instead made every put read the store for
//! the length of a scan: in a 10-million-record ingest each rebuild cost its tenth of the run
//! 10–20% of its rate.) Adds reach both generations until the new one is complete and takes
//! over. The second add is what makes that safe: an id whose first add reached only the old
//! generation and whose row landed after the new scan passed its place reaches the new one on
//! its second.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, RwLockReadGuard, Weak};

use super::blob::BlobId;
use super::error::StoreError;
use super::table::Table;

/// The least number of ids a filter is sized for: 1.2 MB, so a small store needs no rebuild
/// for its first million blobs.
const MIN_ITEMS: usize = 1 << 20;

/// Bits of filter per id it is sized for: about 0.5% false positives when it holds that many.
const BITS_PER_ID: usize = 12;

/// How many rows the scan reads between checks that the store is still open.
const SCAN_STEP: usize = 4096;

/// The blob ids the store might hold. See the module docs.
#[derive(Default)]
pub(super) struct Known {
    generations: RwLock<Generations>,
}

#[derive(Default)]
struct Generations {
    /// Complete: the filter that answers. `None` until the first scan is done.
    answering: Option<Arc<Generation>>,
    /// Being filled by its scan; takes over from `answering` once complete. `None` until the
    /// first put, and while `answering` has room.
    building: Option<Arc<Generation>>,
}

impl Generations {
    fn all(&self) -> impl Iterator<Item = &Arc<Generation>> {
        self.answering.iter().chain(self.building.iter())
    }

    /// Whether the state must change before it can be used: nothing built yet, or a build
    /// complete.
    fn stale(&self) -> bool {
        match &self.building {
            None => self.answering.is_none(),
            Some(g) => g.complete.load(Ordering::Acquire),
        }
    }
}

/// One filter and the scan that fills it.
#[derive(Default)]
struct Generation {
    filter: OnceLock<Filter>,
    /// Ids added before `filter` exists; moved into it when it is made.
    early: Mutex<Vec<BlobId>>,
    /// Set once the scan has added every row that existed when it ran.
    complete: AtomicBool,
    /// Ids added (first adds only) or scanned.
    count: AtomicUsize,
}

struct Filter {
    bloom: SplitBlockBloom,
    /// The ids it was sized for.
    capacity: usize,
}

/// A split-block Bloom filter that threads add to concurrently: blocks of eight 32-bit words,
/// an id setting one bit in each word of one block (Parquet's "split block Bloom filter").
struct SplitBlockBloom {
    blocks: Vec<Block>,
}

/// One block, aligned so that it never straddles two cache lines.
#[repr(align(32))]
#[derive(Default)]
struct Block([AtomicU32; 8]);

/// The multipliers that pick an id's bit in each word (from the Parquet specification).
const SALT: [u32; 8] =
    [0x47b6_137b, 0x4497_4d91, 0x8824_ad5b, 0xa2b7_289d, 0x7054_95c7, 0x2df1_424b, 0x9efc_4947, 0x5c6b_fb31];

impl SplitBlockBloom {
    fn with_capacity(ids: usize) -> Self {
        let blocks = (ids.max(1) * BITS_PER_ID).div_ceil(256);
        SplitBlockBloom { blocks: (0..blocks).map(|_| Block::default()).collect() }
    }

    /// The block `hash` falls in (by its high half) and its bit in each word (by its low half).
    fn place(&self, hash: u64) -> (&Block, [u32; 8]) {
        let block = (((hash >> 32) * self.blocks.len() as u64) >> 32) as usize;
        let key = hash as u32;
        (&self.blocks[block], SALT.map(|salt| 1 << (key.wrapping_mul(salt) >> 27)))
    }

    fn insert(&self, hash: u64) {
        let (block, mask) = self.place(hash);
        for (word, bit) in block.0.iter().zip(mask) {
            // A plain load first: a bit already set (an id's second add) costs no locked write.
            if word.load(Ordering::Relaxed) & bit == 0 {
                word.fetch_or(bit, Ordering::Relaxed);
            }
        }
    }

    fn contains(&self, hash: u64) -> bool {
        let (block, mask) = self.place(hash);
        block.0.iter().zip(mask).all(|(word, bit)| word.load(Ordering::Relaxed) & bit != 0)
    }
}

/// Which of an id's two adds a call is (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Add {
    /// Before its row can be read: counts towards the filter's size.
    First,
    /// Once the row is in sled: only for a generation begun in between.
    Again,
}

impl Known {
    /// False only when `id` is certainly not stored; starts the first build.
    pub(super) fn maybe_stored(&self, id: &BlobId, blobs: &Table) -> bool {
        let generations = self.current(blobs);
        generations.answering.as_ref().is_none_or(|g| g.contains(id))
    }

    /// Records `id`: call it with [`Add::First`] before its row can be read, and with
    /// [`Add::Again`] once the row is in sled.
    pub(super) fn add(&self, id: &BlobId, add: Add, blobs: &Table) {
        let generations = self.current(blobs);
        // Under the read lock, so that once a build has taken over no add can still reach
        // only the generation it replaced: every later second add reaches the new one.
        let full: Vec<Arc<Generation>> = generations.all().filter(|g| g.add(id, add)).cloned().collect();
        drop(generations);
        for g in full {
            self.grow(&g, blobs);
        }
    }

    /// The generations, once the first build is started and a completed build has taken over.
    fn current(&self, blobs: &Table) -> RwLockReadGuard<'_, Generations> {
        let generations = self.generations.read().unwrap_or_else(|p| p.into_inner());
        if !generations.stale() {
            return generations;
        }
        drop(generations);
        {
            let mut generations = self.generations.write().unwrap_or_else(|p| p.into_inner());
            if generations.building.as_ref().is_some_and(|g| g.complete.load(Ordering::Acquire)) {
                generations.answering = generations.building.take();
            } else if generations.answering.is_none() && generations.building.is_none() {
                let g = Arc::new(Generation::default());
                generations.building = Some(Arc::clone(&g));
                start_build(&g, None, blobs);
            }
        }
        self.generations.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts a larger generation in place of `full`, unless one is under way already.
    fn grow(&self, full: &Arc<Generation>, blobs: &Table) {
        let mut generations = self.generations.write().unwrap_or_else(|p| p.into_inner());
        let is = |g: &Option<Arc<Generation>>| g.as_ref().is_some_and(|g| Arc::ptr_eq(g, full));
        // The answering filter full with a build under way: that build is the larger one.
        // A build that fills up before it is done (an enormous burst of puts) is replaced.
        if !(is(&generations.building) || is(&generations.answering) && generations.building.is_none()) {
            return;
        }
        let ids = full.count.load(Ordering::Relaxed);
        let g = Arc::new(Generation::default());
        generations.building = Some(Arc::clone(&g));
        start_build(&g, Some(ids), blobs);
        tracing::debug!(ids, "blob filter full: building a larger one beside it");
    }

    /// True once a build has completed and none is under way.
    #[cfg(test)]
    fn is_complete(&self) -> bool {
        let generations = self.generations.read().unwrap_or_else(|p| p.into_inner());
        generations.building.as_ref().is_none_or(|g| g.complete.load(Ordering::Acquire))
            && generations.all().count() > 0
    }
}

impl Generation {
    fn contains(&self, id: &BlobId) -> bool {
        self.filter.get().is_none_or(|f| f.bloom.contains(hash(id)))
    }

    /// Adds `id`; true when this made the filter hold more ids than it was sized for.
    fn add(&self, id: &BlobId, add: Add) -> bool {
        let n = match add {
            Add::First => self.count.fetch_add(1, Ordering::Relaxed) + 1,
            Add::Again => 0,
        };
        if let Some(f) = self.filter.get() {
            f.bloom.insert(hash(id));
            return n == f.capacity + 1;
        }
        let mut early = self.early.lock().unwrap_or_else(|p| p.into_inner());
        // The filter may have been made while we waited for the list.
        match self.filter.get() {
            Some(f) => {
                f.bloom.insert(hash(id));
            }
            None => early.push(*id),
        }
        false
    }

    /// Makes the filter, sized for `ids` ids already there, and moves the early ids into it.
    fn make_filter(&self, ids: usize) {
        let capacity = ids.saturating_mul(2).max(MIN_ITEMS);
        let bloom = SplitBlockBloom::with_capacity(capacity);
        let mut early = self.early.lock().unwrap_or_else(|p| p.into_inner());
        for id in early.drain(..) {
            bloom.insert(hash(&id));
        }
        let _ = self.filter.set(Filter { bloom, capacity });
    }

    /// A generation whose scan failed stays incomplete but gets a filter, so ids added
    /// meanwhile do not pile up in the early list. The first one answers "maybe" for good; a
    /// later one leaves its full predecessor answering.
    fn give_up(&self) {
        if self.filter.get().is_none() {
            self.make_filter(0);
        }
    }
}

/// Fills `generation` from the blob rows, then marks it complete; on a thread of its own.
///
/// `ids`: how many ids the filter it replaces holds, to size this one by; `None` for the first
/// build, which counts the rows first (one more scan) and keeps normal priority, since every
/// put reads the store until it is done. A later one runs at the lowest priority: the full
/// filter answers meanwhile.
///
/// It holds the generation only between steps and stops once the store is closed (the
/// generation dropped), so its handle on sled does not outlive the store by more than one step.
fn start_build(generation: &Arc<Generation>, ids: Option<usize>, blobs: &Table) {
    if let Some(ids) = ids {
        generation.make_filter(ids);
    }
    let weak = Arc::downgrade(generation);
    let blobs = blobs.clone();
    let spawned = std::thread::Builder::new().name("blob-filter".into()).spawn(move || {
        if ids.is_some() {
            super::lowest_priority();
        }
        if let Err(e) = build(&weak, ids.is_none(), &blobs) {
            tracing::warn!(error = %crate::error::chain(&e), "could not build the blob filter; puts read the store instead");
            weak.upgrade().inspect(|g| g.give_up());
        }
    });
    if let Err(e) = spawned {
        tracing::warn!(error = %crate::error::chain(&e), "could not start building the blob filter; puts read the store instead");
        generation.give_up();
    }
}

fn build(weak: &Weak<Generation>, count_first: bool, blobs: &Table) -> Result<(), StoreError> {
    if count_first {
        let Some(rows) = scan(weak, blobs, |_, _| {})? else { return Ok(()) };
        match weak.upgrade() {
            Some(g) => g.make_filter(rows),
            None => return Ok(()),
        }
    }
    let add = |g: &Generation, id: &BlobId| {
        if let Some(f) = g.filter.get() {
            f.bloom.insert(hash(id));
        }
        g.count.fetch_add(1, Ordering::Relaxed);
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
    fn settle(known: &Known, blobs: &Table) {
        let start = Instant::now();
        while !known.is_complete() {
            assert!(start.elapsed() < Duration::from_secs(30), "the filter was never built");
            std::thread::sleep(Duration::from_millis(2));
        }
        // The completed build takes over at the next use.
        drop(known.current(blobs));
    }

    #[test]
    fn a_filter_holding_the_ids_it_was_sized_for_answers_maybe_for_under_one_new_id_in_a_hundred() {
        let bloom = SplitBlockBloom::with_capacity(200_000);
        (0..200_000).for_each(|n| bloom.insert(hash(&id(n, 0))));
        assert!((0..200_000).all(|n| bloom.contains(hash(&id(n, 0)))), "an added id was missed");
        let false_positives = (0..200_000).filter(|&n| bloom.contains(hash(&id(n, 1)))).count();
        assert!(false_positives < 2_000, "{false_positives} of 200000 new ids were maybe");
    }

    #[test]
    fn every_stored_and_added_id_is_maybe_and_most_new_ones_are_not() {
        let (_db, blobs) = tree(5_000);
        let known = Known::default();
        // The first call starts the scan on a thread, which on a loaded machine may finish
        // before the call looks: so only a "no" from an incomplete filter is wrong.
        let first = known.maybe_stored(&id(0, 9), &blobs);
        assert!(first || known.is_complete(), "until the scan is done, everything is maybe");
        settle(&known, &blobs);
        for n in 0..1_000 {
            known.add(&id(n, 1), Add::First, &blobs);
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
            known.add(&id(n, 1), Add::First, &blobs);
        }
        settle(&known, &blobs);
        assert!((0..20_000).all(|n| known.maybe_stored(&id(n, 1), &blobs)), "an id added during the build was missed");
        assert!((0..200_000).step_by(7).all(|n| known.maybe_stored(&id(n, 0), &blobs)));
    }

    /// The generation that answers, and the one being built beside it.
    fn generations(known: &Known) -> (Option<Arc<Generation>>, Option<Arc<Generation>>) {
        let g = known.generations.read().unwrap();
        (g.answering.clone(), g.building.clone())
    }

    #[test]
    fn a_full_filter_is_rebuilt_from_the_rows() {
        let (_db, blobs) = tree(10);
        let known = Known::default();
        known.add(&id(0, 0), Add::First, &blobs);
        settle(&known, &blobs);
        // A put whose row is still pending when the filter fills up.
        let late = id(7, 3);
        known.add(&late, Add::First, &blobs);
        // One past the capacity starts a new generation, which scans the rows again; the
        // added ids had no rows, so only the rows' ids must be maybe afterwards.
        for n in 0..=MIN_ITEMS as u64 {
            known.add(&id(n, 1), Add::First, &blobs);
        }
        settle(&known, &blobs);
        let (answering, building) = generations(&known);
        assert!(building.is_none(), "the new generation did not take over");
        assert!(answering.unwrap().count.load(Ordering::Relaxed) < 1_000, "still the full generation");
        assert!((0..10).all(|n| known.maybe_stored(&id(n, 0), &blobs)));
        // Its row lands after the new scan passed: the second add is what covers it.
        blobs.insert(late.0, vec![1]).unwrap();
        known.add(&late, Add::Again, &blobs);
        assert!(known.maybe_stored(&late, &blobs));
    }

    #[test]
    fn an_ids_second_add_does_not_count() {
        let (_db, blobs) = tree(0);
        let known = Known::default();
        known.add(&id(0, 0), Add::First, &blobs);
        settle(&known, &blobs);
        // Every id of a full filter's worth added twice, as each put's id is: it has room.
        for n in 1..MIN_ITEMS as u64 {
            known.add(&id(n, 1), Add::First, &blobs);
            known.add(&id(n, 1), Add::Again, &blobs);
        }
        let (answering, building) = generations(&known);
        assert!(building.is_none(), "a filter of {MIN_ITEMS} ids was rebuilt before it held them");
        assert_eq!(answering.unwrap().count.load(Ordering::Relaxed), MIN_ITEMS);
    }

    #[test]
    fn the_full_filter_answers_while_the_larger_one_is_built() {
        let (_db, blobs) = tree(300_000);
        let known = Known::default();
        known.add(&id(0, 9), Add::First, &blobs);
        settle(&known, &blobs);
        let (first, _) = generations(&known);
        let capacity = first.as_ref().unwrap().filter.get().unwrap().capacity as u64;
        let already = first.as_ref().unwrap().count.load(Ordering::Relaxed) as u64;
        for n in already..=capacity {
            known.add(&id(n, 1), Add::First, &blobs);
        }
        // A scan of 300,000 rows is under way (or, on an idle machine, just done): either way
        // the answers come from a complete filter, never "maybe" for all.
        let (answering, building) = generations(&known);
        assert!(building.is_some() || !Arc::ptr_eq(answering.as_ref().unwrap(), first.as_ref().unwrap()));
        let false_positives = (0..10_000).filter(|&n| known.maybe_stored(&id(n, 2), &blobs)).count();
        assert!(false_positives < 1_000, "{false_positives} of 10000 new ids were maybe during the rebuild");
        // Ids added while it is built are in both: none is missed, before or after it takes over.
        for n in 0..1_000 {
            known.add(&id(n, 4), Add::First, &blobs);
        }
        assert!((0..1_000).all(|n| known.maybe_stored(&id(n, 4), &blobs)));
        assert!((0..300_000).step_by(11).all(|n| known.maybe_stored(&id(n, 0), &blobs)));
        settle(&known, &blobs);
        let (answering, building) = generations(&known);
        assert!(building.is_none());
        assert!(
            !Arc::ptr_eq(answering.as_ref().unwrap(), first.as_ref().unwrap()),
            "the larger filter never took over"
        );
        assert!((0..1_000).all(|n| known.maybe_stored(&id(n, 4), &blobs)));
        assert!((0..300_000).step_by(11).all(|n| known.maybe_stored(&id(n, 0), &blobs)));
    }
}
