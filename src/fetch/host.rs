//! Politeness lives in one object per host (origin): a governor rate limiter and a concurrency
//! cap (its [`Budget`]), backoff after failures, the origin's park (`Retry-After`), plus
//! counters for the dashboard. Every request, robots.txt and redirect hops included, passes
//! [`Host::acquire`].
//!
//! Several sources may share a host; the strictest rate and concurrency any of them asks for
//! wins, because the host's operator sees one harvester, not our configuration. A budget keeps
//! each source's latest ask, so a source whose limits a reload loosened loosens the host once
//! its next pass asks, unless another source still asks for less; a source the reload removed
//! asks for nothing once its last pass has ended. Under
//! `politeness = "ip"` several hosts share one budget: those whose names resolve to the same
//! address, which is one server however many names it has.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant, SystemTime};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use super::error::{FetchError, Phase};
use super::launch::Launch;
use super::park::Parks;
use super::robots::{RobotsEntry, RobotsStatus};
use crate::config::{Rate, Settings};

/// The rate limiters' clock, made once: each new `quanta::Clock` asks the CPU (`cpuid`) whether
/// its counter can be trusted, and under a hypervisor that question traps — 4% of the CPU of a
/// pass over 1,000 hosts went to building their limiters' clocks.
static CLOCK: std::sync::LazyLock<governor::clock::QuantaClock> = std::sync::LazyLock::new(Default::default);

/// First backoff step; doubled per consecutive failure up to the source's `max_backoff`.
const BACKOFF_BASE: Duration = Duration::from_millis(500);

/// How long a host's address is trusted for `politeness = "ip"` before it is looked up again.
pub(crate) const ADDRESS_TTL: Duration = Duration::from_secs(300);

/// Counters of one host, as plain numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostCounters {
    /// HTTP requests sent (robots.txt and redirect hops included).
    pub requests: u64,
    /// Body bytes received (as transferred, before decompression).
    pub bytes: u64,
    /// Requests that failed (status ≥ 400, except 404/410, or a transport error).
    pub failures: u64,
    /// `304 Not Modified` answers.
    pub not_modified: u64,
    /// Attempts repeated after a failure or `Retry-After`.
    pub retries: u64,
}

/// The state of one host, for a dashboard.
#[derive(Debug, Clone)]
pub struct HostSnapshot {
    /// `scheme://host:port`.
    pub origin: String,
    /// Counters since the host was first contacted (or re-added after eviction).
    pub counters: HostCounters,
    /// Failures in a row since the last success.
    pub consecutive_failures: u32,
    /// When the host may next be contacted, if it is being backed off.
    pub backing_off_until: Option<SystemTime>,
    /// Until when the origin is parked (it asked, by `Retry-After`, not to be contacted).
    pub parked_until: Option<SystemTime>,
    /// Under `politeness = "ip"`: the address whose rate and concurrency the host shares.
    pub shared_address: Option<IpAddr>,
    /// The rate in force (configured rate, lowered by robots.txt `Crawl-delay`; shared with
    /// the other hosts of `shared_address`).
    pub rate: Rate,
    /// Requests allowed in flight.
    pub concurrency: u32,
    /// Requests in flight now.
    pub in_flight: u32,
    /// robots.txt state, when known (and not being refreshed at this instant).
    pub robots: Option<RobotsStatus>,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) requests: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) failures: AtomicU64,
    pub(crate) not_modified: AtomicU64,
    pub(crate) retries: AtomicU64,
}

impl Counters {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn snapshot(&self) -> HostCounters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        HostCounters {
            requests: get(&self.requests),
            bytes: get(&self.bytes),
            failures: get(&self.failures),
            not_modified: get(&self.not_modified),
            retries: get(&self.retries),
        }
    }
}

struct Gate {
    /// The strictest rate of the asks.
    configured: Rate,
    /// Each source's latest ask (its id): rate and concurrency; or, while no source asks, the
    /// ask of requests outside any source (empty id). Never empty.
    asks: HashMap<String, (Rate, u32)>,
    /// robots.txt `Crawl-delay` per origin sharing the budget (already capped); the longest wins.
    crawl_delays: HashMap<String, Duration>,
    limiter: Option<Arc<DefaultDirectRateLimiter>>,
    used: bool,
}

impl Gate {
    fn effective(&self) -> Rate {
        self.crawl_delays.values().max().map_or(self.configured, |d| self.configured.stricter(Rate::Every(*d)))
    }

