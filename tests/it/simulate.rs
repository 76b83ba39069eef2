//! `tributary simulate` as a Destination sees it: real HTTP on 127.0.0.1, every document run
//! through `check`, and the Change Lists compared with the bytes actually served.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Cursor, Read};
use std::time::Duration;

use crate::support::digest::digests;
use crate::support::net::free_port;
use crate::support::sim::{RunningSim, assert_checks_clean, start};
use clap::Parser as _;
use reqwest::StatusCode;
use tributary::model::{Capability, Change, Entry, HashAlgorithm, RootFormat, W3cDateTime};
use tributary::simulate::cli::{self, SimulateArgs};
use tributary::simulate::{ClockMode, Rollover, SimConfig, SimError, Simulator, router};

fn hash_of(e: &Entry, alg: HashAlgorithm) -> Option<String> {
    e.md.as_ref()?.hash.as_ref()?.get(&alg).map(str::to_owned)
}

/// Every change entry of the retained Change Lists, in index order.
async fn all_changes(s: &RunningSim) -> Vec<Entry> {
    let (_, index) = s.doc("/changelist.xml").await;
    assert_eq!(index.header.format, Some(RootFormat::SitemapIndex));
    let mut out = Vec::new();
    for list in &index.entries {
        let (_, doc) = s.doc(&list.loc).await;
        out.extend(doc.entries);
    }
    out
}

#[tokio::test]
async fn every_served_document_passes_check_with_no_errors() {
    let s = start(|c| {
        c.resources = 30;
        c.list_limit = 10;
        c.links = true;
        c.dump = true;
        c.via_origin = Some("http://127.0.0.1:9/origin/".parse().unwrap());
        c.rollover = Rollover { count: Some(7), period: None };
        c.keep_closed_lists = 3;
    })
    .await;
    s.sim.step(40);
    let paths = s.sim.document_paths().unwrap();
    assert!(paths.iter().any(|p| p.starts_with("/resourcelist/")), "{paths:?}");
    assert!(paths.iter().any(|p| p.ends_with("-manifest.xml")), "{paths:?}");
    assert!(paths.iter().filter(|p| p.starts_with("/changelist/")).count() >= 2, "{paths:?}");
    for path in &paths {
        let (body, _) = s.doc(path).await;
        let report = assert_checks_clean(path, &body);
        assert_eq!(report.warnings(), 0, "{path}: {}", report.render(true));
    }
}

#[tokio::test]
async fn discovery_leads_from_the_source_description_to_every_capability() {
    let s = start(|c| {
        c.resources = 5;
        c.dump = true;
    })
    .await;
    let (_, sd) = s.doc("/.well-known/resourcesync").await;
    assert_eq!(sd.header.capability(), Some(Capability::Description));
    let cap_url = &sd.entries[0].loc;
    let (_, caps) = s.doc(cap_url).await;
    assert_eq!(caps.header.link("up").unwrap().href, s.sim.url("/.well-known/resourcesync"));
    let listed: BTreeMap<Capability, String> =
        caps.entries.iter().map(|e| (e.md.as_ref().unwrap().capability.unwrap(), e.loc.clone())).collect();
    let wanted = BTreeSet::from([Capability::ResourceList, Capability::ResourceDump, Capability::ChangeList]);
    assert_eq!(listed.keys().copied().collect::<BTreeSet<_>>(), wanted);
    for (capability, url) in &listed {
        let (_, doc) = s.doc(url).await;
        assert_eq!(doc.header.capability(), Some(*capability), "{url}");
        assert_eq!(doc.header.link("up").unwrap().href, *cap_url);
    }
}

