//! Issue #4's baseline-synchronization requirements that the `harvest` tests do not reach:
//! mirrors (`duplicate` links by `pri`), the per-source `deletes` policy, no deletions after a
//! list that could not be read in full (an index part failing, a document over
//! `max_document_bytes`), skipping by `lastmod` + `length` when no hash is declared, the
//! conditional GET of an unchanged Resource List, `allow_outside_authority`, and choosing a
//! Capability List with `capability_list`.
//!
//! Each test drives `harvest_once` against hand-written Sources on 127.0.0.1 and a real store,
//! and asserts from the server's side (which URLs were requested, in which order, with which
//! headers) as well as from the store's, so a harvester that skipped the path under test
//! cannot pass.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::support::digest::sha256_hex;
use crate::support::harness::Harness;
use crate::support::rs;
use crate::support::upstream::{Hit, Reply, Upstream};
use tributary::harvest::SourceReport;
use tributary::store::HarvestState;

/// One source `a` at `url` with `extra` TOML keys, rate limits lifted and no transport
/// retries (`support::harness::UNLIMITED`), so every request a test counts is one the harvester chose to make.
fn harness(url: impl Into<String>, extra: &str) -> Harness {
    Harness::sources(&[("a", &url.into(), extra)])
}

/// A route table the test rewrites between passes (the Source changing under the harvester).
/// Paths not in it answer 404, robots.txt included.
#[derive(Clone, Default)]
struct Table(Arc<Mutex<HashMap<String, Reply>>>);

impl Table {
    fn set(&self, path: &str, reply: Reply) {
        self.0.lock().unwrap().insert(path.to_owned(), reply);
    }

    async fn serve(&self) -> Upstream {
        let table = self.0.clone();
        Upstream::start(move |hit, _| {
            table.lock().unwrap().get(&hit.path).cloned().unwrap_or_else(|| Reply::status(404))
        })
        .await
    }
}

/// `hash` and `length` attributes for `body`.
fn declared(body: &[u8]) -> String {
    format!("hash=\"sha-256:{}\" length=\"{}\"", sha256_hex(body), body.len())
}

/// One `<url>` entry: `<loc>`, optional `<lastmod>`, `rs:md` attributes and raw inner XML.
fn entry(loc: &str, lastmod: Option<&str>, md: &str, inner: &str) -> String {
    let lastmod = lastmod.map(|t| format!("<lastmod>{t}</lastmod>")).unwrap_or_default();
    format!("<url><loc>{loc}</loc>{lastmod}<rs:md {md}/>{inner}</url>")
}

/// A Resource List of raw entries, with room for `padding` (a comment) to push it past a size.
fn resource_list(entries: &[String], padding: usize) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" \
         xmlns:rs=\"http://www.openarchives.org/rs/terms/\"><rs:md capability=\"resourcelist\" \
         at=\"2024-01-01T00:00:00Z\"/>{}{}</urlset>\n",
        if padding > 0 { format!("<!--{}-->", "p".repeat(padding)) } else { String::new() },
        entries.concat()
    )
}

/// The entries of `(path, body)` resources declaring sha-256 and length.
fn hashed(resources: &[(&str, &[u8])]) -> Vec<String> {
    resources.iter().map(|(p, b)| entry(p, None, &declared(b), "")).collect()
}

/// The paths the upstream was asked for that start with `prefix`, in arrival order.
fn asked(up: &Upstream, prefix: &str) -> Vec<String> {
    up.hits().into_iter().map(|h: Hit| h.path).filter(|p| p.starts_with(prefix)).collect()
}

fn duplicate(href: &str, pri: u32) -> String {
    format!("<rs:ln rel=\"duplicate\" href=\"{href}\" pri=\"{pri}\"/>")
}

