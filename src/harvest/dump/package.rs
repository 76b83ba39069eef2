//! Reading one downloaded package (blocking: run it on a blocking thread).
//!
//! The ZIP is treated as hostile input. Entry names are only ever compared as bytes, never
//! turned into filesystem paths; each bitstream is streamed from the archive straight into
//! the store's [`BlobWriter`](crate::store::BlobWriter), which verifies it against the
//! manifest's `length` and `hash` and keeps nothing on a mismatch. Every read is capped twice:
//! by what the entry's header declares (checked against the per-entry, per-package and ratio
//! caps before reading) and by the bytes actually produced (a header that lies is caught at
//! the first byte past its claim).

use std::fs::File;
use std::io::{Cursor, Read};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use url::Url;
use zip::ZipArchive;
use zip::result::ZipError;

use super::error::{DumpError, EntryError};
use super::item::{Content, DumpItem, DumpLimits};
use super::window::WindowReader;
use crate::harvest::authority::within_authority;
use crate::model::{Capability, DocumentKind, DocumentReader, Entry, Header, ReadOptions};
use crate::store::{BlobInfo, Expected, Store, StoreError};

/// Small entries may expand past the ratio (a 40 KB run of spaces deflates to ~100 bytes);
/// only output beyond this floor is held to the ratio.
const RATIO_FLOOR: u64 = 1 << 20;
/// Unix file-type bits and the symbolic-link type (`S_IFMT`, `S_IFLNK`).
const S_IFMT: u32 = 0o170_000;
const S_IFLNK: u32 = 0o120_000;
const COPY_BUF: usize = 64 * 1024;

/// One downloaded package, ready to read.
pub(super) struct PackageFile {
    pub(super) url: Url,
    pub(super) file: File,
    pub(super) length: u64,
    /// The manifest kind the dump calls for.
    pub(super) expect: DocumentKind,
    /// Where `<loc>`s must lie, when the source does not allow others.
    pub(super) authority: Option<Url>,
}

/// Opens the package, reads its manifest and stores each bitstream, handing each item to
/// `each` in processing order as soon as it is stored; `each` returning `Break` stops the
/// read (the consumer went away). Returns the manifest header.
///
/// A Resource Dump Manifest is read as it is used: this thread parses entries and hands them,
/// [`CHUNK`] at a time, to up to [`MAX_READERS`] threads (one per core) that store their
/// bitstreams — hashing is most of a dump's cost — and hand each item on as it is stored, so
/// the first records reach the store while most of a 50,000-entry manifest is still unread,
/// and items arrive in about manifest order (`position` says exactly). A manifest that turns
/// out malformed part-way ends the package with [`DumpError::Manifest`] after the items before
/// it, each verified against its own `hash` and `length`. A Change Dump Manifest is read whole
/// and applied on this thread, in order, because its entries may have to be put into forward
/// chronological order first ([`order`]).
pub(super) fn read_package(
    p: PackageFile,
    store: &Store,
    limits: &DumpLimits,
    mut each: impl FnMut(DumpItem) -> ControlFlow<()> + Send,
) -> Result<Header, DumpError> {
    let url = p.url.to_string();
    let file = WindowReader::new(p.file).map_err(|e| DumpError::TempFile { url: url.clone(), source: e })?;
    let mut archive = ZipArchive::new(file).map_err(|e| DumpError::NotZip { url: url.clone(), source: Box::new(e) })?;
    if archive.len() > limits.max_entries {
        return Err(DumpError::TooManyEntries { url, count: archive.len(), max: limits.max_entries });
    }
    check_names(&archive, &url)?;
    let mut budget = Budget { package_len: p.length, total: 0, limits: limits.clone() };
    let mut manifest = open_manifest(&mut archive, &url, &mut budget)?;
    let header = manifest.header().clone();
    check_kind(&header, p.expect, &url)?;
    let manifest_err = |source| DumpError::Manifest { url: url.clone(), source };
    let budget = Mutex::new(budget);
    let reader = |archive| PackageReader {
        archive,
        url: &p.url,
        authority: p.authority.as_ref(),
        store,
        budget: &budget,
        buf: vec![0u8; COPY_BUF],
    };
    if p.expect == DocumentKind::ChangeDumpManifest {
        let mut reader = reader(archive);
        let mut entries = Vec::new();
        // Bounded by the reader's entry limit.
        while let Some(e) = manifest.next_entry().map_err(manifest_err)? {
            entries.push(e);
        }
        for (position, entry) in order(entries, p.expect) {
            let outcome = reader.item(&entry, p.expect)?;
            if each(DumpItem { position, entry, outcome }).is_break() {
                break;
            }
        }
        return Ok(header);
    }
    read_in_parallel(&mut manifest, || reader(archive.clone()), &mut each).map_err(|e| match e {
        Failed::Package(e) => e,
        Failed::Manifest(e) => manifest_err(e),
    })?;
    Ok(header)
}

