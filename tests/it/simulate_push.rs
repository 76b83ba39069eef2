//! A simulated Source that pushes (`push = true`, `--push`): its own WebSub hub and
//! change-notification channel. First as a real `tributary run` follows it — the source polled
//! only once an hour, so every change after the baseline can only come by push — then its hub
//! alone against test subscribers (axum on 127.0.0.1) that verify its signatures with an HMAC
//! computed here. Every wait is bounded; nothing is timed.

use std::collections::HashMap;
use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use reqwest::StatusCode;
use tributary::model::{Capability, Change, Entry, HashAlgorithm, ReadOptions, W3cDateTime, read_document};

use crate::support::net::{eventually, free_port};
use crate::support::service::{Service, parse_metrics, value};
use crate::support::sim::{RunningSim, start};
use crate::support::subscriber::{OnPost, OnVerify, Subscriber};

/// Generous bounds for a loaded 2-core machine; none is a timing assertion.
const LIMIT: Duration = Duration::from_secs(60);

fn sha256_of(e: &Entry) -> Option<String> {
    e.md.as_ref()?.hash.as_ref()?.get(&HashAlgorithm::Sha256).map(str::to_owned)
}

fn change_of(e: &Entry) -> Option<Change> {
    e.md.as_ref()?.change
}

fn datetime_of(e: &Entry) -> Option<W3cDateTime> {
    e.md.as_ref()?.datetime
}

/// A `tributary run` whose only source is a pushing `[[simulate]]` Source, polled hourly.
fn run_config(port: u16, sim_port: u16) -> String {
    format!(
        "[aggregator]\nbase_url = \"http://127.0.0.1:{port}/\"\nlisten = \"127.0.0.1:{port}\"\ndata_dir = \"store\"\n\
         user_agent = \"Tributary-test/0.1 (+mailto:test@example.org)\"\n\n\
         [[simulate]]\nid = \"sim\"\nlisten = \"127.0.0.1:{sim_port}\"\nresources = 50\nchange_rate = 4.0\n\
         seed = 5\npush = true\n\n\
         [[source]]\nid = \"sim\"\nurl = \"http://127.0.0.1:{sim_port}/.well-known/resourcesync\"\nallow_private = true\n\
         rate = \"unlimited\"\npoll = \"1h\"\npush_poll = \"1h\"\n"
    )
}

/// Every entry of a Change List Index's lists (the simulator's or Tributary's), in order.
async fn change_entries(client: &reqwest::Client, index_url: &str) -> Vec<Entry> {
    let get = |url: String| async move {
        let r = client.get(&url).send().await.unwrap();
        assert!(r.status().is_success(), "{url}: {}", r.status());
        read_document(&r.bytes().await.unwrap(), ReadOptions::named(&url)).unwrap().0
    };
    let index = get(index_url.to_owned()).await;
    let mut out = Vec::new();
    for list in &index.entries {
        out.extend(get(list.loc.clone()).await.entries);
    }
    out
}

async fn push_outcome(svc: &Service, outcome: &str) -> f64 {
    let (_, _, text) = svc.get("metrics").await;
    value(&parse_metrics(&text), "tributary_push_deliveries_total", &[("outcome", outcome)]).unwrap_or(0.0)
}

/// The upstream URL a republished entry came from (its `via` link).
fn via_of(e: &Entry) -> Option<&str> {
    e.links.iter().find(|l| l.rel == "via").map(|l| l.href.as_str())
}

