//! The subscribing side of push, end to end: a real `tributary run` process, an upstream
//! ResourceSync Source whose Capability List advertises a change-notification channel, and a
//! WebSub hub written here (axum on 127.0.0.1) that verifies intent and signs its deliveries
//! with an HMAC computed here, independently of Tributary's own code. Every wait is bounded.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Form, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use hmac::{Hmac, KeyInit, Mac};
use tokio::net::TcpListener;
use tributary::model::W3cDateTime;

use crate::support::digest::md_attrs;
use crate::support::net::{eventually, free_port};
use crate::support::service::{Service, parse_metrics, value};

/// Generous bounds for a loaded 2-core machine; none is a timing assertion.
const LIMIT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// The upstream Source: files served from a map the test edits.

#[derive(Clone, Default)]
struct Files {
    docs: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    /// Paths answered only once released (or after a minute).
    hang: Arc<Mutex<HashSet<String>>>,
    release: Arc<tokio::sync::Notify>,
    hits: Arc<Mutex<Vec<String>>>,
    /// `Link` headers by path (a topic URI names itself and its hub, Change Notification §4.1).
    links: Arc<Mutex<HashMap<String, String>>>,
}

impl Files {
    fn put(&self, path: &str, body: impl Into<Vec<u8>>) {
        self.docs.lock().unwrap().insert(path.to_owned(), body.into());
    }

    fn hits(&self, path: &str) -> usize {
        self.hits.lock().unwrap().iter().filter(|p| *p == path).count()
    }
}

async fn serve_file(State(f): State<Files>, uri: Uri) -> Response {
    let path = uri.path().to_owned();
    f.hits.lock().unwrap().push(path.clone());
    let hang = f.hang.lock().unwrap().contains(&path);
    if hang {
        tokio::select! {
            _ = f.release.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(60)) => {}
        }
    }
    let Some(body) = f.docs.lock().unwrap().get(&path).cloned() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let xml = path.ends_with(".xml") || f.links.lock().unwrap().contains_key(&path);
    let ct = if xml { "application/xml" } else { "application/octet-stream" };
    let mut r = ([("content-type", ct)], body).into_response();
    if let Some(link) = f.links.lock().unwrap().get(&path) {
        r.headers_mut().insert("link", link.parse().unwrap());
    }
    r
}

async fn listen(router: Router) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(l, router).await.unwrap() });
    port
}

/// One Source under `/{prefix}/` on an upstream: a Capability List naming a Resource List, a
/// Change List and a change-notification channel at `hub`.
struct Source {
    files: Files,
    base: String,
    prefix: String,
    hub: String,
    at: i64,
    resources: Vec<(String, Vec<u8>, i64)>,
    changes: Vec<String>,
}

fn w3c(unix: i64) -> String {
    W3cDateTime::from_unix(unix, 0).unwrap().to_string()
}

impl Source {
    fn new(files: &Files, port: u16, prefix: &str, hub: &str, n: usize) -> Source {
        let at = W3cDateTime::now().unix_timestamp() - 100;
        let resources =
            (1..=n).map(|i| (format!("res{i}"), format!("{prefix} v1 of {i}").into_bytes(), at - 10)).collect();
        let s = Source {
            files: files.clone(),
            base: format!("http://127.0.0.1:{port}/{prefix}/"),
            prefix: prefix.to_owned(),
            hub: hub.to_owned(),
            at,
            resources,
            changes: Vec::new(),
        };
        s.publish();
        s
    }

    fn url(&self, rel: &str) -> String {
        format!("{}{rel}", self.base)
    }

    fn path(&self, rel: &str) -> String {
        format!("/{}/{rel}", self.prefix)
    }

    fn topic(&self) -> String {
        self.url("notify")
    }

