//! Tables: the store's kinds of rows, in one fjall database.
//!
//! The tables that grow with the records (blobs, records, the two indexes, the change log) have
//! a keyspace each, tuned for how they are read. The nine that stay small share one keyspace,
//! each table's keys behind its id as a one-byte prefix: fjall makes a keyspace durable with
//! about 18 `fsync`s, so one keyspace each made creating a store take ~265 (docs/STORE.md,
//! "What is stored where").
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
        writes.into_batch(&mut batch);
        batch.commit().map_err(|e| self.failed("committing a batch to the journal", e))
    }

    /// Commits a batch that need not be durable on return: for bulk loads (the import), which
    /// call [`Db::persist`] once at the end.
    pub(super) fn commit_buffered(&self, writes: Overlay) -> Result<(), StoreError> {
        self.check_writable()?;
        let mut batch = self.inner.db.batch();
        writes.into_batch(&mut batch);
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

/// One kind of row: a keyspace of its own, or its share of the keyspace small tables share.
#[derive(Clone)]
pub(super) struct Table {
    ks: Keyspace,
    db: Db,
    /// Small and fixed: names the table in a batch's [`Overlay`], and prefixes its keys in a
    /// shared keyspace.
    id: u8,
    /// Whether the keyspace is shared: every key is stored behind `id`.
    shared: bool,
}

impl Table {
    /// A table with a keyspace of its own.
    pub(super) fn new(db: &Db, ks: Keyspace, id: u8) -> Self {
        Table { ks, db: db.clone(), id, shared: false }
    }

    /// A table whose rows are those of `ks` behind the prefix `id`.
    pub(super) fn shared(db: &Db, ks: Keyspace, id: u8) -> Self {
        Table { ks, db: db.clone(), id, shared: true }
    }

    pub(super) fn keyspace(&self) -> &Keyspace {
        &self.ks
    }

    /// Whether the table shares its keyspace with others.
    pub(super) fn is_shared(&self) -> bool {
        self.shared
    }

    /// `key` as stored in the keyspace.
    fn stored<'k>(&self, key: &'k [u8]) -> std::borrow::Cow<'k, [u8]> {
        if self.shared {
            std::borrow::Cow::Owned(self.owned_key(key.to_vec()))
        } else {
            std::borrow::Cow::Borrowed(key)
        }
    }

    /// `key` as stored in the keyspace, taking it: a table of its own stores it as it is.
    fn owned_key(&self, mut key: Vec<u8>) -> Vec<u8> {
        if self.shared {
            key.insert(0, self.id);
        }
        key
    }

    /// How many bytes of a stored key are the table's prefix.
    fn prefix_len(&self) -> usize {
        usize::from(self.shared)
    }

    pub(super) fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>, StoreError> {
        self.get_in(&self.db.view(), key)
    }

    pub(super) fn get_in(&self, view: &View, key: impl AsRef<[u8]>) -> Result<Option<Bytes>, StoreError> {
        Ok(view.0.get(&self.ks, self.stored(key.as_ref()))?)
    }

    /// Whether a row is there. Without a snapshot: one key cannot be half-committed, and
    /// whatever a read sees was made durable before it became visible.
    pub(super) fn contains_key(&self, key: impl AsRef<[u8]>) -> Result<bool, StoreError> {
        Ok(self.ks.contains_key(self.stored(key.as_ref()))?)
    }

    /// The newest value, without a snapshot: for the writer, which holds the write lock, so
    /// no other batch is committing and the newest state is a whole one. Opening a snapshot
    /// for each of a batch's reads was a visible part of its cost.
    pub(super) fn get_latest(&self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>, StoreError> {
        Ok(self.ks.get(self.stored(key.as_ref()))?)
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
        if self.shared {
            return self.scan_prefix_in(view, []);
        }
        self.walk(view.0.iter(&self.ks))
    }

    /// Rows whose key starts with `prefix`, in key order.
    pub(super) fn scan_prefix(&self, prefix: impl AsRef<[u8]>) -> TableIter {
        self.scan_prefix_in(&self.db.view(), prefix)
    }

    pub(super) fn scan_prefix_in(&self, view: &View, prefix: impl AsRef<[u8]>) -> TableIter {
        self.walk(view.0.prefix(&self.ks, self.stored(prefix.as_ref())))
    }

    /// Rows with `first <= key < end` (`end = None`: to the end of the table), in key order.
    pub(super) fn range_in(&self, view: &View, first: &[u8], end: Option<&[u8]>) -> TableIter {
        let first = self.stored(first);
        let inner = match (end, self.shared) {
            (Some(end), _) => view.0.range(&self.ks, first..self.stored(end)),
            // The end of a shared table is where the next table's prefix begins.
            (None, true) => view.0.range(&self.ks, first..std::borrow::Cow::Owned(vec![self.id + 1])),
            (None, false) => view.0.range(&self.ks, first..),
        };
        self.walk(inner)
    }

    fn walk(&self, inner: fjall::Iter) -> TableIter {
        TableIter { inner, strip: self.prefix_len() }
    }

    /// The last row with `first <= key <= last`.
    pub(super) fn floor_in(
        &self,
        view: &View,
        first: &[u8],
        last: &[u8],
    ) -> Result<Option<(Bytes, Bytes)>, StoreError> {
        let mut range = view.0.range(&self.ks, self.stored(first)..=self.stored(last));
        let found = range.next_back().map(|g| g.into_inner()).transpose()?;
        Ok(found.map(|(k, v)| (strip(k, self.prefix_len()), v)))
    }
}

