//! Tributary as a Source, seen by a Destination over real HTTP on 127.0.0.1: every document
//! passes `check` with no errors or warnings, merged sets are the union of their sources,
//! Resource List Indexes page consistently while the store changes, closed Change Lists never
//! change, and `via` carries the origin (never an intermediate aggregator).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::support::publish::{Res, Running, bind, delete, doc, entries, spawn, start, t, upsert, walk};
use crate::support::store::temp_store;
use reqwest::StatusCode;
use reqwest::header::{CACHE_CONTROL, ETAG, IF_NONE_MATCH};
use tokio::net::TcpListener;
use tributary::model::{Change, DocumentKind, HashAlgorithm, HashList, RootFormat};
use tributary::naming::Naming;
use tributary::publish::{Limits, LinkPolicies, Rollover, SetConfig};
use tributary::store::{Store, Via};
use tributary::web::WebState;

fn sets() -> Vec<SetConfig> {
    SetConfig::all(["src-a", "src-b"], [SetConfig::new("all", ["src-a", "src-b"])])
}

fn limits(entries: usize, events: u64) -> Limits {
    Limits {
        resource_list_entries: entries,
        change_list: Rollover { max_events: events, period: None },
        ..Limits::default()
    }
}

/// Serves the one set `src-a`, with the default link policies and `limits`.
fn serve_src_a(listener: TcpListener, naming: &Naming, store: &Store, limits: Limits) -> Running {
    start(listener, naming.clone(), store, vec![SetConfig::source("src-a")], LinkPolicies::default(), limits)
}

fn res_a(i: u32) -> Res {
    Res::new("src-a", &format!("http://museum-a.test/obj/{i:02}"), format!("object {i} of museum a"))
}

fn res_b(i: u32) -> Res {
    Res::new("src-b", &format!("http://museum-b.test/item/{i:02}"), format!("item {i} of museum b"))
}

fn locs(entries: &[tributary::model::Entry]) -> BTreeSet<String> {
    entries.iter().map(|e| e.loc.clone()).collect()
}

#[tokio::test]
async fn every_document_passes_check_and_has_the_right_kind() {
    let (_dir, store) = temp_store();
    let (listener, naming) = bind().await;
    let a: Vec<Res> = (0..12).map(res_a).collect();
    let b: Vec<Res> = (0..8).map(res_b).collect();
    let ua = upsert(&store, &naming, &["src-a", "all"], &a);
    upsert(&store, &naming, &["src-b", "all"], &b);
    let mut changed = a[3].clone();
    changed.content = b"a new version".to_vec();
    upsert(&store, &naming, &["src-a", "all"], &[changed]);
    delete(&store, &["src-a", "all"], &ua[5..7]);
    let s = start(listener, naming.clone(), &store, sets(), LinkPolicies::default(), limits(10, 5));

    let docs = walk(&s.client, &naming).await;
    let kinds: BTreeMap<String, DocumentKind> =
        docs.iter().map(|(u, d)| (u.clone(), d.header.kind().unwrap())).collect();
    assert_eq!(kinds[&naming.source_description()], DocumentKind::SourceDescription);
    assert_eq!(kinds[&naming.resource_list("src-a")], DocumentKind::ResourceList, "10 live: one list");
    assert_eq!(kinds[&naming.resource_list("all")], DocumentKind::ResourceListIndex, "18 live: an index");
    for set in ["src-a", "src-b", "all"] {
        assert_eq!(kinds[&naming.capability_list(set)], DocumentKind::CapabilityList);
        assert_eq!(kinds[&naming.change_list(set)], DocumentKind::ChangeList, "the list the Capability List names");
        assert_eq!(kinds[&naming.change_list_index(set)], DocumentKind::ChangeListIndex);
        assert_eq!(kinds[&naming.change_list_part(set, 1)], DocumentKind::ChangeList);
    }
    // 12 + 1 + 2 = 15 events in src-a with lists of 5: three closed, one (empty) open.
    let (_, idx) = doc(&s.client, &naming.change_list_index("src-a")).await;
    assert_eq!(idx.entries.len(), 4);
    assert!(idx.entries[..3].iter().all(|e| e.md.as_ref().unwrap().until.is_some()));
    assert!(idx.entries[3].md.as_ref().unwrap().until.is_none());
    // Every Resource List entry: Tributary's URI, lastmod, md5 + sha-256, length, type, via.
    for e in entries(&s.client, &naming.resource_list("all")).await {
        assert!(e.loc.starts_with(&format!("{}r/", naming.base())), "{}", e.loc);
        let md = e.md.as_ref().unwrap();
        let hash = md.hash.as_ref().unwrap();
        assert!(hash.get(&HashAlgorithm::Md5).is_some() && hash.get(&HashAlgorithm::Sha256).is_some());
        assert!(md.length.is_some() && md.media_type.is_some() && e.lastmod.is_some());
        assert_eq!(e.links.iter().filter(|l| l.rel == "via").count(), 1);
    }
    // The Source Description links each Capability List to its set page, which is served.
    let (_, sd) = doc(&s.client, &naming.source_description()).await;
    assert_eq!(sd.entries.len(), 3);
    for e in &sd.entries {
        let page = &e.link("describedby").unwrap().href;
        let resp = s.client.get(page).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    }
}

