//! Tributary's own change notifications through its built-in WebSub hub, end to end: a real
//! `tributary run` harvesting a simulated Source that keeps changing, and test subscribers
//! (small servers on 127.0.0.1) that subscribe, verify, receive, fail, hang, unsubscribe and
//! let leases run out. Every wait is bounded; nothing is timed.

use std::time::Duration;

use crate::support::cli::tributary;
use crate::support::net::free_port;
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
pub(crate) async fn hub_post(s: &Service, pairs: &[(&str, &str)]) -> (u16, String) {
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
        assert_eq!(websub::verify(SECRET.as_bytes(), Some(sig), &d.body), Ok(websub::Method::Sha256));
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
    let (_, _, changes) = s.get("sets/all/changelist-index.xml").await;
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

    // `tributary check` knows the payload for what it is, and finds nothing wrong with it.
    let url = topic(&s, "all");
    let out = tokio::task::spawn_blocking(move || tributary(&["check", &url]).output().unwrap()).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains(": Change Notification, "), "{text}");
    assert!(text.trim_end().ends_with("0 errors, 0 warnings"), "{text}");
}

/// Waits until `control` has `more` deliveries beyond what it has now: time enough for any
/// notification in flight to anyone to have landed.
async fn after_more(s: &Service, control: &Subscriber, more: usize) {
    let n = control.deliveries().len() + more;
    wait_deliveries(s, control, n).await;
}

#[tokio::test]
async fn an_unsubscribed_callback_gets_nothing_more() {
    let (_dir, s) = start(TEST_HUB).await;
    let (leaving, control) = (
        Subscriber::start(OnPost::Accept, OnVerify::Echo).await,
        Subscriber::start(OnPost::Accept, OnVerify::Echo).await,
    );
    subscribe(&s, "sim", &leaving, &[]).await;
    subscribe(&s, "sim", &control, &[]).await;
    wait_subscribers(&s, "sim", 2).await;
    wait_deliveries(&s, &leaving, 1).await;
    assert!(leaving.deliveries()[0].header("x-hub-signature").is_none(), "no secret, no signature");

    unsubscribe(&s, "sim", &leaving).await;
    wait_subscribers(&s, "sim", 1).await;
    let v = leaving.verifications().pop().unwrap();
    assert_eq!((v["hub.mode"].as_str(), v.get("hub.lease_seconds")), ("unsubscribe", None));
    after_more(&s, &control, 1).await;
    let before = leaving.posts();
    after_more(&s, &control, 2).await;
    assert_eq!(leaving.posts(), before, "no delivery after the unsubscription was verified");
    assert_chained(&control.deliveries());
}

#[tokio::test]
async fn a_lease_runs_out() {
    let (_dir, s) = start(TEST_HUB).await;
    let (brief, control) = (
        Subscriber::start(OnPost::Accept, OnVerify::Echo).await,
        Subscriber::start(OnPost::Accept, OnVerify::Echo).await,
    );
    subscribe(&s, "sim", &control, &[]).await;
    subscribe(&s, "sim", &brief, &[("hub.lease_seconds", "1")]).await;
    // The two verifications run concurrently, in either order.
    s.wait_until("both were asked to verify", LONG, |_| async {
        !brief.verifications().is_empty() && !control.verifications().is_empty()
    })
    .await;
    assert_eq!(brief.verifications()[0]["hub.lease_seconds"], "1");
    assert_eq!(control.verifications()[0]["hub.lease_seconds"], "864000", "the default lease: 10 days");
    // Once the lease has ended the hub counts only the control and sends the brief one nothing.
    s.wait_until("the lease ended", LONG, |s| async move {
        let status = s.json("api/status").await;
        let row = status["sets"].as_array().unwrap().iter().find(|r| r["id"] == "sim").unwrap().clone();
        row["notifications"]["deliveries"]["subscriptions"] == 1
    })
    .await;
    after_more(&s, &control, 1).await;
    let before = brief.posts();
    after_more(&s, &control, 2).await;
    assert_eq!(brief.posts(), before);
}

