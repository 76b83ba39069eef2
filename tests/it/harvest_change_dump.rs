//! Incremental synchronization from a Change Dump, end to end on 127.0.0.1: a Source baselined
//! from its Resource List then publishes its changes (creates, updates, deletes) only as Change
//! Dump packages built in the test with `zipkit`. The store must equal the Source exactly, the
//! change log must hold exactly one event per applied change, re-polling the same dump must
//! apply nothing twice, a package already applied must not be downloaded again, and a broken
//! package must make the poll fall back to the Change List.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::support::digest::sha256_hex;
use crate::support::harness::{BASE_URL, Harness, config_text};
use crate::support::upstream::{Reply, Upstream};
use crate::support::zipkit;
use tributary::harvest::Summary;
use tributary::model::Change;
use tributary::naming::Naming;
const T0: &str = "2024-01-01T00:00:00Z";

/// What the Source serves, changed by the test between polls.
#[derive(Default)]
struct Site {
    /// Current bitstream of each live resource, by path.
    live: HashMap<String, Vec<u8>>,
    /// Change Dump packages: (path, zip, from, until).
    packages: Vec<(String, Vec<u8>, String, String)>,
    /// Change List entries: (path, change, datetime).
    changes: Vec<(String, &'static str, String)>,
    /// The Capability List offers no Change List (a Source publishing only Change Dumps).
    no_change_list: bool,
}

fn doc(root: &str, item: &str, md: &str, items: &str) -> Vec<u8> {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<{root} xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" \
         xmlns:rs=\"http://www.openarchives.org/rs/terms/\">\n<rs:md {md}/>\n{items}</{root}>\n"
    )
    .replace("ITEM", item)
    .into_bytes()
}

fn serve(site: &Mutex<Site>, base: &str, path: &str) -> Reply {
    let s = site.lock().unwrap();
    let xml = |b: Vec<u8>| Reply::xml(b);
    match path {
        "/capabilitylist.xml" => xml(doc(
            "urlset",
            "url",
            "capability=\"capabilitylist\"",
            &["resourcelist", "changelist", "changedump"]
                .iter()
                .filter(|c| !(s.no_change_list && **c == "changelist"))
                .map(|c| format!("<url><loc>{base}/{c}.xml</loc><rs:md capability=\"{c}\"/></url>\n"))
                .collect::<String>(),
        )),
        "/resourcelist.xml" => {
            let mut items: Vec<_> = s.live.iter().collect();
            items.sort();
            let items: String = items
                .iter()
                .map(|(p, d)| {
                    format!(
                        "<url><loc>{base}{p}</loc><rs:md hash=\"sha-256:{}\" length=\"{}\"/></url>\n",
                        sha256_hex(d),
                        d.len()
                    )
                })
                .collect();
            xml(doc("urlset", "url", &format!("capability=\"resourcelist\" at=\"{T0}\""), &items))
        }
        "/changelist.xml" => {
            let items: String = s
                .changes
                .iter()
                .map(|(p, c, d)| format!("<url><loc>{base}{p}</loc><rs:md change=\"{c}\" datetime=\"{d}\"/></url>\n"))
                .collect();
            xml(doc("urlset", "url", &format!("capability=\"changelist\" from=\"{T0}\""), &items))
        }
        "/changedump.xml" => {
            let items: String = s
                .packages
                .iter()
                .map(|(p, z, f, u)| {
                    format!(
                        "<url><loc>{base}{p}</loc><rs:md type=\"application/zip\" length=\"{}\" from=\"{f}\" until=\"{u}\"/></url>\n",
                        z.len()
                    )
                })
                .collect();
            xml(doc("urlset", "url", &format!("capability=\"changedump\" from=\"{T0}\""), &items))
        }
        p => {
            if let Some((_, z, _, _)) = s.packages.iter().find(|(q, ..)| q == p) {
                return Reply::ok(z.clone()).header("Content-Type", "application/zip");
            }
            match s.live.get(p) {
                Some(d) => Reply::ok(d.clone()),
                None => Reply::status(404),
            }
        }
    }
}

