//! Inherited links as Destinations see them in the Resource Lists: each relation of the
//! default policy kept or dropped, `href`s rewritten to Tributary's URI exactly when the target
//! is republished in the same set, per-source overrides, and a policy change taking effect
//! without re-harvesting. Also end to end from a simulated Source that emits such links.

use std::collections::BTreeMap;

use crate::support::publish::{Res, Running, bind, entries, harvest, start, upsert};
use crate::support::sim;
use crate::support::store::temp_store;
use tributary::model::{Entry, Link, ReadOptions, read_document};
use tributary::naming::Naming;
use tributary::publish::links::{DEFAULT_DROP, DEFAULT_KEEP};
use tributary::publish::{Limits, LinkPolicies, LinkPolicy, ResourceListDoc, SetConfig};
use tributary::store::Store;
use tributary::web::WebState;

fn sets() -> Vec<SetConfig> {
    vec![SetConfig::source("src-a"), SetConfig::source("src-b"), SetConfig::new("all", ["src-a", "src-b"])]
}

/// Resource List entries of `set` by upstream path (the part after the museum host).
async fn by_path(s: &Running, set: &str) -> BTreeMap<String, Entry> {
    let list = entries(&s.client, &s.naming.resource_list(set)).await;
    list.into_iter().map(|e| (e.loc.rsplit('/').next().unwrap().to_owned(), e)).collect()
}

fn rels(e: &Entry) -> Vec<(String, String)> {
    e.links.iter().filter(|l| l.rel != "via").map(|l| (l.rel.clone(), l.href.clone())).collect()
}

/// src-a: `doc` links to `meta` (republished in src-a) with every relation type, plus to an
/// outside URI; src-b: `other` links to src-a's `meta`.
fn fill(store: &Store, naming: &Naming) {
    let meta = Res::new("src-a", "http://museum-a.test/meta", "<meta/>");
    let mut doc = Res::new("src-a", "http://museum-a.test/doc", "document");
    for rel in DEFAULT_KEEP.iter().chain(&DEFAULT_DROP).chain(&["license"]) {
        doc.links.push(Link::new(*rel, "http://museum-a.test/meta"));
    }
    doc.links.push(Link::new("alternate", "http://elsewhere.test/doc.pdf"));
    let mut other = Res::new("src-b", "http://museum-b.test/other", "other");
    other.links.push(Link::new("describedby", "http://museum-a.test/meta"));
    upsert(store, naming, &["src-a", "all"], &[meta, doc]);
    upsert(store, naming, &["src-b", "all"], &[other]);
}

#[tokio::test]
async fn each_relation_is_kept_or_dropped_and_rewritten_within_the_set() {
    let (_dir, store) = temp_store();
    let (listener, naming) = bind().await;
    fill(&store, &naming);
    let s = start(listener, naming.clone(), &store, sets(), LinkPolicies::default(), Limits::default());
    let meta_uri = naming.resource("src-a", "http://museum-a.test/meta").unwrap();

    let a = by_path(&s, "src-a").await;
    let mut expected: Vec<(String, String)> =
        DEFAULT_KEEP.iter().map(|r| ((*r).to_owned(), meta_uri.clone())).collect();
    expected.push(("alternate".into(), "http://elsewhere.test/doc.pdf".into()));
    assert_eq!(rels(&a["doc"]), expected, "kept relations, rewritten to Tributary's copy of the target");
    for dropped in DEFAULT_DROP.iter().chain(&["license"]) {
        let via_count = a["doc"].links.iter().filter(|l| l.rel == *dropped).count();
        let want = usize::from(*dropped == "via"); // only the generated one
        assert_eq!(via_count, want, "{dropped}");
    }
    assert_eq!(a["doc"].link("via").unwrap().href, "http://museum-a.test/doc", "generated via, not inherited");

    // The target is in src-a: not republished in set src-b, so not rewritten there ...
    let b = by_path(&s, "src-b").await;
    assert_eq!(rels(&b["other"]), vec![("describedby".to_owned(), "http://museum-a.test/meta".to_owned())]);
    // ... but the merged set holds both sources, so there it is.
    let all = by_path(&s, "all").await;
    assert_eq!(rels(&all["other"]), vec![("describedby".to_owned(), meta_uri.clone())]);
}

/// Two sources both fetched the target from its origin, so neither record has an index row
/// and the merged set's filter knows several sources for it: the link still goes to a copy
/// in the set, the first in URI order, and in each source's own set to that source's copy.
#[tokio::test]
async fn a_target_listed_by_two_sources_is_rewritten_to_a_copy_in_the_set() {
    let (_dir, store) = temp_store();
    let (listener, naming) = bind().await;
    let target = "http://shared.test/meta";
    let mut doc = Res::new("src-b", "http://museum-b.test/doc", "document");
    doc.links.push(Link::new("describedby", target));
    upsert(&store, &naming, &["src-a", "all"], &[Res::new("src-a", target, "<a/>")]);
    upsert(&store, &naming, &["src-b", "all"], &[Res::new("src-b", target, "<b/>"), doc]);
    let s = start(listener, naming.clone(), &store, sets(), LinkPolicies::default(), Limits::default());
    let copy = |source: &str| naming.resource(source, target).unwrap();
    assert!(copy("src-a") < copy("src-b"));

    let all = by_path(&s, "all").await;
    assert_eq!(rels(&all["doc"]), vec![("describedby".to_owned(), copy("src-a"))]);
    let b = by_path(&s, "src-b").await;
    assert_eq!(rels(&b["doc"]), vec![("describedby".to_owned(), copy("src-b"))]);
}

