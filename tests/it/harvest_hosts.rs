//! Politeness through the real harvester, proven from the servers' side: `[[source]]`s parsed
//! from TOML text, each its own ResourceSync Source on its own loopback port, harvested by
//! `harvest_once` (and by the `run` service). The servers' arrival times and in-flight counts
//! show that each host's rate limit and concurrency cap held with 50 hosts at once, and that
//! `[aggregator] max_concurrent_sources` bounds how many upstreams are busy at the same time.
//!
//! `fetch_politeness` proves the same limits on the fetcher alone; this file proves
//! the harvester routes every request of a pass (robots.txt, discovery, the lists and the
//! bitstreams) through them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::digest::{md5_hex, sha256_hex};
use crate::support::harness::{Harness, config_text};
use crate::support::rs::urlset;
use crate::support::upstream::{Hit, Reply, Upstream, assert_spaced, runtime};

/// Bitstreams each Source lists.
const RESOURCES: usize = 6;

/// A ResourceSync Source: robots.txt, a Capability List, a hand-written Resource List whose
/// entries declare `length` and md5 and/or sha-256, and the bitstreams, each answered after
/// `delay`. The documents are built from the request's `Host`, so their URIs are absolute and
/// point back at this server whatever port it was given.
fn source(bodies: Arc<Vec<Vec<u8>>>, delay: Duration) -> impl Fn(&Hit, usize) -> Reply + Send + Sync + 'static {
    move |hit, _| {
        let base = format!("http://{}", hit.headers.get("host").map_or("", String::as_str));
        match hit.path.as_str() {
            "/robots.txt" => Reply::ok("User-agent: *\nAllow: /\n"),
            "/capabilitylist.xml" => {
                let rl = format!("{base}/resourcelist.xml");
                Reply::xml(urlset("capabilitylist", &[], &[(&rl, "resourcelist")]))
            }
            "/resourcelist.xml" => Reply::xml(resource_list(&base, &bodies)),
            path => match path.strip_prefix("/r/").and_then(|n| n.parse::<usize>().ok()).and_then(|n| bodies.get(n)) {
                Some(body) => Reply::ok(body.clone()).header("Content-Type", "application/octet-stream").delayed(delay),
                None => Reply::status(404),
            },
        }
    }
}

/// The Resource List as a Source would write it: every entry declares its length, and its
/// hashes in turn as md5, sha-256 or both, so each kind of declaration is verified.
fn resource_list(base: &str, bodies: &[Vec<u8>]) -> String {
    let mut s = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" xmlns:rs=\"http://www.openarchives.org/rs/terms/\">\n\
         <rs:ln rel=\"up\" href=\"{base}/capabilitylist.xml\"/>\n\
         <rs:md capability=\"resourcelist\" at=\"2024-01-01T00:00:00Z\"/>\n"
    );
    for (i, body) in bodies.iter().enumerate() {
        let md5 = format!("md5:{}", md5_hex(body));
        let sha = format!("sha-256:{}", sha256_hex(body));
        let hash = match i % 3 {
            0 => md5,
            1 => sha,
            _ => format!("{md5} {sha}"),
        };
        s.push_str(&format!(
            "<url><loc>{base}/r/{i}</loc><lastmod>2024-01-01T00:00:00Z</lastmod>\
             <rs:md hash=\"{hash}\" length=\"{}\" type=\"application/octet-stream\"/></url>\n",
            body.len()
        ));
    }
    s.push_str("</urlset>\n");
    s
}

/// Bitstreams no two hosts share, of varied lengths, with every byte value in them.
fn bodies(host: usize) -> Arc<Vec<Vec<u8>>> {
    let body = |i: usize| {
        let mut b = format!("host {host} resource {i}\n").repeat(1 + (host * 7 + i * 13) % 40).into_bytes();
        b.extend((0..=255u8).map(|x| x.wrapping_add((host + i) as u8)));
        b
    };
    Arc::new((0..RESOURCES).map(body).collect())
}

