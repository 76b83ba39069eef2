//! The two halves of `scripts/bench-dashboard.sh`.
//!
//! ```text
//! dashboard_bench fill <store dir> <base URL> <sources> <resources>
//! dashboard_bench browse <dashboard URL> <runs>
//! ```
//! `fill` writes `resources` records spread over `sources` sources (ids `src-000`…) through the
//! store API, as the harvester would (each record a `created` event in its source's set, and
//! the first ten sources also in the merged set `sample`), all sharing one small blob so the
//! store's size is the records' and events', then saves a dashboard status for every source
//! (some failing, with an error). `browse` drives headless Chromium through chromedriver
//! (both on PATH) and prints, per fresh load of the dashboard, the time from navigation start
//! to first contentful paint and to the sources table being filled, then the medians.

use std::error::Error;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{ClientBuilder, Locator};
use tributary::model::{HashList, W3cDateTime};
use tributary::naming::Naming;
use tributary::store::{
    Batch, Expected, HarvestState, Listing, NewRecord, PASS_HISTORY, PassCounts, PassRecord, SourceState, SourceStatus,
    Store, Via,
};
use url::Url;

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("fill") if args.len() == 5 => fill(&args[1], &args[2], args[3].parse()?, args[4].parse()?),
        Some("browse") if args.len() == 3 => {
            tokio::runtime::Runtime::new()?.block_on(browse(&args[1], args[2].parse()?))
        }
        _ => Err("usage: dashboard_bench fill <dir> <base> <sources> <resources> | browse <url> <runs>".into()),
    }
}

/// Id of source `i`.
fn source_id(i: usize) -> String {
    format!("src-{i:03}")
}

fn fill(dir: &str, base: &str, sources: usize, resources: usize) -> Result<(), Box<dyn Error>> {
    let store = Store::open(dir.as_ref())?;
    let naming = Naming::new(&Url::parse(base)?);
    let blob =
        store.put(&b"a small bitstream, shared by every record"[..], &Expected { md5: true, ..Expected::none() })?;
    let modified = Some(W3cDateTime::now());
    let per_source = resources / sources;
    let started = Instant::now();
    for s in 0..sources {
        let id = source_id(s);
        let sets: Vec<&str> = if s < 10 { vec![id.as_str(), "sample"] } else { vec![id.as_str()] };
        for chunk in (0..per_source).collect::<Vec<_>>().chunks(5_000) {
            let mut batch = Batch::new();
            for &i in chunk {
                let upstream = format!("https://{id}.example.org/objects/{i:07}");
                batch.upsert(
                    &sets,
                    NewRecord {
                        uri: naming.resource(&id, &upstream).ok_or("bad URI")?,
                        source: id.clone(),
                        upstream: upstream.clone(),
                        sha256: blob.id,
                        listing: Listing {
                            origin: upstream,
                            declared: HashList::default(),
                            length: None,
                            media_type: Some("text/plain".into()),
                            lastmod: modified,
                            via: Via {
                                modified,
                                hash: HashList::default(),
                                length: Some(blob.length),
                                media_type: None,
                            },
                            links: Vec::new(),
                        },
                    },
                );
            }
            store.apply(&mut batch)?;
        }
        store.save_source_state(&id, &state(s, per_source as u64))?;
        if s % 20 == 19 {
            eprintln!("{} sources, {:.0} s", s + 1, started.elapsed().as_secs_f64());
        }
    }
    Ok(())
}

/// A plausible status: most sources idle, every 25th failing with an error; each with a full
/// history of passes, as a long-running service has.
fn state(s: usize, held: u64) -> SourceState {
    let now = W3cDateTime::now();
    let failing = s % 25 == 24;
    let mut state = SourceState {
        status: SourceStatus {
            last_attempt: Some(now),
            last_success: Some(now),
            last_error: failing
                .then(|| format!("source {}: the Resource List could not be read: HTTP 503", source_id(s))),
            resources: held,
            failures: if failing { 3 } else { 0 },
            failing: 0,
            state: if failing { HarvestState::Failing } else { HarvestState::Idle },
            consecutive_failures: if failing { 3 } else { 0 },
            next_attempt: Some(now),
            last_pass: PassCounts { fetched: held, ..PassCounts::default() },
            ..SourceStatus::default()
        },
        ..SourceState::default()
    };
    for _ in 0..PASS_HISTORY {
        let error = state.status.last_error.clone();
        let counts = PassCounts { unchanged: held, failed: u64::from(failing), ..PassCounts::default() };
        state.record_pass(PassRecord { started: Some(now), finished: Some(now), counts, error });
    }
    state
}

async fn browse(url: &str, runs: usize) -> Result<(), Box<dyn Error>> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut driver = Command::new("chromedriver").arg(format!("--port={port}")).stdout(Stdio::null()).spawn()?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let result = measure(port, url, runs).await;
    let _ = driver.kill();
    let _ = driver.wait();
    result
}

async fn measure(port: u16, url: &str, runs: usize) -> Result<(), Box<dyn Error>> {
    let mut caps = serde_json::Map::new();
    let args =
        ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1000"];
    caps.insert("goog:chromeOptions".into(), serde_json::json!({ "args": args }));
    let c = ClientBuilder::rustls()?.capabilities(caps).connect(&format!("http://127.0.0.1:{port}")).await?;
    let (mut fcp, mut rendered) = (Vec::new(), Vec::new());
    let script = "const p = performance.getEntriesByName('first-contentful-paint')[0];\
                  const r = performance.getEntriesByName('tributary-rendered')[0];\
                  return [p ? p.startTime : -1, r ? r.startTime : -1, document.querySelectorAll('#sources-body tr').length];";
    for run in 0..=runs {
        c.goto("about:blank").await?;
        c.goto(url).await?;
        c.wait().at_most(Duration::from_secs(30)).for_element(Locator::Css("body[data-rendered='1']")).await?;
        let v = c.execute(script, vec![]).await?;
        let (p, r, rows) = (v[0].as_f64().unwrap_or(-1.0), v[1].as_f64().unwrap_or(-1.0), v[2].as_u64().unwrap_or(0));
        // The first load warms caches (binary pages, the store's cache); it is shown, not counted.
        println!(
            "load {run}: first contentful paint {p:.1} ms, sources table filled {r:.1} ms ({rows} rows){}",
            if run == 0 { " [warm-up]" } else { "" }
        );
        if run > 0 {
            fcp.push(p);
            rendered.push(r);
        }
    }
    c.close().await?;
    println!(
        "median over {runs} loads: first contentful paint {:.1} ms, sources table filled {:.1} ms",
        median(&mut fcp),
        median(&mut rendered)
    );
    Ok(())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() { f64::NAN } else { v[v.len() / 2] }
}
