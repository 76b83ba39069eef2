//! Resource Dumps and Change Dumps (spec §11, §13): bulk transfer in ZIP packages.
//!
//! A dump document (or an index of them) lists packages; [`DumpWalker`] walks it with the
//! [`IndexWalker`] and, for each package in document order, downloads it through the
//! [`Fetcher`] into an anonymous temporary file (never memory; bounded by
//! `max_resource_bytes`), checks it against the length and hash the dump declares, reads its
//! top-level `manifest.xml` and streams each bitstream straight from the archive into the
//! store, verified against the manifest (see `package` for the ZIP safety rules). What comes
//! back per package is one [`DumpItem`] per manifest entry with everything the caller needs
//! to build a `NewRecord`; records, change events and the source state are the caller's.
//!
//! Blast radius: an [`EntryError`] loses one entry (missing path, symlink, hash mismatch…);
//! a [`DumpError`] loses the whole package (no manifest, unsafe names, a zip bomb, a failing
//! store) and the caller gets no item of it.
//!
//! # Architecture
//! Depends on the fetcher, the model and the store; never on the publisher or the web server.
//! ZIP reading and hashing are blocking and run on tokio's blocking pool.

mod error;
mod item;
mod package;
mod window;

use std::ops::ControlFlow;
use std::path::PathBuf;

use sha2::Digest as _;
use tokio::sync::mpsc;
use url::Url;

pub use error::{DumpError, EntryError};
pub use item::{Content, DumpItem, DumpLimits};

use super::index::{IndexWalker, WalkLimits};
use crate::config::Settings;
use crate::fetch::{Fetched, Fetcher};
use crate::model::{DocumentKind, Entry, HashAlgorithm, HashList, Header};
use crate::store::Store;
use package::{PackageFile, manifest_kind, read_package};

/// How to run a dump walk.
#[derive(Debug, Clone)]
pub struct DumpOptions {
    /// Package caps.
    pub limits: DumpLimits,
    /// When set (and the source does not allow resources outside its authority), each
    /// `<loc>` must be within the authority of this URL (the configured source URL).
    pub authority: Option<Url>,
    /// Directory for the temporary package files (the system's by default).
    pub temp_dir: Option<PathBuf>,
    /// Bounds of the walk over the dump document and its indexes.
    pub walk: WalkLimits,
}

impl DumpOptions {
    /// Options for a source's settings and URL.
    pub fn new(settings: &Settings, source_url: Option<&Url>) -> Self {
        DumpOptions {
            limits: DumpLimits::from_settings(settings),
            authority: source_url.filter(|_| !settings.allow_outside_authority).cloned(),
            temp_dir: None,
            walk: WalkLimits::default(),
        }
    }
}

/// One package, read in full.
#[derive(Debug)]
pub struct Package {
    /// The package URL (after redirects).
    pub url: Url,
    /// [`DocumentKind::ResourceDumpManifest`] or [`DocumentKind::ChangeDumpManifest`].
    pub kind: DocumentKind,
    /// The manifest's root metadata (`at`/`completed` or `from`/`until`).
    pub manifest: Header,
    /// One item per manifest entry: document order for Resource Dumps, forward chronological
    /// order for Change Dumps.
    pub items: Vec<DumpItem>,
}

/// A package whose items went to a channel (see [`DumpWalker::next_package_streamed`]).
#[derive(Debug)]
pub struct StreamedPackage {
    /// The package URL (after redirects).
    pub url: Url,
    /// The manifest's root metadata (`at`/`completed` or `from`/`until`).
    pub manifest: Header,
}

/// Where a package's items go as they are read, on the blocking thread.
trait Sink: Send + 'static {
    fn take(&mut self, item: DumpItem) -> ControlFlow<()>;
}

impl Sink for Vec<DumpItem> {
    fn take(&mut self, item: DumpItem) -> ControlFlow<()> {
        self.push(item);
        ControlFlow::Continue(())
    }
}

impl Sink for mpsc::Sender<DumpItem> {
    fn take(&mut self, item: DumpItem) -> ControlFlow<()> {
        match self.blocking_send(item) {
            Ok(()) => ControlFlow::Continue(()),
            Err(_) => ControlFlow::Break(()),
        }
    }
}

