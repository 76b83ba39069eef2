//! Tables: the store's kinds of rows, one fjall keyspace each, in one fjall database.
//!
//! Everything the store writes goes through [`Db::commit`]: one fjall write batch, across any
//! keyspaces, written to fjall's journal and made durable with `fdatasync` before it becomes
//! visible to any reader. fjall writes a batch to its journal, persists it, and only then
//! inserts it into the memtables and publishes its sequence number, so a reader can never see
//! what a power cut could take back. A failed write or sync makes the store read-only for good
//! (until it is reopened): after a failed `fsync` the kernel may have dropped the dirty pages it
//! could not write, so trying again and trusting a later success would acknowledge data that is
//! gone (docs/STORE.md, "Commit and durability").
//!
//! Reads go through a [`View`], a fjall snapshot across every keyspace: one view gives a walk,
//! or a read of a record and then of its blob row, the state after some whole number of batches.
//! A plain read takes a view of its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use fjall::{Keyspace, PersistMode, Readable as _};

use super::error::StoreError;

/// A stored key or value: fjall's reference-counted byte slice.
pub(super) type Bytes = fjall::Slice;

/// Told, once, why the store turned read-only.
pub(super) type BrokenListener = Box<dyn Fn(&str) + Send + Sync>;

/// The database every table lives in, and whether it may still be written.
#[derive(Clone)]
pub(super) struct Db {
    inner: Arc<DbInner>,
}

struct DbInner {
    db: fjall::Database,
    path: std::path::PathBuf,
    /// Why the store no longer accepts writes (a failed write or sync), if it does not.
    broken: RwLock<Option<String>>,
    /// Called once when the store turns read-only (the service's metrics and dashboard).
    on_broken: Mutex<Vec<BrokenListener>>,
}

impl Db {
    pub(super) fn new(db: fjall::Database, path: &std::path::Path) -> Db {
        let inner =
            DbInner { db, path: path.to_path_buf(), broken: RwLock::new(None), on_broken: Mutex::new(Vec::new()) };
        Db { inner: Arc::new(inner) }
    }

    pub(super) fn fjall(&self) -> &fjall::Database {
        &self.inner.db
    }

    /// The database's directory.
    pub(super) fn fjall_path(&self) -> &std::path::Path {
        &self.inner.path
    }

    /// A consistent view of every table as of the last committed batch.
    pub(super) fn view(&self) -> View {
        View(self.inner.db.snapshot())
    }

    /// Why writes are refused, if they are.
    pub(super) fn broken(&self) -> Option<String> {
        self.inner.broken.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Refuses every later write, for `reason` (the first reason is kept).
    pub(super) fn break_with(&self, reason: String) {
        {
            let mut broken = self.inner.broken.write().unwrap_or_else(|p| p.into_inner());
            if broken.is_some() {
                return;
            }
            tracing::error!(reason = %reason, "the store is now read-only: a write or sync failed; fix the cause (a full disk, a failing device) and restart");
            *broken = Some(reason.clone());
        }
        for listener in self.inner.on_broken.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            listener(&reason);
        }
    }

    /// Registers `listener` to be told, once, when the store turns read-only.
    pub(super) fn on_broken(&self, listener: BrokenListener) {
        self.inner.on_broken.lock().unwrap_or_else(|p| p.into_inner()).push(listener);
    }

    /// An error if writes are refused.
    pub(super) fn check_writable(&self) -> Result<(), StoreError> {
        match self.broken() {
            Some(reason) => Err(StoreError::ReadOnly { reason }),
            None => Ok(()),
        }
    }

    /// Commits `writes` as one atomic batch, durable (`fdatasync` of the journal) before any
    /// reader sees it. A failure makes the store read-only.
    pub(super) fn commit(&self, writes: Overlay) -> Result<(), StoreError> {
        self.check_writable()?;
        if writes.is_empty() {
            return Ok(());
        }
        let mut batch = self.inner.db.batch().durability(Some(PersistMode::SyncData));
        for (_, (ks, rows)) in writes.tables {
            for (k, v) in rows {
                match v {
                    Some(v) => batch.insert(&ks, k, v),
                    None => batch.remove(&ks, k),
                }
            }
        }
        batch.commit().map_err(|e| self.failed("committing a batch to the journal", e))
    }

