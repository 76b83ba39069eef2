//! Change notifications (ResourceSync Change Notification 1.0.1): the payloads Tributary
//! pushes for each batch of committed change events, and where it has got to.
//!
//! A payload is a `<urlset>` whose root `<rs:md capability="change-notification">` carries
//! `from` and `until`, with `<rs:ln rel="up">` to the set's Capability List and one entry per
//! change event in log order (forward chronological, §3). Entries are the set's Change List
//! entries, written by the same function (`entries::change_entry`), so a Destination sees the
//! same `loc`, `lastmod`, `rs:md` and `via` whether it is told or it polls.
//!
//! Times: each payload's `from` is the previous payload's `until`, and `until` is the datetime
//! of its last event — the rule of a Change List closed by count (`changes`), so consecutive
//! notifications cover consecutive intervals and a Destination can tell a gap (a `from` later
//! than the last `until` it saw). The very first payload of a set starts at its first event.
//! Change-log datetimes are the store's stamps, to the millisecond and later for each batch
//! than for the one before, so consecutive payloads meet at the last event's instant.
//!
//! The notifier's position (the last event notified, and that payload's `until`) is one of
//! the publisher's rows in the store, so a restart continues the chain where it stopped.

use serde::{Deserialize, Serialize};

use super::entries::change_entry;
use super::{PublishError, Publisher};
use crate::model::{Capability, DocumentWriter, Entry, Header, Link, Md, RootFormat, W3cDateTime};
use crate::store::StoreError;

/// Entries per notification payload by default; a larger batch is split (§3 allows several
/// payloads). Small enough that a subscriber never parses a large document, large enough that
/// a baseline of thousands of resources is a few dozen POSTs.
pub const NOTIFICATION_ENTRIES: usize = 1_000;

/// One change-notification payload: events `first..=last` of a set's change log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// The set.
    pub set: String,
    /// First event (seq) in it.
    pub first: u64,
    /// Last event (seq) in it.
    pub last: u64,
    /// The root `from`.
    pub from: W3cDateTime,
    /// The root `until`.
    pub until: W3cDateTime,
    /// The `<urlset>` document.
    pub body: Vec<u8>,
}

/// How far a set's notifications have gone: everything through `seq` was handed on, and the
/// last payload ended at `until`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NotifyPosition {
    /// The last event notified (0: none).
    pub seq: u64,
    /// The `until` of the last payload, which the next one starts from.
    pub until: Option<W3cDateTime>,
}

#[derive(Serialize, Deserialize)]
struct SavedPosition {
    seq: u64,
    until: Option<String>,
}

fn position_key(set: &str) -> String {
    format!("notify/{set}")
}

impl Publisher {
    /// The hub named in the Capability Lists' notification channels, if notifications are on.
    pub fn hub(&self) -> Option<&str> {
        self.hub.as_deref()
    }

    /// Turns change notifications on: every Capability List then lists its set's channel, with
    /// `hub` as the WebSub hub that publishes it.
    #[must_use]
    pub fn with_hub(mut self, hub: impl Into<String>) -> Publisher {
        self.hub = Some(hub.into());
        self
    }

    /// The Capability List entry of the set's notification channel (§5), if notifications are on.
    pub(super) fn notification_channel(&self, set: &str) -> Option<Entry> {
        let hub = self.hub.as_ref()?;
        Some(Entry {
            md: Some(Md { capability: Some(Capability::ChangeNotification), ..Md::default() }),
            links: vec![Link::new("hub", hub.clone())],
            ..Entry::new(self.naming.notification_topic(set))
        })
    }

