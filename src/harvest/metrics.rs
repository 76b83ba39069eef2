//! The harvester's side of `/metrics`: counters per source recorded through the `metrics`
//! facade (the web layer installs the Prometheus exporter; without one, recording is a no-op).
//!
//! A request is counted where it is sent, deep in the fetcher, which knows hosts but not
//! sources; the source id travels there as a task-local set around each source's pass
//! ([`in_source`]) and carried into the pass's spawned fetch tasks ([`inherit`]). Labels are
//! source ids only, never URLs, so the number of series stays that of the configuration.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::report::SourceReport;

tokio::task_local! {
    static SOURCE: Option<Arc<str>>;
}

/// Runs `f` as part of `source`'s pass: requests it sends are counted for that source.
pub(crate) async fn in_source<F: Future>(source: &str, f: F) -> F::Output {
    SOURCE.scope(Some(Arc::from(source)), f).await
}

/// Wraps a future about to be spawned so it stays attributed to the current source.
///
/// Not an `async` block: one would hold `f` both as a capture and inside the scope's future,
/// doubling the size of every fetch task, and tokio copies a task's future whole when it
/// spawns it.
pub(crate) fn inherit<F: Future>(f: F) -> impl Future<Output = F::Output> {
    SOURCE.scope(SOURCE.try_with(Clone::clone).ok().flatten(), f)
}

/// One HTTP request sent (retries and redirects each count).
pub(crate) fn request() {
    let _ = SOURCE.try_with(|s| {
        if let Some(s) = s {
            metrics::counter!("tributary_source_requests_total", "source" => s.to_string()).increment(1);
        }
    });
}

/// The counts of one finished pass over a source.
pub(crate) fn record_pass(report: &SourceReport, elapsed: Duration) {
    let source = report.source.clone();
    let count = |name: &'static str, v: u64| metrics::counter!(name, "source" => source.clone()).increment(v);
    count("tributary_source_resources_fetched_total", report.fetched);
    count("tributary_source_resources_unchanged_total", report.unchanged);
    count("tributary_source_resources_failed_total", report.failed);
    count("tributary_source_resources_deleted_total", report.deleted);
    count("tributary_source_bytes_total", report.bytes);
    let outcome = match (&report.error, report.interrupted) {
        (Some(_), _) => "error",
        (None, true) => "interrupted",
        (None, false) => "ok",
    };
    metrics::counter!("tributary_source_passes_total", "source" => source.clone(), "outcome" => outcome).increment(1);
    metrics::histogram!("tributary_source_harvest_duration_seconds", "source" => source).record(elapsed.as_secs_f64());
}
