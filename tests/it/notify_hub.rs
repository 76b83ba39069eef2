//! Tributary's own change notifications through its built-in WebSub hub, end to end: a real
//! `tributary run` harvesting a simulated Source that keeps changing, and test subscribers
//! (small servers on 127.0.0.1) that subscribe, verify, receive, fail, hang, unsubscribe and
//! let leases run out. Every wait is bounded; nothing is timed.

use std::time::Duration;

use crate::support::net::{eventually, free_port};
use crate::support::service::Service;
use crate::support::subscriber::{Delivery, OnPost, OnVerify, Subscriber};
use tributary::model::{Capability, Change};
use tributary::websub;

const SECRET: &str = "a shared secret";
const LONG: Duration = Duration::from_secs(60);

/// One source `sim` (a simulator changing twice a second, polled every second) and the merged
/// set `all`; `aggregator` and `hub` are added to those tables.
fn config(port: u16, aggregator: &str, hub: &str) -> String {
    let sim = free_port();
    format!(
        "[aggregator]\nbase_url = \"http://127.0.0.1:{port}/\"\nlisten = \"127.0.0.1:{port}\"\ndata_dir = \"store\"\n\
         user_agent = \"Tributary-test/0.1 (+mailto:test@example.org)\"\n{aggregator}\n\n\
         [hub]\n{hub}\n\n\
         [[simulate]]\nid = \"sim\"\nlisten = \"127.0.0.1:{sim}\"\nresources = 30\nchange_rate = 2.0\nseed = 11\n\n\
         [[source]]\nid = \"sim\"\nurl = \"http://127.0.0.1:{sim}/.well-known/resourcesync\"\nallow_private = true\n\
         rate = \"unlimited\"\npoll = \"1s\"\n\n[[set]]\nid = \"all\"\nsources = [\"sim\"]\n"
    )
}

/// A hub that may call back to 127.0.0.1, with quick retries for the failure tests.
const TEST_HUB: &str = "allow_private = true\nlease_min = \"1s\"\nrequest_timeout = \"1s\"\ndelivery_attempts = 2\n\
                        retry_backoff = \"100ms\"\nmax_retry_backoff = \"200ms\"\n";

async fn start(hub: &str) -> (tempfile::TempDir, Service) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let service = Service::start(dir.path(), &config(port, "", hub), &[], &[]).await;
    (dir, service)
}

fn topic(s: &Service, set: &str) -> String {
    format!("{}sets/{set}/notifications", s.base)
}

/// POSTs a form to the hub: status and body.
async fn hub_post(s: &Service, pairs: &[(&str, &str)]) -> (u16, String) {
    let mut form = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        form.append_pair(k, v);
    }
    let r = s
        .client
        .post(format!("{}hub", s.base))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(form.finish())
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn subscribe(s: &Service, set: &str, sub: &Subscriber, extra: &[(&str, &str)]) {
    let (t, cb) = (topic(s, set), sub.callback());
    let mut pairs = vec![("hub.mode", "subscribe"), ("hub.topic", t.as_str()), ("hub.callback", cb.as_str())];
    pairs.extend_from_slice(extra);
    let (status, body) = hub_post(s, &pairs).await;
    assert_eq!(status, 202, "{body}");
}

async fn unsubscribe(s: &Service, set: &str, sub: &Subscriber) {
    let (t, cb) = (topic(s, set), sub.callback());
    let (status, body) =
        hub_post(s, &[("hub.mode", "unsubscribe"), ("hub.topic", t.as_str()), ("hub.callback", cb.as_str())]).await;
    assert_eq!(status, 202, "{body}");
}

/// The built-in hub's count of verified, unexpired subscriptions of `set`.
async fn subscribers(s: &Service, set: &str) -> u64 {
    let status = s.json("api/status").await;
    let row = status["sets"].as_array().unwrap().iter().find(|r| r["id"] == set).unwrap().clone();
    row["notifications"]["subscribers"].as_u64().unwrap()
}

async fn wait_subscribers(s: &Service, set: &str, n: u64) {
    s.wait_until(&format!("{set} has {n} subscribers"), LONG, |s| async move { subscribers(s, set).await == n }).await;
}

async fn wait_deliveries(s: &Service, sub: &Subscriber, n: usize) {
    let what = format!("{n} deliveries");
    s.wait_until(&what, LONG, |_| async { sub.deliveries().len() >= n }).await;
}

