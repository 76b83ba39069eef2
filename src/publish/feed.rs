//! A set as a FeedSync Atom feed (seed `002_…`): `feed.atom`, the set's most recent changes,
//! one entry per resource, and `feed-complete.atom` (with `feed-complete-{n}.atom` pages when
//! the set is large), every live and deleted resource in URI order. Feed readers follow the
//! first; a FeedSync endpoint reads the second once, as §4.1 says, then the first.
//!
//! What an entry carries:
//! - an item harvested from a feed is republished as FeedSync last left it (its merged
//!   `sx:sync`, history and conflicts): Tributary incorporates such items, it does not update
//!   them, so it adds no history of its own (§3.3);
//! - a resource from a ResourceSync Source gets an `sx:sync` made by Tributary: the id is its
//!   Tributary URI (unique, stable, and what every downstream names it by), `updates` counts
//!   its change events in the set, and one history entry, `by` the aggregator's
//!   `endpoint_id`, stands for them all (§3.2 allows keeping only the highest sequence per
//!   `by`). A deleted resource is a tombstone.
//!
//! `sx:sharing` `since`/`until` are change-log sequence numbers, zero-padded to 20 digits so
//! that string order is numeric order (§4, note 1). The complete feed is paged as RFC 5005 §3
//! says (`first`/`previous`/`next`/`last`), on the Resource List Index's partition, because a
//! listing of a changing set is not an archive: its pages change as the set does.

use std::collections::HashSet;
use std::io::Write;

use super::plan::{KeyRange, Layout};
use super::resources::ListJob;
use super::{PublishError, Publisher};
use crate::model::W3cDateTime;
use crate::model::feed::{
    AtomWriter, FeedHead, FeedItem, FeedLink, History, Related, RelatedKind, Sharing, Sync, read_item,
};
use crate::store::{Event, Record, Store, StoreError};

/// Entries of `feed.atom`: changes of the most recent this many events, one per resource.
pub const RECENT_EVENTS: u64 = 100;

/// What the feeds say of the aggregator and its upstreams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedOptions {
    /// The aggregator's FeedSync endpoint id (`by` of its own history entries).
    pub endpoint: String,
    /// `(source id, URL)` of each upstream — every feed of a feed source, a ResourceSync
    /// Source's configured URL — announced as `sx:related type="aggregated"` in the feeds of
    /// the sets that include it (seed §2.3.1).
    pub upstream: Vec<(String, String)>,
}

impl Publisher {
    /// Writes `feed.atom` of `set` to `out`: its resources changed in the last
    /// [`RECENT_EVENTS`] events, newest first. Returns the number of entries.
    ///
    /// # Errors
    /// [`PublishError::UnknownSet`], [`PublishError::Store`], [`PublishError::Write`].
    pub fn write_recent_feed(&self, set: &str, opts: &FeedOptions, out: impl Write) -> Result<u64, PublishError> {
        self.view_or_missing(set)?;
        let last = self.store.set_info(set)?.map_or(0, |i| i.events);
        let first = last.saturating_sub(RECENT_EVENTS);
        let events: Vec<Event> = self.store.events_after(set, first)?.collect::<Result<_, _>>()?;
        let mut seen = HashSet::new();
        let newest_first: Vec<&Event> = events.iter().rev().filter(|e| seen.insert(e.uri.clone())).collect();
        let url = self.naming.set_feed(set);
        let head = self.feed_head(set, opts, (first + 1, last), (url.clone(), vec![link("self", url)]))?;
        let mut w = AtomWriter::new(out, &head)?;
        let mut n = 0;
        for e in newest_first {
            if let Some(rec) = self.store.record(&e.uri)? {
                w.item(&self.feed_item(set, &rec, &opts.endpoint)?)?;
                n += 1;
            }
        }
        w.finish()?;
        Ok(n)
    }

    /// The feed head: id, title, `self` and `sx:sharing` with `since`/`until` (event seqs),
    /// the complete feed and, for each member source, the feed it was harvested from.
    fn feed_head(
        &self,
        set: &str,
        opts: &FeedOptions,
        (since, until): (u64, u64),
        (id, links): (String, Vec<FeedLink>),
    ) -> Result<FeedHead, PublishError> {
        let complete = self.naming.set_complete_feed(set, None);
        let mut related = vec![Related { link: complete.clone(), title: None, kind: RelatedKind::Complete }];
        let members = &self.view_or_missing(set)?.config.sources;
        for (source, feed) in opts.upstream.iter().filter(|(s, _)| members.contains(s)) {
            related.push(Related { link: feed.clone(), title: Some(source.clone()), kind: RelatedKind::Aggregated });
        }
        Ok(FeedHead {
            id,
            title: format!("Tributary set {set}"),
            updated: self.store.set_info(set)?.and_then(|i| i.last_change).unwrap_or_else(W3cDateTime::now),
            links,
            sharing: Some(Sharing {
                since: Some(format!("{since:020}")),
                until: Some(format!("{until:020}")),
                expires: None,
                related,
            }),
            author: Some("Tributary".into()),
        })
    }