/// Most threads reading one package: its entries are small and independent, and past a few
/// threads the manifest parser and the store's commits are what the others wait for.
const MAX_READERS: usize = 4;
/// Entries handed to a reader at a time: the parser runs ahead of the readers and waits on a
/// full channel, and one entry per message woke it once per entry (a baseline from a dump of
/// 100,000 made 28–38k voluntary context switches; 9–14k with chunks).
const CHUNK: usize = 32;
/// Chunks parsed ahead of the readers.
const CHUNKS_AHEAD: usize = 8;

/// What ended a parallel read early.
enum Failed {
    Package(DumpError),
    Manifest(crate::model::ReadError),
}

/// Parses the manifest's entries on this thread and stores their bitstreams on reader threads
/// made by `make` (each with its own handle on the archive), handing every item to `each` as
/// it is stored. The first package-level error, or `each` breaking, stops the parsing; the
/// readers finish the entries already handed to them and skip the rest.
fn read_in_parallel<'a>(
    manifest: &mut DocumentReader<Cursor<Vec<u8>>>,
    make: impl Fn() -> PackageReader<'a> + Sync,
    each: &mut (impl FnMut(DumpItem) -> ControlFlow<()> + Send),
) -> Result<(), Failed> {
    let readers = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, MAX_READERS);
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<(usize, Entry)>>(CHUNKS_AHEAD);
    let (rx, each) = (Mutex::new(rx), Mutex::new(each));
    let stop = AtomicBool::new(false);
    let failed: Mutex<Option<DumpError>> = Mutex::new(None);
    let parsed = std::thread::scope(|scope| {
        for _ in 0..readers {
            scope.spawn(|| {
                let mut reader = make();
                // Bounded by the entries parsed: the loop ends when the parser drops `tx`.
                loop {
                    let job = lock(&rx).recv();
                    let Ok(chunk) = job else { return };
                    for (position, entry) in chunk {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        match reader.item(&entry, DocumentKind::ResourceDumpManifest) {
                            Ok(outcome) => {
                                if (lock(&each))(DumpItem { position, entry, outcome }).is_break() {
                                    stop.store(true, Ordering::Relaxed);
                                }
                            }
                            Err(e) => {
                                stop.store(true, Ordering::Relaxed);
                                lock(&failed).get_or_insert(e);
                            }
                        }
                    }
                }
            });
        }
        let parsed = parse_in_chunks(manifest, &tx, &stop);
        drop(tx);
        parsed
    });
    if let Some(e) = failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(Failed::Package(e));
    }
    parsed.map_err(Failed::Manifest)
}

/// Sends the manifest's entries to `tx` in chunks of [`CHUNK`], numbered from 0, until the
/// manifest ends, `stop` is set or every reader has gone.
fn parse_in_chunks(
    manifest: &mut DocumentReader<Cursor<Vec<u8>>>,
    tx: &std::sync::mpsc::SyncSender<Vec<(usize, Entry)>>,
    stop: &AtomicBool,
) -> Result<(), crate::model::ReadError> {
    let mut position = 0;
    let mut chunk = Vec::with_capacity(CHUNK);
    // Bounded by the reader's entry limit.
    let parsed = loop {
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        match manifest.next_entry() {
            Ok(Some(entry)) => {
                chunk.push((position, entry));
                position += 1;
                if chunk.len() == CHUNK && tx.send(std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK))).is_err() {
                    return Ok(());
                }
            }
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    // The entries before a malformed one are stored, as the caller documents. A send fails
    // only when every reader has gone, and then nothing is left to store them.
    if !chunk.is_empty() {
        let _ = tx.send(chunk);
    }
    parsed
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Why a name could escape a directory if it were ever used as a path.
pub(super) fn unsafe_name(name: &[u8]) -> Option<&'static str> {
    if name.is_empty() {
        Some("empty name")
    } else if name.contains(&0) {
        Some("NUL byte")
    } else if name.contains(&b'\\') {
        Some("backslash")
    } else if name[0] == b'/' {
        Some("absolute path")
    } else if name.len() >= 2 && name[1] == b':' && name[0].is_ascii_alphabetic() {
        Some("drive letter")
    } else if name.split(|&b| b == b'/').any(|c| c == b"..") {
        Some("parent-directory component")
    } else {
        None
    }
}

