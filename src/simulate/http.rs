//! HTTP for a simulated Source: one axum fallback handler that maps a path to a document or
//! a bitstream. Rendering and body generation run on the blocking pool, because a 50,000-entry
//! list or a multi-megabyte bitstream is CPU work that must not stall the async workers.
//!
//! Resources answer `GET`/`HEAD` with Content-Length, ETag (the md5 of the bytes) and
//! Last-Modified, honour `If-None-Match`/`If-Modified-Since` with 304, and answer 410 Gone
//! once deleted (404 for ids that never existed). Change Lists dropped by the retention limit
//! answer 410 too.

use std::future::Future;
use std::io;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State as AxState;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use md5::{Digest as _, Md5};
use tokio::net::TcpListener;

use super::push::{self, PushHub};
use super::render;
use super::sim::{Lookup, Simulator};
use super::state::Target;

/// What one request gets, before it becomes an HTTP response.
struct Reply {
    status: StatusCode,
    content_type: &'static str,
    body: Bytes,
    etag: Option<[u8; 16]>,
    last_modified_ms: Option<i64>,
}

impl Reply {
    fn doc(bytes: impl Into<Bytes>) -> Self {
        let body = bytes.into();
        let etag = Some(Md5::digest(&body).into());
        Reply { status: StatusCode::OK, content_type: "application/xml", body, etag, last_modified_ms: None }
    }

    fn status(status: StatusCode) -> Self {
        Reply { status, content_type: "text/plain", body: Bytes::new(), etag: None, last_modified_ms: None }
    }
}

/// The routes of `sim`, all under one fallback handler. Several simulated Sources can share a
/// listener by nesting: `Router::new().nest("/a", router(a))` with `a`'s base URL ending in
/// `/a`.
pub fn router(sim: Simulator) -> Router {
    Router::new().fallback(handle).with_state(sim)
}

/// Serves `sim` on `listener` until `shutdown` completes, then finishes in-flight requests.
/// Changes are applied only by [`Simulator::step`] or a [`Simulator::start_ticking`] ticker.
///
/// # Errors
/// When accepting connections fails.
pub async fn serve(
    listener: TcpListener,
    sim: Simulator,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    axum::serve(listener, router(sim)).with_graceful_shutdown(shutdown).await
}

