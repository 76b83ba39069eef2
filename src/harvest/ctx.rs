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
use crate::model::W3cDateTime;
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
#[derive(Clone)]
pub(crate) struct Ctx {
    pub(crate) store: Store,
    pub(crate) fetcher: Fetcher,
    pub(crate) naming: Naming,
    pub(crate) shutdown: watch::Receiver<bool>,
    pub(crate) progress: Arc<dyn Progress>,
    /// What polling and push share per source (empty outside `run`).
    pub(crate) turns: Turns,
    /// The pass under way (`poll <start>`, see [`pass_name`]), which stages the deletions it
    /// finds; empty outside a pass.
    pub(crate) pass: String,
}

impl Ctx {
    /// Who stages a deletion `source`'s pass finds (see `store::guard`).
    pub(crate) fn stage(&self, source: &str) -> crate::store::Stage {
        crate::store::Stage { source: source.to_owned(), pass: self.pass.clone() }
    }
}

/// Per source, what its poll loop and its push subscriber share: the lock that keeps a poll
/// and the application of a notification from interleaving (both load the source's state,
/// change it and save it whole), the bell that asks for a poll now (a gap in the
/// notifications, a subscription that failed, the operator's `tributary poll`), whether a
/// verified subscription stands (the poll loop then polls at the slow safety interval), and
/// what the operator steers: the source's configuration (a reload replaces it) and its pause.
///
/// The map grows and shrinks with reloads; a [`Turn`] is handed out as an `Arc`, so a task
/// keeps the one it started with.
#[derive(Default, Clone)]
pub(crate) struct Turns {
    per_source: Arc<std::sync::RwLock<std::collections::HashMap<String, Arc<Turn>>>>,
}

/// One source's share of [`Turns`].
pub(crate) struct Turn {
    pub(crate) lock: Arc<tokio::sync::Mutex<()>>,
    /// Rung to poll now.
    pub(crate) poll_now: tokio::sync::Notify,
    /// Rung after each poll (discovery may have found a channel).
    pub(crate) polled: tokio::sync::Notify,
    /// Rung when the subscription's state changed (a verification arrived).
    pub(crate) changed: tokio::sync::Notify,
    /// Rung when a verified lease begins: the poll loop polls once to catch up, then every `push_poll`.
    pub(crate) verified: tokio::sync::Notify,
    pub(crate) subscribed: std::sync::atomic::AtomicBool,
    /// The source as configured now, with its sets; `None` once a reload removed it.
    config: std::sync::RwLock<Option<Arc<Configured>>>,
    /// True while the operator has the source paused: a pass in flight watches it and stops.
    pub(crate) paused: watch::Sender<bool>,
    /// Rung when the configuration or the pause changed, for the tasks to look again.
    pub(crate) steered: tokio::sync::Notify,
    /// Who waits for the source's next (or current) pass.
    pub(crate) passes: std::sync::Mutex<PassWaiters>,
}

/// A source as the harvester runs it: its configuration and the sets its changes go to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Configured {
    pub(crate) source: crate::config::Source,
    pub(crate) sets: Vec<String>,
}

/// What a reload did to a source's turn.
pub(crate) enum Reconfigured {
    /// Nothing: the same configuration.
    Same,
    /// New keys, in force from the next pass.
    Changed,
    /// Removed before and configured again while its loop was still finishing: the loop goes on.
    Restored,
    /// A new source: its loop must be started.
    Added(Arc<Turn>),
}

/// Every source of `config` with its sets.
pub(crate) fn configured(config: &crate::config::Config) -> Vec<Configured> {
    config
        .sources
        .iter()
        .map(|s| Configured {
            source: s.clone(),
            sets: config.sets_containing(&s.id).into_iter().map(str::to_owned).collect(),
        })
        .collect()
}

/// Callers of `tributary poll` waiting for a source's pass: attached to the pass in flight when
/// there is one (a source is never polled twice at once), else to the next.
#[derive(Default)]
pub(crate) struct PassWaiters {
    pub(crate) running: bool,
    pub(crate) waiting: Vec<tokio::sync::oneshot::Sender<super::report::SourceReport>>,
}

impl Turn {
    pub(crate) fn new(configured: Option<Configured>) -> Turn {
        Turn {
            lock: Arc::new(tokio::sync::Mutex::new(())),
            poll_now: tokio::sync::Notify::new(),
            polled: tokio::sync::Notify::new(),
            changed: tokio::sync::Notify::new(),
            verified: tokio::sync::Notify::new(),
            subscribed: std::sync::atomic::AtomicBool::new(false),
            config: std::sync::RwLock::new(configured.map(Arc::new)),
            paused: watch::channel(false).0,
            steered: tokio::sync::Notify::new(),
            passes: std::sync::Mutex::new(PassWaiters::default()),
        }
    }