#[tokio::test]
async fn change_lists_report_steps_in_forward_order_with_hashes_of_the_served_bytes() {
    let s = start(|c| {
        c.resources = 8;
        c.min_size = 10;
        c.max_size = 3_000;
        c.rollover = Rollover { count: Some(10), period: None };
    })
    .await;
    s.sim.step(35);
    let changes = all_changes(&s).await;
    let history = s.sim.history();
    assert_eq!(changes.len(), 35);
    assert_eq!(history.len(), 35);
    let times: Vec<W3cDateTime> = changes.iter().map(|e| e.md.as_ref().unwrap().datetime.unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] < w[1]), "not strictly forward: {times:?}");
    for ((e, h), t) in changes.iter().zip(&history).zip(&times) {
        assert_eq!((e.loc.as_str(), e.md.as_ref().unwrap().change, *t), (h.url.as_str(), Some(h.change), h.datetime));
    }
    // The latest change of each URL must describe exactly the bytes served now.
    let latest: BTreeMap<&str, &Entry> = changes.iter().map(|e| (e.loc.as_str(), e)).collect();
    assert!(
        latest.values().any(|e| e.md.as_ref().unwrap().change == Some(Change::Deleted))
            || s.sim.config().mix.delete == 0
    );
    for (url, e) in latest {
        let (status, headers, body) = s.get(url).await;
        let md = e.md.as_ref().unwrap();
        if md.change == Some(Change::Deleted) {
            assert_eq!(status, StatusCode::GONE, "{url}");
            continue;
        }
        assert_eq!(status, StatusCode::OK, "{url}");
        let (md5, sha) = digests(&body);
        assert_eq!(hash_of(e, HashAlgorithm::Md5), Some(md5.clone()), "{url}");
        assert_eq!(hash_of(e, HashAlgorithm::Sha256), Some(sha), "{url}");
        assert_eq!(md.length, Some(body.len() as u64));
        assert_eq!(headers["content-length"].to_str().unwrap(), body.len().to_string());
        assert_eq!(headers["etag"].to_str().unwrap(), format!("\"{md5}\""));
    }
}

#[tokio::test]
async fn resources_answer_head_conditional_get_and_410_after_delete() {
    let s = start(|c| {
        c.resources = 3;
        c.mix = "0,0,1".parse().unwrap();
    })
    .await;
    let info = s.sim.resources()[0].clone();
    let head = s.client.head(&info.url).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::OK);
    assert_eq!(head.headers()["content-length"].to_str().unwrap(), info.length.to_string());
    assert!(head.headers().contains_key("last-modified"));
    let etag = head.headers()["etag"].clone();
    let again = s.client.get(&info.url).header("if-none-match", etag).send().await.unwrap();
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    s.sim.step(3);
    assert!(s.sim.resources().is_empty());
    assert_eq!(s.get(&info.url).await.0, StatusCode::GONE);
    assert_eq!(s.get("/res/99").await.0, StatusCode::NOT_FOUND);
    let (_, list) = s.doc("/resourcelist.xml").await;
    assert!(list.entries.is_empty());
}

#[tokio::test]
async fn rollover_closes_lists_whose_bytes_never_change() {
    let s = start(|c| {
        c.resources = 10;
        c.rollover = Rollover { count: Some(5), period: Some(Duration::from_secs(3600)) };
    })
    .await;
    s.sim.step(5);
    let (closed_bytes, closed) = s.doc("/changelist/1.xml").await;
    let md = closed.header.md.as_ref().unwrap();
    assert_eq!(closed.entries.len(), 5);
    assert_eq!(md.until, closed.entries[4].md.as_ref().unwrap().datetime);
    let (_, open) = s.doc("/changelist/2.xml").await;
    assert_eq!(open.header.md.as_ref().unwrap().until, None);
    assert_eq!(open.header.md.as_ref().unwrap().from, md.until);
    s.sim.step(12);
    assert_eq!(s.doc("/changelist/1.xml").await.0, closed_bytes);
    // A period rollover: two changes, then an hour of (virtual) quiet.
    s.sim.step(2);
    s.sim.advance(Duration::from_secs(3600));
    let (_, index) = s.doc("/changelist.xml").await;
    let untils: Vec<bool> = index.entries.iter().map(|e| e.md.as_ref().unwrap().until.is_some()).collect();
    assert_eq!(untils, [true, true, true, true, false]);
    let froms: Vec<_> = index.entries.iter().map(|e| e.md.as_ref().unwrap().from).collect();
    let until_of: Vec<_> = index.entries.iter().map(|e| e.md.as_ref().unwrap().until).collect();
    assert!(froms[1..].iter().zip(&until_of).all(|(f, u)| f == u), "lists must tile time: {froms:?} {until_of:?}");
}

