//! Audit (spec §5.2): is the store in sync with what a Source says it holds right now?
//!
//! The source's records are loaded once into a map keyed by upstream URI (one prefix scan of
//! the store, on a blocking thread), then its current Resource List is streamed entry by
//! entry through the [`IndexWalker`] and each entry is looked up: listed but not held is
//! *missing*, held live but never listed is *extra*, held but different is *changed* — by
//! hash when the list gives a digest the store can compare, else by length, else by lastmod.
//! With `fetch`, each listed resource that is held is downloaded again and its sha-256
//! compared with the stored one instead of trusting the list (bounded concurrency; the
//! fetcher's politeness applies).
//!
//! Only a list read in full is compared: a walk error is an [`AuditError`], never a report,
//! because a partial list would show every unread resource as extra.
//!
//! Records are matched by their `upstream` field: the `<loc>` as written, or else as resolved
//! against the list URL.
//!
//! A Destination that follows Change Lists is usually *ahead* of the Resource List, so the
//! Source's Change Lists are layered on top of it: for every URI changed after the list's
//! `at` (or without a `datetime`, which Python-written lists never give), its last change
//! stands instead of the list entry — a deletion means it should not be held, a create or
//! update is compared like a list entry.
//!
//! # Architecture
//! Reads the store and fetches through the fetcher; never imports the publisher or web code.

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;
use sha2::Digest as _;
use tokio::task::JoinSet;
use url::Url;

use crate::config::Settings;
use crate::fetch::{Fetched, Fetcher};
use crate::harvest::document::DiscoverError;
use crate::harvest::index::{IndexWalker, WalkLimits};
use crate::model::{Entry, HashAlgorithm, HashList, W3cDateTime};
use crate::naming::Naming;
use crate::store::{BlobId, Store, StoreError};

/// Why an audit could not be completed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    /// The Resource List could not be read in full.
    #[error("cannot read the Resource List")]
    List(#[from] DiscoverError),
    /// The store could not be read.
    #[error("cannot read the store")]
    Store(#[from] StoreError),
    /// A background task failed (a panic or shutdown).
    #[error("an audit task failed")]
    Task(#[from] tokio::task::JoinError),
    /// `--source` named a source that is not in the configuration.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The Source offers no Resource List to audit against.
    #[error("source `{0}` offers no Resource List to audit against")]
    NoResourceList(String),
    /// The source is a feed or an OAI-PMH repository: it has no Resource List to audit against.
    #[error(
        "source `{0}` is a feed or an OAI-PMH repository; audit compares a ResourceSync Source's Resource List with the store"
    )]
    Feed(String),
    /// The HTTP client could not be built.
    #[error("cannot set up the HTTP client")]
    Client(#[from] crate::fetch::FetchError),
}

/// Why a resource counts as changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangedBy {
    /// A digest in the list differs from the stored one.
    Hash,
    /// No comparable digest; the listed length differs.
    Length,
    /// No digest or length; the listed lastmod differs.
    Lastmod,
    /// `--fetch`: the re-downloaded bytes hash differently.
    Content,
}

impl fmt::Display for ChangedBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ChangedBy::Hash => "hash",
            ChangedBy::Length => "length",
            ChangedBy::Lastmod => "lastmod",
            ChangedBy::Content => "content",
        })
    }
}

/// A held resource that differs from the Source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Changed {
    /// The upstream URI.
    pub uri: String,
    /// What differs.
    pub by: ChangedBy,
}

/// A resource `--fetch` could not re-download.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FetchFailure {
    /// The upstream URI.
    pub uri: String,
    /// The fetcher's message.
    pub error: String,
}

/// The counts of an [`AuditReport`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AuditCounts {
    /// Distinct resources in the Resource List.
    pub listed: u64,
    /// Live records of the source in the store.
    pub held: u64,
    /// Listed, held and equal.
    pub in_sync: u64,
    /// Listed, not held.
    pub missing: u64,
    /// Listed, not held because the operator took it down (not counted as missing).
    pub taken_down: u64,
    /// Held, not listed.
    pub extra: u64,
    /// Held and listed, but different.
    pub changed: u64,
    /// `--fetch` downloads that failed.
    pub fetch_errors: u64,
}

