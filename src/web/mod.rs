//! The web server: Tributary as a ResourceSync Source over HTTP (axum).
//!
//! # Architecture
//! An axum [`Router`] with one route per kind of document under the base URL's path
//! (`routes` holds the table): the Source Description and the set documents (`documents`,
//! whose file names [`crate::naming`] parses; Resource Dump packages, served from their files
//! with ranges, in `dumps`), bitstreams (`bitstream`), the provenance
//! endpoint (`provenance`) and the pages for people (`pages`); the operator's dashboard and
//! its JSON (`dashboard`; what is wrong with a source in `problems`, one source's page in
//! `source_page`) and `metrics`. `/robots.txt` is answered at the host root whatever
//! the base path, since crawlers look only there. Anything else is a 404. Documents come from
//! [`crate::publish`], always on the blocking pool, because every store call blocks.
//!
//! Two layers wrap every route and the 404 alike: `metrics::track` times each request and
//! counts it under its route's name, and every response, errors included, carries
//! `X-Content-Type-Options: nosniff` and, unless it sets its own (the dashboard, the pages),
//! `Content-Security-Policy: default-src 'none'; sandbox`. Routes answer GET and HEAD; other methods get 405 with
//! `Allow`, so a later POST endpoint is one more route with its own method.
//!
//! Each set's change-notification topic and the built-in WebSub hub (`POST hub`) are routed to
//! [`crate::notify`] (`hub`).
//!
//! Depends on `publish`, `notify`, `store`, `model`, `naming` and the application-level
//! [`crate::provenance`] (the live origin check). Must not depend on the harvester: the daemon
//! runs both side by side over one store.

mod bitstream;
mod body;
mod cache;
mod conditional;
mod dashboard;
mod documents;
mod dumps;
mod error;
mod hot;
mod hub;
mod metrics;
mod oai;
mod pages;
mod problems;
mod provenance;
mod routes;
mod server;
mod source_page;

use std::future::Future;
use std::io;
use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::config::{Config, ServerSettings, Settings};
use crate::fetch::{Fetcher, FetcherOptions};
use crate::naming::Naming;
use crate::notify::Push;
use crate::provenance::OriginChecker;
use crate::publish::oai::OaiProvider;
use crate::publish::{FeedOptions, Limits, LinkPolicies, PublishError, Publisher, SetConfig};
use crate::store::Store;

/// Bytes of closed Change Lists kept in memory.
const CLOSED_CACHE_BYTES: usize = 64 * 1024 * 1024;
/// Live origin checks running at once.
const VERIFY_SLOTS: usize = 2;

/// Everything the handlers share. Cheap to clone.
#[derive(Clone, Debug)]
pub struct WebState {
    shared: Arc<Shared>,
    /// The OAI-PMH endpoint, when on (see `oai`).
    oai: Option<Arc<OaiProvider>>,
}