#[tokio::test]
async fn dropped_lists_move_the_index_from_forward_and_answer_410() {
    let s = start(|c| {
        c.resources = 10;
        c.rollover = Rollover { count: Some(3), period: None };
        c.keep_closed_lists = 2;
    })
    .await;
    let (_, before) = s.doc("/changelist.xml").await;
    let start_from = before.header.md.as_ref().unwrap().from.unwrap();
    s.sim.step(20);
    let (_, index) = s.doc("/changelist.xml").await;
    assert_eq!(index.entries.len(), 3);
    let from = index.header.md.as_ref().unwrap().from.unwrap();
    assert!(from > start_from);
    assert_eq!(Some(from), index.entries[0].md.as_ref().unwrap().from);
    assert_eq!(s.get("/changelist/1.xml").await.0, StatusCode::GONE);
    assert_eq!(s.sim.dropped_changes(), 12);
    assert_eq!(s.sim.history().len(), 8);
}

#[tokio::test]
async fn the_resource_list_becomes_an_index_at_a_small_limit() {
    let s = start(|c| {
        c.resources = 25;
        c.list_limit = 10;
    })
    .await;
    let (_, index) = s.doc("/resourcelist.xml").await;
    assert_eq!(index.header.format, Some(RootFormat::SitemapIndex));
    assert_eq!(index.entries.len(), 3);
    let mut seen = BTreeMap::new();
    for part in &index.entries {
        let (_, doc) = s.doc(&part.loc).await;
        assert_eq!(doc.header.link("index").unwrap().href, s.sim.url("/resourcelist.xml"));
        assert_eq!(doc.header.link("up").unwrap().href, s.sim.url("/capabilitylist.xml"));
        assert!(doc.entries.len() <= 10);
        for e in doc.entries {
            seen.insert(e.loc.clone(), hash_of(&e, HashAlgorithm::Sha256).unwrap());
        }
    }
    let expected: BTreeMap<_, _> = s.sim.resources().into_iter().map(|r| (r.url, r.sha256)).collect();
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn the_same_seed_gives_identical_documents() {
    let tweak = |seed: u64| {
        move |c: &mut SimConfig| {
            c.resources = 20;
            c.seed = seed;
            c.links = true;
            c.rollover = Rollover { count: Some(6), period: None };
        }
    };
    let (a, b, other) = (start(tweak(7)).await, start(tweak(7)).await, start(tweak(8)).await);
    for s in [&a, &b, &other] {
        s.sim.step(15);
    }
    let norm =
        |s: &RunningSim, body: Vec<u8>| String::from_utf8(body).unwrap().replace(s.sim.base_url().as_str(), "BASE/");
    for path in ["/resourcelist.xml", "/changelist.xml", "/changelist/1.xml", "/changelist/3.xml"] {
        let (da, db, dother) = (a.get(path).await.2, b.get(path).await.2, other.get(path).await.2);
        assert_eq!(norm(&a, da.clone()), norm(&b, db), "{path}");
        if path != "/changelist.xml" {
            assert_ne!(norm(&a, da), norm(&other, dother), "{path}");
        }
    }
}

#[tokio::test]
async fn the_dump_manifest_lists_every_resource_with_matching_hashes() {
    let s = start(|c| {
        c.resources = 12;
        c.list_limit = 10;
        c.dump = true;
        c.links = true;
    })
    .await;
    s.sim.step(4);
    let (_, dump) = s.doc("/resourcedump.xml").await;
    assert_eq!(dump.entries.len(), 3, "12+ ids at 5 ids per package");
    let mut in_packages = BTreeMap::new();
    for package in &dump.entries {
        let (status, _, zip) = s.get(&package.loc).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(package.md.as_ref().unwrap().length, Some(zip.len() as u64));
        assert_eq!(hash_of(package, HashAlgorithm::Sha256), Some(digests(&zip).1));
        in_packages.extend(read_package(&s, package, &zip).await);
    }
    let expected: BTreeMap<_, _> = s.sim.resources().into_iter().map(|r| (r.url, (r.md5, r.sha256))).collect();
    assert_eq!(in_packages, expected);
}

/// Checks one package's manifest (inside the ZIP and at its `contents` URL) against the
/// bitstreams beside it; returns url → (md5, sha-256).
async fn read_package(s: &RunningSim, package: &Entry, zip: &[u8]) -> BTreeMap<String, (String, String)> {
    let mut archive = zip::ZipArchive::new(Cursor::new(zip)).unwrap();
    let mut manifest = Vec::new();
    archive.by_name("manifest.xml").unwrap().read_to_end(&mut manifest).unwrap();
    assert_checks_clean("manifest.xml", &manifest);
    let contents = &package.link("contents").unwrap().href;
    assert_eq!(s.doc(contents).await.0, manifest, "the contents link serves the packaged manifest");
    let (doc, _) = tributary::model::read_document(&manifest, Default::default()).unwrap();
    assert_eq!(doc.header.capability(), Some(Capability::ResourceDumpManifest));
    let mut out = BTreeMap::new();
    for e in doc.entries {
        let path = e.md.as_ref().unwrap().path.clone().unwrap();
        let mut bytes = Vec::new();
        archive.by_name(path.trim_start_matches('/')).unwrap().read_to_end(&mut bytes).unwrap();
        let (md5, sha) = digests(&bytes);
        assert_eq!(hash_of(&e, HashAlgorithm::Md5), Some(md5.clone()), "{path}");
        assert_eq!(hash_of(&e, HashAlgorithm::Sha256), Some(sha.clone()), "{path}");
        out.insert(e.loc, (md5, sha));
    }
    out
}

#[tokio::test]
async fn aggregator_mode_emits_via_links_to_the_origin() {
    let s = start(|c| {
        c.resources = 6;
        c.via_origin = Some("http://127.0.0.1:9/origin".parse().unwrap());
    })
    .await;
    s.sim.step(6);
    let (_, list) = s.doc("/resourcelist.xml").await;
    let changes = all_changes(&s).await;
    let live =
        list.entries.iter().chain(changes.iter().filter(|e| e.md.as_ref().unwrap().change != Some(Change::Deleted)));
    for e in live {
        let via = e.link("via").unwrap_or_else(|| panic!("{} has no via", e.loc));
        let id = e.loc.rsplit('/').next().unwrap();
        assert_eq!(via.href, format!("http://127.0.0.1:9/origin/res/{id}"));
        let md = e.md.as_ref().unwrap();
        assert_eq!((&via.hash, via.length, &via.media_type), (&md.hash, md.length, &md.media_type));
        assert_eq!(via.modified, e.lastmod);
    }
}

#[tokio::test]
async fn links_mode_points_describedby_at_metadata_resources_it_serves() {
    let s = start(|c| {
        c.resources = 4;
        c.links = true;
    })
    .await;
    let (_, list) = s.doc("/resourcelist.xml").await;
    let locs: BTreeSet<&str> = list.entries.iter().map(|e| e.loc.as_str()).collect();
    assert_eq!(locs.len(), 8);
    for e in list.entries.iter().filter(|e| e.loc.contains("/res/")) {
        let meta = &e.link("describedby").unwrap().href;
        assert!(locs.contains(meta.as_str()), "{meta} is listed");
        assert!(e.link("canonical").is_some() && e.link("collection").is_some());
        let (status, headers, body) = s.get(meta).await;
        assert_eq!((status, headers["content-type"].to_str().unwrap()), (StatusCode::OK, "application/xml"));
        assert!(String::from_utf8(body).unwrap().contains("<record"));
    }
}

#[tokio::test]
async fn ticking_changes_the_source_in_real_time() {
    let s = start(|c| {
        c.resources = 10;
        c.change_rate_per_sec = 100.0;
        c.clock = ClockMode::Real;
    })
    .await;
    let ticker = s.sim.start_ticking();
    for _ in 0..100 {
        if s.sim.generation() >= 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ticker.stop();
    assert!(s.sim.generation() >= 10, "only {} events after 2 s", s.sim.generation());
    let changes = all_changes(&s).await;
    let now = W3cDateTime::now().unix_timestamp();
    let first = changes[0].md.as_ref().unwrap().datetime.unwrap().unix_timestamp();
    assert!((now - first).abs() < 60, "real-clock datetimes are near now");
}

#[test]
fn invalid_configurations_are_rejected() {
    let base = SimConfig::new("http://127.0.0.1:1/".parse().unwrap());
    let bad = [
        SimConfig { min_size: 10, max_size: 5, ..base.clone() },
        SimConfig { list_limit: 60_000, ..base.clone() },
        SimConfig { change_rate_per_sec: f64::NAN, ..base.clone() },
        SimConfig { mix: "0,0,0".parse().unwrap(), ..base.clone() },
        SimConfig { rollover: Rollover { count: Some(0), period: None }, ..base.clone() },
        SimConfig { base_url: "ftp://x/".parse().unwrap(), ..base.clone() },
    ];
    for c in bad {
        assert!(Simulator::new(c).is_err());
    }
    assert!(Simulator::new(base).is_ok());
}

#[tokio::test]
async fn two_sources_can_share_one_listener_under_prefixes() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let make = |prefix: &str, seed: u64| {
        let mut c = SimConfig::new(format!("{base}{prefix}/").parse().unwrap());
        (c.resources, c.seed) = (3, seed);
        Simulator::new(c).unwrap()
    };
    let (a, b) = (make("/a", 1), make("/b", 2));
    let app = axum::Router::new().nest("/a", router(a.clone())).nest("/b", router(b.clone()));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let client = reqwest::Client::new();
    for sim in [&a, &b] {
        let sd = client.get(sim.url("/.well-known/resourcesync")).send().await.unwrap();
        assert_eq!(sd.status(), StatusCode::OK);
        let body = sd.bytes().await.unwrap();
        assert_checks_clean("sd", &body);
        assert!(String::from_utf8_lossy(&body).contains(&sim.url("/capabilitylist.xml")));
        let res = &sim.resources()[0];
        let bytes = client.get(&res.url).send().await.unwrap().bytes().await.unwrap();
        assert_eq!(digests(&bytes).1, res.sha256);
    }
}

#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    args: SimulateArgs,
}

