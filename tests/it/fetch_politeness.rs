//! Politeness proven from the servers' side: each host's request arrival times show its rate
//! limit held, and its in-flight count shows its concurrency cap held, with 50 hosts at once.

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use crate::support::cli::{finish, tributary};
use crate::support::fetcher::{options, settings as default_settings};
use crate::support::rs::resource_list;
use crate::support::upstream::{Reply, Upstream, assert_spaced, runtime};
use tributary::config::{Rate, Settings};
use tributary::fetch::{Fetched, Fetcher, FetcherOptions};

fn fetcher(max_hosts: usize) -> Fetcher {
    Fetcher::new(FetcherOptions { max_hosts, ..options() }).unwrap()
}

fn settings(rate: Rate, concurrency: u32) -> Settings {
    Settings {
        rate,
        concurrency: NonZeroU32::new(concurrency).unwrap(),
        total_timeout: Duration::from_secs(30),
        ..default_settings()
    }
}

/// Fires `n` document requests at once at `path` of each upstream and waits for all.
async fn fire(f: &Fetcher, ups: &[Upstream], path: &str, n: usize, s: &Settings) {
    let mut tasks = tokio::task::JoinSet::new();
    for up in ups {
        for _ in 0..n {
            let (f, url, s) = (f.clone(), up.url(path), s.clone());
            tasks.spawn(async move { f.get_document(&url, &s, None).await });
        }
    }
    while let Some(r) = tasks.join_next().await {
        assert!(matches!(r.unwrap(), Ok(Fetched::Modified(_))));
    }
}

