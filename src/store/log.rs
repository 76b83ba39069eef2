//! The per-set change log: what the publisher turns into Change Lists.
//!
//! Events are stored in chunks: one row holds consecutive events of one set, keyed
//! `set \0 first_seq_be_u64`, written by one batch (a batch of 1,000 upserts in a set writes
//! about eight rows instead of 1,000): a row costs a key, a sequence number and an index entry
//! however small its value, and a chunk of consecutive events compresses as one. The event
//! with seq `n` is in the last chunk whose first seq is `<= n` (a reverse range seek), and
//! reading a set forward from a sequence number is still one range scan. Chunks are capped
//! ([`CHUNK_EVENTS`], [`CHUNK_BYTES`]) so no value grows large, and each event in a chunk is
//! length-prefixed so a reader skips to one event without decoding the others.
//!
//! Sequence numbers start at 1 and have no gaps within a set; the datetime is
//! Tributary's own clock, never earlier than the set's previous event (a clock stepping back
//! must not reorder a Change List), which also makes "from this datetime" a binary search.
//!
//! Readers see only events of durable batches: a batch is visible once its commit returned,
//! and it returns once the journal is synced (see [`super::table`]), so a Destination is never
//! shown a change that a crash could take back.

use serde::{Deserialize, Serialize};

use super::blob::BlobId;
use super::codec::{self, w3c, w3c_opt};
use super::error::StoreError;
use super::record::Via;
use super::table::{Bytes, TableIter, View};
use super::{Inner, Snapshot, Store};
use crate::model::{Change, W3cDateTime};

/// One change event: everything a Change List entry needs, without another lookup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Position in the set's log, from 1, without gaps.
    pub seq: u64,
    /// Tributary's URI of the resource.
    pub uri: String,
    /// created / updated / deleted.
    #[serde(with = "change_code")]
    pub change: Change,
    /// When Tributary incorporated the change (its own clock).
    #[serde(with = "w3c")]
    pub datetime: W3cDateTime,
    /// The content's sha-256 (for a deletion, the last content's).
    pub sha256: BlobId,
    /// The content's md5 (hex), when known.
    pub md5: Option<String>,
    /// Length in bytes.
    pub length: u64,
    /// Media type.
    pub media_type: Option<String>,
    /// The origin URI (`via` target).
    pub origin: String,
    /// `via` link attributes.
    pub via: Via,
    /// The source id.
    pub source: String,
    /// The seq of the same resource's previous event in this set, if any: a resource's
    /// history is this chain (see [`super::history`]).
    pub prev: Option<u64>,
}

/// An [`Event`] read without copying: strings borrow from the stored chunk and the datetime
/// stays in its stored W3C text. For readers that go through many events and need few of
/// their fields (OAI-PMH lists); see [`EventIter::next_view`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct EventView<'a> {
    /// Position in the set's log.
    pub seq: u64,
    /// Tributary's URI of the resource.
    pub uri: &'a str,
    /// created / updated / deleted.
    #[serde(with = "change_code")]
    pub change: Change,
    /// When Tributary incorporated the change, as stored W3C text.
    pub datetime: &'a str,
    /// The content's sha-256 (for a deletion, the last content's).
    pub sha256: BlobId,
    /// The content's md5 (hex), when known.
    pub md5: Option<&'a str>,
    /// Length in bytes.
    pub length: u64,
    /// Media type.
    pub media_type: Option<&'a str>,
    /// The origin URI.
    pub origin: &'a str,
    /// `via` link attributes.
    #[serde(borrow)]
    pub via: ViaRef<'a>,
    /// The source id.
    pub source: &'a str,
    /// The seq of the same resource's previous event in this set, if any.
    pub prev: Option<u64>,
}

/// The `via` attributes of an [`EventView`], borrowed.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ViaRef<'a> {
    /// `modified`, as W3C text.
    pub modified: Option<&'a str>,
    /// `hash` as `(algorithm, value)`.
    #[serde(borrow)]
    pub hash: Vec<(&'a str, &'a str)>,
    /// `length`
    pub length: Option<u64>,
    /// `type`
    pub media_type: Option<&'a str>,
}

