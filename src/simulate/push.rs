//! Push for a simulated Source (`--push`, `push = true`): its own minimal WebSub hub at
//! `{base}hub` and its change-notification channel, the topic `{base}notifications`
//! (ResourceSync Change Notification 1.0.1; WebSub lets a publisher be its own hub).
//!
//! - **Payloads.** Every batch of changes applied together — one
//!   [`Simulator::step`](super::Simulator::step) call, or the ticker's changes since the last
//!   payload: each tick (10 ms to 1 s apart, see `sim::tick_loop`) notifies its changes, unless
//!   a subscriber is still being delivered the previous payload, in which case they wait for
//!   the first tick after it (adaptive batching: a subscriber slower than the ticks — Tributary
//!   acknowledges only after a durable commit — gets larger payloads rather than an ever longer
//!   queue) — becomes one `<urlset>` with `rs:md capability="change-notification"`, the batch's
//!   Change List entries in the order applied (forward chronological, §3), `from` the previous
//!   payload's `until` (the first: the simulator's start) and `until` the last change's
//!   datetime. Consecutive payloads therefore cover consecutive intervals and a subscriber
//!   can detect a gap. The topic URI answers GET with the latest payload and the `Link` header
//!   (§4.1).
//! - **The hub.** `POST {base}hub`, form-encoded, read and checked by
//!   [`crate::websub::request`] (the rules of Tributary's own hub): `subscribe` / `unsubscribe`
//!   answered 202 and verified asynchronously by echoing `hub.challenge`
//!   ([`crate::websub::intent`]); another topic is denied; leases are clamped into
//!   [`LEASE_MIN`, `LEASE_MAX`]; each verified subscriber gets its own bounded queue and delivery
//!   task ([`crate::websub::deliver`]) signed `sha256` with its secret, retried
//!   [`ATTEMPTS`] times.
//! - **In memory.** A simulated Source is ephemeral: its subscriptions end with the process,
//!   and a subscriber notices by its lease (or by polling, which it does anyway).
//! - **Any callback address.** A simulator is a loopback test fixture, and its subscriber is
//!   normally a Tributary on the same machine, so callbacks are not held to an address policy.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use url::Url;

use super::render::Site;
use super::state::ChangeRecord;
use crate::fetch::{FetchError, Outbound, OutboundOptions};
use crate::websub::deliver::{DeliveryCounts, Ended, Payload, Policy, Target, Worker};
use crate::websub::redact::{host, host_of};
use crate::websub::request::{self, HubRequest, Mode};
use crate::websub::{intent, link_header};

/// Path of the hub.
pub(crate) const HUB: &str = "/hub";
/// Path of the change-notification topic.
pub(crate) const TOPIC: &str = "/notifications";
/// Lease granted when none is asked for (WebSub §5.1's suggestion).
pub const LEASE_DEFAULT: Duration = Duration::from_secs(10 * 86_400);
/// Shortest lease granted: short enough for tests of renewal.
pub const LEASE_MIN: Duration = Duration::from_secs(10);
/// Longest lease granted (Change Notification §4.2's 31 days).
pub const LEASE_MAX: Duration = Duration::from_secs(2_678_400);
/// Delivery attempts of one payload; the first retry after 250 ms, doubling up to 5 s.
pub const ATTEMPTS: u32 = 5;
/// Payloads held per subscriber; beyond, its backlog is dropped (it sees a gap and pulls).
const QUEUE: usize = 256;
/// Subscriptions held at once, verified or pending; beyond, 503.
const MAX_SUBSCRIPTIONS: usize = 1_000;
/// Whole time of one verification or delivery request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A verified subscription and its delivery task.
#[derive(Debug)]
struct Active {
    expires: Instant,
    worker: Arc<Worker>,
}

/// What the next payload continues from, and the latest one (what the topic serves).
#[derive(Debug)]
struct Chain {
    until_ms: i64,
    latest: Option<Arc<Payload>>,
    sent: u64,
}

/// One simulated Source's hub and channel.
#[derive(Debug)]
pub(crate) struct PushHub {
    topic: String,
    hub: String,
    out: Outbound,
    subs: Mutex<HashMap<String, Active>>,
    pending: AtomicUsize,
    chain: Mutex<Chain>,
}

/// A subscription as [`Simulator::subscribers`](super::Simulator::subscribers) reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriberInfo {
    /// The callback.
    pub callback: String,
    /// What its deliveries did.
    pub counts: DeliveryCounts,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One pending verification, counted down when dropped.