    /// The payloads for events `after+1..=upto` of `set`, each of at most `max_entries`
    /// entries, chained from `from` (the previous payload's `until`; `None`: the first event's
    /// datetime). Empty when there is nothing new.
    ///
    /// # Errors
    /// [`PublishError::UnknownSet`]; [`PublishError::Store`]; [`PublishError::Write`].
    pub fn notifications(
        &self,
        set: &str,
        after: u64,
        from: Option<W3cDateTime>,
        upto: u64,
        max_entries: usize,
    ) -> Result<Vec<Notification>, PublishError> {
        self.view_or_missing(set)?;
        let mut out = Vec::new();
        let mut events = self.store.events_after(set, after)?.take(upto.saturating_sub(after) as usize).peekable();
        let mut from = from;
        while events.peek().is_some() {
            let chunk = events.by_ref().take(max_entries.max(1)).collect::<Result<Vec<_>, _>>()?;
            let n = self.payload(set, from, chunk)?;
            from = Some(n.until);
            out.push(n);
        }
        Ok(out)
    }

    /// A payload with no entries covering the instant `at`: what the topic of `set` serves
    /// before its first notification since start, so that it is a well-formed change
    /// notification at all times (a subscriber that reads it sees `from` after its last `until`
    /// and pulls, which is right: it cannot know what it missed).
    ///
    /// # Errors
    /// [`PublishError::Write`].
    pub fn empty_notification(&self, set: &str, at: W3cDateTime) -> Result<Vec<u8>, PublishError> {
        let md =
            Md { capability: Some(Capability::ChangeNotification), from: Some(at), until: Some(at), ..Md::default() };
        let mut header = Header::new(RootFormat::UrlSet, md);
        header.links.push(Link::new("up", self.naming.capability_list(set)));
        Ok(DocumentWriter::new(Vec::new(), &header)?.finish()?)
    }

    fn payload(
        &self,
        set: &str,
        from: Option<W3cDateTime>,
        events: Vec<crate::store::Event>,
    ) -> Result<Notification, PublishError> {
        let (first, last) = (&events[0], &events[events.len() - 1]);
        let (first_seq, last_seq, until) = (first.seq, last.seq, last.datetime);
        let from = from.unwrap_or(first.datetime).min(first.datetime);
        let md = Md {
            capability: Some(Capability::ChangeNotification),
            from: Some(from),
            until: Some(until),
            ..Md::default()
        };
        let mut header = Header::new(RootFormat::UrlSet, md);
        header.links.push(Link::new("up", self.naming.capability_list(set)));
        let mut w = DocumentWriter::new(Vec::new(), &header)?;
        for ev in events {
            w.write_entry(&change_entry(ev))?;
        }
        let body = w.finish()?;
        Ok(Notification { set: set.to_owned(), first: first_seq, last: last_seq, from, until, body })
    }

    /// Where the notifications of `set` have got to (`None`: never started).
    ///
    /// # Errors
    /// [`PublishError::Store`].
    pub fn notify_position(&self, set: &str) -> Result<Option<NotifyPosition>, PublishError> {
        let Some(bytes) = self.store.publisher_state(&position_key(set))? else { return Ok(None) };
        let saved: SavedPosition =
            serde_json::from_slice(&bytes).map_err(|e| StoreError::corrupt("notification position", e))?;
        let until = saved.until.and_then(|t| t.parse().ok());
        Ok(Some(NotifyPosition { seq: saved.seq, until }))
    }

