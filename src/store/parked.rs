//! Parked origins, kept across restarts: an origin that answered `Retry-After` is not
//! contacted again before that time by any later process either (`run`, `harvest`, a restart).
//! One row per origin in the `meta` table, under its own key prefix: the key is the origin
//! (`scheme://host[:port]`), the value the time as a W3C datetime. The harvester owns what
//! the rows mean; the store only keeps them. Not exported: a park lasts days at most.

use super::Store;
use super::error::StoreError;
use super::table::Overlay;
use crate::model::W3cDateTime;

/// Key prefix inside the `meta` table, apart from the store's own keys and the publisher's.
pub(super) const PREFIX: &str = "park/";

impl Store {
    /// Every origin saved as parked, by origin (ended parks included until the next save).
    ///
    /// # Errors
    /// [`StoreError::Database`]; [`StoreError::Corrupt`] for a row that is not a datetime.
    pub fn parked_origins(&self) -> Result<Vec<(String, W3cDateTime)>, StoreError> {
        let mut out = Vec::new();
        for kv in self.inner.trees.meta.scan_prefix(PREFIX) {
            let (k, v) = kv?;
            let origin = String::from_utf8_lossy(&k[PREFIX.len()..]).into_owned();
            let text = std::str::from_utf8(&v).map_err(|e| StoreError::corrupt("parked origin", e))?;
            let until = text.parse().map_err(|e| StoreError::corrupt("parked origin", e))?;
            out.push((origin, until));
        }
        Ok(out)
    }

    /// Replaces the saved parks with `parks`, in one durable batch; writes nothing when they
    /// are already saved as given.
    ///
    /// # Errors
    /// [`StoreError::Database`] / [`StoreError::Io`]; [`StoreError::ReadOnly`].
    pub fn save_parked_origins(&self, parks: &[(String, W3cDateTime)]) -> Result<(), StoreError> {
        let saved = self.parked_origins()?;
        let mut w = Overlay::default();
        for (origin, _) in saved.iter().filter(|(o, _)| !parks.iter().any(|(p, _)| p == o)) {
            w.remove(&self.inner.trees.meta, format!("{PREFIX}{origin}").as_bytes());
        }
        for (origin, until) in parks.iter().filter(|p| !saved.contains(p)) {
            w.insert(&self.inner.trees.meta, format!("{PREFIX}{origin}").as_bytes(), until.to_string().into_bytes());
        }
        self.inner.db.commit(w)
    }
}

#[cfg(test)]
mod tests {
    use crate::store::Store;

    #[test]
    fn parks_are_replaced_as_a_whole() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s")).unwrap();
        let t = |s: &str| s.parse().unwrap();
        let a = ("http://a.example".to_owned(), t("2030-01-01T00:00:00Z"));
        let b = ("https://b.example:8443".to_owned(), t("2030-01-02T00:00:00Z"));
        store.save_parked_origins(&[a.clone(), b.clone()]).unwrap();
        assert_eq!(store.parked_origins().unwrap(), vec![a.clone(), b.clone()]);
        store.save_parked_origins(std::slice::from_ref(&b)).unwrap();
        assert_eq!(store.parked_origins().unwrap(), vec![b]);
        // The publisher's rows, in the same table, are not parks.
        store.save_publisher_state("x", b"y").unwrap();
        store.save_parked_origins(&[]).unwrap();
        assert!(store.parked_origins().unwrap().is_empty());
        assert_eq!(store.publisher_state("x").unwrap().as_deref(), Some(&b"y"[..]));
    }
}
