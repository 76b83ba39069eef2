//! The subscribing side of push, end to end: a real `tributary run` process, an upstream
//! ResourceSync Source whose Capability List advertises a change-notification channel, and a
//! WebSub hub written here (`support::push`). What a hostile hub or stranger cannot make push
//! do is in `hostile::push`. Every wait is bounded.

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use tributary::model::W3cDateTime;

use crate::support::net::{free_port, listen};
use crate::support::push::*;
use crate::support::service::Service;

#[tokio::test]
async fn a_verified_subscription_applies_each_change_once_whether_pushed_or_polled() {
    let mut w = subscribed_world("").await;
    let sub = w.hub.subscription().unwrap();
    assert_eq!(sub.topic, w.source.topic(), "subscribed to the channel the Capability List advertises");
    assert!(sub.callback.starts_with(&format!("{}websub/", w.svc.base)), "{}", sub.callback);
    assert!(!sub.secret.is_empty() && sub.secret.len() < 200, "a secret under WebSub's 200 bytes");
    assert_eq!(sub.lease, "864000", "push_lease defaults to 10 days");
    let row = source_row(&w.svc, "up").await;
    assert_eq!(row["push"]["hub"], w.hub.url);
    assert!(row["push"]["lease_expires"].is_string(), "{row}");

    // Pushed: applied at once, one event, its fetch counted in /metrics as a polled one is.
    let before = (source_counter(&w.svc, "fetched").await, source_counter(&w.svc, "bytes").await);
    let t1 = w.source.at + 10;
    let entry = w.source.update(1, "up v2 of 1", t1);
    let n1 = notification(w.source.at, t1, &[&entry]);
    assert_eq!(w.hub.deliver(&n1, None).await, 204);
    assert_eq!(changes(&w.svc, "up").await, 3, "the delivery is committed when it is acknowledged");
    let after = (source_counter(&w.svc, "fetched").await, source_counter(&w.svc, "bytes").await);
    assert_eq!((after.0 - before.0, after.1 - before.1), (1.0, "up v2 of 1".len() as f64));
    assert_eq!(content(&w.svc, "up", "/res1").await, "up v2 of 1");
    assert_eq!(events_for(&w.svc, "up", "/res1").await, ["created", "updated"]);
    assert!(row["freshness_seconds"].is_i64(), "{row}");

    // Late: about changes before the last notification applied; nothing happens.
    let old = notification(w.source.at - 50, w.source.at - 40, &[&entry.replace("updated", "deleted")]);
    assert_eq!(w.hub.deliver(&old, None).await, 204);
    assert_eq!(delivery_count(&w.svc, "stale").await, 1.0);
    assert_eq!(events_for(&w.svc, "up", "/res1").await, ["created", "updated"]);

    // A change never notified, then a notification that does not meet the last one: the gap
    // makes Tributary poll now, which finds it — and finds the pushed change held.
    let changelist_reads = w.files.hits("/up/changelist.xml");
    w.source.update(2, "up v2 of 2", t1 + 5);
    let gap = notification(t1 + 20, t1 + 30, &[]);
    assert_eq!(w.hub.deliver(&gap, None).await, 204);
    wait_changes(&w.svc, "up", 4).await;
    assert!(w.files.hits("/up/changelist.xml") > changelist_reads, "the gap brought a poll");
    assert_eq!(events_for(&w.svc, "up", "/res2").await, ["created", "updated"]);
    assert_eq!(events_for(&w.svc, "up", "/res1").await, ["created", "updated"], "the poll added nothing for res1");
    assert_eq!(delivery_count(&w.svc, "gap").await, 1.0);
    assert_eq!(delivery_count(&w.svc, "applied").await, 1.0);
    assert_eq!(changes(&w.svc, "up").await, 4);
}

