//! `[hub]`: Tributary's own change notifications (ResourceSync Change Notification 1.0.1 over
//! WebSub) and the built-in hub that delivers them. `[aggregator] hub = URL` names an external
//! hub instead; the keys here that concern subscribers (leases, queues, retries, the address
//! policy for callbacks) then have no effect, since that hub owns its subscribers.

use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;
use toml::Spanned;

use super::{ConfigError, Locator};

type Result<T> = std::result::Result<T, ConfigError>;

/// Subscribe requests one client may make at once before `client_rate` applies: enough for a
/// subscriber to subscribe to every set of a small aggregator in one go.
pub const CLIENT_BURST: u32 = 20;

/// How Tributary hands a notification to an external hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExternalMode {
    /// POST the payload itself with `Content-Type: application/xml` and the `Link` header
    /// naming topic and hub (Change Notification §4.1): the hub relays the body as it is.
    #[default]
    Payload,
    /// The generic WebSub ping, `hub.mode=publish&hub.url=TOPIC` (form-encoded): the hub
    /// fetches the topic, which serves the latest payload, and delivers that.
    Ping,
}

/// The validated `[hub]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubSettings {
    /// Advertise notification channels and send notifications at all (`enabled`, default true).
    pub enabled: bool,
    /// How to publish to an external hub (`external_mode`: "payload" or "ping").
    pub external_mode: ExternalMode,
    /// Entries per notification payload (`notification_entries`, 1–50,000, default 1,000).
    pub notification_entries: usize,
    /// Lease granted when the subscriber asks for none (`lease_default`, default 10 days, as
    /// WebSub §5.1 suggests).
    pub lease_default: Duration,
    /// Shortest lease granted (`lease_min`, default 5 minutes, Change Notification §4.2).
    pub lease_min: Duration,
    /// Longest lease granted (`lease_max`, default 31 days = 2,678,400 s, Change Notification §4.2).
    pub lease_max: Duration,
    /// Notifications held for one subscriber while its deliveries are under way or retried
    /// (`queue`, 1–10,000, default 64); past it the backlog is dropped.
    pub queue: usize,
    /// Delivery attempts of one notification (`delivery_attempts`, 1–100, default 8).
    pub delivery_attempts: u32,
    /// First wait before a delivery is retried, doubling each time (`retry_backoff`, default 1 s).
    pub retry_backoff: Duration,
    /// Longest wait between two attempts (`max_retry_backoff`, default 5 minutes).
    pub max_retry_backoff: Duration,
    /// Whole time one delivery or verification request may take (`request_timeout`, default 10 s).
    pub request_timeout: Duration,
    /// Subscriptions held at once, verified or pending (`max_subscriptions`, 1–1,000,000,
    /// default 10,000): beyond, new subscribe requests get 503.
    pub max_subscriptions: usize,
    /// Subscriptions, verified or pending, whose callbacks are on one host (`max_per_host`,
    /// 1–1,000,000, default 100): beyond, that host's new subscribe requests get 429.
    pub max_per_host: usize,
    /// Subscribe requests one client address may make (`client_rate`, default "1/s" with a
    /// burst of [`CLIENT_BURST`]); beyond, 429 with `Retry-After`. Unsubscribe requests are
    /// never limited.
    pub client_rate: super::Rate,
    /// A subscription whose notifications are given up this many times in a row is dropped
    /// (`max_failed_notifications`, 1–100,000, default 20).
    pub max_failed_notifications: u32,
    /// A subscription that has had nothing but failed deliveries for this long is dropped
    /// (`max_failing_for`, default 1 day).
    pub max_failing_for: Duration,
    /// Let callbacks be on loopback, private and other non-public addresses (`allow_private`,
    /// default false): the fetching rule, for tests and a demo on one machine.
    pub allow_private: bool,
    /// Networks callbacks may be on even when `allow_private` is off (`allow_networks`).
    pub allow_networks: Vec<IpNet>,
}

