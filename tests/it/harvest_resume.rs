//! Incremental synchronization end to end, against the simulated Source on 127.0.0.1:
//! following a Change List Index across rollovers, re-baselining after a gap, baselining from
//! a Resource Dump, and — the point of it all — surviving SIGKILL at random moments: the real
//! `tributary` binary is killed at least 50 times while the Source changes, restarted each
//! time, and at the end the store must equal the Source exactly and the change log must hold
//! no duplicated or missing event.
//!
//! The kill schedule comes from a seeded generator (`TRIBUTARY_RESUME_SEED` overrides the
//! seed), printed at the start, so a failure reproduces.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::cli;
use crate::support::harness::{BASE_URL, Harness, UNLIMITED, config_text, live_records};
use crate::support::rng::Rng;
use crate::support::sim;
use tributary::model::Change;
use tributary::naming::Naming;
use tributary::simulate::{ClockMode, Rollover, Simulator};
use tributary::store::Store;

/// One source `a` at `url` with `extra` keys, rate limits lifted.
fn harness(url: &str, extra: &str) -> Harness {
    Harness::new(|dir| config_text(dir, "", UNLIMITED, &[("a", url, extra)]))
}

/// Every difference between the store's live records of source `a` and the Source.
fn differences(store: &Store, sim: &Simulator) -> Vec<String> {
    let naming = Naming::new(&url::Url::parse(BASE_URL).unwrap());
    let mut held = live_records(store, "a");
    let mut out = Vec::new();
    for r in sim.resources() {
        let uri = naming.resource("a", &r.url).unwrap();
        match held.remove(&uri) {
            None => out.push(format!("missing {}", r.url)),
            Some(sha) if sha != r.sha256 => out.push(format!("stale {}", r.url)),
            Some(_) => {}
        }
    }
    out.extend(held.into_keys().map(|u| format!("extra {u}")));
    out
}

