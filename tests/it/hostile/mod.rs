//! Hostile clients against a real `tributary run` on 127.0.0.1 (issue 36): one trial (at
//! least) for each defect the issue found, each a client doing what a stranger could.
//!
//! | defect | module: trial |
//! | --- | --- |
//! | 1 stored XSS through republished feeds | `feeds`: a feed with script in XHTML and escaped HTML, opened in Chromium, and a page showing it |
//! | 2 no connection timeouts (and issue 51) | `server`: silent, slowloris and HTTP/2-preface-only connections, an idle keep-alive socket, floods from one address and from many, a reader that stalls a streamed body |
//! | 3 one client can fill the hub | `hub`: 25 subscriptions on one host, unsubscribing past the limits, a dead callback |
//! | 4 callback URLs published | `hub`: the status API and the dashboard; `push`: a forged denial |
//! | 5 push outside the authority | `push`: a foreign topic and pushed entries for another site |
//! | 6 callback bodies | `push`: oversized and trickled bodies, a flood of deliveries |
//! | 7 signatures and replays | `push`: forged, unsigned, sha1, replayed, old-secret and after-the-lease deliveries |
//! | 8 FeedSync cost | `feeds`: an item whose history and conflicts pass the caps |
//! | 9 presigned redirects | `bucket`: an HTML page and a text file in a real S3 bucket, followed through the `307`; a tampered override |
//! | 10 proxies bypass the guard | `hub`: proxies in the environment, unused by the hub and the harvester; a configured one |
//! | 11 an empty topic | `hub`: `tributary check` on a topic before any notification |
//!
//! Every loop is bounded in count and time, and no assertion is about speed: the timeouts
//! asserted are the configured ones with a wide margin. The modules here share the Tributary
//! configuration and the hostile feed below; the push world is `support::push`.

use std::time::Duration;

use axum::Router;
use axum::routing::get;

use crate::support::net::{free_port, listen};
use crate::support::service::Service;

mod bucket;
mod feeds;
mod hub;
mod push;
mod server;

pub(super) const LIMIT: Duration = Duration::from_secs(60);

/// An aggregator with `extra` tables, one feed source `news` at `feed` and a source that never
/// answers (port 1), so its set `quiet` never has a change.
pub(super) fn config(port: u16, feed: &str, extra: &str) -> String {
    format!(
        "[aggregator]\nbase_url = \"http://127.0.0.1:{port}/\"\nlisten = \"127.0.0.1:{port}\"\ndata_dir = \"store\"\n\
         user_agent = \"Tributary-test/0.1 (+mailto:test@example.org)\"\n\n{extra}\n\n\
         [[source]]\nid = \"news\"\nfeed = \"{feed}\"\nallow_private = true\nrate = \"unlimited\"\npoll = \"1s\"\n\n\
         [[source]]\nid = \"quiet\"\nurl = \"http://127.0.0.1:1/.well-known/resourcesync\"\nallow_private = true\n\
         poll = \"1h\"\n"
    )
}

/// An Atom feed whose entry carries XHTML script, an event handler and a `javascript:` link,
/// the same as escaped HTML in a `type="html"` summary, and foreign extension markup that must
/// survive.
pub(super) const HOSTILE_FEED: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom" xmlns:ext="http://example.org/ext">
<title>news</title><id>urn:news</id><updated>2024-01-01T00:00:00Z</updated>
<entry><id>urn:news:1</id><title>hello</title><updated>2024-01-01T00:00:00Z</updated>
<summary type="html">&lt;p&gt;&lt;b&gt;bold&lt;/b&gt;&lt;img src="missing.png" onerror="window.pwned = 6"&gt;&lt;script&gt;window.pwned = 7&lt;/script&gt;&lt;a href="javascript:window.pwned = 8"&gt;y&lt;/a&gt;&lt;iframe srcdoc="&amp;lt;script&amp;gt;parent.pwned = 9&amp;lt;/script&amp;gt;"&gt;&lt;/iframe&gt;&lt;/p&gt;</summary>
<content type="xhtml"><div xmlns="http://www.w3.org/1999/xhtml"><p>text</p>
<script>window.pwned = 1; document.title = 'pwned';</script>
<img src="data:," onerror="window.pwned = 2"/><a href="javascript:window.pwned=3">x</a>
<svg xmlns="http://www.w3.org/2000/svg" onload="window.pwned = 4"><script>window.pwned = 5</script></svg></div></content>
<ext:rating value="5">kept</ext:rating>
</entry>TICK</feed>"#;

/// Serves [`HOSTILE_FEED`] with one more entry at every request, so that the feed's set keeps
/// changing (and notifying).
pub(super) async fn serve_feed() -> String {
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
    format!("http://127.0.0.1:{}/feed.atom", listen(app).await)
}

pub(super) async fn start(extra: &str) -> (tempfile::TempDir, Service) {
    let dir = tempfile::tempdir().unwrap();
    let feed = serve_feed().await;
    let s = Service::start(dir.path(), &config(free_port(), &feed, extra), &[], &[]).await;
    (dir, s)
}

/// The republished feed, once it holds the entry.
pub(super) async fn republished(s: &Service) -> (reqwest::header::HeaderMap, String) {
    s.wait_until("the feed holds the entry", LIMIT, |s| async move {
        s.get("sets/news/feed.atom").await.2.contains("urn:news:1")
    })
    .await;
    let (status, h, body) = s.get("sets/news/feed.atom").await;
    assert_eq!(status, 200);
    (h, body)
}
