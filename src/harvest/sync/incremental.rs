//! Incremental synchronization (spec §12, Appendix A): after a baseline, each poll reads the
//! Source's Change List (or Change List Index) from where the last poll stopped and applies
//! the new changes — created/updated fetched and verified as in baseline, deleted marked per
//! the delete policy — instead of walking the whole Resource List again.
//!
//! Crash safety is the rule everything hangs on: changes are applied in chunks, and each
//! chunk's records, change events and the position after it are one store [`Batch`], applied
//! durably. A SIGKILL at any moment leaves the position exactly at the last committed chunk,
//! so a restart neither skips a change nor applies one twice (see `changes` for the position
//! rules). When the Source no longer offers the changes since that position, or its lists
//! contradict it, the caller re-baselines ([`Outcome::Rebaseline`]).
//!
//! Depends on the fetcher, discovery, the store and the naming scheme; never on the publisher.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use url::Url;

use super::changes::{Gap, ListRef, Pending, Position, check_reread, coalesce, is_new, plan};
use crate::config::Source;
use crate::fetch::Validators;
use crate::harvest::authority::within_authority;
use crate::harvest::commit::apply_blocking;
use crate::harvest::ctx::{Ctx, HarvestError, closed, join_error};
use crate::harvest::document::{DiscoverError, FetchedDoc, fetch_doc_conditional, reader};
use crate::harvest::listed::Listed;
use crate::harvest::report::{ResourceOutcome, SourceReport};
use crate::harvest::resource::{self, ResourceError};
use crate::model::{Change, Entry, RootFormat, W3cDateTime};
use crate::store::{Batch, DocumentValidators, NewFailure, Record, SourceState, StoreError};

/// Changes applied (and committed with their position) together.
const CHUNK: usize = 1000;

/// Change Lists read in one poll; the rest wait for the next.
const MAX_LISTS_PER_POLL: usize = 64;

/// What an incremental poll came to.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Changes applied (or none were new).
    Done(SourceReport),
    /// The position cannot be continued; the reason, for the log.
    Rebaseline(String),
}

/// One Change List as read in this poll.
struct ListRead {
    url: Url,
    len: u64,
    until: Option<W3cDateTime>,
    validators: Option<Validators>,
}

/// The root as fetched: an index of lists, a single list, or unchanged.
enum Root {
    Index { lists: Vec<ListRef>, earliest: Option<W3cDateTime> },
    List(Box<FetchedDoc>),
    NotModified,
}

/// One poll; see the module docs.
pub(crate) async fn incremental(
    ctx: &Ctx,
    source: &Source,
    sets: &[String],
    state: SourceState,
    root: &Url,
) -> Result<Outcome, HarvestError> {
    let pos = Position {
        list: state.change_list.clone(),
        processed: state.change_list_position.unwrap_or(0),
        through: state.changes_through,
    };
    let (mut lists, earliest, single) = match read_root(ctx, source, &state, root).await? {
        Root::NotModified => return Ok(Outcome::Done(unchanged(source))),
        Root::Index { lists, earliest } => (lists, earliest, None),
        Root::List(doc) => {
            let md = doc.header.as_ref().and_then(|h| h.md.clone()).unwrap_or_default();
            (vec![ListRef { url: root.clone(), from: md.from, until: md.until }], md.from, Some(doc))
        }
    };
    let resume = match plan(&mut lists, earliest, &pos) {
        Ok(r) => r,
        Err(Gap(why)) => return Ok(Outcome::Rebaseline(why)),
    };
    let mut poll = Poll::start(ctx, source, sets, false).await?;
    let mut single = single;
    for list in lists.iter().skip(resume.list).take(MAX_LISTS_PER_POLL) {
        let remembered = pos.list.as_deref() == Some(list.url.as_str());
        let doc = match single.take() {
            Some(d) => Some(*d),
            None => fetch_list(ctx, source, &state, &list.url, remembered).await?,
        };
        let Some(doc) = doc else {
            // 304: nothing new in the remembered list since it was read.
            let validators = validators_of(&state, &list.url);
            poll.reads.push(ListRead { url: list.url.clone(), len: pos.processed, until: list.until, validators });
            continue;
        };
        let skip = if remembered { resume.skip } else { 0 };
        // A list that cannot be read is an error of this poll (retried at the next); only a
        // list that contradicts the position is a reason to re-baseline.
        let entries = read_entries(source, &doc)?;
        if let Err(Gap(why)) = poll.read_list(list, doc, entries, skip, remembered, &state) {
            return Ok(Outcome::Rebaseline(why));
        }
    }
    poll.apply(state).await.map(Outcome::Done)
}

