//! One subscriber's deliveries: a bounded queue and the task that empties it.
//!
//! Each subscription has its own queue and task, so a slow, failing or hanging callback holds
//! up nobody else, and the notifier never waits: it only appends. The queue holds at most
//! `queue` notifications; when a new one finds it full, the whole backlog is dropped (the
//! subscriber has fallen too far behind for a few more deliveries to help) and only the new
//! one is kept. The next notification it receives then starts (`from`) after a stretch it
//! never saw — the gap a Change Notification subscriber is meant to detect and answer by
//! pulling the Change List — and that delivery also carries `X-Tributary-Dropped: N`, for a
//! subscriber that wants to know without comparing times.
//!
//! A delivery is one POST of the payload (`Content-Type: application/xml`, the `Link` header,
//! `X-Hub-Signature` when the subscriber gave a secret), answered within `request_timeout`.
//! 2xx is success; 410 Gone ends the subscription (WebSub §7); anything else, a redirect
//! included, is a failure retried after `retry_backoff`, doubling up to `max_retry_backoff`,
//! `delivery_attempts` times in all, after which that notification is given up (a gap, as
//! above) and the next is tried. A subscriber whose notifications are given up
//! [`Policy::max_failed`] times in a row, or that has had nothing but failures for
//! [`Policy::max_failing_for`], is ended ([`Ended::Failing`]): a dead callback must not be
//! retried for the rest of a lease that may run a month.
//!
//! Shared by Tributary's built-in hub (`notify`) and a simulated Source's hub (`simulate`):
//! only the built-in hub's workers count on `/metrics` ([`Policy::metered`]), so a simulator
//! running in the same process does not show up as Tributary's own deliveries.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue, LINK};
use tokio::sync::Notify;
use url::Url;

use super::redact::{host, scrub};
use super::signature::{Method, SIGNATURE_HEADER, sign};
use crate::fetch::Outbound;

/// The header telling a subscriber how many notifications were dropped before this one.
pub(crate) const DROPPED_HEADER: &str = "X-Tributary-Dropped";

/// A notification as delivered: the payload and the `Link` header, shared by every queue.
#[derive(Debug)]
pub(crate) struct Payload {
    pub(crate) body: Bytes,
    pub(crate) link: String,
}

/// How a worker retries, how much it holds, and whether it counts on `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    /// Notifications held while deliveries are under way or retried (at least 1).
    pub(crate) queue: usize,
    /// Attempts of one notification.
    pub(crate) attempts: u32,
    /// First wait before a retry, doubling each time.
    pub(crate) backoff: Duration,
    /// Longest wait between two attempts.
    pub(crate) max_backoff: Duration,
    /// Count deliveries and drops as `tributary_hub_*` (Tributary's own hub only).
    pub(crate) metered: bool,
    /// The subscription ends after this many notifications given up in a row…
    pub(crate) max_failed: u32,
    /// …or after nothing but failures for this long.
    pub(crate) max_failing_for: Duration,
}

/// Where and how one subscriber is told; replaced as a whole when it renews.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) callback: Url,
    pub(crate) secret: Option<String>,
}

#[derive(Debug, Default)]
struct Queue {
    items: VecDeque<Arc<Payload>>,
    /// Notifications dropped since the last delivery, told with the next one.
    dropped: u64,
}

/// What happened to a subscriber's notifications, for tests, metrics and the dashboard.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryCounts {
    /// Delivered (2xx).
    pub delivered: u64,
    /// Bytes of the payloads delivered (bodies only).
    pub delivered_bytes: u64,
    /// Attempts that failed (each retry counts).
    pub failed_attempts: u64,
    /// Notifications given up after every attempt failed.
    pub abandoned: u64,
    /// Notifications dropped from a full queue.
    pub dropped: u64,
}

/// One subscriber's queue and its delivery task's controls.
#[derive(Debug)]
pub(crate) struct Worker {
    target: Mutex<Target>,
    queue: Mutex<Queue>,
    policy: Policy,
    wake: Notify,
    stopped: AtomicBool,
    /// True while a notification is being delivered (or retried).
    busy: AtomicBool,
    counts: Mutex<DeliveryCounts>,
}

