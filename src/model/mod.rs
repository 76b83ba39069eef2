//! The ResourceSync document model (spec §7–§13, Table 3, Appendix A): types, a streaming
//! reader, a deterministic writer and the validation rules.
//!
//! # Architecture
//! This module does no I/O of its own: it reads from any `BufRead` and writes to any `Write`
//! the caller hands it. It must not depend on tokio, reqwest, fjall or axum; the harvester,
//! the store and the publisher all build on it.

mod datetime;
mod diagnostic;
pub mod discovery;
mod error;
pub mod feed;
mod hash;
pub mod oai;
mod position;
mod reader;
mod split;
mod synthetic;
mod types;
mod validate;
mod writer;

pub use datetime::{DateTimeError, Precision, W3cDateTime};

/// Entries per document: the Sitemap protocol's limit, which ResourceSync follows (spec §7).
/// No document Tributary serves or simulates is larger, and none it reads need be.
pub const SITEMAP_MAX_ENTRIES: usize = 50_000;

/// Bytes per (uncompressed) document: the Sitemap protocol's other limit (spec §7).
pub const SITEMAP_MAX_BYTES: u64 = 50_000_000;
pub use diagnostic::{Diagnostic, Severity};
pub use error::{ReadError, ReadErrorKind};
pub use hash::{Digest, HashAlgorithm, HashError, HashList, HashNote};
pub use position::Position;
pub use reader::{DocumentReader, ReadOptions, read_document};
pub use split::{PartTarget, SplitLimits, SplitOutcome, write_split};
pub use synthetic::synthetic_resource_list;
pub use types::{
    Capability, Change, Document, DocumentKind, Entry, ExtNode, Extension, ForeignAttr, Header, Link, Md, RS_NS,
    RootFormat, SITEMAP_NS,
};
pub use validate::{Validator, validate};
pub(crate) use writer::attr as push_attr;
pub use writer::{DocumentWriter, escape_into, to_bytes, write_document};
