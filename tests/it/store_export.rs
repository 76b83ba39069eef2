//! `tributary store export` and `tributary store import`: the file an operator backs up,
//! moves, or upgrades a store with. The fixtures `tests/fixtures/store-format-N/` are a small
//! store with a row of every table, written by the last build of store format N, and the export
//! that build wrote of it (`examples/export_fixture.rs`): format 8 (sled and the project's own
//! engine) and format 9 (fjall, a keyspace per table; its 64 MiB preallocated journal cut to the
//! length fjall itself truncates it to when it opens the store). This build must refuse those
//! stores, and rebuild them exactly from their exports.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use tributary::model::Change;
use tributary::store::Store;

use crate::support::cli::tributary;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/store-format-8");
const FIXTURE_9: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/store-format-9");

/// Copies a directory tree (the fixture's store), so a test may open and change it.
pub(crate) fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The names in `dir`, but `LOCK`, which every command that takes the store's lock leaves.
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "LOCK")
        .collect();
    v.sort();
    v
}

fn lines(text: &str) -> Vec<serde_json::Value> {
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

/// Every line but the header, whose moment, writer and store format differ by build.
fn body(text: &str) -> Vec<&str> {
    text.lines().skip(1).collect()
}

/// The fixture's format 8 store, copied into a temporary directory.
fn fixture_store() -> (tempfile::TempDir, PathBuf) {
    fixture_store_of(FIXTURE)
}

fn fixture_store_of(fixture: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    copy_tree(&Path::new(fixture).join("store"), &store);
    (dir, store)
}

fn fixture_export() -> PathBuf {
    Path::new(FIXTURE).join("export.jsonl")
}

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = tributary(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The fixture's store, imported from its export by this build.
fn imported() -> (tempfile::TempDir, PathBuf) {
    let (dir, store) = fixture_store();
    let (code, _, err) =
        run(&["--data-dir", store.to_str().unwrap(), "store", "import", fixture_export().to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    (dir, store)
}

#[test]
fn a_format_8_store_is_refused_with_the_two_commands_that_carry_it_over() {
    let (_dir, store) = fixture_store();
    let before = listing(&store);
    let (code, _, err) = run(&["--data-dir", store.to_str().unwrap(), "store", "stats"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("format version 8"), "{err}");
    assert!(err.contains("tributary store export FILE") && err.contains("tributary store import FILE"), "{err}");
    assert_eq!(listing(&store), before, "nothing was written");
}

#[test]
fn the_format_8_export_imports_into_exactly_the_same_tables() {
    let (_dir, store) = fixture_store();
    let data_dir = store.to_str().unwrap();
    let (code, _, err) = run(&["--data-dir", data_dir, "store", "import", fixture_export().to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("records           13") && err.contains("bitstreams        14 found"), "{err}");
    assert_eq!(std::fs::read_to_string(store.join("FORMAT")).unwrap().trim(), "tributary-store 10");
    assert!(!store.join("db").exists() && !store.join("lsm").exists(), "the old engine's files are gone");

    // Exported again, every row is the one the format 8 build wrote: positions, datetimes,
    // digests, places, referrers, states and secrets.
    let (code, again, err) = run(&["--data-dir", data_dir, "store", "export", "-"]);
    assert_eq!(code, Some(0), "{err}");
    let original = std::fs::read_to_string(fixture_export()).unwrap();
    assert_eq!(body(&again), body(&original));
    let (code, out, err) = run(&["--data-dir", data_dir, "verify"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("clean"), "{out}");

    // And the store answers as it did.
    let s = Store::open_existing(&store).unwrap();
    let events: Vec<_> = s.events_after("museum", 0).unwrap().map(Result::unwrap).collect();
    assert_eq!(events.len(), 17);
    assert_eq!((events[15].seq, events[15].change, events[16].prev), (16, Change::Deleted, Some(16)));
    let original_events: Vec<_> =
        lines(&original).into_iter().filter(|l| l["kind"] == "event" && l["set"] == "museum").collect();
    for (e, o) in events.iter().zip(&original_events) {
        assert_eq!(e.datetime.to_string(), o["datetime"].as_str().unwrap());
    }
    let six = s.record("http://tributary.example.org/r/museum/6").unwrap().unwrap();
    assert!(!six.is_deleted() && six.heads.contains(&("museum".to_owned(), 17)));
    let shared = s.record("http://tributary.example.org/r/museum/12").unwrap().unwrap().sha256;
    assert_eq!(s.uris_by_sha256(&shared).unwrap().len(), 2, "the sha-256 index is rebuilt");
    let named = ["http://tributary.example.org/r/museum/1".to_owned()];
    assert_eq!(s.uris_by_origin("http://origin.example.org/item/1", &named).unwrap(), named, "and the origin index");
    assert_eq!(s.failure_count("museum").unwrap(), 1);
    assert_eq!(s.hub_subscribers(None).unwrap()[0].secret.as_deref(), Some("s3cret"));
    assert_eq!(s.subscription("k1Zx").unwrap().unwrap().last_error.as_deref(), Some("timed out"));
    assert!(s.publisher_state("partitions/museum").unwrap().is_some());
    assert_eq!(s.feed_item("news", "urn:uuid:1").unwrap(), Some(vec![1, 2, 3, 0, 255]));
}

#[test]
fn a_format_9_store_is_refused_and_its_export_imports_over_it() {
    let (_dir, store) = fixture_store_of(FIXTURE_9);
    let data_dir = store.to_str().unwrap();
    let before = listing(&store);
    let (code, _, err) = run(&["--data-dir", data_dir, "store", "stats"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("format version 9"), "{err}");
    assert!(err.contains("tributary store export FILE") && err.contains("tributary store import FILE"), "{err}");
    assert_eq!(listing(&store), before, "nothing was written");

    // The export the format 9 build wrote goes into the same data directory, over its store.
    let export = Path::new(FIXTURE_9).join("export.jsonl");
    let (code, _, err) = run(&["--data-dir", data_dir, "store", "import", export.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("records           13") && err.contains("bitstreams        14 found"), "{err}");
    assert!(err.contains("replaced the old format's database in"), "{err}");
    assert_eq!(std::fs::read_to_string(store.join("FORMAT")).unwrap().trim(), "tributary-store 10");
    let (code, again, err) = run(&["--data-dir", data_dir, "store", "export", "-"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(body(&again), body(&std::fs::read_to_string(&export).unwrap()));
    let (code, out, err) = run(&["--data-dir", data_dir, "verify"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("clean"), "{out}");
}

#[test]
fn an_import_cut_short_or_into_a_current_store_changes_nothing() {
    let (dir, store) = fixture_store();
    let data_dir = store.to_str().unwrap();
    let original = std::fs::read_to_string(fixture_export()).unwrap();
    let cut = dir.path().join("cut.jsonl");
    std::fs::write(&cut, &original[..original.len() / 2]).unwrap();
    let before = listing(&store);
    let (code, _, err) = run(&["--data-dir", data_dir, "store", "import", cut.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("nothing was changed"), "{err}");
    assert_eq!(listing(&store), before, "the format 8 store is as it was");
    let (code, _, err) = run(&["--data-dir", data_dir, "store", "stats"]);
    assert!(code == Some(2) && err.contains("format version 8"), "{err}");

    // The whole file goes through; importing again over the result is refused.
    let whole = fixture_export();
    assert_eq!(run(&["--data-dir", data_dir, "store", "import", whole.to_str().unwrap()]).0, Some(0));
    let (code, _, err) = run(&["--data-dir", data_dir, "store", "import", whole.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("already holds a store of format 10"), "{err}");
}

#[test]
fn an_export_has_a_header_every_row_and_an_end_line_with_the_counts() {
    let (dir, store) = imported();
    let file = dir.path().join("backup.jsonl");
    let (code, _, summary) = run(&["--data-dir", store.to_str().unwrap(), "store", "export", file.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{summary}");
    assert!(summary.contains("records           13"), "{summary}");
    let text = std::fs::read_to_string(&file).unwrap();
    let all = lines(&text);
    let kind = |v: &serde_json::Value| v["kind"].as_str().unwrap().to_owned();
    assert_eq!(kind(&all[0]), "header");
    assert_eq!(
        (all[0]["magic"].as_str(), all[0]["export_version"].as_u64()),
        (Some("tributary-store-export"), Some(1))
    );
    assert_eq!(all[0]["store_format"], 10);
    let end = all.last().unwrap();
    assert_eq!(kind(end), "end");
    let count = |k: &str| all.iter().filter(|v| kind(v) == k).count() as u64;
    for (k, field) in [
        ("blob", "blobs"),
        ("record", "records"),
        ("set", "sets"),
        ("event", "events"),
        ("source", "sources"),
        ("failure", "failures"),
        ("feed_item", "feed_items"),
        ("hub_subscriber", "hub_subscribers"),
        ("subscription", "subscriptions"),
        ("publisher", "publisher_rows"),
    ] {
        assert!(count(k) > 0, "the fixture has a row of every kind: no {k}");
        assert_eq!(end[field].as_u64(), Some(count(k)), "{field}");
    }
    let large = all.iter().find(|v| kind(v) == "blob" && v["place"] == "file").expect("a blob stored as a file");
    assert_eq!(large["length"], 20_000);
}

#[test]
fn an_export_ending_in_gz_is_gzip_and_imports_as_such() {
    let (dir, store) = imported();
    let file = dir.path().join("backup.jsonl.gz");
    let data_dir = store.to_str().unwrap();
    assert_eq!(run(&["--data-dir", data_dir, "store", "export", file.to_str().unwrap()]).0, Some(0));
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&file).unwrap()).read_to_string(&mut text).unwrap();
    assert_eq!(body(&text), body(&std::fs::read_to_string(fixture_export()).unwrap()));

    // A move to another machine: the bitstreams copied over, then the import.
    let moved = dir.path().join("moved");
    std::fs::create_dir(&moved).unwrap();
    copy_tree(&store.join("packs"), &moved.join("packs"));
    copy_tree(&store.join("blobs"), &moved.join("blobs"));
    let (code, _, err) = run(&["--data-dir", moved.to_str().unwrap(), "store", "import", file.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(run(&["--data-dir", moved.to_str().unwrap(), "verify"]).0, Some(0));
}

#[test]
fn an_export_that_cannot_be_written_fails_and_leaves_no_file() {
    let (dir, store) = imported();
    // The export's partial file is a symlink to /dev/full: every write fails as on a full disk.
    let file = dir.path().join("backup.jsonl");
    std::os::unix::fs::symlink("/dev/full", dir.path().join(".backup.jsonl.partial")).unwrap();
    let (code, _, err) = run(&["--data-dir", store.to_str().unwrap(), "store", "export", file.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("No space left"), "{err}");
    assert!(!file.exists(), "no file that looks like a whole export");
}

#[test]
fn bitstreams_without_metadata_are_refused_until_imported() {
    let (dir, store) = imported();
    let data_dir = store.to_str().unwrap();
    let backup = dir.path().join("backup.jsonl");
    assert_eq!(run(&["--data-dir", data_dir, "store", "export", backup.to_str().unwrap()]).0, Some(0));
    // The metadata lost (a partial restore): every command refuses, nothing starts empty.
    std::fs::remove_dir_all(store.join("meta")).unwrap();
    for args in [&["store", "stats"][..], &["verify"], &["store", "gc"]] {
        let mut all = vec!["--data-dir", data_dir];
        all.extend_from_slice(args);
        let (code, _, err) = run(&all);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains("metadata") && err.contains("tributary store import FILE"), "{err}");
    }
    assert!(!store.join("meta").exists());
    // The import rebuilds it over the same bitstreams.
    let (code, _, err) = run(&["--data-dir", data_dir, "store", "import", backup.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(run(&["--data-dir", data_dir, "verify"]).0, Some(0));
}
