//! The store through its public API, on a real database in a temporary directory:
//! blobs (streaming, ranges, dedup, verification against declared hashes), batches (records,
//! events, indexes, counters, source state), visibility of unflushed events, gc and verify.

use std::io::{self, Read};

use crate::support::digest::digests;
use crate::support::store::{bytes, put, record, reopen, temp_store};
use tributary::model::{Change, HashAlgorithm, HashList};
use tributary::store::{
    Batch, Expected, INLINE_MAX, Listing, NewRecord, Outcome, SourceState, Store, StoreError, StoreOptions,
};

fn read_all(mut r: impl Read) -> Vec<u8> {
    let mut v = Vec::new();
    r.read_to_end(&mut v).unwrap();
    v
}

fn dir_entries(path: &std::path::Path) -> usize {
    std::fs::read_dir(path).map(|d| d.count()).unwrap_or(0)
}

fn blob_files(store: &tributary::store::Store) -> usize {
    std::fs::read_dir(store.path().join("blobs")).unwrap().map(|d| dir_entries(&d.unwrap().path())).sum()
}

#[test]
fn blobs_round_trip_inline_and_as_files_with_ranges() {
    let (_dir, store) = temp_store();
    for len in [0, 1, 100, INLINE_MAX, INLINE_MAX + 1, 3 * 1024 * 1024 + 7] {
        let data = bytes(len as u64, len);
        let info = store.put(&data[..], &Expected::none()).unwrap();
        assert_eq!(info.length, len as u64);
        assert!(!info.deduplicated);
        assert_eq!(read_all(store.get(&info.id).unwrap()), data, "len {len}");
        if len > 10 {
            let r = store.get_range(&info.id, 3..(len as u64 - 2)).unwrap();
            assert_eq!(r.remaining(), len as u64 - 5);
            assert_eq!(read_all(r), &data[3..len - 2]);
            assert_eq!(read_all(store.get_range(&info.id, 5..u64::MAX).unwrap()), &data[5..]);
        }
        assert!(matches!(store.get_range(&info.id, len as u64 + 1..len as u64 + 2), Err(StoreError::BadRange { .. })));
    }
    assert_eq!(blob_files(&store), 2, "only blobs over INLINE_MAX are files");
}

#[test]
fn identical_content_is_stored_once() {
    let (_dir, store) = temp_store();
    let data = bytes(7, 200_000);
    let a = store.put(&data[..], &Expected::none()).unwrap();
    let b = store.put(&data[..], &Expected { md5: true, ..Expected::none() }).unwrap();
    assert_eq!(a.id, b.id);
    assert!(b.deduplicated);
    assert!(b.md5.is_some(), "a later put may add a digest");
    assert_eq!(store.blob(&a.id).unwrap().unwrap().md5, b.md5);
    assert_eq!(store.stats().unwrap().blobs, 1);
    assert_eq!(blob_files(&store), 1);
}

#[test]
fn digests_match_known_values_and_declared_hashes_are_checked() {
    let (_dir, store) = temp_store();
    let declared = HashList::parse(
        "md5:900150983cd24fb0d6963f7d28e17f72 sha-1:a9993e364706816aba3e25717850c26c9cd0d89d \
         sha-256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad sha-512:ignored",
    )
    .unwrap()
    .0;
    let info = store.put(&b"abc"[..], &Expected::declared(Some(3), Some(&declared))).unwrap();
    assert_eq!(info.id.to_hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    assert_eq!(info.md5.as_deref(), Some("900150983cd24fb0d6963f7d28e17f72"));
    assert_eq!(info.sha1.as_deref(), Some("a9993e364706816aba3e25717850c26c9cd0d89d"));
    assert_eq!(info.hashes().get(&HashAlgorithm::Sha256), Some(info.id.to_hex().as_str()));
}

#[test]
fn content_that_fails_its_expectation_leaves_nothing() {
    let (_dir, store) = temp_store();
    let data = bytes(1, 2 * 1024 * 1024);
    let short = store.put(&data[..], &Expected { length: Some(data.len() as u64 + 1), ..Expected::none() });
    assert!(matches!(short, Err(StoreError::LengthMismatch { expected, actual }) if expected == actual + 1));
    let long = store.put(&data[..], &Expected { length: Some(1000), ..Expected::none() });
    assert!(matches!(long, Err(StoreError::TooLong { expected: 1000 })));
    let wrong_md5 = HashList::parse("md5:00000000000000000000000000000000").unwrap().0;
    match store.put(&data[..], &Expected::declared(None, Some(&wrong_md5))) {
        Err(StoreError::HashMismatch { algorithm, expected, actual }) => {
            assert_eq!(algorithm, HashAlgorithm::Md5);
            assert_eq!(expected, "00000000000000000000000000000000");
            assert_eq!(actual.len(), 32);
        }
        other => panic!("expected a hash mismatch, got {other:?}"),
    }
    let wrong_sha = HashList::parse(&format!("sha-256:{}", "ab".repeat(32))).unwrap().0;
    let err = store.put(&b"small"[..], &Expected::declared(None, Some(&wrong_sha))).unwrap_err();
    assert!(err.to_string().contains("nothing was stored"), "{err}");
    assert_eq!(store.stats().unwrap().blobs, 0);
    assert_eq!(blob_files(&store), 0);
    assert_eq!(dir_entries(&store.path().join("tmp")), 0);
}

/// Stands in for a network body that breaks (or a disk that fills) mid-stream: the same
/// clean-up path runs.
struct FailingReader {
    left: usize,
}

impl Read for FailingReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Err(io::Error::other("connection reset"));
        }
        let n = buf.len().min(self.left);
        buf[..n].fill(0x5a);
        self.left -= n;
        Ok(n)
    }
}