impl EventView<'_> {
    /// The event's datetime, parsed.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when the stored text is not a W3C datetime.
    pub fn datetime(&self) -> Result<W3cDateTime, StoreError> {
        self.datetime.parse().map_err(|e| StoreError::corrupt("event", e))
    }
}

/// An event read for its `prev` alone: the other fields are stepped over as bytes (postcard
/// writes a string as its bytes), with no UTF-8 check, no datetime parse and no allocation.
#[derive(Deserialize)]
struct PrevOnly<'a> {
    _seq: u64,
    #[serde(borrow)]
    _uri: &'a [u8],
    _change: u8,
    #[serde(borrow)]
    _datetime: &'a [u8],
    _sha256: BlobId,
    #[serde(borrow)]
    _md5: Option<&'a [u8]>,
    _length: u64,
    #[serde(borrow)]
    _media_type: Option<&'a [u8]>,
    #[serde(borrow)]
    _origin: &'a [u8],
    #[serde(borrow)]
    _via: SkipVia<'a>,
    #[serde(borrow)]
    _source: &'a [u8],
    prev: Option<u64>,
}

/// [`Via`], stepped over.
#[derive(Deserialize)]
struct SkipVia<'a> {
    #[serde(borrow)]
    _modified: Option<&'a [u8]>,
    _hash: SkipPairs,
    _length: Option<u64>,
    #[serde(borrow)]
    _media_type: Option<&'a [u8]>,
}

/// A sequence of string pairs, stepped over.
struct SkipPairs;

impl<'de> Deserialize<'de> for SkipPairs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = SkipPairs;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a sequence of string pairs")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<SkipPairs, A::Error> {
                while seq.next_element::<(&'de [u8], &'de [u8])>()?.is_some() {}
                Ok(SkipPairs)
            }
        }
        d.deserialize_seq(V)
    }
}

/// An [`Event`] borrowed from the record it is about, for writing: encoded exactly as the
/// owned one (serde writes `&str` as `String`), without cloning the record's fields per set.
#[derive(Serialize)]
pub(super) struct EventRef<'a> {
    pub(super) seq: u64,
    pub(super) uri: &'a str,
    #[serde(with = "change_code")]
    pub(super) change: Change,
    #[serde(with = "w3c")]
    pub(super) datetime: W3cDateTime,
    pub(super) sha256: &'a BlobId,
    pub(super) md5: Option<&'a str>,
    pub(super) length: u64,
    pub(super) media_type: Option<&'a str>,
    pub(super) origin: &'a str,
    pub(super) via: &'a Via,
    pub(super) source: &'a str,
    pub(super) prev: Option<u64>,
}

mod change_code {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::model::Change;

    pub(super) fn serialize<S: Serializer>(c: &Change, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u8(match c {
            Change::Created => 0,
            Change::Updated => 1,
            Change::Deleted => 2,
        })
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Change, D::Error> {
        match u8::deserialize(d)? {
            0 => Ok(Change::Created),
            1 => Ok(Change::Updated),
            2 => Ok(Change::Deleted),
            n => Err(serde::de::Error::custom(format!("unknown change code {n}"))),
        }
    }
}

/// The `sets` tree value: counters kept in step with the log by every batch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Counters {
    /// Live records counted in this set.
    pub(super) live: u64,
    /// The last sequence number used (the log has no gaps and is never truncated, so this is
    /// also its length).
    pub(super) last_seq: u64,
    /// The datetime of the last event.
    #[serde(with = "w3c_opt")]
    pub(super) last_change: Option<W3cDateTime>,
}

/// A set's counters, as readers see them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetInfo {
    /// The set id.
    pub id: String,
    /// Live resources in the set.
    pub live: u64,
    /// Events in the log: the last sequence number.
    pub events: u64,
    /// Datetime of the last event.
    pub last_change: Option<W3cDateTime>,
}

pub(super) fn event_key(set: &str, seq: u64) -> Vec<u8> {
    codec::pair_key(set.as_bytes(), &seq.to_be_bytes())
}

