//! `tributary store export`: every table of a store as one portable, versioned, streamed file.
//!
//! It is how a store moves between machines, is backed up, and crosses a change of storage
//! engine (docs/STORE.md, "Export, import and upgrading"). Databases that change engines dump
//! and restore; so does Tributary, so that a new build never has to carry the old engine's code.
//!
//! The file is JSON Lines: a `header` line, then one line per row of every table, then an `end`
//! line with the count of each kind. A file without its `end` line, or whose counts disagree,
//! was cut short and is refused by the import. Each line names its `kind`; rows are written in
//! their tables' key order, with their meaning spelled out (datetimes as W3C text, digests as
//! hex, a change as `created` / `updated` / `deleted`), not as the engine's bytes, so a later
//! store format can read them without this build's codecs. Bitstreams are not in the file: a
//! `blob` line says where the content is (a pack and offset, a file under `blobs/`, or the
//! bucket), named by its sha-256, and the import rebuilds the store over the same bitstreams.
//!
//! What is derived is left out and rebuilt: the two provenance indexes (`by_origin` and
//! `by_sha`) follow from the records and the blob rows' referrers. The feed harvester's item
//! states and the publisher's rows are opaque to the store and travel as base64.

use std::io::{self, Write};

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::blob::{BlobId, BlobRow, Place};
use super::codec::{self, hashes, w3c, w3c_opt};
use super::error::StoreError;
use super::hub_subscribers::HubSubscriber;
use super::log::{ChunkEvents, Counters, decode_event};
use super::pack::PackLoc;
use super::record::Via;
use super::state::SourceState;
use super::subscription::Subscription;
use super::table::View;
use super::{FORMAT_VERSION, Store, row};
use crate::model::{Change, HashList, Link, W3cDateTime};

/// The version of the file's layout, in its header. An import reads the versions it knows.
pub const EXPORT_VERSION: u32 = 1;

/// What the `header` line says of the store the file came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Header {
    /// Always "tributary-store-export": tells this file from any other JSON Lines.
    pub(super) magic: String,
    /// [`EXPORT_VERSION`] when written by this build.
    pub(super) export_version: u32,
    /// The store format of the store exported.
    pub(super) store_format: u32,
    /// The Tributary version that wrote the file.
    pub(super) written_by: String,
    /// When the export began.
    #[serde(with = "w3c")]
    pub(super) created: W3cDateTime,
    /// `s3://BUCKET/PREFIX` when the store's large bitstreams are in a bucket.
    pub(super) blobs_location: Option<String>,
    /// The store's id among instances sharing a bucket (it names its reference markers).
    pub(super) instance_id: Option<String>,
}

pub(super) const MAGIC: &str = "tributary-store-export";

/// One line of the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(super) enum Line {
    Header(Header),
    Blob(BlobLine),
    Record(Box<RecordLine>),
    Set(SetLine),
    Event(Box<EventLine>),
    Source(Box<SourceLine>),
    Failure(Box<FailureLine>),
    FeedItem(OpaqueLine),
    HubSubscriber(HubSubscriber),
    Subscription(Box<Subscription>),
    Publisher(OpaqueLine),
    /// A held deletion (see `guard`); absent from exports of earlier builds.
    Held(Box<super::guard::HeldDeletion>),
    /// A takedown (see `guard`); absent from exports of earlier builds.
    Takedown(Box<super::guard::Takedown>),
    End(Counts),
}

/// A stored bitstream: its digests and where its bytes are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct BlobLine {
    #[serde(with = "hex_id")]
    pub(super) sha256: BlobId,
    pub(super) length: u64,
    pub(super) md5: Option<String>,
    pub(super) sha1: Option<String>,
    /// Unix seconds of the first put.
    pub(super) created: i64,
    pub(super) place: PlaceLine,
    /// One live record of this content (the rest are in the sha-256 index).
    pub(super) referrer: Option<String>,
}

/// Where a blob's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum PlaceLine {
    /// `blobs/ab/ab12…`
    File,
    /// `packs/NNNNNNNN.pack` at `offset`.
    Pack { pack: u32, offset: u64 },
    /// The bucket, under the content key.
    Object,
}

/// A resource record, every field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct RecordLine {
    pub(super) uri: String,
    pub(super) source: String,
    pub(super) sets: Vec<String>,
    pub(super) origin: String,
    pub(super) upstream: String,
    #[serde(with = "hex_id")]
    pub(super) sha256: BlobId,
    pub(super) md5: Option<String>,
    pub(super) length: u64,
    #[serde(with = "hashes")]
    pub(super) declared: HashList,
    pub(super) media_type: Option<String>,
    #[serde(with = "w3c_opt")]
    pub(super) lastmod: Option<W3cDateTime>,
    pub(super) via: Via,
    #[serde(with = "link_list")]
    pub(super) links: Vec<Link>,
    #[serde(with = "w3c_opt")]
    pub(super) deleted: Option<W3cDateTime>,
    #[serde(with = "w3c")]
    pub(super) changed: W3cDateTime,
    /// Per set, the position of the record's latest event there.
    pub(super) heads: Vec<(String, u64)>,
}

