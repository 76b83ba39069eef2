//! Opening a store directory safely: refuse what is not ours, not our format, or missing its
//! metadata before touching anything; take the process lock; then open the database and sweep
//! interrupted writes.
//!
//! The order matters. `FORMAT` is read before any file is created, so pointing Tributary at the
//! wrong directory or at a store from another release modifies nothing. A store is created
//! whole before `FORMAT` names it: the database, its keyspaces and the directories, each made
//! durable in its parent, then `FORMAT`, written aside, synced and renamed into place. So a
//! directory with `FORMAT` must have its metadata, and one without it may only hold the
//! leftovers of an interrupted creation; anything else (bitstreams without metadata, metadata
//! gone under a `FORMAT`) is refused, never opened as an empty store over what is there.
//! The lock is our own `LOCK` file (fs2 flock), so the error can say plainly that another
//! tributary process holds the store.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use fs2::FileExt;

use super::error::StoreError;
use super::table::{Db, Table};
use super::{FORMAT_VERSION, Inner, Trees};

/// How to open a store. The defaults suit the long-running service.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StoreOptions {
    /// Create the directory when it does not exist (its parent must).
    pub create: bool,
    /// The database's block cache, in bytes (`store_cache_mb`).
    pub cache_capacity: u64,
    /// A pack of small bitstreams is closed once it holds this many bytes (64 MiB). `gc`
    /// rewrites whole packs, so this is also the unit of space it reclaims.
    pub pack_bytes: u64,
    /// The bucket for bitstreams larger than `INLINE_MAX` (`[aggregator] blobs`); `None`:
    /// files under `blobs/`. Opening checks that the bucket answers; a store that has used a
    /// bucket must always be opened with the same one.
    pub blobs: Option<super::RemoteBlobs>,
    /// Each keyspace's memtable is written out as a table file once it holds about this many
    /// bytes (fjall's default when `None`).
    pub(super) memtable_bytes: Option<u64>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            create: true,
            cache_capacity: 16 * 1024 * 1024,
            pack_bytes: 64 * 1024 * 1024,
            blobs: None,
            memtable_bytes: None,
        }
    }
}

impl StoreOptions {
    /// The service's options with a block cache of `mb` MiB (`store_cache_mb` in
    /// `sources.toml`).
    pub fn with_cache_mb(mb: u32) -> Self {
        StoreOptions { cache_capacity: u64::from(mb) << 20, ..StoreOptions::default() }
    }

    /// Options with a small cache, for tests and short-lived commands. Its memtables are small
    /// too, so the tests' stores write table files and compact them.
    pub fn small() -> Self {
        StoreOptions { cache_capacity: 8 * 1024 * 1024, memtable_bytes: Some(256 * 1024), ..StoreOptions::default() }
    }

    /// These options with memtables of `bytes`.
    pub fn with_memtable_bytes(self, bytes: u64) -> Self {
        StoreOptions { memtable_bytes: Some(bytes), ..self }
    }

    /// These options with bitstreams in `blobs` (or local files for `None`).
    pub fn with_blobs(self, blobs: Option<super::RemoteBlobs>) -> Self {
        StoreOptions { blobs, ..self }
    }
}

pub(super) const FORMAT_FILE: &str = "FORMAT";
const FORMAT_MAGIC: &str = "tributary-store";
/// The database's own record of the store format, in the `meta` table.
const FORMAT_KEY: &[u8] = b"format_version";
/// `s3://BUCKET/PREFIX` once the store has put a bitstream in a bucket.
pub(super) const BLOBS_KEY: &[u8] = b"blobs_location";
/// This store's id among the instances sharing a bucket: names its reference markers.
pub(super) const INSTANCE_KEY: &[u8] = b"instance_id";
/// The directory of the fjall database.
pub(super) const META_DIR: &str = "meta";
/// The file fjall writes first in a database directory and reads before anything else: a
/// `meta/` without it is no database.
const FJALL_MARKER: &str = "version";