/// Most events in one chunk row.
pub(super) const CHUNK_EVENTS: u64 = 128;
/// A chunk is closed once its value reaches this size: a reader of one event decodes no more
/// than this, and a block holds a few chunks.
pub(super) const CHUNK_BYTES: usize = 24 * 1024;
/// First byte of a chunk value; codec's value version for single values is 1.
const CHUNK_VERSION: u8 = 2;

/// The first seq of a chunk from its key (`set \0 seq_be`, table prefix already stripped).
pub(super) fn chunk_first(key: &[u8]) -> Option<u64> {
    let cut = key.len().checked_sub(8)?;
    Some(u64::from_be_bytes(key[cut..].try_into().ok()?))
}

/// A chunk being written by a batch: consecutive events of one set.
#[derive(Debug)]
pub(super) struct ChunkBuf {
    pub(super) first: u64,
    count: u64,
    bytes: Vec<u8>,
}

impl ChunkBuf {
    pub(super) fn new(first: u64) -> Self {
        let mut bytes = Vec::with_capacity(4096);
        bytes.push(CHUNK_VERSION);
        ChunkBuf { first, count: 0, bytes }
    }

    /// Appends the event with seq `first + count`.
    pub(super) fn push(&mut self, event: &EventRef<'_>) -> Result<(), StoreError> {
        let mut b = std::mem::take(&mut self.bytes);
        let at = b.len();
        b.extend_from_slice(&[0; 4]);
        b = postcard::to_extend(event, b).map_err(|e| StoreError::corrupt("event (encoding)", e))?;
        let len = u32::try_from(b.len() - at - 4).map_err(|e| StoreError::corrupt("event (encoding)", e))?;
        b[at..at + 4].copy_from_slice(&len.to_le_bytes());
        self.bytes = b;
        self.count += 1;
        Ok(())
    }

    pub(super) fn is_full(&self) -> bool {
        self.count >= CHUNK_EVENTS || self.bytes.len() >= CHUNK_BYTES
    }

    pub(super) fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub(super) fn into_value(self) -> Vec<u8> {
        self.bytes
    }
}

/// The encoded events of a chunk value, in order. Yields byte ranges of `value`.
pub(super) struct ChunkEvents<'a> {
    value: &'a [u8],
    off: usize,
}

impl<'a> ChunkEvents<'a> {
    pub(super) fn new(value: &'a [u8]) -> Result<Self, StoreError> {
        match value.first() {
            Some(&CHUNK_VERSION) => Ok(ChunkEvents { value, off: 1 }),
            Some(v) => Err(StoreError::corrupt("change log", format!("unknown chunk version {v}"))),
            None => Err(StoreError::corrupt("change log", "empty chunk")),
        }
    }

    /// Skips one event without decoding it; false at the end of the chunk.
    fn skip_one(&mut self) -> Result<bool, StoreError> {
        Ok(self.next_range().transpose()?.is_some())
    }

    fn next_range(&mut self) -> Option<Result<std::ops::Range<usize>, StoreError>> {
        if self.off >= self.value.len() {
            return None;
        }
        let truncated = || StoreError::corrupt("change log", "truncated chunk");
        let Some(len) = self.value.get(self.off..self.off + 4) else { return Some(Err(truncated())) };
        let len = u32::from_le_bytes(len.try_into().expect("four bytes")) as usize;
        let start = self.off + 4;
        if start + len > self.value.len() {
            return Some(Err(truncated()));
        }
        self.off = start + len;
        Some(Ok(start..start + len))
    }
}

impl<'a> Iterator for ChunkEvents<'a> {
    type Item = Result<&'a [u8], StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        let value = self.value;
        Some(self.next_range()?.map(|r| &value[r]))
    }
}

pub(super) fn decode_event(bytes: &[u8]) -> Result<Event, StoreError> {
    postcard::from_bytes(bytes).map_err(|e| StoreError::corrupt("event", e))
}

