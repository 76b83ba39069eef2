//! Retrying the resources recorded as failing, for a source that follows a Change List.
//!
//! A Change List names a change once. When its resource could not be fetched or verified, the
//! poll records the failure with what the change listed ([`crate::store::Failure`]) and moves
//! on, so one broken resource never holds the source's position back; this module is what
//! keeps that failure from being the last word. Each poll first retries every recorded failure
//! of the source — as a list-only source's poll does by reading its Resource List again — from
//! the stored listing: fetched and verified as in a baseline, stored and cleared when it
//! verifies, counted on when it fails again. It runs before the new changes, which are later
//! and therefore win.
//!
//! Depends on the fetcher and the store; never on the publisher.

use std::collections::BinaryHeap;
use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::config::Source;
use crate::harvest::commit::apply_blocking;
use crate::harvest::ctx::{Ctx, HarvestError, closed, join_error};
use crate::harvest::listed::Listed;
use crate::harvest::report::{ResourceOutcome, SourceReport};
use crate::harvest::resource::{self, ResourceError};
use crate::store::{Batch, Failure, StoreError};

/// Failures retried in one poll, those that failed longest ago first; the rest wait for the
/// next (each is one fetch, and a source with many broken resources should not turn every
/// poll into a second baseline).
pub(crate) const MAX_PER_POLL: usize = 1000;

/// Retries the source's recorded failures; see the module docs.
pub(crate) async fn retry_failures(ctx: &Ctx, source: &Source, sets: &[String]) -> Result<SourceReport, HarvestError> {
    let mut report = SourceReport::new(&source.id);
    let failures = load(ctx, &source.id).await?;
    if failures.is_empty() || *ctx.shutdown.borrow() {
        return Ok(report);
    }
    tracing::info!(source.id = %source.id, resources = failures.len(), "retrying resources that failed before");
    let mut batch = Batch::new();
    let mut tasks = JoinSet::new();
    let sem = Arc::new(Semaphore::new((source.settings.concurrency.get() as usize).clamp(1, 256)));
    for f in failures {
        let (uri, upstream) = (f.uri.clone(), f.upstream.clone());
        let Some(listed) = Listed::from_failure(f) else {
            tracing::warn!(source.id = %source.id, resource.uri = %upstream, "dropping a failure whose URL no longer parses");
            batch.clear_failure(&source.id, &uri);
            continue;
        };
        let permit = sem.clone().acquire_owned().await.map_err(closed)?;
        let (fetcher, store, settings) = (ctx.fetcher.clone(), ctx.store.clone(), source.settings.clone());
        tasks.spawn(crate::fetch::inherit(async move {
            let _permit = permit;
            let (urls, expected) = (listed.urls(), listed.expected());
            let r = Box::pin(resource::fetch_verified(&fetcher, &store, &urls, &expected, &settings)).await;
            (listed, r)
        }));
    }
    // Bounded: one result per spawned task.
    while let Some(done) = tasks.join_next().await {
        let (listed, r) = done.map_err(join_error)?;
        settle(ctx, source, &mut report, &mut batch, sets, listed, r)?;
    }
    let applied = apply_blocking(&ctx.store, batch).await?;
    report.count_applied(&applied);
    report.complete = true;
    Ok(report)
}

/// Adds one retry's outcome to the batch: the record and the end of its failure, or the
/// failure counted on.
fn settle(
    ctx: &Ctx,
    source: &Source,
    report: &mut SourceReport,
    batch: &mut Batch,
    sets: &[String],
    listed: Listed,
    r: Result<resource::Stored, ResourceError>,
) -> Result<(), HarvestError> {
    let id = &source.id;
    match r {
        Ok(stored) => {
            report.fetched += 1;
            report.bytes += stored.bytes;
            ctx.progress.resource(id, ResourceOutcome::Fetched, stored.bytes);
            let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
            batch.clear_failure(id, &listed.uri);
            batch.upsert(&sets, listed.into_record(id, stored.info.id));
        }
        Err(ResourceError::Store(e)) => return Err(HarvestError::Store(e)),
        Err(e) => {
            tracing::warn!(source.id = %id, resource.uri = %listed.loc, error = %crate::error::chain(&e), "retry failed");
            report.failed += 1;
            ctx.progress.resource(id, ResourceOutcome::Failed, 0);
            batch.fail(listed.into_failure(id, crate::error::chain(&e).to_string()));
        }
    }
    Ok(())
}

/// The [`MAX_PER_POLL`] failures that failed longest ago, so every failure gets its turn
/// (a retried one goes to the back); memory stays bounded however many there are.
async fn load(ctx: &Ctx, source: &str) -> Result<Vec<Failure>, HarvestError> {
    let (store, source) = (ctx.store.clone(), source.to_owned());
    let failures = tokio::task::spawn_blocking(move || {
        let mut oldest: BinaryHeap<ByLastFailed> = BinaryHeap::with_capacity(MAX_PER_POLL + 1);
        for f in store.failures(&source) {
            oldest.push(ByLastFailed(f?));
            if oldest.len() > MAX_PER_POLL {
                oldest.pop();
            }
        }
        Ok::<_, StoreError>(oldest.into_sorted_vec().into_iter().map(|f| f.0).collect::<Vec<_>>())
    })
    .await
    .map_err(join_error)??;
    Ok(failures)
}

/// A failure ordered by when it last failed (the heap's top is the most recent).
struct ByLastFailed(Failure);

impl PartialEq for ByLastFailed {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for ByLastFailed {}

impl PartialOrd for ByLastFailed {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ByLastFailed {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.0.last_failed, &self.0.uri).cmp(&(other.0.last_failed, &other.0.uri))
    }
}
