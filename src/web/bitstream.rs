//! Bitstreams: `GET`/`HEAD` on Tributary's URI for a resource, served from the store.
//!
//! Validators are the content's sha-256 (a strong `ETag`) and the time Tributary's copy last
//! changed (`Last-Modified`, the same instant as the Resource List's `<lastmod>`), so
//! conditional requests and ranges follow [`super::conditional`]. `Link` headers point at the
//! origin (`via`) and at the Capability List of each set the resource is in (`resourcesync`).
//!
//! The content is third-party and untrusted. Every bitstream is sent with
//! `X-Content-Type-Options: nosniff` and `Content-Security-Policy: default-src 'none'; sandbox` (harmless for
//! passive types, and it stops script in anything a browser might still render); types that
//! can carry script when rendered (HTML, XHTML, SVG, any XML, JavaScript, multipart) are also
//! sent as `Content-Disposition: attachment`. A missing or malformed media type becomes
//! `application/octet-stream`, which browsers download rather than sniff.
//!
//! A presigned redirect to the bucket (`blobs_presign`) hands the response to S3, which can
//! send neither the policy nor `nosniff`; what it can send, through response-header overrides
//! signed into the URL, is the same `Content-Type` and a `Content-Disposition`. Every type is
//! redirected with the disposition Tributary would send, and active types as `attachment`: a
//! download never renders, so no script runs on the bucket's origin — the one protection of
//! the policy's `sandbox` that matters there. The type is named explicitly (never left to the
//! object's own, which may be another record's), so the browser has nothing to sniff.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::conditional::{Decision, Validators, decide, system_time};
use super::error::WebError;
use super::{Shared, WebState, body};
use crate::store::{BlobReader, Record, ResponseHeaders};

/// Bodies up to this size are read in the lookup task and sent in one piece; larger ones
/// stream in chunks.
const SMALL: u64 = 64 * 1024;

enum Payload {
    Empty,
    Small(Vec<u8>),
    Stream(BlobReader),
}

struct Prepared {
    status: StatusCode,
    headers: HeaderMap,
    payload: Payload,
    /// The validators, for a response worth keeping in [`super::hot`].
    validators: Option<(String, std::time::SystemTime)>,
}

/// Answers a request for the resource `uri` (Tributary's URI, query included): from
/// [`super::hot`] when it holds the answer, else from the store on the blocking pool.
pub(crate) async fn serve(st: &WebState, uri: String, method: &Method, req: HeaderMap) -> Result<Response, WebError> {
    let head = method == Method::HEAD;
    let hot = &st.shared.hot;
    if !head
        && let Some(h) = hot.get(&uri)
        && decide(&req, h.validators(), true) == Decision::Full
    {
        return Ok(h.response());
    }
    let generation = hot.generation();
    let shared = st.shared.clone();
    let log_uri = uri.clone();
    let p = tokio::task::spawn_blocking(move || prepare(&shared, &uri, &req, head)).await??;
    let body = match p.payload {
        Payload::Empty => Body::empty(),
        Payload::Small(bytes) => {
            let bytes = Bytes::from(bytes);
            if let Some((etag, last_modified)) = &p.validators {
                let v = Validators { etag, last_modified: *last_modified, length: bytes.len() as u64 };
                hot.keep(log_uri, generation, v, &p.headers, bytes.clone());
            }
            Body::from(bytes)
        }
        Payload::Stream(mut reader) => {
            body::blocking_body(st.shared.stream_slots(), log_uri, move |w| std::io::copy(&mut reader, w).map(drop))
                .await
        }
    };
    let mut r = (p.status, body).into_response();
    *r.headers_mut() = p.headers;
    Ok(r)
}

fn prepare(sh: &Shared, uri: &str, req: &HeaderMap, head: bool) -> Result<Prepared, WebError> {
    let store = sh.publisher.store();
    let rec = store.record(uri)?.ok_or_else(|| WebError::NotFound(format!("no resource {uri}")))?;
    if let Some(when) = rec.deleted {
        // The operator's reason is never served.
        let keys = crate::store::record_keys(&rec.upstream, &rec.origin, &rec.sha256.to_hex());
        if store.takedown_matching(&keys)?.is_some() {
            return Err(WebError::Gone(format!("{uri} was withdrawn by this aggregator's operator")));
        }
        return Err(WebError::Gone(format!("{uri} was deleted upstream; Tributary recorded the deletion at {when}")));
    }
    let etag = format!("\"{}\"", rec.sha256.to_hex());
    let last_modified = system_time(rec.changed.unix_timestamp());
    let mut h = validator_headers(&etag, last_modified);
    add_links(sh, &rec, &mut h);
    let v = Validators { etag: &etag, last_modified, length: rec.length };
    let empty = |status, headers| Ok(Prepared { status, headers, payload: Payload::Empty, validators: None });
    let (status, range) = match decide(req, v, !head) {
        Decision::NotModified => return empty(StatusCode::NOT_MODIFIED, h),
        Decision::PreconditionFailed => return empty(StatusCode::PRECONDITION_FAILED, h),
        Decision::Unsatisfiable => {
            h.insert(header::CONTENT_RANGE, value(&format!("bytes */{}", rec.length)));
            return empty(StatusCode::RANGE_NOT_SATISFIABLE, h);
        }
        Decision::Full => {
            // A bitstream in the bucket, with `blobs_presign`: the client fetches it from the
            // bucket directly. Ranges (below) and HEAD are still answered here.
            if !head && let Some(url) = sh.publisher.store().presigned_url(&rec.sha256, &bucket_headers(&rec))? {
                h.insert(header::LOCATION, value(&url));
                return empty(StatusCode::TEMPORARY_REDIRECT, h);
            }
            (StatusCode::OK, 0..rec.length)
        }
        Decision::Partial(r) => {
            let last = r.end - 1;
            h.insert(header::CONTENT_RANGE, value(&format!("bytes {}-{last}/{}", r.start, rec.length)));
            (StatusCode::PARTIAL_CONTENT, r)
        }
    };
    content_headers(&rec, &mut h);
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(range.end - range.start));
    let payload = if head { Payload::Empty } else { payload(sh, &rec, range)? };
    let whole = status == StatusCode::OK && matches!(payload, Payload::Small(_));
    let validators = whole.then(|| (etag.clone(), last_modified));
    Ok(Prepared { status, headers: h, payload, validators })
}