impl Inner {
    fn counters_in(&self, view: &View, set: &str) -> Result<Counters, StoreError> {
        match self.trees.sets.get_in(view, set.as_bytes())? {
            Some(v) => codec::decode("set counters", &v),
            None => Ok(Counters::default()),
        }
    }

    /// The chunk row holding `seq` (the last one starting at or before it), if any.
    fn chunk_of(&self, view: &View, set: &str, seq: u64) -> Result<Option<(u64, Bytes)>, StoreError> {
        let Some((k, v)) = self.trees.log.floor_in(view, &event_key(set, 0), &event_key(set, seq))? else {
            return Ok(None);
        };
        let first = chunk_first(&k).ok_or_else(|| StoreError::corrupt("change log", hex::encode(&k)))?;
        Ok(Some((first, v)))
    }

    pub(super) fn event(&self, set: &str, seq: u64) -> Result<Option<Event>, StoreError> {
        self.event_in(&self.db.view(), set, seq)
    }

    fn event_in(&self, view: &View, set: &str, seq: u64) -> Result<Option<Event>, StoreError> {
        let Some((first, value)) = self.chunk_of(view, set, seq)? else { return Ok(None) };
        let mut events = ChunkEvents::new(&value)?;
        for _ in first..seq {
            if !events.skip_one()? {
                return Ok(None);
            }
        }
        events.next().transpose()?.map(decode_event).transpose()
    }

