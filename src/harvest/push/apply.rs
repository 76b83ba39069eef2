//! A checked notification applied to the store, under the source's turn so it never
//! interleaves with a poll (both rewrite the source's state whole).
//!
//! Change Notification §3 makes consecutive notifications cover consecutive, non-overlapping
//! `from`/`until` intervals so a subscriber can see what it missed. The `until` of the last one
//! applied is kept in the source's state (`push_until`, committed with the changes):
//! - a notification whose `until` is before it is late or replayed, and changes nothing;
//! - one whose `from` is after it leaves a gap: it is applied, and a poll runs now to fetch
//!   what the missing notifications would have said;
//! - any other is applied. A replay of the last one (the same `until`; hubs redeliver) is
//!   applied again and finds everything held, so it writes no event.

use url::Url;

use super::payload::Notification;
use crate::config::Source;
use crate::harvest::ctx::{Ctx, HarvestError, Turn, load_state, save_state};
use crate::harvest::report::SourceReport;

/// Whether `topic` passes the authority rule of Change List entries: within the Source's
/// configured URL (or Capability List), unless the operator allows other authorities.
pub(super) fn topic_allowed(source: &Source, topic: &Url) -> bool {
    use crate::harvest::authority::within_authority;
    source.settings.allow_outside_authority
        || within_authority(&source.url, topic)
        || source.capability_list.as_ref().is_some_and(|cl| within_authority(cl, topic))
}

/// What applying a notification came to.
#[derive(Debug)]
pub(super) enum Outcome {
    /// Applied; `gap` when it did not meet the last one (a poll was asked for).
    Applied { report: Box<SourceReport>, gap: bool },
    /// Older than the last one applied: nothing changed.
    Stale,
}

/// Applies `n`, received on channel `topic`, to `source`.
pub(super) async fn apply(
    ctx: &Ctx,
    turn: &Turn,
    source: &Source,
    sets: &[String],
    topic: &Url,
    n: Notification,
) -> Result<Outcome, HarvestError> {
    let _turn = turn.lock.lock().await;
    let mut state = load_state(ctx, &source.id).await?;
    let last = state.push_until;
    if let (Some(until), Some(last)) = (n.until, last)
        && until < last
    {
        return Ok(Outcome::Stale);
    }
    let gap = matches!((n.from, last), (Some(from), Some(last)) if from > last);
    if let Some(until) = n.until {
        state.push_until = Some(last.map_or(until, |l| l.max(until)));
    }
    // Entries are accepted under the topic only when the topic itself is the Source's: a
    // topic on another site would otherwise let the Source push that site's resources.
    let base = if topic_allowed(source, topic) { topic } else { &source.url };
    // A notification is judged like a pass: its deletions staged, then applied or held.
    let ctx = &Ctx { pass: crate::harvest::ctx::pass_name("push"), ..ctx.clone() };
    let mut report = crate::fetch::in_source(
        &source.id,
        crate::harvest::sync::apply_pushed(ctx, source, sets, state, base, n.entries),
    )
    .await?;
    crate::harvest::daemon::settle(ctx, source, &mut report).await;
    let mut state = load_state(ctx, &source.id).await?;
    if (state.status.held_deletions, state.status.held_since) != (report.held, report.held_since) {
        state.status.held_deletions = report.held;
        state.status.held_since = report.held_since;
        save_state(ctx, &source.id, state).await?;
    }
    if gap {
        tracing::warn!(source.id = %source.id, from = ?n.from, last = ?last, "a gap in the notifications; polling now");
        turn.poll_now.notify_one();
    }
    Ok(Outcome::Applied { report: Box::new(report), gap })
}
