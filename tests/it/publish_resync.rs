//! Interop with a client no one here wrote: the Python reference implementation (`pip install
//! resync`, v2) synchronizes from a running Tributary — baseline, incremental after changes,
//! audit — and its copy must be byte-identical to the content.
//!
//! Which URLs resync needs (read from resync 2.0.1's `client.py`):
//! - The Source Description is no use: it lists one Capability List per set, and resync stops
//!   with "multiple sources, specify one with --capabilitylist". So baseline and audit are
//!   pointed at the set's Capability List with `--capabilitylist`, from which resync finds the
//!   Resource List (and follows its index).
//! - `--incremental` does not read the Capability List; it takes the Change List from
//!   `--changelist-uri`. resync 2.0.1 cannot read a Change List Index: it parses the index's
//!   `<sitemap>` entries as changes and stops with `ChangeTypeError: got None` (they have no
//!   `change`, rightly, §12.2). So the test does what a Destination following the index does:
//!   it reads Tributary's index itself and hands resync each Change List that ends after the
//!   baseline (or is open), in order.
//! - The positional mapping `<base>r/<source>/http/<host>=<dir>` maps Tributary's resource
//!   URIs to files. Documents and resources share Tributary's host, so no `--noauth` is needed.
//! - `--hash sha-256` makes baseline and audit compare content, not only `<lastmod>` and
//!   length (with `--incremental`, resync 2.0.1 crashes on `--hash`: `'ChangeList' object has
//!   no attribute 'hashes'`, so it is left out there; the final audit checks content anyway).
//!   `--delete` lets deletions remove files. resync keeps its incremental state in the working
//!   directory, so each run's cwd is a temporary directory.
//!
//! The commands, as run here:
//! ```text
//! resync-sync --baseline    --capabilitylist <base>sets/src-a/capabilitylist.xml --hash sha-256 --delete <map>
//! resync-sync --incremental --changelist-uri <base>sets/src-a/changelist-<n>.xml --delete <map>
//! resync-sync --audit       --capabilitylist <base>sets/src-a/capabilitylist.xml --hash sha-256 <map>
//! ```
//! When resync is not installed the test fails under `CI=true` (where `.ci/setup` installs it)
//! and is skipped with a notice otherwise (`support::tools`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::support::publish::{Res, bind, delete, doc, start, upsert};
use crate::support::store::temp_store;
use crate::support::tools::{Tool, resync_tool};
use tributary::publish::{Limits, LinkPolicies, Rollover, SetConfig};

/// Runs `resync-sync` with `args` in `cwd`; returns its combined output, asserting success.
async fn resync(tool: &Tool, cwd: &Path, args: &[&str]) -> String {
    let mut cmd = tokio::process::Command::from(tool.command());
    cmd.args(args).current_dir(cwd).kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("resync-sync took more than 60 s")
        .expect("resync-sync could not be started");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "resync-sync {args:?} failed:\n{text}");
    text
}

/// Every file under `dir`, by relative path.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

fn resource(path: &str, content: &str) -> Res {
    Res::new("src-a", &format!("http://museum-a.test/{path}"), content)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_resync_baseline_incremental_audit() {
    let Some(tool) = resync_tool("resync-sync", "publish_resync::python_resync_baseline_incremental_audit") else {
        return;
    };
    let (_dir, store) = temp_store();
    let work = tempfile::tempdir().unwrap();
    let dest = work.path().join("copy");
    let (listener, naming) = bind().await;
    let mut expected: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut initial = Vec::new();
    for i in 0..12 {
        let path = if i % 4 == 0 { format!("obj/sub/{i}.xml") } else { format!("obj/{i}.txt") };
        let content = format!("resource {i} ").repeat(i * 50 + 1);
        expected.insert(path.clone(), content.clone().into_bytes());
        initial.push(resource(&path, &content));
    }
    let uris = upsert(&store, &naming, &["src-a"], &initial);
    // Small lists, so resync walks a Resource List Index and several Change Lists.
    let limits =
        Limits { resource_list_entries: 5, change_list: Rollover { max_events: 4, period: None }, ..Limits::default() };
    let s = start(listener, naming.clone(), &store, vec![SetConfig::source("src-a")], LinkPolicies::default(), limits);

    let map = format!("{}r/src-a/http/museum-a.test={}", naming.base(), dest.display());
    let cap = naming.capability_list("src-a");
    let out =
        resync(&tool, work.path(), &["--baseline", "--capabilitylist", &cap, "--hash", "sha-256", "--delete", &map])
            .await;
    assert!(out.contains("SYNCED"), "{out}");
    assert_eq!(files(&dest), expected, "baseline copy");

    // Changes come in a later second than the baseline's events: resync's state is whole
    // seconds (the last `<lastmod>` it saw) and it replays changes at or after it.
    let baseline_time = store.events_after("src-a", 0).unwrap().last().unwrap().unwrap().datetime;
    for _ in 0..40 {
        if tributary::model::W3cDateTime::now() > baseline_time {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Upstream changes, as the harvester records them: updates, deletions, creations.
    let updated = [resource("obj/1.txt", "updated one"), resource("obj/sub/4.xml", "<updated/>")];
    upsert(&store, &naming, &["src-a"], &updated);
    delete(&store, &["src-a"], &[uris[2].clone(), uris[8].clone()]);
    upsert(&store, &naming, &["src-a"], &[resource("obj/new.txt", "brand new"), resource("obj/sub/new.xml", "<new/>")]);
    expected.insert("obj/1.txt".into(), b"updated one".to_vec());
    expected.insert("obj/sub/4.xml".into(), b"<updated/>".to_vec());
    expected.remove("obj/2.txt");
    expected.remove("obj/sub/8.xml");
    expected.insert("obj/new.txt".into(), b"brand new".to_vec());
    expected.insert("obj/sub/new.xml".into(), b"<new/>".to_vec());

    let (_, index) = doc(&s.client, &naming.change_list("src-a")).await;
    let lists: Vec<String> = index
        .entries
        .iter()
        .filter(|e| e.md.as_ref().and_then(|m| m.until).is_none_or(|u| u > baseline_time))
        .map(|e| e.loc.clone())
        .collect();
    assert_eq!(lists.len(), 2, "12 creations fill lists 1-3; 6 later changes are list 4 and the open list 5");
    for list in &lists {
        let out = resync(&tool, work.path(), &["--incremental", "--changelist-uri", list, "--delete", &map]).await;
        assert!(out.contains("CHANGES APPLIED"), "{list}: {out}");
    }
    assert_eq!(files(&dest), expected, "copy after the incremental sync");

    let out = resync(&tool, work.path(), &["--audit", "--capabilitylist", &cap, "--hash", "sha-256", &map]).await;
    assert!(out.contains("IN SYNC") && !out.contains("NOT IN SYNC"), "{out}");
    drop(s);
}
