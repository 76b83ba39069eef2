//! `tributary store import`: a store's metadata rebuilt from an export file (see [`super::export`])
//! over the bitstreams already in the data directory.
//!
//! It is the way across a change of storage engine, a restore, and the move to another machine
//! (copy `packs/` and `blobs/`, then import). It is atomic: the new database is built beside the
//! store in `meta.import/`, checked against the file's `end` line and against the bitstreams it
//! names, marked complete, renamed to `meta/`, and only then does `FORMAT` name the new format.
//! Interrupted anywhere before that, the directory is what it was (an older store, or
//! bitstreams without metadata), which refuses to open; the import can simply be run again.
//! What is derived is rebuilt: the provenance indexes, and the change log's chunks (positions
//! and datetimes are the file's; only how events are grouped into rows may differ).

use std::collections::HashMap;
use std::fs;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use base64::Engine as _;

use super::blob::{BlobId, BlobRow, Place};
use super::codec;
use super::error::StoreError;
use super::export::{
    BlobLine, Counts, EXPORT_VERSION, EventLine, FailureLine, Header, Line, MAGIC, PlaceLine, RecordLine,
};
use super::log::{ChunkBuf, Counters, EventRef, event_key};
use super::open::{self, META_DIR, StoreOptions};
use super::pack::PackLoc;
use super::record::{Listing, Record, keys};
use super::table::{Db, Overlay};
use super::{FORMAT_VERSION, Trees, failure, feeds, hub_subscribers, row, state};

/// Rows committed per write batch while importing (a batch is one journal write).
const ROWS_PER_BATCH: usize = 20_000;

/// How many missing bitstreams an error names.
const MISSING_NAMED: usize = 5;

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// The rows of each kind, as the file's `end` line counts them.
    pub counts: Counts,
    /// Bitstreams found where their rows say (packs and files).
    pub bitstreams_checked: u64,
    /// Bitstreams in a bucket, not checked here (`tributary verify` reads them).
    pub objects_unchecked: u64,
    /// The store format the file was exported from.
    pub from_format: u32,
    /// Metadata of the older format that was removed once the new store was complete.
    pub removed: Vec<PathBuf>,
    /// The older format's database (format 9 and later keep it in `meta/`) that the new one
    /// replaced.
    pub replaced: Option<PathBuf>,
}

impl std::fmt::Display for ImportReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "imported an export of store format {} as format {FORMAT_VERSION}:", self.from_format)?;
        writeln!(f, "{}", self.counts)?;
        write!(f, "bitstreams        {} found in packs/ and blobs/", self.bitstreams_checked)?;
        if self.objects_unchecked > 0 {
            write!(f, "; {} in the bucket, not checked (run `tributary verify`)", self.objects_unchecked)?;
        }
        for path in &self.removed {
            write!(f, "\nremoved the old format's {}", path.display())?;
        }
        if let Some(path) = &self.replaced {
            write!(f, "\nreplaced the old format's database in {}", path.display())?;
        }
        Ok(())
    }
}

/// Builds the store at `root` from the export read from `input` (named `name` in errors).
///
/// `root` may hold bitstreams and the metadata of an older format, or nothing; a store of this
/// build's format is refused (move it aside first), as is a file that is not a whole export,
/// or one naming bitstreams that are not there.
///
/// # Errors
/// [`StoreError::Import`] for a file that is not a whole export of a known version, or names
/// missing bitstreams; [`StoreError::Locked`] when a process has the store open;
/// [`StoreError::Io`] / [`StoreError::Database`].
pub fn import(
    root: &Path,
    input: impl BufRead,
    name: &Path,
    options: &StoreOptions,
) -> Result<ImportReport, StoreError> {
    refuse_current_store(root)?;
    open::create_dir_durable(root)?;
    let _lock = open::lock(root)?;
    let building = root.join("meta.import");
    if building.exists() {
        fs::remove_dir_all(&building).map_err(|e| StoreError::io(&building, e))?;
    }
    let result = build(root, &building, input, name, options);
    let mut report = match result {
        Ok(report) => report,
        Err(e) => {
            let _ = fs::remove_dir_all(&building);
            return Err(e);
        }
    };
    report.replaced = install(root, &building)?;
    report.removed = remove_old_metadata(root);
    Ok(report)
}

