//! The subscribing side of push: ResourceSync Change Notification 1.0.1 over WebSub. For each
//! source with `push = "auto"` whose Capability List advertises a change-notification channel
//! (or whose `push_hub` / `push_topic` name one), Tributary subscribes at the hub with a
//! callback URL of its own under `public_url`, answers the hub's verification only for requests
//! it made, renews the lease before it ends, checks the signature of every delivery, and
//! applies the notified changes through the same path as a Change List's — fetched, verified,
//! stored, one change event each.
//!
//! # Architecture
//! - `lifecycle`: what a subscription needs next (subscribe, wait, renew, give up) — pure.
//! - `subscriber`: the per-source task carrying those steps out against the hub, and the
//!   unsubscription of subscriptions whose source left the configuration.
//! - `callback`: the axum routes under `{public_url}websub/{id}` the hub calls: verification
//!   (GET) and deliveries (POST). The web server mounts them; it never depends on this module.
//! - `payload`: reading and checking a notification — pure.
//! - `apply`: a checked notification applied under the source's turn (never interleaved with
//!   a poll), its interval checked against the last one applied (a gap asks for a poll now).
//!
//! Subscriptions live in the store (table `p`), so they outlast restarts. Polling goes on: at
//! `push_poll` while a verified subscription stands, at `poll` otherwise (the poll loop asks
//! [`crate::harvest::ctx::Turns`]). Depends on the fetcher, the store, the model, [`crate::websub`]
//! and the harvester's sync path; the web server never depends on it (the binary mounts
//! [`Push::router`]).

mod apply;
mod callback;
mod lifecycle;
mod payload;
mod subscriber;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use tokio::sync::{Mutex, Semaphore};
use url::Url;

use super::ctx::{Configured, Ctx, Turn, Turns, join_error};
use crate::config::{Config, PushMode, Settings, Source};
use crate::fetch::Fetcher;
use crate::store::{Store, StoreError, Subscription};

/// Deliveries being read, checked or applied at once; more are answered `503` (the hub
/// retries), so a flood costs bounded memory and work.
const MAX_DELIVERIES: usize = 16;

/// Payloads remembered per subscription to recognise replays: a replay older than this many
/// payloads (or from before a restart) is applied again, which finds what it names held, or
/// refuses what no longer matches its hashes.
const REMEMBERED_PAYLOADS: usize = 1_024;

/// Seconds before subscribing again after a first denial (doubling with each one in a row).
const DENIED_FIRST_RETRY: i64 = 5;
/// The longest wait after denials in a row: push is never given up for longer.
const DENIED_MAX_RETRY: i64 = 300;

/// The push subscriber: its state, shared by the per-source tasks and the callback routes.
/// Cheap to clone.
#[derive(Clone)]
pub struct Push {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    fetcher: Fetcher,
    /// Callback URLs are `{public_url}websub/{id}`.
    public_url: Url,
    /// The settings requests for a source no longer configured go out with.
    defaults: std::sync::RwLock<Settings>,
    turns: Turns,
    /// The harvester's context, once `run` has started (deliveries before it get `503`).
    ctx: OnceLock<Arc<Ctx>>,
    /// Serialises read-modify-write of subscription rows between the tasks and the routes.
    rows: Mutex<()>,
    deliveries: Semaphore,
    /// The signature tags of the payloads applied lately, per subscription id (see `seen`).
    applied: std::sync::Mutex<HashMap<String, std::collections::VecDeque<Vec<u8>>>>,
    /// Denials received in a row per subscription id, for the backoff of the next request.
    denials: std::sync::Mutex<HashMap<String, u32>>,
}

impl Push {
    /// The subscriber for `config`'s sources, keeping its subscriptions in `store` and
    /// reaching hubs through `fetcher`.
    pub fn new(config: &Config, store: &Store, fetcher: &Fetcher) -> Push {
        Push {
            inner: Arc::new(Inner {
                store: store.clone(),
                fetcher: fetcher.clone(),
                public_url: config.aggregator.public_url.clone(),
                defaults: std::sync::RwLock::new(config.defaults.clone()),
                turns: Turns::new(super::ctx::configured(config)),
                ctx: OnceLock::new(),
                rows: Mutex::new(()),
                deliveries: Semaphore::new(MAX_DELIVERIES),
                denials: std::sync::Mutex::default(),
                applied: std::sync::Mutex::default(),
            }),
        }
    }

    /// The callback routes (`GET` and `POST {public_url path}websub/{id}`), for the web server
    /// to serve beside its own.
    pub fn router(&self) -> axum::Router {
        callback::router(self.clone())
    }

    pub(crate) fn turns(&self) -> Turns {
        self.inner.turns.clone()
    }

    /// Starts the per-source subscription tasks once the harvester's context exists; they end
    /// at its shutdown.
    pub(crate) fn start(&self, ctx: Arc<Ctx>, tasks: &mut tokio::task::JoinSet<()>) {
        if self.inner.ctx.set(ctx).is_err() {
            return;
        }
        let mut pushing = Vec::new();
        for (id, turn) in self.inner.turns.all() {
            if turn.configured().is_some_and(|c| pushes(&c.source)) {
                pushing.push(id.clone());
                tasks.spawn(subscriber::manage(self.clone(), id));
            }
        }
        let push = self.clone();
        tasks.spawn(async move { subscriber::end_orphans(push, pushing).await });
    }

