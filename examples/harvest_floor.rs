//! The two halves of a baseline harvest, each alone, to measure what the harvest cannot go
//! below: `scripts/bench-harvest.sh` runs it when `FLOOR=1`.
//!
//! - `harvest_floor fetch URL [CONCURRENCY]` reads the Resource List at `URL` and GETs every
//!   `<loc>` with the harvester's reqwest settings and concurrency, reading each body and
//!   dropping it: no robots.txt, rate limiter, hashing, store or bookkeeping.
//! - `harvest_floor store SITE_DIR DATA_DIR` reads `SITE_DIR/resourcelist.xml`, loads every
//!   listed file from `SITE_DIR` into memory, then does what the harvester's store side does:
//!   put each body verified against the declared length and hashes, and apply one record per
//!   resource in batches of 300 on a second thread, each durable as the harvester's are.
//!
//! Each prints the CPU-seconds (user + system, all threads) of its timed part. The sum of the
//! two and the web server's share is the least CPU a harvest of those files can cost with
//! these components; divided by the cores, the least wall time.

use std::time::Instant;

/// The allocator `tributary` itself uses (see src/main.rs), so the floor is measured under the
/// same allocation costs as the harvest.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use tributary::model::{DocumentReader, ReadOptions};
use tributary::store::{Batch, Expected, Listing, NewRecord, Store, Via};

/// What the resource list says about one resource.
struct Item {
    loc: String,
    expected: Expected,
    lastmod: Option<tributary::model::W3cDateTime>,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("fetch") if args.len() >= 2 => {
            let concurrency = args.get(2).map_or(64, |c| c.parse().expect("concurrency is a number"));
            fetch(&args[1], concurrency);
        }
        Some("store") if args.len() == 3 => store(&args[1], &args[2]),
        _ => {
            eprintln!("usage: harvest_floor fetch URL [CONCURRENCY] | harvest_floor store SITE_DIR DATA_DIR");
            std::process::exit(2);
        }
    }
}

fn items(list: &[u8]) -> Vec<Item> {
    let mut reader = DocumentReader::new(list, ReadOptions::default()).expect("a resource list");
    let mut out = Vec::new();
    while let Some(e) = reader.next_entry().expect("entry") {
        let md = e.md.unwrap_or_default();
        let expected = Expected {
            length: md.length,
            hashes: md.hash.unwrap_or_default(),
            md5: true,
            sha1: false,
            media_type: None,
        };
        out.push(Item { loc: e.loc, expected, lastmod: e.lastmod });
    }
    out
}

fn fetch(list_url: &str, concurrency: usize) {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let client = reqwest::Client::builder()
            .user_agent("TributaryFloor/0.1 (+mailto:ops@example.org)")
            .redirect(reqwest::redirect::Policy::none())
            .no_gzip()
            .tcp_nodelay(true)
            .build()
            .expect("client");
        let list = client.get(list_url).send().await.expect("list").bytes().await.expect("list body");
        let locs: Vec<String> = items(&list).into_iter().map(|i| i.loc).collect();
        let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(concurrency));
        let (cpu0, t0) = (cpu_seconds(), Instant::now());
        let mut tasks = tokio::task::JoinSet::new();
        for loc in locs {
            let permit = sem.clone().acquire_owned().await.expect("semaphore");
            let client = client.clone();
            tasks.spawn(async move {
                let r = client.get(&loc).send().await.expect("response");
                assert!(r.status().is_success(), "{loc}: {}", r.status());
                let n = r.bytes().await.expect("body").len();
                drop(permit);
                n
            });
        }
        let (mut count, mut bytes) = (0usize, 0usize);
        while let Some(n) = tasks.join_next().await {
            bytes += n.expect("task");
            count += 1;
        }
        report("fetch", count, bytes, cpu_seconds() - cpu0, t0.elapsed().as_secs_f64());
    });
}

fn store(site: &str, data_dir: &str) {
    let site = std::path::Path::new(site);
    let list = std::fs::read(site.join("resourcelist.xml")).expect("SITE_DIR/resourcelist.xml");
    let items = items(&list);
    let bodies: Vec<Vec<u8>> = items
        .iter()
        .map(|i| {
            let path = url::Url::parse(&i.loc).expect("loc is a URL").path().trim_start_matches('/').to_owned();
            std::fs::read(site.join(&path)).unwrap_or_else(|e| panic!("{path}: {e}"))
        })
        .collect();
    let store = Store::open(std::path::Path::new(data_dir)).expect("store");
    let (cpu0, t0) = (cpu_seconds(), Instant::now());
    let (tx, rx) = std::sync::mpsc::sync_channel::<Batch>(2);
    std::thread::scope(|s| {
        let applier = s.spawn(|| {
            for mut batch in rx {
                store.apply(&mut batch).expect("apply");
            }
            cpu_seconds_of("/proc/thread-self/stat")
        });
        let mut batch = Batch::new();
        for (i, (item, body)) in items.iter().zip(&bodies).enumerate() {
            let info = store.put(&body[..], &item.expected).expect("verified put");
            batch.upsert(&["bench"], record(item, info.id, i));
            if batch.len() == 300 {
                tx.send(std::mem::take(&mut batch)).expect("send");
            }
        }
        tx.send(batch).expect("send");
        drop(tx);
        let apply_cpu = applier.join().expect("apply thread");
        println!("store: the applying thread alone: cpu_s={apply_cpu:.3}");
    });
    let bytes = bodies.iter().map(Vec::len).sum();
    report("store", items.len(), bytes, cpu_seconds() - cpu0, t0.elapsed().as_secs_f64());
}

/// A record shaped like the harvester's for a resource fetched from its origin.
fn record(item: &Item, sha256: tributary::store::BlobId, i: usize) -> NewRecord {
    NewRecord {
        uri: format!("http://127.0.0.1:8080/bench/resource/{i:08}"),
        source: "bench".into(),
        upstream: item.loc.clone(),
        sha256,
        listing: Listing {
            origin: item.loc.clone(),
            declared: item.expected.hashes.clone(),
            length: item.expected.length,
            media_type: None,
            lastmod: item.lastmod,
            via: Via { length: item.expected.length, hash: item.expected.hashes.clone(), ..Via::default() },
            links: Vec::new(),
        },
    }
}

fn report(what: &str, count: usize, bytes: usize, cpu: f64, wall: f64) {
    println!("{what}: {count} resources, {bytes} bytes, cpu_s={cpu:.3} wall_s={wall:.3}");
}

/// User + system time of this process, all threads.
fn cpu_seconds() -> f64 {
    cpu_seconds_of("/proc/self/stat")
}

/// User + system time from a `/proc/…/stat` file (clock ticks of 10 ms).
fn cpu_seconds_of(path: &str) -> f64 {
    let stat = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    // The fields after the parenthesised command name; utime and stime are the 14th and 15th.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().expect("utime") + f[12].parse::<f64>().expect("stime");
    ticks / 100.0
}
