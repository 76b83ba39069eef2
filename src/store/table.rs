//! Tables: the store's kinds of rows, each a key prefix in one of two places.
//!
//! - **sled**, one tree, for the small tables that change in place: counters, source state,
//!   failures, subscriptions, the meta rows. One tree rather than a tree per kind, because
//!   sled 0.34 applies a `Batch` to one tree atomically and cheaply, while a transaction across
//!   trees reads every key before writing it and tracks conflicts.
//! - **the LSM engine** ([`super::lsm`]), for the tables with a row or more per resource:
//!   records, blob rows, the provenance indexes and the change log (store format 8).
//!
//! A table does not say which it is to its callers: reads, scans and the batch [`Overlay`] look
//! the same. An overlay's commit puts both kinds of writes in one atomic step: the engine's
//! log is written and synced first, then sled's batch carries the log's new end (see
//! [`super::lsm::Lsm::commit`]). Batches are serialised in-process by the store's apply lock
//! (and across processes by the `LOCK` file), so reading first and writing the whole batch at
//! the end is as safe as a transaction.

use std::collections::HashMap;
use std::sync::Arc;

use sled::IVec;

use super::error::StoreError;
use super::lsm::{Lsm, LsmIter};

/// Where a table's rows live.
#[derive(Clone)]
enum Backend {
    Sled(sled::Tree),
    Lsm(Arc<Lsm>),
}

/// One kind of row: the keys that start with `prefix`, in sled or in the engine.
#[derive(Clone)]
pub(super) struct Table {
    backend: Backend,
    prefix: u8,
}

impl Table {
    /// A table in sled's tree.
    pub(super) fn new(tree: &sled::Tree, prefix: u8) -> Self {
        Table { backend: Backend::Sled(tree.clone()), prefix }
    }

    /// A table in the engine.
    pub(super) fn in_lsm(lsm: &Arc<Lsm>, prefix: u8) -> Self {
        Table { backend: Backend::Lsm(lsm.clone()), prefix }
    }

    /// The full key of `key` in this table.
    pub(super) fn key(&self, key: &[u8]) -> Vec<u8> {
        let mut full = Vec::with_capacity(1 + key.len());
        full.push(self.prefix);
        full.extend_from_slice(key);
        full
    }

    fn in_engine(&self) -> bool {
        matches!(self.backend, Backend::Lsm(_))
    }

    pub(super) fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<IVec>, StoreError> {
        self.get_full(self.key(key.as_ref()))
    }

    /// [`Table::get`] of a key with the table's prefix in front already.
    fn get_full(&self, key: Vec<u8>) -> Result<Option<IVec>, StoreError> {
        match &self.backend {
            Backend::Sled(t) => Ok(t.get(key)?),
            Backend::Lsm(l) => Ok(l.get(&key)?.map(IVec::from)),
        }
    }

    pub(super) fn contains_key(&self, key: impl AsRef<[u8]>) -> Result<bool, StoreError> {
        match &self.backend {
            Backend::Sled(t) => Ok(t.contains_key(self.key(key.as_ref()))?),
            Backend::Lsm(_) => Ok(self.get(key)?.is_some()),
        }
    }

    /// Writes one row, durably in the engine's case (its own commit), and returns the old value.
    pub(super) fn insert(&self, key: impl AsRef<[u8]>, value: impl Into<IVec>) -> Result<Option<IVec>, StoreError> {
        self.put(key.as_ref(), Some(value.into().to_vec()))
    }

    /// Removes one row; returns the old value.
    pub(super) fn remove(&self, key: impl AsRef<[u8]>) -> Result<Option<IVec>, StoreError> {
        self.put(key.as_ref(), None)
    }

    fn put(&self, key: &[u8], value: Option<Vec<u8>>) -> Result<Option<IVec>, StoreError> {
        let key = self.key(key);
        match &self.backend {
            Backend::Sled(t) => Ok(match value {
                Some(v) => t.insert(key, v)?,
                None => t.remove(key)?,
            }),
            Backend::Lsm(l) => {
                // The callers writing single rows (blob rows, gc) hold the locks that keep
                // batches away from the same key, so reading first is enough.
                let old = l.get(&key)?.map(IVec::from);
                l.commit(vec![(key, value)], sled::Batch::default())?;
                Ok(old)
            }
        }
    }

    /// Atomic compare-and-swap of one row; `Ok(Err(current))` when `old` did not match.
    pub(super) fn compare_and_swap(
        &self,
        key: impl AsRef<[u8]>,
        old: Option<impl AsRef<[u8]>>,
        new: Option<impl Into<IVec>>,
    ) -> Result<Result<(), Option<IVec>>, StoreError> {
        let key = self.key(key.as_ref());
        match &self.backend {
            Backend::Sled(t) => Ok(t.compare_and_swap(key, old, new)?.map_err(|e| e.current)),
            Backend::Lsm(l) => {
                let new = new.map(|v| v.into().to_vec());
                Ok(l.compare_and_swap(&key, old.as_ref().map(AsRef::as_ref), new)?.map_err(|c| c.map(IVec::from)))
            }
        }
    }

    /// Every row, in key order.
    pub(super) fn iter(&self) -> TableIter {
        self.range(&[], None)
    }