/// One Change Dump package: `(path, change, datetime)`; the bitstream of created/updated
/// entries is the resource's current content, which the test sets before.
fn package(site: &Site, base: &str, from: &str, until: &str, changes: &[(&str, &str, &str)]) -> Vec<u8> {
    let mut entries = Vec::new();
    let mut zip = Vec::new();
    for (i, (p, c, d)) in changes.iter().enumerate() {
        let loc = format!("{base}{p}");
        if *c == "deleted" {
            entries.push((loc, format!("change=\"deleted\" datetime=\"{d}\"")));
        } else {
            let data = &site.live[*p];
            let path = format!("/res/{i}.bin");
            entries.push((loc, format!("change=\"{c}\" datetime=\"{d}\" {}", zipkit::md_for(&path, data))));
            zip.push(zipkit::stored(&path[1..], data));
        }
    }
    let refs: Vec<(&str, String)> = entries.iter().map(|(l, m)| (l.as_str(), m.clone())).collect();
    let manifest = zipkit::manifest("changedump-manifest", &refs)
        .replace(&format!("from=\"{T0}\""), &format!("from=\"{from}\" until=\"{until}\""));
    let mut all = vec![zipkit::stored("manifest.xml", manifest.as_bytes())];
    all.extend(zip);
    zipkit::build(&all)
}

/// One source `a` following the Source's Capability List, with dumps on.
fn harness(base: &str) -> Harness {
    let defaults = "rate = \"unlimited\"\nconcurrency = 4\nmax_retries = 0\ntotal_timeout = \"10s\"\n";
    let url = format!("{base}/capabilitylist.xml");
    Harness::new(|dir| config_text(dir, "", defaults, &[("a", &url, "dumps = true")]))
}

/// One pass, which must end without a source error.
async fn pass(h: &Harness) -> Summary {
    let s = h.pass().await;
    assert!(s.sources[0].error.is_none(), "{s}");
    s
}

/// What the store must hold for `site`: URI -> sha-256.
fn expected(base: &str, site: &Site) -> HashMap<String, String> {
    let naming = Naming::new(&url::Url::parse(BASE_URL).unwrap());
    site.live.iter().map(|(p, d)| (naming.resource("a", &format!("{base}{p}")).unwrap(), sha256_hex(d))).collect()
}

/// Source `a`'s change log, as `(uri, change)`.
fn change_log(h: &Harness) -> Vec<(String, Change)> {
    h.store.events_after("a", 0).unwrap().map(Result::unwrap).map(|e| (e.uri, e.change)).collect()
}

