//! The harvester's side of `/metrics`: the counts of each pass per source, recorded through
//! the `metrics` facade (the web layer installs the Prometheus exporter; without one,
//! recording is a no-op). Requests are counted by the fetcher itself ([`crate::fetch::in_source`]).
//! Labels are source ids only, never URLs, so the number of series stays that of the
//! configuration.

use std::time::Duration;

use super::report::SourceReport;

/// The counts of one finished pass over a source.
pub(crate) fn record_pass(report: &SourceReport, elapsed: Duration) {
    record_resources(report);
    let source = report.source.clone();
    let outcome = match (&report.error, report.interrupted) {
        (Some(_), _) => "error",
        (None, true) => "interrupted",
        (None, false) => "ok",
    };
    metrics::counter!("tributary_source_passes_total", "source" => source.clone(), "outcome" => outcome).increment(1);
    metrics::histogram!("tributary_source_harvest_duration_seconds", "source" => source).record(elapsed.as_secs_f64());
}

/// The resources and bytes of a pass or of an applied change notification: a change that
/// arrives by push is fetched and stored like a polled one, and counts the same.
pub(crate) fn record_resources(report: &SourceReport) {
    let count = |name: &'static str, v: u64| metrics::counter!(name, "source" => report.source.clone()).increment(v);
    count("tributary_source_resources_fetched_total", report.fetched);
    count("tributary_source_resources_unchanged_total", report.unchanged);
    count("tributary_source_resources_failed_total", report.failed);
    count("tributary_source_resources_deleted_total", report.deleted);
    count("tributary_source_bytes_total", report.bytes);
}
