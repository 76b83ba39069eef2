//! The one error type of every network access, so callers can tell a refusal (never retry)
//! from an upstream fault (retry later) from a broken body (never treat as complete).

use std::fmt;

/// Which deadline expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// TCP or TLS connection set-up.
    Connect,
    /// Waiting for the response head after sending the request.
    Header,
    /// No body bytes for longer than the idle timeout.
    Idle,
    /// The body arrived more slowly than the minimum throughput.
    Throughput,
    /// The whole request, redirects and body included.
    Total,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Connect => "connect",
            Phase::Header => "response header",
            Phase::Idle => "idle body read",
            Phase::Throughput => "minimum throughput",
            Phase::Total => "total",
        })
    }
}

/// Why a fetch failed. Every variant carries the URL it concerns (for a redirect, the hop).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// A deadline expired.
    #[error("{url}: {phase} timeout")]
    Timeout {
        /// The URL.
        url: String,
        /// Which deadline.
        phase: Phase,
    },
    /// The body is larger than allowed (never truncated to fit).
    #[error("{url}: response exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The URL.
        url: String,
        /// The limit in bytes.
        limit: u64,
    },
    /// The body ended before it was complete (Content-Length not reached, chunked encoding
    /// cut off, connection reset, gzip stream incomplete).
    #[error("{url}: body cut short: {detail}")]
    Truncated {
        /// The URL.
        url: String,
        /// What the transport or decoder said.
        detail: String,
    },
    /// Gzip output grew past the size limit or the allowed ratio.
    #[error("{url}: decompressed body exceeds {limit} bytes (gzip bomb?)")]
    DecompressionBomb {
        /// The URL.
        url: String,
        /// The limit in bytes that was crossed.
        limit: u64,
    },
    /// The gzip data is corrupt.
    #[error("{url}: cannot decompress body: {detail}")]
    Decode {
        /// The URL.
        url: String,
        /// Decoder detail.
        detail: String,
    },
    /// The server answered with a status that is not a success (after any retries).
    #[error("{url}: HTTP status {status}")]
    Status {
        /// The URL.
        url: String,
        /// The status code.
        status: u16,
    },
    /// `401` or `403`: never retried. With credentials sent, they were refused; without, the
    /// server refused access.
    #[error("{url}: HTTP {status}: {}", if *credentials { "credentials refused" } else { "the server refused access" })]
    Denied {
        /// The URL.
        url: String,
        /// 401 or 403.
        status: u16,
        /// Whether the request carried the source's credentials.
        credentials: bool,
    },
    /// The origin asked (`Retry-After`) not to be contacted before a time that is further off
    /// than a request waits: nothing was sent.
    #[error("{url}: origin {origin} asked us to wait until {}", super::park::utc(*until))]
    Parked {
        /// The URL.
        url: String,
        /// `scheme://host[:port]`.
        origin: String,
        /// Until when.
        until: std::time::SystemTime,
    },
    /// robots.txt disallows the URL for our user agent.
    #[error("{url}: disallowed by robots.txt")]
    RobotsDisallowed {
        /// The URL.
        url: String,
    },
    /// robots.txt could not be fetched (5xx or unreachable): RFC 9309 says assume disallow.
    #[error("{url}: robots.txt unavailable ({detail}), treating the host as disallowed")]
    RobotsUnavailable {
        /// The URL.
        url: String,
        /// Why robots.txt was unavailable.
        detail: String,
    },
    /// The SSRF guard refused the target.
    #[error("{url}: refused: {reason}")]
    Refused {
        /// The URL.
        url: String,
        /// Which rule refused it.
        reason: String,
    },
    /// More than the allowed number of redirects.
    #[error("{url}: more than {max} redirects")]
    TooManyRedirects {
        /// The URL of the last hop.
        url: String,
        /// The limit.
        max: usize,
    },
    /// A scheme other than http or https (e.g. a redirect to `file://`).
    #[error("{url}: only http and https URLs are fetched")]
    BadScheme {
        /// The URL.
        url: String,
    },
    /// A redirect without a usable `Location`, or an unparsable URL.
    #[error("{url}: invalid URL or redirect: {detail}")]
    InvalidUrl {
        /// The URL.
        url: String,
        /// What was wrong.
        detail: String,
    },
    /// The connection could not be made or broke before a response arrived.
    #[error("{url}: connection failed")]
    Connect {
        /// The URL.
        url: String,
        /// The transport error.
        #[source]
        source: reqwest::Error,
    },
    /// The response could not be read as HTTP, or the connection broke before its head.
    #[error("{url}: HTTP protocol error")]
    Protocol {
        /// The URL.
        url: String,
        /// The transport error.
        #[source]
        source: reqwest::Error,
    },
    /// The HTTP client could not be set up (e.g. a user agent that is not a valid header).
    #[error("cannot set up the HTTP client")]
    Setup(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl FetchError {
    /// The URL the error concerns (empty for [`FetchError::Setup`]).
    pub fn url(&self) -> &str {
        match self {
            FetchError::Timeout { url, .. }
            | FetchError::TooLarge { url, .. }
            | FetchError::Truncated { url, .. }
            | FetchError::DecompressionBomb { url, .. }
            | FetchError::Decode { url, .. }
            | FetchError::Status { url, .. }
            | FetchError::Denied { url, .. }
            | FetchError::Parked { url, .. }
            | FetchError::RobotsDisallowed { url }
            | FetchError::RobotsUnavailable { url, .. }
            | FetchError::Refused { url, .. }
            | FetchError::TooManyRedirects { url, .. }
            | FetchError::BadScheme { url }
            | FetchError::InvalidUrl { url, .. }
            | FetchError::Connect { url, .. }
            | FetchError::Protocol { url, .. } => url,
            FetchError::Setup(_) => "",
        }
    }

    /// True when trying again later may succeed (an upstream or network fault), false for
    /// refusals and for content that will not change by asking again.
    pub fn is_transient(&self) -> bool {
        match self {
            FetchError::Timeout { .. }
            | FetchError::Truncated { .. }
            | FetchError::Connect { .. }
            | FetchError::Protocol { .. }
            | FetchError::RobotsUnavailable { .. }
            | FetchError::Parked { .. } => true,
            FetchError::Status { status, .. } => *status >= 500 || *status == 429 || *status == 408,
            _ => false,
        }
    }

    /// The HTTP status the server answered, when it answered with a failure.
    pub fn status(&self) -> Option<u16> {
        match self {
            FetchError::Status { status, .. } | FetchError::Denied { status, .. } => Some(*status),
            _ => None,
        }
    }
}