    /// The strictest rate and the lowest concurrency of the asks.
    fn strictest(&self) -> (Rate, u32) {
        let mut asks = self.asks.values();
        let first = asks.next().copied().unwrap_or((Rate::Unlimited, u32::MAX));
        asks.fold(first, |(rate, cap), (r, c)| (rate.stricter(*r), cap.min(*c)))
    }

    /// Rebuilds the limiter after the rate changed; when the budget was already used, the
    /// new limiter's one-request burst is used up so the change cannot let two requests
    /// through back to back.
    fn rebuild(&mut self) {
        self.limiter = self.effective().interval().and_then(Quota::with_period).map(|q| {
            let limiter = Arc::new(RateLimiter::direct_with_clock(q, CLOCK.clone()));
            if self.used {
                let _ = limiter.check();
            }
            limiter
        });
    }
}

/// What the origins of one server share: a rate limit and a concurrency cap. Each host has
/// its own under `politeness = "origin"`; under `"ip"` the hosts whose names resolve to one
/// address share one (see [`Hosts::share`]).
pub(crate) struct Budget {
    gate: Mutex<Gate>,
    semaphore: Arc<Semaphore>,
    /// Locked after `gate` when both are.
    cap: Mutex<Cap>,
    /// Locked after `gate` when both are.
    launches: Mutex<Launches>,
    /// Wakes the turns waiting for a request to leave.
    landed: Notify,
}

/// Whether one of the budget's requests is between its turn and the wire, and when the next
/// may leave: an interval after the last one did (see `launch`).
#[derive(Default)]
struct Launches {
    leaving: bool,
    next: Option<Instant>,
}

/// A request's turn: its concurrency slot (held until its body is done) and, under a rate
/// limit, the [`Launch`] that marks when it leaves.
pub(crate) struct Turn {
    pub(crate) permit: OwnedSemaphorePermit,
    pub(crate) launch: Option<Arc<Launch>>,
}

impl std::fmt::Debug for Turn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turn").field("spaced", &self.launch.is_some()).finish_non_exhaustive()
    }
}

/// Times a turn waits for earlier requests to leave, at most; each wait is one request leaving
/// or the interval after it passing, and the deadline bounds them too.
const MAX_LAUNCH_WAITS: usize = 4096;

/// A budget's concurrency: the cap asked for, and the permits the semaphore has (free or in
/// use). Permits in use cannot be taken back at once, so after a cap is lowered there may be
/// more permits than the cap for a while: each later ask takes back those freed since.
struct Cap {
    wanted: u32,
    permits: u32,
}

impl Budget {
    fn new(settings: &Settings) -> Budget {
        let cap = settings.concurrency.get();
        let mut gate = Gate {
            configured: settings.rate,
            asks: HashMap::from([(settings.source_id.clone(), (settings.rate, cap))]),
            crawl_delays: HashMap::new(),
            limiter: None,
            used: false,
        };
        gate.rebuild();
        Budget {
            gate: Mutex::new(gate),
            semaphore: Arc::new(Semaphore::new(cap as usize)),
            cap: Mutex::new(Cap { wanted: cap, permits: cap }),
            launches: Mutex::new(Launches::default()),
            landed: Notify::new(),
        }
    }

    /// Waits until no other request of the budget is on its way out and an interval has passed
    /// since the last left, then makes the caller's request the one leaving. `None` when the
    /// budget has no rate limit (nothing to space).
    async fn turn_to_leave(self: &Arc<Self>, deadline: tokio::time::Instant) -> Result<Option<Arc<Launch>>, ()> {
        if lock(&self.gate).limiter.is_none() {
            return Ok(None);
        }
        for _ in 0..MAX_LAUNCH_WAITS {
            let landed = self.landed.notified();
            let mut landed = std::pin::pin!(landed);
            landed.as_mut().enable();
            let until = {
                let mut l = lock(&self.launches);
                match (l.leaving, l.next.filter(|t| *t > Instant::now())) {
                    (false, None) => {
                        l.leaving = true;
                        return Ok(Some(Arc::new(Launch::new(self.clone()))));
                    }
                    (false, Some(t)) => Some(tokio::time::Instant::from_std(t)),
                    (true, _) => None,
                }
            };
            match until {
                Some(t) if t > deadline => return Err(()),
                Some(t) => tokio::time::sleep_until(t).await,
                None => tokio::time::timeout_at(deadline, landed).await.map_err(|_| ())?,
            }
        }
        Err(())
    }

    /// The request leaving left at `at`: the next may leave an interval later.
    pub(super) fn landed(&self, at: Instant) {
        let interval = lock(&self.gate).effective().interval();
        {
            let mut l = lock(&self.launches);
            l.leaving = false;
            if let Some(next) = interval.map(|i| at + i) {
                l.next = Some(l.next.map_or(next, |old| old.max(next)));
            }
        }
        self.landed.notify_waiters();
    }

