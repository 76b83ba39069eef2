//! Crash safety, in the style of sled's and fjall's own crash tests: this test binary re-executes itself
//! to run the ignored test `crash_child`, a child that writes blobs, records and batches in a
//! loop and prints an `ack` line after each durable batch; the parent SIGKILLs it at a random
//! moment (5–60 ms after start), reopens the store and checks every invariant, again and again.
//!
//! A second test does the same on the power-cut file system (`support::powercut`): after each
//! kill the power is cut too, so only what the store made durable is left.
//!
//! Checked after every kill: `verify` is clean (every live record's blob exists and re-hashes
//! to its id, every index entry and change event has its record, sequence numbers run 1, 2, 3…
//! per set, counters match), every acknowledged event is present with its URI, the source
//! position is at least the last acknowledged batch, and `tmp/` was swept.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::support::rng::Rng;
use crate::support::store::{bytes, record};
use tributary::store::{Batch, Expected, SourceState, Store, StoreOptions};

/// Where the child writes: the parent sets it to the store's path.
const CHILD_ENV: &str = "TRIBUTARY_STORE_CRASH_CHILD";
const SOURCE: &str = "crash-src";
const KILLS: usize = 100;
/// A safety bound, not the expected time: 100 kills take ~10 s in release, ~25 s in debug.
const TIME_BUDGET: Duration = Duration::from_secs(90);
/// Set to run a longer soak, e.g. `TRIBUTARY_CRASH_KILLS=1000` (the time budget grows with it).
const KILLS_ENV: &str = "TRIBUTARY_CRASH_KILLS";

/// The child's full name in this binary (`store_crash::crash_child`), for `--exact`.
fn child_test() -> String {
    let module = module_path!().split_once("::").map_or(module_path!(), |(_crate, module)| module);
    format!("{module}::crash_child")
}

/// The child: writes into the store at `$CHILD_ENV` until its parent kills it. Ignored, so a
/// normal run does not count as passed a test that asserts nothing.
#[test]
#[ignore = "child process of store_crash::sigkill_at_random_moments_never_breaks_the_store; run by its parent"]
fn crash_child() {
    let path = std::env::var(CHILD_ENV).unwrap_or_else(|_| {
        panic!(
            "{CHILD_ENV} is unset: this is the child of sigkill_at_random_moments_never_breaks_the_store, which runs it"
        )
    });
    let store = Store::open_with(Path::new(&path), &StoreOptions::small()).expect("child: open");
    let first_batch = store.source_state(SOURCE).expect("child: state").map_or(0, |s| s.status.resources);
    let mut rng = Rng::seeded();
    let start = Instant::now();
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready").and_then(|()| out.flush()).expect("child: stdout");
    for next_batch in first_batch..first_batch + 10_000 {
        if start.elapsed() > Duration::from_secs(20) {
            break;
        }
        let (mut batch, described) = child_batch(&store, &mut rng, next_batch);
        let applied = store.apply(&mut batch).expect("child: apply");
        let mut line = format!("ack {next_batch}");
        for (op, uri) in applied.ops.iter().zip(&described) {
            for (set, seq) in &op.events {
                line.push_str(&format!(" {set}:{seq}:{uri}"));
            }
        }
        writeln!(out, "{line}").and_then(|()| out.flush()).expect("child: stdout");
        if rng.below(30) == 0 {
            store.gc().expect("child: gc");
        }
    }
}

