//! Opening a store directory safely: refuse what is not ours or not our format before
//! touching anything, take the process lock, then open sled and sweep interrupted writes.
//!
//! The order matters. The `FORMAT` file is read before any file is created, so pointing
//! Tributary at the wrong directory or at a store from another release modifies nothing. The
//! lock is our own `LOCK` file (fs2 flock) rather than sled's, so the error can say plainly
//! that another tributary process holds the store; sled's own lock is mapped the same way in
//! case the two ever disagree.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use fs2::FileExt;

use std::sync::Arc;

use super::error::StoreError;
use super::lsm::{Lsm, LsmOptions, MetaKeys};
use super::table::{Overlay, Table};
use super::{FORMAT_VERSION, Inner, Trees, log};

/// The prefixes of the tables in the engine (store format 8); up to format 7 they were sled's.
const BLOBS: u8 = b'b';
const RECORDS: u8 = b'r';
const BY_ORIGIN: u8 = b'o';
const BY_SHA: u8 = b'h';
const LOG: u8 = b'l';
const ENGINE_TABLES: [u8; 5] = [BLOBS, BY_SHA, LOG, BY_ORIGIN, RECORDS];

/// How to open a store. The defaults suit the long-running service.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StoreOptions {
    /// Create the directory when it does not exist (its parent must).
    pub create: bool,
    /// sled's page cache budget in bytes. sled's real memory use is a multiple of this.
    pub cache_capacity: u64,
    /// sled's background flush interval; `None` flushes only when asked. Durability never
    /// depends on it: [`Store::apply`](super::Store::apply) flushes before returning.
    pub flush_every_ms: Option<u64>,
    /// A pack of small bitstreams is closed once it holds this many bytes (64 MiB). `gc`
    /// rewrites whole packs, so this is also the unit of space it reclaims.
    pub pack_bytes: u64,
    /// The bucket for bitstreams larger than `INLINE_MAX` (`[aggregator] blobs`); `None`:
    /// files under `blobs/`. Opening checks that the bucket answers; a store that has used a
    /// bucket must always be opened with the same one.
    pub blobs: Option<super::RemoteBlobs>,
    /// The engine's tuning (the memtable's size).
    pub(super) lsm: LsmOptions,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            create: true,
            cache_capacity: 128 * 1024 * 1024,
            flush_every_ms: Some(1000),
            pack_bytes: 64 * 1024 * 1024,
            blobs: None,
            lsm: LsmOptions::default(),
        }
    }
}

impl StoreOptions {
    /// The service's options with a page cache of `mb` MiB (`store_cache_mb` in
    /// `sources.toml`).
    pub fn with_cache_mb(mb: u32) -> Self {
        StoreOptions { cache_capacity: u64::from(mb) << 20, ..StoreOptions::default() }
    }

    /// Options with a small cache, for tests and short-lived commands.
    /// Its memtable is small too, so the tests' stores write runs and merge them.
    pub fn small() -> Self {
        StoreOptions {
            cache_capacity: 8 * 1024 * 1024,
            lsm: LsmOptions { memtable_bytes: 256 * 1024, ..LsmOptions::default() },
            ..StoreOptions::default()
        }
    }

    /// These options with a memtable of `bytes`: it is frozen and written out as a run once
    /// its entries take about that much memory (32 MiB by default).
    pub fn with_memtable_bytes(self, bytes: usize) -> Self {
        StoreOptions { lsm: LsmOptions { memtable_bytes: bytes, ..self.lsm }, ..self }
    }

    /// These options with bitstreams in `blobs` (or local files for `None`).
    pub fn with_blobs(self, blobs: Option<super::RemoteBlobs>) -> Self {
        StoreOptions { blobs, ..self }
    }
}

/// The older formats this build upgrades in place when it opens them. A format 5 store is a
/// valid format 6 store: format 6 lets a blob row name one of the records that refer to it,
/// instead of listing all of them in the sha-256 index, and a row without that field names
/// none. Format 7 drops the upstream index (table `u`), whose answers a record's name already
/// gives; the upgrade deletes its rows. Format 8 keeps the tables with a row per resource in
/// the engine ([`super::lsm`]) instead of sled; the upgrade moves their rows over, unchanged.
/// An older build then refuses the store, as it must: it would find none of its records.
const UPGRADES_FROM: [u32; 3] = [5, 6, 7];

