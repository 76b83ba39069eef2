//! The `tributary` command line: parses arguments, sets up logging, and hands each subcommand
//! to the library. Nothing else lives here.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use tributary::check::{self, CheckReport};
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
    /// SIGTERM.
    Run,
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
    }
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

/// Writes the export to `file` (stdout for `-`), gzipped when its name ends in `.gz`. A file is
/// written beside its final name and renamed into place once complete and synced, so an
/// interrupted export never leaves a file that looks whole (the import also checks its `end`
/// line).
fn export_store(
    store: &tributary::store::Store,
    file: &std::path::Path,
) -> anyhow::Result<tributary::store::ExportCounts> {
    use anyhow::Context as _;
    if file == std::path::Path::new("-") {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        return Ok(store.export(&mut out, file)?);
    }
    let name = file.file_name().context("the export file needs a name")?.to_string_lossy();
    let tmp = file.with_file_name(format!(".{name}.partial"));
    let written = std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    let mut buffered = std::io::BufWriter::with_capacity(1 << 20, written);
    let counts = if name.ends_with(".gz") {
        let mut gz = flate2::write::GzEncoder::new(&mut buffered, flate2::Compression::fast());
        let counts = store.export(&mut gz, file)?;
        gz.finish().with_context(|| format!("cannot write {}", tmp.display()))?;
        counts
    } else {
        store.export(&mut buffered, file)?
    };
    let written =
        buffered.into_inner().map_err(|e| e.into_error()).with_context(|| format!("cannot write {}", tmp.display()))?;
    written.sync_all().with_context(|| format!("cannot sync {}", tmp.display()))?;
    std::fs::rename(&tmp, file).with_context(|| format!("cannot rename {} to {}", tmp.display(), file.display()))?;
    Ok(counts)
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
    let store = open_existing(&config.aggregator.data_dir, config.aggregator.blobs.clone())?;
    let rt = tokio::runtime::Runtime::new()?;
    let reports = rt.block_on(tributary::harvest::audit::audit_sources(&config, &store, &args.sources, args.fetch))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        for report in &reports {
            println!("{report}");
        }
    }
    Ok(if reports.iter().all(|r| r.is_in_sync()) { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn run_failures(args: FailuresArgs, global: &Global) -> anyhow::Result<ExitCode> {
    let config = load_config(global, &args.sources)?;
    let store = open_existing(&config.aggregator.data_dir, config.aggregator.blobs.clone())?;
    let reports = config
        .select(&args.sources)?
        .into_iter()
        .map(|s| store.failure_report(&s.id, args.limit))
        .collect::<Result<Vec<_>, _>>()?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        reports.iter().for_each(|r| println!("{r}"));
    }
    Ok(if reports.iter().all(|r| r.failing == 0) { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn run_store(
    cmd: StoreCommand,
    (dir, blobs): (PathBuf, Option<tributary::store::RemoteBlobs>),
) -> anyhow::Result<ExitCode> {
    if let StoreCommand::Import { file } = &cmd {
        return import_store(&dir, file);
    }
    // Read-only maintenance never creates a store: a mistyped path is an error, not an empty store.
    let store = open_existing(&dir, blobs)?;
    match cmd {
        StoreCommand::Stats => println!("{}", store.stats()?),
        StoreCommand::Verify => {
            let report = store.verify()?;
            println!("{report}");
            if !report.is_clean() {
                return Ok(ExitCode::from(1));
            }
        }
        StoreCommand::Gc => println!("{}", store.gc()?),
        StoreCommand::Export { file } => {
            let counts = export_store(&store, &file)?;
            eprintln!("exported {} to {}:\n{counts}", dir.display(), file.display());
        }
        StoreCommand::Import { .. } => unreachable!("handled before the store is opened"),
    }
    Ok(ExitCode::SUCCESS)
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
        let simulators = start_simulators(&config).await?;
        tracing::info!(url = %config.aggregator.base_url, "serving the aggregate; the dashboard is at this URL");
        // One signal listener for all, so a Ctrl-C is received and logged once.
        let (server, harvester, notifier) = tokio::join!(
            tributary::web::serve_with(listener, web, subscriber.router(), stopped(stop.clone())),
            harvest::run_with_push(&config, &store, &fetcher, Some(&subscriber), stopped(stop.clone())),
            notify(notifications, stopped(stop)),
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
        tracing::info!(url = %config.aggregator.base_url, "serving the aggregate");
        let (server, notifier) =
            tokio::join!(tributary::web::serve(listener, web, stopped(stop.clone())), notify(push, stopped(stop)));
        notifier.context("change notifications")?;
        server.context("web server")
    })?;
    Ok(ExitCode::SUCCESS)
}

fn run_provenance(args: ProvenanceArgs, global: &Global) -> anyhow::Result<ExitCode> {
    let config = load_config(global, &[])?;
    let store = open_existing(&config.aggregator.data_dir, config.aggregator.blobs.clone())?;
    let naming = tributary::naming::Naming::new(&config.aggregator.base_url);
    let checker = match args.verify {
        true => {
            let fetcher = Fetcher::from_config(&config)?;
            harvest::honour_parks(&store, &fetcher)?;
            Some(tributary::provenance::OriginChecker::for_config(fetcher, &config))
        }
        false => None,
    };
    let (text, found) =
        tributary::provenance::provenance_cli(&store, &naming, &args.query, checker.as_ref(), args.json)?;
    println!("{text}");
    Ok(if found { ExitCode::SUCCESS } else { ExitCode::from(1) })
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