/// One batch of 1–4 upserts or deletions over 150 URIs (so records are updated and deleted
/// often), content mostly inline-sized, some files, a few over 1 MiB, a third of it one of 8
/// contents many records share (so which record a blob row names moves about); plus, now and
/// then, a blob nothing will refer to.
fn child_batch(store: &Store, rng: &mut Rng, batch_no: u64) -> (Batch, Vec<String>) {
    let mut batch = Batch::new();
    let mut uris = Vec::new();
    for _ in 0..1 + rng.below(4) {
        let k = rng.below(150);
        let uri = format!("http://tributary.test/c/{k}");
        let sets: &[&str] = if k.is_multiple_of(2) { &["all", "even"] } else { &["all", "odd"] };
        if rng.below(8) == 0 {
            batch.delete(sets, &uri);
        } else {
            let data = if rng.below(3) == 0 {
                let shared = rng.below(8);
                bytes(shared, 500 + 900 * shared as usize)
            } else {
                let len = match rng.below(20) {
                    0 => 1_100_000 + rng.below(200_000),
                    1..=5 => 9_000 + rng.below(90_000),
                    _ => rng.below(8_000),
                };
                bytes(rng.next(), len as usize)
            };
            let len = data.len();
            let expected = Expected { length: Some(len as u64), md5: rng.below(2) == 0, ..Expected::none() };
            let info = store.put(&data[..], &expected).expect("child: put");
            batch.upsert(sets, record(&uri, info.id));
        }
        uris.push(uri);
    }
    if rng.below(5) == 0 {
        let len = rng.below(40_000) as usize;
        store.put(&bytes(rng.next(), len)[..], &Expected::none()).expect("child: orphan put");
    }
    let mut state = SourceState { change_list_position: Some(batch_no), ..SourceState::default() };
    state.status.resources = batch_no + 1;
    batch.source_state(SOURCE, state);
    (batch, uris)
}

/// An acknowledged event: `(set, seq) -> uri`.
type Acked = HashMap<(String, u64), String>;

fn parse_acks(stdout: &str, acked: &mut Acked, last_batch: &mut Option<u64>) {
    // A line cut by the kill has no newline; split_inclusive keeps only whole lines.
    for line in stdout.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
        let mut words = line.split_whitespace();
        if words.next() != Some("ack") {
            continue;
        }
        let Some(n) = words.next().and_then(|n| n.parse::<u64>().ok()) else { continue };
        *last_batch = Some(last_batch.map_or(n, |l: u64| l.max(n)));
        for word in words {
            let mut parts = word.splitn(3, ':');
            let (Some(set), Some(seq), Some(uri)) = (parts.next(), parts.next(), parts.next()) else {
                panic!("malformed ack word {word}")
            };
            acked.insert((set.to_owned(), seq.parse().expect("seq")), uri.to_owned());
        }
    }
}

fn check_invariants(path: &Path, acked: &Acked, last_batch: Option<u64>, round: usize) {
    let store = Store::open_with(path, &StoreOptions::small()).expect("parent: reopen after kill");
    let report = store.verify().expect("parent: verify");
    assert!(report.is_clean(), "round {round}: {report}");
    assert_eq!(std::fs::read_dir(path.join("tmp")).expect("tmp").count(), 0, "round {round}: tmp/ not swept");
    let mut logs: HashMap<String, HashMap<u64, String>> = HashMap::new();
    for (set, _) in acked.keys() {
        if !logs.contains_key(set) {
            let events = store.events_after(set, 0).expect("events").map(|e| e.expect("event"));
            logs.insert(set.clone(), events.map(|e| (e.seq, e.uri)).collect());
        }
    }
    for ((set, seq), uri) in acked {
        assert_eq!(logs[set].get(seq), Some(uri), "round {round}: acknowledged event {set} #{seq} lost");
    }
    if let Some(last) = last_batch {
        let state = store.source_state(SOURCE).expect("state").expect("acknowledged state present");
        assert!(state.status.resources > last, "round {round}: source position behind acknowledged batch {last}");
    }
    if round % 10 == 9 {
        store.gc().expect("parent: gc");
        assert_eq!(store.verify().expect("verify").stray_files, 0, "round {round}: gc left stray files");
    }
}

