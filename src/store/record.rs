//! Resource records and the provenance indexes over them.
//!
//! A record is what Tributary republishes for one resource, keyed by Tributary's own URI: the
//! content's digests and metadata, where it came from (origin via `via`, the upstream URI it
//! was fetched from, the source) and the links it inherits. The indexes answer provenance
//! questions in both directions without a scan: origin URI → Tributary URIs, sha-256 →
//! Tributary URIs, upstream URI → Tributary URI. They are maintained only by [`super::batch`],
//! in the same write batch as the record.
//!
//! A record fetched straight from its origin (upstream = origin, every Source that is not an
//! aggregator) has no index row by origin or upstream at all (store format 5): the harvester
//! names every record from its source and upstream URI ([`crate::naming::Naming::resource`]),
//! so a caller that knows the sources can name the record itself, and the lookups take those
//! names: a row fewer per record written, for an answer the name already gives (docs/STORE.md,
//! "What is stored where").
//!
//! The sha-256 index lists live records only. Together with the blob row's `referrer` (one
//! live record of that content, named in the blob row itself since format 6) it is the blob's
//! reference count: a blob with neither is unreferenced and gc may collect it. Deleted records keep their digests
//! for history and for the `deleted` change entry.

use serde::{Deserialize, Serialize};

use super::blob::BlobId;
use super::codec::{self, hashes, pair_prefix, w3c_opt};
use super::error::StoreError;
use super::row;
use super::table::TableIter;
use super::{Snapshot, Store};
use crate::model::{HashList, Link, W3cDateTime};

/// The attributes of the `via` link Tributary publishes for a resource: the origin's own
/// `modified`, `hash`, `length` and `type` (spec §14.8), as the upstream declared them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Via {
    /// `modified`
    #[serde(with = "w3c_opt")]
    pub modified: Option<W3cDateTime>,
    /// `hash`
    #[serde(with = "hashes")]
    pub hash: HashList,
    /// `length`
    pub length: Option<u64>,
    /// `type`
    pub media_type: Option<String>,
}

/// What an upstream list says about one resource — its provenance as Tributary records and
/// republishes it: where the original is (`origin`, the `via` target), what the upstream
/// declared of the content, the `via` link's attributes and the links it carries. One type
/// for the harvester's entry, the record it writes and the failure it keeps, so the fields
/// travel together instead of being copied between look-alike structs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Listing {
    /// The origin URI: the entry's `via` target (the original resource, even through
    /// aggregator chains), else its `<loc>`.
    pub origin: String,
    /// The declared hashes, verbatim (including algorithms Tributary does not verify).
    pub declared: HashList,
    /// The declared length.
    pub length: Option<u64>,
    /// The declared media type.
    pub media_type: Option<String>,
    /// The entry's `lastmod`.
    pub lastmod: Option<W3cDateTime>,
    /// Attributes of the `via` link the record is published with.
    pub via: Via,
    /// The entry's `rs:ln` links other than `via`, as they came (`duplicate` mirrors among
    /// them); the publisher filters them by the source's link policy when it serves the
    /// record (`publish/links.rs`).
    pub links: Vec<Link>,
}

/// What the harvester supplies to create or update a record. The blob must already be stored
/// ([`Store::put`]); its length and md5/sha-1, when known, are taken from the blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRecord {
    /// Tributary's own URI for the resource (the key).
    pub uri: String,
    /// The source id from `sources.toml`.
    pub source: String,
    /// The URI the bitstream was fetched from.
    pub upstream: String,
    /// The content.
    pub sha256: BlobId,
    /// What the upstream listed.
    pub listing: Listing,
}

/// A stored resource record (its stored form is [`super::row`]'s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Tributary's URI for the resource.
    pub uri: String,
    /// The source id.
    pub source: String,
    /// The sets whose live counters include this record (those of its latest write).
    pub sets: Vec<String>,
    /// The origin URI (`via` target).
    pub origin: String,
    /// Where the bitstream was fetched from.
    pub upstream: String,
    /// The content's sha-256.
    pub sha256: BlobId,
    /// The content's md5 (hex), when computed at put time.
    pub md5: Option<String>,
    /// Length in bytes.
    pub length: u64,
    /// The upstream's declared hashes.
    pub declared: HashList,
    /// Media type.
    pub media_type: Option<String>,
    /// The upstream's `lastmod`.
    pub lastmod: Option<W3cDateTime>,
    /// `via` link attributes.
    pub via: Via,
    /// Inherited links.
    pub links: Vec<Link>,
    /// When Tributary recorded the deletion; `None` for a live resource.
    pub deleted: Option<W3cDateTime>,
    /// When Tributary last changed this record (its own clock).
    pub changed: W3cDateTime,
    /// Per set this resource has change events in, the seq of the latest: where its history
    /// starts (each event names the one before it; see [`super::history`]).
    pub heads: Vec<(String, u64)>,
}