    /// Commits a batch that need not be durable on return: for bulk loads (the import), which
    /// call [`Db::persist`] once at the end.
    pub(super) fn commit_buffered(&self, writes: Overlay) -> Result<(), StoreError> {
        self.check_writable()?;
        let mut batch = self.inner.db.batch();
        for (_, (ks, rows)) in writes.tables {
            for (k, v) in rows {
                match v {
                    Some(v) => batch.insert(&ks, k, v),
                    None => batch.remove(&ks, k),
                }
            }
        }
        batch.commit().map_err(|e| self.failed("writing a batch to the journal", e))
    }

    /// Makes everything committed so far durable, the journal's metadata included.
    pub(super) fn persist(&self) -> Result<(), StoreError> {
        self.check_writable()?;
        self.inner.db.persist(PersistMode::SyncAll).map_err(|e| self.failed("syncing the journal", e))
    }

    /// A write that failed: the store turns read-only, and the error says why.
    fn failed(&self, what: &str, e: fjall::Error) -> StoreError {
        let reason = format!("{what} failed: {e}");
        self.break_with(reason.clone());
        StoreError::Database(reason)
    }

    /// Makes the store read-only after a failed write or sync of its own files (a pack, a
    /// blob file), and returns `error`.
    pub(super) fn fail_io(&self, error: StoreError) -> StoreError {
        self.break_with(crate::error::chain(&error).to_string());
        error
    }
}

/// A snapshot of every table: reads through one view see the same committed batches.
#[derive(Clone)]
pub(super) struct View(fjall::Snapshot);

/// One kind of row: a keyspace.
#[derive(Clone)]
pub(super) struct Table {
    ks: Keyspace,
    db: Db,
    /// Small and fixed: names the table in a batch's [`Overlay`].
    id: u8,
}

impl Table {
    pub(super) fn new(db: &Db, ks: Keyspace, id: u8) -> Self {
        Table { ks, db: db.clone(), id }
    }

    pub(super) fn keyspace(&self) -> &Keyspace {
        &self.ks
    }

    pub(super) fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>, StoreError> {
        self.get_in(&self.db.view(), key)
    }

    pub(super) fn get_in(&self, view: &View, key: impl AsRef<[u8]>) -> Result<Option<Bytes>, StoreError> {
        Ok(view.0.get(&self.ks, key)?)
    }

    /// Whether a row is there. Without a snapshot: one key cannot be half-committed, and
    /// whatever a read sees was made durable before it became visible.
    pub(super) fn contains_key(&self, key: impl AsRef<[u8]>) -> Result<bool, StoreError> {
        Ok(self.ks.contains_key(key)?)
    }