impl Default for HubSettings {
    fn default() -> Self {
        let s = Duration::from_secs;
        HubSettings {
            enabled: true,
            external_mode: ExternalMode::Payload,
            notification_entries: 1_000,
            lease_default: s(864_000),
            lease_min: s(300),
            lease_max: s(2_678_400),
            queue: 64,
            delivery_attempts: 8,
            retry_backoff: s(1),
            max_retry_backoff: s(300),
            request_timeout: s(10),
            max_subscriptions: 10_000,
            max_per_host: 100,
            client_rate: super::Rate::Every(s(1)),
            max_failed_notifications: 20,
            max_failing_for: s(86_400),
            allow_private: false,
            allow_networks: Vec::new(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHub {
    enabled: Option<bool>,
    external_mode: Option<Spanned<String>>,
    notification_entries: Option<Spanned<i64>>,
    lease_default: Option<Spanned<String>>,
    lease_min: Option<Spanned<String>>,
    lease_max: Option<Spanned<String>>,
    queue: Option<Spanned<i64>>,
    delivery_attempts: Option<Spanned<i64>>,
    retry_backoff: Option<Spanned<String>>,
    max_retry_backoff: Option<Spanned<String>>,
    request_timeout: Option<Spanned<String>>,
    max_subscriptions: Option<Spanned<i64>>,
    max_per_host: Option<Spanned<i64>>,
    client_rate: Option<Spanned<String>>,
    max_failed_notifications: Option<Spanned<i64>>,
    max_failing_for: Option<Spanned<String>>,
    allow_private: Option<bool>,
    allow_networks: Option<Spanned<Vec<String>>>,
}

impl RawHub {
    pub(super) fn validate(&self, at: &Locator<'_>) -> Result<HubSettings> {
        let mut h = HubSettings::default();
        if let Some(v) = self.enabled {
            h.enabled = v;
        }
        if let Some(v) = &self.external_mode {
            h.external_mode = match v.get_ref().as_str() {
                "payload" => ExternalMode::Payload,
                "ping" => ExternalMode::Ping,
                other => return Err(at.error(v.span(), "external_mode", format!("`{other}` is not payload or ping"))),
            };
        }
        if let Some(v) = &self.notification_entries {
            h.notification_entries = at.int(v, "notification_entries", 1, 50_000)? as usize;
        }
        self.leases(&mut h, at)?;
        if let Some(v) = &self.queue {
            h.queue = at.int(v, "queue", 1, 10_000)? as usize;
        }
        if let Some(v) = &self.delivery_attempts {
            h.delivery_attempts = at.int(v, "delivery_attempts", 1, 100)?;
        }
        let positive = |v: &Spanned<String>, key: &str| -> Result<Duration> {
            let d = at.duration(v, key)?;
            if d.is_zero() { Err(at.error(v.span(), key, "must be longer than 0")) } else { Ok(d) }
        };
        if let Some(v) = &self.retry_backoff {
            h.retry_backoff = positive(v, "retry_backoff")?;
        }
        if let Some(v) = &self.max_retry_backoff {
            h.max_retry_backoff = positive(v, "max_retry_backoff")?;
        }
        if let Some(v) = &self.request_timeout {
            h.request_timeout = positive(v, "request_timeout")?;
        }
        if let Some(v) = &self.max_subscriptions {
            h.max_subscriptions = at.int(v, "max_subscriptions", 1, 1_000_000)? as usize;
        }
        self.client_limits(&mut h, at)?;
        if let Some(v) = self.allow_private {
            h.allow_private = v;
        }
        if let Some(v) = &self.allow_networks {
            h.allow_networks = at.networks(v)?;
        }
        Ok(h)
    }

    /// The limits on one client, one callback host and one failing subscriber.
    fn client_limits(&self, h: &mut HubSettings, at: &Locator<'_>) -> Result<()> {
        if let Some(v) = &self.max_per_host {
            h.max_per_host = at.int(v, "max_per_host", 1, 1_000_000)? as usize;
        }
        if let Some(v) = &self.client_rate {
            h.client_rate = super::parse_rate(v.get_ref()).map_err(|m| at.error(v.span(), "client_rate", m))?;
        }
        if let Some(v) = &self.max_failed_notifications {
            h.max_failed_notifications = at.int(v, "max_failed_notifications", 1, 100_000)?;
        }
        if let Some(v) = &self.max_failing_for {
            h.max_failing_for = at.duration(v, "max_failing_for")?;
            if h.max_failing_for.is_zero() {
                return Err(at.error(v.span(), "max_failing_for", "must be longer than 0"));
            }
        }
        Ok(())
    }

    /// `lease_min <= lease_default <= lease_max`, each at least a second.
    fn leases(&self, h: &mut HubSettings, at: &Locator<'_>) -> Result<()> {
        let set = |v: &Option<Spanned<String>>, key: &str, slot: &mut Duration| -> Result<()> {
            if let Some(v) = v {
                let d = at.duration(v, key)?;
                if d < Duration::from_secs(1) {
                    return Err(at.error(v.span(), key, "must be at least 1s"));
                }
                *slot = d;
            }
            Ok(())
        };
        set(&self.lease_default, "lease_default", &mut h.lease_default)?;
        set(&self.lease_min, "lease_min", &mut h.lease_min)?;
        set(&self.lease_max, "lease_max", &mut h.lease_max)?;
        if !(h.lease_min <= h.lease_default && h.lease_default <= h.lease_max) {
            let span = [&self.lease_default, &self.lease_min, &self.lease_max]
                .into_iter()
                .flatten()
                .next()
                .map_or(0..0, Spanned::span);
            return Err(at.error(span, "lease_default", "leases must satisfy lease_min <= lease_default <= lease_max"));
        }
        Ok(())
    }
}
