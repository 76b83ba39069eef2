//! `{base_url}oai`: the OAI-PMH endpoint (see `publish::oai`), by GET and by POST
//! (`application/x-www-form-urlencoded`, OAI-PMH 2.0 §3.1.1).
//!
//! What reaches the provider is bounded here: a query or form body of at most
//! [`MAX_BODY`] bytes and at most [`MAX_PAIRS`] arguments (no verb takes more than five; a
//! request with thousands gets `badArgument` after reading the first few). The answer streams
//! from the blocking pool through the same slots and stall limit as every long document,
//! except a list page made ahead, which is sent from memory; once a list page is sent, the
//! next is made (`publish::oai::ahead`). Off (404) unless `[aggregator]` names the repository
//! and its administrator.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, Request, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use super::error::{WebError, closing};
use super::{WebState, body};
use crate::model::W3cDateTime;
use crate::publish::oai::{MAX_TOKEN_LEN, NextPage, OaiProvider};

/// The largest form body read (a resumption token is at most [`MAX_TOKEN_LEN`]).
const MAX_BODY: usize = MAX_TOKEN_LEN + 4096;
/// Arguments passed on: one more than any request may have, so that too many is still seen.
const MAX_PAIRS: usize = 17;
/// OAI-PMH responses are XML; `text/xml` is what harvesters expect (and the spec shows).
const CONTENT_TYPE: &str = "text/xml; charset=utf-8";

/// GET `oai?…`.
pub(super) async fn get(State(st): State<WebState>, RawQuery(query): RawQuery) -> Result<Response, WebError> {
    let oai = provider(&st)?;
    let q = query.unwrap_or_default();
    if q.len() > MAX_BODY {
        return Err(WebError::BadRequest(format!("the query is longer than {MAX_BODY} bytes")));
    }
    Ok(respond(&st, oai, pairs(q.as_bytes())).await)
}

/// POST `oai` with a form body.
pub(super) async fn post(State(st): State<WebState>, req: Request) -> Result<Response, WebError> {
    let oai = provider(&st)?;
    let form = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| {
        v.split(';').next().is_some_and(|t| t.trim().eq_ignore_ascii_case("application/x-www-form-urlencoded"))
    });
    if !form {
        return Err(WebError::BadRequest("an OAI-PMH POST is application/x-www-form-urlencoded".into()));
    }
    let Ok(bytes) = axum::body::to_bytes(req.into_body(), MAX_BODY).await else {
        let refused = WebError::BadRequest(format!("the form is longer than {MAX_BODY} bytes"));
        return Ok(closing(refused.into_response()));
    };
    Ok(respond(&st, oai, pairs(&bytes)).await)
}

fn provider(st: &WebState) -> Result<Arc<OaiProvider>, WebError> {
    st.oai
        .clone()
        .ok_or_else(|| WebError::NotFound("OAI-PMH is off: [aggregator] needs oai_name and oai_admin_email".into()))
}

/// The decoded arguments, in order, at most [`MAX_PAIRS`].
fn pairs(form: &[u8]) -> Vec<(String, String)> {
    url::form_urlencoded::parse(form)
        .filter(|(k, v)| !(k.is_empty() && v.is_empty()))
        .take(MAX_PAIRS)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

async fn respond(st: &WebState, oai: Arc<OaiProvider>, pairs: Vec<(String, String)>) -> Response {
    let now = W3cDateTime::now();
    let stream = match made(st, &oai, &pairs, now).await {
        Some(body) => body,
        None => streamed(st, oai, pairs, now).await,
    };
    let mut r = stream.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// The answer to a request for a list page made ahead (`publish::oai::ahead`), sent from
/// memory as it is; the next page is made meanwhile.
async fn made(st: &WebState, oai: &Arc<OaiProvider>, pairs: &[(String, String)], now: W3cDateTime) -> Option<Body> {
    if !pairs.iter().any(|(k, _)| k == "resumptionToken") {
        return None;
    }
    // A page made already is answered here: no blocking, nothing to wait for.
    let ready = match oai.respond_made(pairs, &now, false) {
        Some(r) => r,
        None => {
            let permit = st.shared.stream_slots().0.clone().acquire_owned().await;
            let (o, p) = (oai.clone(), pairs.to_vec());
            // Blocking: it waits for a page being made.
            let r = tokio::task::spawn_blocking(move || o.respond_made(&p, &now, true)).await.ok()??;
            drop(permit);
            r
        }
    };
    if let Some(next) = ready.next {
        let o = oai.clone();
        tokio::task::spawn_blocking(move || o.make_next(&next));
    }
    let parts = ready.parts.into_iter().map(|p| Ok::<_, std::io::Error>(Bytes::from(p)));
    Some(Body::from_stream(futures_util::stream::iter(parts)))
}

/// The answer made as it is sent; a list page's next page is made once it is complete.
async fn streamed(st: &WebState, oai: Arc<OaiProvider>, pairs: Vec<(String, String)>, now: W3cDateTime) -> Body {
    let what = format!("OAI-PMH {}", pairs.iter().find(|(k, _)| k == "verb").map_or("", |(_, v)| v.as_str()));
    let ahead = oai.clone();
    let produce = move |w: &mut body::ChannelWriter| oai.respond(&pairs, now, w);
    let then = move |next: Option<NextPage>| {
        if let Some(page) = next {
            ahead.make_next(&page);
        }
    };
    body::blocking_body_then(st.shared.stream_slots(), what, produce, then).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_decoded_and_capped() {
        let p = pairs(b"verb=ListRecords&resumptionToken=a%3Db&&x=");
        assert_eq!(p[1], ("resumptionToken".into(), "a=b".into()));
        assert_eq!(p.len(), 3);
        let many = "a=1&".repeat(5000);
        assert_eq!(pairs(many.as_bytes()).len(), MAX_PAIRS);
    }
}
