//! Provenance lookup: where a republished resource came from and what happened to it in
//! Tributary, found from any of its names — Tributary's URI, the upstream URI it was fetched
//! from, the origin URI (the `via` target), or its content's sha-256.
//!
//! Pure over the store: the same answer feeds the JSON and HTML of `/provenance` and the
//! `tributary provenance` command. The live check against the origin (`verify`) needs the
//! network and lives outside this module; [`compare`] only judges what it fetched.
//!
//! The store's provenance indexes cover live records, so a deleted resource is found by its
//! Tributary URI, or by its upstream URI (Tributary's URI is derived from it for each known
//! source), but not by origin or hash.
//!
//! A resource harvested from a feed source (`feed = URL`) also shows the item's FeedSync
//! state as the store keeps it ([`FeedProvenance`]): its sync id, update count, tombstone,
//! `sx:history` (most recent first, as FeedSync orders it) and how many conflicts are kept.
//! Its origin is the item's link (else the feed) and its upstream the feed's URL with
//! `?sx-item=<identity>`, as the harvester names it. Other resources have no such section,
//! and their JSON no `feed` member.

use std::fmt;

use serde::Serialize;

use super::feed::feed_item_state;
pub use super::oai_provenance::OaiProvenance;
use super::oai_provenance::oai_provenance;
use crate::model::feed::FeedItem;
use crate::model::{Change, HashAlgorithm, HashList, W3cDateTime};
use crate::naming::Naming;
use crate::store::{BlobId, Event, Record, Store, StoreError};

/// What was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Query {
    /// A URI: Tributary's, an upstream's or an origin's.
    Uri(String),
    /// `sha-256:<hex>`: every live resource with this content.
    Hash(BlobId),
}

impl Query {
    /// `sha-256:` followed by 64 hex digits is a hash; anything else non-empty a URI.
    ///
    /// # Errors
    /// A message for an empty query or a malformed `sha-256:` value.
    pub fn parse(text: &str) -> Result<Query, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("empty query: give a URI or sha-256:<64 hex digits>".into());
        }
        match text.get(..8) {
            Some(p) if p.eq_ignore_ascii_case("sha-256:") => text[8..]
                .to_ascii_lowercase()
                .parse::<BlobId>()
                .map(Query::Hash)
                .map_err(|_| format!("{text} is not sha-256: followed by 64 hex digits")),
            _ => Ok(Query::Uri(text.to_owned())),
        }
    }
}

impl fmt::Display for Query {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Query::Uri(u) => f.write_str(u),
            Query::Hash(h) => write!(f, "sha-256:{h}"),
        }
    }
}

/// The answer: every resource the query names.
#[derive(Debug, Clone, Serialize)]
pub struct Provenance {
    /// The query as understood.
    pub query: String,
    /// One entry per Tributary resource.
    pub resources: Vec<ResourceProvenance>,
}

/// Everything known about one republished resource.
#[derive(Debug, Clone, Serialize)]
pub struct ResourceProvenance {
    /// How the query matched: `tributary-uri`, `upstream-uri`, `origin-uri` or `sha-256`.
    pub matched_by: &'static str,
    /// Tributary's URI.
    pub uri: String,
    /// The source it was harvested from.
    pub source: String,
    /// The sets it is published in.
    pub sets: Vec<String>,
    /// The original resource: the `via` target and its attributes as last declared.
    pub origin: Origin,
    /// The URI the bitstream was fetched from.
    pub upstream: String,
    /// From the original to Tributary: `origin`, then `upstream` when it differs (an
    /// aggregator in between), then `tributary`.
    pub chain: Vec<ChainLink>,
    /// Tributary's copy now.
    pub state: CopyState,
    /// Its change events in Tributary, oldest first.
    pub history: Vec<HistoryEntry>,
    /// For a resource harvested from a feed: the item's FeedSync state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feed: Option<FeedProvenance>,
    /// For a record harvested from an OAI-PMH data provider: its identifier, datestamp, sets
    /// and repository.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oai: Option<OaiProvenance>,
    /// The live check, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify: Option<Verification>,
}

