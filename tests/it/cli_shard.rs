//! One `sources.toml` deploying three instances: two shards harvesting a Source each, and a
//! top level harvesting the shards through the aggregator chain. `--shard` picks the instance;
//! a file with shards is never run whole.

use std::process::{Child, Stdio};
use std::time::Duration;

use crate::support::cli::{self, run};
use crate::support::net::{free_port, wait_until_ok};
use crate::support::sim;

fn shard(name: &str, port: u16) -> String {
    format!(
        "[shards.{name}]\nbase_url = \"http://127.0.0.1:{port}/\"\nlisten = \"127.0.0.1:{port}\"\ndata_dir = \"{name}\"\n"
    )
}

fn source(id: &str, url: &str, shard: &str, extra: &str) -> String {
    format!("[[source]]\nid = \"{id}\"\nurl = \"{url}\"\nshard = \"{shard}\"\n{extra}")
}

async fn serve(cfg: &str, name: &str, port: u16) -> Child {
    let mut child = cli::tributary(&["--config", cfg, "--shard", name, "serve"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let sd = format!("http://127.0.0.1:{port}/.well-known/resourcesync");
    wait_until_ok(&client, &sd, &mut child, Duration::from_secs(15)).await.unwrap();
    child
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_file_deploys_two_shards_and_the_top_level_that_joins_them() {
    let (a, b) = (sim::start(|c| c.resources = 12).await, sim::start(|c| c.resources = 7).await);
    let (p1, p2, p3) = (free_port(), free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("sources.toml");
    let text = [
        "[aggregator]\nbase_url = \"http://127.0.0.1:9/\"\nlisten = \"127.0.0.1:9\"\ndata_dir = \"store\"\n\
         user_agent = \"TributaryTest/0.1 (+mailto:test@example.org)\"\n\
         [defaults]\nrate = \"unlimited\"\nallow_private = true\n"
            .to_owned(),
        shard("one", p1),
        shard("two", p2),
        shard("top", p3),
        source("a", &a.sim.url("/.well-known/resourcesync"), "one", ""),
        source("b", &b.sim.url("/.well-known/resourcesync"), "two", ""),
        source(
            "from-one",
            &format!("http://127.0.0.1:{p1}/.well-known/resourcesync"),
            "top",
            &format!("capability_list = \"http://127.0.0.1:{p1}/sets/a/capabilitylist.xml\"\n"),
        ),
        source(
            "from-two",
            &format!("http://127.0.0.1:{p2}/.well-known/resourcesync"),
            "top",
            &format!("capability_list = \"http://127.0.0.1:{p2}/sets/b/capabilitylist.xml\"\n"),
        ),
        "[[set]]\nid = \"everything\"\nsources = [\"from-one\", \"from-two\"]\n".to_owned(),
    ]
    .concat();
    std::fs::write(&cfg, text).unwrap();
    let cfg = cfg.to_str().unwrap();

    // Run whole, the file is refused before anything opens or is fetched.
    let out = run(&["--config", cfg, "harvest"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--shard NAME") && stderr.contains("one, top, two"), "{stderr}");
    let out = run(&["--config", cfg, "--shard", "three", "harvest"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code() == Some(2) && stderr.contains("no shard \"three\""), "{stderr}");
    assert!(!dir.path().join("store").exists() && !dir.path().join("one").exists());

    // Each shard harvests its own Source into its own data directory.
    for (name, fetched) in [("one", 12), ("two", 7)] {
        let out = run(&["--config", cfg, "--shard", name, "harvest"]).await;
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{name}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.starts_with(&format!("1 sources: fetched {fetched}, ")), "{name}: {stdout}");
        assert!(dir.path().join(name).join("FORMAT").exists(), "{name}'s store");
    }
    assert!(!dir.path().join("store").exists(), "no instance used [aggregator]'s data_dir");

    // The top level harvests both shards while they serve, and republishes all 19.
    let (one, two) = (serve(cfg, "one", p1).await, serve(cfg, "two", p2).await);
    let out = run(&["--config", cfg, "--shard", "top", "harvest"]).await;
    stop(one);
    stop(two);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    // (The shards' change events fall in the second their lists were read: the top level reads
    // them again after its baseline, so it may count some fetches twice; see HARVEST.md.)
    assert!(stdout.starts_with("2 sources: fetched ") && stdout.contains(", failed 0, "), "{stdout}");

    // Every resource of both origins is at the top, named by the top, its origin kept.
    for (sim, via) in [(&a, "from-one"), (&b, "from-two")] {
        for resource in sim.sim.resources() {
            let out = run(&["--config", cfg, "--shard", "top", "provenance", &resource.url, "--json"]).await;
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
            let j: serde_json::Value = serde_json::from_str(&stdout).unwrap();
            let found = &j["resources"][0];
            assert_eq!(found["origin"]["href"], resource.url.as_str(), "{j}");
            let uri = found["uri"].as_str().unwrap();
            assert!(uri.starts_with(&format!("http://127.0.0.1:{p3}/r/{via}/")), "the top's own URI: {uri}");
        }
    }
}
