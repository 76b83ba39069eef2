//! `tributary provenance` and the live check behind `--verify` / `&verify=1`.
//!
//! The lookup itself is [`crate::publish::provenance`], pure over the store; this module adds
//! what needs the network — fetching an origin and hashing what comes back — and the command's
//! output. It sits beside `check` at the application level: the web server uses it for
//! `&verify=1`, the publisher never does.
//!
//! The fetch is a plain reqwest client for now: http(s) only, bounded redirects, timeouts, a
//! size cap, and (unless allowed) no IP-literal hosts in private, loopback or link-local
//! ranges. It must move to the harvester's polite fetcher once that is merged, which adds
//! per-host rate limits, robots.txt and the full SSRF guard (hostnames resolving to private
//! addresses are not caught here).

use std::net::IpAddr;
use std::time::Duration;

use md5::Md5;
use sha1::Sha1;
use sha2::{Digest as _, Sha256};

use crate::naming::Naming;
use crate::publish::provenance::{Fetched, Provenance, Query, compare, lookup};
use crate::store::{Store, StoreError};

/// Why a provenance command could not answer (a query that matches nothing is not an error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProvenanceError {
    /// The query is neither a URI nor `sha-256:<hex>`.
    #[error("{0}")]
    Query(String),
    /// The store could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The HTTP client or runtime could not be set up.
    #[error("cannot set up the origin check: {0}")]
    Setup(String),
}

/// Fetches origins for the live check.
#[derive(Debug, Clone)]
pub struct OriginChecker {
    client: reqwest::Client,
    allow_private: bool,
    max_bytes: u64,
}

impl OriginChecker {
    /// A checker sending `user_agent`; `allow_private` lets it fetch loopback, private and
    /// link-local IP literals (tests, intranets — an operator decision).
    ///
    /// # Errors
    /// [`ProvenanceError::Setup`] when the HTTP client cannot be built.
    pub fn new(user_agent: &str, allow_private: bool) -> Result<Self, ProvenanceError> {
        let policy = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= 5 {
                attempt.error("more than 5 redirects")
            } else if let Some(why) = refused(attempt.url(), allow_private) {
                attempt.error(why)
            } else {
                attempt.follow()
            }
        });
        let client = reqwest::Client::builder()
            .user_agent(user_agent)
            .redirect(policy)
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| ProvenanceError::Setup(e.to_string()))?;
        Ok(OriginChecker { client, allow_private, max_bytes: 1 << 30 })
    }

    /// Fetches `url` and digests the body; never fails, reporting problems in the result.
    pub async fn fetch(&self, url: &str) -> Fetched {
        let mut out = Fetched::default();
        let parsed = match url::Url::parse(url) {
            Ok(u) => u,
            Err(e) => return Fetched { error: Some(format!("not a URL: {e}")), ..out },
        };
        if let Some(why) = refused(&parsed, self.allow_private) {
            return Fetched { error: Some(why.to_owned()), ..out };
        }
        let resp = match self.client.get(parsed).send().await {
            Ok(r) => r,
            Err(e) => return Fetched { error: Some(e.to_string()), ..out },
        };
        out.status = Some(resp.status().as_u16());
        if !resp.status().is_success() {
            out.error = Some(format!("HTTP {}", resp.status()));
            return out;
        }
        self.digest_body(resp, out).await
    }

    /// Reads the body, hashing as it goes, up to the size cap.
    async fn digest_body(&self, mut resp: reqwest::Response, mut out: Fetched) -> Fetched {
        let (mut sha256, mut md5, mut sha1) = (Sha256::new(), Md5::new(), Sha1::new());
        loop {
            match resp.chunk().await {
                Ok(Some(chunk)) => {
                    out.length += chunk.len() as u64;
                    if out.length > self.max_bytes {
                        out.error = Some(format!("larger than {} bytes", self.max_bytes));
                        return out;
                    }
                    sha256.update(&chunk);
                    md5.update(&chunk);
                    sha1.update(&chunk);
                }
                Ok(None) => break,
                Err(e) => {
                    out.error = Some(e.to_string());
                    return out;
                }
            }
        }
        out.sha256 = Some(hex::encode(sha256.finalize()));
        out.md5 = Some(hex::encode(md5.finalize()));
        out.sha1 = Some(hex::encode(sha1.finalize()));
        out.complete = true;
        out
    }

    /// Checks the origin of every resource in `p`, one after another.
    pub async fn verify(&self, p: &mut Provenance) {
        for r in &mut p.resources {
            let fetched = self.fetch(&r.origin.href).await;
            r.verify = Some(compare(r, fetched));
        }
    }
}