#[tokio::test]
async fn failing_hanging_and_redirecting_subscribers_do_not_hold_up_the_others() {
    let (_dir, s) = start(&format!("{TEST_HUB}queue = 2\nmax_failed_notifications = 1000\n")).await;
    let good = Subscriber::start(OnPost::Accept, OnVerify::Echo).await;
    let target = Subscriber::start(OnPost::Accept, OnVerify::Echo).await;
    let failing = Subscriber::start(OnPost::Status(500), OnVerify::Echo).await;
    let hanging = Subscriber::start(OnPost::Hang(Duration::from_secs(30)), OnVerify::Echo).await;
    let redirecting = Subscriber::start(OnPost::Redirect(target.callback()), OnVerify::Echo).await;
    for sub in [&failing, &hanging, &redirecting, &good] {
        subscribe(&s, "sim", sub, &[]).await;
    }
    wait_subscribers(&s, "sim", 4).await;
    wait_deliveries(&s, &good, 6).await;
    assert_chained(&good.deliveries());
    // Each failure was tried again, never forever; a redirect is a failure, not followed.
    s.wait_until("the failing callbacks were retried", LONG, |_| async {
        failing.posts() >= 4 && redirecting.posts() >= 4 && hanging.posts() >= 2
    })
    .await;
    assert_eq!(target.posts(), 0, "the redirect was not followed");
    // The hanging subscriber fell behind: its backlog was dropped, and the API says so.
    s.wait_until("the hanging subscriber's losses are counted", LONG, |s| async move {
        let status = s.json("api/status").await;
        let row = status["sets"].as_array().unwrap().iter().find(|r| r["id"] == "sim").unwrap().clone();
        row["notifications"]["deliveries"]["lost"].as_u64() > Some(0)
    })
    .await;
    // Failing subscribers stay subscribed (only 410 ends a subscription).
    assert_eq!(subscribers(&s, "sim").await, 4);
}

#[tokio::test]
async fn a_subscriber_that_fell_behind_is_told_by_a_gap_and_a_header() {
    let (_dir, s) = start(&format!("{TEST_HUB}queue = 1\n")).await;
    let sub = Subscriber::start(OnPost::Accept, OnVerify::Echo).await;
    subscribe(&s, "sim", &sub, &[]).await;
    wait_deliveries(&s, &sub, 1).await;
    sub.set_on_post(OnPost::Hang(Duration::from_secs(30)));
    // Hanging, it takes two timeouts to give each notification up, and one arrives per poll.
    let posts = sub.posts();
    s.wait_until("several deliveries hung", LONG, |_| async { sub.posts() >= posts + 4 }).await;
    let before = sub.deliveries().len();
    sub.set_on_post(OnPost::Accept);
    s.wait_until("a delivery tells of dropped notifications", LONG, |_| async {
        sub.deliveries()[before..].iter().any(|d| d.header("x-tributary-dropped").is_some())
    })
    .await;
    let all = sub.deliveries();
    let i = (before..all.len()).find(|&i| all[i].header("x-tributary-dropped").is_some()).unwrap();
    let dropped: u64 = all[i].header("x-tributary-dropped").unwrap().parse().unwrap();
    assert!(dropped >= 1);
    let (prev_until, next_from) = (all[i - 1].interval().1, all[i].interval().0);
    let (prev_until, next_from): (tributary::model::W3cDateTime, tributary::model::W3cDateTime) =
        (prev_until.parse().unwrap(), next_from.parse().unwrap());
    assert!(next_from > prev_until, "the chain shows the gap: {prev_until} .. {next_from}");
}

#[tokio::test]
async fn a_callback_answering_410_ends_its_subscription() {
    let (_dir, s) = start(TEST_HUB).await;
    let sub = Subscriber::start(OnPost::Accept, OnVerify::Echo).await;
    subscribe(&s, "sim", &sub, &[]).await;
    wait_deliveries(&s, &sub, 1).await;
    sub.set_on_post(OnPost::Status(410));
    wait_subscribers(&s, "sim", 0).await;
}