    /// Saves where the notifications of `set` have got to, durably.
    ///
    /// # Errors
    /// [`PublishError::Store`].
    pub fn save_notify_position(&self, set: &str, pos: NotifyPosition) -> Result<(), PublishError> {
        let saved = SavedPosition { seq: pos.seq, until: pos.until.map(|t| t.to_string()) };
        let bytes = serde_json::to_vec(&saved).map_err(|e| StoreError::corrupt("notification position", e))?;
        self.store.save_publisher_state(&position_key(set), &bytes)?;
        self.store.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{HashList, ReadOptions, read_document};
    use crate::naming::Naming;
    use crate::publish::{Limits, LinkPolicies, SetConfig};
    use crate::store::{Batch, Expected, Listing, NewRecord, Store, StoreOptions, Via};

    /// A publisher of set `a` whose log holds `n` events, one batch each.
    fn publisher(n: usize) -> (tempfile::TempDir, Publisher) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_with(&dir.path().join("s"), &StoreOptions::small()).unwrap();
        let naming = Naming::new(&url::Url::parse("http://t.test/").unwrap());
        for i in 0..n {
            let info = store.put(format!("content {i}").as_bytes(), &Expected::none()).unwrap();
            let upstream = format!("http://up.test/{i}");
            let mut batch = Batch::new();
            batch.upsert(
                &["a"],
                NewRecord {
                    uri: naming.resource("a", &upstream).unwrap(),
                    source: "a".into(),
                    upstream: upstream.clone(),
                    sha256: info.id,
                    listing: Listing {
                        origin: upstream,
                        declared: HashList::default(),
                        length: None,
                        media_type: Some("text/plain".into()),
                        lastmod: None,
                        via: Via::default(),
                        links: Vec::new(),
                    },
                },
            );
            store.apply(&mut batch).unwrap();
        }
        let p = Publisher::new(store, naming, vec![SetConfig::source("a")], LinkPolicies::default(), Limits::default())
            .unwrap();
        (dir, p.with_hub("http://hub.test/"))
    }

    #[test]
    fn payloads_split_and_chain_and_carry_change_list_entries() {
        let (_dir, p) = publisher(5);
        let earlier: W3cDateTime = "2020-01-01T00:00:00Z".parse().unwrap();
        let notes = p.notifications("a", 0, Some(earlier), 5, 2).unwrap();
        assert_eq!(notes.iter().map(|n| (n.first, n.last)).collect::<Vec<_>>(), [(1, 2), (3, 4), (5, 5)]);
        assert_eq!(notes[0].from, earlier, "the first payload continues the chain it was given");
        for pair in notes.windows(2) {
            assert_eq!(pair[1].from, pair[0].until);
        }
        let (doc, diagnostics) = read_document(&notes[1].body, ReadOptions::named("payload")).unwrap();
        assert!(diagnostics.iter().all(|d| d.severity != crate::model::Severity::Error), "{diagnostics:?}");
        let md = doc.header.md.unwrap();
        assert_eq!(md.capability, Some(Capability::ChangeNotification));
        assert_eq!((md.from, md.until), (Some(notes[1].from), Some(notes[1].until)));
        assert_eq!(doc.header.links[0].href, "http://t.test/sets/a/capabilitylist.xml");
        let events: Vec<_> = p.store.events_after("a", 2).unwrap().take(2).map(Result::unwrap).collect();
        let expected: Vec<Entry> = events.into_iter().map(change_entry).collect();
        assert_eq!(doc.entries, expected, "the Change List's entries, in log order");
        // Nothing new, nothing to send; an unbroken chain from no position starts at the first event.
        assert!(p.notifications("a", 5, None, 5, 2).unwrap().is_empty());
        let first = p.notifications("a", 0, None, 1, 10).unwrap();
        assert_eq!(first[0].from, first[0].until);
        assert!(matches!(p.notifications("zz", 0, None, 1, 1), Err(PublishError::UnknownSet(_))));
    }

    #[test]
    fn the_position_is_kept_and_the_channel_advertised() {
        let (_dir, p) = publisher(0);
        assert_eq!(p.notify_position("a").unwrap(), None);
        let pos = NotifyPosition { seq: 7, until: Some("2024-05-01T10:00:00Z".parse().unwrap()) };
        p.save_notify_position("a", pos).unwrap();
        assert_eq!(p.notify_position("a").unwrap(), Some(pos));
        let cap = String::from_utf8(p.capability_list("a").unwrap()).unwrap();
        assert!(
            cap.contains("<url><loc>http://t.test/sets/a/notifications</loc><rs:md capability=\"change-notification\"/><rs:ln rel=\"hub\" href=\"http://hub.test/\"/></url>"),
            "{cap}"
        );
        let (doc, diagnostics) = read_document(cap.as_bytes(), ReadOptions::named("cap")).unwrap();
        assert!(diagnostics.is_empty(), "{diagnostics:?}");
        assert_eq!(doc.entries.len(), 5);
    }
}
