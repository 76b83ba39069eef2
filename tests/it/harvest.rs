//! Baseline synchronization into a real store from real HTTP Sources on 127.0.0.1: the
//! simulator (content, second pass, changes, aggregator mode) and hand-written Sources for
//! the faults (truncated list, hash mismatch, failing source, outside authority).

use std::collections::HashMap;
use std::sync::Arc;

use crate::support::digest::{md5_hex, sha256_hex};
use crate::support::harness::{Harness, UNLIMITED, config_text};
use crate::support::sim::{self, RunningSim};
use crate::support::upstream::{Reply, Upstream};
use tributary::simulate::ResourceInfo;
use tributary::store::{HarvestState, SourceStatus};

/// Sources `(id, url, extra keys)` with rate limits lifted, and a merged set "all" of every
/// source.
fn harness(sources: &[(&str, String, &str)]) -> Harness {
    let sources: Vec<(&str, &str, &str)> = sources.iter().map(|(id, url, extra)| (*id, url.as_str(), *extra)).collect();
    let ids: Vec<String> = sources.iter().map(|(id, _, _)| format!("\"{id}\"")).collect();
    Harness::new(|dir| {
        config_text(dir, "", UNLIMITED, &sources) + &format!("[[set]]\nid = \"all\"\nsources = [{}]\n", ids.join(", "))
    })
}

fn well_known(s: &RunningSim) -> String {
    s.sim.url("/.well-known/resourcesync")
}