/// Files a fresh data directory may already hold: the repository ships `store/README.md`, and
/// a first open interrupted before `FORMAT` was written leaves `LOCK` and maybe `FORMAT.tmp`.
fn is_harmless(name: &str) -> bool {
    name.starts_with("README") || matches!(name, ".gitignore" | ".gitkeep" | "LOCK" | "FORMAT.tmp")
}

/// What a store's tables are called; their ids (in a batch, and as a shared table's key
/// prefix) are their places here.
pub(super) const TABLES: [&str; 14] = [
    "meta",
    "blobs",
    "records",
    "by_origin",
    "by_sha",
    "log",
    "sets",
    "sources",
    "failures",
    "feed_items",
    "hub_subscribers",
    "subscriptions",
    "held",
    "takedowns",
];

/// The tables with a keyspace of their own, named as the table: they grow with the records,
/// and each is tuned for how it is read ([`tuning`]).
const OWN_KEYSPACE: [&str; 5] = ["blobs", "records", "by_origin", "by_sha", "log"];

/// The keyspace every other table shares, its keys behind the table's id.
const SHARED_KEYSPACE: &str = "small";

/// What [`inspect`] found.
enum Found {
    /// Nothing, or only what an interrupted creation leaves: create the store.
    New,
    /// A store of this build's format.
    Existing,
}

pub(super) fn open(path: &Path, options: &StoreOptions) -> Result<Inner, StoreError> {
    let root = path.to_path_buf();
    let found = inspect(&root, options.create)?;
    let lock = lock(&root)?;
    let db = match found {
        Found::New => create(&root, options)?,
        Found::Existing => open_db(&root, options)?,
    };
    let trees = open_trees(&db, options)?;
    check_meta(&root, &trees.meta)?;
    for dir in ["blobs", "tmp", "packs"] {
        create_dir_durable(&root.join(dir))?;
    }
    sweep_tmp(&root.join("tmp"))?;
    let remote = open_remote(&root, &trees.meta, options.blobs.as_ref())?;
    let (takedowns, held) = super::guard::load(&trees)?;
    let packs = super::pack::Packs::open(&root.join("packs"), options.pack_bytes)?;
    let filter = blob_filter(&trees.blobs)?;
    Ok(Inner {
        root,
        db,
        trees,
        _lock: lock,
        fresh: Mutex::new(Default::default()),
        gc_lock: RwLock::new(()),
        writer: Mutex::new(()),
        last_stamp_ms: std::sync::atomic::AtomicI64::new(i64::MIN),
        tmp_counter: AtomicU64::new(0),
        packs,
        listeners: Default::default(),
        remote,
        takedowns: RwLock::new(takedowns),
        held_any: std::sync::atomic::AtomicBool::new(held > 0),
        filter,
    })
}

/// The blob filter of a store whose `blobs` table is as it is now: complete at once when the
/// table is empty (a new store), else filled by a scan once puts ask enough questions.
fn blob_filter(blobs: &Table) -> Result<Arc<super::filter::BlobFilter>, StoreError> {
    let ks = blobs.keyspace();
    Ok(Arc::new(super::filter::BlobFilter::new(ks.approximate_len(), ks.is_empty()?)))
}

