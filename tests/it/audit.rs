//! Audit (spec §5.2) against a real Resource List served on 127.0.0.1 and a real store:
//! in sync, missing, extra, changed by hash/length/lastmod, and `fetch` re-hashing.

use crate::support::digest::sha256_hex;
use crate::support::fetcher::{fetcher, settings};
use crate::support::store::temp_store;
use crate::support::upstream::{Reply, Upstream};
use tributary::harvest::audit::{ChangedBy, audit_source};
use tributary::model::HashList;
use tributary::naming::Naming;
use tributary::store::{Batch, Expected, Listing, NewRecord, Store, Via};
use url::Url;

fn naming() -> Naming {
    Naming::new(&Url::parse("http://tributary.test/").unwrap())
}

const LASTMOD: &str = "2024-05-01T10:00:00Z";

/// Stores `data` as the record of `upstream` in source `src` (deleted afterwards if asked).
fn hold(store: &Store, upstream: &str, data: &[u8], deleted: bool) {
    let blob = store.put(data, &Expected::none()).unwrap();
    let uri = naming().resource("src", upstream).unwrap();
    let record = NewRecord {
        uri: uri.clone(),
        source: "src".into(),
        upstream: upstream.into(),
        sha256: blob.id,
        listing: Listing {
            origin: upstream.into(),
            declared: HashList::default(),
            length: None,
            media_type: None,
            lastmod: Some(LASTMOD.parse().unwrap()),
            via: Via::default(),
            links: vec![],
        },
    };
    store.apply(Batch::new().upsert(&["set"], record)).unwrap();
    if deleted {
        store.apply(Batch::new().delete(&["set"], &uri)).unwrap();
    }
}

