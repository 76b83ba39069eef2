//! Batches: record upserts and deletions, their change events, the indexes, the per-set
//! counters and optionally the source's state, committed all-or-nothing.
//!
//! A batch's writes are collected and committed as one fjall write batch (atomic across a
//! crash, durable before it is visible; see [`super::table`]), so after a crash either all of a
//! batch is there or none of it: never a record without its events, an event without its
//! record, or a source position ahead of the records it claims. Each upsert first checks,
//! under the lock that keeps gc from removing it, that its blob is stored — a record can never
//! point at missing content. When [`Store::apply`] returns the batch is durable, and only then
//! can the publisher see its events.

use std::collections::HashMap;

use super::blob::{BlobId, BlobRow};
use super::codec::{self, check_key};
use super::error::StoreError;
use super::failure::{self, NewFailure};
use super::feeds;
use super::log::{ChunkBuf, Counters, EventRef, event_key};
use super::pack::{Take, TakenRows};
use super::record::{NewRecord, Record, keys};
use super::row;
use super::state::{self, SourceState};
use super::table::{FastMap, FastSet, Overlay};
use super::{Inner, Store, Trees};
use crate::model::{Change, W3cDateTime};

/// A set of writes to commit together. Build it, then [`Store::apply`] it.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    ops: Vec<Op>,
    /// Kept apart from `ops`: they are not records and write no change event.
    failures: Vec<FailureOp>,
    state: Option<(String, SourceState)>,
    /// Feed item states, `(source, item id, state or None to remove)`; see [`super::feeds`].
    feed_items: Vec<(String, String, Option<Vec<u8>>)>,
    /// Held-deletion and takedown rows written or removed (see [`super::guard`]).
    guard: Vec<GuardOp>,
}

#[derive(Debug, Clone)]
enum GuardOp {
    Unhold { source: String, uri: String },
    Rehold(Box<super::guard::HeldDeletion>),
    Takedown(Box<super::guard::Takedown>),
    Lift(String),
}

#[derive(Debug, Clone)]
enum FailureOp {
    Record(Box<NewFailure>),
    Clear { source: String, uri: String },
}

#[derive(Debug, Clone)]
enum Op {
    /// `new`: the caller knows the store holds no record of the URI (see [`Batch::create`]).
    Upsert {
        sets: Vec<String>,
        record: Box<NewRecord>,
        new: bool,
    },
    Delete {
        sets: Vec<String>,
        uri: String,
    },
    Stage {
        sets: Vec<String>,
        uri: String,
        stage: Box<super::guard::Stage>,
    },
}

