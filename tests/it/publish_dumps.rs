//! Resource Dumps as Tributary publishes them (spec §11), over real HTTP on 127.0.0.1: the
//! document and its packages (ranges, conditional requests, the manifest on its own), a
//! second Tributary baselining from the first's dump with the `via` chain intact, and the
//! packages read by Python's `zipfile` and the reference implementation's manifest parser.

use std::collections::BTreeMap;
use std::io::Read;

use reqwest::StatusCode;
use sha2::Digest as _;

use crate::support::harness::{Harness, UNLIMITED, config_text};
use crate::support::publish::{Running, bind, delete, doc, entries, harvest, start};
use crate::support::sim;
use crate::support::store::temp_store;
use crate::support::tools::resync_tool;
use tributary::model::{Capability, Document, HashAlgorithm};
use tributary::publish::{DumpLimits, Limits, LinkPolicies, SetConfig};
use tributary::store::Store;

/// A: the simulator's 30 resources harvested into a store and served with dump packages of
/// at most 12 entries.
async fn aggregator_a() -> (sim::RunningSim, tempfile::TempDir, Store, Running) {
    let s = sim::start(|c| c.resources = 30).await;
    let (dir, store) = temp_store();
    let (listener, naming) = bind().await;
    assert_eq!(harvest(&s.client, &s.sim.url("/resourcelist.xml"), &store, &naming, "s", &["s"]).await, 30);
    let dump = DumpLimits { package_entries: 12, ..DumpLimits::default() };
    let limits = Limits { dump, ..Limits::default() };
    let a = start(listener, naming, &store, vec![SetConfig::source("s")], LinkPolicies::default(), limits);
    (s, dir, store, a)
}

async fn get(a: &Running, url: &str, headers: &[(&str, &str)]) -> (StatusCode, reqwest::header::HeaderMap, Vec<u8>) {
    let mut req = a.client.get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let (status, h) = (resp.status(), resp.headers().clone());
    (status, h, resp.bytes().await.unwrap().to_vec())
}