#[derive(Debug)]
struct Shared {
    publisher: Arc<Publisher>,
    /// The path of the base URL, ending in `/`.
    base_path: String,
    closed: cache::ClosedLists,
    /// Small bitstreams' responses (see `hot`).
    hot: hot::HotBlobs,
    /// Replaced by a reload (each source's settings).
    checker: std::sync::RwLock<OriginChecker>,
    verify_slots: Semaphore,
    /// Streaming responses producing at once (see `body`).
    streams: Arc<Semaphore>,
    /// What the FeedSync feeds say of the aggregator (see `publish::feed`); replaced by a reload.
    feed: std::sync::RwLock<FeedOptions>,
    /// Change notifications: the topics and the built-in hub (`None`: off).
    push: Option<Push>,
    /// The limits on clients (`[server]`).
    server: ServerSettings,
    /// The ids of the configured sources, when known (sets may hold sources no longer
    /// configured, until they are forgotten); replaced by a reload.
    configured: std::sync::RwLock<Option<Arc<std::collections::HashSet<String>>>>,
    /// Each configured source's poll intervals, for `/metrics`; replaced by a reload.
    polls: std::sync::RwLock<Arc<metrics::Polls>>,
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
        WebState::from_publisher(Publisher::new(store, naming, sets, policies, limits)?)
    }

    /// As [`WebState::new`], over a publisher built by the caller (e.g. one advertising a hub,
    /// [`Publisher::with_hub`]).
    ///
    /// # Errors
    /// [`PublishError::Config`] when the origin-check client cannot be built.
    pub fn from_publisher(publisher: Publisher) -> Result<WebState, PublishError> {
        let naming = publisher.naming();
        let base_path = url::Url::parse(naming.base()).map(|u| u.path().to_owned()).unwrap_or_else(|_| "/".into());
        let agent = concat!("Tributary/", env!("CARGO_PKG_VERSION"), " (provenance check)");
        let fetcher = Fetcher::new(FetcherOptions::new(agent))
            .map_err(|e| PublishError::Config(crate::error::chain(&e).to_string()))?;
        let checker = OriginChecker::new(fetcher, Settings::default());
        let host = url::Url::parse(publisher.naming().base()).ok().and_then(|u| u.host_str().map(str::to_owned));
        let endpoint = format!("tributary:{}", host.as_deref().unwrap_or("localhost").trim_matches(['[', ']']));
        let feed = FeedOptions { endpoint, upstream: Vec::new() };
        Ok(WebState::build(Arc::new(publisher), base_path, checker, feed, None, ServerSettings::default()))
    }

    /// The state `tributary run` and `serve` use: every set, link policy and limit of
    /// `config`, and the live origin check fetching through `fetcher` with each source's own
    /// settings (in `run`, the harvester's fetcher, so checks queue behind its turns).
    ///
    /// # Errors
    /// As [`WebState::new`].
    pub fn from_config(config: &Config, store: &Store, fetcher: &Fetcher) -> Result<WebState, PublishError> {
        let naming = Naming::new(&config.aggregator.base_url);
        let sets = SetConfig::published(config, store)?;
        let mut publisher = Publisher::new(
            store.clone(),
            naming,
            sets,
            LinkPolicies::from_config(config),
            Limits::from_config(config),
        )?;
        if config.hub.enabled {
            publisher = publisher.with_hub(Push::hub_url(config));
        }
        let state = WebState::from_publisher(publisher)?;
        let state = WebState::build(
            state.shared.publisher.clone(),
            state.shared.base_path.clone(),
            state.shared.checker(),
            feed_options(config),
            None,
            config.server.clone(),
        );
        let state = state.with_origin_checker(OriginChecker::for_config(fetcher.clone(), config));
        state.set_configured(config);
        match OaiProvider::from_config(state.shared.publisher.clone(), config)? {
            Some(oai) => Ok(state.with_oai(Arc::new(oai))),
            None => Ok(state),
        }
    }

    fn build(
        publisher: Arc<Publisher>,
        base_path: String,
        checker: OriginChecker,
        feed: FeedOptions,
        push: Option<Push>,
        server: ServerSettings,
    ) -> WebState {
        let hot = hot::HotBlobs::new(publisher.store());
        WebState {
            shared: Arc::new(Shared {
                publisher,
                base_path,
                closed: cache::ClosedLists::new(CLOSED_CACHE_BYTES),
                hot,
                checker: std::sync::RwLock::new(checker),
                verify_slots: Semaphore::new(VERIFY_SLOTS),
                streams: Arc::new(Semaphore::new(server.max_streams)),
                feed: std::sync::RwLock::new(feed),
                push,
                server,
                configured: std::sync::RwLock::new(None),
                polls: std::sync::RwLock::default(),
            }),
            oai: None,
        }
    }

    /// Replaces the checker used for `&verify=1`, e.g. by one sharing the harvester's fetcher
    /// and the configured sources' settings.
    #[must_use]
    pub fn with_origin_checker(self, checker: OriginChecker) -> WebState {
        let s = &self.shared;
        let oai = self.oai.clone();
        let state = WebState::build(
            s.publisher.clone(),
            s.base_path.clone(),
            checker,
            s.feed(),
            s.push.clone(),
            s.server.clone(),
        );
        state.carry_configured(&self);
        WebState { oai, ..state }
    }

    /// Serves the topics and the built-in hub of `push` (built over this state's publisher).
    #[must_use]
    pub fn with_push(self, push: Push) -> WebState {
        let s = &self.shared;
        let (checker, feed) = (s.checker(), s.feed());
        let state =
            WebState::build(s.publisher.clone(), s.base_path.clone(), checker, feed, Some(push), s.server.clone());
        state.carry_configured(&self);
        WebState { oai: self.oai.clone(), ..state }
    }

    /// Serves within `limits` (`tributary run` and `serve` use `[server]`).
    #[must_use]
    pub fn with_server(self, limits: ServerSettings) -> WebState {
        let s = &self.shared;
        let (checker, feed) = (s.checker(), s.feed());
        let state = WebState::build(s.publisher.clone(), s.base_path.clone(), checker, feed, s.push.clone(), limits);
        state.carry_configured(&self);
        WebState { oai: self.oai.clone(), ..state }
    }

    /// Serves `oai` at `{base_url}oai` (without it, that path answers 404).
    #[must_use]
    pub fn with_oai(self, oai: Arc<OaiProvider>) -> WebState {
        WebState { oai: Some(oai), ..self }
    }

    /// The OAI-PMH endpoint served, if on.
    pub fn oai(&self) -> Option<&Arc<OaiProvider>> {
        self.oai.as_ref()
    }

    /// The change notifications served, if on.
    pub fn push(&self) -> Option<&Push> {
        self.shared.push.as_ref()
    }

    /// Takes the per-source parts of a reloaded configuration: the settings origin checks
    /// fetch with, and the upstream URLs the feeds name. (The sets are the publisher's:
    /// [`Publisher::reconfigure`].)
    pub fn reconfigure(&self, config: &Config) {
        let s = &self.shared;
        let fetcher = s.checker().fetcher().clone();
        *s.checker.write().unwrap_or_else(|p| p.into_inner()) = OriginChecker::for_config(fetcher, config);
        *s.feed.write().unwrap_or_else(|p| p.into_inner()) = feed_options(config);
        self.set_configured(config);
    }

    fn set_configured(&self, config: &Config) {
        let ids = config.sources.iter().map(|s| s.id.clone()).collect();
        *self.shared.configured.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(ids));
        *self.shared.polls.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(metrics::Polls::of(config));
    }

    /// Keeps what `from` knew of the configured sources (the `with_` builders make a new state).
    fn carry_configured(&self, from: &WebState) {
        *self.shared.configured.write().unwrap_or_else(|p| p.into_inner()) = from.configured();
        *self.shared.polls.write().unwrap_or_else(|p| p.into_inner()) = from.polls();
    }

    /// The configured sources' poll intervals (empty when not known).
    fn polls(&self) -> Arc<metrics::Polls> {
        self.shared.polls.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The configured sources' ids, when known.
    fn configured(&self) -> Option<Arc<std::collections::HashSet<String>>> {
        self.shared.configured.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The publisher behind the server (for the CLI and tests).
    pub fn publisher(&self) -> &Arc<Publisher> {
        &self.shared.publisher
    }
}

/// What the feeds say of the aggregator and where each source's items came from: each feed of
/// a feed source, a ResourceSync Source by the URL it is configured with.
fn feed_options(config: &Config) -> FeedOptions {
    let upstream = config.sources.iter().flat_map(|s| match &s.feed {
        Some(f) => f.urls.iter().map(|u| (s.id.clone(), u.to_string())).collect::<Vec<_>>(),
        None => vec![(s.id.clone(), s.url.to_string())],
    });
    FeedOptions { endpoint: config.aggregator.endpoint_id.clone(), upstream: upstream.collect() }
}

impl Shared {
    fn checker(&self) -> OriginChecker {
        self.checker.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn feed(&self) -> FeedOptions {
        self.feed.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The streaming slots and how long a stream waits for a client (see `body`).
    fn stream_slots(&self) -> (&Arc<Semaphore>, std::time::Duration) {
        (&self.streams, self.server.stream_stall)
    }
}

/// Every route, under the base URL's path.
pub fn router(state: WebState) -> Router {
    let base_path: Arc<str> = Arc::from(state.shared.base_path.as_str());
    metrics::handle();
    routes::table(&base_path)
        .layer(axum::middleware::from_fn_with_state(base_path.clone(), metrics::track))
        .layer(axum::middleware::map_response(nosniff))
        .with_state(state)
}

/// The policy of every response that sets none of its own (only the dashboard and the pages
/// for people do): no script, no subresource, a unique origin. Feeds, notifications and
/// bitstreams carry upstream markup, and a browser that opens one must not run any of it on
/// Tributary's origin.
pub(crate) const LOCKED_CSP: &str = "default-src 'none'; sandbox";

/// Browsers must not guess a type for anything here, errors included: bitstreams are
/// third-party content, and a guessed type could make one of them run as script. Anything
/// without a policy of its own gets [`LOCKED_CSP`].
async fn nosniff(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    if !h.contains_key(header::CONTENT_SECURITY_POLICY) {
        h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(LOCKED_CSP));
    }
    r
}

/// Serves until `shutdown` completes, then lets in-flight responses finish (within the
/// state's `shutdown_grace`), holding every client to the state's `[server]` limits.
///
/// # Errors
/// When accepting connections fails.
pub async fn serve(
    listener: TcpListener,
    state: WebState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let limits = state.shared.server.clone();
    server::run(listener, router(state), limits, shutdown).await
}

/// As [`serve`], with `extra` routes served beside the server's own (`tributary run` mounts
/// the push subscriber's WebSub callbacks this way; the web server does not know what they
/// are). `extra`'s routes win over the 404 fallback only where they match.
///
/// # Errors
/// As [`serve`].
pub async fn serve_with(
    listener: TcpListener,
    state: WebState,
    extra: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let limits = state.shared.server.clone();
    server::run(listener, extra.merge(router(state)), limits, shutdown).await
}
