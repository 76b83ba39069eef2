//! Resource Dumps (spec §11): each set's resources packaged in ZIP files, so a Destination
//! can bulk-load the aggregate in a few requests instead of one per resource.
//!
//! # One state per dump
//! A dump is one snapshot of the store: the set as it stood at one position `seq` of its
//! change log, read while the harvester goes on writing. Every package of a dump has the same
//! `seq`; the dump document's `at` is the snapshot's and its `completed` the end of building.
//!
//! # Cached on disk
//! Packages are built once per state and kept as files under the store's directory
//! (`dumps/<set>/`), with their manifests beside them: a package is served many times, by
//! byte ranges, with a strong `ETag` (its sha-256), which a package streamed anew on every
//! request could not offer. A new dump is built on request when the set has changed and the
//! dump is older than `max_age`; the previous generation is kept for downloads under way, older
//! ones are deleted. Building reads the records once and each bitstream once, holding one
//! package's list of blob ids in memory (32 bytes an entry), never a bitstream.
//!
//! # Layout of a package
//! `manifest.xml` first (the Resource Dump Manifest), then each bitstream at
//! `resources/<n>`, the path its manifest entry names; stored, not deflated (most bitstreams
//! worth dumping are compressed already, and a stored entry costs no CPU to write or read).

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use zip::write::SimpleFileOptions;

use super::plan::KeyRange;
use super::resources::lock;
use super::{PublishError, Publisher, SetView};
use crate::model::{
    Capability, DocumentWriter, Entry, HashAlgorithm, Header, Link, Md, RootFormat, SITEMAP_MAX_ENTRIES, W3cDateTime,
};
use crate::store::{BlobId, Record, Snapshot, Store, StoreError};

/// Packages of a dump are bounded by entries and by bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DumpLimits {
    /// Bitstreams per package (1..=50,000: its manifest is a Sitemap document).
    pub package_entries: usize,
    /// Bytes of bitstreams per package (a single larger bitstream still gets a package).
    pub package_bytes: u64,
    /// A dump is rebuilt on request once its set has changed and it is older than this.
    pub max_age: Duration,
}

impl Default for DumpLimits {
    fn default() -> Self {
        DumpLimits { package_entries: SITEMAP_MAX_ENTRIES, package_bytes: 1 << 30, max_age: Duration::from_secs(3600) }
    }
}

/// A built Resource Dump: what its document lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceDump {
    /// The set.
    pub set: String,
    /// The position in the set's change log the dump shows.
    pub seq: u64,
    /// When building started (the document's and every manifest's `at`).
    pub at: String,
    /// When building ended.
    pub completed: String,
    /// Its packages, in order.
    pub packages: Vec<DumpPackage>,
}

/// One package of a [`ResourceDump`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DumpPackage {
    /// 1-based number within the dump.
    pub n: u64,
    /// Bytes of the ZIP file.
    pub length: u64,
    /// sha-256 of the ZIP file, hex.
    pub sha256: String,
    /// Bitstreams in it.
    pub entries: u64,
    /// When its manifest was finished.
    pub completed: String,
}

/// A package or manifest file to serve.
#[derive(Debug, Clone)]
pub struct DumpFile {
    /// Where it is.
    pub path: PathBuf,
    /// Its length in bytes.
    pub length: u64,
    /// Its strong entity tag, quoted: the package's sha-256 (a manifest: with `-m`).
    pub etag: String,
    /// `application/zip` or `application/xml`.
    pub media_type: &'static str,
}

/// One bitstream of a package: its path inside the ZIP and its content.
pub(super) struct Member {
    pub(super) name: String,
    pub(super) sha256: BlobId,
    pub(super) length: u64,
}