const GOOD: &[u8] = b"the real bitstream";
// Same length as GOOD: only the digest can tell them apart.
const FAKE: &[u8] = b"the fake bitstream";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_primary_falls_back_to_mirrors_by_pri_and_the_loc_stays_the_upstream() {
    let t = Table::default();
    // Mirrors are written out of `pri` order so document order cannot pass for `pri` order.
    let one = entry(
        "/one",
        None,
        &declared(GOOD),
        &[duplicate("/one-m3", 3), duplicate("/one-m1", 1), duplicate("/one-m2", 2)].concat(),
    );
    let two = entry(
        "/two",
        None,
        &declared(GOOD),
        &[duplicate("/two-m3", 3), duplicate("/two-m2", 2), duplicate("/two-m1", 1)].concat(),
    );
    t.set("/rl.xml", Reply::xml(resource_list(&[one, two], 0)));
    t.set("/one", Reply::status(500));
    for m in ["/one-m1", "/one-m2", "/one-m3", "/two-m2", "/two-m3"] {
        t.set(m, Reply::ok(GOOD));
    }
    t.set("/two", Reply::ok(FAKE));
    t.set("/two-m1", Reply::ok(FAKE));
    let up = t.serve().await;
    let h = harness(up.url("/rl.xml"), "");

    let r = h.pass_one().await;
    assert_eq!((r.fetched, r.failed, r.error.as_deref()), (2, 0, None), "{r:?}");
    // A 500 is not retried here (max_retries = 0); a mismatch gets one more try on the same
    // URL (the Source may be mid-update) before the next mirror.
    assert_eq!(asked(&up, "/one"), ["/one", "/one-m1"]);
    assert_eq!(asked(&up, "/two"), ["/two", "/two", "/two-m1", "/two-m1", "/two-m2"]);
    for loc in ["/one", "/two"] {
        let loc = up.url(loc).to_string();
        assert_eq!(h.content("a", &loc).as_deref(), Some(GOOD), "{loc}");
        let rec = h.record("a", &loc).unwrap();
        assert_eq!(
            (rec.upstream.as_str(), rec.origin.as_str()),
            (loc.as_str(), loc.as_str()),
            "the <loc>, not the mirror"
        );
    }
    assert_eq!(h.events("a").len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_primary_and_every_mirror_fail_nothing_is_stored_and_the_failure_is_counted() {
    let t = Table::default();
    let dead = entry("/dead", None, &declared(GOOD), &[duplicate("/dead-m2", 2), duplicate("/dead-m1", 1)].concat());
    t.set("/rl.xml", Reply::xml(resource_list(&[dead, hashed(&[("/fine", GOOD)]).remove(0)], 0)));
    t.set("/dead", Reply::status(500));
    // `/dead-m1` is not routed: a 404.
    t.set("/dead-m2", Reply::ok(FAKE));
    t.set("/fine", Reply::ok(GOOD));
    let up = t.serve().await;
    let h = harness(up.url("/rl.xml"), "");

    let r = h.pass_one().await;
    assert_eq!((r.fetched, r.failed, r.error.as_deref()), (1, 1, None), "{r:?}");
    assert_eq!(asked(&up, "/dead"), ["/dead", "/dead-m1", "/dead-m2", "/dead-m2"]);
    assert!(h.record("a", up.url("/dead").as_str()).is_none(), "nothing is stored for a resource no URL verified");
    assert_eq!(h.content("a", up.url("/fine").as_str()).as_deref(), Some(GOOD));
    let status = h.status("a");
    assert_eq!((status.failures, status.last_pass.failed, status.resources), (1, 1, 1));
    assert_eq!(h.events("a").len(), 1, "only /fine became an event");
    // Recorded for that resource: the last URL tried and why, and the mirrors to try again.
    let f = h.store.failure("a", &h.uri("a", up.url("/dead").as_str())).unwrap().expect("a failure row");
    assert!(f.reason.contains("/dead-m2"), "{}", f.reason);
    assert_eq!(f.listing.links.iter().filter(|l| l.rel == "duplicate").count(), 2);
    assert_eq!(status.failing, 1);
}

/// Three resources held, then a complete list that no longer names `/c`; `extra` is the
/// source's TOML. Returns the harness (for the store), the upstream and the second report.
async fn list_drops_c(extra: &str) -> (Harness, Upstream, SourceReport) {
    let t = Table::default();
    let all: [(&str, &[u8]); 3] = [("/a", b"alpha"), ("/b", b"bravo"), ("/c", b"charlie")];
    t.set("/rl.xml", Reply::xml(resource_list(&hashed(&all), 0)));
    for (p, b) in all {
        t.set(p, Reply::ok(b));
    }
    let up = t.serve().await;
    let h = harness(up.url("/rl.xml"), extra);
    let first = h.pass_one().await;
    assert_eq!((first.fetched, first.error.as_deref()), (3, None), "{first:?}");

    t.set("/rl.xml", Reply::xml(resource_list(&hashed(&all[..2]), 0)));
    let read_before = up.count("/rl.xml");
    let second = h.pass_one().await;
    assert!(up.count("/rl.xml") > read_before, "the second pass read the list");
    assert!(second.complete && second.error.is_none(), "{second:?}");
    assert_eq!((second.fetched, second.unchanged), (0, 2), "{second:?}");
    (h, up, second)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_deletes_false_a_resource_absent_from_a_complete_list_stays_held() {
    let (h, up, second) = list_drops_c("deletes = false").await;
    assert_eq!(second.deleted, 0, "{second:?}");
    assert_eq!(h.content("a", up.url("/c").as_str()).as_deref(), Some(&b"charlie"[..]));
    assert!(h.events("a").iter().all(|(change, _)| change == "Created"), "no delete event: {:?}", h.events("a"));
    assert_eq!(h.status("a").resources, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_a_resource_absent_from_a_complete_list_is_deleted() {
    let (h, up, second) = list_drops_c("").await;
    assert_eq!(second.deleted, 1, "{second:?}");
    let c = up.url("/c").to_string();
    assert!(h.record("a", &c).unwrap().is_deleted());
    let events = h.events("a");
    assert_eq!(events.len(), 4);
    assert_eq!(events.last().unwrap(), &("Deleted".to_owned(), h.record("a", &c).unwrap().uri));
    assert_eq!(h.status("a").resources, 2);
}

/// A Resource List Index of two parts, harvested whole; then part 1 changes (drops `/a2`,
/// adds `/a3`) and part 2 answers `fault`. The pass must store `/a3` (part 1 was read) and
/// delete nothing: `/a2`, `/b1` and `/b2` are held and not named in what was read.
async fn index_part_fails(fault: Reply, extra: &str) {
    let t = Table::default();
    let up = t.serve().await;
    let (p1, p2) = (up.url("/p1.xml").to_string(), up.url("/p2.xml").to_string());
    t.set("/index.xml", Reply::xml(rs::sitemapindex("resourcelist", &[], &[&p1, &p2])));
    let part1: [(&str, &[u8]); 2] = [("/a1", b"a-one"), ("/a2", b"a-two")];
    let part2: [(&str, &[u8]); 2] = [("/b1", b"b-one"), ("/b2", b"b-two")];
    t.set("/p1.xml", Reply::xml(resource_list(&hashed(&part1), 0)));
    t.set("/p2.xml", Reply::xml(resource_list(&hashed(&part2), 0)));
    for (p, b) in part1.iter().chain(&part2).chain(&[("/a3", &b"a-three"[..])]) {
        t.set(p, Reply::ok(*b));
    }
    let h = harness(up.url("/index.xml"), extra);
    let first = h.pass_one().await;
    assert_eq!((first.fetched, first.error.as_deref()), (4, None), "{first:?}");

    t.set("/p1.xml", Reply::xml(resource_list(&hashed(&[("/a1", b"a-one"), ("/a3", b"a-three")]), 0)));
    t.set("/p2.xml", fault);
    let p2_before = up.count("/p2.xml");
    let second = h.pass_one().await;
    assert!(up.count("/p2.xml") > p2_before, "the walk reached the failing part");
    assert_eq!((second.fetched, second.deleted, second.complete), (1, 0, false), "{second:?}");
    let error = second.error.as_deref().unwrap_or_else(|| panic!("the report carries an error: {second:?}"));
    assert!(error.contains(&p2), "the error names the part: {error}");
    let all: [(&str, &[u8]); 5] =
        [("/a1", b"a-one"), ("/a2", b"a-two"), ("/a3", b"a-three"), ("/b1", b"b-one"), ("/b2", b"b-two")];
    for (p, b) in all {
        assert_eq!(h.content("a", up.url(p).as_str()).as_deref(), Some(b), "{p} is held");
    }
    assert!(h.events("a").iter().all(|(change, _)| change == "Created"), "no delete event: {:?}", h.events("a"));
    let status = h.status("a");
    assert_eq!((status.state, status.resources), (HarvestState::BackingOff, 5));
    assert!(status.last_error.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_whose_second_part_answers_500_deletes_nothing() {
    index_part_fails(Reply::status(500), "").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_whose_second_part_is_malformed_deletes_nothing() {
    // Well-formed up to the first entry, then a mismatched end tag: a reader that stopped at
    // the error and called it the end would see a shorter list.
    let broken = resource_list(&hashed(&[("/b1", b"b-one")]), 0)
        .replace("</urlset>", "<url><loc>/b2</loc></lox></url></urlset>");
    index_part_fails(Reply::xml(broken), "").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_whose_second_part_exceeds_max_document_bytes_deletes_nothing() {
    let big = resource_list(&hashed(&[("/b1", b"b-one")]), 8 * 1024);
    index_part_fails(Reply::xml(big), "max_document_bytes = \"4 KiB\"").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_list_over_max_document_bytes_deletes_nothing() {
    let t = Table::default();
    let all: [(&str, &[u8]); 3] = [("/a", b"alpha"), ("/b", b"bravo"), ("/c", b"charlie")];
    t.set("/rl.xml", Reply::xml(resource_list(&hashed(&all), 0)));
    for (p, b) in all {
        t.set(p, Reply::ok(b));
    }
    let up = t.serve().await;
    let h = harness(up.url("/rl.xml"), "max_document_bytes = \"4 KiB\"");
    assert_eq!(h.pass_one().await.fetched, 3);

    // Read, this list would delete /b and /c.
    t.set("/rl.xml", Reply::xml(resource_list(&hashed(&all[..1]), 8 * 1024)));
    let read_before = up.count("/rl.xml");
    let second = h.pass_one().await;
    assert!(up.count("/rl.xml") > read_before);
    assert_eq!((second.fetched, second.deleted, second.complete), (0, 0, false), "{second:?}");
    let error = second.error.as_deref().unwrap_or_else(|| panic!("the report carries an error: {second:?}"));
    assert!(error.contains("exceeds the limit of 4096 bytes"), "{error}");
    for (p, b) in all {
        assert_eq!(h.content("a", up.url(p).as_str()).as_deref(), Some(b), "{p} is held");
    }
    assert_eq!(h.events("a").len(), 3, "no delete event");
    assert_eq!(h.status("a").resources, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_hash_lastmod_and_length_decide_what_is_fetched_again() {
    let t = Table::default();
    let list = |r1_lastmod: &str, r2: &[u8]| {
        let e =
            |p: &str, lastmod: &str, body: &[u8]| entry(p, Some(lastmod), &format!("length=\"{}\"", body.len()), "");
        Reply::xml(resource_list(
            &[
                e("/r1", r1_lastmod, b"one"),
                e("/r2", "2024-01-01T00:00:00Z", r2),
                e("/r3", "2024-01-01T00:00:00Z", b"three"),
            ],
            0,
        ))
    };
    t.set("/rl.xml", list("2024-01-01T00:00:00Z", b"two"));
    for (p, b) in [("/r1", &b"one"[..]), ("/r2", b"two"), ("/r3", b"three")] {
        t.set(p, Reply::ok(b));
    }
    let up = t.serve().await;
    let h = harness(up.url("/rl.xml"), "");
    let hits = || ["/r1", "/r2", "/r3"].map(|p| up.count(p));

    let first = h.pass_one().await;
    assert_eq!((first.fetched, first.error.as_deref()), (3, None), "{first:?}");
    assert_eq!(hits(), [1, 1, 1]);

    // The list carries no validators, so it is read in full: only lastmod + length can skip.
    let read_before = up.count("/rl.xml");
    let second = h.pass_one().await;
    assert!(up.count("/rl.xml") > read_before && !second.not_modified, "{second:?}");
    assert_eq!((second.fetched, second.unchanged), (0, 3), "{second:?}");
    assert_eq!(hits(), [1, 1, 1]);

    t.set("/rl.xml", list("2024-06-01T00:00:00Z", b"two"));
    let third = h.pass_one().await;
    assert_eq!((third.fetched, third.unchanged), (1, 2), "{third:?}");
    assert_eq!(hits(), [2, 1, 1], "a new lastmod alone refetches /r1");

    t.set("/rl.xml", list("2024-06-01T00:00:00Z", b"two, longer"));
    t.set("/r2", Reply::ok(&b"two, longer"[..]));
    let fourth = h.pass_one().await;
    assert_eq!((fourth.fetched, fourth.unchanged, fourth.failed), (1, 2, 0), "{fourth:?}");
    assert_eq!(hits(), [2, 2, 1], "a new length alone refetches /r2");
    assert_eq!(h.content("a", up.url("/r2").as_str()).as_deref(), Some(&b"two, longer"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_resource_list_is_one_304_and_a_changed_one_is_read_again() {
    let version = Arc::new(AtomicUsize::new(1));
    let not_modified = Arc::new(AtomicUsize::new(0));
    let lists = [
        resource_list(&hashed(&[("/r1", b"one"), ("/r2", b"two")]), 0),
        resource_list(&hashed(&[("/r1", b"one"), ("/r3", b"three")]), 0),
    ];
    let up = Upstream::start({
        let (version, not_modified) = (version.clone(), not_modified.clone());
        move |hit, _| {
            let v = version.load(Ordering::SeqCst);
            let etag = format!("\"v{v}\"");
            match hit.path.as_str() {
                "/rl.xml" if hit.headers.get("if-none-match") == Some(&etag) => {
                    not_modified.fetch_add(1, Ordering::SeqCst);
                    Reply::status(304).header("ETag", &etag)
                }
                "/rl.xml" => Reply::xml(lists[v - 1].clone())
                    .header("ETag", &etag)
                    .header("Last-Modified", &format!("Mon, 0{v} Jan 2024 00:00:00 GMT")),
                "/r1" => Reply::ok(&b"one"[..]),
                "/r2" => Reply::ok(&b"two"[..]),
                "/r3" => Reply::ok(&b"three"[..]),
                _ => Reply::status(404),
            }
        }
    })
    .await;
    let h = harness(up.url("/rl.xml"), "");
    let first = h.pass_one().await;
    assert_eq!((first.fetched, first.not_modified), (2, false), "{first:?}");

    let list_requests = |up: &Upstream| up.hits().into_iter().filter(|h| h.path == "/rl.xml").collect::<Vec<_>>();
    let before = list_requests(&up).len();
    let second = h.pass_one().await;
    let asked_now = list_requests(&up);
    assert_eq!(asked_now.len(), before + 1, "one request for the list");
    let last = asked_now.last().unwrap();
    assert_eq!(last.headers.get("if-none-match").map(String::as_str), Some("\"v1\""));
    assert_eq!(last.headers.get("if-modified-since").map(String::as_str), Some("Mon, 01 Jan 2024 00:00:00 GMT"));
    assert_eq!(not_modified.load(Ordering::SeqCst), 1, "the upstream answered 304");
    assert!(second.not_modified && second.error.is_none(), "{second:?}");
    assert_eq!((second.fetched, second.unchanged, second.deleted), (0, 2, 0), "{second:?}");
    assert_eq!([up.count("/r1"), up.count("/r2")], [1, 1], "nothing fetched after a 304");
    assert_eq!(h.status("a").last_pass.unchanged, 2);

    version.store(2, Ordering::SeqCst);
    let third = h.pass_one().await;
    assert_eq!(not_modified.load(Ordering::SeqCst), 1, "a changed list is answered in full");
    assert!(!third.not_modified && third.complete, "{third:?}");
    // Read in full: /r3 is new and /r2, no longer listed, is deleted.
    assert_eq!((third.fetched, third.unchanged, third.deleted), (1, 1, 1), "{third:?}");
    assert_eq!(h.content("a", up.url("/r3").as_str()).as_deref(), Some(&b"three"[..]));
    assert!(h.record("a", up.url("/r2").as_str()).unwrap().is_deleted());

    // The new validators were kept: the next pass is a 304 again.
    let fourth = h.pass_one().await;
    assert!(fourth.not_modified, "{fourth:?}");
    assert_eq!(not_modified.load(Ordering::SeqCst), 2);
    assert_eq!(list_requests(&up).last().unwrap().headers.get("if-none-match").map(String::as_str), Some("\"v2\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_outside_authority_harvests_a_resource_on_another_host_and_the_default_skips_it() {
    let other = Upstream::routes(vec![("/x", vec![Reply::ok(&b"outside"[..])])]).await;
    let outside = other.url("/x").to_string();
    let t = Table::default();
    t.set("/src/rl.xml", Reply::xml(resource_list(&hashed(&[("/src/in", b"inside"), (&outside, b"outside")]), 0)));
    t.set("/src/in", Reply::ok(&b"inside"[..]));
    let up = t.serve().await;

    let default = harness(up.url("/src/rl.xml"), "");
    let r = default.pass_one().await;
    assert_eq!((r.fetched, r.skipped, r.error.as_deref()), (1, 1, None), "{r:?}");
    assert_eq!(other.count("/x"), 0, "skipped without a request");
    assert!(default.record("a", &outside).is_none());

    let allowed = harness(up.url("/src/rl.xml"), "allow_outside_authority = true");
    let r = allowed.pass_one().await;
    assert_eq!((r.fetched, r.skipped, r.error.as_deref()), (2, 0, None), "{r:?}");
    assert_eq!(other.count("/x"), 1);
    assert_eq!(allowed.content("a", &outside).as_deref(), Some(&b"outside"[..]));
    assert_eq!(allowed.record("a", &outside).unwrap().upstream, outside);
    assert_eq!(up.count("/src/in"), 2, "one fetch per harness");
}

/// A Source Description listing two Capability Lists, each offering its own Resource List.
async fn two_capability_lists() -> Upstream {
    let t = Table::default();
    let up = t.serve().await;
    let u = |p: &str| up.url(p).to_string();
    let sd = u("/.well-known/resourcesync");
    t.set(
        "/.well-known/resourcesync",
        Reply::xml(rs::urlset(
            "description",
            &[],
            &[(&u("/cl1.xml"), "capabilitylist"), (&u("/cl2.xml"), "capabilitylist")],
        )),
    );
    t.set("/cl1.xml", Reply::xml(rs::urlset("capabilitylist", &[("up", &sd)], &[(&u("/rl1.xml"), "resourcelist")])));
    t.set("/cl2.xml", Reply::xml(rs::urlset("capabilitylist", &[("up", &sd)], &[(&u("/rl2.xml"), "resourcelist")])));
    t.set("/rl1.xml", Reply::xml(resource_list(&hashed(&[("/one/a", b"one-a")]), 0)));
    t.set("/rl2.xml", Reply::xml(resource_list(&hashed(&[("/two/b", b"two-b"), ("/two/c", b"two-c")]), 0)));
    for (p, b) in [("/one/a", &b"one-a"[..]), ("/two/b", b"two-b"), ("/two/c", b"two-c")] {
        t.set(p, Reply::ok(b));
    }
    up
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capability_list_selects_one_of_two_in_the_source_description() {
    let up = two_capability_lists().await;
    let extra = format!("capability_list = \"{}\"", up.url("/cl2.xml"));
    let h = harness(up.url("/.well-known/resourcesync"), &extra);
    let r = h.pass_one().await;
    assert_eq!((r.fetched, r.failed, r.error.as_deref()), (2, 0, None), "{r:?}");
    assert_eq!(h.content("a", up.url("/two/b").as_str()).as_deref(), Some(&b"two-b"[..]));
    assert_eq!(h.content("a", up.url("/two/c").as_str()).as_deref(), Some(&b"two-c"[..]));
    assert!(h.record("a", up.url("/one/a").as_str()).is_none());
    assert_eq!(
        [up.count("/cl1.xml"), up.count("/rl1.xml"), up.count("/one/a")],
        [0, 0, 0],
        "the other one is never read"
    );
    assert!(up.count("/cl2.xml") >= 1 && up.count("/rl2.xml") >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_capability_list_two_capability_lists_fail_the_pass_asking_for_a_choice() {
    let up = two_capability_lists().await;
    let h = harness(up.url("/.well-known/resourcesync"), "");
    let r = h.pass_one().await;
    assert_eq!((r.fetched, r.complete), (0, false), "{r:?}");
    let error = r.error.as_deref().unwrap_or_else(|| panic!("the pass fails: {r:?}"));
    assert!(error.contains("choose one with `capability_list`"), "{error}");
    for cl in ["/cl1.xml", "/cl2.xml"] {
        assert!(error.contains(up.url(cl).as_str()), "the error lists {cl}: {error}");
        assert_eq!(up.count(cl), 0, "no guess: {cl} is not read");
    }
    assert!(up.count("/.well-known/resourcesync") >= 1);
    assert_eq!(h.status("a").last_error.as_deref(), Some(error));

    // A selection the Source Description does not list is an error too, never a fallback.
    let h = harness(up.url("/.well-known/resourcesync"), &format!("capability_list = \"{}\"", up.url("/cl3.xml")));
    let r = h.pass_one().await;
    let error = r.error.as_deref().unwrap_or_else(|| panic!("the pass fails: {r:?}"));
    assert!(error.contains("does not list the selected Capability List"), "{error}");
    assert_eq!([up.count("/cl1.xml"), up.count("/cl2.xml"), up.count("/cl3.xml")], [0, 0, 0]);
}
