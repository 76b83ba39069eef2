//! One poll of an OAI-PMH data provider (`oai = URL`): the repository harvested as a Source
//! (OAI-PMH 2.0 and its harvester guidelines).
//!
//! 1. Identify, at every poll: its `granularity` (how `from` is written), `deletedRecord`
//!    (whether deletions can be followed incrementally), `earliestDatestamp` and `adminEmail`
//!    go into the source's state, where the source's page shows them.
//! 2. ListMetadataFormats, until the format has been seen once: a `metadata_prefix` the
//!    repository does not offer is an error naming the formats it does.
//! 3. ListRecords (`list`), one list per configured set or one for the whole repository. The
//!    first poll lists everything; later polls send `from` = the previous complete harvest's
//!    first `responseDate` less [`OVERLAP`], in the repository's granularity — never the newest
//!    datestamp seen, as lists are not in date order (vufindharvest PR #8). A repository
//!    that refuses the range is asked in windows (`window`), from `earliestDatestamp` when
//!    there is no `from`.
//! 4. Each page is applied as it arrives (`apply`) and stays applied whatever happens later.
//!    Only when every list ended does the position move; a list that failed leaves it, so the
//!    next poll reads the range again, and the report shows both what was applied and why the
//!    poll failed.
//!
//! Deletions: a `status="deleted"` header deletes the resource. A repository that keeps no
//! deleted records (`deletedRecord` `no` or `transient`) is also listed in full every
//! `oai_relist`, and what such a complete list no longer names is deleted, as for a complete
//! Resource List. `deletes = false` keeps everything.

mod apply;
mod list;
mod objects;
mod origin;
mod request;
mod window;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use url::Url;

use self::apply::{Staged, Target, apply_page, stage};
use self::list::{ListArgs, Lister};
use self::request::{answered, call_moved, call_ok, verb_url};
use self::window::refused;
use crate::config::{OaiSource, Source};
use crate::harvest::commit::apply_blocking;
use crate::harvest::ctx::{Ctx, HarvestError};
use crate::harvest::oai_error::OaiHarvestError;
use crate::harvest::report::SourceReport;
use crate::model::W3cDateTime;
use crate::model::oai::Granularity;
use crate::store::{Batch, OaiState, SourceState};

/// Subtracted from the previous `responseDate` for the next `from`: records stamped just
/// before a response may become visible just after it (guidelines §3; DNB in lobid-gnd#350).
pub(crate) const OVERLAP: Duration = Duration::from_secs(300);

/// One poll of `source`; see the module docs.
pub(crate) async fn harvest_oai(
    ctx: &Ctx,
    source: &Source,
    oai: &OaiSource,
    sets: &[String],
    mut state: SourceState,
) -> Result<SourceReport, HarvestError> {
    let started = W3cDateTime::now();
    let wrap = |e: OaiHarvestError| HarvestError::Oai {
        source_id: source.id.clone(),
        url: oai.base.to_string(),
        source: Box::new(e),
    };
    let mut os = state.oai.take().unwrap_or_default();
    let moved = identify(ctx, source, &mut os).await.map_err(wrap)?;
    crate::harvest::moves::note(&mut state.status, &source.id, &source.url, moved.as_ref());
    if os.metadata_namespace.is_empty() && os.metadata_schema.is_empty() {
        check_format(ctx, source, oai, &mut os).await.map_err(wrap)?;
    }
    let granularity = Granularity::parse(&os.granularity).unwrap_or(Granularity::Day);
    let full = full_list_due(&os, oai.relist, &started);
    let from = match full {
        true => None,
        false => os.response_date.as_deref().and_then(|d| d.parse().ok()).map(|d| granularity.from_after(&d, OVERLAP)),
    };
    let format_uri =
        if os.metadata_namespace.is_empty() { os.metadata_schema.clone() } else { os.metadata_namespace.clone() };
    let target = Target { ctx, source, oai, sets, format_uri: &format_uri };
    let mut report = SourceReport::new(&source.id);
    // What a full list names is collected to delete what it leaves out; a source holding no
    // record yet (a baseline) has nothing to leave out, so neither the collection nor the scan
    // of its records afterwards is needed (one harvest of a source runs at a time).
    let mut seen = match full && holds_records(&target).await? {
        true => Some(HashSet::new()),
        false => None,
    };
    let lists: Vec<Option<String>> =
        if oai.sets.is_empty() { vec![None] } else { oai.sets.iter().cloned().map(Some).collect() };
    let mut first_date = None;
    for set in lists {
        tracing::info!(source.id = %source.id, set = ?set, from = ?from, "OAI-PMH ListRecords");
        match read_set(&target, set, from.as_deref(), granularity, &mut os, &mut seen, &mut report).await? {
            Ok(date) => first_date = first_date.or(date),
            Err(e) => {
                tracing::warn!(source.id = %source.id, error = %crate::error::chain(&e), "OAI-PMH list failed");
                report.error = Some(crate::error::chain(&wrap(e)).to_string());
                break;
            }
        }
    }
    let mut batch = Batch::new();
    if report.error.is_none() {
        report.complete = true;
        os.response_date = Some(first_date.unwrap_or_else(|| started.to_string()));
        if full {
            os.full_list_at = Some(started);
        }
        if let Some(seen) = seen {
            report.listed_all = true;
            deletions(&target, seen, &mut batch).await?;
        }
        state.baselined = true;
    }
    state.oai = Some(os);
    batch.source_state(&source.id, state);
    let applied = apply_blocking(&ctx.store, batch).await?;
    report.count_applied(&applied);
    Ok(report)
}