#[tokio::test]
async fn a_tributary_run_follows_a_pushing_simulator_by_push_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (port, sim_port) = (free_port(), free_port());
    let svc = Service::start(dir.path(), &run_config(port, sim_port), &[], &[]).await;
    let sim_base = format!("http://127.0.0.1:{sim_port}/");

    svc.wait_until("the source is followed by push", LIMIT, |s| async move {
        let status = s.json("api/status").await;
        let row = status["sources"].as_array().unwrap().iter().find(|r| r["id"] == "sim").cloned();
        row.is_some_and(|r| r["push"]["mode"] == "subscribed")
    })
    .await;
    let status = svc.json("api/status").await;
    let row = status["sources"].as_array().unwrap().iter().find(|r| r["id"] == "sim").unwrap().clone();
    assert_eq!(row["push"]["hub"], format!("{sim_base}hub"), "{row}");
    assert_eq!(row["push"]["topic"], format!("{sim_base}notifications"), "{row}");
    // Changes from here on were published after the subscription was verified: every one of
    // them reaches Tributary in a delivery (a second of margin for the clocks' reading).
    let subscribed = W3cDateTime::now().unix_nanos() + 1_000_000_000;

    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    let upstream_index = format!("{sim_base}changelist.xml");
    let after = |entries: Vec<Entry>| -> Vec<Entry> {
        entries.into_iter().filter(|e| datetime_of(e).is_some_and(|t| t.unix_nanos() > subscribed)).collect()
    };
    let mut upstream = Vec::new();
    let enough = eventually(LIMIT, || {
        let (client, index) = (&client, &upstream_index);
        async move { after(change_entries(client, index).await).len() >= 8 }
    })
    .await;
    assert!(enough, "the simulator made changes after the subscription");
    upstream.extend(after(change_entries(&client, &upstream_index).await));

    // Each of those changes is in Tributary's Change List once, with the hash of the bytes
    // served upstream: fetched and verified on delivery, since the next poll is an hour away.
    let ours = format!("{}sets/sim/changelist-index.xml", svc.base);
    let held = |entries: &[Entry], u: &Entry| {
        entries
            .iter()
            .filter(|e| {
                via_of(e) == Some(u.loc.as_str()) && change_of(e) == change_of(u) && sha256_of(e) == sha256_of(u)
            })
            .count()
    };
    let all_in = eventually(LIMIT, || {
        let (client, ours, upstream) = (&client, &ours, &upstream);
        async move {
            let mine = change_entries(client, ours).await;
            upstream.iter().all(|u| held(&mine, u) >= 1)
        }
    })
    .await;
    let mine = change_entries(&client, &ours).await;
    let missing: Vec<&str> = upstream.iter().filter(|u| held(&mine, u) == 0).map(|u| u.loc.as_str()).collect();
    assert!(all_in, "changes never pushed to Tributary: {missing:?}; log:\n{}", svc.log());
    for u in &upstream {
        assert_eq!(held(&mine, u), 1, "{} {:?} held once", u.loc, change_of(u));
    }
    assert!(push_outcome(&svc, "applied").await >= 1.0);
    assert_eq!(push_outcome(&svc, "gap").await, 0.0, "consecutive payloads chain from/until");
    assert_eq!(push_outcome(&svc, "bad_signature").await, 0.0);
    let status = svc.json("api/status").await;
    let row = status["sources"].as_array().unwrap().iter().find(|r| r["id"] == "sim").unwrap().clone();
    assert_eq!(row["push"]["mode"], "subscribed", "{row}");
    assert!(row["last_change"].is_string(), "{row}");
    // The demo hub logged the subscription by its callback's host: the URL (Tributary's
    // `websub/{id}`, a capability) is in no log line.
    let log = svc.log();
    assert!(log.contains("simulator: subscription verified"), "{log}");
    assert!(!log.contains("websub/"), "a callback URL is logged:\n{log}");
}

/// A form POST to the simulator's hub: status and text.
async fn hub_post(s: &RunningSim, content_type: &str, body: String) -> (StatusCode, String) {
    let r = s.client.post(s.sim.url("/hub")).header("content-type", content_type).body(body).send().await.unwrap();
    (r.status(), r.text().await.unwrap())
}

fn form(pairs: &[(&str, &str)]) -> String {
    let mut f = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        f.append_pair(k, v);
    }
    f.finish()
}

const FORM: &str = "application/x-www-form-urlencoded";

async fn subscribe(s: &RunningSim, callback: &str, secret: &str) -> StatusCode {
    let topic = s.sim.url("/notifications");
    let pairs = [("hub.mode", "subscribe"), ("hub.topic", &topic), ("hub.callback", callback), ("hub.secret", secret)];
    hub_post(s, FORM, form(&pairs)).await.0
}

