//! The HTTP face of Tributary's change notifications: each set's topic URI and the built-in
//! hub's endpoint. The web layer only routes; [`crate::notify`] decides every answer.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::WebState;
use super::error::{WebError, closing};

/// `sets/{set}/notifications` (Change Notification §4.1): 200, `application/xml`, the `Link`
/// header naming topic and hub, and the set's latest payload (one without entries, `from` =
/// `until` = now, before the first one since start) — what a ping-model hub fetches.
pub(super) fn topic(st: &WebState, set: &str) -> Result<Response, WebError> {
    let Some(push) = &st.shared.push else {
        return Err(WebError::NotFound(format!("set {set:?} has no notification channel (notifications are off)")));
    };
    let answer = push.topic(set);
    let mut r = Body::from(answer.body).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/xml"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(&answer.link) {
        h.insert(header::LINK, v);
    }
    Ok(r)
}

/// `POST hub`: a WebSub subscribe or unsubscribe request.
pub(super) fn request(st: &WebState, headers: &HeaderMap, body: &Bytes, client: Option<std::net::IpAddr>) -> Response {
    let Some(push) = &st.shared.push else {
        return text(StatusCode::NOT_FOUND, "notifications are off on this aggregator".into());
    };
    let form = crate::websub::is_form(headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()));
    let answer = push.hub_request(form, body, client);
    let mut r = text(StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), answer.text);
    if let Some(secs) = answer.retry_after {
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    r
}

fn text(status: StatusCode, mut message: String) -> Response {
    message.push('\n');
    let mut r = (status, message).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// A request body over the hub's limit (or one that could not be read).
pub(super) fn too_large() -> Response {
    closing(text(StatusCode::PAYLOAD_TOO_LARGE, "a hub request is a small form; this one is too large".into()))
}

/// Anything but POST at the hub.
pub(super) fn post_only() -> Response {
    let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "the hub takes POST requests (WebSub)".into());
    r.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
    r
}
