//! Bitstreams by content: identities, what a put must match, stored metadata, and streaming
//! reads with byte ranges.
//!
//! A blob exists for readers only once its row in the `blobs` tree exists, and the row is
//! written last — after the content is complete, verified and (for file blobs) synced and
//! renamed into place. So a reader can never be handed a half-written bitstream, whatever
//! the moment of a crash. Writing lives in [`super::writer`].

use std::fmt;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::codec;
use super::error::StoreError;
use super::pack::PackLoc;
use super::{Inner, Store};
use crate::model::{Digest, HashAlgorithm, HashList};

/// A blob's identity: the sha-256 of its content.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BlobId(pub [u8; 32]);

impl BlobId {
    /// The raw digest.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Lowercase hex, as in a `hash` attribute.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// As a model [`Digest`] (`sha-256:<hex>`).
    pub fn to_digest(&self) -> Digest {
        Digest::from_bytes(HashAlgorithm::Sha256, &self.0)
    }
}

impl fmt::Display for BlobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for BlobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BlobId({})", self.to_hex())
    }
}

impl FromStr for BlobId {
    type Err = StoreError;

    /// Accepts 64 hex digits, optionally prefixed `sha-256:`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let hex_part = s.strip_prefix("sha-256:").unwrap_or(s);
        let mut out = [0u8; 32];
        hex::decode_to_slice(hex_part, &mut out).map_err(|_| StoreError::InvalidKey {
            what: "sha-256",
            value: s.to_owned(),
            reason: "expected 64 hex digits",
        })?;
        Ok(BlobId(out))
    }
}

/// The headers a bucket is asked to answer a presigned GET with, in place of the object's
/// own (S3's `response-content-type` and `response-content-disposition` overrides, part of
/// the signature): the object may have been uploaded with another record's type, and S3
/// cannot send `Content-Security-Policy` or `nosniff`, so `attachment` is what keeps active
/// content from rendering on the bucket's origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHeaders {
    /// `Content-Type`.
    pub content_type: String,
    /// `Content-Disposition` (`inline` or `attachment`).
    pub disposition: String,
}

/// What a put must match, and which extra digests to compute. A declared digest of md5 or
/// sha-1 is always computed and checked; digests of other algorithms cannot be checked and are
/// ignored here (the record keeps them for republishing).
#[derive(Debug, Clone, Default)]
pub struct Expected {
    /// The declared `length`.
    pub length: Option<u64>,
    /// The declared `hash` list.
    pub hashes: HashList,
    /// Compute md5 even when not declared (e.g. to republish it).
    pub md5: bool,
    /// Compute sha-1 even when not declared.
    pub sha1: bool,
    /// The declared media type: the `Content-Type` an object is uploaded with when the blob
    /// goes to a bucket. Content is stored once per sha-256, so an object keeps the type of
    /// its first upload; a presigned redirect names each record's own type
    /// ([`ResponseHeaders`]), so this only matters to clients that read the bucket directly.
    pub media_type: Option<String>,
}

impl Expected {
    /// Nothing declared: just store and report the digests.
    pub fn none() -> Self {
        Expected::default()
    }

    /// Expect the declared length and hashes of a Source's `<rs:md>`.
    pub fn declared(length: Option<u64>, hashes: Option<&HashList>) -> Self {
        Expected { length, hashes: hashes.cloned().unwrap_or_default(), ..Expected::default() }
    }

    /// The same, with the declared media type.
    pub fn with_media_type(mut self, media_type: Option<String>) -> Self {
        self.media_type = media_type;
        self
    }

    pub(super) fn wants_md5(&self) -> bool {
        self.md5 || self.hashes.get(&HashAlgorithm::Md5).is_some()
    }

    pub(super) fn wants_sha1(&self) -> bool {
        self.sha1 || self.hashes.get(&HashAlgorithm::Sha1).is_some()
    }
}

/// What a successful put stored (or found already stored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobInfo {
    /// The sha-256, which is also the blob's key.
    pub id: BlobId,
    /// Length in bytes.
    pub length: u64,
    /// md5 (lowercase hex), when computed by this or an earlier put of the same content.
    pub md5: Option<String>,
    /// sha-1 (lowercase hex), likewise.
    pub sha1: Option<String>,
    /// True when identical content was already stored and nothing new was written.
    pub deduplicated: bool,
}

impl BlobInfo {
    /// Every digest known for the blob, as a `hash` attribute would list them.
    pub fn hashes(&self) -> HashList {
        let mut list = Vec::with_capacity(3);
        if let Some(md5) = &self.md5 {
            list.push(Digest { algorithm: HashAlgorithm::Md5, value: md5.clone() });
        }
        if let Some(sha1) = &self.sha1 {
            list.push(Digest { algorithm: HashAlgorithm::Sha1, value: sha1.clone() });
        }
        list.push(self.id.to_digest());
        HashList(list)
    }
}

