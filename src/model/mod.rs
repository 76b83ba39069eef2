//! The ResourceSync document model (spec §7–§13, Table 3, Appendix A): types, a streaming
//! reader, a deterministic writer and the validation rules.
//!
//! # Architecture
//! This module does no I/O of its own: it reads from any `BufRead` and writes to any `Write`
//! the caller hands it. It must not depend on tokio, reqwest, sled or axum; the harvester,
//! the store and the publisher all build on it.

mod datetime;
pub mod discovery;
mod diagnostic;
mod error;
mod hash;
mod position;
mod reader;
mod split;
mod synthetic;
mod types;
mod validate;
mod writer;

pub use datetime::{DateTimeError, Precision, W3cDateTime};
pub use diagnostic::{Diagnostic, Severity};
pub use error::{ReadError, ReadErrorKind};
pub use hash::{Digest, HashAlgorithm, HashError, HashList, HashNote};
pub use position::Position;
pub use reader::{read_document, DocumentReader, ReadOptions};
pub use synthetic::synthetic_resource_list;
pub use split::{write_split, PartTarget, SplitLimits, SplitOutcome};
pub use types::{
    Capability, Change, Document, DocumentKind, Entry, ExtNode, Extension, ForeignAttr, Header, Link, Md, RootFormat,
    RS_NS, SITEMAP_NS,
};
pub use validate::{validate, Validator};
pub use writer::{to_bytes, write_document, DocumentWriter};
