//! Borrowed views of stored records, for readers that stream many of them.
//!
//! Decoding a [`Record`] allocates a string for every URI, media type, digest and link and
//! parses three datetimes; for a 100,000-entry Resource List that is most of the cost. A
//! [`RecordView`] reads the same bytes without copying: strings borrow from the stored row
//! and datetimes stay in their stored W3C text (which is exactly how a document writes them).
//! The row's layout, and how the fields it leaves out are filled back in, is [`super::row`]'s.
//!
//! [`RawRecord`] owns the stored bytes (the database's reference-counted buffers, kept
//! private) for as long as a view of them is needed.

use serde::Deserialize;

use super::blob::BlobId;
use super::error::StoreError;
use super::record::Record;
use super::row;
use super::table::{Bytes, TableIter};
use super::{Snapshot, Store};

/// A record as stored, borrowed. See [`Record`](super::Record) for the meaning of each field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordView<'a> {
    /// Tributary's URI.
    pub uri: &'a str,
    /// The source id.
    pub source: &'a str,
    /// The sets of the latest write.
    pub sets: Vec<&'a str>,
    /// The origin URI.
    pub origin: &'a str,
    /// The upstream URI.
    pub upstream: &'a str,
    /// The content's sha-256.
    pub sha256: BlobId,
    /// md5 (hex), when computed.
    pub md5: Option<&'a str>,
    /// Length in bytes.
    pub length: u64,
    /// Declared hashes as `(algorithm, value)`.
    pub declared: Vec<(&'a str, &'a str)>,
    /// Media type.
    pub media_type: Option<&'a str>,
    /// The upstream's `lastmod`, as W3C text.
    pub lastmod: Option<&'a str>,
    /// The `via` attributes.
    pub via: ViaView<'a>,
    /// Inherited links.
    pub links: Vec<LinkView<'a>>,
    /// When deleted, as W3C text.
    pub deleted: Option<&'a str>,
    /// When Tributary's copy last changed, as W3C text.
    pub changed: &'a str,
    /// Per set, the seq of the resource's latest event there.
    pub heads: Vec<(&'a str, u64)>,
}

/// The `via` attributes, borrowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViaView<'a> {
    /// `modified`, as W3C text.
    pub modified: Option<&'a str>,
    /// `hash` as `(algorithm, value)`.
    pub hash: Vec<(&'a str, &'a str)>,
    /// `length`
    pub length: Option<u64>,
    /// `type`
    pub media_type: Option<&'a str>,
}

/// An inherited link, borrowed.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LinkView<'a> {
    /// `rel`
    pub rel: &'a str,
    /// `href`
    pub href: &'a str,
    /// `encoding`
    pub encoding: Option<&'a str>,
    /// `hash` as `(algorithm, value)`.
    #[serde(borrow)]
    pub hash: Option<Vec<(&'a str, &'a str)>>,
    /// `length`
    pub length: Option<u64>,
    /// `modified`, as W3C text.
    pub modified: Option<&'a str>,
    /// `path`
    pub path: Option<&'a str>,
    /// `pri`
    pub pri: Option<u32>,
    /// `type`
    pub media_type: Option<&'a str>,
    /// Attributes in other namespaces.
    #[serde(borrow)]
    pub extra: Vec<AttrView<'a>>,
}

/// A foreign attribute of a link, borrowed.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct AttrView<'a> {
    /// Namespace URI.
    pub ns: Option<&'a str>,
    /// Prefix.
    pub prefix: Option<&'a str>,
    /// Local name.
    pub local: &'a str,
    /// Value.
    pub value: &'a str,
}

impl RecordView<'_> {
    /// True when the resource has been deleted upstream.
    pub fn is_deleted(&self) -> bool {
        self.deleted.is_some()
    }
}

/// What a listing of many records shows of each (an OAI-PMH list of a million): a record
/// read without its sets, md5, declared hashes, length and `via`, which [`RawRecord::head`]
/// skips over rather than decodes: about a third less work per record than a [`RecordView`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordHead<'a> {
    /// Tributary's URI.
    pub uri: &'a str,
    /// The source id.
    pub source: &'a str,
    /// The origin URI.
    pub origin: &'a str,
    /// The upstream URI.
    pub upstream: &'a str,
    /// The content's sha-256.
    pub sha256: BlobId,
    /// Media type.
    pub media_type: Option<&'a str>,
    /// The upstream's `lastmod`, as W3C text.
    pub lastmod: Option<&'a str>,
    /// Inherited links.
    pub links: Vec<LinkView<'a>>,
    /// When deleted, as W3C text.
    pub deleted: Option<&'a str>,
    /// When Tributary's copy last changed, as W3C text.
    pub changed: &'a str,
    /// Per set, the seq of the resource's latest event there.
    pub heads: Vec<(&'a str, u64)>,
}

impl RecordHead<'_> {
    /// True when the resource has been deleted upstream.
    pub fn is_deleted(&self) -> bool {
        self.deleted.is_some()
    }
}

/// One stored record's bytes (its key is its URI); [`RawRecord::view`] reads them.
pub struct RawRecord {
    key: Bytes,
    value: Bytes,
}

impl RawRecord {
    /// The record, borrowed from these bytes.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when the bytes are not a record.
    pub fn view(&self) -> Result<RecordView<'_>, StoreError> {
        row::decode_view(&self.key, &self.value)
    }

    /// What a listing shows of the record, borrowed from these bytes (see [`RecordHead`]).
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when the bytes are not a record.
    pub fn head(&self) -> Result<RecordHead<'_>, StoreError> {
        row::decode_head(&self.key, &self.value)
    }

    /// The record, decoded into owned values.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when the bytes are not a record.
    pub fn record(&self) -> Result<Record, StoreError> {
        row::decode(&self.key, &self.value)
    }
}

impl std::fmt::Debug for RawRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawRecord").field("bytes", &self.value.len()).finish()
    }
}

/// Streams [`RawRecord`]s in URI order; see [`Store::raw_records_in_range`].
pub struct RawRecordIter {
    iter: TableIter,
}

impl Iterator for RawRecordIter {
    type Item = Result<RawRecord, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.iter.next()?.map(|(key, value)| RawRecord { key, value }))
    }
}

impl std::fmt::Debug for RawRecordIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RawRecordIter")
    }
}

impl Store {
    /// As [`Store::records_in_range`], but undecoded: call [`RawRecord::view`] on each.
    pub fn raw_records_in_range(&self, prefix: &str, from: &str, until: Option<&str>) -> RawRecordIter {
        self.snapshot_now().raw_records_in_range(prefix, from, until)
    }
}

impl Snapshot {
    /// The record for `uri` as of the snapshot, undecoded (see [`RawRecord::view`]).
    ///
    /// # Errors
    /// [`StoreError::Database`].
    pub fn raw_record(&self, uri: &str) -> Result<Option<RawRecord>, StoreError> {
        let records = &self.store.inner.trees.records;
        let value = records.get_in(&self.view, uri.as_bytes())?;
        Ok(value.map(|value| RawRecord { key: Bytes::from(uri.as_bytes()), value }))
    }

    /// [`Store::raw_records_in_range`], as of the snapshot.
    pub fn raw_records_in_range(&self, prefix: &str, from: &str, until: Option<&str>) -> RawRecordIter {
        RawRecordIter { iter: self.record_range(prefix, from, until) }
    }
}