    /// Records what `settings`' source asks for now, replacing its earlier ask.
    ///
    /// A request outside any source (a provenance check or an unsubscription for a source no
    /// longer configured: empty id) asks with the configured defaults only of a host no source
    /// asks of: where sources do, the operator has said what is polite there, and the defaults
    /// must not tighten it — for good, as an ask stays until its source is removed. The first
    /// source's ask replaces it.
    fn ask(&self, settings: &Settings) {
        let outside = settings.source_id.is_empty();
        self.update(|asks| {
            if outside && asks.keys().any(|id| !id.is_empty()) {
                return false;
            }
            let ask = (settings.rate, settings.concurrency.get());
            let mut changed = asks.get(&settings.source_id) != Some(&ask);
            if changed {
                asks.insert(settings.source_id.clone(), ask);
            }
            if !outside {
                changed |= asks.remove("").is_some();
            }
            changed
        });
    }

    /// Takes on every ask of `other` (a host's own budget, as the host joins this shared one).
    fn merge(&self, other: &Budget) {
        let theirs = lock(&other.gate).asks.clone();
        self.update(|asks| {
            asks.extend(theirs);
            if asks.keys().any(|id| !id.is_empty()) {
                asks.remove(""); // as in `ask`
            }
            true
        });
    }

    /// Forgets the asks of sources `keep` refuses (those no longer configured); an ask made
    /// outside any source stays, and so do all when none would (a budget always has one).
    fn retain(&self, keep: &dyn Fn(&str) -> bool) {
        let kept = |source: &String| source.is_empty() || keep(source);
        self.update(|asks| {
            if asks.keys().any(kept) {
                asks.retain(|source, _| kept(source));
            }
            true
        });
    }

    /// Changes the asks (`change` says whether it did), then sets rate and concurrency to the
    /// strictest of them. A lower cap takes the permits that are free now (see [`Cap`]); an
    /// unchanged ask, every request's, only takes back those freed since.
    fn update(&self, change: impl FnOnce(&mut HashMap<String, (Rate, u32)>) -> bool) {
        let mut gate = lock(&self.gate);
        let (rate, wanted) =
            if change(&mut gate.asks) { gate.strictest() } else { (gate.configured, lock(&self.cap).wanted) };
        if rate != gate.configured {
            gate.configured = rate;
            gate.rebuild();
        }
        let mut cap = lock(&self.cap);
        if wanted < cap.permits {
            let taken = self.semaphore.forget_permits((cap.permits - wanted) as usize);
            cap.permits -= u32::try_from(taken).unwrap_or(u32::MAX);
        } else if wanted > cap.permits {
            self.semaphore.add_permits((wanted - cap.permits) as usize);
            cap.permits = wanted;
        }
        cap.wanted = wanted;
    }

    fn set_crawl_delay(&self, origin: &str, delay: Option<Duration>) {
        let mut gate = lock(&self.gate);
        let old = match delay {
            Some(d) => gate.crawl_delays.insert(origin.to_owned(), d),
            None => gate.crawl_delays.remove(origin),
        };
        if old != delay {
            gate.rebuild();
        }
    }
}

#[derive(Default)]
struct Backoff {
    failures: u32,
    not_before: Option<Instant>,
}

