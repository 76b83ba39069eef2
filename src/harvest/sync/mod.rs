//! Which way one poll synchronizes a source: a Source that offers only a Resource List is
//! diffed against the store on every poll (`baseline`; the first time from its Resource Dump
//! when it offers one and `dumps` is on), or followed through its Change Dump when it offers
//! one (falling back to the diff); one that offers a Change List is
//! baselined once — from its Resource Dump when it has one and the source's `dumps` setting
//! is on, else from its Resource List — and then followed by its changes: first its Change
//! Dump packages when it offers them and `dumps` is on (`change_dump_sync`, a bulk catch-up),
//! then its Change List for the tail not packaged yet and as the fallback when the Change Dump
//! cannot be followed (`incremental`), re-baselining when the changes no longer reach back to
//! where Tributary stopped.
//!
//! The capabilities found by discovery are kept in the source's state, so a poll costs the
//! conditional GETs of the documents it follows, not a rediscovery.

pub mod audit;
mod baseline;
mod change_dump;
mod changes;
mod dump;
mod incremental;
mod retry;

use url::Url;

use self::baseline::baseline;
use self::change_dump::{ChangeDumpError, follow_change_dump};
use self::incremental::{Outcome, incremental};
use self::retry::retry_failures;
use crate::config::Source;
use crate::harvest::ctx::{Ctx, HarvestError, load_state, save_state};
use crate::harvest::discover::discover_keeping;
use crate::harvest::document::FetchedDoc;
use crate::harvest::report::SourceReport;
use crate::store::{KnownCapabilities, SourceState};

/// One poll of one source; see the module docs.
pub(crate) async fn synchronize(
    ctx: &Ctx,
    source: &Source,
    sets: &[String],
    mut state: SourceState,
) -> Result<SourceReport, HarvestError> {
    // `given`: the list the source's URL named, when discovery just fetched it; the baseline
    // walks it instead of fetching it again.
    let (caps, mut given) = capabilities(ctx, source, &mut state).await?;
    let Some(changes) = caps.change_list.as_deref().and_then(|u| Url::parse(u).ok()) else {
        if !state.baselined {
            return initial(ctx, source, sets, state, &caps, given).await;
        }
        // No Change List: follow the Change Dump when there is one, else (or when it cannot
        // be followed) diff the Resource List, as on every poll of a list-only Source.
        if let Some(dump) = change_dump_url(source, &caps) {
            match follow_change_dump(ctx, source, sets, state.clone(), &dump).await {
                Ok(r) => return Ok(r),
                Err(ChangeDumpError::Harvest(e)) => return Err(e),
                Err(e) => {
                    tracing::warn!(
                        source.id = %source.id, dump = %dump, error = %crate::error::chain(&e),
                        "the Change Dump cannot be followed; re-baselining from the Resource List"
                    );
                    // The diff levels the store; the position restarts at the list's `at`.
                    forget_changes(&mut state);
                }
            }
        }
        return baseline(ctx, source, sets, state, given).await;
    };
    let mut report = SourceReport::new(&source.id);
    // Failed changes first (the Change List will not name them again); an initial baseline
    // reads every resource anyway.
    if state.baselined {
        merge(&mut report, retry_failures(ctx, source, sets).await?);
    }
    // At most: a baseline, a poll that finds a gap, a re-baseline and a poll.
    for _ in 0..2 {
        if !state.baselined {
            let b = initial(ctx, source, sets, state, &caps, given.take()).await?;
            let done = b.complete && !b.interrupted && b.error.is_none();
            merge(&mut report, b);
            state = load_state(ctx, &source.id).await?;
            if !done || !state.baselined {
                return Ok(report);
            }
        }
        if let Some(dump) = change_dump_url(source, &caps) {
            // The Change Dump catches up in bulk; the Change List then brings the tail that is
            // not packaged yet (resuming by datetime after the last package applied).
            match follow_change_dump(ctx, source, sets, state.clone(), &dump).await {
                Ok(r) => {
                    merge(&mut report, r);
                    state = load_state(ctx, &source.id).await?;
                }
                Err(ChangeDumpError::Harvest(e)) => return Err(e),
                Err(e) => tracing::warn!(
                    source.id = %source.id, dump = %dump, error = %crate::error::chain(&e),
                    "the Change Dump cannot be followed; following the Change List instead"
                ),
            }
        }
        match incremental(ctx, source, sets, state.clone(), &changes).await {
            Ok(Outcome::Done(r)) => {
                merge(&mut report, r);
                return Ok(report);
            }
            Ok(Outcome::Rebaseline(why)) => {
                tracing::warn!(source.id = %source.id, reason = %why, "re-baselining: the Change List cannot be continued");
                forget_changes(&mut state);
                save_state(ctx, &source.id, state.clone()).await?;
            }
            Err(e) => {
                // The Change List may have moved: discover again next time.
                state.capabilities = None;
                save_state(ctx, &source.id, state).await?;
                return Err(e);
            }
        }
    }
    Ok(report)
}