/// The `via` target.
#[derive(Debug, Clone, Serialize)]
pub struct Origin {
    /// Its URI.
    pub href: String,
    /// `modified`
    pub modified: Option<String>,
    /// `hash`
    pub hash: Option<String>,
    /// `length`
    pub length: Option<u64>,
    /// `type`
    #[serde(rename = "type")]
    pub media_type: Option<String>,
}

/// One hop of the chain.
#[derive(Debug, Clone, Serialize)]
pub struct ChainLink {
    /// `origin`, `upstream` or `tributary`.
    pub role: &'static str,
    /// The URI at that hop.
    pub uri: String,
}

/// Tributary's copy.
#[derive(Debug, Clone, Serialize)]
pub struct CopyState {
    /// `live` or `deleted`.
    pub status: &'static str,
    /// sha-256 of the (last) content.
    pub sha256: String,
    /// md5, when computed.
    pub md5: Option<String>,
    /// Length in bytes.
    pub length: u64,
    /// Media type.
    #[serde(rename = "type")]
    pub media_type: Option<String>,
    /// When Tributary's copy last changed.
    pub last_change: String,
    /// When it was deleted.
    pub deleted: Option<String>,
    /// When the operator took it down (`tributary takedown`); the reason is never shown here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub taken_down: Option<String>,
}

/// A feed item's state, as merged from every version of it the harvester read.
#[derive(Debug, Clone, Serialize)]
pub struct FeedProvenance {
    /// The item's identity in its feed: the `sx:sync` id, else the Atom id / RSS guid, else
    /// its link.
    pub item: String,
    /// The item's `updated` (Atom) or `pubDate` (RSS).
    pub updated: Option<String>,
    /// Its `sx:sync`; `None` for an item of a feed without FeedSync (merged by `updated`).
    pub sync: Option<FeedSyncState>,
}

/// An item's `sx:sync`.
#[derive(Debug, Clone, Serialize)]
pub struct FeedSyncState {
    /// The sync id.
    pub id: String,
    /// Updates applied so far.
    pub updates: u32,
    /// A tombstone.
    pub deleted: bool,
    /// Conflicts are not kept for the item.
    pub noconflicts: bool,
    /// `sx:history`, most recent first.
    pub history: Vec<FeedHistoryEntry>,
    /// How many conflicting versions `sx:conflicts` keeps.
    pub conflicts: usize,
}

/// One `sx:history` entry; at least one of `when` and `by` is present.
#[derive(Debug, Clone, Serialize)]
pub struct FeedHistoryEntry {
    /// Its sequence number.
    pub sequence: u32,
    /// When the update was made.
    pub when: Option<String>,
    /// The endpoint that made it.
    pub by: Option<String>,
}

impl FeedProvenance {
    fn of(item: &FeedItem) -> Self {
        let sync = item.sync.as_ref().map(|s| FeedSyncState {
            id: s.id.clone(),
            updates: s.updates,
            deleted: s.deleted,
            noconflicts: s.noconflicts,
            history: s
                .history
                .iter()
                .map(|h| FeedHistoryEntry { sequence: h.sequence, when: text(h.when), by: h.by.clone() })
                .collect(),
            conflicts: s.conflicts.len(),
        });
        FeedProvenance { item: item.identity().unwrap_or_default().to_owned(), updated: text(item.updated), sync }
    }
}

/// One change, as recorded in every set it was logged in.
#[derive(Debug, Clone, Serialize)]
pub struct HistoryEntry {
    /// Tributary's time of the change.
    pub datetime: String,
    /// created / updated / deleted.
    pub change: &'static str,
    /// Content sha-256 (for a deletion, the last content's).
    pub sha256: String,
    /// Length.
    pub length: u64,
    /// `(set, sequence number)` of each log entry.
    pub logged: Vec<(String, u64)>,
}

