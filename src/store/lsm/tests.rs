//! The engine against a model (a `BTreeMap`), with memtables small enough that every path —
//! freezing, flushing, merging, dropping deletions, replay after reopen — runs many times.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;

fn keys() -> MetaKeys {
    MetaKeys { wal: b"Mwal".to_vec(), manifest: b"Mmanifest".to_vec() }
}

fn tiny() -> LsmOptions {
    LsmOptions { memtable_bytes: 4 * 1024, max_frozen: 2 }
}

struct Fixture {
    dir: tempfile::TempDir,
    db: sled::Db,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path().join("db")).open().unwrap();
        Fixture { dir, db }
    }

    fn open(&self, opts: LsmOptions) -> Lsm {
        Lsm::open(&self.dir.path().join("lsm"), self.db.open_tree("main").unwrap(), keys(), opts).unwrap()
    }
}

fn put(lsm: &Lsm, k: &str, v: &str) {
    lsm.commit(vec![(k.as_bytes().to_vec(), Some(v.as_bytes().to_vec()))], sled::Batch::default()).unwrap();
}

fn del(lsm: &Lsm, k: &str) {
    lsm.commit(vec![(k.as_bytes().to_vec(), None)], sled::Batch::default()).unwrap();
}

fn all(lsm: &Lsm, from: &str, end: Option<&str>) -> Vec<(String, String)> {
    lsm.range(from.as_bytes(), end.map(str::as_bytes))
        .map(|e| {
            let (k, v) = e.unwrap();
            (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap())
        })
        .collect()
}

#[test]
fn reads_see_the_newest_write_through_flushes_and_merges() {
    let f = Fixture::new();
    let lsm = f.open(tiny());
    for round in 0..6 {
        for i in 0..400 {
            put(&lsm, &format!("k{i:05}"), &format!("v{round}-{i}-{}", "x".repeat(30)));
        }
        for i in (0..400).step_by(7) {
            del(&lsm, &format!("k{i:05}"));
        }
    }
    assert!(lsm.settle(Duration::from_secs(30)));
    let stats = lsm.stats();
    assert!(stats.runs >= 1 && stats.runs < 12, "merged: {stats:?}");
    assert_eq!(lsm.get(b"k00001").unwrap(), Some(format!("v5-1-{}", "x".repeat(30)).into_bytes()));
    assert_eq!(lsm.get(b"k00007").unwrap(), None, "deleted");
    let listed = all(&lsm, "k00000", None);
    assert_eq!(listed.len(), 400 - 400usize.div_ceil(7));
    assert!(listed.windows(2).all(|w| w[0].0 < w[1].0), "sorted, each key once");
    assert_eq!(lsm.floor(b"k", b"k00014").unwrap().map(|(k, _)| k), Some(b"k00013".to_vec()), "skips a deletion");
    assert!(lsm.verify().is_empty());
}

#[test]
fn reopening_replays_what_sled_committed_and_nothing_after() {
    let f = Fixture::new();
    {
        let lsm = f.open(LsmOptions::default());
        put(&lsm, "a", "1");
        put(&lsm, "b", "2");
        del(&lsm, "a");
    }
    // A frame sled never committed: appended as a commit would, without sled's batch.
    let dir = f.dir.path().join("lsm");
    let generation = wal::generations(&dir).unwrap().into_iter().max().unwrap();
    let len = fs::metadata(wal::path(&dir, generation)).unwrap().len();
    Wal::open(&dir, generation, len).unwrap().append(&[(b"c".to_vec(), Some(b"3".to_vec()))]).unwrap();

    let lsm = f.open(LsmOptions::default());
    assert_eq!(all(&lsm, "", None), [("b".to_string(), "2".to_string())]);
    put(&lsm, "d", "4");
    drop(lsm);
    let lsm = f.open(LsmOptions::default());
    assert_eq!(all(&lsm, "", None), [("b".into(), "2".into()), ("d".into(), "4".into())]);
}

#[test]
fn a_frame_cut_back_after_a_failed_commit_is_never_replayed() {
    let f = Fixture::new();
    let lsm = f.open(LsmOptions::default());
    put(&lsm, "a", "1");
    // What a commit does when sled refuses its batch: the frame is cut back, and the next
    // commit's frame takes its place.
    let dir = f.dir.path().join("lsm");
    let mut st = lock(&lsm.shared.wal);
    let before = st.wal.len;
    st.wal.append(&[(b"z".to_vec(), Some(b"9".to_vec()))]).unwrap();
    st.wal.rollback_to(before).unwrap();
    drop(st);
    put(&lsm, "b", "2");
    drop(lsm);
    let generation = wal::generations(&dir).unwrap().into_iter().max().unwrap();
    let mut mem = Memtable::default();
    wal::replay(&dir, generation, fs::metadata(wal::path(&dir, generation)).unwrap().len(), &mut mem).unwrap();
    assert_eq!(mem.get(b"z"), None);
    assert_eq!(mem.get(b"b"), Some(&Some(b"2".to_vec())));
}

