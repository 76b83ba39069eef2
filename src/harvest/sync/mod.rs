//! The sync strategies, and the poll that chooses among them.
//!
//! A poll is a [`Plan`] (`plan`: which steps, in which order, and how the rest changes when
//! a step reports back — pure, unit-tested without I/O) carried out by [`synchronize`], a
//! short executor. The steps are the strategies:
//! - `baseline`: walk the Resource List, fetch what is not held, delete what a complete list
//!   no longer names (per-entry decisions in `plan::entry`);
//! - `dump`: the same from a Resource Dump;
//! - `incremental`: follow the Change Lists (the position rules, pure, in `changes`);
//! - `change_dump`: catch up from a Change Dump;
//! - `retry`: fetch again the resources recorded as failing;
//! - [`audit`]: not a step of a poll, but the same comparison of a Source with the store,
//!   reported instead of applied.
//!
//! The capabilities found by discovery are kept in the source's state, so a poll costs the
//! conditional GETs of the documents it follows, not a rediscovery.

pub mod audit;
mod baseline;
mod change_dump;
mod changes;
mod dump;
mod feed;
mod incremental;
mod oai;
mod plan;
mod retry;

use self::baseline::baseline;
use self::change_dump::{ChangeDumpError, follow_change_dump};
use self::incremental::{Outcome as IncrementalOutcome, incremental};
use self::plan::{Outcome, Plan, Step};
use self::retry::retry_failures;
use crate::config::Source;
use crate::harvest::ctx::{Ctx, HarvestError, load_state, save_state};
use crate::harvest::discover::discover_keeping;
use crate::harvest::document::FetchedDoc;
use crate::harvest::report::SourceReport;
use crate::store::{KnownCapabilities, NotificationChannel, SourceState};

pub(crate) use self::incremental::apply_pushed;

/// One poll of one source: the steps [`Plan`] decides, carried out in order.
pub(crate) async fn synchronize(
    ctx: &Ctx,
    source: &Source,
    sets: &[String],
    mut state: SourceState,
) -> Result<SourceReport, HarvestError> {
    if let Some(feed) = &source.feed {
        return feed::harvest_feed(ctx, source, feed, sets, state).await;
    }
    if let Some(oai) = &source.oai {
        return oai::harvest_oai(ctx, source, oai, sets, state).await;
    }
    // `given`: the list the source's URL named, when discovery just fetched it; the first
    // baseline walks it instead of fetching it again.
    let (caps, mut given) = capabilities(ctx, source, &mut state).await?;
    let mut plan = Plan::new(&caps, state.baselined, source.settings.dumps);
    tracing::debug!(source.id = %source.id, steps = ?plan.remaining().collect::<Vec<_>>(), "poll planned");
    let mut report = SourceReport::new(&source.id);
    let exec = Executor { ctx, source, sets, caps: &caps };
    // Bounded: a plan holds a handful of steps and adds steps back at most once.
    while let Some(step) = plan.next_step() {
        let (outcome, part) = match exec.run(&step, &mut state, &mut given).await {
            Ok(done) => done,
            // What earlier steps applied is committed: a poll that fails part-way reports it
            // with the error (a baseline applied before the Change List failed is no "fetched 0").
            Err(e) if report.progressed() => {
                report.error = Some(crate::error::chain(&e).to_string());
                return Ok(report);
            }
            Err(e) => return Err(e),
        };
        if let Some(part) = part {
            merge(&mut report, part);
        }
        plan.after(&step, &outcome);
    }
    Ok(report)
}

/// Carries out one [`Step`] at a time; the decisions are the plan's.
struct Executor<'a> {
    ctx: &'a Ctx,
    source: &'a Source,
    sets: &'a [String],
    caps: &'a KnownCapabilities,
}