impl Op {
    /// The content an upsert refers to.
    fn content(&self) -> Option<BlobId> {
        match self {
            Op::Upsert { record, .. } => Some(record.sha256),
            Op::Delete { .. } | Op::Stage { .. } => None,
        }
    }
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Batch::default()
    }

    /// Creates or updates a record; `sets` are the ids of every set that includes its
    /// source, and the change event goes to each of them.
    pub fn upsert(&mut self, sets: &[&str], record: NewRecord) -> &mut Self {
        self.ops.push(Op::Upsert { sets: own_sets(sets), record: Box::new(record), new: false });
        self
    }

    /// Creates a record the caller knows the store does not hold, live or deleted: a source's
    /// first baseline, which found no record under the source's prefix when it began and
    /// names each URI once. The store then skips the read of the old record an upsert makes
    /// (only this batch's own earlier writes are looked at). Used for anything the store may
    /// hold, it would lose that record's history and miscount its sets: use [`Batch::upsert`].
    pub fn create(&mut self, sets: &[&str], record: NewRecord) -> &mut Self {
        self.ops.push(Op::Upsert { sets: own_sets(sets), record: Box::new(record), new: true });
        self
    }

    /// Marks a record deleted; the deletion event goes to each of `sets`.
    pub fn delete(&mut self, sets: &[&str], uri: &str) -> &mut Self {
        self.ops.push(Op::Delete { sets: own_sets(sets), uri: uri.to_owned() });
        self
    }

    /// Stages the deletion of a record for `stage`'s pass to judge ([`Store::settle_deletions`]):
    /// the record stays live until then, and longer if the deletion is held. What every
    /// deletion the harvester finds goes through (see [`super::guard`]).
    ///
    /// [`Store::settle_deletions`]: super::Store::settle_deletions
    pub fn stage_delete(&mut self, sets: &[&str], uri: &str, stage: &super::guard::Stage) -> &mut Self {
        self.ops.push(Op::Stage { sets: own_sets(sets), uri: uri.to_owned(), stage: Box::new(stage.clone()) });
        self
    }

    /// Drops a staged or held deletion, keeping the record.
    pub(super) fn unhold(&mut self, source: &str, uri: &str) -> &mut Self {
        self.guard.push(GuardOp::Unhold { source: source.to_owned(), uri: uri.to_owned() });
        self
    }

    /// Writes a held deletion's row as it now is.
    pub(super) fn rehold(&mut self, row: super::guard::HeldDeletion) -> &mut Self {
        self.guard.push(GuardOp::Rehold(Box::new(row)));
        self
    }

    /// Saves a takedown.
    pub(super) fn takedown(&mut self, t: super::guard::Takedown) -> &mut Self {
        self.guard.push(GuardOp::Takedown(Box::new(t)));
        self
    }

    /// Removes the takedown of `target`.
    pub(super) fn lift(&mut self, target: &str) -> &mut Self {
        self.guard.push(GuardOp::Lift(target.to_owned()));
        self
    }

    /// Records that a resource could not be stored (see [`super::failure`]); an earlier
    /// failure of the same resource is counted on, not replaced.
    pub fn fail(&mut self, failure: NewFailure) -> &mut Self {
        self.failures.push(FailureOp::Record(Box::new(failure)));
        self
    }

    /// Removes the failure recorded for a resource, if there is one.
    pub fn clear_failure(&mut self, source: &str, uri: &str) -> &mut Self {
        self.failures.push(FailureOp::Clear { source: source.to_owned(), uri: uri.to_owned() });
        self
    }

    /// Saves (or, with `None`, removes) the FeedSync state of item `item` of feed source
    /// `source` in the same commit as the item's record (see [`super::feeds`]).
    pub fn feed_item(&mut self, source: &str, item: &str, state: Option<Vec<u8>>) -> &mut Self {
        self.feed_items.push((source.to_owned(), item.to_owned(), state));
        self
    }

    /// Saves the source's harvest state in the same commit.
    pub fn source_state(&mut self, source: &str, state: SourceState) -> &mut Self {
        self.state = Some((source.to_owned(), state));
        self
    }

    /// Number of upserts, deletions and failure rows recorded or cleared: what a caller sizes
    /// its batches by.
    pub fn len(&self) -> usize {
        self.ops.len() + self.failures.len()
    }

    /// True when the batch writes no record, no failure row, no feed item state and no
    /// held-deletion or takedown row.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty() && self.failures.is_empty() && self.feed_items.is_empty() && self.guard.is_empty()
    }

    fn validate(&self) -> Result<(), StoreError> {
        for op in &self.ops {
            let (sets, uri) = match op {
                Op::Upsert { sets, record, .. } => (sets, &record.uri),
                Op::Delete { sets, uri } => (sets, uri),
                Op::Stage { sets, uri, stage } => {
                    check_key("source id", &stage.source)?;
                    (sets, uri)
                }
            };
            check_key("resource URI", uri)?;
            sets.iter().try_for_each(|s| check_key("set id", s))?;
            if let Op::Upsert { record, .. } = op {
                check_key("source id", &record.source)?;
                check_key("origin URI", &record.listing.origin)?;
                check_key("upstream URI", &record.upstream)?;
            }
        }
        for f in &self.failures {
            match f {
                FailureOp::Record(n) => failure::validate(&n.source, &n.uri)?,
                FailureOp::Clear { source, uri } => failure::validate(source, uri)?,
            }
        }
        for (source, item, _) in &self.feed_items {
            feeds::validate(source, item)?;
        }
        self.state.as_ref().map_or(Ok(()), |(id, _)| check_key("source id", id))
    }
}

fn own_sets(sets: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = sets.iter().map(|s| (*s).to_owned()).collect();
    v.sort();
    v.dedup();
    v
}

