//! `tributary serve` and `tributary provenance --verify` as an operator runs them: the
//! `[publish]` table shapes the served documents, SIGTERM stops the server cleanly, and the
//! live origin check goes through the polite fetcher with the source's settings.

use std::process::Stdio;
use std::time::Duration;

use crate::support::cli::{self, run};
use crate::support::net::{free_port, wait_until_ok};
use crate::support::sim;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_honours_the_publish_table_and_provenance_verifies_politely() {
    let s = sim::start(|c| c.resources = 30).await;
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
    let cfg = cfg.to_str().unwrap();
    let out = run(&["--config", cfg, "harvest"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let mut server =
        cli::tributary(&["--config", cfg, "serve"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    let base = format!("http://127.0.0.1:{port}/");
    let sd = format!("{base}.well-known/resourcesync");
    wait_until_ok(&client, &sd, &mut server, Duration::from_secs(10)).await.unwrap();

    let list = client.get(format!("{base}sets/a/resourcelist.xml")).send().await.unwrap().text().await.unwrap();
    assert!(list.contains("<sitemapindex"), "30 resources past a limit of 10 make an index: {list}");
    let parts = list.matches("<sitemap>").count();
    assert!(parts >= 3, "{parts} parts for 30 resources at most 10 each");
    let changes = client.get(format!("{base}sets/a/changelist-index.xml")).send().await.unwrap().text().await.unwrap();
    assert!(changes.contains("<sitemapindex"), "30 events at 7 per list make an index: {changes}");
    assert_eq!(changes.matches("<sitemap>").count(), 5, "4 closed lists of 7 and the open one: {changes}");
    let part = client.get(first_loc(&list)).send().await.unwrap().text().await.unwrap();
    let first = first_loc(&part);
    assert!(first.starts_with(&format!("{base}r/a/")), "{first}");

    // SIGTERM: a clean stop, exit status 0, the store released for the next command.
    cli::signal(&server, "TERM");
    let status = cli::wait_for_exit(&mut server, Duration::from_secs(15)).await.expect("serve stops on SIGTERM");
    assert!(status.success(), "serve exit status after SIGTERM: {status:?}");

    let origin = s.sim.url("/");
    let out = run(&["--config", cfg, "provenance", &first, "--verify", "--json"]).await;
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