/// The bytes to send: read now when small, streamed otherwise.
fn payload(sh: &Shared, rec: &Record, range: std::ops::Range<u64>) -> Result<Payload, WebError> {
    let len = range.end - range.start;
    let mut reader = sh.publisher.store().get_range(&rec.sha256, range)?;
    if len > SMALL {
        return Ok(Payload::Stream(reader));
    }
    let mut buf = Vec::with_capacity(len as usize);
    std::io::Read::read_to_end(&mut reader, &mut buf).map_err(|e| WebError::Internal(e.to_string()))?;
    Ok(Payload::Small(buf))
}

fn value(s: &str) -> HeaderValue {
    // Only ever called with ASCII built here.
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static(""))
}

fn validator_headers(etag: &str, last_modified: std::time::SystemTime) -> HeaderMap {
    let mut h = HeaderMap::with_capacity(12);
    h.insert(header::ETAG, value(etag));
    h.insert(header::LAST_MODIFIED, value(&httpdate::fmt_http_date(last_modified)));
    // The copy can change at the next harvest: caches must revalidate (cheap, by ETag).
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h
}

/// The media type a bitstream is sent as, and whether it goes as an attachment.
fn sent_as(rec: &Record) -> (&str, bool) {
    let media_type = rec.media_type.as_deref().filter(|m| is_media_type(m) && HeaderValue::from_str(m).is_ok());
    (media_type.unwrap_or("application/octet-stream"), media_type.is_some_and(is_active))
}

fn content_headers(rec: &Record, h: &mut HeaderMap) {
    let (media_type, attachment) = sent_as(rec);
    h.insert(header::CONTENT_TYPE, value(media_type));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(super::LOCKED_CSP));
    if attachment {
        h.insert(header::CONTENT_DISPOSITION, HeaderValue::from_static("attachment"));
    }
}

/// What the bucket is asked to answer a presigned GET with (see the module doc).
fn bucket_headers(rec: &Record) -> ResponseHeaders {
    let (media_type, attachment) = sent_as(rec);
    let disposition = if attachment { "attachment" } else { "inline" };
    ResponseHeaders { content_type: media_type.to_owned(), disposition: disposition.to_owned() }
}

/// `Link: <origin>; rel="via", <capability list>; rel="resourcesync"` (one per set).
fn add_links(sh: &Shared, rec: &Record, h: &mut HeaderMap) {
    let naming = sh.publisher.naming();
    let mut links = Vec::new();
    // Re-serialised by the URL parser, so the header holds only ASCII and no `>`.
    if let Ok(origin) = url::Url::parse(&rec.origin) {
        links.push(format!("<{origin}>; rel=\"via\""));
    }
    for set in sh.publisher.sets_of_source(&rec.source) {
        links.push(format!("<{}>; rel=\"resourcesync\"", naming.capability_list(&set)));
    }
    if let Ok(v) = HeaderValue::from_str(&links.join(", ")) {
        h.insert(header::LINK, v);
    }
}

/// `type/subtype` of RFC 9110 tokens, optionally followed by parameters.
fn is_media_type(m: &str) -> bool {
    let essence = m.split(';').next().unwrap_or("").trim();
    let token = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b));
    essence.split_once('/').is_some_and(|(t, s)| token(t) && token(s))
}

/// Media types a browser may render with active content.
pub(crate) fn is_active(media_type: &str) -> bool {
    let essence = media_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    matches!(
        essence.as_str(),
        "text/html"
            | "application/xhtml+xml"
            | "image/svg+xml"
            | "text/xml"
            | "application/xml"
            | "text/xsl"
            | "application/javascript"
            | "application/x-javascript"
            | "application/ecmascript"
            | "text/javascript"
            | "text/ecmascript"
            | "text/jscript"
            | "application/x-shockwave-flash"
    ) || essence.ends_with("+xml")
        || essence.starts_with("multipart/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn active_types() {
        for t in ["text/html; charset=utf-8", "IMAGE/SVG+XML", "application/rdf+xml", "text/javascript", "text/xml"] {
            assert!(is_active(t), "{t}");
        }
        for t in ["image/png", "application/pdf", "text/plain", "application/json", "application/octet-stream"] {
            assert!(!is_active(t), "{t}");
        }
    }

    #[test]
    fn media_type_syntax() {
        assert!(is_media_type("text/html; charset=utf-8"));
        assert!(is_media_type("application/vnd.ms-excel"));
        assert!(!is_media_type("html"));
        assert!(!is_media_type("text/ html"));
        assert!(!is_media_type("text/html\r\nX: y"));
        assert!(!is_media_type(""));
    }
}
