//! The simulated Source's mutable state and the one place it changes: [`State::apply_event`].
//!
//! Memory is O(resources + retained history): a resource is its version, times and digests
//! (bytes are regenerated, see `content`), a change is one small record, and closed Change
//! Lists beyond the configured number are dropped whole. Closed lists are rendered once, when
//! they close, and served from those bytes ever after, so they cannot change.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;
use std::sync::Arc;

use super::clock::Clock;
use super::content::{self, Digests, SplitMix};
use super::render::Site;
use crate::model::Change;

/// The two kinds of resource a simulated Source serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Target {
    /// `/res/<id>`, the data bitstream.
    Data(u64),
    /// `/meta/<id>`, the metadata record about it (only with links on).
    Meta(u64),
}

/// One live resource id: its data bitstream and, with links on, its metadata record.
#[derive(Debug, Clone)]
pub(crate) struct Resource {
    pub(crate) version: u32,
    pub(crate) data_ms: i64,
    pub(crate) data: Digests,
    pub(crate) meta: Option<(i64, Digests)>,
}

/// One resource as listed: what a Resource List entry or manifest entry says about it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Listed {
    pub(crate) target: Target,
    pub(crate) version: u32,
    pub(crate) lastmod_ms: i64,
    pub(crate) digests: Digests,
}

/// One change, as a Change List entry reports it.
#[derive(Debug, Clone)]
pub(crate) struct ChangeRecord {
    pub(crate) target: Target,
    pub(crate) change: Change,
    pub(crate) datetime_ms: i64,
    pub(crate) version: u32,
    /// `None` for deletes.
    pub(crate) digests: Option<Digests>,
}

/// The Change List still receiving changes.
#[derive(Debug, Clone)]
pub(crate) struct OpenList {
    pub(crate) seq: u64,
    pub(crate) from_ms: i64,
    pub(crate) changes: Vec<ChangeRecord>,
}

/// A Change List that will never change again.
#[derive(Debug)]
pub(crate) struct ClosedList {
    pub(crate) seq: u64,
    pub(crate) from_ms: i64,
    pub(crate) until_ms: i64,
    pub(crate) changes: Vec<ChangeRecord>,
    pub(crate) bytes: Arc<[u8]>,
}

/// Everything that changes. Guarded by the simulator's lock; see the module docs.
#[derive(Debug)]
pub(crate) struct State {
    rng: SplitMix,
    pub(crate) clock: Clock,
    /// Bumped by every applied event: names a snapshot of the resource set.
    pub(crate) generation: u64,
    /// Ids below this that are not live were deleted (served as 410 Gone).
    pub(crate) next_id: u64,
    pub(crate) resources: BTreeMap<u64, Resource>,
    pub(crate) open: OpenList,
    pub(crate) closed: VecDeque<ClosedList>,
    pub(crate) dropped_changes: u64,
    /// The instant the current resource set became true: the last change, or the start.
    pub(crate) state_ms: i64,
    /// With push on: the changes not yet notified, in the order applied.
    pub(crate) outbox: Option<Vec<ChangeRecord>>,
}

const THIRTY_DAYS_SECS: u64 = 30 * 24 * 3600;

impl State {
    /// The initial set: ids `0..resources` at version 1, last modified at pseudo-random whole
    /// seconds within the 30 days before the clock's start.
    pub(crate) fn new(site: &Site) -> Self {
        let cfg = &site.config;
        let clock = Clock::new(cfg.clock, cfg.start);
        let start = clock.now_ms();
        let mut rng = SplitMix::new(cfg.seed);
        let mut resources = BTreeMap::new();
        for id in 0..cfg.resources as u64 {
            let ago_ms = (rng.next_u64() % THIRTY_DAYS_SECS) as i64 * 1000;
            let t = start - start.rem_euclid(1000) - ago_ms;
            resources.insert(id, new_resource(cfg, id, 1, t, t));
        }
        State {
            rng,
            clock,
            generation: 0,
            next_id: cfg.resources as u64,
            resources,
            open: OpenList { seq: 1, from_ms: start, changes: Vec::new() },
            closed: VecDeque::new(),
            dropped_changes: 0,
            state_ms: start,
            outbox: cfg.push.then(Vec::new),
        }
    }

    /// Applies one create, update or delete, closing Change Lists as the rollover rules say.
    pub(crate) fn apply_event(&mut self, site: &Site) {
        let cfg = &site.config;
        if self.clock.is_virtual() {
            self.clock.advance(cfg.event_interval_ms());
        }
        self.roll_if_due(site);
        let per_event = if cfg.links { 2 } else { 1 };
        let cap = cfg.changes_per_list().max(per_event);
        if !self.open.changes.is_empty() && self.open.changes.len() + per_event > cap {
            self.close_at_last_change(site);
        }
        let draw = self.rng.next_u64();
        match (cfg.pick(draw), self.pick_live()) {
            (Change::Updated, Some(id)) => self.update(site, id),
            (Change::Deleted, Some(id)) => self.delete(id),
            _ => self.create(site),
        }
        self.generation += 1;
        if self.open.changes.len() >= cap {
            self.close_at_last_change(site);
        }
    }

    /// Closes the open list if its period is over and it has changes. A list without changes
    /// stays open, so idle time produces no empty lists and no gaps between `until` and `from`.
    pub(crate) fn roll_if_due(&mut self, site: &Site) {
        let Some(period) = site.config.rollover.period else { return };
        let Some(last) = self.open.changes.last() else { return };
        let boundary = self.open.from_ms + period.as_millis() as i64;
        if self.clock.now_ms() >= boundary {
            let until = boundary.max(last.datetime_ms);
            self.clock.observe(until);
            self.close(until, site);
        }
    }