/// How a delivery ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The worker was stopped (unsubscribed, expired, shut down).
    Stopped,
    /// The callback answered 410: the hub must forget the subscription.
    Gone,
    /// Deliveries kept failing (see [`Policy::max_failed`]): the hub must forget it too.
    Failing,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Worker {
    pub(crate) fn new(target: Target, policy: Policy) -> Arc<Worker> {
        Arc::new(Worker {
            target: Mutex::new(target),
            queue: Mutex::new(Queue::default()),
            policy: Policy { queue: policy.queue.max(1), ..policy },
            wake: Notify::new(),
            stopped: AtomicBool::new(false),
            busy: AtomicBool::new(false),
            counts: Mutex::new(DeliveryCounts::default()),
        })
    }

    /// Renewal: a new secret (or none) from the next delivery on.
    pub(crate) fn retarget(&self, target: Target) {
        *lock(&self.target) = target;
    }

    /// Appends `payload`; never waits. A full queue is emptied first (see the module docs).
    pub(crate) fn enqueue(&self, payload: Arc<Payload>) {
        let mut q = lock(&self.queue);
        if q.items.len() >= self.policy.queue {
            let n = q.items.len() as u64;
            q.items.clear();
            q.dropped += n;
            lock(&self.counts).dropped += n;
            if self.policy.metered {
                metrics::counter!("tributary_hub_notifications_dropped_total").increment(n);
            }
            tracing::warn!(callback.host = %host(&lock(&self.target).callback), dropped = n, "subscriber too far behind: backlog dropped");
        }
        q.items.push_back(payload);
        drop(q);
        self.wake.notify_one();
    }

    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }

    pub(crate) fn counts(&self) -> DeliveryCounts {
        *lock(&self.counts)
    }

    /// Nothing queued and nothing being delivered.
    pub(crate) fn is_idle(&self) -> bool {
        !self.busy.load(Ordering::SeqCst) && lock(&self.queue).items.is_empty()
    }

    fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Delivers until stopped or told the subscription is gone.
    pub(crate) async fn run(self: Arc<Self>, out: Outbound) -> Ended {
        // Notifications given up in a row, and since when nothing but failures.
        let mut failing: Option<(u32, tokio::time::Instant)> = None;
        // Each turn delivers one notification (or waits for one); ends when stopped.
        loop {
            if self.is_stopped() {
                return Ended::Stopped;
            }
            let next = {
                let mut q = lock(&self.queue);
                let next = q.items.pop_front().map(|p| (p, std::mem::take(&mut q.dropped)));
                self.busy.store(next.is_some(), Ordering::SeqCst);
                next
            };
            let Some((payload, dropped)) = next else {
                self.wake.notified().await;
                continue;
            };
            let started = tokio::time::Instant::now();
            let outcome = self.deliver(&out, &payload, dropped).await;
            self.busy.store(false, Ordering::SeqCst);
            match outcome {
                Ok(()) => failing = None,
                // Still owed to the subscriber: told with the next delivery that succeeds.
                Err(None) => {
                    lock(&self.queue).dropped += dropped;
                    let (n, since) = failing.map_or((1, started), |(n, since)| (n + 1, since));
                    failing = Some((n, since));
                    if n >= self.policy.max_failed || since.elapsed() >= self.policy.max_failing_for {
                        return Ended::Failing;
                    }
                }
                Err(Some(ended)) => return ended,
            }
        }
    }

    /// One notification, with its retries: `Ok` once delivered, `Err(None)` when given up,
    /// `Err(Some(_))` when the worker must end.
    async fn deliver(&self, out: &Outbound, payload: &Payload, dropped: u64) -> Result<(), Option<Ended>> {
        let s = &self.policy;
        let mut wait = s.backoff;
        for attempt in 1..=s.attempts {
            if self.is_stopped() {
                return Err(Some(Ended::Stopped));
            }
            let target = lock(&self.target).clone();
            match out.post(&target.callback, headers(&target, payload, dropped), payload.body.clone(), 1024).await {
                Ok(r) if (200..300).contains(&r.status) => {
                    let mut counts = lock(&self.counts);
                    counts.delivered += 1;
                    counts.delivered_bytes += payload.body.len() as u64;
                    drop(counts);
                    self.meter("delivered");
                    return Ok(());
                }
                Ok(r) if r.status == 410 => return Err(Some(Ended::Gone)),
                Ok(r) => {
                    tracing::debug!(callback.host = %host(&target.callback), status = r.status, attempt, "delivery refused")
                }
                Err(e) => {
                    let error = scrub(&crate::error::chain(&e).to_string(), &target.callback);
                    tracing::debug!(callback.host = %host(&target.callback), error, attempt, "delivery failed")
                }
            }
            lock(&self.counts).failed_attempts += 1;
            self.meter("failed");
            // Jittered (half to all of the backoff) so subscribers that failed together, say
            // behind one proxy that went down, are not all retried on the same instant.
            if attempt < s.attempts && self.pause(wait.mul_f64(rand::random_range(0.5..=1.0))).await {
                return Err(Some(Ended::Stopped));
            }
            wait = (wait * 2).min(s.max_backoff);
        }
        lock(&self.counts).abandoned += 1;
        tracing::warn!(callback.host = %host(&lock(&self.target).callback), attempts = s.attempts, "notification given up after every attempt failed");
        Err(None)
    }

    fn meter(&self, outcome: &'static str) {
        if self.policy.metered {
            metrics::counter!("tributary_hub_deliveries_total", "outcome" => outcome).increment(1);
        }
    }

    /// Sleeps `d` unless stopped first; true when stopped.
    async fn pause(&self, d: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + d;
        // Wakes for new notifications too; bounded by the deadline.
        while tokio::time::Instant::now() < deadline {
            if self.is_stopped() {
                return true;
            }
            let _ = tokio::time::timeout_at(deadline, self.wake.notified()).await;
        }
        self.is_stopped()
    }
}

