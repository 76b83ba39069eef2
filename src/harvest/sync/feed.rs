//! One poll of a feed source (`feed = URL`): an Atom or RSS feed, with or without FeedSync,
//! harvested like a Source. Each item is a resource named by its identity (the `sx:sync` id,
//! else the Atom id / RSS guid, else its link); every incoming item is merged with what the
//! store holds for it by FeedSync's algorithm (§3.3 of the seed), or by `updated` for items
//! without `sx:sync`, and only a merge that changes the item writes a record and a change
//! event. Tombstones (`deleted="true"`) delete the record but keep the item's FeedSync state,
//! so a later update or un-deletion still merges against its history.
//!
//! Complete and partial feeds (§4): a feed naming a `complete` feed is read from that one at
//! the first poll, and again whenever its `since` is past the `until` kept from the poll
//! before (the subscriber fell out of the window). A complete feed holds every item of its
//! publisher, tombstones included, so an item held but absent from it is deleted (§4.1.2 asks
//! an out-of-sync subscriber to discard what it did not write itself and re-read the
//! complete feed; Tributary writes nothing itself, so that is everything absent). A partial
//! feed never deletes: there, only tombstones do.
//!
//! Each batch holds items' records together with their FeedSync state (`Batch::feed_item`),
//! so after a crash the state never runs ahead of or behind the record; the source's state
//! (validators, `until`) is committed last, so an interrupted poll reads the feed again and
//! merging what it already applied changes nothing.
//!
//! FeedSync's merge costs grow with an item's history and conflicts (subsumption compares
//! histories pairwise), and an upstream chooses both: the reader caps them per item
//! (`feed_max_history`, `feed_max_conflicts`, and the item's bytes count its `sx:sync`), a
//! merge result over the caps is not kept, and merges run on the blocking pool with the store
//! reads they need, so a costly feed never stalls the async workers that serve requests.

use std::collections::HashSet;

use url::Url;

use super::super::commit::apply_blocking;
use super::super::ctx::{Ctx, HarvestError, join_error};
use super::super::report::SourceReport;
use super::super::resource::fetch_verified;
use crate::config::{FeedContent, FeedSource, Source};
use crate::fetch::{Fetched, Validators};
use crate::model::feed::{
    Feed, FeedItem, FeedLimits, Merged, RelatedKind, SyncCap, item_document, merge, read_feed, read_item, republished,
};
use crate::model::{Link, W3cDateTime};
use crate::store::{Batch, Expected, Listing, NewRecord, SourceState, Via};

/// Items per committed batch.
const BATCH: usize = 300;

/// The media type of a stored item document.
const ITEM_TYPE_ATOM: &str = "application/atom+xml;type=entry";
const ITEM_TYPE_RSS: &str = "application/rss+xml";

/// What every step of one poll works on.
#[derive(Clone, Copy)]
struct Poll<'a> {
    ctx: &'a Ctx,
    source: &'a Source,
    feed: &'a FeedSource,
    sets: &'a [String],
}

/// One poll of `source`: each of its feeds in turn, their items merged into one state.
pub(crate) async fn harvest_feed(
    ctx: &Ctx,
    source: &Source,
    feed_source: &FeedSource,
    sets: &[String],
    mut state: SourceState,
) -> Result<SourceReport, HarvestError> {
    let mut report = SourceReport::new(&source.id);
    let mut modified = false;
    let mut batch = Batch::new();
    let poll = Poll { ctx, source, feed: feed_source, sets };
    for url in &feed_source.urls {
        let polled = match poll_one(&poll, url, &mut state, &mut report).await {
            Ok(p) => p,
            // The feeds read before stay applied and counted: the poll is partial.
            Err(e) if report.progressed() => {
                report.error = Some(crate::error::chain(&e).to_string());
                break;
            }
            Err(e) => return Err(e),
        };
        let Some((seen, complete)) = polled else {
            continue;
        };
        modified = true;
        // With several feeds (mirrors, or an aggregator and its original) an item missing from
        // one may be in another: only a source of one feed deletes by absence.
        if complete && source.settings.deletes && feed_source.urls.len() == 1 {
            // The state goes too: an item that comes back is new, whatever its `updated`.
            report.listed_all = true;
            for (identity, uri) in vanished_items(ctx, source, &seen)? {
                batch.stage_delete(&set_refs(sets), &uri, &ctx.stage(&source.id));
                batch.feed_item(&source.id, &identity, None);
            }
        }
    }
    report.not_modified = !modified;
    report.complete = report.error.is_none();
    state.baselined |= report.complete;
    batch.source_state(&source.id, state);
    let applied = apply_blocking(&ctx.store, batch).await?;
    report.deleted += applied.ops.iter().filter(|o| o.outcome == crate::store::Outcome::Deleted).count() as u64;
    Ok(report)
}