#[test]
fn compare_and_swap_writes_only_over_the_expected_value() {
    let f = Fixture::new();
    let lsm = f.open(LsmOptions::default());
    assert_eq!(lsm.compare_and_swap(b"k", None, Some(b"1".to_vec())).unwrap(), Ok(()));
    assert_eq!(lsm.compare_and_swap(b"k", None, Some(b"2".to_vec())).unwrap(), Err(Some(b"1".to_vec())));
    assert_eq!(lsm.compare_and_swap(b"k", Some(b"1"), None).unwrap(), Ok(()));
    assert_eq!(lsm.get(b"k").unwrap(), None);
}

#[test]
fn an_iterator_keeps_its_place_while_memtables_freeze_under_it() {
    let f = Fixture::new();
    let lsm = f.open(tiny());
    for chunk in (0..2000).collect::<Vec<_>>().chunks(100) {
        let writes = chunk.iter().map(|i| (format!("k{i:05}").into_bytes(), Some(b"old".to_vec()))).collect();
        lsm.commit(writes, sled::Batch::default()).unwrap();
    }
    // Every commit froze a memtable while the flusher was installing runs: none may be lost.
    assert!(lsm.settle(Duration::from_secs(30)));
    assert_eq!(lsm.range(b"k", None).count(), 2000);
    let mut it = lsm.range(b"k", None);
    let mut seen = Vec::new();
    for i in 0..2000 {
        let (k, _) = it.next().expect("not ended early").unwrap();
        seen.push(k);
        // Writes ahead of and behind the iterator, enough to freeze many memtables.
        if i % 4 == 0 {
            let writes = (0..8)
                .map(|j| (format!("k{:05}", (i * 7919 + j * 131) % 2000).into_bytes(), Some(b"new".repeat(10))))
                .collect();
            lsm.commit(writes, sled::Batch::default()).unwrap();
        }
    }
    assert!(it.next().is_none());
    let expected: Vec<Vec<u8>> = (0..2000).map(|i| format!("k{i:05}").into_bytes()).collect();
    assert_eq!(seen, expected, "every key once, in order");
}

/// A small deterministic generator, so a failure replays exactly.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[test]
fn random_writes_match_a_model_across_reopens() {
    let f = Fixture::new();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut rng = Lcg(42);
    for session in 0..4 {
        let lsm = f.open(tiny());
        for step in 0..600 {
            // A batch never names a key twice (the store's overlay makes sure of that).
            let mut batch: BTreeMap<Vec<u8>, Slot> = BTreeMap::new();
            for _ in 0..=rng.next(6) {
                let key = format!("{:04}", rng.next(500)).into_bytes();
                if rng.next(4) == 0 {
                    batch.insert(key, None);
                } else {
                    let v = format!("{session}/{step}/{}", "p".repeat(rng.next(60) as usize)).into_bytes();
                    batch.insert(key, Some(v));
                }
            }
            for (k, v) in &batch {
                match v {
                    Some(v) => model.insert(k.clone(), v.clone()),
                    None => model.remove(k),
                };
            }
            lsm.commit(batch.into_iter().collect(), sled::Batch::default()).unwrap();
            if step % 100 == 0 {
                let lo = format!("{:04}", rng.next(500)).into_bytes();
                let hi = format!("{:04}", rng.next(500)).into_bytes();
                let got: Vec<_> = lsm.range(&lo, Some(&hi)).map(Result::unwrap).collect();
                let want: Vec<_> = if lo < hi {
                    model.range(lo.clone()..hi.clone()).map(|(k, v)| (k.clone(), v.clone())).collect()
                } else {
                    Vec::new()
                };
                assert_eq!(got, want, "range {lo:?}..{hi:?} in session {session} step {step}");
            }
        }
        for i in 0..500 {
            let k = format!("{i:04}").into_bytes();
            assert_eq!(lsm.get(&k).unwrap(), model.get(&k).cloned(), "key {i} in session {session}");
        }
        // Some sessions end without settling: what is still in memory must come back from the log.
        if session % 2 == 0 {
            assert!(lsm.settle(Duration::from_secs(30)));
        }
    }
    let lsm = f.open(tiny());
    let got: Vec<_> = lsm.range(b"", None).map(Result::unwrap).collect();
    let want: Vec<_> = model.into_iter().collect();
    assert_eq!(got, want);
    assert!(lsm.verify().is_empty());
}

