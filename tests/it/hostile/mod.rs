//! Hostile clients against a real `tributary run` on 127.0.0.1 (issue 36): a feed entry that
//! carries script, opened in headless Chromium; slowloris and idle sockets and a connection
//! flood; one client trying to fill the hub; a dead callback; the status API looked at for
//! callbacks; a proxy in the environment; the topic before any notification. Every loop is
//! bounded in count and time, and no assertion is about speed: the timeouts asserted are the
//! configured ones with a wide margin. The push trials (a forged denial, a topic and entries
//! outside the Source's authority, trickled bodies, the old secret after its grace period, a
//! delivery after the lease) are in `push_subscribe.rs`, beside the test hub they need.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;

use crate::notify_hub::hub_post;
use crate::support::cli::tributary;
use crate::support::net::free_port;
use crate::support::service::Service;
use crate::support::subscriber::{OnPost, OnVerify, Subscriber};
use crate::support::tools::require;

const LIMIT: Duration = Duration::from_secs(60);

/// An aggregator with `extra` tables, one feed source `news` at `feed` and a source that never
/// answers (port 1), so its set `quiet` never has a change.
fn config(port: u16, feed: &str, extra: &str) -> String {
    format!(
        "[aggregator]\nbase_url = \"http://127.0.0.1:{port}/\"\nlisten = \"127.0.0.1:{port}\"\ndata_dir = \"store\"\n\
         user_agent = \"Tributary-test/0.1 (+mailto:test@example.org)\"\n\n{extra}\n\n\
         [[source]]\nid = \"news\"\nfeed = \"{feed}\"\nallow_private = true\nrate = \"unlimited\"\npoll = \"1s\"\n\n\
         [[source]]\nid = \"quiet\"\nurl = \"http://127.0.0.1:1/.well-known/resourcesync\"\nallow_private = true\n\
         poll = \"1h\"\n"
    )
}

/// An Atom feed whose entry carries XHTML script, an event handler and a `javascript:` link,
/// beside foreign extension markup that must survive.
const HOSTILE_FEED: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom" xmlns:ext="http://example.org/ext">
<title>news</title><id>urn:news</id><updated>2024-01-01T00:00:00Z</updated>
<entry><id>urn:news:1</id><title>hello</title><updated>2024-01-01T00:00:00Z</updated>
<content type="xhtml"><div xmlns="http://www.w3.org/1999/xhtml"><p>text</p>
<script>window.pwned = 1; document.title = 'pwned';</script>
<img src="data:," onerror="window.pwned = 2"/><a href="javascript:window.pwned=3">x</a>
<svg xmlns="http://www.w3.org/2000/svg" onload="window.pwned = 4"><script>window.pwned = 5</script></svg></div></content>
<ext:rating value="5">kept</ext:rating>
</entry>TICK</feed>"#;

