//! `provenance`: where a resource came from, answered by the running service or from the stopped
//! store.

use std::process::ExitCode;

use clap::Args;
use tributary::control::{self, wire};
use tributary::fetch::Fetcher;
use tributary::harvest;

use super::Global;
use super::common::{load_config, open_existing};
use super::online::through_service;

#[derive(Debug, Args)]
pub(super) struct ProvenanceArgs {
    /// A Tributary URI, an origin or upstream URI, or `sha-256:<hex>`.
    query: String,
    /// Fetch each origin and report whether it still matches.
    #[arg(long)]
    verify: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub(super) fn run_provenance(args: ProvenanceArgs, global: &Global) -> anyhow::Result<ExitCode> {
    let config = load_config(global, &[])?;
    let command = wire::Command::Provenance { query: args.query.clone(), verify: args.verify, json: args.json };
    if let Some(code) = through_service(&config.aggregator.data_dir, command)? {
        return Ok(code);
    }
    let store = open_existing(&config.aggregator.data_dir, config.aggregator.blobs.clone())?;
    let naming = tributary::naming::Naming::new(&config.aggregator.base_url);
    // A runtime whose own threads drive its I/O: the checks are run with `Handle::block_on`.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let checker = match args.verify {
        true => {
            let fetcher = Fetcher::from_config(&config)?;
            harvest::honour_parks(&store, &fetcher)?;
            Some(tributary::provenance::OriginChecker::for_config(fetcher, &config))
        }
        false => None,
    };
    let checker = checker.as_ref().map(|c| (c, rt.handle()));
    let code = control::commands::provenance(&store, &naming, &args.query, checker, args.json, &mut control::Console)?;
    Ok(ExitCode::from(code))
}
