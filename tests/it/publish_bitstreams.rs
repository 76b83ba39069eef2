//! Bitstreams on Tributary's URIs: validators, conditional requests (304/412), ranges
//! (206/416), deletions (410), unknown URIs (404), provenance and discovery `Link` headers, and
//! the headers that keep untrusted third-party content from running in a browser.

use crate::support::publish::{Res, bind, delete, start, upsert};
use crate::support::store::temp_store;
use reqwest::StatusCode;
use reqwest::header::{self, HeaderMap};
use tributary::publish::{Limits, LinkPolicies, SetConfig};

struct Fixture {
    _dir: tempfile::TempDir,
    s: crate::support::publish::Running,
    text: String,
    html: String,
    svg: String,
    big: String,
    query: String,
    gone: String,
    big_bytes: Vec<u8>,
}

async fn fixture() -> Fixture {
    let (dir, store) = temp_store();
    let (listener, naming) = bind().await;
    let mut html = Res::new("src-a", "http://museum-a.test/page.html", "<html><script>alert(1)</script></html>");
    html.media_type = Some("text/html; charset=utf-8".into());
    let mut svg = Res::new("src-a", "http://museum-a.test/logo.svg", "<svg xmlns='http://www.w3.org/2000/svg'/>");
    svg.media_type = Some("image/svg+xml".into());
    // Larger than the store's inline limit and the server's one-piece limit: a streamed file.
    let big_bytes: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut big = Res::new("src-a", "http://museum-a.test/big.bin", big_bytes.clone());
    big.media_type = None;
    let text = Res::new("src-a", "http://museum-a.test/a.txt", "0123456789abcdefghij");
    let query = Res::new("src-a", "http://museum-a.test/get?id=7&f=x", "by query");
    let gone = Res::new("src-a", "http://museum-a.test/gone.txt", "soon gone");
    let uris = upsert(&store, &naming, &["src-a", "all"], &[text, html, svg, big, query, gone]);
    delete(&store, &["src-a", "all"], &uris[5..6]);
    let sets = vec![SetConfig::source("src-a"), SetConfig::new("all", ["src-a"])];
    let s = start(listener, naming, &store, sets, LinkPolicies::default(), Limits::default());
    let mut u = uris.into_iter();
    let mut next = || u.next().unwrap();
    Fixture {
        _dir: dir,
        text: next(),
        html: next(),
        svg: next(),
        big: next(),
        query: next(),
        gone: next(),
        s,
        big_bytes,
    }
}

async fn get(f: &Fixture, url: &str, headers: &[(header::HeaderName, &str)]) -> (StatusCode, HeaderMap, Vec<u8>) {
    let mut req = f.s.client.get(url);
    for (k, v) in headers {
        req = req.header(k.clone(), *v);
    }
    let resp = req.send().await.unwrap();
    (resp.status(), resp.headers().clone(), resp.bytes().await.unwrap().to_vec())
}

#[tokio::test]
async fn get_and_head_carry_validators_and_links() {
    let f = fixture().await;
    let (status, h, body) = get(&f, &f.text, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, b"0123456789abcdefghij");
    assert_eq!(h[header::CONTENT_LENGTH], "20");
    assert_eq!(h[header::CONTENT_TYPE], "text/plain");
    let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&body));
    assert_eq!(h[header::ETAG].to_str().unwrap(), format!("\"{sha}\""));
    assert!(h.contains_key(header::LAST_MODIFIED));
    assert_eq!(h[header::ACCEPT_RANGES], "bytes");
    assert_eq!(h["x-content-type-options"], "nosniff");
    let link = h[header::LINK].to_str().unwrap();
    let n = &f.s.naming;
    assert!(link.contains("<http://museum-a.test/a.txt>; rel=\"via\""), "{link}");
    assert!(link.contains(&format!("<{}>; rel=\"resourcesync\"", n.capability_list("src-a"))), "{link}");
    assert!(link.contains(&format!("<{}>; rel=\"resourcesync\"", n.capability_list("all"))), "{link}");
    assert!(!h.contains_key(header::CONTENT_DISPOSITION), "plain text is passive");

    let head = f.s.client.head(&f.text).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::OK);
    assert_eq!(head.headers()[header::CONTENT_LENGTH], "20");
    assert_eq!(head.headers()[header::ETAG], h[header::ETAG]);
    assert!(head.bytes().await.unwrap().is_empty());

    let (status, _, body) = get(&f, &f.query, &[]).await;
    assert_eq!((status, body.as_slice()), (StatusCode::OK, &b"by query"[..]), "query strings are part of the URI");
}

#[tokio::test]
async fn conditional_requests() {
    let f = fixture().await;
    let (_, h, _) = get(&f, &f.text, &[]).await;
    let etag = h[header::ETAG].to_str().unwrap().to_owned();
    let lm = h[header::LAST_MODIFIED].to_str().unwrap().to_owned();
    let (status, h304, body) = get(&f, &f.text, &[(header::IF_NONE_MATCH, &etag)]).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    assert!(body.is_empty());
    assert_eq!(h304[header::ETAG].to_str().unwrap(), etag);
    assert_eq!(get(&f, &f.text, &[(header::IF_MODIFIED_SINCE, &lm)]).await.0, StatusCode::NOT_MODIFIED);
    assert_eq!(get(&f, &f.text, &[(header::IF_NONE_MATCH, "\"other\"")]).await.0, StatusCode::OK);
    let old = "Thu, 01 Jan 2004 00:00:00 GMT";
    assert_eq!(get(&f, &f.text, &[(header::IF_MODIFIED_SINCE, old)]).await.0, StatusCode::OK);
    assert_eq!(get(&f, &f.text, &[(header::IF_MATCH, "\"other\"")]).await.0, StatusCode::PRECONDITION_FAILED);
    assert_eq!(get(&f, &f.text, &[(header::IF_MATCH, &etag)]).await.0, StatusCode::OK);
}

