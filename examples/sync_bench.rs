//! The synchronization paper's metrics (seed `000_…`, "Metrics") for Tributary against a
//! changing Source: average consistency, latency (mean, median, 95th percentile, max) and
//! efficiency, for polling at several intervals and for push, at several change rates. Run by
//! `scripts/bench-sync.sh`; the figures and the method are in `docs/BENCHMARKS.md`.
//!
//! One scenario is one run of three parts on 127.0.0.1:
//! - the Source: a [`Simulator`] in this process on the real clock, so every change's instant
//!   and the Source's state at any time are known exactly; its router is wrapped in a layer
//!   that counts the body bytes of every GET it answers;
//! - the Destination: the `tributary` binary (`TRIBUTARY_BIN`) running `run` on a fresh store,
//!   its one source polling the simulator every interval (`push = "off"`), or subscribed to the
//!   simulator's hub (`push = "auto"`, the safety poll at 10 minutes, so never within a run);
//! - an observer: a WebSub subscriber of Tributary's own hub for the source's set. Tributary
//!   notifies only after a flush has made change events visible, so a notification's arrival
//!   is when the Destination holds the change — verified, committed and served (later by the
//!   time one notification takes on loopback: a few milliseconds at most, which this counts
//!   against Tributary).
//!
//! The simulator stands still until the Destination holds the whole baseline and the observer
//! is subscribed; then it changes at the scenario's rate for `DURATION` seconds (the measured
//! interval), and the run waits until every change is visible (or a poll interval plus 20 s
//! has passed). The baseline is excluded, as the paper does for incremental synchronization.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{RawQuery, Request, State};
use axum::http::{Method, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use tributary::model::{Change, HashAlgorithm, ReadOptions, W3cDateTime, read_document};
use tributary::simulate::{ClockMode, SimConfig, Simulator};
use url::Url;

/// Consistency is sampled this often over the measured interval.
const SAMPLE_EVERY_NS: i128 = 50_000_000;
/// Resources of the Source.
const RESOURCES: usize = 1_000;

/// How the Destination follows the Source.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Push,
    Poll(u64),
}

impl Mode {
    fn label(self) -> String {
        match self {
            Mode::Push => "push".into(),
            Mode::Poll(s) => format!("poll {s} s"),
        }
    }

    /// The longest a change may take to be visible: what the run waits for after the interval.
    fn drain(self) -> Duration {
        match self {
            Mode::Push => Duration::from_secs(20),
            Mode::Poll(s) => Duration::from_secs(s + 20),
        }
    }
}

/// One run's results.
#[derive(Debug, Clone)]
struct Outcome {
    rate: f64,
    mode: Mode,
    consistency: f64,
    mean: f64,
    median: f64,
    p95: f64,
    max: f64,
    efficiency: f64,
    changes: usize,
    unseen: usize,
    bytes_transferred: u64,
    /// Of which: documents, bitstreams, notification payloads.
    split: [u64; 3],
    bytes_changed: u64,
}

/// Counts what the Source serves: body bytes of GET answers (by `Content-Length`; HTTP headers
/// are not counted), split into documents and bitstreams.
#[derive(Debug, Default)]
struct Served {
    documents: AtomicU64,
    bitstreams: AtomicU64,
}

async fn count(State(served): State<Arc<Served>>, req: Request, next: Next) -> Response {
    let get = req.method() == Method::GET;
    let bitstream = req.uri().path().starts_with("/res/");
    let resp = next.run(req).await;
    let len = resp.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if let (true, Some(len)) = (get, len) {
        let c = if bitstream { &served.bitstreams } else { &served.documents };
        c.fetch_add(len, Ordering::Relaxed);
    }
    resp
}

/// One time base for the Source's changes and the Destination's arrivals: the simulator's real
/// clock is the wall time it was started at plus a monotonic clock's reading since, so arrivals
/// are read the same way (a step of the wall clock during a run would otherwise show up as
/// latency).
#[derive(Debug, Clone, Copy)]
struct Timebase {
    origin: std::time::Instant,
    /// Unix nanoseconds at `origin`, in whole milliseconds like the simulator's clock.
    start_ns: i128,
}