/// A store of this build's format is not overwritten; one whose database is gone may be.
fn refuse_current_store(root: &Path) -> Result<(), StoreError> {
    if !root.join(META_DIR).join("version").is_file() {
        return Ok(());
    }
    if named_format(root)? == Some(FORMAT_VERSION) {
        return Err(StoreError::Import {
            file: PathBuf::new(),
            line: 0,
            detail: format!(
                "{} already holds a store of format {FORMAT_VERSION}; import into a data directory without one \
                 (move this one aside, keeping its packs/ and blobs/ if the export names them)",
                root.display()
            ),
        });
    }
    Ok(())
}

/// The format `FORMAT` names, if it is there and names one.
fn named_format(root: &Path) -> Result<Option<u32>, StoreError> {
    let text = match fs::read_to_string(root.join(open::FORMAT_FILE)) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StoreError::io(root.join(open::FORMAT_FILE), e)),
    };
    Ok(text.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
}

/// Reads the whole file into a new database at `building`, complete when this returns.
fn build(
    root: &Path,
    building: &Path,
    input: impl BufRead,
    name: &Path,
    options: &StoreOptions,
) -> Result<ImportReport, StoreError> {
    let (db, trees) = open::build::new_database(building, options)?;
    let mut loader = Loader::new(root, &db, &trees, name);
    let mut lines = input.lines();
    let header = match loader.next_line(&mut lines)? {
        Some(Line::Header(h)) => h,
        _ => return Err(loader.bad("the file does not start with an export header")),
    };
    loader.header(&header)?;
    let end = loop {
        match loader.next_line(&mut lines)? {
            Some(Line::End(counts)) => break counts,
            Some(Line::Header(_)) => return Err(loader.bad("a second header")),
            Some(line) => loader.row(line)?,
            None => return Err(loader.bad("the file ends without its `end` line: it was cut short")),
        }
    };
    loader.finish_chunks()?;
    loader.flush()?;
    if end != loader.counts {
        return Err(loader.bad(format!("the `end` line counts {end:?} but the file holds {:?}", loader.counts)));
    }
    loader.check_bitstreams()?;
    loader.index()?;
    loader.flush()?;
    open::build::finish(&db, &trees)?;
    let report = ImportReport {
        counts: end,
        bitstreams_checked: loader.checked,
        objects_unchecked: loader.objects,
        from_format: header.store_format,
        removed: Vec::new(),
        replaced: None,
    };
    drop(loader);
    drop(trees);
    drop(db);
    open::sync_dir(building).map_err(|e| StoreError::io(building, e))?;
    Ok(report)
}

/// Puts the complete database in place and writes `FORMAT`, the commit point; returns the
/// older format's database it replaced, if there was one.
fn install(root: &Path, building: &Path) -> Result<Option<PathBuf>, StoreError> {
    let meta = root.join(META_DIR);
    let mut replaced = None;
    if meta.exists() {
        // An older format's database (its rows are the export's: a store of this format was
        // refused), or an earlier import's that stopped before FORMAT named it. Stopped between
        // here and FORMAT, the directory still names the older format, which refuses to open
        // until the import is run again. Formats 9 and later keep their database in `meta/`.
        if named_format(root)?.is_some_and(|v| v >= 9) {
            replaced = Some(meta.clone());
        }
        fs::remove_dir_all(&meta).map_err(|e| StoreError::io(&meta, e))?;
    }
    fs::rename(building, &meta).map_err(|e| StoreError::io(&meta, e))?;
    open::sync_dir(root).map_err(|e| StoreError::io(root, e))?;
    for dir in ["packs", "blobs", "tmp"] {
        open::create_dir_durable(&root.join(dir))?;
    }
    open::write_format(root)?;
    Ok(replaced)
}

/// The metadata directories store format 8 and older kept, no longer used once the new
/// database is in place; returns those removed. A failure to remove one is only logged.
fn remove_old_metadata(root: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    for dir in ["db", "lsm"] {
        let path = root.join(dir);
        if !path.is_dir() {
            continue;
        }
        match fs::remove_dir_all(&path) {
            Ok(()) => removed.push(path),
            Err(e) => tracing::warn!(path = %path.display(), error = %e, "could not remove the old format's metadata"),
        }
    }
    removed
}

