//! Power cuts under a running Tributary (issue #39): its data directory is on the power-cut
//! file system (`support::powercut`), which keeps only what was made durable, and the test
//! cuts the power again and again while Tributary harvests and publishes.
//!
//! The Source is a simulator in this process (so it outlives every cut), changing four times
//! a second and pushing its changes through its own hub; Tributary follows it by push and
//! polls it every few seconds, and notifies its own subscribers through its built-in hub. An
//! observer (`observer`) reads both sets' change logs and Change Lists every 100 ms and
//! receives Tributary's notifications the whole time. At seeded random moments (half of them
//! moved on to the next write, so that the cut catches it before its sync) Tributary is
//! SIGKILLed, the power is cut, `tributary verify` runs on what is left, and Tributary
//! starts again on it (one start in five is itself killed before it answers). After each
//! restart (`check`): every change the observer saw is still served, at the same position
//! with the same datetime; no position holds another change; the Change Lists agree with
//! `api/changes` and closed ones did not change; every notified change is in the log; every
//! bitstream the Resource List names is served with its hash; `verify` was clean. At the end
//! the Source stops and the harvest must converge to its state.
//!
//! The seed is printed; `TRIBUTARY_POWERCUT_SEED` replays one, `TRIBUTARY_POWERCUT_CUTS`
//! changes the number of cuts (`scripts/powercut.sh` runs 200). Two diagnostics:
//! `TRIBUTARY_POWERCUT_METADATA=journaled` makes every directory entry durable at any sync
//! (as ext4 and XFS do in practice, unlike POSIX), `TRIBUTARY_POWERCUT_TEAR` sets how often a
//! file keeps a torn write (`never`, `always`, one in N; 3 by default). Every problem is
//! reported with the set, position, URI and datetime seen and what is served instead, in the
//! failure message and, complete, in a report file under the target directory.

mod check;
mod observer;
mod served;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use check::{CutFindings, compare};
use observer::{Observer, lock};
use served::{Reader, declared, via, with_retries};

use crate::support::cli;
use crate::support::net::{free_port, wait_until_ok};
use crate::support::powercut::{Metadata, PowerCutFs, Tear};
use crate::support::rng::Rng;
use crate::support::sim::{RunningSim, start};
use tributary::simulate::ClockMode;

const TEST: &str = "store_powercut::power_cuts_never_take_back_what_tributary_served";
const CUTS: usize = 20;
const CUTS_ENV: &str = "TRIBUTARY_POWERCUT_CUTS";
const SEED_ENV: &str = "TRIBUTARY_POWERCUT_SEED";
const METADATA_ENV: &str = "TRIBUTARY_POWERCUT_METADATA";
const TEAR_ENV: &str = "TRIBUTARY_POWERCUT_TEAR";
/// Tributary's sets: the source's own and a merged one.
const SETS: [&str; 2] = ["sim", "all"];
const RESOURCES: usize = 60;
/// Bounds on waits, none an expectation: a start (store recovery included), a `verify`, the
/// first harvest, the convergence at the end.
const START_LIMIT: Duration = Duration::from_secs(60);
const VERIFY_LIMIT: Duration = Duration::from_secs(120);
const BASELINE_LIMIT: Duration = Duration::from_secs(90);
const CONVERGE_LIMIT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_cuts_never_take_back_what_tributary_served() {
    let (metadata, tear) = (metadata(), tear());
    let Some(disk) = PowerCutFs::mount_with(TEST, metadata) else { return };
    let (seed, cuts) = (seed(), env_number(CUTS_ENV).unwrap_or(CUTS as u64).max(1) as usize);
    eprintln!(
        "{TEST}: seed {seed} ({SEED_ENV}={seed} replays it), {cuts} cuts, {metadata:?} directories, tearing {tear:?}"
    );
    let source = start(|c| source_config(c, seed)).await;
    let ticker = source.sim.start_ticking();
    let work = tempfile::tempdir().unwrap();
    if std::env::var_os(KEEP_ENV).is_some() {
        eprintln!("{TEST}: keeping the work directory {}", work.path().display());
    }
    let work = if std::env::var_os(KEEP_ENV).is_some() { KeptDir::Kept(work.keep()) } else { KeptDir::Temp(work) };
    let run = Run::new(work.path(), disk.path(), &source, cuts);
    let observer = Observer::start(&run.base, &SETS, run.budget).await;
    let mut tributary = Tributary::spawn(work.path(), 1);
    tributary.ready(&run).await.unwrap_or_else(|e| panic!("Tributary did not start on the empty disk: {e}"));
    observer.subscribe().await.unwrap_or_else(|e| panic!("{e}"));
    run.wait_for_baseline(&tributary).await;

    let mut cutter = Cutter { tributary, disk, rng: Rng::new(seed), tear, work: work.path().to_owned() };
    let mut findings = cutter.cut_again_and_again(&run, &observer, cuts).await;
    if findings.iter().all(|f| f.broken.is_none()) {
        drop(ticker);
        findings.push(run.at_the_end(&observer, cuts + 1).await);
    }
    report(seed, &findings, &cutter.disk, &observer);
}

