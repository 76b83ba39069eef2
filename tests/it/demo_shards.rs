//! The sharded deployment demo, `scripts/demo-shards.sh`, run as an operator runs it, with the
//! binary under test: a SeaweedFS, three shards and a top level on loopback ports, all from
//! `examples/shards/sources.toml`. `--check` must find the top level holding and serving
//! everything without fetching what the bucket holds (the script's own checks; it exits 1 when
//! one fails); the stay-up mode must stop every process it started on SIGINT, as at a Ctrl-C.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use crate::support::cli::{signal, wait_for_exit};
use crate::support::tools;

/// What the script is given: the test-built binary, the `weed` the tests use, free ports.
fn demo(weed: &Path, args: &[&str], out: &Path) -> Child {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let log = std::fs::File::create(out).unwrap();
    Command::new("bash")
        .arg(root.join("scripts/demo-shards.sh"))
        .args(args)
        .env("TRIBUTARY", env!("CARGO_BIN_EXE_tributary"))
        .env("WEED", weed)
        .env("PORTS", "free")
        .env("TIMEOUT", "120")
        .env_remove("WORK")
        .env_remove("KEEP")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// Waits for `child` (at most `limit`; then it is stopped and the test fails).
async fn ended(child: &mut Child, limit: Duration, out: &Path) -> ExitStatus {
    match wait_for_exit(child, limit).await {
        Some(status) => status,
        None => {
            signal(child, "TERM");
            let _ = wait_for_exit(child, Duration::from_secs(30)).await;
            panic!("the demo did not end within {limit:?}; its output:\n{}", read(out));
        }
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The value printed after `prefix` on a line of `text`.
fn after<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    text.lines().find_map(|l| l.trim_start().strip_prefix(prefix)).map(|v| v.split_whitespace().next().unwrap_or(""))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_shows_the_top_level_serving_every_shard_and_ctrl_c_stops_it_all() {
    let Some(weed) = tools::require("weed", "demo_shards") else { return };
    let dir = tempfile::tempdir().unwrap();

    // --check: the evidence, and exit 0 only if every check of the script held.
    let out = dir.path().join("check.out");
    let mut child = demo(weed.path(), &["--check"], &out);
    let status = ended(&mut child, Duration::from_secs(300), &out).await;
    let text = read(&out);
    assert!(status.success(), "{status}:\n{text}");
    assert!(text.contains("Resource List, 1800 entries"), "{text}");
    assert!(text.contains("at most 0 were transferred again"), "the bucket's bitstreams came again:\n{text}");
    assert!(text.contains("origin  http://origin.example.org/res/0"), "{text}");
    assert!(text.trim_end().ends_with("== check passed"), "{text}");
    let work = PathBuf::from(after(&text, "== data under ").expect("the data directory is printed"));
    assert!(!work.exists(), "{} is left behind", work.display());

    // Stay-up mode: running until SIGINT, then every instance and SeaweedFS stopped, exit 0.
    let out = dir.path().join("run.out");
    let mut child = demo(weed.path(), &[], &out);
    let mut waited = 0;
    while !read(&out).contains("Ctrl-C stops everything") {
        assert!(child.try_wait().unwrap().is_none(), "the demo ended by itself:\n{}", read(&out));
        assert!(waited < 3000, "the demo was not up within 300 s:\n{}", read(&out));
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += 1;
    }
    let text = read(&out);
    let top = after(&text, "top    ").expect("the top level's address is printed").to_owned();
    let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    assert!(client.get(format!("{top}sets/all/resourcelist.xml")).send().await.unwrap().status().is_success());
    signal(&child, "INT");
    let status = ended(&mut child, Duration::from_secs(60), &out).await;
    assert!(status.success(), "{status}:\n{}", read(&out));
    assert!(client.get(&top).send().await.is_err(), "the top level still answers at {top}");
    let s3 = after(&text, "== SeaweedFS: S3 at ").expect("the S3 endpoint is printed").trim_end_matches(',');
    assert!(client.get(s3).send().await.is_err(), "SeaweedFS still answers at {s3}");
    let work = PathBuf::from(after(&text, "== data under ").unwrap());
    assert!(!work.exists(), "{} is left behind:\n{}", work.display(), read(&out));
}