fn hmac_sha256(secret: &str, body: &[u8]) -> String {
    let mut mac = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[tokio::test]
async fn the_hub_delivers_signed_chained_payloads_only_to_verified_callbacks() {
    let s = start(|c| {
        c.resources = 20;
        c.push = true;
    })
    .await;
    let good = Subscriber::start(OnPost::Accept, OnVerify::Echo).await;
    let liar = Subscriber::start(OnPost::Accept, OnVerify::Wrong).await;
    assert_eq!(subscribe(&s, &good.callback(), "good-secret").await, StatusCode::ACCEPTED);
    assert_eq!(subscribe(&s, &liar.callback(), "liar-secret").await, StatusCode::ACCEPTED);
    let verified =
        eventually(LIMIT, || async { s.sim.subscribers().len() == 1 && !liar.verifications().is_empty() }).await;
    assert!(verified, "one verified subscriber; the liar asked");
    let asked = &good.verifications()[0];
    assert_eq!(asked["who"], "test", "the callback's own query is kept");
    assert_eq!(asked["hub.mode"], "subscribe");
    assert_eq!(asked["hub.lease_seconds"], "864000", "the default lease");

    for n in [1, 3, 2] {
        s.sim.step(n);
    }
    assert!(eventually(LIMIT, || async { good.deliveries().len() == 3 }).await, "three payloads delivered");
    let deliveries = good.deliveries();
    let history = s.sim.history();
    assert_eq!(history.len(), 6);
    let mut previous_until: Option<String> = None;
    let mut seen = Vec::new();
    for d in &deliveries {
        assert_eq!(d.header("x-hub-signature"), Some(hmac_sha256("good-secret", &d.body).as_str()));
        assert_eq!(d.header("content-type"), Some("application/xml"));
        let link = d.header("link").unwrap();
        assert!(link.contains(&format!("<{}>; rel=\"self\"", s.sim.url("/notifications"))), "{link}");
        let doc = d.document();
        let md = doc.header.md.clone().unwrap();
        assert_eq!(md.capability, Some(Capability::ChangeNotification));
        let (from, until) = d.interval();
        if let Some(p) = &previous_until {
            assert_eq!(&from, p, "each payload starts where the last ended");
        }
        assert!(from < until);
        assert_eq!(until, datetime_of(doc.entries.last().unwrap()).unwrap().to_string());
        previous_until = Some(until);
        seen.extend(doc.entries);
    }
    assert_eq!(deliveries.iter().map(|d| d.document().entries.len()).collect::<Vec<_>>(), [1, 3, 2]);
    for (e, h) in seen.iter().zip(&history) {
        assert_eq!(e.loc, h.url);
        assert_eq!(change_of(e), Some(h.change));
        assert_eq!(sha256_of(e), h.sha256.as_ref().map(|x| x.to_string()));
    }
    assert_eq!(liar.posts(), 0, "a callback that did not echo the challenge gets nothing");
    assert_eq!(s.sim.subscribers()[0].counts.delivered, 3);

    // The topic serves the latest payload, named by its Link header (Change Notification §4.1).
    let (status, headers, body) = s.get("/notifications").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, deliveries[2].body.to_vec());
    assert!(headers["link"].to_str().unwrap().contains(&format!("<{}>; rel=\"hub\"", s.sim.url("/hub"))));

    // Unsubscribed once verified: nothing more is delivered.
    let topic = s.sim.url("/notifications");
    let un = form(&[("hub.mode", "unsubscribe"), ("hub.topic", &topic), ("hub.callback", &good.callback())]);
    assert_eq!(hub_post(&s, FORM, un).await.0, StatusCode::ACCEPTED);
    assert!(eventually(LIMIT, || async { s.sim.subscribers().is_empty() }).await, "unsubscribed");
    s.sim.step(1);
    assert_eq!(s.sim.notifications_sent(), 4);
    assert_eq!(good.deliveries().len(), 3);
}