/// The package URLs a dump document lists, with their declared length and sha-256.
fn packages(dump: &Document) -> Vec<(String, u64, String)> {
    dump.entries
        .iter()
        .map(|e| {
            let md = e.md.as_ref().unwrap();
            let sha = md.hash.as_ref().unwrap().get(&HashAlgorithm::Sha256).unwrap().to_owned();
            (e.loc.clone(), md.length.unwrap(), sha)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dump_and_its_packages_are_served_with_ranges_and_validators() {
    let (_s, _dir, _store, a) = aggregator_a().await;
    let caps = entries(&a.client, &a.naming.capability_list("s")).await;
    assert!(caps.iter().any(|e| e.loc == a.naming.resource_dump("s")), "advertised in the Capability List");
    let (bytes, dump) = doc(&a.client, &a.naming.resource_dump("s")).await;
    let report = tributary::check::check_reader(&bytes[..], tributary::model::ReadOptions::default());
    assert_eq!(report.errors(), 0, "{}", report.render(true));
    assert_eq!(report.kind.map(|k| k.name().to_owned()).as_deref(), Some("Resource Dump"));
    let md = dump.header.md.as_ref().unwrap();
    assert!(md.at.is_some() && md.completed.is_some());
    assert_eq!(dump.header.links.iter().find(|l| l.rel == "up").unwrap().href, a.naming.capability_list("s"));
    let listed = packages(&dump);
    assert_eq!(listed.len(), 3, "30 resources, 12 a package");

    let (url, length, sha) = &listed[0];
    let (status, h, body) = get(&a, url, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!((body.len() as u64, hex::encode(sha2::Sha256::digest(&body))), (*length, sha.clone()));
    assert_eq!(h["accept-ranges"], "bytes");
    let etag = h["etag"].to_str().unwrap().to_owned();
    assert_eq!(get(&a, url, &[("if-none-match", &etag)]).await.0, StatusCode::NOT_MODIFIED);
    let (status, h, part) = get(&a, url, &[("range", "bytes=10-99")]).await;
    assert_eq!(status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(h["content-range"], format!("bytes 10-99/{length}").as_str());
    assert_eq!(part, body[10..100]);
    let (status, h, _) = get(&a, url, &[("range", &format!("bytes={length}-"))]).await;
    assert_eq!(status, StatusCode::RANGE_NOT_SATISFIABLE, "a range past the end");
    assert_eq!(h["content-range"], format!("bytes */{length}").as_str());

    // The manifest on its own is the one inside the package, listed first.
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(body)).unwrap();
    let mut inside = String::new();
    zip.by_index(0).unwrap().read_to_string(&mut inside).unwrap();
    assert_eq!(zip.by_index(0).unwrap().name().unwrap(), "manifest.xml");
    let contents = &dump.entries[0].links.iter().find(|l| l.rel == "contents").unwrap().href;
    let (status, _, alone) = get(&a, contents, &[]).await;
    assert_eq!((status, String::from_utf8(alone).unwrap()), (StatusCode::OK, inside.clone()));
    let report = tributary::check::check_reader(inside.as_bytes(), tributary::model::ReadOptions::default());
    assert_eq!(report.errors(), 0, "{}", report.render(true));
    assert_eq!(report.kind.map(|k| k.name().to_owned()).as_deref(), Some("Resource Dump Manifest"));
    let gone = url.replace("-1.zip", "-9.zip");
    assert_eq!(get(&a, &gone, &[]).await.0, StatusCode::NOT_FOUND);
}

/// B baselines from A's Resource Dump with the harvester itself: every resource ends up
/// byte-identical, with the origin's `via`. To prove the dump was used, A's records are
/// deleted after the dump was built: A's bitstreams then answer 410 and its Resource List is
/// empty, so only the dump can have delivered them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_tributary_baselines_from_the_dump() {
    let (s, _dir, store_a, a) = aggregator_a().await;
    let expected: BTreeMap<String, (Vec<u8>, String)> = {
        let mut out = BTreeMap::new();
        for e in entries(&a.client, &a.naming.resource_list("s")).await {
            let body = a.client.get(&e.loc).send().await.unwrap().bytes().await.unwrap().to_vec();
            out.insert(e.loc.clone(), (body, e.link("via").unwrap().href.clone()));
        }
        out
    };
    assert_eq!(get(&a, &a.naming.resource_dump("s"), &[]).await.0, StatusCode::OK, "the dump is built");
    let uris: Vec<String> = expected.keys().cloned().collect();
    delete(&store_a, &["s"], &uris);
    store_a.flush().unwrap();
    assert_eq!(get(&a, &uris[0], &[]).await.0, StatusCode::GONE);

    // Through A's Source Description, so A's whole host is the Source's authority: its
    // resources live under `r/`, outside the set's own path.
    let (sd, pick) =
        (a.naming.source_description(), format!("capability_list = \"{}\"", a.naming.capability_list("s")));
    let b = Harness::new(|dir| config_text(dir, "", UNLIMITED, &[("a", &sd, &pick)]));
    let report = b.pass_one().await;
    assert_eq!(report.error, None, "{report:?}");
    let created: Vec<String> =
        b.events("a").into_iter().filter(|(change, _)| change == "Created").map(|(_, uri)| uri).collect();
    assert_eq!(created.len(), 30, "every resource came from the dump");
    for (upstream, (content, via)) in &expected {
        let rec = b.record("a", upstream).unwrap_or_else(|| panic!("B holds {upstream}"));
        assert_eq!(&rec.origin, via, "the via chain ends at S, not at A");
        assert!(rec.origin.starts_with(&s.sim.url("/")), "{}", rec.origin);
        let mut held = Vec::new();
        b.store.get(&rec.sha256).unwrap().read_to_end(&mut held).unwrap();
        assert_eq!(&held, content, "byte-identical");
    }
}

/// `[publish] dumps = false`: the Capability List advertises no dump, every dump path answers
/// 404 saying why, nothing is built, and a second Tributary baselines from the Resource List.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_dumps_off_a_second_tributary_baselines_from_the_list() {
    let s = sim::start(|c| c.resources = 12).await;
    let (dir, store) = temp_store();
    let (listener, naming) = bind().await;
    assert_eq!(harvest(&s.client, &s.sim.url("/resourcelist.xml"), &store, &naming, "s", &["s"]).await, 12);
    let limits = Limits { dumps: false, ..Limits::default() };
    let a = start(listener, naming, &store, vec![SetConfig::source("s")], LinkPolicies::default(), limits);
    let caps = entries(&a.client, &a.naming.capability_list("s")).await;
    let advertised: Vec<String> = caps.iter().map(|e| e.md.as_ref().unwrap().capability.unwrap().to_string()).collect();
    assert_eq!(advertised.iter().filter(|c| c.contains("dump")).count(), 0, "{advertised:?}");
    assert!(advertised.iter().any(|c| c == "resourcelist"), "{advertised:?}");
    let base = a.naming.resource_dump("s");
    let base = base.trim_end_matches("resourcedump.xml");
    for path in ["resourcedump.xml", "resourcedump-1-1.zip", "changedump.xml", "changedump-1.zip"] {
        let (status, _, body) = get(&a, &format!("{base}{path}"), &[]).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert!(String::from_utf8_lossy(&body).contains("dumps = false"), "{path}: {}", String::from_utf8_lossy(&body));
    }

    let (sd, pick) =
        (a.naming.source_description(), format!("capability_list = \"{}\"", a.naming.capability_list("s")));
    let b = Harness::new(|dir| config_text(dir, "", UNLIMITED, &[("a", &sd, &pick)]));
    let report = b.pass_one().await;
    assert_eq!(report.error, None, "{report:?}");
    assert_eq!(b.events("a").len(), 12, "every resource, from the list");
    assert!(!store.path().join("dumps").exists(), "nothing was built");
    drop(dir);
}

/// The packages of both dumps open with Python's `zipfile` (manifest first) and every
/// manifest parses with the reference implementation's `ResourceDumpManifest` or
/// `ChangeDumpManifest`, naming each bitstream's path and hash. A skipped test under the conditions of `support::tools`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packages_open_with_python_zipfile_and_resync() {
    let test = "publish_dumps::packages_open_with_python_zipfile_and_resync";
    let Some(_) = resync_tool("resync-sync", test) else { return };
    let python = crate::support::tools::require("python3", test).unwrap();
    let (_s, _dir, _store, a) = aggregator_a().await;
    let (_, dump) = doc(&a.client, &a.naming.resource_dump("s")).await;
    assert_eq!(dump.header.md.as_ref().unwrap().capability, Some(Capability::ResourceDump));
    let tmp = tempfile::tempdir().unwrap();
    for (i, (url, _, _)) in packages(&dump).iter().enumerate() {
        let body = a.client.get(url).send().await.unwrap().bytes().await.unwrap();
        std::fs::write(tmp.path().join(format!("r{i}.zip")), &body).unwrap();
    }
    // The Change Dump's packages too: the open list's cut holds the 30 creations.
    let (_, changes) = doc(&a.client, &a.naming.change_dump("s")).await;
    assert_eq!(changes.header.md.as_ref().unwrap().capability, Some(Capability::ChangeDump));
    for (i, e) in changes.entries.iter().enumerate() {
        let body = a.client.get(&e.loc).send().await.unwrap().bytes().await.unwrap();
        std::fs::write(tmp.path().join(format!("c{i}.zip")), &body).unwrap();
    }
    let script = r#"
import hashlib, os, sys, zipfile, glob
from resync.resource_dump_manifest import ResourceDumpManifest
from resync.change_dump_manifest import ChangeDumpManifest
totals = {"r": 0, "c": 0}
for path in sorted(glob.glob(sys.argv[1] + "/*.zip")):
    kind = os.path.basename(path)[0]
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None, path
        names = z.namelist()
        assert names[0] == "manifest.xml", names
        m = ResourceDumpManifest() if kind == "r" else ChangeDumpManifest()
        m.parse(str_data=z.read("manifest.xml").decode("utf-8"))
        for r in m.resources:
            if kind == "c":
                assert r.change in ("created", "updated", "deleted"), r.uri
            data = z.read(r.path.lstrip("/"))
            assert hashlib.sha256(data).hexdigest() == r.sha256, r.uri
            assert len(data) == r.length, r.uri
            totals[kind] += 1
print(totals["r"], totals["c"])
"#;
    let out = python.command().arg("-c").arg(script).arg(tmp.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "30 30", "every bitstream of both dumps, verified");
}

/// A served by a router that counts the requests for bitstreams (`r/…`), so a test can tell
/// a dump from resource-by-resource fetching.
async fn counted(
    store: &Store,
    limits: Limits,
) -> (tributary::naming::Naming, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (listener, naming) = bind().await;
    let state = tributary::web::WebState::new(
        store.clone(),
        naming.clone(),
        vec![SetConfig::source("s")],
        LinkPolicies::default(),
        limits,
    )
    .unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let app = tributary::web::router(state).layer(axum::middleware::from_fn(
        move |req: axum::extract::Request, next: axum::middleware::Next| {
            if req.uri().path().starts_with("/r/") {
                counter.fetch_add(1, Ordering::SeqCst);
            }
            next.run(req)
        },
    ));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (naming, hits)
}

/// B baselines from A's Resource Dump, then follows A's Change Dump through updates, a
/// creation and deletions, without fetching a single bitstream one by one, and ends holding
/// exactly A's live resources, byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_tributary_follows_the_change_dump() {
    use crate::support::publish::{Res, upsert};
    let (_dir_a, store_a) = temp_store();
    let limits = Limits {
        change_list: tributary::publish::Rollover { max_events: 4, period: None },
        dump: DumpLimits { max_age: std::time::Duration::ZERO, ..DumpLimits::default() },
        ..Limits::default()
    };
    let (naming, hits) = counted(&store_a, limits).await;
    let res =
        |i: u32, v: &str| Res::new("s", &format!("http://origin.example/{i}"), format!("resource {i}, version {v}"));
    upsert(&store_a, &naming, &["s"], &(0..10).map(|i| res(i, "1")).collect::<Vec<_>>());
    store_a.flush().unwrap();

    let (sd, pick) = (naming.source_description(), format!("capability_list = \"{}\"", naming.capability_list("s")));
    let b = Harness::new(|dir| config_text(dir, "", UNLIMITED, &[("a", &sd, &pick)]));
    let first = b.pass_one().await;
    assert_eq!((first.error.as_deref(), first.created), (None, 10), "{first:?}");

    // A changes: two updates (one of them twice), a creation, two deletions.
    upsert(&store_a, &naming, &["s"], &[res(1, "2"), res(2, "2")]);
    upsert(&store_a, &naming, &["s"], &[res(1, "3"), res(10, "1")]);
    let gone: Vec<String> =
        [3, 4].iter().map(|i| naming.resource("s", &format!("http://origin.example/{i}")).unwrap()).collect();
    delete(&store_a, &["s"], &gone);
    store_a.flush().unwrap();
    let second = b.pass_one().await;
    assert_eq!(second.error, None, "{second:?}");
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0, "no bitstream was fetched one by one");

    let mut want: BTreeMap<String, String> = BTreeMap::new();
    for rec in store_a.records_with_prefix(&naming.resource_prefix("s")) {
        let rec = rec.unwrap();
        if !rec.is_deleted() {
            want.insert(rec.uri, rec.sha256.to_hex());
        }
    }
    let mut got: BTreeMap<String, String> = BTreeMap::new();
    for (upstream, sha) in b.live("a") {
        // B's record URIs name A's URIs as their upstream.
        let rec = b.store.record(&upstream).unwrap().unwrap();
        got.insert(rec.upstream.clone(), sha);
    }
    assert_eq!(got, want, "B holds exactly A's live resources, byte for byte");
    let one = b.record("a", &naming.resource("s", "http://origin.example/1").unwrap()).unwrap();
    assert_eq!(one.origin, "http://origin.example/1", "the via chain ends at the origin");
}