/// Looks the query up; an empty `resources` means nothing matched.
///
/// # Errors
/// [`StoreError`] when the store cannot be read.
pub fn lookup(store: &Store, naming: &Naming, query: &Query) -> Result<Provenance, StoreError> {
    let mut found: Vec<(&'static str, Record)> = Vec::new();
    match query {
        Query::Hash(id) => {
            for uri in store.uris_by_sha256(id)? {
                found.extend(store.record(&uri)?.map(|r| ("sha-256", r)));
            }
        }
        Query::Uri(uri) => find_by_uri(store, naming, uri, &mut found)?,
    }
    let mut resources = Vec::with_capacity(found.len());
    for (how, rec) in found {
        let history = group_history(store.history(&rec.uri)?);
        let feed = feed_item_state(store, &rec)?.map(|item| FeedProvenance::of(&item));
        let oai = oai_provenance(store, &rec);
        let keys = crate::store::record_keys(&rec.upstream, &rec.origin, &rec.sha256.to_hex());
        let taken_down = store.takedown_matching(&keys)?.map(|t| t.at.to_string());
        let mut r = ResourceProvenance { oai, ..describe(how, rec, history, feed) };
        r.state.taken_down = taken_down;
        resources.push(r);
    }
    Ok(Provenance { query: query.to_string(), resources })
}

fn find_by_uri(
    store: &Store,
    naming: &Naming,
    uri: &str,
    found: &mut Vec<(&'static str, Record)>,
) -> Result<(), StoreError> {
    if let Some(rec) = store.record(uri)? {
        found.push(("tributary-uri", rec));
        return Ok(());
    }
    if naming.parse_resource(uri).is_some() {
        return Ok(()); // one of Tributary's own URIs that names nothing
    }
    let push = |how, rec: Record, found: &mut Vec<(&'static str, Record)>| {
        if !found.iter().any(|(_, r)| r.uri == rec.uri) {
            found.push((how, rec));
        }
    };
    // Every source has a set of its own id, so these are the names each source would give a
    // record harvested from `uri`. Records fetched from their origin are found only by name,
    // and deleted ones left the indexes.
    let named: Vec<String> = store.sets()?.iter().filter_map(|set| naming.resource(&set.id, uri)).collect();
    if let Some(t) = store.uri_by_upstream(uri, &named)? {
        store.record(&t)?.into_iter().for_each(|r| push("upstream-uri", r, found));
    }
    for t in &named {
        store.record(t)?.into_iter().for_each(|r| push("upstream-uri", r, found));
    }
    // Records fetched from `uri` itself were all named above; the index holds the others.
    for t in store.uris_by_origin(uri, &[])? {
        store.record(&t)?.into_iter().for_each(|r| push("origin-uri", r, found));
    }
    Ok(())
}

fn text(t: Option<W3cDateTime>) -> Option<String> {
    t.map(|t| t.to_string())
}

fn describe(
    how: &'static str,
    rec: Record,
    history: Vec<HistoryEntry>,
    feed: Option<FeedProvenance>,
) -> ResourceProvenance {
    let mut chain = vec![ChainLink { role: "origin", uri: rec.origin.clone() }];
    if rec.upstream != rec.origin {
        chain.push(ChainLink { role: "upstream", uri: rec.upstream.clone() });
    }
    chain.push(ChainLink { role: "tributary", uri: rec.uri.clone() });
    let origin = Origin {
        href: rec.origin,
        modified: text(rec.via.modified),
        hash: (!rec.via.hash.is_empty()).then(|| rec.via.hash.to_string()),
        length: rec.via.length,
        media_type: rec.via.media_type,
    };
    let state = CopyState {
        status: if rec.deleted.is_some() { "deleted" } else { "live" },
        sha256: rec.sha256.to_hex(),
        md5: rec.md5,
        length: rec.length,
        media_type: rec.media_type,
        last_change: rec.changed.to_string(),
        deleted: text(rec.deleted),
        taken_down: None,
    };
    ResourceProvenance {
        matched_by: how,
        uri: rec.uri,
        source: rec.source,
        sets: rec.sets,
        origin,
        upstream: rec.upstream,
        chain,
        state,
        history,
        feed,
        oai: None,
        verify: None,
    }
}

/// One change is logged once per set; show it once, with every `(set, seq)`.
fn group_history(events: Vec<(String, Event)>) -> Vec<HistoryEntry> {
    let mut out: Vec<HistoryEntry> = Vec::new();
    let mut last_key: Option<(W3cDateTime, Change, BlobId)> = None;
    for (set, ev) in events {
        let key = (ev.datetime, ev.change, ev.sha256);
        match out.last_mut() {
            Some(h) if last_key == Some(key) => h.logged.push((set, ev.seq)),
            _ => out.push(HistoryEntry {
                datetime: ev.datetime.to_string(),
                change: ev.change.as_str(),
                sha256: ev.sha256.to_hex(),
                length: ev.length,
                logged: vec![(set, ev.seq)],
            }),
        }
        last_key = Some(key);
    }
    out
}

/// What a live fetch of the origin found; filled in by whoever has the network.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Fetched {
    /// HTTP status, when a response arrived.
    pub status: Option<u16>,
    /// Bytes received.
    pub length: u64,
    /// sha-256 of the bytes received (lowercase hex).
    pub sha256: Option<String>,
    /// md5 of the bytes received.
    pub md5: Option<String>,
    /// sha-1 of the bytes received.
    pub sha1: Option<String>,
    /// True when the whole body was read (a 2xx, within the size cap).
    pub complete: bool,
    /// Why the fetch failed or stopped.
    pub error: Option<String>,
}

/// The verdict of a live check.
#[derive(Debug, Clone, Serialize)]
pub struct Verification {
    /// The URI fetched (the origin).
    pub checked: String,
    /// What came back.
    pub fetched: Fetched,
    /// Whether the origin still matches its `via` attributes (length and every hash that can
    /// be computed); `None` when the fetch was incomplete or nothing comparable is declared.
    pub matches_via: Option<bool>,
    /// Whether the origin is byte-identical to Tributary's copy (sha-256); `None` when the
    /// fetch was incomplete.
    pub matches_copy: Option<bool>,
    /// One line for people.
    pub summary: String,
}

/// Judges a fetch of `res`'s origin against its `via` attributes and Tributary's copy.
pub fn compare(res: &ResourceProvenance, fetched: Fetched) -> Verification {
    let checked = res.origin.href.clone();
    if !fetched.complete {
        let why = fetched.error.clone().unwrap_or_else(|| "incomplete response".into());
        let summary = format!("could not check the origin: {why}");
        return Verification { checked, fetched, matches_via: None, matches_copy: None, summary };
    }
    let matches_copy = fetched.sha256.as_deref().map(|h| h == res.state.sha256);
    let declared = res.origin.hash.as_deref().and_then(|h| HashList::parse(h).ok()).map(|(l, _)| l);
    let mut verdicts = Vec::new();
    if let Some(len) = res.origin.length {
        verdicts.push(len == fetched.length);
    }
    for d in declared.iter().flat_map(|l| l.0.iter()) {
        let got = match d.algorithm {
            HashAlgorithm::Md5 => fetched.md5.as_deref(),
            HashAlgorithm::Sha1 => fetched.sha1.as_deref(),
            HashAlgorithm::Sha256 => fetched.sha256.as_deref(),
            HashAlgorithm::Other(_) => None,
        };
        verdicts.extend(got.map(|g| g == d.value));
    }
    let matches_via = (!verdicts.is_empty()).then(|| verdicts.iter().all(|v| *v));
    let summary = match (matches_via, matches_copy) {
        (Some(false), _) => "the origin has changed since its via attributes were recorded".to_owned(),
        (_, Some(false)) => "the origin differs from Tributary's copy".to_owned(),
        (Some(true), _) => "the origin matches its via attributes and Tributary's copy".to_owned(),
        _ => "the origin matches Tributary's copy (no via hash or length to compare)".to_owned(),
    };
    Verification { checked, fetched, matches_via, matches_copy, summary }
}

impl fmt::Display for Provenance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.resources.is_empty() {
            return writeln!(f, "no republished resource matches {}", self.query);
        }
        for (i, r) in self.resources.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write_resource(f, r)?;
        }
        Ok(())
    }
}

