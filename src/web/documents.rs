//! The ResourceSync documents at their `naming` paths: Source Description, Capability Lists,
//! Resource Lists (single, index, parts) and Change Lists (index, closed, open).
//!
//! Every store read runs on the blocking pool. Long lists stream ([`super::body`]); the small
//! navigation documents and indexes are written in full. Closed Change Lists come from
//! [`super::cache`] with a strong `ETag` and a year of `immutable` caching, since their bytes
//! never change; everything else may change at the next harvest and says `no-cache`.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::cache::Cached;
use super::error::WebError;
use super::{WebState, body, pages};
use crate::naming::SetDocument;
use crate::publish::{ChangeListDoc, Publisher, ResourceListDoc};

const XML: &str = "application/xml";
const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// A complete XML document.
fn xml(bytes: impl Into<Bytes>, cache: &'static str) -> Response {
    let mut r = Body::from(bytes.into()).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(XML));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    r
}

/// An XML document written by `produce` on the blocking pool, streamed.
async fn streamed(
    st: &WebState,
    what: String,
    produce: impl FnOnce(&Publisher, &mut body::ChannelWriter) -> Result<u64, crate::publish::PublishError> + Send + 'static,
) -> Response {
    let publisher: Arc<Publisher> = st.shared.publisher.clone();
    let body = body::blocking_body(st.shared.stream_slots(), what, move |w| produce(&publisher, w).map(drop)).await;
    let mut r = body.into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(XML));
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

async fn blocking<T: Send + 'static>(
    st: &WebState,
    f: impl FnOnce(&Publisher) -> Result<T, WebError> + Send + 'static,
) -> Result<T, WebError> {
    let p = st.shared.publisher.clone();
    tokio::task::spawn_blocking(move || f(&p)).await?
}

/// `/.well-known/resourcesync`.
pub(crate) async fn source_description(st: &WebState) -> Result<Response, WebError> {
    let bytes = blocking(st, |p| Ok(p.source_description())).await?;
    Ok(xml(bytes, "no-cache"))
}

/// Any `sets/{set}/…` document.
pub(crate) async fn set_document(
    st: &WebState,
    set: String,
    doc: SetDocument,
    method: &Method,
    req: &HeaderMap,
) -> Result<Response, WebError> {
    if st.shared.publisher.set(&set).is_none() {
        return Err(WebError::NotFound(format!("no set {set:?}")));
    }
    if *method == Method::HEAD && matches!(doc, SetDocument::ResourceList | SetDocument::ResourceListPart(_)) {
        // Answering HEAD would cost a full scan for headers only.
        let mut r = StatusCode::OK.into_response();
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(XML));
        return Ok(r);
    }
    match doc {
        SetDocument::Page => pages::set_page(st, set).await,
        SetDocument::CapabilityList => {
            let bytes = blocking(st, move |p| p.capability_list(&set).ok_or(WebError::NotFound(set))).await?;
            Ok(xml(bytes, "no-cache"))
        }
        SetDocument::ResourceList => resource_list(st, set).await,
        SetDocument::ResourceListPart(n) => resource_list_part(st, set, n).await,
        SetDocument::ChangeList => {
            let name = st.shared.publisher.naming().change_list(&set);
            let list = blocking(st, move |p| Ok(p.recent_change_list(&set)?)).await?;
            Ok(streamed(st, name, move |p, w| p.write_open_change_list(&list, w)).await)
        }
        SetDocument::ChangeListIndex => {
            let bytes = blocking(st, move |p| Ok(p.change_list_index(&set)?)).await?;
            Ok(xml(bytes, "no-cache"))
        }
        SetDocument::ChangeListPart(n) => change_list(st, set, n, req).await,
        SetDocument::ResourceDump => super::dumps::document(st, set).await,
        SetDocument::ResourceDumpPackage(seq, n) => super::dumps::file(st, set, (seq, n), false, method, req).await,
        SetDocument::ResourceDumpManifest(seq, n) => super::dumps::file(st, set, (seq, n), true, method, req).await,
        SetDocument::ChangeDump => super::dumps::change_dump(st, set).await,
        SetDocument::ChangeDumpPackage(n, last) => {
            super::dumps::change_file(st, set, (n, last), false, method, req).await
        }
        SetDocument::ChangeDumpManifest(n, last) => {
            super::dumps::change_file(st, set, (n, last), true, method, req).await
        }
        SetDocument::Feed => {
            let (name, opts) = (st.shared.publisher.naming().set_feed(&set), st.shared.feed());
            Ok(atom(streamed(st, name, move |p, w| p.write_recent_feed(&set, &opts, w)).await))
        }
        SetDocument::Notifications => super::hub::topic(st, &set),
        SetDocument::CompleteFeed(n) => {
            let name = st.shared.publisher.naming().set_complete_feed(&set, n);
            let missing = format!("no page {n:?} of the complete feed of set {set:?}");
            let page = blocking(st, move |p| p.complete_feed_page(&set, n)?.ok_or(WebError::NotFound(missing))).await?;
            let opts = st.shared.feed();
            Ok(atom(streamed(st, name, move |p, w| p.write_complete_feed(&page, &opts, w)).await))
        }
    }
}