    fn publish(&self) {
        let (ns, cl) = (NS, self.url("capabilitylist.xml"));
        let caps = format!(
            "<urlset {ns}><rs:md capability=\"capabilitylist\"/>\
             <url><loc>{}</loc><rs:md capability=\"resourcelist\"/></url>\
             <url><loc>{}</loc><rs:md capability=\"changelist\"/></url>\
             <url><loc>{}</loc><rs:ln rel=\"hub\" href=\"{}\"/><rs:md capability=\"change-notification\"/></url></urlset>",
            self.url("resourcelist.xml"),
            self.url("changelist.xml"),
            self.topic(),
            self.hub
        );
        self.files.put(&self.path("capabilitylist.xml"), caps);
        let mut rl = format!(
            "<urlset {ns}><rs:ln rel=\"up\" href=\"{cl}\"/><rs:md capability=\"resourcelist\" at=\"{}\"/>",
            w3c(self.at)
        );
        for (name, body, lastmod) in &self.resources {
            rl.push_str(&format!(
                "<url><loc>{}</loc><lastmod>{}</lastmod><rs:md {}/></url>",
                self.url(name),
                w3c(*lastmod),
                md_attrs(body)
            ));
            self.files.put(&self.path(name), body.clone());
        }
        rl.push_str("</urlset>");
        self.files.put(&self.path("resourcelist.xml"), rl);
        let mut chl = format!(
            "<urlset {ns}><rs:ln rel=\"up\" href=\"{cl}\"/><rs:md capability=\"changelist\" from=\"{}\"/>",
            w3c(self.at)
        );
        for c in &self.changes {
            chl.push_str(c);
        }
        chl.push_str("</urlset>");
        self.files.put(&self.path("changelist.xml"), chl);
    }

    /// Updates resource `i` (1-based) to new content at `when`, in the Change List and the
    /// served bitstream; returns the change's `<url>` entry, as a notification carries it.
    fn update(&mut self, i: usize, body: &str, when: i64) -> String {
        let (name, content, lastmod) = &mut self.resources[i - 1];
        *content = body.as_bytes().to_vec();
        *lastmod = when;
        let loc = format!("{}{name}", self.base);
        let entry = format!(
            "<url><loc>{}</loc><lastmod>{}</lastmod><rs:md change=\"updated\" datetime=\"{}\" {}/></url>",
            loc,
            w3c(when),
            w3c(when),
            md_attrs(body.as_bytes())
        );
        self.changes.push(entry.clone());
        self.publish();
        entry
    }
}

const NS: &str =
    "xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" xmlns:rs=\"http://www.openarchives.org/rs/terms/\"";

/// A change notification (Change Notification §3) covering `from`..`until` with `entries`.
fn notification(from: i64, until: i64, entries: &[&str]) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<urlset {NS}><rs:md capability=\"change-notification\" from=\"{}\" until=\"{}\"/>{}</urlset>",
        w3c(from),
        w3c(until),
        entries.concat()
    )
}

// ---------------------------------------------------------------------------------------------
// The test hub.

#[derive(Clone, Copy, PartialEq, Eq)]
enum HubMode {
    /// Accept (202) and verify intent with a GET to the callback.
    Verify,
    /// Accept (202) and never verify.
    Silent,
    /// Send the subscriber on to another hub (307, WebSub §5.1.2).
    Redirect,
}

#[derive(Clone, Debug)]
struct HubSub {
    topic: String,
    callback: String,
    secret: String,
    lease: String,
}

struct HubState {
    mode: HubMode,
    /// Where [`HubMode::Redirect`] sends subscribers.
    redirect_to: Mutex<String>,
    requests: Mutex<Vec<HashMap<String, String>>>,
    verified: Mutex<Vec<HubSub>>,
    unsubscribed: Mutex<Vec<String>>,
    challenges: AtomicU64,
    refused_echoes: AtomicUsize,
    /// What each subscribe verification grants, in turn: `Some(lease)` verifies granting that
    /// lease, `None` stays silent (never verifies); once empty, the lease asked for.
    grants: Mutex<std::collections::VecDeque<Option<String>>>,
}

#[derive(Clone)]
struct Hub {
    url: String,
    state: Arc<HubState>,
    client: reqwest::Client,
}