/// The work directory: removed at the end, or kept (see [`keep_what_the_cut_left`]).
enum KeptDir {
    Temp(tempfile::TempDir),
    Kept(PathBuf),
}

impl KeptDir {
    fn path(&self) -> &Path {
        match self {
            KeptDir::Temp(t) => t.path(),
            KeptDir::Kept(p) => p,
        }
    }
}

/// What changes from cut to cut: the disk, the running Tributary, the seeded choices.
struct Cutter {
    /// Before `disk`: fields drop in order, and the disk unmounts cleanly only once nothing
    /// uses it.
    tributary: Tributary,
    disk: PowerCutFs,
    rng: Rng,
    tear: Tear,
    work: PathBuf,
}

impl Cutter {
    /// `cuts` cuts, or fewer if Tributary no longer starts; the findings of each.
    async fn cut_again_and_again(&mut self, run: &Run<'_>, observer: &Observer, cuts: usize) -> Vec<CutFindings> {
        let mut findings = Vec::new();
        let mut early = false;
        for cut in 1..=cuts {
            let (f, next_early) = self.cut(run, observer, cut, early, cut == cuts).await;
            early = next_early;
            let broken = f.broken.is_some();
            findings.push(f);
            if broken {
                break;
            }
        }
        findings
    }

    /// Waits for a random moment (from the start when the last start is to be killed
    /// `early`, before it answers), kills Tributary, cuts the power, verifies the store,
    /// starts Tributary again and, unless this start too is to be killed early (one in five,
    /// never the `last`), checks what it serves. Returns the findings and that choice.
    async fn cut(
        &mut self,
        run: &Run<'_>,
        observer: &Observer,
        cut: usize,
        early: bool,
        last: bool,
    ) -> (CutFindings, bool) {
        let moment = if early { self.rng.below(1_500) } else { self.rng.between(200, 3_000) };
        tokio::time::sleep(Duration::from_millis(moment)).await;
        let at_write = self.rng.below(2) == 0 && self.power_off_at_next_write().await;
        self.tributary.kill();
        let mut f = CutFindings { cut, fs: self.disk.cut_with(&mut self.rng, self.tear), ..CutFindings::default() };
        keep_what_the_cut_left(&self.disk, &self.work, cut);
        f.verify = verify(&self.work).await;
        lock(&observer.memory).run = cut + 1;
        self.tributary = Tributary::spawn(&self.work, cut + 1);
        let kill_early = !last && self.rng.below(5) == 0;
        if !kill_early {
            run.after_restart(&mut self.tributary, observer, &mut f).await;
        }
        let how = if kill_early { ", restart to be killed before it answers" } else { "" };
        let at = if at_write { " and at the next write" } else { "" };
        eprintln!("{}{how} ({moment} ms in{at}; {})", f.summary(), f.fs);
        (f, kill_early)
    }

    /// One cut in two comes right after a write, before it can be synced (see
    /// [`PowerCutFs::power_off_at_next_write`]): at random moments alone, a store that syncs
    /// promptly is seldom caught with anything unsynced. False if no write came within
    /// [`WRITE_WAIT`]; the cut is then at that moment.
    async fn power_off_at_next_write(&self) -> bool {
        let off = self.disk.power_off_at_next_write();
        tokio::task::spawn_blocking(move || off.recv_timeout(WRITE_WAIT).is_ok()).await.unwrap_or(false)
    }
}

/// How long a cut waits for the next write.
const WRITE_WAIT: Duration = Duration::from_secs(3);

/// With `$TRIBUTARY_POWERCUT_KEEP` set, a copy of the store as each cut left it, before
/// anything opens it again, in `cut-N/` of the work directory (the last three are kept), and
/// the work directory, with every run's log, is kept: to look into a finding.
fn keep_what_the_cut_left(disk: &PowerCutFs, work: &Path, cut: usize) {
    if std::env::var_os(KEEP_ENV).is_none() {
        return;
    }
    let status =
        Command::new("cp").arg("-a").arg(disk.path().join("store")).arg(work.join(format!("cut-{cut}"))).status();
    assert!(status.is_ok_and(|s| s.success()), "copying the store after cut {cut}");
    if cut > 3 {
        let _ = std::fs::remove_dir_all(work.join(format!("cut-{}", cut - 3)));
    }
}

