//! The dashboard in a real browser: headless Chromium driven over WebDriver (chromedriver,
//! started here on 127.0.0.1) against a real `tributary run` harvesting a simulated Source.
//! Checks that the sources and counts appear and update, that the page works from the
//! keyboard, runs a provenance search and checks the answer (with its via chain), and saves a
//! screenshot. No timing asserts: the first-render time is printed, not judged. A second test
//! serves a store of 1,000 sources (`dashboard_sources`): the problem sources on the first
//! screen, the filters, and a source's page with its plot.
//!
//! Without `chromium` and `chromedriver` (Debian packages `chromium`, `chromium-driver`;
//! `.ci/setup` installs them) the test fails when CI=true and is skipped loudly otherwise
//! (`support::tools`).

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::support::net::{eventually, free_port};
use crate::support::service::{Service, config};
use crate::support::tools::{Tool, require};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

const TAB: &str = "\u{E004}";
const ENTER: &str = "\u{E007}";

/// chromedriver on a free loopback port, killed on drop.
pub(crate) struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn start_driver(chromedriver: &Tool) -> Driver {
    let port = free_port();
    let child = chromedriver
        .command()
        .args([format!("--port={port}"), "--allowed-ips=127.0.0.1".into()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "chromedriver did not listen on 127.0.0.1:{port} within 20 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    Driver { child, url: format!("http://127.0.0.1:{port}") }
}

pub(crate) async fn browser(driver: &Driver, chromium: &Tool) -> Client {
    let mut caps = serde_json::Map::new();
    let args =
        ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1400"];
    caps.insert("goog:chromeOptions".into(), json!({ "args": args, "binary": chromium.path() }));
    ClientBuilder::rustls().unwrap().capabilities(caps).connect(&driver.url).await.expect("a WebDriver session")
}

async fn cell(c: &Client, field: &str) -> u64 {
    let script = format!(
        "const e = document.querySelector(\"tr[data-source='sim'] td[data-field='{field}']\"); return e ? e.textContent : '';"
    );
    let text = c.execute(&script, vec![]).await.unwrap();
    text.as_str().unwrap_or("").replace(',', "").parse().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_in_headless_chromium() {
    const TEST: &str = "dashboard_browser::dashboard_in_headless_chromium";
    let (Some(chromium), Some(chromedriver)) = (require("chromium", TEST), require("chromedriver", TEST)) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // No deletions: the provenance search below looks up a resource by origin, and the origin
    // index covers live resources only, so a simulated delete of it would make the search a 404.
    let cfg = config(free_port(), free_port(), 60, 20.0)
        .replace("change_rate = 20.0", "change_rate = 20.0\nmix = \"20,80,0\"");
    assert!(cfg.contains("mix = "), "the simulator's table changed shape: {cfg}");
    let s = Service::start(dir.path(), &cfg, &[], &[]).await;
    let driver = start_driver(&chromedriver);
    let c = browser(&driver, &chromium).await;
    let result = drive(&c, &s).await;
    let _ = c.close().await;
    result.unwrap_or_else(|e| panic!("{e}\nservice log:\n{}", s.log()));
}

async fn drive(c: &Client, s: &Service) -> Result<(), String> {
    let err = |e: fantoccini::error::CmdError| e.to_string();
    c.goto(&s.base).await.map_err(err)?;
    c.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("body[data-rendered='1'] tr[data-source='sim']"))
        .await
        .map_err(err)?;
    let rendered = c
        .execute(
            "const m = performance.getEntriesByName('tributary-rendered')[0]; return m ? m.startTime : null;",
            vec![],
        )
        .await
        .map_err(err)?;
    println!("first render (navigation start → sources table filled): {rendered} ms");

    // Sources and counts appear, then update as the harvester applies changes.
    let resources = eventually(Duration::from_secs(60), || async { cell(c, "resources").await >= 40 });
    assert!(resources.await, "timed out waiting until the baseline's resources appear");
    let changes = cell(c, "changes").await;
    let updated = eventually(Duration::from_secs(45), || async { cell(c, "changes").await > changes });
    assert!(updated.await, "timed out waiting until the changes count updates live");
    let sets = c.find_all(Locator::Css("#sets-body tr")).await.map_err(err)?;
    assert_eq!(sets.len(), 2, "one set per source plus the merged set");
    let cap = c.find(Locator::Css("tr[data-set='all'] a.uri")).await.map_err(err)?;
    assert!(cap.attr("href").await.map_err(err)?.unwrap_or_default().ends_with("sets/all/capabilitylist.xml"));
    let links = c.find_all(Locator::Css("tr[data-set='all'] a.uri")).await.map_err(err)?;
    let feed = links.last().expect("the set's links").attr("href").await.map_err(err)?.unwrap_or_default();
    assert!(feed.ends_with("sets/all/feed.atom"), "the dashboard advertises the set's feed: {feed}");
    let listed = eventually(Duration::from_secs(20), || async {
        c.find_all(Locator::Css("#changes-list li[data-seq]")).await.map(|v| !v.is_empty()).unwrap_or(false)
    });
    assert!(listed.await, "timed out waiting until recent changes are listed");

    // Keyboard: the first Tab reaches the skip link; the search runs with Enter.
    c.find(Locator::Css("body")).await.map_err(err)?.send_keys(TAB).await.map_err(err)?;
    let focused = c.active_element().await.map_err(err)?;
    assert_eq!(focused.attr("class").await.map_err(err)?.as_deref(), Some("skip"));

    // Provenance of a resource the harvester stored, by its origin URI.
    let newest = s.json("api/changes?set=sim&after=0&limit=1").await;
    let origin = newest["changes"][0]["origin"].as_str().unwrap().to_owned();
    let input = c.find(Locator::Id("provenance-q")).await.map_err(err)?;
    input.send_keys(&origin).await.map_err(err)?;
    input.send_keys(ENTER).await.map_err(err)?;
    let answer = c
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("#provenance-result article.answer"))
        .await
        .map_err(err)?;
    let text = answer.text().await.map_err(err)?;
    assert!(text.contains("Via chain") && text.contains(&origin), "{text}");
    let roles: Vec<String> = {
        let mut v = Vec::new();
        for li in answer.find_all(Locator::Css("ol.chain li strong")).await.map_err(err)? {
            v.push(li.text().await.map_err(err)?);
        }
        v
    };
    assert!(roles.len() >= 2 && roles.iter().any(|r| r == "origin"), "chain roles: {roles:?}");
    assert_eq!(c.current_url().await.map_err(err)?.as_str(), s.base, "answered in place, without navigating");

    let png = c.screenshot().await.map_err(err)?;
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    std::fs::write(&path, &png).map_err(|e| e.to_string())?;
    println!("screenshot: {}", path.display());
    assert!(png.starts_with(b"\x89PNG"));
    Ok(())
}

/// A thousand sources (issue 50): the first screen shows the problem sources, the name and
/// state filters narrow the table, and a source's page draws its plot of changes per day.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_sources_in_headless_chromium() {
    const TEST: &str = "dashboard_browser::a_thousand_sources_in_headless_chromium";
    let (Some(chromium), Some(chromedriver)) = (require("chromium", TEST), require("chromedriver", TEST)) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let s = crate::dashboard_sources::thousand_sources(dir.path()).await;
    let driver = start_driver(&chromedriver);
    let c = browser(&driver, &chromium).await;
    let result = drive_thousand(&c, &s).await;
    let _ = c.close().await;
    result.unwrap_or_else(|e| panic!("{e}\nservice log:\n{}", s.log()));
}

