//! The aggregator chain with push on, timed: how long a change at the origin Source takes to
//! reach each Tributary of a chain origin → A → B → C (issue #25's goal: C in a median under
//! 1 s on 127.0.0.1). Run by `scripts/bench-chain.sh`.
//!
//! ```text
//! chain_bench <tributary binary> <work dir> <resources> <changes/s> <seconds> <first port>
//! ```
//! Everything is a real process talking HTTP on 127.0.0.1: the origin is `tributary simulate
//! --push` (its own WebSub hub), A, B and C are `tributary run`, each following the one before
//! it by push (discovered from its Capability List; polling every hour, so nothing arrives by
//! a poll during the run). The benchmark subscribes to all four hubs itself and timestamps
//! every signed delivery on arrival. A change's latency at a hop is the arrival of the hop's
//! notification naming it (matched by the origin URI in its `via` link and the origin's
//! sha-256) minus the arrival of the origin's own notification: the time to receive, fetch,
//! verify, commit and notify, per hop, with the origin's hub delay on both sides cancelling.
//! For C it also fetches the bitstream from C and checks its sha-256: "appears in C's
//! republished Change List and bitstream". Prints one Markdown table.

use std::collections::{HashMap, VecDeque};
use std::error::Error;
use std::io::Cursor;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use sha2::{Digest as _, Sha256};
use tributary::model::{Capability, Change, DocumentReader, Entry, HashAlgorithm, ReadOptions};
use tributary::websub;

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// The hops, in chain order; the names are the callback paths and the table's rows.
const HOPS: [&str; 4] = ["origin", "A", "B", "C"];
const SECRET: &str = "chain-bench-secret-0123456789";
/// Bounds every wait for the chain to come up.
const SETUP_LIMIT: Duration = Duration::from_secs(180);

/// One signed delivery, as it arrived.
struct Arrival {
    hop: usize,
    at: Instant,
    body: Bytes,
}

/// A bitstream C served after notifying it: when the GET finished, and whether it was the
/// content the origin notified.
struct Fetched {
    key: Key,
    at: Instant,
    matches: bool,
}

#[derive(Default)]
struct Inbox {
    arrivals: Vec<Arrival>,
    fetched: Vec<Fetched>,
    verified: HashMap<String, bool>,
    refused: usize,
}

#[derive(Clone)]
struct Shared {
    inbox: Arc<Mutex<Inbox>>,
    client: reqwest::Client,
}

/// Kills its processes when dropped, so an early error leaves nothing running.
struct Processes(Vec<Child>);

impl Drop for Processes {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn main() -> Res<()> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() != 6 {
        return Err("usage: chain_bench <tributary> <work dir> <resources> <changes/s> <seconds> <first port>".into());
    }
    let bench = Bench {
        // Absolute: each Tributary runs in a directory of its own.
        bin: std::fs::canonicalize(&a[0])?,
        work: PathBuf::from(&a[1]),
        resources: a[2].parse()?,
        rate: a[3].parse()?,
        seconds: a[4].parse()?,
        port: a[5].parse()?,
    };
    tokio::runtime::Runtime::new()?.block_on(bench.run())
}

struct Bench {
    bin: PathBuf,
    work: PathBuf,
    resources: usize,
    rate: f64,
    seconds: u64,
    port: u16,
}

impl Bench {
    fn base(&self, hop: usize) -> String {
        format!("http://127.0.0.1:{}/", self.port + hop as u16)
    }

    /// The Capability List a hop publishes its followed set in (A's set is its source
    /// `origin`, B's is `a`, C's is `b`).
    fn capability_list(&self, hop: usize) -> String {
        match hop {
            0 => format!("{}capabilitylist.xml", self.base(0)),
            _ => format!("{}sets/{}/capabilitylist.xml", self.base(hop), source_id(hop)),
        }
    }

