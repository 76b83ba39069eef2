//! What a subscription needs next (WebSub §5.1, §5.3): pure, so each rule is tested without a
//! hub.
//!
//! - No subscription for the channel: subscribe. A subscription to another channel (the
//!   Source now advertises another topic or hub): replace it.
//! - A request waiting for verification waits at most `verify_timeout`; then the source falls
//!   back to polling at its normal interval and the request is retried after `retry`.
//! - A verified lease is renewed once four fifths of it have passed (early enough for a slow
//!   hub to verify the renewal before the lease ends); the renewal replaces the lease only
//!   when verified, so deliveries never stop in between.
//! - A lease that ended unrenewed counts as no subscription: polling goes back to normal.
//! - A retry time that has come (after a failed request, or a denial) asks again at once, even
//!   while a lease runs: a denial is only a hint (anyone knowing the callback can send one),
//!   so the lease stands and the hub is asked again.

use std::time::Duration;

use crate::store::Subscription;

/// The next step for one source's subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    /// Nothing to do before this time (Unix seconds), unless something changes.
    WaitUntil(i64),
    /// Send a subscribe request: the first, a renewal, or a retry.
    Subscribe,
    /// The subscription is for another channel: end it and start anew.
    Replace,
    /// The hub did not verify in time: give the request up (the source polls meanwhile).
    Overdue,
}

/// The timing an operator configured.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub(crate) verify_timeout: Duration,
    pub(crate) retry: Duration,
}

/// Decides the next step for `sub` (the source's subscription, if any) to channel
/// `(topic, hub)` at `now` (Unix seconds).
pub(crate) fn next(sub: Option<&Subscription>, topic: &str, hub: &str, now: i64, t: Timing) -> Next {
    let Some(sub) = sub else { return Next::Subscribe };
    if sub.topic != topic || sub.advertised_hub != hub {
        return Next::Replace;
    }
    if let Some(p) = &sub.pending {
        let deadline = p.sent.saturating_add(secs(t.verify_timeout));
        return if now >= deadline { Next::Overdue } else { Next::WaitUntil(deadline) };
    }
    let retry_at = sub.retry_at.filter(|r| *r > now);
    match &sub.active {
        Some(l) => {
            let renew_at = l.verified + (l.expires - l.verified).max(0) * 4 / 5;
            match (retry_at, sub.retry_at) {
                (Some(r), _) => Next::WaitUntil(r.min(l.expires.max(now + 1))),
                // A retry that is due (after a failed renewal, or a denial) asks again now,
                // whatever the lease.
                (None, Some(_)) => Next::Subscribe,
                (None, None) if now >= renew_at => Next::Subscribe,
                (None, None) => Next::WaitUntil(renew_at),
            }
        }
        None => retry_at.map_or(Next::Subscribe, Next::WaitUntil),
    }
}

/// Whether `sub` has a verified lease that has not ended at `now`.
pub(crate) fn subscribed(sub: Option<&Subscription>, now: i64) -> bool {
    sub.and_then(|s| s.active.as_ref()).is_some_and(|l| l.expires > now)
}

pub(super) fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX / 4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Lease, PendingRequest};

    const T: Timing = Timing { verify_timeout: Duration::from_secs(60), retry: Duration::from_secs(300) };

    fn sub() -> Subscription {
        Subscription { topic: "t".into(), advertised_hub: "h".into(), ..Subscription::default() }
    }

    fn pending(sent: i64) -> Option<PendingRequest> {
        Some(PendingRequest { mode: "subscribe".into(), sent, ..PendingRequest::default() })
    }

    #[test]
    fn no_subscription_subscribes_and_another_channel_is_replaced() {
        assert_eq!(next(None, "t", "h", 0, T), Next::Subscribe);
        assert_eq!(next(Some(&sub()), "t2", "h", 0, T), Next::Replace);
        assert_eq!(next(Some(&sub()), "t", "h2", 0, T), Next::Replace);
    }

    #[test]
    fn a_request_waits_for_verification_until_the_timeout() {
        let s = Subscription { pending: pending(100), ..sub() };
        assert_eq!(next(Some(&s), "t", "h", 120, T), Next::WaitUntil(160));
        assert_eq!(next(Some(&s), "t", "h", 160, T), Next::Overdue);
    }

    #[test]
    fn a_lease_is_renewed_at_four_fifths_and_counts_until_it_ends() {
        let s = Subscription { active: Some(Lease { verified: 0, expires: 1000, ..Lease::default() }), ..sub() };
        assert_eq!(next(Some(&s), "t", "h", 10, T), Next::WaitUntil(800));
        assert_eq!(next(Some(&s), "t", "h", 800, T), Next::Subscribe);
        assert!(subscribed(Some(&s), 999));
        assert!(!subscribed(Some(&s), 1000), "an ended lease is no subscription");
        let renewing = Subscription { pending: pending(800), ..s };
        assert!(subscribed(Some(&renewing), 850), "the old lease stands while a renewal waits");
    }

    #[test]
    fn a_due_retry_subscribes_again_even_while_a_lease_runs() {
        let lease = Some(Lease { verified: 0, expires: 1000, ..Lease::default() });
        let s = Subscription { active: lease, retry_at: Some(50), ..sub() };
        assert_eq!(next(Some(&s), "t", "h", 10, T), Next::WaitUntil(50));
        assert_eq!(next(Some(&s), "t", "h", 50, T), Next::Subscribe, "long before renewal time");
    }

    #[test]
    fn after_a_failure_the_request_waits_for_its_retry_time() {
        let s = Subscription { retry_at: Some(500), ..sub() };
        assert_eq!(next(Some(&s), "t", "h", 100, T), Next::WaitUntil(500));
        assert_eq!(next(Some(&s), "t", "h", 500, T), Next::Subscribe);
    }
}
