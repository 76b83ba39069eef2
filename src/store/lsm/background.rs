//! The engine's two background threads: the flusher writes frozen memtables out as runs, the
//! merger combines runs. Two, so that a long merge of the oldest runs never holds up the
//! flushes that commits wait on.
//!
//! Both end the same way: the new run is complete and synced, the manifest naming it is
//! written to sled and flushed, and only then are the files it replaces deleted (log
//! generations for a flush, runs for a merge). A crash at any point leaves either the old
//! files, which still hold everything, or the new ones; a run file no manifest names is removed
//! at the next open.
//!
//! Merge policy: a run's weight is the number of memtables in it; its tier is ⌊log₄ weight⌋.
//! Whenever [`FANOUT`] or more runs next to each other (in age) share a tier, they are merged
//! into one of the next tier. A store of N memtables' worth has at most three runs per tier,
//! O(log N) in all, and each entry is rewritten once per tier it climbs.
//!
//! There are [`MERGERS`] merger threads, each merging a different group of runs, so that the
//! small merges go on while a large one runs. With one, the flushes during a merge of the whole
//! store (the last 12 s of a 10-million-record ingest) piled up as 22 one-memtable runs, and
//! every point read asked each of them.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use super::merge::merge_into;
use super::run::{Run, RunWriter};
use super::{Frozen, Levels, Manifest, Shared, lock, read, wal, write};
use crate::store::codec;
use crate::store::error::StoreError;

/// Runs of one tier merged together.
const FANOUT: usize = 4;
/// Merges that may run at once.
const MERGERS: usize = 2;
/// After a failed flush or merge (a full disk, say), the thread waits this long and tries again.
const RETRY: Duration = Duration::from_secs(1);

pub(super) fn spawn(shared: &Arc<Shared>) -> Result<Vec<JoinHandle<()>>, StoreError> {
    let flusher = {
        let s = shared.clone();
        std::thread::Builder::new().name("store-flush".into()).spawn(move || {
            let _alive = AliveGuard(&s);
            flusher(&s);
        })
    };
    let spawned = |r: std::io::Result<JoinHandle<()>>| r.map_err(|e| StoreError::io(&shared.dir, e));
    let mut threads = vec![spawned(flusher)?];
    for n in 1..=MERGERS {
        let s = shared.clone();
        let merger = std::thread::Builder::new().name(format!("store-merge-{n}")).spawn(move || {
            // Merging can wait: at normal priority, on a machine whose cores the harvester
            // keeps busy, a merge takes a core from commits for as long as it runs — in a
            // 10-million-record ingest on two cores the million records during the largest
            // merge went in at 0.64× the rate of the first million. At the lowest priority it
            // runs on what commits and the flusher leave. The flusher keeps its normal
            // priority: commits wait for it once two memtables are frozen, so slowing it would
            // only move the stall (at nice 19 too, that last million went in at 0.73×). Merges
            // falling behind cost reads a few more runs to ask, not correctness.
            crate::store::lowest_priority();
            merger(&s);
        });
        threads.push(spawned(merger)?);
    }
    Ok(threads)
}

/// Clears `flusher_alive` when the flusher ends, even by a panic, so commits waiting for room
/// give up instead of waiting forever.
struct AliveGuard<'a>(&'a Shared);

impl Drop for AliveGuard<'_> {
    fn drop(&mut self) {
        self.0.flusher_alive.store(false, Ordering::Release);
        self.0.notify();
    }
}

fn flusher(s: &Shared) {
    loop {
        let next = {
            let mut bg = lock(&s.bg);
            loop {
                if bg.shutdown {
                    return;
                }
                if let Some(f) = read(&s.levels).frozen.last().cloned() {
                    break f;
                }
                bg = s.wake.wait(bg).unwrap_or_else(|p| p.into_inner());
            }
        };
        match flush(s, &next) {
            Ok(()) => {
                lock(&s.bg).error = None;
                s.request_merge();
            }
            Err(e) => {
                let why = crate::error::chain(&e).to_string();
                tracing::error!(error = %why, "could not write a memtable out to a run; retrying");
                lock(&s.bg).error = Some(why);
                s.notify();
                if wait_or_shutdown(s, RETRY) {
                    return;
                }
            }
        }
    }
}