/// See [`keep_what_the_cut_left`].
const KEEP_ENV: &str = "TRIBUTARY_POWERCUT_KEEP";

/// Strict POSIX, unless `$TRIBUTARY_POWERCUT_METADATA` is `journaled`: then any sync makes
/// every directory entry durable, as ext4 and XFS do in practice (see `Metadata`), to tell
/// what a missing directory sync loses from what a missing file sync does.
fn metadata() -> Metadata {
    match std::env::var(METADATA_ENV).as_deref() {
        Err(_) | Ok("" | "strict") => Metadata::Strict,
        Ok("journaled") => Metadata::Journaled,
        Ok(other) => panic!("{METADATA_ENV}={other:?}: expected strict or journaled"),
    }
}

/// Which dirty files keep a torn prefix of their last unsynced write at a cut: one in three,
/// unless `$TRIBUTARY_POWERCUT_TEAR` says `never`, `always` or another number.
fn tear() -> Tear {
    match std::env::var(TEAR_ENV).as_deref() {
        Err(_) | Ok("") => Tear::OneIn(3),
        Ok("never") => Tear::Never,
        Ok("always") => Tear::Always,
        Ok(n) => Tear::OneIn(n.parse().unwrap_or_else(|_| panic!("{TEAR_ENV}={n:?}: expected never, always or N"))),
    }
}

/// The seed: `$TRIBUTARY_POWERCUT_SEED`, else a new one.
fn seed() -> u64 {
    env_number(SEED_ENV).unwrap_or_else(|| Rng::seeded().next())
}

fn env_number(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(v.trim().parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a number")))
}

/// The Source: 60 resources of 100 B–40 KB (so both the store's packs and its files are
/// used), four changes a second on the real clock, pushing through its own hub.
fn source_config(c: &mut tributary::simulate::SimConfig, seed: u64) {
    c.resources = RESOURCES;
    c.min_size = 100;
    c.max_size = 40_000;
    c.change_rate_per_sec = 4.0;
    c.seed = seed;
    c.push = true;
    c.clock = ClockMode::Real;
}

/// What every step of the run needs: Tributary's address and configuration, the Source.
struct Run<'a> {
    base: String,
    client: reqwest::Client,
    source: &'a RunningSim,
    /// How long the observer may run: the whole test, generously.
    budget: Duration,
}

impl<'a> Run<'a> {
    /// Writes Tributary's configuration into `work`, its store on `disk`, whose directory is
    /// made first and durably, as a service manager makes a state directory.
    fn new(work: &Path, disk: &Path, source: &'a RunningSim, cuts: usize) -> Run<'a> {
        let port = free_port();
        let store = disk.join("store");
        std::fs::create_dir(&store).unwrap();
        File::open(disk).unwrap().sync_all().unwrap();
        let config = config(port, &source.sim.url("/.well-known/resourcesync"), &store);
        std::fs::write(work.join("sources.toml"), config).unwrap();
        Run {
            base: format!("http://127.0.0.1:{port}/"),
            client: reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap(),
            source,
            budget: Duration::from_secs(1_800 + 60 * cuts as u64),
        }
    }

    fn reader(&self) -> Reader<'_> {
        Reader { client: &self.client, base: &self.base }
    }

