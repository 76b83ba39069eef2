//! The store: harvested bitstreams by sha-256, resource records, their provenance indexes, the
//! per-set change log and the per-source harvest state (see `docs/STORE.md`).
//!
//! # Architecture
//! The harvester is the only writer and the publisher the reader; both go through [`Store`],
//! and sled types never leave this module. Small bitstreams (≤ [`INLINE_MAX`]) are appended
//! to pack files (see [`pack`]); larger ones are files under `blobs/`, named by their sha-256,
//! because sled 0.34 keeps large values resident in memory (measured: a 256 MiB blob in 1 MiB
//! sled values costs ~270 MiB of RSS and runs at ~90–230 MB/s) — files stream at disk speed
//! with constant memory. Everything else (records, indexes, change log, counters, source
//! state) is sled, written in one atomic sled batch per [`Batch`] so a crash never separates a
//! record from its change events. This module must not depend on the harvester, the publisher or tokio.
//!
//! # Layout of a store directory
//! ```text
//! FORMAT    "tributary-store <version>", checked before anything is opened
//! LOCK      held (flock) while a process has the store open
//! db/       the sled database
//! blobs/ab/ab12…(64 hex)   bitstreams larger than INLINE_MAX (unless in a bucket: see [`remote`])
//! packs/00000001.pack      bitstreams up to INLINE_MAX, appended
//! tmp/      bitstreams being written; emptied on open
//! ```

mod batch;
mod blob;
mod codec;
mod error;
mod export;
mod failure;
mod feeds;
mod history;
mod hub_subscribers;
mod known;
mod log;
mod lsm;
mod maint;
mod open;
mod pack;
mod published;
mod record;
mod remote;
mod report;
mod row;
mod state;
mod subscription;
mod table;
#[cfg(test)]
mod test_util;
mod verify;
mod view;
mod watch;
mod writer;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

pub use batch::{Applied, Batch, OpResult, Outcome};
pub use blob::{BlobId, BlobInfo, BlobReader, Expected};
pub use error::StoreError;
pub use export::{Counts as ExportCounts, EXPORT_VERSION};
pub use failure::{Failure, FailureIter, NewFailure};
pub use feeds::FeedItemIter;
pub use hub_subscribers::HubSubscriber;
pub use log::{Event, EventIter, SetInfo};
pub use open::StoreOptions;
pub use record::{Listing, NewRecord, Record, RecordIter, Via};
pub use remote::{DEFAULT_GC_GRACE, PRESIGN_FOR, RemoteBlobs};
pub use report::{EngineStats, FailureReport, FailureRow, GcReport, Problem, SetStats, Stats, VerifyReport};
pub use state::{
    DocumentValidators, HarvestState, KnownCapabilities, NotificationChannel, PassCounts, SourceState, SourceStatus,
};
pub use subscription::{Lease, PendingRequest, Subscription};
pub use view::{AttrView, LinkView, RawRecord, RawRecordIter, RecordView, ViaView};
pub use watch::Listener;
pub use writer::BlobWriter;

/// Bitstreams up to this many bytes are appended to a pack rather than stored as files of
/// their own: a file costs an inode, a rename and two fsyncs, which would dominate small
/// metadata records. Kept small because such content is held in memory until verified (a
/// pack only ever receives verified content).
pub const INLINE_MAX: usize = 8 * 1024;

/// The store format this build reads and writes (the `FORMAT` file and `meta/format_version`).
pub const FORMAT_VERSION: u32 = 8;

/// An open store. Cheap to clone; all clones share one database. `Send + Sync`: the harvester
/// may write from several threads, the publisher read from others.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

/// The kinds of row, each a [`table::Table`] (a key prefix) in sled's tree or in the engine.
struct Trees {
    /// The one sled tree the small tables live in; batches are applied to it atomically.
    main: sled::Tree,
    /// The engine holding the tables with a row or more per resource (store format 8).
    lsm: Arc<lsm::Lsm>,
    meta: table::Table,
    blobs: table::Table,
    records: table::Table,
    by_origin: table::Table,
    by_sha: table::Table,
    /// The change log; a resource's history is chained through it (see [`history`]). Prefix
    /// `e`, the history index up to format 3, is not reused.
    log: table::Table,
    sets: table::Table,
    sources: table::Table,
    /// Resources the harvester could not store, until they are stored or gone (see [`failure`]).
    failures: table::Table,
    /// The FeedSync state of feed sources' items (see [`feeds`]).
    feed_items: table::Table,
    /// The built-in WebSub hub's subscriptions to Tributary's own topics (see [`hub_subscribers`]).
    hub_subscribers: table::Table,
    /// WebSub subscriptions at upstream hubs (see [`subscription`]).
    subscriptions: table::Table,
}