#[tokio::test]
async fn malformed_and_unwanted_requests_are_refused() {
    let (_dir, s) = start(TEST_HUB).await;
    let sub = Subscriber::start(OnPost::Accept, OnVerify::Echo).await;
    let (t, cb) = (topic(&s, "sim"), sub.callback());
    let base = [("hub.topic", t.as_str()), ("hub.callback", cb.as_str())];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut p: Vec<(&str, &str)> = base.to_vec();
        p.extend_from_slice(extra);
        p
    };
    let cases: [(Vec<(&str, &str)>, &str); 6] = [
        (with(&[("hub.mode", "publish")]), "hub.mode \"publish\""),
        (with(&[]), "hub.mode is missing"),
        (vec![("hub.mode", "subscribe"), ("hub.callback", cb.as_str())], "hub.topic is missing"),
        (vec![("hub.mode", "subscribe"), ("hub.topic", t.as_str())], "hub.callback is missing"),
        (with(&[("hub.mode", "subscribe"), ("hub.lease_seconds", "soon")]), "hub.lease_seconds"),
        (
            vec![("hub.mode", "subscribe"), ("hub.topic", t.as_str()), ("hub.callback", "file:///etc/passwd")],
            "is not an absolute http",
        ),
    ];
    for (pairs, why) in cases {
        let (status, body) = hub_post(&s, &pairs).await;
        assert_eq!(status, 400, "{pairs:?}: {body}");
        assert!(body.contains(why), "{pairs:?}: {body}");
    }
    let big = "s".repeat(200);
    let (status, body) =
        hub_post(&s, &[&with(&[("hub.mode", "subscribe")])[..], &[("hub.secret", big.as_str())]].concat()).await;
    assert_eq!((status, body.contains("shorter than 200 bytes")), (400, true), "{body}");
    let plain = s.client.post(format!("{}hub", s.base)).body("hub.mode=subscribe").send().await.unwrap();
    assert_eq!(plain.status().as_u16(), 415);
    let get = s.client.get(format!("{}hub", s.base)).send().await.unwrap();
    assert_eq!(get.status().as_u16(), 405);
    assert_eq!(get.headers()["allow"], "POST");
    assert!(sub.verifications().is_empty(), "nothing refused up front reached the callback");

    // A topic that is not one of ours is denied at the callback.
    let other = format!("{}sets/nope/notifications", s.base);
    let (status, _) =
        hub_post(&s, &[("hub.mode", "subscribe"), ("hub.topic", other.as_str()), ("hub.callback", cb.as_str())]).await;
    assert_eq!(status, 202);
    s.wait_until("the denial", LONG, |_| async { !sub.verifications().is_empty() }).await;
    let denial = &sub.verifications()[0];
    assert_eq!((denial["hub.mode"].as_str(), denial["hub.topic"].as_str()), ("denied", other.as_str()));
    assert!(denial.contains_key("hub.reason"));

    // A callback that does not echo the challenge is not subscribed; one that does is, with its
    // lease clamped to the hub's maximum.
    let liar = Subscriber::start(OnPost::Accept, OnVerify::Wrong).await;
    subscribe(&s, "sim", &liar, &[]).await;
    s.wait_until("the liar was asked", LONG, |_| async { !liar.verifications().is_empty() }).await;
    subscribe(&s, "sim", &sub, &[("hub.lease_seconds", "999999999")]).await;
    wait_subscribers(&s, "sim", 1).await;
    assert_eq!(sub.verifications()[1]["hub.lease_seconds"], "2678400");
    wait_deliveries(&s, &sub, 1).await;
    assert_eq!(liar.posts(), 0);
}

