//! Defects 3, 4, 10 and 11 on the built-in hub: one client filling it, a dead callback, the
//! status API looked at for callbacks, proxies in the environment (and one configured, for the
//! harvester), the topic before any notification.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{LIMIT, config, republished, serve_feed, start};
use crate::notify_hub::hub_post;
use crate::support::cli::tributary;
use crate::support::net::free_port;
use crate::support::service::Service;
use crate::support::subscriber::{OnPost, OnVerify, Subscriber};

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
    // The status API and the dashboard (its embedded JSON) show counts, never a callback.
    for page in ["api/status", ""] {
        let (_, _, text) = s.get(page).await;
        assert!(!text.contains(&good.addr.to_string()), "a callback is published at /{page}: {text}");
    }

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

/// A "proxy" on 127.0.0.1 that records the head of every request it gets and answers `502`.
async fn recording_proxy() -> (String, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let heads = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = l.accept().await {
            let heads = heads.clone();
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buf = vec![0u8; 4096];
                let n = tokio::time::timeout(LIMIT, sock.read(&mut buf)).await.map_or(0, |r| r.unwrap_or(0));
                heads.lock().unwrap().push(String::from_utf8_lossy(&buf[..n]).into_owned());
                let _ =
                    sock.write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
            });
        }
    });
    (url, seen)
}

#[tokio::test]
async fn proxies_in_the_environment_are_ignored_and_a_quiet_topic_is_a_well_formed_document() {
    let (proxy, seen) = recording_proxy().await;
    let env = [
        ("HTTP_PROXY", proxy.as_str()),
        ("http_proxy", proxy.as_str()),
        ("HTTPS_PROXY", proxy.as_str()),
        ("ALL_PROXY", proxy.as_str()),
        ("NO_PROXY", ""),
    ];
    let dir = tempfile::tempdir().unwrap();
    let feed = serve_feed().await;
    let cfg = config(free_port(), &feed, "[hub]\nallow_private = true\n");
    let s = Service::start(dir.path(), &cfg, &[], &env).await;
    // The harvester fetches the feed directly...
    republished(&s).await;
    // ...and the hub verifies a subscriber directly.
    let sub = Subscriber::start(OnPost::Accept, OnVerify::Echo).await;
    let (topic, cb) = (format!("{}sets/quiet/notifications", s.base), sub.callback());
    let (st, _) = hub_post(&s, &[("hub.mode", "subscribe"), ("hub.topic", &topic), ("hub.callback", &cb)]).await;
    assert_eq!(st, 202);
    s.wait_until("verified directly, not through the proxy", LIMIT, |_| async { !sub.verifications().is_empty() })
        .await;
    assert_eq!(*seen.lock().unwrap(), Vec::<String>::new(), "the proxy of the environment was used");

    // Before any notification the topic serves an empty, well-formed change notification.
    let out = tokio::task::spawn_blocking(move || tributary(&["check", &topic]).output().unwrap()).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("Change Notification"), "{text}");
}

#[tokio::test]
async fn a_configured_proxy_carries_the_harvest() {
    let (proxy, seen) = recording_proxy().await;
    let dir = tempfile::tempdir().unwrap();
    let feed = serve_feed().await;
    let cfg =
        config(free_port(), &feed, "").replacen("[aggregator]\n", &format!("[aggregator]\nproxy = \"{proxy}\"\n"), 1);
    let _s = Service::start(dir.path(), &cfg, &[], &[]).await;
    // The proxy answers 502, so the harvester gets no robots.txt and asks for nothing more of
    // the feed's host; that it asked the proxy is what counts.
    let origin = feed.trim_end_matches("/feed.atom");
    let asked =
        || seen.lock().unwrap().iter().any(|head| head.starts_with(&format!("GET {origin}/robots.txt HTTP/1.1")));
    for _ in 0..600 {
        if asked() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(asked(), "the feed's host was not asked through the configured proxy: {:?}", seen.lock().unwrap());
}
