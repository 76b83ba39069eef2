//! The operator's view of a running `tributary run`: the dashboard's JSON, `/metrics` (parsed,
//! labels checked, counters moving), log lines, SIGTERM and resuming from the store. Everything
//! runs on 127.0.0.1: the binary starts the simulated Source from its `[[simulate]]` table.

use std::time::Duration;

use crate::support::net::free_port;
use crate::support::service::{Sample, Service, config, parse_metrics, value};

fn sources(status: &serde_json::Value) -> &Vec<serde_json::Value> {
    status["sources"].as_array().unwrap()
}

async fn metrics(s: &Service) -> Vec<Sample> {
    let (code, headers, text) = s.get("metrics").await;
    assert_eq!(code, 200);
    assert!(headers["content-type"].to_str().unwrap().starts_with("text/plain"), "{headers:?}");
    parse_metrics(&text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_serves_dashboard_api_and_metrics_then_stops_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(free_port(), free_port(), 40, 20.0);
    let mut s = Service::start(dir.path(), &cfg, &[], &[]).await;
    s.wait_until("the baseline is harvested", Duration::from_secs(60), |s| async move {
        let st = s.json("api/status").await;
        st["sources"][0]["last_success"].is_string() && st["sources"][0]["resources"].as_u64() >= Some(30)
    })
    .await;

    // The dashboard: embedded assets, a script policy that allows only this server.
    let (code, h, html) = s.get("").await;
    assert_eq!(code, 200);
    assert!(h["content-type"].to_str().unwrap().starts_with("text/html"));
    assert!(h["content-security-policy"].to_str().unwrap().contains("script-src 'self'"));
    assert!(html.contains("dashboard/app.js") && html.contains("<main"));
    let (code, h, _) = s.get("dashboard/app.js").await;
    assert_eq!((code, h["content-type"].to_str().unwrap()), (200, "text/javascript; charset=utf-8"));

    // api/status: the source and both sets, with their Capability Lists.
    let st = s.json("api/status").await;
    let src = &sources(&st)[0];
    assert_eq!(src["id"], "sim");
    assert!(src["changes"].as_u64().unwrap() >= src["resources"].as_u64().unwrap());
    let sets: Vec<&str> = st["sets"].as_array().unwrap().iter().map(|v| v["id"].as_str().unwrap()).collect();
    assert_eq!(sets, ["sim", "all"]);
    assert!(st["sets"][1]["capability_list"].as_str().unwrap().ends_with("sets/all/capabilitylist.xml"));

    // api/changes: a set's log by sequence number, and the newest across sources.
    let first = s.json("api/changes?set=sim&after=0&limit=5").await;
    let seqs: Vec<u64> = first["changes"].as_array().unwrap().iter().map(|c| c["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
    let next = s.json("api/changes?set=sim&after=5&limit=1").await;
    assert_eq!(next["changes"][0]["seq"], 6);
    assert!(next["changes"][0]["origin"].as_str().unwrap().starts_with("http://origin.example.org/"));
    let newest = s.json("api/changes").await;
    assert!(!newest["changes"].as_array().unwrap().is_empty());
    assert_eq!(s.get("api/changes?after=3").await.0, 400, "after needs a set");
    assert_eq!(s.get("api/changes?set=nope").await.0, 404);

    // /metrics: per-source and per-set series, labels are ids (never URLs), HTTP is measured.
    let m = metrics(&s).await;
    let src_label = [("source", "sim")];
    assert!(value(&m, "tributary_source_resources_fetched_total", &src_label).unwrap() >= 30.0);
    assert!(value(&m, "tributary_source_requests_total", &src_label).unwrap() >= 30.0);
    assert!(value(&m, "tributary_source_bytes_total", &src_label).unwrap() > 0.0);
    for name in ["tributary_source_resources_unchanged_total", "tributary_source_resources_failed_total"] {
        assert!(value(&m, name, &src_label).is_some(), "{name}");
    }
    assert!(value(&m, "tributary_source_resources_deleted_total", &src_label).is_some());
    assert!(value(&m, "tributary_source_changes_applied_total", &src_label).unwrap() >= 30.0);
    assert!(value(&m, "tributary_source_harvest_duration_seconds_count", &src_label).unwrap() >= 1.0);
    assert!(value(&m, "tributary_source_backing_off", &src_label).is_some());
    let states: f64 = m.iter().filter(|x| x.name == "tributary_source_state").map(|x| x.value).sum();
    assert_eq!(states, 1.0, "exactly one state is current");
    assert!(value(&m, "tributary_set_resources", &[("set", "all")]).unwrap() >= 30.0);
    assert!(value(&m, "tributary_set_changelog_length", &[("set", "all")]).unwrap() >= 30.0);
    assert!(value(&m, "tributary_http_requests_total", &[("route", "api"), ("status", "200")]).unwrap() >= 1.0);
    assert!(value(&m, "tributary_http_request_duration_seconds_count", &[("route", "dashboard")]).is_some());
    for x in &m {
        assert!(x.labels.iter().all(|(_, v)| !v.contains("://")), "a URL in a label: {x:?}");
    }

    // Counters move: another pass (the source polls every second and keeps changing).
    let ok = [("source", "sim"), ("outcome", "ok")];
    let passes = value(&m, "tributary_source_passes_total", &ok).unwrap();
    let changes = value(&m, "tributary_source_changes_applied_total", &src_label).unwrap();
    s.wait_until("another pass applies changes", Duration::from_secs(30), |s| async move {
        let m = metrics(s).await;
        value(&m, "tributary_source_passes_total", &ok).unwrap() > passes
            && value(&m, "tributary_source_changes_applied_total", &[("source", "sim")]).unwrap() > changes
    })
    .await;

    // Logs: one plain line per event, with structured fields, no colour codes off a terminal.
    let log = s.log();
    assert!(log.lines().any(|l| l.contains("source harvested") && l.contains("fetched=")), "{log}");
    assert!(!log.contains('\u{1b}'), "ANSI escapes in a log file");

    // SIGTERM: a clean stop (exit 0); running again resumes from the store.
    let held = s.json("api/status").await["sources"][0]["resources"].as_u64().unwrap();
    assert!(s.terminate().await.success(), "{}", s.log());
    assert!(s.log().contains("harvester stopped"));
    assert_eq!(s.log().matches("shutdown requested").count(), 1, "one signal, one line: {}", s.log());
    drop(s);
    let again = Service::start(dir.path(), &cfg, &[], &[]).await;
    let st = again.json("api/status").await;
    assert!(st["sources"][0]["resources"].as_u64().unwrap() >= held / 2, "the store's counts survive a restart");
    assert!(st["sources"][0]["last_success"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_json_and_rust_log_filtering() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(free_port(), free_port(), 10, 0.0);
    let mut s = Service::start(dir.path(), &cfg, &["--log-json"], &[("RUST_LOG", "info,tributary::web=warn")]).await;
    s.wait_until("a pass is logged", Duration::from_secs(30), |s| async move { s.log().contains("source harvested") })
        .await;
    assert!(s.terminate().await.success());
    let log = s.log();
    for line in log.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(v["level"].is_string() && v["fields"].is_object(), "{line}");
    }
    let pass = log.lines().find(|l| l.contains("source harvested")).unwrap();
    let v: serde_json::Value = serde_json::from_str(pass).unwrap();
    assert_eq!(v["fields"]["fetched"], 10, "{pass}");

    let dir = tempfile::tempdir().unwrap();
    let mut quiet = Service::start(dir.path(), &cfg, &[], &[("RUST_LOG", "warn")]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(quiet.terminate().await.success());
    assert!(!quiet.log().contains("INFO"), "RUST_LOG=warn still logged info lines:\n{}", quiet.log());
}
