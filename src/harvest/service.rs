//! The harvester of `tributary run`, and the handle the operator steers it by: poll sources
//! now, pause and resume one, and take a reloaded configuration without a restart.
//!
//! Each source has a poll loop (its own task) and a [`Turn`] it shares with its push
//! subscriber and with this handle. The handle never touches a pass: it changes what the turn
//! says (the configuration, the pause) and rings it, and the loop acts at its next step. So a
//! reload never abandons a pass in flight — a changed source runs its next pass with the new
//! settings, a removed one stops after the pass it is in — while a pause stops the pass in
//! flight the way shutdown does, committing what was verified.
//!
//! Tasks are spawned through the runner ([`Runner::run`]), which owns them all and ends once
//! shutdown was asked for and every task has wound down.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;

use super::ctx::{Ctx, HarvestError, Reconfigured, Turn, Turns, configured, join_error, load_state, save_state};
use super::daemon::{after, context, harvest_source, until};
use super::parks::Keeper;
use super::push::Push;
use super::report::{Progress, ResourceOutcome, SourceReport, Summary};
use crate::config::{Config, ConfigError};
use crate::fetch::Fetcher;
use crate::model::W3cDateTime;
use crate::store::{HarvestState, Store};

type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The running harvester. Cheap to clone.
#[derive(Clone)]
pub struct Harvester {
    inner: Arc<Inner>,
}

struct Inner {
    ctx: Arc<Ctx>,
    push: Option<Push>,
    /// `max_concurrent_sources`: a permit per pass.
    passes: Arc<Semaphore>,
    /// The permits `passes` should hold in all (a reload changes it).
    permits: std::sync::Mutex<usize>,
    config: std::sync::RwLock<Arc<Config>>,
    spawn: mpsc::UnboundedSender<Task>,
    /// Where the passes' progress goes: to every `tributary poll` watching.
    relay: Arc<Relay>,
}

/// Runs the harvester's tasks; see [`Harvester::start`].
pub struct Runner {
    tasks: mpsc::UnboundedReceiver<Task>,
    ctx: Arc<Ctx>,
    /// Keeps the fetcher's parked origins in the store until the harvester stops.
    parks: Keeper,
}

/// Why an operator's command could not be carried out.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SteerError {
    /// The source is not configured (or no longer is).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// `poll` named a paused source.
    #[error("source {0} is paused: `tributary resume --source {0}` first")]
    Paused(String),
    /// The store failed.
    #[error(transparent)]
    Harvest(#[from] HarvestError),
}

impl From<crate::store::StoreError> for SteerError {
    fn from(e: crate::store::StoreError) -> Self {
        SteerError::Harvest(e.into())
    }
}

/// What `pause` or `resume` found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PauseState {
    /// The source.
    pub source: String,
    /// Since when it is paused (`None`: it runs).
    pub paused_since: Option<W3cDateTime>,
    /// Whether the command changed anything (false: it was already so).
    pub changed: bool,
}

impl std::fmt::Display for PauseState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.paused_since, self.changed) {
            (Some(t), true) => write!(f, "{}: paused (since {t}); its records stay published", self.source),
            (Some(t), false) => write!(f, "{}: already paused (since {t})", self.source),
            (None, true) => write!(f, "{}: resumed; polling now", self.source),
            (None, false) => write!(f, "{}: not paused", self.source),
        }
    }
}

/// What a reload changed among the sources.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceChanges {
    /// Sources that start polling.
    pub added: Vec<String>,
    /// Sources whose keys changed: in force from their next poll.
    pub changed: Vec<String>,
    /// Sources that stop polling (after a pass in flight).
    pub removed: Vec<String>,
}

