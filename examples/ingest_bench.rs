//! The store's ingest path without fetching, at scale: `scripts/bench-scale.sh` runs it.
//!
//! ```text
//! ingest_bench fill <store dir> <base URL> <records> [batch]
//! ```
//! Writes `records` resources of one source (set `bench`, so that `publish_bench serve`
//! publishes it) the way the harvester does — each bitstream put (small, so packed; distinct
//! content per record), its record created, one batch applied durably per `batch` records
//! (default 1,000) on another thread while the next batch fills — and prints a line per tenth of
//! the run with the records/s of that tenth, then the whole run's rate, the bytes the
//! metadata (the database's directory, `meta/`; `db/` and `lsm/` of store format 8, for a
//! build of that format) takes per record at the end and once the engine's compactions are
//! done, and the peak RSS. `CHAIN=1` writes records as a
//! harvest from another aggregator does (upstream ≠ origin: two more index rows each).

/// The allocator the `tributary` binary uses, so what is measured is what ships.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::error::Error;
use std::path::Path;
use std::time::Instant;

use tributary::model::{HashList, Link};
use tributary::naming::Naming;
use tributary::store::{Batch, Expected, Listing, NewRecord, Store, Via};
use url::Url;

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("fill") if args.len() >= 4 => {
            let batch = args.get(4).map(|b| b.parse()).transpose()?.unwrap_or(1000);
            fill(Path::new(&args[1]), &args[2], args[3].parse()?, batch)
        }
        _ => Err("usage: ingest_bench fill <dir> <base URL> <records> [batch]".into()),
    }
}

fn fill(dir: &Path, base: &str, n: usize, batch_size: usize) -> Result<(), Box<dyn Error>> {
    let chain = std::env::var("CHAIN").is_ok_and(|v| v == "1");
    // `MEMTABLE_MB` tries another memtable size (a tuning experiment; the store's default
    // otherwise).
    let mut options = tributary::store::StoreOptions::default();
    if let Some(mb) = std::env::var("MEMTABLE_MB").ok().and_then(|v| v.parse::<u64>().ok()) {
        options = options.with_memtable_bytes(mb << 20);
    }
    let store = Store::open_with(dir, &options)?;
    let naming = Naming::new(&Url::parse(base)?);
    let modified = Some("2024-05-01T10:00:00Z".parse()?);
    let start = Instant::now();
    let tenth = (n / 10).max(1);
    let mut mark = Instant::now();
    // As the harvester's committer does, batches are applied on one thread while the next one
    // is filled on another: at most one apply in flight, one batch filling (a rendezvous
    // channel hands each batch over when the apply before it is done).
    let (tx, rx) = std::sync::mpsc::sync_channel::<Batch>(0);
    let filler = {
        let store = store.clone();
        std::thread::Builder::new().name("filler".into()).spawn(move || -> Result<(), String> {
            let mut i = 0;
            while i < n {
                let mut batch = Batch::new();
                let end = (i + batch_size).min(n);
                for k in i..end {
                    // A first baseline, as the harvester writes one: each record created
                    // without a look for an old one (`Batch::create`).
                    batch.create(&["bench"], record(&store, &naming, k, chain, modified).map_err(|e| e.to_string())?);
                }
                i = end;
                if tx.send(batch).is_err() {
                    break; // the applier stopped on an error, which it reports
                }
            }
            Ok(())
        })?
    };
    let mut i = 0;
    for mut batch in rx {
        let before = i;
        i += batch.len();
        store.apply(&mut batch)?;
        if before / tenth != i / tenth || i == n {
            let rate = tenth as f64 / mark.elapsed().as_secs_f64();
            println!("records {:>10}: {:>8.0} records/s over the last tenth", i, rate);
            mark = Instant::now();
        }
    }
    filler.join().map_err(|_| "the filling thread panicked")??;
    let secs = start.elapsed().as_secs_f64();
    store.flush()?;
    println!("total: {n} records in {secs:.1} s = {:.0} records/s", n as f64 / secs);
    let metadata = || -> std::io::Result<u64> {
        ["meta", "db", "lsm"].iter().map(|d| dir.join(d)).filter(|d| d.is_dir()).map(|d| dir_size(&d)).sum()
    };
    let at_end = metadata()?;
    println!("metadata on disk at the end: {at_end} bytes = {:.0} bytes/record", at_end as f64 / n as f64);
    // What the store settles to once its background merges are done (a merge in flight holds
    // its inputs and its output at once).
    let settling = Instant::now();
    store.settle(std::time::Duration::from_secs(3600));
    let settled = metadata()?;
    println!(
        "metadata on disk settled: {settled} bytes = {:.0} bytes/record ({:.1} s to settle)",
        settled as f64 / n as f64,
        settling.elapsed().as_secs_f64()
    );
    println!("{}", store.stats()?.to_string().lines().filter(|l| l.starts_with("database:")).collect::<String>());
    drop(store);
    println!("peak RSS: {} KiB", peak_rss_kib());
    Ok(())
}

/// Record `k`: 300 bytes of its own content (packed, as most metadata records are), an md5
/// declared, a `describedby` link, as a cultural-heritage provider's listing has.
fn record(
    store: &Store,
    naming: &Naming,
    k: usize,
    chain: bool,
    modified: Option<tributary::model::W3cDateTime>,
) -> Result<NewRecord, Box<dyn Error>> {
    let mut content = format!("<record id=\"{k:010}\">").into_bytes();
    content.resize(300, b' ');
    let info = store.put(&content[..], &Expected { md5: true, ..Expected::none() })?;
    let origin = format!("https://provider.example.org/oai/record/{k:010}.xml");
    let upstream =
        if chain { format!("http://127.0.0.1:9000/sets/bench/resource/{k:010}.xml") } else { origin.clone() };
    let hash = HashList::parse(&format!("md5:{}", info.md5.clone().unwrap_or_default()))?.0;
    let length = Some(content.len() as u64);
    let media_type = Some("application/xml".to_owned());
    Ok(NewRecord {
        uri: naming.resource("bench", &upstream).ok_or("bad URI")?,
        source: "bench".into(),
        upstream,
        sha256: info.id,
        listing: Listing {
            origin: origin.clone(),
            declared: hash.clone(),
            length,
            media_type: media_type.clone(),
            lastmod: modified,
            via: Via { modified, hash, length, media_type },
            links: vec![Link::new("describedby", format!("{origin}.meta"))],
        },
    })
}

fn dir_size(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        // Blocks allocated, not lengths: a preallocated journal is mostly holes.
        total +=
            if meta.is_dir() { dir_size(&entry.path())? } else { std::os::unix::fs::MetadataExt::blocks(&meta) * 512 };
    }
    Ok(total)
}

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
