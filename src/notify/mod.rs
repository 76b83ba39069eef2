//! Tributary's own change notifications (ResourceSync Change Notification 1.0.1 over W3C
//! WebSub): what makes the aggregate a push Source as well as a pull one.
//!
//! # Architecture
//! - `notifier`: follows each set's change log (woken by the store when a flush makes events
//!   visible) and hands every batch of committed events on as payloads built by
//!   [`crate::publish`] (`Publisher::notifications`, the Change List entry writer).
//! - `hub`: the built-in hub at `{base_url}hub` — subscriptions with intent verification,
//!   leases, secrets — saved in the store; the store-agnostic parts it is built from (a
//!   subscriber's form checked, intent verification, one bounded delivery queue and task per
//!   subscriber with retries, signatures and the drop-on-overflow rule) are in
//!   [`crate::websub`], shared with the simulator's hub.
//! - `external`: publishing to an external hub instead (`[aggregator] hub = URL`).
//! - `error`: [`NotifyError`].
//!
//! Depends on `publish`, `store`, `fetch` (the SSRF-guarded [`Outbound`] client), `config`,
//! `naming` and [`crate::websub`]; the web server routes `/hub` and the topics here; the
//! harvester knows nothing of it (the store's listener is the only link, and it only wakes
//! the notifier), so a slow subscriber can never slow harvesting.

mod error;
mod external;
mod hub;
mod notifier;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::{Notify, watch};
use url::Url;

pub use crate::websub::DeliveryCounts;
pub use error::NotifyError;
pub use hub::HubAnswer;

use crate::config::{Config, HubSettings};
use crate::fetch::{Outbound, OutboundOptions};
use crate::publish::{Notification, Publisher};
use crate::websub::deliver::Payload;
use external::ExternalHub;
use hub::Hub;

/// Longest a shutdown waits for the built-in hub's queues to empty: what the notifier handed
/// on before the stop is delivered, unless a subscriber is slow (it then sees a gap).
const DRAIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Where payloads go.
#[derive(Debug)]
enum Sender {
    Builtin(Arc<Hub>),
    External(ExternalHub),
}

#[derive(Debug)]
struct Shared {
    publisher: Arc<Publisher>,
    settings: HubSettings,
    /// The hub named in the `Link` headers and the Capability Lists.
    hub_url: String,
    sender: Sender,
    /// The latest payload per set: what its topic URI serves.
    latest: Mutex<HashMap<String, Arc<Payload>>>,
    wake: Notify,
}

impl Shared {
    fn payload(&self, n: &Notification) -> Arc<Payload> {
        let topic = self.publisher.naming().notification_topic(&n.set);
        Arc::new(Payload { body: Bytes::from(n.body.clone()), link: crate::websub::link_header(&topic, &self.hub_url) })
    }
}

/// What a topic URI answers (Change Notification §4.1).
#[derive(Debug, Clone)]
pub struct TopicAnswer {
    /// The latest payload of the set, or one with no entries before the first since start.
    pub body: Bytes,
    /// `<topic>; rel="self", <hub>; rel="hub"`.
    pub link: String,
}

/// A set's subscriptions in total, as public pages show them: counts only, since a callback
/// URL is a capability of its subscriber (whoever knows it can post to it).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SubscriberTotals {
    /// Subscriptions in force.
    pub subscriptions: usize,
    /// Delivered notifications.
    pub delivered: u64,
    /// Failed delivery attempts.
    pub failed_attempts: u64,
    /// Notifications given up or dropped from a full queue.
    pub lost: u64,
}

/// Change notifications for every set of a [`Publisher`] built with
/// [`Publisher::with_hub`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Push {
    shared: Arc<Shared>,
}

impl Push {
    /// Notifications as `config` says: `None` when `[hub] enabled = false`. `publisher` must
    /// advertise the hub ([`Publisher::with_hub`] with [`Push::hub_url`]).
    ///
    /// # Errors
    /// [`NotifyError::Fetch`] when the HTTP client cannot be built.
    pub fn from_config(publisher: Arc<Publisher>, config: &Config) -> Result<Option<Push>, NotifyError> {
        if !config.hub.enabled {
            return Ok(None);
        }
        Push::new(publisher, config.hub.clone(), config.aggregator.hub.clone(), &config.aggregator.user_agent).map(Some)
    }

    /// The hub `config` publishes through: the external one, else the built-in `{base_url}hub`.
    pub fn hub_url(config: &Config) -> String {
        match &config.aggregator.hub {
            Some(u) => u.to_string(),
            None => crate::naming::Naming::new(&config.aggregator.base_url).hub(),
        }
    }

