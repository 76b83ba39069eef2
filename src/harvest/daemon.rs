//! Passes over all sources: one pass (`tributary harvest`), and what the long-running service
//! (`tributary run`, in `service`) shares with it: a source's pass, with its status kept in
//! the store for the dashboard.
//!
//! Each source is harvested by its own task, so one failing (or panicking) source never
//! stops the others; a semaphore bounds how many sources are harvested at once (the
//! operator's `[aggregator] max_concurrent_sources`). Shutdown is a `watch` flag every pass
//! polls between entries: it stops taking work, lets in-flight fetches finish for a moment,
//! commits what was verified, and returns. The schedule lives in the store (`next_attempt`),
//! so a restart keeps it.
//!
//! Depends on the configuration, the fetcher and the store; never on the publisher or web.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use super::report::{Progress, SourceReport, Summary};

use super::ctx::{Ctx, HarvestError, Turns, join_error, load_state, save_state};
use super::parks::Keeper;
use super::push::Push;
use crate::config::{Config, Source};
use crate::fetch::Fetcher;
use crate::model::W3cDateTime;
use crate::naming::Naming;
use crate::store::{HarvestState, PassCounts, PassRecord, SourceState, SourceStatus, Store, StoreError};

/// Failed attempts in a row after which a source counts as failing, not just backing off.
const FAILING_AFTER: u32 = 3;

/// One pass over the configured sources (all of them, or those in `only`).
///
/// # Errors
/// [`HarvestError::Config`] when `only` names an unconfigured source (nothing is
/// fetched). A failing source does not fail the pass: its report carries the error.
pub async fn harvest_once(
    config: &Config,
    store: &Store,
    fetcher: &Fetcher,
    only: &[String],
    progress: Arc<dyn Progress>,
) -> Result<Summary, HarvestError> {
    harvest_once_until(config, store, fetcher, only, progress, std::future::pending()).await
}

/// As [`harvest_once`], stopping early (cleanly, with what was verified committed) when
/// `shutdown` completes.
///
/// # Errors
/// As [`harvest_once`].
pub async fn harvest_once_until(
    config: &Config,
    store: &Store,
    fetcher: &Fetcher,
    only: &[String],
    progress: Arc<dyn Progress>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Summary, HarvestError> {
    let chosen = config.select(only)?;
    let started = Instant::now();
    let parks = Keeper::start(store, fetcher).await;
    let ctx = context(config, store, fetcher, progress, shutdown, Turns::default());
    let sem = Arc::new(Semaphore::new(config.aggregator.max_concurrent_sources));
    let mut tasks = JoinSet::new();
    for (i, source) in chosen.into_iter().enumerate() {
        let (ctx, sem, source, sets) = (ctx.clone(), sem.clone(), source.clone(), sets_of(config, &source.id));
        tasks.spawn(async move {
            let _permit = sem.acquire_owned().await;
            (i, harvest_source(&ctx, &source, &sets).await)
        });
    }
    let mut reports = Vec::new();
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(r) => reports.push(r),
            Err(e) => tracing::error!(error = %crate::error::chain(&e), "a source's harvest task panicked"),
        }
    }
    reports.sort_by_key(|(i, _)| *i);
    parks.finish().await;
    Ok(Summary { sources: reports.into_iter().map(|(_, r)| r).collect(), duration: started.elapsed() })
}

/// The long-running service: every source on its own poll schedule until `shutdown`
/// completes; then in-flight work is wound down and the store flushed. To steer it while it
/// runs, use [`Harvester::start`](super::Harvester::start) instead.
///
/// # Errors
/// [`HarvestError::Store`] when the sources' states cannot be read, or the final flush fails.
pub async fn run(
    config: &Config,
    store: &Store,
    fetcher: &Fetcher,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), HarvestError> {
    run_with_push(config, store, fetcher, None, shutdown).await
}