/// One host's politeness state. See the module docs.
pub(crate) struct Host {
    pub(crate) origin: String,
    budget: Mutex<Arc<Budget>>,
    backoff: Mutex<Backoff>,
    crawl_delay: Mutex<Option<Duration>>,
    /// Under `politeness = "ip"`: the address the budget is shared under, and when it was looked up.
    address: Mutex<Option<(IpAddr, Instant)>>,
    parks: Arc<Parks>,
    pub(crate) robots: tokio::sync::Mutex<Option<RobotsEntry>>,
    pub(crate) counters: Counters,
    last_used: Mutex<Instant>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding one of these short locks leaves plain data behind.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Host {
    fn new(origin: String, settings: &Settings, parks: Arc<Parks>) -> Host {
        Host {
            origin,
            budget: Mutex::new(Arc::new(Budget::new(settings))),
            backoff: Mutex::new(Backoff::default()),
            crawl_delay: Mutex::new(None),
            address: Mutex::new(None),
            parks,
            robots: tokio::sync::Mutex::new(None),
            counters: Counters::default(),
            last_used: Mutex::new(Instant::now()),
        }
    }

    fn budget(&self) -> Arc<Budget> {
        lock(&self.budget).clone()
    }

    /// Records what `settings`' source asks for now (see [`Budget::ask`]).
    fn configure(&self, settings: &Settings) {
        self.budget().ask(settings);
    }

    /// Applies a robots.txt `Crawl-delay` (already capped).
    pub(crate) fn set_crawl_delay(&self, delay: Option<Duration>) {
        *lock(&self.crawl_delay) = delay;
        self.budget().set_crawl_delay(&self.origin, delay);
    }

    /// Moves the host onto `budget` (shared with other hosts of its address), which takes on
    /// the old one's asks and brings its `Crawl-delay` along.
    fn join(&self, budget: Arc<Budget>) {
        let mut mine = lock(&self.budget);
        if Arc::ptr_eq(&mine, &budget) {
            return;
        }
        mine.set_crawl_delay(&self.origin, None);
        budget.merge(&mine);
        budget.set_crawl_delay(&self.origin, *lock(&self.crawl_delay));
        *mine = budget;
    }

    /// The address this host's budget is shared under, if looked up less than
    /// [`ADDRESS_TTL`] ago.
    pub(crate) fn fresh_address(&self) -> Option<IpAddr> {
        lock(&self.address).filter(|(_, at)| at.elapsed() < ADDRESS_TTL).map(|(ip, _)| ip)
    }

    /// Until when the origin is parked, if it is.
    pub(crate) fn parked_until(&self) -> Option<SystemTime> {
        self.parks.until(&self.origin)
    }

    /// Parks the origin until `until` (a server's `Retry-After`, already capped).
    pub(crate) fn park(&self, until: SystemTime) {
        if self.parks.park(&self.origin, until) {
            tracing::info!(host = %self.origin, until = %super::park::utc(until), "origin parked: it asked us to wait");
        }
    }

    /// Waits for the host's turn: a park or backoff, a concurrency slot, the previous request's
    /// leaving (see `launch`), and the rate limiter, in that order. The permit is held until
    /// the response body is done. A park that ends more than `max_wait` from now is not waited
    /// for.
    ///
    /// # Errors
    /// [`FetchError::Parked`] for a park further off than `max_wait` or `deadline`;
    /// [`FetchError::Timeout`] (phase `Total`) when the turn would come after `deadline`.
    pub(crate) async fn acquire(&self, url: &str, max_wait: Duration, deadline: Instant) -> Result<Turn, FetchError> {
        let late = || FetchError::Timeout { url: url.to_owned(), phase: Phase::Total };
        // Bounded: a concurrent failure can push not_before again while we wait, a few times.
        for _ in 0..8 {
            self.wait_out_park(url, max_wait, deadline).await?;
            let deadline = tokio::time::Instant::from_std(deadline);
            if let Some(t) = self.not_before().filter(|t| *t > Instant::now()) {
                let t = tokio::time::Instant::from_std(t);
                if t > deadline {
                    return Err(late());
                }
                tokio::time::sleep_until(t).await;
            }
            let budget = self.budget();
            let permit = tokio::time::timeout_at(deadline, budget.semaphore.clone().acquire_owned()).await;
            let permit = permit.map_err(|_| late())?.map_err(|_| late())?;
            // The previous request's leaving first: it is the later of the two waits (its turn
            // came before it left), and the limiter then lets this one through without a
            // second sleep — a wake-up less per request, which on 1,000 polite hosts was a
            // fifth of the harvester's CPU.
            let launch = budget.turn_to_leave(deadline).await.map_err(|()| late())?;
            let limiter = lock(&budget.gate).limiter.clone();
            if let Some(l) = limiter {
                tokio::time::timeout_at(deadline, l.until_ready()).await.map_err(|_| late())?;
            }
            let clear = self.not_before().is_none_or(|t| t <= Instant::now()) && self.parked_until().is_none();
            if clear {
                lock(&budget.gate).used = true;
                *lock(&self.last_used) = Instant::now();
                return Ok(Turn { permit, launch });
            }
        }
        Err(late())
    }

    /// Sleeps out a park that ends within `max_wait` and before `deadline`; a longer one is
    /// an error at once.
    pub(crate) async fn wait_out_park(
        &self,
        url: &str,
        max_wait: Duration,
        deadline: Instant,
    ) -> Result<(), FetchError> {
        let Some(until) = self.parked_until() else { return Ok(()) };
        let wait = until.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO);
        if wait > max_wait || Instant::now() + wait > deadline {
            return Err(FetchError::Parked { url: url.to_owned(), origin: self.origin.clone(), until });
        }
        tokio::time::sleep(wait).await;
        Ok(())
    }