fn write_resource(f: &mut fmt::Formatter<'_>, r: &ResourceProvenance) -> fmt::Result {
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    writeln!(f, "resource   {}  (matched by {})", r.uri, r.matched_by)?;
    writeln!(f, "source     {}   sets: {}", r.source, r.sets.join(", "))?;
    let chain: Vec<String> = r.chain.iter().map(|c| format!("{} {}", c.role, c.uri)).collect();
    writeln!(f, "chain      {}", chain.join("  ->  "))?;
    let o = &r.origin;
    let len = o.length.map_or_else(|| "-".into(), |l| l.to_string());
    writeln!(f, "origin     modified {}  length {len}  type {}", opt(&o.modified), opt(&o.media_type))?;
    writeln!(f, "           hash {}", opt(&o.hash))?;
    let s = &r.state;
    writeln!(
        f,
        "state      {}  length {}  type {}  last change {}",
        s.status,
        s.length,
        opt(&s.media_type),
        s.last_change
    )?;
    writeln!(f, "           sha-256:{}{}", s.sha256, s.md5.as_ref().map(|m| format!(" md5:{m}")).unwrap_or_default())?;
    if let Some(t) = &s.taken_down {
        writeln!(f, "           taken down on {t} (`tributary takedown list` says why)")?;
    }
    writeln!(f, "history    {} change(s)", r.history.len())?;
    for h in &r.history {
        let logged: Vec<String> = h.logged.iter().map(|(s, n)| format!("{s}#{n}")).collect();
        writeln!(
            f,
            "  {}  {:<8} {} bytes  sha-256:{}  [{}]",
            h.datetime,
            h.change,
            h.length,
            h.sha256,
            logged.join(" ")
        )?;
    }
    if let Some(feed) = &r.feed {
        write_feed(f, feed)?;
    }
    if let Some(o) = &r.oai {
        let date = o.datestamp.as_deref().unwrap_or("-");
        writeln!(f, "oai-pmh    identifier {}  datestamp {date}  format {}", o.identifier, o.metadata_prefix)?;
        writeln!(f, "           repository {}  sets: {}", o.repository, o.sets.join(", "))?;
    }
    if let Some(v) = &r.verify {
        writeln!(f, "verify     {}: {}", v.checked, v.summary)?;
    }
    Ok(())
}

fn write_feed(f: &mut fmt::Formatter<'_>, feed: &FeedProvenance) -> fmt::Result {
    let updated = feed.updated.as_deref().unwrap_or("-");
    writeln!(f, "feed item  {}  updated {updated}", feed.item)?;
    let Some(s) = &feed.sync else { return writeln!(f, "           no sx:sync (merged by date)") };
    writeln!(
        f,
        "feedsync   id {}  updates {}  {}  conflicts {}{}",
        s.id,
        s.updates,
        if s.deleted { "deleted" } else { "live" },
        s.conflicts,
        if s.noconflicts { " (noconflicts)" } else { "" }
    )?;
    for h in &s.history {
        let (when, by) = (h.when.as_deref().unwrap_or("-"), h.by.as_deref().unwrap_or("-"));
        writeln!(f, "  sequence {:<4} {when}  by {by}", h.sequence)?;
    }
    Ok(())
}
