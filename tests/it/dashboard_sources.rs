//! A dashboard for a thousand sources (issue 50): `api/status` ranks problem sources first,
//! filters by state and name and answers one page; `api/sources/{id}` is one source with its
//! passes and changes per day. Checked against a real `tributary serve` over a store filled
//! through the store API with 1,000 sources, of which a known handful have problems; the same
//! store drives the Chromium test in `dashboard_browser`.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::net::free_port;
use crate::support::service::Service;
use crate::support::store::{put, record};
use tributary::model::W3cDateTime;
use tributary::store::{Batch, HarvestState, PassCounts, PassRecord, SourceState, SourceStatus, Store};

/// Sources in the store.
pub(crate) const SOURCES: usize = 1000;
/// The problem sources, in the order the dashboard must rank them: failing, deletions held,
/// paused, quiet (harvested, never a change), never harvested.
pub(crate) const PROBLEMS: [&str; 5] = ["s-0100", "s-0200", "s-0300", "s-0400", "s-0999"];
/// Changes the failing source applied today (the last bar of its plot).
pub(crate) const FAILING_CHANGES: u64 = 5;
/// Passes the failing source remembers.
pub(crate) const FAILING_PASSES: usize = 3;

fn id(i: usize) -> String {
    format!("s-{i:04}")
}

/// `sources.toml` naming every source (none is ever fetched: `serve` does not harvest).
fn config(port: u16) -> String {
    let mut cfg = format!(
        "[aggregator]\nbase_url = \"http://127.0.0.1:{port}/\"\nlisten = \"127.0.0.1:{port}\"\ndata_dir = \"store\"\n\
         user_agent = \"Tributary-test/0.1 (+mailto:test@example.org)\"\n\n"
    );
    for i in 0..SOURCES {
        cfg.push_str(&format!(
            "[[source]]\nid = \"{}\"\nurl = \"http://127.0.0.1:9/{i}/\"\nallow_private = true\n\n",
            id(i)
        ));
    }
    cfg
}

/// Fills `dir/store` and starts `tributary serve` over it.
pub(crate) async fn thousand_sources(dir: &Path) -> Service {
    fill(&dir.join("store"));
    Service::serve(dir, &config(free_port())).await
}

fn fill(path: &Path) {
    let store = Store::open(path).unwrap();
    let sha = put(&store, b"one small bitstream for every record");
    let mut batch = Batch::new();
    for i in 0..SOURCES {
        let source = id(i);
        // The quiet and the never-harvested sources have no change at all.
        let n = match source.as_str() {
            "s-0400" | "s-0999" => 0,
            "s-0100" => FAILING_CHANGES,
            _ => 1,
        };
        for r in 0..n {
            let mut rec = record(&format!("http://tributary.test/r/{source}/{r}"), sha);
            rec.source = source.clone();
            batch.upsert(&[source.as_str()], rec);
        }
    }
    store.apply(&mut batch).unwrap();
    for i in 0..SOURCES {
        if let Some(state) = state(&id(i)) {
            store.save_source_state(&id(i), &state).unwrap();
        }
    }
}

/// Each source's saved state: harvested a minute ago, but for the problem sources.
fn state(source: &str) -> Option<SourceState> {
    let now = W3cDateTime::now();
    let mut s = SourceState {
        status: SourceStatus { last_attempt: Some(now), last_success: Some(now), ..SourceStatus::default() },
        ..SourceState::default()
    };
    match source {
        "s-0100" => {
            s.status.state = HarvestState::Failing;
            s.status.consecutive_failures = 3;
            s.status.last_error = Some("the Resource List could not be read: HTTP 503".into());
            for n in 0..FAILING_PASSES as u64 {
                let counts = PassCounts { fetched: n, failed: 1, partial: n == 0, ..PassCounts::default() };
                let error = Some(format!("pass {n}: HTTP 503"));
                s.record_pass(PassRecord { started: Some(now), finished: Some(now), counts, error });
            }
        }
        "s-0200" => s.status.held_deletions = 7,
        "s-0300" => s.paused = Some(now),
        "s-0999" => return None,
        _ => {}
    }
    Some(s)
}