/// As [`run`], with `push` subscribing to the sources' change notifications (its callback
/// routes must be served by the web server for hubs to reach it).
///
/// # Errors
/// As [`run`].
pub async fn run_with_push(
    config: &Config,
    store: &Store,
    fetcher: &Fetcher,
    push: Option<&Push>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), HarvestError> {
    let (_harvester, runner) = super::Harvester::start(config, store, fetcher, push, shutdown).await?;
    runner.run().await
}

pub(super) fn context(
    config: &Config,
    store: &Store,
    fetcher: &Fetcher,
    progress: Arc<dyn Progress>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    turns: Turns,
) -> Arc<Ctx> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        // Ends when the pass is over (every receiver gone) even if `shutdown` never completes.
        tokio::select! {
            _ = shutdown => {
                let _ = tx.send(true);
                // Keep the sender so receivers see `true`, not a closed channel, until they are gone.
                tx.closed().await;
            }
            _ = tx.closed() => {}
        }
    });
    let naming = Naming::new(&config.aggregator.base_url);
    Arc::new(Ctx {
        store: store.clone(),
        fetcher: fetcher.clone(),
        naming,
        shutdown: rx,
        progress,
        turns,
        pass: String::new(),
    })
}

fn sets_of(config: &Config, source: &str) -> Vec<String> {
    config.sets_containing(source).into_iter().map(str::to_owned).collect()
}

pub(super) fn until(t: &W3cDateTime) -> Duration {
    let nanos = t.unix_nanos() - W3cDateTime::now().unix_nanos();
    Duration::from_nanos(u64::try_from(nanos.max(0)).unwrap_or(u64::MAX))
}

pub(super) fn after(d: Duration) -> W3cDateTime {
    let t = W3cDateTime::now().unix_timestamp().saturating_add(i64::try_from(d.as_secs()).unwrap_or(i64::MAX / 2));
    W3cDateTime::from_unix(t, 0).unwrap_or_else(|_| W3cDateTime::now())
}

/// One pass over one source, with its status kept in the store. Never fails: an error ends
/// up in the report and the status.
#[tracing::instrument(skip_all, fields(source.id = %source.id))]
pub(crate) async fn harvest_source(ctx: &Ctx, source: &Source, sets: &[String]) -> SourceReport {
    ctx.progress.source_started(&source.id);
    let started = Instant::now();
    let ctx = &Ctx { pass: super::ctx::pass_name("poll"), ..ctx.clone() };
    let mut report = crate::fetch::in_source(&source.id, async {
        let state = match begin(ctx, source).await {
            Ok(state) => state,
            Err(e) => return SourceReport::failed_with(&source.id, crate::error::chain(&e).to_string()),
        };
        // Nothing is sent: the origin asked us to wait.
        if let Some(park) = super::parks::blocking(&ctx.fetcher, source, &state) {
            return SourceReport::parked(&source.id, park);
        }
        match super::sync::synchronize(ctx, source, sets, state).await {
            Ok(r) => r,
            Err(e) => SourceReport::failed_with(&source.id, crate::error::chain(&e).to_string()),
        }
    })
    .await;
    settle(ctx, source, &mut report).await;
    if let Err(e) = finish(ctx, source, &mut report).await {
        tracing::error!(error = %crate::error::chain(&e), "could not save the source's status");
    }
    super::metrics::record_pass(&report, started.elapsed());
    match &report.error {
        None => tracing::info!(
            fetched = report.fetched,
            unchanged = report.unchanged,
            failed = report.failed,
            deleted = report.deleted,
            size_bytes = report.bytes,
            "source harvested"
        ),
        Some(e) if report.parked.is_some() => tracing::warn!(error = %e, "source parked: not polled until then"),
        Some(e) if report.partial() => {
            tracing::warn!(error = %e, fetched = report.fetched, unchanged = report.unchanged,
            deleted = report.deleted, failed = report.failed, "source harvest partial: what it did is kept")
        }
        Some(e) => {
            tracing::warn!(error = %e, fetched = report.fetched, failed = report.failed, "source harvest failed")
        }
    }
    ctx.progress.source_done(&report);
    report
}