/// A set's counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct SetLine {
    pub(super) id: String,
    pub(super) live: u64,
    pub(super) last_seq: u64,
    #[serde(with = "w3c_opt")]
    pub(super) last_change: Option<W3cDateTime>,
}

/// One change event, at its position in its set's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct EventLine {
    pub(super) set: String,
    pub(super) seq: u64,
    pub(super) uri: String,
    #[serde(with = "change_name")]
    pub(super) change: Change,
    #[serde(with = "w3c")]
    pub(super) datetime: W3cDateTime,
    #[serde(with = "hex_id")]
    pub(super) sha256: BlobId,
    pub(super) md5: Option<String>,
    pub(super) length: u64,
    pub(super) media_type: Option<String>,
    pub(super) origin: String,
    pub(super) via: Via,
    pub(super) source: String,
    pub(super) prev: Option<u64>,
}

/// A source's harvest state: where it is, what it has seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct SourceLine {
    pub(super) id: String,
    pub(super) state: SourceState,
}

/// A resource that could not be stored, with what was listed for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct FailureLine {
    pub(super) source: String,
    pub(super) uri: String,
    pub(super) upstream: String,
    pub(super) reason: String,
    #[serde(with = "w3c")]
    pub(super) first_failed: W3cDateTime,
    #[serde(with = "w3c")]
    pub(super) last_failed: W3cDateTime,
    pub(super) attempts: u32,
    pub(super) origin: String,
    #[serde(with = "hashes")]
    pub(super) declared: HashList,
    pub(super) length: Option<u64>,
    pub(super) media_type: Option<String>,
    #[serde(with = "w3c_opt")]
    pub(super) lastmod: Option<W3cDateTime>,
    pub(super) via: Via,
    #[serde(with = "link_list")]
    pub(super) links: Vec<Link>,
}

/// A row whose value only its owner interprets: a feed item's FeedSync state (`key` is
/// `source`, `item`), or one of the publisher's rows (`key` is its name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct OpaqueLine {
    pub(super) key: Vec<String>,
    /// The value, base64 (standard alphabet, padded).
    pub(super) value: String,
}

/// How many lines of each kind the file holds; the `end` line.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// `blob` lines.
    pub blobs: u64,
    /// `record` lines.
    pub records: u64,
    /// `set` lines.
    pub sets: u64,
    /// `event` lines.
    pub events: u64,
    /// `source` lines.
    pub sources: u64,
    /// `failure` lines.
    pub failures: u64,
    /// `feed_item` lines.
    pub feed_items: u64,
    /// `hub_subscriber` lines.
    pub hub_subscribers: u64,
    /// `subscription` lines.
    pub subscriptions: u64,
    /// `publisher` lines.
    pub publisher_rows: u64,
    /// `held` lines (held deletions); not written when 0, as by earlier builds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub held: u64,
    /// `takedown` lines; not written when 0, as by earlier builds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub takedowns: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "records           {}", self.records)?;
        writeln!(f, "change events     {} in {} sets", self.events, self.sets)?;
        writeln!(f, "blob rows         {}", self.blobs)?;
        writeln!(f, "source states     {}", self.sources)?;
        writeln!(f, "failures          {}", self.failures)?;
        writeln!(f, "feed item states  {}", self.feed_items)?;
        writeln!(f, "hub subscribers   {}", self.hub_subscribers)?;
        writeln!(f, "subscriptions     {}", self.subscriptions)?;
        if self.held > 0 {
            writeln!(f, "held deletions    {}", self.held)?;
        }
        if self.takedowns > 0 {
            writeln!(f, "takedowns         {}", self.takedowns)?;
        }
        write!(f, "publisher rows    {}", self.publisher_rows)
    }
}

impl Store {
    /// Writes every table to `out` as the export file described in this module's docs, and
    /// returns how many rows of each kind it wrote. Nothing in the store changes.
    ///
    /// # Errors
    /// [`StoreError::Io`] when writing to `out` fails (`path` names `out`, as the caller
    /// gave it); [`StoreError::Database`] / [`StoreError::Corrupt`] for a row that cannot be
    /// read.
    pub fn export(&self, out: &mut dyn Write, out_name: &std::path::Path) -> Result<Counts, StoreError> {
        let mut w = LineWriter { out, name: out_name, counts: Counts::default() };
        w.line(&Line::Header(self.export_header()?))?;
        // Blobs put since the last commit are still pending in the active pack: commit them,
        // so that the file names every bitstream the store holds.
        self.inner.commit_pending()?;
        // One view of every table: the file is the store at one moment, even while the
        // running service goes on writing (a hot export through the control socket).
        let view = self.inner.db.view();
        self.export_blobs(&mut w, &view)?;
        self.export_records(&mut w, &view)?;
        self.export_log(&mut w, &view)?;
        self.export_small_tables(&mut w, &view)?;
        let counts = w.counts.clone();
        w.line(&Line::End(counts.clone()))?;
        w.out.flush().map_err(|e| w.io(e))?;
        Ok(counts)
    }