impl Timebase {
    fn new() -> Timebase {
        let origin = std::time::Instant::now();
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i128);
        Timebase { origin, start_ns: wall - wall % 1_000_000 }
    }

    fn now(&self) -> i128 {
        self.start_ns + self.origin.elapsed().as_nanos() as i128
    }

    fn start(&self) -> Result<W3cDateTime> {
        let secs = self.start_ns.div_euclid(1_000_000_000) as i64;
        let nanos = self.start_ns.rem_euclid(1_000_000_000) as u32;
        Ok(W3cDateTime::from_unix(secs, nanos)?)
    }
}

/// The observer: notifications from Tributary's hub with their arrival instants.
#[derive(Debug)]
struct Observed {
    clock: Timebase,
    verified: Mutex<bool>,
    deliveries: Mutex<Vec<(i128, Bytes)>>,
}

async fn verify(State(o): State<Arc<Observed>>, RawQuery(q): RawQuery) -> String {
    let params: HashMap<String, String> =
        url::form_urlencoded::parse(q.unwrap_or_default().as_bytes()).into_owned().collect();
    *o.verified.lock().unwrap() = true;
    params.get("hub.challenge").cloned().unwrap_or_default()
}

async fn deliver(State(o): State<Arc<Observed>>, body: Bytes) -> &'static str {
    let t = o.clock.now();
    o.deliveries.lock().unwrap().push((t, body));
    ""
}

