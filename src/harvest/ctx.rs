//! What every part of a pass shares: the context ([`Ctx`]: store, fetcher, naming, the
//! shutdown flag, progress), the error that ends a source's pass ([`HarvestError`]), and the
//! source state's load and save on the blocking pool. Its own file so the sync strategies
//! depend on it rather than on the daemon that runs them.

use std::sync::Arc;

use tokio::sync::watch;

use super::document::DiscoverError;
use super::dump::DumpError;
use super::report::Progress;
use crate::config::ConfigError;
use crate::fetch::Fetcher;
use crate::naming::Naming;
use crate::store::{SourceState, Store, StoreError};

/// Why a source's pass failed before its resources could be dealt with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarvestError {
    /// Discovery found no Capability List or list.
    #[error(transparent)]
    Discover(#[from] DiscoverError),
    /// The Capability List offers no Resource List.
    #[error("source {source_id}: the Capability List offers no Resource List")]
    NoResourceList {
        /// The source id.
        source_id: String,
    },
    /// A Resource List or Change List could not be read at all.
    #[error("source {source_id}: the {document} could not be read")]
    List {
        /// The source id.
        source_id: String,
        /// Which list: `Resource List` or `Change List`.
        document: &'static str,
        /// Why (boxed: a pass's error travels through every return of it).
        #[source]
        source: Box<DiscoverError>,
    },
    /// A Resource Dump could not be read in full.
    #[error("source {source_id}: the Resource Dump could not be read")]
    Dump {
        /// The source id.
        source_id: String,
        /// Why.
        #[source]
        source: Box<DumpError>,
    },
    /// A feed source's feed could not be fetched or read; nothing of it was applied.
    #[error("source {source_id}: feed {url}: {detail}")]
    Feed {
        /// The source id.
        source_id: String,
        /// The feed's URL.
        url: String,
        /// What went wrong (the fetch error's chain, or the reader's message).
        detail: String,
    },
    /// An OAI-PMH repository could not be harvested at all (Identify, the format check).
    #[error("source {source_id}: OAI-PMH {url}")]
    Oai {
        /// The source id.
        source_id: String,
        /// The base URL.
        url: String,
        /// Why.
        #[source]
        source: Box<super::oai_error::OaiHarvestError>,
    },
    /// `--source` named a source that is not configured.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What every pass shares.
pub(crate) struct Ctx {
    pub(crate) store: Store,
    pub(crate) fetcher: Fetcher,
    pub(crate) naming: Naming,
    pub(crate) shutdown: watch::Receiver<bool>,
    pub(crate) progress: Arc<dyn Progress>,
    /// What polling and push share per source (empty outside `run`).
    pub(crate) turns: Turns,
}

/// Per source, what its poll loop and its push subscriber share: the lock that keeps a poll
/// and the application of a notification from interleaving (both load the source's state,
/// change it and save it whole), the bell that asks for a poll now (a gap in the
/// notifications, a subscription that failed), and whether a verified subscription stands
/// (the poll loop then polls at the slow safety interval).
#[derive(Default, Clone)]
pub(crate) struct Turns {
    per_source: Arc<std::collections::HashMap<String, Arc<Turn>>>,
}

/// One source's share of [`Turns`].
#[derive(Default)]
pub(crate) struct Turn {
    pub(crate) lock: tokio::sync::Mutex<()>,
    /// Rung to poll now.
    pub(crate) poll_now: tokio::sync::Notify,
    /// Rung after each poll (discovery may have found a channel).
    pub(crate) polled: tokio::sync::Notify,
    /// Rung when the subscription's state changed (a verification arrived).
    pub(crate) changed: tokio::sync::Notify,
    /// Rung when a verified lease begins: the poll loop moves its next poll out to `push_poll`.
    pub(crate) verified: tokio::sync::Notify,
    pub(crate) subscribed: std::sync::atomic::AtomicBool,
}

impl Turns {
    pub(crate) fn new<'a>(sources: impl IntoIterator<Item = &'a str>) -> Turns {
        let per_source = sources.into_iter().map(|s| (s.to_owned(), Arc::new(Turn::default()))).collect();
        Turns { per_source: Arc::new(per_source) }
    }

    pub(crate) fn get(&self, source: &str) -> Option<&Arc<Turn>> {
        self.per_source.get(source)
    }

    /// Whether `source` has a verified subscription standing.
    pub(crate) fn subscribed(&self, source: &str) -> bool {
        self.get(source).is_some_and(|t| t.subscribed.load(std::sync::atomic::Ordering::Acquire))
    }
}

pub(crate) async fn load_state(ctx: &Ctx, id: &str) -> Result<SourceState, StoreError> {
    let (store, id) = (ctx.store.clone(), id.to_owned());
    tokio::task::spawn_blocking(move || store.source_state(&id))
        .await
        .map_err(join_error)?
        .map(Option::unwrap_or_default)
}

pub(crate) async fn save_state(ctx: &Ctx, id: &str, state: SourceState) -> Result<(), StoreError> {
    let (store, id) = (ctx.store.clone(), id.to_owned());
    tokio::task::spawn_blocking(move || store.save_source_state(&id, &state)).await.map_err(join_error)?
}

/// A blocking store task that panicked or was cancelled, as the store error it stands for.
pub(crate) fn join_error(e: tokio::task::JoinError) -> StoreError {
    StoreError::Io { path: "store".into(), source: std::io::Error::other(e) }
}

/// A fetch semaphore that closed under a waiting task: only when the runtime is going away.
pub(crate) fn closed(e: tokio::sync::AcquireError) -> HarvestError {
    HarvestError::Store(StoreError::Io { path: "harvest".into(), source: std::io::Error::other(e) })
}
