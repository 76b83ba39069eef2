//! OAI-PMH records onto ResourceSync resources, one page at a time.
//!
//! One resource per record. It is named by its GetRecord URL, `{oai}?verb=GetRecord&
//! metadataPrefix=…&identifier=…`, which is also its origin, so the `via` Tributary publishes
//! dereferences to the record at the repository. Its bitstream is the record (header,
//! metadata, about) as a standalone XML document in the bytes the repository sent, so its
//! hash changes when the record does and not with `responseDate`. `lastmod` is the datestamp;
//! each `setSpec` becomes an `rs:ln rel="collection"` to the set's URI (standard §12.6) and
//! the format a `describedby` to its namespace, both under the source's link policy.
//! A record that arrives unchanged writes nothing and is no change event. With
//! `oai_objects`, the objects a record points to follow (`objects`).

use std::collections::HashSet;

use url::Url;

use super::objects::{Wanted, harvest_objects, held_record, objects_of, orphans};
use super::request::{get_record_url, set_url};
use crate::config::{OaiSource, Source};
use crate::harvest::commit::apply_blocking;
use crate::harvest::ctx::{Ctx, HarvestError, join_error};
use crate::harvest::report::{ResourceOutcome, SourceReport};
use crate::model::oai::OaiRecord;
use crate::model::{Link, W3cDateTime};
use crate::store::{Applied, Batch, BlobInfo, Expected, Listing, NewRecord, Outcome, Via};

/// The media type of a stored record.
const RECORD_TYPE: &str = "application/xml";

/// What every page of one poll is applied with.
pub(super) struct Target<'a> {
    pub(super) ctx: &'a Ctx,
    pub(super) source: &'a Source,
    pub(super) oai: &'a OaiSource,
    pub(super) sets: &'a [String],
    /// The harvested format's namespace (else its schema), the `describedby` target.
    pub(super) format_uri: &'a str,
}

/// A record named and, unless deleted, stored: ready to be committed.
pub(super) struct Staged {
    uri: String,
    upstream: Url,
    /// Its length, for the report.
    bytes: u64,
    deleted: bool,
    /// With `oai_objects`, the objects it points to.
    objects: Vec<Url>,
    /// The record to upsert, unless it is deleted; taken by [`apply_page`].
    new: Option<NewRecord>,
}

/// Names a page's records, puts the live ones' documents into the store and builds their
/// records; those skipped for want of an identifier are counted in `skipped`. Called as each
/// page arrives, while the batch before is committing: hashing, appending to the pack and
/// building the records then overlap the commit instead of adding to it. A blob put but not
/// yet committed is protected from gc like any fresh put, and its row commits with the next
/// batch.
pub(super) async fn stage(
    t: &Target<'_>,
    records: Vec<OaiRecord>,
    skipped: &mut u64,
) -> Result<Vec<Staged>, HarvestError> {
    let named = name(t, records, skipped);
    let stored = store_documents(t, named).await?;
    Ok(stored.into_iter().map(|(uri, upstream, record, info)| staged(t, uri, upstream, &record, info)).collect())
}

fn staged(t: &Target<'_>, uri: String, upstream: Url, record: &OaiRecord, info: Option<BlobInfo>) -> Staged {
    let objects = match (&info, t.oai.objects) {
        (Some(_), true) => objects_of(t, &record.document, &upstream),
        _ => Vec::new(),
    };
    let new = info.map(|info| new_record(t, uri.clone(), &upstream, record, &info, &objects));
    Staged { uri, upstream, bytes: record.document.len() as u64, deleted: record.deleted, objects, new }
}

/// Commits staged records as one batch; `seen` collects the URIs of the live records of a
/// full list.
pub(super) async fn apply_page(
    t: &Target<'_>,
    mut staged: Vec<Staged>,
    seen: &mut Option<HashSet<String>>,
    report: &mut SourceReport,
) -> Result<(), HarvestError> {
    if let Some(seen) = seen {
        seen.extend(staged.iter().filter(|s| !s.deleted).map(|s| s.uri.clone()));
        let objects = staged.iter().flat_map(|s| &s.objects);
        seen.extend(objects.filter_map(|o| t.ctx.naming.resource_url(&t.source.id, o)));
    }
    let mut batch = Batch::new();
    let sets: Vec<&str> = t.sets.iter().map(String::as_str).collect();
    let stage = t.ctx.stage(&t.source.id);
    for s in &mut staged {
        match s.new.take() {
            Some(new) => {
                report.bytes += s.bytes;
                batch.upsert(&sets, new);
            }
            None if s.deleted && t.source.settings.deletes => {
                if t.oai.objects
                    && let Some(held) = held_record(t, &s.uri).await?
                {
                    for orphan in orphans(t, &held, s.upstream.as_str()).await? {
                        batch.stage_delete(&sets, &orphan, &stage);
                    }
                }
                batch.stage_delete(&sets, &s.uri, &stage);
            }
            None => {}
        }
    }
    if batch.is_empty() {
        return Ok(());
    }
    let applied = apply_blocking(&t.ctx.store, batch).await?;
    count(t, &applied, report);
    if t.oai.objects {
        let wanted = wanted_objects(t, &staged, &applied).await?;
        harvest_objects(t, wanted, report).await?;
    }
    Ok(())
}

