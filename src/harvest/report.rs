//! What a harvest reports: per source, per pass, and live to a progress display.
//!
//! The [`Progress`] trait keeps the harvester free of any terminal code: the command line
//! implements it with a progress bar or log lines, tests with nothing.

use std::fmt;
use std::time::Duration;

use crate::store::{Applied, Outcome, ParkedOrigin};

/// What happened to one listed resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceOutcome {
    /// Fetched, verified and stored.
    Fetched,
    /// Already held in its listed state.
    Unchanged,
    /// Fetching or verification failed; nothing was stored.
    Failed,
}

/// Live progress of a harvest. Every method has an empty default.
pub trait Progress: Send + Sync {
    /// A source's pass started.
    fn source_started(&self, _source: &str) {}
    /// A resource was read from a source's list (the total is not known in advance).
    fn listed(&self, _source: &str) {}
    /// A listed resource was dealt with.
    fn resource(&self, _source: &str, _outcome: ResourceOutcome, _bytes: u64) {}
    /// A source's pass ended.
    fn source_done(&self, _report: &SourceReport) {}
}

/// A [`Progress`] that shows nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {}

/// The outcome of one pass over one source.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceReport {
    /// The source id.
    pub source: String,
    /// Resources fetched, verified and stored.
    pub fetched: u64,
    /// Resources already held in their listed state.
    pub unchanged: u64,
    /// Resources that could not be fetched or verified.
    pub failed: u64,
    /// Entries skipped (outside the Source's authority, or not http(s)).
    pub skipped: u64,
    /// Records created (new, or deleted ones that came back).
    pub created: u64,
    /// Records updated.
    pub updated: u64,
    /// Records marked deleted.
    pub deleted: u64,
    /// Deletions found and staged for the pass's judgement (see `store::guard`); those applied
    /// are counted in `deleted`, the rest in `held`.
    pub staged: u64,
    /// Deletions held at the end of the pass: more than `max_deletions` (in all, for the source).
    pub held: u64,
    /// When the oldest of them was first found.
    pub held_since: Option<crate::model::W3cDateTime>,
    /// Resources refused because a takedown matches them.
    pub taken_down: u64,
    /// The pass read the Source's whole inventory (a Resource List, a full OAI-PMH list, a
    /// complete feed): a held deletion of a resource it did not find missing is cancelled.
    pub listed_all: bool,
    /// Bitstream bytes received.
    pub bytes: u64,
    /// The whole list was read (or was unchanged).
    pub complete: bool,
    /// The list answered `304 Not Modified`.
    pub not_modified: bool,
    /// Shutdown ended the pass early (not a failure of the source).
    pub interrupted: bool,
    /// Why the pass failed or ended early, if it did.
    pub error: Option<String>,
    /// The origin the source needs, parked (`Retry-After`) for longer than a request waits,
    /// when the pass met it: the pass ended (or never began) on it, and `error` says so.
    pub parked: Option<ParkedOrigin>,
}

impl SourceReport {
    pub(crate) fn new(source: &str) -> Self {
        SourceReport { source: source.to_owned(), ..SourceReport::default() }
    }

    pub(crate) fn failed_with(source: &str, error: String) -> Self {
        SourceReport { error: Some(error), ..SourceReport::new(source) }
    }

    /// A pass not begun: `park` is in the way.
    pub(crate) fn parked(source: &str, park: ParkedOrigin) -> Self {
        let error = format!("origin {} asked us to wait until {}", park.origin, park.until);
        SourceReport { error: Some(error), parked: Some(park), ..SourceReport::new(source) }
    }

    /// Whether the pass changed or confirmed anything in the store.
    pub fn progressed(&self) -> bool {
        self.fetched + self.created + self.updated + self.deleted + self.unchanged > 0
    }

    /// A pass that failed part-way after doing something: what it did is kept and counted,
    /// and it is reported as partial, not as a plain failure.
    pub fn partial(&self) -> bool {
        self.error.is_some() && self.progressed()
    }
}

/// The outcome of one pass over several sources (`tributary harvest`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// One report per source, in configuration order.
    pub sources: Vec<SourceReport>,
    /// Wall time of the pass.
    pub duration: Duration,
}

impl Summary {
    fn total(&self, f: impl Fn(&SourceReport) -> u64) -> u64 {
        self.sources.iter().map(f).sum()
    }

    /// True when every source's pass ended without an error and no resource failed: what
    /// `tributary harvest`'s exit status says (0, else 1). A parked source is not harvested,
    /// so it fails the pass too.
    pub fn succeeded(&self) -> bool {
        self.failed_sources().next().is_none() && self.failed() == 0
    }

    /// Resources fetched, verified and stored.
    pub fn fetched(&self) -> u64 {
        self.total(|r| r.fetched)
    }

    /// Resources already held.
    pub fn unchanged(&self) -> u64 {
        self.total(|r| r.unchanged)
    }

    /// Resources that failed.
    pub fn failed(&self) -> u64 {
        self.total(|r| r.failed)
    }

    /// Records marked deleted.
    pub fn deleted(&self) -> u64 {
        self.total(|r| r.deleted)
    }

    /// Bitstream bytes received.
    pub fn bytes(&self) -> u64 {
        self.total(|r| r.bytes)
    }

    /// Sources whose pass ended in an error (partial ones included).
    pub fn failed_sources(&self) -> impl Iterator<Item = &SourceReport> {
        self.sources.iter().filter(|r| r.error.is_some())
    }

    /// Sources whose pass failed part-way after doing something ([`SourceReport::partial`]).
    pub fn partial_sources(&self) -> usize {
        self.sources.iter().filter(|r| r.partial()).count()
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.duration.as_secs_f64();
        write!(
            f,
            "{} sources: fetched {}, unchanged {}, failed {}, deleted {}, {} bytes in {:.2}s ({:.0} resources/s)",
            self.sources.len(),
            self.fetched(),
            self.unchanged(),
            self.failed(),
            self.deleted(),
            self.bytes(),
            secs,
            self.fetched() as f64 / secs.max(1e-9),
        )?;
        let partial = self.partial_sources();
        if partial > 0 {
            write!(f, "; {partial} partial")?;
        }
        for r in self.sources.iter().filter(|r| r.held > 0) {
            let since = r.held_since.map(|t| format!(" since {t}")).unwrap_or_default();
            write!(
                f,
                "\n  {}: {} deletions held{since} (more than max_deletions): `tributary deletions --source {}`",
                r.source, r.held, r.source
            )?;
        }
        for r in self.failed_sources() {
            let error = r.error.as_deref().unwrap_or_default();
            if let Some(p) = &r.parked {
                write!(f, "\n  {}: parked: origin {} asked us to wait until {}", r.source, p.origin, p.until)?;
                continue;
            }
            match r.partial() {
                true => write!(
                    f,
                    "\n  {}: partial (fetched {}, unchanged {}, deleted {} kept): {error}",
                    r.source, r.fetched, r.unchanged, r.deleted
                )?,
                false => write!(f, "\n  {}: failed: {error}", r.source)?,
            }
        }
        Ok(())
    }
}

impl SourceReport {
    /// Counts what a committed batch did to the store.
    pub(crate) fn count_applied(&mut self, applied: &Applied) {
        for op in &applied.ops {
            match op.outcome {
                Outcome::Created => self.created += 1,
                Outcome::Updated => self.updated += 1,
                Outcome::Deleted => self.deleted += 1,
                Outcome::Staged => self.staged += 1,
                Outcome::TakenDown => self.taken_down += 1,
                Outcome::Unchanged => {}
            }
        }
    }
}