    async fn run(self) -> Res<()> {
        std::fs::create_dir_all(&self.work)?;
        let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
        let mut procs = Processes(vec![self.start_origin()?]);
        for hop in 1..HOPS.len() {
            procs.0.push(self.start_tributary(hop)?);
        }
        for hop in 1..HOPS.len() {
            self.wait_followed(&client, hop).await?;
        }
        eprintln!("chain up: A, B and C hold {} resources and follow by push", self.resources);

        let shared = Shared { inbox: Arc::default(), client: client.clone() };
        let inbox = shared.inbox.clone();
        let callbacks = self.port + HOPS.len() as u16;
        serve_callbacks(shared, callbacks).await?;
        for (hop, name) in HOPS.iter().enumerate() {
            let (topic, hub) = channel(&client, &self.capability_list(hop)).await?;
            subscribe(&client, &hub, &topic, &format!("http://127.0.0.1:{callbacks}/cb/{hop}")).await?;
            wait_for(&format!("{name} verifies the benchmark"), || {
                let v = inbox.lock().unwrap().verified.get(&hop.to_string()).copied().unwrap_or(false);
                async move { v }
            })
            .await?;
        }

        let start = Instant::now();
        eprintln!("measuring for {} s…", self.seconds);
        tokio::time::sleep(Duration::from_secs(self.seconds)).await;
        let window_end = Instant::now();
        // Changes notified at the end of the window still get time to reach C.
        tokio::time::sleep(Duration::from_secs(5)).await;
        drop(procs);
        let inbox = std::mem::take(&mut *inbox.lock().unwrap());
        let report = measure(&inbox, start, window_end)?;
        self.print(&report, inbox.refused);
        Ok(())
    }

    fn start_origin(&self) -> Res<Child> {
        let log = std::fs::File::create(self.work.join("origin.log"))?;
        let child = Command::new(&self.bin)
            .args(["simulate", "--push", "--listen", &format!("127.0.0.1:{}", self.port)])
            .args(["--resources", &self.resources.to_string(), "--rate", &self.rate.to_string()])
            .args(["--min-size", "1000", "--max-size", "3000"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        Ok(child)
    }

    /// `tributary run` for hop 1–3, following the hop before it.
    fn start_tributary(&self, hop: usize) -> Res<Child> {
        let dir = self.work.join(HOPS[hop]);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        // The Source Description: a hop's resources are under its root, not under the
        // Capability List's directory, so that is the URL that holds them in its authority.
        let upstream = format!("{}.well-known/resourcesync", self.base(hop - 1));
        let base = self.base(hop);
        let config = format!(
            "[aggregator]\nbase_url = \"{base}\"\nlisten = \"{}\"\ndata_dir = \"store\"\n\
             user_agent = \"Tributary-chain-bench/0.1 (+mailto:ops@example.org)\"\n\n\
             [hub]\nallow_private = true\n\n\
             [[source]]\nid = \"{}\"\nurl = \"{upstream}\"\nallow_private = true\nrate = \"unlimited\"\n\
             poll = \"1h\"\npush_poll = \"1h\"\n",
            &base["http://".len()..base.len() - 1],
            source_id(hop),
        );
        let config_path = dir.join("sources.toml");
        std::fs::write(&config_path, config)?;
        let log = std::fs::File::create(dir.join("stderr.log"))?;
        let child = Command::new(&self.bin)
            .arg("--config")
            .arg(&config_path)
            .arg("run")
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        Ok(child)
    }

    /// Waits until hop's source is subscribed and its baseline holds every resource.
    async fn wait_followed(&self, client: &reqwest::Client, hop: usize) -> Res<()> {
        let url = format!("{}api/status", self.base(hop));
        let id = source_id(hop);
        let want = self.resources as u64;
        let what = format!("{} follows its upstream by push with {want} resources", HOPS[hop]);
        wait_for(&what, || async {
            let Ok(r) = client.get(&url).send().await else { return false };
            let Ok(body) = r.bytes().await else { return false };
            let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body) else { return false };
            let rows = v["sources"].as_array().cloned().unwrap_or_default();
            rows.iter().any(|s| {
                s["id"] == id && s["push"]["mode"] == "subscribed" && s["resources"].as_u64() >= Some(want / 2)
            })
        })
        .await
        .map_err(|e| format!("{e}; see {}", self.work.join(HOPS[hop]).join("stderr.log").display()).into())
    }

    fn print(&self, r: &Report, refused: usize) {
        println!(
            "origin: {} resources, {} changes/s, {} s measured; {} changes notified by the origin ({} with a bitstream)\n",
            self.resources, self.rate, self.seconds, r.origin_changes, r.origin_contents
        );
        println!("| hop | changes seen | not seen | median | p95 | max |");
        println!("| --- | --- | --- | --- | --- | --- |");
        let hops = HOPS[1..].iter().map(|&h| (h, r.origin_changes)).zip(&r.hops);
        let rows = hops.chain([(("C, new bitstream served", r.origin_contents), &r.c_fetched)]);
        for ((name, expected), lat) in rows {
            let (seen, missing) = (lat.len(), expected.saturating_sub(lat.len()));
            println!(
                "| {name} | {seen} | {missing} | {} | {} | {} |",
                ms(q(lat, 0.5)),
                ms(q(lat, 0.95)),
                ms(q(lat, 1.0))
            );
        }
        println!("\nbitstreams fetched from C that did not match the origin's sha-256: {}", r.c_mismatch);
        println!("deliveries refused by the benchmark (bad signature): {refused}");
    }
}

fn source_id(hop: usize) -> &'static str {
    ["", "origin", "a", "b"][hop]
}

