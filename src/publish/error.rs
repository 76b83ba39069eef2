//! The publisher's error type: what a caller must tell apart — a configuration mistake (fix
//! and restart), an unknown set or document (404), a store failure (500), or a failed write to
//! the output (the client went away; nothing to report).

use std::io;

use crate::store::StoreError;

/// Why a document could not be produced.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The set configuration or limits are unusable.
    #[error("publish configuration: {0}")]
    Config(String),
    /// No set with this id is configured.
    #[error("no set {0:?} is configured")]
    UnknownSet(String),
    /// Dumps are not published (`[publish] dumps = false`, the default with a bucket).
    #[error("this Tributary publishes no Resource Dumps or Change Dumps ([publish] dumps = false)")]
    DumpsOff,
    /// Reading the store failed.
    #[error("reading the store")]
    Store(#[from] StoreError),
    /// Writing the document failed (usually: the client disconnected).
    #[error("writing the document")]
    Write(#[from] io::Error),
    /// A Resource Dump could not be built or read: a package file, or a bitstream missing
    /// from the store (no dump is served then, rather than a short one).
    #[error("Resource Dump: {what}")]
    Dump {
        /// The file or bitstream concerned.
        what: String,
        /// Why.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}