/// Creates a new store in `root` (which exists, holding nothing of value): the database with
/// every keyspace and the format row, then `FORMAT`, the commit point of the creation.
///
/// A database already in `meta/` whose format row is written is a creation or an import that
/// stopped after its database was complete and before `FORMAT`: it is kept and `FORMAT`
/// written. Anything else there is an unfinished creation and starts again, unless bitstreams
/// are there for it to have named.
fn create(root: &Path, options: &StoreOptions) -> Result<Db, StoreError> {
    let meta = root.join(META_DIR);
    if meta.join(FJALL_MARKER).is_file() {
        let db = open_db(root, options)?;
        if open_trees(&db, options)?.meta.get(FORMAT_KEY)?.is_some() {
            write_format(root)?;
            return Ok(db);
        }
    }
    if holds_bitstreams(root)? {
        return Err(StoreError::MetadataMissing {
            path: root.into(),
            found: describe_contents(root),
            missing: "there is no FORMAT file, and no complete database that names them".into(),
        });
    }
    if meta.exists() {
        fs::remove_dir_all(&meta).map_err(|e| StoreError::io(&meta, e))?;
    }
    let db = Db::new(builder(&meta, options).open()?, &meta);
    let trees = open_trees(&db, options)?;
    let mut w = super::table::Overlay::default();
    w.insert(&trees.meta, FORMAT_KEY, FORMAT_VERSION.to_be_bytes().to_vec());
    db.commit(w)?;
    db.persist()?;
    sync_dir(root).map_err(|e| StoreError::io(root, e))?;
    write_format(root)?;
    Ok(db)
}

/// The database's settings. The journal is not compressed: fjall would lz4 every value over
/// 4 KiB on the committing thread (the change log's chunks), for a file that lives only until
/// its memtables are written out — 4% of an ingest's commit thread.
fn builder(meta: &Path, options: &StoreOptions) -> fjall::DatabaseBuilder<fjall::Database> {
    fjall::Database::builder(meta).cache_size(options.cache_capacity).journal_compression(fjall::CompressionType::None)
}

/// Opens the database of an existing store. fjall would create a new, empty database where it
/// finds none; this refuses instead, naming what is missing.
fn open_db(root: &Path, options: &StoreOptions) -> Result<Db, StoreError> {
    let meta = root.join(META_DIR);
    if !meta.join(FJALL_MARKER).is_file() {
        let what = if meta.is_dir() { "meta/ holds no database" } else { "meta/ does not exist" };
        return Err(StoreError::MetadataMissing {
            path: root.into(),
            found: describe_contents(root),
            missing: what.into(),
        });
    }
    match builder(&meta, options).open() {
        Ok(db) => Ok(Db::new(db, &meta)),
        Err(fjall::Error::Locked) => Err(StoreError::Locked { path: root.into() }),
        Err(e) => Err(StoreError::MetadataMissing {
            path: root.into(),
            found: describe_contents(root),
            missing: format!("meta/ cannot be opened: {e}"),
        }),
    }
}

fn open_trees(db: &Db, options: &StoreOptions) -> Result<Trees, StoreError> {
    let keyspace = |name: &str| db.fjall().keyspace(name, || tuning(name, options.memtable_bytes));
    let shared = keyspace(SHARED_KEYSPACE)?;
    let table = |id: u8| -> Result<Table, StoreError> {
        let name = TABLES[usize::from(id)];
        Ok(match OWN_KEYSPACE.contains(&name) {
            true => Table::new(db, keyspace(name)?, id),
            false => Table::shared(db, shared.clone(), id),
        })
    };
    let trees = Trees {
        meta: table(0)?,
        blobs: table(1)?,
        records: table(2)?,
        by_origin: table(3)?,
        by_sha: table(4)?,
        log: table(5)?,
        sets: table(6)?,
        sources: table(7)?,
        failures: table(8)?,
        feed_items: table(9)?,
        hub_subscribers: table(10)?,
        subscriptions: table(11)?,
        held: table(12)?,
        takedowns: table(13)?,
    };
    // fjall 3.1 creates a keyspace's directory (`keyspaces/N`) without syncing `keyspaces/`:
    // under POSIX rules a power cut can then take the keyspace's name, and with it every row
    // it holds, even its own metadata keyspace's (found by `tests/it/store_powercut.rs`). The
    // keyspaces are created just above, when the store is, so one sync here closes that.
    let dir = db.fjall_path().join("keyspaces");
    sync_dir(&dir).map_err(|e| StoreError::io(&dir, e))?;
    Ok(trees)
}