#[test]
fn a_stream_that_fails_midway_leaves_nothing() {
    let (_dir, store) = temp_store();
    let err = store.put(FailingReader { left: 3 * 1024 * 1024 }, &Expected::none()).unwrap_err();
    assert!(matches!(err, StoreError::Input { read, .. } if read == 3 * 1024 * 1024), "{err}");
    assert_eq!(dir_entries(&store.path().join("tmp")), 0);
    assert_eq!(blob_files(&store), 0);
    assert!(store.verify().unwrap().is_clean());
}

#[test]
fn blob_writer_commits_pieces_and_aborts_cleanly() {
    let (_dir, store) = temp_store();
    let data = bytes(3, 5 * 1024 * 1024 + 3);
    let mut w = store.blob_writer(Expected { length: Some(data.len() as u64), ..Expected::none() });
    for piece in data.chunks(64 * 1024 + 1) {
        w.write(piece).unwrap();
    }
    let info = w.commit().unwrap();
    assert_eq!(read_all(store.get(&info.id).unwrap()), data);

    let mut aborted = store.blob_writer(Expected::none());
    aborted.write(&bytes(4, 2 * 1024 * 1024)).unwrap();
    assert_eq!(dir_entries(&store.path().join("tmp")), 1);
    aborted.abort();
    let mut dropped = store.blob_writer(Expected::none());
    dropped.write(&bytes(5, 2 * 1024 * 1024)).unwrap();
    drop(dropped);
    assert_eq!(dir_entries(&store.path().join("tmp")), 0);
    assert_eq!(store.stats().unwrap().blobs, 1);
}

#[test]
fn batches_create_update_delete_with_gapless_events_in_every_set() {
    let (_dir, store) = temp_store();
    let (a, b) = (put(&store, b"one"), put(&store, b"two"));
    let uri = "http://tributary.test/r/1";
    let mut batch = Batch::new();
    batch
        .upsert(&["set-a", "merged"], record(uri, a))
        .upsert(&["set-a", "merged"], record("http://tributary.test/r/2", a));
    let applied = store.apply(&mut batch).unwrap();
    assert_eq!(applied.ops[0].outcome, Outcome::Created);
    assert_eq!(applied.ops[1].events, vec![("merged".to_owned(), 2), ("set-a".to_owned(), 2)]);

    let unchanged = store.apply(Batch::new().upsert(&["set-a", "merged"], record(uri, a))).unwrap();
    assert_eq!(unchanged.ops[0].outcome, Outcome::Unchanged);
    assert!(unchanged.ops[0].events.is_empty());

    let updated = store.apply(Batch::new().upsert(&["set-a", "merged"], record(uri, b))).unwrap();
    assert_eq!(updated.ops[0].outcome, Outcome::Updated);
    let deleted = store.apply(Batch::new().delete(&["set-a", "merged"], uri)).unwrap();
    assert_eq!(deleted.ops[0].outcome, Outcome::Deleted);
    let again =
        store.apply(Batch::new().delete(&["set-a"], uri).delete(&["set-a"], "http://tributary.test/none")).unwrap();
    assert!(again.ops.iter().all(|o| o.outcome == Outcome::Unchanged));

    let events: Vec<_> = store.events_after("set-a", 0).unwrap().map(Result::unwrap).collect();
    let changes: Vec<_> = events.iter().map(|e| (e.seq, e.change)).collect();
    assert_eq!(changes, vec![(1, Change::Created), (2, Change::Created), (3, Change::Updated), (4, Change::Deleted)]);
    assert_eq!(events[2].sha256, b);
    assert_eq!(events[2].length, 3);
    assert_eq!(events[2].origin, "http://origin.test/r/1");
    assert_eq!(events[3].sha256, b, "a deletion carries the last content's digest");
    assert_eq!(store.events_after("merged", 2).unwrap().count(), 2);

    let rec = store.record(uri).unwrap().unwrap();
    assert!(rec.is_deleted());
    let info = store.set_info("set-a").unwrap().unwrap();
    assert_eq!((info.live, info.events), (1, 4));
    assert!(store.verify().unwrap().is_clean());
}

/// Records created without a look for an old one (a first baseline's `Batch::create`) are
/// records like any other: later upserts update them, their events chain, the counters count
/// them once, and a second create of a URI in the same batch reads the first from the batch.
#[test]
fn created_records_are_updated_and_counted_as_upserted_ones() {
    let (_dir, store) = temp_store();
    let (a, b) = (put(&store, b"one"), put(&store, b"two"));
    let (one, two) = ("http://tributary.test/r/1", "http://tributary.test/r/2");
    let mut batch = Batch::new();
    batch.create(&["s"], record(one, a)).create(&["s"], record(two, a)).create(&["s"], record(two, b));
    let applied = store.apply(&mut batch).unwrap();
    let outcomes: Vec<_> = applied.ops.iter().map(|o| o.outcome).collect();
    assert_eq!(outcomes, vec![Outcome::Created, Outcome::Created, Outcome::Updated]);
    let updated = store.apply(Batch::new().upsert(&["s"], record(one, b))).unwrap();
    assert_eq!(updated.ops[0].outcome, Outcome::Updated);
    assert_eq!(store.apply(Batch::new().delete(&["s"], two)).unwrap().ops[0].outcome, Outcome::Deleted);
    let info = store.set_info("s").unwrap().unwrap();
    assert_eq!((info.live, info.events), (1, 5));
    assert!(store.verify().unwrap().is_clean());
}