#[tokio::test]
async fn the_command_serves_a_ticking_source_and_stops_on_shutdown() {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let Cli { args } =
        Cli::parse_from(["simulate", "--listen", &listen, "--rate", "100", "--resources", "5", "--dump"]);
    assert_eq!((args.min_size, args.max_size, args.list_limit, args.rollover_count), (100, 2_000, 50_000, 500));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(cli::run(args, async move {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    let mut changed = false;
    for _ in 0..150 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let Ok(resp) = client.get(format!("http://{listen}/changelist/1.xml")).send().await else { continue };
        let body = resp.bytes().await.unwrap();
        assert_checks_clean("open change list", &body);
        if String::from_utf8_lossy(&body).contains("<url>") {
            changed = true;
            break;
        }
    }
    assert!(changed, "no change within 3 s at 100 events/s");
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let Cli { args } = Cli::parse_from(["simulate", "--listen", &addr]);
    let err = cli::run(args, async {}).await.unwrap_err();
    assert!(matches!(err, SimError::Bind { .. }), "{err}");
}

/// With links on, every event writes a data change and then a metadata change; a reader that
/// saw half an event would find an odd count or a data entry last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_never_see_half_an_event() {
    let s = start(|c| {
        c.resources = 50;
        c.links = true;
        c.rollover = Rollover { count: None, period: None };
    })
    .await;
    let (sim, done) = (s.sim.clone(), std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)));
    let stop = done.clone();
    let writer = tokio::task::spawn_blocking(move || {
        for _ in 0..2_000 {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                break;
            }
            sim.step(1);
        }
    });
    for _ in 0..40 {
        let (_, open) = s.doc("/changelist/1.xml").await;
        assert_eq!(open.entries.len() % 2, 0);
        assert!(open.entries.last().is_none_or(|e| e.loc.contains("/meta/")));
        let (_, list) = s.doc("/resourcelist.xml").await;
        assert_eq!(list.entries.len() % 2, 0);
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.await.unwrap();
    assert!(s.sim.generation() > 0);
}