#[tokio::test]
async fn callbacks_on_refused_addresses_are_not_contacted() {
    // The default policy: no loopback or private callbacks.
    let (_dir, s) = start("").await;
    let sub = Subscriber::start(OnPost::Accept, OnVerify::Echo).await;
    let t = topic(&s, "sim");
    let literal = sub.callback();
    let (status, body) =
        hub_post(&s, &[("hub.mode", "subscribe"), ("hub.topic", t.as_str()), ("hub.callback", literal.as_str())]).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("loopback"), "{body}");
    // A name is checked when it resolves: the verification never reaches it.
    let named = format!("http://localhost:{}/cb", sub.addr.port());
    let (status, _) =
        hub_post(&s, &[("hub.mode", "subscribe"), ("hub.topic", t.as_str()), ("hub.callback", named.as_str())]).await;
    assert_eq!(status, 202);
    s.wait_until("the verification was refused", LONG, |s| async move { s.log().contains("intent not verified") })
        .await;
    assert!(sub.verifications().is_empty());
    assert_eq!(subscribers(&s, "sim").await, 0);
}

#[tokio::test]
async fn subscriptions_and_the_chain_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(free_port(), "", TEST_HUB);
    let mut s = Service::start(dir.path(), &config, &[], &[]).await;
    let sub = Subscriber::start(OnPost::Accept, OnVerify::Echo).await;
    subscribe(&s, "all", &sub, &[("hub.secret", SECRET)]).await;
    wait_deliveries(&s, &sub, 2).await;
    assert!(s.terminate().await.success());
    let before = sub.deliveries().len();
    let s = Service::start(dir.path(), &config, &[], &[]).await;
    assert_eq!(subscribers(&s, "all").await, 1, "the subscription was kept");
    wait_deliveries(&s, &sub, before + 2).await;
    assert_eq!(sub.verifications().len(), 1, "no new verification was needed");
    let all = sub.deliveries();
    for d in &all {
        let sig = d.header("x-hub-signature").unwrap();
        assert!(websub::verify(SECRET.as_bytes(), Some(sig), &d.body).is_ok());
    }
    // Nothing lost, nothing repeated: the first payload after the restart starts where the last
    // one before it ended.
    assert_chained(&all);
}

#[tokio::test]
async fn an_external_hub_gets_the_payload_or_a_ping() {
    for mode in ["payload", "ping"] {
        let external = Subscriber::start(OnPost::Accept, OnVerify::Echo).await;
        let dir = tempfile::tempdir().unwrap();
        let hub_url = external.callback();
        let aggregator = format!("hub = \"{hub_url}\"");
        let s = Service::start(
            dir.path(),
            &config(free_port(), &aggregator, &format!("external_mode = \"{mode}\"")),
            &[],
            &[],
        )
        .await;
        let (_, _, cap) = s.get("sets/sim/capabilitylist.xml").await;
        assert!(cap.contains(&format!("<rs:ln rel=\"hub\" href=\"{}\"/>", hub_url.replace('&', "&amp;"))), "{cap}");
        let (status, _) = hub_post(&s, &[("hub.mode", "subscribe")]).await;
        assert_eq!(status, 404, "subscriptions belong to the external hub");
        wait_deliveries(&s, &external, 2).await;
        let d = &external.deliveries()[0];
        let t = topic(&s, "sim");
        match mode {
            "payload" => {
                assert_eq!(d.header("content-type"), Some("application/xml"));
                assert_eq!(d.header("link"), Some(format!("<{t}>; rel=\"self\", <{hub_url}>; rel=\"hub\"").as_str()));
                assert!(d.header("x-hub-signature").is_none());
                assert_eq!(d.document().header.md.unwrap().capability, Some(Capability::ChangeNotification));
            }
            _ => {
                assert_eq!(d.header("content-type"), Some("application/x-www-form-urlencoded"));
                let form: std::collections::HashMap<String, String> =
                    url::form_urlencoded::parse(&d.body).into_owned().collect();
                assert_eq!((form["hub.mode"].as_str(), form["hub.url"].as_str()), ("publish", t.as_str()));
                // What the hub then fetches: the latest payload, with the Link header.
                let (status, headers, body) = s.get("sets/sim/notifications").await;
                assert_eq!(status, 200);
                assert!(headers["link"].to_str().unwrap().contains(&hub_url));
                assert!(body.contains("change-notification"), "{body}");
            }
        }
        let (status, headers, _) = s.get("sets/sim/notifications").await;
        assert_eq!(status, 200);
        assert_eq!(headers["content-type"], "application/xml");
    }
}
