//! `tributary simulate`: a changing ResourceSync Source on a loopback port, for the demo, the
//! tests and the benchmarks.
//!
//! It follows the simulation model the spec's authors used (seed paper: a Source whose
//! resources change at a configured interval, Destinations polling at theirs): N resources of
//! configurable sizes with deterministic content, creates/updates/deletes at a configured rate
//! and mix, and every document a Destination needs — Source Description, Capability List,
//! Resource List (an index past the limit), a Change List Index of closed lists plus one open
//! list, an optional Resource Dump — each passing `tributary check` without errors. Optional
//! `via` links make it pose as an upstream aggregator (§14.8), optional inherited-style links
//! give a link policy something to filter.
//!
//! # Architecture
//! - `config`: what to simulate, validated once.
//! - `clock`, `content`: time and bytes, both reproducible from the seed.
//! - `state`: the mutable Source and the only code that changes it.
//! - `render`, `dump`: documents from a borrowed state, via the model's writer.
//! - `sim`: [`Simulator`], the shared handle (lock, manual controls, ticker, views).
//! - `push`: with push on, the Source's own WebSub hub and change-notification channel, built
//!   from [`crate::websub`]'s store-agnostic parts.
//! - `http`: the axum router; `cli`: the `simulate` subcommand's arguments and entry point;
//!   `configured`: the `[[simulate]]` tables of `sources.toml`, started by `run` and `harvest`.
//!
//! It depends on the model, the configuration's plain `[[simulate]]` values, tokio/axum, and
//! for push on [`crate::websub`] and its client ([`crate::fetch::Outbound`]); nothing in the
//! aggregator depends on it, so harvest and publish are tested against it exactly as against a
//! remote Source.

pub mod cli;
mod clock;
mod config;
pub mod configured;
mod content;
mod dump;
mod http;
mod push;
mod render;
mod sim;
mod state;

use std::net::SocketAddr;

pub use config::{ChangeMix, ClockMode, Rollover, SimConfig};
pub use http::{router, serve};
pub use push::{ATTEMPTS, LEASE_DEFAULT, LEASE_MAX, LEASE_MIN, SubscriberInfo};
pub use sim::{ChangeEvent, ResourceInfo, Simulator, Ticker};

/// Path of the Source Description, relative to the base URL.
pub const SOURCE_DESCRIPTION_PATH: &str = render::SOURCE_DESCRIPTION;

/// Why the simulator could not start or serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// A setting is out of range or inconsistent.
    #[error("invalid simulator configuration: {0}")]
    Config(String),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP server failed.
    #[error("simulated source server failed")]
    Serve(#[source] std::io::Error),
    /// A Resource Dump package could not be written.
    #[error("cannot build the resource dump: {0}")]
    Dump(String),
    /// The hub's HTTP client could not be built (push on).
    #[error("cannot set up the simulated hub's HTTP client")]
    Hub(#[source] crate::fetch::FetchError),
}
