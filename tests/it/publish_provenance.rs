//! Provenance lookup over HTTP (JSON and HTML) and on the command line: by Tributary URI,
//! upstream URI, origin URI and hash; deleted resources; unknown ones (404 / not found); the
//! change history; and the live check of the origin against a server on 127.0.0.1.

use std::collections::HashMap;

use crate::support::digest::sha256_hex;
use crate::support::http::{Response, Server};
use crate::support::publish::{Res, bind, delete, get_json, start, upsert, urlencode};
use crate::support::store::temp_store;
use reqwest::StatusCode;
use tributary::config::Settings;
use tributary::fetch::{Fetcher, FetcherOptions};
use tributary::provenance::{OriginChecker, provenance_cli};
use tributary::publish::{Limits, LinkPolicies, SetConfig};
use tributary::web::WebState;

fn sets() -> Vec<SetConfig> {
    vec![SetConfig::source("agg"), SetConfig::new("all", ["agg"])]
}

/// `agg` harvested two resources from an aggregator whose `via` named the origins on `origin`.
fn resources(origin: &Server) -> Vec<Res> {
    ["a.txt", "b.txt"]
        .iter()
        .map(|name| {
            let mut r = Res::new("agg", &format!("http://aggregator.test/{name}"), format!("content of {name}"));
            r.origin = origin.url(&format!("/{name}"));
            r
        })
        .collect()
}

fn origin_server(b_content: &str) -> Server {
    let mut routes = HashMap::new();
    routes.insert("/a.txt".to_owned(), Response::ok("content of a.txt"));
    routes.insert("/b.txt".to_owned(), Response::ok(b_content.to_owned()));
    Server::start(routes)
}

