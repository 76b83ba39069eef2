//! What most commands start and end with: the configuration, checked before anything is opened
//! or fetched; the store; and the exit once the store is durable.

use std::path::PathBuf;

use anyhow::Context as _;
use tributary::fetch::Fetcher;

use super::Global;

/// Loads and validates `sources.toml` and checks the `--source` ids against it: a bad file or
/// an id that names no configured source is an error before the store opens or anything is
/// fetched.
pub(super) fn load_config(global: &Global, only: &[String]) -> anyhow::Result<tributary::config::Config> {
    let config = tributary::config::Config::load(&global.config, global.data_dir.as_deref())?
        .for_shard(global.shard.as_deref(), global.data_dir.as_deref())
        .with_context(|| global.config.display().to_string())?;
    config.select(only).with_context(|| global.config.display().to_string())?;
    Ok(config)
}

/// After [`load_config`], the store and the fetcher the harvesting commands share; `only`
/// names the sources to be harvested (empty: all).
///
/// The fetcher and those sources' HTTP clients are built on a thread of its own while the
/// store opens: building a client reads and parses the system's CA certificates (about 5 ms
/// here), and creating a store waits on a hundred-odd `fsync`s (about 30 ms) with the CPU idle.
pub(super) fn load(
    config: &tributary::config::Config,
    only: &[String],
) -> anyhow::Result<(tributary::store::Store, Fetcher)> {
    let sources = config.select(only)?;
    std::thread::scope(|scope| {
        let fetcher = scope.spawn(|| {
            let fetcher = Fetcher::from_config(config)?;
            fetcher.prepare(sources.iter().map(|s| &s.settings))?;
            Ok::<_, tributary::fetch::FetchError>(fetcher)
        });
        let store = open_store(config)?;
        let fetcher = fetcher.join().map_err(|_| anyhow::anyhow!("building the HTTP client panicked"))??;
        Ok((store, fetcher))
    })
}

/// Opens (creating if needed) the configured store with the configured page cache.
pub(super) fn open_store(config: &tributary::config::Config) -> anyhow::Result<tributary::store::Store> {
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

/// The data directory — `--data-dir`, else `data_dir` from the configuration — and where its
/// bitstreams are (`[aggregator] blobs`, read from the configuration whatever `--data-dir`
/// says). Maintenance commands still work without a configuration file (then `store/`, local
/// blobs), but a configuration that exists and is broken is an error, not silently ignored,
/// unless `--data-dir` names the store.
pub(super) fn data_dir(global: &Global) -> anyhow::Result<(PathBuf, Option<tributary::store::RemoteBlobs>)> {
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
pub(super) fn open_existing(
    dir: &std::path::Path,
    blobs: Option<tributary::store::RemoteBlobs>,
) -> anyhow::Result<tributary::store::Store> {
    let mut options = tributary::store::StoreOptions::default().with_blobs(blobs);
    options.create = false;
    Ok(tributary::store::Store::open_with(dir, &options)?)
}

/// Ends a one-shot command once the store is durable, without tearing the process down.
///
/// Dropping the store frees its caches and the allocator then returns their pages one
/// `madvise` at a time; with the runtime's and the connections' shutdown, that took tens of
/// milliseconds after a 10,000-resource baseline (docs/HARVEST.md, "Speed"), and it grows with
/// the cache. Every batch is durable already; the flush below commits the rows of small blobs
/// put since the last one, and fails on a read-only store (the command then exits 1). The
/// kernel releases memory, sockets and the store's lock file at exit.
pub(super) fn exit_durably(store: &tributary::store::Store, code: i32) -> ! {
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