async fn hub_endpoint(State(hub): State<Hub>, Form(form): Form<HashMap<String, String>>) -> Response {
    hub.state.requests.lock().unwrap().push(form.clone());
    match hub.state.mode {
        HubMode::Redirect => {
            let to = hub.state.redirect_to.lock().unwrap().clone();
            return (StatusCode::TEMPORARY_REDIRECT, [("location", to)]).into_response();
        }
        HubMode::Verify => {
            tokio::spawn(async move { hub.verify(form).await });
        }
        HubMode::Silent => {}
    }
    StatusCode::ACCEPTED.into_response()
}

impl Hub {
    async fn start(mode: HubMode) -> Hub {
        let state = Arc::new(HubState {
            mode,
            redirect_to: Mutex::default(),
            requests: Mutex::default(),
            verified: Mutex::default(),
            unsubscribed: Mutex::default(),
            challenges: AtomicU64::new(0),
            refused_echoes: AtomicUsize::new(0),
            grants: Mutex::default(),
        });
        let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
        let mut hub = Hub { url: String::new(), state, client };
        let router = Router::new().route("/hub", axum::routing::post(hub_endpoint)).with_state(hub.clone());
        hub.url = format!("http://127.0.0.1:{}/hub", listen(router).await);
        hub
    }

    /// WebSub §5.3: a GET to the callback with a fresh challenge, which must come back as
    /// the exact body.
    async fn verify(&self, form: HashMap<String, String>) {
        let n = self.state.challenges.fetch_add(1, Ordering::Relaxed);
        let challenge = format!("challenge-{n}-{}", rand_text());
        let mode = form.get("hub.mode").cloned().unwrap_or_default();
        let callback = form["hub.callback"].clone();
        let planned = (mode == "subscribe").then(|| self.state.grants.lock().unwrap().pop_front()).flatten();
        let lease = match planned {
            Some(None) => return,
            Some(Some(lease)) => lease,
            None => form.get("hub.lease_seconds").cloned().unwrap_or_else(|| "3600".into()),
        };
        let mut url = url::Url::parse(&callback).unwrap();
        url.query_pairs_mut()
            .append_pair("hub.mode", &mode)
            .append_pair("hub.topic", &form["hub.topic"])
            .append_pair("hub.challenge", &challenge)
            .append_pair("hub.lease_seconds", &lease);
        let echoed = match self.client.get(url).send().await {
            Ok(r) if r.status() == StatusCode::OK => r.text().await.unwrap_or_default() == challenge,
            _ => false,
        };
        if !echoed {
            self.state.refused_echoes.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if mode == "unsubscribe" {
            self.state.verified.lock().unwrap().retain(|s| s.callback != callback);
            self.state.unsubscribed.lock().unwrap().push(callback);
            return;
        }
        let sub = HubSub {
            topic: form["hub.topic"].clone(),
            callback: callback.clone(),
            secret: form["hub.secret"].clone(),
            lease,
        };
        let mut v = self.state.verified.lock().unwrap();
        v.retain(|s| s.callback != callback);
        v.push(sub);
    }

    fn subscription(&self) -> Option<HubSub> {
        self.state.verified.lock().unwrap().last().cloned()
    }

    fn requests(&self, mode: &str) -> usize {
        self.state
            .requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.get("hub.mode").map(String::as_str) == Some(mode))
            .count()
    }

    /// Delivers `body` to the verified subscription as WebSub §7 says, signed with
    /// `signature` (`None`: the subscription's secret, sha256).
    async fn deliver(&self, body: &str, signature: Option<String>) -> u16 {
        let sub = self.subscription().expect("a verified subscription");
        let sig = signature.unwrap_or_else(|| sign_sha256(&sub.secret, body.as_bytes()));
        self.post(&sub.callback, &sub.topic, body, Some(sig)).await
    }

