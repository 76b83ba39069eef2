//! `tributary harvest` from the command line: a bad configuration fails before anything is
//! fetched; a good one harvests a simulated Source and prints the summary.

mod common;

use std::process::Command;

fn tributary(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tributary")).args(args).output().unwrap()
}

#[test]
fn a_bad_configuration_exits_non_zero_before_fetching() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("sources.toml");
    std::fs::write(&cfg, "[aggregator]\nbase_url = \"http://127.0.0.1:8080/\"\nbogus = 1\n").unwrap();
    let out = tributary(&[
        "--config",
        cfg.to_str().unwrap(),
        "--data-dir",
        dir.path().join("store").to_str().unwrap(),
        "harvest",
        "--once",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("sources.toml"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!dir.path().join("store").exists(), "nothing was created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn harvest_once_prints_a_summary() {
    let s = common::sim::start(|c| c.resources = 30).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("sources.toml");
    let text = format!(
        "[aggregator]\nbase_url = \"http://agg.example/\"\nlisten = \"127.0.0.1:9\"\ndata_dir = \"store\"\n\
         user_agent = \"TributaryTest/0.1 (+mailto:test@example.org)\"\n[defaults]\nrate = \"unlimited\"\n\
         [[source]]\nid = \"a\"\nurl = \"{}\"\nallow_private = true\n",
        s.sim.url("/.well-known/resourcesync")
    );
    std::fs::write(&cfg, text).unwrap();
    let cfg = cfg.to_str().unwrap().to_owned();
    let first = cfg.clone();
    let out =
        tokio::task::spawn_blocking(move || tributary(&["--config", &first, "harvest", "--source", "a", "--once"]))
            .await
            .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("fetched 30, unchanged 0, failed 0, deleted 0"), "{stdout}");
    assert!(dir.path().join("store/FORMAT").exists());

    // The command exits without tearing the store down (see `exit_durably` in main.rs): what
    // it harvested must be durable and consistent, and a second pass fetches none of it again.
    let again = cfg.clone();
    let verify =
        tokio::task::spawn_blocking(move || tributary(&["--config", &again, "store", "verify"])).await.unwrap();
    assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stdout));
    let out =
        tokio::task::spawn_blocking(move || tributary(&["--config", &cfg, "harvest", "--source", "a"])).await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("fetched 0,") && stdout.contains("failed 0,"), "{stdout}");
}