/// Writes the oldest frozen memtable out and installs the run in its place.
fn flush(s: &Shared, frozen: &Arc<Frozen>) -> Result<(), StoreError> {
    // Every run is older than every frozen memtable: with no run, nothing older is left for a
    // deletion to hide.
    let drop_deletions = read(&s.levels).runs.is_empty();
    let id = next_id(s);
    let mut w = RunWriter::create(&s.dir, id, 1, frozen.mem.len())?;
    for (k, slot) in frozen.mem.iter() {
        if slot.is_none() && drop_deletions {
            continue;
        }
        if let Err(e) = w.add(k, slot) {
            w.abandon();
            return Err(e);
        }
    }
    let run = if w.entries() == 0 {
        w.abandon();
        None
    } else {
        Some(Arc::new(w.finish()?))
    };
    install(s, Some(frozen.generation + 1), Some(frozen), |runs| {
        if let Some(run) = run {
            runs.insert(0, run);
        }
        Ok(())
    })?;
    s.notify();
    for generation in wal::generations(&s.dir)? {
        if generation <= frozen.generation {
            let path = wal::path(&s.dir, generation);
            std::fs::remove_file(&path).map_err(|e| StoreError::io(&path, e))?;
        }
    }
    Ok(())
}

fn merger(s: &Shared) {
    loop {
        {
            let mut bg = lock(&s.bg);
            while !bg.merge_wanted && !bg.shutdown {
                bg = s.wake.wait(bg).unwrap_or_else(|p| p.into_inner());
            }
            if bg.shutdown {
                return;
            }
            bg.merge_wanted = false;
        }
        // One merge can make another due (four tier-1 runs after four tier-0 ones merged).
        while let Some(claim) = Claim::next(s) {
            match merge(s, &claim) {
                Ok(true) => {}
                Ok(false) => return,
                Err(e) => {
                    tracing::error!(error = %crate::error::chain(&e), "could not merge runs; retrying");
                    drop(claim);
                    if wait_or_shutdown(s, RETRY) {
                        return;
                    }
                }
            }
        }
    }
}

/// Runs one merger has taken to merge; no other merger picks them until it is dropped.
struct Claim<'a> {
    s: &'a Shared,
    /// Newest first, next to each other in the run list.
    runs: Vec<Arc<Run>>,
    /// They end with the oldest run: nothing older is left for a deletion to hide.
    oldest: bool,
}

