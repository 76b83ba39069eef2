//! A harvester under test, in process: a `sources.toml` written as text into a temporary
//! directory and parsed as the binary would, a real store in that directory, one fetcher, and
//! the reads the harvest tests make of the store afterwards. The TOML is the tests' own, so
//! each shows the configuration an operator would write.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::fetcher::USER_AGENT;
use super::store::read_blob;
use tributary::config::Config;
use tributary::fetch::Fetcher;
use tributary::harvest::{HarvestError, NoProgress, SourceReport, Summary, harvest_once};
use tributary::naming::Naming;
use tributary::store::{Record, SourceStatus, Store, StoreOptions};

/// `[defaults]` for tests that count requests: rate limits lifted and no transport retries,
/// so every request a test counts is one the harvester chose to make.
pub(crate) const UNLIMITED: &str = "rate = \"unlimited\"\nconcurrency = 8\nmax_retries = 0\ntotal_timeout = \"10s\"\n";

/// The `base_url` of every configuration written here.
pub(crate) const BASE_URL: &str = "http://agg.example/";

/// A configuration whose store is `dir/store`, with `aggregator` and `defaults` lines added to
/// those tables and one `[[source]]` per `(id, url, extra lines)`, each allowed to reach
/// 127.0.0.1. It listens on a port of the system's choosing, so that the binary's `run` on it
/// never meets another test's server.
pub(crate) fn config_text(dir: &Path, aggregator: &str, defaults: &str, sources: &[(&str, &str, &str)]) -> String {
    let mut text = format!(
        "[aggregator]\nbase_url = \"{BASE_URL}\"\nlisten = \"127.0.0.1:0\"\ndata_dir = \"{}\"\n\
         user_agent = \"{USER_AGENT}\"\n{aggregator}\n[defaults]\n{defaults}\n",
        dir.join("store").display()
    );
    for (id, url, extra) in sources {
        text.push_str(&format!("[[source]]\nid = \"{id}\"\nurl = \"{url}\"\nallow_private = true\n{extra}\n"));
    }
    text
}

/// See the module docs.
pub(crate) struct Harness {
    dir: tempfile::TempDir,
    pub(crate) config: Config,
    pub(crate) store: Store,
    pub(crate) fetcher: Fetcher,
}

impl Harness {
    /// The configuration `text(dir)` returns, saved as `dir/sources.toml`, with its store opened.
    pub(crate) fn new(text: impl FnOnce(&Path) -> String) -> Harness {
        Harness::with_store(text, &StoreOptions::default())
    }

    /// [`Harness::new`], its store opened with `options` (bitstreams in a test bucket).
    pub(crate) fn with_store(text: impl FnOnce(&Path) -> String, options: &StoreOptions) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sources.toml");
        let text = text(dir.path());
        std::fs::write(&path, &text).unwrap();
        let config = Config::parse(&text, &path, None).unwrap();
        let store = Store::open_with(&config.aggregator.data_dir, options).unwrap();
        let fetcher = Fetcher::from_config(&config).unwrap();
        Harness { dir, config, store, fetcher }
    }

    /// Sources `(id, url, extra lines)` with [`UNLIMITED`] defaults.
    pub(crate) fn sources(sources: &[(&str, &str, &str)]) -> Harness {
        Harness::new(|dir| config_text(dir, "", UNLIMITED, sources))
    }

    /// `tributary run`'s harvester on this configuration, as a task on `runtime`, until
    /// [`Service::stop`].
    pub(crate) fn serve(&self, runtime: &tokio::runtime::Handle) -> Service {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (config, store, fetcher) = (self.config.clone(), self.store.clone(), self.fetcher.clone());
        let task = runtime.spawn(async move {
            tributary::harvest::run(&config, &store, &fetcher, async move { stopped.await.unwrap_or(()) }).await
        });
        Service { stop, task }
    }

    /// One pass over every source.
    pub(crate) async fn pass(&self) -> Summary {
        harvest_once(&self.config, &self.store, &self.fetcher, &[], Arc::new(NoProgress)).await.unwrap()
    }

    /// One pass of a configuration with a single source; its report.
    pub(crate) async fn pass_one(&self) -> SourceReport {
        let summary = self.pass().await;
        assert_eq!(summary.sources.len(), 1, "{summary}");
        summary.sources.into_iter().next().unwrap()
    }

    /// Tributary's URI for `upstream` as harvested for `source`.
    pub(crate) fn uri(&self, source: &str, upstream: &str) -> String {
        Naming::new(&self.config.aggregator.base_url).resource(source, upstream).unwrap()
    }

    /// The record of `upstream` as harvested for `source`, deleted or not.
    pub(crate) fn record(&self, source: &str, upstream: &str) -> Option<Record> {
        self.store.record(&self.uri(source, upstream)).unwrap()
    }

    /// The live content held for `upstream`, read back from the store.
    pub(crate) fn content(&self, source: &str, upstream: &str) -> Option<Vec<u8>> {
        let rec = self.record(source, upstream).filter(|r| !r.is_deleted())?;
        Some(read_blob(&self.store, &rec.sha256))
    }

    /// The live records of `source`, as Tributary URI → sha-256 (hex).
    pub(crate) fn live(&self, source: &str) -> HashMap<String, String> {
        live_records(&self.store, source)
    }

    /// A set's change log, as `(change, uri)`.
    pub(crate) fn events(&self, set: &str) -> Vec<(String, String)> {
        let events = self.store.events_after(set, 0).unwrap();
        events.map(|e| e.unwrap()).map(|e| (format!("{:?}", e.change), e.uri)).collect()
    }

    /// A source's saved status.
    pub(crate) fn status(&self, source: &str) -> SourceStatus {
        self.store.source_state(source).unwrap().unwrap().status
    }

    /// Closes the store (one process at a time may hold it) and hands over the directory, for
    /// a test that goes on with the `tributary` binary.
    pub(crate) fn close(self) -> (tempfile::TempDir, PathBuf) {
        let Harness { dir, store, .. } = self;
        drop(store);
        let config = dir.path().join("sources.toml");
        (dir, config)
    }
}

/// The live records of `source` in `store` (written with [`BASE_URL`]), as Tributary URI →
/// sha-256 (hex); also for a store the binary wrote, which a test opens after it.
pub(crate) fn live_records(store: &Store, source: &str) -> HashMap<String, String> {
    let naming = Naming::new(&url::Url::parse(BASE_URL).unwrap());
    let records = store.records_with_prefix(&naming.resource_prefix(source)).map(Result::unwrap);
    records.filter(|r| !r.is_deleted()).map(|r| (r.uri.clone(), r.sha256.to_hex())).collect()
}

/// The harvester of `tributary run`, started by [`Harness::serve`].
pub(crate) struct Service {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), HarvestError>>,
}

impl Service {
    /// Asks it to stop as SIGINT would, and asserts it returns cleanly within 10 s.
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(());
        let ended = tokio::time::timeout(std::time::Duration::from_secs(10), self.task).await;
        ended.expect("run returns promptly after shutdown").unwrap().unwrap();
    }
}