/// Applies the changes of a change notification as a poll applies a Change List's (the same
/// acceptance, fetch, verification, store and one change event each), committed with
/// `state` as the caller prepared it. A notification never moves the Change List position —
/// only a poll does — so a change the hub lost is still found by the next poll, and one the
/// poll finds again is held already and writes nothing. A change older than the record held
/// (its `datetime`, else its `lastmod`, before the record's `lastmod`) is passed over: a late
/// or replayed notification must not undo a newer state.
pub(crate) async fn apply_pushed(
    ctx: &Ctx,
    source: &Source,
    sets: &[String],
    state: SourceState,
    base: &Url,
    entries: Vec<Entry>,
) -> Result<SourceReport, HarvestError> {
    let mut poll = Poll::start(ctx, source, sets, true).await?;
    for (pos, entry) in entries.into_iter().enumerate() {
        match poll.accept(base, &entry) {
            Some(loc) => poll.pending.push(Pending { list: 0, pos: pos as u64, loc, entry }),
            None => poll.report.skipped += 1,
        }
    }
    poll.apply(state).await
}

/// Whether a pushed change is older than the record held for its resource.
fn older_than_held(entry: &Entry, held: Option<&Record>) -> bool {
    let when = entry.md.as_ref().and_then(|m| m.datetime).or(entry.lastmod);
    matches!((when, held.and_then(|h| h.lastmod)), (Some(w), Some(h)) if w < h)
}

fn unchanged(source: &Source) -> SourceReport {
    SourceReport { complete: true, not_modified: true, ..SourceReport::new(&source.id) }
}

fn validators_of(state: &SourceState, url: &Url) -> Option<Validators> {
    state.documents.get(url.as_str()).map(Validators::from)
}

fn list_error(source: &Source, e: DiscoverError) -> HarvestError {
    HarvestError::List { source_id: source.id.clone(), document: "Change List", source: Box::new(e) }
}

/// Fetches the Change List or Index; conditional when it is itself the remembered list.
async fn read_root(ctx: &Ctx, source: &Source, state: &SourceState, root: &Url) -> Result<Root, HarvestError> {
    let remembered = state.change_list.as_deref() == Some(root.as_str());
    let Some(doc) = fetch_list(ctx, source, state, root, remembered).await? else { return Ok(Root::NotModified) };
    let header = doc.header.clone().unwrap_or_default();
    if header.format != Some(RootFormat::SitemapIndex) {
        // A plain list naming its index (§12.1): the index is where every list is and where a
        // position stays valid; the list a Capability List names may be a moving view (as
        // Tributary's own recent Change List is), so it is not positioned in by count.
        let index = header.link("index").and_then(|l| doc.doc.url.join(l.href.trim()).ok());
        if let Some(index) = index.filter(|u| u != root) {
            let indexed = fetch_list(ctx, source, state, &index, false).await?;
            if let Some(idx) =
                indexed.filter(|d| d.header.as_ref().and_then(|h| h.format) == Some(RootFormat::SitemapIndex))
            {
                return index_root(source, idx);
            }
        }
        return Ok(Root::List(Box::new(doc)));
    }
    index_root(source, doc)
}

/// The lists an index names, in its order.
fn index_root(source: &Source, doc: FetchedDoc) -> Result<Root, HarvestError> {
    let header = doc.header.clone().unwrap_or_default();
    let entries = read_entries(source, &doc)?;
    let lists = entries
        .into_iter()
        .filter_map(|e| {
            let url = doc.doc.url.join(e.loc.trim()).ok()?;
            let md = e.md.unwrap_or_default();
            Some(ListRef { url, from: md.from, until: md.until })
        })
        .collect();
    Ok(Root::Index { lists, earliest: header.md.and_then(|m| m.from) })
}

