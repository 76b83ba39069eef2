//! Publishing to an external hub (`[aggregator] hub = URL`), in one of two ways
//! (`[hub] external_mode`):
//!
//! - `payload` (default), Change Notification 1.0.1 §4.1: POST the payload itself with
//!   `Content-Type: application/xml` and `Link: <topic>; rel="self", <hub>; rel="hub"`; the hub
//!   relays it to its subscribers as it is (the reference implementation
//!   `resync/resourcesync_push` works this way).
//! - `ping`, the publish request most generic WebSub hubs take (WebSub leaves the publisher's
//!   side open, §6): a form POST `hub.mode=publish&hub.url=TOPIC` (and `hub.topic`, which some
//!   hubs read instead); the hub then GETs the topic, which serves the latest payload.
//!
//! Any 2xx is success ([N] asks for 200; the reference hub answers 204). Anything else is
//! retried by the notifier, so an unreachable hub delays notifications but loses none.

use bytes::Bytes;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue, LINK};
use url::Url;

use super::error::NotifyError;
use crate::config::ExternalMode;
use crate::fetch::Outbound;

/// An external hub and how to publish to it.
#[derive(Debug, Clone)]
pub(crate) struct ExternalHub {
    pub(crate) url: Url,
    pub(crate) mode: ExternalMode,
    pub(crate) out: Outbound,
}

impl ExternalHub {
    /// Publishes one notification of `topic`.
    pub(crate) async fn publish(&self, topic: &str, link: &str, body: &Bytes) -> Result<(), NotifyError> {
        let mut h = HeaderMap::new();
        let body = match self.mode {
            ExternalMode::Payload => {
                h.insert(CONTENT_TYPE, HeaderValue::from_static("application/xml"));
                if let Ok(v) = HeaderValue::from_str(link) {
                    h.insert(LINK, v);
                }
                body.clone()
            }
            ExternalMode::Ping => {
                h.insert(CONTENT_TYPE, HeaderValue::from_static("application/x-www-form-urlencoded"));
                let form = url::form_urlencoded::Serializer::new(String::new())
                    .append_pair("hub.mode", "publish")
                    .append_pair("hub.url", topic)
                    .append_pair("hub.topic", topic)
                    .finish();
                Bytes::from(form)
            }
        };
        let reply = self.out.post(&self.url, h, body, 1024).await?;
        if (200..300).contains(&reply.status) {
            Ok(())
        } else {
            Err(NotifyError::Refused { hub: self.url.to_string(), status: reply.status })
        }
    }
}