impl DumpFile {
    /// The package (or manifest) file at `path` of the package whose sha-256 is `sha256`;
    /// `None` when the file is gone (deleted with its generation).
    pub(super) fn at(path: PathBuf, sha256: &str, manifest: bool) -> Result<Option<DumpFile>, PublishError> {
        let length = match fs::metadata(&path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(dump_io(&path, e)),
        };
        // A manifest gets a tag of its own: it is another representation than the package.
        let (etag, media_type) = match manifest {
            true => (format!("\"{sha256}-m\""), "application/xml"),
            false => (format!("\"{sha256}\""), "application/zip"),
        };
        Ok(Some(DumpFile { path, length, etag, media_type }))
    }
}

/// A resource as the dump shows it: its manifest entry (without `path`) and its content.
struct Item {
    entry: Entry,
    sha256: BlobId,
    length: u64,
}

/// The mutable part of a set's dump state.
#[derive(Debug, Default)]
pub(super) struct DumpState {
    pub(super) current: Option<Arc<ResourceDump>>,
}

impl Publisher {
    /// The set's current Resource Dump, built now when there is none yet or the set has
    /// changed since and the dump is older than `max_age`. Blocks for the build; builds of one
    /// set run one at a time (a second request waits and gets the first's result).
    ///
    /// # Errors
    /// [`PublishError::UnknownSet`]; [`PublishError::Store`]; [`PublishError::Dump`] when a
    /// package cannot be written or a bitstream is missing from the store (no dump is served
    /// then, rather than a short one).
    pub fn resource_dump(&self, set: &str) -> Result<Arc<ResourceDump>, PublishError> {
        let view = self.dump_view(set)?;
        let mut state = lock(&view.dump);
        // One snapshot: the dump holds the set as it stood at its last event `seq`, and its
        // `at` is the snapshot's, so every later change is stamped at or after it.
        let snap = self.store.snapshot();
        let seq = snap.set_info(set)?.map_or(0, |i| i.events);
        if state.current.is_none() {
            state.current = self.saved_dump(set)?.map(Arc::new);
        }
        if let Some(d) = &state.current
            && (d.seq == seq || !self.is_old(d))
        {
            return Ok(d.clone());
        }
        let dump = match self.build_dump(&view, &snap, seq) {
            Ok(d) => Arc::new(d),
            Err(e) => {
                self.remove_generation(set, seq);
                return Err(e);
            }
        };
        state.current = Some(dump.clone());
        self.prune_dumps(set, dump.seq);
        Ok(dump)
    }

    /// The Resource Dump document of `dump`.
    pub fn resource_dump_document(&self, dump: &ResourceDump) -> Vec<u8> {
        let naming = &self.naming;
        let md = Md {
            capability: Some(Capability::ResourceDump),
            at: dump.at.parse().ok(),
            completed: dump.completed.parse().ok(),
            ..Md::default()
        };
        let mut header = Header::new(RootFormat::UrlSet, md);
        header.links.push(Link::new("up", naming.capability_list(&dump.set)));
        let entries = dump
            .packages
            .iter()
            .map(|p| {
                let sha = crate::model::Digest { algorithm: HashAlgorithm::Sha256, value: p.sha256.clone() };
                Entry {
                    md: Some(Md {
                        media_type: Some("application/zip".into()),
                        length: Some(p.length),
                        hash: Some(crate::model::HashList(vec![sha])),
                        at: dump.at.parse().ok(),
                        completed: p.completed.parse().ok(),
                        ..Md::default()
                    }),
                    links: vec![Link {
                        media_type: Some("application/xml".into()),
                        ..Link::new("contents", naming.resource_dump_manifest(&dump.set, dump.seq, p.n))
                    }],
                    ..Entry::new(naming.resource_dump_package(&dump.set, dump.seq, p.n))
                }
            })
            .collect();
        crate::model::to_bytes(&crate::model::Document { header, entries })
    }

