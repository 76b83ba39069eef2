//! Interop with a client no one here wrote: the Python reference implementation (`pip install
//! resync`, v2) synchronizes from a running Tributary exactly as `docs/PUBLISH.md` tells a
//! resync user to — baseline, incremental, a Change List rollover, incremental again, audit —
//! and its copy must be byte-identical to the set's Resource List.
//!
//! What the commands rest on (read from resync 2.0.1's `client.py`):
//! - The Source Description lists one Capability List per set, and resync stops with
//!   "multiple sources"; so baseline and audit take the set's Capability List
//!   (`--capabilitylist`).
//! - `--incremental` ignores the Capability List and reads one plain Change List, the one
//!   passed as `--changelist-uri`: the test reads the URI the Capability List names, which is
//!   Tributary's recent Change List (the open list and the closed one before it).
//! - resync keeps the newest change datetime it has seen and replays changes *at or after* the
//!   time it resumes from; a resource created at that very instant and deleted later is then
//!   dropped as a "created and deleted" pair and its file stays. So each incremental passes
//!   `--from` = that datetime plus 1 ms, computed from resync's own state file by the snippet
//!   in `docs/PUBLISH.md` (Tributary stamps every batch of changes with its own millisecond).
//!   The test sets that trap: a resource created in the last change before the first
//!   incremental is deleted before the second.
//! - `--hash` crashes `--incremental` (`'ChangeList' object has no attribute 'hashes'`), so
//!   only baseline and audit compare content by sha-256.
//!
//! When resync is not installed the test fails under `CI=true` (where `.ci/setup` installs it)
//! and is skipped with a notice otherwise (`support::tools`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::support::publish::{Res, bind, delete, doc, entries, start, upsert};
use crate::support::store::temp_store;
use crate::support::tools::{Tool, require, resync_tool};
use tributary::model::{Capability, RootFormat};
use tributary::publish::{Limits, LinkPolicies, Rollover, SetConfig};

/// `T` for `--from`: the newest change resync recorded, plus 1 ms (docs/PUBLISH.md).
const FROM_SNIPPET: &str = r#"import configparser,datetime as d;c=configparser.ConfigParser();c.read(".resync-client-status.cfg");t=max(map(float,c["incremental"].values()))+0.001;print(d.datetime.fromtimestamp(t,d.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"))"#;

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

/// The `--from` datetime for the next incremental, as a resync user computes it.
fn resume_from(python: &Tool, cwd: &Path) -> String {
    let out = python.command().args(["-c", FROM_SNIPPET]).current_dir(cwd).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Each file's length and sha-256, so a failure prints something readable.
type Digests = BTreeMap<String, String>;

fn digest(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    format!("{} bytes, sha-256 {}", bytes.len(), hex::encode(sha2::Sha256::digest(bytes)))
}

/// Every file under `dir`, by relative path.
fn files(dir: &Path) -> Digests {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                out.insert(rel, digest(&std::fs::read(&path).unwrap()));
            }
        }
    }
    out
}

/// What the set's Resource List says the copy must be: each entry's bytes under its path.
async fn listed(client: &reqwest::Client, resource_list: &str, prefix: &str) -> Digests {
    let mut out = BTreeMap::new();
    for e in entries(client, resource_list).await {
        let body = client.get(&e.loc).send().await.unwrap().error_for_status().unwrap().bytes().await.unwrap();
        out.insert(e.loc.strip_prefix(prefix).unwrap().to_owned(), digest(&body));
    }
    out
}

fn resource(path: &str, content: &str) -> Res {
    Res::new("src-a", &format!("http://museum-a.test/{path}"), content)
}