#[test]
fn events_can_be_read_by_datetime_half_open() {
    let (_dir, store) = temp_store();
    let sha = put(&store, b"x");
    store.apply(Batch::new().upsert(&["s"], record("http://tributary.test/1", sha))).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    store.apply(Batch::new().upsert(&["s"], record("http://tributary.test/2", sha))).unwrap();
    let all: Vec<_> = store.events_between("s", None, None).unwrap().map(Result::unwrap).collect();
    assert_eq!(all.len(), 2);
    let (t1, t2) = (all[0].datetime, all[1].datetime);
    assert!(t1 < t2);
    let seqs =
        |from, until| -> Vec<u64> { store.events_between("s", from, until).unwrap().map(|e| e.unwrap().seq).collect() };
    assert_eq!(seqs(Some(&t2), None), vec![2]);
    assert_eq!(seqs(None, Some(&t2)), vec![1]);
    assert_eq!(seqs(Some(&t1), Some(&t2)), vec![1]);
    assert_eq!(seqs(Some(&t1), Some(&t1)), Vec::<u64>::new());
    assert!(seqs(None, None).len() == 2 && store.events_after("unknown", 0).unwrap().next().is_none());
}

#[test]
fn a_batch_naming_missing_content_commits_nothing() {
    let (_dir, store) = temp_store();
    let good = put(&store, b"good");
    let missing = "00".repeat(32).parse().unwrap();
    let mut batch = Batch::new();
    batch.upsert(&["s"], record("http://tributary.test/good", good));
    batch.upsert(&["s"], record("http://tributary.test/bad", missing));
    batch.source_state("src-a", SourceState { change_list: Some("http://u/cl.xml".into()), ..SourceState::default() });
    let err = store.apply(&mut batch).unwrap_err();
    assert!(matches!(err, StoreError::MissingBlob { ref uri, .. } if uri == "http://tributary.test/bad"), "{err}");
    assert!(store.record("http://tributary.test/good").unwrap().is_none());
    assert!(store.set_info("s").unwrap().is_none());
    assert!(store.source_state("src-a").unwrap().is_none());
    // The small blob's row was to commit with the batch; it stays pending, readable, and
    // commits with the next batch instead.
    assert_eq!(read_all(store.get(&good).unwrap()), b"good");
    store.apply(Batch::new().upsert(&["s"], record("http://tributary.test/good", good))).unwrap();
    let path = store.path().to_path_buf();
    drop(store);
    let store = reopen(&path);
    assert_eq!(read_all(store.get(&good).unwrap()), b"good");
    assert!(store.record("http://tributary.test/good").unwrap().is_some());
    assert!(store.verify().unwrap().is_clean());
}

#[test]
fn a_snapshot_reads_the_store_as_it_was_and_stamps_its_moment() {
    let (_dir, store) = temp_store();
    let sha = put(&store, b"x");
    store.apply(Batch::new().upsert(&["s"], record("http://tributary.test/1", sha))).unwrap();
    let snap = store.snapshot();
    store.apply(Batch::new().upsert(&["s"], record("http://tributary.test/2", sha))).unwrap();
    store.apply(Batch::new().delete(&["s"], "http://tributary.test/1")).unwrap();
    // The snapshot still holds the first record live, one event, and nothing after it.
    assert_eq!(snap.set_info("s").unwrap().unwrap().events, 1);
    assert_eq!(snap.events_after("s", 0).unwrap().count(), 1);
    assert!(!snap.record("http://tributary.test/1").unwrap().unwrap().is_deleted());
    assert!(snap.record("http://tributary.test/2").unwrap().is_none());
    let uris: Vec<_> = snap.records_in_range("http://tributary.test/", "", None).map(|r| r.unwrap().uri).collect();
    assert_eq!(uris, ["http://tributary.test/1"]);
    // Every event after the snapshot is stamped at or after its `at`.
    let later: Vec<_> = store.events_after("s", 1).unwrap().map(Result::unwrap).collect();
    assert_eq!(later.len(), 2);
    assert!(later.iter().all(|e| e.datetime >= snap.at()), "{later:?} vs {}", snap.at());
    assert_eq!(store.events_after("s", 0).unwrap().count(), 3, "the store itself has moved on");
}

#[test]
fn source_state_commits_with_its_batch_and_round_trips() {
    let (_dir, store) = temp_store();
    let sha = put(&store, b"x");
    let mut state =
        SourceState { resource_list_at: Some("2024-01-02T03:04:05Z".parse().unwrap()), ..SourceState::default() };
    state.documents.insert("http://u/rl.xml".into(), Default::default());
    state.status.resources = 1;
    store
        .apply(Batch::new().upsert(&["s"], record("http://tributary.test/1", sha)).source_state("src-a", state.clone()))
        .unwrap();
    assert_eq!(store.source_state("src-a").unwrap(), Some(state.clone()));
    state.status.last_error = Some("timeout".into());
    store.save_source_state("src-a", &state).unwrap();
    assert_eq!(store.source_states().unwrap(), vec![("src-a".to_owned(), state)]);
}

