//! A resource's change history: every event written for one Tributary URI, in every set.
//!
//! The change log is keyed by set and sequence number, which is what Change Lists need; a
//! provenance lookup needs the other direction. Scanning a set's log for one URI costs the
//! whole log (millions of events for a busy set), so the history is a chain instead: each
//! event carries the seq of the same resource's previous event in its set (`prev`), and the
//! record keeps the latest seq per set (`heads`), both written in the batch that logs the
//! event. A lookup is one record read plus one event read per event. Up to format 3 an index
//! row per change (`log_by_uri`) did this; the chain costs no row of its own, and rows written
//! are what bound the store's write speed (docs/STORE.md).
//!
//! Only events readers may see are returned: one not yet flushed stays hidden here exactly as
//! it does in [`Store::events_after`].

use super::error::StoreError;
use super::log::Event;
use super::{Inner, Store};

impl Store {
    /// Every change event of the resource `uri` with the set it was logged in, oldest
    /// first. Events of one second share a datetime, so ties are broken by each event's rank
    /// among this resource's events in its set: a change logged in several sets then appears
    /// once per set, side by side. Deleted resources keep their history.
    ///
    /// # Errors
    /// [`StoreError::Database`] / [`StoreError::Corrupt`] (including a chain that names a
    /// missing event, another resource's, or one not earlier than itself).
    pub fn history(&self, uri: &str) -> Result<Vec<(String, Event)>, StoreError> {
        let inner = &self.inner;
        let Some(rec) = self.record(uri)? else { return Ok(Vec::new()) };
        let mut ranked = Vec::new();
        for (set, head) in &rec.heads {
            let chain = inner.chain(uri, set, *head)?;
            ranked.extend(chain.into_iter().rev().enumerate().map(|(rank, e)| (rank, set.clone(), e)));
        }
        ranked
            .sort_by(|(ra, sa, a), (rb, sb, b)| a.datetime.cmp(&b.datetime).then(ra.cmp(rb)).then_with(|| sa.cmp(sb)));
        Ok(ranked.into_iter().map(|(_, set, e)| (set, e)).collect())
    }
}

impl Inner {
    /// The events of `uri` in `set`, newest first, following `prev` from `head`. Bounded: every
    /// step goes to a strictly smaller seq, or the chain is reported corrupt.
    pub(super) fn chain(&self, uri: &str, set: &str, head: u64) -> Result<Vec<Event>, StoreError> {
        let corrupt = |why: String| StoreError::corrupt("history", format!("{uri} in {set}: {why}"));
        let mut out = Vec::new();
        let mut next = Some(head);
        while let Some(seq) = next {
            let event = self.event(set, seq)?.ok_or_else(|| corrupt(format!("event #{seq} is missing")))?;
            if event.uri != uri {
                return Err(corrupt(format!("event #{seq} is {}'s", event.uri)));
            }
            next = match event.prev {
                Some(p) if p >= seq => return Err(corrupt(format!("event #{seq} names #{p} as its previous"))),
                p => p,
            };
            out.push(event);
        }
        Ok(out)
    }
}
