//! A set's Change List Index (§12.2): closed Change Lists, each a fixed range of the set's
//! change log, plus one open list of everything since.
//!
//! A list closes after `max_events` events, or at the end of the rollover period its first
//! event falls in (periods are aligned to the Unix epoch), whichever comes first. Boundaries
//! are a pure function of the log: list 1 starts at event 1, each list starts after the
//! previous one, and where it ends depends only on the events' datetimes and the count. So a
//! closed list's range, its `from`/`until` and therefore its bytes never change, across
//! requests and restarts, and can be cached for a year. The boundaries found so far are
//! remembered per set (they only ever grow), so finding the open list costs a few point reads.
//!
//! `from`/`until` are Tributary's times (§14.8): list 1 starts when the publisher first saw
//! the set empty (see [`Layout`]), or else at its first event; a list closed by its period
//! ends at the period's end, one closed by count at its last event; each list starts where the
//! previous one ended. A period may end with no later event to prove it: the list is then
//! closed only once the clock is past the period's end *and* the store holds no unflushed
//! events for the set (any event written later is stamped later still, see `docs/STORE.md`),
//! so no event can later appear inside a list already declared closed.

use std::io::Write;
use std::time::Duration;

use super::entries::change_entry;
use super::resources::lock;
use super::{PublishError, Publisher, SetView};
use crate::model::{Capability, DocumentWriter, Entry, Header, Link, Md, RootFormat, W3cDateTime};
use crate::store::{Event, Snapshot, Store, StoreError};

/// The most entries a sitemap document may hold.
const MAX_ENTRIES: u64 = 50_000;

/// One closed list: events `first..=last`, covering `from..until`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Closed {
    pub(super) first: u64,
    pub(super) last: u64,
    pub(super) from: W3cDateTime,
    pub(super) until: W3cDateTime,
}

/// The closed lists of one set found so far (append-only), and where its log starts.
#[derive(Debug, Default)]
pub(crate) struct Layout {
    closed: Vec<Closed>,
    /// When the publisher first started with the set still empty: its log is complete from
    /// then on, so list 1 starts there rather than at its first event. Otherwise a Destination
    /// that baselined from the empty set's Resource List (its `at` before the first event)
    /// would find the Change Lists starting after its baseline, a gap, and re-baseline.
    start: Option<W3cDateTime>,
}

impl Layout {
    /// The layout of `set` as the publisher starts. A set with no events gets its start now,
    /// saved so that list 1's `from` stays the same across restarts; a set with events keeps
    /// the start saved before, or none (list 1 then starts at its first event).
    pub(super) fn starting(store: &Store, set: &str) -> Result<Layout, StoreError> {
        let key = format!("log-start/{set}");
        let saved = store.publisher_state(&key)?.and_then(|b| String::from_utf8(b).ok()).and_then(|s| s.parse().ok());
        let start = match saved {
            Some(t) => Some(t),
            None => seen_empty(store, set, &key)?,
        };
        Ok(Layout { closed: Vec::new(), start })
    }

    /// Where list 1 starts, given the set's first event (if any) and the moment asked.
    fn first_from(&self, first: Option<W3cDateTime>, now: W3cDateTime) -> W3cDateTime {
        match (self.start, first) {
            (Some(s), Some(f)) => s.min(f),
            (Some(s), None) => s,
            (None, Some(f)) => f,
            (None, None) => now,
        }
    }
}

/// Now, saved under `key` as the start of `set`'s log, if the set has no events yet.
fn seen_empty(store: &Store, set: &str, key: &str) -> Result<Option<W3cDateTime>, StoreError> {
    // Events written after this snapshot are stamped after its moment.
    let snap = store.snapshot();
    if snap.set_info(set)?.is_some_and(|i| i.events > 0) {
        return Ok(None);
    }
    let at = snap.at();
    if let Err(e) = store.save_publisher_state(key, at.to_string().as_bytes()) {
        tracing::warn!(set, error = %crate::error::chain(&e), "could not save where the set's change log starts; its first Change List will start at its first event");
        return Ok(None);
    }
    Ok(Some(at))
}