#[test]
fn provenance_indexes_follow_updates_and_deletes() {
    let (_dir, store) = temp_store();
    let (a, b) = (put(&store, b"a"), put(&store, b"b"));
    let uri = "http://tributary.test/p";
    let mut rec = record(uri, a);
    let mut twin = record("http://tributary.test/twin", a);
    twin.upstream = "http://upstream.test/twin".into();
    store.apply(Batch::new().upsert(&["s"], rec.clone()).upsert(&["s"], twin)).unwrap();
    assert_eq!(store.uris_by_origin("http://origin.test/p", &[]).unwrap(), vec![uri.to_owned()]);
    assert_eq!(store.uris_by_sha256(&a).unwrap().len(), 2);
    // Every record is found from its upstream URI by the name its source gives it (format 7).
    let named = [uri.to_owned()];
    assert_eq!(store.uri_by_upstream("http://upstream.test/p", &named).unwrap().as_deref(), Some(uri));

    rec.listing.origin = "http://elsewhere.test/p".into();
    rec.sha256 = b;
    store.apply(Batch::new().upsert(&["s"], rec)).unwrap();
    assert!(store.uris_by_origin("http://origin.test/p", &[]).unwrap().is_empty());
    assert_eq!(store.uris_by_origin("http://elsewhere.test/p", &[]).unwrap(), vec![uri.to_owned()]);
    assert_eq!(store.uris_by_sha256(&a).unwrap(), vec!["http://tributary.test/twin".to_owned()]);
    store.apply(Batch::new().delete(&["s"], uri)).unwrap();
    assert!(store.uris_by_sha256(&b).unwrap().is_empty());
    assert!(store.uri_by_upstream("http://upstream.test/p", &named).unwrap().is_none());
    assert!(store.verify().unwrap().is_clean());
}

/// A record fetched from its origin has no index row by origin or upstream (format 5): the
/// lookups find it under the names the caller passes, and only there.
#[test]
fn records_fetched_from_their_origin_are_found_by_name() {
    let (_dir, store) = temp_store();
    let (a, b) = (put(&store, b"a"), put(&store, b"b"));
    let direct = |uri: &str, origin: &str, sha| NewRecord {
        upstream: origin.into(),
        listing: Listing { origin: origin.into(), ..record(uri, sha).listing },
        ..record(uri, sha)
    };
    let (x, y) = ("http://tributary.test/x", "http://tributary.test/y");
    let named = |uri: &str| vec![uri.to_owned()];
    store.apply(Batch::new().upsert(&["s"], direct(x, "http://origin.test/x", a))).unwrap();
    assert_eq!(store.uri_by_upstream("http://origin.test/x", &named(x)).unwrap().as_deref(), Some(x));
    assert_eq!(store.uris_by_origin("http://origin.test/x", &named(x)).unwrap(), named(x));
    assert_eq!(store.record(x).unwrap().unwrap().upstream, "http://origin.test/x");
    assert!(store.uri_by_upstream("http://origin.test/x", &[]).unwrap().is_none(), "found only by name");
    assert!(store.uris_by_origin("http://origin.test/x", &[]).unwrap().is_empty(), "found only by name");
    assert!(
        store.uri_by_upstream("http://origin.test/", &named(x)).unwrap().is_none(),
        "the name must match the record"
    );
    let elsewhere = named("http://tributary.test/nothing");
    assert!(store.uri_by_upstream("http://origin.test/x", &elsewhere).unwrap().is_none());

    // Another record harvested through an aggregator from that same URI takes precedence.
    let via_aggregator = NewRecord { upstream: "http://origin.test/x".into(), ..record(y, b) };
    store.apply(Batch::new().upsert(&["s"], via_aggregator)).unwrap();
    let both = [x.to_owned(), y.to_owned()];
    assert_eq!(store.uri_by_upstream("http://origin.test/x", &both).unwrap().as_deref(), Some(y));
    assert_eq!(store.uri_by_upstream("http://origin.test/x", &named(x)).unwrap().as_deref(), Some(x));
    store.apply(Batch::new().delete(&["s"], y)).unwrap();
    assert_eq!(store.uri_by_upstream("http://origin.test/x", &both).unwrap().as_deref(), Some(x));

    // Two sources fetched it from the origin: the first in URI order wins.
    let w = "http://tributary.test/w";
    store.apply(Batch::new().upsert(&["s"], direct(w, "http://origin.test/x", b))).unwrap();
    let both = vec![x.to_owned(), w.to_owned()];
    assert_eq!(store.uri_by_upstream("http://origin.test/x", &both).unwrap().as_deref(), Some(w));
    assert_eq!(store.uris_by_origin("http://origin.test/x", &both).unwrap(), [w, x]);
    store.apply(Batch::new().delete(&["s"], w)).unwrap();

    // Moving to another origin moves the lookup with it; deleting ends it.
    store.apply(Batch::new().upsert(&["s"], direct(x, "http://origin.test/moved", a))).unwrap();
    assert!(store.uri_by_upstream("http://origin.test/x", &named(x)).unwrap().is_none());
    assert_eq!(store.uri_by_upstream("http://origin.test/moved", &named(x)).unwrap().as_deref(), Some(x));
    assert!(store.verify().unwrap().is_clean());
    // From an aggregator and back: the index rows come and go with it.
    store.apply(Batch::new().upsert(&["s"], record(x, a))).unwrap();
    assert_eq!(store.uris_by_origin("http://origin.test/x", &[]).unwrap(), named(x));
    store.apply(Batch::new().upsert(&["s"], direct(x, "http://origin.test/moved", a))).unwrap();
    assert!(store.uris_by_origin("http://origin.test/x", &[]).unwrap().is_empty());
    assert!(store.verify().unwrap().is_clean());
    store.apply(Batch::new().delete(&["s"], x)).unwrap();
    assert!(store.uri_by_upstream("http://origin.test/moved", &named(x)).unwrap().is_none());
    assert!(store.verify().unwrap().is_clean());
}

