//! What every WebSub party in Tributary shares (W3C WebSub §5–§7, ResourceSync Change
//! Notification 1.0.1 §4), kept apart from the parties themselves so they agree byte for byte:
//! Tributary's built-in hub (`notify`, its subscriptions in the store), the push subscriber
//! (`harvest::push`) and a simulated Source's own hub (`simulate`, its subscriptions in memory).
//!
//! - `signature`: the `X-Hub-Signature` HMAC and the `Link` header (pure).
//! - `request`: a subscriber's form-encoded request to a hub, read and checked (pure).
//! - `intent`: a hub's intent verification and denial GETs to a callback.
//! - `deliver`: one subscriber's bounded queue and the task that delivers it, with retries.
//! - `redact`: callback URLs (capabilities) kept out of log lines.
//!
//! Store-agnostic: a hub built on these decides where subscriptions live. The requests go
//! through [`crate::fetch::Outbound`], the client for hub traffic (no redirects, one deadline,
//! the address policy its owner chose).

pub(crate) mod deliver;
pub(crate) mod intent;
pub(crate) mod redact;
pub(crate) mod request;
mod signature;

pub use deliver::DeliveryCounts;
pub(crate) use request::is_form;
pub use signature::{
    MAX_SECRET_BYTES, Method, SIGNATURE_HEADER, Signature, SignatureError, Streaming, link_header, sign, verify,
};
