//! Hostile trials of push (issue 36, defects 4–7) against a real `tributary run` subscribed
//! through the test hub of `support::push`: forged, unsigned, oversized and malformed
//! deliveries; a flood; replays and sha1 signatures; a forged denial; a topic and entries on
//! another site; trickled bodies; the old secret after its grace period; a delivery after the
//! lease.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;

use crate::support::net::{eventually, free_port, listen};
use crate::support::push::*;
use crate::support::service::Service;

/// A captured signed payload, replayed, changes nothing and is counted `replay`, with or
/// without `until`; a payload signed with sha1 is refused unless the source opts in
/// (`push_sha1`).
#[tokio::test]
async fn replayed_and_sha1_signed_deliveries_change_nothing() {
    let mut w = subscribed_world("").await;
    let t1 = w.source.at + 10;
    let entry = w.source.update(1, "up v2 of 1", t1);
    let n1 = notification(w.source.at, t1, &[&entry]);
    assert_eq!(w.hub.deliver(&n1, None).await, 204);
    assert_eq!(changes(&w.svc, "up").await, 3);
    assert_eq!(w.hub.deliver(&n1, None).await, 204, "a replay is acknowledged (hubs redeliver)");
    let t2 = t1 + 10;
    let entry = w.source.update(2, "up v2 of 2", t2);
    let open_ended = notification(t1, t2, &[&entry]).replace(&format!(" until=\"{}\"", w3c(t2)), "");
    assert!(!open_ended.contains("until="), "{open_ended}");
    for _ in 0..2 {
        assert_eq!(w.hub.deliver(&open_ended, None).await, 204);
    }
    assert_eq!(delivery_count(&w.svc, "replay").await, 2.0, "both replays were recognised and counted");
    assert_eq!(events_for(&w.svc, "up", "/res1").await, ["created", "updated"], "no second event");
    assert_eq!(events_for(&w.svc, "up", "/res2").await, ["created", "updated"], "no second event");

    let n3 = notification(t2, t2 + 1, &[]);
    let sha1 = sign_sha1(&w.hub.subscription().unwrap().secret, n3.as_bytes());
    assert_eq!(w.hub.deliver(&n3, Some(sha1)).await, 403);
    assert_eq!(delivery_count(&w.svc, "weak_signature").await, 1.0);
    assert_eq!(changes(&w.svc, "up").await, 4);
}

