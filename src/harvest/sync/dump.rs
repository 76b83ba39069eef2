//! Baseline from a Resource Dump (spec §11): the daemon's bulk load. Packages are downloaded
//! and verified by [`DumpWalker`]; each package's records and events are one store batch, and
//! the final batch holds the deletions (what the store held that no package named) with the
//! source's position at the dump's `at`, so a crash mid-dump leaves the source not baselined
//! and the next poll starts again (re-downloading packages, but storing nothing twice).
//!
//! Any failure — a package that cannot be read, an entry that does not verify — makes the dump
//! unusable as a complete snapshot; the caller then baselines from the Resource List, which
//! skips everything the dump already stored.

use std::collections::HashSet;

use url::Url;

use super::baseline::load_held;
use crate::config::Source;
use crate::harvest::commit::apply_blocking;
use crate::harvest::ctx::{Ctx, HarvestError};
use crate::harvest::dump::{Content, DumpError, DumpOptions, DumpWalker, Package};
use crate::harvest::listed::Listed;
use crate::harvest::report::SourceReport;
use crate::model::W3cDateTime;
use crate::store::{Batch, SourceState};

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
    let mut seen = HashSet::new();
    let mut at: Option<W3cDateTime> = None;
    // Bounded by the walk's document limit and each document's entry limit.
    loop {
        if *ctx.shutdown.borrow() {
            report.interrupted = true;
            return Ok(report);
        }
        let package = walker.next_package().await.map_err(|e| dump_error(source, e))?;
        let Some(package) = package else { break };
        let package_at = package.manifest.md.as_ref().and_then(|m| m.at);
        at = match (at, package_at) {
            (Some(a), Some(p)) => Some(a.min(p)),
            (a, p) => a.or(p),
        };
        let batch = records(ctx, source, sets, package, &mut seen, &mut report)?;
        report.count_applied(&apply_blocking(&ctx.store, batch).await?);
    }
    at = walker.root_header().and_then(|h| h.md.as_ref()).and_then(|m| m.at).or(at);
    let sets_ref: Vec<&str> = sets.iter().map(String::as_str).collect();
    let mut last = Batch::new();
    if source.settings.deletes {
        for uri in held.keys().filter(|u| !seen.contains(*u)) {
            last.delete(&sets_ref, uri);
        }
    }
    state.baselined = true;
    state.changes_through = at;
    state.change_list = None;
    state.change_dump_package = None;
    state.change_list_position = None;
    state.last_change = None;
    state.resource_list_at = at.or(state.resource_list_at);
    last.source_state(id, state);
    report.count_applied(&apply_blocking(&ctx.store, last).await?);
    report.complete = true;
    tracing::info!(source.id = %id, dump = %url, stored = report.fetched, "baselined from the Resource Dump");
    Ok(report)
}

fn dump_error(source: &Source, e: DumpError) -> HarvestError {
    HarvestError::Dump { source_id: source.id.clone(), source: Box::new(e) }
}

/// One package's records; any failed entry fails the dump.
fn records(
    ctx: &Ctx,
    source: &Source,
    sets: &[String],
    package: Package,
    seen: &mut HashSet<String>,
    report: &mut SourceReport,
) -> Result<Batch, HarvestError> {
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    let mut batch = Batch::new();
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
        batch.upsert(&sets, Listed::new(item.entry, url, uri).into_record(&source.id, blob.id));
    }
    Ok(batch)
}
