//! Reading a feed (stub until the reader lands).
use std::io::BufRead;

use super::Feed;

/// Caps on what a feed may contain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedLimits {
    /// Bytes of the whole (decoded) document.
    pub max_bytes: u64,
    /// Items.
    pub max_items: usize,
}

impl Default for FeedLimits {
    fn default() -> Self {
        FeedLimits { max_bytes: 64 << 20, max_items: 100_000 }
    }
}

/// Why a feed was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FeedError {
    /// The XML is not well-formed.
    #[error("{document}: malformed XML: {detail}")]
    Malformed {
        /// URL or path.
        document: String,
        /// Parser detail.
        detail: String,
    },
}

/// Reads a feed.
///
/// # Errors
/// A [`FeedError`].
pub fn read_feed<R: BufRead>(_input: R, _document: &str, _limits: &FeedLimits) -> Result<Feed, FeedError> {
    unimplemented!("reader")
}
