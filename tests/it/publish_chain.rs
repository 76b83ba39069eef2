//! The aggregator chain of §14.8 with real instances: an upstream Source S (the simulator),
//! Tributary A harvesting S, Tributary B harvesting A — two stores, two servers on 127.0.0.1.
//! Every `via` in B's lists must name S's resource with S's own `modified`, hash, length and
//! type (Example 33), and B's provenance lookup must name S.

use std::collections::BTreeMap;

use crate::support::publish::{bind, doc, entries, get_json, harvest, start, urlencode};
use crate::support::sim;
use crate::support::store::temp_store;
use tributary::model::{Entry, HashAlgorithm};
use tributary::publish::{Limits, LinkPolicies, SetConfig};

#[tokio::test]
async fn second_aggregator_republishes_the_original_via() {
    let s = sim::start(|c| {
        c.resources = 25;
        c.list_limit = 10; // S itself serves an index
    })
    .await;
    let s_entries: BTreeMap<String, Entry> =
        entries(&s.client, &s.sim.url("/resourcelist.xml")).await.into_iter().map(|e| (e.loc.clone(), e)).collect();
    assert_eq!(s_entries.len(), 25);

    let (dir_a, store_a) = temp_store();
    let (listener_a, naming_a) = bind().await;
    let n = harvest(&s.client, &s.sim.url("/resourcelist.xml"), &store_a, &naming_a, "s", &["s"]).await;
    assert_eq!(n, 25);
    let limits = Limits { resource_list_entries: 10, ..Limits::default() };
    let a =
        start(listener_a, naming_a.clone(), &store_a, vec![SetConfig::source("s")], LinkPolicies::default(), limits);

    let (dir_b, store_b) = temp_store();
    let (listener_b, naming_b) = bind().await;
    let n = harvest(&a.client, &naming_a.resource_list("s"), &store_b, &naming_b, "a", &["a"]).await;
    assert_eq!(n, 25);
    let b =
        start(listener_b, naming_b.clone(), &store_b, vec![SetConfig::source("a")], LinkPolicies::default(), limits);

    let b_list = entries(&b.client, &naming_b.resource_list("a")).await;
    let b_changes = entries(&b.client, &naming_b.change_list_part("a", 1)).await;
    assert_eq!(b_list.len(), 25);
    assert_eq!(b_changes.len(), 25);
    for e in b_list.iter().chain(&b_changes) {
        assert!(e.loc.starts_with(naming_b.base()), "{}", e.loc);
        let via = e.link("via").unwrap();
        let original = s_entries.get(&via.href).unwrap_or_else(|| panic!("via {} is not S's resource", via.href));
        let md = original.md.as_ref().unwrap();
        assert_eq!(via.modified, original.lastmod, "S's modified");
        assert_eq!(via.hash, md.hash, "S's hash");
        assert_eq!(via.length, md.length, "S's length");
        assert_eq!(via.media_type, md.media_type, "S's type");
        // B's copy is S's content.
        let b_md = e.md.as_ref().unwrap();
        let s_sha = md.hash.as_ref().unwrap().get(&HashAlgorithm::Sha256);
        assert_eq!(b_md.hash.as_ref().unwrap().get(&HashAlgorithm::Sha256), s_sha);
    }

    // B's provenance of one of its resources names S as the origin and A as the upstream.
    let one = &b_list[0];
    let url = format!("{}?uri={}", naming_b.provenance(), urlencode(&one.loc));
    let (_, json) = get_json(&b.client, &url).await;
    let r = &json["resources"][0];
    let origin = one.link("via").unwrap().href.clone();
    assert_eq!(r["origin"]["href"], origin.as_str());
    let chain: Vec<(&str, &str)> = r["chain"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["role"].as_str().unwrap(), c["uri"].as_str().unwrap()))
        .collect();
    assert_eq!(chain[0], ("origin", origin.as_str()));
    assert_eq!(chain[1].0, "upstream");
    assert!(chain[1].1.starts_with(naming_a.base()), "the upstream is A: {chain:?}");
    assert_eq!(chain[2], ("tributary", one.loc.as_str()));
    // And B can be asked by S's URI directly.
    let by_origin = format!("{}?uri={}", naming_b.provenance(), urlencode(&origin));
    let (_, json) = get_json(&b.client, &by_origin).await;
    assert_eq!(json["resources"][0]["matched_by"], "origin-uri");
    assert_eq!(json["resources"][0]["uri"], one.loc.as_str());
    let _ = doc(&b.client, &naming_b.source_description()).await;
    drop((dir_a, dir_b));
}
