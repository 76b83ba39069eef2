//! The committer: gathers verified records into large batches and applies them on a blocking
//! thread while the fetches go on.
//!
//! The store commits ~10k records/s in batches and an apply flushes, so one apply per
//! resource would cap a harvest at a few hundred per second. Batches of [`BATCH`] records (or
//! whatever arrived within [`LINGER`]; up to [`MAX_BATCH`] while the store is behind) are
//! applied while the next one fills; at most one apply is in flight, which keeps the order of
//! a source's writes and bounds memory. Records are committed as they are verified, not at the
//! end of a pass, so an interrupted pass resumes without fetching them again.

use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::ctx::join_error;
use super::report::SourceReport;
use crate::store::{Applied, Batch, NewFailure, NewRecord, SourceState, Stage, Store, StoreError};

/// Records per applied batch. Larger batches gain nothing once an apply runs alongside the
/// fetches, and memory grows with the batch. Each apply syncs the pack and the journal once
/// (see the store's `pack` and `table` modules), so much smaller batches would cost a slow
/// disk more syncs.
pub(crate) const BATCH: usize = 300;

/// Most records a batch grows to while the apply before it is still running. When records
/// come faster than the store applies them (a baseline from a dump: 35,000 a second) a batch
/// keeps filling instead of waiting full, so each apply's fixed costs — the pack's sync above
/// all — are paid once per more records; a harvest the store keeps up with still applies
/// batches of [`BATCH`].
const MAX_BATCH: usize = 4 * BATCH;

/// Longest a verified record waits for its batch to fill.
const LINGER: Duration = Duration::from_millis(200);

/// What the committer is sent.
#[derive(Debug)]
pub(crate) enum Msg {
    /// A verified record (or a metadata update of a held one).
    Upsert(Box<NewRecord>),
    /// A verified record the store certainly does not hold: a first baseline's, each URI once
    /// (see [`crate::store::Batch::create`]).
    Create(Box<NewRecord>),
    /// A resource that could not be stored (see [`crate::store::Failure`]).
    Failed(Box<NewFailure>),
    /// A resource recorded as failing that is now stored, or held as listed: its row goes.
    Recovered(String),
    /// The end of the pass: deletions, the failures of resources no longer listed, and the
    /// source's state, committed together.
    Finish { deletes: Vec<String>, unlisted: Vec<String>, state: Box<SourceState> },
}

/// Applies `batch` on a blocking thread (a commit may fsync), for the steps that commit one
/// batch at a time rather than through a committer.
pub(crate) async fn apply_blocking(store: &Store, mut batch: Batch) -> Result<Applied, super::ctx::HarvestError> {
    let store = store.clone();
    Ok(tokio::task::spawn_blocking(move || store.apply(&mut batch)).await.map_err(join_error)??)
}

/// Starts a committer for `source`; send it [`Msg`]s, drop the sender, await the handle.
pub(crate) fn spawn(
    store: Store,
    stage: Stage,
    sets: Vec<String>,
) -> (mpsc::Sender<Msg>, JoinHandle<Result<SourceReport, StoreError>>) {
    let (tx, rx) = mpsc::channel(BATCH * 2);
    (tx, tokio::spawn(run(store, stage, sets, rx)))
}

async fn run(
    store: Store,
    stage: Stage,
    sets: Vec<String>,
    mut rx: mpsc::Receiver<Msg>,
) -> Result<SourceReport, StoreError> {
    let source = stage.source.clone();
    // Only the created / updated / deleted counts are filled in.
    let mut tally = SourceReport::default();
    let mut batch = Batch::new();
    let mut inflight: Option<JoinHandle<Result<Applied, StoreError>>> = None;
    let set_refs = || -> Vec<&str> { sets.iter().map(String::as_str).collect() };
    // Ends when every sender is gone; each turn consumes a message or a linger timeout.
    loop {
        let msg = match tokio::time::timeout(LINGER, rx.recv()).await {
            Ok(Some(m)) => Some(m),
            Ok(None) => break,
            Err(_) => None,
        };
        let finish = match msg {
            Some(Msg::Upsert(r)) => {
                batch.upsert(&set_refs(), *r);
                false
            }
            Some(Msg::Create(r)) => {
                batch.create(&set_refs(), *r);
                false
            }
            Some(Msg::Failed(f)) => {
                batch.fail(*f);
                false
            }
            Some(Msg::Recovered(uri)) => {
                batch.clear_failure(&source, &uri);
                false
            }
            Some(Msg::Finish { deletes, unlisted, state }) => {
                // Staged: the pass's end judges them against `max_deletions`.
                for uri in &deletes {
                    batch.stage_delete(&set_refs(), uri, &stage);
                }
                for uri in &unlisted {
                    batch.clear_failure(&source, uri);
                }
                batch.source_state(&source, *state);
                true
            }
            None => !batch.is_empty(),
        };
        let busy = inflight.as_ref().is_some_and(|apply| !apply.is_finished());
        if finish || batch.len() >= MAX_BATCH || (batch.len() >= BATCH && !busy) {
            wait(&mut inflight, &mut tally).await?;
            let mut b = std::mem::take(&mut batch);
            let s = store.clone();
            // Every batch is durable when its apply returns: the records fetched so far survive
            // a power cut, and nothing is reported before that.
            inflight = Some(tokio::task::spawn_blocking(move || {
                let (started, records) = (Instant::now(), b.len());
                let applied = s.apply(&mut b);
                tracing::debug!(records, duration_ms = started.elapsed().as_millis() as u64, "batch applied");
                applied
            }));
        }
    }
    wait(&mut inflight, &mut tally).await?;
    tally.count_applied(&blocking_apply(&store, batch).await?);
    Ok(tally)
}

async fn wait(
    inflight: &mut Option<JoinHandle<Result<Applied, StoreError>>>,
    tally: &mut SourceReport,
) -> Result<(), StoreError> {
    if let Some(h) = inflight.take() {
        tally.count_applied(&h.await.map_err(join_error)??);
    }
    Ok(())
}

async fn blocking_apply(store: &Store, mut batch: Batch) -> Result<Applied, StoreError> {
    let s = store.clone();
    tokio::task::spawn_blocking(move || s.apply(&mut batch)).await.map_err(join_error)?
}
