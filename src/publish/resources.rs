//! Resource Lists (§10.1) and Resource List Indexes (§10.2) of a set, streamed.
//!
//! Serving is two steps so the web layer can answer 404 before it commits to a 200: a quick
//! decision ([`Publisher::resource_list`], [`Publisher::resource_list_part`]) that returns
//! either a small finished document (the index) or a [`ListJob`] naming a range of URIs, then
//! [`Publisher::write_list`], which streams the job's entries to any `Write` one record at a
//! time. Nothing proportional to the list is held in memory.
//!
//! `at` is the moment the request started: every state written is at least that recent,
//! which is all `at` promises. No `completed` is written: the header goes out before the last
//! record is read, and a time that is not yet known cannot be stated honestly.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use super::entries::resource_entry;
use super::links::{inherit, inherit_views};
use super::plan::{KeyRange, Layout};
use super::render::{self, Rendered};
use super::{PublishError, Publisher, SetView};
use crate::model::{Capability, DocumentWriter, Entry, Header, Link, Md, RootFormat, W3cDateTime};
use crate::store::{RawRecord, Record, Snapshot, StoreError};

/// What `resourcelist.xml` of a set is right now.
#[derive(Debug)]
pub enum ResourceListDoc {
    /// A Resource List Index, already written.
    Index(Vec<u8>),
    /// A single Resource List, to be streamed with [`Publisher::write_list`].
    List(ListJob),
}

/// A Resource List (whole or one part) to stream: which set and which range of URIs.
#[derive(Debug, Clone)]
pub struct ListJob {
    pub(super) set: String,
    pub(super) range: KeyRange,
    pub(super) part: bool,
}

impl Publisher {
    /// Decides what `resourcelist.xml` of `set` is, revalidating the set's partition first
    /// when the store has changed since (one scan of the set's records).
    ///
    /// # Errors
    /// [`PublishError::UnknownSet`]; [`PublishError::Store`].
    pub fn resource_list(&self, set: &str) -> Result<ResourceListDoc, PublishError> {
        let view = self.view_or_missing(set)?;
        let at = self.store.snapshot().at();
        let layout = self.validated_layout(&view)?;
        match layout {
            Layout::Single => {
                Ok(ResourceListDoc::List(ListJob { set: set.to_owned(), range: KeyRange::all(), part: false }))
            }
            Layout::Index(nums) => Ok(ResourceListDoc::Index(self.index_bytes(set, &nums, at)?)),
        }
    }

    /// Part `n` of `set`'s Resource List Index: `None` when no such part was ever defined.
    /// Retired parts (replaced after they grew past the limit) still answer with their range.
    ///
    /// # Errors
    /// [`PublishError::UnknownSet`]; [`PublishError::Store`] (building a first plan).
    pub fn resource_list_part(&self, set: &str, n: u64) -> Result<Option<ListJob>, PublishError> {
        let view = self.view_or_missing(set)?;
        let known = lock(&view.plan).part(n).cloned();
        let range = match known {
            Some(r) => Some(r),
            // After a restart no part is known until an index is built; build one now.
            None => {
                self.validated_layout(&view)?;
                lock(&view.plan).part(n).cloned()
            }
        };
        Ok(range.map(|range| ListJob { set: set.to_owned(), range, part: true }))
    }

    /// Streams `job` to `out`; returns the number of entries written.
    ///
    /// # Errors
    /// [`PublishError::Store`] when reading fails mid-way, [`PublishError::Write`] when `out`
    /// fails; either way the document is incomplete and must not be passed off as whole.
    pub fn write_list(&self, job: &ListJob, out: impl Write) -> Result<u64, PublishError> {
        let view = self.view_or_missing(&job.set)?;
        // The list is one snapshot, and its `at` is the snapshot's: every change stamped
        // before it is in the list, every later one is in the Change Lists after `at`.
        let snap = self.store.snapshot();
        let mut header = Header::new(
            RootFormat::UrlSet,
            Md { capability: Some(Capability::ResourceList), at: Some(snap.at()), ..Md::default() },
        );
        header.links.push(Link::new("up", self.naming.capability_list(&job.set)));
        if job.part {
            header.links.push(Link::new("index", self.naming.resource_list(&job.set)));
        }
        let mut w = DocumentWriter::new(out, &header)?;
        let mut n = 0;
        let mut buf = Vec::with_capacity(2048);
        let filter = lock(&view.upstreams).clone();
        let layout = self.layout();
        for raw in self.raw_records(&snap, &view, &job.range) {
            let raw = raw?;
            let v = raw.view()?;
            if v.is_deleted() {
                continue;
            }
            let policy = layout.policies.for_source(v.source);
            let kept = inherit_views(&v.links, policy, |href| self.republished_in(&view, filter.as_deref(), href))?;
            match render::resource_entry(&mut buf, &v, &kept) {
                Rendered::Done => w.write_rendered_entry(&buf)?,
                Rendered::NeedsModel => w.write_entry(&self.entry(&view, raw.record()?)?)?,
            }
            n += 1;
        }
        w.finish()?;
        Ok(n)
    }