/// What `changelist-{n}.xml` is.
#[derive(Debug)]
pub enum ChangeListDoc {
    /// A closed list, written in full; its bytes never change.
    Closed(Vec<u8>),
    /// The open list, to stream with [`Publisher::write_open_change_list`].
    Open(OpenChangeList),
}

/// The open Change List as of the moment it was asked for: events `first..=last`.
#[derive(Debug, Clone)]
pub struct OpenChangeList {
    set: String,
    first: u64,
    last: u64,
    from: W3cDateTime,
}

/// The open list's start and the visible log length, after extending the closed lists.
pub(super) struct State {
    pub(super) closed: Vec<Closed>,
    pub(super) open_from: W3cDateTime,
    pub(super) visible: u64,
}

impl Publisher {
    /// The Change List Index of `set`: every closed list, then the open one.
    ///
    /// # Errors
    /// [`PublishError::UnknownSet`]; [`PublishError::Store`].
    pub fn change_list_index(&self, set: &str) -> Result<Vec<u8>, PublishError> {
        let view = self.view_or_missing(set)?;
        let st = self.extend(&view)?;
        let from = st.closed.first().map_or(st.open_from, |c| c.from);
        let md = Md { capability: Some(Capability::ChangeList), from: Some(from), ..Md::default() };
        let mut header = Header::new(RootFormat::SitemapIndex, md);
        header.links.push(Link::new("up", self.naming.capability_list(set)));
        let mut w = DocumentWriter::new(Vec::new(), &header)?;
        for (i, c) in st.closed.iter().enumerate() {
            let mut e = Entry::new(self.naming.change_list_part(set, i as u64 + 1));
            e.md = Some(Md { from: Some(c.from), until: Some(c.until), ..Md::default() });
            w.write_entry(&e)?;
        }
        let mut open = Entry::new(self.naming.change_list_part(set, st.closed.len() as u64 + 1));
        open.md = Some(Md { from: Some(st.open_from), ..Md::default() });
        w.write_entry(&open)?;
        Ok(w.finish()?)
    }

    /// The Change List the Capability List names (`changelist.xml`): the open list and the
    /// closed one before it, as one open list from that closed list's `from`. A Destination
    /// that reads only plain Change Lists (the Python reference client) then finds every
    /// change since its last sync in one document, across a rollover, as long as it syncs
    /// once per list; the index and its fixed lists stay for Destinations that follow them.
    /// The closed list is left out when both would pass the 50,000 entries of a document.
    ///
    /// # Errors
    /// [`PublishError::UnknownSet`]; [`PublishError::Store`].
    pub fn recent_change_list(&self, set: &str) -> Result<OpenChangeList, PublishError> {
        let view = self.view_or_missing(set)?;
        let st = self.extend(&view)?;
        let open_first = st.closed.last().map_or(1, |c| c.last + 1);
        let (first, from) = match st.closed.last() {
            Some(c) if st.visible.saturating_sub(c.first) < MAX_ENTRIES => (c.first, c.from),
            _ => (open_first, st.open_from),
        };
        Ok(OpenChangeList { set: set.to_owned(), first, last: st.visible, from })
    }

    /// Change List `n` of `set`: closed (written in full), open, or `None` past the open one.
    ///
    /// # Errors
    /// [`PublishError::UnknownSet`]; [`PublishError::Store`].
    pub fn change_list(&self, set: &str, n: u64) -> Result<Option<ChangeListDoc>, PublishError> {
        let view = self.view_or_missing(set)?;
        let st = self.extend(&view)?;
        let closed = st.closed.len() as u64;
        if n >= 1 && n <= closed {
            let c = st.closed[(n - 1) as usize];
            let mut out = Vec::new();
            self.write_changes(set, c.first, c.last, c.from, Some(c.until), &mut out)?;
            return Ok(Some(ChangeListDoc::Closed(out)));
        }
        if n == closed + 1 {
            let first = st.closed.last().map_or(1, |c| c.last + 1);
            let open = OpenChangeList { set: set.to_owned(), first, last: st.visible, from: st.open_from };
            return Ok(Some(ChangeListDoc::Open(open)));
        }
        Ok(None)
    }

