//! Push down an aggregator chain, origin → A → B → C, every part a real process on 127.0.0.1:
//! the origin is a `[[simulate]] push = true` Source that A starts; each Tributary follows the
//! one before it through the channel its Capability List advertises (A's built-in hub for B,
//! B's for C) and polls only hourly, so once the baselines are in, every change that reaches C
//! came down the chain by push. C's republished Change List and bitstreams must carry the
//! origin's content with the `via` chain intact (§14.8), and its provenance must name the
//! origin.
//!
//! The latency of this path is measured, not asserted: `scripts/bench-chain.sh`.

use std::time::Duration;

use sha2::{Digest, Sha256};
use tributary::model::{Change, HashAlgorithm};

use crate::support::net::{eventually, free_port};
use crate::support::publish::entries;
use crate::support::service::{Service, parse_metrics, value};

const LIMIT: Duration = Duration::from_secs(90);

/// One hop: follows `upstream` as source `id`; A also starts the origin on `sim_port`.
fn config(port: u16, id: &str, upstream: &str, sim_port: Option<u16>) -> String {
    let mut c = format!(
        "[aggregator]\nbase_url = \"http://127.0.0.1:{port}/\"\nlisten = \"127.0.0.1:{port}\"\ndata_dir = \"store\"\n\
         user_agent = \"Tributary-test/0.1 (+mailto:test@example.org)\"\n\n\
         [hub]\nallow_private = true\n\n\
         [defaults]\nallow_private = true\nrate = \"unlimited\"\npoll = \"1h\"\npush_poll = \"1h\"\n\n\
         [[source]]\nid = \"{id}\"\nurl = \"{upstream}\"\n"
    );
    if let Some(sim) = sim_port {
        c.push_str(&format!(
            "\n[[simulate]]\nid = \"origin\"\nlisten = \"127.0.0.1:{sim}\"\nresources = 30\nchange_rate = 2.0\n\
             seed = 11\npush = true\n"
        ));
    }
    c
}

async fn source_row(svc: &Service, id: &str) -> serde_json::Value {
    let status = svc.json("api/status").await;
    status["sources"].as_array().unwrap().iter().find(|s| s["id"] == id).cloned().unwrap()
}

/// Waits until the source holds at least the origin's initial 30 resources (some may have
/// been deleted and created since, so "about": at least 25 live).
async fn wait_resources(svc: &Service, id: &str) {
    let what = format!("source {id} holds the origin's resources");
    svc.wait_until(&what, LIMIT, |s| async move { source_row(s, id).await["resources"].as_u64() >= Some(25) }).await;
}

async fn changes(svc: &Service, id: &str) -> u64 {
    source_row(svc, id).await["changes"].as_u64().unwrap()
}

#[tokio::test]
async fn changes_at_the_origin_reach_the_end_of_a_chain_by_push_with_the_via_chain_intact() {
    let (sim, pa, pb, pc) = (free_port(), free_port(), free_port(), free_port());
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let origin_url = format!("http://127.0.0.1:{sim}/.well-known/resourcesync");
    // Each hop starts once the one before holds the origin's resources, so its baseline is
    // the whole set (a hop's baseline is a pull; what follows is push).
    let a = Service::start(dirs[0].path(), &config(pa, "origin", &origin_url, Some(sim)), &[], &[]).await;
    wait_resources(&a, "origin").await;
    let a_set = format!("http://127.0.0.1:{pa}/.well-known/resourcesync");
    let b = Service::start(dirs[1].path(), &config(pb, "a", &a_set, None), &[], &[]).await;
    wait_resources(&b, "a").await;
    let b_set = format!("http://127.0.0.1:{pb}/.well-known/resourcesync");
    let c = Service::start(dirs[2].path(), &config(pc, "b", &b_set, None), &[], &[]).await;
    wait_resources(&c, "b").await;

    for (svc, id) in [(&a, "origin"), (&b, "a"), (&c, "b")] {
        let what = format!("source {id} is followed by push");
        svc.wait_until(&what, LIMIT, |s| async move { source_row(s, id).await["push"]["mode"] == "subscribed" }).await;
    }
    // From here on nothing is polled for an hour: what C gains came by push.
    let before = changes(&c, "b").await;
    let more = eventually(LIMIT, || async { changes(&c, "b").await >= before + 5 }).await;
    assert!(more, "C applied no five changes by push\nA:\n{}\nB:\n{}\nC:\n{}", a.log(), b.log(), c.log());
    let (_, _, metrics) = c.get("metrics").await;
    let applied = value(&parse_metrics(&metrics), "tributary_push_deliveries_total", &[("outcome", "applied")]);
    assert!(applied.unwrap_or(0.0) >= 1.0, "C applied deliveries by push:\n{metrics}");

    // C's republished changes name the origin's resources, with the origin's hashes, and C
    // serves those very bytes.
    let client = &c.client;
    let listed = entries(client, &format!("{}sets/b/changelist-index.xml", c.base)).await;
    let origin_base = format!("http://127.0.0.1:{sim}/");
    let mut checked = 0;
    for (i, e) in listed.iter().enumerate() {
        let md = e.md.as_ref().unwrap();
        let via = e.link("via").unwrap_or_else(|| panic!("no via on {}", e.loc));
        assert!(via.href.starts_with(&origin_base), "via names the origin, not a hop: {}", via.href);
        assert!(e.loc.starts_with(&c.base), "{}", e.loc);
        let later = listed[i + 1..].iter().any(|l| l.loc == e.loc);
        if md.change == Some(Change::Deleted) || later {
            continue;
        }
        let sha = md.hash.as_ref().unwrap().get(&HashAlgorithm::Sha256).unwrap().to_owned();
        assert_eq!(via.hash.as_ref().unwrap().get(&HashAlgorithm::Sha256), Some(sha.as_str()), "origin's hash");
        let r = client.get(&e.loc).send().await.unwrap();
        if r.status().as_u16() == 404 {
            continue; // deleted after the list was read
        }
        let body = r.bytes().await.unwrap();
        let got: String = Sha256::digest(&body).iter().map(|b| format!("{b:02x}")).collect();
        if got != sha {
            // Only a change after the list was read may explain another content.
            let now = entries(client, &format!("{}sets/b/changelist-index.xml", c.base)).await;
            let changed =
                now.iter().filter(|l| l.loc == e.loc).count() > listed.iter().filter(|l| l.loc == e.loc).count();
            assert!(changed, "C serves {got} for {}, which it lists as {sha}", e.loc);
            continue;
        }
        checked += 1;
    }
    assert!(checked >= 3, "only {checked} live resources in C's Change List");

    // C's provenance: the origin first, C's own URI last.
    let one = listed.iter().rev().find(|e| e.md.as_ref().unwrap().change != Some(Change::Deleted)).unwrap();
    let url = format!(
        "{}provenance?uri={}",
        c.base,
        url::form_urlencoded::byte_serialize(one.loc.as_bytes()).collect::<String>()
    );
    let json: serde_json::Value =
        serde_json::from_slice(&client.get(url).send().await.unwrap().bytes().await.unwrap()).unwrap();
    let chain = json["resources"][0]["chain"].as_array().unwrap_or_else(|| panic!("{json}"));
    assert_eq!(chain.first().unwrap()["role"], "origin", "{json}");
    assert!(chain.first().unwrap()["uri"].as_str().unwrap().starts_with(&origin_base), "{chain:?}");
    assert_eq!(chain.last().unwrap()["uri"], one.loc.as_str(), "{chain:?}");
}
