//! The routes a hub calls: `GET {public_url path}websub/{id}` to verify intent (WebSub §5.3)
//! and `POST` to deliver a notification (§7). Each subscription has its own random `id`, so a
//! delivery is matched to its subscription by the URL alone, never by its `Link` headers.
//!
//! Verification is answered only for a request Tributary made and still waits for: the
//! challenge is echoed exactly, anything else gets `404`. What a delivery gets, checked in
//! this order (each refusal counted on `/metrics` as
//! `tributary_push_deliveries_total{outcome}` and changing nothing):
//!
//! | delivery | answer | outcome |
//! | --- | --- | --- |
//! | more at once than the subscriber works on | `503` + `Retry-After` | `busy` |
//! | unknown callback id, or its source is no longer configured for push | `410 Gone` (the hub may end the subscription) | `unknown_callback` |
//! | a subscription not verified yet | `404` | `unverified` |
//! | a body over the source's `max_document_bytes` (by `Content-Length`, or while reading) | `413` | `oversized` |
//! | no `X-Hub-Signature` | `403` | `unsigned` |
//! | a signature that does not match (or an unknown method) | `403` | `bad_signature` |
//! | a payload that is not a change notification, or hostile XML | `400` | `malformed` |
//! | a notification older than the last applied | `204` | `stale` |
//! | a source the operator paused (`tributary pause`): dropped, the poll after the resume catches up | `204` | `paused` |
//! | applied | `204` | `applied` (`gap` when a poll was asked for) |
//! | the store failed | `500` (the hub retries) | `error` |
//!
//! WebSub lets a subscriber acknowledge a badly signed delivery with `2xx` while ignoring it;
//! Tributary answers `403` instead, so an honest hub holding a stale secret shows failures in
//! its logs, and a forger learns nothing the signature check did not already tell it. The
//! answer comes only after the changes are committed, so a crash before that leaves the hub
//! to redeliver (and the next poll to find them anyway).

use std::collections::HashMap;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use url::Url;

use super::apply::{self, Outcome};
use super::payload::{self, Notification};
use super::{Push, count, unix_now};
use crate::config::Source;
use crate::store::{Lease, Subscription};
use crate::websub::{self, Signature, SignatureError, Streaming};

pub(super) fn router(push: Push) -> Router {
    let path = format!("{}websub/{{id}}", push.inner.public_url.path());
    Router::new().route(&path, get(verify).post(deliver)).with_state(push)
}

fn answer(status: StatusCode, text: &'static str) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response()
}

/// The hub's verification of intent (or its denial).
async fn verify(State(push): State<Push>, Path(id): Path<String>, RawQuery(query): RawQuery) -> Response {
    let q: HashMap<String, String> =
        url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()).into_owned().collect();
    let (mode, topic) = (q.get("hub.mode").map(String::as_str), q.get("hub.topic").map(String::as_str));
    let _rows = push.inner.rows.lock().await;
    let Ok(Some(mut sub)) = push.load(&id).await else {
        return answer(StatusCode::NOT_FOUND, "no such subscription");
    };
    if topic != Some(sub.topic.as_str()) {
        return answer(StatusCode::NOT_FOUND, "not a topic of this subscription");
    }
    let pending = sub.pending.as_ref().map(|p| p.mode.as_str());
    let challenge = q.get("hub.challenge").filter(|c| !c.is_empty());
    match (mode, pending, challenge) {
        (Some("subscribe"), Some("subscribe"), Some(c)) => {
            activate(&mut sub, q.get("hub.lease_seconds"));
            push.verified(&sub.id);
            settled(&push, sub, true, c.clone()).await
        }
        (Some("unsubscribe"), Some("unsubscribe"), Some(c)) => match push.remove(&sub.id).await {
            Ok(()) => echo(c.clone()),
            Err(_) => answer(StatusCode::INTERNAL_SERVER_ERROR, "store error"),
        },
        (Some("denied"), _, _) => {
            // Anyone who knows the callback URL can send this, so it is a hint, not an order:
            // the lease in force (if any) stands, and the subscription is asked for again soon.
            let reason = q.get("hub.reason").map_or("no reason given", String::as_str);
            let wait = push.denied(&sub.id);
            tracing::warn!(source.id = %sub.source, hub = %sub.hub, reason, retry_in_s = wait, "told the subscription was denied; subscribing again");
            sub.pending = None;
            sub.last_error = Some(format!("denied by the hub: {}", reason.chars().take(200).collect::<String>()));
            sub.retry_at = Some(unix_now() + wait);
            let subscribed = super::lifecycle::subscribed(Some(&sub), unix_now());
            settled(&push, sub, subscribed, String::new()).await
        }
        _ => answer(StatusCode::NOT_FOUND, "no such request is waiting for verification"),
    }
}

