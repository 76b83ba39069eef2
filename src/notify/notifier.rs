//! The notifier: follows each set's change log and hands every batch of newly visible events
//! on, as change-notification payloads, to the built-in hub or an external one.
//!
//! It is woken by the store whenever a flush makes events visible — only then, so a subscriber
//! told about a change can always fetch it: the events are durable and served — and also
//! checks once a second in case a wake-up was missed. Its position per set (the last event
//! handed on, and the `until` the next payload starts from) is saved after each payload.
//!
//! Crash behaviour (at-least-once): a crash after a batch is committed and before its payload
//! is handed on leaves the position behind, so after a restart the same events are notified
//! again, with the same `from` (the saved `until`); a subscriber that already has them drops
//! them by their interval or by its own duplicate check (a change it already applied changes
//! nothing). A crash after the hand-off and before the position is saved repeats that one
//! payload the same way. Payloads queued in the built-in hub and not yet delivered are lost
//! with the process: the subscriber sees the next payload start after a stretch it never saw,
//! and pulls.
//!
//! A set that has never been notified starts from its current end: an existing store's history
//! is not pushed at subscribers who can read it in the Change Lists.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::error::NotifyError;
use super::{Sender, Shared};
use crate::publish::{Notification, NotifyPosition};

/// Longest the notifier sleeps without being woken.
const TICK: Duration = Duration::from_secs(1);

/// Payloads built per set in one step, so a large backlog (a baseline) is never all in memory.
const PAYLOADS_PER_STEP: u64 = 8;

/// Runs until `stop` turns true.
pub(crate) async fn run(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) -> Result<(), NotifyError> {
    let mut positions = load_positions(&shared).await?;
    // Each turn notifies whatever became visible; ends at shutdown.
    loop {
        // A reload added or removed sets: follow what is published now.
        if !same_sets(&shared, &positions) {
            positions = load_positions(&shared).await?;
        }
        for (set, pos) in positions.iter_mut() {
            if *stop.borrow() {
                return Ok(());
            }
            if let Err(e) = catch_up(&shared, set, pos, &stop).await {
                tracing::warn!(set = %set, error = %crate::error::chain(&e), "notifications delayed");
            }
        }
        tokio::select! {
            _ = shared.wake.notified() => {}
            _ = tokio::time::sleep(TICK) => {}
            _ = super::stopped(&mut stop) => return Ok(()),
        }
    }
}

fn same_sets(shared: &Shared, positions: &[(String, NotifyPosition)]) -> bool {
    let sets: Vec<String> = shared.publisher.sets().map(|c| c.id).collect();
    sets.len() == positions.len() && sets.iter().zip(positions).all(|(a, (b, _))| a == b)
}

async fn load_positions(shared: &Arc<Shared>) -> Result<Vec<(String, NotifyPosition)>, NotifyError> {
    let s = shared.clone();
    tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        for set in s.publisher.sets().map(|c| c.id.clone()).collect::<Vec<_>>() {
            let pos = match s.publisher.notify_position(&set)? {
                Some(p) => p,
                None => {
                    let info = s.publisher.store().set_info(&set)?;
                    let pos = NotifyPosition {
                        seq: info.as_ref().map_or(0, |i| i.events),
                        until: info.and_then(|i| i.last_change),
                    };
                    s.publisher.save_notify_position(&set, pos)?;
                    pos
                }
            };
            out.push((set, pos));
        }
        Ok::<_, NotifyError>(out)
    })
    .await?
}

/// Notifies every visible event of `set` after `pos`, advancing `pos` payload by payload.
async fn catch_up(
    shared: &Arc<Shared>,
    set: &str,
    pos: &mut NotifyPosition,
    stop: &watch::Receiver<bool>,
) -> Result<(), NotifyError> {
    let step = PAYLOADS_PER_STEP * shared.settings.notification_entries as u64;
    // Bounded: each turn advances `pos` or returns.
    loop {
        let payloads = build(shared, set, *pos, step).await?;
        if payloads.is_empty() {
            return Ok(());
        }
        for n in payloads {
            if !hand_on(shared, &n, stop).await? {
                return Ok(());
            }
            *pos = NotifyPosition { seq: n.last, until: Some(n.until) };
            save(shared, set, *pos).await?;
        }
    }
}

async fn build(
    shared: &Arc<Shared>,
    set: &str,
    pos: NotifyPosition,
    step: u64,
) -> Result<Vec<Notification>, NotifyError> {
    let (s, set) = (shared.clone(), set.to_owned());
    tokio::task::spawn_blocking(move || {
        let visible = s.publisher.store().set_info(&set)?.map_or(0, |i| i.events);
        if visible <= pos.seq {
            return Ok(Vec::new());
        }
        let upto = visible.min(pos.seq.saturating_add(step));
        Ok(s.publisher.notifications(&set, pos.seq, pos.until, upto, s.settings.notification_entries)?)
    })
    .await?
}

/// Hands one payload on; false when shutdown came first (the payload then goes out after the
/// restart).
async fn hand_on(shared: &Arc<Shared>, n: &Notification, stop: &watch::Receiver<bool>) -> Result<bool, NotifyError> {
    let payload = shared.payload(n);
    shared.latest.lock().unwrap_or_else(|p| p.into_inner()).insert(n.set.clone(), payload.clone());
    match &shared.sender {
        Sender::Builtin(hub) => {
            hub.publish(&n.set, payload).await;
            Ok(true)
        }
        Sender::External(ext) => {
            let topic = shared.publisher.naming().notification_topic(&n.set);
            let mut wait = shared.settings.retry_backoff;
            let mut stop = stop.clone();
            // Retried until the hub takes it or shutdown: the position waits for it.
            loop {
                match ext.publish(&topic, &payload.link, &payload.body).await {
                    Ok(()) => return Ok(true),
                    Err(e) => {
                        tracing::warn!(hub = %ext.url, error = %crate::error::chain(&e), "external hub did not take a notification; retrying")
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = super::stopped(&mut stop) => return Ok(false),
                }
                wait = (wait * 2).min(shared.settings.max_retry_backoff);
            }
        }
    }
}

async fn save(shared: &Arc<Shared>, set: &str, pos: NotifyPosition) -> Result<(), NotifyError> {
    let (s, set) = (shared.clone(), set.to_owned());
    tokio::task::spawn_blocking(move || s.publisher.save_notify_position(&set, pos)).await??;
    Ok(())
}
