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

/// Everything the publisher needs: the store, the URI scheme, and the sets with their derived
/// state. `Send + Sync`; share it in an `Arc`. The sets, link policies and limits can be
/// replaced while it serves ([`Publisher::reconfigure`], for a reloaded configuration); each
/// request works on the layout it started with.
#[derive(Debug)]
pub struct Publisher {
    store: Store,
    naming: Naming,
    layout: std::sync::RwLock<Arc<Layout>>,
    /// The WebSub hub of the sets' notification channels; `None`: no channels advertised.
    hub: Option<String>,
}

/// The sets served and how, as one value a reload swaps whole.
#[derive(Debug)]
struct Layout {
    sets: Vec<Arc<SetView>>,
    by_id: HashMap<String, usize>,
    /// Per source id, the ids of the sets that include it, in configuration order (asked per
    /// record by OAI-PMH headers and per bitstream request).
    by_source: HashMap<String, Vec<String>>,
    policies: LinkPolicies,
    limits: Limits,
}

/// What [`Publisher::reconfigure`] changed among the sets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetChanges {
    /// Sets now published that were not.
    pub added: Vec<String>,
    /// Sets whose member sources changed.
    pub changed: Vec<String>,
    /// Sets no longer published.
    pub removed: Vec<String>,
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
        let layout = Layout::build(&store, &naming, sets, policies, limits, None)?;
        Ok(Publisher { store, naming, layout: std::sync::RwLock::new(Arc::new(layout)), hub: None })
    }

    /// Serves `sets` with `policies` and `limits` from now on. A set that keeps its id and
    /// sources keeps its derived state (its Resource List partition, its Change List layout,
    /// its current dump); requests already running finish on the layout they started with.
    ///
    /// # Errors
    /// As [`Publisher::new`]; the layout in force is then kept.
    pub fn reconfigure(
        &self,
        sets: Vec<SetConfig>,
        policies: LinkPolicies,
        limits: Limits,
    ) -> Result<SetChanges, PublishError> {
        let old = self.layout();
        let layout = Layout::build(&self.store, &self.naming, sets, policies, limits, Some(&old))?;
        let mut changes = SetChanges::default();
        for v in &layout.sets {
            match old.view(&v.config.id) {
                None => changes.added.push(v.config.id.clone()),
                Some(o) if o.config.sources != v.config.sources => changes.changed.push(v.config.id.clone()),
                Some(_) => {}
            }
        }
        changes.removed =
            old.sets.iter().filter(|v| layout.view(&v.config.id).is_none()).map(|v| v.config.id.clone()).collect();
        *self.layout.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(layout);
        Ok(changes)
    }

    fn layout(&self) -> Arc<Layout> {
        self.layout.read().unwrap_or_else(|p| p.into_inner()).clone()
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
    pub fn limits(&self) -> Limits {
        self.layout().limits
    }

    /// The configured sets, in order.
    pub fn sets(&self) -> std::vec::IntoIter<SetConfig> {
        self.layout().sets.iter().map(|v| v.config.clone()).collect::<Vec<_>>().into_iter()
    }

    /// A set by id.
    pub fn set(&self, id: &str) -> Option<SetConfig> {
        self.view(id).map(|v| v.config.clone())
    }

    /// Ids of the sets that include `source`, in configuration order.
    pub fn sets_of_source(&self, source: &str) -> std::vec::IntoIter<String> {
        self.layout().by_source.get(source).cloned().unwrap_or_default().into_iter()
    }

    fn view(&self, id: &str) -> Option<Arc<SetView>> {
        self.layout().view(id).cloned()
    }

    fn view_or_missing(&self, id: &str) -> Result<Arc<SetView>, PublishError> {
        self.view(id).ok_or_else(|| PublishError::UnknownSet(id.to_owned()))
    }

    /// The set, for a dump document or file: none while dumps are off, so nothing is built.
    fn dump_view(&self, id: &str) -> Result<Arc<SetView>, PublishError> {
        if !self.limits().dumps {
            return Err(PublishError::DumpsOff);
        }
        self.view_or_missing(id)
    }
}

impl Layout {
    /// Checks and prepares `sets`, reusing from `old` the state of each set it already serves
    /// with the same sources.
    fn build(
        store: &Store,
        naming: &Naming,
        sets: Vec<SetConfig>,
        policies: LinkPolicies,
        limits: Limits,
        old: Option<&Layout>,
    ) -> Result<Layout, PublishError> {
        check_limits(&limits)?;
        let mut by_id = HashMap::new();
        let mut views = Vec::with_capacity(sets.len());
        for (i, config) in sets.into_iter().enumerate() {
            check_set(&config)?;
            if by_id.insert(config.id.clone(), i).is_some() {
                return Err(PublishError::Config(format!("set id {:?} is configured twice", config.id)));
            }
            match old.and_then(|o| o.view(&config.id)).filter(|v| v.config == config) {
                Some(kept) => views.push(kept.clone()),
                None => views.push(Arc::new(SetView::open(store, naming, config)?)),
            }
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
        Ok(Layout { sets: views, by_id, by_source, policies, limits })
    }

    fn view(&self, id: &str) -> Option<&Arc<SetView>> {
        self.by_id.get(id).map(|&i| &self.sets[i])
    }
}

impl SetView {
    fn open(store: &Store, naming: &Naming, config: SetConfig) -> Result<SetView, PublishError> {
        let mut prefixes: Vec<String> = config.sources.iter().map(|s| format!("{}r/{s}/", naming.base())).collect();
        prefixes.sort();
        prefixes.dedup();
        // A saved partition keeps the part numbers Destinations hold valid across restarts.
        let saved = store.publisher_state(&resources::plan_key(&config.id))?;
        let plan = saved.and_then(|b| plan::Plan::from_bytes(&b)).unwrap_or_default();
        let changes = changes::Layout::starting(store, &config.id)?;
        Ok(SetView {
            config,
            prefixes,
            plan: Mutex::new(plan),
            plan_scan: Mutex::new(()),
            upstreams: Mutex::new(None),
            changes: Mutex::new(changes),
            dump: Mutex::new(dumps::DumpState::default()),
        })
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
        let changes = p
            .reconfigure(
                SetConfig::all(["a", "b", "c"], [SetConfig::new("ab", ["a", "b", "c"])]),
                LinkPolicies::default(),
                Limits::default(),
            )
            .unwrap();
        assert_eq!(changes.added, ["c"]);
        assert_eq!(changes.changed, ["ab"]);
        assert_eq!(p.sets_of_source("c").collect::<Vec<_>>(), ["c", "ab"]);
        let changes = p.reconfigure(SetConfig::all(["a"], []), LinkPolicies::default(), Limits::default()).unwrap();
        assert_eq!(changes.removed, ["b", "c", "ab"]);
        assert!(p.set("ab").is_none());
        assert_eq!(p.sets_of_source("zzz").count(), 0);
    }
}