    /// Streams an open Change List (exactly the events it was decided with).
    ///
    /// # Errors
    /// [`PublishError::Store`] or [`PublishError::Write`]: the output is then incomplete.
    pub fn write_open_change_list(&self, list: &OpenChangeList, out: impl Write) -> Result<u64, PublishError> {
        self.write_changes(&list.set, list.first, list.last, list.from, None, out)
    }

    fn write_changes(
        &self,
        set: &str,
        first: u64,
        last: u64,
        from: W3cDateTime,
        until: Option<W3cDateTime>,
        out: impl Write,
    ) -> Result<u64, PublishError> {
        let md = Md { capability: Some(Capability::ChangeList), from: Some(from), until, ..Md::default() };
        let mut header = Header::new(RootFormat::UrlSet, md);
        header.links.push(Link::new("up", self.naming.capability_list(set)));
        header.links.push(Link::new("index", self.naming.change_list_index(set)));
        let mut w = DocumentWriter::new(out, &header)?;
        let mut n = 0;
        if first <= last {
            for ev in self.store.events_after(set, first - 1)?.take((last - first + 1) as usize) {
                w.write_entry(&change_entry(ev?))?;
                n += 1;
            }
        }
        w.finish()?;
        Ok(n)
    }

    /// Closes every list that can be closed now; returns the layout and the open list's start.
    pub(super) fn extend(&self, view: &SetView) -> Result<State, PublishError> {
        let set = view.config.id.as_str();
        // One snapshot, and its moment as "now": every event stamped before it is in it, so a
        // list closed by its period's end can never gain an event later (see the module docs).
        let snap = self.store.snapshot();
        let now = snap.at();
        let mut layout = lock(&view.changes);
        let visible = snap.set_info(set)?.map_or(0, |i| i.events);
        loop {
            let s = layout.closed.last().map_or(1, |c| c.last + 1);
            let Some(first) = (s <= visible).then(|| event_at(&snap, set, s)).transpose()?.flatten() else { break };
            let from = layout.closed.last().map_or_else(|| layout.first_from(Some(first.datetime), now), |c| c.until);
            let Some((last, until)) = self.close_point(&snap, set, s, &first, visible, now)? else { break };
            layout.closed.push(Closed { first: s, last, from, until });
        }
        let open_from = match layout.closed.last() {
            Some(c) => c.until,
            None => layout.first_from(event_at(&snap, set, 1)?.map(|e| e.datetime), now),
        };
        Ok(State { closed: layout.closed.clone(), open_from, visible })
    }

    /// Where the list starting at event `s` ends, if it has ended: `(last seq, until)`.
    fn close_point(
        &self,
        snap: &Snapshot,
        set: &str,
        s: u64,
        first: &Event,
        visible: u64,
        now: W3cDateTime,
    ) -> Result<Option<(u64, W3cDateTime)>, StoreError> {
        let count_end = s + self.limits().change_list.max_events - 1;
        if let Some(end) = self.limits().change_list.period.and_then(|p| period_end(first.datetime, p)) {
            match snap.events_between(set, Some(&end), None)?.next().transpose()? {
                Some(q) if q.seq - 1 <= count_end => return Ok(Some((q.seq - 1, end))),
                None if count_end > visible && now >= end => return Ok(Some((visible, end))),
                _ => {}
            }
        }
        if count_end <= visible {
            let last = event_at(snap, set, count_end)?;
            return Ok(last.map(|e| (count_end, e.datetime)));
        }
        Ok(None)
    }
}

/// Event `seq` of `set` in `snap`.
fn event_at(snap: &Snapshot, set: &str, seq: u64) -> Result<Option<Event>, StoreError> {
    Ok(snap.events_after(set, seq - 1)?.next().transpose()?.filter(|e| e.seq == seq))
}

