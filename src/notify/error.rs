//! Why notifying failed: the store, building a payload, or sending it.

use crate::fetch::FetchError;
use crate::publish::PublishError;
use crate::store::StoreError;

/// A failure of the notifier, the hub or a publication to an external hub.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NotifyError {
    /// Reading or writing the store failed.
    #[error("notifications: the store")]
    Store(#[from] StoreError),
    /// A payload could not be built.
    #[error("notifications: building a payload")]
    Publish(#[from] PublishError),
    /// The HTTP client could not be set up, or a request failed.
    #[error("notifications: a request")]
    Fetch(#[from] FetchError),
    /// An external hub refused a notification.
    #[error("hub {hub} answered HTTP {status}")]
    Refused {
        /// The hub.
        hub: String,
        /// Its answer.
        status: u16,
    },
    /// A background task panicked or was cancelled.
    #[error("notifications: a task ended abnormally")]
    Task(#[from] tokio::task::JoinError),
}
