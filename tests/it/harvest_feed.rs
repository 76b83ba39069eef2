//! Feeds as upstream sources, end to end on 127.0.0.1: a FeedSync Atom feed and a plain RSS
//! feed served by the test, harvested into a real store. Each item is a resource; an update
//! merged by FeedSync writes one change event, a tombstone deletes, reading the same feed
//! again changes nothing, a partial feed never deletes, and a feed that breaks a FeedSync
//! rule is refused whole.

use crate::support::feeds::{Site, atom as atom_with, entry, feed_source, serve, set};
use crate::support::harness::Harness;

/// A source `a` reading the feed at `url` (with `url` empty, `extra` names the feeds).
fn harness(url: &str, extra: &str) -> Harness {
    feed_source("a", url, extra)
}

/// A FeedSync Atom feed with `sx:sharing` `since`/`until`.
fn atom(self_url: &str, complete: Option<&str>, since_until: (&str, &str), entries: &[String]) -> String {
    atom_with(self_url, complete, Some(since_until), entries)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feedsync_items_merge_update_and_delete_once_each() {
    let site = Site::default();
    let up = serve(&site).await;
    let (partial, complete) = (up.url("/partial.atom").to_string(), up.url("/all.atom").to_string());
    let v1 = [
        entry("item1", "Buy groceries", 1, false, &[(1, "2026-01-01T09:00:00Z", "REO1750")]),
        entry("item2", "Call Bob", 1, false, &[(1, "2026-01-01T09:10:00Z", "REO1750")]),
        entry("item3", "Water plants", 1, false, &[(1, "2026-01-01T09:20:00Z", "REO1750")]),
    ];
    // The partial feed shows only the newest item; the complete one has all three.
    set(&site, "/partial.atom", atom(&partial, Some(&complete), ("1", "3"), &v1[2..]));
    set(&site, "/all.atom", atom(&complete, Some(&complete), ("1", "3"), &v1));
    let h = harness(&partial, "");

    let first = h.pass().await;
    assert!(first.sources[0].error.is_none(), "{first}");
    assert_eq!(up.count("/all.atom"), 1, "the first poll reads the complete feed");
    assert_eq!(h.live("a").len(), 3, "{:?}", h.live("a"));
    let uri = h.uri("a", &format!("{partial}?sx-item=item1"));
    let record = h.store.record(&uri).unwrap().expect("item1 is a record");
    assert_eq!(record.origin, "http://example.org/items/item1", "via points at the item's link");
    let body = String::from_utf8(h.content("a", &format!("{partial}?sx-item=item1")).unwrap()).unwrap();
    assert!(body.contains("sx:sync") && body.contains("item1") && body.contains("Buy groceries"), "{body}");

    // item1 updated by another endpoint, item2 deleted, item3 as before.
    let v2 = [
        entry(
            "item1",
            "Buy groceries and bread",
            2,
            false,
            &[(2, "2026-01-01T10:00:00Z", "JEO2000"), (1, "2026-01-01T09:00:00Z", "REO1750")],
        ),
        entry(
            "item2",
            "Call Bob",
            2,
            true,
            &[(2, "2026-01-01T10:05:00Z", "JEO2000"), (1, "2026-01-01T09:10:00Z", "REO1750")],
        ),
        v1[2].clone(),
    ];
    set(&site, "/partial.atom", atom(&partial, Some(&complete), ("2", "5"), &v2));
    let second = h.pass().await;
    assert!(second.sources[0].error.is_none(), "{second}");
    assert_eq!(up.count("/all.atom"), 1, "within the window: the partial feed is enough");
    assert_eq!(h.live("a").len(), 2);
    let body = String::from_utf8(h.content("a", &format!("{partial}?sx-item=item1")).unwrap()).unwrap();
    assert!(body.contains("and bread") && body.contains("JEO2000"), "{body}");

    // The same feed again, and an older version of item1 arriving late: nothing changes.
    let third = h.pass().await;
    assert!(third.sources[0].error.is_none(), "{third}");
    set(&site, "/partial.atom", atom(&partial, Some(&complete), ("2", "6"), &v1[..1]));
    let fourth = h.pass().await;
    assert!(fourth.sources[0].error.is_none(), "{fourth}");
    let mut changes: Vec<String> =
        h.events("a").into_iter().map(|(c, u)| format!("{c} {}", u.rsplit('=').next().unwrap())).collect();
    changes.sort();
    assert_eq!(changes, ["Created item1", "Created item2", "Created item3", "Deleted item2", "Updated item1"]);

    // The partial feed's window moved past the `until` kept (6): items were dropped unseen, so
    // the complete feed is read again, and what vanished from it (item3) is deleted.
    set(&site, "/all.atom", atom(&complete, Some(&complete), ("1", "9"), &v2[..2]));
    set(&site, "/partial.atom", atom(&partial, Some(&complete), ("7", "9"), &v2[..1]));
    let fifth = h.pass().await;
    assert!(fifth.sources[0].error.is_none(), "{fifth}");
    assert_eq!(up.count("/all.atom"), 2, "out of the window: the complete feed again");
    assert_eq!(h.live("a").len(), 1, "{:?}", h.live("a"));
    assert_eq!(h.events("a").len(), 6);
}

fn rss(items: &[(&str, &str)]) -> String {
    let items: String = items
        .iter()
        .map(|(guid, date)| {
            format!("<item><title>{guid}</title><guid>http://example.org/{guid}</guid><link>http://example.org/{guid}</link><pubDate>{date}</pubDate></item>")
        })
        .collect();
    format!(
        "<?xml version=\"1.0\"?><rss version=\"2.0\"><channel><title>News</title><link>http://example.org/</link><description>d</description>{items}</channel></rss>"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_rss_updates_by_date_and_a_partial_feed_never_deletes() {
    let site = Site::default();
    let up = serve(&site).await;
    let url = up.url("/news.rss").to_string();
    set(&site, "/news.rss", rss(&[("a1", "Mon, 05 Jan 2026 10:00:00 +0000"), ("a2", "Mon, 05 Jan 2026 11:00:00 GMT")]));
    let h = harness(&url, "");
    let first = h.pass().await;
    assert!(first.sources[0].error.is_none(), "{first}");
    assert_eq!(h.live("a").len(), 2);

    // a1 is gone from the feed (a partial feed: no deletion), a2 has a newer date.
    set(&site, "/news.rss", rss(&[("a2", "Mon, 05 Jan 2026 12:00:00 +0000")]));
    let second = h.pass().await;
    assert!(second.sources[0].error.is_none(), "{second}");
    assert_eq!(h.live("a").len(), 2, "a partial feed never deletes");
    let changes: Vec<String> = h.events("a").into_iter().map(|(c, _)| c).collect();
    assert_eq!(changes, ["Created", "Created", "Updated"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_breaking_feedsync_rules_is_refused_whole() {
    let site = Site::default();
    let up = serve(&site).await;
    let url = up.url("/bad.atom").to_string();
    let ok = entry("item1", "fine", 1, false, &[(1, "2026-01-01T09:00:00Z", "REO1750")]);
    let twin = entry("item1", "same id", 1, false, &[(1, "2026-01-01T09:05:00Z", "JEO2000")]);
    set(&site, "/bad.atom", atom(&url, None, ("1", "1"), &[ok.clone(), twin]));
    let h = harness(&url, "");
    let pass = h.pass().await;
    let error = pass.sources[0].error.clone().expect("a duplicate sync id refuses the feed");
    assert!(error.contains("item1"), "{error}");
    assert!(h.live("a").is_empty(), "nothing of the feed was applied");

    let fractional = ok.replace("2026-01-01T09:00:00Z\" by", "2026-01-01T09:00:00.5Z\" by");
    set(&site, "/bad.atom", atom(&url, None, ("1", "1"), &[fractional]));
    let pass = h.pass().await;
    let error = pass.sources[0].error.clone().expect("a fractional `when` refuses the feed");
    assert!(error.contains("item1"), "{error}");
    assert!(h.live("a").is_empty());
}

/// A FeedSync source of several feeds: the same item updated independently on two endpoints
/// (FeedSync's usage model, §1.3) reaches Tributary through both feeds. Whatever the order in
/// which the feeds are read, the item converges to the same state — one winner, the other
/// version kept as its conflict — and reading both again changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_of_an_item_from_two_feeds_converge_whatever_the_order() {
    let site = Site::default();
    let up = serve(&site).await;
    let (a, b) = (up.url("/a.atom").to_string(), up.url("/b.atom").to_string());
    let origin = (1, "2026-01-01T09:00:00Z", "ORIGIN");
    let on_a = [
        entry("item1", "milk, eggs and bread", 2, false, &[(2, "2026-01-01T10:00:00Z", "ENDA"), origin]),
        entry("item2", "only on A", 1, false, &[(1, "2026-01-01T09:30:00Z", "ENDA")]),
    ];
    let on_b = [
        entry("item1", "milk, eggs and rolls", 2, false, &[(2, "2026-01-01T10:05:00Z", "ENDB"), origin]),
        entry("item3", "only on B", 1, false, &[(1, "2026-01-01T09:40:00Z", "ENDB")]),
    ];
    set(&site, "/a.atom", atom(&a, None, ("1", "2"), &on_a));
    set(&site, "/b.atom", atom(&b, None, ("1", "2"), &on_b));
    let forward = harness("", &format!("feeds = [\"{a}\", \"{b}\"]"));
    let backward = harness("", &format!("feeds = [\"{b}\", \"{a}\"]"));
    for h in [&forward, &backward] {
        let pass = h.pass().await;
        assert!(pass.sources[0].error.is_none(), "{pass}");
        assert_eq!(h.live("a").len(), 3, "{:?}", h.live("a"));
    }
    let state = |h: &Harness| h.store.feed_item("a", "item1").unwrap().expect("item1's state");
    assert_eq!(state(&forward), state(&backward), "the same state whatever the order");
    let text = String::from_utf8(state(&forward)).unwrap();
    assert!(text.contains("rolls") && text.contains("sx:conflicts") && text.contains("bread"), "{text}");
    // The URIs differ (each source is named by its first feed); the items and bitstreams do not.
    let by_item = |h: &Harness| -> std::collections::BTreeMap<String, String> {
        h.live("a").into_iter().map(|(uri, sha)| (uri.rsplit('=').next().unwrap().to_owned(), sha)).collect()
    };
    assert_eq!(by_item(&forward), by_item(&backward), "the same bitstreams");

    for h in [&forward, &backward] {
        let before = h.events("a").len();
        let again = h.pass().await;
        assert!(again.sources[0].error.is_none(), "{again}");
        assert_eq!(h.events("a").len(), before, "reading both feeds again changes nothing");
    }
}

/// A feed over `max_document_bytes` is refused with the limit named, and nothing of it applied;
/// the same feed within the limit is read in full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_feed_is_refused_and_nothing_of_it_is_applied() {
    let site = Site::default();
    let up = serve(&site).await;
    let url = up.url("/big.atom").to_string();
    let entries: Vec<String> = (0..3000)
        .map(|i| entry(&format!("big{i}"), &"x".repeat(300), 1, false, &[(1, "2026-01-01T09:00:00Z", "REO1750")]))
        .collect();
    let body = atom(&url, None, ("1", "1"), &entries);
    assert!(body.len() > 1_000_000, "{} bytes", body.len());
    set(&site, "/big.atom", body);
    let h = harness(&url, "max_document_bytes = \"1MB\"");
    let pass = h.pass().await;
    let error = pass.sources[0].error.clone().expect("refused");
    assert!(error.contains("big.atom") && error.contains("1000000"), "{error}");
    assert!(h.live("a").is_empty(), "nothing half-applied");

    let h = harness(&url, "max_document_bytes = \"4MB\"");
    let pass = h.pass().await;
    assert!(pass.sources[0].error.is_none(), "{pass}");
    assert_eq!(h.live("a").len(), 3000);
}

/// `feed_content = "enclosure"` stores each item's enclosure, verified against its declared
/// length; an item without one, or whose enclosure is not the length it says, is counted as
/// failed and retried at the next poll. `feed_content = "link"` stores the linked page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enclosures_and_linked_pages_as_bitstreams() {
    let site = Site::default();
    let up = serve(&site).await;
    let url = up.url("/podcast.rss").to_string();
    let media = |i: usize| format!("episode {i} audio").repeat(50);
    for i in 0..2 {
        set(&site, &format!("/media/{i}.mp3"), media(i));
        set(&site, &format!("/page/{i}"), format!("<html>episode {i}</html>"));
    }
    let item = |i: usize, length: usize| {
        format!(
            "<item><title>ep {i}</title><guid>urn:ep:{i}</guid><link>{}</link>\
             <enclosure url=\"{}\" length=\"{length}\" type=\"audio/mpeg\"/></item>",
            up.url(&format!("/page/{i}")),
            up.url(&format!("/media/{i}.mp3"))
        )
    };
    let items =
        [item(0, media(0).len()), item(1, 7), "<item><title>no media</title><guid>urn:ep:x</guid></item>".into()];
    set(
        &site,
        "/podcast.rss",
        format!(
            "<?xml version=\"1.0\"?><rss version=\"2.0\"><channel><title>p</title>{}</channel></rss>",
            items.concat()
        ),
    );

    let h = harness(&url, "feed_content = \"enclosure\"");
    let pass = h.pass().await;
    let report = &pass.sources[0];
    assert!(report.error.is_none(), "{pass}");
    assert_eq!((report.fetched, report.failed), (1, 2), "{pass}");
    assert_eq!(h.content("a", &format!("{url}?sx-item=urn%3Aep%3A0")).unwrap(), media(0).into_bytes());
    let record = h.store.record(&h.uri("a", &format!("{url}?sx-item=urn%3Aep%3A0"))).unwrap().unwrap();
    assert_eq!(record.media_type.as_deref(), Some("audio/mpeg"));
    assert!(h.store.feed_item("a", "urn:ep:1").unwrap().is_none(), "a failed item keeps no state: retried next poll");
    // The Source fixes episode 1's enclosure; the feed itself is unchanged (same bytes).
    set(&site, "/media/1.mp3", "x".repeat(7));
    let again = h.pass().await;
    assert_eq!((again.sources[0].fetched, again.sources[0].failed, again.sources[0].unchanged), (1, 1, 1), "{again}");
    assert_eq!(h.content("a", &format!("{url}?sx-item=urn%3Aep%3A1")).unwrap(), b"xxxxxxx");

    let h = harness(&url, "feed_content = \"link\"");
    let pass = h.pass().await;
    assert_eq!((pass.sources[0].fetched, pass.sources[0].failed), (2, 1), "{pass}");
    assert_eq!(h.content("a", &format!("{url}?sx-item=urn%3Aep%3A1")).unwrap(), b"<html>episode 1</html>");
}