#[tokio::test]
async fn byte_ranges_small_and_streamed() {
    let f = fixture().await;
    let (status, h, body) = get(&f, &f.text, &[(header::RANGE, "bytes=2-5")]).await;
    assert_eq!(status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(body, b"2345");
    assert_eq!(h[header::CONTENT_RANGE], "bytes 2-5/20");
    assert_eq!(h[header::CONTENT_LENGTH], "4");
    assert_eq!(get(&f, &f.text, &[(header::RANGE, "bytes=-3")]).await.2, b"hij");
    let (status, h, _) = get(&f, &f.text, &[(header::RANGE, "bytes=20-")]).await;
    assert_eq!(status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(h[header::CONTENT_RANGE], "bytes */20");
    let (status, _, body) = get(&f, &f.text, &[(header::RANGE, "bytes=0-1"), (header::IF_RANGE, "\"stale\"")]).await;
    assert_eq!((status, body.len()), (StatusCode::OK, 20), "a stale If-Range gets the whole representation");

    let (status, h, body) = get(&f, &f.big, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(h[header::CONTENT_LENGTH], "300000");
    assert_eq!(h[header::CONTENT_TYPE], "application/octet-stream", "no media type: download, never sniff");
    assert!(body == f.big_bytes, "streamed body differs");
    let (status, h, body) = get(&f, &f.big, &[(header::RANGE, "bytes=100000-299999")]).await;
    assert_eq!(status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(h[header::CONTENT_RANGE], "bytes 100000-299999/300000");
    assert!(body[..] == f.big_bytes[100_000..]);
}

#[tokio::test]
async fn deleted_is_gone_and_unknown_is_not_found() {
    let f = fixture().await;
    let (status, h, body) = get(&f, &f.gone, &[]).await;
    assert_eq!(status, StatusCode::GONE);
    assert!(String::from_utf8_lossy(&body).contains("deleted"));
    assert_eq!(h["x-content-type-options"], "nosniff");
    let unknown = format!("{}r/src-a/http/museum-a.test/never", f.s.naming.base());
    assert_eq!(get(&f, &unknown, &[]).await.0, StatusCode::NOT_FOUND);
    let resp = f.s.client.delete(&f.text).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(resp.headers()[header::ALLOW], "GET, HEAD");
}

#[tokio::test]
async fn active_content_is_sandboxed_and_downloaded() {
    let f = fixture().await;
    for (url, ty) in [(&f.html, "text/html; charset=utf-8"), (&f.svg, "image/svg+xml")] {
        let (status, h, _) = get(&f, url, &[]).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(h[header::CONTENT_TYPE], ty);
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert_eq!(h[header::CONTENT_SECURITY_POLICY], "default-src 'none'; sandbox");
        assert_eq!(h[header::CONTENT_DISPOSITION], "attachment");
        let head = f.s.client.head(url).send().await.unwrap();
        assert_eq!(head.headers()[header::CONTENT_DISPOSITION], "attachment", "HEAD says the same");
    }
    let (_, h, _) = get(&f, &f.text, &[]).await;
    assert_eq!(h[header::CONTENT_SECURITY_POLICY], "default-src 'none'; sandbox", "every bitstream is sandboxed");
}

/// A small bitstream is answered from memory after its first request (`web::hot`), and never
/// stale: an update and a deletion are seen by the very next request, validators included.
#[tokio::test]
async fn a_kept_bitstream_follows_updates_and_deletions() {
    let f = fixture().await;
    let (_, first, body) = get(&f, &f.text, &[]).await;
    let (status, kept, again) = get(&f, &f.text, &[]).await;
    assert_eq!((status, &again), (StatusCode::OK, &body));
    for name in [header::ETAG, header::LAST_MODIFIED, header::LINK, header::CONTENT_TYPE, header::CONTENT_LENGTH] {
        assert_eq!(kept[&name], first[&name], "{name}");
    }
    assert_eq!(kept["x-content-type-options"], "nosniff");
    let etag = first[header::ETAG].to_str().unwrap().to_owned();
    assert_eq!(get(&f, &f.text, &[(header::IF_NONE_MATCH, &etag)]).await.0, StatusCode::NOT_MODIFIED);
    assert_eq!(get(&f, &f.text, &[(header::RANGE, "bytes=0-3")]).await.2, b"0123");

    let store = f.s.state.publisher().store().clone();
    let naming = f.s.naming.clone();
    upsert(&store, &naming, &["src-a", "all"], &[Res::new("src-a", "http://museum-a.test/a.txt", "new text")]);
    let (status, h, body) = get(&f, &f.text, &[(header::IF_NONE_MATCH, &etag)]).await;
    assert_eq!((status, body.as_slice()), (StatusCode::OK, &b"new text"[..]));
    assert_ne!(h[header::ETAG], first[header::ETAG]);
    assert_eq!(get(&f, &f.text, &[]).await.2, b"new text", "kept again, the new version");
    delete(&store, &["src-a", "all"], std::slice::from_ref(&f.text));
    assert_eq!(get(&f, &f.text, &[]).await.0, StatusCode::GONE);
}