#[test]
fn gc_collects_unreferenced_blobs_but_spares_fresh_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let store = reopen(&path);
    let big = bytes(9, 100_000);
    let sha = store.put(&big[..], &Expected::none()).unwrap().id;
    let orphan = put(&store, b"never referenced");
    store.apply(Batch::new().upsert(&["s"], record("http://tributary.test/g", sha))).unwrap();
    store.apply(Batch::new().delete(&["s"], "http://tributary.test/g")).unwrap();
    let report = store.gc().unwrap();
    assert_eq!((report.blobs_removed, report.bytes_freed, report.kept_fresh), (1, 100_000, 1), "{report}");
    assert!(store.blob(&sha).unwrap().is_none());
    assert_eq!(blob_files(&store), 0);
    drop(store);
    let store = reopen(&path);
    assert_eq!(store.gc().unwrap().blobs_removed, 1, "fresh only within the process that put it");
    assert!(store.blob(&orphan).unwrap().is_none());
    assert!(store.verify().unwrap().is_clean());
}

/// Format 6: a blob row names one record of its content and the sha-256 index lists the
/// others. Whichever goes first, the content stays while any record refers to it, the lookup
/// lists every one, and verify agrees at each step, across batches and processes.
#[test]
fn shared_content_stays_until_its_last_record_goes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let store = reopen(&path);
    let (shared, other) = (put(&store, b"shared"), put(&store, b"other"));
    let uri = |n: &str| format!("http://tributary.test/shared/{n}");
    let uris = |names: &[&str]| names.iter().map(|n| uri(n)).collect::<Vec<_>>();
    // c first: the row names the first record applied, wherever it sorts.
    store.apply(Batch::new().upsert(&["s"], record(&uri("c"), shared))).unwrap();
    store
        .apply(Batch::new().upsert(&["s"], record(&uri("a"), shared)).upsert(&["s"], record(&uri("b"), shared)))
        .unwrap();
    assert_eq!(store.uris_by_sha256(&shared).unwrap(), uris(&["a", "b", "c"]));
    assert!(store.verify().unwrap().is_clean());

    // The named record goes; the others keep the content.
    store.apply(Batch::new().delete(&["s"], &uri("c"))).unwrap();
    assert_eq!(store.uris_by_sha256(&shared).unwrap(), uris(&["a", "b"]));
    drop(store);
    let store = reopen(&path);
    assert_eq!(store.gc().unwrap().blobs_removed, 1, "only `other`, never referenced");
    assert!(store.blob(&shared).unwrap().is_some() && store.blob(&other).unwrap().is_none());
    assert!(store.verify().unwrap().is_clean());

    // A new record is named by the row again; a record that changes only its metadata keeps
    // its place; moving to other content and back is a new entry.
    store.apply(Batch::new().upsert(&["s"], record(&uri("d"), shared))).unwrap();
    let mut a = record(&uri("a"), shared);
    a.listing.media_type = Some("text/plain".into());
    store.apply(Batch::new().upsert(&["s"], a)).unwrap();
    let fresh = put(&store, b"fresh");
    store.apply(Batch::new().upsert(&["s"], record(&uri("d"), fresh))).unwrap();
    store.apply(Batch::new().upsert(&["s"], record(&uri("d"), shared))).unwrap();
    assert_eq!(store.uris_by_sha256(&shared).unwrap(), uris(&["a", "b", "d"]));
    assert_eq!(store.uris_by_sha256(&fresh).unwrap(), Vec::<String>::new());
    assert!(store.verify().unwrap().is_clean());

    // The indexed ones go, in one batch: the record the row names (d) keeps the content alone.
    store.apply(Batch::new().delete(&["s"], &uri("a")).delete(&["s"], &uri("b"))).unwrap();
    assert_eq!(store.uris_by_sha256(&shared).unwrap(), uris(&["d"]));
    drop(store);
    let store = reopen(&path);
    assert_eq!(store.gc().unwrap().blobs_removed, 1, "only `fresh`");
    assert!(store.blob(&shared).unwrap().is_some());
    assert!(store.verify().unwrap().is_clean());

    store.apply(Batch::new().delete(&["s"], &uri("d"))).unwrap();
    assert!(store.uris_by_sha256(&shared).unwrap().is_empty());
    drop(store);
    let store = reopen(&path);
    assert_eq!(store.gc().unwrap().blobs_removed, 1);
    assert!(store.blob(&shared).unwrap().is_none());
    assert!(store.verify().unwrap().is_clean());
}

/// Small bitstreams go to packs; a store with tiny packs shows the whole cycle: puts roll over
/// to new packs, gc rewrites the packs that became mostly unreferenced and deletes them, and
/// what stays referenced reads back intact, also after a reopen.
#[test]
fn gc_rewrites_mostly_unreferenced_packs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let mut options = StoreOptions::small();
    options.pack_bytes = 8 * 1024;
    let store = Store::open_with(&path, &options).unwrap();
    let content: Vec<Vec<u8>> = (0..40).map(|i| bytes(500 + i, 2048)).collect();
    let mut batch = Batch::new();
    for (i, data) in content.iter().enumerate() {
        let sha = put(&store, data);
        batch.upsert(&["s"], record(&format!("http://tributary.test/p/{i:02}"), sha));
    }
    store.apply(&mut batch).unwrap();
    let packs_before = dir_entries(&path.join("packs"));
    assert!(packs_before >= 10, "40 × 2 KiB in 8 KiB packs: {packs_before} packs");
    let stats = store.stats().unwrap();
    assert_eq!((stats.blobs, stats.packed_blobs, stats.pack_bytes), (40, 40, 40 * 2048));
    // Keep every fourth record: each closed pack is then at most a quarter alive.
    let mut batch = Batch::new();
    for i in (0..40).filter(|i| i % 4 != 0) {
        batch.delete(&["s"], &format!("http://tributary.test/p/{i:02}"));
    }
    store.apply(&mut batch).unwrap();
    drop(store);
    // A new process: the deleted blobs are no longer fresh.
    let store = Store::open_with(&path, &options).unwrap();
    let report = store.gc().unwrap();
    assert_eq!(report.blobs_removed, 30, "{report}");
    assert!(report.packs_rewritten >= packs_before as u64 - 1, "{report}");
    let stats = store.stats().unwrap();
    assert_eq!(stats.blobs, 10);
    // Live content, plus at most the dead space of the pack that was active (never rewritten).
    assert!(stats.pack_bytes <= 10 * 2048 + 8 * 1024, "{} pack bytes left", stats.pack_bytes);
    assert!(dir_entries(&path.join("packs")) < packs_before);
    for i in (0..40).step_by(4) {
        let rec = store.record(&format!("http://tributary.test/p/{i:02}")).unwrap().unwrap();
        let mut back = Vec::new();
        store.get(&rec.sha256).unwrap().read_to_end(&mut back).unwrap();
        assert_eq!(back, content[i], "record {i} after its pack was rewritten");
    }
    assert!(store.verify().unwrap().is_clean());
    drop(store);
    let store = Store::open_with(&path, &options).unwrap();
    assert!(store.verify().unwrap().is_clean(), "and after a reopen");
}

