//! The built-in WebSub hub (W3C WebSub §5–§7) for Tributary's own topics: one per set,
//! `{base_url}sets/{set}/notifications`.
//!
//! A subscribe or unsubscribe request is checked (`request`), answered `202 Accepted`, and
//! verified asynchronously: the hub GETs the callback with `hub.mode`, `hub.topic`,
//! `hub.challenge` (random, 32 hex digits) and, on subscribe, `hub.lease_seconds`, and acts only
//! if the answer is 2xx with exactly the challenge as its body (§5.3). A request for a topic
//! that is not one of Tributary's is denied by a GET with `hub.mode=denied` (§5.2). A verified
//! subscription is saved in the store (table `w`) before it takes effect, so it survives a
//! restart; a renewal replaces the lease and the secret in one step (§5.1: no gap). Leases are
//! clamped into `[lease_min, lease_max]`; an expired subscription gets no more deliveries and
//! is removed by the next sweep or delivery attempt.
//!
//! Callbacks are held to the fetching address policy (`fetch::Outbound`): an IP-literal callback
//! on a refused network is answered 400 at once; a name resolving to one fails its verification,
//! so it never becomes a subscription.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use url::Url;

use super::error::NotifyError;
use crate::config::HubSettings;
use crate::fetch::{FetchError, Outbound};
use crate::model::W3cDateTime;
use crate::naming::Naming;
use crate::store::{HubSubscriber, Store};
use crate::websub::deliver::{DeliveryCounts, Ended, Payload, Policy, Target, Worker};
use crate::websub::intent;
// The host of a callback: what the per-host cap counts by, and log lines name.
use crate::websub::redact::host_of;
use crate::websub::request::{self, HubRequest, Mode};

/// Verifications (and denials) running at once; more wait their turn.
const VERIFY_SLOTS: usize = 16;

/// The hub's answer to a request: a status and a short text body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubAnswer {
    /// 202 when accepted for verification; 4xx / 5xx otherwise.
    pub status: u16,
    /// Why, for people.
    pub text: String,
    /// Seconds to wait before asking again (429 and 503).
    pub retry_after: Option<u64>,
}

impl HubAnswer {
    pub(super) fn new(status: u16, text: impl Into<String>) -> Self {
        HubAnswer { status, text: text.into(), retry_after: None }
    }

    fn later(status: u16, text: impl Into<String>, secs: u64) -> Self {
        HubAnswer { retry_after: Some(secs.max(1)), ..HubAnswer::new(status, text) }
    }
}

/// Subscribe requests per client address (`client_rate`, `CLIENT_BURST`).
type ClientLimiter = governor::DefaultKeyedRateLimiter<std::net::IpAddr>;

fn client_limiter(s: &HubSettings) -> Option<ClientLimiter> {
    let period = s.client_rate.interval()?;
    let burst = std::num::NonZeroU32::new(crate::config::CLIENT_BURST).unwrap_or(std::num::NonZeroU32::MIN);
    let quota = governor::Quota::with_period(period)?.allow_burst(burst);
    Some(governor::RateLimiter::keyed(quota))
}

/// A subscription in force, and the task delivering to it.
#[derive(Debug)]
struct Active {
    sub: HubSubscriber,
    worker: Arc<Worker>,
}

/// Which set ids the hub takes subscriptions for.
pub(crate) struct SetFilter(pub(crate) Box<dyn Fn(&str) -> bool + Send + Sync>);

impl std::fmt::Debug for SetFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SetFilter")
    }
}

/// The hub. Shared (`Arc`) by the web handler, the notifier and the tasks it spawns.
#[derive(Debug)]
pub(crate) struct Hub {
    store: Store,
    naming: Naming,
    /// Whether a set id is one published now (a reload adds and removes sets).
    sets: SetFilter,
    settings: HubSettings,
    out: Outbound,
    active: Mutex<HashMap<(String, String), Active>>,
    /// Requests accepted and not yet verified or denied, bounded with the active ones.
    pending: AtomicUsize,
    /// Pending subscribe requests per callback host (see `max_per_host`).
    pending_hosts: Mutex<HashMap<String, usize>>,
    clients: Option<ClientLimiter>,
    verify_slots: Semaphore,
}

/// One pending verification, counted down when dropped.
struct Pending<'a>(&'a AtomicUsize);

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One pending subscribe request counted under its callback host, counted down when dropped.
struct PendingHost<'a> {
    hosts: &'a Mutex<HashMap<String, usize>>,
    host: String,
}