/// Reads one feed of the source and merges its items; `None` when it answered 304, else the
/// identities it listed and whether it was a complete feed.
async fn poll_one(
    p: &Poll<'_>,
    url: &Url,
    state: &mut SourceState,
    report: &mut SourceReport,
) -> Result<Option<(HashSet<String>, bool)>, HarvestError> {
    let Poll { ctx, source, .. } = *p;
    let validators = state.documents.get(url.as_str()).map(Validators::from);
    let Some((final_url, feed, new_validators, moved)) = fetch_feed(ctx, source, url, validators.as_ref()).await?
    else {
        return Ok(None);
    };
    crate::harvest::moves::note(&mut state.status, &source.id, url, moved.as_ref());
    // §4.1: the `until` kept is the subscribed feed's, not the complete feed's.
    let until = feed.sharing.as_ref().and_then(|s| s.until.clone());
    let kept = state.feed_until.get(url.as_str()).cloned();
    let (feed, complete) = choose_complete(ctx, source, (state.baselined, kept.as_deref()), &final_url, feed).await?;
    for w in &feed.warnings {
        tracing::warn!(source.id = %source.id, feed = %url, "{w}");
    }
    let failed_before = report.failed;
    let items = feed.items.len();
    let seen = apply_items(p, feed.items, report).await?;
    // An item that failed is retried at the next poll only if the feed is read again in full,
    // not answered 304: keep no validators for a feed with failures.
    match report.failed == failed_before {
        true => state.documents.insert(url.to_string(), (&new_validators).into()),
        false => state.documents.remove(url.as_str()),
    };
    match until {
        Some(u) => state.feed_until.insert(url.to_string(), u),
        None => state.feed_until.remove(url.as_str()),
    };
    tracing::info!(source.id = %source.id, feed = %url, items, complete, "feed harvested");
    Ok(Some((seen, complete)))
}

fn set_refs(sets: &[String]) -> Vec<&str> {
    sets.iter().map(String::as_str).collect()
}

/// Fetches and reads a feed: its final URL, the feed, its validators and where it moved for
/// good (a permanent redirect); `None` when it answered 304.
async fn fetch_feed(
    ctx: &Ctx,
    source: &Source,
    url: &Url,
    validators: Option<&Validators>,
) -> Result<Option<(Url, Feed, Validators, Option<Url>)>, HarvestError> {
    let doc = match ctx.fetcher.get_document(url, &source.settings, validators).await {
        Ok(Fetched::Modified(d)) => d,
        Ok(Fetched::NotModified) if validators.is_some() => return Ok(None),
        Ok(Fetched::NotModified) => {
            let e = crate::fetch::FetchError::Status { url: url.to_string(), status: 304 };
            return Err(HarvestError::Feed {
                source_id: source.id.clone(),
                url: url.to_string(),
                detail: e.to_string(),
            });
        }
        Err(e) => {
            return Err(HarvestError::Feed {
                source_id: source.id.clone(),
                url: url.to_string(),
                detail: crate::error::chain(&e).to_string(),
            });
        }
    };
    let limits = feed_limits(source);
    let name = doc.url.to_string();
    let body = doc.body.clone();
    let feed = tokio::task::spawn_blocking(move || read_feed(std::io::Cursor::new(body), &name, &limits))
        .await
        .map_err(join_error)?
        .map_err(|e| HarvestError::Feed {
            source_id: source.id.clone(),
            url: doc.url.to_string(),
            detail: e.to_string(),
        })?;
    Ok(Some((doc.url, feed, doc.validators, doc.moved)))
}

/// The feed to merge and whether it is complete (§4.1): the `complete` feed the partial one
/// names, at the first poll or when this one's `since` is past the `until` kept.
async fn choose_complete(
    ctx: &Ctx,
    source: &Source,
    (baselined, kept_until): (bool, Option<&str>),
    url: &Url,
    feed: Feed,
) -> Result<(Feed, bool), HarvestError> {
    let complete_link = feed
        .sharing
        .as_ref()
        .and_then(|s| s.related.iter().find(|r| r.kind == RelatedKind::Complete))
        .and_then(|r| Url::parse(&r.link).ok());
    let Some(link) = complete_link else { return Ok((feed, false)) };
    if &link == url {
        return Ok((feed, true));
    }
    let since = feed.sharing.as_ref().and_then(|s| s.since.as_deref());
    let out_of_window = matches!((since, kept_until), (Some(s), Some(u)) if s > u);
    if baselined && !out_of_window {
        return Ok((feed, false));
    }
    match fetch_feed(ctx, source, &link, None).await? {
        Some((_, complete, _, _)) => Ok((complete, true)),
        None => Ok((feed, false)),
    }
}

