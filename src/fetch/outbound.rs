//! Requests Tributary sends on its own initiative to endpoints that asked for them: WebSub
//! intent verifications and deliveries to subscribers' callbacks, and notifications to an
//! external hub.
//!
//! Not the harvester's [`Fetcher`](super::Fetcher): there is no robots.txt (a callback is not
//! crawled), no per-host rate limit (each subscriber has its own queue), and no redirect is
//! followed (WebSub §7: a delivery's only success is a 2xx; a redirect is a failure, and
//! following one could lead to a private address). The SSRF guard is the same one: IP-literal
//! targets are checked before sending, names through [`GuardedResolver`], so a callback
//! cannot reach the aggregator's own network unless the operator allows it. The proxy
//! environment variables are ignored for the same reason: a proxy resolves names itself.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ipnet::IpNet;
use reqwest::header::HeaderMap;
use url::Url;

use super::error::{FetchError, Phase};
use super::guard::{GuardPolicy, GuardedResolver};
use super::request::map_send_error;

/// How an [`Outbound`] client behaves.
#[derive(Debug, Clone)]
pub struct OutboundOptions {
    /// Sent with every request.
    pub user_agent: String,
    /// Whole request, from connecting to the end of the (bounded) body.
    pub timeout: Duration,
    /// Let targets be on loopback, private and other non-public addresses.
    pub allow_private: bool,
    /// Networks allowed even when `allow_private` is off.
    pub allow_networks: Vec<IpNet>,
}

/// An answer: its status and at most the first bytes of its body that were asked for.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The status code (any: redirects are answers too).
    pub status: u16,
    /// The response headers.
    pub headers: HeaderMap,
    /// The body, cut at the limit the caller gave.
    pub body: Bytes,
}

/// The client for hub traffic. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Outbound {
    client: reqwest::Client,
    policy: Arc<GuardPolicy>,
    timeout: Duration,
}

impl Outbound {
    /// A client with `opts`.
    ///
    /// # Errors
    /// [`FetchError::Setup`] when the user agent is not a valid header value.
    pub fn new(opts: OutboundOptions) -> Result<Outbound, FetchError> {
        let policy = Arc::new(GuardPolicy { allow_private: opts.allow_private, allow_networks: opts.allow_networks });
        let client = reqwest::Client::builder()
            .user_agent(opts.user_agent)
            .redirect(reqwest::redirect::Policy::none())
            // Never through `HTTP(S)_PROXY`: a proxy would resolve the callback's name itself,
            // and the guard below checks only the addresses this client resolves.
            .no_proxy()
            .retry(reqwest::retry::never().max_retries_per_request(0))
            .no_gzip()
            .connect_timeout(opts.timeout)
            .pool_idle_timeout(Duration::from_secs(60))
            .tcp_nodelay(true)
            .dns_resolver(Arc::new(GuardedResolver { policy: policy.clone() }))
            .build()
            .map_err(|e| FetchError::Setup(e.into()))?;
        Ok(Outbound { client, policy, timeout: opts.timeout })
    }

    /// Whether `url` may be contacted at all: http(s), and an IP-literal host that the policy
    /// allows (a name is checked when it is resolved).
    ///
    /// # Errors
    /// [`FetchError::BadScheme`], [`FetchError::InvalidUrl`] or [`FetchError::Refused`].
    pub fn check(&self, url: &Url) -> Result<(), FetchError> {
        self.policy.check_url(url)
    }

    /// GET `url`, keeping at most `max_body` bytes of the answer.
    ///
    /// # Errors
    /// As [`Outbound::check`]; [`FetchError::Timeout`], [`FetchError::Connect`],
    /// [`FetchError::Protocol`] or [`FetchError::Truncated`].
    pub async fn get(&self, url: &Url, max_body: usize) -> Result<Reply, FetchError> {
        self.send(url, self.client.get(url.as_str()), max_body).await
    }

    /// POST `body` to `url` with `headers`, keeping at most `max_body` bytes of the answer.
    ///
    /// # Errors
    /// As [`Outbound::get`].
    pub async fn post(&self, url: &Url, headers: HeaderMap, body: Bytes, max_body: usize) -> Result<Reply, FetchError> {
        self.send(url, self.client.post(url.as_str()).headers(headers).body(body), max_body).await
    }

    async fn send(&self, url: &Url, req: reqwest::RequestBuilder, max_body: usize) -> Result<Reply, FetchError> {
        self.check(url)?;
        let exchange = async {
            let mut resp = req.send().await.map_err(|e| map_send_error(url, e))?;
            let status = resp.status().as_u16();
            let headers = std::mem::take(resp.headers_mut());
            let mut body = Vec::new();
            // Bounded by `max_body` and the timeout around it.
            while body.len() < max_body {
                match resp.chunk().await {
                    Ok(Some(c)) => body.extend_from_slice(&c[..c.len().min(max_body - body.len())]),
                    Ok(None) => break,
                    Err(e) => return Err(FetchError::Truncated { url: url.to_string(), detail: e.to_string() }),
                }
            }
            Ok(Reply { status, headers, body: Bytes::from(body) })
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(r) => r,
            Err(_) => Err(FetchError::Timeout { url: url.to_string(), phase: Phase::Total }),
        }
    }
}
