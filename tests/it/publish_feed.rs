//! Each set as a FeedSync Atom feed, served on 127.0.0.1: `feed.atom` (recent changes, one
//! entry per resource) and the paged complete feed. The feeds are read back with Tributary's
//! own reader (every entry with its `sx:sync`: the Tributary URI as id, an update count, a
//! tombstone for a deletion, history by the aggregator's endpoint id), validated by Python
//! `feedparser` (no bozo), followed page by page through RFC 5005 links, and harvested by a
//! second Tributary as a feed source, which republishes the items' FeedSync state unchanged.

use std::collections::BTreeSet;

use crate::support::feeds::feed_source;
use crate::support::publish::{Res, bind, delete, start, upsert};
use crate::support::store::temp_store;
use crate::support::tools;
use tributary::model::feed::{Feed, RelatedKind, read_feed};
use tributary::publish::{Limits, LinkPolicies, SetConfig};

async fn get_feed(client: &reqwest::Client, url: &str) -> (Vec<u8>, Feed) {
    let resp = client.get(url).send().await.unwrap();
    assert_eq!(resp.status(), 200, "{url}");
    let ct = resp.headers().get("content-type").unwrap().to_str().unwrap().to_owned();
    assert_eq!(ct, "application/atom+xml", "{url}");
    let body = resp.bytes().await.unwrap().to_vec();
    let feed = read_feed(&body[..], url, &Default::default()).unwrap_or_else(|e| panic!("{url}: {e}"));
    (body, feed)
}

