//! Incremental synchronization from a Change Dump (spec §13): the bulk counterpart of
//! `incremental`. A Source that publishes its changes as ZIP packages lets Tributary catch up
//! on a large backlog without one GET per changed resource; the packages are downloaded,
//! unpacked and verified by the shared [`DumpWalker`] (same zip-slip, symlink and bomb rules
//! as the Resource Dump), and this module only decides which changes are new and commits them.
//!
//! Position semantics are those of the Change List (see `changes`): `change_list` names the
//! last package applied (its URL) and `change_list_position` how many of its manifest entries
//! are processed; `changes_through` is the Source datetime up to which everything is
//! incorporated. A package is one store batch — its records, change events and the position
//! after it — so a SIGKILL leaves the position at the last whole package. Packages whose
//! `until` is before `changes_through` are passed over without being downloaded; in other
//! packages a change is new when its `datetime` is at or after `changes_through` (as in a
//! Change List not read before; the same second counts, see `changes::is_new`), and the
//! remembered package skips its processed entries by count.
//!
//! A Change Dump cannot be followed without a datetime to place it against the position, nor
//! past a package that fails (its changes would be lost): both come back as an error and the
//! caller falls back to the Change List, which re-baselines if it cannot continue either.

use url::Url;

use super::plan::{PackageEntry, package_changes};
use crate::config::Source;
use crate::harvest::commit::apply_blocking;
use crate::harvest::ctx::{Ctx, HarvestError};
use crate::harvest::dump::{Content, DumpError, DumpItem, DumpOptions, DumpWalker, Package};
use crate::harvest::listed::Listed;
use crate::harvest::report::SourceReport;
use crate::model::{Change, W3cDateTime};
use crate::store::{Batch, DocumentValidators, SourceState};

/// Why the Change Dump could not be followed (the caller logs it and uses the Change List).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ChangeDumpError {
    /// No datetime to compare the Source's changes with: nothing says which are new.
    #[error("the position has no datetime to place the Change Dump against")]
    Undated,
    /// The Source's packages start after the position: changes in between are missing.
    #[error("the Change Dump starts at {from}, after the changes processed up to {through}")]
    Gap { from: W3cDateTime, through: W3cDateTime },
    /// A package or one of its entries failed: the changes after it cannot be applied in order.
    #[error("a Change Dump package failed")]
    Package(#[from] DumpError),
    /// The store or the runtime failed (not a reason to use the Change List: the poll fails).
    #[error(transparent)]
    Harvest(#[from] HarvestError),
}

/// One poll of the Change Dump at `url`; see the module docs.
pub(crate) async fn follow_change_dump(
    ctx: &Ctx,
    source: &Source,
    sets: &[String],
    mut state: SourceState,
    url: &Url,
) -> Result<SourceReport, ChangeDumpError> {
    let id = &source.id;
    let mut report = SourceReport::new(id);
    let Some(start) = state.changes_through else { return Err(ChangeDumpError::Undated) };
    let validators = state.documents.get(url.as_str()).map(crate::fetch::Validators::from);
    let options = DumpOptions::new(&source.settings, Some(&source.url));
    let mut walker =
        DumpWalker::new(&ctx.fetcher, &ctx.store, url.clone(), &source.settings, options).conditional(validators);
    // Bounded by the walk's document limit and each document's entry limit.
    loop {
        if *ctx.shutdown.borrow() {
            report.interrupted = true;
            return Ok(report);
        }
        let through = state.changes_through.unwrap_or(start);
        // A package ending before the position is done, and so is the one applied last; another
        // ending in the position's second may hold changes of that second not seen yet.
        let last = state.change_dump_package.clone();
        let applied = |e: &crate::model::Entry| url.join(e.loc.trim()).ok().map(String::from) == last;
        let wanted = |e: &crate::model::Entry| match e.md.as_ref().and_then(|m| m.until) {
            None => true,
            Some(u) => u > through || (u == through && !applied(e)),
        };
        let package = walker.next_package_where(wanted).await?;
        let Some(package) = package else { break };
        let md = package.manifest.md.clone().unwrap_or_default();
        if let Some(from) = md.from.filter(|f| *f > through) {
            return Err(ChangeDumpError::Gap { from, through });
        }
        let batch = changes(ctx, source, sets, package, &mut state, &mut report)?;
        report.count_applied(&apply_blocking(&ctx.store, batch).await?);
    }
    if walker.not_modified() {
        report.not_modified = true;
    } else {
        let root = walker.root_header().and_then(|h| h.md.as_ref());
        if let Some(from) = root.and_then(|m| m.from).filter(|f| *f > start) {
            // Checked after the walk too: a dump with no new package has no manifest to check.
            return Err(ChangeDumpError::Gap { from, through: start });
        }
        // The dump read to its end: the next poll may ask for it conditionally.
        if let Some(v) = walker.root_validators() {
            let dv = DocumentValidators::from(v);
            state.documents.insert(url.to_string(), dv);
            let mut last = Batch::new();
            last.source_state(id, state);
            apply_blocking(&ctx.store, last).await?;
        }
    }
    report.complete = true;
    tracing::info!(source.id = %id, dump = %url, created = report.created, updated = report.updated,
        deleted = report.deleted, "followed the Change Dump");
    Ok(report)
}

/// How the plan sees one manifest entry.
fn entry(item: &DumpItem) -> PackageEntry<'_> {
    let url = match &item.outcome {
        Ok(Content::Stored { url, .. } | Content::Deleted { url }) => Some(url.as_str()),
        Err(_) => None,
    };
    PackageEntry { datetime: item.datetime(), url }
}

