//! One attempt of one request: the hop loop (guard → park → robots.txt → host turn → send),
//! the handling of each status, and the fetching of robots.txt itself. Split from `fetch` so
//! the public API there stays readable.
//!
//! A park longer than the source's `max_backoff` is not waited out: the request fails at once
//! with [`FetchError::Parked`], so a one-shot harvest never sleeps out a day's `Retry-After`,
//! and the service schedules the source for when the park ends.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use reqwest::StatusCode;
use reqwest::header;
use tokio::sync::OwnedSemaphorePermit;
use url::Url;

use super::body::{Body, Decoding};
use super::client::{FetchResponse, Fetched, Fetcher, MAX_REDIRECTS, Validators, body_limits, invalid};
use super::error::{FetchError, Phase};
use super::guard::{GuardPolicy, Refusal};
use super::host::{Counters, Host};
use super::launch::{self, Launch};
use super::robots::{ROBOTS_MAX_BYTES, RobotsEntry};
use crate::config::Settings;

/// Redirects followed for robots.txt (RFC 9309 asks for at least five).
const ROBOTS_REDIRECTS: usize = 5;
/// Longest a robots.txt fetch may take.
const ROBOTS_TIMEOUT: Duration = Duration::from_secs(30);

/// What kind of body a request is for.
pub(crate) struct Mode {
    pub(crate) max_bytes: u64,
    pub(crate) decoding: Decoding,
    pub(crate) accept_gzip: bool,
}

/// One attempt: follows redirects, each hop guarded and checked against robots.txt.
pub(crate) async fn attempt(
    f: &Fetcher,
    url: &Url,
    s: &Settings,
    mode: &Mode,
    validators: Option<&Validators>,
    deadline: Instant,
) -> Result<Fetched<FetchResponse>, FetchError> {
    let policy = GuardPolicy::from_settings(s);
    let client = f.client(&policy, s.connect_timeout)?;
    let mut current = url.clone();
    // Where the permanent redirects the request began with led, while they last.
    let (mut moved, mut permanent) = (None, true);
    for _hop in 0..=MAX_REDIRECTS {
        policy.check_url(&current)?;
        let host = f.host_for_turn(&current, s).await;
        host.wait_out_park(current.as_str(), s.max_backoff, deadline).await?;
        robots_for(f, &host, &current, s, deadline).await?;
        let turn = host.acquire(current.as_str(), s.max_backoff, deadline).await?;
        let resp = send(&client, &host, &current, s, mode, validators, turn.launch, deadline).await?;
        if resp.status().is_redirection() && resp.status() != StatusCode::NOT_MODIFIED {
            current = redirect_target(&current, &resp)?;
            permanent &= matches!(resp.status().as_u16(), 301 | 308);
            if permanent {
                moved = Some(current.clone());
            }
            continue;
        }
        return respond(resp, host, turn.permit, s, mode, validators, deadline).map(|fetched| match fetched {
            Fetched::Modified(r) => Fetched::Modified(FetchResponse { moved, ..r }),
            not_modified => not_modified,
        });
    }
    Err(FetchError::TooManyRedirects { url: current.to_string(), max: MAX_REDIRECTS })
}

#[allow(clippy::too_many_arguments)]
async fn send(
    client: &reqwest::Client,
    host: &Host,
    url: &Url,
    s: &Settings,
    mode: &Mode,
    validators: Option<&Validators>,
    launch: Option<Arc<Launch>>,
    deadline: Instant,
) -> Result<reqwest::Response, FetchError> {
    let mut req =
        client.get(url.clone()).header(header::ACCEPT_ENCODING, if mode.accept_gzip { "gzip" } else { "identity" });
    if let Some(v) = validators {
        if let Some(etag) = &v.etag {
            req = req.header(header::IF_NONE_MATCH, etag);
        }
        if let Some(lm) = &v.last_modified {
            req = req.header(header::IF_MODIFIED_SINCE, lm);
        }
    }
    if s.credentials.applies_to(&host.origin) {
        req = with_credentials(req, s)?;
    }
    Counters::add(&host.counters.requests, 1);
    super::metrics::request();
    let header_end = (Instant::now() + s.header_timeout).min(deadline);
    let phase = if header_end == deadline { Phase::Total } else { Phase::Header };
    let sent = launch::sending(launch, req.send());
    let result = tokio::time::timeout_at(tokio::time::Instant::from_std(header_end), sent).await;
    let err = match result {
        Ok(Ok(resp)) => return Ok(resp),
        Err(_) => FetchError::Timeout { url: url.to_string(), phase },
        Ok(Err(e)) => map_send_error(url, e),
    };
    if !matches!(err, FetchError::Refused { .. }) {
        Counters::add(&host.counters.failures, 1);
        host.record_failure(s.max_backoff);
    }
    Err(err)
}

