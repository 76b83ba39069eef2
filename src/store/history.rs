//! A resource's change history: every event written for one Tributary URI, in every set.
//!
//! The change log is keyed by set and sequence number, which is what Change Lists need; a
//! provenance lookup needs the other direction. Scanning a set's log for one URI costs the
//! whole log (millions of events for a busy set), so each change also gets a row in the
//! `log_by_uri` table, written in the same batch as its events: one row per change rather
//! than per event (a change logged in three sets is one row, since rows are what sled writes
//! cost). The key is `uri \0 set \0 seq_be` of the change's first (set, seq); the value lists
//! the others as `set \0 seq_be` pairs. A lookup is one prefix scan plus one point read per
//! event. The log is never truncated, so neither is this index.
//!
//! Only events readers may see are returned: one not yet flushed stays hidden here exactly as
//! it does in [`Store::events_after`].

use std::collections::BTreeMap;

use super::codec::pair_prefix;
use super::error::StoreError;
use super::log::Event;
use super::{Inner, Store};

/// The `log_by_uri` key of a change whose first event is `set` #`seq`.
pub(super) fn key(uri: &str, set: &str, seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(uri.len() + set.len() + 10);
    k.extend_from_slice(uri.as_bytes());
    k.push(0);
    push_pair(&mut k, set, seq);
    k
}

/// Appends `set \0 seq_be`: the key's tail, and each entry of the value.
pub(super) fn push_pair(out: &mut Vec<u8>, set: &str, seq: u64) {
    out.extend_from_slice(set.as_bytes());
    out.push(0);
    out.extend_from_slice(&seq.to_be_bytes());
}

/// Every `(set, seq)` of one row: the key's (after `uri \0`), then the value's.
fn row_events(key_rest: &[u8], value: &[u8]) -> Option<Vec<(String, u64)>> {
    let mut out = vec![split_rest(key_rest)?];
    let mut rest = value;
    while !rest.is_empty() {
        let nul = rest.iter().position(|&b| b == 0)?;
        let seq = u64::from_be_bytes(rest.get(nul + 1..nul + 9)?.try_into().ok()?);
        out.push((String::from_utf8(rest[..nul].to_vec()).ok()?, seq));
        rest = &rest[nul + 9..];
    }
    Some(out)
}

/// `(set, seq)` from the part of a key after `uri \0`. The seq is the last 8 bytes (it may
/// contain NUL bytes itself), preceded by the NUL that ends the set id.
pub(super) fn split_rest(rest: &[u8]) -> Option<(String, u64)> {
    let cut = rest.len().checked_sub(9)?;
    if rest[cut] != 0 {
        return None;
    }
    let seq = u64::from_be_bytes(<[u8; 8]>::try_from(&rest[cut + 1..]).ok()?);
    let set = String::from_utf8(rest[..cut].to_vec()).ok()?;
    Some((set, seq))
}

impl Store {
    /// Every visible change event of the resource `uri` with the set it was logged in, oldest
    /// first. Events of one second share a datetime, so ties are broken by each event's rank
    /// among this resource's events in its set: a change logged in several sets then appears
    /// once per set, side by side. Deleted resources keep their history.
    ///
    /// # Errors
    /// [`StoreError::Database`] / [`StoreError::Corrupt`] (including an index row whose event
    /// is missing).
    pub fn history(&self, uri: &str) -> Result<Vec<(String, Event)>, StoreError> {
        let inner = &self.inner;
        let prefix = pair_prefix(uri.as_bytes());
        // Per set, its seqs in order: a change's rank among this resource's events in a set.
        let mut by_set: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for kv in inner.trees.log_by_uri.scan_prefix(&prefix) {
            let (k, v) = kv?;
            let pairs = row_events(&k[prefix.len()..], &v)
                .ok_or_else(|| StoreError::corrupt("event index", hex::encode(&k)))?;
            for (set, seq) in pairs {
                by_set.entry(set).or_default().push(seq);
            }
        }
        let mut ranked = Vec::new();
        for (set, mut seqs) in by_set {
            seqs.sort_unstable();
            let limit = inner.visible_seq(&set)?;
            for (rank, seq) in seqs.into_iter().filter(|&s| s <= limit).enumerate() {
                let event = inner.event(&set, seq)?.ok_or_else(|| {
                    StoreError::corrupt("event index", format!("{uri}: event {set} #{seq} is missing"))
                })?;
                ranked.push((rank, set.clone(), event));
            }
        }
        ranked
            .sort_by(|(ra, sa, a), (rb, sb, b)| a.datetime.cmp(&b.datetime).then(ra.cmp(rb)).then_with(|| sa.cmp(sb)));
        Ok(ranked.into_iter().map(|(_, set, e)| (set, e)).collect())
    }
}

impl Inner {
    /// Whether a `log_by_uri` row lists an event (for `verify`).
    pub(super) fn has_history_row(&self, uri: &str, set: &str, seq: u64) -> Result<bool, StoreError> {
        let prefix = pair_prefix(uri.as_bytes());
        for kv in self.trees.log_by_uri.scan_prefix(&prefix) {
            let (k, v) = kv?;
            if row_events(&k[prefix.len()..], &v).is_some_and(|p| p.iter().any(|(s, q)| s == set && *q == seq)) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Rows of `log_by_uri` naming an event that does not exist or is another URI's (for
    /// `verify`).
    pub(super) fn dangling_history_rows(&self) -> Result<Vec<String>, StoreError> {
        let mut out = Vec::new();
        for kv in self.trees.log_by_uri.iter() {
            let (k, v) = kv?;
            let parsed = k.iter().position(|&b| b == 0).and_then(|nul| {
                let uri = String::from_utf8_lossy(&k[..nul]).into_owned();
                row_events(&k[nul + 1..], &v).map(|pairs| (uri, pairs))
            });
            let ok = match &parsed {
                Some((uri, pairs)) => {
                    let mut all = true;
                    for (set, seq) in pairs {
                        all &= self.event(set, *seq)?.is_some_and(|e| &e.uri == uri);
                    }
                    all
                }
                None => false,
            };
            if !ok {
                out.push(String::from_utf8_lossy(&k).replace('\0', " "));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_back_even_when_the_seq_holds_nul_bytes() {
        for seq in [0u64, 1, 256, u64::MAX, 0x0100_0000_0000_0000] {
            let k = key("http://t/r/a/http/x/y", "set-1", seq);
            let rest = &k["http://t/r/a/http/x/y".len() + 1..];
            assert_eq!(split_rest(rest), Some(("set-1".to_owned(), seq)));
        }
        assert_eq!(split_rest(b"short"), None);
    }

    #[test]
    fn a_row_lists_every_set_of_its_change() {
        let k = key("u", "a", 0x0100);
        let mut v = Vec::new();
        push_pair(&mut v, "b", 0);
        push_pair(&mut v, "c", u64::MAX);
        let pairs = row_events(&k[2..], &v).unwrap();
        assert_eq!(pairs, [("a".to_owned(), 0x0100), ("b".to_owned(), 0), ("c".to_owned(), u64::MAX)]);
    }
}