/// What happened to one upsert or deletion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A new record, or a deleted one that came back.
    Created,
    /// A live record that changed.
    Updated,
    /// A live record marked deleted.
    Deleted,
    /// Nothing to do: identical to what is stored, or deleting what is absent or deleted. No
    /// event was written.
    Unchanged,
    /// A deletion staged for the pass to judge (see [`super::guard`]): the record stays live.
    Staged,
    /// Refused: a takedown matches it (its upstream or origin URI, or its content).
    TakenDown,
}

/// The result of one op of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpResult {
    /// The record's URI.
    pub uri: String,
    /// What happened.
    pub outcome: Outcome,
    /// The events written: `(set id, sequence number)`.
    pub events: Vec<(String, u64)>,
}

/// The result of a batch, one entry per op in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Applied {
    /// Per op.
    pub ops: Vec<OpResult>,
}

/// A batch being built: reads see the store plus the batch's own writes.
struct Tx<'a> {
    t: &'a Trees,
    w: Overlay,
    /// Touched sets: the last seq before this batch, and the counters as they will be.
    counters: HashMap<String, (u64, Counters)>,
    /// The takedowns' match keys; `None` while there is none.
    takedowns: Option<&'a super::guard::TakedownIndex>,
    /// Whether held deletions exist (an upsert then cancels its own).
    held_any: bool,
    /// Whether this batch writes a held row.
    holds: bool,
    /// Per set, the chunk of change events being filled (see [`super::log`]).
    chunks: HashMap<String, ChunkBuf>,
    /// Blob rows this batch writes, as they will be: the pending rows it carries (see
    /// `pack`) and those whose referrer it changed.
    blobs: FastMap<BlobId, TxBlob>,
    now: W3cDateTime,
}

/// A blob row as a batch sees it, and whether the batch writes it.
struct TxBlob {
    row: BlobRow,
    write: bool,
}

impl TxBlob {
    fn refer(&mut self, referrer: Option<String>) {
        self.row.referrer = referrer;
        self.write = true;
    }
}