async fn fetch_list(
    ctx: &Ctx,
    source: &Source,
    state: &SourceState,
    url: &Url,
    conditional: bool,
) -> Result<Option<FetchedDoc>, HarvestError> {
    let validators = if conditional { validators_of(state, url) } else { None };
    let doc = fetch_doc_conditional(&ctx.fetcher, url, &source.settings, validators.as_ref())
        .await
        .map_err(|e| list_error(source, e))?;
    match doc {
        Some(d) if d.header.as_ref().and_then(|h| h.capability()) != Some(crate::model::Capability::ChangeList) => {
            let e = crate::harvest::document::wrong_kind(&d, "a Change List or Change List Index");
            Err(list_error(source, e))
        }
        other => Ok(other),
    }
}

fn read_entries(source: &Source, doc: &FetchedDoc) -> Result<Vec<Entry>, HarvestError> {
    let mut r = reader(&doc.doc.url, doc.doc.body.clone(), &source.settings).map_err(|e| list_error(source, e))?;
    let mut out = Vec::new();
    // Bounded by the reader's entry and byte limits.
    loop {
        match r.next_entry() {
            Ok(Some(e)) => out.push(e),
            Ok(None) => return Ok(out),
            Err(e) => {
                let url = doc.doc.url.to_string();
                return Err(list_error(source, DiscoverError::Read { url, source: e }));
            }
        }
    }
}

/// The state of one poll.
struct Poll<'a> {
    ctx: &'a Ctx,
    source: &'a Source,
    sets: &'a [String],
    pending: Vec<Pending>,
    reads: Vec<ListRead>,
    report: SourceReport,
    /// Resources recorded as failing when the poll began: a change that stores or deletes one
    /// ends its failure.
    failing: HashSet<String>,
    /// Changes from a notification ([`apply_pushed`]): no list, no position to move.
    pushed: bool,
}

impl<'a> Poll<'a> {
    /// A poll of `source` (or, `pushed`, a notification's changes), knowing which of its
    /// resources are recorded as failing.
    async fn start(ctx: &'a Ctx, source: &'a Source, sets: &'a [String], pushed: bool) -> Result<Self, HarvestError> {
        let failing = super::baseline::load_failing(&ctx.store, &source.id).await?;
        Ok(Poll {
            ctx,
            source,
            sets,
            pending: Vec::new(),
            reads: Vec::new(),
            report: SourceReport::new(&source.id),
            failing,
            pushed,
        })
    }
}

/// What one change came to before the commit.
enum Applied1 {
    Upsert(Box<crate::store::NewRecord>),
    Delete(String),
    Failed(Box<NewFailure>),
    /// Nothing to write: the change is already reflected (held as listed, or a deletion the
    /// delete policy keeps).
    Settled(String),
    Nothing,
}

