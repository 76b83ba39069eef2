//! The built-in WebSub hub's subscriptions: who asked to be told about which of Tributary's
//! topics, until when, and with which secret. Kept in the store (table `hub_subscribers`) so a restart keeps
//! every verified subscription and its lease; the hub alone interprets them.
//!
//! Rows are JSON, like the source state, so fields can be added without a format change. The
//! secret is stored as given: the hub needs it to sign every delivery (an HMAC key cannot be
//! kept hashed), so the store directory must stay as private as the operator's own data.

use serde::{Deserialize, Serialize};

use super::Store;
use super::codec::{check_key, pair_key, pair_prefix};
use super::error::StoreError;

/// One verified subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HubSubscriber {
    /// The topic (one of Tributary's notification channels).
    pub topic: String,
    /// Where deliveries are POSTed.
    pub callback: String,
    /// The `hub.secret` deliveries are signed with, if any.
    #[serde(default)]
    pub secret: Option<String>,
    /// The lease granted, in seconds.
    pub lease_seconds: u64,
    /// When the lease ends (Unix seconds).
    pub expires: i64,
}

pub(super) fn key(topic: &str, callback: &str) -> Result<Vec<u8>, StoreError> {
    check_key("topic", topic)?;
    check_key("callback", callback)?;
    Ok(pair_key(topic.as_bytes(), callback.as_bytes()))
}

pub(super) fn decode(bytes: &[u8]) -> Result<HubSubscriber, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::corrupt("subscription", e))
}

impl Store {
    /// Saves (or replaces) the subscription of its callback to its topic, durably.
    ///
    /// # Errors
    /// [`StoreError::InvalidKey`] for an empty topic or callback or one holding NUL;
    /// [`StoreError::Database`].
    pub fn save_hub_subscriber(&self, sub: &HubSubscriber) -> Result<(), StoreError> {
        let value = serde_json::to_vec(sub).map_err(|e| StoreError::corrupt("subscription", e))?;
        self.inner.trees.hub_subscribers.insert(key(&sub.topic, &sub.callback)?, value)
    }

    /// Removes the subscription of `callback` to `topic`, durably; true when there was one.
    ///
    /// # Errors
    /// As [`Store::save_hub_subscriber`].
    pub fn remove_hub_subscriber(&self, topic: &str, callback: &str) -> Result<bool, StoreError> {
        self.inner.trees.hub_subscribers.remove(key(topic, callback)?)
    }

    /// Every subscription of `topic` (every topic when `None`), by topic then callback.
    ///
    /// # Errors
    /// [`StoreError::Database`]; [`StoreError::Corrupt`] for a row that does not decode.
    pub fn hub_subscribers(&self, topic: Option<&str>) -> Result<Vec<HubSubscriber>, StoreError> {
        let rows = match topic {
            Some(t) => self.inner.trees.hub_subscribers.scan_prefix(pair_prefix(t.as_bytes())),
            None => self.inner.trees.hub_subscribers.iter(),
        };
        rows.map(|kv| decode(&kv?.1)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreOptions;

    fn sub(topic: &str, callback: &str) -> HubSubscriber {
        HubSubscriber {
            topic: topic.into(),
            callback: callback.into(),
            secret: Some("s".into()),
            lease_seconds: 300,
            expires: 1,
        }
    }

    #[test]
    fn subscriptions_are_kept_per_topic_and_callback_across_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        {
            let store = Store::open_with(&path, &StoreOptions::small()).unwrap();
            store.save_hub_subscriber(&sub("http://t/a", "http://cb/1")).unwrap();
            store.save_hub_subscriber(&sub("http://t/a", "http://cb/2")).unwrap();
            store.save_hub_subscriber(&sub("http://t/ab", "http://cb/1")).unwrap();
            let mut renewed = sub("http://t/a", "http://cb/1");
            renewed.expires = 99;
            store.save_hub_subscriber(&renewed).unwrap();
        }
        let store = Store::open_with(&path, &StoreOptions::small()).unwrap();
        let a = store.hub_subscribers(Some("http://t/a")).unwrap();
        assert_eq!(
            a.iter().map(|s| (s.callback.as_str(), s.expires)).collect::<Vec<_>>(),
            [("http://cb/1", 99), ("http://cb/2", 1)]
        );
        assert_eq!(store.hub_subscribers(None).unwrap().len(), 3);
        assert!(store.remove_hub_subscriber("http://t/a", "http://cb/2").unwrap());
        assert!(!store.remove_hub_subscriber("http://t/a", "http://cb/2").unwrap());
        assert_eq!(store.hub_subscribers(Some("http://t/a")).unwrap().len(), 1);
        assert!(matches!(store.save_hub_subscriber(&sub("", "x")), Err(StoreError::InvalidKey { .. })));
        assert!(store.verify().unwrap().is_clean(), "the hub's rows are not mistaken for anything else");
    }
}
