//! The errors of dump harvesting, split by blast radius: a [`DumpError`] loses a whole package
//! (or the walk), an [`EntryError`] loses one manifest entry while its siblings go on.

use crate::fetch::FetchError;
use crate::harvest::document::DiscoverError;
use crate::model::ReadError;
use crate::store::StoreError;

/// Why a package (or the whole dump walk) failed. Nothing of a failed package reaches the
/// caller: blobs it already stored stay unreferenced until gc, and no item is returned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DumpError {
    /// The dump document, an index or a package could not be fetched or read.
    #[error(transparent)]
    Walk(#[from] DiscoverError),
    /// An entry of a package failed where the caller needs every entry (a dump applied whole).
    #[error("package {url}: an entry failed")]
    Entry {
        /// The package URL.
        url: String,
        /// The entry's failure.
        #[source]
        source: Box<EntryError>,
    },
    /// Downloading a package failed.
    #[error("downloading a package")]
    Fetch {
        /// The package URL.
        url: String,
        /// The fetcher's error.
        #[source]
        source: FetchError,
    },
    /// The package does not match the length or hash the dump declared for it.
    #[error("package {url}: {detail}")]
    PackageMismatch {
        /// The package URL.
        url: String,
        /// What differed.
        detail: String,
    },
    /// The temporary file could not be written or read.
    #[error("package {url}: temporary file")]
    TempFile {
        /// The package URL.
        url: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Not a ZIP file, or a ZIP structure the reader refuses.
    #[error("package {url}: not a readable ZIP package")]
    NotZip {
        /// The package URL.
        url: String,
        /// The ZIP reader's error (boxed: dump errors travel through every return of a walk).
        #[source]
        source: Box<zip::result::ZipError>,
    },
    /// More ZIP entries than allowed.
    #[error("package {url}: {count} ZIP entries, more than the limit of {max}")]
    TooManyEntries {
        /// The package URL.
        url: String,
        /// Entries in the package (or manifest).
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A ZIP entry name that could escape a directory if it were ever used as a path
    /// (`../x`, `/etc/x`, `a\b`, `C:x`, NUL). Such a package is refused whole: it is either
    /// hostile or broken, and no legitimate ResourceSync package needs such a name.
    #[error("package {url}: unsafe ZIP entry name {name:?}: {reason}")]
    UnsafeName {
        /// The package URL.
        url: String,
        /// The name, lossily decoded.
        name: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// Decompression would exceed a size or ratio cap, or an entry produced more bytes than
    /// its header declared (a zip bomb, or headers that lie).
    #[error("package {url}: entry {name:?}: {detail} (zip bomb?)")]
    Bomb {
        /// The package URL.
        url: String,
        /// The entry name.
        name: String,
        /// Which cap was crossed.
        detail: String,
    },
    /// There is no `manifest.xml` at the top level of the package.
    #[error("package {url}: no manifest.xml at the top level")]
    NoManifest {
        /// The package URL.
        url: String,
    },
    /// `manifest.xml` could not be parsed.
    #[error("package {url}: manifest.xml")]
    Manifest {
        /// The package URL.
        url: String,
        /// The reader's error.
        #[source]
        source: ReadError,
    },
    /// `manifest.xml` is not the manifest this dump calls for.
    #[error("package {url}: manifest.xml is {found}, expected {expected}")]
    WrongManifest {
        /// The package URL.
        url: String,
        /// The kind expected.
        expected: &'static str,
        /// The kind found.
        found: String,
    },
    /// The store failed (disk, database): no point going on with other entries.
    #[error("package {url}: store")]
    Store {
        /// The package URL.
        url: String,
        /// The store's error.
        #[source]
        source: StoreError,
    },
    /// The dump walk failed earlier; it cannot be continued.
    #[error("the dump walk ended with an error earlier")]
    WalkAborted,
}

impl DumpError {
    /// True when the error concerns one package only, so the walk may go on to the next
    /// (for a Change Dump the caller should still stop: skipping a package skips changes).
    pub fn is_package_local(&self) -> bool {
        !matches!(self, DumpError::Walk(_) | DumpError::WalkAborted | DumpError::Store { .. })
    }
}

/// Why one manifest entry yielded no bitstream. Nothing is stored for such an entry.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EntryError {
    /// `<loc>` is not an absolute http(s) URI (after resolving against the package URL).
    #[error("<loc> {0:?} is not an http(s) URI")]
    BadLoc(String),
    /// `<loc>` is outside the Source's authority (and the source does not allow that).
    #[error("<loc> {0} is outside the Source's authority")]
    OutsideAuthority(String),
    /// A created/updated entry (or a Resource Dump Manifest entry) without a `path`.
    #[error("no path attribute")]
    NoPath,
    /// A Change Dump Manifest entry without a `change` attribute.
    #[error("no change attribute in a Change Dump Manifest")]
    NoChange,
    /// The `path` could escape the package root (`..`, backslash, drive letter, NUL).
    #[error("unsafe path {path:?}: {reason}")]
    UnsafePath {
        /// The manifest's path.
        path: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// The `path` names nothing in the package.
    #[error("path {0:?} is not in the package")]
    MissingPath(String),
    /// The `path` names a symbolic link, which is never followed or stored.
    #[error("path {0:?} is a symbolic link; refused")]
    Symlink(String),
    /// The `path` names a directory.
    #[error("path {0:?} is a directory")]
    Directory(String),
    /// The entry is encrypted or uses a compression method this build cannot read.
    #[error("path {path:?}: {detail}")]
    Unsupported {
        /// The path.
        path: String,
        /// What is unsupported.
        detail: String,
    },
    /// The entry declares more bytes than one resource may have.
    #[error("path {path:?} declares {size} bytes, more than the limit of {max}")]
    TooLarge {
        /// The path.
        path: String,
        /// Declared uncompressed size.
        size: u64,
        /// The per-entry limit.
        max: u64,
    },
    /// The bitstream does not match the manifest's length or hash.
    #[error("path {path:?}: content does not match the manifest")]
    Mismatch {
        /// The path.
        path: String,
        /// The store's verification error.
        #[source]
        source: StoreError,
    },
    /// The compressed data is corrupt (bad deflate stream, CRC mismatch).
    #[error("path {path:?}: corrupt entry")]
    Corrupt {
        /// The path.
        path: String,
        /// The reader's error.
        #[source]
        source: std::io::Error,
    },
}
