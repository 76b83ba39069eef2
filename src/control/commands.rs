//! The bodies of the commands that work on a stopped store and through a running service
//! alike. The command line calls them with a [`Console`] when it has the store to itself; the
//! service calls them with the command's [`Reply`](super::Reply). One body, so the text, the
//! JSON and the exit status cannot drift apart.

use std::io::Write as _;

use crate::config::{Config, ConfigError};
use crate::harvest::SteerError;
use crate::harvest::audit::AuditError;
use crate::naming::Naming;
use crate::provenance::{OriginChecker, ProvenanceError};
use crate::publish::PublishError;
use crate::store::{Store, StoreError};

/// Where a command's text goes.
pub trait Out {
    /// Text for standard output, exactly (add the newline).
    fn stdout(&mut self, text: &str);
    /// Text for standard error, exactly.
    fn stderr(&mut self, text: &str);
}

/// The process's own standard output and error.
#[derive(Debug, Clone, Copy, Default)]
pub struct Console;

impl Out for Console {
    fn stdout(&mut self, text: &str) {
        let _ = std::io::stdout().lock().write_all(text.as_bytes());
    }

    fn stderr(&mut self, text: &str) {
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }
}

impl Out for super::Reply {
    fn stdout(&mut self, text: &str) {
        super::Reply::stdout(self, text);
    }

    fn stderr(&mut self, text: &str) {
        super::Reply::stderr(self, text);
    }
}

