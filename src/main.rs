//! The `tributary` command line: parses arguments, sets up logging, and hands each subcommand
//! to the library. Nothing else lives here.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use tributary::check::{self, CheckReport};
use tributary::control::{self, wire};
use tributary::fetch::Fetcher;
use tributary::harvest;
use tributary::model::ReadOptions;

mod progress;

/// The harvester and the store allocate and free many small buffers (bodies, rows, batches);
/// mimalloc, without transparent huge pages, serves that churn with less CPU than glibc's
/// malloc (docs/STORE.md, "Why fjall").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Tributary: a ResourceSync aggregator.
#[derive(Debug, Parser)]
#[command(version, about, propagate_version = true)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Args)]
struct Global {
    /// The configuration file.
    #[arg(long, global = true, default_value = "sources.toml", value_name = "FILE")]
    config: PathBuf,
    /// The data directory (overrides `data_dir` in the configuration).
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Log as JSON lines (for log shippers) instead of readable text.
    #[arg(long, global = true)]
    log_json: bool,
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

#[derive(Debug, Args)]
struct DeletionsArgs {
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

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
struct TakedownArgs {
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

#[derive(Debug, Args)]
struct SourceArg {
    /// The source.
    #[arg(long = "source", value_name = "ID")]
    source: String,
}

#[derive(Debug, Subcommand)]
enum SourceCommand {
    /// Delete the records of a source removed from the configuration, publishing the
    /// deletions; until then they stay published.
    Forget {
        /// The source id.
        id: String,
    },
}

#[derive(Debug, Args)]
struct HarvestArgs {
    /// Harvest only this source (repeatable); default: every source.
    #[arg(long = "source", value_name = "ID")]
    sources: Vec<String>,
}

#[derive(Debug, Args)]
struct CheckArgs {
    /// A file path, or an http(s) URL (a ResourceSync document, or an OAI-PMH base URL).
    input: String,
    /// Maximum document size in bytes (decompressed).
    #[arg(long, default_value_t = tributary::model::SITEMAP_MAX_BYTES)]
    max_bytes: u64,
    /// Maximum number of entries.
    #[arg(long, default_value_t = tributary::model::SITEMAP_MAX_ENTRIES)]
    max_entries: usize,
    /// Print only the summary and errors, not warnings.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Debug, Args)]
struct ProvenanceArgs {
    /// A Tributary URI, an origin or upstream URI, or `sha-256:<hex>`.
    query: String,
    /// Fetch each origin and report whether it still matches.
    #[arg(long)]
    verify: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct AuditArgs {
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

#[derive(Debug, Args)]
struct FailuresArgs {
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

#[derive(Debug, Subcommand)]
enum StoreCommand {
    /// Counts, bytes and the deduplication ratio.
    Stats,
    /// Re-hash every blob and cross-check every record; exit 1 on any mismatch.
    Verify,
    /// Remove blobs no record refers to.
    Gc,
    /// Write every table to FILE (JSON Lines; gzip when FILE ends in .gz; `-` for stdout), for
    /// backup, moving the store, and upgrading across store formats. Bitstreams stay where they
    /// are: the file names them by sha-256.
    Export {
        /// Where to write the export.
        file: PathBuf,
    },
    /// Rebuild the store's metadata from an export FILE (`.gz` read as gzip; `-` for stdin)
    /// over the bitstreams in the data directory: for restores, moves and upgrades from an
    /// older store format. The data directory may hold bitstreams and an older format's
    /// metadata, never a store of this format; an interrupted import leaves nothing that opens,
    /// and can be run again.
    Import {
        /// The export file.
        file: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.global.log_json);
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn init_tracing(json: bool) {
    // The database engine logs its own housekeeping (databases created, tables written) at
    // info; its warnings and errors still come through.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,fjall=warn,lsm_tree=warn"));
    // Colour only on a terminal: escape codes in a log file or journal are noise.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
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

fn run_deletions(global: &Global, args: DeletionsArgs) -> anyhow::Result<ExitCode> {
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

fn run_takedown(global: &Global, args: TakedownArgs) -> anyhow::Result<ExitCode> {
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

/// Sends `command` to the service running on `dir`; `None` when no service runs there.
fn through_service(dir: &Path, command: wire::Command) -> anyhow::Result<Option<ExitCode>> {
    let Some(connection) = control::client::connect(dir)? else { return Ok(None) };
    let mut sink = Forward::default();
    let outcome = connection.call(command, &mut sink)?;
    sink.finish();
    Ok(Some(exit_with(outcome)))
}

/// The exit of a command the service ran: its status, or its error as this process would
/// print it.
fn exit_with(outcome: control::client::Outcome) -> ExitCode {
    match outcome {
        control::client::Outcome::Exit(code) => ExitCode::from(code),
        control::client::Outcome::Error(text) => {
            eprintln!("error: {text}");
            ExitCode::from(2)
        }
    }
}

/// A command that needs the running service (`poll`, `pause`, `resume`, `reload`): exit 2 with
/// a plain message when none runs.
fn online(global: &Global, command: wire::Command) -> anyhow::Result<ExitCode> {
    let config = load_config(global, &[])?;
    let dir = &config.aggregator.data_dir;
    match through_service(dir, command)? {
        Some(code) => Ok(code),
        None => {
            eprintln!("error: no tributary service is running on {} (start it with `tributary run`)", dir.display());
            Ok(ExitCode::from(2))
        }
    }
}

/// Relays a command's answer to this process's output: its text as is, and its progress to a
/// bar on a terminal, as the command would show it here.
#[derive(Default)]
struct Forward {
    bar: Option<Arc<progress::Display>>,
    value: Option<serde_json::Value>,
}

impl Forward {
    fn with_progress() -> Forward {
        Forward { bar: Some(progress::for_terminal()), value: None }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish();
        }
    }
}

impl control::client::Sink for Forward {
    fn stdout(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        use std::io::Write as _;
        std::io::stdout().lock().write_all(bytes)
    }

    fn stderr(&mut self, bytes: &[u8]) {
        use std::io::Write as _;
        let _ = std::io::stderr().lock().write_all(bytes);
    }

    fn progress(&mut self, p: &wire::Progress) {
        if let Some(bar) = &self.bar {
            bar.show(p);
        }
    }

    fn value(&mut self, value: serde_json::Value) {
        self.value = Some(value);
    }
}

fn run_poll(global: &Global, args: HarvestArgs) -> anyhow::Result<ExitCode> {
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

fn run_forget(global: &Global, id: String) -> anyhow::Result<ExitCode> {
    let config = load_config(global, &[])?;
    if let Some(code) = through_service(&config.aggregator.data_dir, wire::Command::Forget { source: id.clone() })? {
        return Ok(code);
    }
    let store = open_existing(&config.aggregator.data_dir, config.aggregator.blobs.clone())?;
    Ok(ExitCode::from(control::commands::forget(&config, &store, &id, &mut control::Console)?))
}

/// The data directory — `--data-dir`, else `data_dir` from the configuration — and where its
/// bitstreams are (`[aggregator] blobs`, read from the configuration whatever `--data-dir`
/// says). Maintenance commands still work without a configuration file (then `store/`, local
/// blobs), but a configuration that exists and is broken is an error, not silently ignored,
/// unless `--data-dir` names the store.
fn data_dir(global: &Global) -> anyhow::Result<(PathBuf, Option<tributary::store::RemoteBlobs>)> {
    if !global.config.exists() {
        return Ok((global.data_dir.clone().unwrap_or_else(|| PathBuf::from("store")), None));
    }
    let loaded = tributary::config::Config::load(&global.config, global.data_dir.as_deref())
        .and_then(|c| c.for_shard(global.shard.as_deref(), global.data_dir.as_deref()));
    match (loaded, &global.data_dir) {
        (Ok(config), _) => Ok((config.aggregator.data_dir, config.aggregator.blobs)),
        // `--data-dir` names the store without the file; a store that keeps its bitstreams in
        // a bucket then refuses to open, naming the bucket.
        (Err(_), Some(dir)) => Ok((dir.clone(), None)),
        (Err(e), None) => Err(e.into()),
    }
}

/// Opens an existing store, with its bucket when the configuration names one.
fn open_existing(
    dir: &std::path::Path,
    blobs: Option<tributary::store::RemoteBlobs>,
) -> anyhow::Result<tributary::store::Store> {
    let mut options = tributary::store::StoreOptions::default().with_blobs(blobs);
    options.create = false;
    Ok(tributary::store::Store::open_with(dir, &options)?)
}

fn run_check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let opts = ReadOptions {
        name: args.input.clone(),
        max_bytes: args.max_bytes,
        max_entries: args.max_entries,
        ..ReadOptions::default()
    };
    let report = if check::is_url(&args.input) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        match rt.block_on(check::check_any_url(&args.input, opts)) {
            Ok(check::Checked::Oai(r)) => {
                println!("{r}");
                return Ok(if r.errors() > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS });
            }
            Ok(check::Checked::ResourceSync(r)) => Ok(*r),
            Err(e) => Err(e),
        }
    } else {
        check::check_file(args.input.as_ref(), opts)
    };
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {:#}", anyhow::Error::new(e));
            return Ok(ExitCode::from(2));
        }
    };
    print_report(&report, args.quiet);
    Ok(if report.errors() > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

fn print_report(report: &CheckReport, quiet: bool) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stdout().lock(), "{}", report.render(!quiet));
}

/// Where an export is written: stdout for `-`, else a file written beside its final name
/// (gzipped when the name ends in `.gz`) and renamed into place once complete and synced, so an
/// interrupted export never leaves a file that looks whole (the import also checks its `end`
/// line). Dropped without [`ExportFile::commit`], it removes what it wrote.
struct ExportFile {
    target: Target,
    tmp: PathBuf,
    file: PathBuf,
}

enum Target {
    Stdout(std::io::BufWriter<std::io::Stdout>),
    Plain(std::io::BufWriter<std::fs::File>),
    Gzip(flate2::write::GzEncoder<std::io::BufWriter<std::fs::File>>),
    Done,
}

impl ExportFile {
    fn create(file: &Path) -> anyhow::Result<ExportFile> {
        if file == Path::new("-") {
            let target = Target::Stdout(std::io::BufWriter::with_capacity(1 << 20, std::io::stdout()));
            return Ok(ExportFile { target, tmp: PathBuf::new(), file: file.to_path_buf() });
        }
        let name = file.file_name().context("the export file needs a name")?.to_string_lossy().into_owned();
        let tmp = file.with_file_name(format!(".{name}.partial"));
        let created = std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
        let buffered = std::io::BufWriter::with_capacity(1 << 20, created);
        let target = match name.ends_with(".gz") {
            true => Target::Gzip(flate2::write::GzEncoder::new(buffered, flate2::Compression::fast())),
            false => Target::Plain(buffered),
        };
        Ok(ExportFile { target, tmp, file: file.to_path_buf() })
    }

    fn writer(&mut self) -> &mut dyn Write {
        match &mut self.target {
            Target::Stdout(w) => w,
            Target::Plain(w) => w,
            Target::Gzip(w) => w,
            Target::Done => unreachable!("written after commit"),
        }
    }

    /// Flushes, syncs and renames the file into place.
    fn commit(mut self) -> anyhow::Result<()> {
        let cannot = |what: &str| format!("cannot {what} {}", self.tmp.display());
        let buffered = match std::mem::replace(&mut self.target, Target::Done) {
            Target::Stdout(mut w) => return w.flush().context("cannot write the export to stdout"),
            Target::Plain(w) => w,
            Target::Gzip(gz) => gz.finish().with_context(|| cannot("write"))?,
            Target::Done => return Ok(()),
        };
        let written = buffered.into_inner().map_err(|e| e.into_error()).with_context(|| cannot("write"))?;
        written.sync_all().with_context(|| cannot("sync"))?;
        std::fs::rename(&self.tmp, &self.file)
            .with_context(|| format!("cannot rename {} to {}", self.tmp.display(), self.file.display()))
    }
}

impl Drop for ExportFile {
    fn drop(&mut self) {
        if matches!(self.target, Target::Plain(_) | Target::Gzip(_)) {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Rebuilds the store at `dir` from the export `file` (stdin for `-`; gzip when it ends in `.gz`).
fn import_store(dir: &std::path::Path, file: &std::path::Path) -> anyhow::Result<ExitCode> {
    use anyhow::Context as _;
    use std::io::BufReader;
    let options = tributary::store::StoreOptions::default();
    let report = if file == std::path::Path::new("-") {
        tributary::store::import(dir, std::io::stdin().lock(), file, &options)?
    } else {
        let opened = std::fs::File::open(file).with_context(|| format!("cannot open {}", file.display()))?;
        if file.extension().is_some_and(|e| e == "gz") {
            let gz = flate2::read::GzDecoder::new(BufReader::with_capacity(1 << 20, opened));
            tributary::store::import(dir, BufReader::with_capacity(1 << 20, gz), file, &options)?
        } else {
            tributary::store::import(dir, BufReader::with_capacity(1 << 20, opened), file, &options)?
        }
    };
    eprintln!("{report}");
    Ok(ExitCode::SUCCESS)
}

fn run_simulate(args: tributary::simulate::cli::SimulateArgs) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(tributary::simulate::cli::run(args, async {
        let _ = tokio::signal::ctrl_c().await;
    }))?;
    Ok(ExitCode::SUCCESS)
}

fn run_audit(args: AuditArgs, global: &Global) -> anyhow::Result<ExitCode> {
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

fn run_failures(args: FailuresArgs, global: &Global) -> anyhow::Result<ExitCode> {
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

fn run_store(
    cmd: StoreCommand,
    (dir, blobs): (PathBuf, Option<tributary::store::RemoteBlobs>),
) -> anyhow::Result<ExitCode> {
    let online = match &cmd {
        StoreCommand::Stats => Some(wire::Command::Stats),
        StoreCommand::Verify => Some(wire::Command::Verify),
        StoreCommand::Export { file } => return export(&dir, blobs, file),
        StoreCommand::Gc | StoreCommand::Import { .. } => {
            refuse_while_running(&dir, &cmd)?;
            None
        }
    };
    if let Some(code) = online.map(|c| through_service(&dir, c)).transpose()?.flatten() {
        return Ok(code);
    }
    if let StoreCommand::Import { file } = &cmd {
        return import_store(&dir, file);
    }
    // Read-only maintenance never creates a store: a mistyped path is an error, not an empty store.
    let store = open_existing(&dir, blobs)?;
    let out = &mut control::Console;
    let code = match cmd {
        StoreCommand::Stats => control::commands::stats(&store, out)?,
        StoreCommand::Verify => control::commands::verify(&store, out)?,
        StoreCommand::Gc => {
            println!("{}", store.gc()?);
            0
        }
        StoreCommand::Export { .. } | StoreCommand::Import { .. } => unreachable!("handled above"),
    };
    Ok(ExitCode::from(code))
}

/// `store gc` and `store import` rewrite the store under everything that reads it: they need
/// the service stopped, and say so rather than wait for the lock.
fn refuse_while_running(dir: &Path, cmd: &StoreCommand) -> anyhow::Result<()> {
    let Some(connection) = control::client::connect(dir)? else { return Ok(()) };
    drop(connection);
    let (what, why) = match cmd {
        StoreCommand::Gc => {
            ("store gc", "it rewrites packs and deletes blobs while the service may be serving or storing them")
        }
        _ => ("store import", "it replaces the metadata the service has open"),
    };
    anyhow::bail!(
        "a tributary service is running on {}: `tributary {what}` needs it stopped ({why}); stop the service, run the command, start the service again",
        dir.display()
    )
}

/// `store export FILE`: through the running service (one snapshot, while it harvests), or
/// from the stopped store.
fn export(dir: &Path, blobs: Option<tributary::store::RemoteBlobs>, file: &Path) -> anyhow::Result<ExitCode> {
    if let Some(connection) = control::client::connect(dir)? {
        let mut target = ExportFile::create(file)?;
        let mut sink = ExportSink { out: &mut target, value: None };
        let outcome = connection.call(wire::Command::Export, &mut sink);
        let value = sink.value.take();
        match outcome? {
            control::client::Outcome::Exit(0) => {
                let counts: tributary::store::ExportCounts =
                    serde_json::from_value(value.context("the service sent no export counts")?)?;
                target.commit()?;
                eprintln!("exported {} to {}:\n{counts}", dir.display(), file.display());
                return Ok(ExitCode::SUCCESS);
            }
            other => return Ok(exit_with(other)),
        }
    }
    let store = open_existing(dir, blobs)?;
    let mut target = ExportFile::create(file)?;
    let counts = store.export(target.writer(), file)?;
    target.commit()?;
    eprintln!("exported {} to {}:\n{counts}", dir.display(), file.display());
    Ok(ExitCode::SUCCESS)
}

/// The bytes of an export through the service, into its file.
struct ExportSink<'a> {
    out: &'a mut ExportFile,
    value: Option<serde_json::Value>,
}

impl control::client::Sink for ExportSink<'_> {
    fn stdout(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.out.writer().write_all(bytes)
    }

    fn stderr(&mut self, bytes: &[u8]) {
        let _ = std::io::stderr().lock().write_all(bytes);
    }

    fn value(&mut self, value: serde_json::Value) {
        self.value = Some(value);
    }
}

/// Loads and validates `sources.toml` and checks the `--source` ids against it: a bad file or
/// an id that names no configured source is an error before the store opens or anything is
/// fetched.
fn load_config(global: &Global, only: &[String]) -> anyhow::Result<tributary::config::Config> {
    let config = tributary::config::Config::load(&global.config, global.data_dir.as_deref())?
        .for_shard(global.shard.as_deref(), global.data_dir.as_deref())
        .with_context(|| global.config.display().to_string())?;
    config.select(only).with_context(|| global.config.display().to_string())?;
    Ok(config)
}

/// After [`load_config`], the store and the fetcher the harvesting commands share.
fn load(config: &tributary::config::Config) -> anyhow::Result<(tributary::store::Store, Fetcher)> {
    let store = open_store(config)?;
    let fetcher = Fetcher::from_config(config)?;
    Ok((store, fetcher))
}

/// Opens (creating if needed) the configured store with the configured page cache.
fn open_store(config: &tributary::config::Config) -> anyhow::Result<tributary::store::Store> {
    let mut options = tributary::store::StoreOptions::with_cache_mb(config.aggregator.store_cache_mb)
        .with_blobs(config.aggregator.blobs.clone());
    // Memtables this small (a store created with them keeps them) make the database write
    // and compact its tables every few seconds: for the power-cut tests, which must cut
    // during flushes and compactions (docs/STORE.md, "Testing durability"). Not a setting.
    if let Some(kb) = std::env::var("TRIBUTARY_TEST_MEMTABLE_KB").ok().and_then(|v| v.parse::<u64>().ok()) {
        options = options.with_memtable_bytes(kb * 1024);
    }
    tributary::store::Store::open_with(&config.aggregator.data_dir, &options)
        .with_context(|| format!("opening the store at {}", config.aggregator.data_dir.display()))
}

fn run_harvest(global: &Global, args: HarvestArgs) -> anyhow::Result<ExitCode> {
    // The configuration first (milliseconds): it sizes the runtime.
    let config = load_config(global, &args.sources)?;
    let rt = harvest_runtime(&config)?;
    let stop = shutdown_requests(&rt)?;
    let (store, fetcher) = load(&config)?;
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

/// Ends a one-shot command once the store is durable, without tearing the process down.
///
/// Dropping the store frees its caches and the allocator then returns their pages one
/// `madvise` at a time; with the runtime's and the connections' shutdown, that took tens of
/// milliseconds after a 10,000-resource baseline (docs/HARVEST.md, "Speed"), and it grows with
/// the cache. Every batch is durable already; the flush below commits the rows of small blobs
/// put since the last one, and fails on a read-only store (the command then exits 1). The
/// kernel releases memory, sockets and the store's lock file at exit.
fn exit_durably(store: &tributary::store::Store, code: i32) -> ! {
    use std::io::Write as _;
    let code = match store.flush() {
        Ok(()) => code,
        Err(e) => {
            eprintln!("error: flushing the store: {e}");
            1
        }
    };
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    std::process::exit(code)
}

fn run_service(global: &Global) -> anyhow::Result<ExitCode> {
    let config = load_config(global, &[])?;
    let rt = harvest_runtime(&config)?;
    let stop = shutdown_requests(&rt)?;
    let (store, fetcher) = load(&config)?;
    let web = tributary::web::WebState::from_config(&config, &store, &fetcher)?;
    log_oai(&web);
    let (web, notifications) = with_push(web, &config)?;
    // Hubs call back on the same listener; the web server serves the routes without knowing
    // the harvester.
    let subscriber = harvest::Push::new(&config, &store, &fetcher);
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.aggregator.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.aggregator.listen))?;
        let control = control_socket(&config);
        let simulators = start_simulators(&config).await?;
        let (harvester, runner) =
            harvest::Harvester::start(&config, &store, &fetcher, Some(&subscriber), stopped(stop.clone())).await?;
        let service = Arc::new(control::Service::new(
            &config,
            &store,
            &fetcher,
            &web,
            Some(harvester),
            tokio::runtime::Handle::current(),
            reload_from(global),
        ));
        reload_on_hangup(service.clone())?;
        tracing::info!(url = %config.aggregator.base_url, "serving the aggregate; the dashboard is at this URL");
        // One signal listener for all, so a Ctrl-C is received and logged once.
        let (server, harvester, notifier, ()) = tokio::join!(
            tributary::web::serve_with(listener, web, subscriber.router(), stopped(stop.clone())),
            runner.run(),
            notify(notifications, stopped(stop.clone())),
            serve_control(control, service, stopped(stop)),
        );
        // Upstreams stop last: the harvester may still be finishing a fetch from them.
        simulators.stop().await;
        server.context("web server")?;
        harvester?;
        notifier.context("change notifications")?;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// The control socket in the data directory. A file system that cannot hold one (some FUSE
/// and network file systems) does not stop the service: it runs without, and says so, and the
/// commands then find the store in use.
fn control_socket(config: &tributary::config::Config) -> Option<control::ControlSocket> {
    match control::ControlSocket::bind(&config.aggregator.data_dir) {
        Ok(socket) => {
            tracing::info!(path = %socket.path().display(), "control socket: the CLI's commands reach this service");
            Some(socket)
        }
        Err(e) => {
            tracing::error!(error = %tributary::error::chain(&e), "no control socket: running without; poll, pause, resume, reload and the store's commands cannot reach this service (SIGHUP still reloads)");
            None
        }
    }
}

/// Serves the control socket, when there is one, until `shutdown`.
async fn serve_control(
    socket: Option<control::ControlSocket>,
    service: Arc<control::Service>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) {
    if let Some(socket) = socket {
        socket.serve(service, shutdown).await;
    }
}

/// Where a reload reads the configuration again: the file, `--data-dir` and `--shard` the
/// service started with.
fn reload_from(global: &Global) -> control::ReloadFrom {
    control::ReloadFrom { path: global.config.clone(), data_dir: global.data_dir.clone(), shard: global.shard.clone() }
}

/// SIGHUP reloads the configuration, as `tributary reload` does; the outcome is logged.
fn reload_on_hangup(service: Arc<control::Service>) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        // Ends with the runtime; each turn is one SIGHUP.
        while hup.recv().await.is_some() {
            let service = service.clone();
            match tokio::task::spawn_blocking(move || service.reload()).await {
                Ok(Ok(report)) => tracing::info!(report = %report, "SIGHUP: configuration reloaded"),
                Ok(Err(e)) => {
                    tracing::error!(error = %tributary::error::chain(&e), "SIGHUP: the configuration was not reloaded; the one in force stays")
                }
                Err(e) => tracing::error!(error = %e, "SIGHUP: the reload failed"),
            }
        }
    });
    Ok(())
}

/// The web state with change notifications, unless `[hub] enabled = false`.
fn with_push(
    web: tributary::web::WebState,
    config: &tributary::config::Config,
) -> anyhow::Result<(tributary::web::WebState, Option<tributary::notify::Push>)> {
    let push = tributary::notify::Push::from_config(web.publisher().clone(), config)?;
    Ok(match push {
        Some(p) => (web.with_push(p.clone()), Some(p)),
        None => (web, None),
    })
}

/// Runs the notifier until shutdown (nothing when notifications are off).
async fn notify(
    push: Option<tributary::notify::Push>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), tributary::notify::NotifyError> {
    match push {
        Some(p) => p.run(shutdown).await,
        None => Ok(()),
    }
}

/// Starts the `[[simulate]]` Sources of the configuration (none: nothing to do).
async fn start_simulators(
    config: &tributary::config::Config,
) -> anyhow::Result<tributary::simulate::configured::Simulators> {
    tributary::simulate::configured::start_all(&config.simulators).await.context("starting the simulated sources")
}

/// Says once where the OAI-PMH endpoint is, or why there is none.
fn log_oai(web: &tributary::web::WebState) {
    match web.oai() {
        Some(oai) => tracing::info!(url = %oai.base_url(), "serving OAI-PMH"),
        None => tracing::info!("OAI-PMH endpoint off: set oai_name and oai_admin_email in [aggregator] to serve it"),
    }
}

fn run_serve(global: &Global) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Runtime::new()?;
    let stop = shutdown_requests(&rt)?;
    let config = load_config(global, &[])?;
    let store = open_store(&config)?;
    let fetcher = Fetcher::from_config(&config)?;
    harvest::honour_parks(&store, &fetcher)?;
    let web = tributary::web::WebState::from_config(&config, &store, &fetcher)?;
    log_oai(&web);
    let (web, push) = with_push(web, &config)?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.aggregator.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.aggregator.listen))?;
        let control = control_socket(&config);
        let handle = tokio::runtime::Handle::current();
        let service =
            Arc::new(control::Service::new(&config, &store, &fetcher, &web, None, handle, reload_from(global)));
        reload_on_hangup(service.clone())?;
        tracing::info!(url = %config.aggregator.base_url, "serving the aggregate");
        let (server, notifier, ()) = tokio::join!(
            tributary::web::serve(listener, web, stopped(stop.clone())),
            notify(push, stopped(stop.clone())),
            serve_control(control, service, stopped(stop)),
        );
        notifier.context("change notifications")?;
        server.context("web server")
    })?;
    Ok(ExitCode::SUCCESS)
}

fn run_provenance(args: ProvenanceArgs, global: &Global) -> anyhow::Result<ExitCode> {
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

/// The harvester's runtime. Blocking threads (store writes) are capped: each one costs a
/// malloc arena and a stack, and more threads than cores do not write to the store any faster.
/// With bitstreams in a bucket a blocking thread spends a large put waiting for its upload,
/// so more of them keep the uploads of a source's concurrent fetches going at once.
fn harvest_runtime(config: &tributary::config::Config) -> std::io::Result<tokio::runtime::Runtime> {
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
fn shutdown_requests(rt: &tokio::runtime::Runtime) -> std::io::Result<tokio::sync::watch::Receiver<bool>> {
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
async fn stopped(mut requests: tokio::sync::watch::Receiver<bool>) {
    let _ = requests.wait_for(|stop| *stop).await;
}
