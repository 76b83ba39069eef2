//! Small rows the publisher keeps across restarts: today, each set's Resource List partition,
//! so that a part number handed to a Destination before a restart keeps naming the same range
//! of URIs after it. The store does not interpret them; the publisher owns their format.

use super::Store;
use super::error::StoreError;

/// Key prefix inside the `meta` table, apart from the store's own keys.
pub(super) const PREFIX: &str = "publish/";

impl Store {
    /// The publisher's saved row `key`, if any.
    ///
    /// # Errors
    /// [`StoreError::Database`].
    pub fn publisher_state(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.inner.trees.meta.get(format!("{PREFIX}{key}"))?.map(|v| v.to_vec()))
    }

    /// Saves the publisher's row `key`, durably.
    ///
    /// # Errors
    /// [`StoreError::Database`].
    pub fn save_publisher_state(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.inner.trees.meta.insert(format!("{PREFIX}{key}"), value)
    }
}
