//! The subscription's life at the hub, one task per source: subscribe once a channel is
//! known, wait for the verification (the callback records it), renew, retry after a failure,
//! and fall back to polling when no verified lease stands; and the unsubscription of
//! subscriptions whose source left the configuration.
//!
//! A request's secret is saved (and flushed) before the request is sent, since a hub may
//! verify while the POST is still open; what the POST's answer changes is written back
//! onto the row as it is then, never onto a stale copy, so a verification that arrived
//! meanwhile is kept.

use std::sync::atomic::Ordering;
use std::time::Duration;

use url::Url;

use super::lifecycle::{self, Next, Timing};
use super::{Push, unix_now};
use crate::config::{Settings, Source};
use crate::harvest::ctx::Turn;
use crate::store::{PendingRequest, Subscription};

/// 307/308 redirects followed from one hub to another (WebSub §5.1.2) before giving up.
const MAX_HUB_REDIRECTS: usize = 5;

/// How often a source without a known channel looks again (its polls also wake it).
const NO_CHANNEL_RECHECK: i64 = 60;

/// One source's subscription, until shutdown, or until a reload removes the source or turns
/// its push off (the subscription is then ended by [`end_orphans`]). The source's settings are
/// read afresh at every turn, so a reload that changes them applies at the next request.
pub(super) async fn manage(push: Push, id: String) {
    let (Some(ctx), Some(turn)) = (push.ctx().cloned(), push.turn(&id)) else { return };
    let mut shutdown = ctx.shutdown.clone();
    let mut was_subscribed = false;
    // Ends at shutdown or when the source stops pushing; every turn either waits or sends at
    // most one request.
    loop {
        if *shutdown.borrow() {
            return;
        }
        let Some(configured) = push.pushing(&id) else { return };
        let source = &configured.source;
        let timing = Timing { verify_timeout: source.settings.push_verify_timeout, retry: retry(&source.settings) };
        let now = unix_now();
        let channel = channel(&push, source).await;
        let sub = mine(&push, &source.id).await;
        was_subscribed = mark(&turn, &source.id, lifecycle::subscribed(sub.as_ref(), now), was_subscribed);
        let next = match &channel {
            None => Next::WaitUntil(now + NO_CHANNEL_RECHECK),
            Some((topic, hub)) => lifecycle::next(sub.as_ref(), topic.as_str(), hub.as_str(), now, timing),
        };
        match next {
            Next::WaitUntil(t) => {
                let wait = Duration::from_secs(u64::try_from(t - now).unwrap_or(0).max(1));
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    // A verification arrived, or a poll may have found a channel.
                    _ = turn.changed.notified() => {}
                    _ = turn.polled.notified() => {}
                    // A reload or a pause.
                    _ = turn.steered.notified() => {}
                    _ = shutdown.wait_for(|s| *s) => return,
                }
            }
            Next::Subscribe => {
                let (topic, hub) = channel.expect("a subscribe step has a channel");
                subscribe(&push, source, sub, &topic, &hub, timing).await;
            }
            Next::Replace => {
                if let Some(old) = sub {
                    tracing::info!(source.id = %source.id, topic = %old.topic, "the Source advertises another channel; replacing the subscription");
                    // Marked as ending first, so the next turn subscribes anew instead of
                    // seeing it again; the hub is told in the background.
                    if mark_ending(&push, &old).await {
                        let (push, settings) = (push.clone(), source.settings.clone());
                        tokio::spawn(async move { unsubscribe(&push, old, &settings).await });
                    }
                }
            }
            Next::Overdue => overdue(&push, source, timing).await,
        }
    }
}

/// Tells the poll loop whether a verified lease stands; one that just lapsed asks for a poll
/// now, so the source is not left waiting for the slow safety interval, and one that just began
/// asks for one catch-up poll, after which it waits that long. Returns `subscribed`.
fn mark(turn: &Turn, source: &str, subscribed: bool, was: bool) -> bool {
    turn.subscribed.store(subscribed, Ordering::Release);
    if subscribed && !was {
        turn.verified.notify_one();
    }
    if was && !subscribed {
        tracing::warn!(source.id = %source, "no verified subscription stands any more; polling at the normal interval");
        turn.poll_now.notify_one();
    }
    subscribed
}

/// After a failure, or a request the hub did not verify, the next request waits this long.
fn retry(s: &Settings) -> Duration {
    s.poll.clamp(Duration::from_secs(10), Duration::from_secs(3600))
}

