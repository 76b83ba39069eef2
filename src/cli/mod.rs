//! The command line's shape: the arguments clap parses and the dispatch of each subcommand to
//! the module that runs it, so that a command's flags and body sit together in one file.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use tributary::control::wire;

mod audit;
mod check;
mod common;
mod deletions;
mod harvest;
mod online;
mod progress;
mod provenance;
mod runtime;
mod service;
mod simulate;
mod store;

use self::audit::{AuditArgs, FailuresArgs, run_audit, run_failures};
use self::check::{CheckArgs, run_check};
use self::common::data_dir;
use self::deletions::{DeletionsArgs, SourceCommand, TakedownArgs, run_deletions, run_forget, run_takedown};
use self::harvest::{HarvestArgs, run_harvest, run_poll};
use self::online::{SourceArg, online};
use self::provenance::{ProvenanceArgs, run_provenance};
use self::service::{run_serve, run_service};
use self::simulate::run_simulate;
use self::store::{StoreCommand, run_store};

/// Tributary: a ResourceSync aggregator.
#[derive(Debug, Parser)]
#[command(version, about, propagate_version = true)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Args)]
pub(crate) struct Global {
    /// The configuration file.
    #[arg(long, global = true, default_value = "sources.toml", value_name = "FILE")]
    config: PathBuf,
    /// The data directory (overrides `data_dir` in the configuration).
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Log as JSON lines (for log shippers) instead of readable text.
    #[arg(long, global = true)]
    pub(crate) log_json: bool,
    /// Run as this instance of a file with `[shards.NAME]` tables: only its sources, with its
    /// `base_url`, `listen` and `data_dir`.
    #[arg(long, global = true, value_name = "NAME")]
    shard: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Read a ResourceSync document and report its kind, entries, times and every violation.
    Check(CheckArgs),
    /// Serve the aggregate as a ResourceSync Source (documents, bitstreams, provenance) without
    /// harvesting.
    Serve,
    /// Where a resource came from: by Tributary URI, origin URI, upstream URI or sha-256:….
    Provenance(ProvenanceArgs),
    /// Compare the store with each Source's current Resource List; exit 1 unless all in sync.
    Audit(AuditArgs),
    /// The resources that could not be stored, why, since when and how often; exit 1 if any.
    Failures(FailuresArgs),
    /// Inspect and maintain the data directory.
    #[command(subcommand)]
    Store(StoreCommand),
    /// Check every record, change event and blob row against the bytes it names, without
    /// changing anything; exit 1 on any problem (the same as `store verify`).
    Verify,
    /// Serve a changing, simulated ResourceSync Source on a loopback port (for demos, tests
    /// and benchmarks).
    Simulate(Box<tributary::simulate::cli::SimulateArgs>),
    /// Poll every configured Source once (a baseline the first time, its changes after) and
    /// print a summary.
    Harvest(HarvestArgs),
    /// The long-running service: harvest every Source on its poll schedule until SIGINT or
    /// SIGTERM; SIGHUP re-reads the configuration.
    Run,
    /// Make the running service poll sources now, whatever their schedule, and wait for the
    /// passes; prints the summary `harvest` prints and exits as it does.
    Poll(HarvestArgs),
    /// Stop a source's polls and push processing in the running service, until `resume` (its
    /// records stay published; kept across restarts).
    Pause(SourceArg),
    /// Start a paused source again (and poll it now).
    Resume(SourceArg),
    /// Make the running service read its configuration file again (as SIGHUP does): sources
    /// and sets added, changed and removed without a restart.
    Reload,
    /// Sources that are no longer configured.
    #[command(subcommand)]
    Source(SourceCommand),
    /// The deletions held because a pass would have deleted more than `max_deletions`: list
    /// them (exit 1 when there are any), `apply` them, or `keep` the resources.
    Deletions(DeletionsArgs),
    /// Take resources down and keep them down (a rights holder's request, personal data):
    /// by upstream URI, Tributary URI or `sha-256:` digest; `list` and `lift` them.
    Takedown(TakedownArgs),
}

pub(crate) fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Check(args) => run_check(args),
        Command::Audit(args) => run_audit(args, &cli.global),
        Command::Failures(args) => run_failures(args, &cli.global),
        Command::Serve => run_serve(&cli.global),
        Command::Provenance(args) => run_provenance(args, &cli.global),
        Command::Store(cmd) => run_store(cmd, data_dir(&cli.global)?),
        Command::Verify => run_store(StoreCommand::Verify, data_dir(&cli.global)?),

        Command::Simulate(args) => run_simulate(*args),
        Command::Harvest(args) => run_harvest(&cli.global, args),
        Command::Run => run_service(&cli.global),
        Command::Poll(args) => run_poll(&cli.global, args),
        Command::Pause(a) => online(&cli.global, wire::Command::Pause { source: a.source }),
        Command::Resume(a) => online(&cli.global, wire::Command::Resume { source: a.source }),
        Command::Reload => online(&cli.global, wire::Command::Reload),
        Command::Source(SourceCommand::Forget { id }) => run_forget(&cli.global, id),
        Command::Deletions(args) => run_deletions(&cli.global, args),
        Command::Takedown(args) => run_takedown(&cli.global, args),
    }
}
