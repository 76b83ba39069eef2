//! `/metrics` in the Prometheus text format, and the middleware that measures every HTTP
//! request the server answers.
//!
//! Two kinds of series. Events (requests sent and answered, resources fetched, bytes, pass
//! durations) are recorded as they happen through the `metrics` facade, by the harvester and
//! by [`track`]. State (resources held, changes applied, change-log lengths, harvest state) is
//! read at scrape time from the store's counters and status rows — never a scan — so it is
//! right after a restart, when in-process counters start again from zero.
//!
//! The exporter is process-global (the facade allows one recorder); [`handle`] installs it
//! once. Labels are source and set ids and a fixed set of route names, never URLs — but for
//! `to` of `tributary_source_moved`, the one URL an operator must copy into `sources.toml`
//! (one series per moved configured URL).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use super::WebState;
use super::error::WebError;
use crate::config::Config;
use crate::model::W3cDateTime;
use crate::publish::Publisher;
use crate::store::{HarvestState, StoreError, Subscription};

/// Latency buckets in seconds: from a cached document to a slow bitstream or harvest pass.
const BUCKETS: &[f64] =
    &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0];

/// The process's exporter, installed on first use.
pub(crate) fn handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)
            .map(PrometheusBuilder::build_recorder)
            .unwrap_or_else(|_| PrometheusBuilder::new().build_recorder());
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("another metrics recorder is installed; /metrics shows only scrape-time gauges");
        }
        describe();
        handle
    })
}

fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!("tributary_source_requests_total", "HTTP requests sent to the source (retries count)");
    describe_counter!("tributary_source_bytes_total", Unit::Bytes, "Bitstream bytes received from the source");
    describe_counter!("tributary_source_resources_fetched_total", "Resources fetched, verified and stored");
    describe_counter!("tributary_source_resources_unchanged_total", "Listed resources already held as listed");
    describe_counter!("tributary_source_resources_failed_total", "Resources that failed fetching or verification");
    describe_counter!("tributary_source_resources_deleted_total", "Resources marked deleted");
    describe_counter!("tributary_source_passes_total", "Harvest passes by outcome (ok, error, interrupted)");
    describe_histogram!("tributary_source_harvest_duration_seconds", Unit::Seconds, "Duration of one harvest pass");
    describe_counter!(
        "tributary_source_changes_applied_total",
        "Change events in the source's own log (from the store)"
    );
    describe_gauge!("tributary_source_resources", "Live resources held for the source (from the store)");
    describe_gauge!("tributary_source_state", "1 for the source's current harvest state, 0 for the others");
    describe_gauge!("tributary_source_backing_off", "1 while the source is backing off or failing");
    describe_gauge!("tributary_source_consecutive_failures", "Failed passes in a row");
    describe_gauge!("tributary_source_last_success_timestamp_seconds", "Unix time of the last successful pass");
    describe_gauge!(
        "tributary_source_last_change_timestamp_seconds",
        "Unix time Tributary applied the source's newest change (from the store)"
    );
    describe_gauge!(
        "tributary_source_parked_until_seconds",
        "Unix time until which an origin the source needs asked (Retry-After) not to be contacted; 0 when none"
    );
    describe_gauge!(
        "tributary_source_moved",
        "1 while a configured URL of the source answers a permanent redirect to `to`: update sources.toml"
    );
    describe_gauge!(
        "tributary_source_poll_interval_seconds",
        "Seconds between two polls of the source: `poll`, or `push_poll` while a push subscription stands"
    );
    describe_gauge!("tributary_source_paused", "1 while the operator has the source paused");
    describe_gauge!("tributary_source_deletions_held", "Deletions held for the operator (over max_deletions)");
    describe_gauge!("tributary_origins_parked", "Origins parked now: asked (Retry-After) not to be contacted yet");
    describe_gauge!(
        "tributary_store_read_only",
        "1 when the store accepts no writes since a write or sync failed (see the dashboard for why)"
    );
    describe_gauge!("tributary_set_resources", "Live resources in the set");
    describe_gauge!("tributary_set_changelog_length", "Events in the set's change log");
    describe_counter!("tributary_http_requests_total", "HTTP requests answered, by route, method and status");
    describe_counter!(
        "tributary_http_connections_refused_total",
        "Connections answered 503 and closed at once, by reason: server_full (max_connections), \
         client_full (max_connections_per_client)"
    );
    describe_histogram!(
        "tributary_http_request_duration_seconds",
        Unit::Seconds,
        "Time to the response head, by route"
    );
}

