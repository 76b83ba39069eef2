//! The commands that remove published resources on an operator's word: held `deletions`,
//! `takedown` and `source forget`. Each runs in the service when one runs, else on the stopped
//! store.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use tributary::control::{self, wire};

use super::Global;
use super::common::{exit_durably, load_config, open_existing};
use super::online::through_service;

#[derive(Debug, Args)]
pub(super) struct DeletionsArgs {
    #[command(subcommand)]
    action: Option<DeletionsCommand>,
    /// Only this source (repeatable); default: every source holding deletions.
    #[arg(long = "source", value_name = "ID")]
    sources: Vec<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum DeletionsCommand {
    /// Apply the held deletions and publish them.
    Apply(RequiredSources),
    /// Drop the held deletions and keep the resources.
    Keep(RequiredSources),
}

#[derive(Debug, Args)]
struct RequiredSources {
    /// The source (repeatable).
    #[arg(long = "source", value_name = "ID", required = true)]
    sources: Vec<String>,
}

pub(super) fn run_deletions(global: &Global, args: DeletionsArgs) -> anyhow::Result<ExitCode> {
    let (action, sources) = match args.action {
        None => (wire::DeletionAction::List, args.sources),
        Some(DeletionsCommand::Apply(s)) => (wire::DeletionAction::Apply, s.sources),
        Some(DeletionsCommand::Keep(s)) => (wire::DeletionAction::Keep, s.sources),
    };
    let config = load_config(global, &[])?;
    let command = wire::Command::Deletions { sources: sources.clone(), action, json: args.json };
    if let Some(code) = through_service(&config.aggregator.data_dir, command)? {
        return Ok(code);
    }
    let store = open_existing(&config.aggregator.data_dir, config.aggregator.blobs.clone())?;
    let code = control::commands::deletions(&config, &store, &sources, action, args.json, &mut control::Console)?;
    exit_durably(&store, i32::from(code))
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(super) struct TakedownArgs {
    #[command(subcommand)]
    action: Option<TakedownCommand>,
    /// What to take down: upstream URIs, Tributary URIs or `sha-256:<hex>` digests.
    #[arg(value_name = "URI", required = true)]
    targets: Vec<String>,
    /// Why (kept for operators, never served).
    #[arg(long, required = true)]
    reason: Option<String>,
}

#[derive(Debug, Subcommand)]
enum TakedownCommand {
    /// Every takedown, with its reason and time.
    List {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Lift takedowns: the resources come back at their sources' next poll.
    Lift {
        /// As given to `takedown`.
        #[arg(value_name = "URI", required = true)]
        targets: Vec<String>,
    },
}

pub(super) fn run_takedown(global: &Global, args: TakedownArgs) -> anyhow::Result<ExitCode> {
    let action = match args.action {
        Some(TakedownCommand::List { json }) => wire::TakedownAction::List { json },
        Some(TakedownCommand::Lift { targets }) => wire::TakedownAction::Lift { targets },
        None => wire::TakedownAction::Add { targets: args.targets, reason: args.reason.unwrap_or_default() },
    };
    let config = load_config(global, &[])?;
    if let Some(code) =
        through_service(&config.aggregator.data_dir, wire::Command::Takedown { action: action.clone() })?
    {
        return Ok(code);
    }
    let store = open_existing(&config.aggregator.data_dir, config.aggregator.blobs.clone())?;
    let code = control::commands::takedown(&config, &store, &action, &mut control::Console)?;
    exit_durably(&store, i32::from(code))
}

#[derive(Debug, Subcommand)]
pub(super) enum SourceCommand {
    /// Delete the records of a source removed from the configuration, publishing the
    /// deletions; until then they stay published.
    Forget {
        /// The source id.
        id: String,
    },
}

pub(super) fn run_forget(global: &Global, id: String) -> anyhow::Result<ExitCode> {
    let config = load_config(global, &[])?;
    if let Some(code) = through_service(&config.aggregator.data_dir, wire::Command::Forget { source: id.clone() })? {
        return Ok(code);
    }
    let store = open_existing(&config.aggregator.data_dir, config.aggregator.blobs.clone())?;
    Ok(ExitCode::from(control::commands::forget(&config, &store, &id, &mut control::Console)?))
}