/// Starts a child, SIGKILLs it `delay` after its start (or after it reports ready), and
/// returns everything it printed. Bounded: a child that is not ready in 20 s fails the test.
fn run_and_kill(exe: &Path, path: &Path, delay: Duration, from_ready: bool) -> String {
    let mut child = Command::new(exe)
        .args([&child_test(), "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("child stdout");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut stdout = BufReader::new(stdout);
        let mut buf = Vec::new();
        // Only whole lines: the one the kill cut short has no newline and is dropped.
        while stdout.read_until(b'\n', &mut buf).is_ok_and(|n| n > 0) && buf.ends_with(b"\n") {
            let line = String::from_utf8_lossy(&buf[..buf.len() - 1]).into_owned();
            if tx.send(line).is_err() {
                break;
            }
            buf.clear();
        }
    });
    let mut lines = Vec::new();
    if from_ready {
        loop {
            match rx.recv_timeout(Duration::from_secs(20)) {
                // The harness may have printed `test crash_child ... ` on the same line.
                Ok(line) if line.ends_with("ready") => break,
                Ok(line) => lines.push(line),
                Err(_) => {
                    let _ = child.kill();
                    let out = child.wait_with_output().expect("output");
                    panic!("child never got ready:\n{}", String::from_utf8_lossy(&out.stderr));
                }
            }
        }
    }
    std::thread::sleep(delay);
    if let Some(status) = child.try_wait().expect("try_wait") {
        let out = child.wait_with_output().expect("output");
        panic!("child exited by itself ({status}):\n{}", String::from_utf8_lossy(&out.stderr));
    }
    child.kill().expect("SIGKILL child");
    child.wait().expect("reap child");
    reader.join().expect("reader thread");
    lines.extend(rx.try_iter());
    let mut text = String::new();
    for line in lines {
        text.push_str(&line);
        text.push('\n');
    }
    text
}

#[test]
fn sigkill_at_random_moments_never_breaks_the_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = std::env::var(KILLS_ENV).ok().and_then(|n| n.parse().ok()).unwrap_or(KILLS).max(1);
    kill_again_and_again(&dir.path().join("store"), target, None);
}

/// The same with a power cut after every kill: acknowledged batches are durable, not only
/// in the page cache.
#[test]
fn power_cuts_at_random_moments_never_lose_an_acknowledged_batch() {
    let Some(mut disk) = crate::support::powercut::PowerCutFs::mount("store_crash") else { return };
    let target = std::env::var(CUTS_ENV).ok().and_then(|n| n.parse().ok()).unwrap_or(CUTS).max(1);
    let path = disk.path().join("store");
    kill_again_and_again(&path, target, Some(&mut disk));
}

/// Cuts in the power-cut variant; `TRIBUTARY_CRASH_CUTS` runs more.
const CUTS: usize = 30;
const CUTS_ENV: &str = "TRIBUTARY_CRASH_CUTS";

/// Starts a writer on the store at `path`, kills it (and cuts the power of `disk`, if given),
/// checks, `target` times.
fn kill_again_and_again(path: &Path, target: usize, mut disk: Option<&mut crate::support::powercut::PowerCutFs>) {
    let exe = std::env::current_exe().expect("current_exe");
    let mut rng = Rng::seeded();
    let (mut acked, mut last_batch) = (Acked::new(), None);
    let start = Instant::now();
    let budget = TIME_BUDGET * u32::try_from(target.div_ceil(KILLS)).unwrap_or(1);
    let mut kills = 0;
    while kills < target && start.elapsed() < budget {
        // Odd rounds count the delay from the child's start, so some kills land while it
        // opens and recovers the store; even rounds from its "ready", so most land mid-write.
        let from_ready = kills % 2 == 0;
        let stdout = run_and_kill(&exe, path, Duration::from_millis(5 + rng.below(56)), from_ready);
        if let Some(disk) = disk.as_deref_mut() {
            disk.cut(&mut rng);
        }
        parse_acks(&stdout, &mut acked, &mut last_batch);
        check_invariants(path, &acked, last_batch, kills);
        kills += 1;
    }
    eprintln!(
        "crash test: {kills} kills, {} acknowledged events, last batch {last_batch:?}, {:.1}s",
        acked.len(),
        start.elapsed().as_secs_f64()
    );
    assert!(kills >= target, "only {kills} kills within {budget:?}");
    assert!(!acked.is_empty(), "no batch was ever acknowledged: the children never got going");
}
