//! What a simulated Source looks like and how it changes: size of the set, bitstream sizes,
//! change rate and mix, list limits, Change List rollover and retention, optional features.
//!
//! Validated once, by [`SimConfig::validate`], so the rest of the simulator can rely on the
//! invariants (`min_size <= max_size`, a limit within the Sitemap protocol's, a usable mix).

use std::time::Duration;

use url::Url;

use super::SimError;
use crate::model::SITEMAP_MAX_ENTRIES;
use crate::model::W3cDateTime;

/// Relative weights of the three kinds of change; each event picks one in proportion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeMix {
    /// Weight of `created`.
    pub create: u32,
    /// Weight of `updated`.
    pub update: u32,
    /// Weight of `deleted`.
    pub delete: u32,
}

impl Default for ChangeMix {
    /// 10% creates, 80% updates, 10% deletes: the set stays about the same size.
    fn default() -> Self {
        ChangeMix { create: 10, update: 80, delete: 10 }
    }
}

impl ChangeMix {
    fn total(&self) -> u64 {
        u64::from(self.create) + u64::from(self.update) + u64::from(self.delete)
    }
}

impl std::str::FromStr for ChangeMix {
    type Err = String;

    /// Parses `create,update,delete`, e.g. `10,80,10`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        let [c, u, d] = parts.as_slice() else {
            return Err(format!("`{s}`: expected three weights `create,update,delete`, e.g. 10,80,10"));
        };
        let num = |v: &str| v.parse::<u32>().map_err(|e| format!("`{v}` in `{s}`: {e}"));
        Ok(ChangeMix { create: num(c)?, update: num(u)?, delete: num(d)? })
    }
}

/// When the open Change List is closed and a new one opened.
///
/// Whichever limit is reached first closes the list. A list never holds more than the
/// configured `list_limit` entries, whatever `count` says, so no Change List needs splitting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rollover {
    /// Close after this many changes.
    pub count: Option<usize>,
    /// Close once this much (simulated) time has passed since the list's `from`, at the next
    /// change or tick; a list without changes stays open.
    pub period: Option<Duration>,
}

impl Default for Rollover {
    fn default() -> Self {
        Rollover { count: Some(500), period: None }
    }
}

/// Where the simulator's time comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClockMode {
    /// Simulated time: starts at `start` and moves only when changes are applied (by one event
    /// interval each) or when [`Simulator::advance`](super::Simulator::advance) is called.
    /// Same seed and same calls give byte-identical documents.
    #[default]
    Virtual,
    /// Wall-clock time measured on tokio's clock from `start` (default: now), for a source that
    /// changes in real time while Destinations poll it.
    Real,
}

/// The whole configuration of one simulated Source.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The URL the Source is reachable at (documents use absolute URIs under it).
    pub base_url: Url,
    /// Resources at the start.
    pub resources: usize,
    /// Smallest bitstream, in bytes.
    pub min_size: u64,
    /// Largest bitstream, in bytes.
    pub max_size: u64,
    /// Change events per second when ticking (and the spacing of events in virtual time).
    pub change_rate_per_sec: f64,
    /// The mix of creates, updates and deletes.
    pub mix: ChangeMix,
    /// Seed of every pseudo-random choice and of the bitstreams' content.
    pub seed: u64,
    /// Entries per document; a larger Resource List becomes an index of parts.
    pub list_limit: usize,
    /// When Change Lists close.
    pub rollover: Rollover,
    /// Closed Change Lists kept; older ones are dropped and the index's `from` moves forward.
    pub keep_closed_lists: usize,
    /// Serve a Resource Dump (ZIP packages with `manifest.xml`).
    pub dump: bool,
    /// Pose as an aggregator: every entry carries a `via` link to `<via_origin>/res/<id>`.
    pub via_origin: Option<Url>,
    /// Add inherited-style links (`describedby` to a metadata resource served by this Source,
    /// `describes` back, `canonical`, `collection`).
    pub links: bool,
    /// Push: serve a WebSub hub at `{base}hub`, advertise the change-notification channel
    /// `{base}notifications` in the Capability List, and notify each batch of changes.
    pub push: bool,
    /// Where time comes from.
    pub clock: ClockMode,
    /// The clock's starting instant; `None` means 2025-01-01T00:00:00Z for the virtual clock
    /// (reproducible) and the current time for the real one.
    pub start: Option<W3cDateTime>,
}

