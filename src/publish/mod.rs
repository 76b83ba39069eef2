//! Publishing: Tributary as a ResourceSync Source. Pure functions (and two small caches) from
//! store views to documents — the Source Description, per-set Capability Lists, Resource Lists
//! (paged into an index past a limit), Change List Indexes with closed and open Change Lists —
//! plus the inherited-link policy and the provenance lookup.
//!
//! # Architecture
//! Depends on [`crate::model`] (documents and the writer), [`crate::store`] (records and the
//! change log) and [`crate::naming`] (every URI). It must not depend on axum, tokio or
//! reqwest, nor on the harvester: the web server calls it on its blocking pool and streams what
//! it writes; the CLI calls it directly. Every method blocks on the store.
//!
//! Two kinds of state live here, both derived from the store and safe to lose on restart:
//! the Resource List partition of each set (`plan`) and the boundaries of closed Change
//! Lists (`changes`). Both are append-only so that what a Destination was told stays true.
//!
//! Times follow §14.8: `at`, `from`, `until`, `datetime` and `<lastmod>` are Tributary's own
//! (when Tributary's copy changed); the origin's times appear only on the `via` link.

mod change_dumps;
mod changes;
mod configure;
mod describe;
mod dumps;
mod entries;
mod error;
mod feed;
pub mod links;
mod notify;
pub mod oai;
mod oai_provenance;
mod plan;
pub mod provenance;
mod render;
mod resources;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use changes::{ChangeListDoc, OpenChangeList};
pub use describe::{SetSummary, SourceSummary};
pub use dumps::{DumpFile, DumpLimits, DumpPackage, ResourceDump};
pub use error::PublishError;
pub use feed::{FeedOptions, FeedPage, RECENT_EVENTS};
pub use links::{LinkPolicies, LinkPolicy};
pub use notify::{NOTIFICATION_ENTRIES, Notification, NotifyPosition};
pub use resources::{ListJob, ResourceListDoc};

use crate::model::SITEMAP_MAX_ENTRIES;
use crate::naming::Naming;
use crate::store::Store;

/// One set Tributary republishes: a Capability List over the resources of its sources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetConfig {
    /// The set id, used in URLs (`sets/{id}/…`).
    pub id: String,
    /// Ids of the sources whose resources the set holds.
    pub sources: Vec<String>,
}

impl SetConfig {
    /// A set of several sources (a merged set).
    pub fn new(id: impl Into<String>, sources: impl IntoIterator<Item = impl Into<String>>) -> Self {
        SetConfig { id: id.into(), sources: sources.into_iter().map(Into::into).collect() }
    }

    /// The implicit set of one source: same id, that source only.
    pub fn source(id: impl Into<String>) -> Self {
        let id = id.into();
        SetConfig { sources: vec![id.clone()], id }
    }

    /// Every set to publish: one per source (in order), then the merged sets.
    pub fn all(
        sources: impl IntoIterator<Item = impl Into<String>>,
        merged: impl IntoIterator<Item = SetConfig>,
    ) -> Vec<SetConfig> {
        sources.into_iter().map(SetConfig::source).chain(merged).collect()
    }
}

/// When a Change List closes and a new one opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rollover {
    /// A list closes once it holds this many events (1..=50,000).
    pub max_events: u64,
    /// A list also closes at the end of this period (aligned to the Unix epoch, so daily
    /// lists end at midnight UTC); `None`: by count only.
    pub period: Option<Duration>,
}

impl Default for Rollover {
    fn default() -> Self {
        Rollover { max_events: 1_000, period: Some(Duration::from_secs(86_400)) }
    }
}

/// Size limits of the documents served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Entries per Resource List; past it the list becomes an index with parts (1..=50,000).
    pub resource_list_entries: usize,
    /// Change List rollover.
    pub change_list: Rollover,
    /// Resource Dump packages.
    pub dump: DumpLimits,
    /// Whether Resource Dumps and Change Dumps are published at all (`[publish] dumps`).
    pub dumps: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            resource_list_entries: SITEMAP_MAX_ENTRIES,
            change_list: Rollover::default(),
            dump: DumpLimits::default(),
            dumps: true,
        }
    }
}