#[tokio::test]
async fn per_source_overrides_and_policy_changes_need_no_reharvest() {
    let (_dir, store) = temp_store();
    let (listener, naming) = bind().await;
    fill(&store, &naming);
    let mut policies = LinkPolicies::default();
    policies.per_source.insert("src-a".into(), LinkPolicy::keeping(["collection", "canonical"]));
    let s = start(listener, naming.clone(), &store, sets(), policies, Limits::default());
    let meta_uri = naming.resource("src-a", "http://museum-a.test/meta").unwrap();
    let a = by_path(&s, "src-a").await;
    assert_eq!(
        rels(&a["doc"]),
        vec![("collection".to_owned(), meta_uri.clone()), ("canonical".to_owned(), meta_uri.clone())],
        "document order"
    );
    let b = by_path(&s, "src-b").await;
    assert_eq!(rels(&b["other"]).len(), 1, "src-b keeps the defaults");

    // The same store under a stricter default policy: a different answer, nothing re-harvested.
    let strict = LinkPolicies { default: LinkPolicy::keeping(["profile"]), ..LinkPolicies::default() };
    let state = WebState::new(store.clone(), naming.clone(), sets(), strict, Limits::default()).unwrap();
    let p = state.publisher().clone();
    let bytes = tokio::task::spawn_blocking(move || {
        let ResourceListDoc::List(job) = p.resource_list("all").unwrap() else { panic!("expected one list") };
        let mut out = Vec::new();
        p.write_list(&job, &mut out).unwrap();
        out
    })
    .await
    .unwrap();
    let (d, _) = read_document(&bytes, ReadOptions::default()).unwrap();
    let by: BTreeMap<String, Entry> =
        d.entries.into_iter().map(|e| (e.loc.rsplit('/').next().unwrap().to_owned(), e)).collect();
    assert_eq!(rels(&by["doc"]), vec![("profile".to_owned(), meta_uri)]);
    assert!(rels(&by["other"]).is_empty());
}

/// End to end: the simulator's entries carry `describedby`/`describes` between a resource and
/// its metadata (both republished), plus `canonical` and `collection` (not Tributary's).
#[tokio::test]
async fn links_from_a_simulated_source_are_filtered_and_rewritten() {
    let up = sim::start(|c| {
        c.resources = 6;
        c.links = true;
    })
    .await;
    let (_dir, store) = temp_store();
    let (listener, naming) = bind().await;
    harvest(&up.client, &up.sim.url("/resourcelist.xml"), &store, &naming, "sim", &["sim"]).await;
    let s = start(
        listener,
        naming.clone(),
        &store,
        vec![SetConfig::source("sim")],
        LinkPolicies::default(),
        Limits::default(),
    );
    let list = entries(&s.client, &naming.resource_list("sim")).await;
    assert_eq!(list.len(), 12, "six resources and their metadata");
    let ours = |href: &str| naming.resource("sim", href).unwrap();
    for e in &list {
        let upstream = e.link("via").unwrap().href.clone();
        for l in &e.links {
            assert!(!matches!(l.rel.as_str(), "canonical" | "collection"), "{}: {}", e.loc, l.rel);
        }
        let expect = if upstream.contains("/res/") { "describedby" } else { "describes" };
        let l = e.link(expect).unwrap_or_else(|| panic!("{} lacks {expect}", e.loc));
        let target = if expect == "describedby" {
            upstream.replace("/res/", "/meta/")
        } else {
            upstream.replace("/meta/", "/res/")
        };
        assert_eq!(l.href, ours(&target), "rewritten to Tributary's copy");
    }
}

/// Rewriting consults a filter of the set's upstream URIs taken at the last validation (the
/// index's `at`): a target harvested later is rewritten once the set is validated again.
#[tokio::test]
async fn a_target_harvested_after_the_index_is_rewritten_from_the_next_index_on() {
    let (_dir, store) = temp_store();
    let (listener, naming) = bind().await;
    let mut docs: Vec<Res> =
        (0..12).map(|i| Res::new("src-a", &format!("http://museum-a.test/d{i:02}"), "doc")).collect();
    docs[0].links.push(Link::new("describedby", "http://museum-a.test/late-meta"));
    upsert(&store, &naming, &["src-a"], &docs);
    let limits = Limits { resource_list_entries: 10, ..Limits::default() };
    let s = start(listener, naming.clone(), &store, vec![SetConfig::source("src-a")], LinkPolicies::default(), limits);
    let first_part = |s: &Running| {
        let (c, url) = (s.client.clone(), s.naming.resource_list_part("src-a", 1));
        async move { crate::support::publish::doc(&c, &url).await.1.entries }
    };
    let index = entries(&s.client, &naming.resource_list("src-a")).await;
    assert_eq!(index.len(), 12);
    upsert(&store, &naming, &["src-a"], &[Res::new("src-a", "http://museum-a.test/late-meta", "<meta/>")]);
    let before = first_part(&s).await;
    assert_eq!(before[0].link("describedby").unwrap().href, "http://museum-a.test/late-meta");
    let _ = entries(&s.client, &naming.resource_list("src-a")).await; // validates again
    let after = first_part(&s).await;
    let late = naming.resource("src-a", "http://museum-a.test/late-meta").unwrap();
    assert_eq!(after[0].link("describedby").unwrap().href, late);
}