/// The outcome of auditing one source. URIs are upstream URIs, sorted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditReport {
    /// The source id.
    pub source: String,
    /// The Resource List audited against.
    pub list_url: String,
    /// The list's `at`, when given.
    pub list_at: Option<String>,
    /// True when resources were re-downloaded (`--fetch`).
    pub fetched: bool,
    /// The counts.
    pub counts: AuditCounts,
    /// Listed, not held.
    pub missing: Vec<String>,
    /// Listed, not held because the operator took it down (not a problem).
    pub taken_down: Vec<String>,
    /// Held, not listed.
    pub extra: Vec<String>,
    /// Different.
    pub changed: Vec<Changed>,
    /// Downloads that failed under `--fetch`.
    pub fetch_errors: Vec<FetchFailure>,
}

impl AuditReport {
    /// True when nothing is missing, extra, changed or unverifiable.
    pub fn is_in_sync(&self) -> bool {
        self.missing.is_empty() && self.extra.is_empty() && self.changed.is_empty() && self.fetch_errors.is_empty()
    }
}

impl fmt::Display for AuditReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = if self.is_in_sync() { "in sync" } else { "NOT in sync" };
        let how = if self.fetched { ", re-downloaded" } else { "" };
        writeln!(f, "source {}: {state} with {}{how}", self.source, self.list_url)?;
        let c = &self.counts;
        writeln!(
            f,
            "  listed {}, held {}, in sync {}, missing {}, extra {}, changed {}, fetch errors {}",
            c.listed, c.held, c.in_sync, c.missing, c.extra, c.changed, c.fetch_errors
        )?;
        if !self.taken_down.is_empty() {
            writeln!(f, "  taken down (kept out by `tributary takedown`, not missing): {}", self.taken_down.len())?;
        }
        for uri in &self.missing {
            writeln!(f, "  missing  {uri}")?;
        }
        for uri in &self.extra {
            writeln!(f, "  extra    {uri}")?;
        }
        for c in &self.changed {
            writeln!(f, "  changed  {} (by {})", c.uri, c.by)?;
        }
        for e in &self.fetch_errors {
            writeln!(f, "  error    {}: {}", e.uri, e.error)?;
        }
        Ok(())
    }
}

/// What the audit needs of one live record.
#[derive(Debug)]
struct Held {
    sha256: BlobId,
    md5: Option<String>,
    length: u64,
    declared: HashList,
    lastmod: Option<W3cDateTime>,
    seen: bool,
}

/// Audits each configured source (or only those in `only`): discovers its Resource List and
/// compares it with the store. One report per source, in configuration order.
///
/// # Errors
/// An unknown source id, a source without a Resource List, or any [`audit_source`] error.
pub async fn audit_sources(
    config: &crate::config::Config,
    store: &Store,
    only: &[String],
    fetch: bool,
) -> Result<Vec<AuditReport>, AuditError> {
    let chosen = config.select(only)?;
    let fetcher = Fetcher::from_config(config)?;
    // Parked origins are asked nothing by an audit either.
    let parks = crate::harvest::parks::Keeper::start(store, &fetcher).await;
    let naming = Naming::new(&config.aggregator.base_url);
    let mut reports = Vec::new();
    for source in chosen {
        // Named on purpose, a feed is an error; among all sources it is passed over.
        let not_rs = source.feed.is_some() || source.oai.is_some();
        if not_rs && only.is_empty() {
            tracing::info!(source.id = %source.id, "a feed or OAI-PMH source: not audited");
            continue;
        }
        if not_rs {
            return Err(AuditError::Feed(source.id.clone()));
        }
        let found = crate::harvest::discover::discover(
            &fetcher,
            &source.url,
            source.capability_list.as_ref(),
            &source.settings,
        )
        .await?;
        let list = found.capabilities.resourcelist.ok_or_else(|| AuditError::NoResourceList(source.id.clone()))?;
        let ctx = AuditCtx { settings: &source.settings, store, fetcher: &fetcher, naming: &naming };
        let changes = found.capabilities.changelist.as_ref();
        reports.push(audit_with_changes(&ctx, &source.id, &list, changes, fetch).await?);
    }
    parks.finish().await;
    Ok(reports)
}

/// Audits source `source_id` against its Resource List (or Resource List Index) at
/// `list_url`; with `fetch`, re-downloads every listed resource the store holds.
///
/// # Errors
/// [`AuditError::List`] when the list cannot be read in full, [`AuditError::Store`] when the
/// store cannot be read. Failed downloads under `fetch` are reported, not errors.
pub async fn audit_source(
    settings: &Settings,
    store: &Store,
    fetcher: &Fetcher,
    naming: &Naming,
    source_id: &str,
    list_url: &Url,
    fetch: bool,
) -> Result<AuditReport, AuditError> {
    let ctx = AuditCtx { settings, store, fetcher, naming };
    audit_with_changes(&ctx, source_id, list_url, None, fetch).await
}

