//! Baseline synchronization of one Source (spec §5.2, §10): walk its Resource List (or
//! Index), fetch every listed resource not already held in its current state, verify it into
//! the store, and — only after a complete read of the list — delete what the list no longer
//! names.
//!
//! Completeness is the rule everything hangs on: a walk that ended in an error, was
//! interrupted by shutdown, or answered `304 Not Modified` produces no deletions, and its
//! validators are kept only when the whole list was read and every resource stored, so a
//! conditional GET never hides a resource that still needs fetching. Verified records are
//! committed as they arrive ([`commit`](crate::harvest::commit)); a restart resumes without refetching them.
//!
//! Depends on the fetcher, discovery, the store and the naming scheme; never on the publisher.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use url::Url;

use super::plan::{self, AfterWalk, EntryAction, after_walk};
use crate::config::Source;
use crate::harvest::authority::within_authority;
use crate::harvest::commit::{self, Msg};
use crate::harvest::ctx::{Ctx, HarvestError, join_error};
use crate::harvest::discover::discover_keeping;
use crate::harvest::document::FetchedDoc;
use crate::harvest::index::{IndexWalker, WalkLimits};
use crate::harvest::listed::Listed;
use crate::harvest::report::SourceReport;
use crate::harvest::resource::{self, ResourceError};
use crate::model::Entry;
use crate::store::{Record, SourceState, Store, StoreError};

/// How long in-flight fetches may finish after shutdown was requested before they are
/// abandoned (an abandoned fetch stores nothing).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How the walk of the list ended.
enum End {
    Complete,
    Interrupted,
    Incomplete(String),
}

type TaskResult = Result<u64, (String, ResourceError)>;

/// One pass over one Source; see the module docs.
pub(crate) async fn baseline(
    ctx: &Ctx,
    source: &Source,
    sets: &[String],
    mut state: SourceState,
    given: Option<FetchedDoc>,
) -> Result<SourceReport, HarvestError> {
    let mut report = SourceReport::new(&source.id);
    let (list_url, mut walker, first) = open_list(ctx, source, &state, given).await?;
    if walker.not_modified() {
        report.not_modified = true;
        report.unchanged = state.status.resources;
        report.complete = true;
        return Ok(report);
    }
    let prefix = ctx.naming.resource_prefix(&source.id);
    let held = load_held(&ctx.store, &prefix).await?;
    let new_source = held.is_empty() && holds_none(&ctx.store, &prefix).await?;
    let failing = load_failing(&ctx.store, &source.id).await?;
    let (tx, committer) = commit::spawn(ctx.store.clone(), ctx.stage(&source.id), sets.to_vec());
    let mut pass = Pass {
        ctx,
        source,
        list_url: &list_url,
        held: &held,
        failing: &failing,
        seen: HashSet::new(),
        tasks: JoinSet::new(),
        sem: Arc::new(Semaphore::new(concurrency(source))),
        shared: Shared { settings: Arc::new(source.settings.clone()), id: Arc::from(source.id.as_str()) },
        tx,
        report,
        store_error: None,
        new_source,
    };
    let end = pass.walk(&mut walker, first).await;
    pass.drain(matches!(end, End::Interrupted)).await?;
    let Pass { seen, tx, mut report, .. } = pass;
    let complete = matches!(end, End::Complete);
    let AfterWalk { deletes, unlisted } = after_walk(complete, source.settings.deletes, &held, &failing, &seen);
    report.complete = complete;
    report.listed_all = complete;
    report.interrupted = matches!(end, End::Interrupted);
    report.error = match end {
        End::Incomplete(e) => Some(e),
        End::Interrupted => None,
        End::Complete => None,
    };
    update_state(&mut state, &list_url, &walker, &report);
    let _ = tx.send(Msg::Finish { deletes, unlisted, state: Box::new(state) }).await;
    drop(tx);
    let tally = committer.await.map_err(join_error)??;
    report.created = tally.created;
    report.updated = tally.updated;
    report.deleted = tally.deleted;
    report.staged = tally.staged;
    report.taken_down = tally.taken_down;
    Ok(report)
}

/// Per-source in-flight resource fetches: the per-host cap bounds requests to one host, this
/// bounds memory and tasks when a list names many hosts.
fn concurrency(source: &Source) -> usize {
    (source.settings.concurrency.get() as usize).clamp(1, 256)
}