#[tokio::test]
async fn lookup_by_every_name_with_history() {
    let origin = origin_server("content of b.txt");
    let (_dir, store) = temp_store();
    let (listener, naming) = bind().await;
    let mut rs = resources(&origin);
    let uris = upsert(&store, &naming, &["agg", "all"], &rs);
    rs[0].content = b"second version".to_vec();
    upsert(&store, &naming, &["agg", "all"], &rs[..1]);
    let s = start(listener, naming.clone(), &store, sets(), LinkPolicies::default(), Limits::default());
    let q = |param: &str, v: &str| format!("{}?{param}={}", naming.provenance(), urlencode(v));

    let (status, j) = get_json(&s.client, &q("uri", &uris[0])).await;
    assert_eq!(status, StatusCode::OK);
    let r = &j["resources"][0];
    assert_eq!(r["matched_by"], "tributary-uri");
    assert_eq!(r["uri"], uris[0].as_str());
    assert_eq!(r["source"], "agg");
    assert_eq!(r["sets"], serde_json::json!(["agg", "all"]));
    assert_eq!(r["upstream"], "http://aggregator.test/a.txt");
    assert_eq!(r["origin"]["href"], origin.url("/a.txt").as_str());
    assert_eq!(r["origin"]["modified"], "2024-05-01T10:00:00Z");
    assert_eq!(r["state"]["status"], "live");
    assert_eq!(r["state"]["sha256"], sha256_hex(b"second version").as_str());
    let roles: Vec<&str> = r["chain"].as_array().unwrap().iter().map(|c| c["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["origin", "upstream", "tributary"]);
    let history = r["history"].as_array().unwrap();
    assert_eq!(history.len(), 2, "created, then updated; each logged in two sets");
    assert_eq!(history[0]["change"], "created");
    assert_eq!(history[1]["change"], "updated");
    assert_eq!(history[1]["logged"], serde_json::json!([["agg", 3], ["all", 3]]));
    assert!(r.get("feed").is_none(), "not from a feed: no FeedSync section: {r}");

    let (_, j) = get_json(&s.client, &q("uri", "http://aggregator.test/b.txt")).await;
    assert_eq!(j["resources"][0]["matched_by"], "upstream-uri");
    let (_, j) = get_json(&s.client, &q("uri", &origin.url("/b.txt"))).await;
    assert_eq!(j["resources"][0]["matched_by"], "origin-uri");
    assert_eq!(j["resources"][0]["uri"], uris[1].as_str());
    let (_, j) = get_json(&s.client, &q("hash", &format!("sha-256:{}", sha256_hex(b"content of b.txt")))).await;
    assert_eq!(j["resources"][0]["matched_by"], "sha-256");
    assert_eq!(j["resources"][0]["uri"], uris[1].as_str());

    // Deleted: still found by Tributary's URI and by the upstream URI, with the deletion.
    delete(&store, &["agg", "all"], &uris[1..2]);
    for query in [q("uri", &uris[1]), q("uri", "http://aggregator.test/b.txt")] {
        let (status, j) = get_json(&s.client, &query).await;
        assert_eq!(status, StatusCode::OK, "{query}");
        assert_eq!(j["resources"][0]["state"]["status"], "deleted");
        assert_eq!(j["resources"][0]["history"].as_array().unwrap().last().unwrap()["change"], "deleted");
    }
}

#[tokio::test]
async fn unknown_is_404_and_browsers_get_html() {
    let origin = origin_server("content of b.txt");
    let (_dir, store) = temp_store();
    let (listener, naming) = bind().await;
    let uris = upsert(&store, &naming, &["agg", "all"], &resources(&origin));
    let s = start(listener, naming.clone(), &store, sets(), LinkPolicies::default(), Limits::default());
    let unknown = format!("{}?uri={}", naming.provenance(), urlencode("http://nowhere.test/x"));
    let (status, j) = get_json(&s.client, &unknown).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(j["error"], "no republished resource matches http://nowhere.test/x");

    let page = |url: String| {
        let c = s.client.clone();
        async move {
            let r = c.get(url).header("accept", "text/html,application/xhtml+xml,*/*;q=0.8").send().await.unwrap();
            (r.status(), r.headers().clone(), r.text().await.unwrap())
        }
    };
    let (status, h, body) = page(unknown).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(h["content-type"].to_str().unwrap().starts_with("text/html"));
    assert!(body.contains("No republished resource matches"));
    let (status, h, body) = page(format!("{}?uri={}", naming.provenance(), urlencode(&uris[0]))).await;
    assert_eq!(status, StatusCode::OK);
    assert!(h["content-security-policy"].to_str().unwrap().contains("default-src 'none'"));
    assert!(body.contains(&origin.url("/a.txt")) && body.contains("History"), "{body}");

    let bad = s.client.get(format!("{}?hash=sha-256:nothex", naming.provenance())).send().await.unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let none = s.client.get(naming.provenance()).send().await.unwrap();
    assert_eq!(none.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn verify_fetches_the_origin_and_compares() {
    // The origin of b.txt has changed since it was harvested.
    let origin = origin_server("b.txt has changed");
    let (_dir, store) = temp_store();
    let (listener, naming) = bind().await;
    let uris = upsert(&store, &naming, &["agg", "all"], &resources(&origin));
    let checker = private_checker();
    let state = WebState::new(store.clone(), naming.clone(), sets(), LinkPolicies::default(), Limits::default())
        .unwrap()
        .with_origin_checker(checker);
    let s = crate::support::publish::spawn(listener, naming.clone(), state);
    let v = |uri: &str| format!("{}?uri={}&verify=1", naming.provenance(), urlencode(uri));
    let (_, j) = get_json(&s.client, &v(&uris[0])).await;
    let check = &j["resources"][0]["verify"];
    assert_eq!(check["matches_via"], true, "{check}");
    assert_eq!(check["matches_copy"], true);
    assert_eq!(check["fetched"]["status"], 200);
    let (_, j) = get_json(&s.client, &v(&uris[1])).await;
    let check = &j["resources"][0]["verify"];
    assert_eq!(check["matches_via"], false, "{check}");
    assert_eq!(check["matches_copy"], false);

    // The default server-side checker will not fetch loopback addresses.
    let (listener2, naming2) = bind().await;
    let uris2 = upsert(&store, &naming2, &["agg"], &resources(&origin));
    let s2 = start(listener2, naming2.clone(), &store, sets(), LinkPolicies::default(), Limits::default());
    let url = format!("{}?uri={}&verify=1", naming2.provenance(), urlencode(&uris2[0]));
    let (_, j) = get_json(&s2.client, &url).await;
    let check = &j["resources"][0]["verify"];
    assert!(check["matches_via"].is_null());
    assert!(check["summary"].as_str().unwrap().contains("could not check"), "{check}");
}

#[test]
fn command_line_answers_text_json_and_not_found() {
    let origin = origin_server("content of b.txt");
    let (_dir, store) = temp_store();
    let naming = tributary::naming::Naming::new(&url::Url::parse("http://tributary.test/").unwrap());
    let uris = upsert(&store, &naming, &["agg"], &resources(&origin));
    let (text, found) = provenance_cli(&store, &naming, &uris[0], None, false).unwrap();
    assert!(found);
    assert!(
        text.contains("chain") && text.contains(&origin.url("/a.txt")) && text.contains("http://aggregator.test/a.txt"),
        "{text}"
    );
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let checker = private_checker();
    let (json, found) =
        provenance_cli(&store, &naming, &origin.url("/b.txt"), Some((&checker, rt.handle())), true).unwrap();
    assert!(found);
    let j: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(j["resources"][0]["uri"], uris[1].as_str());
    assert_eq!(j["resources"][0]["verify"]["matches_copy"], true, "{json}");
    let (text, found) = provenance_cli(&store, &naming, "http://nowhere.test/", None, false).unwrap();
    assert!(!found);
    assert!(text.contains("no republished resource matches"));
    assert!(provenance_cli(&store, &naming, "sha-256:123", None, false).is_err());
}

/// A checker through the polite fetcher whose settings let it reach the loopback origin.
fn private_checker() -> OriginChecker {
    let fetcher = Fetcher::new(FetcherOptions::new("tributary-test (+mailto:test@example.org)")).unwrap();
    OriginChecker::new(fetcher, Settings { allow_private: true, ..Settings::default() })
}