fn check_names(archive: &ZipArchive<WindowReader>, url: &str) -> Result<(), DumpError> {
    for raw in archive.file_names_raw() {
        if let Some(reason) = unsafe_name(raw) {
            let name = String::from_utf8_lossy(raw).into_owned();
            return Err(DumpError::UnsafeName { url: url.to_owned(), name, reason });
        }
    }
    Ok(())
}

fn check_kind(header: &Header, expect: DocumentKind, url: &str) -> Result<(), DumpError> {
    match header.kind() {
        Some(k) if k == expect => Ok(()),
        found => Err(DumpError::WrongManifest {
            url: url.to_owned(),
            expected: expect.name(),
            found: found.map_or_else(
                || header.capability().map_or("no ResourceSync manifest".into(), |c| format!("capability {c}")),
                |k| k.name().to_owned(),
            ),
        }),
    }
}

/// Change Dump Manifests are applied in forward chronological order. The spec requires the
/// document to be in that order already; when every entry has a `datetime` a stable sort
/// repairs a Source that got it wrong (ties keep document order). Without datetimes the
/// document order is all there is.
fn order(entries: Vec<Entry>, kind: DocumentKind) -> Vec<(usize, Entry)> {
    let mut v: Vec<(usize, Entry)> = entries.into_iter().enumerate().collect();
    let datetime = |e: &Entry| e.md.as_ref().and_then(|m| m.datetime);
    if kind == DocumentKind::ChangeDumpManifest && v.iter().all(|(_, e)| datetime(e).is_some()) {
        if v.windows(2).any(|w| datetime(&w[0].1) > datetime(&w[1].1)) {
            tracing::warn!("change dump manifest is not in chronological order; sorting it by datetime");
        }
        v.sort_by_key(|(_, e)| datetime(e));
    }
    v
}

/// The package's `manifest.xml`, read into memory within the budget, with its header parsed
/// and its entries ready to be read one at a time.
fn open_manifest(
    archive: &mut ZipArchive<WindowReader>,
    url: &str,
    budget: &mut Budget,
) -> Result<DocumentReader<Cursor<Vec<u8>>>, DumpError> {
    let index = archive.index_for_name_raw(b"manifest.xml").ok_or_else(|| DumpError::NoManifest { url: url.into() })?;
    let mut file = archive.by_index(index).map_err(|e| DumpError::NotZip { url: url.into(), source: Box::new(e) })?;
    let cap = budget.cap(url, "manifest.xml", file.size(), file.compressed_size(), budget.limits.max_manifest_bytes)?;
    let mut bytes = Vec::with_capacity(usize::try_from(cap.min(1 << 20)).unwrap_or(0));
    let pumped = pump(&mut file, cap, &mut vec![0u8; COPY_BUF], &mut |chunk| {
        bytes.extend_from_slice(chunk);
        Ok(())
    });
    budget.settle(url, "manifest.xml", cap, pumped).map_err(|e| match e {
        Settled::Package(e) => e,
        Settled::Entry(e) => DumpError::Entry { url: url.into(), source: Box::new(e) },
    })?;
    let name = format!("{url}!/manifest.xml");
    let opts = ReadOptions { name, max_bytes: cap.max(1), max_entries: budget.limits.max_entries, max_depth: 32 };
    let manifest_err = |source| DumpError::Manifest { url: url.into(), source };
    DocumentReader::new(Cursor::new(bytes), opts).map_err(manifest_err)
}

/// Decompressed bytes allowed and used in one package.
struct Budget {
    package_len: u64,
    total: u64,
    limits: DumpLimits,
}