/// Walks a Resource Dump or Change Dump (or an index of them) package by package.
pub struct DumpWalker {
    walker: IndexWalker,
    fetcher: Fetcher,
    store: Store,
    settings: Settings,
    options: DumpOptions,
    aborted: bool,
    /// The next package of a streamed walk, already downloading (see
    /// [`DumpWalker::next_package_streamed`]), or the error finding it gave.
    ahead: Option<Result<Ahead, DumpError>>,
}

/// A package whose download started before it was asked for.
struct Ahead {
    entry: Entry,
    expect: DocumentKind,
    download: AbortOnDrop,
}

/// A downloaded package: the file, the URL after redirects and its length.
type Downloaded = (std::fs::File, Url, u64);

/// A download task that stops when the walk that started it is dropped, never asked for.
struct AbortOnDrop(tokio::task::JoinHandle<Result<Downloaded, DumpError>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl DumpWalker {
    /// A walk starting at the dump document (or dump index) at `url`.
    pub fn new(fetcher: &Fetcher, store: &Store, url: Url, settings: &Settings, options: DumpOptions) -> Self {
        DumpWalker {
            walker: IndexWalker::new(fetcher, url, settings, options.walk),
            fetcher: fetcher.clone(),
            store: store.clone(),
            settings: settings.clone(),
            options,
            aborted: false,
            ahead: None,
        }
    }

    /// Makes the first request for the dump document conditional on `validators`; when the
    /// Source answers `304` the walk yields no package and [`DumpWalker::not_modified`] is true.
    pub fn conditional(mut self, validators: Option<crate::fetch::Validators>) -> Self {
        self.walker = self.walker.conditional(validators);
        self
    }

    /// Whether the dump document was answered `304 Not Modified`.
    pub fn not_modified(&self) -> bool {
        self.walker.not_modified()
    }

    /// `ETag`/`Last-Modified` of the dump document, once read.
    pub fn root_validators(&self) -> Option<&crate::fetch::Validators> {
        self.walker.root_validators()
    }

    /// The header of the dump document (or dump index) the walk started at, once read.
    pub fn root_header(&self) -> Option<&Header> {
        self.walker.root_header()
    }

    /// The next package, downloaded and stored; `Ok(None)` once the dump was read in full.
    ///
    /// # Errors
    /// A [`DumpError`]. When [`DumpError::is_package_local`] is true only that package was
    /// lost and the walk may go on (for a Change Dump, stop anyway: its changes are missing);
    /// otherwise the walk is over and further calls return [`DumpError::WalkAborted`].
    pub async fn next_package(&mut self) -> Result<Option<Package>, DumpError> {
        self.next_package_where(|_| true).await
    }

    /// Like [`DumpWalker::next_package`], but each item is sent to `items` as soon as its
    /// bitstream is stored instead of being collected: the caller handles (and commits) a
    /// package's first items while its last ones are still being read, and memory holds
    /// `items`' capacity rather than a whole package. Drain `items` concurrently with this
    /// future; dropping the receiver stops the read after the current entry.
    ///
    /// The next package's download starts as soon as this one's has finished, so it arrives
    /// while this one is read (a package is read from a local file, on a blocking thread): the
    /// source still sees one package request at a time.
    ///
    /// # Errors
    /// As [`DumpWalker::next_package`]; items sent before a package error stay sent.
    pub async fn next_package_streamed(
        &mut self,
        items: mpsc::Sender<DumpItem>,
    ) -> Result<Option<StreamedPackage>, DumpError> {
        let ahead = match self.ahead.take() {
            Some(ahead) => ahead?,
            None => match self.next_wanted(|_| true).await? {
                Some((url, entry, expect)) => self.start_download(url, entry, expect),
                None => return Ok(None),
            },
        };
        let Ahead { entry, expect, mut download } = ahead;
        let downloaded = (&mut download.0)
            .await
            .map_err(|e| DumpError::TempFile { url: entry.loc.clone(), source: std::io::Error::other(e) });
        let read = match downloaded.and_then(|d| d) {
            Ok(file) => {
                // The walk to the next package entry and its download overlap this read.
                self.ahead = match self.next_wanted(|_| true).await {
                    Ok(Some((url, entry, expect))) => Some(Ok(self.start_download(url, entry, expect))),
                    Ok(None) => None,
                    Err(e) => Some(Err(e)),
                };
                self.read_downloaded(file, expect, items).await
            }
            Err(e) => Err(e),
        };
        read.map(|(url, manifest, _)| Some(StreamedPackage { url, manifest })).inspect_err(|e| {
            self.aborted |= !e.is_package_local();
        })
    }

    /// Starts downloading a package on a task of its own.
    fn start_download(&self, url: Url, entry: Entry, expect: DocumentKind) -> Ahead {
        let (fetcher, settings, temp_dir) =
            (self.fetcher.clone(), self.settings.clone(), self.options.temp_dir.clone());
        let declared = entry.clone();
        let download = tokio::spawn(async move { download(&fetcher, &settings, temp_dir, &url, &declared).await });
        Ahead { entry, expect, download: AbortOnDrop(download) }
    }

    /// Like [`DumpWalker::next_package`], but packages whose dump entry (`<loc>` and its
    /// `<rs:md>`, e.g. a Change Dump's `from`/`until`) fails `want` are passed over without
    /// being downloaded: a Change Dump follower need not fetch packages it already applied.
    ///
    /// # Errors
    /// As [`DumpWalker::next_package`].
    pub async fn next_package_where(&mut self, want: impl FnMut(&Entry) -> bool) -> Result<Option<Package>, DumpError> {
        let Some((url, entry, expect)) = self.next_wanted(want).await? else { return Ok(None) };
        let read = self.read(url, &entry, expect, Vec::new()).await;
        // A Resource Dump is read on several threads, so its items may arrive a little out of
        // manifest order; a Change Dump's come in the order they apply, which is not `position`.
        let read = read.map(|(url, manifest, mut items)| {
            if expect == DocumentKind::ResourceDumpManifest {
                items.sort_by_key(|i| i.position);
            }
            (url, manifest, items)
        });
        read.map(|(url, manifest, items)| Some(Package { url, kind: expect, manifest, items })).inspect_err(|e| {
            self.aborted |= !e.is_package_local();
        })
    }

    /// The next package entry `want` accepts: its URL, the entry and the manifest kind.
    async fn next_wanted(
        &mut self,
        mut want: impl FnMut(&Entry) -> bool,
    ) -> Result<Option<(Url, Entry, DocumentKind)>, DumpError> {
        if self.aborted {
            return Err(DumpError::WalkAborted);
        }
        // Bounded by the walk's document limit and each document's entry limit.
        let entry = loop {
            match self.walker.next_entry().await {
                Ok(Some(e)) if want(&e) => break e,
                Ok(Some(_)) => {}
                Ok(None) => return Ok(None),
                Err(e) => {
                    self.aborted = true;
                    return Err(e.into());
                }
            }
        };
        let (base, expect) = self.leaf_context()?;
        let url = base.join(&entry.loc).map_err(|e| DumpError::PackageMismatch {
            url: entry.loc.clone(),
            detail: format!("package <loc> is not a URL: {e}"),
        })?;
        Ok(Some((url, entry, expect)))
    }

    /// The URL of the dump document the entry came from and the manifest kind it calls for.
    fn leaf_context(&mut self) -> Result<(Url, DocumentKind), DumpError> {
        let leaf = self.walker.leaf().map(|(u, h)| (u.clone(), h.capability().and_then(manifest_kind)));
        match leaf {
            Some((url, Some(kind))) => Ok((url, kind)),
            other => {
                self.aborted = true;
                let url = other.map_or_else(String::new, |(u, _)| u.to_string());
                Err(DumpError::WrongManifest {
                    url,
                    expected: "a Resource Dump or Change Dump",
                    found: "another document".into(),
                })
            }
        }
    }

    /// Downloads the package and reads it on a blocking thread, handing its items to `sink`;
    /// returns the URL after redirects, the manifest header and the sink.
    async fn read<S: Sink>(
        &self,
        url: Url,
        entry: &Entry,
        expect: DocumentKind,
        sink: S,
    ) -> Result<(Url, Header, S), DumpError> {
        let downloaded = download(&self.fetcher, &self.settings, self.options.temp_dir.clone(), &url, entry).await?;
        self.read_downloaded(downloaded, expect, sink).await
    }

    /// Reads a downloaded package on a blocking thread, handing its items to `sink`.
    async fn read_downloaded<S: Sink>(
        &self,
        (file, final_url, length): Downloaded,
        expect: DocumentKind,
        mut sink: S,
    ) -> Result<(Url, Header, S), DumpError> {
        let input =
            PackageFile { url: final_url.clone(), file, length, expect, authority: self.options.authority.clone() };
        let (store, limits) = (self.store.clone(), self.options.limits.clone());
        let read = move || read_package(input, &store, &limits, |item| sink.take(item)).map(|h| (h, sink));
        let (manifest, sink) = tokio::task::spawn_blocking(read)
            .await
            .map_err(|e| DumpError::TempFile { url: final_url.to_string(), source: std::io::Error::other(e) })??;
        Ok((final_url, manifest, sink))
    }
}

/// Streams the package into an anonymous temporary file (in `temp_dir`, else the system's),
/// checking the dump's declared length and hash on the way.
///
/// The file is written, and the hash computed, each on a blocking thread of its own fed the
/// same chunks: hashing a 140 MB package on the task that receives it held the download to a
/// third of the loopback's speed, and the first package's download is time nothing else
/// overlaps.
async fn download(
    fetcher: &Fetcher,
    settings: &Settings,
    temp_dir: Option<PathBuf>,
    url: &Url,
    entry: &Entry,
) -> Result<Downloaded, DumpError> {
    let fetch_err = |source| DumpError::Fetch { url: url.to_string(), source };
    let temp_err = |source| DumpError::TempFile { url: url.to_string(), source };
    let mut resp = match fetcher.get_stream(url, settings, None).await.map_err(fetch_err)? {
        Fetched::Modified(r) => r,
        Fetched::NotModified => {
            let detail = "304 Not Modified to an unconditional request".to_owned();
            return Err(DumpError::PackageMismatch { url: url.to_string(), detail });
        }
    };
    let file = match &temp_dir {
        Some(dir) => tempfile::tempfile_in(dir),
        None => tempfile::tempfile(),
    }
    .map_err(temp_err)?;
    let check = PackageCheck::new(entry);
    let (to_file, writing) = on_thread(move |chunks| write_all(file, chunks));
    let hashing = check.wanted().map(|alg| (alg.clone(), on_thread(move |chunks| digest(alg, chunks))));
    let mut read = 0u64;
    // Bounded by the fetcher's size cap and deadlines.
    while let Some(chunk) = resp.chunk().await.map_err(fetch_err)? {
        read += chunk.len() as u64;
        if let Some((_, (tx, _))) = &hashing {
            // A hashing thread only goes away when the runtime shuts down.
            let _ = tx.send(chunk.clone()).await;
        }
        if to_file.send(chunk).await.is_err() {
            break; // the write failed: its error is read below
        }
    }
    drop(to_file);
    let file = joined(writing).await.and_then(|r| r).map_err(temp_err)?;
    let digest = match hashing {
        Some((alg, (tx, hashed))) => {
            drop(tx);
            Some((alg, joined(hashed).await.map_err(temp_err)?))
        }
        None => None,
    };
    let length = check.finish(url, read, digest)?;
    Ok((file, resp.url, length))
}

/// Chunks a download thread may lag behind the network by.
const CHUNKS_AHEAD: usize = 64;

type Feed = tokio::sync::mpsc::Sender<bytes::Bytes>;
type Chunks = tokio::sync::mpsc::Receiver<bytes::Bytes>;

/// Runs `work` on a blocking thread over the chunks sent to the returned sender.
fn on_thread<T: Send + 'static>(work: impl FnOnce(Chunks) -> T + Send + 'static) -> (Feed, tokio::task::JoinHandle<T>) {
    let (tx, rx) = tokio::sync::mpsc::channel(CHUNKS_AHEAD);
    (tx, tokio::task::spawn_blocking(move || work(rx)))
}