/// The `blobs` tree value.
///
/// Its fields are written in this order and read by position (postcard), and a row ends with
/// `referrer`, which store format 5 did not write: [`BlobRow::decode`] reads such a row as one
/// without a referrer, which is what it means in format 6 too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct BlobRow {
    pub(super) length: u64,
    pub(super) md5: Option<[u8; 16]>,
    pub(super) sha1: Option<[u8; 20]>,
    /// Unix seconds of the first put.
    pub(super) created: i64,
    /// Where the content is.
    pub(super) place: Place,
    /// One live record whose content this is; every other one (all of them when `None`) has
    /// a row in the `by_sha` index. Most content has exactly one record, and writing its URI
    /// here instead of an index row saves a row per record written (docs/STORE.md,
    /// "What is stored where"). Never both here and in the index; `gc` keeps a blob while either names a
    /// record.
    pub(super) referrer: Option<String>,
}

/// The fields a blob row has had since format 5, in their order.
#[derive(Deserialize)]
struct RowHead {
    length: u64,
    md5: Option<[u8; 16]>,
    sha1: Option<[u8; 20]>,
    created: i64,
    place: Place,
}

/// Where a blob's content is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum Place {
    /// A file under `blobs/`, named by the sha-256 (larger than `INLINE_MAX`).
    File,
    /// Inside a pack (up to `INLINE_MAX`); see [`super::pack`].
    Pack(PackLoc),
    /// An object in the store's bucket, under its content key (larger than `INLINE_MAX`; see
    /// [`super::remote`]). Added last, so rows of the other places decode as before.
    Object,
}

impl BlobRow {
    pub(super) fn encode(&self) -> Result<Vec<u8>, StoreError> {
        codec::encode(self)
    }

    /// A row as [`BlobRow::encode`] wrote it, or as format 5 did (no referrer).
    pub(super) fn decode(bytes: &[u8]) -> Result<BlobRow, StoreError> {
        let (head, rest) = codec::decode_prefix::<RowHead>("blob row", bytes)?;
        let referrer = if rest.is_empty() { None } else { codec::decode_rest("blob row", rest)? };
        let RowHead { length, md5, sha1, created, place } = head;
        Ok(BlobRow { length, md5, sha1, created, place, referrer })
    }

    pub(super) fn info(&self, id: BlobId, deduplicated: bool) -> BlobInfo {
        BlobInfo {
            id,
            length: self.length,
            md5: self.md5.map(hex::encode),
            sha1: self.sha1.map(hex::encode),
            deduplicated,
        }
    }
}

impl Inner {
    /// The blob's row: committed, or put by this process and still pending.
    pub(super) fn blob_row(&self, id: &BlobId) -> Result<Option<BlobRow>, StoreError> {
        if let Some(row) = self.packs.pending(id) {
            return Ok(Some(row));
        }
        if !self.filter.may_hold(id, &self.trees.blobs) {
            return Ok(None);
        }
        self.trees.blobs.get(id.0)?.map(|v| BlobRow::decode(&v)).transpose()
    }

    /// The bucket, for a blob whose row says it is there.
    pub(super) fn remote_for(&self, id: &BlobId) -> Result<&std::sync::Arc<super::remote::Remote>, StoreError> {
        self.remote.as_ref().ok_or_else(|| {
            StoreError::corrupt("blob row", format!("sha-256:{id} is in object storage, but the store has no bucket"))
        })
    }

    /// Where a file blob lives: `blobs/ab/ab12…`.
    pub(super) fn blob_path(&self, id: &BlobId) -> PathBuf {
        let hex = id.to_hex();
        self.root.join("blobs").join(&hex[..2]).join(hex)
    }
}

impl Store {
    /// The stored blob with this sha-256, if any.
    ///
    /// # Errors
    /// [`StoreError::Database`] / [`StoreError::Corrupt`].
    pub fn blob(&self, id: &BlobId) -> Result<Option<BlobInfo>, StoreError> {
        Ok(self.inner.blob_row(id)?.map(|row| row.info(*id, false)))
    }