/// Faults while packages are downloaded: a dump rebuilt twice under a download (its package
/// deleted) still delivers the whole package it began, byte for byte; clients that hang up
/// mid-package, more of them than there are stream slots, leave nothing stuck: the next
/// download is served in full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downloads_survive_rebuilds_and_abandoned_ones_leave_nothing_stuck() {
    use crate::support::publish::{Res, upsert};
    let (_dir, store) = temp_store();
    let limits = Limits {
        dump: DumpLimits { max_age: std::time::Duration::ZERO, ..DumpLimits::default() },
        ..Limits::default()
    };
    let (listener, naming) = bind().await;
    let a = start(listener, naming.clone(), &store, vec![SetConfig::source("s")], LinkPolicies::default(), limits);
    // 300 resources of 4 KiB: a package of 1.2 MB, more than a response buffers ahead.
    let big = |i: u32, v: &str| Res::new("s", &format!("http://origin.example/{i}"), format!("{v}{i:04}").repeat(800));
    upsert(&store, &naming, &["s"], &(0..300).map(|i| big(i, "a")).collect::<Vec<_>>());
    store.flush().unwrap();
    let (_, dump) = doc(&a.client, &naming.resource_dump("s")).await;
    let (url, length, sha) = packages(&dump).remove(0);

    let mut resp = a.client.get(&url).send().await.unwrap();
    let mut body = resp.chunk().await.unwrap().unwrap().to_vec();
    for v in ["b", "c"] {
        upsert(&store, &naming, &["s"], &[big(0, v)]);
        store.flush().unwrap();
        let (_, newer) = doc(&a.client, &naming.resource_dump("s")).await;
        assert_ne!(packages(&newer)[0].0, url, "a new state gets new names");
    }
    assert_eq!(get(&a, &url, &[]).await.0, StatusCode::NOT_FOUND, "two generations on, the package is deleted");
    while let Some(chunk) = resp.chunk().await.unwrap() {
        body.extend_from_slice(&chunk);
    }
    assert_eq!((body.len() as u64, hex::encode(sha2::Sha256::digest(&body))), (length, sha), "the download it began");

    let (_, dump) = doc(&a.client, &naming.resource_dump("s")).await;
    let (url, length, _) = packages(&dump).remove(0);
    for _ in 0..80 {
        let mut resp = a.client.get(&url).send().await.unwrap();
        let _ = resp.chunk().await.unwrap();
        drop(resp);
    }
    let whole = tokio::time::timeout(std::time::Duration::from_secs(30), get(&a, &url, &[])).await;
    let (status, _, body) = whole.expect("a download after 80 abandoned ones is served");
    assert_eq!((status, body.len() as u64), (StatusCode::OK, length));
}