    fn not_before(&self) -> Option<Instant> {
        lock(&self.backoff).not_before
    }

    /// Records a retryable failure and returns the backoff wait it imposes on the host.
    pub(crate) fn record_failure(&self, max_backoff: Duration) -> Duration {
        let mut b = lock(&self.backoff);
        b.failures = b.failures.saturating_add(1);
        let exp = BACKOFF_BASE.saturating_mul(1u32 << (b.failures - 1).min(20));
        let ceiling = exp.min(max_backoff);
        // Full jitter over the upper half: spreads retries of many harvesters apart while
        // keeping at least half the nominal wait.
        let wait = ceiling.mul_f64(rand::random_range(0.5..=1.0));
        push_not_before(&mut b, wait);
        wait
    }

    /// A success resets the failure count, so the next failure backs off from the first step;
    /// a wait already set (a park, a backoff) stays in force until it passes.
    pub(crate) fn record_success(&self) {
        lock(&self.backoff).failures = 0;
    }

    pub(crate) fn is_idle(self: &Arc<Self>) -> bool {
        Arc::strong_count(self) == 1
    }

    pub(crate) fn snapshot(&self) -> HostSnapshot {
        let backoff = lock(&self.backoff);
        let until = backoff.not_before.filter(|t| *t > Instant::now());
        let budget = self.budget();
        let cap = lock(&budget.cap).wanted;
        HostSnapshot {
            origin: self.origin.clone(),
            counters: self.counters.snapshot(),
            consecutive_failures: backoff.failures,
            backing_off_until: until.map(|t| SystemTime::now() + (t - Instant::now())),
            parked_until: self.parked_until(),
            shared_address: lock(&self.address).map(|(ip, _)| ip),
            rate: lock(&budget.gate).effective(),
            concurrency: cap,
            in_flight: cap.saturating_sub(budget.semaphore.available_permits() as u32),
            robots: self.robots.try_lock().ok().and_then(|r| r.as_ref().map(RobotsEntry::status)),
        }
    }
}

fn push_not_before(b: &mut Backoff, wait: Duration) {
    let t = Instant::now() + wait;
    b.not_before = Some(b.not_before.map_or(t, |old| old.max(t)));
}

/// The bounded map of hosts. When full, the least recently used idle host is forgotten (its
/// robots.txt and counters go with it; a park does not, it lives in [`Parks`]); hosts with
/// requests in flight are never evicted, so the map may exceed its bound while every host is
/// busy.
pub(crate) struct Hosts {
    map: Mutex<HashMap<String, Arc<Host>>>,
    /// The budgets shared under `politeness = "ip"`, by address; held by their hosts.
    shared: Mutex<HashMap<IpAddr, Weak<Budget>>>,
    parks: Arc<Parks>,
    max: usize,
}

impl Hosts {
    pub(crate) fn new(max: usize, parks: Arc<Parks>) -> Hosts {
        Hosts { map: Mutex::new(HashMap::new()), shared: Mutex::new(HashMap::new()), parks, max: max.max(1) }
    }

    /// The configuration was reloaded and `configured` says which sources it has: the asks of
    /// the others are forgotten, which may loosen a host's limits.
    pub(crate) fn reconfigured(&self, configured: &dyn Fn(&str) -> bool) {
        let hosts: Vec<Arc<Host>> = lock(&self.map).values().cloned().collect();
        for host in hosts {
            host.budget().retain(configured);
        }
    }

    /// The host for `origin`, created with `settings`, or with them recorded as their source's
    /// latest ask ([`Budget::ask`]).
    pub(crate) fn get(&self, origin: &str, settings: &Settings) -> Arc<Host> {
        let mut map = lock(&self.map);
        if let Some(h) = map.get(origin) {
            let h = h.clone();
            drop(map);
            h.configure(settings);
            return h;
        }
        if map.len() >= self.max {
            evict_one(&mut map);
        }
        let host = Arc::new(Host::new(origin.to_owned(), settings, self.parks.clone()));
        map.insert(origin.to_owned(), host.clone());
        host
    }

    /// Puts `host` on the budget shared by every host that resolves to `ip` (created with
    /// `settings` for the first), with what `settings` asks recorded.
    pub(crate) fn share(&self, host: &Host, ip: IpAddr, settings: &Settings) {
        *lock(&host.address) = Some((ip, Instant::now()));
        let budget = {
            let mut shared = lock(&self.shared);
            match shared.get(&ip).and_then(Weak::upgrade) {
                Some(b) => b,
                None => {
                    shared.retain(|_, b| b.strong_count() > 0);
                    let b = Arc::new(Budget::new(settings));
                    shared.insert(ip, Arc::downgrade(&b));
                    b
                }
            }
        };
        host.join(budget.clone());
        budget.ask(settings);
    }