/// The source ids of the table's rows, top to bottom.
async fn row_ids(c: &Client) -> Vec<String> {
    let script = "return [...document.querySelectorAll('#sources-body tr[data-source]')].map(r => r.dataset.source);";
    let v = c.execute(script, vec![]).await.unwrap_or_default();
    v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect()).unwrap_or_default()
}

/// Waits (at most 20 s) until the table's rows are `want`.
async fn rows_become(c: &Client, want: &[String], what: &str) -> Result<(), String> {
    let ok = eventually(Duration::from_secs(20), || async { row_ids(c).await == want }).await;
    if ok { Ok(()) } else { Err(format!("{what}: rows are {:?}, not {want:?}", row_ids(c).await)) }
}

async fn drive_thousand(c: &Client, s: &Service) -> Result<(), String> {
    use crate::dashboard_sources::{FAILING_CHANGES, FAILING_PASSES, PROBLEMS};
    let err = |e: fantoccini::error::CmdError| e.to_string();
    c.goto(&s.base).await.map_err(err)?;
    c.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("body[data-rendered='1'] tr[data-source]"))
        .await
        .map_err(err)?;

    // The first screen: the problem sources at the top of the table, within the window.
    let rows = row_ids(c).await;
    assert_eq!(rows.len(), 50, "one page of sources");
    assert_eq!(rows[..PROBLEMS.len()], PROBLEMS, "problem sources first");
    let script = format!(
        "const r = document.querySelector(\"tr[data-source='{}']\").getBoundingClientRect(); return r.bottom <= window.innerHeight;",
        PROBLEMS[PROBLEMS.len() - 1]
    );
    assert_eq!(c.execute(&script, vec![]).await.map_err(err)?, json!(true), "the problems are on the first screen");
    let summary = c.find(Locator::Id("sources-summary")).await.map_err(err)?.text().await.map_err(err)?;
    assert!(summary.starts_with("1,000 sources") && summary.contains("1 failing"), "{summary}");

    // Filter by name, then by state.
    c.find(Locator::Id("filter-q")).await.map_err(err)?.send_keys("s-012").await.map_err(err)?;
    let named: Vec<String> = (120..130).map(|i| format!("s-{i:04}")).collect();
    rows_become(c, &named, "filtered by name").await?;
    c.execute("document.getElementById('filter-q').value = '';", vec![]).await.map_err(err)?;
    c.find(Locator::Id("filter-state")).await.map_err(err)?.select_by_value("failing").await.map_err(err)?;
    rows_become(c, &[PROBLEMS[0].to_owned()], "filtered by state").await?;

    // The failing source's page: its passes and a plot of 30 days, today's bar its changes.
    // Read in one script each: the page re-renders on every refresh, which would leave a
    // WebDriver element reference stale between two calls.
    c.execute("document.querySelector(\"tr[data-source='s-0100'] th a\").click();", vec![]).await.map_err(err)?;
    c.wait().at_most(Duration::from_secs(20)).for_element(Locator::Css("svg.plot rect.bar")).await.map_err(err)?;
    let plot = c
        .execute(
            "const b = [...document.querySelectorAll('svg.plot rect.bar')]; const t = b[b.length - 1]; \
             return [b.length, t.dataset.changes, Number(t.getAttribute('height')), \
             document.querySelectorAll('#passes tbody tr').length];",
            vec![],
        )
        .await
        .map_err(err)?;
    assert_eq!(plot[0], json!(30), "a bar per day");
    assert_eq!(plot[1], json!(FAILING_CHANGES.to_string()), "today's bar is its changes");
    assert!(plot[2].as_f64().unwrap_or(0.0) > 0.0, "today's bar is drawn: {plot}");
    assert_eq!(plot[3], json!(FAILING_PASSES));
    assert!(c.find(Locator::Id("sources")).await.map_err(err)?.attr("hidden").await.map_err(err)?.is_some());

    let png = c.screenshot().await.map_err(err)?;
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard-source.png");
    std::fs::write(&path, &png).map_err(|e| e.to_string())?;
    println!("screenshot: {}", path.display());
    Ok(())
}