/// A small put is readable at once, before any batch or flush commits its row, and a store
/// closed cleanly keeps it.
#[test]
fn small_blobs_are_readable_before_their_rows_are_committed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let store = reopen(&path);
    let data = bytes(77, 3000);
    let sha = put(&store, &data);
    let again = store.put(&data[..], &Expected::none()).unwrap();
    assert!(again.deduplicated, "the pending copy deduplicates a second put");
    let mut back = Vec::new();
    store.get_range(&sha, 1000..2000).unwrap().read_to_end(&mut back).unwrap();
    assert_eq!(back, &data[1000..2000]);
    drop(store);
    let store = reopen(&path);
    assert_eq!(store.blob(&sha).unwrap().map(|b| b.length), Some(3000));
    assert!(store.verify().unwrap().is_clean());
}

/// Content stored before a reopen is found again by the new process: a second copy is never
/// written.
#[test]
fn content_stored_before_a_reopen_is_deduplicated_not_appended_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let store = reopen(&path);
    let small: Vec<Vec<u8>> = (0..3000).map(|i| bytes(1000 + i, 1024 + (i as usize % 3000))).collect();
    let large = bytes(999, 100_000);
    for data in small.iter().chain([&large]) {
        put(&store, data);
    }
    drop(store);
    let packs_bytes = |p: &std::path::Path| -> u64 {
        std::fs::read_dir(p.join("packs")).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum()
    };
    let before = packs_bytes(&path);
    let store = reopen(&path);
    // Twice over: the first round may run before the filter is built, the second after it.
    for round in 0..2 {
        for (i, data) in small.iter().chain([&large]).enumerate() {
            let info = store.put(&data[..], &Expected::none()).unwrap();
            assert!(info.deduplicated, "round {round}, blob {i} was stored again");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let fresh = put(&store, &bytes(5000, 2000));
    assert!(!store.put(&bytes(5001, 2000)[..], &Expected::none()).unwrap().deduplicated);
    assert!(store.blob(&fresh).unwrap().is_some());
    drop(store);
    assert_eq!(packs_bytes(&path), before + 4000, "only the two new blobs were appended");
    assert_eq!(reopen(&path).stats().unwrap().blobs, 3003);
}

/// A pack that lost bytes its rows point at (a damaged disk, a file truncated by hand) is
/// reported by verify and by reads, never passed off as content.
#[test]
fn a_truncated_pack_is_reported_not_served() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let store = reopen(&path);
    let sha = put(&store, &bytes(78, 4000));
    store.apply(Batch::new().upsert(&["s"], record("http://tributary.test/t", sha))).unwrap();
    drop(store);
    let pack = std::fs::read_dir(path.join("packs")).unwrap().next().unwrap().unwrap().path();
    std::fs::OpenOptions::new().write(true).open(&pack).unwrap().set_len(1000).unwrap();
    let store = reopen(&path);
    let err = store.get(&sha).unwrap_err();
    assert!(tributary::error::chain(&err).to_string().contains("shorter than its rows say"), "{err:?}");
    let report = store.verify().unwrap();
    assert!(report.to_string().contains("pack unreadable"), "{report}");
}

#[test]
fn verify_finds_damaged_and_missing_content() {
    let (_dir, store) = temp_store();
    let data = bytes(11, 50_000);
    let sha = store.put(&data[..], &Expected::none()).unwrap().id;
    store.apply(Batch::new().upsert(&["s"], record("http://tributary.test/v", sha))).unwrap();
    let report = store.verify().unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!((report.blobs, report.bytes, report.records, report.events), (1, 50_000, 1, 1));
    let file = store.path().join("blobs").join(&sha.to_hex()[..2]).join(sha.to_hex());
    let mut damaged = data.clone();
    damaged[100] ^= 1;
    std::fs::write(&file, &damaged).unwrap();
    let report = store.verify().unwrap();
    assert!(!report.is_clean());
    assert!(report.to_string().contains("content hashes to"), "{report}");
    std::fs::remove_file(&file).unwrap();
    assert!(store.verify().unwrap().to_string().contains("file unreadable"));
    // A put of the same content repairs the damaged file instead of deduplicating onto it.
    store.put(&data[..], &Expected::none()).unwrap();
    assert!(store.verify().unwrap().is_clean());
}