/// Runs that cannot be written (every new run file lands on `/dev/full`, which fails writes
/// with ENOSPC as a full disk does): commits go on while the frozen memtables have room, then
/// fail saying why; none of what was acknowledged is lost, and once writes succeed again the
/// flusher's retry catches up and commits go on.
#[test]
fn a_full_disk_while_writing_runs_refuses_commits_and_loses_nothing() {
    let f = Fixture::new();
    let lsm = f.open(tiny());
    let dir = f.dir.path().join("lsm");
    let next = lock(&lsm.shared.manifest).next_id;
    let planted: Vec<_> = (next..next + 100).map(|id| dir.join(format!("run-{id:016}.tmp"))).collect();
    for p in &planted {
        std::os::unix::fs::symlink("/dev/full", p).unwrap();
    }
    let batch = |i: usize| -> Vec<(Vec<u8>, Slot)> {
        (0..50).map(|j| (format!("k{i:04}-{j:02}").into_bytes(), Some(vec![b'v'; 100]))).collect()
    };
    let mut acknowledged = 0;
    let refused = loop {
        match lsm.commit(batch(acknowledged), sled::Batch::default()) {
            Ok(()) => acknowledged += 1,
            Err(e) => break e,
        }
        assert!(acknowledged < 100, "commits never refused");
    };
    let why = crate::error::chain(&refused).to_string();
    assert!(why.contains("runs cannot be written") && why.contains("No space left"), "{why}");

    for p in &planted {
        let _ = fs::remove_file(p);
    }
    assert!(lsm.settle(Duration::from_secs(30)), "the flusher caught up");
    lsm.commit(batch(1000), sled::Batch::default()).unwrap();
    for i in (0..acknowledged).chain([1000]) {
        assert!(lsm.get(format!("k{i:04}-49").as_bytes()).unwrap().is_some(), "batch {i}");
    }
    assert!(lsm.get(format!("k{acknowledged:04}-00").as_bytes()).unwrap().is_none(), "the refused batch");
    drop(lsm);
    let lsm = f.open(tiny());
    assert_eq!(lsm.range(b"k", None).count(), (acknowledged + 1) * 50);
}

/// A merge copies blocks no other input reaches into and decodes the rest: whichever it does,
/// the result is the newest slot of every key (deletions kept, or dropped at the bottom).
#[test]
fn merges_keep_the_newest_slot_whether_they_copy_blocks_or_decode_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Lcg(7);
    // Runs newest first; run r holds keys from r·2,000 to r·2,000 + 2,600: each overlaps its
    // neighbours at the edges and has a stretch of its own in the middle.
    let mut runs = Vec::new();
    for r in (0..4u64).rev() {
        let mut w = run::RunWriter::create(dir.path(), 10 + r, 1, 3000).unwrap();
        let mut keys: Vec<u64> = (r * 2000..r * 2000 + 2600).filter(|_| rng.next(3) > 0).collect();
        keys.dedup();
        for k in keys {
            let key = format!("k{k:06}").into_bytes();
            let slot = if rng.next(10) == 0 { None } else { Some(format!("run {r} {}", "v".repeat(40)).into_bytes()) };
            w.add(&key, &slot).unwrap();
        }
        runs.insert(0, Arc::new(w.finish().unwrap()));
    }
    // Run 0 is the newest: replaying the runs oldest first leaves each key's newest slot.
    let mut expected: BTreeMap<Vec<u8>, Slot> = BTreeMap::new();
    for r in runs.iter().rev() {
        for e in run::RunIter::new(r.clone(), Bound::Unbounded) {
            let (k, v) = e.unwrap();
            expected.insert(k, v);
        }
    }
    for (id, drop_deletions) in [(100, false), (101, true)] {
        let mut w = run::RunWriter::create(dir.path(), id, 4, 12_000).unwrap();
        assert!(merge::merge_into(&runs, &mut w, drop_deletions, || false).unwrap());
        let merged = Arc::new(w.finish().unwrap());
        merged.verify().unwrap();
        let got: Vec<_> = run::RunIter::new(merged.clone(), Bound::Unbounded).map(Result::unwrap).collect();
        let want: Vec<_> = expected
            .iter()
            .filter(|(_, v)| !(drop_deletions && v.is_none()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(got.len(), want.len(), "drop deletions: {drop_deletions}");
        assert_eq!(got, want, "drop deletions: {drop_deletions}");
        for (k, v) in want.iter().step_by(97) {
            assert_eq!(merged.get(k, encoding::key_hash(k)).unwrap(), Some(v.clone()), "point read after a merge");
        }
    }
}