    /// Closes the open list now, even if it is empty (for tests and operators).
    pub(crate) fn force_close(&mut self, site: &Site) {
        let until = self.clock.issue();
        self.close(until, site);
    }

    fn close_at_last_change(&mut self, site: &Site) {
        let until = self.open.changes.last().map_or(self.open.from_ms, |c| c.datetime_ms);
        self.close(until, site);
    }

    fn close(&mut self, until_ms: i64, site: &Site) {
        let next = OpenList { seq: self.open.seq + 1, from_ms: until_ms, changes: Vec::new() };
        let list = std::mem::replace(&mut self.open, next);
        let bytes = site.closed_change_list(&list, until_ms).into();
        tracing::debug!(changelist.seq = list.seq, changes = list.changes.len(), "change list closed");
        let OpenList { seq, from_ms, changes } = list;
        self.closed.push_back(ClosedList { seq, from_ms, until_ms, changes, bytes });
        while self.closed.len() > site.config.keep_closed_lists {
            if let Some(old) = self.closed.pop_front() {
                self.dropped_changes += old.changes.len() as u64;
            }
        }
    }

    /// A live id, roughly uniformly: the first live id at or after a random point. Ids after a
    /// run of deleted ones are a little more likely; a simulator can live with that, and it
    /// needs no second index.
    fn pick_live(&mut self) -> Option<u64> {
        let point = self.rng.next_u64() % self.next_id.max(1);
        let found = self.resources.range(point..).next().or_else(|| self.resources.iter().next());
        found.map(|(id, _)| *id)
    }

    fn create(&mut self, site: &Site) {
        let id = self.next_id;
        self.next_id += 1;
        self.put(site, id, 1, Change::Created);
    }

    fn update(&mut self, site: &Site, id: u64) {
        let version = self.resources.get(&id).map_or(1, |r| r.version + 1);
        self.put(site, id, version, Change::Updated);
    }

    fn put(&mut self, site: &Site, id: u64, version: u32, change: Change) {
        let data_ms = self.clock.issue();
        let meta_ms = if site.config.links { self.clock.issue() } else { data_ms };
        let r = new_resource(&site.config, id, version, data_ms, meta_ms);
        self.record(Target::Data(id), change, data_ms, version, Some(r.data));
        if let Some((t, digests)) = r.meta {
            self.record(Target::Meta(id), change, t, version, Some(digests));
        }
        self.resources.insert(id, r);
    }

    fn delete(&mut self, id: u64) {
        let Some(r) = self.resources.remove(&id) else { return };
        let t = self.clock.issue();
        self.record(Target::Data(id), Change::Deleted, t, r.version, None);
        if r.meta.is_some() {
            let t = self.clock.issue();
            self.record(Target::Meta(id), Change::Deleted, t, r.version, None);
        }
    }

    fn record(&mut self, target: Target, change: Change, datetime_ms: i64, version: u32, digests: Option<Digests>) {
        let c = ChangeRecord { target, change, datetime_ms, version, digests };
        if let Some(outbox) = &mut self.outbox {
            outbox.push(c.clone());
        }
        self.open.changes.push(c);
        self.state_ms = datetime_ms;
    }

    /// The changes applied since the last call (push on; empty otherwise).
    pub(crate) fn take_outbox(&mut self) -> Vec<ChangeRecord> {
        self.outbox.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The listed resources with ids in `ids`, data before metadata for each id.
    pub(crate) fn listed(&self, ids: Range<u64>) -> impl Iterator<Item = Listed> + '_ {
        self.resources.range(ids).flat_map(|(&id, r)| listed_of(id, r))
    }

    /// Number of listed entries (data plus metadata resources).
    pub(crate) fn listed_count(&self, links: bool) -> usize {
        self.resources.len() * if links { 2 } else { 1 }
    }

    /// The retained changes, oldest first.
    pub(crate) fn history(&self) -> impl Iterator<Item = &ChangeRecord> {
        self.closed.iter().flat_map(|l| l.changes.iter()).chain(self.open.changes.iter())
    }

    /// The `from` of the oldest retained Change List.
    pub(crate) fn first_from_ms(&self) -> i64 {
        self.closed.front().map_or(self.open.from_ms, |l| l.from_ms)
    }
}

/// How resource `id` is listed: its data bitstream, then its metadata record if any.
pub(crate) fn listed_of(id: u64, r: &Resource) -> impl Iterator<Item = Listed> + use<> {
    let data = Listed { target: Target::Data(id), version: r.version, lastmod_ms: r.data_ms, digests: r.data };
    let meta =
        r.meta.map(|(t, digests)| Listed { target: Target::Meta(id), version: r.version, lastmod_ms: t, digests });
    std::iter::once(data).chain(meta)
}

fn new_resource(cfg: &super::SimConfig, id: u64, version: u32, data_ms: i64, meta_ms: i64) -> Resource {
    let size = content::size_of(cfg.seed, id, version, cfg.min_size, cfg.max_size);
    let data = Digests::of(&content::data_body(cfg.seed, id, version, size));
    let meta = cfg.links.then(|| (meta_ms, Digests::of(&content::meta_body(id, version, &data))));
    Resource { version, data_ms, data, meta }
}

/// The bytes of `target` as it is now, or `None` if it is not live.
pub(crate) fn body(cfg: &super::SimConfig, target: Target, r: &Resource) -> Option<Vec<u8>> {
    match target {
        Target::Data(id) => Some(content::data_body(cfg.seed, id, r.version, r.data.length)),
        Target::Meta(id) => r.meta.map(|_| content::meta_body(id, r.version, &r.data)),
    }
}