impl Harvester {
    /// The harvester of `config` over `store`, subscribing through `push` when given (its
    /// callback routes must be served for hubs to reach it). Reads which sources are paused.
    /// Nothing runs until the [`Runner`] does.
    ///
    /// # Errors
    /// [`HarvestError::Store`] when the sources' states cannot be read.
    pub async fn start(
        config: &Config,
        store: &Store,
        fetcher: &Fetcher,
        push: Option<&Push>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(Harvester, Runner), HarvestError> {
        let turns = push.map_or_else(|| Turns::new(configured(config)), Push::turns);
        let parks = Keeper::start(store, fetcher).await;
        let relay = Arc::new(Relay::default());
        let ctx = context(config, store, fetcher, relay.clone(), shutdown, turns);
        let (spawn, tasks) = mpsc::unbounded_channel();
        let n = config.aggregator.max_concurrent_sources;
        let inner = Inner {
            ctx: ctx.clone(),
            push: push.cloned(),
            passes: Arc::new(Semaphore::new(n)),
            permits: std::sync::Mutex::new(n),
            config: std::sync::RwLock::new(Arc::new(config.clone())),
            spawn,
            relay,
        };
        let harvester = Harvester { inner: Arc::new(inner) };
        for (id, turn) in ctx.turns.all() {
            let paused = load_state(&ctx, &id).await?.paused.is_some();
            turn.paused.send_replace(paused);
        }
        if let Some(push) = push {
            let mut started = JoinSet::new();
            push.start(ctx.clone(), &mut started);
            harvester.spawn(async move { while started.join_next().await.is_some() {} });
        }
        for (_, turn) in ctx.turns.all() {
            harvester.spawn_loop(turn);
        }
        Ok((harvester, Runner { tasks, ctx, parks }))
    }

    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        // Fails only once the runner is gone, when nothing should start any more.
        let _ = self.inner.spawn.send(Box::pin(task));
    }

    fn spawn_loop(&self, turn: Arc<Turn>) {
        let (ctx, passes) = (self.inner.ctx.clone(), self.inner.passes.clone());
        self.spawn(async move { poll_loop(ctx, turn, passes).await });
    }