    /// The first seq in `1..=limit` whose datetime is at or after `from` (`limit + 1` if none).
    fn first_at_or_after(&self, view: &View, set: &str, from: &W3cDateTime, limit: u64) -> Result<u64, StoreError> {
        let (mut lo, mut hi) = (1, limit + 1);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let event = self
                .event_in(view, set, mid)?
                .ok_or_else(|| StoreError::corrupt("change log", format!("gap at {set} #{mid}")))?;
            if event.datetime < *from {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    fn events_after(&self, view: &View, set: &str, after: u64) -> Result<EventIter, StoreError> {
        let limit = self.counters_in(view, set)?.last_seq;
        self.iter_range(view, set, after.saturating_add(1), limit, None)
    }

    fn events_between(
        &self,
        view: &View,
        set: &str,
        from: Option<&W3cDateTime>,
        until: Option<&W3cDateTime>,
    ) -> Result<EventIter, StoreError> {
        let limit = self.counters_in(view, set)?.last_seq;
        let start = match from {
            Some(from) => self.first_at_or_after(view, set, from, limit)?,
            None => 1,
        };
        self.iter_range(view, set, start, limit, until.copied())
    }

    fn iter_range(
        &self,
        view: &View,
        set: &str,
        start: u64,
        last: u64,
        until: Option<W3cDateTime>,
    ) -> Result<EventIter, StoreError> {
        let rows = if start > last {
            None
        } else {
            let from = self.chunk_of(view, set, start)?.map_or(start, |(first, _)| first);
            Some(self.trees.log.range_in(view, &event_key(set, from), Some(&successor(&event_key(set, last)))))
        };
        Ok(EventIter { rows, chunk: None, start, last, until })
    }

    fn set_info(&self, view: &View, set: &str) -> Result<Option<SetInfo>, StoreError> {
        let Some(v) = self.trees.sets.get_in(view, set.as_bytes())? else { return Ok(None) };
        let c: Counters = codec::decode("set counters", &v)?;
        Ok(Some(SetInfo { id: set.to_owned(), live: c.live, events: c.last_seq, last_change: c.last_change }))
    }
}

/// The smallest key after `key`.
fn successor(key: &[u8]) -> Vec<u8> {
    let mut next = key.to_vec();
    next.push(0);
    next
}

impl Store {
    /// The set's events with a sequence number greater than `after`, in order (`after = 0`
    /// for the whole log). Every event returned is durable.
    ///
    /// # Errors
    /// [`StoreError::Database`] / [`StoreError::Corrupt`]; the iterator yields the same.
    pub fn events_after(&self, set: &str, after: u64) -> Result<EventIter, StoreError> {
        self.inner.events_after(&self.inner.db.view(), set, after)
    }

    /// The set's events with `from <= datetime < until`, in order; either bound may be open.
    /// Half-open, so consecutive Change Lists never repeat an event.
    ///
    /// # Errors
    /// As [`Store::events_after`].
    pub fn events_between(
        &self,
        set: &str,
        from: Option<&W3cDateTime>,
        until: Option<&W3cDateTime>,
    ) -> Result<EventIter, StoreError> {
        self.inner.events_between(&self.inner.db.view(), set, from, until)
    }

    /// A set's counters, or `None` for a set with no events yet.
    ///
    /// # Errors
    /// [`StoreError::Database`] / [`StoreError::Corrupt`].
    pub fn set_info(&self, set: &str) -> Result<Option<SetInfo>, StoreError> {
        self.inner.set_info(&self.inner.db.view(), set)
    }

    /// Every set with events, by id.
    ///
    /// # Errors
    /// As [`Store::set_info`].
    pub fn sets(&self) -> Result<Vec<SetInfo>, StoreError> {
        let view = self.inner.db.view();
        let mut out = Vec::new();
        for kv in self.inner.trees.sets.iter_in(&view) {
            let (key, v) = kv?;
            let c: Counters = codec::decode("set counters", &v)?;
            let id = String::from_utf8_lossy(&key).into_owned();
            out.push(SetInfo { id, live: c.live, events: c.last_seq, last_change: c.last_change });
        }
        Ok(out)
    }
}

impl Snapshot {
    /// [`Store::events_after`], as of the snapshot.
    ///
    /// # Errors
    /// As [`Store::events_after`].
    pub fn events_after(&self, set: &str, after: u64) -> Result<EventIter, StoreError> {
        self.store.inner.events_after(&self.view, set, after)
    }

    /// [`Store::events_between`], as of the snapshot.
    ///
    /// # Errors
    /// As [`Store::events_after`].
    pub fn events_between(
        &self,
        set: &str,
        from: Option<&W3cDateTime>,
        until: Option<&W3cDateTime>,
    ) -> Result<EventIter, StoreError> {
        self.store.inner.events_between(&self.view, set, from, until)
    }

    /// [`Store::set_info`], as of the snapshot: its `events` is the last position the snapshot
    /// holds.
    ///
    /// # Errors
    /// As [`Store::set_info`].
    pub fn set_info(&self, set: &str) -> Result<Option<SetInfo>, StoreError> {
        self.store.inner.set_info(&self.view, set)
    }

    /// The set's event `seq`, as of the snapshot (`None` past the log's end): a resource's
    /// history is walked backwards by its events' `prev`.
    ///
    /// # Errors
    /// [`StoreError::Database`] / [`StoreError::Corrupt`].
    pub fn event(&self, set: &str, seq: u64) -> Result<Option<Event>, StoreError> {
        self.store.inner.event_in(&self.view, set, seq)
    }

    /// The set's events `start..=last`, in order: a list defined by log positions (OAI-PMH's
    /// resumable lists) reads on from where a page stopped.
    ///
    /// # Errors
    /// As [`Store::events_after`].
    pub fn events_range(&self, set: &str, start: u64, last: u64) -> Result<EventIter, StoreError> {
        self.store.inner.iter_range(&self.view, set, start.max(1), last, None)
    }

    /// The first seq in `1..=limit` whose datetime is at or after `from` (`limit + 1` when
    /// none is): a binary search, the log's datetimes never going back.
    ///
    /// # Errors
    /// As [`Store::events_after`].
    pub fn first_seq_at_or_after(&self, set: &str, from: &W3cDateTime, limit: u64) -> Result<u64, StoreError> {
        self.store.inner.first_at_or_after(&self.view, set, from, limit)
    }
}

/// Streams change events forward; see [`Store::events_after`].
pub struct EventIter {
    rows: Option<TableIter>,
    /// The chunk being read: its value, the offset of its next event and that event's seq.
    chunk: Option<(Bytes, usize, u64)>,
    start: u64,
    last: u64,
    until: Option<W3cDateTime>,
}

impl EventIter {
    fn stop(&mut self) {
        self.rows = None;
        self.chunk = None;
    }

    /// The next event at or after `start`, undecoded: `(seq, value range)`.
    fn next_raw(&mut self) -> Option<Result<(u64, std::ops::Range<usize>), StoreError>> {
        // Bounded by the rows of the range: each turn consumes an event or a chunk.
        loop {
            if let Some((value, off, seq)) = &mut self.chunk {
                let mut events = match ChunkEvents::new(value) {
                    Ok(e) => e,
                    Err(e) => return Some(Err(e)),
                };
                events.off = *off;
                match events.next_range() {
                    None => self.chunk = None,
                    Some(Err(e)) => return Some(Err(e)),
                    Some(Ok(range)) => {
                        *off = events.off;
                        let this = *seq;
                        *seq += 1;
                        if this > self.last {
                            self.stop();
                            return None;
                        }
                        if this >= self.start {
                            return Some(Ok((this, range)));
                        }
                    }
                }
                continue;
            }
            let (key, value) = match self.rows.as_mut()?.next()? {
                Ok(kv) => kv,
                Err(e) => return Some(Err(e)),
            };
            let Some(first) = chunk_first(&key) else {
                return Some(Err(StoreError::corrupt("change log", hex::encode(&key))));
            };
            self.chunk = Some((value, 1, first));
        }
    }
}

impl EventIter {
    /// The next event, borrowed from the chunk being read (see [`EventView`]): as
    /// [`Iterator::next`] without decoding into owned values.
    ///
    /// # Errors
    /// As [`Iterator::next`].
    pub fn next_view(&mut self) -> Option<Result<EventView<'_>, StoreError>> {
        let (_, range) = match self.next_raw()? {
            Ok(r) => r,
            Err(e) => return Some(Err(e)),
        };
        if let Some(until) = self.until {
            // Rare (Change Lists with `until`): decide on the parsed datetime first.
            let value = &self.chunk.as_ref().expect("next_raw returned an event of this chunk").0;
            let at = postcard::from_bytes::<EventView<'_>>(&value[range.clone()])
                .map_err(|e| StoreError::corrupt("event", e))
                .and_then(|v| v.datetime());
            match at {
                Ok(at) if at >= until => {
                    self.stop();
                    return None;
                }
                Ok(_) => {}
                Err(e) => return Some(Err(e)),
            }
        }
        let value = &self.chunk.as_ref().expect("next_raw returned an event of this chunk").0;
        Some(postcard::from_bytes(&value[range]).map_err(|e| StoreError::corrupt("event", e)))
    }
}

impl EventIter {
    /// The `prev` of the next event, decoding nothing else (counting a list's resources reads
    /// a whole log for it).
    ///
    /// # Errors
    /// As [`Iterator::next`].
    pub fn next_prev(&mut self) -> Option<Result<Option<u64>, StoreError>> {
        if self.until.is_some() {
            return self.next().map(|e| e.map(|e| e.prev));
        }
        let (_, range) = match self.next_raw()? {
            Ok(r) => r,
            Err(e) => return Some(Err(e)),
        };
        let value = &self.chunk.as_ref().expect("next_raw returned an event of this chunk").0;
        Some(
            postcard::from_bytes::<PrevOnly<'_>>(&value[range])
                .map(|e| e.prev)
                .map_err(|e| StoreError::corrupt("event", e)),
        )
    }
}

impl Iterator for EventIter {
    type Item = Result<Event, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (_, range) = match self.next_raw()? {
            Ok(r) => r,
            Err(e) => return Some(Err(e)),
        };
        let value = &self.chunk.as_ref().expect("next_raw returned an event of this chunk").0;
        let event = match decode_event(&value[range]) {
            Ok(e) => e,
            Err(e) => return Some(Err(e)),
        };
        if self.until.is_some_and(|until| event.datetime >= until) {
            self.stop();
            return None;
        }
        Some(Ok(event))
    }
}