impl Store {
    /// Commits a batch: when this returns it is durable (the journal synced), and its events
    /// are visible to readers, never before. The harvester calls this before it considers a
    /// batch done.
    ///
    /// The batch is left empty, as [`Vec::append`] leaves its argument: its records move into
    /// the rows written instead of being copied (docs/STORE.md, "Tuning").
    /// A batch refused before anything is read ([`StoreError::InvalidKey`],
    /// [`StoreError::ReadOnly`]) is left as it was.
    ///
    /// # Errors
    /// [`StoreError::MissingBlob`] when an upsert names content not stored (nothing is
    /// committed); [`StoreError::InvalidKey`]; [`StoreError::Database`] / [`StoreError::Io`]
    /// when the commit or a sync fails (nothing is committed, and the store is read-only from
    /// then on); [`StoreError::ReadOnly`] once it is.
    pub fn apply(&self, batch: &mut Batch) -> Result<Applied, StoreError> {
        batch.validate()?;
        let inner = &self.inner;
        inner.db.check_writable()?;
        let batch = std::mem::take(batch);
        // Read before `build` takes the batch apart.
        let reload = batch.guard.iter().any(|g| matches!(g, GuardOp::Takedown(_) | GuardOp::Lift(_)));
        let referred: FastSet<BlobId> = batch.ops.iter().filter_map(Op::content).collect();
        // Before the pack's commit lock, as `gc` takes them in that order.
        let _gc = inner.gc_lock.read().unwrap_or_else(|p| p.into_inner());
        // The pending rows of the blobs this batch refers to join it, their bytes synced first,
        // so a record never refers to a blob whose row could be lost (see `pack`), and the
        // upserts below read them from the overlay instead of the database.
        let taken = inner.take_pending_unsynced(Take::For(&referred))?;
        let takedowns = inner.takedowns.read().unwrap_or_else(|p| p.into_inner());
        let writes = inner.write_lock();
        // The pack's sync (waiting on the disk) runs on its own thread while this one reads
        // and encodes the batch, and is done before anything commits.
        let (built, synced) = std::thread::scope(|s| {
            let syncing = taken.needs_sync().then(|| s.spawn(|| inner.sync_taken(&taken)));
            let built = build(inner, batch, &taken, &takedowns);
            let synced = syncing.map_or(Ok(()), |h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
            (built, synced)
        });
        synced?;
        let (tx, applied, logged) = built?;
        if tx.holds {
            // Before the commit: a reader that sees the row must also see the flag.
            inner.held_any.store(true, std::sync::atomic::Ordering::Release);
        }
        inner.db.commit(tx.w)?;
        inner.committed(taken, tx.blobs.iter().filter(|(_, b)| b.write).map(|(id, b)| (id, &b.row)));
        drop(writes);
        drop(takedowns);
        if reload {
            inner.reload_takedowns()?;
        }
        inner.unfresh(&referred);
        if logged {
            inner.listeners.call();
        }
        Ok(applied)
    }
}

/// Reads what `batch` changes and encodes its rows, `taken` among them: the transaction to
/// commit, what it did, and whether it logged any event. The batch is taken apart: its records'
/// strings move into the rows instead of being copied.
fn build<'a>(
    inner: &'a Inner,
    batch: Batch,
    taken: &TakenRows<'_>,
    takedowns: &'a super::guard::TakedownIndex,
) -> Result<(Tx<'a>, Applied, bool), StoreError> {
    let t = &inner.trees;
    // Up to five rows per op: the record, two index entries (or a blob row) and their
    // removal on an update; chunks and counters are per set, blob rows per blob.
    let w = Overlay::with_capacity(batch.ops.len() * 2 + 8);
    // The pending rows join as rows, not encoded bytes: the upserts naming them (most of
    // a harvest's) set their referrer in place, and each is encoded once, at the end.
    let mut blobs = FastMap::with_capacity_and_hasher(taken.len(), Default::default());
    blobs.extend(taken.iter().map(|(id, row)| (*id, TxBlob { row: row.clone(), write: true })));
    let mut tx = Tx {
        t,
        w,
        counters: HashMap::new(),
        takedowns: (!takedowns.is_empty()).then_some(takedowns),
        held_any: inner.held_any.load(std::sync::atomic::Ordering::Acquire),
        holds: false,
        chunks: HashMap::new(),
        blobs,
        now: inner.stamp(),
    };
    let applied = tx.run(batch.ops)?;
    tx.guard(&batch.guard)?;
    tx.failures(&batch.failures)?;
    for (source, item, state) in batch.feed_items {
        let k = feeds::key(&source, &item);
        match state {
            Some(v) => tx.w.insert(&t.feed_items, &k, v),
            None => tx.w.remove(&t.feed_items, &k),
        }
    }
    if let Some((id, s)) = &batch.state {
        tx.w.insert(&t.sources, id.as_bytes(), state::encode(s)?);
    }
    let logged = tx.write_counters()?;
    tx.write_blob_rows()?;
    Ok((tx, applied, logged))
}

impl Inner {
    /// Referenced blobs are protected by the index now; stop tracking them as fresh.
    fn unfresh(&self, referred: &FastSet<BlobId>) {
        let mut fresh = self.fresh.lock().unwrap_or_else(|p| p.into_inner());
        for id in referred {
            fresh.remove(id);
        }
    }
}