/// What a change is known by along the chain: the origin URI, the kind of change, and the
/// origin's sha-256 of the new content (none for a delete).
type Key = (String, Change, Option<String>);

struct Report {
    origin_changes: usize,
    /// Of those, the creates and updates: the changes with a bitstream to fetch.
    origin_contents: usize,
    /// Per hop A, B, C: latency of each origin change seen there.
    hops: Vec<Vec<Duration>>,
    c_fetched: Vec<Duration>,
    c_mismatch: usize,
}

fn measure(inbox: &Inbox, start: Instant, window_end: Instant) -> Res<Report> {
    // The origin's changes inside the window, each with its arrival.
    let mut origin: HashMap<Key, VecDeque<Instant>> = HashMap::new();
    let (mut origin_changes, mut origin_contents) = (0, 0);
    for a in inbox.arrivals.iter().filter(|a| a.hop == 0 && a.at >= start && a.at <= window_end) {
        for e in entries(&a.body)? {
            if let Some(k) = key(&e, false) {
                origin_contents += usize::from(k.2.is_some());
                origin.entry(k).or_default().push_back(a.at);
                origin_changes += 1;
            }
        }
    }
    let mut hops = vec![Vec::new(); 3];
    for (hop, lat) in (1..HOPS.len()).zip(&mut hops) {
        let mut pending = origin.clone();
        for a in inbox.arrivals.iter().filter(|a| a.hop == hop) {
            for e in entries(&a.body)? {
                let Some(k) = key(&e, true) else { continue };
                if let Some(t0) = pending.get_mut(&k).and_then(VecDeque::pop_front) {
                    lat.push(a.at - t0);
                }
            }
        }
    }
    let mut pending = origin;
    let (mut c_fetched, mut c_mismatch) = (Vec::new(), 0);
    for f in &inbox.fetched {
        if !f.matches {
            // Changed again before the GET: C serves the later state, as it should.
            c_mismatch += 1;
        } else if let Some(t0) = pending.get_mut(&f.key).and_then(VecDeque::pop_front) {
            c_fetched.push(f.at - t0);
        }
    }
    Ok(Report { origin_changes, origin_contents, hops, c_fetched, c_mismatch })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The key of an entry: at the origin its own `loc` and hash; down the chain its `via`.
fn key(e: &Entry, via: bool) -> Option<Key> {
    let change = e.md.as_ref()?.change?;
    let (uri, hash) = if via {
        let v = e.link("via")?;
        (v.href.clone(), v.hash.clone())
    } else {
        (e.loc.clone(), e.md.as_ref()?.hash.clone())
    };
    let sha = match change {
        Change::Deleted => None,
        _ => Some(hash?.get(&HashAlgorithm::Sha256)?.to_owned()),
    };
    Some((uri, change, sha))
}

fn entries(body: &[u8]) -> Res<Vec<Entry>> {
    let mut r = DocumentReader::new(Cursor::new(body), ReadOptions::named("delivery"))?;
    let mut out = Vec::new();
    while let Some(e) = r.next_entry()? {
        out.push(e);
    }
    Ok(out)
}

/// The change-notification channel a Capability List advertises: (topic, hub).
async fn channel(client: &reqwest::Client, capability_list: &str) -> Res<(String, String)> {
    let body = client.get(capability_list).send().await?.error_for_status()?.bytes().await?;
    for e in entries(&body)? {
        if e.md.as_ref().and_then(|m| m.capability) == Some(Capability::ChangeNotification) {
            let hub = e.link("hub").ok_or("a channel without a hub")?;
            return Ok((e.loc.clone(), hub.href.clone()));
        }
    }
    Err(format!("{capability_list} advertises no change-notification channel").into())
}

async fn subscribe(client: &reqwest::Client, hub: &str, topic: &str, callback: &str) -> Res<()> {
    let form = [
        ("hub.mode", "subscribe"),
        ("hub.topic", topic),
        ("hub.callback", callback),
        ("hub.secret", SECRET),
        ("hub.lease_seconds", "3600"),
    ];
    let body = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(form).finish();
    let r = client.post(hub).header("content-type", "application/x-www-form-urlencoded").body(body).send().await?;
    if !r.status().is_success() {
        return Err(format!("{hub} refused the subscription to {topic}: {}", r.status()).into());
    }
    Ok(())
}

async fn serve_callbacks(shared: Shared, port: u16) -> Res<()> {
    let app = Router::new().route("/cb/{hop}", get(verify).post(deliver)).with_state(shared);
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port))).await?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(())
}