async fn joined<T>(task: tokio::task::JoinHandle<T>) -> std::io::Result<T> {
    task.await.map_err(std::io::Error::other)
}

fn write_all(file: std::fs::File, mut chunks: Chunks) -> std::io::Result<std::fs::File> {
    use std::io::Write as _;
    let mut out = std::io::BufWriter::with_capacity(256 * 1024, file);
    // Bounded by the download: the loop ends when its sender is dropped.
    while let Some(chunk) = chunks.blocking_recv() {
        out.write_all(&chunk)?;
    }
    out.into_inner().map_err(std::io::IntoInnerError::into_error)
}

fn digest(alg: HashAlgorithm, mut chunks: Chunks) -> String {
    fn run<D: sha2::Digest>(mut h: D, chunks: &mut Chunks) -> String {
        // Bounded by the download: the loop ends when its sender is dropped.
        while let Some(chunk) = chunks.blocking_recv() {
            h.update(&chunk);
        }
        hex::encode(h.finalize())
    }
    match alg {
        HashAlgorithm::Md5 => run(md5::Md5::new(), &mut chunks),
        HashAlgorithm::Sha1 => run(sha1::Sha1::new(), &mut chunks),
        _ => run(sha2::Sha256::new(), &mut chunks),
    }
}

/// The length and hash a dump declares for a package, checked once it is downloaded.
struct PackageCheck {
    length: Option<u64>,
    declared: HashList,
}