async fn handle(
    AxState(sim): AxState<Simulator>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(hub) = &sim.inner.push {
        match uri.path() {
            push::HUB => return hub_request(hub, &method, &headers, &body),
            push::TOPIC if method == Method::GET || method == Method::HEAD => return topic(hub),
            _ => {}
        }
    }
    if method != Method::GET && method != Method::HEAD {
        let mut r = StatusCode::METHOD_NOT_ALLOWED.into_response();
        r.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let path = uri.path().to_owned();
    match tokio::task::spawn_blocking(move || reply(&sim, &path)).await {
        Ok(r) => respond(r, &headers),
        Err(e) => {
            tracing::error!(error = %crate::error::chain(&e), "simulator render task failed");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// `POST /hub`: a subscribe or unsubscribe request, answered with a status and a short text.
fn hub_request(hub: &std::sync::Arc<PushHub>, method: &Method, headers: &HeaderMap, body: &Bytes) -> Response {
    if method != Method::POST {
        let mut r = (StatusCode::METHOD_NOT_ALLOWED, "the hub takes POST requests (WebSub)\n").into_response();
        r.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
        return r;
    }
    let form = crate::websub::is_form(headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()));
    let (status, text) = hub.handle(form, body);
    (StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), text + "\n").into_response()
}

/// The topic URI (Change Notification §4.1): the latest payload, with the `Link` header naming
/// topic and hub; an empty body before the first.
fn topic(hub: &PushHub) -> Response {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/xml"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(&hub.link()) {
        headers.insert(header::LINK, v);
    }
    (StatusCode::OK, headers, Body::from(hub.latest())).into_response()
}

fn reply(sim: &Simulator, path: &str) -> Reply {
    let site = &sim.inner.site;
    match path {
        render::SOURCE_DESCRIPTION => return Reply::doc(site.source_description()),
        render::CAPABILITY_LIST => return Reply::doc(site.capability_list()),
        render::RESOURCE_LIST => return Reply::doc(site.resource_list(&sim.read())),
        render::CHANGE_LIST_INDEX => return Reply::doc(site.change_list_index(&sim.read())),
        render::RESOURCE_DUMP if sim.config().dump => return dump_document(sim),
        _ => {}
    }
    if let Some(k) = number(path, "/resourcelist/", ".xml") {
        return site.resource_list_part(&sim.read(), k).map_or(Reply::status(StatusCode::NOT_FOUND), Reply::doc);
    }
    if let Some(seq) = number(path, "/changelist/", ".xml") {
        return change_list(sim, seq);
    }
    if let Some(id) = number(path, "/res/", "") {
        return resource(sim, Target::Data(id));
    }
    if let Some(id) = number(path, "/meta/", "") {
        return resource(sim, Target::Meta(id));
    }
    if let (true, Some(rest)) = (sim.config().dump, path.strip_prefix("/resourcedump/")) {
        return dump_part(sim, rest);
    }
    Reply::status(StatusCode::NOT_FOUND)
}

/// `<prefix><decimal><suffix>` → the number.
fn number(path: &str, prefix: &str, suffix: &str) -> Option<u64> {
    let digits = path.strip_prefix(prefix)?.strip_suffix(suffix)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn change_list(sim: &Simulator, seq: u64) -> Reply {
    let st = sim.read();
    if seq == st.open.seq {
        return Reply::doc(sim.inner.site.open_change_list(&st));
    }
    if let Some(l) = st.closed.iter().find(|l| l.seq == seq) {
        return Reply::doc(Bytes::copy_from_slice(&l.bytes));
    }
    let dropped = seq < st.closed.front().map_or(st.open.seq, |l| l.seq);
    Reply::status(if dropped { StatusCode::GONE } else { StatusCode::NOT_FOUND })
}

fn resource(sim: &Simulator, target: Target) -> Reply {
    match sim.lookup(target) {
        Lookup::Live(body, md5, t) => Reply {
            status: StatusCode::OK,
            content_type: render::media_type(target),
            body: body.into(),
            etag: Some(md5),
            last_modified_ms: Some(t),
        },
        Lookup::Gone => Reply::status(StatusCode::GONE),
        Lookup::Missing => Reply::status(StatusCode::NOT_FOUND),
    }
}

fn dump_document(sim: &Simulator) -> Reply {
    match sim.current_dump() {
        Ok(build) => Reply::doc(build.document.clone()),
        Err(e) => {
            tracing::error!(error = %crate::error::chain(&e), "resource dump build failed");
            Reply::status(StatusCode::INTERNAL_SERVER_ERROR)
        }
    }
}

/// `<generation>/<k>.zip` or `<generation>/<k>-manifest.xml` of a kept build.
fn dump_part(sim: &Simulator, rest: &str) -> Reply {
    let Some((generation, file)) = rest.split_once('/') else { return Reply::status(StatusCode::NOT_FOUND) };
    let Ok(generation) = generation.parse::<u64>() else { return Reply::status(StatusCode::NOT_FOUND) };
    let Some(build) = sim.cached_dump(generation) else { return Reply::status(StatusCode::NOT_FOUND) };
    let nth = |k: u64| build.packages.get((k as usize).wrapping_sub(1));
    if let Some(p) = number(&format!("/{file}"), "/", ".zip").and_then(nth) {
        let mut r = Reply::doc(p.zip.clone());
        r.content_type = "application/zip";
        return r;
    }
    if let Some(p) = number(&format!("/{file}"), "/", "-manifest.xml").and_then(nth) {
        return Reply::doc(p.manifest.clone());
    }
    Reply::status(StatusCode::NOT_FOUND)
}

fn respond(r: Reply, req: &HeaderMap) -> Response {
    let etag = r.etag.map(|d| format!("\"{}\"", hex::encode(d)));
    let last_modified = r.last_modified_ms.map(|ms| UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64));
    let mut headers = HeaderMap::new();
    if let Some(v) = etag.as_deref().and_then(|e| HeaderValue::from_str(e).ok()) {
        headers.insert(header::ETAG, v);
    }
    if let Some(v) = last_modified.and_then(|t| HeaderValue::from_str(&httpdate::fmt_http_date(t)).ok()) {
        headers.insert(header::LAST_MODIFIED, v);
    }
    if r.status == StatusCode::OK && not_modified(req, etag.as_deref(), last_modified) {
        return (StatusCode::NOT_MODIFIED, headers).into_response();
    }
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(r.content_type));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(r.body.len()));
    (r.status, headers, Body::from(r.body)).into_response()
}

/// RFC 9110 §13.1: If-None-Match wins; If-Modified-Since is compared at whole seconds.
fn not_modified(req: &HeaderMap, etag: Option<&str>, last_modified: Option<SystemTime>) -> bool {
    if let Some(inm) = req.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()) {
        return etag.is_some_and(|e| inm.split(',').any(|t| t.trim() == e || t.trim() == "*"));
    }
    let ims = req
        .get(header::IF_MODIFIED_SINCE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| httpdate::parse_http_date(v).ok());
    match (ims, last_modified) {
        (Some(ims), Some(lm)) => {
            let secs = |t: SystemTime| t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
            secs(lm) <= secs(ims)
        }
        _ => false,
    }
}