/// Every resource the simulator serves is in the store, byte for byte.
async fn assert_mirrors(h: &Harness, s: &RunningSim, resources: &[ResourceInfo]) {
    for r in resources {
        let stored = h.content("a", &r.url).unwrap_or_else(|| panic!("{} not stored", r.url));
        assert_eq!(sha256_hex(&stored), r.sha256, "{}", r.url);
        assert_eq!(md5_hex(&stored), r.md5, "{}", r.url);
        let (_, _, served) = s.get(&r.url).await;
        assert_eq!(stored, served, "{}", r.url);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baseline_is_byte_identical_and_a_second_pass_fetches_nothing() {
    let s = sim::start(|c| {
        c.resources = 300;
        c.list_limit = 100; // a Resource List Index of three parts
        c.max_size = 12_000; // some bitstreams spill to files
    })
    .await;
    let h = harness(&[("a", well_known(&s), "")]);
    let first = h.pass().await;
    assert_eq!((first.fetched(), first.failed(), first.deleted()), (300, 0, 0), "{first}");
    assert_eq!(first.sources[0].created, 300);
    assert_mirrors(&h, &s, &s.sim.resources()).await;
    assert_eq!(h.events("a").len(), 300);
    assert_eq!(h.events("all").len(), 300, "the merged set gets the events too");

    let second = h.pass().await;
    assert_eq!(second.fetched(), 0, "{second}");
    assert!(second.sources[0].error.is_none(), "{second}");
    assert_eq!(h.events("a").len(), 300, "nothing changed, no events");
    let state = h.store.source_state("a").unwrap().unwrap();
    assert_eq!(state.status.resources, 300);
    assert_eq!(state.status.state, HarvestState::Idle);
    assert!(state.status.last_success.is_some() && state.resource_list_at.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_become_exactly_the_right_events() {
    let s = sim::start(|c| c.resources = 200).await;
    let h = harness(&[("a", well_known(&s), "")]);
    h.pass().await;
    let before: HashMap<String, ResourceInfo> = s.sim.resources().into_iter().map(|r| (r.url.clone(), r)).collect();
    s.sim.step(40);
    let after: HashMap<String, ResourceInfo> = s.sim.resources().into_iter().map(|r| (r.url.clone(), r)).collect();
    let created = after.keys().filter(|u| !before.contains_key(*u)).count() as u64;
    let deleted = before.keys().filter(|u| !after.contains_key(*u)).count() as u64;
    let updated = after
        .iter()
        .filter(|(u, r)| before.get(*u).is_some_and(|b| b.sha256 != r.sha256 || b.lastmod != r.lastmod))
        .count() as u64;
    assert!(created + deleted + updated > 0);

    let pass = h.pass().await;
    let r = &pass.sources[0];
    assert_eq!((r.created, r.updated, r.deleted), (created, updated, deleted), "{pass}");
    assert_eq!(h.events("a").len() as u64, 200 + created + updated + deleted);
    assert_eq!(h.events("all").len() as u64, 200 + created + updated + deleted);
    let values: Vec<ResourceInfo> = after.into_values().collect();
    assert_mirrors(&h, &s, &values).await;
    for gone in before.keys().filter(|u| !values.iter().any(|v| &v.url == *u)) {
        assert!(h.store.record(&h.uri("a", gone)).unwrap().unwrap().is_deleted());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregator_upstream_keeps_the_origin_from_via() {
    let s = sim::start(|c| {
        c.resources = 20;
        c.via_origin = Some(url::Url::parse("http://origin.example/").unwrap());
    })
    .await;
    let h = harness(&[("a", well_known(&s), "")]);
    assert_eq!(h.pass().await.fetched(), 20);
    for r in s.sim.resources() {
        let rec = h.store.record(&h.uri("a", &r.url)).unwrap().unwrap();
        assert!(rec.origin.starts_with("http://origin.example/"), "{}", rec.origin);
        assert_eq!(rec.upstream, r.url);
        assert_eq!(rec.via.length, Some(r.length));
        assert!(rec.links.iter().all(|l| l.rel != "via"));
    }
}

fn md(body: &[u8]) -> String {
    format!("hash=\"md5:{}\" length=\"{}\"", md5_hex(body), body.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_list_deletes_nothing_and_mismatch_stores_nothing() {
    let (a, b) = (b"alpha".to_vec(), b"bravo".to_vec());
    let (ma, mb) = (md(&a), md(&b));
    let bad_md = md(b"what was declared");
    let truncate = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cut = truncate.clone();
    let up = Upstream::start(move |hit, _| {
        let full = format!(
            "<?xml version=\"1.0\"?><urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" xmlns:rs=\"http://www.openarchives.org/rs/terms/\">\
             <rs:md capability=\"resourcelist\"/><url><loc>/a</loc><rs:md {ma}/></url><url><loc>/b</loc><rs:md {mb}/></url>\
             <url><loc>/bad</loc><rs:md {bad_md}/></url></urlset>"
        );
        match hit.path.as_str() {
            // Once `truncate` is set, the list is cut off after its first entry.
            "/rl.xml" if cut.load(std::sync::atomic::Ordering::SeqCst) => {
                Reply::CutShort { declared: full.len(), body: full.as_bytes()[..full.find("<url><loc>/b").unwrap()].to_vec() }
            }
            "/rl.xml" => Reply::xml(full),
            "/a" => Reply::ok(b"alpha".to_vec()),
            "/b" => Reply::ok(b"bravo".to_vec()),
            "/bad" => Reply::ok(b"something else entirely".to_vec()),
            _ => Reply::status(404),
        }
    })
    .await;
    let h = harness(&[("a", up.url("/rl.xml").to_string(), "")]);
    let first = h.pass().await;
    assert_eq!((first.fetched(), first.failed()), (2, 1), "{first}");
    assert_eq!(h.content("a", up.url("/a").as_str()), Some(a));
    assert!(h.store.record(&h.uri("a", up.url("/bad").as_str())).unwrap().is_none(), "a mismatch is never stored");
    assert!(up.count("/bad") >= 2, "a mismatch is retried");
    let status = h.store.source_state("a").unwrap().unwrap().status;
    assert_eq!(status.failures, 1);

    truncate.store(true, std::sync::atomic::Ordering::SeqCst);
    let second = h.pass().await;
    assert_eq!(second.deleted(), 0, "{second}");
    assert!(second.sources[0].error.is_some(), "{second}");
    assert_eq!(h.content("a", up.url("/b").as_str()), Some(b), "/b is absent from a truncated list, not deleted");
    let status = h.store.source_state("a").unwrap().unwrap().status;
    assert_eq!(status.state, HarvestState::BackingOff);
    assert!(status.last_error.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_source_does_not_stop_another_and_outside_uris_are_skipped() {
    let body = b"inside".to_vec();
    let other = Upstream::routes(vec![("/x", vec![Reply::ok(b"outside".to_vec())])]).await;
    let outside = other.url("/x").to_string();
    let srv = Upstream::start({
        let body = body.clone();
        let outside = outside.clone();
        move |hit, _| match hit.path.as_str() {
            "/rl.xml" => Reply::xml(format!(
                "<?xml version=\"1.0\"?><urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" xmlns:rs=\"http://www.openarchives.org/rs/terms/\">\
                 <rs:md capability=\"resourcelist\"/><url><loc>/in</loc><rs:md {}/></url><url><loc>{outside}</loc><rs:md {}/></url></urlset>",
                md(&body),
                md(b"outside")
            )),
            "/in" => Reply::ok(body.clone()),
            _ => Reply::status(404),
        }
    })
    .await;
    let h = harness(&[("dead", "http://127.0.0.1:1/rl.xml".into(), ""), ("good", srv.url("/rl.xml").to_string(), "")]);
    let pass = h.pass().await;
    let (dead, good) = (&pass.sources[0], &pass.sources[1]);
    assert!(dead.error.is_some(), "{pass}");
    assert_eq!((good.fetched, good.skipped, good.error.as_deref()), (1, 1, None), "{pass}");
    assert_eq!(h.content("good", srv.url("/in").as_str()), Some(body));
    assert_eq!(other.count("/x"), 0, "outside the Source's authority: never fetched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_polls_until_shutdown_and_a_restart_fetches_nothing_again() {
    let s = sim::start(|c| c.resources = 50).await;
    let h = harness(&[("a", well_known(&s), "poll = \"1h\"")]);
    let service = h.serve(&tokio::runtime::Handle::current());
    // Bounded: 200 × 50 ms.
    for _ in 0..200 {
        let done = h.store.source_state("a").unwrap().is_some_and(|st| st.status.last_success.is_some());
        if done {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let status = h.store.source_state("a").unwrap().unwrap().status;
    assert_eq!((status.state, status.resources), (HarvestState::Idle, 50));
    assert!(status.next_attempt.is_some());
    service.stop().await;
    let again = h.pass().await;
    assert_eq!(again.fetched(), 0, "{again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entrys_other_links_are_kept_as_they_came() {
    use tributary::model::{ReadOptions, read_document};
    let body = b"the resource".to_vec();
    // Relations the publisher keeps (describedby, alternate), drops (canonical, collection,
    // memento) and the mirror: the record holds them all, as written, in the list's order;
    // only `via` becomes the origin.
    let list = format!(
        "<?xml version=\"1.0\"?><urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" xmlns:rs=\"http://www.openarchives.org/rs/terms/\">\
         <rs:md capability=\"resourcelist\"/>\
         <url><loc>/res/1</loc><lastmod>2024-01-02T03:04:05Z</lastmod><rs:md {} type=\"text/plain\"/>\
         <rs:ln rel=\"describedby\" href=\"/meta/1.xml\" type=\"application/xml\" length=\"12\" modified=\"2024-01-01T00:00:00+01:00\"/>\
         <rs:ln rel=\"canonical\" href=\"http://canonical.example/1\"/>\
         <rs:ln rel=\"via\" href=\"http://origin.example/1\" modified=\"2023-12-31T00:00:00Z\" length=\"12\"/>\
         <rs:ln rel=\"collection\" href=\"http://canonical.example/all\"/>\
         <rs:ln rel=\"duplicate\" pri=\"2\" href=\"http://127.0.0.1:1/mirror/1\" hash=\"sha-256:{}\"/>\
         <rs:ln rel=\"alternate\" href=\"/res/1.html\" type=\"text/html\"/>\
         <rs:ln rel=\"memento\" href=\"http://archive.example/20240101/1\" modified=\"2024-01-01T00:00:00Z\"/>\
         </url></urlset>",
        md(&body),
        sha256_hex(&body),
    );
    let served = list.clone();
    let up = Upstream::start(move |hit, _| match hit.path.as_str() {
        "/rl.xml" => Reply::xml(served.clone()),
        "/res/1" => Reply::ok(b"the resource".to_vec()),
        _ => Reply::status(404),
    })
    .await;
    let h = harness(&[("a", up.url("/rl.xml").to_string(), "")]);
    let pass = h.pass().await;
    assert_eq!((pass.fetched(), pass.failed()), (1, 0), "{pass}");

    let (doc, _) = read_document(list.as_bytes(), ReadOptions::named("rl.xml")).unwrap();
    let as_listed = doc.entries[0].links.clone();
    let rec = h.record("a", up.url("/res/1").as_str()).unwrap();
    let rels: Vec<&str> = rec.links.iter().map(|l| l.rel.as_str()).collect();
    assert_eq!(rels, ["describedby", "canonical", "collection", "duplicate", "alternate", "memento"]);
    let expected: Vec<_> = as_listed.into_iter().filter(|l| l.rel != "via").collect();
    assert_eq!(rec.links, expected, "the links, attributes and all, as the list gave them");
    assert_eq!(rec.links[0].href, "/meta/1.xml", "hrefs as written, resolved only when published");
    assert_eq!(rec.origin, "http://origin.example/1");
    assert_eq!(rec.via.length, Some(12));
    assert_eq!(up.count("/meta/1.xml") + up.count("/res/1.html"), 0, "linked resources are not fetched");
    assert_eq!(up.count("/rl.xml"), 1, "the list the operator gave is read once: discovery hands it to the walk");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uris_above_the_sources_path_are_skipped() {
    let body = b"inside".to_vec();
    let list = format!(
        "<?xml version=\"1.0\"?><urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" xmlns:rs=\"http://www.openarchives.org/rs/terms/\">\
         <rs:md capability=\"resourcelist\"/><url><loc>/src/in</loc><rs:md {}/></url>\
         <url><loc>/other/x</loc><rs:md {}/></url><url><loc>../up</loc><rs:md {}/></url></urlset>",
        md(&body),
        md(b"x"),
        md(b"up")
    );
    let up = Upstream::start(move |hit, _| match hit.path.as_str() {
        "/src/rl.xml" => Reply::xml(list.clone()),
        "/src/in" => Reply::ok(b"inside".to_vec()),
        "/other/x" => Reply::ok(b"x".to_vec()),
        "/up" => Reply::ok(b"up".to_vec()),
        _ => Reply::status(404),
    })
    .await;
    let h = harness(&[("a", up.url("/src/rl.xml").to_string(), "")]);
    let r = h.pass_one().await;
    assert_eq!((r.fetched, r.skipped, r.error.as_deref()), (1, 2, None), "{r:?}");
    assert_eq!(h.content("a", up.url("/src/in").as_str()), Some(body));
    assert_eq!((up.count("/other/x"), up.count("/up")), (0, 0), "above the Source's path: never fetched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_keeps_polling_a_good_source_while_another_fails() {
    let body = b"steady".to_vec();
    let list = format!(
        "<?xml version=\"1.0\"?><urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" xmlns:rs=\"http://www.openarchives.org/rs/terms/\">\
         <rs:md capability=\"resourcelist\"/><url><loc>/r</loc><rs:md {}/></url></urlset>",
        md(&body)
    );
    let up = Upstream::start(move |hit, _| match hit.path.as_str() {
        "/rl.xml" => Reply::xml(list.clone()),
        "/r" => Reply::ok(b"steady".to_vec()),
        _ => Reply::status(404),
    })
    .await;
    let h = harness(&[
        ("dead", "http://127.0.0.1:1/rl.xml".into(), "poll = \"1s\""),
        ("good", up.url("/rl.xml").to_string(), "poll = \"1s\""),
    ]);
    let service = h.serve(&tokio::runtime::Handle::current());
    // Bounded: 300 × 50 ms. Each poll reads the list once (the first hands discovery's read of
    // it to the walk): three reads are three polls. The statuses are read while the service
    // runs, between passes: the stop may cut a pass short, which a status rightly shows.
    let status = |id| h.store.source_state(id).unwrap().map(|s| s.status);
    let between = |s: &SourceStatus| s.state != HarvestState::Harvesting;
    let (mut good, mut dead) = (None, None);
    for _ in 0..300 {
        let polled = up.count("/rl.xml") >= 3;
        let g = status("good").filter(|g| polled && between(g) && g.last_success >= g.last_attempt);
        good = good.or(g);
        dead = dead.or(status("dead").filter(|d| between(d) && d.consecutive_failures >= 1));
        if good.is_some() && dead.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    service.stop().await;

    let (good, dead) = (good.expect("three good polls"), dead.expect("a failed attempt"));
    assert_eq!(up.count("/r"), 1, "fetched once, then unchanged at every poll");
    assert_eq!((good.state, good.resources, good.consecutive_failures), (HarvestState::Idle, 1, 0));
    assert!(good.last_attempt.is_some() && good.last_success.is_some() && good.last_error.is_none(), "{good:?}");
    assert!(matches!(dead.state, HarvestState::BackingOff | HarvestState::Failing), "{dead:?}");
    // After the stop too, whether or not it cut a pass short: failing, never a success.
    let dead = h.status("dead");
    assert!(matches!(dead.state, HarvestState::BackingOff | HarvestState::Failing), "{dead:?}");
    assert!(dead.consecutive_failures >= 1, "{dead:?}");
    assert!(dead.last_attempt.is_some() && dead.last_success.is_none(), "{dead:?}");
    assert!(dead.last_error.as_deref().is_some_and(|e| e.contains("127.0.0.1:1")), "{dead:?}");
    assert!(dead.next_attempt.is_some(), "{dead:?}");
    assert_eq!(h.status("good").consecutive_failures, 0);
}
