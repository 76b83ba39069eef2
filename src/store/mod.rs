//! The store: harvested bitstreams by sha-256, resource records, their provenance indexes, the
//! per-set change log and the per-source harvest state (see `docs/STORE.md`).
//!
//! # Architecture
//! The harvester is the only writer and the publisher the reader; both go through [`Store`],
//! and fjall types never leave this module. Small bitstreams (≤ [`INLINE_MAX`]) are appended
//! to pack files (see [`pack`]); larger ones are files under `blobs/`, named by their sha-256,
//! or objects in a bucket ([`remote`]). Everything else (records, indexes, change log,
//! counters, source state) is one fjall database of tables ([`table`]), and every
//! [`Batch`] is one fjall write batch, durable before anyone can read it, so a crash never
//! separates a record from its change events and nothing shown can be lost. This module must
//! not depend on the harvester, the publisher or tokio.
//!
//! # Layout of a store directory
//! ```text
//! FORMAT    "tributary-store <version>", checked before anything is opened
//! LOCK      held (flock) while a process has the store open
//! meta/     the fjall database
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
mod filter;
mod guard;
mod history;
mod hub_subscribers;
mod import;
mod log;
mod maint;
mod open;
mod pack;
mod parked;
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

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

pub use batch::{Applied, Batch, OpResult, Outcome};
pub use blob::{BlobId, BlobInfo, BlobReader, Expected, ResponseHeaders};
pub use error::StoreError;
pub use export::{Counts as ExportCounts, EXPORT_VERSION};
pub use failure::{Failure, FailureIter, NewFailure};
pub use feeds::FeedItemIter;
pub use guard::{DeletionLimit, HeldDeletion, Settle, Settled, Stage, Takedown, record_keys, sha_key, uri_key};
pub use hub_subscribers::HubSubscriber;
pub use import::{ImportReport, import};
pub use log::{Event, EventIter, EventView, SetInfo, ViaRef};
pub use open::StoreOptions;
pub use record::{Listing, NewRecord, Record, RecordIter, Via};
pub use remote::{DEFAULT_GC_GRACE, PRESIGN_FOR, RemoteBlobs};
pub use report::{EngineStats, FailureReport, FailureRow, GcReport, Problem, SetStats, Stats, VerifyReport};
pub use state::{
    DocumentValidators, HarvestState, KnownCapabilities, NotificationChannel, OaiState, PASS_HISTORY, ParkedOrigin,
    PassCounts, PassRecord, SourceState, SourceStatus,
};
pub use subscription::{Lease, PendingRequest, Subscription};
pub use view::{AttrView, LinkView, RawRecord, RawRecordIter, RecordHead, RecordView, ViaView};
pub use watch::Listener;
pub use writer::BlobWriter;

/// Bitstreams up to this many bytes are appended to a pack rather than stored as files of
/// their own: a file costs an inode, a rename and two fsyncs, which would dominate small
/// metadata records. Kept small because such content is held in memory until verified (a
/// pack only ever receives verified content).
pub const INLINE_MAX: usize = 8 * 1024;

/// The store format this build reads and writes (the `FORMAT` file and the `meta` table's
/// `format_version`). Format 9 moved every table into fjall; format 10 put the nine small
/// tables into one shared keyspace. Stores of older formats are carried over by `tributary store
/// export` with the release that wrote them and `tributary store import` with this one.
pub const FORMAT_VERSION: u32 = 10;

/// An open store. Cheap to clone; all clones share one database. `Send + Sync`: the harvester
/// may write from several threads, the publisher read from others.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

/// The kinds of row, each a [`table::Table`] of the one database.
struct Trees {
    meta: table::Table,
    blobs: table::Table,
    records: table::Table,
    by_origin: table::Table,
    by_sha: table::Table,
    /// The change log; a resource's history is chained through it (see [`history`]).
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
    /// Deletions staged by a pass, or held over its threshold (see [`guard`]).
    held: table::Table,
    /// Takedowns by the operator (see [`guard`]).
    takedowns: table::Table,
}

impl Trees {
    /// Every table, in the order of their ids.
    fn all(&self) -> [&table::Table; 14] {
        [
            &self.meta,
            &self.blobs,
            &self.records,
            &self.by_origin,
            &self.by_sha,
            &self.log,
            &self.sets,
            &self.sources,
            &self.failures,
            &self.feed_items,
            &self.hub_subscribers,
            &self.subscriptions,
            &self.held,
            &self.takedowns,
        ]
    }

    /// Every keyspace once: the tables' own, and the shared one (`meta`'s).
    fn keyspaces(&self) -> impl Iterator<Item = &fjall::Keyspace> {
        let shared = std::iter::once(self.meta.keyspace());
        self.all().into_iter().filter(|t| !t.is_shared()).map(table::Table::keyspace).chain(shared)
    }
}