impl SimConfig {
    /// The defaults, serving at `base_url`: 1,000 resources of 100–2,000 bytes, one change per
    /// second (10/80/10), seed 1, 50,000 entries per document, Change Lists of 500 changes,
    /// 50 closed lists kept, no dump, no `via`, no extra links, no push, virtual clock.
    pub fn new(base_url: Url) -> Self {
        SimConfig {
            base_url,
            resources: 1_000,
            min_size: 100,
            max_size: 2_000,
            change_rate_per_sec: 1.0,
            mix: ChangeMix::default(),
            seed: 1,
            list_limit: SITEMAP_MAX_ENTRIES,
            rollover: Rollover::default(),
            keep_closed_lists: 50,
            dump: false,
            via_origin: None,
            links: false,
            push: false,
            clock: ClockMode::Virtual,
            start: None,
        }
    }

    /// Checks every invariant the simulator relies on.
    ///
    /// # Errors
    /// [`SimError::Config`] naming the first offending setting.
    pub fn validate(&self) -> Result<(), SimError> {
        let bad = |msg: String| Err(SimError::Config(msg));
        if !matches!(self.base_url.scheme(), "http" | "https") || self.base_url.cannot_be_a_base() {
            return bad(format!("base URL {} is not an http(s) URL", self.base_url));
        }
        if self.base_url.query().is_some() || self.base_url.fragment().is_some() {
            return bad(format!("base URL {} must not have a query or fragment", self.base_url));
        }
        if self.min_size > self.max_size {
            return bad(format!("min size {} is larger than max size {}", self.min_size, self.max_size));
        }
        if !(self.change_rate_per_sec.is_finite() && self.change_rate_per_sec >= 0.0) {
            return bad(format!("change rate {} is not a non-negative number", self.change_rate_per_sec));
        }
        if self.mix.total() == 0 {
            return bad("the change mix has no weight at all".into());
        }
        if !(2..=SITEMAP_MAX_ENTRIES).contains(&self.list_limit) {
            return bad(format!("list limit {} is outside 2..={SITEMAP_MAX_ENTRIES}", self.list_limit));
        }
        if self.rollover.count == Some(0) || self.rollover.period == Some(Duration::ZERO) {
            return bad("a rollover count or period of zero would close every list at once".into());
        }
        if !(1..SITEMAP_MAX_ENTRIES).contains(&self.keep_closed_lists) {
            return bad(format!("closed lists kept must be 1..{SITEMAP_MAX_ENTRIES} (the index holds them all)"));
        }
        if let Some(origin) = self.via_origin.as_ref().filter(|o| !matches!(o.scheme(), "http" | "https")) {
            return bad(format!("via origin {origin} is not an http(s) URL"));
        }
        Ok(())
    }

    /// The most changes one Change List holds.
    pub(crate) fn changes_per_list(&self) -> usize {
        let count = self.rollover.count.unwrap_or(usize::MAX);
        count.min(self.list_limit)
    }

    /// Resource ids per Resource List part. With links on, each id also has a metadata
    /// resource, so a part of `list_limit` entries holds half as many ids.
    pub(crate) fn ids_per_part(&self) -> u64 {
        let per_id = if self.links { 2 } else { 1 };
        (self.list_limit / per_id).max(1) as u64
    }

    /// Spacing of events in virtual time, in milliseconds (1 s when the rate is zero).
    pub(crate) fn event_interval_ms(&self) -> i64 {
        if self.change_rate_per_sec > 0.0 { ((1000.0 / self.change_rate_per_sec).round() as i64).max(1) } else { 1000 }
    }

    /// Picks the kind of change for a random draw `r`.
    pub(crate) fn pick(&self, r: u64) -> crate::model::Change {
        use crate::model::Change;
        let r = r % self.mix.total();
        if r < u64::from(self.mix.create) {
            Change::Created
        } else if r < u64::from(self.mix.create) + u64::from(self.mix.update) {
            Change::Updated
        } else {
            Change::Deleted
        }
    }
}
