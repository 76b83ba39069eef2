//! The harvester: keeps the store in sync with every upstream Source.
//!
//! # Architecture
//! - [`daemon`]: one pass over the sources ([`harvest_once`]), each source in its own task,
//!   with its status kept in the store; `service`: the long-running service ([`Harvester`],
//!   [`run`]) and what the operator steers it by (poll now, pause, reload).
//! - `ctx`: what a pass shares ([`Ctx`](ctx::Ctx)) and the error that ends it ([`HarvestError`]).
//! - [`mod@discover`]: from whatever URL the operator gave to a Capability List and its
//!   capabilities (spec §6); `index`: the walk of list indexes down to their entries;
//!   `document`: fetching and opening one document for both.
//! - `sync`: the sync strategies, each a pure plan and a short executor — a baseline from
//!   the Resource List or a Resource Dump, incremental polls of Change Lists and Change Dumps,
//!   the retry of recorded failures, and the [`audit`].
//! - `listed`: what a list entry says about a resource, in the form the store records;
//!   `authority`: which URIs a Source speaks for.
//! - `resource`: one bitstream fetched, verified and stored as it streams in; `commit`: the
//!   batched commits of records, change events and source state.
//! - [`dump`]: reading Resource and Change Dump packages (spec §11, §13) into the store.
//! - [`push`]: subscribing to the Sources' change notifications (WebSub) and applying them
//!   through the same path as Change List entries.
//! - `report`, `metrics`: what a pass did, for the caller, the dashboard and `/metrics`.
//! - `parks`: origins parked by `Retry-After`, kept in the store across restarts, and the
//!   sources they keep from being polled; `moves`: configured URLs that moved for good.
//!
//! Every request goes through [`crate::fetch`]. Depends on [`crate::model`],
//! [`crate::config`], [`crate::store`] and [`crate::naming`]; nothing but the binary depends
//! on it, and it never depends on the publisher or the web server.

mod authority;
mod commit;
mod ctx;
pub mod daemon;
pub mod discover;
mod document;
pub mod dump;
mod index;
mod listed;
mod metrics;
mod moves;
mod oai_error;
mod parks;
mod push;
mod report;
mod resource;
mod service;
mod sync;

pub use authority::within_authority;
pub use ctx::HarvestError;
pub use daemon::{harvest_once, harvest_once_until, run, run_with_push};
pub use discover::{Capabilities, Channel, Discovered, Route, discover};
pub use document::DiscoverError;
pub use index::{IndexWalker, WalkLimits};
pub use oai_error::OaiHarvestError;
pub use parks::honour_parks;
pub use push::Push;
pub use report::{NoProgress, Progress, ResourceOutcome, SourceReport, Summary};
pub use service::{Harvester, PauseState, Runner, SourceChanges, SteerError};
pub use sync::audit;