/// Shared state behind every [`Store`] clone and [`BlobWriter`].
struct Inner {
    root: PathBuf,
    db: table::Db,
    trees: Trees,
    /// Held for the store's lifetime; dropping it releases the `LOCK` flock.
    _lock: std::fs::File,
    /// Blobs put by this process recently: gc leaves them alone even while no record refers to
    /// them yet, so a put followed by an apply never races a concurrent gc.
    fresh: Mutex<table::FastMap<BlobId, Instant>>,
    /// Readers: puts and applies. Writer: gc, for the moment it decides a blob is unreferenced
    /// and removes it.
    gc_lock: RwLock<()>,
    /// The write lock: a batch holds it from its first read to its commit, which makes batches
    /// serialisable without a transaction, and so does every other read-modify-write of a row
    /// a batch may write (a blob row's digests).
    writer: Mutex<()>,
    /// The last [`Inner::stamp`] handed out, in milliseconds since the epoch.
    last_stamp_ms: std::sync::atomic::AtomicI64,
    /// Names temporary files uniquely within this process.
    tmp_counter: AtomicU64,
    /// The pack files holding small bitstreams, and the rows not yet committed.
    packs: pack::Packs,
    /// Called whenever readers may see new change events (see [`watch`]).
    listeners: watch::Listeners,
    /// The bucket holding bitstreams larger than `INLINE_MAX`, when the store is configured
    /// with one (`[aggregator] blobs = "s3://…"`); `None`: local files under `blobs/`.
    remote: Option<Arc<remote::Remote>>,
    /// The takedowns' match keys, which every upsert is checked against (see [`guard`]).
    takedowns: RwLock<guard::TakedownIndex>,
    /// Whether any held or staged deletion exists: only then does an upsert look for one to
    /// cancel (a harvest's upserts read nothing more while none is held). Set when one is
    /// written; cleared at open when the table is empty.
    held_any: std::sync::atomic::AtomicBool,
    /// Which blob ids the store certainly does not hold (see [`filter`]).
    filter: Arc<filter::BlobFilter>,
}

impl Inner {
    /// The write lock (see [`Inner::writer`]).
    fn write_lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The time of a batch or a snapshot: the clock to the millisecond, but strictly later
    /// than every stamp handed out before. Taken under the write lock, so a snapshot's `at` is
    /// later than every event in it and no later than any event after it, exactly: a
    /// Destination may resume "from" a datetime Tributary wrote without a change counted twice
    /// or missed, even with clients (the Python reference one) that replay changes *at* it.
    fn stamp(&self) -> crate::model::W3cDateTime {
        use std::sync::atomic::Ordering::Relaxed;
        let now = crate::model::W3cDateTime::now_precise().unix_millis();
        let last = self.last_stamp_ms.load(Relaxed);
        let ms = now.max(last.saturating_add(1));
        self.last_stamp_ms.store(ms, Relaxed);
        crate::model::W3cDateTime::from_unix_millis(ms).unwrap_or_else(|_| crate::model::W3cDateTime::now())
    }
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
    /// [`StoreError::OldFormat`] / [`StoreError::IncompatibleFormat`] for another format
    /// version, [`StoreError::MetadataMissing`] for bitstreams without their metadata (nothing
    /// is modified; see `docs/STORE.md`, "Recovery and verification"),
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

    /// A consistent read of the whole store as it is now, and the instant it is complete as
    /// of, for a document's `at`: taken under the write lock (batches stamp their events and
    /// commit under it), so every batch stamped before [`Snapshot::at`] is in the view and
    /// every later one is stamped at or after it. A walk through it holds no lock and sees no
    /// batch committed after it began.
    pub fn snapshot(&self) -> Snapshot {
        let _writes = self.inner.write_lock();
        Snapshot { store: self.clone(), view: self.inner.db.view(), at: self.inner.stamp() }
    }

    /// Commits the rows of blobs put into the active pack since the last batch (their bytes
    /// synced first). Batches and file blobs are durable when their call returns; this is for
    /// a writer that put blobs and ends without a batch.
    ///
    /// # Errors
    /// [`StoreError::Io`] / [`StoreError::Database`] when a sync or the commit fails (the store
    /// is read-only from then on); [`StoreError::ReadOnly`] once it is.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.inner.db.check_writable()?;
        self.inner.commit_pending()
    }

    /// Why the store refuses writes, if it does: a write or sync failed (a full disk, a failing
    /// device), and it serves what it holds until it is restarted.
    pub fn read_only(&self) -> Option<String> {
        self.inner.db.broken()
    }

    /// Registers `listener`, called once if the store turns read-only, with the reason.
    pub fn on_read_only(&self, listener: Box<dyn Fn(&str) + Send + Sync>) {
        self.inner.db.on_broken(listener);
    }
}

/// A consistent read of the store at one moment (see [`Store::snapshot`]). Cheap to clone.
/// Holding it keeps fjall from dropping the row versions it reads: hold it for a walk, not for
/// the life of a process.
#[derive(Clone)]
pub struct Snapshot {
    store: Store,
    view: table::View,
    at: crate::model::W3cDateTime,
}

impl Snapshot {
    /// When the snapshot was taken: every change event stamped before it is in it.
    pub fn at(&self) -> crate::model::W3cDateTime {
        self.at
    }
}

impl Drop for Inner {
    /// A store closed cleanly keeps the blobs put since the last batch.
    fn drop(&mut self) {
        self.filter.stop();
        if self.db.broken().is_none()
            && let Err(e) = self.commit_pending()
        {
            tracing::warn!(error = %crate::error::chain(&e), "could not commit the last small blobs while closing the store");
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.inner.root).finish_non_exhaustive()
    }
}
