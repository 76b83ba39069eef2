//! The Rust side of `scripts/bench-feed.sh`: FeedSync feed parsing speed.
//!
//! ```text
//! feed_bench gen   <file> <items>   write a FeedSync Atom feed of <items> entries
//! feed_bench parse <file> <runs>    time read_feed over it <runs> times; print items/s
//! ```
//! `gen` writes through [`AtomWriter`], so the feed is what Tributary publishes: each entry
//! with a title, a link, a summary, an `sx:sync` of three history elements, every tenth a
//! tombstone and every fiftieth with a conflict. `parse` reads the file into memory once and
//! times only `read_feed` (no disk), printing each run and the median as `items/s <n>`.

/// The allocator the `tributary` binary uses, so what is measured is what ships.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::error::Error;
use std::io::BufWriter;
use std::time::Instant;

use tributary::model::W3cDateTime;
use tributary::model::feed::{AtomWriter, FeedHead, FeedItem, FeedLimits, History, Sync, read_feed};

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("gen") if args.len() == 3 => generate(&args[1], args[2].parse()?),
        Some("parse") if args.len() == 3 => parse(&args[1], args[2].parse()?),
        _ => Err("usage: feed_bench gen <file> <items> | feed_bench parse <file> <runs>".into()),
    }
}

fn generate(path: &str, n: usize) -> Result<(), Box<dyn Error>> {
    let t0: W3cDateTime = "2024-01-01T00:00:00Z".parse()?;
    let head = FeedHead {
        id: "urn:tributary:bench".into(),
        title: "FeedSync bench".into(),
        updated: t0,
        links: Vec::new(),
        sharing: None,
        author: Some("Tributary".into()),
    };
    let mut w = AtomWriter::new(BufWriter::new(std::fs::File::create(path)?), &head)?;
    for i in 0..n {
        let mut item = entry(i, t0)?;
        if i % 50 == 0 {
            let mut conflict = entry(i, t0)?;
            conflict.title = Some(format!("Item {i} (their edit)"));
            if let Some(s) = conflict.sync.as_mut() {
                s.history[0].by = Some("ENDPOINT-B".into());
            }
            item.sync.as_mut().ok_or("sync")?.conflicts.push(conflict);
        }
        w.item(&item)?;
    }
    w.finish()?;
    Ok(())
}

/// Entry `i`: an Atom entry with markup of its own (a summary) and three updates.
fn entry(i: usize, t0: W3cDateTime) -> Result<FeedItem, Box<dyn Error>> {
    let at = |k: i64| W3cDateTime::from_unix(t0.unix_timestamp() + i as i64 * 60 + k, 0);
    let history = (1..=3u32)
        .rev()
        .map(|seq| Ok(History { sequence: seq, when: Some(at(i64::from(seq))?), by: Some(format!("EP{}", seq % 2)) }))
        .collect::<Result<Vec<_>, Box<dyn Error>>>()?;
    let xml = format!(
        "<entry xmlns=\"http://www.w3.org/2005/Atom\">\n    <id>urn:uuid:bench-{i}</id>\n    \
         <title>Item {i}: buy milk &amp; eggs</title>\n    <link href=\"http://127.0.0.1/items/{i}\"/>\n    \
         <updated>{}</updated>\n    <summary>Get milk, eggs, butter and bread for item {i}.</summary>\n  </entry>",
        at(3)?
    );
    Ok(FeedItem {
        id: Some(format!("urn:uuid:bench-{i}")),
        title: Some(format!("Item {i}: buy milk & eggs")),
        link: Some(format!("http://127.0.0.1/items/{i}")),
        updated: Some(at(3)?),
        enclosure: None,
        sync: Some(Sync {
            id: format!("item_{i}_bench"),
            updates: 3,
            deleted: i % 10 == 9,
            noconflicts: false,
            history,
            conflicts: Vec::new(),
        }),
        xml,
    })
}

fn parse(path: &str, runs: usize) -> Result<(), Box<dyn Error>> {
    let bytes = std::fs::read(path)?;
    let mut rates = Vec::with_capacity(runs);
    for run in 1..=runs.max(1) {
        let start = Instant::now();
        let feed = read_feed(&bytes[..], path, &FeedLimits::default())?;
        let secs = start.elapsed().as_secs_f64();
        let rate = feed.items.len() as f64 / secs;
        println!("run {run}: {} items in {:.1} ms: {rate:.0} items/s", feed.items.len(), secs * 1000.0);
        rates.push(rate);
    }
    rates.sort_by(f64::total_cmp);
    println!("items/s {:.0}", rates[rates.len() / 2]);
    Ok(())
}
