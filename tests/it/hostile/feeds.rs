//! Defects 1 and 8: upstream markup republished on Tributary's origin, and FeedSync items
//! made to cost the merge.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::routing::get;

use super::{HOSTILE_FEED, LIMIT, config, republished, start};
use crate::support::net::{free_port, listen};
use crate::support::service::Service;
use crate::support::tools::require;

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
    let summary = escaped_html(&body);
    assert!(summary.contains("<b>bold</b>") && summary.contains("<img src=\"missing.png\">"), "{summary}");
    for page in ["sets/news/feed-complete.atom", "sets/news/notifications", "api/status"] {
        let (_, h, _) = s.get(page).await;
        assert_eq!(h["content-security-policy"], "default-src 'none'; sandbox", "{page}");
    }

    let (Some(chromium), Some(chromedriver)) = (require("chromium", TEST), require("chromedriver", TEST)) else {
        return;
    };
    let driver = crate::dashboard_browser::start_driver(&chromedriver);
    let c = crate::dashboard_browser::browser(&driver, &chromium).await;
    // A feed reader's page: the summary's HTML as the page's body, with no policy of its own.
    // The upstream summary in the same page is the control: it does run script.
    let upstream = quick_xml::escape::unescape(between(HOSTILE_FEED, "<summary type=\"html\">", "</summary>"))
        .unwrap()
        .into_owned();
    let pages = serve_pages(summary, upstream).await;
    let result = async {
        let mut seen = Vec::new();
        for url in [format!("{}sets/news/feed.atom", s.base), format!("{pages}republished"), format!("{pages}upstream")]
        {
            c.goto(&url).await.map_err(|e| e.to_string())?;
            // The image's error event and the scripts run before `load`; this is a margin.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let pwned = c.execute("return String(window.pwned) + '|' + document.title;", vec![]).await;
            seen.push(pwned.map_err(|e| e.to_string())?);
        }
        Ok::<_, String>(seen)
    }
    .await;
    let _ = c.close().await;
    let seen = result.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(seen[0].as_str(), Some("undefined|"), "no script ran on the feed");
    assert_eq!(seen[1].as_str(), Some("undefined|"), "no script ran in a page showing the republished summary");
    assert_ne!(seen[2].as_str(), Some("undefined|"), "the control: the upstream summary does run script");
}

/// The text between `start` and `end` in `s`.
fn between<'a>(s: &'a str, start: &str, end: &str) -> &'a str {
    let from = s.find(start).unwrap_or_else(|| panic!("no {start} in {s}")) + start.len();
    &s[from..from + s[from..].find(end).unwrap()]
}

/// The republished summary's HTML, unescaped as a feed reader does.
fn escaped_html(feed: &str) -> String {
    quick_xml::escape::unescape(between(feed, "<summary type=\"html\">", "</summary>")).unwrap().into_owned()
}

/// Serves each HTML fragment as the body of a page, `republished` and `upstream`.
async fn serve_pages(republished: String, upstream: String) -> String {
    let page = |body: String| {
        let html = format!("<!doctype html><html><head><title></title></head><body>{body}</body></html>");
        get(move || async move { ([("content-type", "text/html; charset=utf-8")], html) })
    };
    let app = Router::new().route("/republished", page(republished)).route("/upstream", page(upstream));
    format!("http://127.0.0.1:{}/", listen(app).await)
}

/// A FeedSync Atom feed with one item `item1` carrying `history` `sx:history` entries (by one
/// endpoint) and `conflicts` conflicting versions (by others).
fn feedsync(history: u32, conflicts: u32) -> String {
    let when = "2024-01-01T00:00:00Z";
    let version = |by: &str, updates: u32, inner: &str| {
        let hist: String = (1..=updates)
            .rev()
            .map(|s| format!("<sx:history sequence=\"{s}\" when=\"{when}\" by=\"{by}\"/>"))
            .collect();
        format!(
            "<entry><id>urn:f:1</id><title>by {by}</title><updated>{when}</updated>\
             <sx:sync id=\"item1\" updates=\"{updates}\">{hist}{inner}</sx:sync></entry>"
        )
    };
    let conflicts: String = (0..conflicts).map(|i| version(&format!("C{i}"), 1, "")).collect();
    let inner = if conflicts.is_empty() { String::new() } else { format!("<sx:conflicts>{conflicts}</sx:conflicts>") };
    format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<feed xmlns=\"http://www.w3.org/2005/Atom\" \
         xmlns:sx=\"http://feedsync.org/2007/feedsync\"><title>f</title><id>urn:f</id><updated>{when}</updated>{}</feed>",
        version("A", history, &inner)
    )
}

/// Defect 8: an item whose `sx:history` or `sx:conflicts` pass the source's caps
/// (`feed_max_history`, `feed_max_conflicts`) is refused with its feed, naming the cap, and
/// nothing of it is republished; the same item within the caps is taken.
#[tokio::test]
async fn feedsync_history_and_conflicts_past_the_caps_are_refused() {
    let body = Arc::new(Mutex::new(feedsync(6, 0)));
    let served = body.clone();
    let app = Router::new().route(
        "/f.atom",
        get(move || {
            let b = served.lock().unwrap().clone();
            async move { ([("content-type", "application/atom+xml")], b) }
        }),
    );
    let feed = format!("http://127.0.0.1:{}/f.atom", listen(app).await);
    let dir = tempfile::tempdir().unwrap();
    let caps = "[defaults]\nfeed_max_history = 5\nfeed_max_conflicts = 2\n";
    let s = Service::start(dir.path(), &config(free_port(), &feed, caps), &[], &[]).await;

    for (history, conflicts, cap) in [(6, 0, "more than 5 sx:history"), (2, 3, "more than 2")] {
        *body.lock().unwrap() = feedsync(history, conflicts);
        let what = format!("the source reports {cap:?}");
        s.wait_until(&what, LIMIT, |s| async move { last_error(s).await.contains(cap) }).await;
        let (_, _, republished) = s.get("sets/news/feed.atom").await;
        assert!(!republished.contains("urn:f:1"), "{republished}");
    }
    *body.lock().unwrap() = feedsync(5, 2);
    s.wait_until("the item within the caps is republished", LIMIT, |s| async move {
        s.get("sets/news/feed.atom").await.2.contains("urn:f:1")
    })
    .await;
}

/// The `last_error` of source `news`, or "".
async fn last_error(s: &Service) -> String {
    let status = s.json("api/status").await;
    let row = status["sources"].as_array().unwrap().iter().find(|r| r["id"] == "news").unwrap().clone();
    row["last_error"].as_str().unwrap_or("").to_owned()
}