/// Identify: what the repository says about itself, kept in `os`; and where the base URL
/// moved for good, when Identify answered a permanent redirect (the new base URL: the target
/// without its query).
async fn identify(ctx: &Ctx, source: &Source, os: &mut OaiState) -> Result<Option<Url>, OaiHarvestError> {
    let url = verb_url(&source.url, &[("verb", "Identify")]);
    let (response, mut moved) = call_moved(ctx, source, "Identify", &url).await?;
    if let Some(m) = moved.as_mut() {
        m.set_query(None);
        m.set_fragment(None);
    }
    let id = answered(response, "Identify", &url)?
        .identify
        .ok_or_else(|| OaiHarvestError::Identify("the response holds no <Identify>".into()))?;
    if Granularity::parse(&id.granularity).is_none() {
        tracing::warn!(source.id = %source.id, granularity = %id.granularity, "unknown granularity; using days");
    }
    if id.protocol_version.trim() != "2.0" {
        tracing::warn!(source.id = %source.id, version = %id.protocol_version, "protocolVersion is not 2.0");
    }
    if os.granularity != id.granularity || os.deleted_record != id.deleted_record {
        tracing::info!(source.id = %source.id, repository = %id.repository_name, granularity = %id.granularity,
            deleted_record = %id.deleted_record, earliest = %id.earliest_datestamp, "OAI-PMH repository identified");
    }
    os.repository_name = id.repository_name;
    os.admin_emails = id.admin_emails;
    os.granularity = id.granularity;
    os.earliest_datestamp = id.earliest_datestamp;
    os.deleted_record = id.deleted_record;
    Ok(moved)
}

/// ListMetadataFormats: the configured prefix must be offered; its namespace and schema are
/// kept (the `describedby` of every record).
async fn check_format(ctx: &Ctx, source: &Source, oai: &OaiSource, os: &mut OaiState) -> Result<(), OaiHarvestError> {
    let url = verb_url(&source.url, &[("verb", "ListMetadataFormats")]);
    let formats = call_ok(ctx, source, "ListMetadataFormats", &url).await?.formats;
    let Some(f) = formats.iter().find(|f| f.prefix == oai.metadata_prefix) else {
        let offered = formats.into_iter().map(|f| f.prefix).collect();
        return Err(OaiHarvestError::FormatNotOffered { prefix: oai.metadata_prefix.clone(), offered });
    };
    os.metadata_namespace.clone_from(&f.namespace);
    os.metadata_schema.clone_from(&f.schema);
    Ok(())
}

/// Whether this poll lists everything: the first, and for a repository that keeps no deleted
/// records, once every `relist`.
fn full_list_due(os: &OaiState, relist: Duration, now: &W3cDateTime) -> bool {
    if os.response_date.is_none() {
        return true;
    }
    if os.deleted_record.trim() == "persistent" {
        return false;
    }
    let relist = i64::try_from(relist.as_secs()).unwrap_or(i64::MAX);
    os.full_list_at.is_none_or(|at| now.unix_timestamp().saturating_sub(at.unix_timestamp()) >= relist)
}

