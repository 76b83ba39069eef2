//! A hub's requests to a callback about a subscription (WebSub §5.2, §5.3): the intent
//! verification — `GET callback?hub.mode=…&hub.topic=…&hub.challenge=…[&hub.lease_seconds=…]`,
//! confirmed only by a 2xx whose body is exactly the challenge — and the denial.
//!
//! The callback's own query is kept (§5.3: the hub appends to it). Anything but the exact
//! challenge — another body, a 404, a redirect (the client follows none), a timeout — confirms
//! nothing, and the hub then changes nothing.

use std::time::Duration;

use super::redact::{host, scrub};
use super::request::{HubRequest, Mode};
use crate::fetch::Outbound;

/// Bytes of a verification answer read: a challenge is 32 characters.
const MAX_CHALLENGE_ANSWER: usize = 1024;

/// Asks `req.callback` to confirm `req` (granting `lease` on subscribe); true only when it
/// echoed the challenge.
pub(crate) async fn verify(out: &Outbound, req: &HubRequest, lease: Duration) -> bool {
    let challenge = hex::encode(rand::random::<[u8; 16]>());
    let mut url = req.callback.clone();
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("hub.mode", req.mode.as_str());
        q.append_pair("hub.topic", &req.topic);
        q.append_pair("hub.challenge", &challenge);
        if req.mode == Mode::Subscribe {
            q.append_pair("hub.lease_seconds", &lease.as_secs().to_string());
        }
    }
    let confirmed = match out.get(&url, MAX_CHALLENGE_ANSWER).await {
        Ok(r) => (200..300).contains(&r.status) && r.body == challenge.as_bytes(),
        Err(e) => {
            let error = scrub(&crate::error::chain(&e).to_string(), &req.callback);
            tracing::info!(callback.host = %host(&req.callback), error, "intent verification failed");
            false
        }
    };
    if !confirmed {
        tracing::info!(callback.host = %host(&req.callback), topic = %req.topic, mode = req.mode.as_str(), "intent not verified; nothing changed");
    }
    confirmed
}

/// Tells `req.callback` its subscription is refused (`hub.mode=denied`, §5.2).
pub(crate) async fn deny(out: &Outbound, req: &HubRequest, reason: &str) {
    let mut url = req.callback.clone();
    url.query_pairs_mut()
        .append_pair("hub.mode", "denied")
        .append_pair("hub.topic", &req.topic)
        .append_pair("hub.reason", reason);
    if let Err(e) = out.get(&url, 0).await {
        let error = scrub(&crate::error::chain(&e).to_string(), &req.callback);
        tracing::info!(callback.host = %host(&req.callback), error, "could not send a denial");
    }
}
