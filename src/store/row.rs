//! The stored form of a record (unchanged since store format 4), and how [`Record`]s and [`RecordView`]s are
//! made from it.
//!
//! Record rows are most of what a Resource List walk reads and most of the bytes a harvest
//! writes (docs/STORE.md, "Sizing"), so a row
//! leaves out whatever the record can rebuild:
//! - the Tributary URI, which is the row's key;
//! - the upstream URI when it is the origin (every Source that is not itself an aggregator);
//! - the md5 when it is the one the upstream declared;
//! - each `via` attribute that repeats the record's own. The harvester copies an entry's
//!   `lastmod`, `hash`, `length` and `type` into `via` when the upstream is the origin, so
//!   for most records the whole `via` is four bytes.
//!
//! Readers never see the difference: [`decode_view`] fills every elided field back in.
//! [`RowOut`] (written) and [`RowIn`] (read) must keep the same field order, since postcard
//! is positional; a test round-trips a record with every field populated and different.

use serde::{Deserialize, Serialize};

use super::blob::BlobId;
use super::codec;
use super::error::StoreError;
use super::record::{Record, Via};
use super::view::{LinkView, RecordHead, RecordView, ViaView};
use crate::model::{ForeignAttr, HashAlgorithm, HashList, Link, W3cDateTime};

/// Where a record's md5 is.
#[derive(Serialize, Deserialize)]
enum Md5<'a> {
    /// Not computed.
    Unknown,
    /// Equal to the declared `md5` digest.
    Declared,
    /// Its hex value.
    Hex(&'a str),
}

/// A record as written.
#[derive(Serialize)]
struct RowOut<'a> {
    source: &'a str,
    sets: &'a [String],
    origin: &'a str,
    /// `None`: the origin.
    upstream: Option<&'a str>,
    sha256: BlobId,
    md5: Md5<'a>,
    length: u64,
    declared: Vec<(&'a str, &'a str)>,
    media_type: Option<&'a str>,
    lastmod: Option<String>,
    via: ViaOut<'a>,
    #[serde(serialize_with = "links_out")]
    links: &'a [Link],
    deleted: Option<String>,
    changed: String,
    heads: Vec<(&'a str, u64)>,
}

/// `via` as written; each `None` stands for the record's own value (see the module docs).
#[derive(Serialize)]
struct ViaOut<'a> {
    modified: Option<Option<String>>,
    hash: Option<Vec<(&'a str, &'a str)>>,
    length: Option<Option<u64>>,
    media_type: Option<Option<&'a str>>,
}

/// A record as read, borrowing the row's bytes.
#[derive(Deserialize)]
struct RowIn<'a> {
    source: &'a str,
    #[serde(borrow)]
    sets: Vec<&'a str>,
    origin: &'a str,
    upstream: Option<&'a str>,
    sha256: BlobId,
    #[serde(borrow)]
    md5: Md5<'a>,
    length: u64,
    #[serde(borrow)]
    declared: Vec<(&'a str, &'a str)>,
    media_type: Option<&'a str>,
    lastmod: Option<&'a str>,
    #[serde(borrow)]
    via: ViaIn<'a>,
    #[serde(borrow)]
    links: Vec<LinkView<'a>>,
    deleted: Option<&'a str>,
    changed: &'a str,
    #[serde(borrow)]
    heads: Vec<(&'a str, u64)>,
}

#[derive(Deserialize)]
struct ViaIn<'a> {
    modified: Option<Option<&'a str>>,
    #[serde(borrow)]
    hash: Option<Vec<(&'a str, &'a str)>>,
    length: Option<Option<u64>>,
    media_type: Option<Option<&'a str>>,
}

fn links_out<S: serde::Serializer>(links: &&[Link], s: S) -> Result<S::Ok, S::Error> {
    codec::links::serialize(links, s)
}

/// `value`, or `None` when it equals what a reader would fill in anyway.
fn unless_same<T: PartialEq>(value: T, same: T) -> Option<T> {
    (value != same).then_some(value)
}

fn pairs(list: &HashList) -> Vec<(&str, &str)> {
    list.0.iter().map(|d| (d.algorithm.as_str(), d.value.as_str())).collect()
}