struct Pending<'a>(&'a AtomicUsize);

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl PushHub {
    /// The hub of the Source at `site`, whose notifications start at `start_ms`.
    pub(crate) fn new(site: &Site, start_ms: i64) -> Result<PushHub, FetchError> {
        let out = Outbound::new(OutboundOptions {
            user_agent: concat!("tributary-simulate/", env!("CARGO_PKG_VERSION")).to_owned(),
            timeout: REQUEST_TIMEOUT,
            allow_private: true,
            allow_networks: Vec::new(),
        })?;
        Ok(PushHub {
            topic: site.url(TOPIC),
            hub: site.url(HUB),
            out,
            subs: Mutex::new(HashMap::new()),
            pending: AtomicUsize::new(0),
            chain: Mutex::new(Chain { until_ms: start_ms, latest: None, sent: 0 }),
        })
    }

    pub(crate) fn topic(&self) -> &str {
        &self.topic
    }

    pub(crate) fn hub(&self) -> &str {
        &self.hub
    }

    /// `Link: <topic>; rel="self", <hub>; rel="hub"`.
    pub(crate) fn link(&self) -> String {
        link_header(&self.topic, &self.hub)
    }

    /// The latest payload (empty before the first).
    pub(crate) fn latest(&self) -> Bytes {
        lock(&self.chain).latest.as_ref().map(|p| p.body.clone()).unwrap_or_default()
    }

    /// Payloads built so far.
    pub(crate) fn sent(&self) -> u64 {
        lock(&self.chain).sent
    }

    /// Whether a subscriber is still being delivered an earlier payload.
    pub(crate) fn delivering(&self) -> bool {
        lock(&self.subs).values().any(|a| !a.worker.is_idle())
    }

    /// Builds the payload of `batch` (taken by `take` under the chain's lock, so payloads are
    /// chained in the order their changes happened) and hands it to every subscriber whose
    /// lease runs.
    pub(crate) fn publish(&self, site: &Site, take: impl FnOnce() -> Vec<ChangeRecord>) {
        let payload = {
            let mut chain = lock(&self.chain);
            let batch = take();
            let Some(last) = batch.last() else { return };
            let until_ms = last.datetime_ms;
            let body = site.notification(&batch, chain.until_ms, until_ms);
            let payload = Arc::new(Payload { body: Bytes::from(body), link: self.link() });
            chain.until_ms = until_ms;
            chain.latest = Some(payload.clone());
            chain.sent += 1;
            payload
        };
        let now = Instant::now();
        let mut subs = lock(&self.subs);
        subs.retain(|callback, a| {
            let live = a.expires > now;
            if !live {
                tracing::info!(callback.host = %host_of(callback), "lease expired: subscription ended");
                a.worker.stop();
            }
            live
        });
        for a in subs.values() {
            a.worker.enqueue(payload.clone());
        }
    }

    /// Answers a POST to the hub; verification goes on in the background.
    pub(crate) fn handle(self: &Arc<Self>, form: bool, body: &[u8]) -> (u16, String) {
        let req = match request::read(form, body) {
            Ok(r) => r,
            Err(refusal) => return (refusal.status, refusal.text),
        };
        if self.pending.load(Ordering::SeqCst) + lock(&self.subs).len() >= MAX_SUBSCRIPTIONS {
            return (503, "this hub holds as many subscriptions as it may; try later".into());
        }
        self.pending.fetch_add(1, Ordering::SeqCst);
        let hub = self.clone();
        tokio::spawn(async move {
            let _pending = Pending(&hub.pending);
            hub.verify(req).await;
        });
        (202, "accepted; the callback will be asked to verify the intent".into())
    }

    async fn verify(self: &Arc<Self>, req: HubRequest) {
        if req.topic != self.topic {
            intent::deny(&self.out, &req, "not the topic of this hub").await;
            return;
        }
        let lease = req.lease.unwrap_or(LEASE_DEFAULT).clamp(LEASE_MIN, LEASE_MAX);
        if !intent::verify(&self.out, &req, lease).await {
            return;
        }
        match req.mode {
            Mode::Subscribe => self.subscribe(req.callback, req.secret, lease),
            Mode::Unsubscribe => self.forget(req.callback.as_str()),
        }
    }

    /// A new subscription gets a worker; a renewal keeps its queue, with the new secret.
    fn subscribe(self: &Arc<Self>, callback: Url, secret: Option<String>, lease: Duration) {
        tracing::info!(callback.host = %host(&callback), lease_seconds = lease.as_secs(), "simulator: subscription verified");
        let expires = Instant::now() + lease;
        let key = callback.to_string();
        let target = Target { callback, secret };
        let mut subs = lock(&self.subs);
        if let Some(a) = subs.get_mut(&key) {
            a.worker.retarget(target);
            a.expires = expires;
            return;
        }
        let policy = Policy {
            queue: QUEUE,
            attempts: ATTEMPTS,
            backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(5),
            metered: false,
            max_failed: 20,
            max_failing_for: Duration::from_secs(86_400),
        };
        let worker = Worker::new(target, policy);
        subs.insert(key.clone(), Active { expires, worker: worker.clone() });
        drop(subs);
        let (hub, out) = (Arc::downgrade(self), self.out.clone());
        tokio::spawn(async move {
            if worker.clone().run(out).await != Ended::Stopped {
                tracing::info!(callback.host = %host_of(&key), "callback answered 410 Gone or kept failing: subscription ended");
                remove_if_same(&hub, &key, &worker);
            }
        });
    }

    fn forget(&self, callback: &str) {
        if let Some(a) = lock(&self.subs).remove(callback) {
            a.worker.stop();
            tracing::info!(callback.host = %host_of(callback), "simulator: unsubscribed");
        }
    }

    /// Verified subscriptions whose lease runs, by callback.
    pub(crate) fn subscribers(&self) -> Vec<SubscriberInfo> {
        let now = Instant::now();
        let mut out: Vec<SubscriberInfo> = lock(&self.subs)
            .iter()
            .filter(|(_, a)| a.expires > now)
            .map(|(cb, a)| SubscriberInfo { callback: cb.clone(), counts: a.worker.counts() })
            .collect();
        out.sort_by(|a, b| a.callback.cmp(&b.callback));
        out
    }
}

/// Removes the subscription only if `worker` is still its task (a renewal keeps the task, so
/// this is the one that was told 410).
fn remove_if_same(hub: &Weak<PushHub>, key: &str, worker: &Arc<Worker>) {
    let Some(hub) = hub.upgrade() else { return };
    let mut subs = lock(&hub.subs);
    if subs.get(key).is_some_and(|a| Arc::ptr_eq(&a.worker, worker)) {
        subs.remove(key);
    }
}

impl Drop for PushHub {
    /// The delivery tasks end with the Source.
    fn drop(&mut self) {
        for a in lock(&self.subs).values() {
            a.worker.stop();
        }
    }
}
