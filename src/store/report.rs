//! The reports of `tributary store stats|verify|gc` and `tributary failures`: plain data for
//! tests and the dashboard (`Serialize` where it serves JSON), `Display` for the terminal.

use std::fmt;

use serde::Serialize;

use super::{Store, StoreError};
use crate::model::W3cDateTime;

/// What a store holds; see [`Store::stats`](super::Store::stats).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    /// Distinct bitstreams stored.
    pub blobs: u64,
    /// Of which stored in packs (the small ones).
    pub packed_blobs: u64,
    /// Bytes of distinct bitstreams (each counted once).
    pub stored_bytes: u64,
    /// Live resource records.
    pub records_live: u64,
    /// Deleted resource records (kept for history).
    pub records_deleted: u64,
    /// Bytes the live records refer to, counting shared content once per record.
    pub logical_bytes: u64,
    /// Per set.
    pub sets: Vec<SetStats>,
    /// Sources with saved harvest state.
    pub sources: u64,
    /// The metadata's size on disk: the database's tables and journal (blob files and packs
    /// excluded).
    pub database_bytes: u64,
    /// The packs' size on disk, including space not yet reclaimed by `gc`.
    pub pack_bytes: u64,
    /// The database engine's own figures.
    pub engine: EngineStats,
    /// Why the store refuses writes, if it does (see [`Store::read_only`]).
    pub read_only: Option<String>,
}

/// What the database (fjall) has on disk and in memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Table files (sorted, immutable) across every keyspace.
    pub tables: u64,
    /// Journal files: what is still only in memtables, and the batches not yet flushed.
    pub journals: u64,
    /// The journal's bytes on disk.
    pub journal_bytes: u64,
    /// Memory the memtables take.
    pub write_buffer_bytes: u64,
    /// Memory the block cache takes.
    pub cache_bytes: u64,
}

/// One set's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetStats {
    /// The set id.
    pub id: String,
    /// Live resources.
    pub live: u64,
    /// Change events.
    pub events: u64,
    /// Datetime of the last event.
    pub last_change: Option<W3cDateTime>,
}

impl Stats {
    /// Logical bytes over stored bytes: how much deduplication saves (1.0 = nothing).
    pub fn dedup_ratio(&self) -> f64 {
        if self.stored_bytes == 0 { 1.0 } else { self.logical_bytes as f64 / self.stored_bytes as f64 }
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "blobs:          {} ({} packed, {} files)",
            self.blobs,
            self.packed_blobs,
            self.blobs - self.packed_blobs
        )?;
        writeln!(f, "stored bytes:   {}", self.stored_bytes)?;
        writeln!(f, "logical bytes:  {}", self.logical_bytes)?;
        writeln!(f, "dedup ratio:    {:.2}", self.dedup_ratio())?;
        writeln!(f, "records:        {} live, {} deleted", self.records_live, self.records_deleted)?;
        writeln!(f, "sources:        {}", self.sources)?;
        writeln!(f, "database bytes: {}", self.database_bytes)?;
        writeln!(f, "pack bytes:     {}", self.pack_bytes)?;
        let e = &self.engine;
        writeln!(
            f,
            "database:       {} table files, {} journals ({} bytes); {} bytes in memtables, {} in the block cache",
            e.tables, e.journals, e.journal_bytes, e.write_buffer_bytes, e.cache_bytes
        )?;
        if let Some(reason) = &self.read_only {
            writeln!(f, "READ-ONLY:      {reason}")?;
        }
        writeln!(f, "sets:           {}", self.sets.len())?;
        for s in &self.sets {
            let last = s.last_change.map_or_else(|| "-".to_owned(), |t| t.to_string());
            writeln!(f, "  {}: {} live, {} events, last change {last}", s.id, s.live, s.events)?;
        }
        Ok(())
    }
}

/// One inconsistency found by [`Store::verify`](super::Store::verify).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// What kind of row: `blob`, `record`, `index by_origin`, `event`, `set counters`…
    pub area: &'static str,
    /// Which one: a sha-256, a URI, `set #seq`…
    pub key: String,
    /// What is wrong.
    pub detail: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.area, self.key, self.detail)
    }
}

/// The result of [`Store::verify`](super::Store::verify).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Blobs re-hashed.
    pub blobs: u64,
    /// Bytes re-hashed.
    pub bytes: u64,
    /// Records checked.
    pub records: u64,
    /// Change events checked.
    pub events: u64,
    /// Blobs no live record refers to (not a problem: gc collects them).
    pub unreferenced_blobs: u64,
    /// Files under `blobs/` with no row, or left in `tmp/` (not a problem: gc or the next open
    /// removes them).
    pub stray_files: u64,
    /// Every inconsistency found.
    pub problems: Vec<Problem>,
}

impl VerifyReport {
    /// True when no problem was found.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }

    pub(super) fn problem(&mut self, area: &'static str, key: impl Into<String>, detail: impl Into<String>) {
        self.problems.push(Problem { area, key: key.into(), detail: detail.into() });
    }
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "checked {} blobs ({} bytes re-hashed), {} records, {} events",
            self.blobs, self.bytes, self.records, self.events
        )?;
        writeln!(
            f,
            "{} unreferenced blobs, {} stray files (gc removes both)",
            self.unreferenced_blobs, self.stray_files
        )?;
        if self.is_clean() {
            return writeln!(f, "clean: no problems found");
        }
        writeln!(f, "{} problems:", self.problems.len())?;
        for p in &self.problems {
            writeln!(f, "  {p}")?;
        }
        Ok(())
    }
}

/// The result of [`Store::gc`](super::Store::gc).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Unreferenced blobs removed.
    pub blobs_removed: u64,
    /// Their bytes.
    pub bytes_freed: u64,
    /// Files under `blobs/` without a row, removed.
    pub stray_files_removed: u64,
    /// Unreferenced blobs kept because this process put them recently (a record is probably
    /// about to refer to them).
    pub kept_fresh: u64,
    /// Packs that were mostly unreferenced space, rewritten (their live blobs moved to the
    /// active pack) and deleted.
    pub packs_rewritten: u64,
    /// Bitstreams in the bucket that no instance refers to any more, marked doomed by this run.
    pub objects_doomed: u64,
    /// Doomed bitstreams deleted from the bucket (past the grace period, still unreferenced).
    pub objects_deleted: u64,
    /// Their bytes.
    pub object_bytes_freed: u64,
    /// Doomed bitstreams an instance referred to again: kept.
    pub objects_rescued: u64,
    /// Doomed bitstreams still within the grace period.
    pub objects_waiting: u64,
}

impl fmt::Display for GcReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "removed {} unreferenced blobs ({} bytes)", self.blobs_removed, self.bytes_freed)?;
        writeln!(f, "removed {} stray files", self.stray_files_removed)?;
        writeln!(f, "kept {} recently stored blobs not yet referenced", self.kept_fresh)?;
        writeln!(f, "rewrote {} packs that were mostly unreferenced space", self.packs_rewritten)?;
        if self.objects_doomed + self.objects_deleted + self.objects_rescued + self.objects_waiting > 0 {
            writeln!(f, "bucket: {} bitstreams no instance refers to any more, marked doomed", self.objects_doomed)?;
            writeln!(
                f,
                "bucket: deleted {} doomed bitstreams ({} bytes); {} taken back; {} within the grace period",
                self.objects_deleted, self.object_bytes_freed, self.objects_rescued, self.objects_waiting
            )?;
        }
        Ok(())
    }
}

/// One source's failures as `tributary failures` and `api/failures` show them: how many there
/// are, and the first of them in URI order. See [`Store::failure_report`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailureReport {
    /// The source id.
    pub source: String,
    /// All of the source's failures, of which `failures` holds the first ones by URI.
    pub failing: u64,
    /// The failures listed.
    pub failures: Vec<FailureRow>,
}

/// One failure of a [`FailureReport`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailureRow {
    /// Tributary's URI for the resource.
    pub uri: String,
    /// The `<loc>` it was listed at.
    pub upstream: String,
    /// Why the last attempt failed.
    pub reason: String,
    /// When this run of failures began (W3C datetime).
    pub first_failed: String,
    /// When the last attempt failed.
    pub last_failed: String,
    /// Attempts that failed in a row.
    pub attempts: u32,
}

impl fmt::Display for FailureReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} failing", self.source, self.failing)?;
        for r in &self.failures {
            let times = if r.attempts == 1 { "time" } else { "times" };
            write!(
                f,
                "\n  {}: failed {} {times} since {}, last {}",
                r.upstream, r.attempts, r.first_failed, r.last_failed
            )?;
            write!(f, "\n    {}", r.reason)?;
        }
        let listed = self.failures.len() as u64;
        if listed < self.failing {
            write!(f, "\n  … and {} more (--limit)", self.failing - listed)?;
        }
        Ok(())
    }
}

impl Store {
    /// The failures of `source`: their number, and the first `limit` in URI order.
    ///
    /// # Errors
    /// [`StoreError::Database`], or [`StoreError::Corrupt`] for an unreadable row.
    pub fn failure_report(&self, source: &str, limit: usize) -> Result<FailureReport, StoreError> {
        let failures = self
            .failures(source)
            .take(limit)
            .map(|f| {
                f.map(|f| FailureRow {
                    uri: f.uri,
                    upstream: f.upstream,
                    reason: f.reason,
                    first_failed: f.first_failed.to_string(),
                    last_failed: f.last_failed.to_string(),
                    attempts: f.attempts,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(FailureReport { source: source.to_owned(), failing: self.failure_count(source)?, failures })
    }
}