/// One set (or the whole repository) from `from` on: one list, or, once the repository has
/// refused a range, consecutive windows (`window`); the first `responseDate`. A refused range
/// is asked again in halves, and the size that worked is kept in `os` for the next polls.
/// Errors as for [`read_list`].
async fn read_set(
    t: &Target<'_>,
    set: Option<String>,
    from: Option<&str>,
    g: Granularity,
    os: &mut OaiState,
    seen: &mut Option<HashSet<String>>,
    report: &mut SourceReport,
) -> Result<Result<Option<String>, OaiHarvestError>, HarvestError> {
    let now = W3cDateTime::now().unix_timestamp();
    // The lower bound of a baseline is the repository's earliestDatestamp.
    let mut start = window::start_of(from.unwrap_or(&os.earliest_datestamp), g);
    let mut first = None;
    // Bounded: each round moves `start` on by a window, or halves the window down to the floor.
    loop {
        let size = os.window_secs.map(|w| i64::try_from(w).unwrap_or(i64::MAX));
        let (wfrom, until) = match (size, start) {
            (Some(w), Some(s)) => window::window(s, w, now, g),
            _ => (from.map(str::to_owned).unwrap_or_default(), None),
        };
        let wfrom = Some(wfrom).filter(|f| !f.is_empty());
        let windowed = until.is_some();
        let args = ListArgs { prefix: t.oai.metadata_prefix.clone(), set: set.clone(), from: wfrom, until };
        match read_list(t, args, seen, report).await? {
            Ok(date) => {
                first = first.or(date);
                match (windowed, size, start) {
                    (true, Some(w), Some(s)) => start = Some(s.saturating_add(w)),
                    _ => return Ok(Ok(first)),
                }
            }
            Err((e, true)) if refused(&e) => {
                let Some(half) = start.and_then(|s| window::halve(size.unwrap_or(now - s), g)) else {
                    return Ok(Err(e));
                };
                tracing::warn!(source.id = %t.source.id, window_secs = half, error = %crate::error::chain(&e),
                    "the repository refused the range; asking in smaller windows");
                os.window_secs = u64::try_from(half).ok();
            }
            Err((e, _)) => return Ok(Err(e)),
        }
    }
}

/// Records a store batch grows to while the batch before it commits. A batch holds whatever
/// pages arrived during the previous commit, at least one: the committer's group commit
/// (`harvest::commit`), so a store slower than the repository pays its fixed costs per
/// commit — the syncs of the pack and the journal above all — once per several pages, and one
/// as fast as the repository still commits page by page.
const MAX_GROUP: usize = 2_000;

/// Reads one list to its end, applying its pages; the list's first `responseDate`. The outer
/// error ends the poll (the store failed); the inner one ends only the list, and says whether
/// it came before any page (so concerns the list's range).
///
/// Pages are applied while the next ones are fetched, read and stored: a list is a chain of
/// tokens, so this overlap is all the concurrency it allows. Each round commits the records in
/// hand as one batch while fetching pages, and putting their records' documents into the
/// store (`apply::stage`), until that commit is done (and one page after, as a fetch is never
/// abandoned halfway), or [`MAX_GROUP`] records are waiting; the next round commits those.
/// Whatever was read before the list ends or fails is applied before this returns, and every
/// batch is durable when its apply returns, so the caller moves the source's position only
/// over committed records.
async fn read_list(
    t: &Target<'_>,
    args: ListArgs,
    seen: &mut Option<HashSet<String>>,
    report: &mut SourceReport,
) -> Result<Result<Option<String>, (OaiHarvestError, bool)>, HarvestError> {
    let mut lister = Lister::new(t.ctx, t.source, &t.oai.base, args);
    let mut in_hand: Vec<Staged> = Vec::new();
    // Bounded by the lister's request cap: every round fetches at least one page.
    loop {
        if *t.ctx.shutdown.borrow() {
            if !in_hand.is_empty() {
                apply_page(t, in_hand, seen, report).await?;
            }
            report.interrupted = true;
            return Ok(Err((OaiHarvestError::Loop { why: "shutdown".into(), requests: 0 }, false)));
        }
        let batch = std::mem::take(&mut in_hand);
        let committed = AtomicBool::new(batch.is_empty());
        let fetch = fetch_pages(t, &mut lister, &committed);
        let apply = async {
            let applied = match batch.is_empty() {
                true => Ok(()),
                false => apply_page(t, batch, seen, report).await,
            };
            committed.store(true, Ordering::Release);
            applied
        };
        let (fetched, applied) = tokio::join!(fetch, apply);
        applied?;
        let fetched = fetched?;
        report.skipped += fetched.skipped;
        in_hand = fetched.staged;
        if let Some(end) = fetched.end {
            if !in_hand.is_empty() {
                apply_page(t, in_hand, seen, report).await?;
            }
            return Ok(end);
        }
    }
}

