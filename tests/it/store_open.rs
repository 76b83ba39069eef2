//! Opening a store on bad ground: missing, foreign or incompatible directories, a store in
//! use by another process, and leftovers of interrupted writes. Each refusal must name the
//! path, say what to do, and modify nothing.

use std::fs;
use std::path::Path;

use tributary::store::{Store, StoreError};

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

#[test]
fn open_creates_a_store_when_the_parent_exists() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let store = Store::open(&path).unwrap();
    assert_eq!(store.path(), path);
    drop(store);
    assert!(listing(&path).contains(&"FORMAT".to_owned()));
    assert_eq!(
        fs::read_to_string(path.join("FORMAT")).unwrap().trim(),
        format!("tributary-store {}", tributary::store::FORMAT_VERSION)
    );
    Store::open_existing(&path).unwrap();
}

#[test]
fn a_missing_directory_or_parent_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = Store::open_existing(&dir.path().join("nope")).unwrap_err();
    assert!(matches!(err, StoreError::Missing { .. }));
    assert!(err.to_string().contains("nope") && err.to_string().contains("does not exist"), "{err}");
    let err = Store::open(&dir.path().join("a/b/c")).unwrap_err();
    assert!(matches!(err, StoreError::Missing { .. }), "{err}");
    assert!(!dir.path().join("a").exists());
}

#[test]
fn a_directory_that_is_not_a_store_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("notes.txt"), "mine").unwrap();
    let err = Store::open(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::NotAStore { .. }), "{err}");
    assert_eq!(listing(dir.path()), vec!["notes.txt"]);
}

#[test]
fn the_shipped_store_directory_with_only_a_readme_is_usable() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("README.md"), "data, not code").unwrap();
    Store::open(dir.path()).unwrap();
}

#[test]
fn a_second_open_is_refused_as_locked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let first = Store::open(&path).unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }), "{err}");
    assert!(err.to_string().contains("another tributary process"), "{err}");
    drop(first);
    Store::open(&path).unwrap();
}

#[test]
fn another_format_version_is_refused_without_modification() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    drop(Store::open(&path).unwrap());
    // 8 and 4 are older formats, carried over by export and import; 99 is newer than this one.
    for found in ["8", "4", "99"] {
        fs::write(path.join("FORMAT"), format!("tributary-store {found}\n")).unwrap();
        let before = listing(&path);
        let meta_before = listing(&path.join("meta"));
        let err = Store::open(&path).unwrap_err();
        match found {
            "99" => assert!(
                matches!(err, StoreError::IncompatibleFormat { supported: tributary::store::FORMAT_VERSION, .. }),
                "{err}"
            ),
            _ => assert!(matches!(err, StoreError::OldFormat { .. }), "{err}"),
        }
        let text = err.to_string();
        assert!(text.contains(found) && text.contains(&path.display().to_string()), "{text}");
        assert_eq!(listing(&path), before);
        assert_eq!(listing(&path.join("meta")), meta_before);
    }
}

#[test]
fn leftovers_of_interrupted_writes_are_swept_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    drop(Store::open(&path).unwrap());
    fs::write(path.join("tmp").join("999-1"), vec![0u8; 4096]).unwrap();
    let store = Store::open(&path).unwrap();
    assert!(listing(&path.join("tmp")).is_empty());
    assert!(store.verify().unwrap().is_clean());
}

#[test]
fn a_file_where_the_directory_should_be_is_not_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("store");
    fs::write(&file, "x").unwrap();
    assert!(matches!(Store::open(&file), Err(StoreError::NotAStore { .. })));
}

#[test]
fn a_first_open_interrupted_before_format_was_written_can_be_retried() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("LOCK"), "").unwrap();
    fs::write(dir.path().join("FORMAT.tmp"), "tributary-st").unwrap();
    Store::open(dir.path()).unwrap();
    assert_eq!(
        fs::read_to_string(dir.path().join("FORMAT")).unwrap().trim(),
        format!("tributary-store {}", tributary::store::FORMAT_VERSION)
    );
}