/// Why the checker will not fetch `url`, if it will not.
fn refused(url: &url::Url, allow_private: bool) -> Option<&'static str> {
    if !matches!(url.scheme(), "http" | "https") {
        return Some("only http and https origins are checked");
    }
    if allow_private {
        return None;
    }
    let private = match url.host() {
        Some(url::Host::Ipv4(ip)) => !is_public(IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => !is_public(IpAddr::V6(ip)),
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost") || d.ends_with(".localhost"),
        None => true,
    };
    private.then_some("the origin is a loopback, private or link-local address")
}

fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_documentation()
                || v4.octets()[0] == 100 && (v4.octets()[1] & 0xC0) == 64)
        }
        IpAddr::V6(v6) => {
            let seg = v6.segments()[0];
            !(v6.is_loopback() || v6.is_unspecified() || (seg & 0xFE00) == 0xFC00 || (seg & 0xFFC0) == 0xFE80)
                && v6.to_ipv4_mapped().is_none_or(|v4| is_public(IpAddr::V4(v4)))
        }
    }
}

/// `tributary provenance <URI|sha-256:…> [--verify] [--json]`: the answer as text (or JSON)
/// and whether anything matched (the command exits 1 when not). With `verify`, each origin is
/// fetched once; the operator asked for it explicitly, so private addresses are allowed.
///
/// Call it from synchronous code: with `verify` it runs its own small tokio runtime.
///
/// # Errors
/// [`ProvenanceError::Query`] for a malformed query, [`ProvenanceError::Store`],
/// [`ProvenanceError::Setup`].
pub fn provenance_cli(
    store: &Store,
    naming: &Naming,
    query: &str,
    verify: bool,
    json: bool,
) -> Result<(String, bool), ProvenanceError> {
    let query = Query::parse(query).map_err(ProvenanceError::Query)?;
    let mut answer = lookup(store, naming, &query)?;
    let found = !answer.resources.is_empty();
    if verify && found {
        let checker =
            OriginChecker::new(concat!("Tributary/", env!("CARGO_PKG_VERSION"), " (provenance check)"), true)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ProvenanceError::Setup(e.to_string()))?;
        rt.block_on(checker.verify(&mut answer));
    }
    let text = if json { to_json(&answer) } else { answer.to_string() };
    Ok((text, found))
}

/// The JSON form shared by the command and `/provenance`; a miss carries an `error` message.
pub fn to_json(p: &Provenance) -> String {
    let mut v = serde_json::to_value(p).unwrap_or_default();
    if p.resources.is_empty()
        && let Some(obj) = v.as_object_mut()
    {
        obj.insert("error".into(), format!("no republished resource matches {}", p.query).into());
    }
    serde_json::to_string_pretty(&v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_odd_origins_are_refused_unless_allowed() {
        let u = |s: &str| url::Url::parse(s).unwrap();
        for bad in [
            "http://127.0.0.1/x",
            "http://10.1.2.3/",
            "http://[::1]/",
            "http://localhost:80/",
            "http://169.254.169.254/",
        ] {
            assert!(refused(&u(bad), false).is_some(), "{bad}");
            assert!(refused(&u(bad), true).is_none(), "{bad}");
        }
        assert!(refused(&u("ftp://example.org/x"), true).is_some());
        assert!(refused(&u("https://example.org/x"), false).is_none());
        assert!(refused(&u("http://100.64.0.1/"), false).is_some(), "carrier-grade NAT");
    }
}