/// Serves [`HOSTILE_FEED`] with one more entry at every request, so that the feed's set keeps
/// changing (and notifying).
async fn serve_feed() -> String {
    let ticks = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let app = Router::new().route(
        "/feed.atom",
        get(move || async move {
            let n = ticks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let tick = format!(
                "<entry><id>urn:news:tick-{n}</id><title>tick {n}</title><updated>2024-01-02T00:00:00Z</updated></entry>"
            );
            ([("content-type", "application/atom+xml")], HOSTILE_FEED.replace("TICK", &tick))
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await });
    format!("http://{addr}/feed.atom")
}

async fn start(extra: &str) -> (tempfile::TempDir, Service) {
    let dir = tempfile::tempdir().unwrap();
    let feed = serve_feed().await;
    let s = Service::start(dir.path(), &config(free_port(), &feed, extra), &[], &[]).await;
    (dir, s)
}

/// The republished feed, once it holds the entry.
async fn republished(s: &Service) -> (reqwest::header::HeaderMap, String) {
    s.wait_until("the feed holds the entry", LIMIT, |s| async move {
        s.get("sets/news/feed.atom").await.2.contains("urn:news:1")
    })
    .await;
    let (status, h, body) = s.get("sets/news/feed.atom").await;
    assert_eq!(status, 200);
    (h, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_republished_feed_runs_no_script_in_a_browser() {
    const TEST: &str = "hostile::a_republished_feed_runs_no_script_in_a_browser";
    let (_dir, s) = start("").await;
    let (h, body) = republished(&s).await;
    assert_eq!(h["content-security-policy"], "default-src 'none'; sandbox");
    assert_eq!(h["x-content-type-options"], "nosniff");
    for active in ["<script", "onerror", "onload", "javascript:", "pwned"] {
        assert!(!body.contains(active), "{active} republished:\n{body}");
    }
    assert!(body.contains("<ext:rating value=\"5\">kept</ext:rating>"), "foreign markup kept:\n{body}");
    assert!(body.contains("<p>text</p>"), "{body}");
    for page in ["sets/news/feed-complete.atom", "sets/news/notifications", "api/status"] {
        let (_, h, _) = s.get(page).await;
        assert_eq!(h["content-security-policy"], "default-src 'none'; sandbox", "{page}");
    }

    let (Some(chromium), Some(chromedriver)) = (require("chromium", TEST), require("chromedriver", TEST)) else {
        return;
    };
    let driver = crate::dashboard_browser::start_driver(&chromedriver);
    let c = crate::dashboard_browser::browser(&driver, &chromium).await;
    let result = async {
        c.goto(&format!("{}sets/news/feed.atom", s.base)).await.map_err(|e| e.to_string())?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let pwned = c.execute("return String(window.pwned) + '|' + document.title;", vec![]).await;
        pwned.map_err(|e| e.to_string())
    }
    .await;
    let _ = c.close().await;
    let seen = result.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(seen.as_str(), Some("undefined|"), "no script ran on the feed");
}

/// Reads from `sock` until EOF or error; true if the server closed it within `limit`.
fn closed_within(sock: &mut TcpStream, limit: Duration) -> bool {
    sock.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let deadline = Instant::now() + limit;
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match sock.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return true,
        }
    }
    false
}

#[tokio::test]
async fn slowloris_idle_and_flooding_connections_are_cut_off() {
    let (_dir, s) = start("[server]\nheader_timeout = \"2s\"\nmax_connections = 6\n").await;
    let addr = s.base.trim_start_matches("http://").trim_end_matches('/').to_owned();
    let result = tokio::task::spawn_blocking(move || {
        // Half a request head, never finished.
        let mut half = TcpStream::connect(&addr).unwrap();
        half.write_all(b"GET /api/status HTTP/1.1\r\nHost: x\r\nX-Slow: ").unwrap();
        let half_closed = closed_within(&mut half, Duration::from_secs(30));
        // A keep-alive connection left idle after one request.
        let mut idle = TcpStream::connect(&addr).unwrap();
        idle.write_all(b"GET /robots.txt HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let idle_closed = closed_within(&mut idle, Duration::from_secs(30));
        // A flood: connections held open until one is refused.
        let mut held = Vec::new();
        let mut refused = None;
        for _ in 0..20 {
            let mut c = TcpStream::connect(&addr).unwrap();
            c.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
            let mut buf = [0u8; 256];
            if let Ok(n) = c.read(&mut buf)
                && n > 0
            {
                refused = Some(String::from_utf8_lossy(&buf[..n]).into_owned());
                break;
            }
            held.push(c);
        }
        drop(held);
        (half_closed, idle_closed, refused)
    })
    .await
    .unwrap();
    assert!(result.0, "a half-sent head was not cut off within 30 s (header_timeout 2 s)");
    assert!(result.1, "an idle keep-alive connection was not closed within 30 s");
    let refused = result.2.expect("past max_connections a connection is answered");
    assert!(refused.starts_with("HTTP/1.1 503") && refused.contains("too many connections"), "{refused}");
    // Once the flood is gone the server answers again.
    s.wait_until("the server answers again", LIMIT, |s| async move { s.get("api/status").await.0 == 200 }).await;
}

#[tokio::test]
async fn one_client_cannot_fill_the_hub_and_a_dead_callback_is_dropped() {
    let hub = "[hub]\nallow_private = true\nmax_per_host = 3\nclient_rate = \"1/min\"\ndelivery_attempts = 1\n\
               retry_backoff = \"100ms\"\nrequest_timeout = \"1s\"\nmax_failed_notifications = 2\nlease_min = \"1s\"";
    let (_dir, s) = start(hub).await;
    let topic = format!("{}sets/news/notifications", s.base);
    let good = Subscriber::start(OnPost::Accept, OnVerify::Echo).await;
    // 25 subscriptions for callbacks on one host, as fast as one client can ask.
    let mut answers = Vec::new();
    for i in 0..25 {
        let cb = format!("http://{}/cb?n={i}", good.addr);
        answers.push(hub_post(&s, &[("hub.mode", "subscribe"), ("hub.topic", &topic), ("hub.callback", &cb)]).await);
    }
    let accepted = answers.iter().filter(|(st, _)| *st == 202).count();
    assert_eq!(accepted, 3, "max_per_host: {answers:?}");
    assert!(answers.iter().any(|(st, t)| *st == 429 && t.contains("callbacks on 127.0.0.1")), "{answers:?}");
    assert!(answers.iter().any(|(st, t)| *st == 429 && t.contains("too many subscribe requests")), "{answers:?}");
    // Unsubscription is processed whatever the limits.
    let cb0 = format!("http://{}/cb?n=0", good.addr);
    s.wait_until("three verified", LIMIT, |s| async move { count(s).await == 3 }).await;
    let (st, text) = hub_post(&s, &[("hub.mode", "unsubscribe"), ("hub.topic", &topic), ("hub.callback", &cb0)]).await;
    assert_eq!(st, 202, "{text}");
    s.wait_until("unsubscribed", LIMIT, |s| async move { count(s).await == 2 }).await;
    // The status API shows counts, never a callback.
    let (_, _, status) = s.get("api/status").await;
    assert!(!status.contains(&good.addr.to_string()), "a callback is published: {status}");

    // A callback that keeps failing is dropped after max_failed_notifications in a row.
    good.set_on_post(OnPost::Status(500));
    s.wait_until("the failing subscriptions were dropped", LIMIT, |s| async move {
        // New entries make notifications; the feed is polled every second.
        count(s).await == 0
    })
    .await;
}

/// Verified subscriptions of set `news`.
async fn count(s: &Service) -> u64 {
    let status = s.json("api/status").await;
    let row = status["sets"].as_array().unwrap().iter().find(|r| r["id"] == "news").unwrap().clone();
    row["notifications"]["subscribers"].as_u64().unwrap()
}

#[tokio::test]
async fn the_hub_ignores_a_proxy_and_a_quiet_topic_is_a_well_formed_document() {
    // A "proxy" that accepts connections and never answers: a request through it never
    // arrives. (The harvester's own fetcher does use it, for the feed; the hub must not.)
    let proxy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_url = format!("http://{}", proxy.local_addr().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let feed = serve_feed().await;
    let cfg = config(free_port(), &feed, "[hub]\nallow_private = true\n");
    let env = [("HTTP_PROXY", proxy_url.as_str()), ("http_proxy", proxy_url.as_str()), ("NO_PROXY", "")];
    let s = Service::start(dir.path(), &cfg, &[], &env).await;
    let sub = Subscriber::start(OnPost::Accept, OnVerify::Echo).await;
    let (topic, cb) = (format!("{}sets/quiet/notifications", s.base), sub.callback());
    let (st, _) = hub_post(&s, &[("hub.mode", "subscribe"), ("hub.topic", &topic), ("hub.callback", &cb)]).await;
    assert_eq!(st, 202);
    s.wait_until("verified directly, not through the proxy", LIMIT, |_| async { !sub.verifications().is_empty() })
        .await;
    drop(proxy);

    // Before any notification the topic serves an empty, well-formed change notification.
    let out = tokio::task::spawn_blocking(move || tributary(&["check", &topic]).output().unwrap()).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("Change Notification"), "{text}");
}