    fn export_header(&self) -> Result<Header, StoreError> {
        let text = |key: &[u8]| -> Result<Option<String>, StoreError> {
            Ok(self.inner.trees.meta.get(key)?.map(|v| String::from_utf8_lossy(&v).into_owned()))
        };
        Ok(Header {
            magic: MAGIC.to_owned(),
            export_version: EXPORT_VERSION,
            store_format: FORMAT_VERSION,
            written_by: env!("CARGO_PKG_VERSION").to_owned(),
            created: W3cDateTime::now(),
            blobs_location: text(super::open::BLOBS_KEY)?,
            instance_id: text(super::open::INSTANCE_KEY)?,
        })
    }

    fn export_blobs(&self, w: &mut LineWriter<'_>, view: &View) -> Result<(), StoreError> {
        for kv in self.inner.trees.blobs.iter_in(view) {
            let (k, v) = kv?;
            let id = BlobId(k.as_ref().try_into().map_err(|_| StoreError::corrupt("blob key", hex::encode(&k)))?);
            w.line(&Line::Blob(blob_line(id, BlobRow::decode(&v)?)))?;
            w.counts.blobs += 1;
        }
        Ok(())
    }

    fn export_records(&self, w: &mut LineWriter<'_>, view: &View) -> Result<(), StoreError> {
        for kv in self.inner.trees.records.iter_in(view) {
            let (k, v) = kv?;
            w.line(&Line::Record(Box::new(record_line(row::decode(&k, &v)?))))?;
            w.counts.records += 1;
        }
        Ok(())
    }

    fn export_log(&self, w: &mut LineWriter<'_>, view: &View) -> Result<(), StoreError> {
        for kv in self.inner.trees.sets.iter_in(view) {
            let (k, v) = kv?;
            let id = String::from_utf8(k.to_vec()).map_err(|e| StoreError::corrupt("set key", e))?;
            let c: Counters = codec::decode("set counters", &v)?;
            w.line(&Line::Set(SetLine { id, live: c.live, last_seq: c.last_seq, last_change: c.last_change }))?;
            w.counts.sets += 1;
        }
        for kv in self.inner.trees.log.iter_in(view) {
            let (k, v) = kv?;
            let set = k.split(|b| *b == 0).next().unwrap_or_default();
            let set = String::from_utf8(set.to_vec()).map_err(|e| StoreError::corrupt("change log key", e))?;
            for bytes in ChunkEvents::new(&v)? {
                let e = decode_event(bytes?)?;
                w.line(&Line::Event(Box::new(EventLine {
                    set: set.clone(),
                    seq: e.seq,
                    uri: e.uri,
                    change: e.change,
                    datetime: e.datetime,
                    sha256: e.sha256,
                    md5: e.md5,
                    length: e.length,
                    media_type: e.media_type,
                    origin: e.origin,
                    via: e.via,
                    source: e.source,
                    prev: e.prev,
                })))?;
                w.counts.events += 1;
            }
        }
        Ok(())
    }

    fn export_small_tables(&self, w: &mut LineWriter<'_>, view: &View) -> Result<(), StoreError> {
        let t = &self.inner.trees;
        for kv in t.sources.iter_in(view) {
            let (k, v) = kv?;
            let (id, state) = (String::from_utf8_lossy(&k).into_owned(), super::state::decode(&v)?);
            w.line(&Line::Source(Box::new(SourceLine { id, state })))?;
            w.counts.sources += 1;
        }
        for kv in t.failures.iter_in(view) {
            let (k, v) = kv?;
            w.line(&Line::Failure(Box::new(failure_line(super::failure::decode(&k, &v)?))))?;
            w.counts.failures += 1;
        }
        for kv in t.feed_items.iter_in(view) {
            let (k, v) = kv?;
            w.line(&Line::FeedItem(opaque(split_pair("feed item key", &k)?, &v)))?;
            w.counts.feed_items += 1;
        }
        for kv in t.hub_subscribers.iter_in(view) {
            w.line(&Line::HubSubscriber(super::hub_subscribers::decode(&kv?.1)?))?;
            w.counts.hub_subscribers += 1;
        }
        for kv in t.subscriptions.iter_in(view) {
            w.line(&Line::Subscription(Box::new(super::subscription::decode(&kv?.1)?)))?;
            w.counts.subscriptions += 1;
        }
        for kv in t.held.iter_in(view) {
            w.line(&Line::Held(Box::new(
                serde_json::from_slice(&kv?.1).map_err(|e| StoreError::corrupt("held deletion", e))?,
            )))?;
            w.counts.held += 1;
        }
        for kv in t.takedowns.iter_in(view) {
            w.line(&Line::Takedown(Box::new(
                serde_json::from_slice(&kv?.1).map_err(|e| StoreError::corrupt("takedown", e))?,
            )))?;
            w.counts.takedowns += 1;
        }
        for kv in t.meta.scan_prefix_in(view, super::published::PREFIX) {
            let (k, v) = kv?;
            let name = String::from_utf8_lossy(&k[super::published::PREFIX.len()..]).into_owned();
            w.line(&Line::Publisher(opaque(vec![name], &v)))?;
            w.counts.publisher_rows += 1;
        }
        Ok(())
    }
}

