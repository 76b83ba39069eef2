//! `oai_objects = true`: the digital objects records point to, harvested as resources of
//! their own — the bytes Europeana-style aggregators want, which no ResourceSync peer fetches.
//!
//! - **Which**: the http(s) URLs among a record's `dc:identifier` and `dc:relation`
//!   (`model::oai::object_urls`) on the repository's own host: an OAI-PMH base URL speaks for
//!   its site, as `/.well-known/resourcesync` does, since repositories serve their bitstreams
//!   beside, not below, `/oai` (DSpace: `/server/oai/request` and `/bitstreams/…`). Others only
//!   with `allow_outside_authority`, as for any Source. The record's own GetRecord URL is not
//!   an object.
//! - **How**: through the polite fetcher (`fetch_verified`, nothing declared to verify
//!   against), at most `concurrency` at once, when their record is new or changed, or when
//!   they are not held yet (a failed fetch is tried again at the record's next listing).
//! - **Links** (as DSpace's ResourceSync module does): the record `describes` each object,
//!   and each object is `describedby` every record known to point to it; both are republished
//!   under the link policy, which keeps them by default.
//! - **Deletion**: a deleted record deletes the objects whose only `describedby` is that
//!   record; an object another record still describes stays. A complete full list keeps the
//!   objects of the records it lists and deletes the others, as it does records.
//!
//! A failed object is counted as a failed resource and logged; it never fails the poll.

use futures_util::StreamExt as _;
use url::Url;

use super::apply::{Target, count};
use crate::harvest::authority::within_authority;
use crate::harvest::commit::apply_blocking;
use crate::harvest::ctx::{HarvestError, join_error};
use crate::harvest::report::{ResourceOutcome, SourceReport};
use crate::harvest::resource::{ResourceError, fetch_verified};
use crate::model::Link;
use crate::model::oai::object_urls;
use crate::store::{Batch, Expected, Listing, NewRecord, Record, Via};

/// The objects of a record, by URL: on the repository's host, or anywhere when the source
/// allows it; never the record itself.
pub(super) fn objects_of(t: &Target<'_>, document: &[u8], record_url: &Url) -> Vec<Url> {
    let mut site = t.oai.base.clone();
    site.set_path("/");
    site.set_query(None);
    object_urls(document)
        .into_iter()
        .filter_map(|u| Url::parse(&u).ok())
        .filter(|u| u != record_url)
        .filter(|u| t.source.settings.allow_outside_authority || within_authority(&site, u))
        .collect()
}

/// An object to fetch and the GetRecord URL of the record pointing to it.
pub(super) struct Wanted {
    pub(super) object: Url,
    pub(super) record: String,
}

/// Fetches `wanted` (each object once) and commits them, each `describedby` its records.
pub(super) async fn harvest_objects(
    t: &Target<'_>,
    wanted: Vec<Wanted>,
    report: &mut SourceReport,
) -> Result<(), HarvestError> {
    let mut by_object: Vec<(Url, Vec<String>)> = Vec::new();
    for w in wanted {
        match by_object.iter_mut().find(|(o, _)| *o == w.object) {
            Some((_, records)) if !records.contains(&w.record) => records.push(w.record),
            Some(_) => {}
            None => by_object.push((w.object, vec![w.record])),
        }
    }
    let limit = usize::try_from(t.source.settings.concurrency.get()).unwrap_or(1);
    let fetched: Vec<_> = futures_util::stream::iter(by_object)
        .map(|(object, records)| async move {
            let r = fetch_verified(
                &t.ctx.fetcher,
                &t.ctx.store,
                std::slice::from_ref(&object),
                &Expected::none(),
                &t.source.settings,
            )
            .await;
            (object, records, r)
        })
        .buffer_unordered(limit)
        .collect()
        .await;
    let mut batch = Batch::new();
    let sets: Vec<&str> = t.sets.iter().map(String::as_str).collect();
    for (object, records, result) in fetched {
        let Some(uri) = t.ctx.naming.resource_url(&t.source.id, &object) else { continue };
        match result {
            Ok(stored) => {
                report.bytes += stored.bytes;
                let held = held_record(t, &uri).await?;
                batch.upsert(&sets, object_record(t, uri, &object, records, held.as_ref(), &stored.info));
            }
            Err(e) if e.is_upstream() => {
                tracing::warn!(source.id = %t.source.id, object = %object, error = %crate::error::chain(&e), "an object of an OAI-PMH record could not be fetched");
                report.failed += 1;
                t.ctx.progress.resource(&t.source.id, ResourceOutcome::Failed, 0);
            }
            Err(ResourceError::Store(e)) => return Err(HarvestError::Store(e)),
            Err(_) => {}
        }
    }
    if !batch.is_empty() {
        count(t, &apply_blocking(&t.ctx.store, batch).await?, report);
    }
    Ok(())
}

/// The object's record: `describedby` the records pointing to it now and before.
fn object_record(
    t: &Target<'_>,
    uri: String,
    object: &Url,
    records: Vec<String>,
    held: Option<&Record>,
    info: &crate::store::BlobInfo,
) -> NewRecord {
    let mut by: Vec<String> = held.map(describedby).unwrap_or_default();
    for r in records {
        if !by.contains(&r) {
            by.push(r);
        }
    }
    let listing = Listing {
        origin: object.to_string(),
        declared: Default::default(),
        length: Some(info.length),
        media_type: held.and_then(|h| h.media_type.clone()),
        lastmod: None,
        via: Via::default(),
        links: by.into_iter().map(|r| Link::new("describedby", r)).collect(),
    };
    NewRecord { uri, source: t.source.id.clone(), upstream: object.to_string(), sha256: info.id, listing }
}

/// The records an object is `describedby`.
fn describedby(r: &Record) -> Vec<String> {
    r.links.iter().filter(|l| l.rel == "describedby").map(|l| l.href.clone()).collect()
}

/// The stored record at `uri`, if any.
pub(super) async fn held_record(t: &Target<'_>, uri: &str) -> Result<Option<Record>, HarvestError> {
    let (store, uri) = (t.ctx.store.clone(), uri.to_owned());
    Ok(tokio::task::spawn_blocking(move || store.record(&uri)).await.map_err(join_error)??)
}

/// For a record being deleted (its GetRecord URL `record`, as held): the objects to delete
/// with it, those it `describes` whose only `describedby` is this record.
pub(super) async fn orphans(t: &Target<'_>, held: &Record, record: &str) -> Result<Vec<String>, HarvestError> {
    let mut out = Vec::new();
    for link in held.links.iter().filter(|l| l.rel == "describes") {
        let Some(uri) = Url::parse(&link.href).ok().and_then(|u| t.ctx.naming.resource_url(&t.source.id, &u)) else {
            continue;
        };
        let Some(object) = held_record(t, &uri).await?.filter(|o| !o.is_deleted()) else { continue };
        if describedby(&object).iter().all(|r| r == record) {
            out.push(uri);
        }
    }
    Ok(out)
}