impl<'a> Claim<'a> {
    /// The newest group due for a merge that no other merger has taken.
    fn next(s: &'a Shared) -> Option<Claim<'a>> {
        // Under the lock the claims are kept under, so two mergers never take the same runs.
        let mut bg = lock(&s.bg);
        let levels = read(&s.levels);
        let window = pick(&shape(&levels.runs), &bg.merging)?;
        let runs = levels.runs[window.clone()].to_vec();
        bg.merging.extend(runs.iter().map(|r| r.id));
        Some(Claim { s, runs, oldest: window.end == levels.runs.len() })
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        lock(&self.s.bg).merging.retain(|id| !self.runs.iter().any(|r| r.id == *id));
    }
}

/// Whether a merge is due in `levels`, or running (for settling).
pub(super) fn merge_due(levels: &RwLock<Arc<Levels>>) -> bool {
    pick(&shape(&read(levels).runs), &[]).is_some()
}

/// Each run's `(id, weight)`, as [`pick`] reads them.
fn shape(runs: &[Arc<Run>]) -> Vec<(u64, u64)> {
    runs.iter().map(|r| (r.id, r.weight)).collect()
}

fn tier(weight: u64) -> u32 {
    weight.max(1).ilog(FANOUT as u64)
}

/// The newest group of at least [`FANOUT`] neighbouring runs in one tier, none of them in
/// `merging`. `runs`: `(id, weight)`, newest first.
fn pick(runs: &[(u64, u64)], merging: &[u64]) -> Option<Range<usize>> {
    let free = |(id, _): &(u64, u64)| !merging.contains(id);
    let mut start = 0;
    while start < runs.len() {
        if !free(&runs[start]) {
            start += 1;
            continue;
        }
        let t = tier(runs[start].1);
        let end = start + runs[start..].iter().take_while(|r| tier(r.1) == t && free(r)).count();
        if end - start >= FANOUT {
            return Some(start..end);
        }
        start = end;
    }
    None
}

/// Merges the claimed runs into one and installs it. `Ok(false)`: abandoned for shutdown.
fn merge(s: &Shared, claim: &Claim) -> Result<bool, StoreError> {
    let (inputs, drop_deletions) = (&claim.runs, claim.oldest);
    let weight = inputs.iter().map(|r| r.weight).sum();
    let expected = inputs.iter().map(|r| r.entries).sum::<u64>();
    let id = next_id(s);
    let mut w = RunWriter::create(&s.dir, id, weight, usize::try_from(expected).unwrap_or(usize::MAX))?;
    match merge_into(inputs, &mut w, drop_deletions, || lock(&s.bg).shutdown) {
        Ok(true) => {}
        Ok(false) => {
            w.abandon();
            return Ok(false);
        }
        Err(e) => {
            w.abandon();
            return Err(e);
        }
    }
    let run = if w.entries() == 0 {
        w.abandon();
        None
    } else {
        Some(Arc::new(w.finish()?))
    };
    install(s, None, None, |runs| {
        // Flushes only add runs in front, and other merges replace runs not claimed here, so
        // the inputs are still together, in order.
        let at = runs
            .iter()
            .position(|r| Arc::ptr_eq(r, &inputs[0]))
            .ok_or_else(|| StoreError::corrupt("lsm manifest", "a merged run disappeared"))?;
        runs.splice(at..at + inputs.len(), run);
        Ok(())
    })?;
    for r in inputs {
        // Readers that still hold the run keep reading through their open handle.
        if let Err(e) = std::fs::remove_file(r.path()) {
            tracing::warn!(path = %r.path().display(), error = %e, "could not remove a merged run");
        }
    }
    Ok(true)
}

/// Makes the run list `change` gives the manifest — written to sled and flushed first — then
/// the readers' view, with `flushed` (a frozen memtable now in a run) gone from it.
///
/// Only the flusher and the merger change the runs, one at a time under the manifest lock, so
/// the list computed here is still current when it is installed. Commits freeze memtables
/// meanwhile, which changes the levels too: so the new view is made from the levels as they
/// are under the write lock, not from a copy taken before the manifest was written (that copy
/// would lose a memtable frozen in between).
pub(super) fn install(
    s: &Shared,
    wal_start: Option<u64>,
    flushed: Option<&Arc<Frozen>>,
    change: impl FnOnce(&mut Vec<Arc<Run>>) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let mut manifest = lock(&s.manifest);
    let mut runs = read(&s.levels).runs.clone();
    change(&mut runs)?;
    let mut m = manifest.clone();
    if let Some(start) = wal_start {
        m.wal_start = start;
    }
    m.runs = runs.iter().map(|r| (r.id, r.weight)).collect();
    persist(s, &m)?;
    *manifest = m;
    let mut levels = write(&s.levels);
    let mut next = Levels { frozen: levels.frozen.clone(), runs };
    if let Some(f) = flushed {
        next.frozen.retain(|x| !Arc::ptr_eq(x, f));
    }
    *levels = Arc::new(next);
    Ok(())
}

pub(super) fn next_id(s: &Shared) -> u64 {
    let mut m = lock(&s.manifest);
    let id = m.next_id;
    m.next_id += 1;
    id
}

/// Writes the manifest to sled, durably.
fn persist(s: &Shared, m: &Manifest) -> Result<(), StoreError> {
    s.tree.insert(s.keys.manifest.as_slice(), codec::encode(m)?)?;
    s.tree.flush()?;
    Ok(())
}

/// Sleeps `d` unless shutdown comes first; true on shutdown.
fn wait_or_shutdown(s: &Shared, d: Duration) -> bool {
    let bg = lock(&s.bg);
    if bg.shutdown {
        return true;
    }
    let (bg, _) = s.wake.wait_timeout(bg, d).unwrap_or_else(|p| p.into_inner());
    bg.shutdown
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs of these weights, newest first, with ids 0, 1, 2, ….
    fn runs(weights: &[u64]) -> Vec<(u64, u64)> {
        weights.iter().enumerate().map(|(i, w)| (i as u64, *w)).collect()
    }

    #[test]
    fn the_newest_group_of_four_in_a_tier_is_merged_first() {
        assert_eq!(pick(&runs(&[1, 1, 1]), &[]), None);
        assert_eq!(pick(&runs(&[1, 1, 1, 1, 4, 4, 4, 4]), &[]), Some(0..4));
        assert_eq!(pick(&runs(&[1, 1, 4, 4, 6, 4, 64]), &[]), Some(2..6), "weights 4 to 15 are one tier");
        assert_eq!(pick(&runs(&[1, 1, 1, 1, 1, 16]), &[]), Some(0..5), "the whole group");
    }

    #[test]
    fn runs_being_merged_are_left_to_their_merger() {
        // The whole store being merged; four flushes since: the second merger takes those.
        let store = runs(&[1, 1, 1, 1, 66, 66, 67, 64]);
        assert_eq!(pick(&store, &[4, 5, 6, 7]), Some(0..4));
        assert_eq!(pick(&store, &[0, 1, 2, 3, 4, 5, 6, 7]), None);
        // A run being merged splits a group: three on either side are not four.
        assert_eq!(pick(&runs(&[1, 1, 1, 4, 1, 1, 1]), &[3]), None);
        assert_eq!(pick(&runs(&[1, 1, 1, 1, 1, 1, 1]), &[3]), None);
        assert_eq!(pick(&runs(&[1, 1, 1, 1, 1, 1, 1, 1]), &[3]), Some(4..8));
    }
}
