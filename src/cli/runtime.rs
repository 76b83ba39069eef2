//! What the commands that harvest or serve run on: the runtime; the shutdown signals, on which
//! `harvest`, `run` and `serve` all finish their in-flight work; and the `[[simulate]]` Sources
//! a harvest polls.

use anyhow::Context as _;

/// The harvester's runtime. Blocking threads (store writes) are capped: each one costs a
/// malloc arena and a stack, and more threads than cores do not write to the store any faster.
/// With bitstreams in a bucket a blocking thread spends a large put waiting for its upload,
/// so more of them keep the uploads of a source's concurrent fetches going at once.
pub(super) fn harvest_runtime(config: &tributary::config::Config) -> std::io::Result<tokio::runtime::Runtime> {
    let threads = if config.aggregator.blobs.is_some() { BLOCKING_THREADS_BUCKET } else { BLOCKING_THREADS };
    tokio::runtime::Builder::new_multi_thread().enable_all().max_blocking_threads(threads).build()
}

/// See [`harvest_runtime`].
const BLOCKING_THREADS: usize = 8;

/// See [`harvest_runtime`]: uploads wait on the network, not on the disk or the CPU.
const BLOCKING_THREADS_BUCKET: usize = 64;

/// SIGINT and SIGTERM from now on; the receiver turns true at the first. The handlers are
/// installed before this returns — before the store opens, which
/// takes seconds for a large store — so a signal during start-up is not left to the default
/// action, which would end the process at once instead of cleanly (exit 0).
pub(super) fn shutdown_requests(rt: &tokio::runtime::Runtime) -> std::io::Result<tokio::sync::watch::Receiver<bool>> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let _entered = rt.enter();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (mut int, mut term) = (signal(SignalKind::interrupt())?, signal(SignalKind::terminate())?);
        rt.spawn(async move {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            tracing::info!("shutdown requested: finishing in-flight work");
            let _ = tx.send(true);
        });
    }
    #[cfg(not(unix))]
    rt.spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutdown requested: finishing in-flight work");
        let _ = tx.send(true);
    });
    Ok(rx)
}

/// Completes once a shutdown was requested (see [`shutdown_requests`]).
pub(super) async fn stopped(mut requests: tokio::sync::watch::Receiver<bool>) {
    let _ = requests.wait_for(|stop| *stop).await;
}

/// Starts the `[[simulate]]` Sources of the configuration (none: nothing to do).
pub(super) async fn start_simulators(
    config: &tributary::config::Config,
) -> anyhow::Result<tributary::simulate::configured::Simulators> {
    tributary::simulate::configured::start_all(&config.simulators).await.context("starting the simulated sources")
}
