//! The dashboard in a real browser: headless Chromium driven over WebDriver (chromedriver,
//! started here on 127.0.0.1) against a real `tributary run` harvesting a simulated Source.
//! Checks that the sources and counts appear and update, that the page works from the
//! keyboard, runs a provenance search and checks the answer (with its via chain), and saves a
//! screenshot. No timing asserts: the first-render time is printed, not judged.
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
