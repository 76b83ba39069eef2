//! `GET /provenance?uri=…` or `?hash=sha-256:…` (`&verify=1` for a live check of the origin).
//!
//! JSON unless the client prefers HTML (a browser's `Accept` lists `text/html` before any
//! JSON type), so scripts and `curl` get JSON without asking. Unknown resources answer 404 in
//! the same format, with a message saying what was not found. Live checks fetch third-party
//! URIs on behalf of whoever asks, so only a few run at once.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::WebState;
use super::error::WebError;
use super::pages::provenance_page;
use crate::provenance::to_json;
use crate::publish::provenance::{Query, lookup};

struct Params {
    query: Query,
    verify: bool,
}

fn params(raw: Option<&str>) -> Result<Params, WebError> {
    let mut text = None;
    let mut verify = false;
    for (k, v) in url::form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
        match k.as_ref() {
            "uri" | "hash" | "q" => text = Some(v.into_owned()),
            "verify" => verify = matches!(v.as_ref(), "1" | "true" | "yes"),
            _ => {}
        }
    }
    let text = text.ok_or_else(|| {
        WebError::BadRequest("give ?uri=<Tributary, upstream or origin URI> or ?hash=sha-256:<hex>".into())
    })?;
    Ok(Params { query: Query::parse(&text).map_err(WebError::BadRequest)?, verify })
}

/// Whether the client asked for HTML before JSON.
fn wants_html(req: &HeaderMap) -> bool {
    let accept = req.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    let pos = |needle: &str| accept.find(needle);
    match (pos("text/html"), pos("json")) {
        (Some(h), Some(j)) => h < j,
        (Some(_), None) => true,
        _ => false,
    }
}

/// Answers a provenance request.
pub(crate) async fn provenance(st: &WebState, raw_query: Option<&str>, req: &HeaderMap) -> Result<Response, WebError> {
    let Params { query, verify } = params(raw_query)?;
    let p = st.shared.publisher.clone();
    let mut answer = tokio::task::spawn_blocking(move || lookup(p.store(), p.naming(), &query)).await??;
    let found = !answer.resources.is_empty();
    if verify && found {
        let _slot = st.shared.verify_slots.acquire().await.map_err(|e| WebError::Internal(e.to_string()))?;
        st.shared.checker().verify(&mut answer).await;
    }
    let status = if found { StatusCode::OK } else { StatusCode::NOT_FOUND };
    if wants_html(req) {
        return Ok(provenance_page(status, &answer));
    }
    let mut r = (status, to_json(&answer)).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn negotiation() {
        assert!(wants_html(&accept("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")));
        assert!(!wants_html(&accept("application/json")));
        assert!(!wants_html(&accept("*/*")));
        assert!(!wants_html(&HeaderMap::new()));
        assert!(!wants_html(&accept("application/json, text/html")));
    }

    #[test]
    fn parameters() {
        assert!(params(None).is_err());
        let p = params(Some("uri=http%3A%2F%2Fx.org%2Fa&verify=1")).unwrap();
        assert_eq!(p.query, Query::Uri("http://x.org/a".into()));
        assert!(p.verify);
        assert!(params(Some("hash=sha-256:zz")).is_err());
    }
}