/// Shared state behind every [`Store`] clone and [`BlobWriter`].
struct Inner {
    root: PathBuf,
    db: sled::Db,
    trees: Trees,
    /// Held for the store's lifetime; dropping it releases the `LOCK` flock.
    _lock: std::fs::File,
    /// Blobs put by this process recently: gc leaves them alone even while no record refers to
    /// them yet, so a put followed by an apply never races a concurrent gc.
    fresh: Mutex<HashMap<BlobId, Instant>>,
    /// Readers: puts and applies. Writer: gc, for the moment it decides a blob is unreferenced
    /// and removes it.
    gc_lock: RwLock<()>,
    /// Change-log entries written but not yet flushed, hidden from readers. Also the apply
    /// lock: a batch holds it from its first read to its commit, which makes batches
    /// serialisable without a sled transaction.
    unflushed: Mutex<log::Unflushed>,
    /// Names temporary files uniquely within this process.
    tmp_counter: AtomicU64,
    /// The pack files holding small bitstreams, and the rows not yet committed to sled.
    packs: pack::Packs,
    /// Which blobs might be stored, so a put of new content need not read sled.
    known: known::Known,
    /// Called whenever readers may see new change events (see [`watch`]).
    listeners: watch::Listeners,
    /// The bucket holding bitstreams larger than `INLINE_MAX`, when the store is configured
    /// with one (`[aggregator] blobs = "s3://…"`); `None`: local files under `blobs/`.
    remote: Option<Arc<remote::Remote>>,
}

impl Store {
    /// Opens the store at `path`, creating it if `path` does not exist but its parent does.
    ///
    /// Leftovers of interrupted writes (`tmp/`) are removed.
    ///
    /// # Errors
    /// [`StoreError::Missing`] when neither `path` nor its parent exists,
    /// [`StoreError::NotAStore`] for a non-empty directory that is not a store,
    /// [`StoreError::Locked`] when another process has it open,
    /// [`StoreError::IncompatibleFormat`] for another format version (nothing is modified;
    /// format 5, the one before, is upgraded in place: see `docs/STORE.md`),
    /// [`StoreError::Io`] / [`StoreError::Database`] otherwise.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Self::open_with(path, &StoreOptions::default())
    }

    /// Opens an existing store; for commands that should not create one (`stats`, `verify`).
    ///
    /// # Errors
    /// As [`Store::open`], and [`StoreError::Missing`] when `path` does not exist.
    pub fn open_existing(path: &Path) -> Result<Store, StoreError> {
        Self::open_with(path, &StoreOptions { create: false, ..StoreOptions::default() })
    }

    /// Opens with explicit tuning; see [`StoreOptions`].
    ///
    /// # Errors
    /// As [`Store::open`].
    pub fn open_with(path: &Path, options: &StoreOptions) -> Result<Store, StoreError> {
        open::open(path, options).map(|inner| Store { inner: Arc::new(inner) })
    }

    /// The store directory.
    pub fn path(&self) -> &Path {
        &self.inner.root
    }

    /// Where bitstreams larger than [`INLINE_MAX`] are stored: `None` for local files, else
    /// the bucket and prefix.
    pub fn remote_blobs(&self) -> Option<&RemoteBlobs> {
        self.inner.remote.as_deref().map(remote::Remote::location)
    }

    /// The instant a read of records starting now is complete as of, for a document's `at`:
    /// it waits for an apply in progress (applies stamp their events and commit under the same
    /// lock), so every batch stamped before the returned time is already readable, and every
    /// later batch is stamped at or after it. A plain clock read could fall inside an apply:
    /// its records then missed the document while its events, stamped earlier, fell before
    /// the `at` a Destination follows the Change Lists from, and were never applied there.
    pub fn read_point(&self) -> crate::model::W3cDateTime {
        let _applies = self.inner.unflushed.lock().unwrap_or_else(|p| p.into_inner());
        crate::model::W3cDateTime::now()
    }

    /// Makes everything written so far durable: blob files are already synced when their put
    /// returns; this syncs the active pack and commits the rows of blobs put into it, flushes
    /// the database, and then lets readers see the change events written by
    /// [`Store::apply_unflushed`].
    ///
    /// # Errors
    /// [`StoreError::Io`] / [`StoreError::Database`] when a sync fails; the events stay hidden.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.inner.commit_pending()?;
        let snapshot = log::snapshot(&self.inner);
        self.inner.db.flush()?;
        let revealed = !snapshot.is_empty();
        log::published(&self.inner, snapshot);
        if revealed {
            self.inner.listeners.call();
        }
        Ok(())
    }
}

impl Drop for Inner {
    /// A store closed cleanly keeps the blobs put since the last flush, as sled keeps its rows.
    /// sled flushes when its last handle drops, but the blob filter's scan (see [`known`]) may
    /// hold one a moment longer, past the end of the process: so flush here.
    fn drop(&mut self) {
        if let Err(e) = self.commit_pending() {
            tracing::warn!(error = %crate::error::chain(&e), "could not commit the last small blobs while closing the store");
        }
        if let Err(e) = self.db.flush() {
            tracing::warn!(error = %crate::error::chain(&e), "could not flush the database while closing the store");
        }
        self.trees.lsm.shutdown();
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.inner.root).finish_non_exhaustive()
    }
}

/// Lowers the calling thread's scheduling priority as far as it goes (nice 19 on Linux): for
/// the store's background work that can wait — merging runs, rebuilding the blob filter —
/// so that it runs on what the harvester's commits leave of the machine. Failing to lower it
/// changes nothing else.
fn lowest_priority() {
    if let Err(e) = thread_priority::set_current_thread_priority(thread_priority::ThreadPriority::Min) {
        tracing::debug!(error = ?e, "could not lower a store background thread's priority");
    }
}