#[test]
fn fifty_hosts_each_keep_their_rate_and_concurrency() {
    let servers = runtime(1);
    let ups: Vec<Upstream> = servers.block_on(async {
        let mut ups = Vec::new();
        for _ in 0..50 {
            // Each reply outlasts the rate's 100 ms interval, so a second request is let in
            // before the first ends and the cap of 2 is what stops a third.
            ups.push(Upstream::routes(vec![("/doc", vec![Reply::ok("x").delayed(Duration::from_millis(250))])]).await);
        }
        ups
    });
    let f = fetcher(10_000);
    let s = settings(Rate::Every(Duration::from_millis(100)), 2); // "10/s"
    let started = Instant::now();
    runtime(2).block_on(fire(&f, &ups, "/doc", 8, &s));
    let elapsed = started.elapsed();
    let mut min_gap = Duration::MAX;
    for (i, up) in ups.iter().enumerate() {
        let mut arrivals: Vec<Instant> = up.hits().iter().map(|h| h.at).collect();
        assert_eq!(arrivals.len(), 9, "host {i}: robots.txt + 8 documents");
        assert_spaced(&mut arrivals, Duration::from_millis(100), &format!("host {i}"));
        min_gap = arrivals.windows(2).map(|w| w[1] - w[0]).min().unwrap().min(min_gap);
        // At most 2: the cap held; at least 2: the test made the cap bind.
        assert_eq!(up.max_in_flight(), 2, "host {i}: most requests in flight at once");
    }
    eprintln!("closest arrivals on any host: {min_gap:?}");
    // Nine requests per host at 10/s cannot take less than 8 × 100 ms.
    assert!(elapsed >= Duration::from_millis(800));
    assert_eq!(f.host_count(), 50);
    drop(ups);
    servers.shutdown_background();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_cap_holds_without_a_rate_limit() {
    let up = Upstream::routes(vec![("/slow", vec![Reply::ok("x").delayed(Duration::from_millis(150))])]).await;
    let f = fetcher(10);
    fire(&f, std::slice::from_ref(&up), "/slow", 12, &settings(Rate::Unlimited, 3)).await;
    assert_eq!(up.count("/slow"), 12);
    assert!(up.max_in_flight() <= 3, "{} in flight", up.max_in_flight());
    assert!(up.max_in_flight() >= 2, "requests were not concurrent at all");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_sharing_a_host_get_the_stricter_limits() {
    let up = Upstream::routes(vec![("/d", vec![Reply::ok("x").delayed(Duration::from_millis(50))])]).await;
    let f = fetcher(10);
    let strict = Settings { source_id: "strict".into(), ..settings(Rate::Every(Duration::from_millis(100)), 1) };
    let loose = Settings { source_id: "loose".into(), ..settings(Rate::Unlimited, 4) };
    fire(&f, std::slice::from_ref(&up), "/d", 1, &strict).await;
    fire(&f, std::slice::from_ref(&up), "/d", 5, &loose).await;
    let mut arrivals: Vec<Instant> = up.hits().iter().map(|h| h.at).collect();
    assert_spaced(&mut arrivals, Duration::from_millis(100), "shared host");
    assert_eq!(up.max_in_flight(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crawl_delay_lowers_the_rate_up_to_its_cap() {
    let robots = Reply::ok("User-agent: *\nCrawl-delay: 30\n");
    let up = Upstream::routes(vec![("/robots.txt", vec![robots]), ("/d", vec![Reply::ok("x")])]).await;
    let f = fetcher(10);
    let s = Settings { crawl_delay_cap: Duration::from_millis(300), ..settings(Rate::Unlimited, 4) };
    fire(&f, std::slice::from_ref(&up), "/d", 4, &s).await;
    let mut arrivals: Vec<Instant> = up.hits().iter().filter(|h| h.path == "/d").map(|h| h.at).collect();
    assert_spaced(&mut arrivals, Duration::from_millis(300), "crawl-delay host");
    let host = &f.hosts()[0];
    assert_eq!(host.rate, Rate::Every(Duration::from_millis(300)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_map_is_bounded() {
    let mut ups = Vec::new();
    for _ in 0..8 {
        ups.push(Upstream::routes(vec![("/d", vec![Reply::ok("x")])]).await);
    }
    let f = fetcher(5);
    let s = settings(Rate::Unlimited, 2);
    for up in &ups {
        fire(&f, std::slice::from_ref(up), "/d", 1, &s).await;
        assert!(f.host_count() <= 5);
    }
    // The most recently used hosts are the ones kept.
    let kept: Vec<String> = f.hosts().into_iter().map(|h| h.origin).collect();
    assert!(kept.contains(&format!("http://{}", ups[7].addr)));
}

/// A request that waits for a new connection's handshakes leaves well after its turn; the
/// next one, on that connection once it is open, must still reach the server an interval
/// after it, not an interval after the first one's turn. `tributary check` at the default rate
/// (5/s) against an HTTPS upstream that stalls each handshake 600 ms: robots.txt goes out on
/// the stalled connection, the document right after it on the same one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_behind_a_slow_handshake_is_spaced_from_when_it_left() {
    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("upstream.pem");
    let tls = crate::support::tls::localhost(&pem, Duration::from_millis(600));
    let up = Upstream::start_tls(tls, |hit, _| match hit.path.as_str() {
        "/robots.txt" => Reply::ok("User-agent: *\nAllow: /\n"),
        "/resourcelist.xml" => {
            Reply::xml(resource_list("https://127.0.0.1/capabilitylist.xml", "https://127.0.0.1/r", 3))
        }
        _ => Reply::status(404),
    })
    .await;
    let mut cmd = tributary(&["check", up.url("/resourcelist.xml").as_str()]);
    cmd.env("SSL_CERT_FILE", &pem);
    let out = finish(cmd).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let paths: Vec<String> = up.hits().iter().map(|h| h.path.clone()).collect();
    assert_eq!(paths, ["/robots.txt", "/resourcelist.xml"]);
    let mut arrivals: Vec<Instant> = up.hits().iter().map(|h| h.at).collect();
    let gap = assert_spaced(&mut arrivals, Duration::from_millis(200), "the stalled host");
    // One connection, usually: hyper may start a second if robots.txt's is not back in its
    // pool yet when the document asks; the spacing holds either way.
    eprintln!("robots.txt and the document arrived {gap:?} apart, over {} connection(s)", up.connections());
}