/// The state of one import.
struct Loader<'a> {
    root: &'a Path,
    db: &'a Db,
    trees: &'a Trees,
    name: &'a Path,
    line: u64,
    counts: Counts,
    w: Overlay,
    pending: usize,
    /// The change log's chunk being filled, and its set.
    chunk: Option<(String, ChunkBuf)>,
    /// Per set, the last position read, to refuse gaps and disorder.
    last_seq: HashMap<String, u64>,
    /// Per set, its counters as the file gives them.
    sets: HashMap<String, u64>,
    /// Blob rows that point into a pack or a file, checked once all are read.
    bitstreams: Vec<(BlobId, Place, u64)>,
    checked: u64,
    objects: u64,
}

impl<'a> Loader<'a> {
    fn new(root: &'a Path, db: &'a Db, trees: &'a Trees, name: &'a Path) -> Self {
        Loader {
            root,
            db,
            trees,
            name,
            line: 0,
            counts: Counts::default(),
            w: Overlay::default(),
            pending: 0,
            chunk: None,
            last_seq: HashMap::new(),
            sets: HashMap::new(),
            bitstreams: Vec::new(),
            checked: 0,
            objects: 0,
        }
    }

    fn bad(&self, detail: impl Into<String>) -> StoreError {
        StoreError::Import { file: self.name.to_path_buf(), line: self.line, detail: detail.into() }
    }

    fn next_line(
        &mut self,
        lines: &mut impl Iterator<Item = std::io::Result<String>>,
    ) -> Result<Option<Line>, StoreError> {
        let Some(text) = lines.next() else { return Ok(None) };
        self.line += 1;
        let text = text.map_err(|e| StoreError::io(self.name, e))?;
        serde_json::from_str(&text).map(Some).map_err(|e| self.bad(format!("not an export line: {e}")))
    }

    fn header(&mut self, h: &Header) -> Result<(), StoreError> {
        if h.magic != MAGIC {
            return Err(self.bad(format!("the header's magic is {:?}, not {MAGIC:?}", h.magic)));
        }
        if h.export_version > EXPORT_VERSION {
            return Err(self.bad(format!(
                "export version {} is newer than this build reads ({EXPORT_VERSION}); import with the release that wrote it",
                h.export_version
            )));
        }
        let meta = &self.trees.meta;
        if let Some(location) = &h.blobs_location {
            self.w.insert(meta, super::open::BLOBS_KEY, location.as_bytes().to_vec());
        }
        if let Some(id) = &h.instance_id {
            self.w.insert(meta, super::open::INSTANCE_KEY, id.as_bytes().to_vec());
        }
        Ok(())
    }

    fn row(&mut self, line: Line) -> Result<(), StoreError> {
        match line {
            Line::Blob(b) => self.blob(b)?,
            Line::Record(r) => self.record(*r)?,
            Line::Set(s) => {
                self.counts.sets += 1;
                let c = Counters { live: s.live, last_seq: s.last_seq, last_change: s.last_change };
                self.sets.insert(s.id.clone(), s.last_seq);
                self.put_row(&self.trees.sets.clone(), s.id.as_bytes(), codec::encode(&c)?)?;
            }
            Line::Event(e) => self.event(*e)?,
            Line::Source(s) => {
                self.counts.sources += 1;
                codec::check_key("source id", &s.id)?;
                self.put_row(&self.trees.sources.clone(), s.id.as_bytes(), state::encode(&s.state)?)?;
            }
            Line::Failure(f) => self.failure(*f)?,
            Line::FeedItem(o) => {
                self.counts.feed_items += 1;
                let [source, item] =
                    <[String; 2]>::try_from(o.key).map_err(|_| self.bad("a feed item key is two parts"))?;
                feeds::validate(&source, &item)?;
                let value = self.base64(&o.value)?;
                self.put_row(&self.trees.feed_items.clone(), &feeds::key(&source, &item), value)?;
            }
            Line::HubSubscriber(sub) => {
                self.counts.hub_subscribers += 1;
                let value = serde_json::to_vec(&sub).map_err(|e| StoreError::corrupt("subscription", e))?;
                self.put_row(
                    &self.trees.hub_subscribers.clone(),
                    &hub_subscribers::key(&sub.topic, &sub.callback)?,
                    value,
                )?;
            }
            Line::Subscription(sub) => {
                self.counts.subscriptions += 1;
                codec::check_key("subscription id", &sub.id)?;
                let value = serde_json::to_vec(&sub).map_err(|e| StoreError::corrupt("subscription", e))?;
                self.put_row(&self.trees.subscriptions.clone(), sub.id.as_bytes(), value)?;
            }
            Line::Publisher(o) => {
                self.counts.publisher_rows += 1;
                let [key] =
                    <[String; 1]>::try_from(o.key).map_err(|_| self.bad("a publisher row's key is one part"))?;
                let value = self.base64(&o.value)?;
                let key = format!("{}{key}", super::published::PREFIX);
                self.put_row(&self.trees.meta.clone(), key.as_bytes(), value)?;
            }
            Line::Held(h) => {
                self.counts.held += 1;
                codec::check_key("source id", &h.source)?;
                codec::check_key("resource URI", &h.uri)?;
                let key = super::guard::held_key(&h.source, &h.uri);
                self.put_row(&self.trees.held.clone(), &key, super::guard::encode(&*h)?)?;
            }
            Line::Takedown(t) => {
                self.counts.takedowns += 1;
                codec::check_key("takedown target", &t.target)?;
                self.put_row(&self.trees.takedowns.clone(), t.target.as_bytes(), super::guard::encode(&*t)?)?;
            }
            Line::Header(_) | Line::End(_) => unreachable!("handled by the caller"),
        }
        Ok(())
    }