/// Why a command failed as a command-line error (exit 2).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An id or key of the configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The provenance lookup.
    #[error(transparent)]
    Provenance(#[from] ProvenanceError),
    /// The audit.
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// Steering the harvester.
    #[error(transparent)]
    Steer(#[from] SteerError),
    /// The publisher refused a reloaded configuration.
    #[error(transparent)]
    Publish(#[from] PublishError),
    /// JSON output could not be made.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// Anything else, said plainly.
    #[error("{0}")]
    Refused(String),
}

/// `tributary failures`: each source's failing resources; exit 1 when there are any.
///
/// # Errors
/// An unknown `--source`, or a store that cannot be read.
pub fn failures(
    config: &Config,
    store: &Store,
    sources: &[String],
    limit: usize,
    json: bool,
    out: &mut dyn Out,
) -> Result<u8, CommandError> {
    let reports = config
        .select(sources)?
        .into_iter()
        .map(|s| store.failure_report(&s.id, limit))
        .collect::<Result<Vec<_>, _>>()?;
    if json {
        out.stdout(&format!("{}\n", serde_json::to_string_pretty(&reports)?));
    } else {
        reports.iter().for_each(|r| out.stdout(&format!("{r}\n")));
    }
    Ok(u8::from(reports.iter().any(|r| r.failing > 0)))
}

/// `tributary store stats`.
///
/// # Errors
/// A store that cannot be read.
pub fn stats(store: &Store, out: &mut dyn Out) -> Result<u8, CommandError> {
    out.stdout(&format!("{}\n", store.stats()?));
    Ok(0)
}

/// `tributary verify`: exit 1 on any problem.
///
/// # Errors
/// A store that cannot be read at all.
pub fn verify(store: &Store, out: &mut dyn Out) -> Result<u8, CommandError> {
    let report = store.verify()?;
    out.stdout(&format!("{report}\n"));
    Ok(u8::from(!report.is_clean()))
}

/// `tributary provenance`: exit 1 when nothing matches. With a checker, origins are fetched on
/// its runtime.
///
/// # Errors
/// A malformed query, or a store that cannot be read.
pub fn provenance(
    store: &Store,
    naming: &Naming,
    query: &str,
    checker: Option<(&OriginChecker, &tokio::runtime::Handle)>,
    json: bool,
    out: &mut dyn Out,
) -> Result<u8, CommandError> {
    let (text, found) = crate::provenance::provenance_cli(store, naming, query, checker, json)?;
    out.stdout(&format!("{text}\n"));
    Ok(u8::from(!found))
}

/// `tributary audit`: exit 1 unless every source audited is in sync.
///
/// # Errors
/// An unknown `--source`, a Source that cannot be read, or a store that cannot.
pub fn audit(
    config: &Config,
    store: &Store,
    sources: &[String],
    fetch: bool,
    json: bool,
    rt: &tokio::runtime::Handle,
    out: &mut dyn Out,
) -> Result<u8, CommandError> {
    let reports = rt.block_on(crate::harvest::audit::audit_sources(config, store, sources, fetch))?;
    if json {
        out.stdout(&format!("{}\n", serde_json::to_string_pretty(&reports)?));
    } else {
        reports.iter().for_each(|r| out.stdout(&format!("{r}\n")));
    }
    Ok(u8::from(!reports.iter().all(|r| r.is_in_sync())))
}

/// Live records deleted per commit by [`forget`].
const FORGET_BATCH: usize = 1_000;

/// `tributary source forget ID`: deletes every record of a source that is no longer configured,
/// publishing each deletion in its set's Change List (and so to push subscribers and OAI-PMH
/// harvesters), then forgets its state, failures and feed items. Its set is no longer published
/// after the next reload or restart.
///
/// # Errors
/// [`CommandError::Refused`] for a source still configured, or one the store does not know;
/// a store that fails.
pub fn forget(config: &Config, store: &Store, id: &str, out: &mut dyn Out) -> Result<u8, CommandError> {
    if config.source(id).is_some() {
        return Err(CommandError::Refused(format!(
            "source {id} is configured: remove it from {} (and reload) before forgetting it",
            config.path.display()
        )));
    }
    let naming = Naming::new(&config.aggregator.base_url);
    let prefix = naming.resource_prefix(id);
    if store.source_state(id)?.is_none() && store.records_with_prefix(&prefix).next().is_none() {
        return Err(CommandError::Refused(format!("the store holds nothing of a source {id:?}")));
    }
    let sets = [id];
    let mut deleted = 0u64;
    let mut batch = crate::store::Batch::new();
    // A snapshot's walk: the deletions committed meanwhile do not disturb it.
    for record in store.records_with_prefix(&prefix) {
        let record = record?;
        if record.is_deleted() {
            continue;
        }
        batch.delete(&sets, &record.uri);
        if batch.len() >= FORGET_BATCH {
            deleted += applied_deletions(store, std::mem::take(&mut batch))?;
        }
    }
    deleted += applied_deletions(store, batch)?;
    store.remove_source(id)?;
    tracing::warn!(source.id = %id, deleted, "source forgotten: its records were deleted and the deletions published");
    out.stdout(&format!(
        "forgot {id}: {deleted} records deleted, the deletions published; its set is no longer published after the next reload or restart\n"
    ));
    Ok(0)
}

fn applied_deletions(store: &Store, mut batch: crate::store::Batch) -> Result<u64, StoreError> {
    if batch.is_empty() {
        return Ok(0);
    }
    let applied = store.apply(&mut batch)?;
    Ok(applied.ops.iter().filter(|op| op.outcome == crate::store::Outcome::Deleted).count() as u64)
}

/// `tributary deletions [--source ID]… [apply|keep]`: lists the deletions held for the
/// operator (exit 1 when there are any), or applies and publishes them, or drops them and
/// keeps the resources. `sources` empty: every source holding some (only when listing).
///
/// # Errors
/// An unknown `--source`, `apply`/`keep` without one, or a store that fails.
pub fn deletions(
    config: &Config,
    store: &Store,
    sources: &[String],
    action: super::wire::DeletionAction,
    json: bool,
    out: &mut dyn Out,
) -> Result<u8, CommandError> {
    use super::wire::DeletionAction;
    let known = |id: &String| config.source(id).is_some() || store.source_state(id).ok().flatten().is_some();
    if let Some(id) = sources.iter().find(|id| !known(id)) {
        config.select(std::slice::from_ref(id))?;
    }
    if action != DeletionAction::List && sources.is_empty() {
        return Err(CommandError::Refused("name the source: `tributary deletions apply --source ID`".into()));
    }
    if action == DeletionAction::List {
        return list_held(store, sources, json, out);
    }
    for id in sources {
        let n = match action {
            DeletionAction::Apply => store.apply_held(id)?,
            _ => store.keep_held(id)?,
        };
        clear_held_status(store, id)?;
        let did =
            if action == DeletionAction::Apply { "applied and published" } else { "dropped; the resources are kept" };
        tracing::warn!(source.id = %id, deletions = n, "held deletions {did} by the operator");
        out.stdout(&format!("{id}: {n} held deletions {did}\n"));
    }
    Ok(0)
}

fn list_held(store: &Store, sources: &[String], json: bool, out: &mut dyn Out) -> Result<u8, CommandError> {
    let mut rows = Vec::new();
    match sources {
        [] => rows = store.held_deletions(None)?,
        ids => {
            for id in ids {
                rows.extend(store.held_deletions(Some(id))?);
            }
        }
    }
    if json {
        out.stdout(&format!("{}\n", serde_json::to_string_pretty(&rows)?));
        return Ok(u8::from(!rows.is_empty()));
    }
    if rows.is_empty() {
        out.stdout("no deletions held\n");
        return Ok(0);
    }
    let mut by_source: std::collections::BTreeMap<&str, Vec<&crate::store::HeldDeletion>> = Default::default();
    for r in &rows {
        by_source.entry(&r.source).or_default().push(r);
    }
    for (source, held) in by_source {
        let since = held.iter().map(|r| r.first_seen).min().map(|t| t.to_string()).unwrap_or_default();
        out.stdout(&format!("{source}: {} deletions held since {since}\n", held.len()));
        for r in held {
            let state = if r.held { "" } else { " (being judged by the pass in flight)" };
            out.stdout(&format!("  {}  first seen {} by {}{state}\n", r.uri, r.first_seen, r.pass));
        }
        out.stdout(&format!(
            "  release: `tributary deletions apply --source {source}` (delete and publish) or `tributary deletions keep --source {source}`\n"
        ));
    }
    Ok(1)
}

/// The source's status says no deletions are held any more.
fn clear_held_status(store: &Store, source: &str) -> Result<(), StoreError> {
    if let Some(mut state) = store.source_state(source)? {
        state.status.held_deletions = 0;
        state.status.held_since = None;
        store.save_source_state(source, &state)?;
    }
    Ok(())
}

/// `tributary takedown`: takes resources down, lists the takedowns, or lifts them.
///
/// # Errors
/// A malformed target, or a store that fails.
pub fn takedown(
    config: &Config,
    store: &Store,
    action: &super::wire::TakedownAction,
    out: &mut dyn Out,
) -> Result<u8, CommandError> {
    use super::wire::TakedownAction;
    let naming = Naming::new(&config.aggregator.base_url);
    match action {
        TakedownAction::Add { targets, reason } => {
            if reason.trim().is_empty() {
                return Err(CommandError::Refused(
                    "a takedown needs --reason TEXT (kept for operators, never served)".into(),
                ));
            }
            for target in targets {
                let (t, records) = takedown_of(store, &naming, target, reason)?;
                let n = store.take_down(&t, &records)?;
                tracing::warn!(target = %target, records = n, "taken down by the operator");
                out.stdout(&format!("{target}: taken down; {n} records deleted and the deletions published\n"));
            }
            Ok(0)
        }
        TakedownAction::List { json } => {
            let all = store.takedowns()?;
            if *json {
                out.stdout(&format!("{}\n", serde_json::to_string_pretty(&all)?));
            } else if all.is_empty() {
                out.stdout("no takedowns\n");
            } else {
                for t in &all {
                    out.stdout(&format!(
                        "{}  taken down {}  ({} records)  reason: {}\n",
                        t.target,
                        t.at,
                        t.records.len(),
                        t.reason
                    ));
                }
            }
            Ok(0)
        }
        TakedownAction::Lift { targets } => {
            let mut code = 0;
            for target in targets {
                match store.lift_takedown(target)? {
                    Some(t) => {
                        let n = fetch_again(store, &t)?;
                        tracing::warn!(target = %target, "takedown lifted by the operator");
                        out.stdout(&format!(
                            "{target}: takedown lifted; {n} resources are fetched again at their sources' next poll\n"
                        ));
                    }
                    None => {
                        out.stderr(&format!("{target}: no takedown of that target (`tributary takedown list`)\n"));
                        code = 1;
                    }
                }
            }
            Ok(code)
        }
    }
}

/// The takedown of `target` and the live records it deletes (with their sets).
/// The sets a record is in and its URI: what a takedown deletes.
type Holding = (Vec<String>, String);

fn takedown_of(
    store: &Store,
    naming: &Naming,
    target: &str,
    reason: &str,
) -> Result<(crate::store::Takedown, Vec<Holding>), CommandError> {
    let query = crate::publish::provenance::Query::parse(target).map_err(CommandError::Refused)?;
    let found = crate::publish::provenance::lookup(store, naming, &query)?;
    let mut keys = vec![match target.strip_prefix("sha-256:") {
        Some(hex) => crate::store::sha_key(hex),
        None => crate::store::uri_key(target),
    }];
    let mut records = Vec::new();
    let mut deleted = Vec::new();
    // What the target names, then every live record with the same bytes: the same bitstream
    // under another URI or from another source is the same resource to take down.
    let mut uris: Vec<String> = found.resources.iter().map(|r| r.uri.clone()).collect();
    for r in &found.resources {
        if let Ok(id) = r.state.sha256.parse::<crate::store::BlobId>() {
            uris.extend(store.uris_by_sha256(&id)?);
        }
    }
    let mut seen_uris = std::collections::HashSet::new();
    for uri in uris.into_iter().filter(|u| seen_uris.insert(u.clone())) {
        let Some(rec) = store.record(&uri)? else { continue };
        keys.extend(crate::store::record_keys(&rec.upstream, &rec.origin, &rec.sha256.to_hex()));
        deleted.push((rec.source.clone(), rec.uri.clone()));
        if !rec.is_deleted() {
            records.push((rec.sets.clone(), rec.uri.clone()));
        }
    }
    let mut seen = std::collections::HashSet::new();
    keys.retain(|k| seen.insert(k.clone()));
    let t = crate::store::Takedown {
        target: target.to_owned(),
        reason: reason.to_owned(),
        at: crate::model::W3cDateTime::now(),
        keys,
        records: deleted,
    };
    Ok((t, records))
}

/// After a lift: each record the takedown deleted is recorded as failing, so its source's next
/// poll fetches it again and it comes back as a creation (a Change List source would not list
/// it again until it changes).
fn fetch_again(store: &Store, t: &crate::store::Takedown) -> Result<usize, StoreError> {
    let mut batch = crate::store::Batch::new();
    let mut n = 0;
    for (source, uri) in &t.records {
        let Some(rec) = store.record(uri)? else { continue };
        if !rec.is_deleted() {
            continue;
        }
        batch.fail(crate::store::NewFailure {
            source: source.clone(),
            uri: uri.clone(),
            upstream: rec.upstream.clone(),
            reason: "taken down, then lifted: fetched again at the next poll".into(),
            listing: rec.listing(),
        });
        n += 1;
    }
    store.apply(&mut batch)?;
    Ok(n)
}
