//! Tributary: a ResourceSync aggregator (ANSI/NISO Z39.99-2017, §14.8).
//!
//! # Architecture
//! Data flows one way: `sources.toml` → harvest → store → publish → web. The modules follow
//! it, and dependencies point the same way:
//!
//! - [`model`]: every ResourceSync document — types, streaming reader, writer, validation.
//!   Pure: no I/O beyond the `BufRead`/`Write` it is handed.
//! - [`check`]: the `tributary check` command, reading a file or URL through the model.
//!
//! The store, harvester and publisher build on the model in later modules; see
//! `docs/ARCHITECTURE.md`.

pub mod check;
pub mod config;
pub mod harvest;
pub mod model;
pub mod naming;
pub mod provenance;
pub mod publish;
pub mod simulate;
pub mod store;
pub mod web;
