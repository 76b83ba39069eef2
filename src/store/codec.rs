//! How values and keys are laid out in the database.
//!
//! Values are postcard (compact, fast, serde-driven) behind a one-byte value version, so a
//! later release can keep reading old rows while writing new ones. postcard is not
//! self-describing, which is why the version byte exists: a field added to a stored struct
//! means a new version and a decoder for the old one. The one exception is the harvester's
//! [`SourceState`](super::SourceState), which is JSON: the harvester grows that struct on its
//! own schedule and JSON tolerates added and removed fields without a store format change.
//!
//! Keys are chosen so every read the publisher makes is a point lookup or a range scan:
//! `set \0 seq_be` for the change log, `origin \0 uri` and `sha256 uri` for the multi-valued
//! indexes. A NUL byte cannot occur in a URI or a set id (both are refused by
//! [`check_key`]), so the separator is unambiguous.
//!
//! The model's types carry no serde (the model is pure); the `with` modules here give them a
//! stable stored form: datetimes as their W3C text (which round-trips exactly), hash lists as
//! `(algorithm, value)` pairs, links as a mirror struct.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::error::StoreError;
use crate::model::{Digest, HashAlgorithm, HashList, Link, W3cDateTime};

/// The version byte in front of every postcard value.
const VALUE_VERSION: u8 = 1;

/// Encodes a value as version byte + postcard.
///
/// Into a per-thread scratch buffer first, then copied into a vector of exactly its length:
/// grown from one byte, a vector was reallocated four to seven times per value, and one
/// allocated with room to spare kept that room for as long as the memtable held the row (a
/// 70-byte blob row in 512 bytes).
pub(crate) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    SCRATCH.with(|cell| {
        // A value encoded while another is (never, today) gets a buffer of its own.
        let mut fresh = Vec::new();
        let mut guard = cell.try_borrow_mut().ok();
        let buf = guard.as_deref_mut().unwrap_or(&mut fresh);
        buf.clear();
        buf.push(VALUE_VERSION);
        let out =
            postcard::to_extend(value, std::mem::take(buf)).map_err(|e| StoreError::corrupt("value (encoding)", e))?;
        let exact = out.clone();
        *buf = out;
        // Kept for the next value, unless one unusually large value grew it.
        buf.shrink_to(SCRATCH_KEPT);
        Ok(exact)
    })
}

/// The most an [`encode`] scratch buffer keeps between values: a record row is a few hundred
/// bytes.
const SCRATCH_KEPT: usize = 64 * 1024;

/// Decodes a value written by [`encode`].
pub(crate) fn decode<'a, T: Deserialize<'a>>(what: &'static str, bytes: &'a [u8]) -> Result<T, StoreError> {
    match bytes.split_first() {
        Some((&VALUE_VERSION, rest)) => postcard::from_bytes(rest).map_err(|e| StoreError::corrupt(what, e)),
        Some((v, _)) => Err(StoreError::corrupt(what, format!("unknown value version {v}"))),
        None => Err(StoreError::corrupt(what, "empty value")),
    }
}

/// Decodes the leading fields of a value written by [`encode`] as `T`, and returns the bytes
/// after them, for a row that gained fields at its end (see [`decode_rest`]).
pub(crate) fn decode_prefix<'a, T: Deserialize<'a>>(
    what: &'static str,
    bytes: &'a [u8],
) -> Result<(T, &'a [u8]), StoreError> {
    match bytes.split_first() {
        Some((&VALUE_VERSION, rest)) => postcard::take_from_bytes(rest).map_err(|e| StoreError::corrupt(what, e)),
        Some((v, _)) => Err(StoreError::corrupt(what, format!("unknown value version {v}"))),
        None => Err(StoreError::corrupt(what, "empty value")),
    }
}

/// Decodes what follows the fields [`decode_prefix`] read.
pub(crate) fn decode_rest<'a, T: Deserialize<'a>>(what: &'static str, rest: &'a [u8]) -> Result<T, StoreError> {
    postcard::from_bytes(rest).map_err(|e| StoreError::corrupt(what, e))
}

/// Refuses key components that would make keys ambiguous or unreadable.
pub(crate) fn check_key(what: &'static str, value: &str) -> Result<(), StoreError> {
    let reason = if value.is_empty() {
        "must not be empty"
    } else if value.as_bytes().contains(&0) {
        "must not contain a NUL character"
    } else {
        return Ok(());
    };
    Err(StoreError::InvalidKey { what, value: value.to_owned(), reason })
}

/// `a \0 b`, for the multi-valued indexes and the change log.
pub(crate) fn pair_key(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(a.len() + 1 + b.len());
    key.extend_from_slice(a);
    key.push(0);
    key.extend_from_slice(b);
    key
}

/// The prefix of every [`pair_key`] whose first part is `a`.
pub(crate) fn pair_prefix(a: &[u8]) -> Vec<u8> {
    pair_key(a, &[])
}