/// The prefix of the upstream index that formats up to 6 kept; see [`UPGRADES_FROM`].
const RETIRED_BY_UPSTREAM: u8 = b'u';

const FORMAT_FILE: &str = "FORMAT";
const FORMAT_MAGIC: &str = "tributary-store";
const FORMAT_KEY: &[u8] = b"format_version";
/// `s3://BUCKET/PREFIX` once the store has put a bitstream in a bucket.
pub(super) const BLOBS_KEY: &[u8] = b"blobs_location";
/// This store's id among the instances sharing a bucket: names its reference markers.
pub(super) const INSTANCE_KEY: &[u8] = b"instance_id";

/// Files a fresh data directory may already hold: the repository ships `store/README.md`, and
/// a first open interrupted before `FORMAT` was written leaves `LOCK` and maybe `FORMAT.tmp`.
fn is_harmless(name: &str) -> bool {
    name.starts_with("README") || matches!(name, ".gitignore" | ".gitkeep" | "LOCK" | "FORMAT.tmp")
}

pub(super) fn open(path: &Path, options: &StoreOptions) -> Result<Inner, StoreError> {
    let root = path.to_path_buf();
    let found = inspect(&root, options.create)?;
    let lock = lock(&root)?;
    if found.is_none() {
        write_format(&root)?;
    }
    let db = open_db(&root, options)?;
    let trees = open_trees(&root, &db, options)?;
    let meta = check_meta(&root, &trees.meta)?;
    if found.is_some_and(|v| UPGRADES_FROM.contains(&v)) || UPGRADES_FROM.contains(&meta) {
        upgrade(&root, &db, &trees)?;
    }
    for dir in ["blobs", "tmp"] {
        fs::create_dir_all(root.join(dir)).map_err(|e| StoreError::io(root.join(dir), e))?;
    }
    sweep_tmp(&root.join("tmp"))?;
    let remote = open_remote(&root, &trees.meta, options.blobs.as_ref())?;
    let packs = super::pack::Packs::open(&root.join("packs"), options.pack_bytes)?;
    let unflushed = Mutex::new(log::Unflushed::default());
    Ok(Inner {
        root,
        db,
        trees,
        _lock: lock,
        fresh: Mutex::new(HashMap::new()),
        gc_lock: RwLock::new(()),
        unflushed,
        tmp_counter: AtomicU64::new(0),
        packs,
        known: Default::default(),
        listeners: Default::default(),
        remote,
    })
}

/// Connects to the configured bucket, after checking that it is the one the store has used
/// (if any): a store whose bitstreams are in a bucket opened without it, or with another,
/// would find none of them, and its gc would think them gone.
fn open_remote(
    root: &Path,
    meta: &Table,
    blobs: Option<&super::RemoteBlobs>,
) -> Result<Option<std::sync::Arc<super::remote::Remote>>, StoreError> {
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
    if let Some(recorded) = recorded.filter(|r| *r != location) {
        return Err(StoreError::BlobsElsewhere {
            path: root.into(),
            recorded,
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
    meta.insert(BLOBS_KEY, location.as_bytes())?;
    Ok(Some(std::sync::Arc::new(remote)))
}

/// Decides whether `root` is a new store (`None`), an existing one of a format this build
/// opens (its version), or neither, without modifying anything except creating `root` itself
/// when asked to.
fn inspect(root: &Path, create: bool) -> Result<Option<u32>, StoreError> {
    match fs::metadata(root) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let parent_ok = root.parent().is_none_or(|p| p.as_os_str().is_empty() || p.is_dir());
            if !create || !parent_ok {
                return Err(StoreError::Missing { path: root.to_path_buf() });
            }
            fs::create_dir(root).map_err(|e| StoreError::io(root, e))?;
            return Ok(None);
        }
        Err(e) => return Err(StoreError::io(root, e)),
        Ok(m) if !m.is_dir() => return Err(StoreError::NotAStore { path: root.to_path_buf() }),
        Ok(_) => {}
    }
    match fs::read_to_string(root.join(FORMAT_FILE)) {
        Ok(text) => check_format_text(root, &text).map(Some),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if !is_empty_dir(root)? {
                return Err(StoreError::NotAStore { path: root.to_path_buf() });
            }
            if !create {
                return Err(StoreError::Empty { path: root.to_path_buf() });
            }
            Ok(None)
        }
        Err(e) => Err(StoreError::io(root.join(FORMAT_FILE), e)),
    }
}