    /// The source as configured now; `None` once removed.
    pub(crate) fn configured(&self) -> Option<Arc<Configured>> {
        self.config.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the configuration (`None`: the source was removed) and wakes the tasks.
    pub(crate) fn configure(&self, configured: Option<Configured>) {
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = configured.map(Arc::new);
        self.steered.notify_waiters();
        self.poll_now.notify_waiters();
    }

    /// Whether the operator has paused the source.
    pub(crate) fn is_paused(&self) -> bool {
        *self.paused.borrow()
    }

    /// Marks a pass as running: callers of `poll` from now on wait for it.
    pub(crate) fn pass_started(&self) {
        self.passes.lock().unwrap_or_else(|p| p.into_inner()).running = true;
    }

    /// Ends the running pass, handing its report to everyone waiting.
    pub(crate) fn pass_ended(&self, report: &super::report::SourceReport) {
        let waiting = {
            let mut w = self.passes.lock().unwrap_or_else(|p| p.into_inner());
            w.running = false;
            std::mem::take(&mut w.waiting)
        };
        for tx in waiting {
            let _ = tx.send(report.clone());
        }
    }

    /// A receiver of the report of the pass in flight, or of the next one (which it asks for).
    pub(crate) fn wait_for_pass(&self) -> tokio::sync::oneshot::Receiver<super::report::SourceReport> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let running = {
            let mut w = self.passes.lock().unwrap_or_else(|p| p.into_inner());
            w.waiting.push(tx);
            w.running
        };
        if !running {
            self.poll_now.notify_one();
        }
        rx
    }
}

impl Default for Turn {
    fn default() -> Self {
        Turn::new(None)
    }
}

impl Turns {
    /// A turn for each of `sources`, with its configuration.
    pub(crate) fn new(sources: impl IntoIterator<Item = Configured>) -> Turns {
        let per_source = sources.into_iter().map(|c| (c.source.id.clone(), Arc::new(Turn::new(Some(c))))).collect();
        Turns { per_source: Arc::new(std::sync::RwLock::new(per_source)) }
    }

    pub(crate) fn get(&self, source: &str) -> Option<Arc<Turn>> {
        self.per_source.read().unwrap_or_else(|p| p.into_inner()).get(source).cloned()
    }

    /// Takes a source's configuration from a reload, under the lock a loop's end also takes,
    /// so a source removed and added back is never left without a loop or given two.
    pub(crate) fn reconfigure(&self, configured: Configured) -> Reconfigured {
        let mut map = self.per_source.write().unwrap_or_else(|p| p.into_inner());
        let Some(turn) = map.get(&configured.source.id) else {
            let turn = Arc::new(Turn::new(Some(configured.clone())));
            map.insert(configured.source.id, turn.clone());
            return Reconfigured::Added(turn);
        };
        let old = turn.configured();
        if old.as_deref() == Some(&configured) {
            return Reconfigured::Same;
        }
        turn.configure(Some(configured));
        if old.is_some() { Reconfigured::Changed } else { Reconfigured::Restored }
    }

    /// Removes `source`'s configuration (a reload dropped it); false when it had none.
    pub(crate) fn unconfigure(&self, source: &str) -> bool {
        let map = self.per_source.read().unwrap_or_else(|p| p.into_inner());
        match map.get(source).filter(|t| t.configured().is_some()) {
            Some(turn) => {
                turn.configure(None);
                true
            }
            None => false,
        }
    }

    /// A removed source's loop asks to end: true, and the turn is forgotten, unless a reload
    /// configured it again meanwhile (the loop then goes on).
    pub(crate) fn loop_ended(&self, source: &str) -> bool {
        let mut map = self.per_source.write().unwrap_or_else(|p| p.into_inner());
        match map.get(source) {
            Some(turn) if turn.configured().is_some() => false,
            _ => {
                map.remove(source);
                true
            }
        }
    }

    /// Every source with a turn, and the turn.
    pub(crate) fn all(&self) -> Vec<(String, Arc<Turn>)> {
        let map = self.per_source.read().unwrap_or_else(|p| p.into_inner());
        map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
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

/// The name of a pass (`kind` is `poll` or `push`) starting now: its start to the clock's full
/// precision. Held deletions are judged by the pass that staged them, so a name must never
/// repeat for one source; its passes run one at a time under its turn. (At whole seconds, two
/// notifications pushed within a second shared a name, and the second released the first's
/// held deletions as if they were its own.)
pub(crate) fn pass_name(kind: &str) -> String {
    format!("{kind} {}", W3cDateTime::now_precise())
}