/// Atom feeds say so, for feed readers that go by the type.
fn atom(mut r: Response) -> Response {
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/atom+xml"));
    r
}

async fn resource_list(st: &WebState, set: String) -> Result<Response, WebError> {
    let name = st.shared.publisher.naming().resource_list(&set);
    match blocking(st, move |p| Ok(p.resource_list(&set)?)).await? {
        ResourceListDoc::Index(bytes) => Ok(xml(bytes, "no-cache")),
        ResourceListDoc::List(job) => Ok(streamed(st, name, move |p, w| p.write_list(&job, w)).await),
    }
}

async fn resource_list_part(st: &WebState, set: String, n: u64) -> Result<Response, WebError> {
    let name = st.shared.publisher.naming().resource_list_part(&set, n);
    let missing = format!("no part {n} of the Resource List of set {set:?}");
    let job = blocking(st, move |p| p.resource_list_part(&set, n)?.ok_or(WebError::NotFound(missing))).await?;
    Ok(streamed(st, name, move |p, w| p.write_list(&job, w)).await)
}

async fn change_list(st: &WebState, set: String, n: u64, req: &HeaderMap) -> Result<Response, WebError> {
    let cache = &st.shared.closed;
    let cached = match cache.get(&set, n) {
        Some(c) => c,
        None => {
            let name = st.shared.publisher.naming().change_list_part(&set, n);
            let missing = format!("no Change List {n} in set {set:?}");
            let set2 = set.clone();
            let doc = blocking(st, move |p| {
                Ok(match p.change_list(&set2, n)?.ok_or(WebError::NotFound(missing))? {
                    ChangeListDoc::Closed(bytes) => Ok(Cached::new(bytes)),
                    ChangeListDoc::Open(list) => Err(list),
                })
            })
            .await?;
            match doc {
                Ok(closed) => cache.insert(&set, n, closed),
                Err(list) => return Ok(streamed(st, name, move |p, w| p.write_open_change_list(&list, w)).await),
            }
        }
    };
    Ok(closed_response(&cached, req))
}

/// A closed list: gzip when accepted, `304` when the client's tag is current, a year of
/// `immutable` caching either way.
fn closed_response(cached: &Cached, req: &HeaderMap) -> Response {
    let gzip = accepts_gzip(req);
    let etag = if gzip { cached.gzip_etag() } else { cached.etag.clone() };
    let matches = req
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim().trim_start_matches("W/") == etag || t.trim() == "*"));
    let mut r = match (matches, gzip) {
        (true, _) => StatusCode::NOT_MODIFIED.into_response(),
        (false, true) => xml(cached.gzip.clone(), IMMUTABLE),
        (false, false) => xml(cached.bytes.clone(), IMMUTABLE),
    };
    let h = r.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(IMMUTABLE));
    h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    if gzip && !matches {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    r
}

/// Whether `Accept-Encoding` allows gzip (listed, or `*`, without `q=0`).
fn accepts_gzip(req: &HeaderMap) -> bool {
    let Some(v) = req.get(header::ACCEPT_ENCODING).and_then(|v| v.to_str().ok()) else { return false };
    v.split(',').any(|item| {
        let mut parts = item.split(';');
        let coding = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let refused = parts.any(|p| {
            let p = p.trim().to_ascii_lowercase();
            p.strip_prefix("q=").is_some_and(|q| q.trim().parse::<f32>().is_ok_and(|q| q == 0.0))
        });
        matches!(coding.as_str(), "gzip" | "x-gzip" | "*") && !refused
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_negotiation() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
            accepts_gzip(&h)
        };
        assert!(with("gzip, deflate, br"));
        assert!(with("br;q=1.0, gzip;q=0.8"));
        assert!(with("*"));
        assert!(!with("gzip;q=0"));
        assert!(!with("identity"));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }
}
