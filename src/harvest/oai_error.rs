//! Why an OAI-PMH request or list failed. Its own file, below `ctx`, so that
//! [`HarvestError`](super::HarvestError) can carry it while the OAI strategy sits above both.

use crate::fetch::FetchError;
use crate::model::oai::{OaiError, OaiReadError};

/// What went wrong talking to an OAI-PMH repository. Protocol errors are shown by their own
/// codes (`badArgument`, `cannotDisseminateFormat`…), as the repository sent them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OaiHarvestError {
    /// The request failed (after the fetcher's retries; a 403 is never retried).
    #[error("{verb} failed")]
    Fetch {
        /// The verb.
        verb: &'static str,
        /// Why.
        #[source]
        source: FetchError,
    },
    /// The response could not be read: nothing of it was applied.
    #[error("{verb}: unusable response")]
    Read {
        /// The verb.
        verb: &'static str,
        /// Why.
        #[source]
        source: OaiReadError,
    },
    /// The repository answered with OAI-PMH errors.
    #[error("{verb} {url}: the repository answered {}", list(errors))]
    Protocol {
        /// The verb.
        verb: &'static str,
        /// The request.
        url: String,
        /// The errors, as sent.
        errors: Vec<OaiError>,
    },
    /// The configured `metadata_prefix` is not among the repository's formats.
    #[error("the repository does not offer metadataPrefix {prefix:?}; it offers: {}", offered.join(", "))]
    FormatNotOffered {
        /// The configured prefix.
        prefix: String,
        /// What ListMetadataFormats named.
        offered: Vec<String>,
    },
    /// A list that would not end: the same token twice, a run of empty pages, too many
    /// requests, or `badResumptionToken` again after restarts.
    #[error("ListRecords stopped: {why} (after {requests} requests)")]
    Loop {
        /// Which guard stopped it.
        why: String,
        /// Requests the list made.
        requests: u32,
    },
    /// The list ended with fewer records than its `completeListSize` declared: what was read
    /// is kept, the pass is partial and deletes nothing.
    #[error("ListRecords ended after {received} records, but the repository declared completeListSize {declared}")]
    Short {
        /// `completeListSize`.
        declared: u64,
        /// Records (and deleted headers) received.
        received: u64,
    },
    /// Identify did not say what harvesting needs.
    #[error("Identify: {0}")]
    Identify(String),
}

fn list(errors: &[OaiError]) -> String {
    errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

impl OaiHarvestError {
    /// Whether the repository answered with this protocol error code.
    pub fn has_code(&self, code: &str) -> bool {
        matches!(self, OaiHarvestError::Protocol { errors, .. } if errors.iter().any(|e| e.code == code))
    }
}