#[test]
fn stats_count_dedup_and_sets() {
    let (_dir, store) = temp_store();
    let sha = put(&store, &bytes(1, 1000));
    let mut batch = Batch::new();
    for i in 0..4 {
        batch.upsert(&["s1", "s2"], record(&format!("http://tributary.test/{i}"), sha));
    }
    store.apply(&mut batch).unwrap();
    store.apply(Batch::new().delete(&["s1", "s2"], "http://tributary.test/0")).unwrap();
    let stats = store.stats().unwrap();
    assert_eq!((stats.blobs, stats.stored_bytes, stats.logical_bytes), (1, 1000, 3000));
    assert_eq!((stats.records_live, stats.records_deleted), (3, 1));
    assert!((stats.dedup_ratio() - 3.0).abs() < 1e-9);
    assert_eq!(
        stats.sets.iter().map(|s| (s.id.as_str(), s.live, s.events)).collect::<Vec<_>>(),
        vec![("s1", 3, 5), ("s2", 3, 5)]
    );
    let text = stats.to_string();
    assert!(text.contains("dedup ratio:    3.00") && text.contains("s1: 3 live, 5 events"), "{text}");
}

#[test]
fn keys_that_would_be_ambiguous_are_refused() {
    let (_dir, store) = temp_store();
    let sha = put(&store, b"x");
    let err = store.apply(Batch::new().upsert(&["bad\0set"], record("http://tributary.test/k", sha))).unwrap_err();
    assert!(matches!(err, StoreError::InvalidKey { what: "set id", .. }), "{err}");
    let err = store.apply(Batch::new().upsert(&["s"], record("", sha))).unwrap_err();
    assert!(matches!(err, StoreError::InvalidKey { what: "resource URI", .. }), "{err}");
}

#[test]
fn concurrent_puts_of_the_same_content_store_one_blob() {
    let (_dir, store) = temp_store();
    let data = bytes(21, 300_000);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| store.put(&data[..], &Expected::none()).unwrap());
        }
    });
    assert_eq!(store.stats().unwrap().blobs, 1);
    assert_eq!(blob_files(&store), 1);
    assert!(store.verify().unwrap().is_clean());
}

/// Small puts race with the commits that move their rows from memory to the database (each apply
/// commits them): every blob must stay readable throughout, with the digests any of its puts
/// computed, and end up committed exactly once.
#[test]
fn small_puts_racing_commits_stay_readable_and_commit_once() {
    let (_dir, store) = temp_store();
    let blobs: Vec<Vec<u8>> = (0..64u64).map(|i| bytes(i, 1000 + i as usize)).collect();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..4 {
            let (store, blobs) = (&store, &blobs);
            s.spawn(move || {
                for (i, data) in blobs.iter().enumerate() {
                    let expected = Expected { md5: (i + t) % 2 == 0, ..Expected::none() };
                    let info = store.put(&data[..], &expected).unwrap();
                    let mut back = Vec::new();
                    store.get(&info.id).unwrap().read_to_end(&mut back).unwrap();
                    assert_eq!(back, *data);
                }
            });
        }
        s.spawn(|| {
            // Bounded: the putters finish 256 small puts in far less than this many rounds.
            for _ in 0..100_000 {
                if done.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                store.flush().unwrap();
            }
        });
        s.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(200));
            done.store(true, std::sync::atomic::Ordering::Relaxed);
        });
    });
    store.flush().unwrap();
    let stats = store.stats().unwrap();
    assert_eq!((stats.blobs, stats.packed_blobs), (64, 64));
    for data in &blobs {
        // Some put of each computed its md5; a put that computes none still reports it.
        let info = store.put(&data[..], &Expected::none()).unwrap();
        assert!(info.deduplicated && info.md5.is_some());
    }
    assert!(store.verify().unwrap().is_clean());
}

#[test]
fn handles_can_cross_threads_and_await_points() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<tributary::store::Store>();
    send::<tributary::store::BlobWriter>();
    send::<tributary::store::BlobReader>();
    send::<tributary::store::EventIter>();
    send::<tributary::store::RecordIter>();
}

/// A real ENOSPC: the next temporary file name is predictable in a fresh store, so a symlink
/// there to `/dev/full` makes the put's writes fail exactly as on a full disk.
#[cfg(target_os = "linux")]
#[test]
fn a_full_disk_during_a_put_leaves_nothing() {
    let (_dir, store) = temp_store();
    let next_tmp = store.path().join("tmp").join(format!("{}-0", std::process::id()));
    std::os::unix::fs::symlink("/dev/full", &next_tmp).unwrap();
    let err = store.put(&bytes(8, 3 * 1024 * 1024)[..], &Expected::none()).unwrap_err();
    match &err {
        StoreError::Io { source, .. } => assert_eq!(source.raw_os_error(), Some(28), "{err}"),
        other => panic!("expected ENOSPC, got {other:?}"),
    }
    assert_eq!(dir_entries(&store.path().join("tmp")), 0);
    assert_eq!((store.stats().unwrap().blobs, blob_files(&store)), (0, 0));
    // A full disk stops writes: the store serves what it holds and says why it writes nothing.
    let reason = store.read_only().expect("read-only after a full disk");
    assert!(reason.contains("No space left"), "{reason}");
    assert!(store.stats().unwrap().read_only.is_some());
    let err = store.put(&b"small"[..], &Expected::none()).unwrap_err();
    assert!(matches!(err, StoreError::ReadOnly { .. }), "{err}");
    let err = store.apply(&mut Batch::new()).unwrap_err();
    assert!(matches!(err, StoreError::ReadOnly { .. }), "{err}");
    // Restarted with space again, it writes.
    let path = store.path().to_path_buf();
    drop(store);
    let store = reopen(&path);
    assert!(store.read_only().is_none());
    let info = store.put(&bytes(8, 3 * 1024 * 1024)[..], &Expected::none()).unwrap();
    assert!(store.verify().unwrap().is_clean() && !info.deduplicated);
}