/// A keyspace's tuning, fixed when the keyspace is created (fjall keeps it with the keyspace).
///
/// - lz4 on every level: fjall's default leaves the first two levels uncompressed, and at a
///   million records most of the store sits there (records and events are URIs and W3C
///   datetimes, which compress two to three times).
/// - Larger blocks where rows are walked in order and read by range (records, the log, the
///   origin index): more rows share a block's compression and its index entry. Blob rows,
///   keyed by random sha-256s and read one at a time, keep small blocks.
/// - Memtables of 16 MiB: with three busy keyspaces, fjall's 64 MiB default held up to 200 MiB
///   of memtables, most of a harvester's resident memory (docs/STORE.md, "Sizing").
/// - Blob rows compact less often (8 tables in level 0, not 4; levels 16 times larger, not 10):
///   their keys are random sha-256s, so every compaction rewrites whole overlapping ranges, and
///   on two cores that work took the CPU the ingest needed (docs/STORE.md, "Sizing"). A blob
///   row is read by key, through the tables' Bloom filters and the store's own filter, so more
///   tables cost its reads little.
fn tuning(name: &str, memtable_bytes: Option<u64>) -> fjall::KeyspaceCreateOptions {
    use fjall::config::{BlockSizePolicy, CompressionPolicy};
    let block = match name {
        "records" | "by_origin" | "by_sha" => 16 * 1024,
        "log" => 32 * 1024,
        _ => 4 * 1024,
    };
    let options = fjall::KeyspaceCreateOptions::default()
        .data_block_compression_policy(CompressionPolicy::all(fjall::CompressionType::Lz4))
        .data_block_size_policy(BlockSizePolicy::all(block))
        .max_memtable_size(memtable_bytes.unwrap_or(MEMTABLE_BYTES));
    if name == "blobs" {
        let leveled = fjall::compaction::Leveled::default().with_l0_threshold(8).with_level_ratio_policy(vec![16.0]);
        return options.compaction_strategy(std::sync::Arc::new(leveled));
    }
    options
}

/// See [`tuning`].
const MEMTABLE_BYTES: u64 = 16 * 1024 * 1024;

/// Connects to the configured bucket, after checking that it is the one the store has used
/// (if any): a store whose bitstreams are in a bucket opened without it, or with another,
/// would find none of them, and its gc would think them gone.
fn open_remote(
    root: &Path,
    meta: &Table,
    blobs: Option<&super::RemoteBlobs>,
) -> Result<Option<Arc<super::remote::Remote>>, StoreError> {
    let recorded = meta.get(BLOBS_KEY)?.map(|v| String::from_utf8_lossy(&v).into_owned());
    let Some(blobs) = blobs else {
        return match recorded {
            Some(recorded) => Err(StoreError::BlobsElsewhere {
                path: root.into(),
                recorded,
                configured: "no `blobs` is configured".into(),
            }),
            None => Ok(None),
        };
    };
    let location = blobs.to_string();
    if let Some(recorded) = recorded.as_ref().filter(|r| **r != location) {
        return Err(StoreError::BlobsElsewhere {
            path: root.into(),
            recorded: recorded.clone(),
            configured: format!("the configuration says {location}"),
        });
    }
    let instance = match meta.get(INSTANCE_KEY)? {
        Some(v) => String::from_utf8_lossy(&v).into_owned(),
        None => {
            let id = format!("{:032x}", rand::random::<u128>());
            meta.insert(INSTANCE_KEY, id.as_bytes())?;
            id
        }
    };
    let remote = super::remote::Remote::connect(blobs, &instance)?;
    if recorded.is_none() {
        meta.insert(BLOBS_KEY, location.as_bytes())?;
    }
    Ok(Some(Arc::new(remote)))
}