/// What an audit of one source works with.
pub struct AuditCtx<'a> {
    /// The source's settings.
    pub settings: &'a Settings,
    /// The store.
    pub store: &'a Store,
    /// The fetcher.
    pub fetcher: &'a Fetcher,
    /// Tributary's naming scheme.
    pub naming: &'a Naming,
}

/// As [`audit_source`], with the Change List (or Index) at `changes` layered on the Resource
/// List (see the module docs).
///
/// # Errors
/// As [`audit_source`]; a Change List that cannot be read in full is [`AuditError::List`].
pub async fn audit_with_changes(
    ctx: &AuditCtx<'_>,
    source_id: &str,
    list_url: &Url,
    changes: Option<&Url>,
    fetch: bool,
) -> Result<AuditReport, AuditError> {
    let (settings, fetcher) = (ctx.settings, ctx.fetcher);
    let mut overlay = match changes {
        Some(u) => read_changes(fetcher, settings, u).await?,
        None => HashMap::new(),
    };
    let held = load_held(ctx.store, ctx.naming, source_id).await?;
    let mut audit = Audit::new(source_id, list_url, fetch, held);
    let mut walker = IndexWalker::new(fetcher, list_url.clone(), settings, WalkLimits::default());
    let mut fetches = Fetches { set: JoinSet::new(), max: settings.concurrency.get() as usize };
    let mut deferred: HashMap<String, (Entry, Option<Url>)> = HashMap::new();
    // Bounded by the walk's document and entry limits.
    while let Some(entry) = walker.next_entry().await? {
        let base = walker.leaf().map(|(u, _)| u.clone());
        if !overlay.is_empty()
            && let Some(key) = changed_key(&overlay, &entry, base.as_ref())
        {
            deferred.insert(key, (entry, base));
            continue;
        }
        if let Some(target) = audit.entry(&entry, base.as_ref())
            && fetch
        {
            fetches.spawn(fetcher, settings, target, &mut audit).await?;
        }
    }
    let at = walker.root_header().and_then(|h| h.md.as_ref()).and_then(|m| m.at);
    audit.list_at = at.map(|t| t.to_string());
    overlay.retain(|_, (_, datetime)| datetime.is_none_or(|d| at.is_none_or(|at| d > at)));
    for (key, (entry, base)) in deferred {
        overlay.entry(key).or_insert((Some((entry, base)), None));
    }
    for (change, _) in overlay.into_values() {
        // Deleted: it should not be held; held live, it stays unseen and is reported extra.
        let Some((entry, base)) = change else { continue };
        if let Some(target) = audit.entry(&entry, base.as_ref())
            && fetch
        {
            fetches.spawn(fetcher, settings, target, &mut audit).await?;
        }
    }
    fetches.drain(&mut audit).await?;
    let mut report = audit.finish();
    // Listed upstream but taken down by the operator: kept out on purpose, not missing.
    let (store, missing) = (ctx.store.clone(), std::mem::take(&mut report.missing));
    let (taken_down, missing) = tokio::task::spawn_blocking(move || {
        let mut out = (Vec::new(), Vec::new());
        for uri in missing {
            match store.takedown_matching(&[crate::store::uri_key(&uri)])? {
                Some(_) => out.0.push(uri),
                None => out.1.push(uri),
            }
        }
        Ok::<_, StoreError>(out)
    })
    .await??;
    report.counts.missing = missing.len() as u64;
    report.counts.taken_down = taken_down.len() as u64;
    (report.missing, report.taken_down) = (missing, taken_down);
    Ok(report)
}

/// Per URI, its last change: the entry (with the list it came from) or `None` for a deletion,
/// and the change's `datetime`.
type Overlay = HashMap<String, (Option<(Entry, Option<Url>)>, Option<W3cDateTime>)>;