impl Tx<'_> {
    fn run(&mut self, ops: Vec<Op>) -> Result<Applied, StoreError> {
        let mut applied = Applied { ops: Vec::with_capacity(ops.len()) };
        for op in ops {
            applied.ops.push(match op {
                Op::Upsert { sets, record, new } => self.upsert(sets, *record, new)?,
                Op::Delete { sets, uri } => self.delete(&sets, &uri)?,
                Op::Stage { sets, uri, stage } => self.stage(&sets, &uri, &stage)?,
            });
        }
        Ok(applied)
    }

    /// A deletion staged for its pass to judge: a held row, the record untouched.
    fn stage(&mut self, sets: &[String], uri: &str, stage: &super::guard::Stage) -> Result<OpResult, StoreError> {
        let live = self.old_record(uri)?.is_some_and(|r| !r.is_deleted());
        if !live {
            return Ok(OpResult { uri: uri.to_owned(), outcome: Outcome::Unchanged, events: Vec::new() });
        }
        let key = super::guard::held_key(&stage.source, uri);
        let old = self.w.get(&self.t.held, &key)?;
        let row = super::guard::staged(old.as_deref(), sets, uri, stage)?;
        self.w.insert(&self.t.held, &key, row);
        self.holds = true;
        Ok(OpResult { uri: uri.to_owned(), outcome: Outcome::Staged, events: Vec::new() })
    }

    /// Held-deletion and takedown rows, in the order the batch names them.
    fn guard(&mut self, ops: &[GuardOp]) -> Result<(), StoreError> {
        for op in ops {
            match op {
                GuardOp::Unhold { source, uri } => self.w.remove(&self.t.held, &super::guard::held_key(source, uri)),
                GuardOp::Rehold(row) => {
                    self.w.insert(
                        &self.t.held,
                        &super::guard::held_key(&row.source, &row.uri),
                        super::guard::encode(&**row)?,
                    );
                    self.holds = true;
                }
                GuardOp::Takedown(t) => {
                    self.w.insert(&self.t.takedowns, t.target.as_bytes(), super::guard::encode(&**t)?)
                }
                GuardOp::Lift(target) => self.w.remove(&self.t.takedowns, target.as_bytes()),
            }
        }
        Ok(())
    }

    /// The takedown an upsert of `new` would break, if any.
    fn taken_down(&self, new: &NewRecord) -> Option<&str> {
        let index = self.takedowns?;
        let keys = super::guard::record_keys(&new.upstream, &new.listing.origin, &new.sha256.to_hex());
        index.matching(keys.iter().map(String::as_str))
    }

    /// Failure rows, in the order the batch names them (a clear after a record removes it).
    fn failures(&mut self, ops: &[FailureOp]) -> Result<(), StoreError> {
        let table = &self.t.failures;
        for op in ops {
            match op {
                FailureOp::Record(new) => {
                    let k = failure::key(&new.source, &new.uri);
                    let old = self.w.get(table, &k)?;
                    let row = failure::encode_merged(new, old.as_deref(), self.now)?;
                    self.w.insert(table, &k, row);
                }
                FailureOp::Clear { source, uri } => self.w.remove(table, &failure::key(source, uri)),
            }
        }
        Ok(())
    }

    fn old_record(&self, uri: &str) -> Result<Option<Record>, StoreError> {
        self.w.get(&self.t.records, uri.as_bytes())?.map(|v| row::decode(uri.as_bytes(), &v)).transpose()
    }

    /// The old record of a URI the caller says is new: only a write of this batch can hold it.
    fn written_record(&self, uri: &str) -> Result<Option<Record>, StoreError> {
        let written = self.w.written(&self.t.records, uri.as_bytes()).flatten();
        written.map(|v| row::decode(uri.as_bytes(), v)).transpose()
    }

    /// The blob's row as this batch leaves it so far, taken into `blobs` (where a change to
    /// it is written from) when it was only in the store.
    fn blob_row(&mut self, sha: &BlobId) -> Result<Option<&mut TxBlob>, StoreError> {
        if !self.blobs.contains_key(sha) {
            let Some(v) = self.w.get(&self.t.blobs, &sha.0)? else { return Ok(None) };
            self.blobs.insert(*sha, TxBlob { row: BlobRow::decode(&v)?, write: false });
        }
        Ok(self.blobs.get_mut(sha))
    }

    fn upsert(&mut self, sets: Vec<String>, new: NewRecord, known_new: bool) -> Result<OpResult, StoreError> {
        if let Some(target) = self.taken_down(&new) {
            tracing::debug!(resource.uri = %new.uri, takedown = %target, "refused: taken down");
            return Ok(OpResult { uri: new.uri, outcome: Outcome::TakenDown, events: Vec::new() });
        }
        // Seen again: a deletion staged or held for it no longer stands.
        if self.held_any && !known_new {
            let key = super::guard::held_key(&new.source, &new.uri);
            if self.w.get(&self.t.held, &key)?.is_some() {
                self.w.remove(&self.t.held, &key);
            }
        }
        let Some(head) = self.blob_row(&new.sha256)? else {
            return Err(StoreError::MissingBlob { uri: new.uri, sha256: new.sha256.to_hex() });
        };
        let (md5, length) = (head.row.md5.map(hex::encode), head.row.length);
        // A deleted record still heads its history, which a re-creation continues.
        let old = if known_new { self.written_record(&new.uri)? } else { self.old_record(&new.uri)? };
        let NewRecord { uri, source, upstream, sha256, listing } = new;
        let mut rec = Record {
            uri,
            source,
            sets,
            origin: listing.origin,
            upstream,
            sha256,
            md5,
            length,
            declared: listing.declared,
            media_type: listing.media_type,
            lastmod: listing.lastmod,
            via: listing.via,
            links: listing.links,
            deleted: None,
            changed: self.now,
            heads: old.as_ref().map(|o| o.heads.clone()).unwrap_or_default(),
        };
        let live_old = old.filter(|o| !o.is_deleted());
        if let Some(o) = &live_old {
            if o.same_content(&rec) {
                return Ok(OpResult { uri: rec.uri, outcome: Outcome::Unchanged, events: Vec::new() });
            }
            self.unindex(o)?;
        }
        let (outcome, change) =
            if live_old.is_some() { (Outcome::Updated, Change::Updated) } else { (Outcome::Created, Change::Created) };
        self.index(&rec)?;
        // Out of the record while it is written to, put back before it is encoded.
        let sets = std::mem::take(&mut rec.sets);
        self.count_live(live_old.as_ref().map(|o| o.sets.as_slice()), Some(&sets))?;
        let events = self.append_events(&sets, &mut rec, change)?;
        rec.sets = sets;
        self.w.insert(&self.t.records, rec.uri.as_bytes(), row::encode(&rec)?);
        Ok(OpResult { uri: rec.uri, outcome, events })
    }

    fn delete(&mut self, sets: &[String], uri: &str) -> Result<OpResult, StoreError> {
        let unchanged = || OpResult { uri: uri.to_owned(), outcome: Outcome::Unchanged, events: Vec::new() };
        let Some(mut rec) = self.old_record(uri)? else { return Ok(unchanged()) };
        if rec.is_deleted() {
            return Ok(unchanged());
        }
        self.unindex(&rec)?;
        self.count_live(Some(&rec.sets), None)?;
        let events = self.append_events(sets, &mut rec, Change::Deleted)?;
        rec.deleted = Some(self.now);
        self.w.insert(&self.t.records, uri.as_bytes(), row::encode(&rec)?);
        Ok(OpResult { uri: uri.to_owned(), outcome: Outcome::Deleted, events })
    }

    /// Writes `rec`'s index entries. Its blob row exists (the upsert checked).
    fn index(&mut self, rec: &Record) -> Result<(), StoreError> {
        let t = self.t;
        // Read again rather than passed in: unindexing the old version may have just freed it.
        match self.blob_row(&rec.sha256)? {
            Some(blob) if blob.row.referrer.is_none() => blob.refer(Some(rec.uri.clone())),
            _ => self.w.insert(&t.by_sha, &keys::by_sha(&rec.sha256, &rec.uri), Vec::new()),
        }
        // A record fetched from its origin is found by its name instead (see `record`).
        if row::via_aggregator(rec) {
            self.w.insert(&t.by_origin, &keys::by_origin(&rec.origin, &rec.uri), Vec::new());
        }
        Ok(())
    }

    fn unindex(&mut self, rec: &Record) -> Result<(), StoreError> {
        let t = self.t;
        match self.blob_row(&rec.sha256)? {
            Some(blob) if blob.row.referrer.as_deref() == Some(rec.uri.as_str()) => {
                // The index's other entries, if any, stay where they are: a referrer is not
                // needed for the blob to count as referenced, only one fewer row.
                blob.refer(None);
            }
            _ => self.w.remove(&t.by_sha, &keys::by_sha(&rec.sha256, &rec.uri)),
        }
        if row::via_aggregator(rec) {
            self.w.remove(&t.by_origin, &keys::by_origin(&rec.origin, &rec.uri));
        }
        Ok(())
    }

    fn counters_mut(&mut self, set: &str) -> Result<&mut Counters, StoreError> {
        if !self.counters.contains_key(set) {
            let c: Counters = match self.t.sets.get_latest(set.as_bytes())? {
                Some(v) => codec::decode("set counters", &v)?,
                None => Counters::default(),
            };
            self.counters.insert(set.to_owned(), (c.last_seq, c));
        }
        Ok(self.counters.get_mut(set).map(|(_, c)| c).expect("inserted above"))
    }

    fn count_live(&mut self, old_sets: Option<&[String]>, new_sets: Option<&[String]>) -> Result<(), StoreError> {
        for set in old_sets.unwrap_or_default() {
            let c = self.counters_mut(set)?;
            c.live = c.live.saturating_sub(1);
        }
        for set in new_sets.unwrap_or_default() {
            self.counters_mut(set)?.live += 1;
        }
        Ok(())
    }

    /// Logs `change` of `rec` in each of `sets`, each event naming the resource's previous one
    /// in its set, and moves `rec`'s history heads to them. The events share one datetime, which
    /// becomes `rec.changed`: a record's `changed` is its head events' datetime in every log,
    /// so a reader going through records (OAI-PMH lists in URI order) has it without the log.
    fn append_events(
        &mut self,
        sets: &[String],
        rec: &mut Record,
        change: Change,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        // Never earlier than any of the sets' previous events, whatever the clock does.
        let mut datetime = self.now;
        for set in sets {
            if let Some(last) = self.counters_mut(set)?.last_change {
                datetime = datetime.max(last);
            }
        }
        rec.changed = datetime;
        let mut out: Vec<(String, u64)> = Vec::with_capacity(sets.len());
        for set in sets {
            let c = self.counters_mut(set)?;
            c.last_seq += 1;
            c.last_change = Some(datetime);
            let seq = c.last_seq;
            let head = rec.heads.iter_mut().find(|(s, _)| s == set);
            let prev = head.as_ref().map(|(_, q)| *q);
            match head {
                Some((_, q)) => *q = seq,
                None => rec.heads.push((set.clone(), seq)),
            }
            let event = EventRef {
                seq,
                uri: &rec.uri,
                change,
                datetime,
                sha256: &rec.sha256,
                md5: rec.md5.as_deref(),
                length: rec.length,
                media_type: rec.media_type.as_deref(),
                origin: &rec.origin,
                via: &rec.via,
                source: &rec.source,
                prev,
            };
            self.push_event(set, &event)?;
            out.push((set.clone(), seq));
        }
        Ok(out)
    }

    /// Adds an event to its set's open chunk, writing the chunk out once it is full.
    fn push_event(&mut self, set: &str, event: &EventRef<'_>) -> Result<(), StoreError> {
        let chunk = match self.chunks.get_mut(set) {
            Some(c) => c,
            None => self.chunks.entry(set.to_owned()).or_insert_with(|| ChunkBuf::new(event.seq)),
        };
        chunk.push(event)?;
        if chunk.is_full() {
            let full = std::mem::replace(chunk, ChunkBuf::new(event.seq + 1));
            self.w.insert(&self.t.log, &event_key(set, full.first), full.into_value());
        }
        Ok(())
    }

    /// Writes the blob rows: those pending and those whose referrer changed.
    fn write_blob_rows(&mut self) -> Result<(), StoreError> {
        for (id, blob) in self.blobs.iter().filter(|(_, b)| b.write) {
            self.w.insert(&self.t.blobs, &id.0, blob.row.encode()?);
        }
        Ok(())
    }

    /// Writes every chunk still open.
    fn write_chunks(&mut self) {
        for (set, chunk) in std::mem::take(&mut self.chunks) {
            if !chunk.is_empty() {
                self.w.insert(&self.t.log, &event_key(&set, chunk.first), chunk.into_value());
            }
        }
    }

    /// Writes the open event chunks and every touched set's counters once; returns whether any
    /// event was written.
    fn write_counters(&mut self) -> Result<bool, StoreError> {
        self.write_chunks();
        let mut logged = false;
        for (set, (before, c)) in &self.counters {
            self.w.insert(&self.t.sets, set.as_bytes(), codec::encode(c)?);
            logged |= c.last_seq > *before;
        }
        Ok(logged)
    }
}
