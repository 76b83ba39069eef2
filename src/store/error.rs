//! The store's error type.
//!
//! Every failure the harvester, the publisher or the `tributary store` commands can meet is a
//! variant here, so callers can tell "the content did not match what the Source declared"
//! (retry or report the Source) from "the disk failed" (stop) from "another process holds the
//! store" (tell the operator). fjall's own error type never leaves `src/store/`.

use std::io;
use std::path::PathBuf;

use crate::model::HashAlgorithm;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The data directory does not exist (or its parent does not, for [`Store::open`]).
    ///
    /// [`Store::open`]: super::Store::open
    #[error(
        "store directory {path} does not exist (or, for a new store, its parent does not); check --data-dir or data_dir in sources.toml"
    )]
    Missing {
        /// The directory that was asked for.
        path: PathBuf,
    },
    /// The directory exists but no store has been created in it yet (read-only commands).
    #[error(
        "{path} holds no Tributary store yet; nothing has been harvested there (run `tributary harvest` or `tributary run` first)"
    )]
    Empty {
        /// The directory that was asked for.
        path: PathBuf,
    },
    /// The directory exists but holds something other than a Tributary store.
    #[error(
        "{path} exists but is not a Tributary store (no FORMAT file, and it is not empty); choose an empty or new directory"
    )]
    NotAStore {
        /// The directory that was asked for.
        path: PathBuf,
    },
    /// Another process (usually another running `tributary`) has the store open.
    #[error("store {path} is in use by another tributary process; stop it first (only one process may open a store)")]
    Locked {
        /// The store directory.
        path: PathBuf,
    },
    /// The store was written by a different, incompatible version of Tributary.
    #[error(
        "store {path} has format version {found}, but this tributary supports version {supported}; \
             use a matching tributary release, or move the directory aside and harvest again"
    )]
    IncompatibleFormat {
        /// The store directory.
        path: PathBuf,
        /// What the store says (as written, it may not even be a number).
        found: String,
        /// What this build reads and writes.
        supported: u32,
    },
    /// The store was written by an earlier release, whose storage engine this build does not
    /// carry: it crosses over by an export with that release and an import with this one.
    #[error(
        "store {path} has format version {found}, written by an earlier tributary release; this one reads \
         format {supported}. Carry it over without losing anything: stop the service, run \
         `tributary store export FILE` with the release that wrote the store, then \
         `tributary store import FILE` with this one (docs/STORE.md, \"Export, import and upgrading\")"
    )]
    OldFormat {
        /// The store directory.
        path: PathBuf,
        /// The format it has.
        found: u32,
        /// What this build reads and writes.
        supported: u32,
    },
    /// Bitstreams (or a `FORMAT` file) are there but the metadata that names them is missing
    /// or unreadable: opening would start an empty store over them and lose every record.
    #[error(
        "store {path} has {found}, but its metadata ({missing}) is missing or unreadable; \
         refusing to start an empty store over it. Restore the data directory from a backup, \
         or rebuild the metadata with `tributary store import FILE` from the last export"
    )]
    MetadataMissing {
        /// The store directory.
        path: PathBuf,
        /// What is there (bitstreams, packs, a FORMAT file).
        found: String,
        /// What is missing, and why it cannot be read.
        missing: String,
    },
    /// An export file that cannot be imported: not an export, of an unknown version, cut
    /// short, inconsistent, or naming bitstreams that are not in the data directory. Nothing
    /// was built.
    #[error("cannot import {file} (line {line}): {detail}; nothing was changed")]
    Import {
        /// The export file.
        file: PathBuf,
        /// The line at fault (0: the file as a whole).
        line: u64,
        /// What is wrong.
        detail: String,
    },
    /// A write or sync failed earlier (a full disk, a failing device): the store serves what it
    /// holds but accepts no write until it is reopened.
    #[error("the store is read-only since a write failed ({reason}); fix the cause and restart")]
    ReadOnly {
        /// The failure that made it so.
        reason: String,
    },
    /// A file-system operation failed (unwritable directory, disk full, I/O error).
    #[error("I/O error on {path}")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// Reading the caller's stream failed; nothing was stored.
    #[error("reading the content failed after {read} bytes; nothing was stored")]
    Input {
        /// Bytes read before the failure.
        read: u64,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The embedded database reported an error.
    #[error("database error: {0}")]
    Database(String),
    /// A stored value could not be decoded (corruption, or a bug).
    #[error("corrupt {what} in the store: {detail}")]
    Corrupt {
        /// Which kind of value.
        what: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// The content's length differs from the declared one; nothing was stored.
    #[error("content is {actual} bytes but {expected} were declared; nothing was stored")]
    LengthMismatch {
        /// The declared length.
        expected: u64,
        /// The length received.
        actual: u64,
    },
    /// The content is longer than declared; reading stopped there and nothing was stored.
    #[error("content is longer than the {expected} bytes declared (stopped reading); nothing was stored")]
    TooLong {
        /// The declared length.
        expected: u64,
    },
    /// A digest of the content differs from the declared one; nothing was stored.
    #[error("content {algorithm} is {actual} but {expected} was declared; nothing was stored",
            algorithm = .algorithm.as_str())]
    HashMismatch {
        /// Which algorithm.
        algorithm: HashAlgorithm,
        /// The declared digest (lowercase hex).
        expected: String,
        /// The digest of the bytes received (lowercase hex).
        actual: String,
    },
    /// No blob with this sha-256 is stored.
    #[error("no blob sha-256:{0} in the store")]
    BlobNotFound(String),
    /// A record refers to a blob that is not stored (put it first).
    #[error("record {uri} refers to blob sha-256:{sha256}, which is not in the store; put the content first")]
    MissingBlob {
        /// The record's Tributary URI.
        uri: String,
        /// The blob it names.
        sha256: String,
    },
    /// A byte range lies outside the blob.
    #[error("range {start}..{end} is outside the blob's {length} bytes")]
    BadRange {
        /// First byte asked for.
        start: u64,
        /// One past the last byte asked for.
        end: u64,
        /// The blob's length.
        length: u64,
    },
    /// A key component (URI, set id, source id) cannot be stored.
    #[error("invalid {what} `{value}`: {reason}")]
    InvalidKey {
        /// Which component.
        what: &'static str,
        /// The value given.
        value: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// The object storage holding the bitstreams failed: unreachable, refused the
    /// credentials, no such bucket, or a request failed after its retries. The message names
    /// the bucket and the endpoint, never a credential.
    #[error("object storage {location} at {endpoint}: {action} failed: {detail}")]
    ObjectStore {
        /// `s3://BUCKET/PREFIX`.
        location: String,
        /// The endpoint URL.
        endpoint: String,
        /// What was being done.
        action: String,
        /// Why it failed.
        detail: String,
    },
    /// The store keeps bitstreams in object storage, and was opened with another location
    /// (or none).
    #[error("store {path} keeps bitstreams in {recorded}, but {configured}; set `[aggregator] blobs = \"{recorded}\"`")]
    BlobsElsewhere {
        /// The store directory.
        path: PathBuf,
        /// Where its bitstreams are.
        recorded: String,
        /// What the configuration says.
        configured: String,
    },
}

impl StoreError {
    /// True for a failure of the object storage holding the bitstreams: the resource being
    /// stored is recorded as failing and retried later, like an upstream failure, rather than
    /// stopping the pass (the next one may find the storage back).
    pub fn is_object_store(&self) -> bool {
        matches!(self, StoreError::ObjectStore { .. })
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        StoreError::Io { path: path.into(), source }
    }

    pub(crate) fn corrupt(what: &'static str, detail: impl ToString) -> Self {
        StoreError::Corrupt { what, detail: detail.to_string() }
    }
}

impl From<fjall::Error> for StoreError {
    fn from(e: fjall::Error) -> Self {
        match e {
            fjall::Error::Poisoned => {
                StoreError::ReadOnly { reason: "the database refuses writes after a failed sync".into() }
            }
            e => StoreError::Database(e.to_string()),
        }
    }
}
