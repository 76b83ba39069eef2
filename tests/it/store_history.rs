//! The two store reads added for publishing: a resource's change history across sets (a
//! chain through the change log) and key-range scans of records (Resource List parts).

use crate::support::store::{put, record, temp_store};
use tributary::model::Change;
use tributary::store::Batch;

#[test]
fn history_lists_every_set_oldest_first_and_survives_deletion() {
    let (_dir, store) = temp_store();
    let uri = "http://tributary.test/r/src-a/http/origin.test/a";
    let v1 = put(&store, b"one");
    let v2 = put(&store, b"two");
    store.apply(Batch::new().upsert(&["src-a", "all"], record(uri, v1))).unwrap();
    store
        .apply(Batch::new().upsert(&["src-a", "all"], record("http://tributary.test/r/src-a/http/origin.test/b", v1)))
        .unwrap();
    store.apply(Batch::new().upsert(&["src-a", "all"], record(uri, v2))).unwrap();
    store.apply(Batch::new().delete(&["src-a", "all"], uri)).unwrap();
    let h = store.history(uri).unwrap();
    let seen: Vec<(&str, u64, Change)> = h.iter().map(|(s, e)| (s.as_str(), e.seq, e.change)).collect();
    assert_eq!(
        seen,
        vec![
            ("all", 1, Change::Created),
            ("src-a", 1, Change::Created),
            ("all", 3, Change::Updated),
            ("src-a", 3, Change::Updated),
            ("all", 4, Change::Deleted),
            ("src-a", 4, Change::Deleted),
        ]
    );
    assert!(h.iter().all(|(_, e)| e.uri == uri));
    assert!(store.history("http://tributary.test/r/src-a/http/origin.test/none").unwrap().is_empty());
    let report = store.verify().unwrap();
    assert!(report.is_clean(), "{report}");
}

#[test]
fn records_in_range_respects_prefix_and_bounds() {
    let (_dir, store) = temp_store();
    let sha = put(&store, b"x");
    let mut batch = Batch::new();
    for u in ["r/a/1", "r/a/2", "r/a/3", "r/a-b/1", "r/ab/1", "r/b/1"] {
        let uri = format!("http://tributary.test/{u}");
        batch.upsert(&["s"], record(&uri, sha));
    }
    store.apply(&mut batch).unwrap();
    let uris = |from: &str, until: Option<&str>| -> Vec<String> {
        store
            .records_in_range("http://tributary.test/r/a/", from, until)
            .map(|r| r.unwrap().uri.replace("http://tributary.test/", ""))
            .collect()
    };
    assert_eq!(uris("", None), vec!["r/a/1", "r/a/2", "r/a/3"], "prefix only, not r/a-b/ or r/ab/");
    assert_eq!(uris("http://tributary.test/r/a/2", None), vec!["r/a/2", "r/a/3"]);
    assert_eq!(uris("", Some("http://tributary.test/r/a/3")), vec!["r/a/1", "r/a/2"]);
    assert_eq!(uris("http://tributary.test/r/a/2", Some("http://tributary.test/r/a/2")), Vec::<String>::new());
    assert_eq!(uris("http://tributary.test/r/a/3", Some("http://tributary.test/r/a/1")), Vec::<String>::new());
    assert_eq!(uris("http://tributary.test/r/b", None), Vec::<String>::new(), "from past the prefix");
}

/// The chain follows a resource through deletion and re-creation, sets it joins and leaves,
/// and two changes in one batch.
#[test]
fn history_follows_recreation_moves_between_sets_and_batched_changes() {
    let (_dir, store) = temp_store();
    let uri = "http://tributary.test/r/src-a/http/origin.test/a";
    let (v1, v2, v3) = (put(&store, b"one"), put(&store, b"two"), put(&store, b"three"));
    store.apply(Batch::new().upsert(&["a"], record(uri, v1))).unwrap();
    store.apply(Batch::new().upsert(&["a", "b"], record(uri, v2))).unwrap();
    store.apply(Batch::new().delete(&["b"], uri)).unwrap();
    store.apply(Batch::new().upsert(&["a"], record(uri, v1)).upsert(&["a"], record(uri, v3))).unwrap();
    let seen: Vec<(String, u64, Change)> =
        store.history(uri).unwrap().into_iter().map(|(s, e)| (s, e.seq, e.change)).collect();
    // One second, so ordered by each event's rank in its set; the update is what `b` logs
    // when the resource joins it.
    let want = [("a", 1, Change::Created), ("b", 1, Change::Updated), ("a", 2, Change::Updated)];
    let want_tail = [("b", 2, Change::Deleted), ("a", 3, Change::Created), ("a", 4, Change::Updated)];
    let want: Vec<(String, u64, Change)> =
        want.iter().chain(&want_tail).map(|(s, q, c)| ((*s).to_owned(), *q, *c)).collect();
    assert_eq!(seen, want);
    let report = store.verify().unwrap();
    assert!(report.is_clean(), "{report}");
}