/// A stored key without its table's prefix.
fn strip(key: Bytes, prefix: usize) -> Bytes {
    if prefix == 0 { key } else { Bytes::from(&key[prefix..]) }
}

/// Rows of a table, in key order, as of the view they were started from.
pub(super) struct TableIter {
    inner: fjall::Iter,
    /// The table's prefix, taken off each key.
    strip: usize,
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
        let strip_len = self.strip;
        Some(self.inner.next()?.into_inner().map(|(k, v)| (strip(k, strip_len), v)).map_err(Into::into))
    }
}

/// The hash map of a batch's working sets: foldhash rather than std's SipHash, which was a
/// visible part of an apply's time. Its seed is random per process, so keys an upstream chose
/// (URIs) cannot be aimed at one bucket.
pub(super) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
pub(super) type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

type Writes = FastMap<Vec<u8>, Option<Vec<u8>>>;

/// The writes of one batch, per table, collected so they can be committed atomically at the
/// end; reads through it see the batch's own earlier writes (two ops on one URI in a batch).
#[derive(Default)]
pub(super) struct Overlay {
    tables: HashMap<u8, (Table, Writes)>,
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

    /// Moves every write into fjall's `batch`, keys as stored.
    fn into_batch(self, batch: &mut fjall::OwnedWriteBatch) {
        for (_, (table, rows)) in self.tables {
            for (k, v) in rows {
                let k = table.owned_key(k);
                match v {
                    Some(v) => batch.insert(&table.ks, k, v),
                    None => batch.remove(&table.ks, k),
                }
            }
        }
    }

    fn writes(&mut self, table: &Table) -> &mut Writes {
        let capacity = self.capacity;
        &mut self
            .tables
            .entry(table.id)
            .or_insert_with(|| (table.clone(), Writes::with_capacity_and_hasher(capacity, Default::default())))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Two tables sharing a keyspace (ids 3 and 4) and one of its own, in a new database.
    fn tables(dir: &std::path::Path) -> (Table, Table, Table) {
        let fjall = fjall::Database::builder(dir).open().unwrap();
        let db = Db::new(fjall, dir);
        let shared = db.fjall().keyspace("small", fjall::KeyspaceCreateOptions::default).unwrap();
        let own = db.fjall().keyspace("own", fjall::KeyspaceCreateOptions::default).unwrap();
        (Table::shared(&db, shared.clone(), 3), Table::shared(&db, shared, 4), Table::new(&db, own, 5))
    }

    fn keys(iter: TableIter) -> Vec<Vec<u8>> {
        iter.keys().map(|k| k.unwrap().to_vec()).collect()
    }

    #[test]
    fn tables_sharing_a_keyspace_see_only_their_own_rows_under_their_own_keys() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, own) = tables(dir.path());
        let mut w = Overlay::default();
        for (t, k) in [(&a, &b"k1"[..]), (&a, b"k2"), (&a, b"\xff"), (&b, b"k1"), (&b, b"\x00"), (&own, b"k1")] {
            w.insert(t, k, t.id.to_be_bytes().to_vec());
        }
        a.db.commit(w).unwrap();

        assert_eq!(keys(a.iter()), [b"k1".to_vec(), b"k2".to_vec(), b"\xff".to_vec()]);
        assert_eq!(keys(b.iter()), [b"\x00".to_vec(), b"k1".to_vec()]);
        assert_eq!(keys(own.iter()), [b"k1".to_vec()]);
        assert_eq!(a.get(b"k1").unwrap().as_deref(), Some(&[3u8][..]));
        assert_eq!(b.get(b"k1").unwrap().as_deref(), Some(&[4u8][..]));
        assert!(!b.contains_key(b"k2").unwrap() && a.contains_key(b"k2").unwrap());
        assert_eq!(keys(a.scan_prefix(b"k")), [b"k1".to_vec(), b"k2".to_vec()]);

        // Open-ended ranges and floors stop at the table's end, not the next table's rows.
        let view = a.db.view();
        assert_eq!(keys(a.range_in(&view, b"k2", None)), [b"k2".to_vec(), b"\xff".to_vec()]);
        assert_eq!(keys(b.range_in(&view, b"", Some(b"k1"))), [b"\x00".to_vec()]);
        let floor = b.floor_in(&view, b"", b"\xff\xff").unwrap().unwrap();
        assert_eq!(&*floor.0, b"k1");
        assert!(a.floor_in(&view, b"", b"a").unwrap().is_none(), "b's rows are not a's");

        assert!(a.remove(b"k1").unwrap());
        assert_eq!(b.get(b"k1").unwrap().as_deref(), Some(&[4u8][..]), "b's row with the same key stays");
    }
}