/// Every change in the Change List (or Index) at `url`, last change per URI.
async fn read_changes(fetcher: &Fetcher, settings: &Settings, url: &Url) -> Result<Overlay, AuditError> {
    let mut walker = IndexWalker::new(fetcher, url.clone(), settings, WalkLimits::default());
    let mut out = Overlay::new();
    // Bounded by the walk's document and entry limits.
    while let Some(entry) = walker.next_entry().await? {
        let base = walker.leaf().map(|(u, _)| u.clone());
        let Some(key) = base.as_ref().and_then(|b| b.join(entry.loc.trim()).ok()).map(String::from) else { continue };
        let md = entry.md.clone().unwrap_or_default();
        let change = (md.change != Some(crate::model::Change::Deleted)).then_some((entry, base));
        out.insert(key, (change, md.datetime));
    }
    Ok(out)
}

/// The overlay key of a Resource List entry whose URI changed, if it did.
fn changed_key(overlay: &Overlay, entry: &Entry, base: Option<&Url>) -> Option<String> {
    if overlay.contains_key(&entry.loc) {
        return Some(entry.loc.clone());
    }
    let resolved = base.and_then(|b| b.join(entry.loc.trim()).ok()).map(String::from)?;
    overlay.contains_key(&resolved).then_some(resolved)
}

/// The live records of a source, keyed by upstream URI.
async fn load_held(store: &Store, naming: &Naming, source_id: &str) -> Result<HashMap<String, Held>, AuditError> {
    let prefix = source_prefix(naming, source_id);
    let store = store.clone();
    let task = tokio::task::spawn_blocking(move || -> Result<HashMap<String, Held>, StoreError> {
        let mut held = HashMap::new();
        for record in store.records_with_prefix(&prefix) {
            let r = record?;
            if r.is_deleted() {
                continue;
            }
            let h = Held {
                sha256: r.sha256,
                md5: r.md5,
                length: r.length,
                declared: r.declared,
                lastmod: r.lastmod,
                seen: false,
            };
            held.insert(r.upstream, h);
        }
        Ok(held)
    });
    Ok(task.await??)
}

/// `{base}r/{source}/`: the prefix of every record of the source, taken from [`Naming`] itself
/// so the two cannot drift apart.
fn source_prefix(naming: &Naming, source_id: &str) -> String {
    let probe = naming.resource(source_id, "http://h/").unwrap_or_default();
    probe.strip_suffix("http/h/").map_or_else(|| format!("{}r/{source_id}/", naming.base()), str::to_owned)
}

/// A resource to re-download: its upstream key, URL and stored sha-256.
struct Target {
    key: String,
    url: Url,
    sha256: BlobId,
}

/// The audit's running state.
struct Audit {
    report: AuditReport,
    held: HashMap<String, Held>,
    fetch: bool,
    list_at: Option<String>,
}

impl Audit {
    fn new(source: &str, list_url: &Url, fetch: bool, held: HashMap<String, Held>) -> Self {
        let report = AuditReport {
            source: source.to_owned(),
            list_url: list_url.to_string(),
            list_at: None,
            fetched: fetch,
            counts: AuditCounts { held: held.len() as u64, ..AuditCounts::default() },
            missing: Vec::new(),
            taken_down: Vec::new(),
            extra: Vec::new(),
            changed: Vec::new(),
            fetch_errors: Vec::new(),
        };
        Audit { report, held, fetch, list_at: None }
    }

    /// Compares one list entry; returns what to re-download under `fetch`.
    fn entry(&mut self, entry: &Entry, base: Option<&Url>) -> Option<Target> {
        // Resolving costs a URL parse per entry; only pay it when the `<loc>` as written
        // is not a key, or when the resource is to be fetched.
        let resolve = || base.and_then(|b| b.join(&entry.loc).ok());
        let key = if self.held.contains_key(&entry.loc) {
            entry.loc.clone()
        } else {
            resolve().map_or_else(|| entry.loc.clone(), |u| u.to_string())
        };
        let Some(held) = self.held.get_mut(&key) else {
            self.report.missing.push(key);
            return None;
        };
        if std::mem::replace(&mut held.seen, true) {
            return None; // listed twice: counted once
        }
        self.report.counts.listed += 1;
        if self.fetch {
            let url = resolve().or_else(|| Url::parse(&key).ok());
            let Some(url) = url else {
                self.report.fetch_errors.push(FetchFailure { uri: key, error: "not a URL".into() });
                return None;
            };
            return Some(Target { key, url, sha256: held.sha256 });
        }
        match compare(entry, held) {
            Some(by) => self.report.changed.push(Changed { uri: key, by }),
            None => self.report.counts.in_sync += 1,
        }
        None
    }

