//! Resource Dumps and Change Dumps (spec §11, §13): the dump documents of a set, and their
//! packages and manifests as files, with byte ranges and conditional requests.
//!
//! The publisher builds a dump on the blocking pool when it is due (see
//! [`crate::publish::ResourceDump`]); a request for the document waits for the build. A
//! package never changes once written — a new state gets a new name — so packages and
//! manifests carry their sha-256 as a strong `ETag` and a year of `immutable` caching, and a
//! download can resume with `Range`/`If-Range`. A package is streamed from its open file, so
//! a newer dump deleting it mid-download does not cut the transfer.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::conditional::{Decision, Validators, decide, system_time};
use super::error::WebError;
use super::{WebState, body};
use crate::publish::DumpFile;

const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// `sets/{set}/resourcedump.xml`.
pub(crate) async fn document(st: &WebState, set: String) -> Result<Response, WebError> {
    let p = st.shared.publisher.clone();
    let bytes = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, WebError> {
        let dump = p.resource_dump(&set)?;
        Ok(p.resource_dump_document(&dump))
    })
    .await??;
    let mut r = bytes.into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/xml"));
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(r)
}

/// `sets/{set}/changedump.xml`.
pub(crate) async fn change_dump(st: &WebState, set: String) -> Result<Response, WebError> {
    let p = st.shared.publisher.clone();
    let bytes = tokio::task::spawn_blocking(move || p.change_dump(&set)).await??;
    let mut r = bytes.into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/xml"));
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(r)
}

/// A Resource Dump package (`manifest = false`) or its manifest, by the dump's `seq` and
/// its number `n`.
pub(crate) async fn file(
    st: &WebState,
    set: String,
    (seq, n): (u64, u64),
    manifest: bool,
    method: &Method,
    req: &HeaderMap,
) -> Result<Response, WebError> {
    let p = st.shared.publisher.clone();
    let missing = format!("no package {n} of a Resource Dump at {seq} of set {set:?} is kept");
    let found = tokio::task::spawn_blocking(move || p.resource_dump_file(&set, seq, n, manifest)).await??;
    send(st, found.ok_or(WebError::NotFound(missing))?, method, req).await
}

/// A Change Dump package (or its manifest): Change List `n`'s, closed (`last = None`) or cut
/// through event `last`.
pub(crate) async fn change_file(
    st: &WebState,
    set: String,
    (n, last): (u64, Option<u64>),
    manifest: bool,
    method: &Method,
    req: &HeaderMap,
) -> Result<Response, WebError> {
    let p = st.shared.publisher.clone();
    let missing = format!("no Change Dump package {n} of set {set:?} is kept at this name");
    let found = tokio::task::spawn_blocking(move || p.change_dump_file(&set, n, last, manifest)).await??;
    send(st, found.ok_or(WebError::NotFound(missing))?, method, req).await
}

/// Answers a request for a package or manifest file.
async fn send(st: &WebState, f: DumpFile, method: &Method, req: &HeaderMap) -> Result<Response, WebError> {
    let mut h = HeaderMap::with_capacity(6);
    h.insert(header::ETAG, value(&f.etag));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(IMMUTABLE));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(f.media_type));
    // Never modified: an old date keeps If-Modified-Since from ever asking for the body again.
    let v = Validators { etag: &f.etag, last_modified: system_time(0), length: f.length };
    let range = match decide(req, v, *method != Method::HEAD) {
        Decision::NotModified => return Ok(empty(StatusCode::NOT_MODIFIED, h)),
        Decision::PreconditionFailed => return Ok(empty(StatusCode::PRECONDITION_FAILED, h)),
        Decision::Unsatisfiable => {
            h.insert(header::CONTENT_RANGE, value(&format!("bytes */{}", f.length)));
            return Ok(empty(StatusCode::RANGE_NOT_SATISFIABLE, h));
        }
        Decision::Full => None,
        Decision::Partial(r) => {
            h.insert(header::CONTENT_RANGE, value(&format!("bytes {}-{}/{}", r.start, r.end - 1, f.length)));
            Some(r)
        }
    };
    let (status, start, len) = match &range {
        Some(r) => (StatusCode::PARTIAL_CONTENT, r.start, r.end - r.start),
        None => (StatusCode::OK, 0, f.length),
    };
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    if *method == Method::HEAD {
        return Ok(empty(status, h));
    }
    let body = stream(st, f, start, len).await?;
    let mut r = (status, body).into_response();
    *r.headers_mut() = h;
    Ok(r)
}

/// `len` bytes of the file from `start`, streamed from a file opened now (so it stays
/// readable if a newer dump deletes it).
async fn stream(st: &WebState, f: DumpFile, start: u64, len: u64) -> Result<axum::body::Body, WebError> {
    let path = f.path.clone();
    let mut file = tokio::task::spawn_blocking(move || -> std::io::Result<File> {
        let mut file = File::open(&path)?;
        file.seek(SeekFrom::Start(start))?;
        Ok(file)
    })
    .await?
    .map_err(|e| WebError::NotFound(format!("{}: {e}", f.path.display())))?;
    let what = f.path.display().to_string();
    Ok(body::blocking_body(st.shared.stream_slots(), what, move |w| {
        let copied = std::io::copy(&mut (&mut file).take(len), w)?;
        if copied < len {
            // A file shorter than its length said: fail the transfer rather than end it short.
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "package file is shorter than listed"));
        }
        Ok::<(), std::io::Error>(())
    })
    .await)
}

fn empty(status: StatusCode, headers: HeaderMap) -> Response {
    let mut r = status.into_response();
    *r.headers_mut() = headers;
    r
}

fn value(s: &str) -> HeaderValue {
    // Only ever called with ASCII built here.
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static(""))
}