    async fn post(&self, callback: &str, topic: &str, body: &str, signature: Option<String>) -> u16 {
        let mut req = self
            .client
            .post(callback)
            .header("content-type", "application/xml")
            .header("link", format!("<{topic}>; rel=\"self\", <{}>; rel=\"hub\"", self.url))
            .body(body.to_owned());
        if let Some(s) = signature {
            req = req.header("x-hub-signature", s);
        }
        // 0: no answer (the test kills Tributary under one delivery).
        req.send().await.map_or(0, |r| r.status().as_u16())
    }
}

fn rand_text() -> String {
    let mut b = [0u8; 8];
    rand::fill(&mut b[..]);
    hex::encode(b)
}

fn sign_sha256(secret: &str, body: &[u8]) -> String {
    let mut mac = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

fn sign_sha1(secret: &str, body: &[u8]) -> String {
    let mut mac = <Hmac<sha1::Sha1> as KeyInit>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    format!("sha1={}", hex::encode(mac.finalize().into_bytes()))
}

// ---------------------------------------------------------------------------------------------
// Tributary.

fn config(port: u16, defaults: &str, sources: &[(&str, &str, &str)]) -> String {
    let mut c = format!(
        "[aggregator]\nbase_url = \"http://127.0.0.1:{port}/\"\nlisten = \"127.0.0.1:{port}\"\ndata_dir = \"store\"\n\
         user_agent = \"Tributary-test/0.1 (+mailto:test@example.org)\"\n\n\
         [defaults]\nallow_private = true\nrate = \"unlimited\"\npoll = \"1s\"\npush_poll = \"1h\"\n{defaults}\n"
    );
    for (id, url, extra) in sources {
        c.push_str(&format!("\n[[source]]\nid = \"{id}\"\nurl = \"{url}\"\n{extra}\n"));
    }
    c
}

async fn source_row(svc: &Service, id: &str) -> serde_json::Value {
    let status = svc.json("api/status").await;
    status["sources"].as_array().unwrap().iter().find(|s| s["id"] == id).cloned().unwrap()
}

async fn changes(svc: &Service, id: &str) -> u64 {
    source_row(svc, id).await["changes"].as_u64().unwrap()
}

async fn wait_push_mode(svc: &Service, id: &str, mode: &str) {
    let what = format!("source {id} is in push mode {mode}");
    svc.wait_until(&what, LIMIT, |s| async move { source_row(s, id).await["push"]["mode"] == mode }).await;
}

async fn wait_changes(svc: &Service, id: &str, n: u64) {
    let what = format!("source {id} has {n} change events");
    svc.wait_until(&what, LIMIT, |s| async move { changes(s, id).await == n }).await;
}

/// Change events of set `id` for resource URIs ending with `suffix`.
async fn events_for(svc: &Service, id: &str, suffix: &str) -> Vec<String> {
    let v = svc.json(&format!("api/changes?set={id}&limit=1000")).await;
    let rows = v["changes"].as_array().unwrap();
    rows.iter()
        .filter(|r| r["uri"].as_str().unwrap().ends_with(suffix))
        .map(|r| r["change"].as_str().unwrap().to_owned())
        .collect()
}

/// What Tributary serves for the resource whose URI ends with `suffix`.
async fn content(svc: &Service, id: &str, suffix: &str) -> String {
    let v = svc.json(&format!("api/changes?set={id}&limit=1000")).await;
    let rows = v["changes"].as_array().unwrap();
    let uri = rows.iter().map(|r| r["uri"].as_str().unwrap()).find(|u| u.ends_with(suffix)).unwrap().to_owned();
    svc.client.get(uri).send().await.unwrap().text().await.unwrap()
}

async fn delivery_count(svc: &Service, outcome: &str) -> f64 {
    let (_, _, text) = svc.get("metrics").await;
    value(&parse_metrics(&text), "tributary_push_deliveries_total", &[("outcome", outcome)]).unwrap_or(0.0)
}

/// `tributary_source_resources_fetched_total` (`what = "fetched"`) or
/// `tributary_source_bytes_total` (`"bytes"`) of the source `up`.
async fn source_counter(svc: &Service, what: &str) -> f64 {
    let name = if what == "bytes" {
        "tributary_source_bytes_total".to_owned()
    } else {
        format!("tributary_source_resources_{what}_total")
    };
    let (_, _, text) = svc.get("metrics").await;
    value(&parse_metrics(&text), &name, &[("source", "up")]).unwrap_or(0.0)
}

/// A world: an upstream with one Source `up`, a hub, and Tributary subscribed to the Source.
struct World {
    _dir: tempfile::TempDir,
    files: Files,
    source: Source,
    hub: Hub,
    svc: Service,
}

async fn subscribed_world(defaults: &str) -> World {
    world_granting(defaults, &[]).await
}

/// [`subscribed_world`] with a hub that grants `grants` in turn (see [`HubState::grants`]).
async fn world_granting(defaults: &str, grants: &[Option<&str>]) -> World {
    let hub = Hub::start(HubMode::Verify).await;
    hub.state.grants.lock().unwrap().extend(grants.iter().map(|g| g.map(str::to_owned)));
    let files = Files::default();
    let port = listen(Router::new().fallback(serve_file).with_state(files.clone())).await;
    let source = Source::new(&files, port, "up", &hub.url, 2);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(free_port(), defaults, &[("up", &source.url("capabilitylist.xml"), "")]);
    let svc = Service::start(dir.path(), &cfg, &[], &[]).await;
    wait_push_mode(&svc, "up", "subscribed").await;
    // Tributary counts itself subscribed once it has echoed the challenge; the hub records the
    // subscription only when the echo has reached it, a moment later.
    let recorded = eventually(LIMIT, || async { hub.subscription().is_some() }).await;
    assert!(recorded, "the hub never recorded the verified subscription");
    wait_changes(&svc, "up", 2).await;
    World { _dir: dir, files, source, hub, svc }
}

#[tokio::test]
async fn a_verified_subscription_applies_each_change_once_whether_pushed_replayed_or_polled() {
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

    // Replayed (hubs redeliver): held already, so no second event.
    assert_eq!(w.hub.deliver(&n1, None).await, 204);
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
    assert_eq!(delivery_count(&w.svc, "replay").await, 1.0, "the replay was recognised and counted");
    // sha1 is refused unless the source opts in (`push_sha1`).
    let sha1 = sign_sha1(&w.hub.subscription().unwrap().secret, notification(t1 + 30, t1 + 31, &[]).as_bytes());
    assert_eq!(w.hub.deliver(&notification(t1 + 30, t1 + 31, &[]), Some(sha1)).await, 403);
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

/// A body of `len` spaces produced 64 KiB at a time as it is sent, and how much of it was
/// taken.
fn counted_body(len: u64) -> (Arc<AtomicU64>, reqwest::Body) {
    let pulled = Arc::new(AtomicU64::new(0));
    let stream = Spaces { left: len, chunk: Bytes::from(vec![b' '; 64 * 1024]), pulled: pulled.clone() };
    (pulled, reqwest::Body::wrap_stream(stream))
}

struct Spaces {
    left: u64,
    chunk: Bytes,
    pulled: Arc<AtomicU64>,
}

impl futures_core::Stream for Spaces {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        if self.left == 0 {
            return std::task::Poll::Ready(None);
        }
        let n = self.left.min(self.chunk.len() as u64);
        self.left -= n;
        self.pulled.fetch_add(n, Ordering::Relaxed);
        std::task::Poll::Ready(Some(Ok(self.chunk.slice(..n as usize))))
    }
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
    svc.wait_until("flask-websub verified the subscription", LIMIT, |s| async move {
        source_row(s, "up").await["push"]["mode"] == "subscribed"
    })
    .await;

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

// ---------------------------------------------------------------------------------------------
// Hostile trials (issue 36): a forged denial, a topic and entries on another site, trickled
// bodies, an old secret after a renewal, a delivery after the lease.

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