    /// Package `n` of the dump at `seq` of `set` (or its manifest), while it is kept: the
    /// current generation and the one before it.
    ///
    /// # Errors
    /// [`PublishError::UnknownSet`]; [`PublishError::Dump`] when its file cannot be read.
    pub fn resource_dump_file(
        &self,
        set: &str,
        seq: u64,
        n: u64,
        manifest: bool,
    ) -> Result<Option<DumpFile>, PublishError> {
        self.dump_view(set)?;
        let Some(dump) = self.dump_at(set, seq)? else { return Ok(None) };
        let Some(p) = dump.packages.iter().find(|p| p.n == n) else { return Ok(None) };
        let dir = self.dump_dir(set);
        let path = if manifest { dir.join(manifest_name(seq, n)) } else { dir.join(package_name(seq, n)) };
        DumpFile::at(path, &p.sha256, manifest)
    }

    fn is_old(&self, dump: &ResourceDump) -> bool {
        self.is_older_than_max_age(&dump.completed)
    }

    /// Whether something built at `built` (W3C datetime text) is `dump_max_age` old.
    pub(super) fn is_older_than_max_age(&self, built: &str) -> bool {
        let max_age = i64::try_from(self.limits().dump.max_age.as_secs()).unwrap_or(i64::MAX);
        let built = built.parse::<W3cDateTime>().map_or(0, |t| t.unix_timestamp());
        W3cDateTime::now().unix_timestamp().saturating_sub(built) >= max_age
    }

    pub(super) fn dump_dir(&self, set: &str) -> PathBuf {
        self.store.path().join("dumps").join(set)
    }

    /// The dump at `seq`: the current one, or a kept earlier one read from its index file.
    fn dump_at(&self, set: &str, seq: u64) -> Result<Option<Arc<ResourceDump>>, PublishError> {
        if let Some(d) = lock(&self.view_or_missing(set)?.dump).current.clone().filter(|d| d.seq == seq) {
            return Ok(Some(d));
        }
        read_index(&self.dump_dir(set).join(index_name(seq))).map(|d| d.map(Arc::new))
    }

    /// The newest dump kept on disk (after a restart).
    fn saved_dump(&self, set: &str) -> Result<Option<ResourceDump>, PublishError> {
        let Some(seq) = kept_seqs(&self.dump_dir(set)).into_iter().max() else { return Ok(None) };
        read_index(&self.dump_dir(set).join(index_name(seq)))
    }

    /// Deletes every generation but `current` and the one before it.
    fn prune_dumps(&self, set: &str, current: u64) {
        let mut seqs = kept_seqs(&self.dump_dir(set));
        seqs.retain(|&s| s != current);
        seqs.sort_unstable();
        let older = seqs.len().saturating_sub(1);
        for seq in &seqs[..older] {
            self.remove_generation(set, *seq);
        }
    }

    /// Deletes the files of the dump at `seq` (a download under way keeps its open file; the
    /// next request for it is a 404), or what a failed build of it left.
    fn remove_generation(&self, set: &str, seq: u64) {
        let Ok(files) = fs::read_dir(self.dump_dir(set)) else { return };
        let (index, prefix) = (index_name(seq), format!("resourcedump-{seq}-"));
        for f in files.flatten() {
            let name = f.file_name();
            let name = name.to_string_lossy();
            if name == index || name.starts_with(&prefix) {
                let _ = fs::remove_file(f.path());
            }
        }
    }

    /// Builds the dump of `set` from `snap`, in which its last event is `seq`.
    fn build_dump(&self, view: &SetView, snap: &Snapshot, seq: u64) -> Result<ResourceDump, PublishError> {
        let set = &view.config.id;
        let at = snap.at();
        let dir = self.dump_dir(set);
        fs::create_dir_all(&dir).map_err(|e| dump_io(&dir, e))?;
        let all = KeyRange::all();
        let mut items = self.items(snap, view, &all).peekable();
        let mut packages = Vec::new();
        // Bounded by the set's records: each package takes at least one.
        while items.peek().is_some() {
            let n = packages.len() as u64 + 1;
            packages.push(self.write_package(set, &dir, seq, n, at, &mut items)?);
        }
        let dump = ResourceDump {
            set: set.clone(),
            seq,
            at: at.to_string(),
            // Never before `at`, which the store's stamps may put a few ms ahead of the clock.
            completed: W3cDateTime::now_millis().max(at).to_string(),
            packages,
        };
        write_index(&dir.join(index_name(seq)), &dump)?;
        tracing::info!(set = %set, seq, packages = dump.packages.len(), "built the Resource Dump");
        Ok(dump)
    }

