//! Discovery (spec §6) by each route, navigation by `up` links, Capability List selection,
//! and walking indexes: order, loops, depth, wrong kinds and truncation.

use crate::support::fetcher::{fetcher, settings};
use crate::support::rs::{resource_list, sitemapindex, urlset};
use crate::support::upstream::{Reply, Upstream};
use tributary::harvest::{DiscoverError, Discovered, IndexWalker, Route, WalkLimits, discover};
use url::Url;

/// A Source with a Source Description at the well-known URI, one Capability List (relative
/// URIs throughout), a Resource List and a Change List.
fn source_routes() -> Vec<(&'static str, Vec<Reply>)> {
    let sd = urlset("description", &[], &[("/dataset1/capabilitylist.xml", "capabilitylist")]);
    let cl = urlset(
        "capabilitylist",
        &[("up", "/.well-known/resourcesync")],
        &[("resourcelist.xml", "resourcelist"), ("changelist.xml", "changelist")],
    );
    vec![
        ("/.well-known/resourcesync", vec![Reply::xml(sd)]),
        ("/dataset1/capabilitylist.xml", vec![Reply::xml(cl)]),
        ("/dataset1/resourcelist.xml", vec![Reply::xml(resource_list("capabilitylist.xml", "/r/", 3))]),
    ]
}