/// Decides whether `root` is a new store or an existing one of this build's format, without
/// modifying anything except creating `root` itself (durably) when asked to.
fn inspect(root: &Path, create: bool) -> Result<Found, StoreError> {
    match fs::metadata(root) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let parent_ok = root.parent().is_none_or(|p| p.as_os_str().is_empty() || p.is_dir());
            if !create || !parent_ok {
                return Err(StoreError::Missing { path: root.to_path_buf() });
            }
            create_dir_durable(root)?;
            return Ok(Found::New);
        }
        Err(e) => return Err(StoreError::io(root, e)),
        Ok(m) if !m.is_dir() => return Err(StoreError::NotAStore { path: root.to_path_buf() }),
        Ok(_) => {}
    }
    match fs::read_to_string(root.join(FORMAT_FILE)) {
        Ok(text) => check_format_text(root, &text).map(|()| Found::Existing),
        Err(e) if e.kind() == io::ErrorKind::NotFound => inspect_unformatted(root, create),
        Err(e) => Err(StoreError::io(root.join(FORMAT_FILE), e)),
    }
}

/// A directory without `FORMAT`: empty, the leftovers of an interrupted creation, bitstreams
/// whose metadata is gone, or something else entirely.
fn inspect_unformatted(root: &Path, create: bool) -> Result<Found, StoreError> {
    let mut ours = false;
    for entry in fs::read_dir(root).map_err(|e| StoreError::io(root, e))? {
        let name = entry.map_err(|e| StoreError::io(root, e))?.file_name().to_string_lossy().into_owned();
        match name.as_str() {
            n if is_harmless(n) => {}
            "meta" | "tmp" | "packs" | "blobs" | "dumps" => ours = true,
            _ => return Err(StoreError::NotAStore { path: root.to_path_buf() }),
        }
    }
    // A complete database is dealt with by `create`; bitstreams with none are not a new store.
    if ours && !root.join(META_DIR).join(FJALL_MARKER).is_file() && holds_bitstreams(root)? {
        return Err(StoreError::MetadataMissing {
            path: root.into(),
            found: describe_contents(root),
            missing: "there is no FORMAT file, and no database that names them".into(),
        });
    }
    if !create {
        return Err(StoreError::Empty { path: root.to_path_buf() });
    }
    Ok(Found::New)
}