/// Opens the walk at the Resource List remembered from the last pass (one conditional GET
/// when nothing changed), or discovers it when there is none or it no longer answers.
/// `given` is the list document discovery fetched a moment ago, if any: when it is the list
/// to walk, the walk starts from it instead of fetching it again.
async fn open_list(
    ctx: &Ctx,
    source: &Source,
    state: &SourceState,
    given: Option<FetchedDoc>,
) -> Result<(Url, IndexWalker, Option<Entry>), HarvestError> {
    let s = &source.settings;
    if let Some(cached) = state.resource_list.as_deref().and_then(|u| Url::parse(u).ok()) {
        let validators = state.documents.get(cached.as_str()).map(crate::fetch::Validators::from);
        let mut w = IndexWalker::new(&ctx.fetcher, cached.clone(), s, WalkLimits::default())
            .conditional(validators)
            .starting_with(given);
        match w.next_entry().await {
            Ok(first) => return Ok((cached, w, first)),
            Err(e) => {
                tracing::warn!(source.id = %source.id, error = %crate::error::chain(&e), "remembered Resource List failed; discovering again")
            }
        }
    }
    let (found, given) = discover_keeping(&ctx.fetcher, &source.url, source.capability_list.as_ref(), s).await?;
    let url =
        found.capabilities.resourcelist.ok_or_else(|| HarvestError::NoResourceList { source_id: source.id.clone() })?;
    let mut w = IndexWalker::new(&ctx.fetcher, url.clone(), s, WalkLimits::default()).starting_with(given);
    let first = w.next_entry().await.map_err(|e| HarvestError::List {
        source_id: source.id.clone(),
        document: "Resource List",
        source: Box::new(e),
    })?;
    Ok((url, w, first))
}

/// The live records of a source, by URI: what the list is compared with.
pub(crate) async fn load_held(store: &Store, prefix: &str) -> Result<HashMap<String, Record>, HarvestError> {
    let (store, prefix) = (store.clone(), prefix.to_owned());
    let held = tokio::task::spawn_blocking(move || {
        store
            .records_with_prefix(&prefix)
            .filter(|r| r.as_ref().map_or(true, |r| !r.is_deleted()))
            .map(|r| r.map(|r| (r.uri.clone(), r)))
            .collect::<Result<HashMap<_, _>, StoreError>>()
    })
    .await
    .map_err(join_error)??;
    Ok(held)
}

/// Whether the store holds no record under `prefix`, live or deleted: a source's first
/// baseline, whose records the store creates without looking for old ones.
pub(crate) async fn holds_none(store: &Store, prefix: &str) -> Result<bool, HarvestError> {
    let (store, prefix) = (store.clone(), prefix.to_owned());
    let none = tokio::task::spawn_blocking(move || store.records_with_prefix(&prefix).next().transpose())
        .await
        .map_err(join_error)??
        .is_none();
    Ok(none)
}

/// The resources of a source recorded as failing, by Tributary URI: a pass clears the row of
/// each one it stores (or finds held as listed), and only those, so a pass without failures
/// writes no failure row at all.
pub(crate) async fn load_failing(store: &Store, source: &str) -> Result<HashSet<String>, HarvestError> {
    let (store, source) = (store.clone(), source.to_owned());
    let failing = tokio::task::spawn_blocking(move || {
        store.failures(&source).map(|f| f.map(|f| f.uri)).collect::<Result<HashSet<_>, StoreError>>()
    })
    .await
    .map_err(join_error)??;
    Ok(failing)
}

fn update_state(state: &mut SourceState, list_url: &Url, walker: &IndexWalker, report: &SourceReport) {
    state.resource_list = Some(list_url.to_string());
    if report.complete {
        start_changes(state, walker.root_header().and_then(|h| h.md.as_ref()).and_then(|md| md.at), list_url);
    }
    if report.complete && report.failed == 0 {
        state.resource_list_at =
            walker.root_header().and_then(|h| h.md.as_ref()).and_then(|md| md.at).or(state.resource_list_at);
        if let Some(v) = walker.root_validators() {
            let dv = crate::store::DocumentValidators::from(v);
            state.documents.insert(list_url.to_string(), dv);
        }
    } else {
        // Next time the list must be read again in full, not answered by a 304.
        state.documents.remove(list_url.as_str());
    }
}

