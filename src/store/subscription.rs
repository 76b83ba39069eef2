//! The WebSub subscriptions Tributary holds at upstream hubs (table `subscriptions`): for each, where it
//! was made (hub, topic, callback), the secret deliveries are signed with, the lease the hub
//! granted, and the request still waiting for the hub's verification.
//!
//! The harvester's push subscriber owns these rows; the store keeps them so a subscription
//! survives a restart or a kill -9 (every save is durable before the hub is told anything, so a
//! hub never verifies a request, or signs with a secret, that the store has lost). A plain
//! serde struct stored as JSON, like the source state, so fields can be added without a store
//! format change. The key is the subscription's callback id, the random last segment of its
//! callback URL.

use serde::{Deserialize, Serialize};

use super::Store;
use super::codec::check_key;
use super::error::StoreError;

/// One subscription at a hub.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Subscription {
    /// The callback id: the last segment of `callback`, and the row's key.
    pub id: String,
    /// The source it is for.
    pub source: String,
    /// The hub it was made at (after any 307/308 redirect).
    pub hub: String,
    /// The hub the Source advertised (or `push_hub` named), before any redirect: a Source that
    /// advertises another hub gets a new subscription.
    pub advertised_hub: String,
    /// The topic (the Source's change-notification channel).
    pub topic: String,
    /// The callback URL given to the hub.
    pub callback: String,
    /// The verified subscription, while there is one.
    pub active: Option<Lease>,
    /// A request sent to the hub and not yet verified: a first subscription, a renewal (which
    /// replaces `active` only once verified) or an unsubscription.
    pub pending: Option<PendingRequest>,
    /// Why the hub last refused (`hub.mode=denied`, its `hub.reason`), or why it could not be
    /// reached; cleared by a verification.
    pub last_error: Option<String>,
    /// After a failure, no new request before this (Unix seconds).
    pub retry_at: Option<i64>,
}

/// A verified subscription.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Lease {
    /// The `hub.secret` deliveries are signed with.
    pub secret: String,
    /// The secret of the lease this one renewed: a delivery the hub signed just before it
    /// verified the renewal still checks.
    pub previous_secret: Option<String>,
    /// When it was verified (Unix seconds).
    pub verified: i64,
    /// When the hub's lease ends (Unix seconds).
    pub expires: i64,
}

/// A request awaiting the hub's verification.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PendingRequest {
    /// `subscribe` or `unsubscribe`.
    pub mode: String,
    /// The `hub.secret` sent with a subscribe request.
    pub secret: String,
    /// The `hub.lease_seconds` asked for.
    pub lease_seconds: u64,
    /// When it was sent (Unix seconds).
    pub sent: i64,
}

pub(super) fn decode(bytes: &[u8]) -> Result<Subscription, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::corrupt("subscription", e))
}

impl Store {
    /// The subscription with callback id `id`.
    ///
    /// # Errors
    /// [`StoreError::Database`] / [`StoreError::Corrupt`].
    pub fn subscription(&self, id: &str) -> Result<Option<Subscription>, StoreError> {
        self.inner.trees.subscriptions.get(id.as_bytes())?.map(|v| decode(&v)).transpose()
    }

    /// Every subscription, by callback id.
    ///
    /// # Errors
    /// As [`Store::subscription`].
    pub fn subscriptions(&self) -> Result<Vec<Subscription>, StoreError> {
        let mut out = Vec::new();
        for kv in self.inner.trees.subscriptions.iter() {
            out.push(decode(&kv?.1)?);
        }
        Ok(out)
    }

    /// Saves a subscription, durably: the hub is told nothing the store could lose.
    ///
    /// # Errors
    /// [`StoreError::InvalidKey`] for an empty id; [`StoreError::Database`].
    pub fn save_subscription(&self, sub: &Subscription) -> Result<(), StoreError> {
        check_key("subscription id", &sub.id)?;
        let bytes = serde_json::to_vec(sub).map_err(|e| StoreError::corrupt("subscription (encoding)", e))?;
        self.inner.trees.subscriptions.insert(sub.id.as_bytes(), bytes)
    }

    /// Removes a subscription (ended at the hub, or given up), durably.
    ///
    /// # Errors
    /// [`StoreError::Database`].
    pub fn remove_subscription(&self, id: &str) -> Result<(), StoreError> {
        self.inner.trees.subscriptions.remove(id.as_bytes()).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subscription_survives_reopening_and_removal_is_durable() {
        let dir = tempfile::tempdir().unwrap();
        let sub = Subscription {
            id: "abc".into(),
            source: "s".into(),
            hub: "http://127.0.0.1:1/hub".into(),
            active: Some(Lease { secret: "k".into(), expires: 10, ..Lease::default() }),
            ..Subscription::default()
        };
        {
            let store = Store::open(dir.path()).unwrap();
            store.save_subscription(&sub).unwrap();
            assert!(store.save_subscription(&Subscription::default()).is_err(), "an empty id is refused");
        }
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.subscription("abc").unwrap(), Some(sub.clone()));
        assert_eq!(store.subscriptions().unwrap(), vec![sub]);
        store.remove_subscription("abc").unwrap();
        assert!(store.subscriptions().unwrap().is_empty());
    }
}