    fn base64(&self, text: &str) -> Result<Vec<u8>, StoreError> {
        base64::engine::general_purpose::STANDARD.decode(text).map_err(|e| self.bad(format!("bad base64: {e}")))
    }

    fn blob(&mut self, b: BlobLine) -> Result<(), StoreError> {
        self.counts.blobs += 1;
        let digest = |text: Option<&String>, what: &str| -> Result<Option<Vec<u8>>, StoreError> {
            text.map(|t| hex::decode(t).map_err(|e| self.bad(format!("bad {what}: {e}")))).transpose()
        };
        let md5 = digest(b.md5.as_ref(), "md5")?.map(<[u8; 16]>::try_from).transpose();
        let sha1 = digest(b.sha1.as_ref(), "sha-1")?.map(<[u8; 20]>::try_from).transpose();
        let (Ok(md5), Ok(sha1)) = (md5, sha1) else { return Err(self.bad("a digest of the wrong length")) };
        let place = match b.place {
            PlaceLine::File => Place::File,
            PlaceLine::Pack { pack, offset } => Place::Pack(PackLoc { pack, offset }),
            PlaceLine::Object => Place::Object,
        };
        match place {
            Place::Object => self.objects += 1,
            _ => self.bitstreams.push((b.sha256, place, b.length)),
        }
        let row = BlobRow { length: b.length, md5, sha1, created: b.created, place, referrer: b.referrer };
        self.put_row(&self.trees.blobs.clone(), &b.sha256.0, row.encode()?)
    }

    fn record(&mut self, r: RecordLine) -> Result<(), StoreError> {
        self.counts.records += 1;
        codec::check_key("resource URI", &r.uri)?;
        let rec = Record {
            uri: r.uri,
            source: r.source,
            sets: r.sets,
            origin: r.origin,
            upstream: r.upstream,
            sha256: r.sha256,
            md5: r.md5,
            length: r.length,
            declared: r.declared,
            media_type: r.media_type,
            lastmod: r.lastmod,
            via: r.via,
            links: r.links,
            deleted: r.deleted,
            changed: r.changed,
            heads: r.heads,
        };
        let value = row::encode(&rec)?;
        self.put_row(&self.trees.records.clone(), rec.uri.as_bytes(), value)
    }

    fn event(&mut self, e: EventLine) -> Result<(), StoreError> {
        self.counts.events += 1;
        codec::check_key("set id", &e.set)?;
        let last = self.last_seq.get(&e.set).copied().unwrap_or(0);
        if e.seq != last + 1 {
            return Err(self.bad(format!(
                "event {} of set {} follows {last}: positions must run from 1 without gaps",
                e.seq, e.set
            )));
        }
        self.last_seq.insert(e.set.clone(), e.seq);
        if self.chunk.as_ref().is_some_and(|(set, c)| *set != e.set || c.is_full()) {
            self.finish_chunks()?;
        }
        let (_, chunk) = self.chunk.get_or_insert_with(|| (e.set.clone(), ChunkBuf::new(e.seq)));
        chunk.push(&EventRef {
            seq: e.seq,
            uri: &e.uri,
            change: e.change,
            datetime: e.datetime,
            sha256: &e.sha256,
            md5: e.md5.as_deref(),
            length: e.length,
            media_type: e.media_type.as_deref(),
            origin: &e.origin,
            via: &e.via,
            source: &e.source,
            prev: e.prev,
        })
    }