#[tokio::test]
async fn forged_unsigned_unknown_oversized_and_malformed_deliveries_are_refused_and_change_nothing() {
    let w = subscribed_world("max_document_bytes = \"1 MB\"").await;
    let sub = w.hub.subscription().unwrap();
    let t1 = w.source.at + 10;
    let mut source = w.source;
    let entry = source.update(1, "up v2 of 1", t1);
    let n1 = notification(source.at, t1, &[&entry]);

    let forged = sign_sha256("not the secret", n1.as_bytes());
    assert_eq!(w.hub.deliver(&n1, Some(forged)).await, 403, "a wrong signature");
    assert_eq!(w.hub.post(&sub.callback, &sub.topic, &n1, None).await, 403, "no signature");
    assert_eq!(w.hub.deliver(&n1, Some("md5=00".into())).await, 403, "a method WebSub does not name");
    let unknown = format!("{}websub/00000000000000000000000000000000", w.svc.base);
    let signed = sign_sha256(&sub.secret, n1.as_bytes());
    assert_eq!(w.hub.post(&unknown, &sub.topic, &n1, Some(signed)).await, 410, "a callback nobody subscribed");

    // Malformed, hostile, and well-formed but not a change notification: each signed, each refused.
    let laughs = "<?xml version=\"1.0\"?><!DOCTYPE lolz [<!ENTITY lol \"lol\"><!ENTITY lol2 \"&lol;&lol;&lol;&lol;\">]>\
                  <urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\">&lol2;</urlset>";
    let not_a_notification = n1.replace("change-notification", "changelist");
    for bad in ["<urlset", laughs, not_a_notification.as_str(), "\u{0}\u{1}binary"] {
        let sig = sign_sha256(&sub.secret, bad.as_bytes());
        assert_eq!(w.hub.deliver(bad, Some(sig)).await, 400, "{bad}");
    }

    // 100 MB unsigned: refused (403) before any byte of the body is read. 100 MB with a
    // signature header, declared and then streamed: refused (413) once the body passes
    // `push_max_body`, without reading it all.
    const HUNDRED_MB: u64 = 100 * 1024 * 1024;
    let (pulled0, body) = counted_body(HUNDRED_MB);
    let answer = w.hub.client.post(&sub.callback).body(body).send().await;
    assert!(answer.as_ref().map_or(true, |r| r.status() == 403), "{answer:?}");
    let forged = format!("sha256={}", "0".repeat(64));
    let declared = w.hub.client.post(&sub.callback).header("content-length", HUNDRED_MB.to_string());
    let (pulled, body) = counted_body(HUNDRED_MB);
    let answer = declared.header("x-hub-signature", &forged).body(body).send().await;
    assert!(answer.as_ref().map_or(true, |r| r.status() == 413), "{answer:?}");
    let (pulled2, body) = counted_body(HUNDRED_MB);
    let answer = w.hub.client.post(&sub.callback).header("x-hub-signature", &forged).body(body).send().await;
    assert!(answer.as_ref().map_or(true, |r| r.status() == 413), "{answer:?}");
    for p in [pulled0, pulled, pulled2] {
        assert!(p.load(Ordering::Relaxed) < HUNDRED_MB / 2, "read {} bytes of 100 MB", p.load(Ordering::Relaxed));
    }

    let svc = &w.svc;
    assert_eq!(delivery_count(svc, "bad_signature").await, 2.0);
    assert_eq!(delivery_count(svc, "unsigned").await, 2.0);
    assert_eq!(delivery_count(svc, "unknown_callback").await, 1.0);
    assert_eq!(delivery_count(svc, "malformed").await, 4.0);
    assert_eq!(delivery_count(svc, "oversized").await, 2.0);
    assert_eq!(delivery_count(svc, "applied").await, 0.0);
    assert_eq!(changes(svc, "up").await, 2, "nothing changed");
    assert_eq!(content(svc, "up", "/res1").await, "up v1 of 1");
    // The real delivery still goes through.
    assert_eq!(w.hub.deliver(&n1, None).await, 204);
    assert_eq!(content(svc, "up", "/res1").await, "up v2 of 1");
}

#[tokio::test]
async fn a_flood_of_deliveries_is_bounded_answered_503_and_counted() {
    let mut w = subscribed_world("").await;
    let t1 = w.source.at + 10;
    let entry = w.source.update(1, "up v2 of 1", t1);
    let n1 = Arc::new(notification(w.source.at, t1, &[&entry]));
    // The first delivery's fetch is held, so every delivery let in stays in.
    w.files.hang.lock().unwrap().insert("/up/res1".into());
    let fetches = w.files.hits("/up/res1");
    let mut flood = tokio::task::JoinSet::new();
    for _ in 0..40 {
        let (hub, body) = (w.hub.clone(), n1.clone());
        flood.spawn(async move { hub.deliver(&body, None).await });
    }
    w.svc
        .wait_until("24 of 40 deliveries were turned away", LIMIT, |s| async move {
            delivery_count(s, "busy").await >= 24.0
        })
        .await;
    let files = &w.files;
    assert!(crate::support::net::eventually(LIMIT, || async { files.hits("/up/res1") > fetches }).await);
    w.files.hang.lock().unwrap().clear();
    // One fetch is held; `notify_one` keeps the release for it even if it is not waiting yet.
    w.files.release.notify_one();
    let mut answers = HashMap::new();
    while let Some(a) = flood.join_next().await {
        *answers.entry(a.unwrap()).or_insert(0) += 1;
    }
    assert_eq!(answers, HashMap::from([(204, 16), (503, 24)]), "16 worked on at once, the rest told to retry");
    assert_eq!(delivery_count(&w.svc, "busy").await, 24.0);
    assert_eq!(events_for(&w.svc, "up", "/res1").await, ["created", "updated"], "applied once");
}