/// A Resource List entry: `<loc>`, optional `<lastmod>` and `<rs:md>` attributes.
fn list(entries: &[(String, Option<&str>, String)]) -> String {
    let mut s = String::from(
        "<?xml version=\"1.0\"?>\n<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" \
         xmlns:rs=\"http://www.openarchives.org/rs/terms/\">\n<rs:ln rel=\"up\" href=\"/cl.xml\"/>\n\
         <rs:md capability=\"resourcelist\" at=\"2024-06-01T00:00:00Z\"/>\n",
    );
    for (loc, lastmod, md) in entries {
        let lm = lastmod.map(|l| format!("<lastmod>{l}</lastmod>")).unwrap_or_default();
        s.push_str(&format!("<url><loc>{loc}</loc>{lm}<rs:md {md}/></url>\n"));
    }
    s + "</urlset>\n"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_kind_of_difference_is_detected() {
    let u = |p: &str| format!("http://127.0.0.1:1{p}"); // never fetched without `fetch`
    let (_dir, store) = temp_store();
    hold(&store, &u("/same"), b"same", false);
    hold(&store, &u("/hash"), b"old", false);
    hold(&store, &u("/length"), b"four", false);
    hold(&store, &u("/lastmod"), b"lm", false);
    hold(&store, &u("/extra"), b"extra", false);
    hold(&store, &u("/gone"), b"gone", true); // deleted: neither extra nor held
    hold(&store, &u("/gone-listed"), b"gl", true); // deleted but listed again: missing
    let entries = vec![
        (u("/same"), Some(LASTMOD), format!("hash=\"sha-256:{}\" length=\"4\"", sha256_hex(b"same"))),
        (u("/hash"), None, format!("hash=\"sha-256:{}\" length=\"3\"", sha256_hex(b"new"))),
        (u("/length"), None, "length=\"5\"".to_owned()),
        (u("/lastmod"), Some("2024-05-02T10:00:00Z"), String::new()),
        (u("/missing"), None, "length=\"1\"".to_owned()),
        (u("/same"), Some(LASTMOD), String::new()), // listed twice: counted once
        (u("/gone-listed"), None, String::new()),
    ];
    let up = Upstream::routes(vec![("/rl.xml", vec![Reply::xml(list(&entries))])]).await;
    let r = audit_source(&settings(), &store, &fetcher(), &naming(), "src", &up.url("/rl.xml"), false).await.unwrap();
    assert!(!r.is_in_sync());
    assert_eq!(r.missing, vec![u("/gone-listed"), u("/missing")]);
    assert_eq!(r.extra, vec![u("/extra")]);
    let changed: Vec<(String, ChangedBy)> = r.changed.iter().map(|c| (c.uri.clone(), c.by)).collect();
    assert_eq!(
        changed,
        vec![(u("/hash"), ChangedBy::Hash), (u("/lastmod"), ChangedBy::Lastmod), (u("/length"), ChangedBy::Length)]
    );
    let c = &r.counts;
    assert_eq!((c.listed, c.held, c.in_sync, c.missing, c.extra, c.changed), (6, 5, 1, 2, 1, 3));
    assert_eq!(r.list_at.as_deref(), Some("2024-06-01T00:00:00Z"));
    let text = r.to_string();
    assert!(text.contains("NOT in sync") && text.contains(&format!("extra    {}", u("/extra"))), "{text}");
    let json: serde_json::Value = serde_json::to_value(&r).unwrap();
    assert_eq!(json["counts"]["changed"], 3);
    assert_eq!(json["changed"][0]["by"], "hash");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_matching_its_list_is_in_sync() {
    let (_dir, store) = temp_store();
    let u = |i: usize| format!("http://127.0.0.1:1/r/{i}");
    let entries: Vec<_> = (0..50)
        .map(|i| {
            let data = format!("resource {i}");
            hold(&store, &u(i), data.as_bytes(), false);
            (u(i), Some(LASTMOD), format!("hash=\"sha-256:{}\"", sha256_hex(data.as_bytes())))
        })
        .collect();
    // Another source's records are not this source's extras.
    let other = naming().resource("other", "http://127.0.0.1:1/x").unwrap();
    let blob = store.put(&b"x"[..], &Expected::none()).unwrap();
    let rec = NewRecord {
        uri: other,
        source: "other".into(),
        upstream: "http://127.0.0.1:1/x".into(),
        sha256: blob.id,
        listing: Listing {
            origin: "http://127.0.0.1:1/x".into(),
            declared: HashList::default(),
            length: None,
            media_type: None,
            lastmod: None,
            via: Via::default(),
            links: vec![],
        },
    };
    store.apply(Batch::new().upsert(&["set"], rec)).unwrap();
    let up = Upstream::routes(vec![("/rl.xml", vec![Reply::xml(list(&entries))])]).await;
    let r = audit_source(&settings(), &store, &fetcher(), &naming(), "src", &up.url("/rl.xml"), false).await.unwrap();
    assert!(r.is_in_sync(), "{r}");
    assert_eq!((r.counts.listed, r.counts.held, r.counts.in_sync), (50, 50, 50));
    assert!(r.to_string().starts_with("source src: in sync"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_rehashes_instead_of_trusting_the_list() {
    let up = Upstream::routes(vec![
        ("/r/ok", vec![Reply::ok("as stored")]),
        ("/r/drifted", vec![Reply::ok("upstream changed these bytes")]),
        ("/r/broken", vec![Reply::status(500)]),
    ])
    .await;
    let (_dir, store) = temp_store();
    let loc = |p: &str| up.url(p).to_string();
    for p in ["/r/ok", "/r/drifted", "/r/broken"] {
        hold(&store, &loc(p), b"as stored", false);
    }
    // The list agrees with the store for all three.
    let md = format!("hash=\"sha-256:{}\"", sha256_hex(b"as stored"));
    let entries: Vec<_> = ["/r/ok", "/r/drifted", "/r/broken"].iter().map(|p| (loc(p), None, md.clone())).collect();
    let rl = list(&entries);
    let up2 = Upstream::routes(vec![("/rl.xml", vec![Reply::xml(rl)])]).await;
    let (s, f, n) = (settings(), fetcher(), naming());
    let trusting = audit_source(&s, &store, &f, &n, "src", &up2.url("/rl.xml"), false).await.unwrap();
    assert!(trusting.is_in_sync(), "{trusting}");
    let r = audit_source(&s, &store, &f, &n, "src", &up2.url("/rl.xml"), true).await.unwrap();
    assert!(!r.is_in_sync() && r.fetched);
    assert_eq!(r.changed.len(), 1);
    assert_eq!((r.changed[0].uri.as_str(), r.changed[0].by), (loc("/r/drifted").as_str(), ChangedBy::Content));
    assert_eq!(r.fetch_errors.len(), 1);
    assert_eq!(r.fetch_errors[0].uri, loc("/r/broken"));
    assert_eq!(r.counts.in_sync, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_list_is_an_error_not_a_report() {
    let (_dir, store) = temp_store();
    hold(&store, "http://127.0.0.1:1/a", b"a", false);
    let truncated = &list(&[("http://127.0.0.1:1/a".into(), None, String::new())])[..200];
    let up = Upstream::routes(vec![("/rl.xml", vec![Reply::xml(truncated.to_owned())])]).await;
    let r = audit_source(&settings(), &store, &fetcher(), &naming(), "src", &up.url("/rl.xml"), false).await;
    assert!(r.is_err(), "{r:?}");
}