    /// After a reload changed the sources (their turns already say how): starts the
    /// subscription of each source `started` names that pushes now, and ends the subscriptions
    /// of sources that no longer push. Returns the tasks to run.
    pub(crate) fn reconfigured(
        &self,
        defaults: &Settings,
        started: &[String],
    ) -> Vec<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>> {
        *self.inner.defaults.write().unwrap_or_else(|p| p.into_inner()) = defaults.clone();
        let mut tasks: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>> = Vec::new();
        let mut pushing = Vec::new();
        for (id, turn) in self.inner.turns.all() {
            if turn.configured().is_some_and(|c| pushes(&c.source)) {
                if started.contains(&id) {
                    tasks.push(Box::pin(subscriber::manage(self.clone(), id.clone())));
                }
                pushing.push(id);
            }
        }
        let push = self.clone();
        tasks.push(Box::pin(async move { subscriber::end_orphans(push, pushing).await }));
        tasks
    }

    fn ctx(&self) -> Option<&Arc<Ctx>> {
        self.inner.ctx.get()
    }

    fn turn(&self, source: &str) -> Option<Arc<Turn>> {
        self.inner.turns.get(source)
    }

    /// A source that is configured for push now, with its sets.
    fn pushing(&self, source: &str) -> Option<Arc<Configured>> {
        self.inner.turns.get(source)?.configured().filter(|c| pushes(&c.source))
    }

    /// The settings for requests about sources no longer configured.
    fn defaults(&self) -> Settings {
        self.inner.defaults.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    async fn load(&self, id: &str) -> Result<Option<Subscription>, StoreError> {
        let (store, id) = (self.inner.store.clone(), id.to_owned());
        tokio::task::spawn_blocking(move || store.subscription(&id)).await.map_err(join_error)?
    }

    async fn all(&self) -> Result<Vec<Subscription>, StoreError> {
        let store = self.inner.store.clone();
        tokio::task::spawn_blocking(move || store.subscriptions()).await.map_err(join_error)?
    }

    async fn save(&self, sub: Subscription) -> Result<(), StoreError> {
        let store = self.inner.store.clone();
        tokio::task::spawn_blocking(move || store.save_subscription(&sub)).await.map_err(join_error)?
    }

    async fn remove(&self, id: &str) -> Result<(), StoreError> {
        let (store, id) = (self.inner.store.clone(), id.to_owned());
        tokio::task::spawn_blocking(move || store.remove_subscription(&id)).await.map_err(join_error)?
    }

    /// Counts a denial of subscription `id`; returns how long to wait (seconds) before asking
    /// again: [`DENIED_FIRST_RETRY`] doubling to [`DENIED_MAX_RETRY`], so a hub that really
    /// refuses is not hammered, and a forged denial costs push a few seconds at most.
    fn denied(&self, id: &str) -> i64 {
        let mut d = self.inner.denials.lock().unwrap_or_else(|p| p.into_inner());
        let n = d.entry(id.to_owned()).or_insert(0);
        *n = n.saturating_add(1);
        DENIED_FIRST_RETRY.saturating_mul(1 << (*n - 1).min(10)).min(DENIED_MAX_RETRY)
    }

    /// Whether a payload with signature `tag` was applied lately on subscription `id`. The
    /// tag is an HMAC of the body under the subscription's secret, so only the same body (and
    /// secret) has it: a captured delivery sent again.
    fn seen(&self, id: &str, tag: &[u8]) -> bool {
        let applied = self.inner.applied.lock().unwrap_or_else(|p| p.into_inner());
        applied.get(id).is_some_and(|tags| tags.iter().any(|t| t == tag))
    }

    /// Remembers the tag of a payload applied on `id`, the last [`REMEMBERED_PAYLOADS`] only.
    fn remember(&self, id: &str, tag: Vec<u8>) {
        let mut applied = self.inner.applied.lock().unwrap_or_else(|p| p.into_inner());
        let tags = applied.entry(id.to_owned()).or_default();
        if tags.len() >= REMEMBERED_PAYLOADS {
            tags.pop_front();
        }
        tags.push_back(tag);
    }

    /// A verification of `id` ends its run of denials.
    fn verified(&self, id: &str) {
        self.inner.denials.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
    }

    /// The callback URL for subscription `id`.
    fn callback(&self, id: &str) -> String {
        self.inner.public_url.join(&format!("websub/{id}")).map_or_else(|_| String::new(), String::from)
    }
}

/// Whether `source` is followed by push: a ResourceSync source with `push = "auto"`.
fn pushes(source: &Source) -> bool {
    source.feed.is_none() && source.oai.is_none() && source.settings.push == PushMode::Auto
}

/// Now, in Unix seconds.
fn unix_now() -> i64 {
    crate::model::W3cDateTime::now().unix_timestamp()
}

/// Counts a delivery by what became of it, on `/metrics`.
fn count(source: &str, outcome: &'static str) {
    metrics::counter!("tributary_push_deliveries_total", "source" => source.to_owned(), "outcome" => outcome)
        .increment(1);
}