    pub(crate) fn snapshots(&self) -> Vec<HostSnapshot> {
        let hosts: Vec<Arc<Host>> = lock(&self.map).values().cloned().collect();
        let mut out: Vec<HostSnapshot> = hosts.iter().map(|h| h.snapshot()).collect();
        out.sort_by(|a, b| a.origin.cmp(&b.origin));
        out
    }

    pub(crate) fn len(&self) -> usize {
        lock(&self.map).len()
    }
}

fn evict_one(map: &mut HashMap<String, Arc<Host>>) {
    let victim =
        map.iter().filter(|(_, h)| h.is_idle()).min_by_key(|(_, h)| *lock(&h.last_used)).map(|(k, _)| k.clone());
    if let Some(k) = victim {
        map.remove(&k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The nominal (un-jittered) wait after `n` consecutive failures.
    fn nominal(n: u32, max: Duration) -> Duration {
        (BACKOFF_BASE * 2u32.pow(n - 1)).min(max)
    }

    #[test]
    fn backoff_doubles_per_failure_with_jitter_is_capped_and_resets_on_success() {
        let host = host();
        // 500 ms · 2^5 = 16 s > 10 s: the last two steps of each round are capped.
        let max = Duration::from_secs(10);
        let (mut lowest, mut highest) = (f64::MAX, 0f64);
        // Jitter is random: many rounds make a wait outside [half, full] show up if possible.
        for round in 0..200 {
            let mut previous = Duration::ZERO;
            for n in 1..=7 {
                let wait = host.record_failure(max);
                let full = nominal(n, max);
                assert!(
                    wait >= full / 2 && wait <= full,
                    "round {round}, failure {n}: {wait:?} outside [{:?}, {full:?}]",
                    full / 2
                );
                // Each step's floor is the previous step's ceiling, so waits never shrink
                // until the cap.
                assert!(wait >= previous || full == max, "round {round}, failure {n}: {wait:?} < {previous:?}");
                assert_eq!(host.snapshot().consecutive_failures, n);
                let ratio = wait.as_secs_f64() / full.as_secs_f64();
                (lowest, highest) = (lowest.min(ratio), highest.max(ratio));
                previous = wait;
            }
            host.record_success();
            assert_eq!(host.snapshot().consecutive_failures, 0);
            // After a success the next failure starts again from the first step.
            let wait = host.record_failure(max);
            assert!(wait >= BACKOFF_BASE / 2 && wait <= BACKOFF_BASE, "round {round}: {wait:?} after a success");
            host.record_success();
        }
        // The jitter spreads waits over the range rather than always picking one end.
        assert!(lowest < 0.6 && highest > 0.9, "jitter ratios stayed within [{lowest}, {highest}]");
        // A cap below the first step holds from the first failure on.
        let small = Duration::from_millis(100);
        for _ in 0..5 {
            assert!(host.record_failure(small) <= small);
        }
    }

    fn host() -> Host {
        Host::new("http://example.test".to_owned(), &Settings::default(), Arc::new(Parks::new()))
    }

    #[test]
    fn failures_push_not_before_and_never_pull_it_earlier() {
        let host = host();
        host.record_failure(Duration::from_secs(60));
        let until = host.not_before().unwrap();
        // A short backoff after a long one must not shorten the wait.
        host.record_failure(Duration::from_millis(100));
        assert_eq!(host.not_before(), Some(until));
        assert!(host.snapshot().backing_off_until.is_some());
    }

    #[tokio::test]
    async fn a_long_park_is_an_error_at_once_and_a_short_one_is_waited() {
        let host = host();
        let until = SystemTime::now() + Duration::from_secs(3600);
        host.park(until);
        let deadline = Instant::now() + Duration::from_secs(7200);
        let err = host.acquire("http://example.test/x", Duration::from_secs(300), deadline).await.unwrap_err();
        assert!(matches!(&err, FetchError::Parked { until: u, .. } if *u == until), "{err}");
        // Within max_wait but past the deadline: not waited either.
        let soon = Instant::now() + Duration::from_secs(10);
        assert!(matches!(host.acquire("u", Duration::from_secs(7200), soon).await, Err(FetchError::Parked { .. })));
        let other = Host::new("http://other.test".to_owned(), &Settings::default(), host.parks.clone());
        other.park(SystemTime::now() + Duration::from_millis(200));
        let started = Instant::now();
        let _permit = other.acquire("u", Duration::from_secs(1), deadline).await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(150), "{:?}", started.elapsed());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_turn_comes_an_interval_after_the_last_request_left_not_after_its_turn() {
        let per = Duration::from_millis(100);
        let host = Arc::new(Host::new("http://a.test".to_owned(), &asking("a", per, 4), Arc::new(Parks::new())));
        let deadline = Instant::now() + Duration::from_secs(30);
        let first = host.acquire("u", Duration::from_secs(1), deadline).await.unwrap();
        let given = Instant::now();
        // The first request is still connecting when the rate limiter would give the next turn.
        let h = host.clone();
        let next = tokio::spawn(async move {
            let turn = h.acquire("u", Duration::from_secs(1), deadline).await.unwrap();
            (Instant::now(), turn)
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!next.is_finished(), "a turn was given while the last request had not left");
        let left = Instant::now();
        drop(first.launch);
        let (at, second) = next.await.unwrap();
        assert!(at - given >= Duration::from_millis(300), "{:?}", at - given);
        assert!(at - left >= per, "the turn came {:?} after the last request left", at - left);
        // Unsent, a turn still counts: dropping it spaces the next one from then.
        let dropped = Instant::now();
        drop(second);
        host.acquire("u", Duration::from_secs(1), deadline).await.unwrap();
        assert!(dropped.elapsed() >= per, "{:?}", dropped.elapsed());

        // Without a rate limit there is nothing to space: no launch, no wait.
        let unlimited = Settings { rate: Rate::Unlimited, ..Settings::default() };
        let free = Host::new("http://b.test".to_owned(), &unlimited, Arc::new(Parks::new()));
        assert!(free.acquire("u", Duration::from_secs(1), deadline).await.unwrap().launch.is_none());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_on_a_new_connection_leaves_when_its_answer_begins() {
        use super::super::launch::{StampConnections, sending};
        use tower::{Layer as _, Service as _, ServiceExt as _};
        let per = Duration::from_millis(100);
        let host = Arc::new(Host::new("http://a.test".to_owned(), &asking("a", per, 4), Arc::new(Parks::new())));
        let deadline = Instant::now() + Duration::from_secs(30);
        // The connection is built at once; the connection's own task writes the request later.
        let mut connector =
            StampConnections.layer(tower::service_fn(|()| async { Ok::<_, std::convert::Infallible>(()) }));
        let first = host.acquire("u", Duration::from_secs(1), deadline).await.unwrap();
        let send = async move {
            connector.ready().await.unwrap().call(()).await.unwrap();
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        let answered = tokio::spawn(async move {
            sending(first.launch, send).await;
            Instant::now()
        });
        host.acquire("u", Duration::from_secs(1), deadline).await.unwrap();
        let turn = Instant::now();
        let answered = answered.await.unwrap();
        assert!(
            turn >= answered + per,
            "the next turn came {:?} after the answer",
            turn.checked_duration_since(answered)
        );

        // On a pooled connection the request is written at its first poll: the next turn does
        // not wait for its answer.
        let pooled = host.acquire("u", Duration::from_secs(1), deadline).await.unwrap();
        let polled = Instant::now();
        let waiting = tokio::spawn(sending(pooled.launch, tokio::time::sleep(Duration::from_secs(10))));
        host.acquire("u", Duration::from_secs(1), deadline).await.unwrap();
        assert!(polled.elapsed() >= per && polled.elapsed() < Duration::from_secs(5), "{:?}", polled.elapsed());
        waiting.abort();

        // Cancelled while connecting (a header timeout): it counts as leaving when dropped.
        let mut connector =
            StampConnections.layer(tower::service_fn(|()| async { Ok::<_, std::convert::Infallible>(()) }));
        let cut = host.acquire("u", Duration::from_secs(1), deadline).await.unwrap();
        let send = async move {
            connector.ready().await.unwrap().call(()).await.unwrap();
            std::future::pending::<()>().await;
        };
        let (started, patience) = (Instant::now(), Duration::from_millis(200));
        let _ = tokio::time::timeout(patience, sending(cut.launch, send)).await;
        host.acquire("u", Duration::from_secs(1), deadline).await.unwrap();
        let waited = started.elapsed();
        assert!(waited >= patience + per && waited < Duration::from_secs(5), "{waited:?}");
    }

    fn asking(source: &str, per: Duration, concurrency: u32) -> Settings {
        Settings {
            source_id: source.into(),
            rate: Rate::Every(per),
            concurrency: std::num::NonZeroU32::new(concurrency).unwrap(),
            ..Settings::default()
        }
    }

    #[test]
    fn a_host_keeps_each_sources_latest_ask_and_forgets_removed_sources() {
        let hosts = Hosts::new(10, Arc::new(Parks::new()));
        let limits = |h: &Host| (h.snapshot().rate, h.snapshot().concurrency, h.budget().semaphore.available_permits());
        let (slow, fast) = (Duration::from_secs(2), Duration::from_millis(100));
        let host = hosts.get("http://a", &asking("a", slow, 1));
        hosts.get("http://a", &asking("b", fast, 4));
        assert_eq!(limits(&host), (Rate::Every(slow), 1, 1), "the strictest ask wins");

        // a's pass after a reload that loosened it: b's ask is no stricter, so the host loosens.
        hosts.get("http://a", &asking("a", fast, 4));
        assert_eq!(limits(&host), (Rate::Every(fast), 4, 4));
        // A reload that tightens b tightens the host at b's next ask.
        hosts.get("http://a", &asking("b", slow, 2));
        assert_eq!(limits(&host), (Rate::Every(slow), 2, 2));
        // b removed: its ask goes with it.
        hosts.reconfigured(&|id| id == "a");
        assert_eq!(limits(&host), (Rate::Every(fast), 4, 4));
        // Every asker removed: the host keeps its limits rather than having none.
        hosts.reconfigured(&|_| false);
        assert_eq!(limits(&host), (Rate::Every(fast), 4, 4));
    }

    #[test]
    fn requests_outside_any_source_follow_the_sources_that_ask_of_the_host() {
        let hosts = Hosts::new(10, Arc::new(Parks::new()));
        let limits = |h: &Host| (h.snapshot().rate, h.snapshot().concurrency);
        let (slow, fast) = (Duration::from_secs(2), Duration::from_millis(100));
        // A host first met outside any source (a provenance check) gets the defaults...
        let host = hosts.get("http://a", &asking("", slow, 1));
        assert_eq!(limits(&host), (Rate::Every(slow), 1));
        // ...until a source asks: then its settings govern, looser or not.
        hosts.get("http://a", &asking("a", fast, 4));
        assert_eq!(limits(&host), (Rate::Every(fast), 4));
        // Later requests outside any source do not tighten it.
        hosts.get("http://a", &asking("", slow, 1));
        assert_eq!(limits(&host), (Rate::Every(fast), 4));
        // A host that joins a budget sources ask of brings no outside ask with it.
        let other = hosts.get("http://b", &asking("", slow, 1));
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        hosts.share(&host, ip, &asking("a", fast, 4));
        hosts.share(&other, ip, &asking("", slow, 1));
        assert!(Arc::ptr_eq(&host.budget(), &other.budget()));
        assert_eq!(limits(&other), (Rate::Every(fast), 4));
    }

    #[tokio::test]
    async fn a_cap_lowered_while_its_permits_are_in_use_takes_them_back_as_they_are_freed() {
        let hosts = Hosts::new(10, Arc::new(Parks::new()));
        let wide = asking("a", Duration::from_millis(1), 3);
        let narrow = asking("a", Duration::from_millis(1), 1);
        let host = hosts.get("http://a", &wide);
        let budget = host.budget();
        let held: Vec<_> = (0..3).map(|_| budget.semaphore.clone().try_acquire_owned().unwrap()).collect();
        hosts.get("http://a", &narrow);
        drop(held);
        assert_eq!(budget.semaphore.available_permits(), 3, "the permits in use were not taken");
        hosts.get("http://a", &narrow);
        assert_eq!(budget.semaphore.available_permits(), 1, "the next ask takes back those freed");

        // Loosened again: back to the cap asked for, not more.
        hosts.get("http://a", &wide);
        assert_eq!(budget.semaphore.available_permits(), 3);
    }

    #[test]
    fn hosts_of_one_address_share_the_stricter_budget() {
        let hosts = Hosts::new(10, Arc::new(Parks::new()));
        let strict = Settings { concurrency: std::num::NonZeroU32::new(1).unwrap(), ..Settings::default() };
        let (a, b) = (hosts.get("http://a", &Settings::default()), hosts.get("http://b", &strict));
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        hosts.share(&a, ip, &Settings::default());
        hosts.share(&b, ip, &strict);
        assert!(Arc::ptr_eq(&a.budget(), &b.budget()));
        assert_eq!((a.snapshot().concurrency, b.snapshot().concurrency), (1, 1));
        a.set_crawl_delay(Some(Duration::from_secs(2)));
        assert_eq!(b.snapshot().rate, Rate::Every(Duration::from_secs(2)));
        assert_eq!(a.snapshot().shared_address, Some(ip));
    }
}