/// The end of the epoch-aligned period that `t` falls in; `None` past the year 9999 (such a
/// period never ends within the format, and the list then closes by count only).
fn period_end(t: W3cDateTime, period: Duration) -> Option<W3cDateTime> {
    let p = i64::try_from(period.as_secs()).unwrap_or(i64::MAX).max(1);
    let end = t.unix_timestamp().div_euclid(p).saturating_add(1).saturating_mul(p);
    W3cDateTime::from_unix(end, 0).ok().filter(|e| *e > t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{HashList, ReadOptions, read_document};
    use crate::naming::Naming;
    use crate::publish::{Limits, LinkPolicies, SetConfig};
    use crate::store::{Batch, Expected, Listing, NewRecord, StoreOptions, Via};

    fn naming() -> Naming {
        Naming::new(&url::Url::parse("http://t.test/").unwrap())
    }

    fn publisher(store: &Store) -> Publisher {
        Publisher::new(
            store.clone(),
            naming(),
            vec![SetConfig::source("a")],
            LinkPolicies::default(),
            Limits::default(),
        )
        .unwrap()
    }

    fn add(store: &Store, i: usize) {
        let info = store.put(format!("content {i}").as_bytes(), &Expected::none()).unwrap();
        let upstream = format!("http://up.test/{i}");
        let listing = Listing {
            origin: upstream.clone(),
            declared: HashList::default(),
            length: None,
            media_type: None,
            lastmod: None,
            via: Via::default(),
            links: Vec::new(),
        };
        let uri = naming().resource("a", &upstream).unwrap();
        let mut batch = Batch::new();
        batch.upsert(&["a"], NewRecord { uri, source: "a".into(), upstream, sha256: info.id, listing });
        store.apply(&mut batch).unwrap();
    }

    fn index_from(p: &Publisher) -> W3cDateTime {
        let bytes = p.change_list_index("a").unwrap();
        read_document(&bytes, ReadOptions::named("index")).unwrap().0.header.md.unwrap().from.unwrap()
    }

    /// A Destination that baselined from the empty set's Resource List (its `at`) must find
    /// the Change Lists starting no later, before and after the first event and a restart.
    #[test]
    fn the_log_of_a_set_served_empty_starts_before_its_first_event() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_with(&dir.path().join("s"), &StoreOptions::small()).unwrap();
        let p = publisher(&store);
        let baseline_at = p.store.snapshot().at();
        let empty_from = index_from(&p);
        assert!(empty_from <= baseline_at, "{empty_from} > {baseline_at}");
        add(&store, 1);
        let first = store.events_after("a", 0).unwrap().next().unwrap().unwrap().datetime;
        assert!(first > baseline_at);
        assert_eq!(index_from(&p), empty_from, "list 1 keeps starting where the empty set was first seen");
        let restarted = publisher(&store);
        assert_eq!(index_from(&restarted), empty_from);
        // A set first served with events (as in a store older than this rule) starts at its
        // first event, as before.
        let other = tempfile::tempdir().unwrap();
        let store = Store::open_with(&other.path().join("s"), &StoreOptions::small()).unwrap();
        add(&store, 1);
        let first = store.events_after("a", 0).unwrap().next().unwrap().unwrap().datetime;
        assert_eq!(index_from(&publisher(&store)), first);
    }

    #[test]
    fn periods_align_to_the_epoch() {
        let t: W3cDateTime = "2024-05-01T10:17:03Z".parse().unwrap();
        let end = |t: W3cDateTime, secs| period_end(t, Duration::from_secs(secs)).unwrap().to_string();
        assert_eq!(end(t, 3600), "2024-05-01T11:00:00Z");
        assert_eq!(end(t, 86_400), "2024-05-02T00:00:00Z");
        assert_eq!(end("2024-05-01T11:00:00Z".parse().unwrap(), 3600), "2024-05-01T12:00:00Z");
        assert_eq!(period_end("9999-12-31T23:00:00Z".parse().unwrap(), Duration::from_secs(86_400)), None);
    }
}
