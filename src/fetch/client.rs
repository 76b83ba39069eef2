//! The polite fetcher: every network access of the harvester goes through [`Fetcher`].
//!
//! One request is: for each hop (at most [`MAX_REDIRECTS`] redirects, followed here, not by
//! reqwest, so each is checked) the SSRF guard, robots.txt, the host's turn (backoff, a
//! concurrency slot, the rate limiter), then the request with a header deadline. Failures
//! worth repeating (5xx, 408, 429, connect and header timeouts, connection errors) are retried
//! up to `max_retries` times with the host's backoff or the server's `Retry-After` in between.
//!
//! Two ways to take a body: [`Fetcher::get_stream`] hands out a [`FetchResponse`] read chunk by
//! chunk, for bitstreams that are hashed and stored as they arrive (no retries once the body
//! started: the caller decides, because it has already consumed part of it);
//! [`Fetcher::get_document`] reads a ResourceSync document fully into memory — bounded by
//! `max_document_bytes`, 50 MB by default, the Sitemap limit — decompressing gzip whether
//! advertised or only recognisable by its magic bytes, and retrying a broken body too. The
//! model's streaming reader then parses it from memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::header::{self, HeaderMap};
use url::Url;

use super::body::{Body, BodyLimits, Decoding};
use super::error::{FetchError, Phase};
use super::guard::{GuardPolicy, GuardedResolver};
use super::host::{Counters, Host, HostSnapshot, Hosts};
use super::park::{Park, Parks};
use super::request::{self, Mode};
use super::robots::agent_token;
use crate::config::{Config, Politeness, Settings};

/// Redirect hops followed per request (the first request not counted).
pub const MAX_REDIRECTS: usize = 10;

/// HTTP clients kept (one per distinct guard policy and connect timeout); past it the cache
/// starts over rather than grow with a configuration that makes every source distinct.
const MAX_CLIENTS: usize = 64;

/// The URL's origin as `Url::origin().ascii_serialization()` writes it (`http://host:port`,
/// the port only when it is not the scheme's default), in one allocation instead of four: it
/// is looked up for every request.
pub(crate) fn origin_key(url: &Url) -> String {
    let Some(host) = url.host_str().filter(|_| matches!(url.scheme(), "http" | "https")) else {
        return url.origin().ascii_serialization();
    };
    let mut key = String::with_capacity(url.scheme().len() + host.len() + 9);
    key.push_str(url.scheme());
    key.push_str("://");
    key.push_str(host);
    if let Some(port) = url.port() {
        use std::fmt::Write as _;
        let _ = write!(key, ":{port}");
    }
    key
}

/// Fetcher-wide settings (per-source ones come with each call as [`Settings`]).
#[derive(Debug, Clone)]
pub struct FetcherOptions {
    /// Sent with every request; should name a contact (the config enforces it).
    pub user_agent: String,
    /// Hosts tracked at once before idle ones are forgotten.
    pub max_hosts: usize,
    /// Whether requests go through a proxy.
    pub proxy: ProxyChoice,
}

impl FetcherOptions {
    /// Options with the default host bound (10,000) and no proxy.
    pub fn new(user_agent: impl Into<String>) -> Self {
        FetcherOptions { user_agent: user_agent.into(), max_hosts: 10_000, proxy: ProxyChoice::None }
    }
}

/// Whether a [`Fetcher`]'s requests go through a proxy. A proxy resolves names itself, so the
/// address guard then sees only the proxy's own address: a harvester never uses one it was
/// not given in its configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyChoice {
    /// Connect directly, whatever `HTTP(S)_PROXY` say (the harvester's default).
    None,
    /// As `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` and `NO_PROXY` say, like `curl`: for
    /// `tributary check`, which lets any address through anyway.
    Environment,
    /// Every request through this proxy (`[aggregator] proxy`).
    Url(Url),
}

/// Cache validators of a previous response, for a conditional GET.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Validators {
    /// `ETag`, sent back as `If-None-Match`.
    pub etag: Option<String>,
    /// `Last-Modified`, sent back as `If-Modified-Since`.
    pub last_modified: Option<String>,
}

