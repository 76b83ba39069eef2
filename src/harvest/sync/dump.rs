//! Baseline from a Resource Dump (spec §11): the daemon's bulk load. Packages are downloaded
//! and verified by [`DumpWalker`]; their records go to the committer (`commit`), which applies
//! them in batches while the next package is read, and the final batch holds the deletions
//! (what the store held that no package named) with the source's position at the dump's `at`,
//! so a crash mid-dump leaves the source not baselined and the next poll starts again
//! (re-downloading packages, but storing nothing twice).
//!
//! Any failure — a package that cannot be read, an entry that does not verify — makes the dump
//! unusable as a complete snapshot; the caller then baselines from the Resource List, which
//! skips everything the dump already stored.

use std::collections::HashSet;

use url::Url;

use super::baseline::load_held;
use crate::config::Source;
use crate::harvest::commit::{self, Msg};
use crate::harvest::ctx::{Ctx, HarvestError, join_error};
use crate::harvest::dump::{Content, DumpError, DumpOptions, DumpWalker, Package};
use crate::harvest::listed::Listed;
use crate::harvest::report::SourceReport;
use crate::model::W3cDateTime;
use crate::store::{NewRecord, SourceState};

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
    let held = load_held(&ctx.store, &ctx.naming.resource_prefix(id)).await?;
    let options = DumpOptions::new(&source.settings, Some(&source.url));
    let mut walker = DumpWalker::new(&ctx.fetcher, &ctx.store, url.clone(), &source.settings, options);
    let (tx, committer) = commit::spawn(ctx.store.clone(), id.clone(), sets.to_vec());
    let mut seen = HashSet::new();
    let mut at: Option<W3cDateTime> = None;
    // Bounded by the walk's document limit and each document's entry limit.
    loop {
        if *ctx.shutdown.borrow() {
            report.interrupted = true;
            break;
        }
        // The committer applies one package's records while the next package is read.
        let package = walker.next_package().await.map_err(|e| dump_error(source, e))?;
        let Some(package) = package else { break };
        let package_at = package.manifest.md.as_ref().and_then(|m| m.at);
        at = match (at, package_at) {
            (Some(a), Some(p)) => Some(a.min(p)),
            (a, p) => a.or(p),
        };
        for record in records(ctx, source, package, &mut seen, &mut report)? {
            if tx.send(Msg::Upsert(Box::new(record))).await.is_err() {
                break; // the committer failed: its error is returned below
            }
        }
    }
    if !report.interrupted {
        at = walker.root_header().and_then(|h| h.md.as_ref()).and_then(|m| m.at).or(at);
        let deletes = match source.settings.deletes {
            true => held.keys().filter(|u| !seen.contains(*u)).cloned().collect(),
            false => Vec::new(),
        };
        baselined_at(&mut state, at);
        let _ = tx.send(Msg::Finish { deletes, unlisted: Vec::new(), state: Box::new(state) }).await;
    }
    drop(tx);
    let tally = committer.await.map_err(join_error)??;
    report.created = tally.created;
    report.updated = tally.updated;
    report.deleted = tally.deleted;
    report.complete = !report.interrupted;
    tracing::info!(source.id = %id, dump = %url, stored = report.fetched, "baselined from the Resource Dump");
    Ok(report)
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

/// One package's records; any failed entry fails the dump.
fn records(
    ctx: &Ctx,
    source: &Source,
    package: Package,
    seen: &mut HashSet<String>,
    report: &mut SourceReport,
) -> Result<Vec<NewRecord>, HarvestError> {
    let mut out = Vec::with_capacity(package.items.len());
    for item in package.items {
        let (url, blob) = match item.outcome {
            Ok(Content::Stored { url, blob }) => (url, blob),
            Ok(Content::Deleted { .. }) => continue,
            Err(e) => {
                return Err(dump_error(source, DumpError::Entry { url: package.url.to_string(), source: Box::new(e) }));
            }
        };
        let Some(uri) = ctx.naming.resource_url(&source.id, &url) else {
            report.skipped += 1;
            continue;
        };
        seen.insert(uri.clone());
        report.fetched += 1;
        report.bytes += blob.length;
        out.push(Listed::new(item.entry, url, uri).into_record(&source.id, blob.id));
    }
    Ok(out)
}