const STATES: [(HarvestState, &str); 4] = [
    (HarvestState::Idle, "idle"),
    (HarvestState::Harvesting, "harvesting"),
    (HarvestState::BackingOff, "backing_off"),
    (HarvestState::Failing, "failing"),
];

/// Each configured source's `poll` and `push_poll`, by id: what
/// `tributary_source_poll_interval_seconds` says, so that an alert can ask for "not polled
/// successfully for three poll intervals" (see `contrib/prometheus/tributary-alerts.yml`).
#[derive(Debug, Default)]
pub(crate) struct Polls(HashMap<String, (Duration, Duration)>);

impl Polls {
    pub(crate) fn of(config: &Config) -> Polls {
        Polls(config.sources.iter().map(|s| (s.id.clone(), (s.settings.poll, s.settings.push_poll))).collect())
    }

    /// The time between two polls of `id` (as the harvester schedules them: `push_poll`, never
    /// shorter than `poll`, while a subscription's lease stands); `None` for a source no longer
    /// configured, which is not polled.
    fn interval(&self, id: &str, subs: &[Subscription], now: i64) -> Option<Duration> {
        let (poll, push_poll) = *self.0.get(id)?;
        let leased = subs.iter().any(|x| x.source == id && x.active.as_ref().is_some_and(|l| l.expires > now));
        Some(if leased { poll.max(push_poll) } else { poll })
    }
}

/// Reads the scrape-time series from the store into the recorder.
fn refresh(p: &Publisher, polls: &Polls) -> Result<(), StoreError> {
    let store = p.store();
    let now = W3cDateTime::now();
    let subs = store.subscriptions()?;
    metrics::gauge!("tributary_store_read_only").set(if store.read_only().is_some() { 1.0 } else { 0.0 });
    let parked = store.parked_origins()?.into_iter().filter(|(_, until)| *until > now).count();
    metrics::gauge!("tributary_origins_parked").set(parked as f64);
    for id in super::dashboard::source_ids(p) {
        let state = store.source_state(&id)?.unwrap_or_default();
        let on = |b: bool| if b { 1.0 } else { 0.0 };
        metrics::gauge!("tributary_source_paused", "source" => id.clone()).set(on(state.paused.is_some()));
        if let Some(every) = polls.interval(&id, &subs, now.unix_timestamp()) {
            metrics::gauge!("tributary_source_poll_interval_seconds", "source" => id.clone()).set(every.as_secs_f64());
        }
        let status = state.status;
        metrics::gauge!("tributary_source_deletions_held", "source" => id.clone()).set(status.held_deletions as f64);
        let own = store.set_info(&id)?;
        let (live, events) = own.as_ref().map_or((0, 0), |i| (i.live, i.events));
        if let Some(t) = own.as_ref().and_then(|i| i.last_change) {
            metrics::gauge!("tributary_source_last_change_timestamp_seconds", "source" => id.clone())
                .set(t.unix_timestamp() as f64);
        }
        let parked_until = status.parked.as_ref().map(|p| p.until).filter(|t| *t > now);
        metrics::gauge!("tributary_source_parked_until_seconds", "source" => id.clone())
            .set(parked_until.map_or(0.0, |t| t.unix_timestamp() as f64));
        moved(&id, status.moved.values());
        metrics::gauge!("tributary_source_resources", "source" => id.clone()).set(live as f64);
        metrics::counter!("tributary_source_changes_applied_total", "source" => id.clone()).absolute(events);
        for (state, name) in STATES {
            let on = if status.state == state { 1.0 } else { 0.0 };
            metrics::gauge!("tributary_source_state", "source" => id.clone(), "state" => name).set(on);
        }
        let backing_off = matches!(status.state, HarvestState::BackingOff | HarvestState::Failing);
        metrics::gauge!("tributary_source_backing_off", "source" => id.clone()).set(if backing_off {
            1.0
        } else {
            0.0
        });
        let failures = f64::from(status.consecutive_failures);
        metrics::gauge!("tributary_source_consecutive_failures", "source" => id.clone()).set(failures);
        if let Some(t) = status.last_success {
            metrics::gauge!("tributary_source_last_success_timestamp_seconds", "source" => id.clone())
                .set(t.unix_timestamp() as f64);
        }
    }
    for s in p.sets() {
        let (live, events) = store.set_info(&s.id)?.map_or((0, 0), |i| (i.live, i.events));
        metrics::gauge!("tributary_set_resources", "set" => s.id.clone()).set(live as f64);
        metrics::gauge!("tributary_set_changelog_length", "set" => s.id.clone()).set(events as f64);
    }
    Ok(())
}