#[tokio::test]
async fn the_hub_refuses_bad_requests_and_denies_other_topics() {
    let s = start(|c| c.push = true).await;
    let sub = Subscriber::start(OnPost::Accept, OnVerify::Echo).await;
    let topic = s.sim.url("/notifications");
    let cb = sub.callback();
    let ok = [("hub.mode", "subscribe"), ("hub.topic", topic.as_str()), ("hub.callback", cb.as_str())];
    let without = |k: &str| form(&ok.iter().filter(|(key, _)| *key != k).copied().collect::<Vec<_>>());
    let with = |k: &str, v: &str| {
        let mut p: Vec<(&str, &str)> = ok.iter().filter(|(key, _)| *key != k).copied().collect();
        p.push((k, v));
        form(&p)
    };
    let bad = [
        (without("hub.mode"), "hub.mode is missing"),
        (with("hub.mode", "publish"), "not subscribe or unsubscribe"),
        (without("hub.topic"), "hub.topic is missing"),
        (without("hub.callback"), "hub.callback is missing"),
        (with("hub.callback", "ftp://127.0.0.1/cb"), "not an absolute http"),
        (with("hub.lease_seconds", "soon"), "hub.lease_seconds"),
        (with("hub.secret", &"s".repeat(200)), "shorter than 200 bytes"),
    ];
    for (body, why) in bad {
        let (status, text) = hub_post(&s, FORM, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {text}");
        assert!(text.contains(why), "{body}: {text}");
    }
    assert_eq!(hub_post(&s, "application/xml", form(&ok)).await.0, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let get = s.client.get(s.sim.url("/hub")).send().await.unwrap();
    assert_eq!(get.status(), StatusCode::METHOD_NOT_ALLOWED);

    let other = with("hub.topic", "http://127.0.0.1:9/other");
    assert_eq!(hub_post(&s, FORM, other).await.0, StatusCode::ACCEPTED);
    let denied = eventually(LIMIT, || async { !sub.verifications().is_empty() }).await;
    assert!(denied, "the callback hears of the denial");
    let v: HashMap<String, String> = sub.verifications()[0].clone();
    assert_eq!(v["hub.mode"], "denied");
    s.sim.step(2);
    assert!(s.sim.subscribers().is_empty());
    assert_eq!(sub.posts(), 0, "nothing was delivered to a denied subscription");
}

#[tokio::test]
async fn check_accepts_the_capability_list_that_advertises_the_channel() {
    let s = start(|c| c.push = true).await;
    let (_, caps) = s.doc("/capabilitylist.xml").await;
    let channel = caps
        .entries
        .iter()
        .find(|e| e.md.as_ref().and_then(|m| m.capability) == Some(Capability::ChangeNotification))
        .expect("a change-notification entry");
    assert_eq!(channel.loc, s.sim.url("/notifications"));
    let hub = channel.links.iter().find(|l| l.rel == "hub").expect("a hub link");
    assert_eq!(hub.href, s.sim.url("/hub"));
    assert_eq!(s.sim.push_channel(), Some((s.sim.url("/hub"), s.sim.url("/notifications"))));

    // The binary says so too, from the URL.
    let url = s.sim.url("/capabilitylist.xml");
    let out = crate::support::cli::run(&["check", &url]).await;
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));

    // Without push, no channel is advertised and the hub is not there.
    let plain = start(|_| {}).await;
    let (body, _) = plain.doc("/capabilitylist.xml").await;
    assert!(!String::from_utf8_lossy(&body).contains("change-notification"));
    let r = plain.client.post(plain.sim.url("/hub")).header("content-type", FORM).body("x=1").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn a_slow_subscriber_gets_the_ticks_coalesced_into_chained_payloads() {
    let s = start(|c| {
        c.resources = 20;
        c.push = true;
        c.clock = tributary::simulate::ClockMode::Real;
        c.change_rate_per_sec = 40.0;
    })
    .await;
    // Each delivery takes a second: far slower than the ticks (every 25 ms).
    let slow = Subscriber::start(OnPost::Slow(Duration::from_secs(1)), OnVerify::Echo).await;
    assert_eq!(subscribe(&s, &slow.callback(), "k").await, StatusCode::ACCEPTED);
    assert!(eventually(LIMIT, || async { s.sim.subscribers().len() == 1 }).await, "verified");
    let ticker = s.sim.start_ticking();
    assert!(eventually(LIMIT, || async { slow.deliveries().len() >= 3 }).await, "deliveries go on");
    drop(ticker);
    let made = s.sim.history().len();
    let all = eventually(LIMIT, || async {
        slow.deliveries().iter().map(|d| d.document().entries.len()).sum::<usize>() == made
    })
    .await;
    assert!(all, "every change is notified, the ones waiting when the ticker stopped included");
    let deliveries = slow.deliveries();
    assert!(deliveries.len() < made, "{} payloads for {made} changes: ticks were coalesced", deliveries.len());
    assert!(deliveries.iter().any(|d| d.document().entries.len() > 1));
    for pair in deliveries.windows(2) {
        assert_eq!(pair[1].interval().0, pair[0].interval().1, "consecutive intervals");
    }
}