/// Serde for a [`W3cDateTime`] as its W3C text.
pub(crate) mod w3c {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(t: &W3cDateTime, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(t)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<W3cDateTime, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Serde for an optional [`W3cDateTime`].
pub(crate) mod w3c_opt {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(t: &Option<W3cDateTime>, s: S) -> Result<S::Ok, S::Error> {
        t.map(|t| t.to_string()).serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<W3cDateTime>, D::Error> {
        let text = Option::<std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.map(|t| t.parse().map_err(serde::de::Error::custom)).transpose()
    }
}

/// Serde for a [`HashList`] as `(algorithm, value)` pairs.
pub(crate) mod hashes {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(list: &HashList, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(list.0.iter().map(|d| (d.algorithm.as_str(), d.value.as_str())))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<HashList, D::Error> {
        let pairs = Vec::<(String, String)>::deserialize(d)?;
        Ok(from_pairs(pairs))
    }

    /// A hash list from stored `(algorithm, value)` pairs, owned or borrowed.
    pub(crate) fn from_pairs<A: AsRef<str>, V: Into<String>>(pairs: impl IntoIterator<Item = (A, V)>) -> HashList {
        HashList(
            pairs
                .into_iter()
                .map(|(a, value)| Digest { algorithm: HashAlgorithm::from_token(a.as_ref()), value: value.into() })
                .collect(),
        )
    }

    pub(super) fn to_pairs(list: &HashList) -> Vec<(String, String)> {
        list.0.iter().map(|d| (d.algorithm.as_str().to_owned(), d.value.clone())).collect()
    }
}

/// The stored mirror of a [`ForeignAttr`](crate::model::ForeignAttr).
#[derive(Serialize, Deserialize)]
struct AttrRepr {
    ns: Option<String>,
    prefix: Option<String>,
    local: String,
    value: String,
}

/// The stored mirror of a [`Link`]: every field, so an inherited link republishes unchanged.
#[derive(Serialize, Deserialize)]
struct LinkRepr {
    rel: String,
    href: String,
    encoding: Option<String>,
    hash: Option<Vec<(String, String)>>,
    length: Option<u64>,
    modified: Option<String>,
    path: Option<String>,
    pri: Option<u32>,
    media_type: Option<String>,
    extra: Vec<AttrRepr>,
}

impl From<&Link> for LinkRepr {
    fn from(l: &Link) -> Self {
        LinkRepr {
            rel: l.rel.clone(),
            href: l.href.clone(),
            encoding: l.encoding.clone(),
            hash: l.hash.as_ref().map(hashes::to_pairs),
            length: l.length,
            modified: l.modified.map(|t| t.to_string()),
            path: l.path.clone(),
            pri: l.pri,
            media_type: l.media_type.clone(),
            extra: l
                .extra
                .iter()
                .map(|a| AttrRepr {
                    ns: a.ns.clone(),
                    prefix: a.prefix.clone(),
                    local: a.local.clone(),
                    value: a.value.clone(),
                })
                .collect(),
        }
    }
}

/// Serialization of a list of [`Link`]s; they are read back as
/// [`LinkView`](super::view::LinkView)s, whose layout mirrors [`LinkRepr`]'s.
pub(crate) mod links {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(links: &[Link], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(links.iter().map(LinkRepr::from))
    }

    /// Owned links back from any self-describing format (the export file); the store's own
    /// rows are read as [`LinkView`](crate::store::view::LinkView)s instead.
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Link>, D::Error> {
        Vec::<LinkRepr>::deserialize(d)?.into_iter().map(|r| r.into_link().map_err(serde::de::Error::custom)).collect()
    }
}

impl LinkRepr {
    fn into_link(self) -> Result<Link, String> {
        let modified = self.modified.map(|t| t.parse::<W3cDateTime>().map_err(|e| e.to_string())).transpose()?;
        Ok(Link {
            rel: self.rel,
            href: self.href,
            encoding: self.encoding,
            hash: self.hash.map(hashes::from_pairs),
            length: self.length,
            modified,
            path: self.path,
            pri: self.pri,
            media_type: self.media_type,
            extra: self
                .extra
                .into_iter()
                .map(|a| crate::model::ForeignAttr { ns: a.ns, prefix: a.prefix, local: a.local, value: a.value })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Sample {
        #[serde(with = "w3c")]
        at: W3cDateTime,
        #[serde(with = "w3c_opt")]
        maybe: Option<W3cDateTime>,
        #[serde(with = "hashes")]
        hash: HashList,
    }

    #[test]
    fn model_types_round_trip_through_postcard() {
        let sample = Sample {
            at: "2013-01-03T09:00:00+01:00".parse().unwrap(),
            maybe: None,
            hash: HashList::parse(
                "sha-256:854f61290e2e197a11bc91063afce22e43f8ccc655237050ace766adc68dc784 sha-512:abc",
            )
            .unwrap()
            .0,
        };
        let bytes = encode(&sample).unwrap();
        assert_eq!(decode::<Sample>("sample", &bytes).unwrap(), sample);
    }

    #[test]
    fn unknown_value_versions_are_refused() {
        assert!(matches!(decode::<u32>("n", &[9, 1]), Err(StoreError::Corrupt { .. })));
        assert!(matches!(decode::<u32>("n", &[]), Err(StoreError::Corrupt { .. })));
    }

    #[test]
    fn keys_with_nul_or_empty_are_refused() {
        assert!(check_key("uri", "http://a/").is_ok());
        assert!(check_key("uri", "").is_err());
        assert!(check_key("uri", "a\0b").is_err());
    }
}