impl Record {
    /// What the upstream last listed of the resource, as the harvester would record it again.
    pub fn listing(&self) -> Listing {
        Listing {
            origin: self.origin.clone(),
            declared: self.declared.clone(),
            length: Some(self.length),
            media_type: self.media_type.clone(),
            lastmod: self.lastmod,
            via: self.via.clone(),
            links: self.links.clone(),
        }
    }

    /// True when the resource has been deleted upstream.
    pub fn is_deleted(&self) -> bool {
        self.deleted.is_some()
    }

    /// Whether `new` says the same as `self`, ignoring Tributary's own times: then an
    /// upsert writes nothing and no event (re-harvesting an unchanged Source is silent).
    pub(super) fn same_content(&self, new: &Record) -> bool {
        // Every field named, so that one added later cannot be left out of the comparison;
        // compared in place: this runs for every resource of every re-harvest.
        let Record {
            uri,
            source,
            sets,
            origin,
            upstream,
            sha256,
            md5,
            length,
            declared,
            media_type,
            lastmod,
            via,
            links,
            deleted,
            changed: _,
            heads,
        } = self;
        deleted.is_none()
            && new.deleted.is_none()
            && *sha256 == new.sha256
            && *length == new.length
            && *uri == new.uri
            && *origin == new.origin
            && *upstream == new.upstream
            && *source == new.source
            && *md5 == new.md5
            && *declared == new.declared
            && *media_type == new.media_type
            && *lastmod == new.lastmod
            && *via == new.via
            && *links == new.links
            && *sets == new.sets
            && *heads == new.heads
    }
}

/// Index keys, shared by the batch writer and verify.
pub(super) mod keys {
    use super::*;

    pub(in super::super) fn by_origin(origin: &str, uri: &str) -> Vec<u8> {
        codec::pair_key(origin.as_bytes(), uri.as_bytes())
    }

    pub(in super::super) fn by_sha(sha: &BlobId, uri: &str) -> Vec<u8> {
        let mut key = Vec::with_capacity(32 + uri.len());
        key.extend_from_slice(&sha.0);
        key.extend_from_slice(uri.as_bytes());
        key
    }
}

impl Store {
    /// The record for a Tributary URI, live or deleted.
    ///
    /// # Errors
    /// [`StoreError::Database`] / [`StoreError::Corrupt`].
    pub fn record(&self, uri: &str) -> Result<Option<Record>, StoreError> {
        self.snapshot_now().record(uri)
    }

    /// Every record, live and deleted, in URI order, streamed (from a snapshot taken now).
    pub fn records(&self) -> RecordIter {
        RecordIter { iter: self.inner.trees.records.iter() }
    }

    /// Every record whose URI starts with `prefix`, in URI order (from a snapshot taken now).
    pub fn records_with_prefix(&self, prefix: &str) -> RecordIter {
        self.snapshot_now().records_with_prefix(prefix)
    }

    /// Records whose URI starts with `prefix` and lies in `from <= uri < until` (`until =
    /// None`: no upper bound), in URI order, live and deleted. A key-range scan: the publisher
    /// pages a set's Resource List by ranges of URIs without reading the records before them.
    pub fn records_in_range(&self, prefix: &str, from: &str, until: Option<&str>) -> RecordIter {
        self.snapshot_now().records_in_range(prefix, from, until)
    }

    /// A snapshot for one read, without the write lock [`Store::snapshot`] takes for its `at`.
    pub(super) fn snapshot_now(&self) -> Snapshot {
        Snapshot { store: self.clone(), view: self.inner.db.view(), at: W3cDateTime::now() }
    }
}

impl Snapshot {
    /// [`Store::record`], as of the snapshot.
    ///
    /// # Errors
    /// [`StoreError::Database`] / [`StoreError::Corrupt`].
    pub fn record(&self, uri: &str) -> Result<Option<Record>, StoreError> {
        let records = &self.store.inner.trees.records;
        records.get_in(&self.view, uri.as_bytes())?.map(|v| row::decode(uri.as_bytes(), &v)).transpose()
    }

    /// [`Store::records_with_prefix`], as of the snapshot.
    pub fn records_with_prefix(&self, prefix: &str) -> RecordIter {
        RecordIter { iter: self.store.inner.trees.records.scan_prefix_in(&self.view, prefix.as_bytes()) }
    }

    /// [`Store::records_in_range`], as of the snapshot.
    pub fn records_in_range(&self, prefix: &str, from: &str, until: Option<&str>) -> RecordIter {
        RecordIter { iter: self.record_range(prefix, from, until) }
    }