/// One upstream Source per entry of `hosts`, started on `rt` so their arrival timestamps are
/// taken on a thread the harvester's work does not delay. A single thread, too: a reply's
/// in-flight count is then lowered before any other request can be counted.
fn start(rt: &tokio::runtime::Runtime, hosts: usize, delay: Duration) -> Vec<(Upstream, Arc<Vec<Vec<u8>>>)> {
    rt.block_on(async {
        let mut ups = Vec::with_capacity(hosts);
        for host in 0..hosts {
            let b = bodies(host);
            ups.push((Upstream::start(source(b.clone(), delay)).await, b));
        }
        ups
    })
}

fn id(host: usize) -> String {
    format!("s{host:02}")
}

/// One `[[source]]` per upstream, pointed at its Resource List (discovery goes up to the
/// Capability List from there), with `aggregator` and `defaults` keys added to the tables.
fn harness(aggregator: &str, defaults: &str, ups: &[(Upstream, Arc<Vec<Vec<u8>>>)]) -> Harness {
    let ids: Vec<String> = (0..ups.len()).map(id).collect();
    let urls: Vec<String> = ups.iter().map(|(up, _)| up.url("/resourcelist.xml").to_string()).collect();
    let sources: Vec<(&str, &str, &str)> = ids.iter().zip(&urls).map(|(i, u)| (i.as_str(), u.as_str(), "")).collect();
    let defaults = format!("max_retries = 0\ntotal_timeout = \"20s\"\n{defaults}");
    Harness::new(|dir| config_text(dir, aggregator, &defaults, &sources))
}

/// Every bitstream of every upstream is stored byte-identical.
fn assert_mirrors(h: &Harness, ups: &[(Upstream, Arc<Vec<Vec<u8>>>)]) {
    for (host, (up, bodies)) in ups.iter().enumerate() {
        for (i, body) in bodies.iter().enumerate() {
            let url = up.url(&format!("/r/{i}"));
            let stored = h.content(&id(host), url.as_str()).unwrap_or_else(|| panic!("{url} not stored"));
            assert!(stored == *body, "{url}: stored {} bytes differ from the {} served", stored.len(), body.len());
        }
    }
}

#[test]
fn fifty_sources_each_keep_their_hosts_rate_and_concurrency() {
    let interval = Duration::from_millis(100); // rate = "10/s"
    // Each bitstream's reply outlasts the interval, so the limiter lets a second request in
    // while the first is still being answered and only the cap of 2 stops a third.
    let delay = Duration::from_millis(250);
    let servers = runtime(1);
    let ups = start(&servers, 50, delay);
    // All 50 sources at once: each host's limits must hold while the harvester is at its
    // busiest, and the pass takes about one source's time (~1 s) instead of seven rounds.
    let h = harness("max_concurrent_sources = 50", "rate = \"10/s\"\nconcurrency = 2", &ups);
    let summary = runtime(2).block_on(h.pass());
    assert_eq!((summary.fetched(), summary.failed()), (50 * RESOURCES as u64, 0), "{summary}");
    assert!(summary.sources.iter().all(|s| s.error.is_none()), "{summary}");

    let mut closest = Duration::MAX;
    for (host, (up, _)) in ups.iter().enumerate() {
        let who = format!("host {host} ({})", up.addr);
        assert_eq!(up.count("/robots.txt"), 1, "{who}: robots.txt fetched once");
        for i in 0..RESOURCES {
            assert_eq!(up.count(&format!("/r/{i}")), 1, "{who}: /r/{i} fetched once");
        }
        let mut arrivals: Vec<Instant> = up.hits().iter().map(|hit| hit.at).collect();
        closest = closest.min(assert_spaced(&mut arrivals, interval, &who));
        // At most 2: the cap held; at least 2: the test made the cap bind.
        assert_eq!(up.max_in_flight(), 2, "{who}: most requests in flight at once");
    }
    eprintln!("closest arrivals on any host: {closest:?} (interval {interval:?}); pass took {:?}", summary.duration);
    assert_mirrors(&h, &ups);
    drop(ups);
    servers.shutdown_background();
}