    /// Waits until the first harvest holds most of the Source and Tributary follows it by
    /// push, so the cuts land on a store that has something to lose.
    async fn wait_for_baseline(&self, tributary: &Tributary) {
        let deadline = Instant::now() + BASELINE_LIMIT;
        while Instant::now() < deadline {
            let status = self.reader().get(&format!("{}api/status", self.base)).await.ok();
            let row = status
                .and_then(|(_, body)| serde_json::from_slice::<serde_json::Value>(&body).ok())
                .and_then(|s| s["sources"].as_array().and_then(|a| a.iter().find(|r| r["id"] == "sim").cloned()));
            if let Some(row) = row
                && row["resources"].as_u64() >= Some(RESOURCES as u64 * 3 / 4)
                && row["push"]["mode"] == "subscribed"
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("no baseline harvest followed by push within {BASELINE_LIMIT:?}; log:\n{}", tributary.log_tail());
    }

    /// After a restart: waits until Tributary answers, subscribes again, reads everything it
    /// serves and compares it with what the observer saw.
    async fn after_restart(&self, tributary: &mut Tributary, observer: &Observer, f: &mut CutFindings) {
        if let Err(e) = tributary.ready(self).await {
            f.broken = Some(format!("Tributary did not start again: {e}"));
            return;
        }
        if let Err(e) = observer.subscribe().await {
            eprintln!("{TEST}: cut {}: {e}", f.cut);
        }
        self.check_served(observer, f).await;
    }

    async fn check_served(&self, observer: &Observer, f: &mut CutFindings) {
        observer.absorb_notifications();
        let reader = self.reader();
        let mut served = BTreeMap::new();
        for set in SETS {
            match with_retries(5, || reader.set(set)).await {
                Ok(s) => served.insert(set.to_owned(), s),
                Err(e) => return f.broken = Some(format!("reading set {set}: {e}")),
            };
        }
        match with_retries(3, || reader.missing_bytes("sim")).await {
            Ok(problems) => f.missing_bytes = problems,
            Err(e) => return f.broken = Some(format!("reading bitstreams: {e}")),
        }
        compare(&mut lock(&observer.memory), &served, f);
    }

    /// The Source has stopped changing: waits (bounded) until Tributary's Resource List is
    /// the Source's, then checks once more what everyone saw, the last run's sightings too.
    async fn at_the_end(&self, observer: &Observer, label: usize) -> CutFindings {
        let mut f = CutFindings { cut: label, ..CutFindings::default() };
        f.diverged = self.converge().await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        lock(&observer.memory).run += 1;
        self.check_served(observer, &mut f).await;
        eprintln!("the end: {}", f.summary());
        f
    }

    async fn converge(&self) -> Vec<String> {
        let deadline = Instant::now() + CONVERGE_LIMIT;
        loop {
            let diff = self.difference().await;
            if diff.is_empty() || Instant::now() >= deadline {
                return diff;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// How Tributary's set `sim` differs from the Source: one line per resource.
    async fn difference(&self) -> Vec<String> {
        let source: BTreeMap<String, String> =
            self.source.sim.resources().into_iter().map(|r| (r.url, r.sha256)).collect();
        let ours: BTreeMap<String, String> = match self.reader().resources("sim").await {
            Ok(entries) => entries
                .iter()
                .filter_map(|e| Some((via(e)?.to_owned(), declared(e).map(|d| d.0).unwrap_or_default())))
                .collect(),
            Err(e) => return vec![e],
        };
        let urls: BTreeSet<&String> = source.keys().chain(ours.keys()).collect();
        urls.into_iter()
            .filter_map(|url| match (source.get(url), ours.get(url)) {
                (Some(a), Some(b)) if a == b => None,
                (Some(a), Some(b)) => Some(format!("{url}: the Source has sha-256 {a}, Tributary {b}")),
                (Some(a), None) => Some(format!("{url} (sha-256 {a}): at the Source, not in Tributary")),
                (None, _) => Some(format!("{url}: in Tributary, deleted at the Source")),
            })
            .collect()
    }
}

/// Tributary's configuration: the store on the disk, the Source followed by push and polled
/// every 2 s (every 3 s while subscribed), its hub allowed to call back on loopback with quick
/// retries, Change Lists of 50 events so that some close.
fn config(port: u16, source_url: &str, store: &Path) -> String {
    format!(
        "[aggregator]\nbase_url = \"http://127.0.0.1:{port}/\"\nlisten = \"127.0.0.1:{port}\"\ndata_dir = \"{}\"\n\
         user_agent = \"Tributary-test/0.1 (+mailto:test@example.org)\"\n\n\
         [publish]\nchange_list_events = 50\n\n\
         [hub]\nallow_private = true\nlease_min = \"1s\"\nrequest_timeout = \"2s\"\ndelivery_attempts = 3\n\
         retry_backoff = \"100ms\"\nmax_retry_backoff = \"500ms\"\n\n\
         [[source]]\nid = \"sim\"\nurl = \"{source_url}\"\nallow_private = true\nrate = \"unlimited\"\n\
         poll = \"2s\"\npush_poll = \"3s\"\n\n\
         [[set]]\nid = \"all\"\nsources = [\"sim\"]\n",
        store.display()
    )
}

/// The memtable size the store is created with (see [`Tributary::spawn`]).
const MEMTABLE_KB: u64 = 8;

/// One run of `tributary run`, its stderr in `run-N.log` in the work directory.
struct Tributary {
    child: Child,
    log: PathBuf,
}

impl Tributary {
    fn spawn(work: &Path, run: usize) -> Tributary {
        let log = work.join(format!("run-{run}.log"));
        let mut cmd = cli::tributary(&["--config", "sources.toml", "run"]);
        // Tiny memtables: the database writes and compacts its tables every few seconds, so
        // cuts also land during flushes and compactions, not only between commits.
        cmd.env("TRIBUTARY_TEST_MEMTABLE_KB", MEMTABLE_KB.to_string());
        cmd.current_dir(work).stdout(Stdio::null()).stderr(File::create(&log).unwrap());
        Tributary { child: cmd.spawn().unwrap(), log }
    }

    /// Waits (bounded) until it answers HTTP.
    async fn ready(&mut self, run: &Run<'_>) -> Result<(), String> {
        let url = format!("{}api/status", run.base);
        let answered = wait_until_ok(&run.client, &url, &mut self.child, START_LIMIT).await;
        answered.map_err(|e| format!("{e}; log:\n{}", self.log_tail()))
    }

    /// SIGKILL: nothing is flushed, nothing shut down.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn log_tail(&self) -> String {
        let text = printable(&std::fs::read(&self.log).unwrap_or_default());
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Tributary {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A process's output as text for a report: what a torn file put in an error message (NULs,
/// say) shown as `\u{..}` escapes.
fn printable(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.chars()
        .map(|c| if c.is_control() && c != '\n' && c != '\t' { c.escape_unicode().to_string() } else { c.to_string() })
        .collect()
}

/// `tributary verify` on the stopped store: `None` when it exits 0, else what it said.
async fn verify(work: &Path) -> Option<String> {
    let (out, err) = (work.join("verify.out"), work.join("verify.err"));
    let mut cmd = cli::tributary(&["--config", "sources.toml", "verify"]);
    cmd.current_dir(work).stdout(File::create(&out).unwrap()).stderr(File::create(&err).unwrap());
    let mut child = cmd.spawn().unwrap();
    let status = cli::wait_for_exit(&mut child, VERIFY_LIMIT).await;
    let said = || {
        let text = |p: &Path| printable(&std::fs::read(p).unwrap_or_default());
        format!("{}{}", text(&out), text(&err)).trim_end().to_owned()
    };
    match status {
        Some(s) if s.success() => None,
        Some(s) => Some(format!("{s}:\n{}", said())),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            Some(format!("did not finish within {VERIFY_LIMIT:?}:\n{}", said()))
        }
    }
}

/// Prints every cut's counts, writes the complete report to a file, and fails with the
/// problems if there are any.
fn report(seed: u64, findings: &[CutFindings], disk: &PowerCutFs, observer: &Observer) {
    let counters = disk.counters();
    let memory = lock(&observer.memory);
    let bad: Vec<&CutFindings> = findings.iter().filter(|f| !f.is_clean()).collect();
    let dropped: u64 = findings.iter().map(|f| f.fs.bytes_dropped).sum();
    let head = format!(
        "{TEST}: seed {seed}; {} cuts, {} of which dropped something; {} checks turned up problems; the observer \
         saw {} positions and {} notified changes ({} notifications); the file system saw {} fsyncs, {} fdatasyncs, \
         {} directory fsyncs, and its cuts dropped {dropped} unsynced bytes in all; unimplemented operations asked \
         for: {:?}\n",
        counters.cuts,
        findings.iter().filter(|f| f.fs.dropped_anything()).count(),
        bad.len(),
        memory.positions.len(),
        memory.notified.len(),
        observer.deliveries(),
        counters.fsyncs,
        counters.fdatasyncs,
        counters.fsyncdirs,
        counters.unsupported,
    );
    drop(memory);
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("store_powercut-{seed}.txt"));
    let full: String = findings.iter().map(|f| f.details(None)).collect();
    let _ = std::fs::write(&file, format!("{head}\n{full}"));
    eprintln!("{head}complete report: {}", file.display());
    assert!(counters.fsyncs + counters.fdatasyncs > 0, "Tributary never synced a file: nothing was tested");
    // A store that syncs what it writes at once leaves a cut at a random moment little to drop
    // but unlinks not yet synced; the cuts at a write must drop that write.
    assert!(dropped > 0, "no cut dropped unsynced bytes: the cuts never landed between a write and its sync");
    assert!(observer.deliveries() > 0, "the observer never received a notification from Tributary's hub");
    if !bad.is_empty() {
        let shown: String = bad.iter().map(|f| f.shown()).collect();
        panic!("{head}complete report: {}\n\n{shown}", file.display());
    }
}