/// A `hub.mode=denied` sent by anyone who knows the callback URL is a hint: the lease stands,
/// push goes on, and Tributary asks the hub again soon (5 s, then backoff) rather than
/// polling hourly for an hour.
#[tokio::test]
async fn a_forged_denial_only_makes_tributary_subscribe_again() {
    let mut w = subscribed_world("").await;
    let sub = w.hub.subscription().unwrap();
    let asked = w.hub.requests("subscribe");
    for round in 1..=2 {
        let mut url = url::Url::parse(&sub.callback).unwrap();
        url.query_pairs_mut()
            .append_pair("hub.mode", "denied")
            .append_pair("hub.topic", &sub.topic)
            .append_pair("hub.reason", "forged by a stranger");
        let answer = w.hub.client.get(url).send().await.unwrap();
        assert!(answer.status().is_success(), "round {round}: {}", answer.status());
        assert_eq!(source_row(&w.svc, "up").await["push"]["mode"], "subscribed", "the lease stands");
        let again = eventually(LIMIT, || async { w.hub.requests("subscribe") >= asked + round }).await;
        assert!(again, "round {round}: no new subscribe request within {LIMIT:?}");
        wait_push_mode(&w.svc, "up", "subscribed").await;
    }
    // Push still works, with the secret of the new subscription.
    let recorded = eventually(LIMIT, || async { w.hub.subscription().is_some_and(|s| s.secret != sub.secret) }).await;
    assert!(recorded, "the renewed subscription reached the hub");
    let t1 = w.source.at + 10;
    let entry = w.source.update(1, "up v2 of 1", t1);
    assert_eq!(w.hub.deliver(&notification(w.source.at, t1, &[&entry]), None).await, 204);
    assert_eq!(content(&w.svc, "up", "/res1").await, "up v2 of 1");
}

/// A Capability List naming another site's URL as its topic is not subscribed to; entries
/// pushed for another site are not fetched or recorded.
#[tokio::test]
async fn a_topic_or_pushed_entries_outside_the_source_s_authority_are_refused() {
    // Another site, which must never be asked for anything.
    let other = Files::default();
    other.put("/evil", "not the Source's");
    let other_port = listen(Router::new().fallback(serve_file).with_state(other.clone())).await;
    let foreign = format!("http://127.0.0.1:{other_port}/notify");

    let hub = Hub::start(HubMode::Verify).await;
    let files = Files::default();
    let port = listen(Router::new().fallback(serve_file).with_state(files.clone())).await;
    let source = Source::new(&files, port, "up", &hub.url, 2);
    let caps_path = source.path("capabilitylist.xml");
    let caps = String::from_utf8(files.docs.lock().unwrap()[&caps_path].clone()).unwrap();
    files.put(&caps_path, caps.replace(&source.topic(), &foreign));
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(free_port(), "", &[("up", &source.url("capabilitylist.xml"), "")]);
    let svc = Service::start(dir.path(), &cfg, &[], &[]).await;
    wait_changes(&svc, "up", 2).await;
    svc.wait_until("the foreign topic is refused", LIMIT, |s| async move {
        s.log().contains("outside the Source's authority; not subscribing")
    })
    .await;
    assert_eq!(hub.requests("subscribe"), 0, "no subscription to another site's topic");
    assert_eq!(source_row(&svc, "up").await["push"]["mode"], "polling");
    drop(svc);

    // Subscribed to its own topic, the Source pushes an entry for the other site.
    let w = subscribed_world("").await;
    let evil = format!(
        "<url><loc>http://127.0.0.1:{other_port}/evil</loc><lastmod>{0}</lastmod><rs:md change=\"created\" datetime=\"{0}\"/></url>",
        w3c(w.source.at + 5)
    );
    let n = notification(w.source.at, w.source.at + 10, &[&evil]);
    assert_eq!(w.hub.deliver(&n, None).await, 204, "applied: its entries are held to the authority rule");
    assert_eq!(changes(&w.svc, "up").await, 2, "nothing recorded for the other site");
    assert_eq!(other.hits("/evil"), 0, "the other site was never fetched");
}

