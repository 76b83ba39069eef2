//! One OAI-PMH request through the polite fetcher (robots.txt, the host's rate limit and
//! concurrency, the address guard, retries with backoff and `Retry-After`, metrics), and its
//! response read off the async runtime.

use url::Url;

use crate::config::Source;
use crate::fetch::Fetched;
use crate::harvest::ctx::{Ctx, join_error};
use crate::harvest::oai_error::OaiHarvestError;
use crate::model::oai::{OaiResponse, read_response};

/// `base` with the request's arguments, form-encoded: a resumptionToken is opaque and often
/// holds `%3D` or `&`, so it is escaped whole (guidelines §6.1).
pub(super) fn verb_url(base: &Url, args: &[(&str, &str)]) -> Url {
    let mut u = base.clone();
    u.query_pairs_mut().extend_pairs(args);
    u
}

/// The record's own dereferenceable URL: the origin Tributary names it by and its `via`.
pub(super) fn get_record_url(base: &Url, prefix: &str, identifier: &str) -> Url {
    verb_url(base, &[("verb", "GetRecord"), ("metadataPrefix", prefix), ("identifier", identifier)])
}

/// The stable URI Tributary gives an OAI-PMH set: the list of its records.
pub(super) fn set_url(base: &Url, prefix: &str, spec: &str) -> Url {
    verb_url(base, &[("verb", "ListRecords"), ("metadataPrefix", prefix), ("set", spec)])
}

/// GETs `url` and reads it as an OAI-PMH response. Protocol errors come back inside the
/// response: which of them are normal (`noRecordsMatch`) is the caller's to say.
pub(super) async fn call(
    ctx: &Ctx,
    source: &Source,
    verb: &'static str,
    url: &Url,
) -> Result<OaiResponse, OaiHarvestError> {
    call_moved(ctx, source, verb, url).await.map(|(r, _)| r)
}

/// [`call`], also saying where `url` moved for good, when it answered a permanent redirect.
pub(super) async fn call_moved(
    ctx: &Ctx,
    source: &Source,
    verb: &'static str,
    url: &Url,
) -> Result<(OaiResponse, Option<Url>), OaiHarvestError> {
    let doc = match ctx.fetcher.get_document(url, &source.settings, None).await {
        Ok(Fetched::Modified(d)) => d,
        Ok(Fetched::NotModified) => {
            let source = crate::fetch::FetchError::Status { url: url.to_string(), status: 304 };
            return Err(OaiHarvestError::Fetch { verb, source });
        }
        Err(source) => return Err(OaiHarvestError::Fetch { verb, source }),
    };
    let (name, moved, body) = (doc.url.to_string(), doc.moved, doc.body);
    let parsed = tokio::task::spawn_blocking(move || read_response(&body, &name))
        .await
        .map_err(|e| OaiHarvestError::Identify(format!("the reader stopped: {}", join_error(e))))?;
    parsed.map(|r| (r, moved)).map_err(|source| OaiHarvestError::Read { verb, source })
}

/// [`call`], with any protocol error an error.
pub(super) async fn call_ok(
    ctx: &Ctx,
    source: &Source,
    verb: &'static str,
    url: &Url,
) -> Result<OaiResponse, OaiHarvestError> {
    answered(call(ctx, source, verb, url).await?, verb, url)
}

/// `r`, unless it holds a protocol error.
pub(super) fn answered(r: OaiResponse, verb: &'static str, url: &Url) -> Result<OaiResponse, OaiHarvestError> {
    if !r.errors.is_empty() {
        return Err(OaiHarvestError::Protocol { verb, url: url.to_string(), errors: r.errors });
    }
    Ok(r)
}