/// The channel to subscribe to: `push_topic` / `push_hub` over what the Capability List said.
async fn channel(push: &Push, source: &Source) -> Option<(Url, Url)> {
    let found = match push.ctx() {
        Some(ctx) => super::super::ctx::load_state(ctx, &source.id)
            .await
            .ok()
            .and_then(|s| s.capabilities)
            .and_then(|c| c.change_notification),
        None => None,
    };
    let advertised = found.as_ref().and_then(|c| Url::parse(&c.topic).ok());
    // A topic the Capability List names must be the Source's own (`push_topic`, the operator's
    // choice, is taken as given).
    let advertised = advertised.filter(|t| {
        let ok = super::apply::topic_allowed(source, t);
        if !ok {
            tracing::warn!(source.id = %source.id, topic = %t, "the advertised notification topic is outside the Source's authority; not subscribing");
        }
        ok
    });
    let topic = source.push.topic.clone().or(advertised)?;
    let hub = source.push.hub.clone().or_else(|| found.as_ref().and_then(|c| Url::parse(&c.hub).ok()))?;
    Some((topic, hub))
}

/// The subscription of `source`, if any (not one being ended).
async fn mine(push: &Push, source: &str) -> Option<Subscription> {
    let all = push.all().await.ok()?;
    all.into_iter().find(|s| s.source == source && s.pending.as_ref().is_none_or(|p| p.mode != "unsubscribe"))
}

/// Sends a subscribe request (first, renewal or retry) and records what came of it.
async fn subscribe(push: &Push, source: &Source, sub: Option<Subscription>, topic: &Url, hub: &Url, t: Timing) {
    let secret = random_hex(24);
    let lease = source.settings.push_lease.as_secs();
    let now = unix_now();
    let row = {
        let _rows = push.inner.rows.lock().await;
        let mut row = match sub {
            Some(s) => push.load(&s.id).await.ok().flatten().unwrap_or(s),
            None => {
                let id = random_hex(16);
                let callback = push.callback(&id);
                Subscription {
                    id,
                    source: source.id.clone(),
                    hub: hub.to_string(),
                    advertised_hub: hub.to_string(),
                    topic: topic.to_string(),
                    callback,
                    ..Subscription::default()
                }
            }
        };
        row.pending =
            Some(PendingRequest { mode: "subscribe".into(), secret: secret.clone(), lease_seconds: lease, sent: now });
        row.retry_at = None;
        if let Err(e) = push.save(row.clone()).await {
            tracing::error!(source.id = %source.id, error = %crate::error::chain(&e), "cannot save the subscription; not subscribing");
            return;
        }
        row
    };
    let lease_text = lease.to_string();
    let form = [
        ("hub.mode", "subscribe"),
        ("hub.topic", topic.as_str()),
        ("hub.callback", row.callback.as_str()),
        ("hub.lease_seconds", lease_text.as_str()),
        ("hub.secret", secret.as_str()),
    ];
    let sent = send(push, hub, &form, &source.settings).await;
    let _rows = push.inner.rows.lock().await;
    let Ok(Some(mut row)) = push.load(&row.id).await else { return };
    match sent {
        Ok(at) => {
            tracing::info!(source.id = %source.id, hub = %at, topic = %topic, "subscription requested; waiting for the hub's verification");
            row.hub = at.to_string();
        }
        Err(why) => {
            tracing::warn!(source.id = %source.id, hub = %hub, error = %why, "the hub did not accept the subscription; polling meanwhile");
            if row.pending.as_ref().is_some_and(|p| p.secret == secret) {
                row.pending = None;
            }
            row.last_error = Some(why);
            row.retry_at = Some(retry_at(t.retry));
        }
    }
    if let Err(e) = push.save(row).await {
        tracing::error!(source.id = %source.id, error = %crate::error::chain(&e), "cannot save the subscription");
    }
}

/// POSTs `form` to `hub`, following 307/308 to another hub; the hub that accepted it, or why
/// none did.
async fn send(push: &Push, hub: &Url, pairs: &[(&str, &str)], settings: &Settings) -> Result<Url, String> {
    let mut at = hub.clone();
    for _ in 0..=MAX_HUB_REDIRECTS {
        let answer = push
            .inner
            .fetcher
            .post_form(&at, pairs, settings)
            .await
            .map_err(|e| crate::error::chain(&e).to_string())?;
        match answer.status {
            200..=299 => return Ok(at),
            307 | 308 => {
                let next = answer.location.and_then(|l| at.join(l.trim()).ok());
                at = next.ok_or_else(|| format!("{at} redirected without a usable Location"))?;
            }
            status => {
                let body: String = answer.body.chars().take(200).collect();
                return Err(format!("{at} answered HTTP {status}: {}", body.trim()));
            }
        }
    }
    Err(format!("more than {MAX_HUB_REDIRECTS} hub redirects from {hub}"))
}