    /// Writes the chunk being filled.
    fn finish_chunks(&mut self) -> Result<(), StoreError> {
        if let Some((set, chunk)) = self.chunk.take() {
            let key = event_key(&set, chunk.first);
            self.put_row(&self.trees.log.clone(), &key, chunk.into_value())?;
        }
        Ok(())
    }

    fn failure(&mut self, f: FailureLine) -> Result<(), StoreError> {
        self.counts.failures += 1;
        failure::validate(&f.source, &f.uri)?;
        let row = failure::encode(&super::Failure {
            source: f.source.clone(),
            uri: f.uri.clone(),
            upstream: f.upstream,
            reason: f.reason,
            first_failed: f.first_failed,
            last_failed: f.last_failed,
            attempts: f.attempts,
            listing: Listing {
                origin: f.origin,
                declared: f.declared,
                length: f.length,
                media_type: f.media_type,
                lastmod: f.lastmod,
                via: f.via,
                links: f.links,
            },
        })?;
        self.put_row(&self.trees.failures.clone(), &failure::key(&f.source, &f.uri), row)
    }

    fn put_row(&mut self, table: &super::table::Table, key: &[u8], value: Vec<u8>) -> Result<(), StoreError> {
        self.w.insert(table, key, value);
        self.pending += 1;
        if self.pending >= ROWS_PER_BATCH {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        self.pending = 0;
        self.db.commit_buffered(std::mem::take(&mut self.w))
    }

    /// Every bitstream a row names in a pack or under `blobs/` is there, at its length.
    fn check_bitstreams(&mut self) -> Result<(), StoreError> {
        let mut pack_sizes: HashMap<u32, Option<u64>> = HashMap::new();
        let mut missing = Vec::new();
        let mut missing_count = 0u64;
        for (id, place, length) in &self.bitstreams {
            let present = match place {
                Place::Pack(loc) => {
                    let size = *pack_sizes.entry(loc.pack).or_insert_with(|| {
                        fs::metadata(self.root.join("packs").join(format!("{:08}.pack", loc.pack)))
                            .ok()
                            .map(|m| m.len())
                    });
                    size.is_some_and(|s| loc.offset + length <= s)
                }
                _ => {
                    let hex = id.to_hex();
                    let path = self.root.join("blobs").join(&hex[..2]).join(&hex);
                    fs::metadata(path).is_ok_and(|m| m.len() == *length)
                }
            };
            if present {
                self.checked += 1;
            } else {
                missing_count += 1;
                if missing.len() < MISSING_NAMED {
                    missing.push(format!("sha-256:{id} ({})", describe(place)));
                }
            }
        }
        if missing_count > 0 {
            return Err(StoreError::Import {
                file: self.name.to_path_buf(),
                line: 0,
                detail: format!(
                    "{missing_count} bitstreams the file names are not in {} (e.g. {}); copy packs/ and blobs/ \
                     from the store that was exported, then import again",
                    self.root.display(),
                    missing.join(", ")
                ),
            });
        }
        Ok(())
    }

    /// Rebuilds the provenance indexes from the records and the blob rows' referrers, and
    /// checks every set's log against its counters.
    fn index(&mut self) -> Result<(), StoreError> {
        for (set, last) in &self.sets {
            let read = self.last_seq.get(set).copied().unwrap_or(0);
            if read != *last {
                return Err(self.bad(format!("set {set} counts {last} events but the file holds {read}")));
            }
        }
        let t = self.trees;
        for kv in t.records.iter() {
            let (k, v) = kv?;
            let rec = row::decode(&k, &v)?;
            if rec.is_deleted() {
                continue;
            }
            let named = match t.blobs.get(rec.sha256.0)? {
                Some(b) => BlobRow::decode(&b)?.referrer.as_deref() == Some(rec.uri.as_str()),
                None => {
                    return Err(
                        self.bad(format!("record {} names sha-256:{}, which has no blob line", rec.uri, rec.sha256))
                    );
                }
            };
            if !named {
                self.put_row(&t.by_sha.clone(), &keys::by_sha(&rec.sha256, &rec.uri), Vec::new())?;
            }
            if row::via_aggregator(&rec) {
                self.put_row(&t.by_origin.clone(), &keys::by_origin(&rec.origin, &rec.uri), Vec::new())?;
            }
        }
        Ok(())
    }
}

fn describe(place: &Place) -> String {
    match place {
        Place::Pack(loc) => format!("pack {} at {}", loc.pack, loc.offset),
        Place::File => "a file under blobs/".into(),
        Place::Object => "the bucket".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Batch, Expected, Store};

    fn export_of(store: &Store) -> Vec<u8> {
        let mut out = Vec::new();
        store.export(&mut out, Path::new("mem")).unwrap();
        out
    }

    /// Everything but the header's moment and writer.
    fn body(export: &[u8]) -> Vec<String> {
        String::from_utf8(export.to_vec()).unwrap().lines().skip(1).map(str::to_owned).collect()
    }

    #[test]
    fn an_import_of_an_export_exports_the_same_file() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("a");
        let store = Store::open_with(&from, &StoreOptions::small()).unwrap();
        let mut batch = Batch::new();
        for n in 0..300 {
            let sha = store.put(format!("content {}", n % 250).as_bytes(), &Expected::none()).unwrap().id;
            batch.upsert(&["s", "all"], crate::store::test_util::record(&format!("http://t/{n:04}"), sha));
        }
        store.apply(&mut batch).unwrap();
        let mut batch = Batch::new();
        batch.delete(&["s", "all"], "http://t/0007");
        store.apply(&mut batch).unwrap();
        let export = export_of(&store);
        drop(store);

        // The import rebuilds the metadata over the same bitstreams.
        let to = dir.path().join("b");
        fs::create_dir(&to).unwrap();
        fs::rename(from.join("packs"), to.join("packs")).unwrap();
        let report = import(&to, &export[..], Path::new("mem"), &StoreOptions::small()).unwrap();
        assert_eq!((report.counts.records, report.counts.events, report.bitstreams_checked), (300, 602, 250));
        let store = Store::open_with(&to, &StoreOptions::small()).unwrap();
        assert_eq!(body(&export_of(&store)), body(&export));
        assert!(store.verify().unwrap().is_clean(), "{}", store.verify().unwrap());
        assert_eq!(store.uris_by_sha256(&store.record("http://t/0260").unwrap().unwrap().sha256).unwrap().len(), 2);
    }