/// Replays the change log of `set`: every event must follow from the one before it for its
/// URI (no duplicate, no event missing in between), and the replay must end at the store.
fn assert_log_consistent(store: &Store, set: &str) -> usize {
    let mut live: HashMap<String, String> = HashMap::new();
    let mut n = 0;
    for e in store.events_after(set, 0).unwrap().map(Result::unwrap) {
        n += 1;
        let sha = e.sha256.to_hex();
        let before = live.get(&e.uri).cloned();
        match e.change {
            Change::Created => assert!(before.is_none(), "event {}: created {} while live", e.seq, e.uri),
            Change::Updated => {
                let b = before.unwrap_or_else(|| panic!("event {}: updated {} while not live", e.seq, e.uri));
                assert_ne!(b, sha, "event {}: an update of {} to the same content (a duplicate)", e.seq, e.uri);
            }
            Change::Deleted => assert!(before.is_some(), "event {}: deleted {} while not live", e.seq, e.uri),
        }
        if e.change == Change::Deleted {
            live.remove(&e.uri);
        } else {
            live.insert(e.uri.clone(), sha);
        }
    }
    assert_eq!(live, live_records(store, "a"), "replaying the change log must give the store");
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_the_change_list_index_across_rollovers_and_rebaselines_after_a_gap() {
    let s = sim::start(|c| {
        c.resources = 120;
        c.rollover = Rollover { count: Some(10), period: None };
        c.keep_closed_lists = 3;
    })
    .await;
    let h = harness(&s.sim.url("/.well-known/resourcesync"), "");
    let first = h.pass().await;
    assert_eq!((first.fetched(), first.failed()), (120, 0), "{first}");
    let state = h.store.source_state("a").unwrap().unwrap();
    assert!(state.baselined && state.changes_through.is_some(), "{state:?}");

    // Two closed lists and part of the open one; the same URIs change several times.
    s.sim.step(25);
    let second = h.pass().await;
    assert!(second.sources[0].error.is_none(), "{second}");
    assert_eq!(differences(&h.store, &s.sim), Vec::<String>::new());
    let state = h.store.source_state("a").unwrap().unwrap();
    assert!(state.change_list.as_deref().is_some_and(|u| u.contains("/changelist/")), "{state:?}");
    assert!(second.fetched() <= 25, "only the changed resources are fetched: {second}");

    let events = assert_log_consistent(&h.store, "a");
    let third = h.pass().await;
    assert_eq!((third.fetched(), third.deleted()), (0, 0), "{third}");
    assert_eq!(assert_log_consistent(&h.store, "a"), events, "a re-read applies nothing twice");

    // More changes than the Source keeps: the changes since the position are gone.
    s.sim.step(80);
    assert!(s.sim.dropped_changes() > 0);
    let fourth = h.pass().await;
    assert!(fourth.sources[0].error.is_none(), "{fourth}");
    assert_eq!(differences(&h.store, &s.sim), Vec::<String>::new(), "re-baselined");
    assert_log_consistent(&h.store, "a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baselines_from_a_resource_dump_then_follows_changes() {
    let s = sim::start(|c| {
        c.resources = 150;
        c.dump = true;
        c.max_size = 12_000;
    })
    .await;
    let h = harness(&s.sim.url("/.well-known/resourcesync"), "dumps = true");
    let first = h.pass().await;
    assert_eq!((first.fetched(), first.failed()), (150, 0), "{first}");
    assert_eq!(differences(&h.store, &s.sim), Vec::<String>::new());
    s.sim.step(30);
    let second = h.pass().await;
    assert!(second.sources[0].error.is_none(), "{second}");
    assert_eq!(differences(&h.store, &s.sim), Vec::<String>::new());
    assert_log_consistent(&h.store, "a");
}

/// `tributary --config CFG ARGS…`, logging warnings only, into a pipe that
/// [`harvest_to_the_end`] reads (and the killed runs drop).
fn tributary(cfg: &Path, args: &[&str]) -> Command {
    let mut c = cli::tributary(&["--config", cfg.to_str().unwrap()]);
    c.args(args).env("RUST_LOG", "warn").stdout(Stdio::null()).stderr(Stdio::piped());
    c
}

fn harvest_to_the_end(cfg: &Path) -> String {
    let out = tributary(cfg, &["harvest"]).stdout(Stdio::piped()).output().unwrap();
    format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_sigkill_at_random_moments() {
    const KILLS: usize = 55;
    let seed: u64 = std::env::var("TRIBUTARY_RESUME_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_2026);
    eprintln!("survives_sigkill_at_random_moments: seed {seed} (TRIBUTARY_RESUME_SEED reproduces)");
    let mut rng = Rng::new(seed);
    let s = sim::start(|c| {
        c.resources = 200;
        c.change_rate_per_sec = 40.0;
        c.rollover = Rollover { count: Some(30), period: None };
        c.keep_closed_lists = 4;
        c.clock = ClockMode::Real;
        c.seed = seed;
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("sources.toml");
    let url = s.sim.url("/.well-known/resourcesync");
    let text = config_text(dir.path(), "", UNLIMITED, &[("a", &url, "poll = \"300ms\"")]);
    std::fs::write(&cfg, text).unwrap();
    let ticker = s.sim.start_ticking();
    let started = Instant::now();
    for k in 0..KILLS {
        let args: &[&str] = if k % 2 == 0 { &["run"] } else { &["harvest"] };
        let mut child = tributary(&cfg, args).spawn().unwrap();
        let wait = Duration::from_millis(rng.between(30, 700));
        tokio::time::sleep(wait).await;
        // SIGKILL; a `harvest` that already finished is simply reaped.
        let _ = child.kill();
        let _ = child.wait();
    }
    drop(ticker);
    eprintln!("{KILLS} kills in {:?}; Source at generation {}", started.elapsed(), s.sim.generation());
    let mut log = String::new();
    // Bounded: the Source no longer changes, so a pass or two converges.
    for _ in 0..4 {
        let c = cfg.clone();
        log = tokio::task::spawn_blocking(move || harvest_to_the_end(&c)).await.unwrap();
        let store = Store::open(&dir.path().join("store")).unwrap();
        if differences(&store, &s.sim).is_empty() {
            break;
        }
    }
    let store = Store::open(&dir.path().join("store")).unwrap();
    assert_eq!(differences(&store, &s.sim), Vec::<String>::new(), "seed {seed}\n{log}");
    let events = assert_log_consistent(&store, "a");
    assert!(events >= 200, "seed {seed}: {events} events");
    let state = store.source_state("a").unwrap().unwrap();
    assert!(state.baselined && state.change_list.is_some(), "seed {seed}: followed the Change Lists: {state:?}");
    eprintln!("{events} events; position {:?} #{:?}", state.change_list, state.change_list_position);
}
