//! [`Simulator`]: the shared handle to one simulated Source — its state behind a lock, the
//! manual controls tests use (`step`, `advance`, `close_change_list`), the background ticker,
//! and read-only views (resources with digests, change history) for assertions.
//!
//! The lock is a `std::sync::RwLock`: it is never held across an `.await`, events take it for
//! writing for one event at a time, and each request holds it for reading only while one
//! document is rendered. Bitstreams and dump packages are generated after it is released.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use url::Url;

use super::SimError;
use super::clock::to_datetime;
use super::config::SimConfig;
use super::dump::{self, DumpBuild, Snapshot};
use super::push::{PushHub, SubscriberInfo};
use super::render::{self, Site, media_type, target_path};
use super::state::{self, State};
use crate::model::{Change, W3cDateTime};

/// How many dump builds are kept, so a Destination that read a dump a few changes ago can
/// still fetch its packages.
const DUMP_BUILDS_KEPT: usize = 4;
/// The most events one tick applies; a ticker that fell further behind drops the backlog
/// rather than stalling readers with one huge burst.
const MAX_EVENTS_PER_TICK: u64 = 10_000;

/// One simulated Source. Cloning is cheap and shares the Source.
#[derive(Debug, Clone)]
pub struct Simulator {
    pub(super) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) site: Site,
    state: RwLock<State>,
    dumps: Mutex<VecDeque<Arc<DumpBuild>>>,
    /// The hub and channel, with push on.
    pub(super) push: Option<Arc<PushHub>>,
}

/// A resource as currently served, with the digests of its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceInfo {
    /// Its absolute URL.
    pub url: String,
    /// 1 when created, +1 per update.
    pub version: u32,
    /// `lastmod`.
    pub lastmod: W3cDateTime,
    /// Bytes.
    pub length: u64,
    /// Lowercase hex md5 of the bytes.
    pub md5: String,
    /// Lowercase hex sha-256 of the bytes.
    pub sha256: String,
    /// Media type.
    pub media_type: &'static str,
}

/// One change as the Change Lists report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeEvent {
    /// The changed resource's URL.
    pub url: String,
    /// Created, updated or deleted.
    pub change: Change,
    /// When (simulator clock; strictly increasing).
    pub datetime: W3cDateTime,
    /// Version after the change (the deleted version for deletes).
    pub version: u32,
    /// Length of the new bytes (`None` for deletes).
    pub length: Option<u64>,
    /// Hex sha-256 of the new bytes (`None` for deletes).
    pub sha256: Option<String>,
}

impl Simulator {
    /// Creates the Source with its initial resources. Nothing changes until [`step`](Self::step)
    /// is called or [`start_ticking`](Self::start_ticking) runs.
    ///
    /// # Errors
    /// [`SimError::Config`] when the configuration is invalid, [`SimError::Hub`] when push is
    /// on and the hub's HTTP client cannot be built.
    pub fn new(config: SimConfig) -> Result<Self, SimError> {
        config.validate()?;
        let site = Site::new(config);
        let state = State::new(&site);
        let push = match site.config.push {
            true => Some(Arc::new(PushHub::new(&site, state.state_ms).map_err(SimError::Hub)?)),
            false => None,
        };
        let inner = Inner { site, state: RwLock::new(state), dumps: Mutex::new(VecDeque::new()), push };
        Ok(Simulator { inner: Arc::new(inner) })
    }

    /// With push on, the hub's URL (`{base}hub`) and the channel's topic (`{base}notifications`).
    pub fn push_channel(&self) -> Option<(String, String)> {
        self.inner.push.as_ref().map(|p| (p.hub().to_owned(), p.topic().to_owned()))
    }

    /// With push on, the verified subscriptions whose lease runs and what their deliveries did.
    pub fn subscribers(&self) -> Vec<SubscriberInfo> {
        self.inner.push.as_ref().map(|p| p.subscribers()).unwrap_or_default()
    }

    /// Change-notification payloads built so far (push on; 0 otherwise).
    pub fn notifications_sent(&self) -> u64 {
        self.inner.push.as_ref().map_or(0, |p| p.sent())
    }

