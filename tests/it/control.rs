//! Operating the running service (`tributary run`) through its control socket: the store's
//! commands give the same output as on the stopped store, `poll`, `pause`, `resume`, `reload`
//! (and SIGHUP), `source forget`, a hot export, and the socket itself (owner-only, replaced
//! after a crash, never a second `run`). Every upstream is a `[[simulate]]` Source on 127.0.0.1.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use crate::support::cli;
use crate::support::net::free_port;
use crate::support::service::{Service, parse_metrics, value};

/// An aggregator of simulated Sources: each `(id, resources, change rate)` is a simulator and,
/// when listed in `sources`, a source polled every second; `extra` is added to every source.
fn config_text(port: u16, sims: &[(&str, u16, usize, f64)], sources: &[&str], extra: &str) -> String {
    let mut text = format!(
        "[aggregator]\nbase_url = \"http://127.0.0.1:{port}/\"\nlisten = \"127.0.0.1:{port}\"\ndata_dir = \"store\"\n\
         user_agent = \"Tributary-test/0.1 (+mailto:test@example.org)\"\n\n"
    );
    for (id, sim_port, n, rate) in sims {
        text += &format!(
            "[[simulate]]\nid = \"{id}\"\nlisten = \"127.0.0.1:{sim_port}\"\nresources = {n}\nchange_rate = {rate:.1}\nseed = 7\n\n"
        );
    }
    for id in sources {
        let sim_port = sims.iter().find(|s| s.0 == *id).map(|s| s.1).unwrap();
        text += &format!(
            "[[source]]\nid = \"{id}\"\nurl = \"http://127.0.0.1:{sim_port}/.well-known/resourcesync\"\nallow_private = true\n\
             rate = \"unlimited\"\npoll = \"1s\"\n{extra}\n"
        );
    }
    text
}

/// `tributary ARGS…` in `dir` (where `sources.toml` is), to its end.
async fn tributary(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = cli::tributary(args);
    cmd.current_dir(dir);
    cli::finish(cmd).await
}

