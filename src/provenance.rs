//! `tributary provenance` and the live check behind `--verify` / `&verify=1`.
//!
//! The lookup itself is [`crate::publish::provenance`], pure over the store; this module adds
//! what needs the network — fetching an origin and hashing what comes back — and the command's
//! output. It sits beside `check` at the application level: the web server uses it for
//! `&verify=1`, the publisher never does.
//!
//! The origin is fetched through the harvester's polite [`Fetcher`], with the settings of the
//! source the resource came from: the same per-host rate limit, robots.txt, SSRF guard (a
//! source's `allow_private` decides whether its origins may be on private addresses), size
//! cap and timeouts as harvesting. In `tributary run` the web server shares the harvester's
//! fetcher, so a burst of `&verify=1` requests queues behind the harvest's own turns at the
//! origin host instead of adding to them.

use std::collections::HashMap;
use std::sync::Arc;

use md5::Md5;
use sha1::Sha1;
use sha2::{Digest as _, Sha256};

use crate::config::{Config, Settings};
use crate::fetch::{FetchResponse, Fetched as Response, Fetcher};
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
}

/// Fetches origins for the live check. Cheap to clone.
#[derive(Clone)]
pub struct OriginChecker {
    fetcher: Fetcher,
    defaults: Arc<Settings>,
    per_source: Arc<HashMap<String, Settings>>,
}

impl std::fmt::Debug for OriginChecker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OriginChecker").field("sources", &self.per_source.len()).finish_non_exhaustive()
    }
}

impl OriginChecker {
    /// A checker fetching through `fetcher` with `defaults` for every source.
    pub fn new(fetcher: Fetcher, defaults: Settings) -> Self {
        OriginChecker { fetcher, defaults: Arc::new(defaults), per_source: Arc::default() }
    }

    /// A checker using each configured source's own settings (and the defaults for resources
    /// of sources no longer configured).
    pub fn for_config(fetcher: Fetcher, config: &Config) -> Self {
        let per_source = config.sources.iter().map(|s| (s.id.clone(), s.settings.clone())).collect();
        OriginChecker { fetcher, defaults: Arc::new(config.defaults.clone()), per_source: Arc::new(per_source) }
    }

    /// The fetcher the checks go through.
    pub fn fetcher(&self) -> &Fetcher {
        &self.fetcher
    }

    /// Fetches `url` on behalf of `source` and digests the body; never fails, reporting
    /// problems in the result.
    pub async fn fetch(&self, url: &str, source: &str) -> Fetched {
        let out = Fetched::default();
        let parsed = match url::Url::parse(url) {
            Ok(u) => u,
            Err(e) => return Fetched { error: Some(format!("not a URL: {e}")), ..out },
        };
        let settings = self.per_source.get(source).unwrap_or(&self.defaults);
        match self.fetcher.get_stream(&parsed, settings, None).await {
            Ok(Response::Modified(resp)) => digest_body(resp, out).await,
            // Without validators a 304 is the server's mistake; it is still not a match.
            Ok(Response::NotModified) => {
                Fetched { status: Some(304), error: Some("HTTP 304 without a request for it".into()), ..out }
            }
            Err(e) => Fetched { status: e.status(), error: Some(crate::error::chain(&e).to_string()), ..out },
        }
    }

    /// Checks the origin of every resource in `p`, one after another.
    pub async fn verify(&self, p: &mut Provenance) {
        for r in &mut p.resources {
            let fetched = self.fetch(&r.origin.href, &r.source).await;
            r.verify = Some(compare(r, fetched));
        }
    }
}

/// Reads the body, hashing as it goes; the fetcher enforces the size cap and timeouts.
async fn digest_body(mut resp: FetchResponse, mut out: Fetched) -> Fetched {
    out.status = Some(resp.status);
    let (mut sha256, mut md5, mut sha1) = (Sha256::new(), Md5::new(), Sha1::new());
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                out.length += chunk.len() as u64;
                sha256.update(&chunk);
                md5.update(&chunk);
                sha1.update(&chunk);
            }
            Ok(None) => break,
            Err(e) => {
                out.error = Some(crate::error::chain(&e).to_string());
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

/// `tributary provenance <URI|sha-256:…> [--verify] [--json]`: the answer as text (or JSON)
/// and whether anything matched (the command exits 1 when not). With a `checker`, each origin
/// is fetched once, politely, with its source's settings, on `rt`: a multi-thread runtime
/// (whose workers drive its I/O), called from a thread outside it — the command line's, or a
/// control command's.
///
/// # Errors
/// [`ProvenanceError::Query`] for a malformed query, [`ProvenanceError::Store`].
pub fn provenance_cli(
    store: &Store,
    naming: &Naming,
    query: &str,
    checker: Option<(&OriginChecker, &tokio::runtime::Handle)>,
    json: bool,
) -> Result<(String, bool), ProvenanceError> {
    let query = Query::parse(query).map_err(ProvenanceError::Query)?;
    let mut answer = lookup(store, naming, &query)?;
    let found = !answer.resources.is_empty();
    if let Some((checker, rt)) = checker.filter(|_| found) {
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