/// The value of the `md5` digest in `declared`, if any.
fn declared_md5<'a>(declared: &[(&'a str, &'a str)]) -> Option<&'a str> {
    declared.iter().find(|(alg, _)| *alg == HashAlgorithm::Md5.as_str()).map(|(_, v)| *v)
}

/// A record row's value (behind the codec's version byte).
pub(super) fn encode(rec: &Record) -> Result<Vec<u8>, StoreError> {
    let declared = pairs(&rec.declared);
    let md5 = match rec.md5.as_deref() {
        None => Md5::Unknown,
        Some(m) if declared_md5(&declared) == Some(m) => Md5::Declared,
        Some(m) => Md5::Hex(m),
    };
    let via = ViaOut {
        modified: unless_same(rec.via.modified, rec.lastmod).map(|t| t.map(|t| t.to_string())),
        hash: unless_same(&rec.via.hash, &rec.declared).map(pairs),
        length: unless_same(rec.via.length, Some(rec.length)),
        media_type: unless_same(rec.via.media_type.as_deref(), rec.media_type.as_deref()),
    };
    codec::encode(&RowOut {
        source: &rec.source,
        sets: &rec.sets,
        origin: &rec.origin,
        upstream: unless_same(rec.upstream.as_str(), rec.origin.as_str()),
        sha256: rec.sha256,
        md5,
        length: rec.length,
        declared,
        media_type: rec.media_type.as_deref(),
        lastmod: rec.lastmod.map(|t| t.to_string()),
        via,
        links: &rec.links,
        deleted: rec.deleted.map(|t| t.to_string()),
        changed: rec.changed.to_string(),
        heads: rec.heads.iter().map(|(set, seq)| (set.as_str(), *seq)).collect(),
    })
}

/// The record stored under `key` (its URI) as `value`, borrowed, with every elided field
/// filled back in.
pub(super) fn decode_view<'a>(key: &'a [u8], value: &'a [u8]) -> Result<RecordView<'a>, StoreError> {
    let uri = std::str::from_utf8(key).map_err(|e| StoreError::corrupt("record key", e))?;
    let row: RowIn<'a> = codec::decode("record", value)?;
    let md5 = match row.md5 {
        Md5::Unknown => None,
        Md5::Declared => Some(
            declared_md5(&row.declared)
                .ok_or_else(|| StoreError::corrupt("record", "md5 refers to no declared md5"))?,
        ),
        Md5::Hex(m) => Some(m),
    };
    let via = ViaView {
        modified: row.via.modified.unwrap_or(row.lastmod),
        hash: row.via.hash.unwrap_or_else(|| row.declared.clone()),
        length: row.via.length.unwrap_or(Some(row.length)),
        media_type: row.via.media_type.unwrap_or(row.media_type),
    };
    Ok(RecordView {
        uri,
        source: row.source,
        sets: row.sets,
        origin: row.origin,
        upstream: row.upstream.unwrap_or(row.origin),
        sha256: row.sha256,
        md5,
        length: row.length,
        declared: row.declared,
        media_type: row.media_type,
        lastmod: row.lastmod,
        via,
        links: row.links,
        deleted: row.deleted,
        changed: row.changed,
        heads: row.heads,
    })
}

/// A record as a listing reads it: [`RowIn`]'s fields in its order, those a [`RecordHead`]
/// leaves out passed over (strings as bytes, with no UTF-8 check; sequences not collected).
#[derive(Deserialize)]
struct HeadIn<'a> {
    source: &'a str,
    #[serde(borrow)]
    _sets: Skip<&'a [u8]>,
    origin: &'a str,
    upstream: Option<&'a str>,
    sha256: BlobId,
    #[serde(borrow)]
    _md5: Md5<'a>,
    _length: u64,
    #[serde(borrow)]
    _declared: Skip<(&'a [u8], &'a [u8])>,
    media_type: Option<&'a str>,
    lastmod: Option<&'a str>,
    #[serde(borrow)]
    _via: ViaSkip<'a>,
    #[serde(borrow)]
    links: Vec<LinkView<'a>>,
    deleted: Option<&'a str>,
    changed: &'a str,
    #[serde(borrow)]
    heads: Vec<(&'a str, u64)>,
}

/// [`ViaIn`], passed over.
#[derive(Deserialize)]
struct ViaSkip<'a> {
    #[serde(borrow)]
    _modified: Option<Option<&'a [u8]>>,
    #[serde(borrow)]
    _hash: Option<Skip<(&'a [u8], &'a [u8])>>,
    _length: Option<Option<u64>>,
    #[serde(borrow)]
    _media_type: Option<Option<&'a [u8]>>,
}

