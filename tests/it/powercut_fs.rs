//! The power-cut file system itself (`support::powercut`), through the kernel as any program
//! uses it: what a cut keeps and what it drops, file by file and name by name, that what is
//! read after a cut comes from the reverted state and not from a cache, that locks work, and
//! that the mount goes away with its handle.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::Path;

use crate::support::powercut::{Metadata, PowerCutFs, Tear};
use crate::support::rng::Rng;

fn mount(test: &str) -> Option<PowerCutFs> {
    PowerCutFs::mount(&format!("powercut_fs::{test}"))
}

fn sync_dir(dir: &Path) {
    File::open(dir).unwrap().sync_all().unwrap();
}

/// A file named `name` in the root, with `data`, content and name durable.
fn durable_file(fs: &PowerCutFs, name: &str, data: &[u8]) {
    let mut f = File::create(fs.path().join(name)).unwrap();
    f.write_all(data).unwrap();
    f.sync_all().unwrap();
    sync_dir(fs.path());
}

fn cut(fs: &mut PowerCutFs) -> crate::support::powercut::CutReport {
    fs.cut_with(&mut Rng::new(1), Tear::Never)
}

fn mounted(path: &Path) -> bool {
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let path = path.to_str().unwrap();
    mounts.lines().any(|l| l.split(' ').nth(4) == Some(path))
}

#[test]
fn synced_data_survives_a_cut_and_unsynced_data_does_not() {
    let Some(mut fs) = mount("synced_data_survives_a_cut_and_unsynced_data_does_not") else { return };
    durable_file(&fs, "kept", b"durable bytes");
    let mut f = OpenOptions::new().write(true).open(fs.path().join("kept")).unwrap();
    f.seek(SeekFrom::Start(8)).unwrap();
    f.write_all(b"BYTES and more").unwrap();
    drop(f);
    // Read back before the cut: the kernel may now hold these pages.
    assert_eq!(fs::read(fs.path().join("kept")).unwrap(), b"durable BYTES and more");

    let report = cut(&mut fs);
    assert_eq!(fs::read(fs.path().join("kept")).unwrap(), b"durable bytes", "{report}");
    assert_eq!(report.files_reverted, 1, "{report}");
    assert_eq!(report.bytes_dropped, 14, "{report}");
    let counters = fs.counters();
    assert_eq!((counters.fsyncs, counters.fsyncdirs, counters.cuts), (1, 1, 1), "{counters:?}");
}

#[test]
fn a_synced_file_whose_name_was_never_synced_is_gone() {
    let Some(mut fs) = mount("a_synced_file_whose_name_was_never_synced_is_gone") else { return };
    let mut f = File::create(fs.path().join("orphan")).unwrap();
    f.write_all(b"synced content, unsynced name").unwrap();
    f.sync_data().unwrap();
    drop(f);
    let report = cut(&mut fs);
    assert!(!fs.path().join("orphan").exists(), "{report}");
    assert_eq!((report.entries_dropped, report.inodes_dropped), (1, 1), "{report}");
    assert_eq!(fs.counters().fdatasyncs, 1);
}

#[test]
fn a_new_directory_survives_only_once_its_parent_is_synced() {
    let Some(mut fs) = mount("a_new_directory_survives_only_once_its_parent_is_synced") else { return };
    let dir = fs.path().join("d");
    fs::create_dir(&dir).unwrap();
    let mut f = File::create(dir.join("f")).unwrap();
    f.write_all(b"x").unwrap();
    f.sync_all().unwrap();
    sync_dir(&dir);
    cut(&mut fs);
    assert!(!dir.exists(), "d's own name was not durable, so nothing in it survives");

    fs::create_dir(&dir).unwrap();
    sync_dir(fs.path());
    fs::write(dir.join("f"), b"y").unwrap();
    File::open(dir.join("f")).unwrap().sync_all().unwrap();
    sync_dir(&dir);
    cut(&mut fs);
    assert_eq!(fs::read(dir.join("f")).unwrap(), b"y");
}