/// The end of a list, as [`read_list`] returns it.
type ListEnd = Result<Option<String>, (OaiHarvestError, bool)>;

/// What one round of [`fetch_pages`] brought.
struct Fetched {
    /// The records read, their documents stored, ready to commit.
    staged: Vec<Staged>,
    /// Records skipped for want of an identifier.
    skipped: u64,
    /// The list's end, if it came.
    end: Option<ListEnd>,
}

/// Fetches pages, and stores their records' documents, until `committed` is set (checked
/// after each page), [`MAX_GROUP`] records are in hand, a shutdown is asked for, or the list
/// ends. The error is the store's, which ends the poll.
async fn fetch_pages(t: &Target<'_>, lister: &mut Lister<'_>, committed: &AtomicBool) -> Result<Fetched, HarvestError> {
    let mut out = Fetched { staged: Vec::new(), skipped: 0, end: None };
    // Bounded by the lister's request cap.
    loop {
        let at_start = lister.at_start();
        match lister.next_page().await {
            Ok(Some(page)) => {
                if page.repaired > 0 {
                    tracing::warn!(source.id = %t.source.id, repaired = page.repaired,
                        "characters XML forbids were repaired in a ListRecords page");
                }
                let staged = stage(t, page.records, &mut out.skipped).await?;
                if out.staged.is_empty() {
                    out.staged = staged;
                } else {
                    out.staged.extend(staged);
                }
            }
            Ok(None) => {
                out.end = Some(Ok(lister.response_date.take()));
                return Ok(out);
            }
            Err(e) => {
                out.end = Some(Err((e, at_start)));
                return Ok(out);
            }
        }
        if committed.load(Ordering::Acquire) || out.staged.len() >= MAX_GROUP || *t.ctx.shutdown.borrow() {
            return Ok(out);
        }
    }
}

/// Whether the store holds any record of the source, live or deleted.
async fn holds_records(t: &Target<'_>) -> Result<bool, HarvestError> {
    let (store, prefix) = (t.ctx.store.clone(), t.ctx.naming.resource_prefix(&t.source.id));
    let first = tokio::task::spawn_blocking(move || store.raw_records_in_range(&prefix, "", None).next().transpose())
        .await
        .map_err(crate::harvest::ctx::join_error)??;
    Ok(first.is_some())
}

/// After a complete full list: the records held but no longer listed, deleted (unless
/// `deletes = false`). The held records are read undecoded, only their URI and whether they
/// are deleted, and only the unlisted ones are kept: after a baseline that is every record.
async fn deletions(t: &Target<'_>, seen: HashSet<String>, batch: &mut Batch) -> Result<(), HarvestError> {
    if !t.source.settings.deletes {
        return Ok(());
    }
    let (store, prefix) = (t.ctx.store.clone(), t.ctx.naming.resource_prefix(&t.source.id));
    let gone = tokio::task::spawn_blocking(move || {
        let mut gone = Vec::new();
        for raw in store.raw_records_in_range(&prefix, "", None) {
            let raw = raw?;
            let view = raw.view()?;
            if !view.is_deleted() && !seen.contains(view.uri) {
                gone.push(view.uri.to_owned());
            }
        }
        Ok::<_, crate::store::StoreError>(gone)
    })
    .await
    .map_err(crate::harvest::ctx::join_error)??;
    let sets: Vec<&str> = t.sets.iter().map(String::as_str).collect();
    let stage = t.ctx.stage(&t.source.id);
    for uri in &gone {
        batch.stage_delete(&sets, uri, &stage);
    }
    Ok(())
}