/// The reader's limits for the source's feeds.
fn feed_limits(source: &Source) -> FeedLimits {
    let s = &source.settings;
    FeedLimits {
        max_bytes: s.max_document_bytes,
        max_history: s.feed_max_history,
        max_conflicts: s.feed_max_conflicts,
        ..FeedLimits::default()
    }
}

/// What merging one incoming item gave.
enum MergeOutcome {
    /// The store already holds it.
    Unchanged,
    /// The new state to keep.
    Merged(Box<FeedItem>),
    /// The merge result breaks a cap (the incoming item alone kept within them): the local
    /// state stands.
    OverCap(SyncCap),
}

/// Merges every item into the store; returns the identities seen.
async fn apply_items(
    p: &Poll<'_>,
    items: Vec<FeedItem>,
    report: &mut SourceReport,
) -> Result<HashSet<String>, HarvestError> {
    let Poll { ctx, source, .. } = *p;
    let mut seen = HashSet::new();
    let mut unique = Vec::with_capacity(items.len());
    for item in items {
        let Some(identity) = item.identity().map(str::to_owned) else { continue };
        if !seen.insert(identity.clone()) {
            tracing::warn!(source.id = %source.id, item = %identity, "item listed twice in one feed; the first is kept");
            continue;
        }
        unique.push((identity, item));
    }
    let mut rest = unique.into_iter().peekable();
    while rest.peek().is_some() {
        let chunk: Vec<_> = rest.by_ref().take(BATCH).collect();
        let mut batch = Batch::new();
        for (identity, outcome) in merge_blocking(ctx, source, chunk).await? {
            match outcome {
                MergeOutcome::Unchanged => report.unchanged += 1,
                MergeOutcome::Merged(merged) => stage(p, &identity, *merged, &mut batch, report).await?,
                MergeOutcome::OverCap(cap) => {
                    tracing::warn!(source.id = %source.id, item = %identity, "feed item not merged: the result would have {cap}");
                    report.failed += 1;
                }
            }
        }
        if !batch.is_empty() {
            count(&apply_blocking(&ctx.store, batch).await?, report);
        }
    }
    Ok(seen)
}

/// Merges `items` with the states the store holds for them, on the blocking pool: each
/// merge reads the store and may compare thousands of histories.
async fn merge_blocking(
    ctx: &Ctx,
    source: &Source,
    items: Vec<(String, FeedItem)>,
) -> Result<Vec<(String, MergeOutcome)>, HarvestError> {
    let (store, source_id, limits) = (ctx.store.clone(), source.id.clone(), feed_limits(source));
    tokio::task::spawn_blocking(move || {
        items
            .into_iter()
            .map(|(identity, item)| {
                let outcome = merge_one(&store, &source_id, &identity, &item, &limits)?;
                Ok((identity, outcome))
            })
            .collect::<Result<Vec<_>, HarvestError>>()
    })
    .await
    .map_err(join_error)?
}

/// One item merged with its stored state (blocking).
fn merge_one(
    store: &crate::store::Store,
    source_id: &str,
    identity: &str,
    item: &FeedItem,
    limits: &FeedLimits,
) -> Result<MergeOutcome, HarvestError> {
    let local = store.feed_item(source_id, identity)?.and_then(|bytes| {
        // Only a damaged row: the incoming item then replaces it, as if new.
        read_item(&bytes, identity)
            .inspect_err(|e| tracing::warn!(source.id = %source_id, item = %identity, error = %e, "stored item state unreadable"))
            .ok()
    });
    // Merged as it will be stored and republished, so that it compares with its stored state.
    let merged = match merge(local.as_ref(), &republished(item)) {
        Merged::Unchanged => return Ok(MergeOutcome::Unchanged),
        Merged::New(m) | Merged::Changed(m) => m,
    };
    Ok(match limits.sync_within(&merged) {
        Ok(()) => MergeOutcome::Merged(Box::new(merged)),
        Err(cap) => MergeOutcome::OverCap(cap),
    })
}

fn count(applied: &crate::store::Applied, report: &mut SourceReport) {
    report.count_applied(applied);
}

