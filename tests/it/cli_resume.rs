//! Ctrl-C in the middle of a harvest, through the real binary: the README promises that
//! SIGINT stops `harvest` and `run` cleanly (exit 0) and that running again resumes from the
//! store without fetching again anything already verified. The in-process tests of the
//! harvester stop it with a future; only a real process proves the signal handling, the
//! final commit and flush before exit, and the resume across processes.
//!
//! What can be asserted exactly: at shutdown the walk stops taking entries and in-flight
//! fetches get `SHUTDOWN_GRACE` (5 s, src/harvest/sync/baseline.rs) to finish and be committed;
//! only a fetch still running after that is abandoned (nothing stored, so fetched again next
//! time). The upstream here answers every bitstream within a tenth of a second (a 20–30 ms
//! delay, plus the test server's Nagle/delayed-ACK stall of about 40 ms), far inside the
//! grace, so every bitstream the first run requested is committed by that run and is not
//! requested again. Two bitstreams answer their first request only after 8 s, past the grace:
//! they are abandoned, nothing of them is stored, and the second run fetches them again. So
//! across both runs those two are requested exactly twice, every other bitstream exactly
//! once, and the second run fetches exactly what the first did not commit.

use std::collections::HashMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::cli;
use crate::support::digest::md_attrs;
use crate::support::harness::{BASE_URL, config_text};
use crate::support::store::read_blob;
use crate::support::upstream::{Reply, Upstream};
use tributary::naming::Naming;
use tributary::store::Store;
use url::Url;

const RESOURCES: usize = 200;
/// Longer than the harvester's shutdown grace (5 s), shorter than its header timeout (30 s).
const SLOW: Duration = Duration::from_secs(8);

/// Distinct content per resource, of a few sizes.
fn content(i: usize) -> Vec<u8> {
    format!("resource {i} of the interrupted harvest\n").repeat(1 + i % 7).into_bytes()
}

/// An upstream with one Resource List of [`RESOURCES`] bitstreams, each declared with md5,
/// sha-256 and length, each answered after 20–30 ms so a pass lasts long enough to be
/// interrupted in the middle; the bitstreams numbered in `slow` answer their first request
/// only after [`SLOW`].
async fn upstream(slow: &'static [usize]) -> Upstream {
    let mut list = String::from(
        "<?xml version=\"1.0\"?><urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" \
         xmlns:rs=\"http://www.openarchives.org/rs/terms/\"><rs:md capability=\"resourcelist\" at=\"2024-01-01T00:00:00Z\"/>",
    );
    for i in 0..RESOURCES {
        let body = content(i);
        list.push_str(&format!("<url><loc>/res/{i}</loc><rs:md {}/></url>", md_attrs(&body)));
    }
    list.push_str("</urlset>");
    Upstream::start(move |hit, n| {
        if hit.path == "/rl.xml" {
            return Reply::xml(list.clone());
        }
        match hit.path.strip_prefix("/res/").and_then(|n| n.parse::<usize>().ok()).filter(|i| *i < RESOURCES) {
            Some(i) if n == 0 && slow.contains(&i) => Reply::ok(content(i)).delayed(SLOW),
            Some(i) => Reply::ok(content(i)).delayed(Duration::from_millis(20 + (i % 11) as u64)),
            None => Reply::status(404),
        }
    })
    .await
}

/// `sources.toml` in `dir` for one source reading `up`'s Resource List; returns its path.
fn write_config(dir: &Path, up: &Upstream) -> PathBuf {
    let defaults = "rate = \"unlimited\"\nconcurrency = 4\npoll = \"1h\"\n";
    let text = config_text(dir, "", defaults, &[("a", up.url("/rl.xml").as_str(), "")]);
    let cfg = dir.join("sources.toml");
    std::fs::write(&cfg, text).unwrap();
    cfg
}

/// `tributary --config CFG ARGS…`, stdout piped, stderr into `DIR/<log>`.
fn spawn(cfg: &Path, args: &[&str], log: &str) -> Child {
    let log = std::fs::File::create(cfg.with_file_name(log)).unwrap();
    let mut cmd = cli::tributary(&["--config", cfg.to_str().unwrap()]);
    cmd.args(args).stdout(Stdio::piped()).stderr(log).spawn().unwrap()
}

/// Per bitstream path, how often the upstream was asked for it.
fn bitstream_hits(up: &Upstream) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for h in up.hits().into_iter().filter(|h| h.path.starts_with("/res/")) {
        *out.entry(h.path).or_insert(0) += 1;
    }
    out
}

/// Waits (polling every 5 ms, at most 30 s) until a third of the bitstreams were requested,
/// then sends SIGINT to `child`.
async fn interrupt_a_third_of_the_way(up: &Upstream, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while bitstream_hits(up).len() < RESOURCES / 3 {
        assert!(Instant::now() < deadline, "only {} bitstreams requested after 30 s", bitstream_hits(up).len());
        assert!(child.try_wait().unwrap().is_none(), "tributary exited before it was interrupted");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    cli::signal(child, "INT");
}

/// Waits at most 30 s for `child` to exit (then kills it and fails); returns its status and stdout.
async fn wait_for_exit(mut child: Child, log: &Path) -> (ExitStatus, String) {
    let Some(status) = cli::wait_for_exit(&mut child, Duration::from_secs(30)).await else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("tributary did not exit within 30 s; log:\n{}", read_log(log));
    };
    let mut stdout = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    (status, stdout)
}

fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The `fetched N, unchanged N, failed N` counts of a `harvest` summary.
fn counts(summary: &str) -> (usize, usize, usize) {
    let num = |key: &str| -> usize {
        let rest = summary.split(&format!("{key} ")).nth(1).unwrap_or_else(|| panic!("no {key:?} in {summary}"));
        rest.split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
    };
    (num("fetched"), num("unchanged"), num("failed"))
}

/// Runs a one-shot command to completion (bounded by the test harness), off the runtime.
async fn run_to_end(cfg: &Path, args: &[&str]) -> Output {
    cli::run(&[&["--config", cfg.to_str().unwrap()], args].concat()).await
}

/// The stored bytes of every resource equal what the upstream serves; returns how many
/// resources are stored.
fn assert_store_mirrors(data_dir: &Path, up: &Upstream, expect_all: bool) -> usize {
    let store = Store::open_existing(data_dir).unwrap();
    let naming = Naming::new(&Url::parse(BASE_URL).unwrap());
    let mut stored = 0;
    for i in 0..RESOURCES {
        let uri = naming.resource("a", up.url(&format!("/res/{i}")).as_str()).unwrap();
        let Some(rec) = store.record(&uri).unwrap() else {
            assert!(!expect_all, "/res/{i} is not stored");
            continue;
        };
        assert_eq!(read_blob(&store, &rec.sha256), content(i), "/res/{i}");
        stored += 1;
    }
    stored
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_stops_a_harvest_cleanly_and_the_next_run_fetches_only_the_rest() {
    // Early in the list, so both are in flight when the signal comes a third of the way in.
    const SLOW_ONES: &[usize] = &[40, 41];
    let up = upstream(SLOW_ONES).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &up);
    let log = dir.path().join("first.log");

    let started = Instant::now();
    let mut child = spawn(&cfg, &["harvest"], "first.log");
    interrupt_a_third_of_the_way(&up, &mut child).await;
    let (status, stdout) = wait_for_exit(child, &log).await;
    eprintln!("first run (interrupted) took {:?}: {}", started.elapsed(), stdout.trim());
    let first_log = read_log(&log);
    assert!(status.success(), "{status}\n{stdout}\n{first_log}");
    assert_eq!(first_log.matches("shutdown requested").count(), 1, "{first_log}");
    let (fetched, unchanged, failed) = counts(&stdout);
    assert_eq!((unchanged, failed), (0, 0), "{stdout}");
    let first_hits = bitstream_hits(&up);
    assert!(first_hits.values().all(|n| *n == 1), "a bitstream requested twice in one run: {first_hits:?}");
    assert!(fetched < RESOURCES, "the pass ended before the signal took effect: {stdout}");
    let slow_paths: Vec<String> = SLOW_ONES.iter().map(|i| format!("/res/{i}")).collect();
    assert!(slow_paths.iter().all(|p| first_hits.contains_key(p)), "the slow bitstreams were not requested");
    // Every request in flight at the signal finished within the grace and was committed, but
    // for the slow ones, which were abandoned: neither counted nor stored.
    assert_eq!(fetched, first_hits.len() - SLOW_ONES.len(), "{stdout}\n{first_log}");
    assert!(first_log.matches("abandoning fetches still in flight at shutdown fetches=2").count() == 1, "{first_log}");
    assert_eq!(assert_store_mirrors(&dir.path().join("store"), &up, false), fetched);
    let store = Store::open_existing(&dir.path().join("store")).unwrap();
    let naming = Naming::new(&Url::parse(BASE_URL).unwrap());
    for p in &slow_paths {
        let uri = naming.resource("a", up.url(p).as_str()).unwrap();
        assert!(store.record(&uri).unwrap().is_none(), "{p} was abandoned, yet stored");
    }
    drop(store);

    let started = Instant::now();
    let second = run_to_end(&cfg, &["harvest"]).await;
    let stdout = String::from_utf8_lossy(&second.stdout);
    eprintln!("second run took {:?}: {}", started.elapsed(), stdout.trim());
    assert!(second.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&second.stderr));
    assert_eq!(counts(&stdout), (RESOURCES - fetched, fetched, 0), "{stdout}");
    let hits = bitstream_hits(&up);
    assert_eq!(hits.len(), RESOURCES);
    let wrong: Vec<_> = hits.iter().filter(|(p, n)| **n != if slow_paths.contains(p) { 2 } else { 1 }).collect();
    assert!(wrong.is_empty(), "requested other than once (twice if abandoned) across both runs: {wrong:?}");

    let verify = run_to_end(&cfg, &["store", "verify"]).await;
    assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stdout));
    assert_eq!(assert_store_mirrors(&dir.path().join("store"), &up, true), RESOURCES);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_stops_the_service_cleanly() {
    let up = upstream(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &up);
    let log = dir.path().join("run.log");

    let mut child = spawn(&cfg, &["run"], "run.log");
    interrupt_a_third_of_the_way(&up, &mut child).await;
    let (status, _) = wait_for_exit(child, &log).await;
    let text = read_log(&log);
    assert!(status.success(), "{status}\n{text}");
    assert_eq!(text.matches("shutdown requested").count(), 1, "{text}");
    assert!(text.contains("harvester stopped"), "{text}");
    // As for `harvest`: what was requested before the signal was finished and committed.
    let requested = bitstream_hits(&up).len();
    assert!(requested < RESOURCES, "the pass ended before the signal took effect");
    let verify = run_to_end(&cfg, &["store", "verify"]).await;
    assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stdout));
    assert_eq!(assert_store_mirrors(&dir.path().join("store"), &up, false), requested);
}
