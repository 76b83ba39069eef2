//! A world for push tests against a real `tributary run` (the subscribing side): an upstream
//! ResourceSync Source whose Capability List advertises a change-notification channel, and a
//! WebSub hub written here (axum on 127.0.0.1) that verifies intent and signs its deliveries
//! with an HMAC computed here, independently of Tributary's own code. Shared by
//! `push_subscribe` (what push does) and `hostile::push` (what a hostile hub or stranger
//! cannot make it do). Every wait is bounded.

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
use tributary::model::W3cDateTime;

use crate::support::digest::md_attrs;
use crate::support::net::{eventually, free_port, listen};
use crate::support::service::{Service, parse_metrics, value};

/// Generous bounds for a loaded 2-core machine; none is a timing assertion.
pub(crate) const LIMIT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// The upstream Source: files served from a map the test edits.

#[derive(Clone, Default)]
pub(crate) struct Files {
    pub(crate) docs: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    /// Paths answered only once released (or after a minute).
    pub(crate) hang: Arc<Mutex<HashSet<String>>>,
    pub(crate) release: Arc<tokio::sync::Notify>,
    pub(crate) hits: Arc<Mutex<Vec<String>>>,
    /// `Link` headers by path (a topic URI names itself and its hub, Change Notification §4.1).
    pub(crate) links: Arc<Mutex<HashMap<String, String>>>,
}

impl Files {
    pub(crate) fn put(&self, path: &str, body: impl Into<Vec<u8>>) {
        self.docs.lock().unwrap().insert(path.to_owned(), body.into());
    }

    pub(crate) fn hits(&self, path: &str) -> usize {
        self.hits.lock().unwrap().iter().filter(|p| *p == path).count()
    }
}

