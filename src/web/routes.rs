//! The route table: one route per kind of document under the base URL's path, and the thin
//! handlers that turn axum's extractors into calls on the modules that write the answers.
//!
//! A new document or endpoint is one more `.route(…)` here. Routes are registered with the
//! base path as a literal prefix rather than through `Router::nest`: axum 0.8 refuses to nest
//! at `/`, and nesting at `/agg` would serve an inner `/` at `/agg` only, while the dashboard
//! belongs at `/agg/` (its links are relative, so they need the slash).

use axum::Router;
use axum::extract::{FromRequestParts, Path, RawQuery, State};
use axum::handler::Handler;
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{Redirect, Response};
use axum::routing::{MethodRouter, get, post};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::error::WebError;
use super::{WebState, bitstream, dashboard, documents, hub, oai, pages, provenance, source_page};

/// Where `/robots.txt` lives whatever the base path: crawlers only look at the host's root.
const ROBOTS: &str = "/robots.txt";

/// Every route of the server under `base` (a path ending in `/`), and the 404 for the rest.
pub(super) fn table(base: &str) -> Router<WebState> {
    let at = |rel: &str| format!("{base}{rel}");
    let routes = Router::new()
        .route(ROBOTS, read_only(robots))
        .route(base, read_only(index))
        .route(&at("dashboard/{file}"), read_only(asset))
        .route(&at("api/status"), read_only(api_status))
        .route(&at("api/changes"), read_only(api_changes))
        .route(&at("api/failures"), read_only(api_failures))
        .route(&at("api/sources/{id}"), read_only(api_source))
        .route(&at("metrics"), read_only(metrics_text))
        .route(&at(".well-known/resourcesync"), read_only(source_description))
        .route(&at("provenance"), read_only(provenance_answer))
        .route(&at("r/{*resource}"), read_only(bitstream_at))
        .route(&at("hub"), post(hub_request).fallback(hub_method))
        .route(&at("oai"), get(oai::get).post(oai::post).fallback(oai_method))
        .route(&at("sets/{set}/"), read_only(set_document))
        .route(&at("sets/{set}/{doc}"), read_only(set_document))
        .fallback(not_found);
    match bare(base) {
        Some(path) => routes.route(path, read_only(to_base)),
        None => routes,
    }
}

/// The base path without its slash, when that is a path of its own: asked for by people
/// typing the address, and redirected to the dashboard rather than answered 404.
pub(super) fn bare(base: &str) -> Option<&str> {
    base.strip_suffix('/').filter(|p| !p.is_empty() && *p != ROBOTS)
}

/// A route for GET (which also answers HEAD). Any other method gets the server's own 405,
/// with the text body of every error and `Allow: GET, HEAD`; axum adds an `Allow` of its own
/// only to a 405 that has none.
fn read_only<H, T>(handler: H) -> MethodRouter<WebState>
where
    H: Handler<T, WebState>,
    T: 'static,
{
    get(handler).fallback(method_not_allowed)
}

/// OAI-PMH takes GET and POST (§3.1.1).
async fn oai_method() -> Response {
    use axum::response::IntoResponse;
    let mut r = WebError::MethodNotAllowed.into_response();
    r.headers_mut().insert(axum::http::header::ALLOW, axum::http::HeaderValue::from_static("GET, HEAD, POST"));
    r
}

async fn method_not_allowed() -> WebError {
    WebError::MethodNotAllowed
}

async fn not_found(uri: Uri) -> WebError {
    nothing_at(&uri)
}

fn nothing_at(uri: &Uri) -> WebError {
    WebError::NotFound(format!("nothing is served at {}", uri.path()))
}

/// [`Path`], except that parameters which do not decode (percent-escapes that are not UTF-8)
/// make a 404 like any other path nothing is served at, rather than axum's 400.
struct Params<T>(T);