/// The Change Dump to follow, when the Source offers one and the source uses dumps.
fn change_dump_url(source: &Source, caps: &KnownCapabilities) -> Option<Url> {
    caps.change_dump.as_deref().filter(|_| source.settings.dumps).and_then(|u| Url::parse(u).ok())
}

/// The baseline of a Source that offers changes: the position starts at its `at`.
async fn initial(
    ctx: &Ctx,
    source: &Source,
    sets: &[String],
    mut state: SourceState,
    caps: &KnownCapabilities,
    given: Option<FetchedDoc>,
) -> Result<SourceReport, HarvestError> {
    if let Some(rl) = &caps.resource_list {
        // A 304 would end the baseline without reading the list: it must be read in full.
        state.documents.remove(rl);
    }
    if source.settings.dumps
        && let Some(dump) = caps.resource_dump.as_deref().and_then(|u| Url::parse(u).ok())
    {
        match self::dump::baseline_from_dump(ctx, source, sets, state.clone(), &dump).await {
            Ok(r) => return Ok(r),
            Err(e) => tracing::warn!(
                source.id = %source.id, dump = %dump, error = %crate::error::chain(&e),
                "the Resource Dump failed; baselining from the Resource List instead"
            ),
        }
    }
    baseline(ctx, source, sets, state, given).await
}

/// Clears the incremental position so the next poll baselines.
fn forget_changes(state: &mut SourceState) {
    state.baselined = false;
    state.change_list = None;
    state.change_list_position = None;
    state.last_change = None;
    state.changes_through = None;
    state.documents.clear();
}

/// What discovery found, from the state or discovered now (and saved); when discovered now,
/// also the list document the source's URL named, if discovery fetched one.
async fn capabilities(
    ctx: &Ctx,
    source: &Source,
    state: &mut SourceState,
) -> Result<(KnownCapabilities, Option<FetchedDoc>), HarvestError> {
    if let Some(c) = &state.capabilities {
        return Ok((c.clone(), None));
    }
    let (found, given) =
        discover_keeping(&ctx.fetcher, &source.url, source.capability_list.as_ref(), &source.settings).await?;
    let c = found.capabilities;
    let caps = KnownCapabilities {
        resource_list: c.resourcelist.map(String::from),
        change_list: c.changelist.map(String::from),
        resource_dump: c.resourcedump.map(String::from),
        change_dump: c.changedump.map(String::from),
    };
    if caps.resource_list.is_some() && state.resource_list != caps.resource_list {
        state.resource_list.clone_from(&caps.resource_list);
    }
    state.capabilities = Some(caps.clone());
    save_state(ctx, &source.id, state.clone()).await?;
    Ok((caps, given))
}

/// Adds a later part of a poll to its report.
fn merge(into: &mut SourceReport, r: SourceReport) {
    into.fetched += r.fetched;
    into.unchanged += r.unchanged;
    into.failed += r.failed;
    into.skipped += r.skipped;
    into.created += r.created;
    into.updated += r.updated;
    into.deleted += r.deleted;
    into.bytes += r.bytes;
    into.complete = r.complete;
    into.not_modified = r.not_modified;
    into.interrupted |= r.interrupted;
    into.error = r.error.or(into.error.take());
}
