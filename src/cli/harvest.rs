//! `harvest` and `poll`: one pass over the sources, by this process or by the running service;
//! they take the same flags and print the same summary.

use std::process::ExitCode;

use clap::Args;
use tributary::control::{self, wire};
use tributary::harvest;

use super::Global;
use super::common::{exit_durably, load, load_config};
use super::online::{Forward, exit_with};
use super::progress;
use super::runtime::{harvest_runtime, shutdown_requests, start_simulators, stopped};

#[derive(Debug, Args)]
pub(super) struct HarvestArgs {
    /// Harvest only this source (repeatable); default: every source.
    #[arg(long = "source", value_name = "ID")]
    sources: Vec<String>,
}

pub(super) fn run_harvest(global: &Global, args: HarvestArgs) -> anyhow::Result<ExitCode> {
    // The configuration first (milliseconds): it sizes the runtime.
    let config = load_config(global, &args.sources)?;
    let rt = harvest_runtime(&config)?;
    let stop = shutdown_requests(&rt)?;
    let (store, fetcher) = load(&config, &args.sources)?;
    let progress = progress::for_terminal();
    let summary = rt.block_on(async {
        let simulators = start_simulators(&config).await?;
        let summary =
            harvest::harvest_once_until(&config, &store, &fetcher, &args.sources, progress.clone(), stopped(stop))
                .await;
        simulators.stop().await;
        anyhow::Ok(summary?)
    })?;
    progress.finish();
    println!("{summary}");
    exit_durably(&store, if summary.succeeded() { 0 } else { 1 })
}

pub(super) fn run_poll(global: &Global, args: HarvestArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(global, &args.sources)?;
    let dir = &config.aggregator.data_dir;
    let Some(connection) = control::client::connect(dir)? else {
        eprintln!(
            "error: no tributary service is running on {} (`tributary harvest` polls without one)",
            dir.display()
        );
        return Ok(ExitCode::from(2));
    };
    let mut sink = Forward::with_progress();
    let outcome = connection.call(wire::Command::Poll { sources: args.sources }, &mut sink);
    sink.finish();
    Ok(exit_with(outcome?))
}
