//! The fetcher against real misbehaving servers on 127.0.0.1: retries, Retry-After, timeouts,
//! truncation, robots.txt, redirects, the SSRF guard, gzip, size caps and conditional GET.

use std::io::Write;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use crate::support::fetcher::{fetcher, settings as default_settings};
use crate::support::upstream::{Reply, Upstream};
use tributary::config::Settings;
use tributary::fetch::{Document, FetchError, FetchResponse, Fetched, Phase, Validators};
use url::Url;

/// The default settings, with short timeouts and backoff so the faults here fail fast.
fn settings() -> Settings {
    Settings {
        concurrency: NonZeroU32::new(8).unwrap(),
        max_backoff: Duration::from_millis(50),
        header_timeout: Duration::from_secs(3),
        idle_timeout: Duration::from_secs(3),
        total_timeout: Duration::from_secs(15),
        ..default_settings()
    }
}

async fn doc(url: &Url, s: &Settings) -> Result<Document, FetchError> {
    match fetcher().get_document(url, s, None).await? {
        Fetched::Modified(d) => Ok(d),
        Fetched::NotModified => panic!("unexpected 304"),
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

/// `url` as a stream that must fail part-way: the bytes handed on before the error, and the
/// error. Panics when the body ends cleanly.
async fn read_until_error(url: &Url, s: &Settings) -> (usize, FetchError) {
    let Fetched::Modified(mut r): Fetched<FetchResponse> = fetcher().get_stream(url, s, None).await.unwrap() else {
        panic!("{url}: unexpected 304")
    };
    let mut got = 0;
    // Bounded by the body, which the test's server sends in full or cuts.
    loop {
        match r.chunk().await {
            Ok(Some(c)) => got += c.len(),
            Ok(None) => panic!("{url}: the body ended cleanly after {got} bytes"),
            Err(e) => return (got, e),
        }
    }
}

fn gap(up: &Upstream, path: &str) -> Duration {
    let hits: Vec<Instant> = up.hits().iter().filter(|h| h.path == path).map(|h| h.at).collect();
    hits[1] - hits[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_then_success_are_retried() {
    let up = Upstream::routes(vec![("/doc", vec![Reply::status(503), Reply::status(500), Reply::ok("fine")])]).await;
    let f = fetcher();
    // Each backoff wait is drawn from the upper half of min(500 ms × 2^n, max_backoff).
    let s = Settings { max_retries: 3, max_backoff: Duration::from_millis(400), ..settings() };
    let Fetched::Modified(d) = f.get_document(&up.url("/doc"), &s, None).await.unwrap() else { panic!() };
    assert_eq!(&d.body[..], b"fine");
    assert_eq!(up.count("/doc"), 3);
    let at: Vec<Instant> = up.hits().iter().filter(|h| h.path == "/doc").map(|h| h.at).collect();
    for (n, w) in at.windows(2).enumerate() {
        assert!(w[1] - w[0] >= Duration::from_millis(200), "retry {} came {:?} after the failure", n + 1, w[1] - w[0]);
    }
    let host = &f.hosts()[0];
    assert_eq!((host.counters.retries, host.counters.failures, host.consecutive_failures), (2, 2, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_are_bounded() {
    let up = Upstream::routes(vec![("/doc", vec![Reply::status(502)])]).await;
    let s = Settings { max_retries: 2, ..settings() };
    let err = doc(&up.url("/doc"), &s).await.unwrap_err();
    assert!(matches!(err, FetchError::Status { status: 502, .. }), "{err}");
    assert_eq!(up.count("/doc"), 3);
    // A 404 is not retried.
    let up = Upstream::routes(vec![]).await;
    assert!(matches!(doc(&up.url("/x"), &s).await, Err(FetchError::Status { status: 404, .. })));
    assert_eq!(up.count("/x"), 1);
}

/// A `max_backoff` longer than the `Retry-After`s below: a park that short is waited out within
/// the request; a longer one ends it (`a_long_retry_after_parks_the_origin`).
const WAITED_OUT: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_retry_after_parks_the_origin() {
    let up = Upstream::routes(vec![("/doc", vec![Reply::status(429).header("Retry-After", "3600")])]).await;
    let f = fetcher();
    let s = Settings { max_retries: 3, ..settings() };
    let parked = |r: Result<Fetched<Document>, FetchError>| matches!(r, Err(FetchError::Parked { .. }));
    assert!(parked(f.get_document(&up.url("/doc"), &s, None).await));
    assert_eq!(up.count("/doc"), 1, "not retried");
    let before = up.hits().len();
    assert!(parked(f.get_document(&up.url("/other"), &s, None).await), "the whole origin waits");
    assert_eq!(up.hits().len(), before, "nothing sent, robots.txt included: {:?}", up.hits());
    let until = f.parked_until(&up.url("/")).unwrap();
    assert!(until > std::time::SystemTime::now() + Duration::from_secs(3000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_seconds_is_waited() {
    let first = Reply::status(429).header("Retry-After", "1");
    let up = Upstream::routes(vec![("/doc", vec![first, Reply::ok("ok")])]).await;
    let s = Settings { max_retries: 1, max_backoff: WAITED_OUT, ..settings() };
    assert_eq!(&doc(&up.url("/doc"), &s).await.unwrap().body[..], b"ok");
    assert!(gap(&up, "/doc") >= Duration::from_millis(1000), "{:?}", gap(&up, "/doc"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_http_date_is_waited() {
    let at = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(2));
    let up =
        Upstream::routes(vec![("/doc", vec![Reply::status(503).header("Retry-After", &at), Reply::ok("ok")])]).await;
    let s = Settings { max_retries: 1, max_backoff: WAITED_OUT, ..settings() };
    assert_eq!(&doc(&up.url("/doc"), &s).await.unwrap().body[..], b"ok");
    // The date has one-second resolution: at least one second remained when it was sent.
    assert!(gap(&up, "/doc") >= Duration::from_millis(900), "{:?}", gap(&up, "/doc"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_capped() {
    let up =
        Upstream::routes(vec![("/doc", vec![Reply::status(503).header("Retry-After", "3600"), Reply::ok("ok")])]).await;
    // Without the cap the 15 s total timeout would fail the request.
    let s =
        Settings { max_retries: 1, max_backoff: WAITED_OUT, retry_after_cap: Duration::from_millis(700), ..settings() };
    assert_eq!(&doc(&up.url("/doc"), &s).await.unwrap().body[..], b"ok");
    assert!(gap(&up, "/doc") >= Duration::from_millis(700));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_server_hits_the_header_timeout() {
    let up = Upstream::routes(vec![("/doc", vec![Reply::Hang])]).await;
    let s = Settings { header_timeout: Duration::from_millis(400), ..settings() };
    let err = doc(&up.url("/doc"), &s).await.unwrap_err();
    assert!(matches!(err, FetchError::Timeout { phase: Phase::Header, .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickling_server_fails_on_throughput_and_total() {
    let trickle = Reply::Trickle { body: vec![b'x'; 60], every: Duration::from_millis(250) };
    let up = Upstream::routes(vec![("/doc", vec![trickle])]).await;
    let s = Settings { min_throughput: 100, throughput_window: Duration::from_secs(1), ..settings() };
    let err = doc(&up.url("/doc"), &s).await.unwrap_err();
    assert!(matches!(err, FetchError::Timeout { phase: Phase::Throughput, .. }), "{err}");
    let s = Settings { min_throughput: 0, total_timeout: Duration::from_millis(1500), ..settings() };
    let err = doc(&up.url("/doc"), &s).await.unwrap_err();
    assert!(matches!(err, FetchError::Timeout { phase: Phase::Total, .. }), "{err}");
    let s = Settings { idle_timeout: Duration::from_millis(100), ..settings() };
    let err = doc(&up.url("/doc"), &s).await.unwrap_err();
    assert!(matches!(err, FetchError::Timeout { phase: Phase::Idle, .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_cut_short_are_errors_not_short_bodies() {
    let up = Upstream::routes(vec![
        ("/cl", vec![Reply::CutShort { declared: 1000, body: vec![b'a'; 100] }]),
        ("/chunked", vec![Reply::ChunkedCut { body: vec![b'b'; 100] }]),
    ])
    .await;
    for path in ["/cl", "/chunked"] {
        let err = doc(&up.url(path), &settings()).await.unwrap_err();
        assert!(matches!(err, FetchError::Truncated { .. }), "{path}: {err}");
        let (_, err) = read_until_error(&up.url(path), &settings()).await;
        assert!(matches!(err, FetchError::Truncated { .. }), "{path}: {err}");
    }
    // A gzip stream cut before its trailer is truncated too.
    let gz = gzip(&vec![b'z'; 5000]);
    let cut = gz[..gz.len() - 6].to_vec();
    let up = Upstream::routes(vec![("/gz", vec![Reply::ok(cut)])]).await;
    assert!(matches!(doc(&up.url("/gz"), &settings()).await, Err(FetchError::Truncated { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn robots_disallow_is_honoured_without_requesting() {
    // RFC 9309: only the most specific matching group applies, so `*`'s "Disallow: /" does not.
    let robots = "User-agent: *\nDisallow: /\n\nUser-agent: TributaryTest\nDisallow: /private\nDisallow: /mine\n";
    let up = Upstream::routes(vec![
        ("/robots.txt", vec![Reply::ok(robots)]),
        ("/private/x", vec![Reply::ok("secret")]),
        ("/public", vec![Reply::ok("hello")]),
    ])
    .await;
    let f = fetcher();
    for path in ["/private/x", "/mine/y"] {
        let err = f.get_document(&up.url(path), &settings(), None).await.unwrap_err();
        assert!(matches!(err, FetchError::RobotsDisallowed { .. }), "{err}");
    }
    assert!(f.get_document(&up.url("/public"), &settings(), None).await.is_ok());
    assert_eq!((up.count("/private/x"), up.count("/mine/y"), up.count("/robots.txt")), (0, 0, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn robots_5xx_disallows_and_4xx_allows() {
    let up = Upstream::routes(vec![("/robots.txt", vec![Reply::status(503)]), ("/a", vec![Reply::ok("a")])]).await;
    let err = doc(&up.url("/a"), &settings()).await.unwrap_err();
    assert!(matches!(err, FetchError::RobotsUnavailable { .. }), "{err}");
    assert_eq!(up.count("/a"), 0);
    let up = Upstream::routes(vec![("/robots.txt", vec![Reply::status(403)]), ("/a", vec![Reply::ok("a")])]).await;
    assert!(doc(&up.url("/a"), &settings()).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_followed_checked_and_bounded() {
    let up = Upstream::routes(vec![
        ("/moved", vec![Reply::redirect(301, "/final")]),
        ("/final", vec![Reply::ok("here")]),
        ("/loop-a", vec![Reply::redirect(302, "/loop-b")]),
        ("/loop-b", vec![Reply::redirect(307, "/loop-a")]),
        ("/file", vec![Reply::redirect(302, "file:///etc/passwd")]),
    ])
    .await;
    let d = doc(&up.url("/moved"), &settings()).await.unwrap();
    assert_eq!((d.url.path(), &d.body[..]), ("/final", &b"here"[..]));
    let err = doc(&up.url("/loop-a"), &settings()).await.unwrap_err();
    assert!(matches!(err, FetchError::TooManyRedirects { max: 10, .. }), "{err}");
    assert_eq!(up.count("/loop-a") + up.count("/loop-b"), 11);
    let err = doc(&up.url("/file"), &settings()).await.unwrap_err();
    assert!(matches!(err, FetchError::BadScheme { ref url } if url.starts_with("file:")), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_to_127_0_0_1_are_refused_without_allow_private() {
    // The upstream on 127.0.0.2 stands in for a public host (its network is allowed); every
    // spelling of 127.0.0.1 it redirects to must be refused before a connection is made.
    let secret = Upstream::routes(vec![("/secret", vec![Reply::ok("internal")])]).await;
    let port = secret.addr.port();
    let targets = [
        format!("http://127.0.0.1:{port}/secret"),
        format!("http://2130706433:{port}/secret"),
        format!("http://0x7f.1:{port}/secret"),
        format!("http://[::ffff:127.0.0.1]:{port}/secret"),
        format!("http://localhost:{port}/secret"),
    ];
    let routes: Vec<(String, Vec<Reply>)> =
        targets.iter().enumerate().map(|(i, t)| (format!("/r{i}"), vec![Reply::redirect(302, t)])).collect();
    let up = Upstream::routes_on("127.0.0.2", routes.iter().map(|(p, r)| (p.as_str(), r.clone())).collect()).await;
    let s = Settings { allow_private: false, allow_networks: vec!["127.0.0.2/32".parse().unwrap()], ..settings() };
    for (i, target) in targets.iter().enumerate() {
        let err = doc(&up.url(&format!("/r{i}")), &s).await.unwrap_err();
        assert!(matches!(err, FetchError::Refused { .. }), "redirect to {target}: {err}");
        assert_eq!(up.count(&format!("/r{i}")), 1);
    }
    assert!(secret.hits().is_empty(), "a refused redirect target was contacted: {:?}", secret.hits());
    // The same redirect is followed when the operator allows private addresses.
    let allowed = Settings { allow_private: true, ..s };
    assert_eq!(&doc(&up.url("/r0"), &allowed).await.unwrap().body[..], b"internal");
    assert_eq!(secret.count("/secret"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_targets_and_numeric_tricks_are_refused() {
    let up = Upstream::routes(vec![("/x", vec![Reply::ok("x")])]).await;
    let port = up.addr.port();
    let s = Settings { allow_private: false, ..settings() };
    let forms = ["127.0.0.1", "2130706433", "0x7f.1", "017700000001", "127.1", "[::ffff:127.0.0.1]", "localhost"];
    for host in forms {
        let url = Url::parse(&format!("http://{host}:{port}/x")).unwrap();
        let err = doc(&url, &s).await.unwrap_err();
        assert!(matches!(err, FetchError::Refused { .. }), "{host}: {err}");
    }
    assert!(up.hits().is_empty(), "a refused target was contacted");
    assert!(doc(&up.url("/x"), &settings()).await.is_ok(), "allow_private lets it through");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_is_decoded_when_advertised_or_sniffed() {
    let xml = b"<urlset>hello</urlset>".repeat(100);
    let up = Upstream::routes(vec![
        ("/adv.xml", vec![Reply::ok(gzip(&xml)).header("Content-Encoding", "gzip")]),
        ("/sniff.xml.gz", vec![Reply::ok(gzip(&xml)).header("Content-Type", "application/gzip")]),
    ])
    .await;
    for path in ["/adv.xml", "/sniff.xml.gz"] {
        assert_eq!(&doc(&up.url(path), &settings()).await.unwrap().body[..], &xml[..], "{path}");
    }
    assert_eq!(up.hits()[0].headers.get("accept-encoding").map(String::as_str), Some("gzip"));
    // A bitstream keeps the bytes as published: a .gz file is not unpacked.
    let Fetched::Modified(mut r) = fetcher().get_stream(&up.url("/sniff.xml.gz"), &settings(), None).await.unwrap()
    else {
        panic!()
    };
    let mut raw = Vec::new();
    while let Some(c) = r.chunk().await.unwrap() {
        raw.extend_from_slice(&c);
    }
    assert_eq!(raw, gzip(&xml));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_bomb_fails_fast() {
    let bomb = gzip(&vec![0u8; 10_000_000]);
    assert!(bomb.len() < 100_000);
    let up = Upstream::routes(vec![
        ("/bomb.xml.gz", vec![Reply::ok(bomb.clone())]),
        ("/bomb", vec![Reply::ok(bomb).header("Content-Encoding", "gzip")]),
    ])
    .await;
    let s = Settings { max_document_bytes: 1_000_000, max_resource_bytes: 1_000_000, ..settings() };
    let err = doc(&up.url("/bomb.xml.gz"), &s).await.unwrap_err();
    assert!(matches!(err, FetchError::DecompressionBomb { limit: 1_000_000, .. }), "{err}");
    let (out, err) = read_until_error(&up.url("/bomb"), &s).await;
    assert!(matches!(err, FetchError::DecompressionBomb { .. }), "{err}");
    assert!(out <= 1_000_000);
    // The ratio cap catches a bomb under the size cap too.
    let s = Settings { max_decompressed_ratio: 20, ..settings() };
    assert!(matches!(doc(&up.url("/bomb.xml.gz"), &s).await, Err(FetchError::DecompressionBomb { .. })));
}

/// Two bodies over a 4,096-byte cap: one whose Content-Length says so, one chunked without it.
async fn oversized() -> Upstream {
    Upstream::routes(vec![
        ("/declared", vec![Reply::ok(vec![b'a'; 5000])]),
        ("/chunked", vec![Reply::Chunked { headers: vec![], body: vec![b'b'; 50_000] }]),
    ])
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_responses_fail_and_are_never_truncated() {
    let up = oversized().await;
    let s = Settings { max_document_bytes: 4096, ..settings() };
    for path in ["/declared", "/chunked"] {
        let err = doc(&up.url(path), &s).await.unwrap_err();
        assert!(matches!(err, FetchError::TooLarge { limit: 4096, .. }), "{path}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_bitstreams_fail_and_are_never_truncated() {
    let up = oversized().await;
    let s = Settings { max_resource_bytes: 4096, ..settings() };
    // A Content-Length over the cap fails before any of the body is read.
    let Err(err) = fetcher().get_stream(&up.url("/declared"), &s, None).await else {
        panic!("a 5,000-byte body passed a 4,096-byte cap")
    };
    assert!(matches!(err, FetchError::TooLarge { limit: 4096, .. }), "{err}");
    // Without one, the stream fails at the chunk that crosses the cap; nothing past it is handed on.
    let (got, err) = read_until_error(&up.url("/chunked"), &s).await;
    assert!(matches!(err, FetchError::TooLarge { limit: 4096, .. }), "{err}");
    assert!(got <= 4096, "{got} bytes handed on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_get_returns_not_modified() {
    let lm = "Mon, 01 Jan 2024 00:00:00 GMT";
    let up = Upstream::start(move |hit, _| match hit.headers.get("if-none-match").map(String::as_str) {
        Some("\"v1\"") => Reply::status(304),
        _ => Reply::ok("body").header("ETag", "\"v1\"").header("Last-Modified", lm),
    })
    .await;
    let f = fetcher();
    let Fetched::Modified(d) = f.get_document(&up.url("/doc"), &settings(), None).await.unwrap() else { panic!() };
    assert_eq!(d.validators, Validators { etag: Some("\"v1\"".into()), last_modified: Some(lm.into()) });
    let again = f.get_document(&up.url("/doc"), &settings(), Some(&d.validators)).await.unwrap();
    assert!(matches!(again, Fetched::NotModified));
    let seen = &up.hits()[2].headers; // robots.txt, first GET, conditional GET
    assert_eq!(seen.get("if-none-match").map(String::as_str), Some("\"v1\""));
    assert_eq!(seen.get("if-modified-since").map(String::as_str), Some(lm));
    assert_eq!(f.hosts()[0].counters.not_modified, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_arrive_in_chunks_with_counters() {
    let body: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let up = Upstream::routes(vec![("/big", vec![Reply::Chunked { headers: vec![], body: body.clone() }])]).await;
    let f = fetcher();
    let Fetched::Modified(mut r) = f.get_stream(&up.url("/big"), &settings(), None).await.unwrap() else { panic!() };
    let (mut chunks, mut got) = (0, Vec::new());
    while let Some(c) = r.chunk().await.unwrap() {
        chunks += 1;
        got.extend_from_slice(&c);
    }
    assert!(chunks > 1);
    assert_eq!(got, body);
    let host = &f.hosts()[0];
    assert_eq!(host.counters.requests, 2); // robots.txt and the stream
    assert!(host.counters.bytes >= 3_000_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_back_off_the_host() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = Url::parse(&format!("http://127.0.0.1:{port}/x")).unwrap();
    let f = fetcher();
    let s = Settings { max_retries: 1, max_backoff: Duration::from_millis(300), ..settings() };
    let err = f.get_document(&url, &s, None).await.unwrap_err();
    // robots.txt is unreachable first, so the host counts as disallowed (RFC 9309).
    assert!(matches!(err, FetchError::RobotsUnavailable { .. }), "{err}");
    let host = &f.hosts()[0];
    assert!(host.consecutive_failures >= 1 && host.backing_off_until.is_some(), "{host:?}");
    let err = f.get_stream(&Url::parse(&format!("http://127.0.0.1:{port}/robots.txt")).unwrap(), &s, None).await;
    assert!(matches!(err, Err(FetchError::Connect { .. })), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_http_date_on_429_waits_until_that_date() {
    // Three seconds ahead: the date's one-second resolution still leaves at least two.
    let date =
        httpdate::parse_http_date(&httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(3)))
            .unwrap();
    let first = Reply::status(429).header("Retry-After", &httpdate::fmt_http_date(date));
    let up = Upstream::routes(vec![("/doc", vec![first, Reply::ok("ok")])]).await;
    // Hits carry `Instant`s; this pair turns them into wall-clock times comparable with the date.
    let (wall0, mono0) = (std::time::SystemTime::now(), Instant::now());
    let s = Settings { max_retries: 1, max_backoff: WAITED_OUT, ..settings() };
    assert_eq!(&doc(&up.url("/doc"), &s).await.unwrap().body[..], b"ok");
    let hits: Vec<Instant> = up.hits().iter().filter(|h| h.path == "/doc").map(|h| h.at).collect();
    assert_eq!(hits.len(), 2);
    let retried_at = wall0 + (hits[1] - mono0);
    // 50 ms of slack for the two clocks read a moment apart above.
    assert!(
        retried_at + Duration::from_millis(50) >= date,
        "retried {:?} before the date",
        date.duration_since(retried_at)
    );
    // Sanity, not speed: the wait came from the date, not from a backoff or cap far past it.
    assert!(retried_at < date + Duration::from_secs(5), "retried {:?} after the date", retried_at.duration_since(date));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_kept_alive_and_bounded_by_the_concurrency_cap() {
    let up = Upstream::start(|hit, _| match hit.path.as_str() {
        "/slow" => Reply::ok("slow").delayed(Duration::from_millis(30)),
        _ => Reply::ok("fast"),
    })
    .await;
    let cap = 2;
    let s = Settings { concurrency: NonZeroU32::new(cap).unwrap(), ..settings() };
    // hyper hands a connection back to its pool a moment after the body ended, but the host's
    // slot is free as soon as the body ends: a request taking the slot at once can find no idle
    // connection and open one more, which is then pooled and reused. One request at a time
    // needs one connection and seldom a second; `cap` at a time, each of the `cap` requests
    // that just ended may still be handing its connection back, so up to twice the cap (cap + 1
    // on a quiet machine, more under the full suite's load). Without keep-alive, it would be a
    // connection per request: 21, then 51.
    let (sequential_bound, bound) = (cap as usize + 1, 2 * cap as usize);
    let f = fetcher();
    for _ in 0..20 {
        let Fetched::Modified(d) = f.get_document(&up.url("/fast"), &s, None).await.unwrap() else { panic!() };
        assert_eq!(&d.body[..], b"fast");
    }
    assert_eq!(up.count("/fast"), 20);
    // robots.txt and 20 documents over kept-alive connections, not a connection each.
    assert!(up.connections() <= sequential_bound, "{} connections for 21 sequential requests", up.connections());
    for _ in 0..5 {
        let gets: Vec<_> = (0..6)
            .map(|_| {
                let (f, s, url) = (f.clone(), s.clone(), up.url("/slow"));
                tokio::spawn(async move { f.get_document(&url, &s, None).await.map(|_| ()) })
            })
            .collect();
        for g in gets {
            g.await.unwrap().unwrap();
        }
    }
    assert_eq!(up.count("/slow"), 30);
    assert!(up.max_in_flight() <= cap as usize, "{} requests in flight for a cap of {cap}", up.max_in_flight());
    assert!(up.connections() <= bound, "{} connections for 51 requests, {cap} at a time", up.connections());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_that_hangs_hits_the_connect_timeout() {
    // A listener that never accepts, with a backlog of one: once its accept queue is full,
    // Linux drops further SYNs (tcp_abort_on_overflow = 0), so a connect hangs rather than
    // being refused.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    let mut hung = false;
    // Bounded: the queue holds backlog + 1 connections; a few more tries prove it is full.
    for _ in 0..6 {
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
            Ok(c) => fillers.push(c),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                hung = true;
                break;
            }
            Err(e) => panic!("filling the accept queue of {addr}: {e}"),
        }
    }
    assert!(
        hung,
        "{} connects to a full backlog-1 listener all succeeded: this kernel does not drop SYNs \
         on overflow, so the connect timeout cannot be tested this way",
        fillers.len()
    );
    let s = Settings { connect_timeout: Duration::from_millis(300), max_retries: 0, ..settings() };
    let f = fetcher();
    // robots.txt itself, so the error is the request's own rather than "robots unavailable".
    let url = Url::parse(&format!("http://{addr}/robots.txt")).unwrap();
    let started = Instant::now();
    let err = f.get_stream(&url, &s, None).await.unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, FetchError::Timeout { phase: Phase::Connect, .. }), "{err}");
    // The header (3 s) and total (15 s) deadlines were still far off.
    assert!(took < s.header_timeout, "{took:?}");
    let host = &f.hosts()[0];
    assert_eq!((host.counters.failures, host.consecutive_failures), (1, 1), "{host:?}");
    drop(listener);
}