    /// Notifies the changes applied since the last notification, as one payload; unless
    /// `coalesce` and a delivery is still under way, when they wait for a later call (see
    /// `push`).
    fn notify(&self, coalesce: bool) {
        if let Some(push) = &self.inner.push
            && !(coalesce && push.delivering())
        {
            push.publish(&self.inner.site, || self.write().take_outbox());
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SimConfig {
        &self.inner.site.config
    }

    /// The absolute URL of a path served by this Source (e.g. `/.well-known/resourcesync`).
    pub fn url(&self, path: &str) -> String {
        self.inner.site.url(path)
    }

    /// The base URL.
    pub fn base_url(&self) -> &Url {
        &self.inner.site.config.base_url
    }

    pub(super) fn read(&self) -> RwLockReadGuard<'_, State> {
        self.inner.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.inner.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies `n` change events synchronously, one lock acquisition each, so concurrent
    /// readers see every intermediate state but never half an event. With push on, the `n`
    /// changes are then notified as one payload.
    pub fn step(&self, n: usize) {
        for _ in 0..n {
            self.write().apply_event(&self.inner.site);
        }
        self.notify(false);
    }

    /// Moves the virtual clock forward by `d` (the real clock ignores this) and closes the open
    /// Change List if its rollover period has passed.
    pub fn advance(&self, d: Duration) {
        let mut st = self.write();
        st.clock.advance(d.as_millis() as i64);
        st.roll_if_due(&self.inner.site);
    }

    /// Closes the open Change List now (even an empty one) and opens the next.
    pub fn close_change_list(&self) {
        self.write().force_close(&self.inner.site);
    }

    /// Events applied so far; names the current resource set.
    pub fn generation(&self) -> u64 {
        self.read().generation
    }

    /// Changes no longer reported because their Change Lists were dropped.
    pub fn dropped_changes(&self) -> u64 {
        self.read().dropped_changes
    }

    /// Every live resource (data, then its metadata record with links on), by id.
    pub fn resources(&self) -> Vec<ResourceInfo> {
        let st = self.read();
        st.listed(0..u64::MAX)
            .map(|l| ResourceInfo {
                url: self.url(&target_path(l.target)),
                version: l.version,
                lastmod: to_datetime(l.lastmod_ms),
                length: l.digests.length,
                md5: hex::encode(l.digests.md5),
                sha256: hex::encode(l.digests.sha256),
                media_type: media_type(l.target),
            })
            .collect()
    }

    /// The changes in the retained Change Lists, oldest first.
    pub fn history(&self) -> Vec<ChangeEvent> {
        let st = self.read();
        st.history()
            .map(|c| ChangeEvent {
                url: self.url(&target_path(c.target)),
                change: c.change,
                datetime: to_datetime(c.datetime_ms),
                version: c.version,
                length: c.digests.map(|d| d.length),
                sha256: c.digests.map(|d| hex::encode(d.sha256)),
            })
            .collect()
    }

    /// Paths of every ResourceSync document served right now: Source Description, Capability
    /// List, Resource List (and its parts when it is an index), Change List Index, every
    /// retained Change List, and with the dump on, the Resource Dump and its manifests.
    ///
    /// # Errors
    /// [`SimError::Dump`] if the dump cannot be built.
    pub fn document_paths(&self) -> Result<Vec<String>, SimError> {
        let mut paths: Vec<String> =
            [render::SOURCE_DESCRIPTION, render::CAPABILITY_LIST, render::RESOURCE_LIST].map(String::from).to_vec();
        {
            let st = self.read();
            let site = &self.inner.site;
            if st.listed_count(site.config.links) > site.config.list_limit {
                paths.extend((1..=site.part_count(&st)).map(render::resource_list_part));
            }
            paths.push(render::CHANGE_LIST_INDEX.into());
            paths.extend(st.closed.iter().map(|l| render::change_list(l.seq)));
            paths.push(render::change_list(st.open.seq));
        }
        if self.config().dump {
            let build = self.current_dump()?;
            paths.push(render::RESOURCE_DUMP.into());
            paths.extend((1..=build.packages.len()).map(|k| dump::manifest_path(build.generation, k)));
        }
        Ok(paths)
    }

    /// The dump of the current generation, built on first use.
    pub(super) fn current_dump(&self) -> Result<Arc<DumpBuild>, SimError> {
        let snap = {
            let st = self.read();
            if let Some(b) = self.cached_dump(st.generation) {
                return Ok(b);
            }
            let resources = st.resources.iter().map(|(id, r)| (*id, r.clone())).collect();
            Snapshot { generation: st.generation, at_ms: st.state_ms, resources }
        };
        let build = Arc::new(dump::build(&self.inner.site, &snap)?);
        let mut cache = self.inner.dumps.lock().unwrap_or_else(PoisonError::into_inner);
        if !cache.iter().any(|b| b.generation == build.generation) {
            cache.push_back(build.clone());
        }
        while cache.len() > DUMP_BUILDS_KEPT {
            cache.pop_front();
        }
        Ok(build)
    }

    /// A kept dump build of `generation`, if any.
    pub(super) fn cached_dump(&self, generation: u64) -> Option<Arc<DumpBuild>> {
        let cache = self.inner.dumps.lock().unwrap_or_else(PoisonError::into_inner);
        cache.iter().find(|b| b.generation == generation).cloned()
    }

    /// Starts applying changes at the configured rate on a tokio task (also closing Change
    /// Lists whose period has passed, even when the rate is zero). Stops when the returned
    /// [`Ticker`] is dropped or stopped.
    ///
    /// # Panics
    /// When called outside a tokio runtime.
    pub fn start_ticking(&self) -> Ticker {
        Ticker { handle: tokio::spawn(tick_loop(self.clone())), sim: self.clone() }
    }

    fn tick(&self, events: u64) {
        for _ in 0..events {
            self.write().apply_event(&self.inner.site);
        }
        self.write().roll_if_due(&self.inner.site);
        self.notify(true);
    }
}

/// The background task started by [`Simulator::start_ticking`]; dropping it stops the task.
#[derive(Debug)]
pub struct Ticker {
    handle: tokio::task::JoinHandle<()>,
    sim: Simulator,
}

impl Ticker {
    /// Stops ticking.
    pub fn stop(self) {}
}

impl Drop for Ticker {
    /// Stops, and notifies the changes still waiting for a delivery to end (push on).
    fn drop(&mut self) {
        self.handle.abort();
        self.sim.notify(false);
    }
}

/// Applies `rate × elapsed` events in total, in small batches on a steady interval, so the
/// rate holds on average whatever the tick granularity.
async fn tick_loop(sim: Simulator) {
    let rate = sim.config().change_rate_per_sec;
    let every =
        if rate > 0.0 { Duration::from_secs_f64((1.0 / rate).clamp(0.01, 1.0)) } else { Duration::from_secs(1) };
    let mut interval = tokio::time::interval(every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let start = tokio::time::Instant::now();
    let mut applied = 0u64;
    loop {
        interval.tick().await;
        let due = (start.elapsed().as_secs_f64() * rate) as u64;
        let n = due.saturating_sub(applied);
        applied = due;
        sim.tick(n.min(MAX_EVENTS_PER_TICK));
    }
}

/// The bytes of a live resource with its metadata, or whether it was deleted.
pub(super) enum Lookup {
    /// Live: bytes, md5 for the ETag, lastmod (ms).
    Live(Vec<u8>, [u8; 16], i64),
    /// Existed once, deleted since.
    Gone,
    /// Never existed.
    Missing,
}

impl Simulator {
    /// Looks a resource up and generates its bytes outside the lock.
    pub(super) fn lookup(&self, target: state::Target) -> Lookup {
        let (id, is_meta) = match target {
            state::Target::Data(id) => (id, false),
            state::Target::Meta(id) => (id, true),
        };
        let found = {
            let st = self.read();
            match st.resources.get(&id) {
                Some(r) if !is_meta || r.meta.is_some() => Some(r.clone()),
                _ if id < st.next_id && (!is_meta || self.config().links) => return Lookup::Gone,
                _ => None,
            }
        };
        let Some(r) = found else { return Lookup::Missing };
        let (md5, t) = match (is_meta, r.meta) {
            (true, Some((t, d))) => (d.md5, t),
            _ => (r.data.md5, r.data_ms),
        };
        let body = state::body(self.config(), target, &r).unwrap_or_default();
        Lookup::Live(body, md5, t)
    }
}