impl Validators {
    pub(crate) fn from_headers(h: &HeaderMap) -> Self {
        let get = |name| h.get(name).and_then(|v: &header::HeaderValue| v.to_str().ok()).map(str::to_owned);
        Validators { etag: get(header::ETAG), last_modified: get(header::LAST_MODIFIED) }
    }

    /// True when there is nothing to send.
    pub fn is_empty(&self) -> bool {
        self.etag.is_none() && self.last_modified.is_none()
    }
}

/// The outcome of a conditional GET.
#[derive(Debug)]
pub enum Fetched<T> {
    /// A new representation.
    Modified(T),
    /// `304 Not Modified`: the caller's copy is current.
    NotModified,
}

/// A response whose body is read chunk by chunk.
pub struct FetchResponse {
    /// The final URL, after redirects.
    pub url: Url,
    /// The status (2xx).
    pub status: u16,
    /// Validators to keep for the next conditional GET.
    pub validators: Validators,
    /// `Content-Type`, if given.
    pub content_type: Option<String>,
    /// `Content-Length` as sent (of the transferred, possibly compressed, bytes).
    pub content_length: Option<u64>,
    /// All response headers.
    pub headers: HeaderMap,
    /// Where the requested URL has moved, when it answered a permanent redirect (301, 308):
    /// the URL after the permanent hops it began with.
    pub moved: Option<Url>,
    pub(crate) body: Body,
}

impl std::fmt::Debug for FetchResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FetchResponse").field("url", &self.url.as_str()).field("status", &self.status).finish()
    }
}

impl FetchResponse {
    /// The next chunk of the (decoded) body; `None` once the body ended completely.
    ///
    /// # Errors
    /// [`FetchError::Truncated`], [`FetchError::TooLarge`], [`FetchError::DecompressionBomb`],
    /// [`FetchError::Decode`] or [`FetchError::Timeout`] (idle, throughput, total). After an
    /// error the body is finished; what was read before it must be discarded.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, FetchError> {
        self.body.chunk().await
    }

    /// Body bytes received so far, as transferred.
    pub fn bytes_transferred(&self) -> u64 {
        self.body.raw_bytes()
    }
}

/// A ResourceSync document (or any small resource) read in full.
#[derive(Debug, Clone)]
pub struct Document {
    /// The final URL, after redirects: resolve relative references against it.
    pub url: Url,
    /// The decoded body.
    pub body: Bytes,
    /// Validators to keep for the next conditional GET.
    pub validators: Validators,
    /// `Content-Type`, if given.
    pub content_type: Option<String>,
    /// All response headers (discovery reads `Link`).
    pub headers: HeaderMap,
    /// Where the requested URL has moved, as [`FetchResponse::moved`].
    pub moved: Option<Url>,
}

/// The polite HTTP client. Cheap to clone; clones share hosts, connections and caches.
#[derive(Clone)]
pub struct Fetcher {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) user_agent: String,
    pub(crate) agent: String,
    pub(crate) hosts: Hosts,
    parks: Arc<Parks>,
    proxy: ProxyChoice,
    clients: Mutex<HashMap<(GuardPolicy, Duration), reqwest::Client>>,
}