    /// The rows of `records_in_range`, undecoded.
    pub(super) fn record_range(&self, prefix: &str, from: &str, until: Option<&str>) -> TableIter {
        let start = if from.as_bytes() > prefix.as_bytes() { from.as_bytes() } else { prefix.as_bytes() };
        let prefix_end = successor(prefix.as_bytes());
        let end = match (until.map(str::as_bytes), prefix_end.as_deref()) {
            (Some(u), Some(p)) => Some(u.min(p)),
            (Some(u), None) => Some(u),
            (None, p) => p,
        };
        // An empty range is `start..start`, never an inverted one.
        self.store.inner.trees.records.range_in(&self.view, start, end.map(|e| e.max(start)))
    }
}

impl Store {
    /// Tributary URIs of the live records whose origin (`via` target) is `origin`, in URI
    /// order. `named` are the URIs the sources that may hold it give `origin` as an upstream
    /// URI (see the module docs): a record fetched from its origin is found only there.
    ///
    /// # Errors
    /// [`StoreError::Database`] / [`StoreError::Corrupt`].
    pub fn uris_by_origin(&self, origin: &str, named: &[String]) -> Result<Vec<String>, StoreError> {
        let prefix = pair_prefix(origin.as_bytes());
        let mut uris = suffixes(self.inner.trees.by_origin.scan_prefix(&prefix), prefix.len())?;
        for uri in named {
            if self.fetched_from_origin(uri, origin)? {
                uris.push(uri.clone());
            }
        }
        uris.sort();
        uris.dedup();
        Ok(uris)
    }

    /// Tributary URIs of the live records whose content has this sha-256, in URI order.
    ///
    /// # Errors
    /// [`StoreError::Database`] / [`StoreError::Corrupt`].
    pub fn uris_by_sha256(&self, sha: &BlobId) -> Result<Vec<String>, StoreError> {
        // The blob row names one of them, the index the others (see `BlobRow::referrer`).
        let mut uris = suffixes(self.inner.trees.by_sha.scan_prefix(sha.0), 32)?;
        if let Some(first) = self.inner.blob_row(sha)?.and_then(|row| row.referrer) {
            let at = uris.binary_search(&first).unwrap_or_else(|at| at);
            uris.insert(at, first);
        }
        Ok(uris)
    }

    /// The Tributary URI of the live record fetched from `upstream`, given `named` as in
    /// [`Store::uris_by_origin`]. When several are (two sources listing one URI), one fetched
    /// through an aggregator wins, then the first in URI order.
    ///
    /// # Errors
    /// [`StoreError::Database`] / [`StoreError::Corrupt`].
    pub fn uri_by_upstream(&self, upstream: &str, named: &[String]) -> Result<Option<String>, StoreError> {
        // Every record is named from its source and upstream URI, so the candidates are all
        // in `named` (format 7 dropped the upstream index that held the same answer).
        let mut best: Option<(bool, &String)> = None;
        for uri in named {
            let Some(rec) = self.inner.trees.records.get(uri.as_bytes())? else { continue };
            let rec = row::decode_view(uri.as_bytes(), &rec)?;
            if rec.is_deleted() || rec.upstream != upstream {
                continue;
            }
            // `false` sorts first: a record fetched through an aggregator wins.
            let key = (rec.upstream == rec.origin, uri);
            if best.is_none_or(|b| key < b) {
                best = Some(key);
            }
        }
        Ok(best.map(|(_, uri)| uri.clone()))
    }

    /// Whether `uri` is a live record fetched from its origin, `origin`.
    fn fetched_from_origin(&self, uri: &str, origin: &str) -> Result<bool, StoreError> {
        let Some(v) = self.inner.trees.records.get(uri.as_bytes())? else { return Ok(false) };
        let rec = row::decode_view(uri.as_bytes(), &v)?;
        Ok(!rec.is_deleted() && rec.origin == origin && rec.upstream == origin)
    }
}

/// The smallest byte string greater than every string starting with `prefix`; `None` when
/// there is none (empty, or all 0xFF).
fn successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut s = prefix.to_vec();
    while let Some(last) = s.pop() {
        if last < 0xFF {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}

fn utf8(what: &'static str, bytes: &[u8]) -> Result<String, StoreError> {
    String::from_utf8(bytes.to_vec()).map_err(|e| StoreError::corrupt(what, e))
}

fn suffixes(iter: TableIter, skip: usize) -> Result<Vec<String>, StoreError> {
    iter.keys().map(|k| utf8("index key", &k?[skip..])).collect()
}

/// Streams records in URI order; see [`Store::records`].
pub struct RecordIter {
    iter: TableIter,
}

impl Iterator for RecordIter {
    type Item = Result<Record, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = self.iter.next()?;
        Some(item.and_then(|(k, v)| row::decode(&k, &v)))
    }
}

impl std::fmt::Debug for RecordIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecordIter")
    }
}