/// Judges the deletions the pass staged against `max_deletions` (see `store::guard`): applies
/// and publishes them, or holds them, saying so once. Never fails the pass: a store error
/// leaves them staged, for the next pass to judge.
pub(crate) async fn settle(ctx: &Ctx, source: &Source, report: &mut SourceReport) {
    let s = &source.settings;
    let (store, id, pass) = (ctx.store.clone(), source.id.clone(), ctx.pass.clone());
    let (limit, confirm) = (s.max_deletions, s.confirm_deletions.map(|n| (n, s.poll)));
    let (complete, listed_all) = (report.error.is_none() && !report.interrupted, report.listed_all);
    let settled = tokio::task::spawn_blocking(move || {
        store.settle_deletions(&crate::store::Settle { source: &id, pass: &pass, limit, confirm, complete, listed_all })
    })
    .await
    .map_err(join_error);
    let settled = match settled {
        Ok(Ok(s)) => s,
        Ok(Err(e)) | Err(e) => {
            tracing::error!(error = %crate::error::chain(&e), "could not judge the pass's deletions; they stay staged");
            return;
        }
    };
    report.deleted += settled.applied;
    report.held = settled.held;
    report.held_since = settled.held_since;
    if settled.newly_held > 0 {
        let since = settled.held_since.map(|t| t.to_string()).unwrap_or_default();
        tracing::warn!(source.id = %source.id, held = settled.held, since = %since, max_deletions = %limit,
            "deletions held: the pass would delete more than max_deletions; its creations and updates are applied. `tributary deletions --source {}` lists them; `deletions apply` or `deletions keep` releases them", source.id);
    }
}

/// Marks the source as harvesting and returns its state.
async fn begin(ctx: &Ctx, source: &Source) -> Result<SourceState, StoreError> {
    let mut state = load_state(ctx, &source.id).await?;
    state.status.last_attempt = Some(W3cDateTime::now());
    state.status.state = HarvestState::Harvesting;
    save_state(ctx, &source.id, state.clone()).await?;
    Ok(state)
}

/// Records the pass in the source's status (after the pass's own commit, which saved its
/// position; this adds the counts, the outcome and the next due time). A pass that failed
/// while an origin it needs is parked is reported as parked.
async fn finish(ctx: &Ctx, source: &Source, report: &mut SourceReport) -> Result<(), StoreError> {
    let mut state = load_state(ctx, &source.id).await?;
    if report.error.is_some() && report.parked.is_none() {
        report.parked = super::parks::blocking(&ctx.fetcher, source, &state);
    }
    super::moves::prune(&mut state.status, source);
    let resources = count_live(ctx, &source.id).await?;
    update_status(&mut state.status, report, resources, poll_interval(ctx, source));
    let counts = state.status.last_pass;
    let (started, error) = (state.status.last_attempt, report.error.clone());
    state.record_pass(PassRecord { started, finished: Some(W3cDateTime::now()), counts, error });
    state.status.held_deletions = report.held;
    state.status.held_since = report.held_since;
    state.status.failing = count_failing(ctx, &source.id).await?;
    save_state(ctx, &source.id, state).await
}

/// The time to the next poll: `poll`, or while a verified push subscription stands, the slow
/// safety interval `push_poll` (never shorter than `poll`).
pub(super) fn poll_interval(ctx: &Ctx, source: &Source) -> Duration {
    let s = &source.settings;
    if ctx.turns.subscribed(&source.id) { s.poll.max(s.push_poll) } else { s.poll }
}

/// Live resources of a source: the counter of its own set (one read), else a scan.
async fn count_live(ctx: &Ctx, id: &str) -> Result<u64, StoreError> {
    let (store, prefix, id) = (ctx.store.clone(), ctx.naming.resource_prefix(id), id.to_owned());
    tokio::task::spawn_blocking(move || {
        if let Some(set) = store.set_info(&id)? {
            return Ok(set.live);
        }
        store.records_with_prefix(&prefix).try_fold(0u64, |n, r| r.map(|r| n + u64::from(!r.is_deleted())))
    })
    .await
    .map_err(join_error)?
}