    fn fetched(&mut self, key: String, result: Result<bool, String>) {
        match result {
            Ok(true) => self.report.counts.in_sync += 1,
            Ok(false) => self.report.changed.push(Changed { uri: key, by: ChangedBy::Content }),
            Err(error) => self.report.fetch_errors.push(FetchFailure { uri: key, error }),
        }
    }

    fn finish(mut self) -> AuditReport {
        let mut r = self.report;
        r.list_at = self.list_at.take();
        r.missing.sort();
        r.missing.dedup();
        r.extra = self.held.into_iter().filter(|(_, h)| !h.seen).map(|(k, _)| k).collect();
        r.extra.sort();
        r.changed.sort_by(|a, b| a.uri.cmp(&b.uri));
        r.fetch_errors.sort_by(|a, b| a.uri.cmp(&b.uri));
        r.counts.listed += r.missing.len() as u64;
        r.counts.missing = r.missing.len() as u64;
        r.counts.extra = r.extra.len() as u64;
        r.counts.changed = r.changed.len() as u64;
        r.counts.fetch_errors = r.fetch_errors.len() as u64;
        r
    }
}

/// Hash first (any digest the store can compare), then length, then lastmod.
fn compare(entry: &Entry, held: &Held) -> Option<ChangedBy> {
    let md = entry.md.as_ref();
    if let Some(hashes) = md.and_then(|m| m.hash.as_ref()) {
        let mut compared = false;
        for d in &hashes.0 {
            let same = match &d.algorithm {
                HashAlgorithm::Sha256 => Some(same_sha256(&d.value, &held.sha256)),
                HashAlgorithm::Md5 => held.md5.as_deref().or(held.declared.get(&d.algorithm)).map(|v| v == d.value),
                other => held.declared.get(other).map(|v| v == d.value),
            };
            match same {
                Some(false) => return Some(ChangedBy::Hash),
                Some(true) => compared = true,
                None => {}
            }
        }
        if compared {
            return None;
        }
    }
    if let Some(length) = md.and_then(|m| m.length) {
        return (length != held.length).then_some(ChangedBy::Length);
    }
    match (entry.lastmod, held.lastmod) {
        (Some(listed), Some(stored)) if listed != stored => Some(ChangedBy::Lastmod),
        _ => None,
    }
}

fn same_sha256(hex_value: &str, id: &BlobId) -> bool {
    let mut raw = [0u8; 32];
    hex::decode_to_slice(hex_value, &mut raw).is_ok_and(|()| raw == id.0)
}

/// Re-downloads under `fetch`, at most `max` at once.
struct Fetches {
    set: JoinSet<(String, Result<bool, String>)>,
    max: usize,
}

impl Fetches {
    async fn spawn(
        &mut self,
        fetcher: &Fetcher,
        settings: &Settings,
        t: Target,
        audit: &mut Audit,
    ) -> Result<(), AuditError> {
        while self.set.len() >= self.max.max(1) {
            self.join_one(audit).await?;
        }
        let (fetcher, settings) = (fetcher.clone(), settings.clone());
        self.set.spawn(async move {
            let result = rehash(&fetcher, &settings, &t.url).await.map(|id| id == t.sha256);
            (t.key, result)
        });
        Ok(())
    }

    async fn join_one(&mut self, audit: &mut Audit) -> Result<(), AuditError> {
        if let Some(done) = self.set.join_next().await {
            let (key, result) = done?;
            audit.fetched(key, result);
        }
        Ok(())
    }

    async fn drain(&mut self, audit: &mut Audit) -> Result<(), AuditError> {
        // Bounded: each turn removes one task.
        while !self.set.is_empty() {
            self.join_one(audit).await?;
        }
        Ok(())
    }
}

/// The sha-256 of the bytes `url` serves now.
async fn rehash(fetcher: &Fetcher, settings: &Settings, url: &Url) -> Result<BlobId, String> {
    let mut resp =
        match fetcher.get_stream(url, settings, None).await.map_err(|e| crate::error::chain(&e).to_string())? {
            Fetched::Modified(r) => r,
            Fetched::NotModified => return Err("unexpected 304 Not Modified".into()),
        };
    let mut hasher = sha2::Sha256::new();
    // Bounded by the fetcher's size cap and deadlines.
    while let Some(chunk) = resp.chunk().await.map_err(|e| crate::error::chain(&e).to_string())? {
        hasher.update(&chunk);
    }
    Ok(BlobId(hasher.finalize().into()))
}