/// A configured set with its derived state.
#[derive(Debug)]
struct SetView {
    config: SetConfig,
    /// `{base}r/{source}/` for each source, sorted: the key ranges of the set's records, in
    /// URI order (the prefixes end in `/`, so none is a prefix of another).
    prefixes: Vec<String>,
    plan: Mutex<plan::Plan>,
    /// Held while the plan is revalidated, so scans of one set run one at a time.
    plan_scan: Mutex<()>,
    /// Hashes of the live upstream URIs at the last validation: the link-rewriting filter
    /// (see `resources::republished_in`).
    upstreams: Mutex<Option<Arc<resources::UpstreamFilter>>>,
    changes: Mutex<changes::Layout>,
    /// The current Resource Dump; held while one is built, so builds of a set run one at a time.
    dump: Mutex<dumps::DumpState>,
}

/// Everything the publisher needs, built once at start-up. `Send + Sync`; share it in an `Arc`.
#[derive(Debug)]
pub struct Publisher {
    store: Store,
    naming: Naming,
    sets: Vec<SetView>,
    by_id: HashMap<String, usize>,
    /// Per source id, the ids of the sets that include it, in configuration order (asked per
    /// record by OAI-PMH headers and per bitstream request).
    by_source: HashMap<String, Vec<String>>,
    policies: LinkPolicies,
    limits: Limits,
    /// The WebSub hub of the sets' notification channels; `None`: no channels advertised.
    hub: Option<String>,
}

impl Publisher {
    /// Checks the configuration and prepares per-set state. `sets` should hold one set per
    /// source ([`SetConfig::source`]) plus each merged set; they are served in this order.
    ///
    /// # Errors
    /// [`PublishError::Config`] for an empty or non-URL-safe id, a duplicate set id, a set
    /// without sources, or limits outside `1..=50,000` (or a zero period); [`PublishError::Store`]
    /// when a saved partition cannot be read.
    pub fn new(
        store: Store,
        naming: Naming,
        sets: Vec<SetConfig>,
        policies: LinkPolicies,
        limits: Limits,
    ) -> Result<Publisher, PublishError> {
        check_limits(&limits)?;
        let mut by_id = HashMap::new();
        let mut views = Vec::with_capacity(sets.len());
        for (i, config) in sets.into_iter().enumerate() {
            check_set(&config)?;
            if by_id.insert(config.id.clone(), i).is_some() {
                return Err(PublishError::Config(format!("set id {:?} is configured twice", config.id)));
            }
            let mut prefixes: Vec<String> = config.sources.iter().map(|s| format!("{}r/{s}/", naming.base())).collect();
            prefixes.sort();
            prefixes.dedup();
            // A saved partition keeps the part numbers Destinations hold valid across restarts.
            let saved = store.publisher_state(&resources::plan_key(&config.id))?;
            let plan = saved.and_then(|b| plan::Plan::from_bytes(&b)).unwrap_or_default();
            let changes = changes::Layout::starting(&store, &config.id)?;
            views.push(SetView {
                config,
                prefixes,
                plan: Mutex::new(plan),
                plan_scan: Mutex::new(()),
                upstreams: Mutex::new(None),
                changes: Mutex::new(changes),
                dump: Mutex::new(dumps::DumpState::default()),
            });
        }
        let mut by_source: HashMap<String, Vec<String>> = HashMap::new();
        for v in &views {
            for source in &v.config.sources {
                let sets = by_source.entry(source.clone()).or_default();
                if sets.last() != Some(&v.config.id) {
                    sets.push(v.config.id.clone());
                }
            }
        }
        Ok(Publisher { store, naming, sets: views, by_id, by_source, policies, limits, hub: None })
    }

    /// The store read from.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The URI scheme.
    pub fn naming(&self) -> &Naming {
        &self.naming
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The configured sets, in order.
    pub fn sets(&self) -> impl Iterator<Item = &SetConfig> {
        self.sets.iter().map(|v| &v.config)
    }

    /// A set by id.
    pub fn set(&self, id: &str) -> Option<&SetConfig> {
        self.view(id).map(|v| &v.config)
    }

    /// Ids of the sets that include `source`, in configuration order.
    pub fn sets_of_source<'a>(&'a self, source: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.by_source.get(source).into_iter().flatten().map(String::as_str)
    }