#[test]
fn a_rename_is_durable_only_after_its_directory_is_synced() {
    let Some(mut fs) = mount("a_rename_is_durable_only_after_its_directory_is_synced") else { return };
    durable_file(&fs, "a", b"first");
    durable_file(&fs, "b", b"second");
    fs::rename(fs.path().join("a"), fs.path().join("b")).unwrap();
    assert_eq!(fs::read(fs.path().join("b")).unwrap(), b"first");
    let report = cut(&mut fs);
    assert_eq!(fs::read(fs.path().join("a")).unwrap(), b"first", "{report}");
    assert_eq!(fs::read(fs.path().join("b")).unwrap(), b"second", "{report}");

    fs::rename(fs.path().join("a"), fs.path().join("b")).unwrap();
    sync_dir(fs.path());
    cut(&mut fs);
    assert!(!fs.path().join("a").exists());
    assert_eq!(fs::read(fs.path().join("b")).unwrap(), b"first");
}

/// The store's way to install a file: written and synced under `tmp/`, renamed into its
/// directory, that directory synced; `tmp/` itself never synced.
#[test]
fn a_file_renamed_out_of_an_unsynced_directory_keeps_its_content() {
    let Some(mut fs) = mount("a_file_renamed_out_of_an_unsynced_directory_keeps_its_content") else { return };
    for d in ["tmp", "blobs"] {
        fs::create_dir(fs.path().join(d)).unwrap();
    }
    sync_dir(fs.path());
    let mut f = File::create(fs.path().join("tmp/x")).unwrap();
    f.write_all(b"installed").unwrap();
    f.sync_all().unwrap();
    drop(f);
    fs::rename(fs.path().join("tmp/x"), fs.path().join("blobs/x")).unwrap();
    sync_dir(&fs.path().join("blobs"));
    cut(&mut fs);
    assert_eq!(fs::read(fs.path().join("blobs/x")).unwrap(), b"installed");
    assert!(!fs.path().join("tmp/x").exists());
}

#[test]
fn an_unlink_is_undone_unless_its_directory_is_synced() {
    let Some(mut fs) = mount("an_unlink_is_undone_unless_its_directory_is_synced") else { return };
    durable_file(&fs, "gone", b"still here");
    fs::remove_file(fs.path().join("gone")).unwrap();
    let report = cut(&mut fs);
    assert_eq!(report.entries_restored, 1, "{report}");
    assert_eq!(fs::read(fs.path().join("gone")).unwrap(), b"still here");
    fs::remove_file(fs.path().join("gone")).unwrap();
    sync_dir(fs.path());
    cut(&mut fs);
    assert!(!fs.path().join("gone").exists());
}

#[test]
fn a_torn_write_keeps_a_prefix_of_the_last_unsynced_write() {
    let Some(mut fs) = mount("a_torn_write_keeps_a_prefix_of_the_last_unsynced_write") else { return };
    // A page of head, so that the kernel sends the append below as one write, not a first
    // one up to the page boundary and another after it.
    let head = vec![b'h'; 4096];
    durable_file(&fs, "log", &head);
    let tail: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let mut f = OpenOptions::new().append(true).open(fs.path().join("log")).unwrap();
    f.write_all(&tail).unwrap();
    drop(f);
    let report = fs.cut_with(&mut Rng::new(7), Tear::Always);
    let got = fs::read(fs.path().join("log")).unwrap();
    assert_eq!(report.torn_writes, 1, "{report}");
    let kept = got.len() - head.len();
    assert!(kept >= 1 && kept as u64 == report.torn_bytes_kept, "{report}; file is {} bytes", got.len());
    assert_eq!(&got[..head.len()], &head[..]);
    assert_eq!(&got[head.len()..], &tail[..kept], "what is kept is a prefix of the write");
    assert_eq!(report.bytes_dropped, tail.len() as u64 - report.torn_bytes_kept, "{report}");
}