impl<T, S> FromRequestParts<S> for Params<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = WebError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, WebError> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(params)) => Ok(Params(params)),
            Err(_) => Err(nothing_at(&parts.uri)),
        }
    }
}

/// `sets/{set}/{doc}`; `doc` is empty for the set's page at `sets/{set}/`.
#[derive(Debug, Deserialize)]
struct SetDocPath {
    set: String,
    #[serde(default)]
    doc: String,
}

async fn set_document(
    State(st): State<WebState>,
    Params(SetDocPath { set, doc }): Params<SetDocPath>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Response, WebError> {
    // `naming` alone knows which file names are documents, so it parses them here too.
    let doc = st.shared.publisher.naming().parse_set_file(&doc).ok_or_else(|| nothing_at(&uri))?;
    documents::set_document(&st, set, doc, &method, &headers).await
}

async fn bitstream_at(
    State(st): State<WebState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Response, WebError> {
    bitstream::serve(&st, resource_uri(&st, &uri), &method, headers).await
}

/// Tributary's URI for the requested resource, spelled as the store keys it. Built from the
/// raw path and query rather than the decoded `{*resource}`: upstream URIs inside it keep
/// their percent-encoding, and decoding would name another resource.
fn resource_uri(st: &WebState, uri: &Uri) -> String {
    let rel = uri.path().strip_prefix(st.shared.base_path.as_str()).unwrap_or_default();
    let mut full = format!("{}{rel}", st.shared.publisher.naming().base());
    if let Some(q) = uri.query() {
        full.push('?');
        full.push_str(q);
    }
    full
}

async fn index(State(st): State<WebState>) -> Result<Response, WebError> {
    dashboard::index(&st).await
}

async fn asset(Params(file): Params<String>, uri: Uri) -> Result<Response, WebError> {
    dashboard::asset(&file).ok_or_else(|| nothing_at(&uri))
}

async fn to_base(State(st): State<WebState>) -> Redirect {
    Redirect::permanent(&st.shared.base_path)
}

async fn api_status(State(st): State<WebState>, RawQuery(q): RawQuery) -> Result<Response, WebError> {
    dashboard::api_status(&st, q.as_deref()).await
}

async fn api_source(State(st): State<WebState>, Params(id): Params<String>) -> Result<Response, WebError> {
    source_page::api_source(&st, id).await
}

async fn api_changes(State(st): State<WebState>, RawQuery(q): RawQuery) -> Result<Response, WebError> {
    dashboard::api_changes(&st, q.as_deref()).await
}

async fn api_failures(State(st): State<WebState>, RawQuery(q): RawQuery) -> Result<Response, WebError> {
    dashboard::api_failures(&st, q.as_deref()).await
}

async fn metrics_text(State(st): State<WebState>) -> Result<Response, WebError> {
    super::metrics::render(&st).await
}

async fn source_description(State(st): State<WebState>) -> Result<Response, WebError> {
    documents::source_description(&st).await
}

async fn provenance_answer(
    State(st): State<WebState>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
) -> Result<Response, WebError> {
    provenance::provenance(&st, q.as_deref(), &headers).await
}

/// Hub requests are small forms (WebSub): more than this is refused before it is read whole.
const HUB_MAX_BODY: usize = 64 * 1024;

async fn hub_request(State(st): State<WebState>, req: axum::extract::Request) -> Response {
    let (parts, body) = req.into_parts();
    let client = super::server::peer(&parts.extensions).map(|p| p.ip());
    match axum::body::to_bytes(body, HUB_MAX_BODY).await {
        Ok(body) => hub::request(&st, &parts.headers, &body, client),
        Err(_) => hub::too_large(),
    }
}

async fn hub_method() -> Response {
    hub::post_only()
}

async fn robots(State(st): State<WebState>) -> Response {
    pages::robots(&st)
}

#[cfg(test)]
mod tests {
    use axum::body::{Body, to_bytes};
    use axum::http::{Request, StatusCode, header};
    use tower::ServiceExt as _;

    use super::super::{WebState, router};
    use crate::model::HashList;
    use crate::naming::Naming;
    use crate::publish::{Limits, LinkPolicies, SetConfig};
    use crate::store::{Batch, Expected, Listing, NewRecord, Store, StoreOptions, Via};

    /// An upstream URI whose path and query carry percent-escapes, `%2F` among them: its
    /// Tributary URI is found only if the router keeps them as they came.
    const ENCODED: &str = "https://museum-a.test:8443/a%20b/c%2Fd.txt?x=1&y=%2F";

    struct Server {
        _dir: tempfile::TempDir,
        app: axum::Router,
        naming: Naming,
        store: Store,
    }

    /// A server at `base` with sets `src-a` and `all`, holding one resource at [`ENCODED`].
    fn server(base: &str) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_with(&dir.path().join("store"), &StoreOptions::small()).unwrap();
        let naming = Naming::new(&url::Url::parse(base).unwrap());
        let info = store.put(&b"encoded"[..], &Expected::none()).unwrap();
        let mut batch = Batch::new();
        batch.upsert(
            &["src-a", "all"],
            NewRecord {
                uri: naming.resource("src-a", ENCODED).unwrap(),
                source: "src-a".into(),
                upstream: ENCODED.into(),
                sha256: info.id,
                listing: Listing {
                    origin: ENCODED.into(),
                    declared: HashList::default(),
                    length: None,
                    media_type: Some("text/plain".into()),
                    lastmod: None,
                    via: Via::default(),
                    links: Vec::new(),
                },
            },
        );
        store.apply(&mut batch).unwrap();
        let sets = vec![SetConfig::source("src-a"), SetConfig::new("all", ["src-a"])];
        let state =
            WebState::new(store.clone(), naming.clone(), sets, LinkPolicies::default(), Limits::default()).unwrap();
        Server { _dir: dir, app: router(state), naming, store }
    }

    struct Answer {
        status: StatusCode,
        headers: axum::http::HeaderMap,
        body: String,
    }

    async fn send(s: &Server, method: &str, path: &str) -> Answer {
        let req = Request::builder().method(method).uri(path).body(Body::empty()).unwrap();
        let resp = s.app.clone().oneshot(req).await.unwrap();
        let (parts, body) = resp.into_parts();
        let body = String::from_utf8_lossy(&to_bytes(body, 1 << 20).await.unwrap()).into_owned();
        Answer { status: parts.status, headers: parts.headers, body }
    }

    async fn get(s: &Server, path: &str) -> Answer {
        send(s, "GET", path).await
    }

    /// The path (and query) of one of the server's URIs.
    fn local(uri: &str) -> String {
        let u = url::Url::parse(uri).unwrap();
        u.query().map_or_else(|| u.path().to_owned(), |q| format!("{}?{q}", u.path()))
    }

    #[tokio::test]
    async fn other_methods_are_405_with_allow_and_nosniff() {
        let s = server("http://127.0.0.1:1/");
        let resource = local(&s.naming.resource("src-a", ENCODED).unwrap());
        let cases = [
            ("POST", s.naming.capability_list("src-a")),
            ("POST", s.naming.source_description()),
            ("PUT", s.naming.set_page("all")),
            ("DELETE", format!("http://h{resource}")),
            ("OPTIONS", "http://h/robots.txt".into()),
            ("POST", "http://h/api/status".into()),
        ];
        for (method, uri) in cases {
            let a = send(&s, method, &local(&uri)).await;
            assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED, "{method} {uri}");
            assert_eq!(a.headers[header::ALLOW], "GET, HEAD", "{method} {uri}");
            assert_eq!(a.headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{method} {uri}");
            assert_eq!(a.body, "method not allowed; use GET or HEAD\n");
        }
    }

    #[tokio::test]
    async fn unknown_paths_are_404_with_nosniff_whatever_the_method() {
        let s = server("http://127.0.0.1:1/");
        for (method, path) in [
            ("GET", "/elsewhere"),
            ("POST", "/elsewhere"),
            ("GET", "/sets/src-a"),
            ("GET", "/sets/src-a/deeper/capabilitylist.xml"),
            ("GET", "/api/other"),
            ("GET", "/dashboard/other.js"),
            ("GET", "/r/"),
        ] {
            let a = send(&s, method, path).await;
            assert_eq!(a.status, StatusCode::NOT_FOUND, "{method} {path}");
            assert_eq!(a.headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{method} {path}");
            assert_eq!(a.headers[header::CONTENT_TYPE], "text/plain; charset=utf-8");
            assert_eq!(a.body, format!("nothing is served at {path}\n"));
        }
    }

    #[tokio::test]
    async fn a_base_path_prefixes_every_route_but_robots_txt() {
        let s = server("http://127.0.0.1:1/agg/");
        let dashboard = get(&s, "/agg/").await;
        assert_eq!(dashboard.status, StatusCode::OK);
        assert!(dashboard.body.contains("status-data"), "{}", dashboard.body);
        for path in ["/agg/dashboard/app.js", "/agg/api/status", "/agg/.well-known/resourcesync", "/agg/metrics"] {
            assert_eq!(get(&s, path).await.status, StatusCode::OK, "{path}");
        }
        let changes = get(&s, "/agg/api/changes?limit=1").await;
        assert!(changes.body.starts_with("{\"changes\":["), "{}", changes.body);
        let robots = get(&s, "/robots.txt").await;
        assert_eq!(robots.status, StatusCode::OK);
        assert!(robots.body.contains("Disallow: /agg/provenance\n"), "{}", robots.body);
        assert!(robots.body.contains("Sitemap: http://127.0.0.1:1/agg/sets/all/resourcelist.xml"), "{}", robots.body);
        for path in ["/agg/robots.txt", "/", "/.well-known/resourcesync", "/sets/all/", "/aggregate/"] {
            assert_eq!(get(&s, path).await.status, StatusCode::NOT_FOUND, "{path}");
        }
    }

    #[tokio::test]
    async fn the_base_path_without_its_slash_redirects_to_the_dashboard() {
        let s = server("http://127.0.0.1:1/agg/");
        for method in ["GET", "HEAD"] {
            let a = send(&s, method, "/agg").await;
            assert_eq!(a.status, StatusCode::PERMANENT_REDIRECT, "{method}");
            assert_eq!(a.headers[header::LOCATION], "/agg/");
            assert_eq!(a.headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        }
        assert_eq!(send(&s, "POST", "/agg").await.status, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(get(&s, "/agg?x=1").await.headers[header::LOCATION], "/agg/", "the query is not reflected");
    }

    #[tokio::test]
    async fn set_and_document_names_are_extracted_from_the_path() {
        let s = server("http://127.0.0.1:1/agg/");
        let page = get(&s, "/agg/sets/src-a/").await;
        assert_eq!(
            (page.status, page.headers[header::CONTENT_TYPE].to_str().unwrap()),
            (StatusCode::OK, "text/html; charset=utf-8")
        );
        assert!(page.body.contains("Set src-a"), "{}", page.body);
        let cap = get(&s, "/agg/sets/all/capabilitylist.xml").await;
        assert_eq!(cap.status, StatusCode::OK);
        assert!(cap.body.contains("http://127.0.0.1:1/agg/sets/all/resourcelist.xml"), "{}", cap.body);
        // A part number reaches the publisher: the set's one short list has no part 1.
        let part = get(&s, "/agg/sets/all/resourcelist-1.xml").await;
        assert_eq!(part.status, StatusCode::NOT_FOUND);
        assert!(part.body.contains("no part 1 of the Resource List of set \"all\""), "{}", part.body);
        for (set, path) in [("nope", "/agg/sets/nope/capabilitylist.xml"), ("", "/agg/sets//changelist.xml")] {
            let a = get(&s, path).await;
            assert_eq!((a.status, a.body), (StatusCode::NOT_FOUND, format!("no set {set:?}\n")), "{path}");
        }
        for path in [
            "/agg/sets/all/other.xml",
            "/agg/sets/all/changelist-0.xml",
            "/agg/sets/all/changelist-x.xml",
            "/agg/sets/all/resourcelist-.xml",
            "/agg/sets/%FF/capabilitylist.xml",
            "/agg/sets/all/%FF.xml",
        ] {
            let a = get(&s, path).await;
            assert_eq!(a.status, StatusCode::NOT_FOUND, "{path}");
            assert_eq!(a.body, format!("nothing is served at {path}\n"));
            assert_eq!(a.headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        }
    }

    #[tokio::test]
    async fn bitstream_uris_keep_their_escapes_and_query() {
        let s = server("http://127.0.0.1:1/agg/");
        let path = local(&s.naming.resource("src-a", ENCODED).unwrap());
        assert_eq!(path, "/agg/r/src-a/https/museum-a.test:8443/a%20b/c%2Fd.txt?x=1&y=%2F");
        let a = get(&s, &path).await;
        assert_eq!((a.status, a.body.as_str()), (StatusCode::OK, "encoded"));
        let head = send(&s, "HEAD", &path).await;
        assert_eq!((head.status, head.body.as_str()), (StatusCode::OK, ""));
        for other in [
            path.replace("c%2Fd", "c/d"),
            path.replace("a%20b", "a%2520b"),
            path.replace("y=%2F", "y=/"),
            path.replace("?x=1&y=%2F", ""),
        ] {
            assert_eq!(get(&s, &other).await.status, StatusCode::NOT_FOUND, "{other}");
        }
    }

    #[tokio::test]
    async fn requests_are_counted_under_their_route_name() {
        let s = server("http://127.0.0.1:1/counted/");
        for (method, path) in
            [("POST", "/counted/sets/all/changelist.xml"), ("GET", "/counted/nowhere"), ("GET", "/counted")]
        {
            send(&s, method, path).await;
        }
        let m = get(&s, "/counted/metrics").await.body;
        let counted = |route: &str, method: &str, status: &str| {
            m.lines().any(|l| {
                l.starts_with("tributary_http_requests_total{")
                    && [format!("route=\"{route}\""), format!("method=\"{method}\""), format!("status=\"{status}\"")]
                        .iter()
                        .all(|label| l.contains(label.as_str()))
            })
        };
        assert!(counted("set_document", "other", "405"), "{m}");
        assert!(counted("other", "GET", "404"), "{m}");
        assert!(counted("dashboard", "GET", "308"), "{m}");
    }

    /// A full disk makes the store read-only: the dashboard's status and `/metrics` say so,
    /// and the documents are still served.
    #[tokio::test]
    async fn a_read_only_store_says_so_and_keeps_serving() {
        let s = server("http://127.0.0.1:1/ro/");
        assert!(get(&s, "/ro/metrics").await.body.contains("tributary_store_read_only 0"));
        let tmp = s._dir.path().join("store").join("tmp").join(format!("{}-0", std::process::id()));
        std::os::unix::fs::symlink("/dev/full", &tmp).unwrap();
        let state = get(&s, "/ro/api/status").await.body;
        assert!(state.contains("\"store_read_only\":null"), "{state}");
        // A put of the server's store (as the harvester's would be) meets the full disk.
        s.store.put(&vec![7u8; 20_000][..], &Expected::none()).unwrap_err();
        let state = get(&s, "/ro/api/status").await.body;
        assert!(state.contains("\"store_read_only\":\"") && state.contains("No space left"), "{state}");
        assert!(get(&s, "/ro/metrics").await.body.contains("tributary_store_read_only 1"));
        assert_eq!(get(&s, "/ro/sets/all/resourcelist.xml").await.status, StatusCode::OK);
    }
}