impl Budget {
    /// The bytes an entry may produce: what it declares, after checking the declaration
    /// against `max_entry`, the package total and the ratio. The ratio is taken against the
    /// compressed size, which cannot honestly exceed the package itself.
    fn cap(&self, url: &str, name: &str, declared: u64, compressed: u64, max_entry: u64) -> Result<u64, DumpError> {
        let bomb = |detail: String| DumpError::Bomb { url: url.into(), name: name.into(), detail };
        if declared > max_entry {
            return Err(bomb(format!("declares {declared} bytes, more than the limit of {max_entry}")));
        }
        let by_ratio =
            compressed.min(self.package_len).saturating_mul(u64::from(self.limits.max_ratio)).max(RATIO_FLOOR);
        if declared > by_ratio {
            let ratio = self.limits.max_ratio;
            return Err(bomb(format!(
                "declares {declared} bytes from {compressed} compressed, beyond the ratio {ratio}"
            )));
        }
        let left = self.limits.max_total_bytes.saturating_sub(self.total);
        if declared > left {
            let max = self.limits.max_total_bytes;
            return Err(bomb(format!("the package would decompress to more than {max} bytes")));
        }
        Ok(declared)
    }

    /// Accounts for what a read produced, turning a pump failure into the right error.
    fn settle(&mut self, url: &str, name: &str, cap: u64, pumped: Result<u64, Pump>) -> Result<(), Settled> {
        match pumped {
            Ok(n) => {
                self.total += n;
                Ok(())
            }
            Err(Pump::Over) => Err(Settled::Package(DumpError::Bomb {
                url: url.into(),
                name: name.into(),
                detail: format!("produced more than the {cap} bytes its header declares"),
            })),
            Err(Pump::Read(source)) => Err(Settled::Entry(EntryError::Corrupt { path: name.into(), source })),
            Err(Pump::Sink(e)) if is_verification(&e) => {
                Err(Settled::Entry(EntryError::Mismatch { path: name.into(), source: e }))
            }
            Err(Pump::Sink(source)) => Err(Settled::Package(DumpError::Store { url: url.into(), source })),
        }
    }
}

enum Settled {
    Package(DumpError),
    Entry(EntryError),
}

enum Pump {
    /// More bytes than the cap.
    Over,
    Read(std::io::Error),
    Sink(StoreError),
}

/// Copies at most `cap` bytes from `from` to `sink` through `buf`; one byte more is
/// [`Pump::Over`]. The buffer is the caller's so a package of 50,000 small entries does not
/// allocate and zero 64 KiB for each.
fn pump(
    from: &mut impl Read,
    cap: u64,
    buf: &mut [u8],
    sink: &mut dyn FnMut(&[u8]) -> Result<(), StoreError>,
) -> Result<u64, Pump> {
    let mut read = 0u64;
    // Bounded: every turn consumes input, and the cap ends it.
    loop {
        let n = match from.read(buf) {
            Ok(0) => return Ok(read),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Pump::Read(e)),
        };
        read += n as u64;
        if read > cap {
            return Err(Pump::Over);
        }
        sink(&buf[..n]).map_err(Pump::Sink)?;
    }
}

fn is_verification(e: &StoreError) -> bool {
    matches!(e, StoreError::LengthMismatch { .. } | StoreError::TooLong { .. } | StoreError::HashMismatch { .. })
}

/// The state shared by the entries of one package.
struct PackageReader<'a> {
    archive: ZipArchive<WindowReader>,
    url: &'a Url,
    authority: Option<&'a Url>,
    store: &'a Store,
    /// Shared by the threads reading the package: the decompressed bytes it may still produce.
    /// Two readers may each pass the check before either settles, so the total can exceed the
    /// limit by at most one entry per reader, each within `max_entry_bytes`.
    budget: &'a Mutex<Budget>,
    /// The copy buffer of every entry.
    buf: Vec<u8>,
}