/// One package's new changes and the position after it, as one batch. Within the package
/// only each URI's last change is applied (the manifest is in forward chronological order,
/// so that is the state the package leaves it in); every entry must have verified.
/// Which entries those are is [`package_changes`]'s decision.
fn changes(
    ctx: &Ctx,
    source: &Source,
    sets: &[String],
    mut package: Package,
    state: &mut SourceState,
    report: &mut SourceReport,
) -> Result<Batch, ChangeDumpError> {
    let remembered = state.change_list.as_deref() == Some(package.url.as_str());
    let skip = if remembered { state.change_list_position.unwrap_or(0) } else { 0 };
    let through = state.changes_through;
    let entries: Vec<PackageEntry<'_>> = package.items.iter().map(entry).collect();
    let plan = match package_changes(&entries, skip, remembered, through) {
        Ok(plan) => plan,
        Err(i) => {
            drop(entries);
            let url = package.url.to_string();
            return match package.items.swap_remove(i).outcome {
                Err(source) => Err(DumpError::Entry { url, source: Box::new(source) }.into()),
                Ok(_) => unreachable!("the plan refuses a package only for an entry that failed"),
            };
        }
    };
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    let mut batch = Batch::new();
    for item in plan.apply.iter().map(|&i| &package.items[i]) {
        let (url, blob) = match &item.outcome {
            Ok(Content::Stored { url, blob }) => (url, Some(blob)),
            Ok(Content::Deleted { url }) => (url, None),
            Err(_) => continue, // never planned
        };
        let Some(uri) = ctx.naming.resource_url(&source.id, url) else {
            report.skipped += 1;
            continue;
        };
        match (item.change(), blob) {
            (Some(Change::Deleted), _) | (_, None) => {
                if source.settings.deletes {
                    batch.stage_delete(&sets, &uri, &ctx.stage(&source.id));
                }
            }
            (_, Some(blob)) => {
                report.fetched += 1;
                report.bytes += blob.length;
                let listed = Listed::new(item.entry.clone(), url.clone(), uri);
                batch.upsert(&sets, listed.into_record(&source.id, blob.id));
            }
        }
    }
    let mut newest = plan.newest;
    let until = package.manifest.md.as_ref().and_then(|m| m.until);
    if let Some(u) = until {
        newest = Some(newest.map_or(u, |t| t.max(u)));
    }
    state.change_list = Some(package.url.to_string());
    state.change_dump_package = Some(package.url.to_string());
    state.change_list_position = Some(package.items.len() as u64);
    state.last_change = package.items.last().and_then(|i| i.datetime());
    state.changes_through = newest;
    batch.source_state(&source.id, state.clone());
    Ok(batch)
}