impl<'a> PendingHost<'a> {
    fn new(hosts: &'a Mutex<HashMap<String, usize>>, host: String) -> Self {
        PendingHost { hosts, host }
    }
}

impl Drop for PendingHost<'_> {
    fn drop(&mut self) {
        let mut hosts = lock(self.hosts);
        if let Some(n) = hosts.get_mut(&self.host) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                hosts.remove(&self.host);
            }
        }
    }
}

/// Why a callback is not contacted, for the subscriber: the fetching rule's reason without its
/// hint for operators about sources.
fn refusal(callback: &Url, e: &FetchError) -> String {
    match e {
        FetchError::Refused { reason, .. } => {
            let reason = reason.split_once(" (set allow_private").map_or(reason.as_str(), |(r, _)| r);
            format!("hub.callback {callback} is refused: {reason}; this hub calls back public addresses only")
        }
        other => format!("hub.callback {callback} is refused: {}", crate::error::chain(other)),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn now() -> i64 {
    W3cDateTime::now().unix_timestamp()
}

impl Hub {
    pub(crate) fn new(store: Store, naming: Naming, sets: SetFilter, settings: HubSettings, out: Outbound) -> Arc<Hub> {
        let clients = client_limiter(&settings);
        Arc::new(Hub {
            store,
            naming,
            sets,
            settings,
            out,
            active: Mutex::new(HashMap::new()),
            pending: AtomicUsize::new(0),
            pending_hosts: Mutex::new(HashMap::new()),
            clients,
            verify_slots: Semaphore::new(VERIFY_SLOTS),
        })
    }

    /// Resumes every saved subscription whose lease has not ended (and forgets the others).
    pub(crate) async fn resume(self: &Arc<Self>) -> Result<usize, NotifyError> {
        let store = self.store.clone();
        let saved = tokio::task::spawn_blocking(move || store.hub_subscribers(None)).await??;
        let mut resumed = 0;
        for sub in saved {
            if sub.expires <= now() || self.set_of(&sub.topic).is_none() {
                self.forget(&sub.topic, &sub.callback).await;
                continue;
            }
            let Ok(callback) = Url::parse(&sub.callback) else { continue };
            self.activate(sub, callback);
            resumed += 1;
        }
        Ok(resumed)
    }

    /// The set a topic is the channel of, if it is one of ours.
    fn set_of(&self, topic: &str) -> Option<String> {
        self.naming.parse_notification_topic(topic).filter(|s| (self.sets.0)(s))
    }

    /// Answers a POST to the hub (the body as received, whether it was declared form-encoded,
    /// and the client's address when known); verification goes on in the background.
    pub(crate) fn handle(self: &Arc<Self>, form: bool, body: &[u8], client: Option<std::net::IpAddr>) -> HubAnswer {
        let req = match request::read(form, body) {
            Ok(r) => r,
            Err(refusal) => return HubAnswer::new(refusal.status, refusal.text),
        };
        if let Err(e) = self.out.check(&req.callback) {
            return HubAnswer::new(400, refusal(&req.callback, &e));
        }
        let key = (req.topic.clone(), req.callback.to_string());
        let host = match req.mode {
            // Always processed, whatever the load: a subscriber must be able to leave. Only an
            // existing subscription has anything to end, so only that one is verified.
            Mode::Unsubscribe if !lock(&self.active).contains_key(&key) => {
                return HubAnswer::new(202, "accepted; there is no such subscription to end");
            }
            Mode::Unsubscribe => None,
            Mode::Subscribe => match self.admit(&key, client) {
                Ok(host) => host,
                Err(answer) => return answer,
            },
        };
        self.pending.fetch_add(1, Ordering::SeqCst);
        let hub = self.clone();
        tokio::spawn(async move {
            // Counted down however the verification ends, a panic included.
            let _pending = Pending(&hub.pending);
            let _host = host.map(|h| PendingHost::new(&hub.pending_hosts, h));
            let _slot = hub.verify_slots.acquire().await;
            hub.verify(req).await;
        });
        HubAnswer::new(202, "accepted; the callback will be asked to verify the intent")
    }

    /// Whether a subscribe request may go on: the client's rate, the callback host's share and
    /// the hub's total. A renewal of a subscription in force is never refused for its host.
    /// Returns the host to count it under while it is pending.
    fn admit(&self, key: &(String, String), client: Option<std::net::IpAddr>) -> Result<Option<String>, HubAnswer> {
        if let (Some(limiter), Some(ip)) = (&self.clients, client)
            && let Err(not_until) = limiter.check_key(&ip)
        {
            let wait = not_until.wait_time_from(governor::clock::Clock::now(&governor::clock::DefaultClock::default()));
            metrics::counter!("tributary_hub_requests_refused_total", "why" => "client_rate").increment(1);
            return Err(HubAnswer::later(
                429,
                "too many subscribe requests from this address; try later",
                wait.as_secs() + 1,
            ));
        }
        let active = lock(&self.active);
        if active.contains_key(key) {
            return Ok(None);
        }
        if self.pending.load(Ordering::SeqCst) + active.len() >= self.settings.max_subscriptions {
            metrics::counter!("tributary_hub_requests_refused_total", "why" => "full").increment(1);
            return Err(HubAnswer::later(503, "this hub holds as many subscriptions as it may; try later", 60));
        }
        let host = host_of(&key.1);
        let held = active.keys().filter(|(_, cb)| host_of(cb) == host).count()
            + lock(&self.pending_hosts).get(&host).copied().unwrap_or(0);
        if held >= self.settings.max_per_host {
            metrics::counter!("tributary_hub_requests_refused_total", "why" => "per_host").increment(1);
            let text = format!("this hub holds as many subscriptions for callbacks on {host} as it may");
            return Err(HubAnswer::later(429, text, 3600));
        }
        *lock(&self.pending_hosts).entry(host.clone()).or_insert(0) += 1;
        Ok(Some(host))
    }

    async fn verify(self: &Arc<Self>, req: HubRequest) {
        if self.set_of(&req.topic).is_none() {
            self.deny(&req, "not a topic of this hub").await;
            return;
        }
        let lease = self.grant(req.lease);
        if !intent::verify(&self.out, &req, lease).await {
            return;
        }
        match req.mode {
            Mode::Subscribe => self.subscribe(req, lease).await,
            Mode::Unsubscribe => self.unsubscribe(&req).await,
        }
    }

    fn grant(&self, asked: Option<Duration>) -> Duration {
        let s = &self.settings;
        asked.unwrap_or(s.lease_default).clamp(s.lease_min, s.lease_max)
    }

    async fn deny(&self, req: &HubRequest, reason: &str) {
        intent::deny(&self.out, req, reason).await;
    }

    async fn subscribe(self: &Arc<Self>, req: HubRequest, lease: Duration) {
        let sub = HubSubscriber {
            topic: req.topic,
            callback: req.callback.to_string(),
            secret: req.secret,
            lease_seconds: lease.as_secs(),
            expires: now().saturating_add(i64::try_from(lease.as_secs()).unwrap_or(i64::MAX)),
        };
        let (store, saved) = (self.store.clone(), sub.clone());
        match tokio::task::spawn_blocking(move || store.save_hub_subscriber(&saved)).await.map_err(NotifyError::from) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(error = %crate::error::chain(&e), "could not save a verified subscription");
                return;
            }
            Err(e) => {
                tracing::error!(error = %crate::error::chain(&e), "could not save a verified subscription");
                return;
            }
        }
        tracing::info!(callback.host = %host_of(&sub.callback), topic = %sub.topic, lease_seconds = sub.lease_seconds, "subscription verified");
        self.activate(sub, req.callback);
    }

    /// Puts a subscription in force: a renewal keeps its queue and task, with the new secret.
    fn activate(self: &Arc<Self>, sub: HubSubscriber, callback: Url) {
        let key = (sub.topic.clone(), sub.callback.clone());
        let target = Target { callback, secret: sub.secret.clone() };
        let mut active = lock(&self.active);
        if let Some(a) = active.get_mut(&key) {
            a.worker.retarget(target);
            a.sub = sub;
            return;
        }
        let worker = Worker::new(target, self.delivery_policy());
        active.insert(key.clone(), Active { sub, worker: worker.clone() });
        drop(active);
        let (hub, out) = (self.clone(), self.out.clone());
        tokio::spawn(async move {
            let why = match worker.clone().run(out).await {
                Ended::Stopped => return,
                Ended::Gone => "callback answered 410 Gone",
                Ended::Failing => "deliveries kept failing",
            };
            // The callback is not logged: it is its subscriber's capability.
            tracing::info!(topic = %key.0, why, "subscription ended");
            if why != "callback answered 410 Gone" {
                metrics::counter!("tributary_hub_subscriptions_dropped_total").increment(1);
            }
            hub.remove_if_same(&key, &worker).await;
        });
    }

    fn delivery_policy(&self) -> Policy {
        let s = &self.settings;
        Policy {
            queue: s.queue,
            attempts: s.delivery_attempts,
            backoff: s.retry_backoff,
            max_backoff: s.max_retry_backoff,
            metered: true,
            max_failed: s.max_failed_notifications,
            max_failing_for: s.max_failing_for,
        }
    }

    async fn unsubscribe(&self, req: &HubRequest) {
        self.forget(&req.topic, req.callback.as_str()).await;
        tracing::info!(callback.host = %host_of(req.callback.as_str()), topic = %req.topic, "unsubscribed");
    }

    /// Ends a subscription: its task stops, its row goes.
    async fn forget(&self, topic: &str, callback: &str) {
        if let Some(a) = lock(&self.active).remove(&(topic.to_owned(), callback.to_owned())) {
            a.worker.stop();
        }
        let (store, topic, callback) = (self.store.clone(), topic.to_owned(), callback.to_owned());
        let removed = tokio::task::spawn_blocking(move || store.remove_hub_subscriber(&topic, &callback)).await;
        if let Ok(Err(e)) = removed {
            tracing::error!(error = %crate::error::chain(&e), "could not remove a subscription");
        }
    }

    /// Removes the subscription only if `worker` is still its task (it may have been renewed
    /// by a new verification meanwhile, which then stands).
    async fn remove_if_same(&self, key: &(String, String), worker: &Arc<Worker>) {
        let same = lock(&self.active).get(key).is_some_and(|a| Arc::ptr_eq(&a.worker, worker));
        if same {
            self.forget(&key.0, &key.1).await;
        }
    }

    /// Hands a notification of `set` to every subscriber of its topic whose lease runs.
    pub(crate) async fn publish(&self, set: &str, payload: Arc<Payload>) {
        let topic = self.naming.notification_topic(set);
        let t = now();
        let mut expired = Vec::new();
        for ((top, callback), a) in lock(&self.active).iter() {
            if *top != topic {
                continue;
            }
            if a.sub.expires <= t {
                expired.push(callback.clone());
            } else {
                a.worker.enqueue(payload.clone());
            }
        }
        for callback in expired {
            tracing::info!(callback.host = %host_of(&callback), topic = %topic, "lease expired: subscription ended");
            self.forget(&topic, &callback).await;
        }
    }

    /// Removes every subscription whose lease has ended, and forgets clients whose rate
    /// limit has recovered (so the limiter's memory stays bounded).
    pub(crate) async fn sweep(&self) {
        if let Some(limiter) = &self.clients {
            limiter.retain_recent();
        }
        let t = now();
        let expired: Vec<(String, String)> =
            lock(&self.active).iter().filter(|(_, a)| a.sub.expires <= t).map(|(k, _)| k.clone()).collect();
        for (topic, callback) in expired {
            tracing::info!(callback.host = %host_of(&callback), topic = %topic, "lease expired: subscription ended");
            self.forget(&topic, &callback).await;
        }
    }

    /// How often [`Hub::sweep`] should run: often enough that the shortest lease ends on time.
    pub(crate) fn sweep_every(&self) -> Duration {
        self.settings.lease_min.clamp(Duration::from_secs(1), Duration::from_secs(60))
    }

    /// Verified subscriptions whose lease runs, per set.
    pub(crate) fn subscriber_count(&self, set: &str) -> usize {
        let (topic, t) = (self.naming.notification_topic(set), now());
        lock(&self.active).iter().filter(|((top, _), a)| *top == topic && a.sub.expires > t).count()
    }

    /// The delivery counts of each subscription of `set` in force.
    pub(crate) fn counts(&self, set: &str) -> Vec<DeliveryCounts> {
        let topic = self.naming.notification_topic(set);
        lock(&self.active).iter().filter(|((top, _), _)| *top == topic).map(|(_, a)| a.worker.counts()).collect()
    }

    /// At shutdown: lets the queues empty for at most `limit`, so what was handed on before
    /// the stop is delivered rather than lost with the process.
    pub(crate) async fn drain(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        // Bounded by the deadline.
        while tokio::time::Instant::now() < deadline {
            if lock(&self.active).values().all(|a| a.worker.is_idle()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops every delivery task (shutdown); the subscriptions stay saved.
    pub(crate) fn stop(&self) {
        for a in lock(&self.active).values() {
            a.worker.stop();
        }
    }
}