    /// Rows whose key starts with `prefix`, in key order.
    pub(super) fn scan_prefix(&self, prefix: impl AsRef<[u8]>) -> TableIter {
        let start = self.key(prefix.as_ref());
        let end = successor(&start);
        self.full_range(start, end)
    }

    /// Rows with `first <= key < end` (`end = None`: to the end of the table), in key order.
    pub(super) fn range(&self, first: &[u8], end: Option<&[u8]>) -> TableIter {
        // Tables are single ASCII-letter prefixes, so the next byte value bounds this one.
        let end = end.map_or_else(|| Some(vec![self.prefix + 1]), |e| Some(self.key(e)));
        self.full_range(self.key(first), end)
    }

    /// Rows with `first <= key <= last`, in key order.
    pub(super) fn range_inclusive(&self, first: &[u8], last: &[u8]) -> TableIter {
        // The smallest key greater than `last` is `last` followed by a zero byte.
        let mut end = self.key(last);
        end.push(0);
        self.full_range(self.key(first), Some(end))
    }

    /// The last row with `first <= key <= last`.
    pub(super) fn floor(&self, first: &[u8], last: &[u8]) -> Result<Option<(IVec, IVec)>, StoreError> {
        let (lo, hi) = (self.key(first), self.key(last));
        let found = match &self.backend {
            Backend::Sled(t) => t.range(lo..=hi).next_back().transpose()?,
            Backend::Lsm(l) => l.floor(&lo, &hi)?.map(|(k, v)| (IVec::from(k), IVec::from(v))),
        };
        Ok(found.map(|(k, v)| (k.subslice(1, k.len() - 1), v)))
    }

    fn full_range(&self, start: Vec<u8>, end: Option<Vec<u8>>) -> TableIter {
        let inner = match &self.backend {
            Backend::Sled(t) => match end {
                Some(end) => Inner::Sled(t.range(start..end)),
                None => Inner::Sled(t.range(start..)),
            },
            Backend::Lsm(l) => Inner::Lsm(l.range(&start, end.as_deref())),
        };
        TableIter { inner }
    }
}

/// The smallest byte string greater than every string starting with `prefix`.
fn successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut s = prefix.to_vec();
    while let Some(last) = s.pop() {
        if last < 0xFF {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}

enum Inner {
    Sled(sled::Iter),
    Lsm(LsmIter),
}

/// Rows of a table with the prefix stripped from their keys.
pub(super) struct TableIter {
    inner: Inner,
}

impl TableIter {
    /// Only the keys.
    pub(super) fn keys(self) -> impl Iterator<Item = Result<IVec, StoreError>> {
        self.map(|kv| kv.map(|(k, _)| k))
    }
}

impl Iterator for TableIter {
    type Item = Result<(IVec, IVec), StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.inner {
            Inner::Sled(it) => Some(it.next()?.map(|(k, v)| (k.subslice(1, k.len() - 1), v)).map_err(Into::into)),
            Inner::Lsm(it) => Some(it.next()?.map(|(mut k, v)| {
                k.remove(0);
                (IVec::from(k), IVec::from(v))
            })),
        }
    }
}

/// The hash map of a batch's working sets: foldhash rather than std's SipHash, which was a
/// visible part of an apply's time. Its seed is random per process, so keys an upstream chose
/// (URIs) cannot be aimed at one bucket.
pub(super) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

type Writes = FastMap<Vec<u8>, Option<Vec<u8>>>;

/// The writes of one batch, collected so they can be applied atomically at the end; reads
/// through it see the batch's own earlier writes (two ops on one URI in a batch).
#[derive(Default)]
pub(super) struct Overlay {
    sled: Writes,
    engine: Writes,
}

impl Overlay {
    /// An overlay expecting about `writes` writes, so a large batch does not rehash as it grows.
    pub(super) fn with_capacity(writes: usize) -> Self {
        Overlay {
            sled: Writes::with_capacity_and_hasher(8, Default::default()),
            engine: Writes::with_capacity_and_hasher(writes, Default::default()),
        }
    }

    fn writes(&mut self, table: &Table) -> &mut Writes {
        if table.in_engine() { &mut self.engine } else { &mut self.sled }
    }

    pub(super) fn get(&self, table: &Table, key: &[u8]) -> Result<Option<IVec>, StoreError> {
        let writes = if table.in_engine() { &self.engine } else { &self.sled };
        let key = table.key(key);
        match writes.get(&key) {
            Some(v) => Ok(v.as_deref().map(IVec::from)),
            None => table.get_full(key),
        }
    }

    pub(super) fn insert(&mut self, table: &Table, key: &[u8], value: Vec<u8>) {
        self.writes(table).insert(table.key(key), Some(value));
    }

    pub(super) fn remove(&mut self, table: &Table, key: &[u8]) {
        self.writes(table).insert(table.key(key), None);
    }

    /// Applies every write atomically: all or nothing across a crash.
    pub(super) fn commit(self, tree: &sled::Tree, lsm: &Lsm) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for (k, v) in self.sled {
            match v {
                Some(v) => batch.insert(k, v),
                None => batch.remove(k),
            }
        }
        if self.engine.is_empty() {
            return Ok(tree.apply_batch(batch)?);
        }
        lsm.commit(self.engine.into_iter().collect(), batch)
    }
}