/// The pending subscribe request becomes the lease; the one it renews is kept as previous.
fn activate(sub: &mut Subscription, lease_seconds: Option<&String>) {
    let Some(p) = sub.pending.take() else { return };
    let now = unix_now();
    // Required on a subscribe verification; without it, the lease asked for.
    let granted = lease_seconds.and_then(|l| l.trim().parse::<i64>().ok()).filter(|l| *l > 0);
    let granted = granted.unwrap_or(i64::try_from(p.lease_seconds).unwrap_or(i64::MAX / 4));
    let previous_secret = sub.active.take().map(|l| l.secret);
    sub.active = Some(Lease { secret: p.secret, previous_secret, verified: now, expires: now.saturating_add(granted) });
    sub.last_error = None;
    sub.retry_at = None;
    tracing::info!(source.id = %sub.source, hub = %sub.hub, lease_seconds = granted, "subscription verified");
}

/// Saves the row (before answering: the hub acts on the answer) and tells the source's task.
async fn settled(push: &Push, sub: Subscription, subscribed: bool, body: String) -> Response {
    let source = sub.source.clone();
    if push.save(sub).await.is_err() {
        return answer(StatusCode::INTERNAL_SERVER_ERROR, "store error");
    }
    if let Some(turn) = push.turn(&source) {
        turn.subscribed.store(subscribed, std::sync::atomic::Ordering::Release);
        turn.changed.notify_one();
        if !subscribed {
            turn.poll_now.notify_one();
        }
    }
    echo(body)
}

fn echo(challenge: String) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], challenge).into_response()
}

/// A delivery; see the module docs for what each kind gets.
async fn deliver(State(push): State<Push>, Path(id): Path<String>, headers: HeaderMap, body: Body) -> Response {
    let Ok(_slot) = push.inner.deliveries.try_acquire() else {
        count("-", "busy");
        let mut r = answer(StatusCode::SERVICE_UNAVAILABLE, "busy; retry");
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return r;
    };
    let (sub, lease, source, sets) = match admitted(&push, &id).await {
        Ok(found) => found,
        Err(refusal) => return refusal,
    };
    let (notification, tag) = match read_checked(&lease, &source, &headers, body).await {
        Ok(read) => read,
        Err(refusal) => return refusal,
    };
    // A payload signed alike was applied already: a replay (or a hub's redelivery of what
    // was committed) changes nothing.
    if push.seen(&sub.id, &tag) {
        return counted(&source.id, "replay", StatusCode::NO_CONTENT, "");
    }
    let answer = applied(&push, &sub, &source, &sets, notification).await;
    if answer.status() == StatusCode::NO_CONTENT {
        push.remember(&sub.id, tag);
    }
    answer
}

/// The verified subscription behind callback `id`, its lease, and its source with its sets.
async fn admitted(push: &Push, id: &str) -> Result<(Subscription, Lease, Source, Vec<String>), Response> {
    let sub = match push.load(id).await {
        Ok(Some(s)) => s,
        Ok(None) => return Err(counted("-", "unknown_callback", StatusCode::GONE, "no such subscription")),
        Err(_) => return Err(counted("-", "error", StatusCode::INTERNAL_SERVER_ERROR, "store error")),
    };
    let Some(configured) = push.pushing(&sub.source) else {
        return Err(counted("-", "unknown_callback", StatusCode::GONE, "no such subscription"));
    };
    let (source, sets) = (configured.source.clone(), configured.sets.clone());
    let Some(lease) = sub.active.clone() else {
        return Err(counted(&source.id, "unverified", StatusCode::NOT_FOUND, "the subscription is not verified"));
    };
    Ok((sub, lease, source, sets))
}

/// The body, read within the source's `push_max_body` and `push_body_timeout` while its HMAC
/// is computed, its signature checked, then parsed. The signature header is checked before
/// anything is read; the lease's end before that.
async fn read_checked(
    lease: &Lease,
    source: &Source,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Notification, Vec<u8>), Response> {
    let id = source.id.as_str();
    let s = &source.settings;
    if lease.expires <= unix_now() {
        return Err(counted(id, "expired", StatusCode::FORBIDDEN, "the subscription's lease has ended"));
    }
    let header = headers.get(websub::SIGNATURE_HEADER).map(|v| v.to_str().unwrap_or(""));
    let sig = match Signature::parse(header).and_then(|sig| strong_enough(sig, s.push_sha1)) {
        Ok(sig) => sig,
        Err(e) => return Err(refused_signature(id, &e)),
    };
    let max = s.push_max_body.min(s.max_document_bytes);
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(unread(counted(id, "oversized", StatusCode::PAYLOAD_TOO_LARGE, "the payload is too large")));
    }
    let macs = secrets(lease, s.push_secret_grace).map(|k| Streaming::new(sig.method, k.as_bytes())).collect();
    let (bytes, macs) = match tokio::time::timeout(s.push_body_timeout, read_body(body, max, macs)).await {
        Ok(Ok(read)) => read,
        Ok(Err(too_large)) => return Err(unread(counted(id, "oversized", StatusCode::PAYLOAD_TOO_LARGE, too_large))),
        Err(_) => return Err(unread(counted(id, "slow_body", StatusCode::REQUEST_TIMEOUT, "the body took too long"))),
    };
    if !macs.into_iter().any(|m| m.matches(&sig)) {
        return Err(refused_signature(id, &SignatureError::Mismatch));
    }
    // Named by its source in errors, not by the callback URL: that is a capability, kept out
    // of the log.
    let name = format!("a delivery for source {id}");
    match tokio::task::spawn_blocking(move || payload::parse(&bytes, &name, max)).await {
        Ok(Ok(n)) => Ok((n, sig.tag().to_vec())),
        Ok(Err(e)) => {
            tracing::warn!(source.id = %id, error = %crate::error::chain(&e), "a delivery is refused");
            Err(counted(id, "malformed", StatusCode::BAD_REQUEST, "not a change notification"))
        }
        Err(_) => Err(counted(id, "error", StatusCode::INTERNAL_SERVER_ERROR, "internal error")),
    }
}