/// Bodies trickled in a byte at a time hit `push_body_timeout` (answered 408, counted
/// `slow_body`) and free their delivery slots: more of them than there are slots, then a
/// real delivery, which goes through.
#[tokio::test]
async fn trickled_delivery_bodies_time_out_and_do_not_pin_the_slots() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut w = subscribed_world("push_body_timeout = \"2s\"").await;
    let sub = w.hub.subscription().unwrap();
    let callback = url::Url::parse(&sub.callback).unwrap();
    let addr = format!("{}:{}", callback.host_str().unwrap(), callback.port().unwrap());
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/xml\r\nContent-Length: 100000\r\n\
         X-Hub-Signature: sha256={}\r\n\r\n<urlset",
        callback.path(),
        "0".repeat(64)
    );
    let mut trickles = Vec::new();
    for _ in 0..20 {
        let mut sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
        sock.write_all(head.as_bytes()).await.unwrap();
        trickles.push(sock);
    }
    let mut statuses = Vec::new();
    for mut sock in trickles {
        let mut answer = Vec::new();
        let read = tokio::time::timeout(LIMIT, async {
            let mut buf = [0u8; 1024];
            // A byte now and then, never the whole body; the answer ends it.
            loop {
                tokio::select! {
                    n = sock.read(&mut buf) => match n {
                        Ok(0) | Err(_) => break,
                        Ok(n) => answer.extend_from_slice(&buf[..n]),
                    },
                    () = tokio::time::sleep(Duration::from_millis(500)) => {
                        if sock.write_all(b" ").await.is_err() {
                            break;
                        }
                    }
                }
                if answer.windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
        })
        .await;
        assert!(read.is_ok(), "a trickled body was still being read after {LIMIT:?}");
        let text = String::from_utf8_lossy(&answer).into_owned();
        statuses.push(text.split(' ').nth(1).unwrap_or("closed").to_owned());
    }
    assert!(statuses.iter().all(|s| s == "408" || s == "503"), "{statuses:?}");
    assert!(statuses.iter().any(|s| s == "408"), "{statuses:?}");
    assert!(delivery_count(&w.svc, "slow_body").await >= 1.0);
    let t1 = w.source.at + 10;
    let entry = w.source.update(1, "up v2 of 1", t1);
    assert_eq!(w.hub.deliver(&notification(w.source.at, t1, &[&entry]), None).await, 204, "the slots are free");
    assert_eq!(content(&w.svc, "up", "/res1").await, "up v2 of 1");
}

/// After a renewal with a new secret, a delivery signed with the old one is refused once
/// `push_secret_grace` has passed; the new secret works.
#[tokio::test]
async fn the_old_secret_stops_working_after_the_grace_period() {
    // A 15 s first lease, renewed at four fifths of it, then an hour.
    let w = world_granting("push_secret_grace = \"2s\"", &[Some("15"), Some("3600")]).await;
    let old = w.hub.subscription().unwrap().secret;
    let renewed = eventually(LIMIT, || async { w.hub.subscription().is_some_and(|s| s.secret != old) }).await;
    assert!(renewed, "the lease was renewed with a new secret");
    let mut at = w.source.at;
    let mut next = || {
        at += 10;
        notification(at - 10, at, &[])
    };
    let refused = eventually(LIMIT, || {
        let n = next();
        let sig = sign_sha256(&old, n.as_bytes());
        let hub = &w.hub;
        async move { hub.deliver(&n, Some(sig)).await == 403 }
    })
    .await;
    assert!(refused, "the old secret still checked long after push_secret_grace");
    assert!(delivery_count(&w.svc, "bad_signature").await >= 1.0);
    assert_eq!(w.hub.deliver(&next(), None).await, 204, "the new secret checks");
}

/// A delivery after the lease has ended (the hub never verified the renewal) is refused and
/// counted `expired`, even when correctly signed.
#[tokio::test]
async fn a_delivery_after_the_lease_has_ended_is_refused() {
    // A 3 s lease whose renewals the hub never verifies.
    let silent = [None; 40];
    let grants: Vec<Option<&str>> = std::iter::once(Some("3")).chain(silent).collect();
    let w = world_granting("", &grants).await;
    let mut at = w.source.at;
    let ended = eventually(LIMIT, || {
        at += 10;
        let n = notification(at - 10, at, &[]);
        let hub = &w.hub;
        async move { hub.deliver(&n, None).await == 403 }
    })
    .await;
    assert!(ended, "deliveries were still accepted long after the lease's end");
    assert!(delivery_count(&w.svc, "expired").await >= 1.0);
    assert_eq!(delivery_count(&w.svc, "bad_signature").await, 0.0, "refused for the lease, not the signature");
}
