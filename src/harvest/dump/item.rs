//! What reading one package yields, per manifest entry ([`DumpItem`], [`Content`]), and the
//! caps a package must stay within ([`DumpLimits`]): the vocabulary `package` produces and
//! the dump walk hands on, in a file of its own so neither depends on the other's internals.

use url::Url;

use super::error::EntryError;
use crate::config::Settings;
use crate::model::{Change, Entry, HashList, Link, W3cDateTime};
use crate::store::BlobInfo;

/// Caps on what one package may contain. Defaults follow the source's [`Settings`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpLimits {
    /// ZIP entries per package (and manifest entries).
    pub max_entries: usize,
    /// Decompressed bytes of one bitstream (`max_resource_bytes`).
    pub max_entry_bytes: u64,
    /// Decompressed bytes of one whole package.
    pub max_total_bytes: u64,
    /// Decompressed bytes per compressed byte, past the first MiB of an entry
    /// (`max_decompressed_ratio`).
    pub max_ratio: u32,
    /// Decompressed bytes of `manifest.xml` (`max_document_bytes`).
    pub max_manifest_bytes: u64,
}

impl DumpLimits {
    /// Limits for a source: one bitstream as large as a fetched resource may be, a package
    /// eight times that, 100,000 entries.
    pub fn from_settings(settings: &Settings) -> Self {
        DumpLimits {
            max_entries: 100_000,
            max_entry_bytes: settings.max_resource_bytes,
            max_total_bytes: settings.max_resource_bytes.saturating_mul(8),
            max_ratio: settings.max_decompressed_ratio,
            max_manifest_bytes: settings.max_document_bytes,
        }
    }
}

/// What became of one manifest entry that did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// The bitstream is in the store, verified.
    Stored {
        /// `<loc>` resolved against the package URL.
        url: Url,
        /// The stored blob (sha-256, length, md5/sha-1 when declared).
        blob: BlobInfo,
    },
    /// A `change="deleted"` entry of a Change Dump Manifest: nothing to store.
    Deleted {
        /// `<loc>` resolved against the package URL.
        url: Url,
    },
}

/// One manifest entry and its outcome.
#[derive(Debug)]
pub struct DumpItem {
    /// Position in the manifest document (0-based).
    pub position: usize,
    /// The manifest entry as read (`<loc>`, `<lastmod>`, `<rs:md>`, `<rs:ln>`s).
    pub entry: Entry,
    /// The stored bitstream or deletion, or why the entry was skipped.
    pub outcome: Result<Content, EntryError>,
}

impl DumpItem {
    /// `change`: `Some` in Change Dump Manifests; Resource Dump entries are `None` (upserts).
    pub fn change(&self) -> Option<Change> {
        self.entry.md.as_ref().and_then(|m| m.change)
    }

    /// `datetime` of the change, if given.
    pub fn datetime(&self) -> Option<W3cDateTime> {
        self.entry.md.as_ref().and_then(|m| m.datetime)
    }

    /// `<lastmod>`.
    pub fn lastmod(&self) -> Option<W3cDateTime> {
        self.entry.lastmod
    }

    /// The hashes the manifest declares (empty when none).
    pub fn declared(&self) -> HashList {
        self.entry.md.as_ref().and_then(|m| m.hash.clone()).unwrap_or_default()
    }

    /// The length the manifest declares.
    pub fn length(&self) -> Option<u64> {
        self.entry.md.as_ref().and_then(|m| m.length)
    }

    /// The media type the manifest declares.
    pub fn media_type(&self) -> Option<&str> {
        self.entry.md.as_ref().and_then(|m| m.media_type.as_deref())
    }

    /// The entry's `<rs:ln>` links, unfiltered (link policy is the caller's).
    pub fn links(&self) -> &[Link] {
        &self.entry.links
    }
}