/// The Change List URI the set's Capability List names; asserts it is a plain Change List.
async fn named_change_list(client: &reqwest::Client, cap: &str) -> String {
    let (_, caps) = doc(client, cap).await;
    let uri = caps
        .entries
        .iter()
        .find(|e| e.md.as_ref().and_then(|m| m.capability) == Some(Capability::ChangeList))
        .map(|e| e.loc.clone())
        .unwrap();
    let (_, list) = doc(client, &uri).await;
    assert_eq!(list.header.format, Some(RootFormat::UrlSet), "{uri} is a plain Change List");
    uri
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_resync_follows_the_named_change_list_across_a_rollover() {
    let test = "publish_resync::python_resync_follows_the_named_change_list_across_a_rollover";
    let Some(tool) = resync_tool("resync-sync", test) else { return };
    let Some(python) = require("python3", test) else { return };
    let (_dir, store) = temp_store();
    let work = tempfile::tempdir().unwrap();
    let dest = work.path().join("copy");
    let (listener, naming) = bind().await;
    let initial: Vec<Res> = (0..12)
        .map(|i| {
            let path = if i % 4 == 0 { format!("obj/sub/{i}.xml") } else { format!("obj/{i}.txt") };
            resource(&path, &format!("resource {i} ").repeat(i * 50 + 1))
        })
        .collect();
    let uris = upsert(&store, &naming, &["src-a"], &initial);
    // Lists of 4 events, so both incrementals read across closed lists, and the second reads
    // across a rollover that happened after the first.
    let limits =
        Limits { resource_list_entries: 5, change_list: Rollover { max_events: 4, period: None }, ..Limits::default() };
    let s = start(listener, naming.clone(), &store, vec![SetConfig::source("src-a")], LinkPolicies::default(), limits);
    let prefix = format!("{}r/src-a/http/museum-a.test/", naming.base());
    let map = format!("{}r/src-a/http/museum-a.test={}", naming.base(), dest.display());
    let cap = naming.capability_list("src-a");
    let rl = naming.resource_list("src-a");
    let cwd = work.path();

    let out =
        resync(&tool, cwd, &["--baseline", "--capabilitylist", &cap, "--hash", "sha-256", "--delete", &map]).await;
    assert!(out.contains("SYNCED"), "{out}");
    assert_eq!(files(&dest), listed(&s.client, &rl, &prefix).await, "baseline copy");

    // Events 13-15 in the open list 4; the last creates a resource deleted after the first
    // incremental (the trap of the module docs).
    upsert(&store, &naming, &["src-a"], &[resource("obj/1.txt", "updated one")]);
    delete(&store, &["src-a"], &[uris[2].clone()]);
    let late = upsert(&store, &naming, &["src-a"], &[resource("obj/late.txt", "created last")]);
    let from = resume_from(&python, cwd);
    assert!(from.contains('.'), "milliseconds: {from}");
    let uri = named_change_list(&s.client, &cap).await;
    let incremental = |from: String, uri: String| {
        let (tool, map) = (&tool, &map);
        async move {
            resync(tool, cwd, &["--incremental", "--delete", "--from", &from, "--changelist-uri", &uri, map]).await
        }
    };
    let out = incremental(from, uri).await;
    assert!(out.contains("CHANGES APPLIED"), "{out}");
    let expected = listed(&s.client, &rl, &prefix).await;
    assert!(expected.contains_key("obj/late.txt") && !expected.contains_key("obj/2.txt"));
    assert_eq!(files(&dest), expected, "copy after the first incremental");

    // Event 16 closes list 4, 17-19 open list 5: changes on both sides of the rollover.
    upsert(&store, &naming, &["src-a"], &[resource("obj/3.txt", "updated three")]);
    delete(&store, &["src-a"], &late);
    upsert(&store, &naming, &["src-a"], &[resource("obj/sub/new.xml", "<new/>")]);
    delete(&store, &["src-a"], &[uris[8].clone()]);
    let (_, index) = doc(&s.client, &naming.change_list_index("src-a")).await;
    assert_eq!(index.entries.len(), 5, "four closed lists and the open one");
    let from = resume_from(&python, cwd);
    let uri = named_change_list(&s.client, &cap).await;
    let out = incremental(from, uri).await;
    assert!(out.contains("CHANGES APPLIED"), "{out}");
    let expected = listed(&s.client, &rl, &prefix).await;
    assert!(!expected.contains_key("obj/late.txt") && expected.contains_key("obj/sub/new.xml"));
    assert_eq!(files(&dest), expected, "copy after the rollover and the second incremental");

    let out = resync(&tool, cwd, &["--audit", "--capabilitylist", &cap, "--hash", "sha-256", &map]).await;
    assert!(out.contains("IN SYNC") && !out.contains("NOT IN SYNC"), "{out}");
    drop(s);
}