    /// The configuration in force (the last one a reload took).
    pub fn config(&self) -> Arc<Config> {
        self.inner.config.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Polls `only` (every source when empty) now, whatever their schedule, and waits for the
    /// passes: a source being polled already is not polled again, its pass in flight is the
    /// one reported. Paused sources are passed over when none are named (their ids are
    /// returned); naming one is an error. `progress` sees the passes as they go.
    ///
    /// # Errors
    /// [`SteerError::Config`] for an unconfigured id, [`SteerError::Paused`] for a paused one,
    /// both before anything is polled.
    pub async fn poll(
        &self,
        only: &[String],
        progress: Arc<dyn Progress>,
    ) -> Result<(Summary, Vec<String>), SteerError> {
        let config = self.config();
        let chosen: Vec<String> = config.select(only)?.into_iter().map(|s| s.id.clone()).collect();
        let mut turns = Vec::new();
        let mut skipped = Vec::new();
        for id in chosen {
            let turn = self.inner.ctx.turns.get(&id).ok_or_else(|| unknown(&config, &id))?;
            match (turn.is_paused(), only.is_empty()) {
                (true, true) => skipped.push(id),
                (true, false) => return Err(SteerError::Paused(id)),
                (false, _) => turns.push((id, turn)),
            }
        }
        let started = Instant::now();
        let _watching = self.inner.relay.watch(turns.iter().map(|(id, _)| id.clone()).collect(), progress);
        let waits = turns.iter().map(|(id, turn)| {
            let rx = turn.wait_for_pass();
            let id = id.clone();
            async move {
                rx.await.unwrap_or_else(|_| {
                    SourceReport::failed_with(&id, "the pass did not run: the service is stopping".into())
                })
            }
        });
        let sources = futures_util::future::join_all(waits).await;
        Ok((Summary { sources, duration: started.elapsed() }, skipped))
    }

    /// Pauses `id`: a pass in flight stops (what it verified is kept), no poll starts and
    /// push deliveries are dropped until [`Harvester::resume`]. Saved, so it outlasts restarts.
    ///
    /// # Errors
    /// [`SteerError::Config`] for an unconfigured id; [`SteerError::Harvest`] when the store fails.
    pub async fn pause(&self, id: &str) -> Result<PauseState, SteerError> {
        self.steer(id, true).await
    }

    /// Resumes `id` and polls it now (push deliveries were dropped while it was paused).
    ///
    /// # Errors
    /// As [`Harvester::pause`].
    pub async fn resume(&self, id: &str) -> Result<PauseState, SteerError> {
        self.steer(id, false).await
    }

    async fn steer(&self, id: &str, pause: bool) -> Result<PauseState, SteerError> {
        let turn = self.configured_turn(id)?;
        let was = turn.paused.send_replace(pause);
        turn.steered.notify_waiters();
        // A pass in flight holds the turn until it has stopped and saved its state.
        let _turn = turn.lock.lock().await;
        let mut state = load_state(&self.inner.ctx, id).await?;
        let changed = was != pause || state.paused.is_some() != pause;
        if changed {
            state.paused = pause.then(|| state.paused.unwrap_or_else(W3cDateTime::now));
            if !pause && state.status.state == HarvestState::Harvesting {
                state.status.state = HarvestState::Idle;
            }
            save_state(&self.inner.ctx, id, state.clone()).await?;
            match pause {
                true => tracing::warn!(source.id = %id, "paused by the operator: no polls, push deliveries dropped"),
                false => tracing::info!(source.id = %id, "resumed by the operator; polling now"),
            }
        }
        if !pause {
            turn.poll_now.notify_one();
        }
        Ok(PauseState { source: id.to_owned(), paused_since: state.paused, changed })
    }

    /// Waits until no pass or push notification of `sources` is in flight, and keeps them from
    /// starting until the guards are dropped: for the operator's commands that rewrite what
    /// a pass writes (held deletions). Sources without a loop are passed over.
    pub async fn hold_turns(&self, sources: &[String]) -> Vec<tokio::sync::OwnedMutexGuard<()>> {
        let mut guards = Vec::new();
        for id in sources {
            if let Some(turn) = self.inner.ctx.turns.get(id) {
                guards.push(turn.lock.clone().lock_owned().await);
            }
        }
        guards
    }

    /// Whether `id` still has a poll loop (configured, or removed and finishing its last pass).
    pub fn is_polling(&self, id: &str) -> bool {
        self.inner.ctx.turns.get(id).is_some()
    }

    fn configured_turn(&self, id: &str) -> Result<Arc<Turn>, SteerError> {
        let turn = self.inner.ctx.turns.get(id).filter(|t| t.configured().is_some());
        turn.ok_or_else(|| unknown(&self.config(), id).into())
    }

    /// Takes `config` (already validated) in place of the one in force: added sources start
    /// polling, changed ones use their new keys from their next pass, removed ones stop after
    /// the pass they are in; push subscriptions follow; `max_concurrent_sources` changes at
    /// once (a lower cap as passes end).
    pub fn reload(&self, config: &Config) -> SourceChanges {
        let mut changes = SourceChanges::default();
        let turns = &self.inner.ctx.turns;
        let wanted = configured(config);
        for c in &wanted {
            let id = c.source.id.clone();
            match turns.reconfigure(c.clone()) {
                Reconfigured::Same => {}
                Reconfigured::Changed => changes.changed.push(id),
                Reconfigured::Restored => changes.added.push(id),
                Reconfigured::Added(turn) => {
                    self.spawn_loop(turn);
                    changes.added.push(id);
                }
            }
        }
        for (id, _) in turns.all() {
            if !wanted.iter().any(|c| c.source.id == id) && turns.unconfigure(&id) {
                changes.removed.push(id);
            }
        }
        if let Some(push) = &self.inner.push {
            for task in push.reconfigured(&config.defaults, &changes.added) {
                self.spawn(task);
            }
        }
        self.resize(config.aggregator.max_concurrent_sources);
        self.inner.ctx.fetcher.reconfigured(&|id| wanted.iter().any(|c| c.source.id == id));
        *self.inner.config.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(config.clone());
        changes
    }

    /// Sets the number of passes that may run at once.
    fn resize(&self, n: usize) {
        let mut permits = self.inner.permits.lock().unwrap_or_else(|p| p.into_inner());
        if n > *permits {
            self.inner.passes.add_permits(n - *permits);
        } else if n < *permits {
            // Idle permits go at once; those held by passes as the passes end.
            let excess = *permits - n;
            let gone = self.inner.passes.forget_permits(excess);
            if gone < excess {
                let (passes, rest) = (self.inner.passes.clone(), u32::try_from(excess - gone).unwrap_or(u32::MAX));
                self.spawn(async move {
                    if let Ok(p) = passes.acquire_many(rest).await {
                        p.forget();
                    }
                });
            }
        }
        *permits = n;
    }
}

impl Runner {
    /// Runs every task until shutdown was asked for and they have all ended; then flushes the
    /// store.
    ///
    /// # Errors
    /// [`HarvestError::Store`] when the final flush fails.
    pub async fn run(mut self) -> Result<(), HarvestError> {
        let mut tasks = JoinSet::new();
        let mut shutdown = self.ctx.shutdown.clone();
        let mut stopping = false;
        // Ends once stopping and every task is done; each turn spawns, reaps or notes the stop.
        loop {
            tokio::select! {
                Some(task) = self.tasks.recv(), if !stopping => { tasks.spawn(task); }
                Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                    if let Err(e) = done {
                        tracing::error!(error = %crate::error::chain(&e), "a harvester task panicked; the others go on");
                    }
                }
                _ = shutdown.wait_for(|s| *s), if !stopping => stopping = true,
            }
            if stopping && tasks.is_empty() {
                break;
            }
        }
        self.parks.finish().await;
        let s = self.ctx.store.clone();
        tokio::task::spawn_blocking(move || s.flush()).await.map_err(join_error)??;
        tracing::info!("harvester stopped");
        Ok(())
    }
}