/// Resources recorded as failing: a scan of the source's failure rows only.
async fn count_failing(ctx: &Ctx, id: &str) -> Result<u64, StoreError> {
    let (store, id) = (ctx.store.clone(), id.to_owned());
    tokio::task::spawn_blocking(move || store.failure_count(&id)).await.map_err(join_error)?
}

fn update_status(status: &mut SourceStatus, report: &SourceReport, resources: u64, poll: Duration) {
    status.resources = resources;
    status.failures += report.failed;
    status.last_pass = PassCounts {
        fetched: report.fetched,
        unchanged: report.unchanged,
        failed: report.failed,
        deleted: report.deleted,
        partial: report.partial(),
    };
    status.parked.clone_from(&report.parked);
    if let (Some(e), Some(park)) = (&report.error, &report.parked) {
        // Not a failure of the source: it is polled again when the park ends, not sooner.
        status.last_error = Some(e.clone());
        status.state = HarvestState::BackingOff;
        status.next_attempt = Some(park.until.max(W3cDateTime::now()));
        return;
    }
    match &report.error {
        // Resume at the next start, without counting a failure: a source that was failing
        // still is (an operator alerting on it must not see it recover by a restart).
        None if report.interrupted => {
            status.state = after_failures(status.consecutive_failures);
            status.next_attempt = Some(W3cDateTime::now());
        }
        None => {
            status.last_success = Some(W3cDateTime::now());
            status.last_error = None;
            status.consecutive_failures = 0;
            status.state = HarvestState::Idle;
            status.next_attempt = Some(after(poll));
        }
        Some(e) => {
            status.last_error = Some(e.clone());
            status.consecutive_failures += 1;
            let n = status.consecutive_failures;
            status.state = after_failures(n);
            status.next_attempt = Some(after(retry_delay(poll, n)));
        }
    }
}

/// The state of a source between passes after `n` failed attempts in a row.
fn after_failures(n: u32) -> HarvestState {
    match n {
        0 => HarvestState::Idle,
        n if n >= FAILING_AFTER => HarvestState::Failing,
        _ => HarvestState::BackingOff,
    }
}

/// After `failures` failed attempts in a row: twice the poll interval, doubling, at most 16
/// times it (and a day) — a failing Source is asked less often, not more.
pub(crate) fn retry_delay(poll: Duration, failures: u32) -> Duration {
    let factor = 1u32 << failures.clamp(1, 4);
    (poll * factor).min(Duration::from_secs(86_400).max(poll))
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLL: Duration = Duration::from_secs(60);

    /// Two failed attempts, then a pass cut short by the stop or a pause.
    fn failing_then_interrupted() -> SourceStatus {
        let mut status = SourceStatus::default();
        for _ in 0..2 {
            update_status(&mut status, &SourceReport::failed_with("s", "refused".into()), 0, POLL);
        }
        assert_eq!(status.state, HarvestState::BackingOff);
        let interrupted = SourceReport { interrupted: true, ..SourceReport::new("s") };
        update_status(&mut status, &interrupted, 0, POLL);
        status
    }

    #[test]
    fn a_pass_cut_short_keeps_a_failing_source_failing_and_due_now() {
        let status = failing_then_interrupted();
        assert_eq!((status.state, status.consecutive_failures), (HarvestState::BackingOff, 2));
        assert_eq!(status.last_error.as_deref(), Some("refused"));
        assert!(status.last_success.is_none());
        assert!(until(&status.next_attempt.unwrap()).is_zero(), "resumed at the next start");
    }

    #[test]
    fn states_follow_the_failures_in_a_row() {
        let states: Vec<_> = (0..5).map(after_failures).collect();
        use HarvestState::{BackingOff, Failing, Idle};
        assert_eq!(states, [Idle, BackingOff, BackingOff, Failing, Failing]);
    }
}
