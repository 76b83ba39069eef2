//! `tributary serve` and `tributary provenance --verify` as an operator runs them: the
//! `[publish]` table shapes the served documents, SIGTERM stops the server cleanly, and the
//! live origin check goes through the polite fetcher with the source's settings.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn tributary(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tributary")).args(args).output().unwrap()
}

/// A port nothing listens on at the moment (the server binds it right after).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// GETs `url` until it answers 200, for at most 10 s.
async fn wait_until_up(client: &reqwest::Client, url: &str, server: &mut Child) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        assert!(server.try_wait().unwrap().is_none(), "serve exited early");
        if client.get(url).send().await.is_ok_and(|r| r.status().is_success()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{url} did not come up within 10 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_honours_the_publish_table_and_provenance_verifies_politely() {
    let s = crate::support::sim::start(|c| c.resources = 30).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = dir.path().join("sources.toml");
    let text = format!(
        "[aggregator]\nbase_url = \"http://127.0.0.1:{port}/\"\nlisten = \"127.0.0.1:{port}\"\n\
         data_dir = \"store\"\nuser_agent = \"TributaryTest/0.1 (+mailto:test@example.org)\"\n\
         [publish]\nresource_list_entries = 10\nchange_list_events = 7\nchange_list_period = \"none\"\n\
         [defaults]\nrate = \"unlimited\"\n\
         [[source]]\nid = \"a\"\nurl = \"{}\"\nallow_private = true\n",
        s.sim.url("/.well-known/resourcesync")
    );
    std::fs::write(&cfg, text).unwrap();
    let cfg = cfg.to_str().unwrap().to_owned();
    let c = cfg.clone();
    let out = tokio::task::spawn_blocking(move || tributary(&["--config", &c, "harvest", "--once"])).await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let mut server = Command::new(env!("CARGO_BIN_EXE_tributary"))
        .args(["--config", &cfg, "serve"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    let base = format!("http://127.0.0.1:{port}/");
    wait_until_up(&client, &format!("{base}.well-known/resourcesync"), &mut server).await;

    let list = client.get(format!("{base}sets/a/resourcelist.xml")).send().await.unwrap().text().await.unwrap();
    assert!(list.contains("<sitemapindex"), "30 resources past a limit of 10 make an index: {list}");
    let parts = list.matches("<sitemap>").count();
    assert!(parts >= 3, "{parts} parts for 30 resources at most 10 each");
    let changes = client.get(format!("{base}sets/a/changelist.xml")).send().await.unwrap().text().await.unwrap();
    assert!(changes.contains("<sitemapindex"), "30 events at 7 per list make an index: {changes}");
    assert_eq!(changes.matches("<sitemap>").count(), 5, "4 closed lists of 7 and the open one: {changes}");
    let part = client.get(first_loc(&list)).send().await.unwrap().text().await.unwrap();
    let first = first_loc(&part);
    assert!(first.starts_with(&format!("{base}r/a/")), "{first}");

    // SIGTERM: a clean stop, exit status 0, the store released for the next command.
    let pid = server.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let start = Instant::now();
    let status = loop {
        if let Some(st) = server.try_wait().unwrap() {
            break st;
        }
        assert!(start.elapsed() < Duration::from_secs(15), "serve did not stop on SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "serve exit status after SIGTERM: {status:?}");

    let origin = s.sim.url("/");
    let c = cfg.clone();
    let out =
        tokio::task::spawn_blocking(move || tributary(&["--config", &c, "provenance", &first, "--verify", "--json"]))
            .await
            .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let j: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let check = &j["resources"][0]["verify"];
    assert!(j["resources"][0]["origin"]["href"].as_str().unwrap().starts_with(&origin), "{j}");
    assert_eq!(check["fetched"]["status"], 200, "{check}");
    assert_eq!(check["matches_copy"], true, "{check}");
}

/// The text of the first `<loc>` in `xml`.
fn first_loc(xml: &str) -> String {
    let start = xml.find("<loc>").expect("a <loc>") + "<loc>".len();
    xml[start..start + xml[start..].find("</loc>").unwrap()].to_owned()
}
