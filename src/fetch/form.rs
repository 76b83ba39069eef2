//! Form POSTs to a WebSub hub: the subscriber's `hub.mode=subscribe` / `unsubscribe` requests
//! (WebSub §5.1). Here, not in the harvester, because every request Tributary sends goes
//! through the fetcher's clients and their SSRF guard.
//!
//! A hub answers such a request with `202 Accepted` and verifies later, or redirects (307/308)
//! to another hub; the caller decides what each answer means, so this returns the status and
//! `Location` as they came, with no redirect followed and no retry (the subscriber retries on
//! its own schedule). Only the first few KiB of a body are kept, for the log.

use std::time::Duration;

use reqwest::header;
use url::Url;

use super::client::Fetcher;
use super::error::FetchError;
use super::guard::GuardPolicy;
use crate::config::Settings;

/// Bytes of a hub's answer kept (hubs explain a refusal in the body).
const BODY_KEPT: usize = 2048;

/// What a hub answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormAnswer {
    /// The HTTP status.
    pub status: u16,
    /// `Location`, for a redirect.
    pub location: Option<String>,
    /// The start of the body, lossily decoded.
    pub body: String,
}

impl Fetcher {
    /// POSTs `form` (`application/x-www-form-urlencoded`, UTF-8) to `url` under `settings`'
    /// address policy, waiting at most `settings.header_timeout` for the answer.
    ///
    /// # Errors
    /// [`FetchError`] when the request could not be made or no answer came in time.
    pub async fn post_form(
        &self,
        url: &Url,
        form: &[(&str, &str)],
        settings: &Settings,
    ) -> Result<FormAnswer, FetchError> {
        let policy = GuardPolicy::from_settings(settings);
        policy.check_url(url)?;
        let client = self.client(&policy, settings.connect_timeout)?;
        let body = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(form).finish();
        let wait = settings.header_timeout.max(Duration::from_secs(1));
        let sent = client
            .post(url.clone())
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded; charset=utf-8")
            .body(body)
            .timeout(wait)
            .send()
            .await
            .map_err(|e| super::request::map_send_error(url, e))?;
        let status = sent.status().as_u16();
        let location = sent.headers().get(header::LOCATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let mut kept = Vec::new();
        let mut resp = sent;
        // Bounded: stops after BODY_KEPT bytes, and the request's timeout bounds the wait.
        while kept.len() < BODY_KEPT {
            match resp.chunk().await {
                Ok(Some(c)) => kept.extend_from_slice(&c[..c.len().min(BODY_KEPT - kept.len())]),
                _ => break,
            }
        }
        Ok(FormAnswer { status, location, body: String::from_utf8_lossy(&kept).into_owned() })
    }
}
