//! Which source a request is sent for, so `/metrics` can count requests per source.
//!
//! A request is counted where it is sent, deep in the fetcher, which knows hosts but not
//! sources; the caller's label travels there as a task-local set around a unit of work
//! ([`in_source`]) and carried into the tasks it spawns ([`inherit`]). Labels are source ids
//! only, never URLs, so the number of series stays that of the configuration. Recording goes
//! through the `metrics` facade: without an installed exporter it is a no-op.

use std::future::Future;
use std::sync::Arc;

tokio::task_local! {
    static SOURCE: Option<Arc<str>>;
}

/// Runs `f` on behalf of `source`: requests it sends are counted for that source.
pub async fn in_source<F: Future>(source: &str, f: F) -> F::Output {
    SOURCE.scope(Some(Arc::from(source)), f).await
}

/// Wraps a future about to be spawned so it stays attributed to the current source.
///
/// Not an `async` block: one would hold `f` both as a capture and inside the scope's future,
/// doubling the size of every fetch task, and tokio copies a task's future whole when it
/// spawns it.
pub fn inherit<F: Future>(f: F) -> impl Future<Output = F::Output> {
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