/// Writes lines and counts errors against the output's name.
struct LineWriter<'a> {
    out: &'a mut dyn Write,
    name: &'a std::path::Path,
    counts: Counts,
}

impl LineWriter<'_> {
    fn line(&mut self, line: &Line) -> Result<(), StoreError> {
        serde_json::to_writer(&mut *self.out, line).map_err(|e| self.io(e.into()))?;
        self.out.write_all(b"\n").map_err(|e| self.io(e))
    }

    fn io(&self, source: io::Error) -> StoreError {
        StoreError::Io { path: self.name.to_path_buf(), source }
    }
}

fn blob_line(sha256: BlobId, row: BlobRow) -> BlobLine {
    BlobLine {
        sha256,
        length: row.length,
        md5: row.md5.map(hex::encode),
        sha1: row.sha1.map(hex::encode),
        created: row.created,
        place: match row.place {
            Place::File => PlaceLine::File,
            Place::Pack(PackLoc { pack, offset }) => PlaceLine::Pack { pack, offset },
            Place::Object => PlaceLine::Object,
        },
        referrer: row.referrer,
    }
}

fn record_line(r: super::Record) -> RecordLine {
    RecordLine {
        uri: r.uri,
        source: r.source,
        sets: r.sets,
        origin: r.origin,
        upstream: r.upstream,
        sha256: r.sha256,
        md5: r.md5,
        length: r.length,
        declared: r.declared,
        media_type: r.media_type,
        lastmod: r.lastmod,
        via: r.via,
        links: r.links,
        deleted: r.deleted,
        changed: r.changed,
        heads: r.heads,
    }
}

fn failure_line(f: super::Failure) -> FailureLine {
    FailureLine {
        source: f.source,
        uri: f.uri,
        upstream: f.upstream,
        reason: f.reason,
        first_failed: f.first_failed,
        last_failed: f.last_failed,
        attempts: f.attempts,
        origin: f.listing.origin,
        declared: f.listing.declared,
        length: f.listing.length,
        media_type: f.listing.media_type,
        lastmod: f.listing.lastmod,
        via: f.listing.via,
        links: f.listing.links,
    }
}

fn opaque(key: Vec<String>, value: &[u8]) -> OpaqueLine {
    OpaqueLine { key, value: base64::engine::general_purpose::STANDARD.encode(value) }
}

/// `a \0 b` as its two parts.
fn split_pair(what: &'static str, key: &[u8]) -> Result<Vec<String>, StoreError> {
    let at = key.iter().position(|b| *b == 0).ok_or_else(|| StoreError::corrupt(what, "no separator"))?;
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).map_err(|e| StoreError::corrupt(what, e));
    Ok(vec![text(&key[..at])?, text(&key[at + 1..])?])
}

/// A sha-256 as lowercase hex.
mod hex_id {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::store::BlobId;

    pub(super) fn serialize<S: Serializer>(id: &BlobId, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&id.to_hex())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BlobId, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A change as the word a Change List uses.
mod change_name {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::model::Change;

    pub(super) fn serialize<S: Serializer>(c: &Change, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(c.as_str())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Change, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        match text.as_ref() {
            "created" => Ok(Change::Created),
            "updated" => Ok(Change::Updated),
            "deleted" => Ok(Change::Deleted),
            other => Err(serde::de::Error::custom(format!("unknown change {other:?}"))),
        }
    }
}

/// Links in both directions, through the store's own mirror of [`Link`].
mod link_list {
    use serde::{Deserializer, Serializer};

    use crate::model::Link;

    pub(super) fn serialize<S: Serializer>(links: &[Link], s: S) -> Result<S::Ok, S::Error> {
        crate::store::codec::links::serialize(links, s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Link>, D::Error> {
        crate::store::codec::links::deserialize(d)
    }
}