impl PackageReader<'_> {
    /// One manifest entry: `Err` only for failures that end the package.
    fn item(&mut self, entry: &Entry, kind: DocumentKind) -> Result<Result<Content, EntryError>, DumpError> {
        let url = match self.resolve(&entry.loc) {
            Ok(u) => u,
            Err(e) => return Ok(Err(e)),
        };
        let md = entry.md.clone().unwrap_or_default();
        let change = md.change;
        if kind == DocumentKind::ChangeDumpManifest {
            match change {
                None => return Ok(Err(EntryError::NoChange)),
                Some(crate::model::Change::Deleted) => return Ok(Ok(Content::Deleted { url })),
                Some(_) => {}
            }
        }
        let Some(path) = md.path.as_deref() else { return Ok(Err(EntryError::NoPath)) };
        let expected = Expected::declared(md.length, md.hash.as_ref()).with_media_type(md.media_type.clone());
        Ok(self.store_path(path, expected)?.map(|blob| Content::Stored { url, blob }))
    }

    fn resolve(&self, loc: &str) -> Result<Url, EntryError> {
        let url = self.url.join(loc).ok().filter(|u| matches!(u.scheme(), "http" | "https"));
        let url = url.ok_or_else(|| EntryError::BadLoc(loc.to_owned()))?;
        match self.authority {
            Some(a) if !within_authority(a, &url) => Err(EntryError::OutsideAuthority(url.to_string())),
            _ => Ok(url),
        }
    }

    /// Streams the bitstream at manifest `path` into the store.
    fn store_path(&mut self, path: &str, expected: Expected) -> Result<Result<BlobInfo, EntryError>, DumpError> {
        let name = path.strip_prefix('/').unwrap_or(path);
        if let Some(reason) = unsafe_name(name.as_bytes()) {
            return Ok(Err(EntryError::UnsafePath { path: path.to_owned(), reason }));
        }
        let Some(index) = self.archive.index_for_name_raw(name.as_bytes()) else {
            return Ok(Err(EntryError::MissingPath(path.to_owned())));
        };
        let url = self.url.to_string();
        let mut file = match self.archive.by_index(index) {
            Ok(f) => f,
            Err(e) => return Ok(Err(zip_entry_error(path, e))),
        };
        if let Err(e) = check_kind_of_entry(&file, path) {
            return Ok(Err(e));
        }
        // The bomb checks come first: a bomb ends the package even when it is also too large.
        let (cap, max) = {
            let budget = lock(self.budget);
            (budget.cap(&url, path, file.size(), file.compressed_size(), u64::MAX)?, budget.limits.max_entry_bytes)
        };
        if cap > max {
            return Ok(Err(EntryError::TooLarge { path: path.to_owned(), size: cap, max }));
        }
        let mut writer = self.store.blob_writer(expected);
        let pumped = pump(&mut file, cap, &mut self.buf, &mut |chunk| writer.write(chunk));
        drop(file);
        let settled = lock(self.budget).settle(&url, path, cap, pumped);
        let committed = match settled {
            Ok(()) => writer.commit(),
            Err(Settled::Entry(e)) => return Ok(Err(e)),
            Err(Settled::Package(e)) => return Err(e),
        };
        match committed {
            Ok(info) => Ok(Ok(info)),
            Err(e) if is_verification(&e) => Ok(Err(EntryError::Mismatch { path: path.to_owned(), source: e })),
            Err(source) => Err(DumpError::Store { url, source }),
        }
    }
}

/// Refuses what is not a plain file, before reading it.
fn check_kind_of_entry(file: &zip::read::ZipFile<'_, WindowReader>, path: &str) -> Result<(), EntryError> {
    let is_link = file.unix_mode().is_some_and(|m| m & S_IFMT == S_IFLNK) || file.is_symlink();
    if is_link {
        return Err(EntryError::Symlink(path.to_owned()));
    }
    if file.is_dir() {
        return Err(EntryError::Directory(path.to_owned()));
    }
    if file.encrypted() {
        return Err(EntryError::Unsupported { path: path.to_owned(), detail: "encrypted entry".into() });
    }
    Ok(())
}

fn zip_entry_error(path: &str, e: ZipError) -> EntryError {
    match e {
        ZipError::UnsupportedArchive(_) => EntryError::Unsupported { path: path.to_owned(), detail: e.to_string() },
        other => EntryError::Corrupt { path: path.to_owned(), source: std::io::Error::other(other) },
    }
}

/// The manifest kind each dump kind calls for.
pub(super) fn manifest_kind(dump: Capability) -> Option<DocumentKind> {
    match dump {
        Capability::ResourceDump => Some(DocumentKind::ResourceDumpManifest),
        Capability::ChangeDump => Some(DocumentKind::ChangeDumpManifest),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_names_are_recognised() {
        for (name, reason) in [
            ("../x", "parent-directory component"),
            ("a/../../x", "parent-directory component"),
            ("/etc/passwd", "absolute path"),
            ("a\\b", "backslash"),
            ("C:x", "drive letter"),
            ("c:/windows", "drive letter"),
            ("a\0b", "NUL byte"),
            ("", "empty name"),
        ] {
            assert_eq!(unsafe_name(name.as_bytes()), Some(reason), "{name:?}");
        }
        for ok in ["manifest.xml", "resources/res1", "a/b..c/d", "..x", "dir/"] {
            assert_eq!(unsafe_name(ok.as_bytes()), None, "{ok:?}");
        }
    }
}
