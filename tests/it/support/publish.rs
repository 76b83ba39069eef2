//! Tributary's web server on 127.0.0.1:0 over a real store in a temporary directory, records
//! written as the harvester will write them, and a Destination's view: fetch, check, parse.

use std::collections::BTreeMap;

use reqwest::StatusCode;

use super::digest::md5_hex;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tributary::check::check_reader;
use tributary::model::{Document, HashList, Link, ReadOptions, RootFormat, W3cDateTime, read_document};
use tributary::naming::Naming;
use tributary::publish::{Limits, LinkPolicies, SetConfig};
use tributary::store::{Batch, Expected, Listing, NewRecord, Store, Via};
use tributary::web::{WebState, serve};
use url::Url;

/// A bound listener and the naming of the server that will run on it.
pub(crate) async fn bind() -> (TcpListener, Naming) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, Naming::new(&Url::parse(&format!("http://{addr}/")).unwrap()))
}

/// A running server; stops when dropped.
pub(crate) struct Running {
    pub(crate) naming: Naming,
    pub(crate) client: reqwest::Client,
    pub(crate) state: WebState,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Serves `state` on `listener`.
pub(crate) fn spawn(listener: TcpListener, naming: Naming, state: WebState) -> Running {
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(serve(listener, state.clone(), async move {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::builder().timeout(std::time::Duration::from_secs(20)).build().unwrap();
    Running { naming, client, state, stop: Some(stop) }
}

/// Builds the state and serves it.
pub(crate) fn start(
    listener: TcpListener,
    naming: Naming,
    store: &Store,
    sets: Vec<SetConfig>,
    policies: LinkPolicies,
    limits: Limits,
) -> Running {
    let state = WebState::new(store.clone(), naming.clone(), sets, policies, limits).unwrap();
    spawn(listener, naming, state)
}

/// One resource as an upstream described it.
#[derive(Debug, Clone)]
pub(crate) struct Res {
    pub(crate) source: String,
    pub(crate) upstream: String,
    /// The `via` target; equal to `upstream` unless the upstream is an aggregator.
    pub(crate) origin: String,
    pub(crate) content: Vec<u8>,
    pub(crate) media_type: Option<String>,
    pub(crate) via: Via,
    pub(crate) links: Vec<Link>,
}

impl Res {
    /// A resource of `source` fetched from (and originating at) `upstream`.
    pub(crate) fn new(source: &str, upstream: &str, content: impl Into<Vec<u8>>) -> Res {
        let content = content.into();
        Res {
            source: source.to_owned(),
            upstream: upstream.to_owned(),
            origin: upstream.to_owned(),
            via: Via {
                modified: Some("2024-05-01T10:00:00Z".parse().unwrap()),
                hash: HashList::parse(&format!("md5:{}", md5_hex(&content))).unwrap().0,
                length: Some(content.len() as u64),
                media_type: Some("text/plain".into()),
            },
            content,
            media_type: Some("text/plain".into()),
            links: Vec::new(),
        }
    }
}

/// Stores the content and returns the record the harvester would write.
pub(crate) fn new_record(store: &Store, naming: &Naming, r: &Res) -> NewRecord {
    let expected = Expected { md5: true, ..Expected::none() }.with_media_type(r.media_type.clone());
    let info = store.put(&r.content[..], &expected).unwrap();
    NewRecord {
        uri: naming.resource(&r.source, &r.upstream).unwrap(),
        source: r.source.clone(),
        upstream: r.upstream.clone(),
        sha256: info.id,
        listing: Listing {
            origin: r.origin.clone(),
            declared: HashList::default(),
            length: None,
            media_type: r.media_type.clone(),
            lastmod: r.via.modified,
            via: r.via.clone(),
            links: r.links.clone(),
        },
    }
}

/// Upserts resources into `sets`, one batch; returns their Tributary URIs.
pub(crate) fn upsert(store: &Store, naming: &Naming, sets: &[&str], resources: &[Res]) -> Vec<String> {
    let mut batch = Batch::new();
    let mut uris = Vec::new();
    for r in resources {
        let rec = new_record(store, naming, r);
        uris.push(rec.uri.clone());
        batch.upsert(sets, rec);
    }
    store.apply(&mut batch).unwrap();
    uris
}

/// Deletes resources (by Tributary URI) from `sets`, one batch.
pub(crate) fn delete(store: &Store, sets: &[&str], uris: &[String]) {
    let mut batch = Batch::new();
    for u in uris {
        batch.delete(sets, u);
    }
    store.apply(&mut batch).unwrap();
}

/// GETs a document, asserts 200 and zero `check` errors and warnings, and parses it.
pub(crate) async fn doc(client: &reqwest::Client, url: &str) -> (Vec<u8>, Document) {
    let resp = client.get(url).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK, "{url}");
    let bytes = resp.bytes().await.unwrap().to_vec();
    let report = check_reader(&bytes[..], ReadOptions::named(url));
    assert_eq!(report.errors(), 0, "{url}:\n{}\n{}", report.render(true), String::from_utf8_lossy(&bytes));
    assert_eq!(report.warnings(), 0, "{url}:\n{}", report.render(true));
    let (document, _) = read_document(&bytes, ReadOptions::named(url)).unwrap();
    (bytes, document)
}

/// Every document reachable from the Source Description, checked, by URL.
pub(crate) async fn walk(client: &reqwest::Client, naming: &Naming) -> BTreeMap<String, Document> {
    let mut out = BTreeMap::new();
    let sd_url = naming.source_description();
    let (_, sd) = doc(client, &sd_url).await;
    for cap in &sd.entries {
        let (_, cl) = doc(client, &cap.loc).await;
        for capability in &cl.entries {
            walk_list(client, &capability.loc, &mut out).await;
        }
        out.insert(cap.loc.clone(), cl);
    }
    out.insert(sd_url, sd);
    out
}

async fn walk_list(client: &reqwest::Client, url: &str, out: &mut BTreeMap<String, Document>) {
    let (_, d) = doc(client, url).await;
    // A Change List names its index, and the index the lists (§12.1).
    let index = d.header.link("index").map(|l| l.href.clone()).filter(|i| i != url && !out.contains_key(i));
    if let Some(index) = index {
        Box::pin(walk_list(client, &index, out)).await;
    }
    if d.header.format == Some(RootFormat::SitemapIndex) {
        for part in &d.entries {
            let (_, p) = doc(client, &part.loc).await;
            out.insert(part.loc.clone(), p);
        }
    }
    out.insert(url.to_owned(), d);
}

/// Entries of a Resource List or Change List, following an index through its parts.
pub(crate) async fn entries(client: &reqwest::Client, url: &str) -> Vec<tributary::model::Entry> {
    let (_, d) = doc(client, url).await;
    if d.header.format != Some(RootFormat::SitemapIndex) {
        return d.entries;
    }
    let mut all = Vec::new();
    for part in &d.entries {
        all.extend(doc(client, &part.loc).await.1.entries);
    }
    all
}

/// A datetime literal.
pub(crate) fn t(s: &str) -> W3cDateTime {
    s.parse().unwrap()
}

/// What the harvester will do, reduced to what these tests need: read a Resource List
/// (following an index), fetch each bitstream, and store it with the entry's own `via` as the
/// origin when it has one (an aggregator upstream), else the entry itself. Returns the count.
pub(crate) async fn harvest(
    client: &reqwest::Client,
    list_url: &str,
    store: &Store,
    naming: &Naming,
    source: &str,
    sets: &[&str],
) -> usize {
    let listed = entries(client, list_url).await;
    let mut batch = Batch::new();
    for e in &listed {
        let body = client.get(&e.loc).send().await.unwrap().bytes().await.unwrap();
        let md = e.md.clone().unwrap_or_default();
        let (origin, via) = match e.link("via") {
            Some(v) => (
                v.href.clone(),
                Via {
                    modified: v.modified,
                    hash: v.hash.clone().unwrap_or_default(),
                    length: v.length,
                    media_type: v.media_type.clone(),
                },
            ),
            None => (
                e.loc.clone(),
                Via {
                    modified: e.lastmod,
                    hash: md.hash.clone().unwrap_or_default(),
                    length: md.length,
                    media_type: md.media_type.clone(),
                },
            ),
        };
        let expected = Expected { md5: true, ..Expected::declared(md.length, md.hash.as_ref()) };
        let info = store.put(&body[..], &expected).unwrap();
        batch.upsert(
            sets,
            NewRecord {
                uri: naming.resource(source, &e.loc).unwrap(),
                source: source.to_owned(),
                upstream: e.loc.clone(),
                sha256: info.id,
                listing: Listing {
                    origin,
                    declared: md.hash.clone().unwrap_or_default(),
                    length: None,
                    media_type: md.media_type.clone(),
                    lastmod: e.lastmod,
                    via,
                    links: e.links.iter().filter(|l| l.rel != "via").cloned().collect(),
                },
            },
        );
    }
    store.apply(&mut batch).unwrap();
    listed.len()
}

/// GETs JSON: the status and the parsed body.
pub(crate) async fn get_json(client: &reqwest::Client, url: &str) -> (StatusCode, serde_json::Value) {
    let resp = client.get(url).send().await.unwrap();
    let status = resp.status();
    let body = resp.bytes().await.unwrap();
    (status, serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{url}: {e}: {}", String::from_utf8_lossy(&body))))
}

/// Percent-encodes a query parameter value.
pub(crate) fn urlencode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}