fn check_format_text(root: &Path, text: &str) -> Result<u32, StoreError> {
    let found = text.trim();
    let version = found.strip_prefix(FORMAT_MAGIC).map(str::trim).and_then(|v| v.parse::<u32>().ok());
    if let Some(v) = version.filter(|v| *v == FORMAT_VERSION || UPGRADES_FROM.contains(v)) {
        return Ok(v);
    }
    Err(StoreError::IncompatibleFormat { path: root.to_path_buf(), found: found.to_owned(), supported: FORMAT_VERSION })
}

fn is_empty_dir(root: &Path) -> Result<bool, StoreError> {
    let entries = fs::read_dir(root).map_err(|e| StoreError::io(root, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| StoreError::io(root, e))?;
        if !is_harmless(&entry.file_name().to_string_lossy()) {
            return Ok(false);
        }
    }
    Ok(true)
}

fn lock(root: &Path) -> Result<fs::File, StoreError> {
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

/// Upgrades a format 5, 6 or 7 store to this format: the retired upstream index removed, the
/// engine's tables moved out of sled, then the database marked, durably, then `FORMAT`. Every
/// step can be repeated, so an open that finds either mark still old finishes the job,
/// whatever the moment of an interruption.
fn upgrade(root: &Path, db: &sled::Db, trees: &Trees) -> Result<(), StoreError> {
    let removed = remove_rows(trees, &Table::new(&trees.main, RETIRED_BY_UPSTREAM))?;
    let moved = move_into_engine(trees)?;
    trees.meta.insert(FORMAT_KEY, &FORMAT_VERSION.to_be_bytes())?;
    db.flush()?;
    write_format(root)?;
    tracing::info!(store = %root.display(), to = FORMAT_VERSION, removed, moved, "store format upgraded");
    Ok(())
}

/// Moves the rows of the engine's tables from sled, where formats up to 7 kept them, into one
/// run older than anything the engine holds, then deletes them from sled; returns how many.
/// Interrupted before the deletions finish, it runs again and moves what is left: the same
/// rows, which nothing else can have written meanwhile (the store is still marked old).
fn move_into_engine(trees: &Trees) -> Result<u64, StoreError> {
    let old: Vec<Table> = ENGINE_TABLES.iter().map(|&p| Table::new(&trees.main, p)).collect();
    let count = old.iter().map(|t| t.iter().count()).sum::<usize>();
    if count == 0 {
        return Ok(0);
    }
    // The prefixes are in byte order, so the tables one after another are in key order.
    let rows = old.iter().flat_map(|t| {
        t.iter().map(|kv| {
            let (k, v) = kv?;
            Ok((t.key(&k), v.to_vec()))
        })
    });
    let moved = trees.lsm.load_oldest(rows, count)?;
    for t in &old {
        remove_rows(trees, t)?;
    }
    Ok(moved)
}

/// Deletes every row of a sled table, a bounded batch at a time; returns how many.
fn remove_rows(trees: &Trees, table: &Table) -> Result<u64, StoreError> {
    let mut removed = 0;
    loop {
        let keys: Vec<_> = table.iter().keys().take(10_000).collect::<Result<_, _>>()?;
        if keys.is_empty() {
            return Ok(removed);
        }
        let mut w = Overlay::with_capacity(keys.len());
        for k in &keys {
            w.remove(table, k);
        }
        w.commit(&trees.main, &trees.lsm)?;
        removed += keys.len() as u64;
    }
}

fn write_format(root: &Path) -> Result<(), StoreError> {
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

/// How long to wait for sled's own lock once ours is held; see [`open_db`].
const SLED_LOCK_WAIT: Duration = Duration::from_secs(5);

/// How long `LOCK` may stay taken before the store is reported `Locked`. A process that spawns
/// a child while it has the store open lends the child its descriptors until the child's
/// `exec` closes them (they are close-on-exec), and an flock belongs to the descriptor: so a
/// store this process closed a moment ago may still look locked for as long as such a child
/// takes to reach `exec` — microseconds, or tens of milliseconds on a loaded machine (seen in
/// the test suite, whose tests spawn `tributary` and the S3 server while others reopen their
/// stores). Another process really holding the store is reported after this wait.
const LOCK_WAIT: Duration = Duration::from_millis(1500);

/// Opens sled. Holding our `LOCK` means no other process has the store, so if sled's lock is
/// still taken it belongs to a store this process has just dropped, whose sled threads are
/// still winding down: wait for them rather than fail.
fn open_db(root: &Path, options: &StoreOptions) -> Result<sled::Db, StoreError> {
    let db_path = root.join("db");
    let config = sled::Config::new()
        .path(&db_path)
        .cache_capacity(options.cache_capacity)
        .flush_every_ms(options.flush_every_ms)
        .mode(sled::Mode::HighThroughput);
    remove_partial_snapshots(&db_path)?;
    let start = Instant::now();
    loop {
        match config.open() {
            Ok(db) => return Ok(db),
            Err(sled::Error::Io(io)) if io.to_string().contains("could not acquire lock") => {
                if start.elapsed() > SLED_LOCK_WAIT {
                    return Err(StoreError::Locked { path: root.into() });
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(sled::Error::Io(io)) => return Err(StoreError::io(db_path, io)),
            Err(other) => return Err(other.into()),
        }
    }
}

/// sled 0.34.7 writes a snapshot to `snap.<lsn>.generating`, syncs it and renames it to
/// `snap.<lsn>`, but when it looks for snapshots it skips only `*.in___motion` files. A kill
/// while a snapshot is being written (sled writes one at every open) leaves a `.generating`
/// file that sled then picks as the newest snapshot and rejects as corrupt, refusing to open
/// (found by `tests/it/store_crash.rs`; sled issue #1527). Such a file was never renamed, so
/// sled never relied on it: the previous snapshot and the log are still complete.
fn remove_partial_snapshots(db_path: &Path) -> Result<(), StoreError> {
    let entries = match fs::read_dir(db_path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(StoreError::io(db_path, e)),
    };
    for entry in entries {
        let path = entry.map_err(|e| StoreError::io(db_path, e))?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.starts_with("snap.") && name.ends_with(".generating") {
            fs::remove_file(&path).map_err(|e| StoreError::io(&path, e))?;
        }
    }
    Ok(())
}

fn open_trees(root: &Path, db: &sled::Db, options: &StoreOptions) -> Result<Trees, StoreError> {
    let main = db.open_tree("main")?;
    let t = |prefix: u8| Table::new(&main, prefix);
    let meta = t(b'M');
    let keys = MetaKeys { wal: meta.key(b"lsm_wal"), manifest: meta.key(b"lsm_manifest") };
    let lsm = Arc::new(Lsm::open(&root.join("lsm"), main.clone(), keys, options.lsm.clone())?);
    let e = |prefix: u8| Table::in_lsm(&lsm, prefix);
    Ok(Trees {
        meta,
        blobs: e(BLOBS),
        records: e(RECORDS),
        by_origin: e(BY_ORIGIN),
        by_sha: e(BY_SHA),
        log: e(LOG),
        sets: t(b's'),
        sources: t(b'S'),
        failures: t(b'f'),
        feed_items: t(b'x'),
        hub_subscribers: t(b'w'),
        subscriptions: t(b'p'),
        main,
        lsm,
    })
}

/// The database's own record of its format must be one this build opens; returns it.
fn check_meta(root: &Path, meta: &Table) -> Result<u32, StoreError> {
    let Some(v) = meta.get(FORMAT_KEY)? else {
        meta.insert(FORMAT_KEY, &FORMAT_VERSION.to_be_bytes())?;
        return Ok(FORMAT_VERSION);
    };
    match <[u8; 4]>::try_from(v.as_ref()).map(u32::from_be_bytes) {
        Ok(version) if version == FORMAT_VERSION || UPGRADES_FROM.contains(&version) => Ok(version),
        found => {
            let found = found.map_or_else(|_| format!("{v:?}"), |n| n.to_string());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::blob::{BlobId, BlobRow};
    use crate::store::record::keys;
    use crate::store::test_util::record;
    use crate::store::{Batch, Expected, Store, codec};

    /// Rewrites a store as format 5 wrote it: blob rows without a referrer, every record in
    /// the sha-256 index, all of it in sled, 5 in both version marks.
    fn make_format_5(store: Store) {
        let t = &store.inner.trees;
        for kv in t.blobs.iter() {
            let (k, v) = kv.unwrap();
            let row = BlobRow::decode(&v).unwrap();
            let id = BlobId(<[u8; 32]>::try_from(k.as_ref()).unwrap());
            if let Some(uri) = &row.referrer {
                t.by_sha.insert(keys::by_sha(&id, uri), Vec::new()).unwrap();
            }
            let v5 = codec::encode(&(row.length, row.md5, row.sha1, row.created, row.place)).unwrap();
            t.blobs.insert(id.0, v5).unwrap();
        }
        into_sled_layout(store, 5);
    }

    /// Closes `store` and rewrites it as formats up to 7 kept it: every row of the engine's
    /// tables in sled, no engine, `version` in both marks.
    fn into_sled_layout(store: Store, version: u32) {
        let path = store.path().to_path_buf();
        let t = &store.inner.trees;
        let mut rows = Vec::new();
        for table in [&t.blobs, &t.by_sha, &t.log, &t.by_origin, &t.records] {
            for kv in table.iter() {
                let (k, v) = kv.unwrap();
                rows.push((table.key(&k), v.to_vec()));
            }
        }
        drop(store);
        let db = open_sled_when_released(&path.join("db"));
        let main = db.open_tree("main").unwrap();
        for (k, v) in rows {
            main.insert(k, v).unwrap();
        }
        let meta = Table::new(&main, b'M');
        for key in [&b"lsm_wal"[..], b"lsm_manifest"] {
            meta.remove(key).unwrap();
        }
        meta.insert(FORMAT_KEY, &version.to_be_bytes()).unwrap();
        db.flush().unwrap();
        drop((meta, main, db));
        fs::remove_dir_all(path.join("lsm")).unwrap();
        fs::write(path.join(FORMAT_FILE), format!("{FORMAT_MAGIC} {version}\n")).unwrap();
    }

    /// Opens sled directly once the closed store's last handle is gone: the blob filter's scan
    /// may hold one a step longer than the store (as [`Store::open`] allows for too).
    fn open_sled_when_released(path: &Path) -> sled::Db {
        let start = std::time::Instant::now();
        // Bounded by the 10 s below.
        loop {
            match sled::Config::new().path(path).open() {
                Ok(db) => return db,
                Err(sled::Error::Io(e)) if e.to_string().contains("could not acquire lock") => {
                    assert!(start.elapsed() < std::time::Duration::from_secs(10), "{e}");
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(e) => panic!("{e}"),
            }
        }
    }

    fn marks(path: &Path) -> (String, Vec<u8>) {
        let store = Store::open(path).unwrap();
        let meta = store.inner.trees.meta.get(FORMAT_KEY).unwrap().unwrap().to_vec();
        (fs::read_to_string(path.join(FORMAT_FILE)).unwrap(), meta)
    }

    #[test]
    fn a_format_5_store_is_upgraded_in_place_and_keeps_its_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let store = Store::open(&path).unwrap();
        let (x, y) =
            (store.put(&b"x"[..], &Expected::none()).unwrap().id, store.put(&b"y"[..], &Expected::none()).unwrap().id);
        let (a, b, c) = ("http://t/a", "http://t/b", "http://t/c");
        store
            .apply(Batch::new().upsert(&["s"], record(a, x)).upsert(&["s"], record(b, x)).upsert(&["s"], record(c, y)))
            .unwrap();
        make_format_5(store);

        let now = (format!("{FORMAT_MAGIC} {FORMAT_VERSION}\n"), FORMAT_VERSION.to_be_bytes().to_vec());
        assert_eq!(marks(&path), now);
        let store = Store::open(&path).unwrap();
        assert!(store.verify().unwrap().is_clean());
        assert_eq!(store.uris_by_sha256(&x).unwrap(), [a, b]);
        // Format 6 writes on top: d is named by x's row, which names no one after the upgrade.
        store.apply(Batch::new().delete(&["s"], a).delete(&["s"], b).upsert(&["s"], record("http://t/d", x))).unwrap();
        assert_eq!(store.inner.blob_row(&x).unwrap().unwrap().referrer.as_deref(), Some("http://t/d"));
        let report = store.gc().unwrap();
        assert_eq!((report.blobs_removed, report.kept_fresh), (0, 0), "{report}");
        assert!(store.verify().unwrap().is_clean());
    }

    /// The database is marked first: a crash before `FORMAT` is rewritten leaves a store the
    /// next open finishes upgrading, and an older build refuses.
    #[test]
    fn an_upgrade_interrupted_before_the_format_file_is_finished_by_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        drop(Store::open(&path).unwrap());
        fs::write(path.join(FORMAT_FILE), format!("{FORMAT_MAGIC} 6\n")).unwrap();
        assert_eq!(marks(&path), (format!("{FORMAT_MAGIC} {FORMAT_VERSION}\n"), FORMAT_VERSION.to_be_bytes().to_vec()));
    }

    /// Format 6 kept an upstream index row for every record harvested through an aggregator;
    /// the upgrade deletes them all and the record is still found from its upstream URI.
    #[test]
    fn a_format_6_store_loses_its_upstream_index_and_still_finds_its_records() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let store = Store::open(&path).unwrap();
        let x = store.put(&b"x"[..], &Expected::none()).unwrap().id;
        let (uri, upstream) = ("http://t/r/agg/http/agg/r/1", "http://agg/r/1");
        let mut chained = record(uri, x);
        chained.upstream = upstream.into();
        store.apply(Batch::new().upsert(&["agg"], chained)).unwrap();
        // As format 6 wrote them, plus enough strays to need more than one delete batch.
        let retired = Table::new(&store.inner.trees.main, RETIRED_BY_UPSTREAM);
        retired.insert(upstream.as_bytes(), uri.as_bytes()).unwrap();
        for i in 0..12_345 {
            retired.insert(format!("http://agg/gone/{i}").as_bytes(), uri.as_bytes()).unwrap();
        }
        drop(retired);
        into_sled_layout(store, 6);

        assert_eq!(marks(&path), (format!("{FORMAT_MAGIC} {FORMAT_VERSION}\n"), FORMAT_VERSION.to_be_bytes().to_vec()));
        let store = Store::open(&path).unwrap();
        assert_eq!(Table::new(&store.inner.trees.main, RETIRED_BY_UPSTREAM).iter().count(), 0);
        assert!(store.verify().unwrap().is_clean());
        assert_eq!(store.uri_by_upstream(upstream, &[uri.to_owned()]).unwrap().as_deref(), Some(uri));
    }

    /// Format 7 kept records, blob rows, indexes and the log in sled; the upgrade moves them
    /// into the engine unchanged, and a second run of it (an interrupted upgrade finished by
    /// the next open) changes nothing.
    #[test]
    fn a_format_7_store_moves_into_the_engine_with_everything_it_held() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let store = Store::open_with(&path, &StoreOptions::small()).unwrap();
        let mut uris = Vec::new();
        for i in 0..300 {
            let id = store.put(format!("content {}", i % 250).as_bytes(), &Expected::none()).unwrap().id;
            let uri = format!("http://t/r/s/{i:04}");
            store.apply(Batch::new().upsert(&["s", "all"], record(&uri, id))).unwrap();
            uris.push(uri);
        }
        store.apply(Batch::new().delete(&["s", "all"], &uris[7])).unwrap();
        let before: Vec<_> = store.records().map(Result::unwrap).collect();
        let events: Vec<_> = store.events_after("all", 0).unwrap().map(Result::unwrap).collect();
        into_sled_layout(store, 7);

        for _ in 0..2 {
            let store = Store::open_with(&path, &StoreOptions::small()).unwrap();
            assert!(Table::new(&store.inner.trees.main, RECORDS).iter().next().is_none(), "moved out of sled");
            assert_eq!(store.records().map(Result::unwrap).collect::<Vec<_>>(), before);
            assert_eq!(store.events_after("all", 0).unwrap().map(Result::unwrap).collect::<Vec<_>>(), events);
            assert_eq!(store.history(&uris[7]).unwrap().len(), 4, "created and deleted, in two sets");
            let report = store.verify().unwrap();
            assert!(report.is_clean(), "{report}");
            drop(store);
            // As if the upgrade had been cut off before its last mark.
            fs::write(path.join(FORMAT_FILE), format!("{FORMAT_MAGIC} 7\n")).unwrap();
        }
    }
}
