//! Resources the harvester could not store in their listed state, one row each, kept until
//! the resource is stored, no longer listed, or deleted.
//!
//! The issue's rule is that a resource whose content does not verify is "recorded as a failure
//! for that resource and never stored as good": a counter and a log line tell an operator that
//! something failed, not what, since when, or why. A row here answers those (`api/failures`,
//! `tributary failures`), and it keeps what the upstream listed — the `<loc>`, the declared
//! length and hashes, the record's metadata and links — so a source that follows a Change List
//! can retry the resource on its next poll without the list that named it (a Change List
//! reports a resource once; a failed change would otherwise be lost until the next one).
//!
//! Key: `source \0 Tributary URI` (a source's failures are one prefix scan). The harvester
//! writes and clears rows inside the batches that carry its records, and only for resources it
//! knows to be failing, so a harvest without failures writes no row and reads none here.

use serde::{Deserialize, Serialize};

use super::Store;
use super::codec::{self, check_key, hashes, pair_key, pair_prefix, w3c, w3c_opt};
use super::error::StoreError;
use super::record::{Listing, Via};
use super::table::TableIter;
use super::view::LinkView;
use crate::model::{HashList, Link, W3cDateTime};

/// A failure to record; [`Batch::fail`](super::Batch::fail) merges it with an earlier one of
/// the same resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewFailure {
    /// The source id.
    pub source: String,
    /// Tributary's URI for the resource.
    pub uri: String,
    /// The `<loc>` it was listed at.
    pub upstream: String,
    /// Why it could not be stored (the last URL tried and its error).
    pub reason: String,
    /// What the upstream listed.
    pub listing: Listing,
}

/// A recorded failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The source id.
    pub source: String,
    /// Tributary's URI for the resource.
    pub uri: String,
    /// The `<loc>` it was listed at.
    pub upstream: String,
    /// Why the last attempt failed.
    pub reason: String,
    /// When the first attempt of this run of failures failed.
    pub first_failed: W3cDateTime,
    /// When the last attempt failed.
    pub last_failed: W3cDateTime,
    /// Attempts that failed in a row (each after the fetcher's and the verifier's own retries).
    pub attempts: u32,
    /// What the upstream listed at the last attempt.
    pub listing: Listing,
}

/// The stored form (postcard, behind the codec's version byte).
#[derive(Serialize)]
struct RowOut<'a> {
    upstream: &'a str,
    reason: &'a str,
    #[serde(with = "w3c")]
    first_failed: W3cDateTime,
    #[serde(with = "w3c")]
    last_failed: W3cDateTime,
    attempts: u32,
    origin: &'a str,
    #[serde(with = "hashes")]
    declared: HashList,
    length: Option<u64>,
    media_type: Option<&'a str>,
    #[serde(with = "w3c_opt")]
    lastmod: Option<W3cDateTime>,
    via: &'a Via,
    #[serde(serialize_with = "links_out")]
    links: &'a [Link],
}

/// Its read side: links come back as views, like a record's.
#[derive(Deserialize)]
struct RowIn<'a> {
    upstream: String,
    reason: String,
    #[serde(with = "w3c")]
    first_failed: W3cDateTime,
    #[serde(with = "w3c")]
    last_failed: W3cDateTime,
    attempts: u32,
    origin: String,
    #[serde(with = "hashes")]
    declared: HashList,
    length: Option<u64>,
    media_type: Option<String>,
    #[serde(with = "w3c_opt")]
    lastmod: Option<W3cDateTime>,
    via: Via,
    #[serde(borrow)]
    links: Vec<LinkView<'a>>,
}

fn links_out<S: serde::Serializer>(links: &&[Link], s: S) -> Result<S::Ok, S::Error> {
    codec::links::serialize(links, s)
}

/// The row key of a failure.
pub(super) fn key(source: &str, uri: &str) -> Vec<u8> {
    pair_key(source.as_bytes(), uri.as_bytes())
}

/// Checks the parts of a failure that become keys.
pub(super) fn validate(source: &str, uri: &str) -> Result<(), StoreError> {
    check_key("source id", source)?;
    check_key("resource URI", uri)
}

/// `new` as a row, merged with the row it replaces: the first failure's time is kept and the
/// attempts are counted on.
pub(super) fn encode_merged(new: &NewFailure, old: Option<&[u8]>, now: W3cDateTime) -> Result<Vec<u8>, StoreError> {
    let old = old.map(|v| codec::decode::<RowIn<'_>>("failure", v)).transpose()?;
    let l = &new.listing;
    codec::encode(&RowOut {
        upstream: &new.upstream,
        reason: &new.reason,
        first_failed: old.as_ref().map_or(now, |o| o.first_failed),
        last_failed: now,
        attempts: old.as_ref().map_or(1, |o| o.attempts.saturating_add(1)),
        origin: &l.origin,
        declared: l.declared.clone(),
        length: l.length,
        media_type: l.media_type.as_deref(),
        lastmod: l.lastmod,
        via: &l.via,
        links: &l.links,
    })
}

/// A recorded failure's row as it was, for the import.
pub(super) fn encode(f: &Failure) -> Result<Vec<u8>, StoreError> {
    let l = &f.listing;
    codec::encode(&RowOut {
        upstream: &f.upstream,
        reason: &f.reason,
        first_failed: f.first_failed,
        last_failed: f.last_failed,
        attempts: f.attempts,
        origin: &l.origin,
        declared: l.declared.clone(),
        length: l.length,
        media_type: l.media_type.as_deref(),
        lastmod: l.lastmod,
        via: &l.via,
        links: &l.links,
    })
}

pub(super) fn decode(key: &[u8], value: &[u8]) -> Result<Failure, StoreError> {
    let at = key.iter().position(|b| *b == 0).ok_or_else(|| StoreError::corrupt("failure key", "no separator"))?;
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).map_err(|e| StoreError::corrupt("failure key", e));
    let row: RowIn<'_> = codec::decode("failure", value)?;
    let links = row.links.iter().map(super::row::to_link).collect::<Result<_, _>>()?;
    Ok(Failure {
        source: text(&key[..at])?,
        uri: text(&key[at + 1..])?,
        upstream: row.upstream,
        reason: row.reason,
        first_failed: row.first_failed,
        last_failed: row.last_failed,
        attempts: row.attempts,
        listing: Listing {
            origin: row.origin,
            declared: row.declared,
            length: row.length,
            media_type: row.media_type,
            lastmod: row.lastmod,
            via: row.via,
            links,
        },
    })
}