    /// Which page of `set`'s complete feed `page` is (`None`: the first); `None` when the set
    /// has no such page.
    ///
    /// # Errors
    /// [`PublishError::UnknownSet`], [`PublishError::Store`].
    pub fn complete_feed_page(&self, set: &str, page: Option<u64>) -> Result<Option<FeedPage>, PublishError> {
        let view = self.view_or_missing(set)?;
        let pages: Vec<Option<u64>> = match self.validated_layout(&view)? {
            Layout::Single => vec![None],
            Layout::Index(nums) => nums.into_iter().map(Some).collect(),
        };
        let index = match page {
            None => 0,
            Some(n) => match pages.iter().position(|p| *p == Some(n)) {
                Some(i) => i,
                None => return Ok(None),
            },
        };
        let job = match pages[index] {
            None => ListJob { set: set.to_owned(), range: KeyRange::all(), part: false },
            Some(n) => match self.resource_list_part(set, n)? {
                Some(job) => job,
                None => return Ok(None),
            },
        };
        Ok(Some(FeedPage { job, pages, index }))
    }

    /// Writes one page of the complete feed: every resource of its range, live and deleted,
    /// in URI order. Returns the number of entries.
    ///
    /// # Errors
    /// [`PublishError::Store`] or [`PublishError::Write`]: the page is then incomplete.
    pub fn write_complete_feed(
        &self,
        page: &FeedPage,
        opts: &FeedOptions,
        out: impl Write,
    ) -> Result<u64, PublishError> {
        let set = page.job.set.as_str();
        let view = self.view_or_missing(set)?;
        let snap = self.store.snapshot();
        let last = snap.set_info(set)?.map_or(0, |i| i.events);
        // The first page is always `feed-complete.atom`, the feed's entry point.
        let url = |i: usize| self.naming.set_complete_feed(set, if i == 0 { None } else { page.pages[i] });
        let mut links =
            vec![link("self", url(page.index)), link("first", url(0)), link("last", url(page.pages.len() - 1))];
        if page.index > 0 {
            links.push(link("previous", url(page.index - 1)));
        }
        if page.index + 1 < page.pages.len() {
            links.push(link("next", url(page.index + 1)));
        }
        let head = self.feed_head(set, opts, (1, last), (url(0), links))?;
        let mut w = AtomWriter::new(out, &head)?;
        let mut n = 0;
        for raw in self.raw_records(&snap, &view, &page.job.range) {
            let rec = raw?.record()?;
            w.item(&self.feed_item(set, &rec, &opts.endpoint)?)?;
            n += 1;
        }
        w.finish()?;
        Ok(n)
    }

    /// The entry for `rec` in `set`.
    fn feed_item(&self, set: &str, rec: &Record, endpoint: &str) -> Result<FeedItem, PublishError> {
        if let Some(item) = self.harvested_item(rec)? {
            return Ok(item);
        }
        let events = self.store.history(&rec.uri)?.into_iter().filter(|(s, _)| s == set).count();
        let updates = u32::try_from(events.max(1)).unwrap_or(i32::MAX as u32).min(i32::MAX as u32);
        let when = rec.deleted.unwrap_or(rec.changed);
        Ok(FeedItem {
            id: Some(rec.uri.clone()),
            title: Some(rec.origin.clone()),
            link: Some(rec.uri.clone()),
            updated: Some(when),
            enclosure: None,
            sync: Some(Sync {
                id: rec.uri.clone(),
                updates,
                deleted: rec.is_deleted(),
                noconflicts: false,
                history: vec![History {
                    sequence: updates,
                    when: Some(whole_seconds(when)),
                    by: Some(endpoint.to_owned()),
                }],
                conflicts: Vec::new(),
            }),
            xml: String::new(),
        })
    }

    /// The FeedSync state of a record harvested from a feed, if it is one.
    fn harvested_item(&self, rec: &Record) -> Result<Option<FeedItem>, PublishError> {
        Ok(feed_item_state(&self.store, rec)?)
    }
}

/// The merged FeedSync state the store keeps for `rec` when it was harvested from a feed
/// source: the item its upstream URL names (the harvester appends `?sx-item=<identity>` to
/// the feed's URL, last). `None` for any other record, and for a state that cannot be read
/// back (it is then as if the record had none).
///
/// # Errors
/// [`StoreError`] when the store cannot be read.
pub(crate) fn feed_item_state(store: &Store, rec: &Record) -> Result<Option<FeedItem>, StoreError> {
    let Some(identity) = url::Url::parse(&rec.upstream)
        .ok()
        .and_then(|u| u.query_pairs().filter(|(k, _)| k == "sx-item").last().map(|(_, v)| v.into_owned()))
    else {
        return Ok(None);
    };
    let Some(bytes) = store.feed_item(&rec.source, &identity)? else { return Ok(None) };
    match read_item(&bytes, &rec.uri) {
        Ok(item) => Ok(Some(item)),
        Err(e) => {
            // Written by the harvester from a parsed item, so only a damaged row: the entry is
            // then made as for a ResourceSync resource rather than failing the whole feed.
            tracing::warn!(uri = %rec.uri, error = %e, "stored feed item state is unreadable");
            Ok(None)
        }
    }
}

/// One page of a complete feed, ready to write.
#[derive(Debug, Clone)]
pub struct FeedPage {
    job: ListJob,
    /// The feed's pages: `None` for a set in one page, else the Resource List parts.
    pages: Vec<Option<u64>>,
    index: usize,
}

fn link(rel: &str, href: String) -> FeedLink {
    FeedLink { rel: rel.to_owned(), href }
}

/// FeedSync datetimes are whole seconds (§2.1.5).
fn whole_seconds(t: W3cDateTime) -> W3cDateTime {
    W3cDateTime::from_unix(t.unix_timestamp(), 0).unwrap_or(t)
}