/// One source under `run`: wait until due (or asked), harvest, repeat; idle while paused;
/// until shutdown, or until a reload removes the source (after the pass in flight).
async fn poll_loop(ctx: Arc<Ctx>, turn: Arc<Turn>, passes: Arc<Semaphore>) {
    let Some(first) = turn.configured() else { return };
    let id = first.source.id.clone();
    let mut shutdown = ctx.shutdown.clone();
    let mut paused = turn.paused.subscribe();
    let mut due = load_state(&ctx, &id).await.ok().and_then(|s| s.status.next_attempt);
    // Ends at shutdown or removal; each turn waits, then runs at most one pass.
    loop {
        if turn.configured().is_none() {
            if ctx.turns.loop_ended(&id) {
                tracing::info!(source.id = %id, "no longer configured: polling stopped; its records stay published until `tributary source forget`");
                // Its last pass may have asked its hosts for its limits after the reload
                // forgot them.
                ctx.fetcher.reconfigured(&|source| source != id);
                return;
            }
            continue;
        }
        if turn.is_paused() {
            turn.pass_ended(&SourceReport::failed_with(&id, "paused by the operator".into()));
            tokio::select! {
                _ = paused.wait_for(|p| !p) => {}
                _ = turn.steered.notified() => {}
                _ = shutdown.wait_for(|stop| *stop) => return,
            }
            continue;
        }
        let wait = due.map_or(Duration::ZERO, |d| until(&d));
        let verified = tokio::select! {
            _ = tokio::time::sleep(wait) => false,
            // A gap in the notifications, a subscription that fell through, `tributary poll`.
            _ = turn.poll_now.notified() => false,
            _ = turn.verified.notified() => true,
            _ = turn.steered.notified() => continue,
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        if verified {
            // One catch-up poll now: a change published after the last pass read the Change
            // List and before the hub recorded us is never notified, and the next notification
            // that would show the gap may never come. After it, polls are `push_poll` apart.
            // A source backing off after failures keeps its backoff: that poll catches up.
            let failing = load_state(&ctx, &id).await.is_ok_and(|s| s.status.consecutive_failures > 0);
            if !failing {
                due = None;
            }
            continue;
        }
        let permit = tokio::select! {
            p = passes.acquire() => p,
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        let own_turn = turn.lock.lock().await;
        // Steered while waiting for the permit: look again before starting.
        let Some(current) = turn.configured().filter(|_| !turn.is_paused()) else { continue };
        turn.pass_started();
        let pass = pass_ctx(&ctx, &turn);
        let report = harvest_source(&pass, &current.source, &current.sets).await;
        turn.pass_ended(&report);
        drop(own_turn);
        drop(permit);
        turn.polled.notify_one();
        due = load_state(&ctx, &id).await.ok().and_then(|s| s.status.next_attempt);
        if due.is_none() && report.error.is_some() {
            due = Some(after(current.source.settings.poll));
        }
    }
}

/// The context of one pass: the service's, with a shutdown flag that also turns true when the
/// operator pauses the source, so the pass stops as it would at shutdown.
fn pass_ctx(ctx: &Arc<Ctx>, turn: &Turn) -> Arc<Ctx> {
    let (tx, rx) = watch::channel(false);
    let mut global = ctx.shutdown.clone();
    let mut paused = turn.paused.subscribe();
    tokio::spawn(async move {
        // Ends with the pass (every receiver gone) or at the first stop.
        tokio::select! {
            Ok(_) = global.wait_for(|s| *s) => {}
            Ok(_) = paused.wait_for(|p| *p) => {}
            () = tx.closed() => return,
        }
        let _ = tx.send(true);
        tx.closed().await;
    });
    Arc::new(Ctx { shutdown: rx, ..Ctx::clone(ctx) })
}

/// The error of an id that names no configured source.
fn unknown(config: &Config, id: &str) -> ConfigError {
    ConfigError::UnknownSource { id: id.to_owned(), known: config.sources.iter().map(|s| s.id.clone()).collect() }
}

/// A `tributary poll` caller: its id, the sources it watches and where their progress goes.
type Watcher = (u64, Vec<String>, Arc<dyn Progress>);

/// The service's [`Progress`]: passes of the service report to nobody, except to the callers
/// of `tributary poll` watching their sources.
#[derive(Default)]
struct Relay {
    watchers: std::sync::RwLock<Vec<Watcher>>,
    next: std::sync::atomic::AtomicU64,
}

/// Stops a watch when dropped.
struct Watching<'a> {
    relay: &'a Relay,
    id: u64,
}

impl Relay {
    fn watch(&self, sources: Vec<String>, progress: Arc<dyn Progress>) -> Watching<'_> {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.watchers.write().unwrap_or_else(|p| p.into_inner()).push((id, sources, progress));
        Watching { relay: self, id }
    }

    fn each(&self, source: &str, f: impl Fn(&dyn Progress)) {
        let watchers = self.watchers.read().unwrap_or_else(|p| p.into_inner());
        for (_, sources, p) in watchers.iter() {
            if sources.iter().any(|s| s == source) {
                f(p.as_ref());
            }
        }
    }
}

impl Drop for Watching<'_> {
    fn drop(&mut self) {
        self.relay.watchers.write().unwrap_or_else(|p| p.into_inner()).retain(|(id, _, _)| *id != self.id);
    }
}

impl Progress for Relay {
    fn source_started(&self, source: &str) {
        self.each(source, |p| p.source_started(source));
    }

    fn listed(&self, source: &str) {
        self.each(source, |p| p.listed(source));
    }

    fn resource(&self, source: &str, outcome: ResourceOutcome, bytes: u64) {
        self.each(source, |p| p.resource(source, outcome, bytes));
    }

    fn source_done(&self, report: &SourceReport) {
        self.each(&report.source, |p| p.source_done(report));
    }
}