fn text(o: &Output) -> (Option<i32>, String, String) {
    (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

fn socket(dir: &Path) -> PathBuf {
    dir.join("store").join("control.sock")
}

fn source<'a>(status: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    status["sources"].as_array().unwrap().iter().find(|s| s["id"] == id).unwrap_or_else(|| panic!("no {id}: {status}"))
}

async fn harvested(s: &Service, id: &str, n: u64) {
    s.wait_until(&format!("{id} holds {n} resources"), Duration::from_secs(60), |s| async move {
        let st = s.json("api/status").await;
        let row = source(&st, id);
        row["last_success"].is_string() && row["resources"].as_u64() == Some(n)
    })
    .await;
}

/// Stats minus the engine's own lines (memtables, cache, files), which differ by process.
fn stable_stats(stats: &str) -> String {
    stats.lines().filter(|l| !l.starts_with("database")).collect::<Vec<_>>().join("\n")
}

/// A Source of its own process (`tributary simulate`), outliving the service under test.
struct Simulator(std::process::Child);

impl Simulator {
    async fn start(port: u16, resources: usize) -> Simulator {
        let listen = format!("127.0.0.1:{port}");
        let mut cmd = cli::tributary(&["simulate", "--listen", &listen, "--rate", "0", "--seed", "7"]);
        cmd.args(["--resources", &resources.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let mut child = cmd.spawn().unwrap();
        let client = reqwest::Client::new();
        let url = format!("http://{listen}/.well-known/resourcesync");
        crate::support::net::wait_until_ok(&client, &url, &mut child, Duration::from_secs(30)).await.unwrap();
        Simulator(child)
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The audit's text without the Resource List's `at`, which the simulator sets to the moment
/// of each request.
fn without_list_at(text: &str) -> String {
    text.lines().filter(|l| !l.contains("list_at") && !l.contains("at 20")).collect::<Vec<_>>().join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_commands_answer_through_the_service_exactly_as_offline() {
    let dir = tempfile::tempdir().unwrap();
    let (port, sim) = (free_port(), free_port());
    let _upstream = Simulator::start(sim, 25).await;
    let cfg = config_text(port, &[], &[], "")
        + &format!(
            "[[source]]\nid = \"steady\"\nurl = \"http://127.0.0.1:{sim}/.well-known/resourcesync\"\nallow_private = true\n\
             rate = \"unlimited\"\npoll = \"1s\"\n"
        );
    let mut s = Service::start(dir.path(), &cfg, &[], &[]).await;
    harvested(&s, "steady", 25).await;
    let uri = format!("http://127.0.0.1:{port}/r/steady/http/127.0.0.1:{sim}/res/3");
    let commands: [&[&str]; 7] = [
        &["failures", "--json"],
        &["failures"],
        &["provenance", "--json", &uri],
        &["provenance", "http://nowhere.example/"],
        &["audit", "--json"],
        &["verify"],
        &["store", "stats"],
    ];
    // The source changes nothing: pausing it keeps its status rows still too.
    assert_eq!(text(&tributary(dir.path(), &["pause", "--source", "steady"]).await).0, Some(0));
    let mut online = Vec::new();
    for args in commands {
        online.push(text(&tributary(dir.path(), args).await));
    }
    // A bad `--source` is the same error either way.
    let bad = text(&tributary(dir.path(), &["failures", "--source", "nope"]).await);
    assert_eq!(bad.0, Some(2), "{bad:?}");
    assert_eq!(s.terminate().await.code(), Some(0));
    assert!(!socket(dir.path()).exists(), "a clean stop removes the socket");
    for (args, on) in commands.iter().zip(&online) {
        let off = text(&tributary(dir.path(), args).await);
        assert_eq!(on.0, off.0, "exit of {args:?}: {on:?} / {off:?}");
        match args[0] {
            "store" => assert_eq!(stable_stats(&on.1), stable_stats(&off.1)),
            "audit" => assert_eq!(without_list_at(&on.1), without_list_at(&off.1)),
            _ => assert_eq!(on.1, off.1, "stdout of {args:?}"),
        }
    }
    assert_eq!(online[0].0, Some(0), "no failures");
    assert_eq!(online[2].0, Some(0), "{:?}", online[2]);
    assert!(online[2].1.contains("/res/3"), "{}", online[2].1);
    assert_eq!(online[3].0, Some(1), "nothing matches");
    assert_eq!(online[5].0, Some(0), "{:?}", online[5]);
    assert_eq!(text(&tributary(dir.path(), &["failures", "--source", "nope"]).await), bad);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_pause_and_resume_steer_a_source_and_the_pause_outlasts_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (port, sim) = (free_port(), free_port());
    // Polled only when asked: an hour between polls.
    let cfg = config_text(port, &[("slow", sim, 20, 5.0)], &["slow"], "").replace("poll = \"1s\"", "poll = \"1h\"");
    let mut s = Service::start(dir.path(), &cfg, &[], &[]).await;
    harvested(&s, "slow", 20).await;

    let (code, out, err) = text(&tributary(dir.path(), &["poll", "--source", "slow"]).await);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.starts_with("1 sources: fetched "), "the summary `harvest` prints: {out}");
    let polled = s.json("api/status").await;
    assert!(source(&polled, "slow")["last_pass"]["fetched"].as_u64().unwrap() + 1 > 0);
    let (code, _, err) = text(&tributary(dir.path(), &["poll", "--source", "nope"]).await);
    assert_eq!(code, Some(2), "{err}");

    let (code, out, _) = text(&tributary(dir.path(), &["pause", "--source", "slow"]).await);
    assert_eq!(code, Some(0));
    assert!(out.contains("slow: paused (since "), "{out}");
    let st = s.json("api/status").await;
    assert!(source(&st, "slow")["paused"].is_string(), "{st}");
    let m = parse_metrics(&s.get("metrics").await.2);
    assert_eq!(value(&m, "tributary_source_paused", &[("source", "slow")]), Some(1.0));
    let (code, _, err) = text(&tributary(dir.path(), &["poll", "--source", "slow"]).await);
    assert_eq!(code, Some(2));
    assert!(err.contains("slow is paused"), "{err}");
    let (code, out, err) = text(&tributary(dir.path(), &["poll"]).await);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.starts_with("0 sources") && err.contains("paused, not polled: slow"), "{out}{err}");
    // Its records stay published meanwhile.
    assert_eq!(s.get("sets/slow/resourcelist.xml").await.0, 200);

    // Kept across a restart.
    assert_eq!(s.terminate().await.code(), Some(0));
    let mut s = Service::start(dir.path(), &cfg, &[], &[]).await;
    let st = s.json("api/status").await;
    assert!(source(&st, "slow")["paused"].is_string(), "{st}");
    let (code, out, _) = text(&tributary(dir.path(), &["resume", "--source", "slow"]).await);
    assert_eq!(code, Some(0));
    assert!(out.contains("slow: resumed"), "{out}");
    let st = s.json("api/status").await;
    assert!(source(&st, "slow")["paused"].is_null(), "{st}");
    let m = parse_metrics(&s.get("metrics").await.2);
    assert_eq!(value(&m, "tributary_source_paused", &[("source", "slow")]), Some(0.0));
    assert_eq!(text(&tributary(dir.path(), &["poll", "--source", "slow"]).await).0, Some(0));
    assert_eq!(s.terminate().await.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_service_the_service_commands_say_so_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config_text(free_port(), &[("a", free_port(), 5, 0.0)], &["a"], "");
    std::fs::write(dir.path().join("sources.toml"), cfg).unwrap();
    for args in [&["poll"][..], &["pause", "--source", "a"], &["resume", "--source", "a"], &["reload"]] {
        let (code, _, err) = text(&tributary(dir.path(), args).await);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains("no tributary service is running"), "{args:?}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_adds_changes_and_removes_sources_refuses_a_bad_file_and_forget_publishes_the_deletions() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let sims = [("a", free_port(), 10, 0.0), ("b", free_port(), 12, 0.0), ("c", free_port(), 14, 0.0)];
    let mut s = Service::start(dir.path(), &config_text(port, &sims, &["a", "b"], ""), &[], &[]).await;
    harvested(&s, "a", 10).await;
    harvested(&s, "b", 12).await;

    // c added, b removed, a changed (its poll).
    let next = config_text(port, &sims, &["a", "c"], "").replacen("poll = \"1s\"", "poll = \"2s\"", 1);
    std::fs::write(dir.path().join("sources.toml"), &next).unwrap();
    let (code, out, err) = text(&tributary(dir.path(), &["reload"]).await);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("sources added (polling now): c"), "{out}");
    assert!(out.contains("sources changed (in force from their next poll): a"), "{out}");
    assert!(out.contains("sources removed") && out.contains(": b"), "{out}");
    harvested(&s, "c", 14).await;
    let st = s.json("api/status").await;
    assert_eq!(source(&st, "b")["configured"], false, "{st}");
    assert_eq!(source(&st, "b")["resources"], 12, "its records stay published");
    assert_eq!(source(&st, "a")["configured"], true);
    assert_eq!(s.get("sets/b/resourcelist.xml").await.0, 200);

    // A file that does not load: the same error as at start; the configuration in force stays.
    std::fs::write(dir.path().join("sources.toml"), next.replace("poll = \"2s\"", "poll = \"soon\"")).unwrap();
    let (code, out, err) = text(&tributary(dir.path(), &["reload"]).await);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(err.contains("sources.toml:") && err.contains("`poll`"), "{err}");
    assert_eq!(source(&s.json("api/status").await, "c")["configured"], true);

    // SIGHUP reloads too: b comes back.
    std::fs::write(dir.path().join("sources.toml"), config_text(port, &sims, &["a", "b", "c"], "")).unwrap();
    cli::signal(s.child(), "HUP");
    s.wait_until("b is configured again", Duration::from_secs(30), |s| async move {
        source(&s.json("api/status").await, "b")["configured"] == true
    })
    .await;
    assert!(s.log().contains("SIGHUP: configuration reloaded"), "{}", s.log());

    // Forgetting: refused while configured; then, after it is removed, its deletions published.
    let (code, _, err) = text(&tributary(dir.path(), &["source", "forget", "b"]).await);
    assert_eq!(code, Some(2));
    assert!(err.contains("source b is configured"), "{err}");
    std::fs::write(dir.path().join("sources.toml"), config_text(port, &sims, &["a", "c"], "")).unwrap();
    assert_eq!(text(&tributary(dir.path(), &["reload"]).await).0, Some(0));
    let forgot = eventually_forgotten(dir.path()).await;
    assert!(forgot.contains("forgot b: 12 records deleted"), "{forgot}");
    let list = s.get("sets/b/changelist.xml").await.2;
    assert_eq!(list.matches("change=\"deleted\"").count(), 12, "{list}");
    assert_eq!(s.terminate().await.code(), Some(0));
    // Gone after the restart.
    let mut s = Service::start(dir.path(), &config_text(port, &sims, &["a", "c"], ""), &[], &[]).await;
    assert_eq!(s.get("sets/b/capabilitylist.xml").await.0, 404);
    assert!(s.json("api/status").await["sources"].as_array().unwrap().iter().all(|r| r["id"] != "b"));
    assert_eq!(s.terminate().await.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_loosens_a_rate_loosens_the_hosts_it_shares() {
    // a (3 resources, 30/min) harvested alone; then one reload adds b (300, unlimited) on the
    // same address under politeness = "ip", which shares one budget, and lifts a's rate.
    let dir = tempfile::tempdir().unwrap();
    let (port, sims) = (free_port(), [("a", free_port(), 3, 0.0), ("b", free_port(), 300, 0.0)]);
    let ip = "politeness = \"ip\"";
    let strict = config_text(port, &sims, &["a"], ip).replacen("rate = \"unlimited\"", "rate = \"30/min\"", 1);
    let mut s = Service::start(dir.path(), &strict, &[], &[]).await;
    harvested(&s, "a", 3).await;

    std::fs::write(dir.path().join("sources.toml"), config_text(port, &sims, &["a", "b"], ip)).unwrap();
    let (code, out, err) = text(&tributary(dir.path(), &["reload"]).await);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("sources added (polling now): b"), "{out}");
    assert!(out.contains("sources changed (in force from their next poll): a"), "{out}");
    // a's next pass (it polls every second) asks for no limit, so the budget lets b's ~300
    // requests through; held to a's old request every 2 s they would take ten minutes, past
    // `harvested`'s bound.
    harvested(&s, "b", 300).await;
    assert_eq!(s.terminate().await.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_source_stops_holding_back_the_hosts_it_shared_once_its_last_pass_ends() {
    // a (10 resources, 120/min) and b (300, unlimited) on one address under politeness = "ip"
    // share one budget: a's first pass takes ~15 requests, each behind b's two in flight, so
    // it is still running when b has started.
    let dir = tempfile::tempdir().unwrap();
    let (port, sims) = (free_port(), [("a", free_port(), 10, 0.0), ("b", free_port(), 300, 0.0)]);
    let strict = config_text(port, &sims, &["a", "b"], "politeness = \"ip\"").replacen(
        "rate = \"unlimited\"",
        "rate = \"120/min\"",
        1,
    );
    let mut s = Service::start(dir.path(), &strict, &[], &[]).await;
    s.wait_until("b has begun", Duration::from_secs(60), |s| async move {
        source(&s.json("api/status").await, "b")["resources"].as_u64().unwrap_or(0) > 0
    })
    .await;
    std::fs::write(dir.path().join("sources.toml"), config_text(port, &sims, &["b"], "politeness = \"ip\"")).unwrap();
    let (code, out, err) = text(&tributary(dir.path(), &["reload"]).await);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("sources removed") && out.contains(": a"), "{out}");
    let a = source(&s.json("api/status").await, "a").clone();
    assert!(a["last_success"].is_null(), "a's first pass is still in flight after the reload: {a}");
    // That pass asks for a's rate until it ends; then the host forgets a. Held to a request
    // every 0.5 s, b's ~300 requests would take two and a half minutes, past the bound.
    harvested(&s, "b", 300).await;
    assert_eq!(s.terminate().await.code(), Some(0));
}

/// `source forget` once the removed source's last pass has ended (bounded retries).
async fn eventually_forgotten(dir: &Path) -> String {
    for _ in 0..60 {
        let (code, out, err) = text(&tributary(dir, &["source", "forget", "b"]).await);
        if code == Some(0) {
            return out;
        }
        assert!(err.contains("still finishing its last pass"), "{err}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("b never finished its last pass");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_socket_is_owner_only_a_second_run_is_refused_and_a_crash_leaves_nothing_in_the_way() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config_text(free_port(), &[("a", free_port(), 5, 0.0)], &["a"], "");
    let mut s = Service::start(dir.path(), &cfg, &[], &[]).await;
    let meta = std::fs::metadata(socket(dir.path())).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);

    // A second `run` on the same data directory (on another port) is refused.
    let other = cfg.replace(&s.base[17..s.base.len() - 1], &free_port().to_string());
    let second_dir = dir.path().join("second");
    std::fs::create_dir(&second_dir).unwrap();
    std::fs::write(second_dir.join("sources.toml"), other.replace("data_dir = \"store\"", "data_dir = \"../store\""))
        .unwrap();
    let mut cmd = cli::tributary(&["run"]);
    cmd.current_dir(&second_dir);
    let (code, _, err) = text(&cli::finish(cmd).await);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("another tributary process"), "{err}");
    assert!(socket(dir.path()).exists(), "the running service keeps its socket");

    // kill -9 leaves the socket; nobody answers it, commands work on the store, a start replaces it.
    s.kill();
    assert!(socket(dir.path()).exists());
    let (code, out, err) = text(&tributary(dir.path(), &["store", "stats"]).await);
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, _, err) = text(&tributary(dir.path(), &["reload"]).await);
    assert_eq!(code, Some(2));
    assert!(err.contains("no tributary service is running"), "{err}");
    let mut s = Service::start(dir.path(), &cfg, &[], &[]).await;
    assert!(s.log().contains("removed a control socket left by a process that did not stop cleanly"), "{}", s.log());
    assert_eq!(text(&tributary(dir.path(), &["store", "stats"]).await).0, Some(0));

    // gc and import refuse while it runs, saying why.
    for args in [&["store", "gc"][..], &["store", "import", "nothing.jsonl"]] {
        let (code, _, err) = text(&tributary(dir.path(), args).await);
        assert_eq!(code, Some(2), "{args:?}");
        assert!(err.contains("needs it stopped"), "{args:?}: {err}");
    }
    assert_eq!(s.terminate().await.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_export_is_one_snapshot_that_imports_verifies_and_serves() {
    let dir = tempfile::tempdir().unwrap();
    let (port, sim) = (free_port(), free_port());
    // Changing twenty times a second while the export runs.
    let mut s =
        Service::start(dir.path(), &config_text(port, &[("busy", sim, 300, 20.0)], &["busy"], ""), &[], &[]).await;
    s.wait_until("the baseline is in", Duration::from_secs(60), |s| async move {
        source(&s.json("api/status").await, "busy")["last_success"].is_string()
    })
    .await;
    let (code, _, err) = text(&tributary(dir.path(), &["store", "export", "hot.jsonl.gz"]).await);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("records"), "{err}");
    let (code, out, err) = text(&tributary(dir.path(), &["store", "export", "-"]).await);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("{\"kind\":\"header\"") && out.trim_end().ends_with('}'), "{}", &out[..200.min(out.len())]);
    assert!(!dir.path().join(".hot.jsonl.gz.partial").exists());
    assert_eq!(s.terminate().await.code(), Some(0));

    // Into an empty directory with the bitstreams copied over.
    let moved = dir.path().join("moved");
    for sub in ["packs", "blobs"] {
        crate::store_export::copy_tree(&dir.path().join("store").join(sub), &moved.join(sub));
    }
    let data_dir = moved.to_str().unwrap();
    let export = dir.path().join("hot.jsonl.gz");
    let (code, _, err) =
        text(&tributary(dir.path(), &["--data-dir", data_dir, "store", "import", export.to_str().unwrap()]).await);
    assert_eq!(code, Some(0), "{err}");
    let (code, out, _) = text(&tributary(dir.path(), &["--data-dir", data_dir, "verify"]).await);
    assert_eq!(code, Some(0), "{out}");
    let records = |stats: &str| stats.lines().find(|l| l.starts_with("records:")).unwrap().to_owned();
    let (_, stats, _) = text(&tributary(dir.path(), &["--data-dir", data_dir, "store", "stats"]).await);
    let exported = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("gzip -dc {} | grep -c '\"kind\":\"record\"'", export.display()))
        .output()
        .unwrap();
    let n: u64 = String::from_utf8_lossy(&exported.stdout).trim().parse().unwrap();
    let (live, deleted) = parse_records(&records(&stats));
    assert_eq!(live + deleted, n, "{stats}");
    assert!(live > 250, "{stats}");

    // The imported store serves.
    let cfg = config_text(port, &[("busy", sim, 300, 20.0)], &["busy"], "")
        .replace("data_dir = \"store\"", &format!("data_dir = \"{data_dir}\""));
    std::fs::write(dir.path().join("served.toml"), cfg).unwrap();
    let mut serve = cli::tributary(&["--config", "served.toml", "serve"]);
    serve.current_dir(dir.path()).stderr(std::process::Stdio::null());
    let mut child = serve.spawn().unwrap();
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/sets/busy/resourcelist.xml");
    crate::support::net::wait_until_ok(&client, &url, &mut child, Duration::from_secs(30)).await.unwrap();
    let list = client.get(&url).send().await.unwrap().text().await.unwrap();
    assert_eq!(list.matches("<url>").count() as u64, live);
    cli::signal(&child, "TERM");
    let _ = cli::wait_for_exit(&mut child, Duration::from_secs(30)).await;
}

fn parse_records(line: &str) -> (u64, u64) {
    let nums: Vec<u64> = line.split(|c: char| !c.is_ascii_digit()).filter_map(|t| t.parse().ok()).collect();
    (nums[0], nums[1])
}