fn assert_full(d: &Discovered, up: &Upstream, route: Route) {
    assert_eq!(d.route, route);
    assert_eq!(d.source_description.as_ref(), Some(&up.url("/.well-known/resourcesync")));
    assert_eq!(d.capability_list.as_ref(), Some(&up.url("/dataset1/capabilitylist.xml")));
    assert_eq!(d.capabilities.resourcelist.as_ref(), Some(&up.url("/dataset1/resourcelist.xml")));
    assert_eq!(d.capabilities.changelist.as_ref(), Some(&up.url("/dataset1/changelist.xml")));
    assert_eq!((d.capabilities.resourcedump.as_ref(), d.capabilities.changedump.as_ref()), (None, None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_description_given_directly() {
    let up = Upstream::routes(source_routes()).await;
    let d = discover(&fetcher(), &up.url("/.well-known/resourcesync"), None, &settings()).await.unwrap();
    assert_full(&d, &up, Route::Direct);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn site_root_finds_the_well_known_uri() {
    let up = Upstream::routes(source_routes()).await; // "/" is a 404
    let d = discover(&fetcher(), &up.url("/"), None, &settings()).await.unwrap();
    assert_full(&d, &up, Route::WellKnown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn robots_sitemap_then_up_links() {
    let mut routes = source_routes();
    routes.retain(|(p, _)| *p != "/.well-known/resourcesync");
    let sd = urlset("description", &[], &[("/dataset1/capabilitylist.xml", "capabilitylist")]);
    routes.push(("/sd.xml", vec![Reply::xml(sd)]));
    let cl = urlset("capabilitylist", &[("up", "/sd.xml")], &[("resourcelist.xml", "resourcelist")]);
    routes.retain(|(p, _)| *p != "/dataset1/capabilitylist.xml");
    routes.push(("/dataset1/capabilitylist.xml", vec![Reply::xml(cl)]));
    let robots =
        "User-agent: *\nDisallow: /cgi-bin/\nSitemap: /plain-sitemap.xml\nSitemap: /dataset1/resourcelist.xml\n";
    routes.push(("/robots.txt", vec![Reply::ok(robots)]));
    routes.push(("/plain-sitemap.xml", vec![Reply::xml(sitemapindex_plain())]));
    let up = Upstream::routes(routes).await;
    let d = discover(&fetcher(), &up.url("/"), None, &settings()).await.unwrap();
    assert_eq!(d.route, Route::RobotsSitemap);
    assert_eq!(d.capability_list.as_ref(), Some(&up.url("/dataset1/capabilitylist.xml")));
    assert_eq!(d.source_description.as_ref(), Some(&up.url("/sd.xml")));
    assert_eq!(d.capabilities.resourcelist.as_ref(), Some(&up.url("/dataset1/resourcelist.xml")));
}

/// A plain Sitemap (no ResourceSync metadata): skipped by discovery.
fn sitemapindex_plain() -> String {
    "<?xml version=\"1.0\"?><urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\"><url><loc>/a</loc></url></urlset>"
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_header_on_a_page() {
    let mut routes = source_routes();
    let page = Reply::ok("<p>no links here</p>")
        .header("Content-Type", "text/html")
        .header("Link", "</about>; rel=\"describedby\", </dataset1/capabilitylist.xml>; rel=\"resourcesync\"");
    routes.push(("/item/42", vec![page]));
    let up = Upstream::routes(routes).await;
    let d = discover(&fetcher(), &up.url("/item/42"), None, &settings()).await.unwrap();
    assert_full(&d, &up, Route::LinkHeader);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn html_link_on_a_page() {
    let mut routes = source_routes();
    let html =
        "<html><head><title>x</title><link rel=\"resourcesync\" href=\"dataset1/capabilitylist.xml\"/></head></html>";
    routes.push(("/", vec![Reply::ok(html).header("Content-Type", "text/html; charset=utf-8")]));
    let up = Upstream::routes(routes).await;
    let d = discover(&fetcher(), &up.url("/"), None, &settings()).await.unwrap();
    assert_full(&d, &up, Route::HtmlLink);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_list_given_navigates_up() {
    let up = Upstream::routes(source_routes()).await;
    let d = discover(&fetcher(), &up.url("/dataset1/resourcelist.xml"), None, &settings()).await.unwrap();
    assert_full(&d, &up, Route::Direct);
}

/// An operator who names one part of a Resource List Index gets the whole index the Capability
/// List names: a baseline of one part would delete every resource listed in the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_given_leads_to_the_index_the_capability_list_names() {
    let cl = urlset("capabilitylist", &[], &[("/rl-index.xml", "resourcelist")]);
    let index = sitemapindex("resourcelist", &[("up", "/cl.xml")], &["/rl-1.xml", "/rl-2.xml"]);
    let part = urlset("resourcelist", &[("up", "/cl.xml"), ("index", "/rl-index.xml")], &[("/r/2", "")]);
    let up = Upstream::routes(vec![
        ("/cl.xml", vec![Reply::xml(cl)]),
        ("/rl-index.xml", vec![Reply::xml(index)]),
        ("/rl-2.xml", vec![Reply::xml(part)]),
    ])
    .await;
    let d = discover(&fetcher(), &up.url("/rl-2.xml"), None, &settings()).await.unwrap();
    assert_eq!(d.route, Route::Direct);
    assert_eq!(d.capability_list, Some(up.url("/cl.xml")));
    assert_eq!(d.capabilities.resourcelist, Some(up.url("/rl-index.xml")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_without_up_link_stands_alone() {
    let rl = urlset("resourcelist", &[], &[("/r/1", "")]);
    let up = Upstream::routes(vec![("/rl.xml", vec![Reply::xml(rl)])]).await;
    let d = discover(&fetcher(), &up.url("/rl.xml"), None, &settings()).await.unwrap();
    assert_eq!((d.capability_list, d.source_description), (None, None));
    assert_eq!(d.capabilities.resourcelist, Some(up.url("/rl.xml")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_capability_lists_need_a_choice() {
    let sd = urlset("description", &[], &[("/a/cl.xml", "capabilitylist"), ("/b/cl.xml", "capabilitylist")]);
    let cl = |rl: &str| urlset("capabilitylist", &[("up", "/sd.xml")], &[(rl, "resourcelist")]);
    let up = Upstream::routes(vec![
        ("/sd.xml", vec![Reply::xml(sd)]),
        ("/a/cl.xml", vec![Reply::xml(cl("/a/rl.xml"))]),
        ("/b/cl.xml", vec![Reply::xml(cl("/b/rl.xml"))]),
    ])
    .await;
    let (f, s) = (fetcher(), settings());
    let err = discover(&f, &up.url("/sd.xml"), None, &s).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, DiscoverError::Ambiguous { ref choices, .. } if choices.len() == 2), "{msg}");
    assert!(msg.contains("/a/cl.xml") && msg.contains("/b/cl.xml") && msg.contains("capability_list"), "{msg}");
    let d = discover(&f, &up.url("/sd.xml"), Some(&up.url("/b/cl.xml")), &s).await.unwrap();
    assert_eq!(d.capabilities.resourcelist, Some(up.url("/b/rl.xml")));
    let err = discover(&f, &up.url("/sd.xml"), Some(&up.url("/c/cl.xml")), &s).await.unwrap_err();
    assert!(matches!(err, DiscoverError::NotListed { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_to_discover_lists_what_was_tried() {
    let up = Upstream::routes(vec![("/", vec![Reply::ok("<html></html>").header("Content-Type", "text/html")])]).await;
    let err = discover(&fetcher(), &up.url("/"), None, &settings()).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, DiscoverError::NotFound { .. }), "{msg}");
    assert!(msg.contains(".well-known/resourcesync"), "{msg}");
}

async fn walk(up: &Upstream, path: &str, limits: WalkLimits) -> (Vec<String>, Result<(), DiscoverError>) {
    let mut w = IndexWalker::new(&fetcher(), up.url(path), &settings(), limits);
    let mut locs = Vec::new();
    // Bounded by the documents served.
    loop {
        match w.next_entry().await {
            Ok(Some(e)) => locs.push(e.loc),
            Ok(None) => return (locs, Ok(())),
            Err(e) => return (locs, Err(e)),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_is_walked_in_order() {
    let index = sitemapindex("resourcelist", &[("up", "/cl.xml")], &["/rl-1.xml", "rl-2.xml", "/sub/index.xml"]);
    let sub = sitemapindex("resourcelist", &[], &["/rl-3.xml"]);
    let up = Upstream::routes(vec![
        ("/index.xml", vec![Reply::xml(index)]),
        ("/sub/index.xml", vec![Reply::xml(sub)]),
        ("/rl-1.xml", vec![Reply::xml(resource_list("/cl.xml", "/a/", 3))]),
        ("/rl-2.xml", vec![Reply::xml(resource_list("/cl.xml", "/b/", 2))]),
        ("/rl-3.xml", vec![Reply::xml(resource_list("/cl.xml", "/c/", 1))]),
    ])
    .await;
    let (locs, end) = walk(&up, "/index.xml", WalkLimits::default()).await;
    end.unwrap();
    assert_eq!(locs, ["/a/0", "/a/1", "/a/2", "/b/0", "/b/1", "/c/0"]);
    let (_, end) = walk(&up, "/index.xml", WalkLimits { max_depth: 1, ..WalkLimits::default() }).await;
    assert!(matches!(end, Err(DiscoverError::TooDeep { .. })), "{end:?}");
    let (locs, end) = walk(&up, "/rl-2.xml", WalkLimits::default()).await;
    assert_eq!((locs.len(), end.is_ok()), (2, true), "a plain list is its own only leaf");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_referencing_and_cyclic_indexes_are_errors() {
    let me = sitemapindex("resourcelist", &[], &["/self.xml"]);
    let a = sitemapindex("resourcelist", &[], &["/rl.xml", "/b.xml"]);
    let b = sitemapindex("resourcelist", &[], &["/a.xml"]);
    let up = Upstream::routes(vec![
        ("/self.xml", vec![Reply::xml(me)]),
        ("/a.xml", vec![Reply::xml(a)]),
        ("/b.xml", vec![Reply::xml(b)]),
        ("/rl.xml", vec![Reply::xml(resource_list("/cl.xml", "/r/", 2))]),
    ])
    .await;
    let (_, end) = walk(&up, "/self.xml", WalkLimits::default()).await;
    assert!(matches!(end, Err(DiscoverError::IndexLoop { .. })), "{end:?}");
    let (locs, end) = walk(&up, "/a.xml", WalkLimits::default()).await;
    assert!(matches!(end, Err(DiscoverError::IndexLoop { .. })), "{end:?}");
    assert_eq!(locs.len(), 2);
    assert_eq!(up.count("/self.xml"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_or_wrong_children_fail_the_walk() {
    let full = resource_list("/cl.xml", "/r/", 50);
    let cut = full[..full.len() / 2].to_owned();
    let index = sitemapindex("resourcelist", &[], &["/ok.xml", "/cut.xml"]);
    let mixed = sitemapindex("resourcelist", &[], &["/ok.xml", "/cl-changes.xml"]);
    let changes = urlset("changelist", &[], &[]);
    let up = Upstream::routes(vec![
        ("/index.xml", vec![Reply::xml(index)]),
        ("/mixed.xml", vec![Reply::xml(mixed)]),
        ("/ok.xml", vec![Reply::xml(resource_list("/cl.xml", "/ok/", 2))]),
        ("/cut.xml", vec![Reply::xml(cut)]),
        ("/cl-changes.xml", vec![Reply::xml(changes)]),
    ])
    .await;
    let (locs, end) = walk(&up, "/index.xml", WalkLimits::default()).await;
    assert!(matches!(end, Err(DiscoverError::Read { .. })), "{end:?}");
    assert!(locs.len() >= 2 && locs.len() < 52, "entries before the cut are returned, then the error");
    let (_, end) = walk(&up, "/mixed.xml", WalkLimits::default()).await;
    assert!(matches!(end, Err(DiscoverError::WrongKind { .. })), "{end:?}");
    let url = Url::parse("http://127.0.0.1:1/none.xml").unwrap();
    let mut w = IndexWalker::new(&fetcher(), url, &settings(), WalkLimits::default());
    assert!(w.next_entry().await.is_err(), "an unreachable list is an error, not an empty list");
}