/// Whether `packs/` holds a byte or `blobs/` a file.
fn holds_bitstreams(root: &Path) -> Result<bool, StoreError> {
    let packs = root.join("packs");
    if let Ok(entries) = fs::read_dir(&packs) {
        for entry in entries {
            let entry = entry.map_err(|e| StoreError::io(&packs, e))?;
            if entry.metadata().map_err(|e| StoreError::io(entry.path(), e))?.len() > 0 {
                return Ok(true);
            }
        }
    }
    let blobs = root.join("blobs");
    if let Ok(entries) = fs::read_dir(&blobs) {
        for entry in entries {
            let dir = entry.map_err(|e| StoreError::io(&blobs, e))?.path();
            if fs::read_dir(&dir).map(|mut d| d.next().is_some()).unwrap_or(true) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// What a data directory holds, for an error: its `FORMAT` and how many pack bytes and blob
/// files.
fn describe_contents(root: &Path) -> String {
    let mut parts = Vec::new();
    if let Ok(text) = fs::read_to_string(root.join(FORMAT_FILE)) {
        parts.push(format!("a FORMAT file ({})", text.trim()));
    }
    let packs: u64 = fs::read_dir(root.join("packs"))
        .map(|d| d.filter_map(Result::ok).filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum())
        .unwrap_or(0);
    if packs > 0 {
        parts.push(format!("{packs} bytes of packed bitstreams in packs/"));
    }
    let files = fs::read_dir(root.join("blobs"))
        .map(|d| d.filter_map(Result::ok).filter_map(|e| fs::read_dir(e.path()).ok()).map(Iterator::count).sum())
        .unwrap_or(0usize);
    if files > 0 {
        parts.push(format!("{files} bitstream files in blobs/"));
    }
    if parts.is_empty() { "a store directory".into() } else { parts.join(" and ") }
}

fn check_format_text(root: &Path, text: &str) -> Result<(), StoreError> {
    let found = text.trim();
    match found.strip_prefix(FORMAT_MAGIC).map(str::trim).and_then(|v| v.parse::<u32>().ok()) {
        Some(v) if v == FORMAT_VERSION => Ok(()),
        Some(v) if v < FORMAT_VERSION => {
            Err(StoreError::OldFormat { path: root.to_path_buf(), found: v, supported: FORMAT_VERSION })
        }
        _ => Err(StoreError::IncompatibleFormat {
            path: root.to_path_buf(),
            found: found.to_owned(),
            supported: FORMAT_VERSION,
        }),
    }
}

pub(super) fn lock(root: &Path) -> Result<fs::File, StoreError> {
    let path = root.join("LOCK");
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| StoreError::io(&path, e))?;
    let start = Instant::now();
    loop {
        match file.try_lock_exclusive() {
            Ok(()) => return Ok(file),
            Err(e) if e.kind() == fs2::lock_contended_error().kind() => {
                if start.elapsed() > LOCK_WAIT {
                    return Err(StoreError::Locked { path: root.into() });
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(StoreError::io(path, e)),
        }
    }
}

/// Writes `FORMAT` aside, syncs it, renames it into place and syncs the directory: the last
/// step of creating a store or importing one.
pub(super) fn write_format(root: &Path) -> Result<(), StoreError> {
    let tmp = root.join("FORMAT.tmp");
    let write = || -> io::Result<()> {
        let mut f = fs::File::create(&tmp)?;
        writeln!(f, "{FORMAT_MAGIC} {FORMAT_VERSION}")?;
        f.sync_all()?;
        fs::rename(&tmp, root.join(FORMAT_FILE))?;
        sync_dir(root)
    };
    write().map_err(|e| StoreError::io(root.join(FORMAT_FILE), e))
}

/// Makes a rename or a new directory entry durable.
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// Creates `dir` and any missing parents, each made durable in its parent (`fsync` of the
/// parent directory): under POSIX rules a new directory's name is not durable until then,
/// and everything below it would vanish with it at a power cut.
pub(super) fn create_dir_durable(dir: &Path) -> Result<(), StoreError> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_dir_durable(parent)?;
    }
    match fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(StoreError::io(dir, e)),
    }
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    sync_dir(parent).map_err(|e| StoreError::io(parent, e))
}

/// How long `LOCK` may stay taken before the store is reported `Locked`. A process that spawns
/// a child while it has the store open lends the child its descriptors until the child's
/// `exec` closes them (they are close-on-exec), and an flock belongs to the descriptor: so a
/// store this process closed a moment ago may still look locked for as long as such a child
/// takes to reach `exec` — microseconds, or tens of milliseconds on a loaded machine (seen in
/// the test suite, whose tests spawn `tributary` and the S3 server while others reopen their
/// stores). Another process really holding the store is reported after this wait.
const LOCK_WAIT: Duration = Duration::from_millis(1500);

/// The database's own record of its format must be this build's.
fn check_meta(root: &Path, meta: &Table) -> Result<(), StoreError> {
    let Some(v) = meta.get(FORMAT_KEY)? else {
        return Err(StoreError::MetadataMissing {
            path: root.into(),
            found: describe_contents(root),
            missing: "the database has no format row".into(),
        });
    };
    match <[u8; 4]>::try_from(v.as_ref()).map(u32::from_be_bytes) {
        Ok(version) if version == FORMAT_VERSION => Ok(()),
        found => {
            let found = found.map_or_else(|_| format!("{:?}", v.as_ref()), |n| n.to_string());
            Err(StoreError::IncompatibleFormat { path: root.into(), found, supported: FORMAT_VERSION })
        }
    }
}

/// Everything in `tmp/` belongs to a write that can no longer finish: we hold the lock, so no
/// other process is writing, and this process has not started any yet.
fn sweep_tmp(tmp: &Path) -> Result<(), StoreError> {
    let entries = fs::read_dir(tmp).map_err(|e| StoreError::io(tmp, e))?;
    for entry in entries {
        let path: PathBuf = entry.map_err(|e| StoreError::io(tmp, e))?.path();
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io(path, e)),
        }
    }
    Ok(())
}