/// Bitstream reply time in the cross-source tests: long enough that a source's bitstreams
/// keep its upstream busy for a while (two rounds of two), so sources harvested together
/// overlap for certain.
const SLOW: Duration = Duration::from_millis(200);

/// The most upstreams that ever had a request in flight at the same moment, from the
/// servers' records: a request is in flight from its arrival until its reply was due
/// (`SLOW` later for a bitstream, at once for the rest). The true end is later still, but
/// also before the harvester releases the source's slot, so this can under-count overlap,
/// never over-count it.
fn most_busy_at_once(ups: &[(Upstream, Arc<Vec<Vec<u8>>>)]) -> usize {
    let spans: Vec<Vec<(Instant, Instant)>> = ups
        .iter()
        .map(|(up, _)| {
            let span = |hit: &Hit| (hit.at, hit.at + if hit.path.starts_with("/r/") { SLOW } else { Duration::ZERO });
            up.hits().iter().map(span).collect()
        })
        .collect();
    let busy_at = |t: Instant| spans.iter().filter(|s| s.iter().any(|&(a, b)| a <= t && t <= b)).count();
    // The count only rises at an arrival, so its maximum is at one.
    spans.iter().flatten().map(|&(a, _)| busy_at(a)).max().unwrap_or(0)
}

/// Six slow sources, harvested in one pass with `max_concurrent_sources = bound`; returns the
/// most upstreams busy at once.
fn one_pass_with_bound(bound: usize) -> usize {
    let servers = runtime(1);
    let ups = start(&servers, 6, SLOW);
    let h = harness(&format!("max_concurrent_sources = {bound}"), "rate = \"unlimited\"\nconcurrency = 2", &ups);
    assert_eq!(h.config.aggregator.max_concurrent_sources, bound);
    let summary = runtime(2).block_on(h.pass());
    assert_eq!((summary.fetched(), summary.failed()), (6 * RESOURCES as u64, 0), "{summary}");
    assert_mirrors(&h, &ups);
    let most = most_busy_at_once(&ups);
    eprintln!(
        "max_concurrent_sources = {bound}: at most {most} upstreams busy at once; pass took {:?}",
        summary.duration
    );
    drop(ups);
    servers.shutdown_background();
    most
}

#[test]
fn max_concurrent_sources_bounds_the_upstreams_busy_at_once() {
    // Exactly 2: never more (the bound held), and 2 (two sources did run together).
    assert_eq!(one_pass_with_bound(2), 2);
    // The same sources under a looser bound overlap more, so the check above can fail.
    let loose = one_pass_with_bound(6);
    assert!((3..=6).contains(&loose), "with max_concurrent_sources = 6, {loose} upstreams busy at once");
}

#[test]
fn the_service_keeps_the_same_bound() {
    let servers = runtime(1);
    let ups = start(&servers, 6, SLOW);
    let h = harness("max_concurrent_sources = 2", "rate = \"unlimited\"\nconcurrency = 2\npoll = \"1h\"", &ups);
    let client = runtime(2);
    let service = h.serve(client.handle());
    // Each source has succeeded once within 20 s (about 1.5 s expected); then the service stops.
    let ids: Vec<String> = (0..ups.len()).map(id).collect();
    let all_done =
        || ids.iter().all(|s| h.store.source_state(s).unwrap().is_some_and(|st| st.status.last_success.is_some()));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !all_done() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    client.block_on(service.stop());
    assert!(all_done(), "every source harvested once before the deadline");
    assert_mirrors(&h, &ups);
    assert_eq!(most_busy_at_once(&ups), 2, "upstreams busy at once under `run`");
    drop(ups);
    servers.shutdown_background();
}
