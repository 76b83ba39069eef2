//! Tributary: a ResourceSync aggregator (ANSI/NISO Z39.99-2017, §14.8).
//!
//! # Architecture
//! Data flows one way: `sources.toml` → harvest → store → publish → web. The modules follow
//! it, and dependencies point the same way (the full map: `docs/ARCHITECTURE.md`):
//!
//! - [`model`]: every ResourceSync document — types, streaming reader, writer, validation.
//!   Pure: no I/O beyond the `BufRead`/`Write` it is handed.
//! - [`config`]: `sources.toml`, validated once; [`naming`]: every URI Tributary publishes.
//! - [`fetch`]: the polite HTTP client every request goes through (rate limits, robots.txt,
//!   retries, size and time guards, the SSRF policy).
//! - [`store`]: bitstreams by sha-256, records, provenance indexes, the per-set change log.
//! - [`harvest`]: keeps the store in sync with the upstream Sources; each poll a pure plan
//!   carried out by a short executor. Nothing else in the library depends on it.
//! - [`publish`]: Tributary as a ResourceSync Source — documents from store views, the
//!   inherited-link policy, the provenance lookup. No axum, tokio or reqwest.
//! - [`web`]: the axum router for all of it; [`provenance`]: the command and live origin
//!   check; [`check`]: the `tributary check` command.
//! - [`control`]: the control channel that steers a running service (every command of the
//!   command line works through it while the service holds the store).
//! - [`simulate`]: simulated Sources for the offline demo, tests and benchmarks.
//! - [`error`]: printing an error with its causes, once.
//! - [`websub`]: the HMAC signature of WebSub deliveries (no I/O), for both directions of push.

pub mod check;
pub mod config;
pub mod control;
pub mod error;
pub mod fetch;
pub mod harvest;
pub mod model;
pub mod naming;
pub mod notify;
pub mod oai_check;
pub mod provenance;
pub mod publish;
pub mod simulate;
pub mod store;
pub mod web;
pub mod websub;
