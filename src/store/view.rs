//! Borrowed views of stored records, for readers that stream many of them.
//!
//! Decoding a [`Record`] allocates a string for every URI, media type, digest and link and
//! parses three datetimes; for a 100,000-entry Resource List that is most of the cost. A
//! [`RecordView`] decodes the same bytes without copying: strings borrow from the stored
//! value and datetimes stay in their stored W3C text (which is exactly how a document writes
//! them). It mirrors `Record`'s serialized layout field for field — postcard is positional —
//! and a test encodes a fully populated `Record` and checks every field of its view, so the
//! two cannot drift apart unnoticed.
//!
//! [`RawRecord`] owns the stored bytes (sled's buffer, kept private) for as long as a view of
//! them is needed.

use serde::Deserialize;

use super::Store;
use super::blob::BlobId;
use super::codec;
use super::error::StoreError;
use super::record::Record;
use super::table::TableIter;

/// A record as stored, borrowed. See [`Record`](super::Record) for the meaning of each field.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RecordView<'a> {
    /// Tributary's URI.
    pub uri: &'a str,
    /// The source id.
    pub source: &'a str,
    /// The sets of the latest write.
    #[serde(borrow)]
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
    #[serde(borrow)]
    pub declared: Vec<(&'a str, &'a str)>,
    /// Media type.
    pub media_type: Option<&'a str>,
    /// The upstream's `lastmod`, as W3C text.
    pub lastmod: Option<&'a str>,
    /// The `via` attributes.
    #[serde(borrow)]
    pub via: ViaView<'a>,
    /// Inherited links.
    #[serde(borrow)]
    pub links: Vec<LinkView<'a>>,
    /// When deleted, as W3C text.
    pub deleted: Option<&'a str>,
    /// When Tributary's copy last changed, as W3C text.
    pub changed: &'a str,
}

/// The `via` attributes, borrowed.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ViaView<'a> {
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

/// One stored record's bytes; [`RawRecord::view`] reads them.
pub struct RawRecord {
    value: sled::IVec,
}

impl RawRecord {
    /// The record, borrowed from these bytes.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when the bytes are not a record.
    pub fn view(&self) -> Result<RecordView<'_>, StoreError> {
        codec::decode("record", &self.value)
    }

    /// The record, decoded into owned values.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when the bytes are not a record.
    pub fn record(&self) -> Result<Record, StoreError> {
        codec::decode("record", &self.value)
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
        Some(self.iter.next()?.map(|(_, value)| RawRecord { value }).map_err(StoreError::from))
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
        RawRecordIter { iter: self.record_range(prefix, from, until) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ForeignAttr, HashList, Link};
    use crate::store::Via;

    fn full_record() -> Record {
        let mut link = Link::new("describedby", "http://o/meta");
        link.hash = Some(HashList::parse("md5:1e0d5cb8ef6ba40c99b14c0237be735e").unwrap().0);
        link.modified = Some("2013-01-03T09:00:00.120Z".parse().unwrap());
        link.encoding = Some("gzip".into());
        link.path = Some("/p".into());
        link.pri = Some(3);
        link.length = Some(9);
        link.media_type = Some("application/xml".into());
        link.extra.push(ForeignAttr {
            ns: Some("urn:x".into()),
            prefix: Some("x".into()),
            local: "k".into(),
            value: "v".into(),
        });
        Record {
            uri: "http://t/r/s/http/o/a".into(),
            source: "s".into(),
            sets: vec!["s".into(), "all".into()],
            origin: "http://o/a".into(),
            upstream: "http://u/a".into(),
            sha256: BlobId([7; 32]),
            md5: Some("00112233445566778899aabbccddeeff".into()),
            length: 42,
            declared: HashList::parse("md5:00112233445566778899aabbccddeeff sha-512:abc").unwrap().0,
            media_type: Some("text/plain".into()),
            lastmod: Some("2024-05-01T10:00:00Z".parse().unwrap()),
            via: Via {
                modified: Some("2024-05-01T09:00:00+01:00".parse().unwrap()),
                hash: HashList::parse("md5:00112233445566778899aabbccddeeff").unwrap().0,
                length: Some(41),
                media_type: Some("text/html".into()),
            },
            links: vec![link, Link::new("alternate", "http://o/a.pdf")],
            deleted: Some("2024-06-01T00:00:00Z".parse().unwrap()),
            changed: "2024-06-01T00:00:00Z".parse().unwrap(),
        }
    }

    #[test]
    fn a_view_reads_every_field_of_a_stored_record() {
        let rec = full_record();
        let bytes = codec::encode(&rec).unwrap();
        let v: RecordView<'_> = codec::decode("record", &bytes).unwrap();
        assert_eq!((v.uri, v.source, v.origin, v.upstream), ("http://t/r/s/http/o/a", "s", "http://o/a", "http://u/a"));
        assert_eq!(v.sets, ["s", "all"]);
        assert_eq!((v.sha256, v.md5, v.length), (rec.sha256, rec.md5.as_deref(), 42));
        assert_eq!(v.declared, [("md5", "00112233445566778899aabbccddeeff"), ("sha-512", "abc")]);
        assert_eq!((v.media_type, v.lastmod), (Some("text/plain"), Some("2024-05-01T10:00:00Z")));
        assert_eq!(v.via.modified, Some("2024-05-01T08:00:00Z"), "stored in UTC, as written");
        assert_eq!(v.via.hash, [("md5", "00112233445566778899aabbccddeeff")]);
        assert_eq!((v.via.length, v.via.media_type), (Some(41), Some("text/html")));
        let l = &v.links[0];
        assert_eq!(
            (l.rel, l.href, l.encoding, l.path, l.pri, l.length),
            ("describedby", "http://o/meta", Some("gzip"), Some("/p"), Some(3), Some(9))
        );
        assert_eq!((l.modified, l.media_type), (Some("2013-01-03T09:00:00.120Z"), Some("application/xml")));
        assert_eq!(l.hash.as_deref(), Some(&[("md5", "1e0d5cb8ef6ba40c99b14c0237be735e")][..]));
        assert_eq!(l.extra, [AttrView { ns: Some("urn:x"), prefix: Some("x"), local: "k", value: "v" }]);
        assert_eq!((v.links[1].rel, v.links[1].href), ("alternate", "http://o/a.pdf"));
        assert_eq!((v.deleted, v.changed), (Some("2024-06-01T00:00:00Z"), "2024-06-01T00:00:00Z"));
        let minimal = Record { md5: None, lastmod: None, links: vec![], deleted: None, ..rec };
        let bytes = codec::encode(&minimal).unwrap();
        let v: RecordView<'_> = codec::decode("record", &bytes).unwrap();
        assert_eq!((v.md5, v.lastmod, v.links.len(), v.deleted), (None, None, 0, None));
        assert!(!v.is_deleted());
    }
}