    /// Notifications with explicit settings: through `external` when given, else the built-in
    /// hub.
    ///
    /// # Errors
    /// [`NotifyError::Fetch`] when the HTTP client cannot be built.
    pub fn new(
        publisher: Arc<Publisher>,
        settings: HubSettings,
        external: Option<Url>,
        user_agent: &str,
    ) -> Result<Push, NotifyError> {
        let out = Outbound::new(OutboundOptions {
            user_agent: user_agent.to_owned(),
            timeout: settings.request_timeout,
            allow_private: settings.allow_private,
            allow_networks: settings.allow_networks.clone(),
        })?;
        let naming = publisher.naming().clone();
        let (hub_url, sender) = match external {
            Some(url) => {
                // The operator chose this hub: it is not held to the subscribers' address policy.
                let out = Outbound::new(OutboundOptions {
                    user_agent: user_agent.to_owned(),
                    timeout: settings.request_timeout,
                    allow_private: true,
                    allow_networks: Vec::new(),
                })?;
                (url.to_string(), Sender::External(ExternalHub { url, mode: settings.external_mode, out }))
            }
            None => {
                let p = publisher.clone();
                let sets = hub::SetFilter(Box::new(move |id| p.set(id).is_some()));
                let hub = Hub::new(publisher.store().clone(), naming.clone(), sets, settings.clone(), out);
                (naming.hub(), Sender::Builtin(hub))
            }
        };
        let shared = Shared { publisher, settings, hub_url, sender, latest: Mutex::default(), wake: Notify::new() };
        Ok(Push { shared: Arc::new(shared) })
    }

    /// Runs the notifier (and the built-in hub's lease sweep) until `shutdown` completes:
    /// resumes the saved subscriptions, then notifies each batch of committed events.
    ///
    /// # Errors
    /// [`NotifyError::Store`] when the saved subscriptions or positions cannot be read.
    pub async fn run(&self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), NotifyError> {
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            shutdown.await;
            let _ = tx.send(true);
        });
        let weak = Arc::downgrade(&self.shared);
        self.shared.publisher.store().on_visible(Arc::new(move || {
            if let Some(s) = weak.upgrade() {
                s.wake.notify_one();
            }
        }));
        let sweeper = match &self.shared.sender {
            Sender::Builtin(hub) => {
                let n = hub.resume().await?;
                tracing::info!(subscriptions = n, hub = %self.shared.hub_url, "built-in WebSub hub ready");
                Some(tokio::spawn(sweep(hub.clone(), rx.clone())))
            }
            Sender::External(ext) => {
                tracing::info!(hub = %ext.url, "change notifications go to an external hub");
                None
            }
        };
        let result = notifier::run(self.shared.clone(), rx).await;
        if let Some(s) = sweeper {
            s.abort();
        }
        if let Sender::Builtin(hub) = &self.shared.sender {
            hub.drain(DRAIN).await;
            hub.stop();
        }
        result
    }

    /// The hub named in `Link` headers and Capability Lists.
    pub fn hub(&self) -> &str {
        &self.shared.hub_url
    }

    /// Whether `/hub` is Tributary's own hub (no external hub configured).
    pub fn is_builtin(&self) -> bool {
        matches!(self.shared.sender, Sender::Builtin(_))
    }

    /// What the topic of `set` answers.
    pub fn topic(&self, set: &str) -> TopicAnswer {
        let topic = self.shared.publisher.naming().notification_topic(set);
        let link = crate::websub::link_header(&topic, &self.shared.hub_url);
        let latest = self.shared.latest.lock().unwrap_or_else(|p| p.into_inner()).get(set).cloned();
        let body = match latest {
            Some(p) => p.body.clone(),
            None => {
                let empty = self.shared.publisher.empty_notification(set, crate::model::W3cDateTime::now());
                // Writing to memory fails only on a bug; an empty body says as much as before.
                Bytes::from(empty.unwrap_or_default())
            }
        };
        TopicAnswer { body, link }
    }

    /// Answers a POST to `/hub`: `form` is whether it was sent form-encoded, `client` the
    /// address it came from (for the per-client rate; `None`: not limited). Must be called
    /// inside the runtime: verification runs as a task of its own.
    pub fn hub_request(&self, form: bool, body: &[u8], client: Option<std::net::IpAddr>) -> HubAnswer {
        match &self.shared.sender {
            Sender::Builtin(hub) => hub.handle(form, body, client),
            Sender::External(ext) => HubAnswer::new(
                404,
                format!("this aggregator's notifications are published by {}; subscribe there", ext.url),
            ),
        }
    }

    /// Verified subscriptions of `set` whose lease runs (built-in hub; 0 otherwise).
    pub fn subscriber_count(&self, set: &str) -> usize {
        match &self.shared.sender {
            Sender::Builtin(hub) => hub.subscriber_count(set),
            Sender::External(_) => 0,
        }
    }

    /// The subscriptions of `set` and their delivery counts, in total (built-in hub).
    pub fn subscriber_totals(&self, set: &str) -> SubscriberTotals {
        let Sender::Builtin(hub) = &self.shared.sender else { return SubscriberTotals::default() };
        let mut t = SubscriberTotals::default();
        for c in hub.counts(set) {
            t.subscriptions += 1;
            t.delivered += c.delivered;
            t.failed_attempts += c.failed_attempts;
            t.lost += c.abandoned + c.dropped;
        }
        t
    }
}

async fn sweep(hub: Arc<Hub>, mut stop: watch::Receiver<bool>) {
    // Ends at shutdown; each turn ends the leases that ran out.
    loop {
        tokio::select! {
            _ = tokio::time::sleep(hub.sweep_every()) => hub.sweep().await,
            _ = stopped(&mut stop) => return,
        }
    }
}

/// Completes once `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
