//! The Prometheus alerting rules shipped in `contrib/prometheus/` (issue 50, item 5), checked
//! against a real `tributary run` on 127.0.0.1: every series the rules read, and every input
//! series of their unit tests, is one the binary really exports, with the same labels; then
//! `promtool check rules` and `promtool test rules` pass. promtool comes from Debian's
//! `prometheus` package (`.ci/setup`); without it the test skips, or fails under `CI=true`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::net::free_port;
use crate::support::service::{Sample, Service, config, parse_metrics, value};
use crate::support::tools::require;

const TEST: &str = "alerts::the_alerting_rules_read_series_tributary_exports";

fn contrib(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/prometheus").join(file)
}

/// The metric names an expression line of the rules file reads (comments left out).
fn names_in_rules(rules: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in rules.lines().map(str::trim).filter(|l| !l.starts_with('#')) {
        let mut rest = line;
        // Bounded: each turn consumes at least the prefix it found.
        while let Some(at) = rest.find("tributary_") {
            let tail = &rest[at..];
            let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
            names.insert(tail[..end].to_owned());
            rest = &tail[end..];
        }
    }
    names
}

/// The input series of the unit tests: each `series: 'name{k="v",…}'` as its name and label names.
fn series_in_tests(tests: &str) -> Vec<(String, BTreeSet<String>)> {
    let quoted = tests.lines().filter_map(|l| l.trim().strip_prefix("- series: '")?.strip_suffix('\''));
    quoted
        .map(|s| match s.split_once('{') {
            None => (s.to_owned(), BTreeSet::new()),
            Some((name, labels)) => {
                let keys = labels.trim_end_matches('}').split(',').filter_map(|kv| Some(kv.split_once('=')?.0.trim()));
                (name.to_owned(), keys.map(str::to_owned).collect())
            }
        })
        .collect()
}

/// Each exported metric's sets of label names (one, for the metrics the rules read).
fn exported(samples: &[Sample]) -> BTreeMap<String, BTreeSet<BTreeSet<String>>> {
    let mut out: BTreeMap<String, BTreeSet<BTreeSet<String>>> = BTreeMap::new();
    for s in samples {
        out.entry(s.name.clone()).or_default().insert(s.labels.iter().map(|(k, _)| k.clone()).collect());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_alerting_rules_read_series_tributary_exports() {
    let Some(promtool) = require("promtool", TEST) else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut s = Service::start(dir.path(), &config(free_port(), free_port(), 20, 5.0), &[], &[]).await;
    s.wait_until("the source has been polled and has changed", Duration::from_secs(60), |s| async move {
        let m = parse_metrics(&s.get("metrics").await.2);
        let has = |name: &str| value(&m, name, &[("source", "sim")]).is_some_and(|v| v > 0.0);
        has("tributary_source_last_success_timestamp_seconds") && has("tributary_source_last_change_timestamp_seconds")
    })
    .await;
    let scraped = parse_metrics(&s.get("metrics").await.2);
    assert!(s.terminate().await.success());
    let exported = exported(&scraped);
    assert_eq!(value(&scraped, "tributary_source_poll_interval_seconds", &[("source", "sim")]), Some(1.0));

    let rules = std::fs::read_to_string(contrib("tributary-alerts.yml")).unwrap();
    let read = names_in_rules(&rules);
    assert!(read.len() >= 8, "the rules read {read:?}");
    for name in &read {
        assert!(exported.contains_key(name), "the rules read {name}, which Tributary does not export");
    }
    let tests = std::fs::read_to_string(contrib("tributary-alerts.test.yml")).unwrap();
    let inputs = series_in_tests(&tests);
    assert!(!inputs.is_empty());
    for (name, keys) in &inputs {
        let real = exported.get(name).unwrap_or_else(|| panic!("the tests feed {name}, which is not exported"));
        assert_eq!(*real, BTreeSet::from([keys.clone()]), "{name}: the tests' labels are not the exported ones");
    }
    for name in &read {
        assert!(inputs.iter().any(|(n, _)| n == name), "no unit test feeds {name}");
    }

    for args in [["check", "rules", "tributary-alerts.yml"], ["test", "rules", "tributary-alerts.test.yml"]] {
        let out = promtool.command().args(args).current_dir(contrib("")).output().unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "promtool {}: {said}", args.join(" "));
        assert!(said.contains("SUCCESS"), "promtool {}: {said}", args.join(" "));
    }
}

#[test]
fn names_and_series_are_read_from_the_files() {
    let names = names_in_rules("# tributary_not_this\nexpr: tributary_a > 3 * tributary_b_seconds unless x\n");
    assert_eq!(names.into_iter().collect::<Vec<_>>(), ["tributary_a", "tributary_b_seconds"]);
    let series = series_in_tests("      - series: 'tributary_a{source=\"x\"}'\n      - series: 'tributary_b'\n");
    assert_eq!(series[0], ("tributary_a".to_owned(), BTreeSet::from(["source".to_owned()])));
    assert_eq!(series[1], ("tributary_b".to_owned(), BTreeSet::new()));
}