async fn verify(
    State(shared): State<Shared>,
    UrlPath(hop): UrlPath<String>,
    Query(q): Query<HashMap<String, String>>,
) -> (StatusCode, String) {
    match (q.get("hub.mode").map(String::as_str), q.get("hub.challenge")) {
        (Some("subscribe"), Some(challenge)) => {
            shared.inbox.lock().unwrap().verified.insert(hop, true);
            (StatusCode::OK, challenge.clone())
        }
        _ => (StatusCode::NOT_FOUND, String::new()),
    }
}

async fn deliver(
    State(shared): State<Shared>,
    UrlPath(hop): UrlPath<usize>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let at = Instant::now();
    let sig = headers.get("x-hub-signature").and_then(|v| v.to_str().ok());
    if websub::verify(SECRET.as_bytes(), sig, &body).is_err() || hop >= HOPS.len() {
        shared.inbox.lock().unwrap().refused += 1;
        return StatusCode::FORBIDDEN;
    }
    if hop == HOPS.len() - 1 {
        fetch_from_c(&shared, &body);
    }
    shared.inbox.lock().unwrap().arrivals.push(Arrival { hop, at, body });
    StatusCode::NO_CONTENT
}

/// GETs every bitstream C just notified, at once and concurrently, and records when each
/// arrived and whether it is the content the origin announced.
fn fetch_from_c(shared: &Shared, body: &[u8]) {
    for e in entries(body).unwrap_or_default() {
        let Some(k) = key(&e, true) else { continue };
        let Some(sha) = k.2.clone() else { continue };
        let shared = shared.clone();
        tokio::spawn(async move {
            let Ok(r) = shared.client.get(&e.loc).send().await else { return };
            let Ok(bytes) = r.error_for_status().map(|r| r.bytes()) else { return };
            let Ok(bytes) = bytes.await else { return };
            let matches = hex(&Sha256::digest(&bytes)) == sha;
            shared.inbox.lock().unwrap().fetched.push(Fetched { key: k, at: Instant::now(), matches });
        });
    }
}

/// Polls `check` every 200 ms until it holds, for at most [`SETUP_LIMIT`].
async fn wait_for<F, Fut>(what: &str, mut check: F) -> Res<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + SETUP_LIMIT;
    while Instant::now() < deadline {
        if check().await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(format!("timed out after {SETUP_LIMIT:?} waiting until {what}").into())
}

/// The `p` quantile (nearest rank) of `v`.
fn q(v: &[Duration], p: f64) -> Option<Duration> {
    let mut s = v.to_vec();
    s.sort();
    let i = ((p * s.len() as f64).ceil() as usize).clamp(1, s.len().max(1)) - 1;
    s.get(i).copied()
}

fn ms(d: Option<Duration>) -> String {
    d.map_or("–".into(), |d| format!("{:.0} ms", d.as_secs_f64() * 1000.0))
}