#[tokio::test]
async fn merged_set_is_the_union_of_its_sources() {
    let (_dir, store) = temp_store();
    let (listener, naming) = bind().await;
    let ua = upsert(&store, &naming, &["src-a", "all"], &(0..9).map(res_a).collect::<Vec<_>>());
    upsert(&store, &naming, &["src-b", "all"], &(0..7).map(res_b).collect::<Vec<_>>());
    delete(&store, &["src-a", "all"], &ua[..2]);
    upsert(&store, &naming, &["src-b", "all"], &[res_b(20)]);
    let s = start(listener, naming.clone(), &store, sets(), LinkPolicies::default(), limits(5, 4));
    let rl = |set: &'static str| {
        let (c, n) = (s.client.clone(), naming.clone());
        async move { entries(&c, &n.resource_list(set)).await }
    };
    let (a, b, all) = (locs(&rl("src-a").await), locs(&rl("src-b").await), rl("all").await);
    assert_eq!(a.len(), 7);
    assert_eq!(b.len(), 8);
    assert_eq!(all.len(), 15, "no duplicates across parts");
    assert_eq!(locs(&all), a.union(&b).cloned().collect());
    let changes = |set: &'static str| {
        let (c, n) = (s.client.clone(), naming.clone());
        async move {
            entries(&c, &n.change_list_index(set))
                .await
                .into_iter()
                .map(|e| (e.loc.clone(), e.md.unwrap().change.unwrap()))
                .collect::<Vec<_>>()
        }
    };
    let (ca, cb, call) = (changes("src-a").await, changes("src-b").await, changes("all").await);
    let mut union: Vec<_> = ca.iter().chain(&cb).cloned().collect();
    let mut merged = call.clone();
    union.sort();
    merged.sort();
    assert_eq!(merged, union, "the merged Change Lists hold exactly the sources' changes");
    assert_eq!(call.iter().filter(|(_, c)| *c == Change::Deleted).count(), 2);
}