/// A complete walk is a baseline: changes are followed from the list's `at` on. Resources
/// that failed to verify changed after `at` (or are broken at the Source); either way the
/// Change List reports them again if they change, so failures do not hold the position back.
fn start_changes(state: &mut SourceState, at: Option<crate::model::W3cDateTime>, list_url: &Url) {
    if state.baselined {
        return;
    }
    if at.is_none() && state.capabilities.as_ref().is_some_and(|c| c.change_list.is_some()) {
        tracing::warn!(list = %list_url, "the Resource List has no `at`: every change in the Change Lists will be applied");
    }
    state.baselined = true;
    state.changes_through = at;
    state.change_list = None;
    state.change_dump_package = None;
    state.change_list_position = None;
    state.last_change = None;
}

/// The state of one walk.
struct Pass<'a> {
    ctx: &'a Ctx,
    source: &'a Source,
    list_url: &'a Url,
    held: &'a HashMap<String, Record>,
    /// Resources recorded as failing when the pass began.
    failing: &'a HashSet<String>,
    seen: HashSet<String>,
    tasks: JoinSet<TaskResult>,
    sem: Arc<Semaphore>,
    shared: Shared,
    tx: mpsc::Sender<Msg>,
    report: SourceReport,
    /// The first store failure of a fetch task: it ends the pass.
    store_error: Option<StoreError>,
    /// The store held no record of the source when the pass began: each URI, fetched once
    /// (`seen`), is created without a look for an old record.
    new_source: bool,
}

/// What every fetch task of a pass needs of its source, shared rather than copied per task
/// (a copy of the settings, with their link lists, was 0.8% of a pass's samples).
struct Shared {
    settings: Arc<crate::config::Settings>,
    id: Arc<str>,
}