/// A sequence of `T` read and dropped: postcard is positional, so what is skipped must still
/// be read, but need not be kept.
struct Skip<T>(std::marker::PhantomData<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Skip<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Each<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Each<T> {
            type Value = Skip<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a sequence")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Skip<T>, A::Error> {
                while seq.next_element::<T>()?.is_some() {}
                Ok(Skip(std::marker::PhantomData))
            }
        }
        d.deserialize_seq(Each(std::marker::PhantomData))
    }
}

/// What a listing shows of the record stored under `key` as `value`, borrowed.
pub(super) fn decode_head<'a>(key: &'a [u8], value: &'a [u8]) -> Result<RecordHead<'a>, StoreError> {
    let uri = std::str::from_utf8(key).map_err(|e| StoreError::corrupt("record key", e))?;
    let row: HeadIn<'a> = codec::decode("record", value)?;
    Ok(RecordHead {
        uri,
        source: row.source,
        origin: row.origin,
        upstream: row.upstream.unwrap_or(row.origin),
        sha256: row.sha256,
        media_type: row.media_type,
        lastmod: row.lastmod,
        links: row.links,
        deleted: row.deleted,
        changed: row.changed,
        heads: row.heads,
    })
}

/// The record stored under `key` as `value`, owned.
pub(super) fn decode(key: &[u8], value: &[u8]) -> Result<Record, StoreError> {
    to_record(&decode_view(key, value)?)
}

/// An owned record from a view of one.
fn to_record(v: &RecordView<'_>) -> Result<Record, StoreError> {
    Ok(Record {
        uri: v.uri.to_owned(),
        source: v.source.to_owned(),
        sets: v.sets.iter().map(|s| (*s).to_owned()).collect(),
        origin: v.origin.to_owned(),
        upstream: v.upstream.to_owned(),
        sha256: v.sha256,
        md5: v.md5.map(str::to_owned),
        length: v.length,
        declared: hash_list(&v.declared),
        media_type: v.media_type.map(str::to_owned),
        lastmod: datetime_opt(v.lastmod)?,
        via: Via {
            modified: datetime_opt(v.via.modified)?,
            hash: hash_list(&v.via.hash),
            length: v.via.length,
            media_type: v.via.media_type.map(str::to_owned),
        },
        links: v.links.iter().map(to_link).collect::<Result<_, _>>()?,
        deleted: datetime_opt(v.deleted)?,
        changed: datetime(v.changed)?,
        heads: v.heads.iter().map(|(set, seq)| ((*set).to_owned(), *seq)).collect(),
    })
}

fn hash_list(pairs: &[(&str, &str)]) -> HashList {
    codec::hashes::from_pairs(pairs.iter().copied())
}

fn datetime(text: &str) -> Result<W3cDateTime, StoreError> {
    text.parse().map_err(|e| StoreError::corrupt("record datetime", e))
}

fn datetime_opt(text: Option<&str>) -> Result<Option<W3cDateTime>, StoreError> {
    text.map(datetime).transpose()
}

pub(super) fn to_link(l: &LinkView<'_>) -> Result<Link, StoreError> {
    let own = |s: Option<&str>| s.map(str::to_owned);
    Ok(Link {
        rel: l.rel.to_owned(),
        href: l.href.to_owned(),
        encoding: own(l.encoding),
        hash: l.hash.as_deref().map(hash_list),
        length: l.length,
        modified: datetime_opt(l.modified)?,
        path: own(l.path),
        pri: l.pri,
        media_type: own(l.media_type),
        extra: l
            .extra
            .iter()
            .map(|a| ForeignAttr {
                ns: own(a.ns),
                prefix: own(a.prefix),
                local: a.local.to_owned(),
                value: a.value.to_owned(),
            })
            .collect(),
    })
}

