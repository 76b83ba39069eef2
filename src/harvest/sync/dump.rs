//! Baseline from a Resource Dump (spec §11): the daemon's bulk load. Packages are downloaded
//! and verified by [`DumpWalker`], which hands each entry on as soon as its bitstream is
//! stored; the records go to the committer (`commit`), which applies them in batches while
//! the package is still being read, and the final batch holds the deletions
//! (what the store held that no package named) with the source's position at the dump's `at`,
//! so a crash mid-dump leaves the source not baselined and the next poll starts again
//! (re-downloading packages, but storing nothing twice).
//!
//! Any failure — a package that cannot be read, an entry that does not verify — makes the dump
//! unusable as a complete snapshot; the caller then baselines from the Resource List, which
//! skips everything the dump already stored.

use std::collections::HashSet;

use tokio::sync::mpsc;
use url::Url;

use super::baseline::{holds_none, load_held};
use crate::config::Source;
use crate::harvest::commit::{self, Msg};
use crate::harvest::ctx::{Ctx, HarvestError, join_error};
use crate::harvest::dump::{Content, DumpError, DumpItem, DumpOptions, DumpWalker, EntryError};
use crate::harvest::listed::Listed;
use crate::harvest::report::SourceReport;
use crate::model::W3cDateTime;
use crate::store::{NewRecord, SourceState};

/// Items read ahead of the committer: enough that neither side waits on the other's jitter,
/// few enough that memory holds a few hundred entries rather than a package of 50,000.
const ITEMS_AHEAD: usize = 1024;

/// One baseline from the dump at `url`; an error means "use the Resource List instead".
pub(crate) async fn baseline_from_dump(
    ctx: &Ctx,
    source: &Source,
    sets: &[String],
    mut state: SourceState,
    url: &Url,
) -> Result<SourceReport, HarvestError> {
    let id = &source.id;
    let mut report = SourceReport::new(id);
    let prefix = ctx.naming.resource_prefix(id);
    let held = load_held(&ctx.store, &prefix).await?;
    let first = held.is_empty() && holds_none(&ctx.store, &prefix).await?;
    let options = DumpOptions::new(&source.settings, Some(&source.url));
    let mut walker = DumpWalker::new(&ctx.fetcher, &ctx.store, url.clone(), &source.settings, options);
    let (tx, committer) = commit::spawn(ctx.store.clone(), ctx.stage(id), sets.to_vec());
    let mut seen = HashSet::new();
    let walked = read_packages(ctx, source, (url, &mut walker), &tx, (&mut seen, first), &mut report).await;
    if let Ok(at) = walked
        && !report.interrupted
    {
        let at = walker.root_header().and_then(|h| h.md.as_ref()).and_then(|m| m.at).or(at);
        let deletes = match source.settings.deletes {
            true => held.keys().filter(|u| !seen.contains(*u)).cloned().collect(),
            false => Vec::new(),
        };
        baselined_at(&mut state, at);
        report.listed_all = true;
        let _ = tx.send(Msg::Finish { deletes, unlisted: Vec::new(), state: Box::new(state) }).await;
    }
    drop(tx);
    // Even when the dump failed: what it stored is committed before the Resource List
    // baseline starts, which then skips it, and no two committers of a source ever overlap.
    let committed = committer.await.map_err(join_error)?;
    walked?;
    let tally = committed?;
    report.created = tally.created;
    report.updated = tally.updated;
    report.deleted = tally.deleted;
    report.staged = tally.staged;
    report.taken_down = tally.taken_down;
    report.complete = !report.interrupted;
    tracing::info!(source.id = %id, dump = %url, stored = report.fetched, "baselined from the Resource Dump");
    Ok(report)
}

/// Reads every package, sending its records to the committer as they are stored; returns the
/// earliest `at` of the packages' manifests. Stops early (with `report.interrupted`) on
/// shutdown.
async fn read_packages(
    ctx: &Ctx,
    source: &Source,
    (dump, walker): (&Url, &mut DumpWalker),
    tx: &mpsc::Sender<Msg>,
    (seen, first): (&mut HashSet<String>, bool),
    report: &mut SourceReport,
) -> Result<Option<W3cDateTime>, HarvestError> {
    let mut at: Option<W3cDateTime> = None;
    // Bounded by the walk's document limit and each document's entry limit.
    loop {
        if *ctx.shutdown.borrow() {
            report.interrupted = true;
            return Ok(at);
        }
        let (items_tx, items_rx) = mpsc::channel(ITEMS_AHEAD);
        let read = walker.next_package_streamed(items_tx);
        // Items become records for the committer as they are read, so the store applies a
        // package's first batches while its last bitstreams are still being hashed.
        let forward = async {
            // Moved in, so that returning drops it and stops the read.
            let mut items_rx = items_rx;
            while let Some(item) = items_rx.recv().await {
                let Some((record, once)) = record(ctx, source, item, seen, report)? else { continue };
                // A first baseline creates each URI's record without a look for an old one;
                // a URI two packages name is an upsert the second time.
                let msg = if first && once { Msg::Create(Box::new(record)) } else { Msg::Upsert(Box::new(record)) };
                if tx.send(msg).await.is_err() {
                    break; // the committer failed: its error is returned by the caller
                }
            }
            Ok::<_, EntryError>(())
        };
        let (read, forwarded) = tokio::join!(read, forward);
        if let Err(e) = forwarded {
            // Dropping the receiver stopped the read; its error, if any, says less.
            let package = read.ok().flatten().map_or_else(|| dump.to_string(), |p| p.url.to_string());
            return Err(dump_error(source, DumpError::Entry { url: package, source: Box::new(e) }));
        }
        let Some(package) = read.map_err(|e| dump_error(source, e))? else { return Ok(at) };
        let package_at = package.manifest.md.as_ref().and_then(|m| m.at);
        at = match (at, package_at) {
            (Some(a), Some(p)) => Some(a.min(p)),
            (a, p) => a.or(p),
        };
    }
}

/// The position after a dump read in full: changes are followed from its `at`.
fn baselined_at(state: &mut SourceState, at: Option<W3cDateTime>) {
    state.baselined = true;
    state.changes_through = at;
    state.change_list = None;
    state.change_dump_package = None;
    state.change_list_position = None;
    state.last_change = None;
    state.resource_list_at = at.or(state.resource_list_at);
}

fn dump_error(source: &Source, e: DumpError) -> HarvestError {
    HarvestError::Dump { source_id: source.id.clone(), source: Box::new(e) }
}

/// The record of one package item, and whether this is the first item of its URI; `None` for
/// an entry outside the source's naming. Any failed entry fails the dump.
fn record(
    ctx: &Ctx,
    source: &Source,
    item: DumpItem,
    seen: &mut HashSet<String>,
    report: &mut SourceReport,
) -> Result<Option<(NewRecord, bool)>, EntryError> {
    let (url, blob) = match item.outcome {
        Ok(Content::Stored { url, blob }) => (url, blob),
        Ok(Content::Deleted { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some(uri) = ctx.naming.resource_url(&source.id, &url) else {
        report.skipped += 1;
        return Ok(None);
    };
    let once = seen.insert(uri.clone());
    report.fetched += 1;
    report.bytes += blob.length;
    Ok(Some((Listed::new(item.entry, url, uri).into_record(&source.id, blob.id), once)))
}