/// Adds the source's credential headers, marked sensitive: HTTP/2 never indexes them, and
/// their `Debug` (in any transport log) shows no value. The caller checked the origin.
fn with_credentials(mut req: reqwest::RequestBuilder, s: &Settings) -> Result<reqwest::RequestBuilder, FetchError> {
    for h in &s.credentials.headers {
        // The configuration checked the value; a failure here names the variable, not the value.
        let mut value = header::HeaderValue::from_str(h.value.expose()).map_err(|_| {
            FetchError::Setup(format!("environment variable {} cannot be sent as header {}", h.env, h.name).into())
        })?;
        value.set_sensitive(true);
        req = req.header(h.name.as_str(), value);
    }
    Ok(req)
}

pub(crate) fn map_send_error(url: &Url, e: reqwest::Error) -> FetchError {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    // Bounded: error chains are short.
    for _ in 0..10 {
        let Some(err) = cur else { break };
        if let Some(r) = err.downcast_ref::<Refusal>() {
            return FetchError::Refused { url: url.to_string(), reason: r.to_string() };
        }
        cur = err.source();
    }
    if e.is_timeout() {
        return FetchError::Timeout { url: url.to_string(), phase: Phase::Connect };
    }
    if e.is_connect() {
        return FetchError::Connect { url: url.to_string(), source: e };
    }
    FetchError::Protocol { url: url.to_string(), source: e }
}

fn redirect_target(current: &Url, resp: &reqwest::Response) -> Result<Url, FetchError> {
    let location = resp
        .headers()
        .get(header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| invalid(current, format!("HTTP {} without a usable Location", resp.status().as_u16())))?;
    current.join(location.trim()).map_err(|e| invalid(current, format!("Location {location:?}: {e}")))
}

/// Turns a final (non-redirect) response into the outcome, recording what it tells about the
/// host.
fn respond(
    resp: reqwest::Response,
    host: Arc<Host>,
    permit: OwnedSemaphorePermit,
    s: &Settings,
    mode: &Mode,
    validators: Option<&Validators>,
    deadline: Instant,
) -> Result<Fetched<FetchResponse>, FetchError> {
    let status = resp.status();
    let url = resp.url().clone();
    if status == StatusCode::NOT_MODIFIED && validators.is_some_and(|v| !v.is_empty()) {
        host.record_success();
        Counters::add(&host.counters.not_modified, 1);
        return Ok(Fetched::NotModified);
    }
    if !status.is_success() {
        return Err(status_error(&resp, &host, s));
    }
    host.record_success();
    if let Some(len) = resp.content_length().filter(|len| *len > mode.max_bytes) {
        Counters::add(&host.counters.failures, 1);
        tracing::debug!(host = %host.origin, url = %url, size_bytes = len, "Content-Length over the limit");
        return Err(FetchError::TooLarge { url: url.to_string(), limit: mode.max_bytes });
    }
    let decoding = decoding_for(&resp, mode.decoding)?;
    let headers = resp.headers().clone();
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let content_length = resp.content_length();
    let limits = body_limits(s, mode.max_bytes, deadline);
    Ok(Fetched::Modified(FetchResponse {
        url,
        status: status.as_u16(),
        validators: Validators::from_headers(&headers),
        content_type,
        content_length,
        headers,
        moved: None,
        body: Body::new(resp, decoding, limits, host, permit),
    }))
}

fn decoding_for(resp: &reqwest::Response, default: Decoding) -> Result<Decoding, FetchError> {
    let encoding = resp.headers().get(header::CONTENT_ENCODING).and_then(|v| v.to_str().ok()).unwrap_or("");
    match encoding.trim().to_ascii_lowercase().as_str() {
        "" | "identity" => Ok(default),
        "gzip" | "x-gzip" => Ok(Decoding::Gzip),
        other => Err(FetchError::Decode {
            url: resp.url().to_string(),
            detail: format!("unsupported Content-Encoding {other:?} (only gzip was accepted)"),
        }),
    }
}

/// Records a failure status on the host (backoff, or a park for the server's `Retry-After`).
fn status_error(resp: &reqwest::Response, host: &Host, s: &Settings) -> FetchError {
    let status = resp.status();
    let code = status.as_u16();
    if code != 404 && code != 410 {
        Counters::add(&host.counters.failures, 1);
    }
    tracing::debug!(host = %host.origin, url = %resp.url(), status = code, "failure status");
    let url = resp.url().to_string();
    if matches!(code, 401 | 403) {
        return FetchError::Denied { url, status: code, credentials: s.credentials.applies_to(&host.origin) };
    }
    match park_for(resp, host, s) {
        Some(e) => return e,
        None if status.is_server_error() || code == 429 || code == 408 => {
            host.record_failure(s.max_backoff);
        }
        None => {}
    }
    FetchError::Status { url, status: code }
}