impl Fetcher {
    /// A fetcher identifying itself as `opts.user_agent`.
    ///
    /// # Errors
    /// [`FetchError::Setup`] when the user agent is not a valid header value.
    pub fn new(opts: FetcherOptions) -> Result<Fetcher, FetchError> {
        header::HeaderValue::from_str(&opts.user_agent).map_err(|e| FetchError::Setup(e.into()))?;
        let parks = Arc::new(Parks::new());
        Ok(Fetcher {
            inner: Arc::new(Inner {
                agent: agent_token(&opts.user_agent),
                user_agent: opts.user_agent,
                hosts: Hosts::new(opts.max_hosts, parks.clone()),
                parks,
                proxy: opts.proxy,
                clients: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// A fetcher for a loaded configuration.
    ///
    /// # Errors
    /// As [`Fetcher::new`].
    pub fn from_config(config: &Config) -> Result<Fetcher, FetchError> {
        let proxy = config.aggregator.proxy.clone().map_or(ProxyChoice::None, ProxyChoice::Url);
        Fetcher::new(FetcherOptions { proxy, ..FetcherOptions::new(config.aggregator.user_agent.clone()) })
    }

    /// Builds now the HTTP clients these sources' settings will ask for.
    ///
    /// Building one reads and parses the system's CA certificates (about 5 ms here); a command
    /// calls this on a thread of its own while the store opens, so the first request does not.
    ///
    /// # Errors
    /// As [`Fetcher::new`]: a client that cannot be built.
    pub fn prepare<'a>(&self, settings: impl IntoIterator<Item = &'a Settings>) -> Result<(), FetchError> {
        for s in settings {
            if self.inner.clients.lock().unwrap_or_else(|e| e.into_inner()).len() >= MAX_CLIENTS {
                break; // more would evict the ones just built
            }
            self.client(&GuardPolicy::from_settings(s), s.connect_timeout)?;
        }
        Ok(())
    }

    /// GET `url` for streaming (a bitstream): the body is bounded by `max_resource_bytes` and
    /// decoded only when the server says `Content-Encoding: gzip` (a `.gz` file stays as
    /// published, since its hash is of those bytes).
    ///
    /// # Errors
    /// Any [`FetchError`] of the request phase, after retries.
    pub async fn get_stream(
        &self,
        url: &Url,
        settings: &Settings,
        validators: Option<&Validators>,
    ) -> Result<Fetched<FetchResponse>, FetchError> {
        let mode = Mode { max_bytes: settings.max_resource_bytes, decoding: Decoding::Identity, accept_gzip: false };
        let mut attempts = settings.max_retries;
        self.request(url, settings, &mode, validators, &mut attempts).await
    }

    /// GET a document in full (see the module docs).
    ///
    /// # Errors
    /// Any [`FetchError`], after retries; a body that could not be read in full is an error,
    /// never a shorter document.
    pub async fn get_document(
        &self,
        url: &Url,
        settings: &Settings,
        validators: Option<&Validators>,
    ) -> Result<Fetched<Document>, FetchError> {
        let mode = Mode { max_bytes: settings.max_document_bytes, decoding: Decoding::Sniff, accept_gzip: true };
        let mut attempts = settings.max_retries;
        // Bounded by `attempts`, which every failed round decrements.
        loop {
            let mut resp = match self.request(url, settings, &mode, validators, &mut attempts).await? {
                Fetched::NotModified => return Ok(Fetched::NotModified),
                Fetched::Modified(r) => r,
            };
            match resp.body.collect().await {
                Ok(body) => return Ok(Fetched::Modified(document(resp, body))),
                Err(e) if attempts > 0 && matches!(e, FetchError::Truncated { .. } | FetchError::Timeout { .. }) => {
                    attempts -= 1;
                    let host = self.host(&resp.url, settings);
                    Counters::add(&host.counters.retries, 1);
                    let wait = host.record_failure(settings.max_backoff);
                    tracing::info!(host = %host.origin, url = %resp.url, error = %crate::error::chain(&e), retry_in_ms = wait.as_millis() as u64, "retrying document");
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The `Sitemap:` lines of the robots.txt of `url`'s host (fetched and cached as for any
    /// request), resolved against the robots.txt URL.
    ///
    /// # Errors
    /// [`FetchError::RobotsUnavailable`] when robots.txt is unreachable; guard errors;
    /// [`FetchError::Parked`] for a parked origin.
    pub async fn robots_sitemaps(&self, url: &Url, settings: &Settings) -> Result<Vec<Url>, FetchError> {
        GuardPolicy::from_settings(settings).check_url(url)?;
        let host = self.host_for_turn(url, settings).await;
        let deadline = Instant::now() + settings.total_timeout;
        let robots_url = url.join("/robots.txt").map_err(|e| invalid(url, e))?;
        // A disallowed `url` does not matter here: only the file's Sitemap lines are wanted.
        match request::robots_for(self, &host, url, settings, deadline).await {
            Err(FetchError::RobotsUnavailable { detail, .. }) => {
                return Err(FetchError::RobotsUnavailable { url: robots_url.to_string(), detail });
            }
            Err(e @ (FetchError::Refused { .. } | FetchError::Parked { .. })) => return Err(e),
            _ => {}
        }
        let sitemaps = host.robots.lock().await.as_ref().map(|r| r.sitemaps.clone()).unwrap_or_default();
        Ok(sitemaps.iter().filter_map(|s| robots_url.join(s).ok()).collect())
    }

    /// The configuration was reloaded with the sources `configured` accepts: each host forgets
    /// what the others asked for (see [`super::host`]).
    pub fn reconfigured(&self, configured: &dyn Fn(&str) -> bool) {
        self.inner.hosts.reconfigured(configured);
    }

    /// Per-host state and counters, sorted by origin.
    pub fn hosts(&self) -> Vec<HostSnapshot> {
        self.inner.hosts.snapshots()
    }

    /// Number of hosts currently tracked.
    pub fn host_count(&self) -> usize {
        self.inner.hosts.len()
    }

    pub(crate) fn host(&self, url: &Url, settings: &Settings) -> Arc<Host> {
        self.inner.hosts.get(&origin_key(url), settings)
    }

    /// The host about to be given a request: under `politeness = "ip"`, on the budget of the
    /// address its name resolves to (looked up again after
    /// [`ADDRESS_TTL`](super::host::ADDRESS_TTL)).
    pub(crate) async fn host_for_turn(&self, url: &Url, settings: &Settings) -> Arc<Host> {
        let host = self.host(url, settings);
        if settings.politeness == Politeness::Ip
            && host.fresh_address().is_none()
            && let Some(ip) = address_of(url, settings.connect_timeout).await
        {
            self.inner.hosts.share(&host, ip, settings);
        }
        host
    }

    /// Adds parks kept from before (by the harvester, in the store): an origin already parked
    /// until later keeps its later time; parks that ended are ignored.
    pub fn restore_parks(&self, parks: impl IntoIterator<Item = Park>) {
        for p in parks {
            self.inner.parks.park(&p.origin, p.until);
        }
    }

    /// The origins parked now, by origin: what a caller keeps across restarts.
    pub fn parks(&self) -> Vec<Park> {
        self.inner.parks.all()
    }

    /// Changes each time an origin is parked (or its park moves later).
    pub fn watch_parks(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.parks.watch()
    }

    /// Until when `url`'s origin is parked, if it is now.
    pub fn parked_until(&self, url: &Url) -> Option<std::time::SystemTime> {
        self.inner.parks.until(&origin_key(url))
    }

    /// The client for a guard policy and connect timeout (a handful exist at most: one per
    /// distinct combination among the sources).
    pub(crate) fn client(&self, policy: &GuardPolicy, connect: Duration) -> Result<reqwest::Client, FetchError> {
        let mut clients = self.inner.clients.lock().unwrap_or_else(|e| e.into_inner());
        let key = (policy.clone(), connect);
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
        let builder = match &self.inner.proxy {
            ProxyChoice::None => reqwest::Client::builder().no_proxy(),
            ProxyChoice::Environment => reqwest::Client::builder(),
            ProxyChoice::Url(url) => reqwest::Client::builder()
                .proxy(reqwest::Proxy::all(url.as_str()).map_err(|e| FetchError::Setup(e.into()))?),
        };
        let client = builder
            .user_agent(&self.inner.user_agent)
            .redirect(reqwest::redirect::Policy::none())
            // Retries are ours (`Fetcher::request`): each one waits for the host's rate limit and
            // is counted. reqwest's own layer would resend HTTP/2 refused streams unseen, and
            // clones every request's headers in case it has to.
            .retry(reqwest::retry::never().max_retries_per_request(0))
            .no_gzip()
            .connect_timeout(connect)
            .pool_idle_timeout(Duration::from_secs(60))
            .tcp_nodelay(true)
            .dns_resolver(Arc::new(GuardedResolver { policy: Arc::new(policy.clone()) }))
            .connector_layer(super::launch::StampConnections)
            .build()
            .map_err(|e| FetchError::Setup(e.into()))?;
        if clients.len() >= MAX_CLIENTS {
            clients.clear();
        }
        clients.insert(key, client.clone());
        Ok(client)
    }

    /// One request with retries; `attempts` is the retry budget left, shared with the caller.
    async fn request(
        &self,
        url: &Url,
        settings: &Settings,
        mode: &Mode,
        validators: Option<&Validators>,
        attempts: &mut u32,
    ) -> Result<Fetched<FetchResponse>, FetchError> {
        let deadline = Instant::now() + settings.total_timeout;
        // Bounded by `attempts`.
        loop {
            match request::attempt(self, url, settings, mode, validators, deadline).await {
                Err(e) if *attempts > 0 && worth_retrying(&e) => {
                    *attempts -= 1;
                    let host = self.host(url, settings);
                    Counters::add(&host.counters.retries, 1);
                    tracing::info!(host = %host.origin, url = %url, error = %crate::error::chain(&e), "retrying");
                }
                other => return other,
            }
        }
    }
}

fn worth_retrying(e: &FetchError) -> bool {
    match e {
        FetchError::Status { status, .. } => *status >= 500 || *status == 429 || *status == 408,
        FetchError::Timeout { phase, .. } => matches!(phase, Phase::Connect | Phase::Header),
        FetchError::Connect { .. } | FetchError::Protocol { .. } => true,
        _ => false,
    }
}

fn document(resp: FetchResponse, body: Bytes) -> Document {
    Document {
        url: resp.url,
        body,
        validators: resp.validators,
        content_type: resp.content_type,
        headers: resp.headers,
        moved: resp.moved,
    }
}

/// The address `url`'s politeness budget is shared under: an IP literal itself, else the
/// lowest address its name resolves to, so that every name of a server picks the same one
/// whatever order the answers come in. `None` when the name does not resolve (in time): the
/// request then fails on its own, or goes by its origin.
async fn address_of(url: &Url, timeout: Duration) -> Option<std::net::IpAddr> {
    match url.host()? {
        url::Host::Ipv4(v4) => Some(v4.into()),
        url::Host::Ipv6(v6) => Some(v6.into()),
        url::Host::Domain(name) => {
            let lookup = tokio::net::lookup_host((name, url.port_or_known_default().unwrap_or(80)));
            let addrs = tokio::time::timeout(timeout, lookup).await.ok()?.ok()?;
            addrs.map(|a| a.ip()).min()
        }
    }
}

pub(crate) fn invalid(url: &Url, e: impl std::fmt::Display) -> FetchError {
    FetchError::InvalidUrl { url: url.to_string(), detail: e.to_string() }
}

pub(crate) fn body_limits(settings: &Settings, max_bytes: u64, deadline: Instant) -> BodyLimits {
    BodyLimits {
        max_bytes,
        max_ratio: settings.max_decompressed_ratio,
        idle: settings.idle_timeout,
        deadline,
        min_throughput: settings.min_throughput,
        window: settings.throughput_window,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_key_is_the_ascii_serialization() {
        for u in [
            "http://example.org/a",
            "https://Example.ORG:443/a",
            "http://example.org:8080/a?b",
            "http://127.0.0.1:8099/files/00/r00001.bin",
            "http://[::1]:8099/",
            "https://xn--bcher-kva.example/",
            "http://user:pw@example.org:81/",
        ] {
            let url = Url::parse(u).unwrap();
            assert_eq!(origin_key(&url), url.origin().ascii_serialization(), "{u}");
        }
    }
}