/// Serves `site` on 127.0.0.1; returns the server and its base URL (no trailing slash), which
/// the documents it serves need to name their own URIs.
async fn start(site: &Arc<Mutex<Site>>) -> (Upstream, String) {
    let base_cell: Arc<Mutex<String>> = Arc::default();
    let (s2, b2) = (site.clone(), base_cell.clone());
    let up = Upstream::start(move |hit, _| {
        let base = b2.lock().unwrap().clone();
        serve(&s2, &base, &hit.path)
    })
    .await;
    let base = up.url("/").as_str().trim_end_matches('/').to_owned();
    *base_cell.lock().unwrap() = base.clone();
    (up, base)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_change_dump_packages_applies_each_change_once_and_falls_back_to_the_change_list() {
    let site = Arc::new(Mutex::new(Site::default()));
    let (up, base) = start(&site).await;
    {
        let mut s = site.lock().unwrap();
        for p in ["/a", "/b", "/c"] {
            s.live.insert(p.into(), format!("{p} v1").into_bytes());
        }
    }
    let h = harness(&base);
    pass(&h).await;
    assert_eq!(h.live("a"), expected(&base, &site.lock().unwrap()), "baseline");
    assert_eq!(change_log(&h).len(), 3);

    // Creates, updates and deletes, published only as a Change Dump package.
    {
        let mut s = site.lock().unwrap();
        s.live.insert("/d".into(), b"/d v1".to_vec());
        s.live.insert("/a".into(), b"/a v2".to_vec());
        s.live.remove("/b");
        s.live.insert("/c".into(), b"/c v2".to_vec());
        let changes = [
            ("/d", "created", "2024-01-01T01:00:00Z"),
            ("/a", "updated", "2024-01-01T02:00:00Z"),
            ("/b", "deleted", "2024-01-01T03:00:00Z"),
            ("/c", "updated", "2024-01-01T04:00:00Z"),
        ];
        let z = package(&s, &base, T0, "2024-01-01T05:00:00Z", &changes);
        s.packages.push(("/cd/1.zip".into(), z, T0.into(), "2024-01-01T05:00:00Z".into()));
    }
    let hits_d = up.count("/d");
    let second = pass(&h).await;
    assert_eq!(h.live("a"), expected(&base, &site.lock().unwrap()), "after the Change Dump: {second}");
    assert_eq!(up.count("/d"), hits_d, "bitstreams come from the package, not from the Source");
    let events = change_log(&h);
    assert_eq!(events.len(), 3 + 4, "one event per applied change: {events:?}");
    // Creations and updates in forward chronological order; the deletion last, applied when
    // the pass's deletions are judged at its end (docs/HARVEST.md, "Deletions you can trust").
    assert_eq!(
        events[3..].iter().map(|(_, c)| *c).collect::<Vec<_>>(),
        vec![Change::Created, Change::Updated, Change::Updated, Change::Deleted],
        "forward chronological order"
    );

    // The same dump again: nothing applied twice, the package not downloaded again.
    let downloads = up.count("/cd/1.zip");
    pass(&h).await;
    pass(&h).await;
    assert_eq!(change_log(&h).len(), 7, "re-polling applies nothing twice");
    assert_eq!(up.count("/cd/1.zip"), downloads, "an applied package is passed over");

    // A second package: one URI changed twice in it (applied once, as its last change).
    {
        let mut s = site.lock().unwrap();
        s.live.insert("/d".into(), b"/d v3".to_vec());
        s.live.remove("/c");
        let changes = [
            ("/d", "updated", "2024-01-01T06:00:00Z"),
            ("/c", "deleted", "2024-01-01T07:00:00Z"),
            ("/d", "updated", "2024-01-01T08:00:00Z"),
        ];
        let z = package(&s, &base, "2024-01-01T05:00:00Z", "2024-01-01T09:00:00Z", &changes);
        s.packages.push(("/cd/2.zip".into(), z, "2024-01-01T05:00:00Z".into(), "2024-01-01T09:00:00Z".into()));
    }
    pass(&h).await;
    assert_eq!(h.live("a"), expected(&base, &site.lock().unwrap()), "second package");
    assert_eq!(change_log(&h).len(), 9, "{:?}", change_log(&h));

    // A broken third package: the poll falls back to the Change List, which has the change.
    {
        let mut s = site.lock().unwrap();
        s.live.insert("/e".into(), b"/e v1".to_vec());
        s.changes.push(("/e".into(), "created", "2024-01-01T10:00:00Z".into()));
        s.packages.push((
            "/cd/3.zip".into(),
            b"not a zip".to_vec(),
            "2024-01-01T09:00:00Z".into(),
            "2024-01-01T11:00:00Z".into(),
        ));
    }
    pass(&h).await;
    assert_eq!(h.live("a"), expected(&base, &site.lock().unwrap()), "fell back to the Change List");
    assert_eq!(change_log(&h).len(), 10);
    pass(&h).await;
    assert_eq!(change_log(&h).len(), 10, "nothing applied twice after the fallback");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_with_change_dumps_but_no_change_list_is_followed_through_its_packages() {
    let site = Arc::new(Mutex::new(Site { no_change_list: true, ..Site::default() }));
    let (up, base) = start(&site).await;
    {
        let mut s = site.lock().unwrap();
        for p in ["/a", "/b"] {
            s.live.insert(p.into(), format!("{p} v1").into_bytes());
        }
    }
    let h = harness(&base);
    pass(&h).await;
    assert_eq!(change_log(&h).len(), 2, "baseline");
    {
        let mut s = site.lock().unwrap();
        s.live.insert("/d".into(), b"/d v1".to_vec());
        s.live.remove("/b");
        let changes = [("/d", "created", "2024-01-01T01:00:00Z"), ("/b", "deleted", "2024-01-01T02:00:00Z")];
        let z = package(&s, &base, T0, "2024-01-01T03:00:00Z", &changes);
        s.packages.push(("/cd/1.zip".into(), z, T0.into(), "2024-01-01T03:00:00Z".into()));
    }
    let second = pass(&h).await;
    assert_eq!(h.live("a"), expected(&base, &site.lock().unwrap()), "{second}");
    assert_eq!(up.count("/d"), 0, "the new resource came from the package, not from a Resource List diff");
    let kinds: Vec<Change> = change_log(&h)[2..].iter().map(|(_, c)| *c).collect();
    assert_eq!(kinds, vec![Change::Created, Change::Deleted]);
    pass(&h).await;
    assert_eq!(change_log(&h).len(), 4, "re-polling applies nothing twice");
}

/// A package that deletes more than `max_deletions` allows: its creations are applied, its
/// deletions held (stored, unpublished) until the operator applies them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_package_deleting_past_the_limit_has_its_deletions_held() {
    let site = Arc::new(Mutex::new(Site { no_change_list: true, ..Site::default() }));
    let (_up, base) = start(&site).await;
    let gone = ["/a", "/b", "/c", "/d"];
    {
        let mut s = site.lock().unwrap();
        for p in gone.iter().chain(&["/e", "/f"]) {
            s.live.insert((*p).into(), format!("{p} v1").into_bytes());
        }
    }
    let defaults = "rate = \"unlimited\"\nconcurrency = 4\nmax_retries = 0\ntotal_timeout = \"10s\"\n";
    let url = format!("{base}/capabilitylist.xml");
    let h = Harness::new(|dir| config_text(dir, "", defaults, &[("a", &url, "dumps = true\nmax_deletions = 2")]));
    pass(&h).await;
    let before = h.live("a");
    {
        let mut s = site.lock().unwrap();
        s.live.insert("/g".into(), b"/g v1".to_vec());
        let mut changes = vec![("/g", "created", "2024-01-01T01:00:00Z")];
        changes.extend(gone.iter().map(|p| (*p, "deleted", "2024-01-01T02:00:00Z")));
        let z = package(&s, &base, T0, "2024-01-01T03:00:00Z", &changes);
        s.packages.push(("/cd/1.zip".into(), z, T0.into(), "2024-01-01T03:00:00Z".into()));
        gone.iter().for_each(|p| drop(s.live.remove(*p)));
    }
    let second = pass(&h).await;
    assert_eq!((second.sources[0].held, second.sources[0].deleted), (4, 0), "{second}");
    let kinds: Vec<Change> = change_log(&h)[6..].iter().map(|(_, c)| *c).collect();
    assert_eq!(kinds, vec![Change::Created], "the creation is applied, no deletion published");
    let live = h.live("a");
    assert!(before.iter().all(|(uri, sha)| live.get(uri) == Some(sha)), "every held resource stays");
    let held = h.store.held_deletions(Some("a")).unwrap();
    assert_eq!(held.len(), 4);
    assert!(
        held.iter()
            .all(|d| d.uri.ends_with("/a") || d.uri.ends_with("/b") || d.uri.ends_with("/c") || d.uri.ends_with("/d"))
    );
    // Re-polling the same dump holds the same four, and publishes nothing.
    let third = pass(&h).await;
    assert_eq!(third.sources[0].held, 4, "{third}");
    assert_eq!(change_log(&h).len(), 7);
    assert_eq!(h.store.apply_held("a").unwrap(), 4);
    assert_eq!(h.live("a"), expected(&base, &site.lock().unwrap()));
    let kinds: Vec<Change> = change_log(&h)[7..].iter().map(|(_, c)| *c).collect();
    assert_eq!(kinds, vec![Change::Deleted; 4], "applied, the deletions are published once");
}
