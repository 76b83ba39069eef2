//! `audit` and `failures`: how the store stands against its sources, each exiting 1 when there
//! is something for an operator to look at.

use std::process::ExitCode;

use clap::Args;
use tributary::control::{self, wire};

use super::Global;
use super::common::{load_config, open_existing};
use super::online::through_service;

#[derive(Debug, Args)]
pub(super) struct AuditArgs {
    /// Audit only this source (repeatable).
    #[arg(long = "source", value_name = "ID")]
    sources: Vec<String>,
    /// Re-download and re-hash every resource instead of trusting the list.
    #[arg(long)]
    fetch: bool,
    /// Print the reports as JSON.
    #[arg(long)]
    json: bool,
}

pub(super) fn run_audit(args: AuditArgs, global: &Global) -> anyhow::Result<ExitCode> {
    let config = load_config(global, &args.sources)?;
    let command = wire::Command::Audit { sources: args.sources.clone(), fetch: args.fetch, json: args.json };
    if let Some(code) = through_service(&config.aggregator.data_dir, command)? {
        return Ok(code);
    }
    let store = open_existing(&config.aggregator.data_dir, config.aggregator.blobs.clone())?;
    let rt = tokio::runtime::Runtime::new()?;
    let code = control::commands::audit(
        &config,
        &store,
        &args.sources,
        args.fetch,
        args.json,
        rt.handle(),
        &mut control::Console,
    )?;
    Ok(ExitCode::from(code))
}

#[derive(Debug, Args)]
pub(super) struct FailuresArgs {
    /// Only this source (repeatable); default: every source.
    #[arg(long = "source", value_name = "ID")]
    sources: Vec<String>,
    /// List at most this many per source (the count is always complete).
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub(super) fn run_failures(args: FailuresArgs, global: &Global) -> anyhow::Result<ExitCode> {
    let config = load_config(global, &args.sources)?;
    let command = wire::Command::Failures { sources: args.sources.clone(), limit: args.limit, json: args.json };
    if let Some(code) = through_service(&config.aggregator.data_dir, command)? {
        return Ok(code);
    }
    let store = open_existing(&config.aggregator.data_dir, config.aggregator.blobs.clone())?;
    let code =
        control::commands::failures(&config, &store, &args.sources, args.limit, args.json, &mut control::Console)?;
    Ok(ExitCode::from(code))
}