pub(crate) async fn serve_file(State(f): State<Files>, uri: Uri) -> Response {
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

/// One Source under `/{prefix}/` on an upstream: a Capability List naming a Resource List, a
/// Change List and a change-notification channel at `hub`.
pub(crate) struct Source {
    pub(crate) files: Files,
    pub(crate) base: String,
    pub(crate) prefix: String,
    pub(crate) hub: String,
    pub(crate) at: i64,
    pub(crate) resources: Vec<(String, Vec<u8>, i64)>,
    pub(crate) changes: Vec<String>,
}

pub(crate) fn w3c(unix: i64) -> String {
    W3cDateTime::from_unix(unix, 0).unwrap().to_string()
}

impl Source {
    pub(crate) fn new(files: &Files, port: u16, prefix: &str, hub: &str, n: usize) -> Source {
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

    pub(crate) fn url(&self, rel: &str) -> String {
        format!("{}{rel}", self.base)
    }

    pub(crate) fn path(&self, rel: &str) -> String {
        format!("/{}/{rel}", self.prefix)
    }

    pub(crate) fn topic(&self) -> String {
        self.url("notify")
    }

    pub(crate) fn publish(&self) {
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
    pub(crate) fn update(&mut self, i: usize, body: &str, when: i64) -> String {
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

pub(crate) const NS: &str =
    "xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" xmlns:rs=\"http://www.openarchives.org/rs/terms/\"";

/// A change notification (Change Notification §3) covering `from`..`until` with `entries`.
pub(crate) fn notification(from: i64, until: i64, entries: &[&str]) -> String {
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
pub(crate) enum HubMode {
    /// Accept (202) and verify intent with a GET to the callback.
    Verify,
    /// Accept (202) and never verify.
    Silent,
    /// Send the subscriber on to another hub (307, WebSub §5.1.2).
    Redirect,
}

#[derive(Clone, Debug)]
pub(crate) struct HubSub {
    pub(crate) topic: String,
    pub(crate) callback: String,
    pub(crate) secret: String,
    pub(crate) lease: String,
}

pub(crate) struct HubState {
    pub(crate) mode: HubMode,
    /// Where [`HubMode::Redirect`] sends subscribers.
    pub(crate) redirect_to: Mutex<String>,
    pub(crate) requests: Mutex<Vec<HashMap<String, String>>>,
    pub(crate) verified: Mutex<Vec<HubSub>>,
    pub(crate) unsubscribed: Mutex<Vec<String>>,
    pub(crate) challenges: AtomicU64,
    pub(crate) refused_echoes: AtomicUsize,
    /// What each subscribe verification grants, in turn: `Some(lease)` verifies granting that
    /// lease, `None` stays silent (never verifies); once empty, the lease asked for.
    pub(crate) grants: Mutex<std::collections::VecDeque<Option<String>>>,
}

#[derive(Clone)]
pub(crate) struct Hub {
    pub(crate) url: String,
    pub(crate) state: Arc<HubState>,
    pub(crate) client: reqwest::Client,
}

pub(crate) async fn hub_endpoint(State(hub): State<Hub>, Form(form): Form<HashMap<String, String>>) -> Response {
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
    pub(crate) async fn start(mode: HubMode) -> Hub {
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
    pub(crate) async fn verify(&self, form: HashMap<String, String>) {
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

    pub(crate) fn subscription(&self) -> Option<HubSub> {
        self.state.verified.lock().unwrap().last().cloned()
    }

    pub(crate) fn requests(&self, mode: &str) -> usize {
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
    pub(crate) async fn deliver(&self, body: &str, signature: Option<String>) -> u16 {
        let sub = self.subscription().expect("a verified subscription");
        let sig = signature.unwrap_or_else(|| sign_sha256(&sub.secret, body.as_bytes()));
        self.post(&sub.callback, &sub.topic, body, Some(sig)).await
    }

    pub(crate) async fn post(&self, callback: &str, topic: &str, body: &str, signature: Option<String>) -> u16 {
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

pub(crate) fn rand_text() -> String {
    let mut b = [0u8; 8];
    rand::fill(&mut b[..]);
    hex::encode(b)
}

pub(crate) fn sign_sha256(secret: &str, body: &[u8]) -> String {
    let mut mac = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

pub(crate) fn sign_sha1(secret: &str, body: &[u8]) -> String {
    let mut mac = <Hmac<sha1::Sha1> as KeyInit>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    format!("sha1={}", hex::encode(mac.finalize().into_bytes()))
}

// ---------------------------------------------------------------------------------------------
// Tributary.

pub(crate) fn config(port: u16, defaults: &str, sources: &[(&str, &str, &str)]) -> String {
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

pub(crate) async fn source_row(svc: &Service, id: &str) -> serde_json::Value {
    let status = svc.json("api/status").await;
    status["sources"].as_array().unwrap().iter().find(|s| s["id"] == id).cloned().unwrap()
}

pub(crate) async fn changes(svc: &Service, id: &str) -> u64 {
    source_row(svc, id).await["changes"].as_u64().unwrap()
}

pub(crate) async fn wait_push_mode(svc: &Service, id: &str, mode: &str) {
    let what = format!("source {id} is in push mode {mode}");
    svc.wait_until(&what, LIMIT, |s| async move { source_row(s, id).await["push"]["mode"] == mode }).await;
}

/// Waits until `id` is subscribed, no pass is in flight and its next poll is out at
/// `push_poll` (an hour in these tests). Before that, a pass begun at `poll` while the hub
/// verified may still read the change list, and find a change the test means to push.
pub(crate) async fn wait_push_only(svc: &Service, id: &str) {
    let what = format!("source {id} is subscribed, idle and not due for a poll");
    svc.wait_until(&what, LIMIT, |s| async move {
        let row = source_row(s, id).await;
        let now = tributary::model::W3cDateTime::now().unix_timestamp();
        let next = row["next_attempt"].as_str().and_then(|t| t.parse::<tributary::model::W3cDateTime>().ok());
        row["push"]["mode"] == "subscribed"
            && row["state"] == "idle"
            && next.is_some_and(|t| t.unix_timestamp() > now + 600)
    })
    .await;
}

pub(crate) async fn wait_changes(svc: &Service, id: &str, n: u64) {
    let what = format!("source {id} has {n} change events");
    svc.wait_until(&what, LIMIT, |s| async move { changes(s, id).await == n }).await;
}

/// Change events of set `id` for resource URIs ending with `suffix`.
pub(crate) async fn events_for(svc: &Service, id: &str, suffix: &str) -> Vec<String> {
    let v = svc.json(&format!("api/changes?set={id}&limit=1000")).await;
    let rows = v["changes"].as_array().unwrap();
    rows.iter()
        .filter(|r| r["uri"].as_str().unwrap().ends_with(suffix))
        .map(|r| r["change"].as_str().unwrap().to_owned())
        .collect()
}

/// What Tributary serves for the resource whose URI ends with `suffix`.
pub(crate) async fn content(svc: &Service, id: &str, suffix: &str) -> String {
    let v = svc.json(&format!("api/changes?set={id}&limit=1000")).await;
    let rows = v["changes"].as_array().unwrap();
    let uri = rows.iter().map(|r| r["uri"].as_str().unwrap()).find(|u| u.ends_with(suffix)).unwrap().to_owned();
    svc.client.get(uri).send().await.unwrap().text().await.unwrap()
}

pub(crate) async fn delivery_count(svc: &Service, outcome: &str) -> f64 {
    let (_, _, text) = svc.get("metrics").await;
    value(&parse_metrics(&text), "tributary_push_deliveries_total", &[("outcome", outcome)]).unwrap_or(0.0)
}

/// `tributary_source_resources_fetched_total` (`what = "fetched"`) or
/// `tributary_source_bytes_total` (`"bytes"`) of the source `up`.
pub(crate) async fn source_counter(svc: &Service, what: &str) -> f64 {
    let name = if what == "bytes" {
        "tributary_source_bytes_total".to_owned()
    } else {
        format!("tributary_source_resources_{what}_total")
    };
    let (_, _, text) = svc.get("metrics").await;
    value(&parse_metrics(&text), &name, &[("source", "up")]).unwrap_or(0.0)
}

/// A world: an upstream with one Source `up`, a hub, and Tributary subscribed to the Source.
pub(crate) struct World {
    pub(crate) _dir: tempfile::TempDir,
    pub(crate) files: Files,
    pub(crate) source: Source,
    pub(crate) hub: Hub,
    pub(crate) svc: Service,
}

pub(crate) async fn subscribed_world(defaults: &str) -> World {
    world_granting(defaults, &[]).await
}

/// [`subscribed_world`] with a hub that grants `grants` in turn (see [`HubState::grants`]).
pub(crate) async fn world_granting(defaults: &str, grants: &[Option<&str>]) -> World {
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
    wait_push_only(&svc, "up").await;
    World { _dir: dir, files, source, hub, svc }
}

/// A body of `len` spaces produced 64 KiB at a time as it is sent, and how much of it was
/// taken.
pub(crate) fn counted_body(len: u64) -> (Arc<AtomicU64>, reqwest::Body) {
    let pulled = Arc::new(AtomicU64::new(0));
    let stream = Spaces { left: len, chunk: Bytes::from(vec![b' '; 64 * 1024]), pulled: pulled.clone() };
    (pulled, reqwest::Body::wrap_stream(stream))
}

pub(crate) struct Spaces {
    pub(crate) left: u64,
    pub(crate) chunk: Bytes,
    pub(crate) pulled: Arc<AtomicU64>,
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