impl Store {
    /// The recorded failures of `source`, in URI order.
    pub fn failures(&self, source: &str) -> FailureIter {
        FailureIter { inner: self.inner.trees.failures.scan_prefix(pair_prefix(source.as_bytes())) }
    }

    /// The recorded failure of one resource, if any.
    ///
    /// # Errors
    /// [`StoreError::Database`], or [`StoreError::Corrupt`] for an unreadable row.
    pub fn failure(&self, source: &str, uri: &str) -> Result<Option<Failure>, StoreError> {
        let k = key(source, uri);
        self.inner.trees.failures.get(&k)?.map(|v| decode(&k, &v)).transpose()
    }

    /// How many resources of `source` are recorded as failing (a scan of its failures only).
    ///
    /// # Errors
    /// [`StoreError::Database`].
    pub fn failure_count(&self, source: &str) -> Result<u64, StoreError> {
        let mut n = 0;
        for kv in self.inner.trees.failures.scan_prefix(pair_prefix(source.as_bytes())).keys() {
            kv?;
            n += 1;
        }
        Ok(n)
    }
}

/// Failures in key order; see [`Store::failures`].
pub struct FailureIter {
    inner: TableIter,
}

impl Iterator for FailureIter {
    type Item = Result<Failure, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        let kv = self.inner.next()?;
        Some(kv.and_then(|(k, v)| decode(&k, &v)))
    }
}

/// Every failure row must decode and name a source (`store verify`).
pub(super) fn verify_row(key: &[u8], value: &[u8]) -> Result<(), StoreError> {
    decode(key, value).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Batch;

    fn sample() -> NewFailure {
        let mut mirror = Link::new("duplicate", "http://m/a");
        mirror.pri = Some(2);
        NewFailure {
            source: "s".into(),
            uri: "http://agg/r/s/http/o/a".into(),
            upstream: "http://o/a".into(),
            reason: "http://o/a: sha-256 mismatch".into(),
            listing: Listing {
                origin: "http://o/a".into(),
                declared: HashList::parse("md5:0cc175b9c0f1b6a831c399e269772661").unwrap().0,
                length: Some(1),
                media_type: Some("text/plain".into()),
                lastmod: Some("2026-01-01T00:00:00Z".parse().unwrap()),
                via: Via::default(),
                links: vec![mirror],
            },
        }
    }

    #[test]
    fn a_row_round_trips_and_counts_attempts_from_the_first() {
        let new = sample();
        let k = key(&new.source, &new.uri);
        let t1: W3cDateTime = "2026-02-01T00:00:00Z".parse().unwrap();
        let t2: W3cDateTime = "2026-02-02T00:00:00Z".parse().unwrap();
        let first = encode_merged(&new, None, t1).unwrap();
        let second = encode_merged(&NewFailure { reason: "again".into(), ..new.clone() }, Some(&first), t2).unwrap();
        let f = decode(&k, &second).unwrap();
        assert_eq!((f.source.as_str(), f.uri.as_str()), ("s", new.uri.as_str()));
        assert_eq!((f.first_failed, f.last_failed, f.attempts), (t1, t2, 2));
        assert_eq!(f.reason, "again");
        assert_eq!(f.listing, new.listing, "the listing, links and all, comes back as written");
    }

    #[test]
    fn batches_record_merge_and_clear_failures_durably() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let store = Store::open(&path).unwrap();
        let new = sample();
        let other = NewFailure { source: "t".into(), ..sample() };
        let mut b = Batch::new();
        b.fail(new.clone()).fail(new.clone()).fail(other.clone());
        assert_eq!(b.len(), 3, "failure rows count toward a batch's size");
        let applied = store.apply(&mut b).unwrap();
        assert!(b.is_empty(), "an applied batch is left empty");
        assert!(applied.ops.is_empty(), "failures write no record and no event");
        let f = store.failure("s", &new.uri).unwrap().unwrap();
        assert_eq!(f.attempts, 2, "a second failure in the same batch counts on");
        assert_eq!(store.failure_count("s").unwrap(), 1);
        assert_eq!(store.failure_count("t").unwrap(), 1, "sources are kept apart");
        assert!(store.events_after("s", 0).unwrap().next().is_none());
        assert!(store.verify().unwrap().is_clean());
        drop(store);

        let store = Store::open(&path).unwrap();
        assert_eq!(store.failures("s").next().unwrap().unwrap(), f, "survives a reopen");
        let mut b = Batch::new();
        b.clear_failure("s", &new.uri).clear_failure("s", "http://agg/never-failed");
        store.apply(&mut b).unwrap();
        assert!(store.failure("s", &new.uri).unwrap().is_none());
        assert_eq!(store.failure_count("t").unwrap(), 1);
        let mut b = Batch::new();
        b.fail(NewFailure { uri: "bad\0key".into(), ..sample() });
        assert!(matches!(store.apply(&mut b), Err(StoreError::InvalidKey { .. })));
        assert_eq!(b.len(), 1, "a refused batch is left as it was");
    }
}