async fn listen(router: Router) -> Result<u16> {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = l.local_addr()?.port();
    tokio::spawn(async move { axum::serve(l, router).await });
    Ok(port)
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A `tributary run` killed on drop.
struct Destination {
    child: Child,
    base: String,
    dir: tempfile::TempDir,
}

impl Drop for Destination {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_destination(bin: &str, sim_port: u16, mode: Mode) -> Result<Destination> {
    let dir = tempfile::tempdir()?;
    let port = free_port()?;
    let follow = match mode {
        Mode::Push => "poll = \"30s\"\npush = \"auto\"\npush_poll = \"10m\"".to_owned(),
        Mode::Poll(s) => format!("poll = \"{s}s\"\npush = \"off\""),
    };
    let config = format!(
        "[aggregator]\nbase_url = \"http://127.0.0.1:{port}/\"\nlisten = \"127.0.0.1:{port}\"\ndata_dir = \"store\"\n\
         user_agent = \"Tributary-bench/0.1 (+mailto:bench@example.org)\"\n\n[hub]\nallow_private = true\n\n\
         [[source]]\nid = \"sim\"\nurl = \"http://127.0.0.1:{sim_port}/.well-known/resourcesync\"\n\
         allow_private = true\nrate = \"unlimited\"\n{follow}\n"
    );
    std::fs::write(dir.path().join("sources.toml"), config)?;
    let log = std::fs::File::create(dir.path().join("stderr.log"))?;
    let child = Command::new(bin)
        .current_dir(dir.path())
        .arg("run")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {bin}"))?;
    Ok(Destination { child, base: format!("http://127.0.0.1:{port}/"), dir })
}

/// Polls `check` every 100 ms for at most `limit`.
async fn wait_for<F, Fut>(what: &str, limit: Duration, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("timed out waiting until {what}")
}

async fn status(client: &reqwest::Client, base: &str) -> Option<serde_json::Value> {
    let r = client.get(format!("{base}api/status")).send().await.ok()?;
    serde_json::from_slice(&r.bytes().await.ok()?).ok()
}

/// The Destination holds the baseline (and, for push, is subscribed), and the observer is
/// subscribed to its hub.
async fn ready(dest: &Destination, mode: Mode, observer_port: u16, observed: &Observed) -> Result<()> {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;
    wait_for("the baseline is held", Duration::from_secs(120), || async {
        let Some(s) = status(&client, &dest.base).await else { return false };
        let row = &s["sources"][0];
        let push_ok = mode != Mode::Push || row["push"]["mode"] == "subscribed";
        row["resources"] == RESOURCES && row["last_success"].is_string() && push_ok
    })
    .await?;
    let form = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("hub.mode", "subscribe")
        .append_pair("hub.topic", &format!("{}sets/sim/notifications", dest.base))
        .append_pair("hub.callback", &format!("http://127.0.0.1:{observer_port}/cb"))
        .finish();
    let r = client
        .post(format!("{}hub", dest.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await?;
    if r.status().as_u16() != 202 {
        bail!("Tributary's hub answered {}", r.status());
    }
    wait_for("the observer is subscribed", Duration::from_secs(30), || async {
        let Some(s) = status(&client, &dest.base).await else { return false };
        *observed.verified.lock().unwrap() && s["sets"][0]["notifications"]["subscribers"] == 1
    })
    .await
}

/// A resource's state: its sha-256, or `None` when absent.
type St = Option<String>;

/// One change at the Source, or one change made visible at the Destination.
#[derive(Debug, Clone)]
struct Ev {
    t: i128,
    url: String,
    state: St,
}

/// The Destination's events, from the observer's notifications.
fn destination_events(deliveries: &[(i128, Bytes)]) -> Vec<Ev> {
    let mut out = Vec::new();
    for (t, body) in deliveries {
        let Ok((doc, _)) = read_document(body, ReadOptions::named("notification")) else { continue };
        for e in doc.entries {
            let Some(via) = e.links.iter().find(|l| l.rel == "via") else { continue };
            let md = e.md.as_ref();
            let deleted = md.and_then(|m| m.change) == Some(Change::Deleted);
            let sha = md.and_then(|m| m.hash.as_ref()).and_then(|h| h.get(&HashAlgorithm::Sha256)).map(str::to_owned);
            out.push(Ev { t: *t, url: via.href.clone(), state: if deleted { None } else { sha } });
        }
    }
    out
}

/// Latency of each Source change: until the Destination holds that state or a later one of the
/// same resource (a change overtaken by the next is in sync once the next is held; a resource
/// created and deleted between two polls is in sync, absent, as soon as it is deleted). `None`
/// for a change the Destination never caught up with.
fn latencies(initial: &HashMap<String, String>, src: &[Ev], dst: &[Ev]) -> Vec<Option<f64>> {
    let mut dest: HashMap<&str, St> = initial.iter().map(|(u, s)| (u.as_str(), Some(s.clone()))).collect();
    // Per resource: the Source changes so far, and how many of them are resolved.
    let mut changes: HashMap<&str, (Vec<usize>, usize)> = HashMap::new();
    let mut out = vec![None; src.len()];
    let mut merged: Vec<(i128, bool, usize)> =
        (0..src.len()).map(|i| (src[i].t, true, i)).chain((0..dst.len()).map(|i| (dst[i].t, false, i))).collect();
    merged.sort_by_key(|(t, is_src, _)| (*t, !*is_src));
    for (t, is_src, i) in merged {
        let url = if is_src { src[i].url.as_str() } else { dst[i].url.as_str() };
        if is_src {
            changes.entry(url).or_default().0.push(i);
        } else {
            dest.insert(url, dst[i].state.clone());
        }
        let Some((list, done)) = changes.get_mut(url) else { continue };
        let held = dest.get(url).cloned().flatten();
        // The latest change so far whose state the Destination holds resolves it and every
        // earlier one.
        if let Some(pos) = list.iter().rposition(|&j| src[j].state == held) {
            for &j in list.iter().take(pos + 1).skip(*done) {
                out[j] = Some((t - src[j].t) as f64 / 1e9);
            }
            *done = (*done).max(pos + 1);
        }
    }
    out
}

/// Mean over `[t0, t1]`, sampled every 50 ms, of the fraction of the Source's live resources
/// whose copy at the Destination has the same state.
fn average_consistency(initial: &HashMap<String, String>, src: &[Ev], dst: &[Ev], t0: i128, t1: i128) -> f64 {
    let mut source: HashMap<&str, St> = initial.iter().map(|(u, s)| (u.as_str(), Some(s.clone()))).collect();
    let mut dest = source.clone();
    let ok = |source: &HashMap<&str, St>, dest: &HashMap<&str, St>, u: &str| {
        let s = source.get(u).cloned().flatten();
        s.is_some() && dest.get(u).cloned().flatten() == s
    };
    let (mut live, mut in_sync) = (initial.len() as i64, initial.len() as i64);
    let mut merged: Vec<(i128, bool, &Ev)> =
        src.iter().map(|e| (e.t, true, e)).chain(dst.iter().map(|e| (e.t, false, e))).collect();
    merged.sort_by_key(|(t, is_src, _)| (*t, !*is_src));
    let (mut k, mut sum, mut samples) = (0, 0.0, 0u64);
    let mut t = t0;
    while t <= t1 {
        while k < merged.len() && merged[k].0 <= t {
            let (_, is_src, e) = merged[k];
            let was = ok(&source, &dest, &e.url);
            let was_live = source.get(e.url.as_str()).is_some_and(Option::is_some);
            if is_src {
                source.insert(&e.url, e.state.clone());
            } else {
                dest.insert(&e.url, e.state.clone());
            }
            let is_live = source.get(e.url.as_str()).is_some_and(Option::is_some);
            live += i64::from(is_live) - i64::from(was_live);
            in_sync += i64::from(ok(&source, &dest, &e.url)) - i64::from(was);
            k += 1;
        }
        sum += in_sync as f64 / live.max(1) as f64;
        samples += 1;
        t += SAMPLE_EVERY_NS;
    }
    sum / samples.max(1) as f64
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[idx]
}

async fn run_one(bin: &str, rate: f64, mode: Mode, duration: Duration, sizes: (u64, u64)) -> Result<Outcome> {
    let sim_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let sim_port = sim_listener.local_addr()?.port();
    let clock = Timebase::new();
    let config = SimConfig {
        resources: RESOURCES,
        min_size: sizes.0,
        max_size: sizes.1,
        change_rate_per_sec: rate,
        clock: ClockMode::Real,
        start: Some(clock.start()?),
        push: mode == Mode::Push,
        seed: 42,
        ..SimConfig::new(Url::parse(&format!("http://127.0.0.1:{sim_port}/"))?)
    };
    let sim = Simulator::new(config)?;
    let served = Arc::new(Served::default());
    let router = tributary::simulate::router(sim.clone()).layer(middleware::from_fn_with_state(served.clone(), count));
    tokio::spawn(async move { axum::serve(sim_listener, router).await });

    let observed = Arc::new(Observed { clock, verified: Mutex::new(false), deliveries: Mutex::new(Vec::new()) });
    let observer = Router::new().route("/cb", get(verify).post(deliver)).with_state(observed.clone());
    let observer_port = listen(observer).await?;

    let dest = start_destination(bin, sim_port, mode)?;
    ready(&dest, mode, observer_port, &observed).await?;
    let initial: HashMap<String, String> = sim.resources().into_iter().map(|r| (r.url, r.sha256)).collect();
    observed.deliveries.lock().unwrap().clear();
    let docs_at_start = served.documents.load(Ordering::Relaxed);
    let bitstreams_at_start = served.bitstreams.load(Ordering::Relaxed);

    let t0 = clock.now();
    let ticker = sim.start_ticking();
    tokio::time::sleep(duration).await;
    drop(ticker);
    let t1 = clock.now();

    let src: Vec<Ev> =
        sim.history().into_iter().map(|c| Ev { t: c.datetime.unix_nanos(), url: c.url, state: c.sha256 }).collect();
    let all_seen = |o: &Observed| {
        let dst = destination_events(&o.deliveries.lock().unwrap());
        latencies(&initial, &src, &dst).iter().all(Option::is_some)
    };
    let _ = wait_for("every change is visible", mode.drain(), || async { all_seen(&observed) }).await;
    let split = [
        served.documents.load(Ordering::Relaxed) - docs_at_start,
        served.bitstreams.load(Ordering::Relaxed) - bitstreams_at_start,
        sim.subscribers().iter().map(|s| s.counts.delivered_bytes).sum::<u64>(),
    ];
    let transferred = split.iter().sum::<u64>();
    // LOGS=DIR keeps each Destination's log (RUST_LOG=warn), for when a figure needs a reason.
    if let Ok(logs) = std::env::var("LOGS") {
        std::fs::create_dir_all(&logs)?;
        let name = format!("{logs}/{rate}-{}-{t0}.log", mode.label().replace(' ', "-"));
        std::fs::copy(dest.dir.path().join("stderr.log"), name)?;
    }
    drop(dest);

    let dst = destination_events(&observed.deliveries.lock().unwrap());
    let lat = latencies(&initial, &src, &dst);
    let mut seen: Vec<f64> = lat.iter().flatten().copied().collect();
    seen.sort_by(f64::total_cmp);
    let changed: u64 = sim.history().iter().filter_map(|c| c.length).sum();
    Ok(Outcome {
        rate,
        mode,
        consistency: average_consistency(&initial, &src, &dst, t0, t1),
        mean: seen.iter().sum::<f64>() / seen.len().max(1) as f64,
        median: percentile(&seen, 0.5),
        p95: percentile(&seen, 0.95),
        max: seen.last().copied().unwrap_or(f64::NAN),
        efficiency: transferred as f64 / changed.max(1) as f64,
        changes: src.len(),
        unseen: lat.iter().filter(|l| l.is_none()).count(),
        bytes_transferred: transferred,
        split,
        bytes_changed: changed,
    })
}

/// Runs read back from `sync-bench-runs.md` files (`FROM=a.md,b.md`): rows of [`table`].
fn read_runs(paths: &str) -> Result<Vec<Outcome>> {
    let mut out = Vec::new();
    for path in paths.split(',') {
        let text = std::fs::read_to_string(path).with_context(|| format!("FROM {path}"))?;
        for line in text.lines().skip(2) {
            let c: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            out.push(parse_row(&c).with_context(|| format!("{path}: {line}"))?);
        }
    }
    Ok(out)
}

fn parse_row(c: &[&str]) -> Result<Outcome> {
    if c.len() != 15 {
        bail!("expected 15 columns");
    }
    let mode = match c[1] {
        "push" => Mode::Push,
        m => Mode::Poll(m.trim_start_matches("poll ").trim_end_matches(" s").parse()?),
    };
    let f = |i: usize| -> Result<f64> { Ok(c[i].parse::<f64>()?) };
    let (total, split) = c[13].split_once(" = ").context("bytes")?;
    let parts: Vec<u64> = split.split(" + ").map(str::parse).collect::<Result<_, _>>()?;
    Ok(Outcome {
        rate: f(0)?,
        mode,
        consistency: f(3)?,
        mean: f(5)?,
        median: f(7)?,
        p95: f(8)?,
        max: f(9)?,
        efficiency: f(10)?,
        changes: c[11].parse()?,
        unseen: c[12].parse()?,
        bytes_transferred: total.parse()?,
        split: [parts[0], parts[1], parts[2]],
        bytes_changed: c[14].parse()?,
    })
}

fn env_list<T: std::str::FromStr>(name: &str, default: &str) -> Result<Vec<T>> {
    let text = std::env::var(name).unwrap_or_else(|_| default.to_owned());
    text.split(',').map(|p| p.trim().parse::<T>().map_err(|_| anyhow::anyhow!("{name}: bad value {p:?}"))).collect()
}

/// The median of each scenario's runs (by each metric on its own).
fn medians(runs: &[Outcome]) -> Vec<Outcome> {
    let mut keys: Vec<(f64, Mode)> = Vec::new();
    for r in runs {
        if !keys.contains(&(r.rate, r.mode)) {
            keys.push((r.rate, r.mode));
        }
    }
    keys.into_iter()
        .map(|(rate, mode)| {
            let same: Vec<&Outcome> = runs.iter().filter(|r| r.rate == rate && r.mode == mode).collect();
            let med = |f: &dyn Fn(&Outcome) -> f64| {
                let mut v: Vec<f64> = same.iter().map(|r| f(r)).collect();
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            Outcome {
                rate,
                mode,
                consistency: med(&|r| r.consistency),
                mean: med(&|r| r.mean),
                median: med(&|r| r.median),
                p95: med(&|r| r.p95),
                max: med(&|r| r.max),
                efficiency: med(&|r| r.efficiency),
                changes: med(&|r| r.changes as f64) as usize,
                unseen: med(&|r| r.unseen as f64) as usize,
                bytes_transferred: med(&|r| r.bytes_transferred as f64) as u64,
                split: [0, 1, 2].map(|i| med(&|r| r.split[i] as f64) as u64),
                bytes_changed: med(&|r| r.bytes_changed as f64) as u64,
            }
        })
        .collect()
}

fn table(rows: &[Outcome], runs: &[Outcome]) -> String {
    let mut s = String::from(
        "| rate (changes/s) | follows by | runs | avg consistency | model | latency mean (s) | model | median | p95 | max | efficiency | changes | unseen | bytes transferred: documents + bitstreams + notifications | bytes changed |\n\
         | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |\n",
    );
    for r in rows {
        let n = runs.iter().filter(|x| x.rate == r.rate && x.mode == r.mode).count();
        // The paper's model for polling: a change waits half an interval on average (plus the
        // time to apply it, not modelled here). A resource changes at μ = rate / N a second and
        // was last synchronized a uniformly random 0..I ago, so it is in sync with probability
        // E[e^(-μa)] = (1 - e^(-μI)) / μI.
        let (model_c, model_l) = match r.mode {
            Mode::Poll(i) => {
                let x = r.rate / RESOURCES as f64 * i as f64;
                (format!("{:.4}", (1.0 - (-x).exp()) / x), format!("{:.2}", i as f64 / 2.0))
            }
            Mode::Push => ("—".into(), "—".into()),
        };
        s.push_str(&format!(
            "| {} | {} | {n} | {:.4} | {model_c} | {:.3} | {model_l} | {:.3} | {:.3} | {:.3} | {:.2} | {} | {} | {} = {} + {} + {} | {} |\n",
            r.rate,
            r.mode.label(),
            r.consistency,
            r.mean,
            r.median,
            r.p95,
            r.max,
            r.efficiency,
            r.changes,
            r.unseen,
            r.bytes_transferred,
            r.split[0],
            r.split[1],
            r.split[2],
            r.bytes_changed
        ));
    }
    s
}

/// Median latency (log scale) and average consistency by how the Destination follows, one
/// line per change rate; push is the first position on the x axis.
fn plot(rows: &[Outcome], path: &str) -> Result<()> {
    use plotters::prelude::*;
    let mut modes: Vec<Mode> = Vec::new();
    for r in rows {
        if !modes.contains(&r.mode) {
            modes.push(r.mode);
        }
    }
    modes.sort_by_key(|m| match m {
        Mode::Push => 0,
        Mode::Poll(s) => *s + 1,
    });
    let mut rates: Vec<f64> = rows.iter().map(|r| r.rate).collect();
    rates.sort_by(f64::total_cmp);
    rates.dedup();
    let x_of = |m: Mode| modes.iter().position(|x| *x == m).unwrap_or(0) as i32;
    let labels: Vec<String> = modes.iter().map(|m| m.label()).collect();
    let root = SVGBackend::new(path, (960, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(480);
    let colors = [RGBColor(31, 119, 180), RGBColor(255, 127, 14), RGBColor(44, 160, 44), RGBColor(214, 39, 40)];
    let n = modes.len() as i32;
    let fmt_x = |x: &i32| labels.get(*x as usize).cloned().unwrap_or_default();
    // One series: a metric of one rate's rows, along the modes.
    let points = |rate: f64, metric: &dyn Fn(&Outcome) -> f64| -> Vec<(i32, f64)> {
        modes
            .iter()
            .filter_map(|m| rows.iter().find(|r| r.rate == rate && r.mode == *m))
            .map(|r| (x_of(r.mode), metric(r)))
            .collect()
    };

    let (lo, hi) = rows.iter().fold((f64::MAX, 0.0f64), |(lo, hi), r| (lo.min(r.median), hi.max(r.median)));
    let mut chart = ChartBuilder::on(&left)
        .caption("median latency (s, log scale)", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(-1..n, (lo.max(1e-3) / 2.0..hi * 2.0).log_scale())?;
    chart.configure_mesh().x_labels(n as usize + 2).x_label_formatter(&fmt_x).draw()?;
    for (i, rate) in rates.iter().enumerate() {
        let c = colors[i % colors.len()];
        let pts = points(*rate, &|r| r.median);
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
            .label(format!("{rate} changes/s"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 4, c.filled())))?;
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;

    let lo_c = rows.iter().map(|r| r.consistency).fold(1.0f64, f64::min);
    let mut chart = ChartBuilder::on(&right)
        .caption("average consistency", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(-1..n, (lo_c - 0.01).max(0.0)..1.0005)?;
    chart.configure_mesh().x_labels(n as usize + 2).x_label_formatter(&fmt_x).draw()?;
    for (i, rate) in rates.iter().enumerate() {
        let c = colors[i % colors.len()];
        let pts = points(*rate, &|r| r.consistency);
        chart.draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?;
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 4, c.filled())))?;
    }
    root.present()?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let bin = std::env::var("TRIBUTARY_BIN").unwrap_or_else(|_| "target/release/tributary".into());
    // The Destination runs in its own directory.
    let bin = std::fs::canonicalize(&bin).with_context(|| format!("TRIBUTARY_BIN {bin}"))?.display().to_string();
    let quick = std::env::var("QUICK").is_ok_and(|v| v == "1");
    let (rates_d, modes_d, dur_d) = if quick { ("10", "push,5", "20") } else { ("1,10,50", "push,1,5,10,30", "60") };
    let rates: Vec<f64> = env_list("RATES", rates_d)?;
    let modes: Vec<Mode> = env_list::<String>("MODES", modes_d)?
        .into_iter()
        .map(|m| if m == "push" { Ok(Mode::Push) } else { m.parse().map(Mode::Poll).context("MODES") })
        .collect::<Result<_>>()?;
    let duration = Duration::from_secs(env_list::<u64>("DURATION", dur_d)?[0]);
    // REPEAT_RATES: rates whose row runs REPEAT times (default 1; the docs' figures: 10
    // changes/s, 3 times).
    let repeat: usize = env_list::<usize>("REPEAT", "1")?[0];
    let repeat_rates: Vec<f64> = env_list("REPEAT_RATES", "10")?;
    // SIZES: bitstream sizes in bytes, MIN-MAX (the simulator's default; the paper's were at
    // most 1 KB).
    let sizes = std::env::var("SIZES").unwrap_or_else(|_| "100-2000".into());
    let sizes = sizes
        .split_once('-')
        .and_then(|(a, b)| Some((a.trim().parse::<u64>().ok()?, b.trim().parse::<u64>().ok()?)))
        .context("SIZES: expected MIN-MAX in bytes")?;
    let out_dir = std::env::var("OUT").unwrap_or_else(|_| "target/bench-sync".into());
    std::fs::create_dir_all(&out_dir)?;

    let mut runs = match std::env::var("FROM") {
        Ok(paths) => read_runs(&paths)?,
        Err(_) => Vec::new(),
    };
    let rates = if runs.is_empty() { rates } else { Vec::new() };
    for &rate in &rates {
        let times = if repeat_rates.contains(&rate) { repeat } else { 1 };
        for round in 0..times {
            for &mode in &modes {
                let r =
                    run_one(&bin, rate, mode, duration, sizes).await.with_context(|| format!("{rate}/s {mode:?}"))?;
                eprintln!(
                    "{rate:>5}/s {:<10} run {}: consistency {:.4}  latency median {:.3} s p95 {:.3} s  efficiency {:.2}  ({} changes, {} unseen)",
                    mode.label(),
                    round + 1,
                    r.consistency,
                    r.median,
                    r.p95,
                    r.efficiency,
                    r.changes,
                    r.unseen
                );
                runs.push(r);
            }
        }
    }
    let rows = medians(&runs);
    let text = table(&rows, &runs);
    println!("{text}");
    std::fs::write(format!("{out_dir}/sync-bench.md"), &text)?;
    let runs_text = table(&runs, &runs);
    std::fs::write(format!("{out_dir}/sync-bench-runs.md"), runs_text)?;
    plot(&rows, &format!("{out_dir}/sync-bench.svg"))?;
    eprintln!("wrote {out_dir}/sync-bench.md, sync-bench-runs.md and sync-bench.svg");
    Ok(())
}