#[test]
fn whatever_a_cut_tears_the_synced_bytes_stay() {
    let Some(mut fs) = mount("whatever_a_cut_tears_the_synced_bytes_stay") else { return };
    let mut rng = Rng::new(11);
    let head = vec![b's'; 4096];
    durable_file(&fs, "f", &head);
    for round in 0..12 {
        let tail = vec![round as u8 + 1; 10_000];
        let mut f = OpenOptions::new().append(true).open(fs.path().join("f")).unwrap();
        f.write_all(&tail).unwrap();
        drop(f);
        let report = fs.cut(&mut rng);
        let got = fs::read(fs.path().join("f")).unwrap();
        assert_eq!(&got[..4096], &head[..], "round {round}: {report}");
        assert_eq!(&got[4096..], &tail[..got.len() - 4096], "round {round}: {report}");
        // Back to the synced head for the next round.
        let f = OpenOptions::new().write(true).open(fs.path().join("f")).unwrap();
        f.set_len(4096).unwrap();
        f.sync_all().unwrap();
    }
    assert_eq!(fs.counters().cuts, 12);
}

#[test]
fn with_journaled_metadata_any_sync_makes_every_entry_durable() {
    let test = "powercut_fs::with_journaled_metadata_any_sync_makes_every_entry_durable";
    let Some(mut fs) = PowerCutFs::mount_with(test, Metadata::Journaled) else { return };
    fs::create_dir(fs.path().join("d")).unwrap();
    fs::write(fs.path().join("d/unsynced"), b"content never synced").unwrap();
    let mut f = File::create(fs.path().join("synced")).unwrap();
    f.write_all(b"synced").unwrap();
    f.sync_data().unwrap();
    drop(f);
    fs::write(fs.path().join("after"), b"made after the last sync").unwrap();
    cut(&mut fs);
    assert_eq!(fs::read(fs.path().join("synced")).unwrap(), b"synced");
    assert_eq!(fs::read(fs.path().join("d/unsynced")).unwrap(), b"", "the name survives, the content does not");
    assert!(!fs.path().join("after").exists(), "nothing synced after it was made");
}

#[test]
fn holes_truncation_and_fallocate_read_as_a_disk_does() {
    let Some(mut fs) = mount("holes_truncation_and_fallocate_read_as_a_disk_does") else { return };
    let path = fs.path().join("sparse");
    let mut f = OpenOptions::new().create(true).read(true).write(true).truncate(true).open(&path).unwrap();
    f.seek(SeekFrom::Start(200_000)).unwrap();
    f.write_all(b"end").unwrap();
    let mut all = Vec::new();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_end(&mut all).unwrap();
    assert_eq!(all.len(), 200_003);
    assert!(all[..200_000].iter().all(|b| *b == 0), "a hole reads as zeros");
    f.set_len(100).unwrap();
    f.set_len(70_000).unwrap();
    assert_eq!(fs::read(&path).unwrap(), vec![0; 70_000], "a truncated tail does not come back");
    f.sync_all().unwrap();
    sync_dir(fs.path());
    f.set_len(10).unwrap();
    drop(f);
    cut(&mut fs);
    assert_eq!(fs::metadata(&path).unwrap().len(), 70_000, "an unsynced truncation is undone");
}

#[test]
fn flock_works_without_the_file_system() {
    let Some(fs) = mount("flock_works_without_the_file_system") else { return };
    durable_file(&fs, "lock", b"");
    let first = File::open(fs.path().join("lock")).unwrap();
    let second = File::open(fs.path().join("lock")).unwrap();
    first.try_lock().unwrap();
    match second.try_lock() {
        Err(std::fs::TryLockError::WouldBlock) => {}
        other => panic!("a second exclusive flock must be refused, got {other:?}"),
    }
    drop(first);
    second.try_lock().unwrap();
    assert!(fs.counters().unsupported.is_empty(), "{:?}", fs.counters().unsupported);
}

#[test]
fn the_mount_goes_away_with_its_handle() {
    let Some(fs) = mount("the_mount_goes_away_with_its_handle") else { return };
    let path = fs.path().to_owned();
    assert!(mounted(&path), "{} is a mount point", path.display());
    // A file left open keeps a plain unmount from working; the lazy one must take over.
    let open = File::create(path.join("held")).unwrap();
    drop(fs);
    assert!(!mounted(&path), "{} is still mounted", path.display());
    drop(open);
    assert!(matches!(File::open(path.join("held")).map_err(|e| e.kind()), Err(ErrorKind::NotFound)));
}