fn headers(target: &Target, payload: &Payload, dropped: u64) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/xml"));
    if let Ok(v) = HeaderValue::from_str(&payload.link) {
        h.insert(LINK, v);
    }
    if let Some(secret) = &target.secret
        && let Ok(v) = HeaderValue::from_str(&sign(Method::Sha256, secret.as_bytes(), &payload.body))
    {
        h.insert(SIGNATURE_HEADER, v);
    }
    if dropped > 0 {
        h.insert(DROPPED_HEADER, HeaderValue::from(dropped));
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(n: u8) -> Arc<Payload> {
        Arc::new(Payload { body: Bytes::from(vec![n]), link: "<t>; rel=\"self\", <h>; rel=\"hub\"".into() })
    }

    fn target(secret: Option<&str>) -> Target {
        Target { callback: Url::parse("http://c.test/cb").unwrap(), secret: secret.map(str::to_owned) }
    }

    #[test]
    fn a_full_queue_drops_its_backlog_and_keeps_the_newest() {
        let policy = Policy {
            queue: 2,
            attempts: 1,
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(1),
            metered: false,
            max_failed: 10,
            max_failing_for: Duration::from_secs(60),
        };
        let w = Worker::new(target(None), policy);
        for n in 0..5 {
            w.enqueue(payload(n));
        }
        // 0, 1 fill it; 2 drops both; 3 fills it; 4 drops 2 and 3.
        let q = lock(&w.queue);
        assert_eq!(q.items.iter().map(|p| p.body[0]).collect::<Vec<_>>(), [4]);
        assert_eq!(q.dropped, 4);
        drop(q);
        assert_eq!(w.counts().dropped, 4);
        assert!(!w.is_idle());
    }

    #[test]
    fn deliveries_are_signed_only_with_a_secret_and_tell_of_drops() {
        let p = payload(7);
        let plain = headers(&target(None), &p, 0);
        assert_eq!(plain[CONTENT_TYPE], "application/xml");
        assert_eq!(plain[LINK], "<t>; rel=\"self\", <h>; rel=\"hub\"");
        assert!(plain.get(SIGNATURE_HEADER).is_none() && plain.get(DROPPED_HEADER).is_none());
        let signed = headers(&target(Some("k")), &p, 3);
        let sig = signed[SIGNATURE_HEADER].to_str().unwrap();
        assert_eq!(super::super::verify(b"k", Some(sig), &p.body), Ok(Method::Sha256));
        assert_eq!(signed[DROPPED_HEADER], "3");
    }
}
