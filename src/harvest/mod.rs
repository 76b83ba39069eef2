//! The harvester: everything that talks to upstream Sources.
//!
//! # Architecture
//! - [`fetch`]: the polite fetcher, the only way out to the network: per-host rate limits,
//!   concurrency caps, backoff and `Retry-After`, robots.txt, the SSRF guard, redirects,
//!   conditional GET, gzip, size caps and timeouts. Typed [`FetchError`]s.
//! - [`mod@discover`]: from whatever URL the operator gave to a Capability List and its
//!   capabilities (spec §6), and the walk of list indexes down to their entries.
//! - [`daemon`]: one pass ([`harvest_once`]) or the long-running service ([`run`]) with
//!   per-source status. What a pass does per source is `sync`'s choice: a baseline
//!   (`baseline` from the Resource List, `dump_sync` from a Resource Dump; verified streaming
//!   in `resource`, batched commits in `commit`), then incremental polls of the Change Lists
//!   (`incremental`, position rules in `changes`), re-baselining after a gap. A resource
//!   that cannot be stored is recorded as a failure in the store; `retry` tries the failures
//!   of a source that follows changes again at each poll.
//! - [`dump`]: Resource and Change Dumps (spec §11, §13): ZIP packages streamed into the store.
//! - [`audit`]: compares the store with a Source's current Resource List (spec §5.2).
//!
//! Depends on [`crate::model`] (pure parsing), [`crate::config`], [`crate::store`] and
//! [`crate::naming`]; never on the publisher or the web server, and neither the store nor the
//! publisher depends on it.

pub mod audit;
mod baseline;
mod body;
mod change_dump_sync;
mod changes;
mod commit;
pub mod daemon;
pub mod discover;
pub mod dump;
mod dump_sync;
mod error;
pub mod fetch;
mod guard;
mod host;
mod incremental;
mod index;
mod listed;
mod metrics;
mod report;
mod request;
mod resource;
mod retry;
mod robots;
mod sync;

pub use daemon::{
    HarvestError, NoProgress, Progress, ResourceOutcome, SourceReport, Summary, harvest_once, harvest_once_until, run,
};
pub use discover::{Capabilities, DiscoverError, Discovered, IndexWalker, Route, WalkLimits, discover};
pub use error::{FetchError, Phase};
pub use fetch::{Document, FetchResponse, Fetched, Fetcher, FetcherOptions, MAX_REDIRECTS, Validators};
pub use guard::{non_public_reason, within_authority};
pub use host::{HostCounters, HostSnapshot};
pub use robots::RobotsStatus;