/// Whether the record was harvested through an aggregator (its upstream URI is not its
/// origin): only such a record has a `by_origin` row. One fetched from its origin is found by
/// its name (see [`super::record`]).
pub(super) fn via_aggregator(rec: &Record) -> bool {
    rec.upstream != rec.origin
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(harvested_from_origin: bool) -> Record {
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
        let declared = HashList::parse("md5:00112233445566778899aabbccddeeff sha-512:abc").unwrap().0;
        let lastmod = Some("2024-05-01T10:00:00Z".parse().unwrap());
        let via = if harvested_from_origin {
            Via { modified: lastmod, hash: declared.clone(), length: Some(42), media_type: Some("text/plain".into()) }
        } else {
            Via {
                modified: Some("2024-05-01T09:00:00+01:00".parse().unwrap()),
                hash: HashList::parse("md5:ffeeddccbbaa99887766554433221100").unwrap().0,
                length: Some(41),
                media_type: Some("text/html".into()),
            }
        };
        Record {
            uri: "http://t/r/s/http/o/a".into(),
            source: "s".into(),
            sets: vec!["s".into(), "all".into()],
            origin: "http://o/a".into(),
            upstream: if harvested_from_origin { "http://o/a".into() } else { "http://u/a".into() },
            sha256: BlobId([7; 32]),
            md5: Some(if harvested_from_origin { "00112233445566778899aabbccddeeff" } else { "0123" }.into()),
            length: 42,
            declared,
            media_type: Some("text/plain".into()),
            lastmod,
            via,
            links: vec![link, Link::new("alternate", "http://o/a.pdf")],
            deleted: Some("2024-06-01T00:00:00Z".parse().unwrap()),
            changed: "2024-06-01T00:00:00Z".parse().unwrap(),
            heads: vec![("s".into(), 7), ("old".into(), 300)],
        }
    }

    #[test]
    fn same_content_ignores_tributarys_own_time_and_nothing_else() {
        let old = Record { deleted: None, ..record(false) };
        let new = Record { changed: "2025-01-01T00:00:00Z".parse().unwrap(), ..old.clone() };
        assert!(old.same_content(&new));
        type Change = fn(&mut Record);
        let changes: [(&str, Change); 15] = [
            ("uri", |r| r.uri.push('x')),
            ("source", |r| r.source.push('x')),
            ("sets", |r| drop(r.sets.pop())),
            ("origin", |r| r.origin.push('x')),
            ("upstream", |r| r.upstream.push('x')),
            ("sha256", |r| r.sha256 = BlobId([8; 32])),
            ("md5", |r| r.md5 = None),
            ("length", |r| r.length += 1),
            ("declared", |r| r.declared = HashList::default()),
            ("media_type", |r| r.media_type = None),
            ("lastmod", |r| r.lastmod = None),
            ("via", |r| r.via = Via::default()),
            ("links", |r| drop(r.links.pop())),
            ("deleted", |r| r.deleted = Some("2025-01-01T00:00:00Z".parse().unwrap())),
            ("heads", |r| drop(r.heads.pop())),
        ];
        for (field, change) in changes {
            let mut changed = new.clone();
            change(&mut changed);
            assert!(!old.same_content(&changed), "a different {field} is a change");
        }
    }

    #[test]
    fn records_round_trip_whether_or_not_fields_are_elided() {
        for from_origin in [true, false] {
            let rec = record(from_origin);
            let bytes = encode(&rec).unwrap();
            assert_eq!(decode(rec.uri.as_bytes(), &bytes).unwrap(), rec, "from origin: {from_origin}");
            let bare = Record { md5: None, lastmod: None, links: vec![], deleted: None, ..rec.clone() };
            let bytes = encode(&bare).unwrap();
            assert_eq!(decode(rec.uri.as_bytes(), &bytes).unwrap(), bare);
        }
    }

    #[test]
    fn what_a_record_repeats_is_not_stored() {
        let (same, differs) = (encode(&record(true)).unwrap(), encode(&record(false)).unwrap());
        let text = String::from_utf8_lossy(&same);
        assert!(!text.contains("http://t/r/s"), "the URI is the key");
        assert_eq!(text.matches("http://o/a").count(), 2, "origin and the alternate link only: {text}");
        assert_eq!(text.matches("00112233445566778899aabbccddeeff").count(), 1, "md5 once: {text}");
        assert_eq!(text.matches("text/plain").count(), 1);
        assert!(same.len() + 60 < differs.len(), "{} vs {}", same.len(), differs.len());
    }

    #[test]
    fn a_view_reads_every_field() {
        let rec = record(false);
        let bytes = encode(&rec).unwrap();
        let v = decode_view(rec.uri.as_bytes(), &bytes).unwrap();
        assert_eq!((v.uri, v.source, v.origin, v.upstream), ("http://t/r/s/http/o/a", "s", "http://o/a", "http://u/a"));
        assert_eq!(v.sets, ["s", "all"]);
        assert_eq!((v.sha256, v.md5, v.length), (rec.sha256, Some("0123"), 42));
        assert_eq!(v.declared, [("md5", "00112233445566778899aabbccddeeff"), ("sha-512", "abc")]);
        assert_eq!((v.media_type, v.lastmod), (Some("text/plain"), Some("2024-05-01T10:00:00Z")));
        assert_eq!(v.via.modified, Some("2024-05-01T08:00:00Z"), "stored in UTC, as written");
        assert_eq!(v.via.hash, [("md5", "ffeeddccbbaa99887766554433221100")]);
        assert_eq!((v.via.length, v.via.media_type), (Some(41), Some("text/html")));
        let l = &v.links[0];
        assert_eq!(
            (l.rel, l.href, l.encoding, l.path, l.pri, l.length),
            ("describedby", "http://o/meta", Some("gzip"), Some("/p"), Some(3), Some(9))
        );
        assert_eq!((l.modified, l.media_type), (Some("2013-01-03T09:00:00.120Z"), Some("application/xml")));
        assert_eq!(l.hash.as_deref(), Some(&[("md5", "1e0d5cb8ef6ba40c99b14c0237be735e")][..]));
        assert_eq!((v.links[1].rel, v.links[1].href), ("alternate", "http://o/a.pdf"));
        assert_eq!((v.deleted, v.changed), (Some("2024-06-01T00:00:00Z"), "2024-06-01T00:00:00Z"));
        assert_eq!(v.heads, [("s", 7), ("old", 300)]);
        let v = {
            let rec = record(true);
            let bytes = encode(&rec).unwrap();
            let v = decode_view(rec.uri.as_bytes(), &bytes).unwrap();
            (v.upstream.to_owned(), v.md5.map(str::to_owned), v.via.hash.len(), v.via.length, v.via.modified.is_some())
        };
        assert_eq!(v, ("http://o/a".into(), Some("00112233445566778899aabbccddeeff".into()), 2, Some(42), true));
    }

    /// A head is the view without what it skips, for every elision and every field empty.
    #[test]
    fn a_head_reads_what_the_view_does() {
        for from_origin in [true, false] {
            let full = record(from_origin);
            let bare = Record { md5: None, lastmod: None, links: vec![], deleted: None, ..full.clone() };
            let empty = Record { sets: vec![], declared: HashList::default(), heads: vec![], ..bare.clone() };
            for rec in [full, bare, empty] {
                let bytes = encode(&rec).unwrap();
                let v = decode_view(rec.uri.as_bytes(), &bytes).unwrap();
                let h = decode_head(rec.uri.as_bytes(), &bytes).unwrap();
                let want = RecordHead {
                    uri: v.uri,
                    source: v.source,
                    origin: v.origin,
                    upstream: v.upstream,
                    sha256: v.sha256,
                    media_type: v.media_type,
                    lastmod: v.lastmod,
                    links: v.links.clone(),
                    deleted: v.deleted,
                    changed: v.changed,
                    heads: v.heads.clone(),
                };
                assert_eq!(h, want, "from origin: {from_origin}");
            }
        }
        assert!(decode_head(b"k", &encode(&record(true)).unwrap()[..20]).is_err(), "a short row is corrupt");
    }

    #[test]
    fn an_md5_said_to_be_declared_but_missing_is_corruption() {
        let rec = Record { declared: HashList::default(), ..record(true) };
        let forged = codec::encode(&RowOut {
            source: &rec.source,
            sets: &rec.sets,
            origin: &rec.origin,
            upstream: None,
            sha256: rec.sha256,
            md5: Md5::Declared,
            length: rec.length,
            declared: Vec::new(),
            media_type: None,
            lastmod: None,
            via: ViaOut { modified: None, hash: None, length: None, media_type: None },
            links: &[],
            deleted: None,
            changed: rec.changed.to_string(),
            heads: Vec::new(),
        })
        .unwrap();
        assert!(matches!(decode(b"u", &forged), Err(StoreError::Corrupt { .. })));
    }
}