    fn view(&self, id: &str) -> Option<&SetView> {
        self.by_id.get(id).map(|&i| &self.sets[i])
    }

    fn view_or_missing(&self, id: &str) -> Result<&SetView, PublishError> {
        self.view(id).ok_or_else(|| PublishError::UnknownSet(id.to_owned()))
    }

    /// The set, for a dump document or file: none while dumps are off, so nothing is built.
    fn dump_view(&self, id: &str) -> Result<&SetView, PublishError> {
        if !self.limits.dumps {
            return Err(PublishError::DumpsOff);
        }
        self.view_or_missing(id)
    }
}

fn check_limits(limits: &Limits) -> Result<(), PublishError> {
    let max = SITEMAP_MAX_ENTRIES;
    if !(1..=max).contains(&limits.resource_list_entries) {
        return Err(PublishError::Config(format!("resource list entries must be 1..={max}")));
    }
    if !(1..=max as u64).contains(&limits.change_list.max_events) {
        return Err(PublishError::Config(format!("change list events must be 1..={max}")));
    }
    if limits.change_list.period.is_some_and(|p| p.as_secs() == 0) {
        return Err(PublishError::Config("change list period must be at least one second".into()));
    }
    if !(1..=max).contains(&limits.dump.package_entries) || limits.dump.package_bytes == 0 {
        return Err(PublishError::Config(format!("dump packages must hold 1..={max} entries and at least one byte")));
    }
    Ok(())
}

/// Ids become URL path segments and store key parts: keep them to unreserved characters.
fn check_set(set: &SetConfig) -> Result<(), PublishError> {
    let ok = |id: &str| {
        !id.is_empty()
            && id != "."
            && id != ".."
            && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~'))
    };
    if !ok(&set.id) {
        return Err(PublishError::Config(format!("set id {:?} must be letters, digits, '-', '_', '.', '~'", set.id)));
    }
    if set.sources.is_empty() {
        return Err(PublishError::Config(format!("set {:?} has no sources", set.id)));
    }
    if let Some(bad) = set.sources.iter().find(|s| !ok(s)) {
        return Err(PublishError::Config(format!("source id {bad:?} in set {:?} is not URL-safe", set.id)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreOptions;

    fn publisher(sets: Vec<SetConfig>, limits: Limits) -> Result<Publisher, PublishError> {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_with(&dir.path().join("s"), &StoreOptions::small()).unwrap();
        let naming = Naming::new(&url::Url::parse("http://t.test/").unwrap());
        Publisher::new(store, naming, sets, LinkPolicies::default(), limits)
    }

    #[test]
    fn configuration_is_checked() {
        let ok = SetConfig::all(["a", "b"], [SetConfig::new("ab", ["a", "b"])]);
        assert!(publisher(ok.clone(), Limits::default()).is_ok());
        let bad =
            |sets: Vec<SetConfig>, limits: Limits| matches!(publisher(sets, limits), Err(PublishError::Config(_)));
        assert!(bad(vec![SetConfig::source("a"), SetConfig::source("a")], Limits::default()), "duplicate id");
        assert!(bad(vec![SetConfig::source("a/b")], Limits::default()), "not URL-safe");
        assert!(bad(vec![SetConfig::source("..")], Limits::default()));
        assert!(bad(vec![SetConfig::new("x", Vec::<String>::new())], Limits::default()), "no sources");
        let zero = Limits { resource_list_entries: 0, ..Limits::default() };
        assert!(bad(ok.clone(), zero));
        let huge = Limits { change_list: Rollover { max_events: 50_001, period: None }, ..Limits::default() };
        assert!(bad(ok.clone(), huge));
        let instant =
            Limits { change_list: Rollover { max_events: 10, period: Some(Duration::ZERO) }, ..Limits::default() };
        assert!(bad(ok, instant));
    }

    #[test]
    fn sets_of_a_source() {
        let p = publisher(SetConfig::all(["a", "b"], [SetConfig::new("ab", ["a", "b"])]), Limits::default()).unwrap();
        assert_eq!(p.sets_of_source("a").collect::<Vec<_>>(), ["a", "ab"]);
        assert_eq!(p.sets_of_source("zzz").count(), 0);
    }
}
