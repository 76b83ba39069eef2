//! Tables: the store's kinds of rows, each a key prefix within one sled tree.
//!
//! One tree rather than a tree per kind, because sled 0.34 applies a `Batch` to one tree
//! atomically and cheaply, while a transaction across trees reads every key before writing
//! it and tracks conflicts: measured on this workload, a batch of 100 records with events and
//! indexes commits ~40% faster as one `apply_batch`. Batches are serialised in-process by the
//! store's apply lock (and across processes by the `LOCK` file), so reading first and writing
//! the whole batch at the end is as safe as a transaction.

use std::collections::HashMap;

use sled::IVec;

/// One kind of row: the keys of `tree` that start with `prefix`.
#[derive(Clone)]
pub(super) struct Table {
    tree: sled::Tree,
    prefix: u8,
}

impl Table {
    pub(super) fn new(tree: &sled::Tree, prefix: u8) -> Self {
        Table { tree: tree.clone(), prefix }
    }

    /// The full sled key of `key` in this table.
    pub(super) fn key(&self, key: &[u8]) -> Vec<u8> {
        let mut full = Vec::with_capacity(1 + key.len());
        full.push(self.prefix);
        full.extend_from_slice(key);
        full
    }

    pub(super) fn get(&self, key: impl AsRef<[u8]>) -> sled::Result<Option<IVec>> {
        self.tree.get(self.key(key.as_ref()))
    }

    pub(super) fn contains_key(&self, key: impl AsRef<[u8]>) -> sled::Result<bool> {
        self.tree.contains_key(self.key(key.as_ref()))
    }

    pub(super) fn insert(&self, key: impl AsRef<[u8]>, value: impl Into<IVec>) -> sled::Result<Option<IVec>> {
        self.tree.insert(self.key(key.as_ref()), value)
    }

    pub(super) fn remove(&self, key: impl AsRef<[u8]>) -> sled::Result<Option<IVec>> {
        self.tree.remove(self.key(key.as_ref()))
    }

    /// Atomic compare-and-swap of one row; `Ok(Err(current))` when `old` did not match.
    pub(super) fn compare_and_swap(
        &self,
        key: impl AsRef<[u8]>,
        old: Option<impl AsRef<[u8]>>,
        new: Option<impl Into<IVec>>,
    ) -> sled::Result<Result<(), Option<IVec>>> {
        Ok(self.tree.compare_and_swap(self.key(key.as_ref()), old, new)?.map_err(|e| e.current))
    }

    /// Every row, in key order.
    pub(super) fn iter(&self) -> TableIter {
        TableIter { inner: self.tree.scan_prefix([self.prefix]) }
    }

    /// Rows whose key starts with `prefix`, in key order.
    pub(super) fn scan_prefix(&self, prefix: impl AsRef<[u8]>) -> TableIter {
        TableIter { inner: self.tree.scan_prefix(self.key(prefix.as_ref())) }
    }

    /// Rows with `first <= key < end` (`end = None`: to the end of the table), in key order.
    pub(super) fn range(&self, first: &[u8], end: Option<&[u8]>) -> TableIter {
        let start = self.key(first);
        let inner = match end {
            Some(end) => self.tree.range(start..self.key(end)),
            // Tables are single ASCII-letter prefixes, so the next byte value bounds this one.
            None => self.tree.range(start..vec![self.prefix + 1]),
        };
        TableIter { inner }
    }

    /// Rows with `first <= key <= last`, in key order.
    pub(super) fn range_inclusive(&self, first: &[u8], last: &[u8]) -> TableIter {
        TableIter { inner: self.tree.range(self.key(first)..=self.key(last)) }
    }
}

/// Rows of a table with the prefix stripped from their keys.
pub(super) struct TableIter {
    inner: sled::Iter,
}

impl TableIter {
    /// Only the keys.
    pub(super) fn keys(self) -> impl Iterator<Item = sled::Result<IVec>> {
        self.map(|kv| kv.map(|(k, _)| k))
    }
}

impl Iterator for TableIter {
    type Item = sled::Result<(IVec, IVec)>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.inner.next()?.map(|(k, v)| (k.subslice(1, k.len() - 1), v)))
    }
}

impl DoubleEndedIterator for TableIter {
    fn next_back(&mut self) -> Option<Self::Item> {
        Some(self.inner.next_back()?.map(|(k, v)| (k.subslice(1, k.len() - 1), v)))
    }
}

/// The writes of one batch, collected so they can be applied atomically at the end; reads
/// through it see the batch's own earlier writes (two ops on one URI in a batch).
#[derive(Default)]
pub(super) struct Overlay {
    writes: HashMap<Vec<u8>, Option<Vec<u8>>>,
}

impl Overlay {
    /// An overlay expecting about `writes` writes, so a large batch does not rehash as it grows.
    pub(super) fn with_capacity(writes: usize) -> Self {
        Overlay { writes: HashMap::with_capacity(writes) }
    }

    pub(super) fn get(&self, table: &Table, key: &[u8]) -> sled::Result<Option<IVec>> {
        match self.writes.get(&table.key(key)) {
            Some(v) => Ok(v.as_deref().map(IVec::from)),
            None => table.get(key),
        }
    }

    pub(super) fn insert(&mut self, table: &Table, key: &[u8], value: Vec<u8>) {
        self.writes.insert(table.key(key), Some(value));
    }

    pub(super) fn remove(&mut self, table: &Table, key: &[u8]) {
        self.writes.insert(table.key(key), None);
    }

    /// Applies every write atomically (one sled batch: all or nothing across a crash).
    pub(super) fn commit(self, tree: &sled::Tree) -> sled::Result<()> {
        let mut batch = sled::Batch::default();
        for (k, v) in self.writes {
            match v {
                Some(v) => batch.insert(k, v),
                None => batch.remove(k),
            }
        }
        tree.apply_batch(batch)
    }
}