/// The objects to fetch: those of records new or changed in `applied`, and those not held.
async fn wanted_objects(t: &Target<'_>, staged: &[Staged], applied: &Applied) -> Result<Vec<Wanted>, HarvestError> {
    let changed: HashSet<&str> = applied
        .ops
        .iter()
        .filter(|o| matches!(o.outcome, Outcome::Created | Outcome::Updated))
        .map(|o| o.uri.as_str())
        .collect();
    let mut wanted = Vec::new();
    for s in staged {
        for o in &s.objects {
            let want = changed.contains(s.uri.as_str()) || {
                let uri = t.ctx.naming.resource_url(&t.source.id, o).unwrap_or_default();
                held_record(t, &uri).await?.is_none_or(|r| r.is_deleted())
            };
            if want {
                wanted.push(Wanted { object: o.clone(), record: s.upstream.to_string() });
            }
        }
    }
    Ok(wanted)
}

/// Tributary's URI and the GetRecord URL of every record; records without an identifier are
/// skipped.
fn name(t: &Target<'_>, records: Vec<OaiRecord>, skipped: &mut u64) -> Vec<(String, Url, OaiRecord)> {
    let mut out = Vec::with_capacity(records.len());
    for r in records {
        t.ctx.progress.listed(&t.source.id);
        let upstream = get_record_url(&t.oai.base, &t.oai.metadata_prefix, &r.identifier);
        match t.ctx.naming.resource_url(&t.source.id, &upstream).filter(|_| !r.identifier.is_empty()) {
            Some(uri) => out.push((uri, upstream, r)),
            None => {
                tracing::warn!(source.id = %t.source.id, datestamp = %r.datestamp, "a record without identifier is skipped");
                *skipped += 1;
            }
        }
    }
    out
}

/// A named record and, unless deleted, what storing its document stored.
type Stored = (String, Url, OaiRecord, Option<BlobInfo>);

/// Puts the live records' documents into the store, off the async runtime.
async fn store_documents(t: &Target<'_>, named: Vec<(String, Url, OaiRecord)>) -> Result<Vec<Stored>, HarvestError> {
    let store = t.ctx.store.clone();
    let staged = tokio::task::spawn_blocking(move || {
        // sha-256 only, as for a Source that declares no md5: the md5 that was also computed
        // for republishing cost a baseline a twentieth of its CPU, and a Change List's
        // `hash` is as good with the sha-256 alone.
        let expected = Expected::none();
        named
            .into_iter()
            .map(|(uri, upstream, record)| {
                let stored = match record.deleted {
                    true => None,
                    false => Some(store.put(&record.document[..], &expected)?),
                };
                Ok((uri, upstream, record, stored))
            })
            .collect::<Result<Vec<_>, crate::store::StoreError>>()
    })
    .await
    .map_err(join_error)??;
    Ok(staged)
}

fn new_record(
    t: &Target<'_>,
    uri: String,
    upstream: &Url,
    r: &OaiRecord,
    info: &BlobInfo,
    objects: &[Url],
) -> NewRecord {
    let lastmod = r.datestamp.parse::<W3cDateTime>().ok();
    let mut links: Vec<Link> = r
        .set_specs
        .iter()
        .map(|spec| Link::new("collection", set_url(&t.oai.base, &t.oai.metadata_prefix, spec).to_string()))
        .collect();
    if !t.format_uri.is_empty() {
        links.push(Link::new("describedby", t.format_uri));
    }
    links.extend(objects.iter().map(|o| Link::new("describes", o.as_str())));
    let listing = Listing {
        origin: super::origin::origin(&r.document, &t.oai.metadata_prefix, upstream),
        declared: Default::default(),
        length: Some(info.length),
        media_type: Some(RECORD_TYPE.into()),
        lastmod,
        via: Via { modified: lastmod, hash: Default::default(), length: None, media_type: None },
        links,
    };
    NewRecord { uri, source: t.source.id.clone(), upstream: upstream.to_string(), sha256: info.id, listing }
}

pub(super) fn count(t: &Target<'_>, applied: &Applied, report: &mut SourceReport) {
    for op in &applied.ops {
        let outcome = match op.outcome {
            Outcome::Created => {
                report.created += 1;
                ResourceOutcome::Fetched
            }
            Outcome::Updated => {
                report.updated += 1;
                ResourceOutcome::Fetched
            }
            Outcome::Deleted => {
                report.deleted += 1;
                continue;
            }
            Outcome::Staged => {
                report.staged += 1;
                continue;
            }
            Outcome::TakenDown => {
                report.taken_down += 1;
                continue;
            }
            Outcome::Unchanged => ResourceOutcome::Unchanged,
        };
        match outcome {
            ResourceOutcome::Fetched => report.fetched += 1,
            _ => report.unchanged += 1,
        }
        t.ctx.progress.resource(&t.source.id, outcome, 0);
    }
}
