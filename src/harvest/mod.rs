//! The harvester: everything that talks to upstream Sources.
//!
//! # Architecture
//! - [`fetch`]: the polite fetcher, the only way out to the network: per-host rate limits,
//!   concurrency caps, backoff and `Retry-After`, robots.txt, the SSRF guard, redirects,
//!   conditional GET, gzip, size caps and timeouts. Typed [`FetchError`]s.
//! - [`mod@discover`]: from whatever URL the operator gave to a Capability List and its
//!   capabilities (spec §6), and the walk of list indexes down to their entries.
//!
//! Depends on [`crate::model`] (pure parsing) and [`crate::config`]; the store and the
//! publisher never depend on it.

mod body;
pub mod discover;
mod error;
pub mod fetch;
mod guard;
mod host;
mod index;
mod request;
mod robots;

pub use discover::{Capabilities, DiscoverError, Discovered, IndexWalker, Route, WalkLimits, discover};
pub use error::{FetchError, Phase};
pub use fetch::{Document, FetchResponse, Fetched, Fetcher, FetcherOptions, MAX_REDIRECTS, Validators};
pub use guard::{non_public_reason, within_authority};
pub use host::{HostCounters, HostSnapshot};
pub use robots::RobotsStatus;