impl std::fmt::Debug for EventIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventIter").field("until", &self.until).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::HashList;
    use crate::store::{Batch, Expected, StoreOptions};

    /// After a clock step back across a restart, a set's last event can be later than now: a
    /// change then takes one datetime no earlier than any of its sets' last events, in every
    /// log and as the record's `changed` (OAI-PMH lists in URI order rely on it).
    #[test]
    fn a_change_has_one_datetime_in_every_log_and_in_its_record() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_with(&dir.path().join("s"), &StoreOptions::small()).unwrap();
        let future: W3cDateTime = "2999-01-01T00:00:00Z".parse().unwrap();
        let counters = Counters { live: 0, last_seq: 0, last_change: Some(future) };
        store.inner.trees.sets.insert(b"late", codec::encode(&counters).unwrap()).unwrap();
        let sha = store.put(&b"x"[..], &Expected::none()).unwrap().id;
        store.apply(Batch::new().upsert(&["s", "late"], crate::store::test_util::record("http://t/1", sha))).unwrap();
        let rec = store.record("http://t/1").unwrap().unwrap();
        assert_eq!(rec.changed, future);
        for set in ["s", "late"] {
            let e = store.events_after(set, 0).unwrap().next().unwrap().unwrap();
            assert_eq!(e.datetime, future, "{set}");
        }
        store.apply(Batch::new().delete(&["s", "late"], "http://t/1")).unwrap();
        let rec = store.record("http://t/1").unwrap().unwrap();
        let e = store.events_after("s", 1).unwrap().next().unwrap().unwrap();
        assert_eq!((e.change, e.datetime), (Change::Deleted, rec.changed));
    }

    /// A chunk is read back as [`Event`]s, so what the batch writes from borrows must encode
    /// byte for byte as the owned event would.
    #[test]
    fn a_borrowed_event_encodes_as_the_owned_one() {
        let via = Via {
            modified: Some("2024-05-01T10:00:00+02:00".parse().unwrap()),
            hash: HashList::parse("md5:1e0d5cb8ef6ba40c99b14c0237be735e").unwrap().0,
            length: Some(2048),
            media_type: Some("text/plain".into()),
        };
        for (md5, media_type, prev) in [(Some("ab"), Some("text/xml"), Some(3)), (None, None, None)] {
            let owned = Event {
                seq: 7,
                uri: "http://t/sets/a/res/1".into(),
                change: Change::Updated,
                datetime: "2026-11-26T10:00:00Z".parse().unwrap(),
                sha256: BlobId([9; 32]),
                md5: md5.map(str::to_owned),
                length: 2048,
                media_type: media_type.map(str::to_owned),
                origin: "http://origin/1".into(),
                via: via.clone(),
                source: "a".into(),
                prev,
            };
            let borrowed = EventRef {
                seq: owned.seq,
                uri: &owned.uri,
                change: owned.change,
                datetime: owned.datetime,
                sha256: &owned.sha256,
                md5: owned.md5.as_deref(),
                length: owned.length,
                media_type: owned.media_type.as_deref(),
                origin: &owned.origin,
                via: &owned.via,
                source: &owned.source,
                prev: owned.prev,
            };
            let (a, b) = (postcard::to_allocvec(&owned).unwrap(), postcard::to_allocvec(&borrowed).unwrap());
            assert_eq!(a, b);
            assert_eq!(postcard::from_bytes::<Event>(&b).unwrap(), owned);
            let view: EventView<'_> = postcard::from_bytes(&b).unwrap();
            assert_eq!(
                (view.seq, view.uri, view.change, view.prev),
                (owned.seq, owned.uri.as_str(), owned.change, owned.prev)
            );
            assert_eq!(view.datetime().unwrap(), owned.datetime);
            assert_eq!(
                (view.md5, view.media_type, view.source),
                (owned.md5.as_deref(), owned.media_type.as_deref(), "a")
            );
            assert_eq!(view.via.hash.len(), owned.via.hash.0.len());
            assert_eq!(postcard::from_bytes::<PrevOnly<'_>>(&b).unwrap().prev, owned.prev);
        }
    }
}
