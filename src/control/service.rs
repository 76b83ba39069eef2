//! The running service's side of every control command, and the reload of its configuration.
//!
//! A reload re-reads the file the service started with and applies what it can without a
//! restart: the sources (added, changed, removed: see [`Harvester::reload`]), the sets, the
//! `[defaults]` and `[publish]` tables and `max_concurrent_sources`. What is bound at start —
//! the listening socket, the data directory and its bucket, the URIs everything is published
//! under, the HTTP clients and the server's limits — keeps its old value and is reported as
//! needing a restart. A file that does not load is refused whole, with the error a start would
//! give, and the configuration in force stays.

use std::io::{BufWriter, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use super::commands::{self, CommandError};
use super::server::{Handler, Reply};
use super::wire::{Command, Progress};
use crate::config::Config;
use crate::fetch::Fetcher;
use crate::harvest::{Harvester, ResourceOutcome, SourceChanges, SourceReport};
use crate::naming::Naming;
use crate::provenance::OriginChecker;
use crate::publish::{Limits, LinkPolicies, SetChanges, SetConfig};
use crate::store::Store;
use crate::web::WebState;

/// How often a long command's progress is sent.
const PROGRESS_EVERY: Duration = Duration::from_millis(200);

/// Where the service's configuration came from, to read it again.
#[derive(Debug, Clone)]
pub struct ReloadFrom {
    /// The file (`--config`).
    pub path: PathBuf,
    /// `--data-dir`, if given.
    pub data_dir: Option<PathBuf>,
    /// `--shard`, if given.
    pub shard: Option<String>,
}

/// The running service as the control channel sees it.
pub struct Service {
    store: Store,
    fetcher: Fetcher,
    web: WebState,
    /// `None` under `serve`, which does not harvest.
    harvester: Option<Harvester>,
    rt: tokio::runtime::Handle,
    config: RwLock<Arc<Config>>,
    from: ReloadFrom,
    /// One reload at a time.
    reloading: Mutex<()>,
}

impl Service {
    /// The service of `config`, answering on `rt` (its runtime).
    pub fn new(
        config: &Config,
        store: &Store,
        fetcher: &Fetcher,
        web: &WebState,
        harvester: Option<Harvester>,
        rt: tokio::runtime::Handle,
        from: ReloadFrom,
    ) -> Service {
        Service {
            store: store.clone(),
            fetcher: fetcher.clone(),
            web: web.clone(),
            harvester,
            rt,
            config: RwLock::new(Arc::new(config.clone())),
            from,
            reloading: Mutex::new(()),
        }
    }

    fn config(&self) -> Arc<Config> {
        self.config.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn harvester(&self) -> Result<&Harvester, CommandError> {
        self.harvester.as_ref().ok_or_else(|| {
            CommandError::Refused("the running service is `tributary serve`, which does not harvest".into())
        })
    }

    /// Reads the configuration file again and applies what can be applied while running.
    ///
    /// # Errors
    /// The file's error, as at start (the configuration in force stays), or the publisher's
    /// refusal of the new sets.
    pub fn reload(&self) -> Result<ReloadReport, CommandError> {
        let _one = self.reloading.lock().unwrap_or_else(|p| p.into_inner());
        let from = &self.from;
        let loaded = Config::load(&from.path, from.data_dir.as_deref())
            .and_then(|c| c.for_shard(from.shard.as_deref(), from.data_dir.as_deref()))?;
        let old = self.config();
        let restart = needs_restart(&old, &loaded);
        let config = keep_bound(&old, loaded);
        let sets = self.web.publisher().reconfigure(
            SetConfig::published(&config, &self.store)?,
            LinkPolicies::from_config(&config),
            Limits::from_config(&config),
        )?;
        let sources = self.harvester.as_ref().map(|h| h.reload(&config)).unwrap_or_default();
        self.web.reconfigure(&config);
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(config);
        let report = ReloadReport { file: from.path.clone(), sources, sets, restart };
        tracing::info!(file = %from.path.display(), summary = %report.one_line(), "configuration reloaded");
        Ok(report)
    }

    fn run(&self, command: Command, reply: &mut Reply) -> Result<u8, CommandError> {
        let config = self.config();
        match command {
            Command::Failures { sources, limit, json } => {
                commands::failures(&config, &self.store, &sources, limit, json, reply)
            }
            Command::Provenance { query, verify, json } => {
                let naming = Naming::new(&config.aggregator.base_url);
                let checker = verify.then(|| OriginChecker::for_config(self.fetcher.clone(), &config));
                let checker = checker.as_ref().map(|c| (c, &self.rt));
                commands::provenance(&self.store, &naming, &query, checker, json, reply)
            }
            Command::Audit { sources, fetch, json } => {
                commands::audit(&config, &self.store, &sources, fetch, json, &self.rt, reply)
            }
            Command::Stats => commands::stats(&self.store, reply),
            Command::Verify => commands::verify(&self.store, reply),
            Command::Export => self.export(reply),
            Command::Poll { sources } => self.poll(&sources, reply),
            Command::Pause { source } => {
                let state = self.rt.block_on(self.harvester()?.pause(&source))?;
                reply.stdout(&format!("{state}\n"));
                Ok(0)
            }
            Command::Resume { source } => {
                let state = self.rt.block_on(self.harvester()?.resume(&source))?;
                reply.stdout(&format!("{state}\n"));
                Ok(0)
            }
            Command::Reload => {
                let report = self.reload()?;
                reply.stdout(&format!("{report}\n"));
                Ok(0)
            }
            Command::Deletions { sources, action, json } => {
                let _turns = match (&self.harvester, action) {
                    (
                        Some(h),
                        crate::control::wire::DeletionAction::Apply | crate::control::wire::DeletionAction::Keep,
                    ) => self.rt.block_on(h.hold_turns(&sources)),
                    _ => Vec::new(),
                };
                commands::deletions(&config, &self.store, &sources, action, json, reply)
            }
            Command::Takedown { action } => commands::takedown(&config, &self.store, &action, reply),
            Command::Forget { source } => {
                if let Some(h) = &self.harvester
                    && config.source(&source).is_none()
                    && h.is_polling(&source)
                {
                    return Err(CommandError::Refused(format!(
                        "source {source} is still finishing its last pass; try again when it has ended"
                    )));
                }
                commands::forget(&config, &self.store, &source, reply)
            }
        }
    }

    /// The export of one snapshot, streamed; its counts follow as a value.
    fn export(&self, reply: &mut Reply) -> Result<u8, CommandError> {
        let counts = {
            let mut out = BufWriter::with_capacity(64 * 1024, reply.stream());
            let counts = self.store.export(&mut out, Path::new("the control socket"))?;
            out.flush().map_err(|e| CommandError::Refused(format!("cannot send the export: {e}")))?;
            counts
        };
        reply.value(serde_json::to_value(&counts)?);
        Ok(0)
    }

    /// Polls now and reports as `tributary harvest` does, sending progress as the passes go.
    fn poll(&self, sources: &[String], reply: &mut Reply) -> Result<u8, CommandError> {
        let harvester = self.harvester()?.clone();
        let counter = Arc::new(Counter::default());
        let (tx, rx) = std::sync::mpsc::channel();
        let (only, progress) = (sources.to_vec(), counter.clone());
        self.rt.spawn(async move {
            let _ = tx.send(harvester.poll(&only, progress).await);
        });
        let mut sent = Progress::default();
        // Ends when the passes do; each turn sends what changed since the last.
        let result = loop {
            match rx.recv_timeout(PROGRESS_EVERY) {
                Ok(result) => break result,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    let now = counter.snapshot();
                    if now != sent && !reply.gone() {
                        reply.progress(now.clone());
                        sent = now;
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(CommandError::Refused("the service stopped before the passes ended".into()));
                }
            }
        };
        let (summary, skipped) = result?;
        if !skipped.is_empty() {
            reply.stderr(&format!("paused, not polled: {}\n", skipped.join(", ")));
        }
        reply.stdout(&format!("{summary}\n"));
        Ok(u8::from(!summary.succeeded()))
    }
}

impl Handler for Service {
    fn handle(&self, command: Command, reply: &mut Reply) {
        match self.run(command, reply) {
            Ok(code) => reply.exit(code),
            Err(e) => reply.error(&e),
        }
    }
}

/// The new configuration, with what only a restart can change kept as it is.
fn keep_bound(old: &Config, new: Config) -> Config {
    let mut aggregator = old.aggregator.clone();
    aggregator.max_concurrent_sources = new.aggregator.max_concurrent_sources;
    Config {
        aggregator,
        hub: old.hub.clone(),
        server: old.server.clone(),
        simulators: old.simulators.clone(),
        shards: old.shards.clone(),
        ..new
    }
}

/// The keys a reload changed that only a restart applies, each as `key: old → new`.
fn needs_restart(old: &Config, new: &Config) -> Vec<String> {
    let (a, b) = (&old.aggregator, &new.aggregator);
    let mut changed = Vec::new();
    let mut check = |key: &str, was: String, now: String| {
        if was != now {
            changed.push(format!("`{key}`: {was} → {now}"));
        }
    };
    let opt = |v: Option<String>| v.unwrap_or_else(|| "(none)".into());
    check("listen", a.listen.to_string(), b.listen.to_string());
    check("data_dir", a.data_dir.display().to_string(), b.data_dir.display().to_string());
    check("blobs", opt(a.blobs.as_ref().map(ToString::to_string)), opt(b.blobs.as_ref().map(ToString::to_string)));
    check("base_url", a.base_url.to_string(), b.base_url.to_string());
    check("public_url", a.public_url.to_string(), b.public_url.to_string());
    check("user_agent", a.user_agent.clone(), b.user_agent.clone());
    check("proxy", opt(a.proxy.as_ref().map(ToString::to_string)), opt(b.proxy.as_ref().map(ToString::to_string)));
    check("store_cache_mb", a.store_cache_mb.to_string(), b.store_cache_mb.to_string());
    check("endpoint_id", a.endpoint_id.clone(), b.endpoint_id.clone());
    check("hub", opt(a.hub.as_ref().map(ToString::to_string)), opt(b.hub.as_ref().map(ToString::to_string)));
    let differs =
        |x: bool| if x { ("(as it was)".to_owned(), "(changed)".to_owned()) } else { (String::new(), String::new()) };
    let (was, now) = differs(a.oai != b.oai);
    check("oai_*", was, now);
    let (was, now) = differs(old.hub != new.hub);
    check("[hub]", was, now);
    let (was, now) = differs(old.server != new.server);
    check("[server]", was, now);
    let (was, now) = differs(old.simulators != new.simulators);
    check("[[simulate]]", was, now);
    changed
}

/// What a reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReloadReport {
    /// The file read.
    pub file: PathBuf,
    /// The sources added, changed and removed.
    pub sources: SourceChanges,
    /// The sets added, changed and removed.
    pub sets: SetChanges,
    /// Keys changed in the file that only a restart applies (not applied).
    pub restart: Vec<String>,
}

impl ReloadReport {
    fn one_line(&self) -> String {
        let s = &self.sources;
        format!(
            "{} sources added, {} changed, {} removed; {} sets added, {} changed, {} removed; {} keys need a restart",
            s.added.len(),
            s.changed.len(),
            s.removed.len(),
            self.sets.added.len(),
            self.sets.changed.len(),
            self.sets.removed.len(),
            self.restart.len()
        )
    }
}

impl std::fmt::Display for ReloadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "reloaded {}", self.file.display())?;
        let (s, t) = (&self.sources, &self.sets);
        let lines = [
            ("sources added (polling now)", &s.added),
            ("sources changed (in force from their next poll)", &s.changed),
            (
                "sources removed (polling stopped; their records stay published until `tributary source forget ID`)",
                &s.removed,
            ),
            ("sets added", &t.added),
            ("sets changed", &t.changed),
            ("sets no longer published", &t.removed),
        ];
        let mut any = false;
        for (what, ids) in lines {
            if !ids.is_empty() {
                write!(f, "\n  {what}: {}", ids.join(", "))?;
                any = true;
            }
        }
        for key in &self.restart {
            write!(f, "\n  not applied, needs a restart: {key}")?;
        }
        if !any && self.restart.is_empty() {
            write!(f, ": nothing changed")?;
        }
        Ok(())
    }
}

/// Counts the progress of `poll`'s passes for the frames the client turns into its bar.
#[derive(Default)]
struct Counter {
    listed: std::sync::atomic::AtomicU64,
    done: std::sync::atomic::AtomicU64,
    message: Mutex<Option<String>>,
}

impl Counter {
    fn snapshot(&self) -> Progress {
        use std::sync::atomic::Ordering::Relaxed;
        Progress {
            listed: self.listed.load(Relaxed),
            done: self.done.load(Relaxed),
            message: self.message.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }
}

impl crate::harvest::Progress for Counter {
    fn listed(&self, _source: &str) {
        self.listed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn resource(&self, _source: &str, _outcome: ResourceOutcome, _bytes: u64) {
        self.done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn source_done(&self, report: &SourceReport) {
        *self.message.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!("{} done", report.source));
    }
}