/// Adds the merged item's record (or deletion) and state to `batch`; an item whose bitstream
/// cannot be had is counted as failed and its state is not saved, so the next poll retries.
async fn stage(
    p: &Poll<'_>,
    identity: &str,
    item: FeedItem,
    batch: &mut Batch,
    report: &mut SourceReport,
) -> Result<(), HarvestError> {
    let Poll { ctx, source, feed: feed_source, sets } = *p;
    let upstream = upstream_url(&source.url, identity);
    let Some(uri) = ctx.naming.resource_url(&source.id, &upstream) else {
        report.skipped += 1;
        return Ok(());
    };
    let state = item_document(&item);
    if item.is_deleted() {
        batch.stage_delete(&set_refs(sets), &uri, &ctx.stage(&source.id));
        batch.feed_item(&source.id, identity, Some(state));
        return Ok(());
    }
    let stored = match bitstream(ctx, source, feed_source, &item, &state).await {
        Ok(s) => s,
        Err(reason) => {
            tracing::warn!(source.id = %source.id, item = %identity, error = %reason, "feed item not stored");
            report.failed += 1;
            return Ok(());
        }
    };
    report.fetched += 1;
    report.bytes += stored.length;
    let origin = item.link.clone().unwrap_or_else(|| source.url.to_string());
    let modified = item.updated.or_else(|| newest_when(&item));
    let listing = Listing {
        origin: origin.clone(),
        declared: Default::default(),
        length: Some(stored.length),
        media_type: stored.media_type.clone(),
        lastmod: modified,
        via: Via { modified, hash: Default::default(), length: None, media_type: None },
        links: item.enclosure.iter().map(|e| Link::new("enclosure", e.url.clone())).collect(),
    };
    let record =
        NewRecord { uri, source: source.id.clone(), upstream: upstream.to_string(), sha256: stored.id, listing };
    batch.upsert(&set_refs(sets), record);
    batch.feed_item(&source.id, identity, Some(state));
    Ok(())
}

/// The most recent `when` of the item's history.
fn newest_when(item: &FeedItem) -> Option<W3cDateTime> {
    item.sync.as_ref().and_then(|s| s.history.iter().filter_map(|h| h.when).max())
}

/// A stored bitstream.
struct StoredBits {
    id: crate::store::BlobId,
    length: u64,
    media_type: Option<String>,
}

/// Stores the item's bitstream as the source's `feed_content` says.
async fn bitstream(
    ctx: &Ctx,
    source: &Source,
    feed_source: &FeedSource,
    item: &FeedItem,
    document: &[u8],
) -> Result<StoredBits, String> {
    let url = match feed_source.content {
        FeedContent::Item => {
            let (store, bytes) = (ctx.store.clone(), document.to_vec());
            let media_type = if item.xml.trim_start().starts_with("<item") { ITEM_TYPE_RSS } else { ITEM_TYPE_ATOM };
            let expected = Expected { md5: true, ..Expected::none() }.with_media_type(Some(media_type.into()));
            let info = tokio::task::spawn_blocking(move || store.put(&bytes[..], &expected))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
            return Ok(StoredBits { id: info.id, length: info.length, media_type: Some(media_type.into()) });
        }
        FeedContent::Enclosure => item.enclosure.as_ref().map(|e| e.url.clone()).ok_or("the item has no enclosure")?,
        FeedContent::Link => item.link.clone().ok_or("the item has no link")?,
    };
    let url = Url::parse(&url).map_err(|e| format!("{url}: {e}"))?;
    let length = match feed_source.content {
        FeedContent::Enclosure => item.enclosure.as_ref().and_then(|e| e.length).filter(|&l| l > 0),
        _ => None,
    };
    let media_type = item.enclosure.as_ref().and_then(|e| e.media_type.clone()).filter(|_| length.is_some());
    let expected = Expected { length, md5: true, ..Expected::none() }.with_media_type(media_type.clone());
    let stored = fetch_verified(&ctx.fetcher, &ctx.store, &[url], &expected, &source.settings)
        .await
        .map_err(|e| crate::error::chain(&e).to_string())?;
    Ok(StoredBits { id: stored.info.id, length: stored.info.length, media_type })
}

/// The URL a feed item is named by: the feed's URL with the item's identity as a query
/// parameter. Identities are often not URLs (`urn:uuid:…`, FeedSync ids), and two items may
/// share a link, so the link cannot be the name.
fn upstream_url(feed: &Url, identity: &str) -> Url {
    let mut u = feed.clone();
    u.set_fragment(None);
    u.query_pairs_mut().append_pair("sx-item", identity);
    u
}

/// Items held (live, or tombstones) but absent from a complete feed, with their URIs.
fn vanished_items(ctx: &Ctx, source: &Source, seen: &HashSet<String>) -> Result<Vec<(String, String)>, HarvestError> {
    let mut out = Vec::new();
    for row in ctx.store.feed_items(&source.id) {
        let (identity, _) = row?;
        if seen.contains(&identity) {
            continue;
        }
        if let Some(uri) = ctx.naming.resource_url(&source.id, &upstream_url(&source.url, &identity)) {
            out.push((identity, uri));
        }
    }
    Ok(out)
}
