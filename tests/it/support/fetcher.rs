//! The fetcher and the per-source settings that the fetch, discovery, dump and audit tests
//! start from: 127.0.0.1 allowed (where the test upstreams listen), the rate limit lifted and
//! no transport retries, so every request a test counts is one the code under test chose to
//! make. A test that needs other values overrides those fields only.

use std::num::NonZeroU32;
use std::time::Duration;

use tributary::config::{Rate, Settings};
use tributary::fetch::{Fetcher, FetcherOptions};

/// The User-Agent of every test fetcher and test configuration.
pub(crate) const USER_AGENT: &str = "TributaryTest/0.1 (+mailto:test@example.org)";

/// A fetcher's options, as the tests announce themselves.
pub(crate) fn options() -> FetcherOptions {
    FetcherOptions::new(USER_AGENT)
}

/// A fetcher with [`options`].
pub(crate) fn fetcher() -> Fetcher {
    Fetcher::new(options()).unwrap()
}

/// See the module docs: four requests at once, 10 s for each.
pub(crate) fn settings() -> Settings {
    Settings {
        allow_private: true,
        rate: Rate::Unlimited,
        concurrency: NonZeroU32::new(4).unwrap(),
        max_retries: 0,
        total_timeout: Duration::from_secs(10),
        ..Settings::default()
    }
}