    /// With `blobs_presign`, a presigned URL to GET the blob from the bucket directly, signed
    /// so that the bucket answers with `headers` (S3's response-header overrides); `None`
    /// when the option is off or the blob is not in the bucket (a pack or a local file).
    ///
    /// # Errors
    /// [`StoreError::BlobNotFound`]; [`StoreError::ObjectStore`] when signing fails.
    pub fn presigned_url(&self, id: &BlobId, headers: &ResponseHeaders) -> Result<Option<String>, StoreError> {
        let Some(remote) = self.inner.remote.as_ref().filter(|r| r.location().presign) else { return Ok(None) };
        let row = self.inner.blob_row(id)?.ok_or_else(|| StoreError::BlobNotFound(id.to_hex()))?;
        match row.place {
            Place::Object => remote.presigned(id, headers).map(Some),
            Place::File | Place::Pack(_) => Ok(None),
        }
    }

    /// Streams a whole blob.
    ///
    /// # Errors
    /// [`StoreError::BlobNotFound`], or the file could not be opened.
    pub fn get(&self, id: &BlobId) -> Result<BlobReader, StoreError> {
        self.get_range(id, 0..u64::MAX)
    }

    /// Streams bytes `range` of a blob; an `end` past the blob's length is clamped (so
    /// `n..u64::MAX` reads to the end, as an HTTP `bytes=n-` range does).
    ///
    /// # Errors
    /// [`StoreError::BlobNotFound`]; [`StoreError::BadRange`] when `start` is past the end or
    /// after `end`.
    pub fn get_range(&self, id: &BlobId, range: Range<u64>) -> Result<BlobReader, StoreError> {
        let row = self.inner.blob_row(id)?.ok_or_else(|| StoreError::BlobNotFound(id.to_hex()))?;
        let end = range.end.min(row.length);
        if range.start > end {
            return Err(StoreError::BadRange { start: range.start, end: range.end, length: row.length });
        }
        let len = end - range.start;
        match row.place {
            Place::Pack(loc) => {
                let data = self.inner.read_packed(id, loc, row.length)?;
                Ok(BlobReader::inline(data, range.start, end))
            }
            Place::File => {
                let path = self.inner.blob_path(id);
                let mut file = File::open(&path).map_err(|e| StoreError::io(&path, e))?;
                file.seek(SeekFrom::Start(range.start)).map_err(|e| StoreError::io(&path, e))?;
                Ok(BlobReader { kind: ReaderKind::File(file.take(len)), remaining: len })
            }
            Place::Object => {
                let remote = self.inner.remote_for(id)?;
                let reader = remote.reader(id, range.start..end)?;
                Ok(BlobReader { kind: ReaderKind::Remote(Box::new(reader)), remaining: len })
            }
        }
    }
}

/// A streaming reader over a blob or a range of it.
#[derive(Debug)]
pub struct BlobReader {
    kind: ReaderKind,
    remaining: u64,
}

#[derive(Debug)]
enum ReaderKind {
    Inline(io::Cursor<Vec<u8>>),
    File(io::Take<File>),
    Remote(Box<super::remote::RemoteReader>),
}

impl BlobReader {
    fn inline(data: Vec<u8>, start: u64, end: u64) -> Self {
        let mut data = data;
        // Both bounds were checked against the length, which is the vector's length.
        data.truncate(usize::try_from(end).unwrap_or(usize::MAX));
        let mut cursor = io::Cursor::new(data);
        cursor.set_position(start);
        BlobReader { kind: ReaderKind::Inline(cursor), remaining: end - start }
    }

    /// Bytes left to read.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }
}

impl Read for BlobReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = match &mut self.kind {
            ReaderKind::Inline(c) => c.read(buf)?,
            ReaderKind::File(f) => f.read(buf)?,
            ReaderKind::Remote(r) => {
                let max = buf.len().min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
                r.read(&mut buf[..max])?
            }
        };
        if n == 0 && !buf.is_empty() && self.remaining > 0 {
            // A file shorter than its row says: never pass a truncated bitstream off as whole.
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "blob file is shorter than its recorded length"));
        }
        self.remaining = self.remaining.saturating_sub(n as u64);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_and_a_format_5_row_has_no_referrer() {
        let mut row = BlobRow {
            length: 3,
            md5: Some([1; 16]),
            sha1: None,
            created: 1_700_000_000,
            place: Place::Pack(PackLoc { pack: 2, offset: 40 }),
            referrer: Some("http://t/a".into()),
        };
        assert_eq!(BlobRow::decode(&row.encode().unwrap()).unwrap(), row);
        // Format 5 wrote the same fields in the same order, and nothing after them.
        let v5 = codec::encode(&(row.length, row.md5, row.sha1, row.created, row.place)).unwrap();
        row.referrer = None;
        assert_eq!(BlobRow::decode(&v5).unwrap(), row);
        assert_eq!(BlobRow::decode(&row.encode().unwrap()).unwrap(), row);
        assert!(matches!(BlobRow::decode(&v5[..v5.len() - 1]), Err(StoreError::Corrupt { .. })));
    }
}