/// What the import needs to build a store's metadata beside a live directory.
pub(super) mod build {
    use super::*;

    /// A new, empty database at `meta` with every keyspace, and no format row yet: the
    /// import writes that last ([`finish`]), which is what makes the database complete.
    pub(in crate::store) fn new_database(meta: &Path, options: &StoreOptions) -> Result<(Db, Trees), StoreError> {
        let db = Db::new(builder(meta, options).open()?, meta);
        let trees = open_trees(&db, options)?;
        Ok((db, trees))
    }

    /// Marks an imported database complete (its format row, durably).
    pub(in crate::store) fn finish(db: &Db, trees: &Trees) -> Result<(), StoreError> {
        trees.meta.insert(FORMAT_KEY, FORMAT_VERSION.to_be_bytes())?;
        db.persist()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Expected, Store};

    #[test]
    fn a_store_whose_metadata_is_gone_is_refused_not_opened_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        {
            let store = Store::open_with(&path, &StoreOptions::small()).unwrap();
            store.put(&b"content"[..], &Expected::none()).unwrap();
            store.flush().unwrap();
        }
        fs::remove_dir_all(path.join(META_DIR)).unwrap();
        let err = Store::open_with(&path, &StoreOptions::small()).unwrap_err();
        assert!(matches!(err, StoreError::MetadataMissing { .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains("tributary store import") && text.contains("meta/ does not exist"), "{text}");
        assert!(!path.join(META_DIR).exists(), "nothing was created");

        // Without FORMAT too: the packed bitstreams are still there.
        fs::remove_file(path.join(FORMAT_FILE)).unwrap();
        let err = Store::open_with(&path, &StoreOptions::small()).unwrap_err();
        assert!(matches!(err, StoreError::MetadataMissing { .. }), "{err}");
        assert!(err.to_string().contains("bytes of packed bitstreams"), "{err}");
    }

    #[test]
    fn a_meta_directory_without_a_database_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        drop(Store::open_with(&path, &StoreOptions::small()).unwrap());
        fs::remove_file(path.join(META_DIR).join(FJALL_MARKER)).unwrap();
        let err = Store::open_with(&path, &StoreOptions::small()).unwrap_err();
        assert!(err.to_string().contains("meta/ holds no database"), "{err}");
    }

    #[test]
    fn an_interrupted_creation_is_started_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        drop(Store::open_with(&path, &StoreOptions::small()).unwrap());
        // As if the creation stopped before FORMAT: the database and empty directories only.
        fs::remove_file(path.join(FORMAT_FILE)).unwrap();
        let store = Store::open_with(&path, &StoreOptions::small()).unwrap();
        assert_eq!(store.stats().unwrap().records_live, 0);
        assert!(path.join(FORMAT_FILE).is_file());
    }

    #[test]
    fn older_formats_are_refused_with_the_way_across() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(FORMAT_FILE), "tributary-store 8\n").unwrap();
        let err = Store::open(dir.path()).unwrap_err();
        assert!(matches!(err, StoreError::OldFormat { found: 8, .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains("tributary store export FILE") && text.contains("tributary store import FILE"), "{text}");
        fs::write(dir.path().join(FORMAT_FILE), "tributary-store 99\n").unwrap();
        assert!(matches!(Store::open(dir.path()), Err(StoreError::IncompatibleFormat { .. })));
    }
}
