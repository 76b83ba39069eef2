//! Power cuts during `tributary store import`: an interrupted import must leave either the
//! whole imported store or nothing that opens, never a half store, and running the import
//! again must then finish it. The data directory is on the power-cut file system
//! (`support::powercut`), with the bitstreams already there and synced, as after copying them
//! from another machine; the import is killed at a seeded random moment of its run and the
//! power cut.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tributary::store::{Batch, Expected, Store, StoreOptions};

use crate::support::cli::tributary;
use crate::support::powercut::PowerCutFs;
use crate::support::rng::Rng;
use crate::support::store::record;

const TEST: &str = "store_powercut_import";
/// Cuts in the suite; `TRIBUTARY_POWERCUT_IMPORT_CUTS` runs more.
const CUTS: usize = 6;
const RECORDS: usize = 3_000;

/// A store of `RECORDS` records in two sets, exported; returns the export and the source
/// store's directory (its packs are what the import's data directory gets).
fn exported(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let from = dir.join("from");
    let store = Store::open_with(&from, &StoreOptions::small()).unwrap();
    for chunk in 0..RECORDS / 500 {
        let mut batch = Batch::new();
        for n in chunk * 500..(chunk + 1) * 500 {
            let sha = store.put(format!("content {n}").as_bytes(), &Expected::none()).unwrap().id;
            batch.upsert(&["s", "all"], record(&format!("http://tributary.test/r/{n:06}"), sha));
        }
        store.apply(&mut batch).unwrap();
    }
    let file = dir.join("export.jsonl");
    let mut out = std::fs::File::create(&file).unwrap();
    store.export(&mut out, &file).unwrap();
    out.sync_all().unwrap();
    (file, from)
}

/// Copies `from/packs` to `to/packs` and syncs every file and directory, as a careful copy
/// (rsync, then sync) leaves them.
fn copy_packs_durably(from: &Path, to: &Path) {
    let sync_dir = |d: &Path| std::fs::File::open(d).unwrap().sync_all().unwrap();
    std::fs::create_dir_all(to.join("packs")).unwrap();
    for entry in std::fs::read_dir(from.join("packs")).unwrap() {
        let entry = entry.unwrap();
        let target = to.join("packs").join(entry.file_name());
        std::fs::copy(entry.path(), &target).unwrap();
        std::fs::File::open(&target).unwrap().sync_all().unwrap();
    }
    sync_dir(&to.join("packs"));
    sync_dir(to);
    sync_dir(to.parent().unwrap());
}

fn import(data_dir: &Path, file: &Path) -> Command {
    let mut cmd = tributary(&["--data-dir", data_dir.to_str().unwrap(), "store", "import", file.to_str().unwrap()]);
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    cmd
}

/// How many records the store at `data_dir` opens with, or the error it is refused with.
fn opened(data_dir: &Path) -> Result<u64, String> {
    let out = tributary(&["--data-dir", data_dir.to_str().unwrap(), "store", "stats"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let live = text.lines().find_map(|l| l.strip_prefix("records:")).unwrap_or_default();
    Ok(live.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0))
}

fn verified(data_dir: &Path) -> Result<(), String> {
    let out = tributary(&["--data-dir", data_dir.to_str().unwrap(), "verify"]).output().unwrap();
    if out.status.success() {
        return Ok(());
    }
    Err(format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn a_power_cut_during_an_import_leaves_the_whole_store_or_nothing_that_opens() {
    let Some(mut disk) = PowerCutFs::mount(TEST) else { return };
    let work = tempfile::tempdir().unwrap();
    let (file, from) = exported(work.path());
    let cuts = std::env::var("TRIBUTARY_POWERCUT_IMPORT_CUTS").ok().and_then(|v| v.parse().ok()).unwrap_or(CUTS);
    let seed = std::env::var("TRIBUTARY_POWERCUT_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(rand::random);
    eprintln!("{TEST}: seed {seed}, {cuts} cuts");
    let mut rng = Rng::new(seed);

    // How long a whole import takes here, to cut within it.
    let timed = disk.path().join("timed");
    copy_packs_durably(&from, &timed);
    let started = Instant::now();
    let out = import(&timed, &file).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let whole = started.elapsed();
    assert_eq!(opened(&timed), Ok(RECORDS as u64));

    let (mut complete, mut refused) = (0, 0);
    let mut report = String::new();
    for cut in 1..=cuts {
        let data_dir = disk.path().join(format!("cut-{cut}"));
        copy_packs_durably(&from, &data_dir);
        let mut child = import(&data_dir, &file).spawn().unwrap();
        let moment = Duration::from_millis(rng.below(whole.as_millis() as u64 + 50));
        std::thread::sleep(moment);
        let _ = child.kill();
        let _ = child.wait();
        let dropped = disk.cut(&mut rng);
        let state = match opened(&data_dir) {
            Ok(n) => {
                assert_eq!(n, RECORDS as u64, "cut {cut} ({moment:?} in): the store opened, but not whole");
                verified(&data_dir).unwrap_or_else(|e| panic!("cut {cut}: opened but not clean: {e}"));
                complete += 1;
                "complete"
            }
            Err(e) => {
                assert!(e.contains("error:") && !e.contains("panicked"), "cut {cut}: {e}");
                // Nothing that opens: the import is run again and finishes.
                let out = import(&data_dir, &file).output().unwrap();
                assert!(out.status.success(), "cut {cut}: the import again: {}", String::from_utf8_lossy(&out.stderr));
                assert_eq!(opened(&data_dir), Ok(RECORDS as u64), "cut {cut}: after importing again");
                verified(&data_dir).unwrap_or_else(|e| panic!("cut {cut}: imported again but not clean: {e}"));
                refused += 1;
                "refused, imported again"
            }
        };
        let _ = writeln!(report, "cut {cut}: {moment:?} into a {whole:?} import: {state}; the cut dropped {dropped}");
    }
    eprintln!("{report}{complete} cuts left the whole store, {refused} left nothing that opens");
}