/// Pushed deletions past `max_deletions` are held like a poll's: stored, unpublished, shown;
/// a pushed update of one cancels its deletion, and the operator's `deletions apply` through
/// the running service publishes the rest.
#[tokio::test]
async fn pushed_deletions_past_the_limit_are_held_until_the_operator_applies_them() {
    let mut w = subscribed_world("max_deletions = 1").await;
    let deleted = |i: usize, when: i64| {
        let loc = w.source.url(&format!("res{i}"));
        format!("<url><loc>{loc}</loc><rs:md change=\"deleted\" datetime=\"{}\"/></url>", w3c(when))
    };
    let t1 = w.source.at + 10;
    let n1 = notification(w.source.at, t1, &[&deleted(1, t1), &deleted(2, t1)]);
    assert_eq!(w.hub.deliver(&n1, None).await, 204);
    let row = source_row(&w.svc, "up").await;
    assert_eq!((row["held_deletions"].as_u64(), row["resources"].as_u64()), (Some(2), Some(2)), "{row}");
    assert_eq!(events_for(&w.svc, "up", "/res1").await, ["created"], "nothing published");
    assert_eq!(events_for(&w.svc, "up", "/res2").await, ["created"]);

    // The Source takes res2 back: a pushed update cancels its held deletion.
    let t2 = t1 + 10;
    let entry = w.source.update(2, "up v2 of 2", t2);
    assert_eq!(w.hub.deliver(&notification(t1, t2, &[&entry]), None).await, 204);
    assert_eq!(source_row(&w.svc, "up").await["held_deletions"], 1);

    let mut cmd = crate::support::cli::tributary(&["deletions", "apply", "--source", "up"]);
    cmd.current_dir(&w.svc.dir);
    let out = crate::support::cli::finish(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let row = source_row(&w.svc, "up").await;
    assert_eq!((row["held_deletions"].as_u64(), row["resources"].as_u64()), (Some(0), Some(1)), "{row}");
    assert_eq!(events_for(&w.svc, "up", "/res1").await, ["created", "deleted"]);
    assert_eq!(events_for(&w.svc, "up", "/res2").await, ["created", "updated"]);
}

#[tokio::test]
async fn a_hub_that_never_verifies_or_is_down_leaves_the_source_polling_at_its_interval() {
    let silent = Hub::start(HubMode::Silent).await;
    let dead = format!("http://127.0.0.1:{}/hub", free_port());
    let files = Files::default();
    let port = listen(Router::new().fallback(serve_file).with_state(files.clone())).await;
    let mut quiet = Source::new(&files, port, "quiet", &silent.url, 1);
    let mut down = Source::new(&files, port, "down", &dead, 1);
    let dir = tempfile::tempdir().unwrap();
    let sources = [
        ("quiet", quiet.url("capabilitylist.xml"), String::new()),
        ("down", down.url("capabilitylist.xml"), String::new()),
    ];
    let sources: Vec<(&str, &str, &str)> = sources.iter().map(|(a, b, c)| (*a, b.as_str(), c.as_str())).collect();
    let cfg = config(free_port(), "push_verify_timeout = \"2s\"", &sources);
    let svc = Service::start(dir.path(), &cfg, &[], &[]).await;
    wait_changes(&svc, "quiet", 1).await;
    wait_changes(&svc, "down", 1).await;
    let why = |id: &'static str, text: &'static str| {
        let svc = &svc;
        async move {
            let row = source_row(svc, id).await;
            row["push"]["mode"] == "polling" && row["push"]["last_error"].as_str().is_some_and(|e| e.contains(text))
        }
    };
    svc.wait_until("the silent hub's subscription is given up", LIMIT, |_| why("quiet", "did not verify")).await;
    svc.wait_until("the dead hub's failure is shown", LIMIT, |_| why("down", "127.0.0.1")).await;
    assert!(silent.requests("subscribe") >= 1);
    // Polling at the normal interval (1 s) still brings changes.
    let now = W3cDateTime::now().unix_timestamp();
    quiet.update(1, "quiet v2", now);
    down.update(1, "down v2", now);
    wait_changes(&svc, "quiet", 2).await;
    wait_changes(&svc, "down", 2).await;
    assert_eq!(content(&svc, "down", "/res1").await, "down v2");
}

#[tokio::test]
async fn a_subscription_survives_kill_9_mid_delivery_and_the_redelivery_brings_the_change() {
    let mut w = subscribed_world("").await;
    let t1 = w.source.at + 10;
    let entry = w.source.update(1, "up v2 of 1", t1);
    let n1 = notification(w.source.at, t1, &[&entry]);
    // The bitstream hangs, so the delivery is received and not committed when the kill comes.
    w.files.hang.lock().unwrap().insert("/up/res1".into());
    let fetches = w.files.hits("/up/res1");
    let hub = w.hub.clone();
    let body = n1.clone();
    let in_flight = tokio::spawn(async move { hub.deliver(&body, None).await });
    assert!(
        crate::support::net::eventually(LIMIT, || async { w.files.hits("/up/res1") > fetches }).await,
        "the delivery never fetched the bitstream"
    );
    w.svc.kill();
    let _ = in_flight.await;
    w.files.hang.lock().unwrap().clear();

    // Restarted: the subscription is still there — no new request, no new verification.
    let cfg = std::fs::read_to_string(w._dir.path().join("sources.toml")).unwrap();
    let svc = Service::start(w._dir.path(), &cfg, &[], &[]).await;
    wait_push_mode(&svc, "up", "subscribed").await;
    assert_eq!(w.hub.requests("subscribe"), 1, "the stored subscription stands");
    // The hub redelivers (and a poll due since before the kill may find the change first):
    // either way, the change is applied once.
    assert_eq!(w.hub.deliver(&n1, None).await, 204);
    wait_changes(&svc, "up", 3).await;
    assert_eq!(events_for(&svc, "up", "/res1").await, ["created", "updated"]);
    assert_eq!(content(&svc, "up", "/res1").await, "up v2 of 1");
    let port: u16 = svc.base.trim_end_matches('/').rsplit(':').next().unwrap().parse().unwrap();
    let mut svc = svc;
    svc.terminate().await;

    // The source leaves the configuration: Tributary unsubscribes, and the hub verifies it
    // (at the same public URL: callbacks are addresses the hub keeps).
    let callback = w.hub.subscription().unwrap().callback;
    let other = config(port, "", &[("other", &w.source.url("capabilitylist.xml"), "push = \"off\"")]);
    let svc = Service::start(w._dir.path(), &other, &[], &[]).await;
    svc.wait_until("the hub verified the unsubscription", LIMIT, |_| async {
        w.hub.state.unsubscribed.lock().unwrap().contains(&callback)
    })
    .await;
    assert_eq!(w.hub.requests("unsubscribe"), 1);
    assert_eq!(w.hub.state.refused_echoes.load(Ordering::Relaxed), 0, "every verification was echoed");
    let row = source_row(&svc, "other").await;
    assert_eq!(row["push"]["mode"], "polling");
}

#[tokio::test]
async fn leases_are_renewed_before_they_end_through_a_hub_that_redirects() {
    let first = Hub::start(HubMode::Redirect).await;
    let second = Hub::start(HubMode::Verify).await;
    *first.state.redirect_to.lock().unwrap() = second.url.clone();
    let files = Files::default();
    let port = listen(Router::new().fallback(serve_file).with_state(files.clone())).await;
    let mut source = Source::new(&files, port, "up", &first.url, 1);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(free_port(), "push_lease = \"10s\"", &[("up", &source.url("capabilitylist.xml"), "")]);
    let svc = Service::start(dir.path(), &cfg, &[], &[]).await;
    wait_push_mode(&svc, "up", "subscribed").await;
    assert_eq!(source_row(&svc, "up").await["push"]["hub"], second.url, "the hub redirected to");
    // The hub records the subscription once the echo has reached it, just after Tributary.
    svc.wait_until("the hub recorded the subscription", LIMIT, |_| async { second.subscription().is_some() }).await;
    let old = second.subscription().unwrap();
    assert_eq!(old.lease, "10");
    // Renewed at four fifths of the lease (8 s), at the advertised hub, which redirects again.
    svc.wait_until("the lease was renewed", LIMIT, |_| async { second.state.challenges.load(Ordering::Relaxed) >= 2 })
        .await;
    svc.wait_until("the renewal is verified", LIMIT, |_| async {
        second.subscription().is_some_and(|s| s.secret != old.secret)
    })
    .await;
    assert!(first.requests("subscribe") >= 2 && second.requests("subscribe") >= 2);
    let renewed = second.subscription().unwrap();
    assert_eq!(renewed.callback, old.callback, "a renewal keeps the callback");
    wait_push_mode(&svc, "up", "subscribed").await;
    let t1 = source.at + 10;
    let entry = source.update(1, "renewed", t1);
    let n1 = notification(source.at, t1, &[&entry]);
    assert_eq!(second.deliver(&n1, None).await, 204, "signed with the renewal's secret");
    let late = sign_sha256(&old.secret, notification(t1, t1 + 1, &[]).as_bytes());
    assert_eq!(
        second.deliver(&notification(t1, t1 + 1, &[]), Some(late)).await,
        204,
        "the secret it replaced still checks"
    );
    assert_eq!(content(&svc, "up", "/res1").await, "renewed");

    // Verification is answered only for a request Tributary made and still waits for.
    let get = |url: String| {
        let c = second.client.clone();
        async move { c.get(url).send().await.unwrap().status().as_u16() }
    };
    let topic = urlencode(&source.topic());
    let q =
        |mode: &str, topic: &str| format!("?hub.mode={mode}&hub.topic={topic}&hub.challenge=abc&hub.lease_seconds=10");
    assert_eq!(get(format!("{}{}", renewed.callback, q("subscribe", &topic))).await, 404, "nothing is pending");
    assert_eq!(
        get(format!("{}{}", renewed.callback, q("unsubscribe", &topic))).await,
        404,
        "no unsubscription asked for"
    );
    assert_eq!(
        get(format!("{}{}", renewed.callback, q("subscribe", "http%3A%2F%2Fother%2F"))).await,
        404,
        "another topic"
    );
    let stranger = format!("{}websub/ffffffffffffffffffffffffffffffff{}", svc.base, q("subscribe", &topic));
    assert_eq!(get(stranger).await, 404, "an unknown callback");
    // A denial (WebSub §5.2) is only a hint, since anyone who knows the callback can send one:
    // the lease stands, the reason is shown, and the hub is asked again within seconds.
    let before = second.requests("subscribe") + first.requests("subscribe");
    let denied =
        format!("{}?hub.mode=denied&hub.topic={topic}&hub.reason=closed%20for%20maintenance", renewed.callback);
    assert_eq!(get(denied).await, 200);
    let row = source_row(&svc, "up").await;
    assert_eq!(row["push"]["mode"], "subscribed", "{row}");
    assert_eq!(row["push"]["last_error"], "denied by the hub: closed for maintenance");
    svc.wait_until("Tributary asked the hub again", LIMIT, |_| async {
        second.requests("subscribe") + first.requests("subscribe") > before
    })
    .await;
}

fn urlencode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// Interop: flask-websub's hub (PyPI; run by Python with Celery in eager mode) between the
/// Source and Tributary. It verifies Tributary's intent itself, and delivers what the Source
/// publishes by the ping model — the Source serves its latest notification at the topic URI
/// (with the `Link` headers §4.1 names), pings the hub with `hub.mode=publish`, and the hub
/// fetches the topic and POSTs its body, signed with sha512, to Tributary's callback.
#[tokio::test]
async fn a_change_reaches_tributary_through_flask_websub_s_hub() {
    let test = "push_subscribe::a_change_reaches_tributary_through_flask_websub_s_hub";
    let Some(python) = crate::support::tools::flask_websub_python(test) else { return };
    let scratch = tempfile::tempdir().unwrap();
    let hub_port = free_port();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/websub/flask_hub.py");
    let log = std::fs::File::create(scratch.path().join("hub.log")).unwrap();
    let mut hub_cmd = python.command();
    hub_cmd.arg(script).arg(hub_port.to_string()).arg(scratch.path().join("hub.sqlite3"));
    let mut hub_process = KillOnDrop(hub_cmd.stdout(log.try_clone().unwrap()).stderr(log).spawn().unwrap());
    let hub_url = format!("http://127.0.0.1:{hub_port}/hub");
    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let up = crate::support::net::eventually(LIMIT, || async {
        // An empty form: the hub answers 400, which is enough to know it listens.
        form_post(&client, &hub_url, &[("hub.mode", "")]).await.is_ok()
    })
    .await;
    let hub_log = || std::fs::read_to_string(scratch.path().join("hub.log")).unwrap_or_default();
    assert!(up && hub_process.0.try_wait().unwrap().is_none(), "flask-websub's hub did not start:\n{}", hub_log());

    let files = Files::default();
    let port = listen(Router::new().fallback(serve_file).with_state(files.clone())).await;
    let mut source = Source::new(&files, port, "up", &hub_url, 2);
    let topic_path = source.path("notify");
    files
        .links
        .lock()
        .unwrap()
        .insert(topic_path.clone(), format!("<{}>; rel=\"self\", <{hub_url}>; rel=\"hub\"", source.topic()));
    files.put(&topic_path, notification(source.at - 1, source.at, &[]));
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(free_port(), "", &[("up", &source.url("capabilitylist.xml"), "")]);
    let svc = Service::start(dir.path(), &cfg, &[], &[]).await;
    wait_changes(&svc, "up", 2).await;
    wait_push_only(&svc, "up").await;

    let t1 = source.at + 10;
    let entry = source.update(1, "up v2 of 1, through flask-websub", t1);
    files.put(&topic_path, notification(source.at, t1, &[&entry]));
    let ping = form_post(&client, &hub_url, &[("hub.mode", "publish"), ("hub.topic", source.topic().as_str())]).await;
    assert_eq!(ping.map(|r| r.status().as_u16()).ok(), Some(202), "hub log:\n{}", hub_log());
    wait_changes(&svc, "up", 3).await;
    assert_eq!(content(&svc, "up", "/res1").await, "up v2 of 1, through flask-websub");
    assert_eq!(
        delivery_count(&svc, "applied").await,
        1.0,
        "delivered by the hub, signed with sha512; hub log:\n{}",
        hub_log()
    );
    assert_eq!(delivery_count(&svc, "bad_signature").await, 0.0);
}

/// POSTs `pairs` form-encoded, as a publisher pings a hub.
async fn form_post(client: &reqwest::Client, url: &str, pairs: &[(&str, &str)]) -> reqwest::Result<reqwest::Response> {
    let body = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(pairs).finish();
    client.post(url).header("content-type", "application/x-www-form-urlencoded").body(body).send().await
}

/// A child process killed when the test ends, however it ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