/// sha1 only where the source opted into it.
fn strong_enough(sig: Signature, sha1: bool) -> Result<Signature, SignatureError> {
    if sig.method == websub::Method::Sha1 && !sha1 { Err(SignatureError::Weak) } else { Ok(sig) }
}

fn refused_signature(id: &str, e: &SignatureError) -> Response {
    tracing::warn!(source.id = %id, error = %e, "a delivery is ignored: its signature does not check");
    let outcome = match e {
        SignatureError::Missing => "unsigned",
        SignatureError::Weak => "weak_signature",
        _ => "bad_signature",
    };
    counted(id, outcome, StatusCode::FORBIDDEN, "the signature does not check")
}

/// The secrets a delivery may be signed with: the lease's, and the one it renewed for
/// `grace` after the renewal was verified (a hub may have signed with it just before).
fn secrets(lease: &Lease, grace: std::time::Duration) -> impl Iterator<Item = &String> {
    let until = lease.verified.saturating_add(i64::try_from(grace.as_secs()).unwrap_or(i64::MAX / 4));
    let previous = lease.previous_secret.as_ref().filter(|_| unix_now() < until);
    std::iter::once(&lease.secret).chain(previous)
}

/// Reads the body, at most `max` bytes, feeding each chunk to every running HMAC as it comes.
async fn read_body(body: Body, max: u64, mut macs: Vec<Streaming>) -> Result<(Vec<u8>, Vec<Streaming>), &'static str> {
    use futures_util::StreamExt as _;
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    // Bounded by `max` and the caller's timeout.
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else { return Err("the payload could not be read") };
        if bytes.len() as u64 + chunk.len() as u64 > max {
            return Err("the payload is too large");
        }
        macs.iter_mut().for_each(|m| m.update(&chunk));
        bytes.extend_from_slice(&chunk);
    }
    Ok((bytes, macs))
}

/// Applies a checked notification and answers once it is committed.
async fn applied(push: &Push, sub: &Subscription, source: &Source, sets: &[String], n: Notification) -> Response {
    let id = source.id.as_str();
    let (Some(ctx), Some(turn), Ok(topic)) = (push.ctx(), push.turn(id), Url::parse(&sub.topic)) else {
        return counted(id, "busy", StatusCode::SERVICE_UNAVAILABLE, "not harvesting yet");
    };
    // Taken and dropped: the hub must not retry it for the length of a pause. After the
    // resume, the next notification's `from` shows the gap and a poll fetches what was missed.
    if turn.is_paused() {
        return counted(id, "paused", StatusCode::NO_CONTENT, "");
    }
    match apply::apply(ctx, &turn, source, sets, &topic, n).await {
        Ok(Outcome::Stale) => counted(id, "stale", StatusCode::NO_CONTENT, ""),
        Ok(Outcome::Applied { report, gap }) => {
            crate::harvest::metrics::record_resources(&report);
            tracing::info!(source.id = %id, fetched = report.fetched, created = report.created, updated = report.updated,
                deleted = report.deleted, failed = report.failed, "notification applied");
            counted(id, if gap { "gap" } else { "applied" }, StatusCode::NO_CONTENT, "")
        }
        Err(e) => {
            tracing::error!(source.id = %id, error = %crate::error::chain(&e), "a notification could not be applied");
            counted(id, "error", StatusCode::INTERNAL_SERVER_ERROR, "the notification could not be applied")
        }
    }
}

/// Counts the outcome and answers with `status`.
/// `r` with `Connection: close`: it answers before the body was read whole, so the connection
/// closes after it, and a hub that pools connections must not send its next delivery down it.
fn unread(mut r: Response) -> Response {
    r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

fn counted(source: &str, outcome: &'static str, status: StatusCode, text: &'static str) -> Response {
    count(source, outcome);
    if status == StatusCode::NO_CONTENT {
        return status.into_response();
    }
    answer(status, text)
}