impl Poll<'_> {
    /// Reads one list's entries and queues the new changes.
    fn read_list(
        &mut self,
        list: &ListRef,
        doc: FetchedDoc,
        entries: Vec<Entry>,
        skip: u64,
        remembered: bool,
        state: &SourceState,
    ) -> Result<(), Gap> {
        if remembered {
            let at = usize::try_from(skip).ok().and_then(|s| s.checked_sub(1)).and_then(|s| entries.get(s));
            check_reread(&list.url, entries.len(), skip, state.last_change, at)?;
        }
        let until = doc.header.as_ref().and_then(|h| h.md.as_ref()).and_then(|m| m.until).or(list.until);
        let undated = entries.iter().filter(|e| e.md.as_ref().and_then(|m| m.datetime).is_none()).count();
        if undated > 0 {
            tracing::warn!(
                source.id = %self.source.id, list = %list.url, changes = undated,
                "changes without `datetime`: their order in the list is taken as the order of changes"
            );
        }
        let len = entries.len() as u64;
        for (pos, entry) in entries.into_iter().enumerate().skip(usize::try_from(skip).unwrap_or(usize::MAX)) {
            let datetime = entry.md.as_ref().and_then(|m| m.datetime);
            if !remembered && !is_new(datetime, state.changes_through) {
                continue;
            }
            match self.accept(&doc.doc.url, &entry) {
                Some(loc) => self.pending.push(Pending { list: self.reads.len(), pos: pos as u64, loc, entry }),
                None => self.report.skipped += 1,
            }
        }
        let validators = (until.is_none()).then(|| doc.doc.validators.clone());
        self.reads.push(ListRead { url: list.url.clone(), len, until, validators });
        Ok(())
    }

    /// The change's absolute `<loc>`, or `None` (with a warning) when it must be skipped.
    fn accept(&self, base: &Url, entry: &Entry) -> Option<Url> {
        let id = &self.source.id;
        let Some(loc) = base.join(entry.loc.trim()).ok().filter(|u| matches!(u.scheme(), "http" | "https")) else {
            tracing::warn!(source.id = %id, loc = %entry.loc, "skipping a change whose <loc> is not an http(s) URL");
            return None;
        };
        let inside = within_authority(&self.source.url, &loc) || within_authority(base, &loc);
        if !inside && !self.source.settings.allow_outside_authority {
            tracing::warn!(source.id = %id, resource.uri = %loc, "skipping a change outside the Source's authority");
            return None;
        }
        Some(loc)
    }

    /// Applies the queued changes chunk by chunk, each chunk committed with its position.
    async fn apply(mut self, mut state: SourceState) -> Result<SourceReport, HarvestError> {
        let order = coalesce(&self.pending);
        let chunks: Vec<&[usize]> = order.chunks(CHUNK).collect();
        let n = chunks.len();
        for (k, chunk) in chunks.into_iter().enumerate() {
            if *self.ctx.shutdown.borrow() {
                self.report.interrupted = true;
                return Ok(self.report);
            }
            let last = k + 1 == n;
            let outcomes = self.run_chunk(chunk).await?;
            if self.pushed {
                // The caller's state, as it came: a notification moves no list position.
            } else if last {
                self.final_position(&mut state);
            } else {
                let p = &self.pending[*chunk.last().expect("chunks are not empty")];
                self.position_after(&mut state, p);
            }
            self.commit(outcomes, &state).await?;
        }
        if n == 0 && (self.pushed || self.final_position(&mut state)) {
            self.commit(Vec::new(), &state).await?;
        }
        self.report.complete = true;
        Ok(self.report)
    }

    fn position_after(&self, state: &mut SourceState, p: &Pending) {
        state.change_list = Some(self.reads[p.list].url.to_string());
        state.change_list_position = Some(p.pos + 1);
        state.last_change = p.datetime();
        if let Some(d) = p.datetime() {
            state.changes_through = Some(state.changes_through.map_or(d, |t| t.max(d)));
        }
    }

    /// The position after every list read; returns whether it moved.
    fn final_position(&self, state: &mut SourceState) -> bool {
        let before =
            (state.change_list.clone(), state.change_list_position, state.changes_through, state.documents.clone());
        if let Some(p) = self.pending.last() {
            self.position_after(state, p);
        }
        if let Some(r) = self.reads.last() {
            if state.change_list.as_deref() != Some(r.url.as_str()) {
                state.last_change = None;
            }
            state.change_list = Some(r.url.to_string());
            state.change_list_position = Some(r.len);
            if let Some(u) = r.until {
                state.changes_through = Some(state.changes_through.map_or(u, |t| t.max(u)));
            }
        }
        // Only the open list is polled conditionally; closed ones are never read again.
        state.documents.retain(|u, _| !self.reads.iter().any(|r| r.url.as_str() == u));
        for r in &self.reads {
            if let Some(v) = &r.validators {
                let dv = DocumentValidators::from(v);
                state.documents.insert(r.url.to_string(), dv);
            }
        }
        before
            != (state.change_list.clone(), state.change_list_position, state.changes_through, state.documents.clone())
    }

    /// Fetches what the chunk's changes need; returns one outcome per change, in order.
    async fn run_chunk(&mut self, chunk: &[usize]) -> Result<Vec<Applied1>, HarvestError> {
        let id = self.source.id.clone();
        let items: Vec<(Pending, Option<String>)> = chunk
            .iter()
            .map(|&i| {
                let p = self.pending[i].clone();
                let uri = self.ctx.naming.resource_url(&id, &p.loc);
                (p, uri)
            })
            .collect();
        let held = self.held(items.iter().filter_map(|(_, u)| u.clone()).collect()).await?;
        let mut out: Vec<Applied1> = Vec::with_capacity(items.len());
        let mut tasks = JoinSet::new();
        let sem = Arc::new(Semaphore::new((self.source.settings.concurrency.get() as usize).clamp(1, 256)));
        for (i, (p, uri)) in items.into_iter().enumerate() {
            out.push(Applied1::Nothing);
            let Some(uri) = uri else {
                self.report.skipped += 1;
                continue;
            };
            if self.pushed && older_than_held(&p.entry, held.get(&uri)) {
                tracing::info!(source.id = %id, resource.uri = %p.loc, "a notified change older than the record held is passed over");
                self.report.skipped += 1;
                continue;
            }
            if p.change() == Some(Change::Deleted) {
                // Kept or deleted, a resource deleted at the Source has nothing left to retry.
                out[i] = if self.source.settings.deletes { Applied1::Delete(uri) } else { Applied1::Settled(uri) };
                continue;
            }
            let listed = Listed::new(p.entry, p.loc, uri);
            if let Some(h) = held.get(&listed.uri).filter(|h| listed.content_held(h)) {
                self.report.unchanged += 1;
                out[i] = if listed.metadata_held(h) {
                    Applied1::Settled(listed.uri)
                } else {
                    Applied1::Upsert(Box::new(listed.into_record(&id, h.sha256)))
                };
                continue;
            }
            let permit = sem.clone().acquire_owned().await.map_err(closed)?;
            let (fetcher, store, settings) =
                (self.ctx.fetcher.clone(), self.ctx.store.clone(), self.source.settings.clone());
            // As in the baseline: attributed to the source for `/metrics`, and boxed so the task's
            // future stays small.
            tasks.spawn(crate::fetch::inherit(async move {
                let _permit = permit;
                let (urls, expected) = (listed.urls(), listed.expected());
                let r = Box::pin(resource::fetch_verified(&fetcher, &store, &urls, &expected, &settings)).await;
                (i, listed, r)
            }));
        }
        // Bounded: one result per spawned task.
        while let Some(done) = tasks.join_next().await {
            let (i, listed, r) = done.map_err(join_error)?;
            match r {
                Ok(stored) => {
                    self.report.fetched += 1;
                    self.report.bytes += stored.bytes;
                    self.ctx.progress.resource(&id, ResourceOutcome::Fetched, stored.bytes);
                    out[i] = Applied1::Upsert(Box::new(listed.into_record(&id, stored.info.id)));
                }
                Err(ResourceError::Store(e)) => return Err(HarvestError::Store(e)),
                Err(e) => {
                    tracing::warn!(source.id = %id, resource.uri = %listed.loc, error = %crate::error::chain(&e), "change not applied");
                    self.report.failed += 1;
                    self.ctx.progress.resource(&id, ResourceOutcome::Failed, 0);
                    // Recorded with what the change listed, so the next poll retries it
                    // (`super::retry`): the Change List will not name it again.
                    out[i] = Applied1::Failed(Box::new(listed.into_failure(&id, crate::error::chain(&e).to_string())));
                }
            }
        }
        Ok(out)
    }

    async fn held(&self, uris: Vec<String>) -> Result<HashMap<String, Record>, HarvestError> {
        let store = self.ctx.store.clone();
        let held = tokio::task::spawn_blocking(move || {
            let mut out = HashMap::new();
            for u in uris {
                if let Some(r) = store.record(&u)? {
                    out.insert(u, r);
                }
            }
            Ok::<_, StoreError>(out)
        })
        .await
        .map_err(join_error)??;
        Ok(held)
    }

    /// Commits a chunk's records and events with the position after it, durably.
    async fn commit(&mut self, outcomes: Vec<Applied1>, state: &SourceState) -> Result<(), HarvestError> {
        let sets: Vec<&str> = self.sets.iter().map(String::as_str).collect();
        let mut batch = Batch::new();
        let id = &self.source.id;
        for o in outcomes {
            let done = match o {
                Applied1::Upsert(r) => {
                    let uri = r.uri.clone();
                    batch.upsert(&sets, *r);
                    uri
                }
                Applied1::Delete(uri) => {
                    batch.stage_delete(&sets, &uri, &self.ctx.stage(id));
                    uri
                }
                Applied1::Failed(f) => {
                    self.failing.insert(f.uri.clone());
                    batch.fail(*f);
                    continue;
                }
                Applied1::Settled(uri) => uri,
                Applied1::Nothing => continue,
            };
            if self.failing.remove(&done) {
                batch.clear_failure(id, &done);
            }
        }
        batch.source_state(&self.source.id, state.clone());
        let applied = apply_blocking(&self.ctx.store, batch).await?;
        self.report.count_applied(&applied);
        Ok(())
    }
}