    /// The newest value, without a snapshot: for the writer, which holds the write lock, so
    /// no other batch is committing and the newest state is a whole one. Opening a snapshot
    /// for each of a batch's reads was a visible part of its cost.
    pub(super) fn get_latest(&self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>, StoreError> {
        Ok(self.ks.get(key)?)
    }

    /// Writes one row on its own, durably; the caller holds whatever lock keeps batches away
    /// from the same key.
    pub(super) fn insert(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<(), StoreError> {
        let mut w = Overlay::default();
        w.insert(self, key.as_ref(), value.as_ref().to_vec());
        self.db.commit(w)
    }

    /// Removes one row, durably; returns whether it was there.
    pub(super) fn remove(&self, key: impl AsRef<[u8]>) -> Result<bool, StoreError> {
        let key = key.as_ref();
        let was = self.contains_key(key)?;
        if was {
            let mut w = Overlay::default();
            w.remove(self, key);
            self.db.commit(w)?;
        }
        Ok(was)
    }

    /// Every row, in key order.
    pub(super) fn iter(&self) -> TableIter {
        self.iter_in(&self.db.view())
    }

    pub(super) fn iter_in(&self, view: &View) -> TableIter {
        TableIter { inner: view.0.iter(&self.ks) }
    }

    /// Rows whose key starts with `prefix`, in key order.
    pub(super) fn scan_prefix(&self, prefix: impl AsRef<[u8]>) -> TableIter {
        self.scan_prefix_in(&self.db.view(), prefix)
    }

    pub(super) fn scan_prefix_in(&self, view: &View, prefix: impl AsRef<[u8]>) -> TableIter {
        TableIter { inner: view.0.prefix(&self.ks, prefix) }
    }

    /// Rows with `first <= key < end` (`end = None`: to the end of the table), in key order.
    pub(super) fn range_in(&self, view: &View, first: &[u8], end: Option<&[u8]>) -> TableIter {
        let inner = match end {
            Some(end) => view.0.range(&self.ks, first..end),
            None => view.0.range(&self.ks, first..),
        };
        TableIter { inner }
    }

    /// The last row with `first <= key <= last`.
    pub(super) fn floor_in(
        &self,
        view: &View,
        first: &[u8],
        last: &[u8],
    ) -> Result<Option<(Bytes, Bytes)>, StoreError> {
        Ok(view.0.range(&self.ks, first..=last).next_back().map(|g| g.into_inner()).transpose()?)
    }
}

/// Rows of a table, in key order, as of the view they were started from.
pub(super) struct TableIter {
    inner: fjall::Iter,
}

impl TableIter {
    /// Only the keys.
    pub(super) fn keys(self) -> impl Iterator<Item = Result<Bytes, StoreError>> {
        self.map(|kv| kv.map(|(k, _)| k))
    }
}

impl Iterator for TableIter {
    type Item = Result<(Bytes, Bytes), StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.inner.next()?.into_inner().map_err(Into::into))
    }
}

/// The hash map of a batch's working sets: foldhash rather than std's SipHash, which was a
/// visible part of an apply's time. Its seed is random per process, so keys an upstream chose
/// (URIs) cannot be aimed at one bucket.
pub(super) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

type Writes = FastMap<Vec<u8>, Option<Vec<u8>>>;

/// The writes of one batch, per table, collected so they can be committed atomically at the
/// end; reads through it see the batch's own earlier writes (two ops on one URI in a batch).
#[derive(Default)]
pub(super) struct Overlay {
    tables: HashMap<u8, (Keyspace, Writes)>,
    /// How many writes the busiest table is expected to take.
    capacity: usize,
}

impl Overlay {
    /// An overlay expecting about `writes` writes, so a large batch does not rehash as it grows.
    pub(super) fn with_capacity(writes: usize) -> Self {
        Overlay { tables: HashMap::new(), capacity: writes }
    }

    fn is_empty(&self) -> bool {
        self.tables.values().all(|(_, w)| w.is_empty())
    }

    fn writes(&mut self, table: &Table) -> &mut Writes {
        let capacity = self.capacity;
        &mut self
            .tables
            .entry(table.id)
            .or_insert_with(|| (table.ks.clone(), Writes::with_capacity_and_hasher(capacity, Default::default())))
            .1
    }

    pub(super) fn get(&self, table: &Table, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        match self.tables.get(&table.id).and_then(|(_, w)| w.get(key)) {
            Some(v) => Ok(v.as_deref().map(Bytes::from)),
            None => table.get_latest(key),
        }
    }

    /// This batch's own write of `key`, if it made one (`Some(None)`: a removal).
    pub(super) fn written(&self, table: &Table, key: &[u8]) -> Option<Option<&[u8]>> {
        self.tables.get(&table.id).and_then(|(_, w)| w.get(key)).map(Option::as_deref)
    }

    pub(super) fn insert(&mut self, table: &Table, key: &[u8], value: Vec<u8>) {
        self.writes(table).insert(key.to_vec(), Some(value));
    }

    pub(super) fn remove(&mut self, table: &Table, key: &[u8]) {
        self.writes(table).insert(key.to_vec(), None);
    }
}