    /// The set's live resources in `snap`, in URI order.
    fn items<'a>(
        &'a self,
        snap: &'a Snapshot,
        view: &'a SetView,
        range: &'a KeyRange,
    ) -> impl Iterator<Item = Result<Item, PublishError>> + 'a {
        self.raw_records(snap, view, range).filter_map(move |raw| {
            let item = raw.map_err(PublishError::from).and_then(|raw| {
                let rec = raw.record()?;
                if rec.is_deleted() { Ok(None) } else { self.item_of_record(view, rec).map(Some) }
            });
            item.transpose()
        })
    }

    fn item_of_record(&self, view: &SetView, rec: Record) -> Result<Item, PublishError> {
        let (sha256, length) = (rec.sha256, rec.length);
        let entry = self.entry(view, rec)?;
        Ok(Item { entry, sha256, length })
    }

    /// Writes the next package (at least one item, then until a limit) and its manifest.
    fn write_package(
        &self,
        set: &str,
        dir: &Path,
        seq: u64,
        n: u64,
        at: W3cDateTime,
        items: &mut std::iter::Peekable<impl Iterator<Item = Result<Item, PublishError>>>,
    ) -> Result<DumpPackage, PublishError> {
        let manifest_path = dir.join(manifest_name(seq, n));
        let blobs = self.write_manifest(set, &manifest_path, at, items)?;
        let completed = W3cDateTime::now_millis().max(at);
        let package_path = dir.join(package_name(seq, n));
        let (length, sha256) = write_zip(&self.store, &package_path, &manifest_path, &blobs)?;
        Ok(DumpPackage { n, length, sha256, entries: blobs.len() as u64, completed: completed.to_string() })
    }

    /// Writes the manifest of the next package; returns its bitstreams in path order.
    fn write_manifest(
        &self,
        set: &str,
        path: &Path,
        at: W3cDateTime,
        items: &mut std::iter::Peekable<impl Iterator<Item = Result<Item, PublishError>>>,
    ) -> Result<Vec<Member>, PublishError> {
        let md = Md { capability: Some(Capability::ResourceDumpManifest), at: Some(at), ..Md::default() };
        let mut header = Header::new(RootFormat::UrlSet, md);
        header.links.push(Link::new("up", self.naming.capability_list(set)));
        let file = File::create(path).map_err(|e| dump_io(path, e))?;
        let mut w = DocumentWriter::new(BufWriter::new(file), &header).map_err(|e| dump_io(path, e))?;
        let (limits, mut blobs, mut bytes) = (self.limits().dump, Vec::new(), 0u64);
        // Bounded by the package's entry limit.
        while blobs.len() < limits.package_entries {
            let fits = match items.peek() {
                None => break,
                Some(Err(_)) => true,
                Some(Ok(i)) => blobs.is_empty() || bytes.saturating_add(i.length) <= limits.package_bytes,
            };
            if !fits {
                break;
            }
            let Some(item) = items.next() else { break };
            let mut item = item?;
            let name = entry_path(blobs.len() + 1);
            if let Some(md) = item.entry.md.as_mut() {
                md.path = Some(format!("/{name}"));
            }
            w.write_entry(&item.entry).map_err(|e| dump_io(path, e))?;
            bytes = bytes.saturating_add(item.length);
            blobs.push(Member { name, sha256: item.sha256, length: item.length });
        }
        let mut out = w.finish().map_err(|e| dump_io(path, e))?;
        out.flush().map_err(|e| dump_io(path, e))?;
        Ok(blobs)
    }
}