/// `tributary_source_moved{source, to}`: 1 for each place the source's URLs moved to, and 0
/// for one it no longer moves to (a series, once exported, stays until the process ends).
fn moved<'a>(source: &str, to: impl Iterator<Item = &'a String>) {
    static EXPORTED: Mutex<BTreeMap<String, BTreeSet<String>>> = Mutex::new(BTreeMap::new());
    let now: BTreeSet<String> = to.cloned().collect();
    let mut exported = EXPORTED.lock().unwrap_or_else(|e| e.into_inner());
    let before = exported.entry(source.to_owned()).or_default();
    for gone in before.difference(&now) {
        metrics::gauge!("tributary_source_moved", "source" => source.to_owned(), "to" => gone.clone()).set(0.0);
    }
    for to in &now {
        metrics::gauge!("tributary_source_moved", "source" => source.to_owned(), "to" => to.clone()).set(1.0);
    }
    before.extend(now);
}

/// `GET /metrics`.
pub(crate) async fn render(st: &WebState) -> Result<Response, WebError> {
    let (p, polls) = (st.shared.publisher.clone(), st.polls());
    let text = tokio::task::spawn_blocking(move || {
        let h = handle();
        refresh(&p, &polls).map(|()| h.render())
    })
    .await??;
    let mut r = text.into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
    Ok(r)
}

/// Middleware: counts every request answered and how long its response head took, under the
/// name of the route that answered (`other` for the 404 of unknown paths).
pub(crate) async fn track(State(base_path): State<Arc<str>>, req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map_or("other", |m| route_name(&base_path, m.as_str()));
    let method = match *req.method() {
        axum::http::Method::GET => "GET",
        axum::http::Method::HEAD => "HEAD",
        _ => "other",
    };
    let started = Instant::now();
    let response = next.run(req).await;
    let elapsed = started.elapsed().as_secs_f64();
    let status = response.status().as_u16().to_string();
    metrics::counter!("tributary_http_requests_total", "route" => route, "method" => method, "status" => status)
        .increment(1);
    metrics::histogram!("tributary_http_request_duration_seconds", "route" => route).record(elapsed);
    response
}

/// A bounded name for a route's pattern (as registered, e.g. `/agg/sets/{set}/{doc}`), so the
/// label's values stay few; the names are those docs/OPERATIONS.md lists ("Watching it"),
/// which dashboards and alerts rely on.
fn route_name(base_path: &str, pattern: &str) -> &'static str {
    if pattern == "/robots.txt" {
        return "robots";
    }
    if super::routes::bare(base_path) == Some(pattern) {
        return "dashboard";
    }
    let Some(rel) = pattern.strip_prefix(base_path) else { return "other" };
    match rel {
        "" => "dashboard",
        r if r.starts_with("dashboard/") => "dashboard",
        r if r.starts_with("api/") => "api",
        "metrics" => "metrics",
        "provenance" => "provenance",
        ".well-known/resourcesync" => "source_description",
        r if r.starts_with("r/") => "bitstream",
        r if r.starts_with("sets/") => "set_document",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_a_fixed_set() {
        assert_eq!(route_name("/", "/"), "dashboard");
        assert_eq!(route_name("/", "/dashboard/{file}"), "dashboard");
        assert_eq!(route_name("/", "/api/status"), "api");
        assert_eq!(route_name("/", "/r/{*resource}"), "bitstream");
        assert_eq!(route_name("/agg/", "/agg/sets/{set}/{doc}"), "set_document");
        assert_eq!(route_name("/agg/", "/agg/sets/{set}/"), "set_document");
        assert_eq!(route_name("/agg/", "/agg"), "dashboard");
        assert_eq!(route_name("/agg/", "/elsewhere"), "other");
        assert_eq!(route_name("/agg/", "/robots.txt"), "robots");
    }
}