impl Pass<'_> {
    async fn walk(&mut self, walker: &mut IndexWalker, first: Option<Entry>) -> End {
        let mut next = first;
        // Bounded by the walker's document and entry limits.
        loop {
            let Some(entry) = next else { return End::Complete };
            if *self.ctx.shutdown.borrow() {
                return End::Interrupted;
            }
            let base = walker.leaf().map_or_else(|| self.list_url.clone(), |(u, _)| u.clone());
            self.entry(entry, &base).await;
            while let Some(done) = self.tasks.try_join_next() {
                self.count(done);
            }
            next = match walker.next_entry().await {
                Ok(e) => e,
                Err(e) => return End::Incomplete(crate::error::chain(&e).to_string()),
            };
        }
    }

    async fn entry(&mut self, entry: Entry, base: &Url) {
        let id = &self.source.id;
        let Some(listed) = self.accept(entry, base) else {
            self.report.skipped += 1;
            return;
        };
        let first = self.seen.insert(listed.uri.clone());
        let held = self.held.get(&listed.uri);
        match plan::entry(&listed, held, self.failing.contains(&listed.uri), first) {
            EntryAction::Repeated => {}
            EntryAction::Held { refresh, recovered } => {
                self.ctx.progress.listed(id);
                let uri = recovered.then(|| listed.uri.clone());
                if let (true, Some(held)) = (refresh, held) {
                    let _ = self.tx.send(Msg::Upsert(Box::new(listed.into_record(id, held.sha256)))).await;
                }
                if let Some(uri) = uri {
                    let _ = self.tx.send(Msg::Recovered(uri)).await;
                }
                self.report.unchanged += 1;
                self.ctx.progress.resource(id, crate::harvest::report::ResourceOutcome::Unchanged, 0);
            }
            EntryAction::Fetch { was_failing } => {
                self.ctx.progress.listed(id);
                self.spawn_fetch(listed, was_failing).await;
            }
        }
    }

    /// The entry as a resource to harvest, or `None` (with a warning) when it must be skipped.
    fn accept(&self, entry: Entry, base: &Url) -> Option<Listed> {
        let id = &self.source.id;
        let Some(loc) = base.join(entry.loc.trim()).ok().filter(|u| matches!(u.scheme(), "http" | "https")) else {
            tracing::warn!(source.id = %id, loc = %entry.loc, "skipping an entry whose <loc> is not an http(s) URL");
            return None;
        };
        let inside = within_authority(&self.source.url, &loc) || within_authority(self.list_url, &loc);
        if !inside && !self.source.settings.allow_outside_authority {
            tracing::warn!(source.id = %id, resource.uri = %loc, "skipping a resource outside the Source's authority");
            return None;
        }
        let uri = self.ctx.naming.resource_url(id, &loc)?;
        Some(Listed::new(entry, loc, uri))
    }

    async fn spawn_fetch(&mut self, listed: Listed, was_failing: bool) {
        let Ok(permit) = self.sem.clone().acquire_owned().await else { return };
        let (fetcher, store, tx) = (self.ctx.fetcher.clone(), self.ctx.store.clone(), self.tx.clone());
        let new_source = self.new_source;
        let (settings, id) = (Arc::clone(&self.shared.settings), Arc::clone(&self.shared.id));
        self.tasks.spawn(crate::fetch::inherit(async move {
            let _permit = permit;
            // Boxed: the fetch's state machine is several KB, and unboxed it made this task's
            // future as large, which tokio copies whole when it spawns it (with `inherit`'s
            // change, 9.8 KB → 1.4 KB per task; memcpy 7.9% → 5.7% of a pass's samples).
            let (urls, expected) = (listed.urls(), listed.expected());
            let fetch = Box::pin(resource::fetch_verified(&fetcher, &store, &urls, &expected, &settings));
            match fetch.await {
                Ok(stored) => {
                    if stored.from != listed.loc {
                        tracing::debug!(source.id = %id, resource.uri = %listed.loc, mirror = %stored.from, "stored from a mirror");
                    }
                    let uri = was_failing.then(|| listed.uri.clone());
                    let record = Box::new(listed.into_record(&id, stored.info.id));
                    let _ = tx.send(if new_source { Msg::Create(record) } else { Msg::Upsert(record) }).await;
                    if let Some(uri) = uri {
                        let _ = tx.send(Msg::Recovered(uri)).await;
                    }
                    Ok(stored.bytes)
                }
                Err(e) => {
                    let loc = listed.loc.to_string();
                    if e.is_upstream() {
                        let reason = crate::error::chain(&e).to_string();
                        let _ = tx.send(Msg::Failed(Box::new(listed.into_failure(&id, reason)))).await;
                    }
                    Err((loc, e))
                }
            }
        }));
    }

    fn count(&mut self, done: Result<TaskResult, tokio::task::JoinError>) {
        use crate::harvest::report::ResourceOutcome as O;
        let id = &self.source.id;
        match done {
            Ok(Ok(bytes)) => {
                self.report.fetched += 1;
                self.report.bytes += bytes;
                self.ctx.progress.resource(id, O::Fetched, bytes);
            }
            Ok(Err((url, e))) => {
                tracing::warn!(source.id = %id, resource.uri = %url, error = %crate::error::chain(&e), "resource not stored");
                if let ResourceError::Store(e) = e {
                    self.store_error.get_or_insert(e);
                }
                self.report.failed += 1;
                self.ctx.progress.resource(id, O::Failed, 0);
            }
            // Aborted at shutdown: nothing was stored, and nothing is counted.
            Err(_) => {}
        }
    }

    /// Waits for in-flight fetches; after a shutdown request, for at most [`SHUTDOWN_GRACE`].
    async fn drain(&mut self, interrupted: bool) -> Result<(), HarvestError> {
        let deadline =
            tokio::time::Instant::now() + if interrupted { SHUTDOWN_GRACE } else { Duration::from_secs(365 * 86_400) };
        loop {
            match tokio::time::timeout_at(deadline, self.tasks.join_next()).await {
                Ok(Some(done)) => self.count(done),
                Ok(None) => break,
                Err(_) => {
                    // Nothing of theirs is stored; the next pass fetches them again.
                    let (fetches, grace_s) = (self.tasks.len(), SHUTDOWN_GRACE.as_secs());
                    tracing::warn!(fetches, grace_s, "abandoning fetches still in flight at shutdown");
                    self.tasks.abort_all();
                    // Aborted tasks end at their next await; one that finished first still counts.
                    while let Some(done) = self.tasks.join_next().await {
                        self.count(done);
                    }
                    break;
                }
            }
        }
        match self.store_error.take() {
            Some(e) => Err(HarvestError::Store(e)),
            None => Ok(()),
        }
    }
}