/// A `429` or `503` with `Retry-After` parks the origin until then (capped by
/// `retry_after_cap`). Returns the error to end the request with: [`FetchError::Parked`] when
/// the park is longer than a request waits, else the status (a retry waits the park out).
fn park_for(resp: &reqwest::Response, host: &Host, s: &Settings) -> Option<FetchError> {
    let code = resp.status().as_u16();
    let wait = matches!(code, 429 | 503).then(|| retry_after(resp.headers())).flatten()?;
    let wait = wait.min(s.retry_after_cap);
    let until = SystemTime::now() + wait;
    host.park(until);
    Some(match wait > s.max_backoff {
        true => FetchError::Parked { url: resp.url().to_string(), origin: host.origin.clone(), until },
        false => FetchError::Status { url: resp.url().to_string(), status: code },
    })
}

/// `Retry-After` as delay-seconds or an HTTP-date (RFC 9110 §10.2.3).
pub(crate) fn retry_after(headers: &header::HeaderMap) -> Option<Duration> {
    let v = headers.get(header::RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO))
}

/// Makes sure `host`'s robots.txt is known and fresh, then checks `url` against it.
pub(crate) async fn robots_for(
    f: &Fetcher,
    host: &Arc<Host>,
    url: &Url,
    s: &Settings,
    deadline: Instant,
) -> Result<(), FetchError> {
    if url.path() == "/robots.txt" {
        return Ok(());
    }
    // Held across the fetch so concurrent requests wait for one robots.txt, not fetch many.
    let mut slot = host.robots.lock().await;
    if !slot.as_ref().is_some_and(RobotsEntry::is_fresh) {
        let entry = fetch_robots(f, url, s, deadline.min(Instant::now() + ROBOTS_TIMEOUT)).await?;
        host.set_crawl_delay(entry.crawl_delay(s.crawl_delay_cap));
        *slot = Some(entry);
    }
    slot.as_ref().map_or(Ok(()), |r| r.check(url))
}

/// Fetches robots.txt for `url`'s origin. The only error is the guard refusing that origin
/// itself: then the request is refused, not the host marked unavailable.
async fn fetch_robots(f: &Fetcher, url: &Url, s: &Settings, deadline: Instant) -> Result<RobotsEntry, FetchError> {
    let origin = url.origin();
    let entry = match robots_hops(f, url, s, deadline).await {
        Err(FetchError::Refused { url: refused, reason })
            if Url::parse(&refused).is_ok_and(|u| u.origin() == origin) =>
        {
            return Err(FetchError::Refused { url: url.to_string(), reason });
        }
        // Nothing was asked of robots.txt: the request is not sent either.
        Err(e @ FetchError::Parked { .. }) => return Err(e),
        Err(e) => RobotsEntry::unavailable(crate::error::chain(&e).to_string()),
        Ok(entry) => entry,
    };
    Ok(entry)
}

async fn robots_hops(f: &Fetcher, url: &Url, s: &Settings, deadline: Instant) -> Result<RobotsEntry, FetchError> {
    let policy = GuardPolicy::from_settings(s);
    let client = f.client(&policy, s.connect_timeout)?;
    let mut current = url.join("/robots.txt").map_err(|e| invalid(url, e))?;
    let mode = Mode { max_bytes: u64::MAX, decoding: Decoding::Sniff, accept_gzip: true };
    for _hop in 0..=ROBOTS_REDIRECTS {
        policy.check_url(&current)?;
        let host = f.host_for_turn(&current, s).await;
        let turn = host.acquire(current.as_str(), s.max_backoff, deadline).await?;
        let resp = send(&client, &host, &current, s, &mode, None, turn.launch, deadline).await?;
        if resp.status().is_redirection() {
            current = redirect_target(&current, &resp)?;
            continue;
        }
        if let Some(e @ FetchError::Parked { .. }) = park_for(&resp, &host, s) {
            return Err(e);
        }
        return Ok(robots_outcome(f, resp, host, turn.permit, s, deadline).await);
    }
    // RFC 9309 §2.3.1.2: too many redirects may be treated as unavailable (4xx): no rules.
    Ok(RobotsEntry::allow_all())
}

async fn robots_outcome(
    f: &Fetcher,
    resp: reqwest::Response,
    host: Arc<Host>,
    permit: OwnedSemaphorePermit,
    s: &Settings,
    deadline: Instant,
) -> RobotsEntry {
    let status = resp.status();
    if status.is_client_error() {
        host.record_success();
        return RobotsEntry::allow_all();
    }
    if !status.is_success() {
        Counters::add(&host.counters.failures, 1);
        return RobotsEntry::unavailable(format!("robots.txt answered HTTP {}", status.as_u16()));
    }
    host.record_success();
    let decoding = decoding_for(&resp, Decoding::Sniff).unwrap_or(Decoding::Identity);
    let mut body = Body::new(resp, decoding, body_limits(s, u64::MAX, deadline), host, permit);
    let mut text = Vec::new();
    // Bounded by ROBOTS_MAX_BYTES: the RFC lets crawlers ignore the rest.
    while text.len() < ROBOTS_MAX_BYTES {
        match body.chunk().await {
            Ok(Some(c)) => text.extend_from_slice(&c),
            Ok(None) => break,
            Err(e) => return RobotsEntry::unavailable(crate::error::chain(&e).to_string()),
        }
    }
    RobotsEntry::parse(&f.inner.agent, &text)
}