impl PackageCheck {
    fn new(entry: &Entry) -> Self {
        let md = entry.md.clone().unwrap_or_default();
        PackageCheck { length: md.length, declared: md.hash.unwrap_or_default() }
    }

    /// The algorithm the package is checked with: the strongest declared. A package is only the
    /// container its entries travel in (each entry is verified against its own manifest entry,
    /// and nothing of the package is kept), so a sha-256 that matches settles it; computing a
    /// declared md5 as well took a sixth of a dump baseline's CPU for no added assurance.
    fn wanted(&self) -> Option<HashAlgorithm> {
        [HashAlgorithm::Sha256, HashAlgorithm::Sha1, HashAlgorithm::Md5]
            .into_iter()
            .find(|alg| self.declared.get(alg).is_some())
    }

    fn finish(self, url: &Url, read: u64, digest: Option<(HashAlgorithm, String)>) -> Result<u64, DumpError> {
        let mismatch = |detail| Err(DumpError::PackageMismatch { url: url.to_string(), detail });
        if let Some(len) = self.length.filter(|&l| l != read) {
            return mismatch(format!("{read} bytes, but the dump declares {len}"));
        }
        if let Some((alg, value)) = digest
            && let Some(want) = self.declared.get(&alg)
            && value != want
        {
            return mismatch(format!("{} is {value}, but the dump declares {want}", alg.as_str()));
        }
        Ok(read)
    }
}