/// A request the hub did not verify in time is given up; the source polls, and asks again
/// after the retry interval.
async fn overdue(push: &Push, source: &Source, t: Timing) {
    let _rows = push.inner.rows.lock().await;
    let Some(mut row) = mine(push, &source.id).await else { return };
    let waited = t.verify_timeout.as_secs();
    tracing::warn!(source.id = %source.id, hub = %row.hub, "the hub did not verify the subscription within {waited} s; polling at the normal interval");
    row.pending = None;
    row.last_error = Some(format!("the hub did not verify the subscription within {waited} s"));
    row.retry_at = Some(retry_at(t.retry));
    if let Err(e) = push.save(row).await {
        tracing::error!(source.id = %source.id, error = %crate::error::chain(&e), "cannot save the subscription");
    }
    if let Some(turn) = push.turn(&source.id) {
        turn.poll_now.notify_one();
    }
}

/// Unsubscribes every stored subscription whose source no longer subscribes, or that was being
/// ended when the process stopped.
pub(super) async fn end_orphans(push: Push, pushing: Vec<String>) {
    let Ok(all) = push.all().await else { return };
    let settings = push.defaults();
    // Also those a restart interrupted while they were being ended (a replaced channel).
    let ending = |s: &Subscription| s.pending.as_ref().is_some_and(|p| p.mode == "unsubscribe");
    let orphans = all.into_iter().filter(|s| !pushing.contains(&s.source) || ending(s));
    let ends = orphans.map(|s| {
        let (push, settings) = (push.clone(), settings.clone());
        async move { end(&push, s, &settings).await }
    });
    futures_join_all(ends).await;
}

/// Ends a subscription at its hub (WebSub §5.1, `hub.mode=unsubscribe`): the row stays, marked,
/// until the hub verifies (the callback then removes it) or `push_verify_timeout` passes.
async fn end(push: &Push, sub: Subscription, settings: &Settings) {
    if mark_ending(push, &sub).await {
        unsubscribe(push, sub, settings).await;
    }
}

/// Marks `sub` as being ended; false when that could not be saved.
async fn mark_ending(push: &Push, sub: &Subscription) -> bool {
    let _rows = push.inner.rows.lock().await;
    let mut row = sub.clone();
    row.pending = Some(PendingRequest { mode: "unsubscribe".into(), sent: unix_now(), ..PendingRequest::default() });
    push.save(row).await.is_ok()
}

/// Sends the unsubscribe request for a subscription marked as ending, and removes its row.
async fn unsubscribe(push: &Push, sub: Subscription, settings: &Settings) {
    tracing::info!(source.id = %sub.source, hub = %sub.hub, topic = %sub.topic, "unsubscribing");
    let form =
        [("hub.mode", "unsubscribe"), ("hub.topic", sub.topic.as_str()), ("hub.callback", sub.callback.as_str())];
    let sent = match Url::parse(&sub.hub) {
        Ok(hub) => {
            push.inner.fetcher.post_form(&hub, &form, settings).await.map_err(|e| crate::error::chain(&e).to_string())
        }
        Err(e) => Err(e.to_string()),
    };
    if let Ok(a) = &sent
        && (200..300).contains(&a.status)
    {
        wait_removed(push, &sub.id, settings.push_verify_timeout).await;
    } else {
        tracing::warn!(source.id = %sub.source, hub = %sub.hub, "the hub did not take the unsubscription; forgetting the subscription (its deliveries get 410 Gone)");
    }
    let _rows = push.inner.rows.lock().await;
    if let Err(e) = push.remove(&sub.id).await {
        tracing::error!(error = %crate::error::chain(&e), "cannot remove the subscription");
    }
}

/// Waits (bounded by `limit`) until the callback removed row `id` on the hub's verification.
async fn wait_removed(push: &Push, id: &str, limit: Duration) {
    let step = Duration::from_millis(250);
    let rounds = (limit.as_millis() / step.as_millis()).clamp(1, 100_000);
    for _ in 0..rounds {
        if matches!(push.load(id).await, Ok(None)) {
            return;
        }
        tokio::time::sleep(step).await;
    }
}

/// Awaits every future (a handful: one per orphaned subscription).
async fn futures_join_all<F: std::future::Future<Output = ()> + Send + 'static>(futures: impl Iterator<Item = F>) {
    let mut set = tokio::task::JoinSet::new();
    for f in futures {
        set.spawn(f);
    }
    // Bounded: one result per spawned task.
    while set.join_next().await.is_some() {}
}

/// `bytes` random bytes as hex: callback ids and secrets (24 bytes: 48 characters, well
/// under WebSub's 200-byte limit for `hub.secret`).
fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    rand::fill(&mut b[..]);
    hex::encode(b)
}

/// When to ask a hub again after `retry`, stretched by up to a quarter at random: after a hub
/// outage, many sources (and many Tributaries) retrying it on the same second would be a
/// thundering herd.
fn retry_at(retry: Duration) -> i64 {
    unix_now() + lifecycle::secs(retry.mul_f64(rand::random_range(1.0..=1.25)))
}
