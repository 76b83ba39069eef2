//! Tributary: a ResourceSync aggregator (ANSI/NISO Z39.99-2017, §14.8).
//!
//! # Architecture
//! Data flows one way: `sources.toml` → harvest → store → publish → web. The modules follow
//! it, and dependencies point the same way:
//!
//! - [`model`]: every ResourceSync document — types, streaming reader, writer, validation.
//!   Pure: no I/O beyond the `BufRead`/`Write` it is handed.
//! - [`check`]: the `tributary check` command, reading a file or URL through the model.
//! - [`store`]: bitstreams by sha-256, records, provenance indexes, the per-set change log.
//! - [`publish`]: Tributary as a ResourceSync Source — documents from store views, the
//!   inherited-link policy, the provenance lookup. No axum, tokio or reqwest.
//! - [`web`]: the axum server for all of it; [`provenance`]: the command and live origin check.
//!
//! The harvester builds on the model and the store in its own module; see
//! `docs/ARCHITECTURE.md` and `docs/PUBLISH.md`.

pub mod check;
pub mod config;
pub mod error;
pub mod fetch;
pub mod harvest;
pub mod model;
pub mod naming;
pub mod provenance;
pub mod publish;
pub mod simulate;
pub mod store;
pub mod web;