/// Counts over a whole dump walk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DumpSummary {
    /// Packages read.
    pub packages: usize,
    /// Bitstreams stored.
    pub stored: usize,
    /// Deletions reported.
    pub deleted: usize,
    /// Entries that failed.
    pub failed: usize,
}

/// Walks the dump at `url` and hands each package, in order, to `on_package`, which builds
/// and applies the records (returning `Break` stops the walk).
///
/// # Errors
/// The first [`DumpError`]: a Change Dump must not skip a package, and a Resource Dump with a
/// failed package is incomplete, so this convenience stops at any failure. Use
/// [`DumpWalker`] to continue past package-local errors.
pub async fn process_dump(
    fetcher: &Fetcher,
    store: &Store,
    url: Url,
    settings: &Settings,
    options: DumpOptions,
    mut on_package: impl FnMut(Package) -> ControlFlow<()>,
) -> Result<DumpSummary, DumpError> {
    let mut walker = DumpWalker::new(fetcher, store, url, settings, options);
    let mut summary = DumpSummary::default();
    // Bounded by the walk's document limit and each document's entry limit.
    while let Some(package) = walker.next_package().await? {
        summary.packages += 1;
        for item in &package.items {
            match &item.outcome {
                Ok(Content::Stored { .. }) => summary.stored += 1,
                Ok(Content::Deleted { .. }) => summary.deleted += 1,
                Err(_) => summary.failed += 1,
            }
        }
        if on_package(package).is_break() {
            break;
        }
    }
    Ok(summary)
}
