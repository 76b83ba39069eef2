//! `tributary store export`: the file an operator backs up, moves, or upgrades a store with.
//! The fixture `tests/fixtures/store-format-8/` is a small store with a row of every table and
//! the export the last format 8 build wrote of it.

use std::io::Read as _;
use std::path::Path;

use crate::support::cli::tributary;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/store-format-8");

/// Copies a directory tree (the fixture's store), so a test may open and change it.
fn copy_tree(from: &Path, to: &Path) {
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

fn lines(text: &str) -> Vec<serde_json::Value> {
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

/// The fixture's store, copied into a temporary directory.
pub(crate) fn fixture_store() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    copy_tree(&Path::new(FIXTURE).join("store"), &store);
    (dir, store)
}

/// The fixture's export file, as written.
pub(crate) fn fixture_export() -> String {
    std::fs::read_to_string(Path::new(FIXTURE).join("export.jsonl")).unwrap()
}

#[test]
fn an_export_has_a_header_every_row_and_an_end_line_with_the_counts() {
    let (dir, store) = fixture_store();
    let file = dir.path().join("backup.jsonl");
    let out = tributary(&["--data-dir", store.to_str().unwrap(), "store", "export", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(summary.contains("records           13"), "{summary}");
    let text = std::fs::read_to_string(&file).unwrap();
    let all = lines(&text);
    let kind = |v: &serde_json::Value| v["kind"].as_str().unwrap().to_owned();
    assert_eq!(kind(&all[0]), "header");
    assert_eq!(all[0]["magic"], "tributary-store-export");
    assert_eq!(all[0]["export_version"], 1);
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
    // What a reader of the file needs is spelled out: positions, datetimes, changes, digests.
    let events: Vec<_> = all.iter().filter(|v| kind(v) == "event" && v["set"] == "museum").collect();
    assert_eq!(events.iter().map(|e| e["seq"].as_u64().unwrap()).collect::<Vec<_>>(), (1..=17).collect::<Vec<_>>());
    assert_eq!(events[15]["change"], "deleted");
    assert_eq!(events[16]["prev"], 16, "a re-created resource continues its history");
    let large = all.iter().find(|v| kind(v) == "blob" && v["place"] == "file").expect("a blob stored as a file");
    assert_eq!(large["length"], 20_000);
    // Everything but the header's own moment and writer is the file the format 8 build wrote.
    assert_eq!(text.lines().skip(1).collect::<Vec<_>>(), fixture_export().lines().skip(1).collect::<Vec<_>>());
}

#[test]
fn an_export_ending_in_gz_is_gzip_and_stdout_works_too() {
    let (dir, store) = fixture_store();
    let file = dir.path().join("backup.jsonl.gz");
    let store = store.to_str().unwrap();
    let out = tributary(&["--data-dir", store, "store", "export", file.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&file).unwrap()).read_to_string(&mut text).unwrap();
    let stdout = tributary(&["--data-dir", store, "store", "export", "-"]).output().unwrap();
    assert!(stdout.status.success());
    let plain = String::from_utf8(stdout.stdout).unwrap();
    assert_eq!(lines(&text).len(), lines(&plain).len());
    assert_eq!(text.lines().last(), plain.lines().last());
}

#[test]
fn an_export_that_cannot_be_written_fails_and_leaves_no_file() {
    let (dir, store) = fixture_store();
    // The export's partial file is a symlink to /dev/full: every write fails as on a full disk.
    let file = dir.path().join("backup.jsonl");
    std::os::unix::fs::symlink("/dev/full", dir.path().join(".backup.jsonl.partial")).unwrap();
    let out = tributary(&["--data-dir", store.to_str().unwrap(), "store", "export", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("No space left"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!file.exists(), "no file that looks like a whole export");
}