#[tokio::test]
async fn resource_list_index_parts_stay_consistent_while_the_store_changes() {
    let (_dir, store) = temp_store();
    let (listener, naming) = bind().await;
    let uris = upsert(&store, &naming, &["src-a"], &(0..30).map(res_a).collect::<Vec<_>>());
    let s = serve_src_a(listener, &naming, &store, limits(10, 1000));
    let (_, index) = doc(&s.client, &naming.resource_list("src-a")).await;
    assert_eq!(index.header.format, Some(RootFormat::SitemapIndex));
    let parts: Vec<String> = index.entries.iter().map(|e| e.loc.clone()).collect();
    assert_eq!(parts.len(), 5, "30 entries in parts of 7 (three quarters of 10)");
    for p in &parts {
        let (_, d) = doc(&s.client, p).await;
        assert_eq!(d.header.link("index").unwrap().href, naming.resource_list("src-a"));
        assert_eq!(d.header.link("up").unwrap().href, naming.capability_list("src-a"));
        assert!(d.header.md.as_ref().unwrap().at.is_some());
    }

    // A Destination reads part 1, then the harvester writes into the ranges of parts 1 and 4
    // and deletes from part 3, then the Destination reads the rest of the old index.
    let first = locs(&doc(&s.client, &parts[0]).await.1.entries);
    let added: Vec<Res> =
        (0..6).map(|i| Res::new("src-a", &format!("http://museum-a.test/obj/03x{i}"), "new")).collect();
    let added_late: Vec<Res> =
        (0..2).map(|i| Res::new("src-a", &format!("http://museum-a.test/obj/22x{i}"), "new")).collect();
    upsert(&store, &naming, &["src-a"], &added);
    upsert(&store, &naming, &["src-a"], &added_late);
    delete(&store, &["src-a"], &uris[15..17]);
    let mut seen: Vec<String> = first.iter().cloned().collect();
    for p in &parts[1..] {
        seen.extend(doc(&s.client, p).await.1.entries.into_iter().map(|e| e.loc));
    }
    let unique: BTreeSet<String> = seen.iter().cloned().collect();
    assert_eq!(unique.len(), seen.len(), "no resource in two parts");
    let unchanged: BTreeSet<String> =
        uris.iter().enumerate().filter(|(i, _)| !(15..17).contains(i)).map(|(_, u)| u.clone()).collect();
    assert!(unchanged.is_subset(&unique), "every resource live throughout the walk was listed");

    // The next index splits the overgrown part under new numbers; the old number still answers
    // with its old range, and the new index's parts are all within the limit.
    let (_, again) = doc(&s.client, &naming.resource_list("src-a")).await;
    let new_parts: Vec<String> = again.entries.iter().map(|e| e.loc.clone()).collect();
    assert_eq!(new_parts.len(), 6, "part 1 grew to 13 and was replaced by two");
    assert!(!new_parts.contains(&parts[0]));
    assert_eq!(new_parts[2..], parts[1..], "other parts keep their numbers");
    let old_first = locs(&doc(&s.client, &parts[0]).await.1.entries);
    assert_eq!(old_first.len(), 13, "the retired part still serves its whole range");
    let mut listed = Vec::new();
    for p in &new_parts {
        let e = doc(&s.client, p).await.1.entries;
        assert!(e.len() <= 10, "{p}: {}", e.len());
        listed.extend(e.into_iter().map(|e| e.loc));
    }
    let live: BTreeSet<String> =
        store.records().map(|r| r.unwrap()).filter(|r| !r.is_deleted()).map(|r| r.uri).collect();
    assert_eq!(listed.len(), live.len());
    assert_eq!(listed.into_iter().collect::<BTreeSet<_>>(), live);
    let missing = s.client.get(naming.resource_list_part("src-a", 99)).send().await.unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn closed_change_lists_never_change_and_are_cached_for_a_year() {
    let (_dir, store) = temp_store();
    let (listener, naming) = bind().await;
    for i in 0..10 {
        upsert(&store, &naming, &["src-a"], &[res_a(i)]);
    }
    let lim = limits(50, 3);
    let s = serve_src_a(listener, &naming, &store, lim);
    let (_, idx) = doc(&s.client, &naming.change_list_index("src-a")).await;
    assert_eq!(idx.entries.len(), 4, "10 events in lists of 3: three closed, one open");
    let mut closed = Vec::new();
    for e in &idx.entries[..3] {
        let resp = s.client.get(&e.loc).send().await.unwrap();
        assert_eq!(resp.headers()[CACHE_CONTROL], "public, max-age=31536000, immutable");
        let etag = resp.headers()[ETAG].clone();
        let bytes = resp.bytes().await.unwrap();
        let again = s.client.get(&e.loc).header(IF_NONE_MATCH, etag.clone()).send().await.unwrap();
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        closed.push((e.loc.clone(), bytes));
    }
    let (_, open) = doc(&s.client, &idx.entries[3].loc).await;
    assert_eq!(open.entries.len(), 1);
    assert!(open.header.md.as_ref().unwrap().until.is_none());

    for i in 10..15 {
        let mut r = res_a(i % 4);
        r.content = format!("version {i}").into_bytes();
        upsert(&store, &naming, &["src-a"], &[r]);
    }
    // A second server over the same store (fresh caches, as after a restart) agrees.
    let (listener2, _) = bind().await;
    let state2 =
        WebState::new(store.clone(), naming.clone(), vec![SetConfig::source("src-a")], LinkPolicies::default(), lim)
            .unwrap();
    let s2 = spawn(listener2, naming.clone(), state2);
    let other = s2.state.publisher().clone();
    for (url, bytes) in &closed {
        let now = s.client.get(url).send().await.unwrap().bytes().await.unwrap();
        assert_eq!(&now, bytes, "{url} changed");
        let n: u64 = url.rsplit('-').next().unwrap().trim_end_matches(".xml").parse().unwrap();
        let p = other.clone();
        let fresh = tokio::task::spawn_blocking(move || p.change_list("src-a", n).unwrap().unwrap()).await.unwrap();
        match fresh {
            tributary::publish::ChangeListDoc::Closed(b) => assert_eq!(&b[..], &bytes[..]),
            other => panic!("{url} is no longer closed: {other:?}"),
        }
    }
    let (_, idx) = doc(&s.client, &naming.change_list_index("src-a")).await;
    assert_eq!(idx.entries.len(), 6, "15 events: five closed lists and an empty open one");
    for pair in idx.entries.windows(2) {
        let (a, b) = (pair[0].md.as_ref().unwrap(), pair[1].md.as_ref().unwrap());
        assert_eq!(a.until, b.from, "consecutive lists meet");
    }
    let mut all = Vec::new();
    for e in &idx.entries {
        all.extend(doc(&s.client, &e.loc).await.1.entries);
    }
    assert_eq!(all.len(), 15, "every event exactly once");
    let datetimes: Vec<_> = all.iter().map(|e| e.md.as_ref().unwrap().datetime.unwrap()).collect();
    assert!(datetimes.windows(2).all(|w| w[0] <= w[1]), "forward chronological order");
}

#[tokio::test]
async fn period_rollover_closes_lists_at_period_ends_even_without_later_events() {
    let (_dir, store) = temp_store();
    let (listener, naming) = bind().await;
    let lim = Limits {
        resource_list_entries: 50,
        change_list: Rollover { max_events: 100, period: Some(Duration::from_secs(1)) },
        ..Limits::default()
    };
    let s = serve_src_a(listener, &naming, &store, lim);
    upsert(&store, &naming, &["src-a"], &[res_a(1)]);
    let first = store.events_after("src-a", 0).unwrap().next().unwrap().unwrap().datetime;
    // Wait into the next second (bounded), then write a second event.
    for _ in 0..30 {
        if tributary::model::W3cDateTime::now() > first {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    upsert(&store, &naming, &["src-a"], &[res_a(2)]);
    let second = store.events_after("src-a", 1).unwrap().next().unwrap().unwrap().datetime;
    assert!(second > first);
    let (_, idx) = doc(&s.client, &naming.change_list_index("src-a")).await;
    assert!(idx.entries.len() >= 2);
    let list1 = idx.entries[0].md.as_ref().unwrap();
    assert!(
        list1.from.unwrap() <= first,
        "list 1 starts when the publisher first saw the set empty, before its first event"
    );
    assert_eq!(list1.until.unwrap().unix_timestamp(), first.unix_timestamp() + 1, "closed at the period's end");
    // With no further event, the second list closes once its period is over.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let (_, idx) = doc(&s.client, &naming.change_list_index("src-a")).await;
    assert_eq!(idx.entries.len(), 3);
    let list2 = idx.entries[1].md.as_ref().unwrap();
    assert_eq!(list2.until.unwrap().unix_timestamp(), second.unix_timestamp() + 1);
    assert_eq!(idx.entries[2].md.as_ref().unwrap().from, list2.until);
    assert_eq!(doc(&s.client, &idx.entries[1].loc).await.1.entries.len(), 1);
    assert!(doc(&s.client, &idx.entries[2].loc).await.1.entries.is_empty());
}

/// Example 32 and 33: Tributary harvested `res1.html` from an aggregator, whose own `via`
/// named the original Source; Tributary's lists must name the original, with its attributes.
#[tokio::test]
async fn via_names_the_origin_with_its_attributes_never_the_intermediate() {
    let (_dir, store) = temp_store();
    let (listener, naming) = bind().await;
    let mut r = Res::new("agg1", "http://aggregator1.example.com/res1.html", "<html>res1</html>");
    r.origin = "http://original.example.com/res1.html".into();
    r.media_type = Some("text/html".into());
    r.via = Via {
        modified: Some(t("2013-01-03T07:00:00Z")),
        hash: HashList::parse("md5:1584abdf8ebdc9802ac0c6a7402c03b6").unwrap().0,
        length: Some(8876),
        media_type: Some("text/html".into()),
    };
    let uri = upsert(&store, &naming, &["agg1"], &[r]).remove(0);
    let s = start(
        listener,
        naming.clone(),
        &store,
        vec![SetConfig::source("agg1")],
        LinkPolicies::default(),
        Limits::default(),
    );
    for list in [naming.resource_list("agg1"), naming.change_list_part("agg1", 1)] {
        let (bytes, d) = doc(&s.client, &list).await;
        // Tributary's own URI embeds the upstream's path; nothing else may name the intermediate.
        let text = String::from_utf8_lossy(&bytes).replace(&uri, "");
        assert!(!text.contains("aggregator1.example.com"), "{list} names the intermediate");
        let e = &d.entries[0];
        assert_eq!(e.loc, uri);
        let via = e.link("via").unwrap();
        assert_eq!(via.href, "http://original.example.com/res1.html");
        assert_eq!(via.modified, Some(t("2013-01-03T07:00:00Z")));
        assert_eq!(via.hash.as_ref().unwrap().to_string(), "md5:1584abdf8ebdc9802ac0c6a7402c03b6");
        assert_eq!(via.length, Some(8876));
        assert_eq!(via.media_type.as_deref(), Some("text/html"));
        let md = e.md.as_ref().unwrap();
        assert_eq!(md.length, Some(17), "Tributary's copy, not the origin's declared length");
        assert_ne!(e.lastmod, via.modified, "lastmod is Tributary's time (§14.8)");
    }
}

#[tokio::test]
async fn unknown_sets_and_documents_are_404() {
    let (_dir, store) = temp_store();
    let (listener, naming) = bind().await;
    let s = start(listener, naming.clone(), &store, sets(), LinkPolicies::default(), Limits::default());
    for url in [
        naming.capability_list("nope"),
        naming.resource_list("nope"),
        naming.change_list_part("src-a", 2),
        format!("{}sets/src-a/other.xml", naming.base()),
        format!("{}elsewhere", naming.base()),
    ] {
        let resp = s.client.get(&url).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{url}");
        assert_eq!(resp.headers()["x-content-type-options"], "nosniff");
    }
    // An empty set still publishes valid, empty lists.
    let _ = walk(&s.client, &naming).await;
    let robots = s.client.get(format!("{}robots.txt", naming.base())).send().await.unwrap().text().await.unwrap();
    for set in ["src-a", "src-b", "all"] {
        assert!(robots.contains(&format!("Sitemap: {}", naming.resource_list(set))), "{robots}");
    }
    assert!(robots.contains("Disallow: /provenance"), "{robots}");
    let post = s.client.post(naming.source_description()).send().await.unwrap();
    assert_eq!(post.status(), StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn closed_change_lists_are_served_gzip_compressed_when_accepted() {
    let (_dir, store) = temp_store();
    let (listener, naming) = bind().await;
    for i in 0..6 {
        upsert(&store, &naming, &["src-a"], &[res_a(i)]);
    }
    let _server = serve_src_a(listener, &naming, &store, limits(50, 3));
    let plain = reqwest::Client::builder().no_gzip().build().unwrap();
    let url = naming.change_list_part("src-a", 1);
    let identity = plain.get(&url).send().await.unwrap();
    assert!(identity.headers().get("content-encoding").is_none());
    let identity_tag = identity.headers()[ETAG].clone();
    let identity = identity.bytes().await.unwrap();
    let gz = plain.get(&url).header("accept-encoding", "gzip").send().await.unwrap();
    assert_eq!(gz.headers()["content-encoding"], "gzip");
    assert_eq!(gz.headers()["vary"], "accept-encoding");
    assert_ne!(gz.headers()[ETAG], identity_tag, "each encoding has its own tag");
    let compressed = gz.bytes().await.unwrap();
    let mut inflated = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&compressed[..]), &mut inflated).unwrap();
    assert_eq!(inflated, identity);
    // The open list is never compressed ahead of time (it changes).
    let open = plain.get(naming.change_list_part("src-a", 3)).header("accept-encoding", "gzip").send().await.unwrap();
    assert_eq!(open.status(), StatusCode::OK);
    assert!(open.headers().get("content-encoding").is_none());
}

#[tokio::test]
async fn part_numbers_keep_their_ranges_across_a_restart() {
    let (_dir, store) = temp_store();
    let (listener, naming) = bind().await;
    let addr = listener.local_addr().unwrap();
    upsert(&store, &naming, &["src-a"], &(0..30).map(res_a).collect::<Vec<_>>());
    let serve = |listener| serve_src_a(listener, &naming, &store, limits(10, 1000));
    let index = |s: &Running| {
        let (client, url) = (s.client.clone(), naming.resource_list("src-a"));
        async move { doc(&client, &url).await.1.entries.into_iter().map(|e| e.loc).collect::<Vec<_>>() }
    };
    let s = serve(listener);
    let parts = index(&s).await;
    // Part 1 overflows and is replaced by two new numbers.
    let added: Vec<Res> =
        (0..6).map(|i| Res::new("src-a", &format!("http://museum-a.test/obj/03x{i}"), "new")).collect();
    upsert(&store, &naming, &["src-a"], &added);
    let before = index(&s).await;
    assert_eq!(before.len(), 6);
    drop(s);

    // A new process over the same store: same index, the retired number keeps its old range.
    let mut listener = None;
    for _ in 0..100 {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => {
                listener = Some(l);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    let s = serve(listener.expect("the old server released its port within 5 s"));
    assert_eq!(index(&s).await, before, "the saved partition is served after the restart");
    assert_eq!(locs(&doc(&s.client, &parts[0]).await.1.entries).len(), 13, "retired part 1 keeps its range");

    // Numbers given out before the restart are never reused for another range.
    let more: Vec<Res> =
        (0..6).map(|i| Res::new("src-a", &format!("http://museum-a.test/obj/25x{i}"), "new")).collect();
    upsert(&store, &naming, &["src-a"], &more);
    let after = index(&s).await;
    let old: BTreeSet<&String> = parts.iter().chain(&before).collect();
    let fresh: Vec<&String> = after.iter().filter(|p| !before.contains(p)).collect();
    assert_eq!(fresh.len(), 2, "the overgrown last part is replaced by two: {after:?}");
    assert!(fresh.iter().all(|p| !old.contains(p)), "new parts get new numbers: {after:?}");
}
