//! `tributary harvest` from the command line: a bad configuration or a mistyped `--source`
//! fails before anything is fetched; `--source` picks the sources; a good configuration
//! harvests a simulated Source and prints the summary.

use crate::support::cli::run;
use crate::support::harness::config_text;
use crate::support::sim;
use crate::support::upstream::{Reply, Upstream};

const AGGREGATOR: &str = "[aggregator]\nbase_url = \"http://agg.example/\"\nlisten = \"127.0.0.1:9\"\n\
    data_dir = \"store\"\nuser_agent = \"TributaryTest/0.1 (+mailto:test@example.org)\"\n";

/// `[[source]]` `id` at `url`, allowed to reach 127.0.0.1.
fn source(id: &str, url: &str) -> String {
    format!("[[source]]\nid = \"{id}\"\nurl = \"{url}\"\nallow_private = true\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_configuration_exits_non_zero_before_fetching() {
    // A live upstream behind every configuration: any request the binary made would show here.
    let up = Upstream::start(|_, _| Reply::status(404)).await;
    let good = source("a", up.url("/rl.xml").as_str());
    // (what is wrong, the text, the key the message must name, the text its line holds)
    let cases = [
        ("unknown key", format!("{AGGREGATOR}{good}bogus = 1\n"), "bogus", "bogus = 1"),
        ("bad rate", format!("{AGGREGATOR}[defaults]\nrate = \"5/hour\"\n{good}"), "rate", "rate = "),
        ("bad duration", format!("{AGGREGATOR}{good}poll = \"soon\"\n"), "poll", "poll = "),
        (
            "duplicate id",
            format!("{AGGREGATOR}{good}{}", source("a", "http://127.0.0.1:1/")),
            "id",
            "id = \"a\"\nurl = \"http://127.0.0.1:1/",
        ),
        (
            "unknown set member",
            format!("{AGGREGATOR}{good}[[set]]\nid = \"s\"\nsources = [\"a\", \"b\"]\n"),
            "sources",
            "sources = ",
        ),
        (
            "no user_agent",
            format!("{}{good}", AGGREGATOR.replace("user_agent", "#user_agent")),
            "user_agent",
            "[aggregator]",
        ),
    ];
    for (what, text, key, at) in cases {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("sources.toml");
        std::fs::write(&cfg, &text).unwrap();
        // The line the error must point at: the line where `at` starts.
        let pos = text.find(at).unwrap_or_else(|| panic!("{what}: {at:?} not in the text"));
        let line = text[..pos].matches('\n').count() + 1;
        let out = run(&["--config", cfg.to_str().unwrap(), "harvest"]).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
        let file_line = format!("{}:{line}:", cfg.display());
        assert!(stderr.contains(&file_line), "{what}: no {file_line:?} in {stderr}");
        assert!(stderr.contains(&format!("`{key}`")), "{what}: no `{key}` in {stderr}");
        assert!(!dir.path().join("store").exists(), "{what}: a store was created");
    }
    assert!(up.hits().is_empty(), "a bad configuration fetched {:?}", up.hits());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_picks_what_is_harvested_and_an_unknown_id_fetches_nothing() {
    let a = sim::start(|c| c.resources = 12).await;
    let (b, c) = (Upstream::start(|_, _| Reply::status(404)).await, Upstream::start(|_, _| Reply::status(404)).await);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("sources.toml");
    let text = format!(
        "{AGGREGATOR}[defaults]\nrate = \"unlimited\"\n{}{}{}",
        source("a", &a.sim.url("/.well-known/resourcesync")),
        source("b", b.url("/.well-known/resourcesync").as_str()),
        source("c", c.url("/resourcelist.xml").as_str()),
    );
    std::fs::write(&cfg, text).unwrap();
    let cfg = cfg.display().to_string();
    let args = |extra: &[&'static str]| -> Vec<&str> { [&["--config", cfg.as_str(), "harvest"], extra].concat() };

    // A mistyped id: nothing opened, nothing fetched, and the message names it.
    let out = run(&args(&["--source", "a", "--source", "nope"])).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no source \"nope\"") && stderr.contains("a, b, c"), "{stderr}");
    assert!(!dir.path().join("store").exists(), "a store was created for a mistyped id");
    // The other commands that take `--source` check it the same way.
    for command in ["audit", "failures"] {
        let out = run(&["--config", &cfg, command, "--source", "nope"]).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command}: {stderr}");
        assert!(stderr.contains("no source \"nope\"") && stderr.contains("a, b, c"), "{command}: {stderr}");
    }

    // `--source a` harvests a only: b's host never hears from it.
    let out = run(&args(&["--source", "a"])).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.starts_with("1 sources: fetched 12, unchanged 0, failed 0, deleted 0, "), "{stdout}");
    let bytes: u64 = a.sim.resources().iter().map(|r| r.length).sum();
    assert!(stdout.contains(&format!(", {bytes} bytes in ")), "the summary counts {bytes} bytes: {stdout}");
    assert!(stdout.contains("s (") && stdout.contains(" resources/s)"), "duration and rate: {stdout}");
    assert!(b.hits().is_empty(), "--source a fetched from b's host: {:?}", b.hits());

    // Repeated, the flag adds sources: a (its list unchanged) and c, which publishes nothing,
    // so the pass fails (exit 1) and the summary says why; b is still left alone.
    let out = run(&args(&["--source", "a", "--source", "c"])).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.starts_with("2 sources: fetched 0, "), "{stdout}");
    assert!(stdout.contains("\n  c: ") && stdout.contains("no ResourceSync document found"), "{stdout}");
    assert!(c.count("/resourcelist.xml") >= 1, "{:?}", c.hits());
    assert!(b.hits().is_empty(), "b was fetched: {:?}", b.hits());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn harvest_once_prints_a_summary() {
    let s = sim::start(|c| c.resources = 30).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("sources.toml");
    let url = s.sim.url("/.well-known/resourcesync");
    std::fs::write(&cfg, config_text(dir.path(), "", "rate = \"unlimited\"\n", &[("a", &url, "")])).unwrap();
    let cfg = cfg.to_str().unwrap();
    let out = run(&["--config", cfg, "harvest", "--source", "a"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("fetched 30, unchanged 0, failed 0, deleted 0"), "{stdout}");
    assert!(dir.path().join("store/FORMAT").exists());

    // The command exits without tearing the store down (see `exit_durably` in
    // src/cli/common.rs): what it harvested must be durable and consistent, and a second pass
    // fetches none of it again.
    let verify = run(&["--config", cfg, "store", "verify"]).await;
    assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stdout));
    let out = run(&["--config", cfg, "harvest", "--source", "a"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("fetched 0,") && stdout.contains("failed 0,"), "{stdout}");
}