    #[test]
    fn a_file_cut_short_or_naming_missing_bitstreams_builds_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("a");
        let store = Store::open_with(&from, &StoreOptions::small()).unwrap();
        let sha = store.put(&b"x"[..], &Expected::none()).unwrap().id;
        let mut batch = Batch::new();
        batch.upsert(&["s"], crate::store::test_util::record("http://t/x", sha));
        store.apply(&mut batch).unwrap();
        let export = export_of(&store);
        drop(store);

        let to = dir.path().join("b");
        let cut = &export[..export.len() - 40];
        let err = import(&to, cut, Path::new("mem"), &StoreOptions::small()).unwrap_err();
        assert!(err.to_string().contains("cut short") || err.to_string().contains("not an export line"), "{err}");
        assert!(!to.join(META_DIR).exists() && !to.join("meta.import").exists() && !to.join("FORMAT").exists());

        let err = import(&to, &export[..], Path::new("mem"), &StoreOptions::small()).unwrap_err();
        assert!(err.to_string().contains("1 bitstreams the file names are not in"), "{err}");
        assert!(!to.join("FORMAT").exists());
        assert!(matches!(Store::open_existing(&to), Err(StoreError::Empty { .. })), "nothing that opens");

        // With the packs there, it goes through; a second import over it is refused.
        fs::rename(from.join("packs"), to.join("packs")).unwrap();
        import(&to, &export[..], Path::new("mem"), &StoreOptions::small()).unwrap();
        let err = import(&to, &export[..], Path::new("mem"), &StoreOptions::small()).unwrap_err();
        assert!(err.to_string().contains("already holds a store"), "{err}");
    }
}