/// Small blobs are buffered before they reach their pack: one put is readable at once, and a
/// reopen after a clean close finds it in the pack.
#[test]
fn a_small_blob_is_readable_while_buffered_and_after_a_reopen() {
    let (dir, store) = temp_store();
    let data = bytes(41, 3000);
    let id = put(&store, &data);
    let pack = store.path().join("packs").join("00000001.pack");
    assert_eq!(std::fs::metadata(&pack).unwrap().len(), 0, "still in the buffer");
    assert_eq!(read_all(store.get(&id).unwrap()), data);
    drop(store);
    let store = reopen(&dir.path().join("store"));
    assert_eq!(store.stats().unwrap().pack_bytes, 3000);
    assert_eq!(read_all(store.get(&id).unwrap()), data);
    assert!(store.verify().unwrap().is_clean());
}

/// A real ENOSPC while a pack's buffer is written: the active pack is a symlink to `/dev/full`.
/// The put that finds the buffer full fails and leaves nothing, and the store turns read-only;
/// the blobs already buffered stay readable, but no batch naming them commits.
#[cfg(target_os = "linux")]
#[test]
fn a_full_disk_while_writing_a_pack_fails_the_put_and_the_commit_and_commits_nothing() {
    let (dir, store) = temp_store();
    let path = store.path().to_path_buf();
    drop(store);
    let pack = path.join("packs").join("00000001.pack");
    std::fs::remove_file(&pack).unwrap();
    std::os::unix::fs::symlink("/dev/full", &pack).unwrap();
    let store = reopen(&path);

    // 4 KiB blobs: the buffer is written once 256 KiB would be exceeded.
    let mut buffered = Vec::new();
    let err = (0..100u64)
        .find_map(|i| match store.put(&bytes(1000 + i, 4096)[..], &Expected::none()) {
            Ok(info) => {
                buffered.push((info.id, bytes(1000 + i, 4096)));
                None
            }
            Err(e) => Some(e),
        })
        .expect("a put must fail once the buffer is written");
    match &err {
        StoreError::Io { source, .. } => assert_eq!(source.raw_os_error(), Some(28), "{err}"),
        other => panic!("expected ENOSPC, got {other:?}"),
    }
    assert_eq!(buffered.len(), 64);
    for (id, data) in &buffered {
        assert_eq!(&read_all(store.get(id).unwrap()), data);
    }
    let uri = "http://tributary.test/full";
    let err = store.apply(Batch::new().upsert(&["s"], record(uri, buffered[0].0))).unwrap_err();
    assert!(matches!(&err, StoreError::ReadOnly { reason } if reason.contains("No space left")), "{err}");
    assert!(store.record(uri).unwrap().is_none());
    drop(store);

    // Space again: the store opens clean, without a row of a blob whose bytes never reached
    // the disk, and the content can be put anew.
    std::fs::remove_file(&pack).unwrap();
    let store = reopen(&path);
    assert!(store.verify().unwrap().is_clean());
    assert_eq!(store.stats().unwrap().blobs, 0);
    let again = put(&store, &buffered[0].1);
    store.apply(Batch::new().upsert(&["s"], record(uri, again))).unwrap();
    assert_eq!(read_all(store.get(&again).unwrap()), buffered[0].1);
    drop(dir);
}

#[test]
fn a_sha1_mismatch_is_refused_even_when_md5_and_sha256_match() {
    use md5::Digest as _;
    let (_dir, store) = temp_store();
    // One small (packed) and one large (own file) body: both paths must refuse and clean up.
    for len in [1000, 2 * 1024 * 1024] {
        let data = bytes(len as u64 ^ 0x51, len);
        let (md5, sha256) = digests(&data);
        let sha1 = hex::encode(sha1::Sha1::digest(&data));
        let wrong_sha1 = "0".repeat(40);
        // The mismatching digest comes last, so the two that match are checked first.
        let declared = HashList::parse(&format!("md5:{md5} sha-256:{sha256} sha-1:{wrong_sha1}")).unwrap().0;
        match store.put(&data[..], &Expected::declared(Some(len as u64), Some(&declared))) {
            Err(StoreError::HashMismatch { algorithm, expected, actual }) => {
                assert_eq!(
                    (algorithm, expected.as_str(), actual.as_str()),
                    (HashAlgorithm::Sha1, &*wrong_sha1, &*sha1)
                );
            }
            other => panic!("{len} bytes: expected a sha-1 mismatch, got {other:?}"),
        }
        let stats = store.stats().unwrap();
        assert_eq!((stats.blobs, stats.stored_bytes, stats.pack_bytes), (0, 0, 0), "{len} bytes");
        assert_eq!(blob_files(&store), 0, "{len} bytes");
        assert_eq!(dir_entries(&store.path().join("tmp")), 0, "{len} bytes");
    }
    assert!(store.verify().unwrap().is_clean());
    // Nothing was left behind to deduplicate onto: the honest put writes the content anew.
    let data = bytes(1000 ^ 0x51, 1000);
    let declared = HashList::parse(&format!("sha-1:{}", hex::encode(sha1::Sha1::digest(&data)))).unwrap().0;
    let info = store.put(&data[..], &Expected::declared(Some(1000), Some(&declared))).unwrap();
    assert!(!info.deduplicated);
    assert_eq!(read_all(store.get(&info.id).unwrap()), data);
}