fn resources(n: usize) -> Vec<Res> {
    (0..n).map(|i| Res::new("s", &format!("http://origin.example.org/item/{i}"), format!("content {i}"))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_is_a_feedsync_feed_with_updates_and_tombstones() {
    let (_dir, store) = temp_store();
    let (listener, naming) = bind().await;
    let mut res = resources(3);
    let uris = upsert(&store, &naming, &["s"], &res);
    res[1].content = b"content 1, second version".to_vec();
    upsert(&store, &naming, &["s"], &res[1..2]);
    delete(&store, &["s"], &uris[2..3]);
    let a = start(
        listener,
        naming.clone(),
        &store,
        vec![SetConfig::source("s")],
        LinkPolicies::default(),
        Limits::default(),
    );

    let (body, feed) = get_feed(&a.client, &naming.set_feed("s")).await;
    assert_eq!(feed.items.len(), 3, "one entry per resource, not per event");
    let by_id = |id: &str| feed.items.iter().find(|i| i.sync.as_ref().unwrap().id == id).unwrap();
    let (first, second, third) = (by_id(&uris[0]), by_id(&uris[1]), by_id(&uris[2]));
    assert_eq!(feed.items[0].sync.as_ref().unwrap().id, uris[2], "newest change first");
    assert_eq!(first.sync.as_ref().unwrap().updates, 1);
    assert_eq!(second.sync.as_ref().unwrap().updates, 2, "created, then updated");
    assert!(third.is_deleted(), "a deleted resource is a tombstone");
    assert_eq!(second.link.as_deref(), Some(uris[1].as_str()));
    let history = &second.sync.as_ref().unwrap().history;
    assert_eq!(history[0].by.as_deref(), Some("tributary:127.0.0.1"), "{history:?}");
    assert!(history[0].when.is_some());
    let sharing = feed.sharing.as_ref().expect("sx:sharing");
    let complete = sharing.related.iter().find(|r| r.kind == RelatedKind::Complete).expect("a complete feed");
    assert_eq!(complete.link, naming.set_complete_feed("s", None));
    assert!(sharing.since.as_deref() <= sharing.until.as_deref(), "{sharing:?}");

    let (_, all) = get_feed(&a.client, &complete.link).await;
    let ids: BTreeSet<String> = all.items.iter().map(|i| i.sync.as_ref().unwrap().id.clone()).collect();
    assert_eq!(ids, uris.iter().cloned().collect(), "the complete feed has every resource, tombstones included");

    feedparser_reads(&body, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_complete_feed_of_a_large_set_is_paged_by_rfc_5005_links() {
    let (_dir, store) = temp_store();
    let (listener, naming) = bind().await;
    let uris = upsert(&store, &naming, &["s"], &resources(7));
    let limits = Limits { resource_list_entries: 3, ..Limits::default() };
    let a = start(listener, naming.clone(), &store, vec![SetConfig::source("s")], LinkPolicies::default(), limits);

    let mut seen = BTreeSet::new();
    let mut next = Some(naming.set_complete_feed("s", None));
    let mut pages = 0;
    // Bounded: at most as many pages as resources.
    while let Some(url) = next.take() {
        pages += 1;
        assert!(pages <= 7, "paging does not end");
        let (_, page) = get_feed(&a.client, &url).await;
        assert!(page.items.len() <= 3, "{url}: {} entries", page.items.len());
        seen.extend(page.items.iter().map(|i| i.sync.as_ref().unwrap().id.clone()));
        let link = |rel: &str| page.links.iter().find(|l| l.rel == rel).map(|l| l.href.clone());
        assert_eq!(link("first").as_deref(), Some(naming.set_complete_feed("s", None).as_str()));
        next = link("next");
    }
    assert!(pages >= 3, "{pages} pages");
    assert_eq!(seen, uris.into_iter().collect());
    let missing = a.client.get(naming.set_complete_feed("s", Some(99))).send().await.unwrap();
    assert_eq!(missing.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_tributary_follows_the_feed_and_republishes_its_sync_state() {
    let (_dir, store) = temp_store();
    let (listener, naming) = bind().await;
    let mut res = resources(3);
    let uris = upsert(&store, &naming, &["s"], &res);
    res[0].content = b"content 0, second version".to_vec();
    upsert(&store, &naming, &["s"], &res[..1]);
    delete(&store, &["s"], &uris[1..2]);
    let a = start(
        listener,
        naming.clone(),
        &store,
        vec![SetConfig::source("s")],
        LinkPolicies::default(),
        Limits::default(),
    );
    let (_, a_feed) = get_feed(&a.client, &naming.set_feed("s")).await;

    let url = naming.set_feed("s");
    let b = feed_source("from-a", &url, "");
    let pass = b.pass().await;
    assert!(pass.sources[0].error.is_none(), "{pass}");
    assert_eq!(b.live("from-a").len(), 2, "the tombstone is not a live record");

    // B's own feed carries A's items with A's sync state, and names A's feed as aggregated.
    let (b_listener, b_naming) = bind().await;
    let b_state = tributary::web::WebState::from_config(&b.config, &b.store, &b.fetcher).unwrap();
    let b_server = crate::support::publish::spawn(b_listener, b_naming.clone(), b_state);
    let b_feed_url = format!("{}sets/from-a/feed.atom", b_naming.base());
    let resp = b_server.client.get(&b_feed_url).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let bytes = resp.bytes().await.unwrap();
    let b_feed = read_feed(&bytes[..], &b_feed_url, &Default::default()).unwrap();
    let a_sync: BTreeSet<String> = a_feed.items.iter().map(|i| format!("{:?}", i.sync)).collect();
    let b_sync: BTreeSet<String> = b_feed.items.iter().map(|i| format!("{:?}", i.sync)).collect();
    assert!(
        b_sync.is_subset(&a_sync) && !b_sync.is_empty(),
        "B republishes A's FeedSync state as it is:\n{b_sync:?}\n{a_sync:?}"
    );
    let aggregated: Vec<&str> = b_feed
        .sharing
        .as_ref()
        .unwrap()
        .related
        .iter()
        .filter(|r| r.kind == RelatedKind::Aggregated)
        .map(|r| r.link.as_str())
        .collect();
    assert_eq!(aggregated, [url.as_str()]);
}

/// Python `feedparser` parses `body` without a bozo error and finds `entries` entries.
async fn feedparser_reads(body: &[u8], entries: usize) {
    let Some(python) = tools::feedparser_python("publish_feed") else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("feed.atom");
    std::fs::write(&path, body).unwrap();
    let script = "import feedparser, json, sys\nd = feedparser.parse(sys.argv[1])\nprint(json.dumps({'bozo': bool(d.bozo), 'n': len(d.entries), 'why': str(d.get('bozo_exception', ''))}))";
    let out = python.command().args(["-c", script]).arg(&path).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["bozo"], false, "feedparser: {v}");
    assert_eq!(v["n"], entries, "feedparser: {v}");
}