impl Executor<'_> {
    /// Runs `step`; `state` is the source's state as the step leaves it.
    async fn run(
        &self,
        step: &Step,
        state: &mut SourceState,
        given: &mut Option<FetchedDoc>,
    ) -> Result<(Outcome, Option<SourceReport>), HarvestError> {
        let (ctx, source, sets) = (self.ctx, self.source, self.sets);
        let (outcome, report) = match step {
            Step::RetryFailures => (Outcome::Done, retry_failures(ctx, source, sets).await?),
            Step::BaselineFromDump(url) => {
                self.read_list_in_full(state);
                match self::dump::baseline_from_dump(ctx, source, sets, state.clone(), url).await {
                    Ok(r) => (baseline_outcome(&r), r),
                    Err(e) => {
                        tracing::warn!(source.id = %source.id, dump = %url, error = %crate::error::chain(&e),
                            "the Resource Dump failed; baselining from the Resource List instead");
                        return Ok((Outcome::Unusable, None));
                    }
                }
            }
            Step::Baseline { initial } => {
                if *initial {
                    self.read_list_in_full(state);
                }
                let r = baseline(ctx, source, sets, state.clone(), given.take()).await?;
                (baseline_outcome(&r), r)
            }
            Step::ForgetChanges => {
                forget_changes(state);
                save_state(ctx, &source.id, state.clone()).await?;
                return Ok((Outcome::Done, None));
            }
            Step::FollowChangeDump(url) => match follow_change_dump(ctx, source, sets, state.clone(), url).await {
                Ok(r) => (Outcome::Done, r),
                Err(ChangeDumpError::Harvest(e)) => return Err(e),
                Err(e) => {
                    tracing::warn!(source.id = %source.id, dump = %url, error = %crate::error::chain(&e),
                        "the Change Dump cannot be followed; falling back to the lists");
                    return Ok((Outcome::Unusable, None));
                }
            },
            Step::FollowChangeList(url) => match incremental(ctx, source, sets, state.clone(), url).await {
                Ok(IncrementalOutcome::Done(r)) => (Outcome::Done, r),
                Ok(IncrementalOutcome::Rebaseline(why)) => {
                    tracing::warn!(source.id = %source.id, reason = %why, "re-baselining: the Change List cannot be continued");
                    return Ok((Outcome::Rebaseline, None));
                }
                Err(e) => {
                    // The Change List may have moved: discover again next time.
                    state.capabilities = None;
                    save_state(ctx, &source.id, state.clone()).await?;
                    return Err(e);
                }
            },
        };
        *state = load_state(ctx, &source.id).await?;
        let incomplete = is_baseline(step) && !state.baselined;
        Ok((if incomplete { Outcome::Incomplete } else { outcome }, Some(report)))
    }

    /// A 304 would end a baseline without reading the list, which starts the position changes
    /// are followed from: the Resource List's validators are dropped first.
    fn read_list_in_full(&self, state: &mut SourceState) {
        if let Some(rl) = &self.caps.resource_list {
            state.documents.remove(rl);
        }
    }
}

fn is_baseline(step: &Step) -> bool {
    matches!(step, Step::BaselineFromDump(_) | Step::Baseline { .. })
}

/// A baseline counts as done when it read the whole list, stopped for nothing and failed at
/// nothing that ends a pass.
fn baseline_outcome(r: &SourceReport) -> Outcome {
    if r.complete && !r.interrupted && r.error.is_none() { Outcome::Done } else { Outcome::Incomplete }
}

/// Clears the incremental position so the next poll baselines.
fn forget_changes(state: &mut SourceState) {
    state.baselined = false;
    state.change_list = None;
    state.change_list_position = None;
    state.last_change = None;
    state.changes_through = None;
    state.change_dump_package = None;
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
    crate::harvest::moves::note(&mut state.status, &source.id, &source.url, found.moved.as_ref());
    let c = found.capabilities;
    let caps = KnownCapabilities {
        resource_list: c.resourcelist.map(String::from),
        change_list: c.changelist.map(String::from),
        resource_dump: c.resourcedump.map(String::from),
        change_dump: c.changedump.map(String::from),
        change_notification: c
            .change_notification
            .map(|ch| NotificationChannel { topic: ch.topic.into(), hub: ch.hub.into() }),
    };
    if caps.resource_list.is_some() && state.resource_list != caps.resource_list {
        state.resource_list.clone_from(&caps.resource_list);
    }
    state.capabilities = Some(caps.clone());
    save_state(ctx, &source.id, state.clone()).await?;
    Ok((caps, given))
}

/// Whether the steps so far changed the store or fetched anything.
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
