//! What the feed harvester keeps per item of a feed source: the item as FeedSync last left it
//! (sync id, update count, history, conflicts, tombstone), as opaque bytes the harvester
//! writes and reads back. FeedSync merges every incoming version against this state, so it
//! must never disagree with the item's record: rows are written by the same [`Batch`] as the
//! record they belong to, and a crash keeps both or neither.
//!
//! Kept apart from the record because an item outlives its record (a tombstone deletes the
//! record, but a later update must still merge against the item's history) and because the
//! record's bitstream need not be the item (an enclosure or the linked page may be stored).
//!
//! [`Batch`]: super::Batch

use super::Store;
use super::codec::{check_key, pair_key};
use super::error::StoreError;
use super::table::TableIter;

pub(super) fn key(source: &str, item: &str) -> Vec<u8> {
    pair_key(source.as_bytes(), item.as_bytes())
}

/// Checks the parts of a row that become its key.
pub(super) fn validate(source: &str, item: &str) -> Result<(), StoreError> {
    check_key("source id", source)?;
    check_key("feed item id", item)
}

impl Store {
    /// The saved state of item `item` of feed source `source`.
    ///
    /// # Errors
    /// [`StoreError::Database`].
    pub fn feed_item(&self, source: &str, item: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.inner.trees.feed_items.get(key(source, item))?.map(|v| v.to_vec()))
    }

    /// Every item state of feed source `source`, in item-id order.
    pub fn feed_items(&self, source: &str) -> FeedItemIter {
        let mut prefix = source.as_bytes().to_vec();
        prefix.push(0);
        FeedItemIter { inner: self.inner.trees.feed_items.scan_prefix(&prefix), skip: prefix.len() }
    }
}

/// `(item id, state)` of one feed source's items.
pub struct FeedItemIter {
    inner: TableIter,
    skip: usize,
}

impl Iterator for FeedItemIter {
    type Item = Result<(String, Vec<u8>), StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        let kv = self.inner.next()?;
        Some(kv.and_then(|(k, v)| {
            let id = k.get(self.skip..).unwrap_or_default();
            let id = String::from_utf8(id.to_vec()).map_err(|e| StoreError::corrupt("feed item key", e))?;
            Ok((id, v.to_vec()))
        }))
    }
}

#[cfg(test)]
mod tests {
    use crate::store::{Batch, Store};

    fn temp_store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        (dir, store)
    }

    #[test]
    fn rows_commit_with_their_batch_and_list_per_source() {
        let (_dir, store) = temp_store();
        let mut b = Batch::new();
        b.feed_item("news", "urn:a", Some(b"<entry>a</entry>".to_vec()));
        b.feed_item("news", "urn:b", Some(b"<entry>b</entry>".to_vec()));
        b.feed_item("newsroom", "urn:a", Some(b"other source".to_vec()));
        store.apply(&mut b).unwrap();
        assert_eq!(store.feed_item("news", "urn:a").unwrap().as_deref(), Some(&b"<entry>a</entry>"[..]));
        let ids: Vec<String> = store.feed_items("news").map(|r| r.unwrap().0).collect();
        assert_eq!(ids, ["urn:a", "urn:b"], "a source's rows only, not those of a source sharing its prefix");

        let mut b = Batch::new();
        b.feed_item("news", "urn:a", None);
        store.apply(&mut b).unwrap();
        assert_eq!(store.feed_item("news", "urn:a").unwrap(), None);
    }

    #[test]
    fn a_nul_in_an_id_is_refused_and_nothing_commits() {
        let (_dir, store) = temp_store();
        let mut b = Batch::new();
        b.feed_item("news", "urn:ok", Some(vec![1]));
        b.feed_item("news", "bad\0id", Some(vec![2]));
        assert!(store.apply(&mut b).is_err());
        assert_eq!(store.feed_item("news", "urn:ok").unwrap(), None);
    }
}