    /// The set's records in `range` as of `snap`, in URI order, undecoded (live and deleted).
    pub(super) fn raw_records<'a>(
        &'a self,
        snap: &'a Snapshot,
        view: &'a SetView,
        range: &'a KeyRange,
    ) -> impl Iterator<Item = Result<RawRecord, StoreError>> + 'a {
        view.prefixes.iter().flat_map(move |p| snap.raw_records_in_range(p, &range.from, range.until.as_deref()))
    }

    /// The model path, for records the fast renderer leaves alone.
    pub(super) fn entry(&self, view: &SetView, rec: Record) -> Result<Entry, StoreError> {
        let layout = self.layout();
        let policy = layout.policies.for_source(&rec.source);
        let filter = lock(&view.upstreams).clone();
        let inherited = inherit(&rec.links, policy, |href| self.republished_in(view, filter.as_deref(), href))?;
        Ok(resource_entry(rec, inherited))
    }

    /// Tributary's URI for `href` when a live record of this set was harvested from it.
    ///
    /// This runs for every kept link of every entry, and most targets (schemas, pages
    /// elsewhere) are not republished. `filter` — the hashes of the set's upstream URIs at
    /// the last validation, each with its source — answers those without touching the store;
    /// a possible hit is confirmed by point lookups: the upstream index, and the record the
    /// source would have named after `href` (records fetched from their origin are found only
    /// by name). So a target harvested after the last validation (the index's `at`) is
    /// rewritten from the next validation on.
    pub(super) fn republished_in(
        &self,
        view: &SetView,
        filter: Option<&UpstreamFilter>,
        href: &str,
    ) -> Result<Option<String>, StoreError> {
        let sources = &view.config.sources;
        let named: Vec<String> = match filter.map(|f| f.get(&upstream_hash(href))) {
            Some(None) => return Ok(None),
            Some(Some(&i)) if i != SEVERAL => {
                sources.get(i as usize).and_then(|s| self.naming.resource(s, href)).into_iter().collect()
            }
            // Before the first validation, or several sources list `href`.
            _ => sources.iter().filter_map(|s| self.naming.resource(s, href)).collect(),
        };
        // `{base}r/{source}/…`: compare the source without parsing the whole URI.
        let in_set = |uri: &str| {
            let source =
                uri.strip_prefix(self.naming.base()).and_then(|r| r.strip_prefix("r/")).and_then(|r| r.split_once('/'));
            source.is_some_and(|(s, _)| sources.iter().any(|c| c == s))
        };
        Ok(self.store.uri_by_upstream(href, &named)?.filter(|u| in_set(u)))
    }

    /// The current layout, after revalidating when stale. Scans run one at a time per set and
    /// outside the plan's lock, so part requests are never held up by a scan.
    pub(super) fn validated_layout(&self, view: &SetView) -> Result<Layout, PublishError> {
        let _scan = lock(&view.plan_scan);
        let snap = self.store.snapshot();
        let seq = snap.set_info(&view.config.id)?.map_or(0, |i| i.events);
        let now = Instant::now();
        let (stale, mut plan) = {
            let p = lock(&view.plan);
            (p.is_stale(seq, now), p.clone())
        };
        if !stale {
            return Ok(plan.layout);
        }
        let all = KeyRange::all();
        let source_index: HashMap<&str, u32> =
            view.config.sources.iter().zip(0..).map(|(s, i)| (s.as_str(), i)).collect();
        let mut upstreams = UpstreamFilter::default();
        let uris = self.raw_records(&snap, view, &all).filter_map(|raw| {
            let uri = raw.and_then(|raw| {
                let v = raw.view()?;
                if v.is_deleted() {
                    return Ok(None);
                }
                let source = source_index.get(v.source).copied().unwrap_or(SEVERAL);
                upstreams
                    .entry(upstream_hash(v.upstream))
                    .and_modify(|s| *s = if *s == source { source } else { SEVERAL })
                    .or_insert(source);
                Ok(Some(v.uri.to_owned()))
            });
            uri.transpose()
        });
        let limit = self.limits().resource_list_entries;
        let before = plan.clone();
        plan.validate(uris, seq, now, limit, fill(limit))?;
        *lock(&view.upstreams) = Some(Arc::new(upstreams));
        if plan.numbering_differs(&before) {
            // Saved before any document names the new numbers, so no number handed out is lost.
            self.store.save_publisher_state(&plan_key(&view.config.id), &plan.to_bytes())?;
        }
        let layout = plan.layout.clone();
        *lock(&view.plan) = plan;
        Ok(layout)
    }

    fn index_bytes(&self, set: &str, nums: &[u64], at: W3cDateTime) -> Result<Vec<u8>, PublishError> {
        let mut header = Header::new(
            RootFormat::SitemapIndex,
            Md { capability: Some(Capability::ResourceList), at: Some(at), ..Md::default() },
        );
        header.links.push(Link::new("up", self.naming.capability_list(set)));
        let mut w = DocumentWriter::new(Vec::new(), &header)?;
        for &n in nums {
            w.write_entry(&Entry::new(self.naming.resource_list_part(set, n)))?;
        }
        Ok(w.finish()?)
    }
}

/// The hashes of a set's upstream URIs, each with the index of its source in the set's
/// config (or [`SEVERAL`]). The hashes are already uniformly distributed, so the map uses
/// them as they are rather than hashing them again.
pub(super) type UpstreamFilter = HashMap<u64, u32, BuildHasherDefault<AsIs>>;

/// An [`UpstreamFilter`] value: more than one source (or a hash collision) has this upstream.
const SEVERAL: u32 = u32::MAX;

/// A `Hasher` that passes a `u64` through.
#[derive(Default)]
pub(super) struct AsIs(u64);

impl Hasher for AsIs {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64s are ever hashed; keep any other input correct, if slow.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A 64-bit hash of an upstream URI, for the in-memory filter (never stored; collisions only
/// cost a lookup).
fn upstream_hash(uri: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    uri.hash(&mut h);
    h.finish()
}

/// Entries per new part: three quarters of the limit, leaving room to grow before a split.
fn fill(limit: usize) -> usize {
    (limit * 3 / 4).max(1)
}

/// Locks a mutex, recovering from poisoning: the guarded values are rebuilt from the store
/// and stay consistent even if a holder panicked.
pub(super) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The store row holding a set's partition (see `plan`).
pub(super) fn plan_key(set: &str) -> String {
    format!("plan/{set}")
}
