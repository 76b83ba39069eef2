//! The web server: Tributary as a ResourceSync Source over HTTP (axum).
//!
//! # Architecture
//! One fallback handler maps a request path under the configured base URL to what
//! [`crate::naming`] says lives there: the Source Description, set documents
//! (`documents`), bitstreams (`bitstream`), the provenance endpoint (`provenance`) and the
//! pages for people (`pages`); the operator's dashboard and its JSON (`dashboard`) and
//! `/metrics` (`metrics`, whose middleware also times every request); `/robots.txt` is
//! answered at the host root. Documents come
//! from [`crate::publish`], always on the blocking pool, because every store call blocks.
//!
//! Depends on `publish`, `store`, `model`, `naming` and the application-level
//! [`crate::provenance`] (the live origin check). Must not depend on the harvester: the daemon
//! runs both side by side over one store.
//!
//! Every response carries `X-Content-Type-Options: nosniff`; only GET and HEAD are served.

mod bitstream;
mod body;
mod cache;
mod conditional;
mod dashboard;
mod documents;
mod error;
mod metrics;
mod pages;
mod provenance;

use std::future::Future;
use std::io;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, Uri, header};
use axum::response::{IntoResponse, Response};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use self::error::WebError;
use crate::config::Settings;
use crate::fetch::{Fetcher, FetcherOptions};
use crate::naming::Naming;
use crate::provenance::OriginChecker;
use crate::publish::{Limits, LinkPolicies, PublishError, Publisher, SetConfig};
use crate::store::Store;

/// Bytes of closed Change Lists kept in memory.
const CLOSED_CACHE_BYTES: usize = 64 * 1024 * 1024;
/// Live origin checks running at once.
const VERIFY_SLOTS: usize = 2;

/// Everything the handlers share. Cheap to clone.
#[derive(Clone, Debug)]
pub struct WebState {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    publisher: Arc<Publisher>,
    /// The path of the base URL, ending in `/`.
    base_path: String,
    closed: cache::ClosedLists,
    checker: OriginChecker,
    verify_slots: Semaphore,
    /// Streaming responses producing at once (see `body`).
    streams: Arc<Semaphore>,
}

impl WebState {
    /// Builds the state from plain values: the store, the URI scheme, every set to publish
    /// (one per source via [`SetConfig::source`], plus merged sets), the inherited-link
    /// policies and the limits. Origins are live-checked with a fetcher of its own and default
    /// settings (which refuse private addresses); see [`WebState::with_origin_checker`].
    ///
    /// # Errors
    /// [`PublishError::Config`] for an unusable set list or limits, or when the origin-check
    /// client cannot be built.
    pub fn new(
        store: Store,
        naming: Naming,
        sets: Vec<SetConfig>,
        policies: LinkPolicies,
        limits: Limits,
    ) -> Result<WebState, PublishError> {
        let base_path = url::Url::parse(naming.base()).map(|u| u.path().to_owned()).unwrap_or_else(|_| "/".into());
        let publisher = Publisher::new(store, naming, sets, policies, limits)?;
        let agent = concat!("Tributary/", env!("CARGO_PKG_VERSION"), " (provenance check)");
        let fetcher = Fetcher::new(FetcherOptions::new(agent)).map_err(|e| PublishError::Config(e.to_string()))?;
        let checker = OriginChecker::new(fetcher, Settings::default());
        Ok(WebState::build(Arc::new(publisher), base_path, checker))
    }

    fn build(publisher: Arc<Publisher>, base_path: String, checker: OriginChecker) -> WebState {
        WebState {
            shared: Arc::new(Shared {
                publisher,
                base_path,
                closed: cache::ClosedLists::new(CLOSED_CACHE_BYTES),
                checker,
                verify_slots: Semaphore::new(VERIFY_SLOTS),
                streams: Arc::new(Semaphore::new(body::MAX_STREAMS)),
            }),
        }
    }

    /// Replaces the checker used for `&verify=1`, e.g. by one sharing the harvester's fetcher
    /// and the configured sources' settings.
    #[must_use]
    pub fn with_origin_checker(self, checker: OriginChecker) -> WebState {
        WebState::build(self.shared.publisher.clone(), self.shared.base_path.clone(), checker)
    }

    /// The publisher behind the server (for the CLI and tests).
    pub fn publisher(&self) -> &Arc<Publisher> {
        &self.shared.publisher
    }
}

/// Every route, under the base URL's path.
pub fn router(state: WebState) -> Router {
    let base_path: Arc<str> = Arc::from(state.shared.base_path.as_str());
    metrics::handle();
    Router::new()
        .fallback(dispatch)
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(base_path, metrics::track))
}

/// Serves until `shutdown` completes, then lets in-flight responses finish.
///
/// # Errors
/// When accepting connections fails.
pub async fn serve(
    listener: TcpListener,
    state: WebState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    axum::serve(listener, router(state)).with_graceful_shutdown(shutdown).await
}

async fn dispatch(State(st): State<WebState>, method: Method, uri: Uri, headers: HeaderMap) -> Response {
    let mut r = route(&st, &method, &uri, headers).await.unwrap_or_else(IntoResponse::into_response);
    r.headers_mut().insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    r
}

async fn route(st: &WebState, method: &Method, uri: &Uri, headers: HeaderMap) -> Result<Response, WebError> {
    if method != Method::GET && method != Method::HEAD {
        return Err(WebError::MethodNotAllowed);
    }
    let path = uri.path();
    if path == "/robots.txt" {
        return Ok(pages::robots(st));
    }
    let not_found = || WebError::NotFound(format!("nothing is served at {path}"));
    let rel = path.strip_prefix(st.shared.base_path.as_str()).ok_or_else(not_found)?;
    let naming = st.shared.publisher.naming();
    if let Some(page) = dashboard::asset(rel) {
        return Ok(page);
    }
    match rel {
        "" => dashboard::index(st).await,
        "api/status" => dashboard::api_status(st).await,
        "api/changes" => dashboard::api_changes(st, uri.query()).await,
        "api/failures" => dashboard::api_failures(st, uri.query()).await,
        "metrics" => metrics::render(st).await,
        ".well-known/resourcesync" => documents::source_description(st).await,
        "provenance" => provenance::provenance(st, uri.query(), &headers).await,
        r if r.starts_with("r/") => {
            let mut full = format!("{}{r}", naming.base());
            if let Some(q) = uri.query() {
                full.push('?');
                full.push_str(q);
            }
            bitstream::serve(st, full, method, headers).await
        }
        r => match naming.parse_set_document(r) {
            Some((set, doc)) => documents::set_document(st, set, doc, method, &headers).await,
            None => Err(not_found()),
        },
    }
}