fn ids(status: &serde_json::Value) -> Vec<String> {
    status["sources"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_status_pages_a_thousand_sources_problems_first() {
    let dir = tempfile::tempdir().unwrap();
    let s = thousand_sources(dir.path()).await;

    // The default page: problems first, most serious first, then configuration order.
    let (code, _, body) = s.get("api/status").await;
    assert_eq!(code, 200);
    let st: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (st["total"].as_u64(), st["matched"].as_u64(), st["limit"].as_u64()),
        (Some(1000), Some(1000), Some(50))
    );
    let first = ids(&st);
    assert_eq!(first.len(), 50);
    assert_eq!(first[..5], PROBLEMS, "problem sources first");
    assert_eq!(first[5], "s-0000", "then the others in configuration order");
    assert_eq!(st["sources"][0]["problems"], serde_json::json!(["failing"]));
    assert_eq!(st["problems"]["quiet"], 1);
    assert_eq!(st["problems"]["never_harvested"], 1);
    assert_eq!(st["sets"].as_array().unwrap().len(), 50, "only the own sets of the sources shown");
    let (_, _, all) = s.get("api/status?limit=1000").await;
    println!(
        "api/status at {SOURCES} sources: {} bytes by default (50 sources), {} bytes with limit=1000",
        body.len(),
        all.len()
    );
    assert!(body.len() * 10 < all.len(), "the default page is a small part of the whole");

    // Paging, filters by state and by name.
    let page = s.json("api/status?offset=995&limit=10").await;
    assert_eq!(ids(&page), ["s-0994", "s-0995", "s-0996", "s-0997", "s-0998"]);
    assert_eq!(ids(&s.json("api/status?state=problem").await), PROBLEMS);
    assert_eq!(ids(&s.json("api/status?state=held").await), ["s-0200"]);
    assert_eq!(ids(&s.json("api/status?state=never_harvested").await), ["s-0999"]);
    let named = s.json("api/status?q=S-012&state=ok").await;
    assert_eq!(named["matched"], 10);
    assert_eq!(ids(&named)[0], "s-0120");
    assert_eq!(s.get("api/status?state=nonsense").await.0, 400);

    // One source: its passes, newest first, and its changes per day, today last.
    let started = Instant::now();
    let one = s.json("api/sources/s-0100").await;
    println!("api/sources/s-0100: {:?}", started.elapsed());
    assert_eq!(one["source"]["id"], "s-0100");
    let passes = one["passes"].as_array().unwrap();
    assert_eq!(passes.len(), FAILING_PASSES);
    assert_eq!(passes[0]["error"], "pass 2: HTTP 503", "newest first");
    assert_eq!(passes[2]["counts"]["partial"], true);
    let days = one["changes_per_day"].as_array().unwrap();
    assert_eq!(days.len(), 30);
    assert_eq!(days[29]["changes"], FAILING_CHANGES);
    assert_eq!(days[29]["day"].as_str().unwrap(), &W3cDateTime::now().to_string()[..10]);
    assert_eq!(s.get("api/sources/nope").await.0, 404);
}

/// A real `tributary run` polling its simulator every second: each pass lands on the source's
/// page, newest first, the baseline with everything it fetched, the later ones with the
/// simulator's changes, and the changes per day count what the log holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_pass_of_a_running_service_lands_on_the_source_page() {
    let dir = tempfile::tempdir().unwrap();
    let (port, sim_port) = (free_port(), free_port());
    let cfg = crate::support::service::config(port, sim_port, 30, 5.0);
    let s = Service::start(dir.path(), &cfg, &[], &[]).await;
    s.wait_until("three passes are recorded", Duration::from_secs(60), |s| async move {
        s.json("api/sources/sim").await["passes"].as_array().is_some_and(|p| p.len() >= 3)
    })
    .await;
    let one = s.json("api/sources/sim").await;
    let passes = one["passes"].as_array().unwrap();
    let started: Vec<W3cDateTime> = passes.iter().map(|p| p["started"].as_str().unwrap().parse().unwrap()).collect();
    assert!(started.windows(2).all(|w| w[0] >= w[1]), "newest first: {started:?}");
    assert!(passes.iter().all(|p| p["error"].is_null() && p["finished"].is_string()), "{passes:?}");
    let baseline = passes.last().unwrap();
    assert_eq!(baseline["counts"]["fetched"], 30, "the baseline: {baseline}");
    let fetched: u64 = passes.iter().map(|p| p["counts"]["fetched"].as_u64().unwrap()).sum();
    let deleted: u64 = passes.iter().map(|p| p["counts"]["deleted"].as_u64().unwrap()).sum();
    assert!(fetched + deleted > 30, "later passes brought the simulator's changes: {passes:?}");
    let days = one["changes_per_day"].as_array().unwrap();
    let logged: u64 = days.iter().map(|d| d["changes"].as_u64().unwrap()).sum();
    assert!(logged >= fetched + deleted, "{logged} changes logged against the passes' {}", fetched + deleted);
}
