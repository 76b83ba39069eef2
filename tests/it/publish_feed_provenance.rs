//! The provenance of a resource harvested from a feed, over HTTP on 127.0.0.1: a FeedSync Atom
//! feed served by the test is harvested into a real store, which is then served; `/provenance`
//! of an item names the item's link (else the feed) as its origin and the feed's `?sx-item=`
//! URL as its upstream, and shows the item's merged FeedSync state — sync id, updates,
//! tombstone and `sx:history` (most recent first) — in JSON, on the HTML page and in the
//! command's text.

use crate::support::feeds::{Site, atom, entry, feed_source, serve, set};
use crate::support::publish::{bind, get_json, spawn, urlencode};
use reqwest::StatusCode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_item_shows_its_link_and_feedsync_history() {
    let site = Site::default();
    let up = serve(&site).await;
    let url = up.url("/todo.atom").to_string();
    let linkless = |e: String| e.replace("<link href=\"http://example.org/items/item3\"/>", "");
    let v1 = [
        entry("item1", "Buy groceries", 1, false, &[(1, "2026-01-01T09:00:00Z", "REO1750")]),
        entry("item2", "Call Bob", 1, false, &[(1, "2026-01-01T09:10:00Z", "REO1750")]),
        linkless(entry("item3", "Water plants", 1, false, &[(1, "2026-01-01T09:20:00Z", "REO1750")])),
    ];
    set(&site, "/todo.atom", atom(&url, None, None, &v1));
    let h = feed_source("a", &url, "");
    let pass = h.pass().await;
    assert!(pass.sources[0].error.is_none(), "{pass}");

    // item1 updated by another endpoint, item2 deleted.
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
    set(&site, "/todo.atom", atom(&url, None, None, &v2));
    let pass = h.pass().await;
    assert!(pass.sources[0].error.is_none(), "{pass}");

    let (listener, naming) = bind().await;
    let state = tributary::web::WebState::from_config(&h.config, &h.store, &h.fetcher).unwrap();
    let server = spawn(listener, naming.clone(), state);
    let provenance = |uri: &str| format!("{}provenance?uri={}", naming.base(), urlencode(uri));
    let upstream = |id: &str| format!("{url}?sx-item={id}");

    // item1: via the item's link, upstream the feed's item URL, the merged history.
    let item1 = h.uri("a", &upstream("item1"));
    let (status, j) = get_json(&server.client, &provenance(&item1)).await;
    assert_eq!(status, StatusCode::OK, "{j}");
    let r = &j["resources"][0];
    assert_eq!(r["matched_by"], "tributary-uri");
    assert_eq!(r["origin"]["href"], "http://example.org/items/item1", "{r}");
    assert_eq!(r["upstream"], upstream("item1").as_str());
    let chain: Vec<&str> = r["chain"].as_array().unwrap().iter().map(|c| c["uri"].as_str().unwrap()).collect();
    assert_eq!(chain, ["http://example.org/items/item1", upstream("item1").as_str(), item1.as_str()]);
    let feed = &r["feed"];
    assert_eq!(feed["item"], "item1", "{feed}");
    assert_eq!(feed["updated"], "2026-01-01T10:00:00Z");
    let sync = &feed["sync"];
    assert_eq!(sync["id"], "item1");
    assert_eq!(sync["updates"], 2);
    assert_eq!(sync["deleted"], false);
    assert_eq!(sync["conflicts"], 0);
    assert_eq!(
        sync["history"],
        serde_json::json!([
            {"sequence": 2, "when": "2026-01-01T10:00:00Z", "by": "JEO2000"},
            {"sequence": 1, "when": "2026-01-01T09:00:00Z", "by": "REO1750"},
        ]),
        "most recent first, as FeedSync keeps it"
    );
    let changes: Vec<&str> = r["history"].as_array().unwrap().iter().map(|e| e["change"].as_str().unwrap()).collect();
    assert_eq!(changes, ["created", "updated"], "Tributary's own history is still there");

    // The same resource found by its origin, the item's link.
    let (_, j) = get_json(&server.client, &provenance("http://example.org/items/item1")).await;
    assert_eq!(j["resources"][0]["matched_by"], "origin-uri");
    assert_eq!(j["resources"][0]["feed"]["sync"]["updates"], 2);

    // item2 is a tombstone: deleted in Tributary, its FeedSync state kept.
    let (_, j) = get_json(&server.client, &provenance(&h.uri("a", &upstream("item2")))).await;
    let r = &j["resources"][0];
    assert_eq!(r["state"]["status"], "deleted", "{r}");
    assert_eq!(r["feed"]["sync"]["deleted"], true);
    assert_eq!(r["feed"]["sync"]["history"][0]["by"], "JEO2000");

    // item3 has no link: its origin is the feed.
    let (_, j) = get_json(&server.client, &provenance(&h.uri("a", &upstream("item3")))).await;
    assert_eq!(j["resources"][0]["origin"]["href"], url.as_str());
    assert_eq!(j["resources"][0]["feed"]["sync"]["history"][0]["by"], "REO1750");

    // The HTML page has the FeedSync table, every `by` in it.
    let resp = server
        .client
        .get(provenance(&item1))
        .header("accept", "text/html,application/xhtml+xml,*/*;q=0.8")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    let body = resp.text().await.unwrap();
    let section = &body[body.find("<h3>FeedSync</h3>").unwrap_or_else(|| panic!("no FeedSync section: {body}"))..];
    let jeo = section.find("<td>JEO2000</td>").expect("JEO2000 in the table");
    let reo = section.find("<td>REO1750</td>").expect("REO1750 in the table");
    assert!(jeo < reo, "most recent first: {section}");
    assert!(section.contains("<td>2026-01-01T10:00:00Z</td>"), "{section}");
    assert!(body.contains("http://example.org/items/item1"), "{body}");

    // And on the command line.
    let naming = tributary::naming::Naming::new(&h.config.aggregator.base_url);
    let (text, found) = tributary::provenance::provenance_cli(&h.store, &naming, &item1, None, false).unwrap();
    assert!(found);
    assert!(text.contains("feedsync   id item1  updates 2  live") && text.contains("by JEO2000"), "{text}");
}
