//! A resource's change history: every event written for one Tributary URI, in every set.
//!
//! The change log is keyed by set and sequence number, which is what Change Lists need; a
//! provenance lookup needs the other direction. Scanning a set's log for one URI costs the
//! whole log (millions of events for a busy set), so each event also gets a key-only row
//! `uri \0 set \0 seq_be` in the `log_by_uri` table, written in the same batch as the event.
//! A lookup is then one prefix scan plus one point read per event. The row costs roughly the
//! URI's length per event; the log is never truncated, so neither is this index.
//!
//! Only events readers may see are returned: one not yet flushed stays hidden here exactly as
//! it does in [`Store::events_after`].

use std::collections::HashMap;

use super::codec::pair_prefix;
use super::error::StoreError;
use super::log::Event;
use super::{Inner, Store};

/// The `log_by_uri` key of one event.
pub(super) fn key(uri: &str, set: &str, seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(uri.len() + set.len() + 10);
    k.extend_from_slice(uri.as_bytes());
    k.push(0);
    k.extend_from_slice(set.as_bytes());
    k.push(0);
    k.extend_from_slice(&seq.to_be_bytes());
    k
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
        let mut visible: HashMap<String, u64> = HashMap::new();
        let mut ranked = Vec::new();
        let mut rank = 0usize;
        for k in inner.trees.log_by_uri.scan_prefix(&prefix).keys() {
            let k = k?;
            let (set, seq) =
                split_rest(&k[prefix.len()..]).ok_or_else(|| StoreError::corrupt("event index", hex::encode(&k)))?;
            let limit = match visible.get(&set) {
                Some(&v) => v,
                None => {
                    rank = 0; // keys come grouped by set, in seq order
                    let v = inner.visible_seq(&set)?;
                    visible.insert(set.clone(), v);
                    v
                }
            };
            if seq > limit {
                continue;
            }
            let event = inner
                .event(&set, seq)?
                .ok_or_else(|| StoreError::corrupt("event index", format!("{uri}: event {set} #{seq} is missing")))?;
            ranked.push((rank, set, event));
            rank += 1;
        }
        ranked
            .sort_by(|(ra, sa, a), (rb, sb, b)| a.datetime.cmp(&b.datetime).then(ra.cmp(rb)).then_with(|| sa.cmp(sb)));
        Ok(ranked.into_iter().map(|(_, set, e)| (set, e)).collect())
    }
}

impl Inner {
    /// Whether the `log_by_uri` row of an event exists (for `verify`).
    pub(super) fn has_history_row(&self, uri: &str, set: &str, seq: u64) -> Result<bool, StoreError> {
        Ok(self.trees.log_by_uri.contains_key(key(uri, set, seq))?)
    }

    /// Rows of `log_by_uri` whose event does not exist or names another URI (for `verify`).
    pub(super) fn dangling_history_rows(&self) -> Result<Vec<String>, StoreError> {
        let mut out = Vec::new();
        for k in self.trees.log_by_uri.iter().keys() {
            let k = k?;
            let parsed = k.iter().position(|&b| b == 0).and_then(|nul| {
                let uri = String::from_utf8_lossy(&k[..nul]).into_owned();
                split_rest(&k[nul + 1..]).map(|(set, seq)| (uri, set, seq))
            });
            let ok = match &parsed {
                Some((uri, set, seq)) => self.event(set, *seq)?.is_some_and(|e| &e.uri == uri),
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
}