/// Writes a package: `manifest.xml` from the file `manifest`, then each member's bitstream
/// from the store, in one pass to a temporary file renamed into place once complete. Returns
/// its length and sha-256, hashed as it is written. Nothing is left behind on failure.
pub(super) fn write_zip(
    store: &Store,
    path: &Path,
    manifest: &Path,
    members: &[Member],
) -> Result<(u64, String), PublishError> {
    let tmp = path.with_extension("zip.tmp");
    let written = write_zip_to(store, &tmp, manifest, members);
    match written {
        Ok(done) => fs::rename(&tmp, path).map(|()| done).map_err(|e| dump_io(path, e)),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

fn write_zip_to(store: &Store, tmp: &Path, manifest: &Path, members: &[Member]) -> Result<(u64, String), PublishError> {
    let file = File::create(tmp).map_err(|e| dump_io(tmp, e))?;
    let mut zip = zip::ZipWriter::new_stream(Hashing::new(BufWriter::with_capacity(1 << 20, file)));
    let options = |len: u64| {
        SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .last_modified_time(zip::DateTime::default())
            .large_file(len >= u64::from(u32::MAX))
    };
    let zip_err = |e: zip::result::ZipError| dump_io(tmp, io::Error::other(e));
    let manifest_len = fs::metadata(manifest).map_err(|e| dump_io(manifest, e))?.len();
    zip.start_file("manifest.xml", options(manifest_len)).map_err(zip_err)?;
    io::copy(&mut File::open(manifest).map_err(|e| dump_io(manifest, e))?, &mut zip).map_err(|e| dump_io(tmp, e))?;
    for m in members {
        let (sha, len) = (&m.sha256, &m.length);
        zip.start_file(m.name.as_str(), options(*len)).map_err(zip_err)?;
        let mut reader = store.get(sha).map_err(|e| missing(sha, e))?;
        let copied = io::copy(&mut reader, &mut zip).map_err(|e| dump_io(tmp, e))?;
        if copied != *len {
            let what = format!("bitstream sha-256:{} is {copied} bytes, not {len}", sha.to_hex());
            return Err(PublishError::Dump { what, source: None });
        }
    }
    let hashing = zip.finish().map_err(zip_err)?.into_inner();
    let (mut out, length, sha256) = hashing.finish();
    out.flush().map_err(|e| dump_io(tmp, e))?;
    out.into_inner().map_err(|e| dump_io(tmp, e.into_error()))?.sync_all().map_err(|e| dump_io(tmp, e))?;
    Ok((length, sha256))
}

/// A writer that counts and hashes what passes through it.
struct Hashing<W: Write> {
    inner: W,
    hasher: Sha256,
    len: u64,
}

impl<W: Write> Hashing<W> {
    fn new(inner: W) -> Self {
        Hashing { inner, hasher: Sha256::new(), len: 0 }
    }

    fn finish(self) -> (W, u64, String) {
        (self.inner, self.len, hex::encode(self.hasher.finalize()))
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

pub(super) fn entry_path(k: usize) -> String {
    format!("resources/{k}")
}

fn package_name(seq: u64, n: u64) -> String {
    format!("resourcedump-{seq}-{n}.zip")
}

fn manifest_name(seq: u64, n: u64) -> String {
    format!("resourcedump-{seq}-{n}-manifest.xml")
}

fn index_name(seq: u64) -> String {
    format!("resourcedump-{seq}.json")
}

/// The generations kept in `dir`, by their index files.
fn kept_seqs(dir: &Path) -> Vec<u64> {
    let Ok(files) = fs::read_dir(dir) else { return Vec::new() };
    let seq = |name: &str| name.strip_prefix("resourcedump-")?.strip_suffix(".json")?.parse::<u64>().ok();
    files.flatten().filter_map(|f| seq(&f.file_name().to_string_lossy())).collect()
}

/// Writes what a generation or package is, as JSON beside its files.
pub(super) fn write_index<T: Serialize>(path: &Path, value: &T) -> Result<(), PublishError> {
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| dump_io(path, io::Error::other(e)))?;
    let tmp = path.with_extension("json.tmp");
    fs::write(&tmp, bytes).map_err(|e| dump_io(&tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| dump_io(path, e))
}

/// Reads what [`write_index`] wrote; `None` when there is no such file.
pub(super) fn read_index<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>, PublishError> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| dump_io(path, io::Error::other(e))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(dump_io(path, e)),
    }
}

pub(super) fn dump_io(path: &Path, e: io::Error) -> PublishError {
    PublishError::Dump { what: path.display().to_string(), source: Some(Box::new(e)) }
}

fn missing(sha: &BlobId, e: StoreError) -> PublishError {
    PublishError::Dump { what: format!("bitstream sha-256:{} cannot be read", sha.to_hex()), source: Some(Box::new(e)) }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;
    use crate::naming::Naming;
    use crate::publish::{Limits, LinkPolicies, SetConfig};
    use crate::store::{Batch, Expected, Listing, NewRecord, Store, StoreOptions, Via};

    fn record(uri: &str, sha256: BlobId) -> NewRecord {
        NewRecord {
            uri: uri.into(),
            source: "s".into(),
            upstream: format!("http://u/{uri}"),
            sha256,
            listing: Listing { origin: format!("http://o/{uri}"), via: Via::default(), ..Listing::default() },
        }
    }

    fn publisher(store: &Store, dump: DumpLimits) -> Publisher {
        let naming = Naming::new(&url::Url::parse("http://t/").unwrap());
        let limits = Limits { dump, ..Limits::default() };
        Publisher::new(store.clone(), naming, vec![SetConfig::source("s")], LinkPolicies::default(), limits).unwrap()
    }

    fn put(store: &Store, uri: &str, bytes: &[u8]) {
        let info = store.put(bytes, &Expected::none()).unwrap();
        store.apply(Batch::new().upsert(&["s"], record(&format!("http://t/r/s/{uri}"), info.id))).unwrap();
        store.flush().unwrap();
    }

    /// Every member of a package, in order, as (name, bytes).
    fn members(path: &Path) -> Vec<(String, Vec<u8>)> {
        let mut zip = zip::ZipArchive::new(File::open(path).unwrap()).unwrap();
        (0..zip.len())
            .map(|i| {
                let mut f = zip.by_index(i).unwrap();
                let mut bytes = Vec::new();
                f.read_to_end(&mut bytes).unwrap();
                (f.name().unwrap().into_owned(), bytes)
            })
            .collect()
    }

    #[test]
    fn with_dumps_off_no_dump_is_advertised_built_or_served() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_with(&dir.path().join("s"), &StoreOptions::small()).unwrap();
        put(&store, "a", b"alpha");
        let naming = Naming::new(&url::Url::parse("http://t/").unwrap());
        let limits = Limits { dumps: false, ..Limits::default() };
        let p = Publisher::new(store.clone(), naming, vec![SetConfig::source("s")], LinkPolicies::default(), limits)
            .unwrap();
        let capabilities = String::from_utf8(p.capability_list("s").unwrap()).unwrap();
        assert!(capabilities.contains("capability=\"resourcelist\""), "{capabilities}");
        assert!(!capabilities.contains("dump"), "{capabilities}");
        assert!(matches!(p.resource_dump("s"), Err(PublishError::DumpsOff)));
        assert!(matches!(p.resource_dump_file("s", 1, 1, false), Err(PublishError::DumpsOff)));
        assert!(matches!(p.change_dump("s"), Err(PublishError::DumpsOff)));
        assert!(matches!(p.change_dump_file("s", 1, None, true), Err(PublishError::DumpsOff)));
        assert!(!dir.path().join("s/dumps").exists(), "nothing was built");
    }

    #[test]
    fn packages_hold_their_manifest_first_and_split_by_entries() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_with(&dir.path().join("s"), &StoreOptions::small()).unwrap();
        for (uri, bytes) in [("a", &b"alpha"[..]), ("b", b"beta"), ("c", b"gamma")] {
            put(&store, uri, bytes);
        }
        let p = publisher(&store, DumpLimits { package_entries: 2, ..DumpLimits::default() });
        let dump = p.resource_dump("s").unwrap();
        assert_eq!(dump.packages.iter().map(|p| p.entries).collect::<Vec<_>>(), [2, 1]);
        let first = p.resource_dump_file("s", dump.seq, 1, false).unwrap().unwrap();
        let m = members(&first.path);
        assert_eq!(
            m.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            ["manifest.xml", "resources/1", "resources/2"]
        );
        assert_eq!((m[1].1.as_slice(), m[2].1.as_slice()), (&b"alpha"[..], &b"beta"[..]));
        let manifest = String::from_utf8(m[0].1.clone()).unwrap();
        assert!(manifest.contains("capability=\"resourcedump-manifest\""), "{manifest}");
        assert!(manifest.contains("<loc>http://t/r/s/a</loc>") && manifest.contains("path=\"/resources/1\""));
        assert!(manifest.contains("rel=\"via\" href=\"http://o/http://t/r/s/a\""), "{manifest}");
        let bytes = fs::read(&first.path).unwrap();
        assert_eq!(hex::encode(Sha256::digest(&bytes)), dump.packages[0].sha256);
        assert_eq!(first.length, dump.packages[0].length);
        let separate = fs::read_to_string(p.resource_dump_file("s", dump.seq, 1, true).unwrap().unwrap().path).unwrap();
        assert_eq!(separate, manifest, "the manifest served on its own is the one in the package");
        let doc = String::from_utf8(p.resource_dump_document(&dump)).unwrap();
        assert!(doc.contains(&format!("<loc>http://t/sets/s/resourcedump-{}-2.zip</loc>", dump.seq)), "{doc}");
    }

    #[test]
    fn a_dump_shows_the_set_as_it_stood_at_its_position() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_with(&dir.path().join("s"), &StoreOptions::small()).unwrap();
        put(&store, "a", b"first");
        let p = publisher(&store, DumpLimits::default());
        let snap = store.snapshot();
        let seq = snap.set_info("s").unwrap().unwrap().events;
        // After the snapshot: `a` changes, `b` appears.
        put(&store, "a", b"second");
        put(&store, "b", b"new");
        let view = p.view_or_missing("s").unwrap();
        let dump = p.build_dump(&view, &snap, seq).unwrap();
        assert_eq!(dump.at, snap.at().to_string());
        let m = members(&p.dump_dir("s").join(package_name(seq, 1)));
        assert_eq!(m.len(), 2, "b did not exist at the position: {:?}", m.iter().map(|(n, _)| n).collect::<Vec<_>>());
        assert_eq!(m[1].1, b"first");
        assert_eq!(dump.packages[0].entries, 1);
        assert_eq!(p.resource_dump("s").unwrap().seq, seq, "younger than max_age: the dump kept on disk is served");
        let eager = publisher(&store, DumpLimits { max_age: Duration::ZERO, ..DumpLimits::default() });
        let now = eager.resource_dump("s").unwrap();
        assert!(now.seq > seq && now.packages[0].entries == 2, "past max_age a changed set is dumped again");
    }

    #[test]
    fn a_missing_bitstream_fails_the_build_and_leaves_no_package() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_with(&dir.path().join("s"), &StoreOptions::small()).unwrap();
        put(&store, "a", b"here");
        drop(store);
        // The pack holding the bitstream loses its bytes behind the store's back.
        let pack = fs::read_dir(dir.path().join("s/packs")).unwrap().next().unwrap().unwrap().path();
        fs::OpenOptions::new().write(true).open(&pack).unwrap().set_len(0).unwrap();
        let store = Store::open_with(&dir.path().join("s"), &StoreOptions::small()).unwrap();
        let p = publisher(&store, DumpLimits::default());
        let err = p.resource_dump("s").unwrap_err();
        assert!(crate::error::chain(&err).to_string().contains("cannot be read"), "{err:?}");
        let left: Vec<_> = fs::read_dir(p.dump_dir("s")).unwrap().flatten().map(|f| f.file_name()).collect();
        assert!(left.is_empty(), "a failed build leaves nothing behind: {left:?}");
    }
}