/// Each delivery's `from` is the previous one's `until`.
fn assert_chained(deliveries: &[Delivery]) {
    for pair in deliveries.windows(2) {
        let (prev, next) = (pair[0].interval(), pair[1].interval());
        assert_eq!(next.0, prev.1, "notifications must cover consecutive intervals");
    }
}

#[tokio::test]
async fn a_subscriber_is_verified_and_receives_signed_chained_notifications() {
    let (_dir, s) = start(TEST_HUB).await;
    // The channel is advertised in the set's Capability List, with the hub.
    let (status, _, cap) = s.get("sets/all/capabilitylist.xml").await;
    assert_eq!(status, 200);
    let expected = format!(
        "<url><loc>{}</loc><rs:md capability=\"change-notification\"/><rs:ln rel=\"hub\" href=\"{}hub\"/></url>",
        topic(&s, "all"),
        s.base
    );
    assert!(cap.contains(&expected), "{cap}");

    let sub = Subscriber::start(OnPost::Accept, OnVerify::Echo).await;
    subscribe(&s, "all", &sub, &[("hub.secret", SECRET), ("hub.lease_seconds", "3600")]).await;
    wait_subscribers(&s, "all", 1).await;
    let v = &sub.verifications()[0];
    assert_eq!(v["hub.mode"], "subscribe");
    assert_eq!(v["hub.topic"], topic(&s, "all"));
    assert_eq!(v["hub.lease_seconds"], "3600");
    assert_eq!(v["who"], "test", "the callback's own query is kept");
    assert_eq!(v["hub.challenge"].len(), 32);

    wait_deliveries(&s, &sub, 4).await;
    let got = sub.deliveries();
    for d in &got {
        assert_eq!(d.header("content-type"), Some("application/xml"));
        let link = format!("<{}>; rel=\"self\", <{}hub>; rel=\"hub\"", topic(&s, "all"), s.base);
        assert_eq!(d.header("link"), Some(link.as_str()));
        let sig = d.header("x-hub-signature").expect("signed: the subscriber gave a secret");
        assert_eq!(websub::verify(SECRET.as_bytes(), &d.body, sig), Ok(websub::Algorithm::Sha256));
        assert!(d.header("x-tributary-dropped").is_none());
        let doc = d.document();
        let md = doc.header.md.as_ref().unwrap();
        assert_eq!(md.capability, Some(Capability::ChangeNotification));
        let up = doc.header.links.iter().find(|l| l.rel == "up").unwrap();
        assert_eq!(up.href, format!("{}sets/all/capabilitylist.xml", s.base));
        assert!(!doc.entries.is_empty());
        let mut last = md.from.unwrap();
        for e in &doc.entries {
            let emd = e.md.as_ref().unwrap();
            let at = emd.datetime.unwrap();
            assert!(at >= last && at <= md.until.unwrap(), "forward chronological, inside from..until");
            last = at;
            assert!(matches!(emd.change, Some(Change::Created | Change::Updated | Change::Deleted)));
            assert!(e.loc.starts_with(&format!("{}r/sim/", s.base)), "{}", e.loc);
            assert!(e.links.iter().any(|l| l.rel == "via"), "the via link, as in the Change List");
        }
    }
    assert_chained(&got);

    // Every notified change is in the set's change log, as the Change List shows it.
    let (_, _, changes) = s.get("sets/all/changelist.xml").await;
    assert!(changes.contains("changelist-1.xml"), "{changes}");
    let (_, _, list) = s.get("sets/all/changelist-1.xml").await;
    let first = &got[0].document().entries[0];
    let needle = format!("<loc>{}</loc><lastmod>{}</lastmod>", first.loc, first.lastmod.unwrap());
    assert!(list.contains(&needle), "{needle} not in\n{list}");

    // The topic answers with the latest payload and the Link header (what a ping-model hub fetches).
    let (status, headers, body) = s.get("sets/all/notifications").await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "application/xml");
    assert!(headers["link"].to_str().unwrap().contains("rel=\"hub\""));
    assert!(body.contains("capability=\"change-notification\""), "{body}");
    let head = s.client.head(topic(&s, "all")).send().await.unwrap();
    assert_eq!(head.status().as_u16(), 200);
    assert!(head.headers().contains_key("link"));
}
