//! The server side of `scripts/bench-publish.sh`.
//!
//! ```text
//! publish_bench fill  <store dir> <base URL> <resources> <bytes each>
//! publish_bench serve <store dir> <base URL> <listen addr> <list entries> <change list events>
//! ```
//! `fill` writes resources into the set `bench` as the harvester would (1,000 per batch, so
//! the change log holds one `created` event each); `serve` publishes that store with the given
//! limits until stdin closes. Environment: `CACHE_MB` sets the store's block cache (default
//! 16, as `tributary`'s), `NO_LINKS=1` republishes no inherited links.

/// The allocator the `tributary` binary uses, so the server measured here is the shipped one.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::error::Error;
use std::io::Read;

use tributary::model::{HashList, Link};
use tributary::naming::Naming;
use tributary::publish::{Limits, LinkPolicies, LinkPolicy, Rollover, SetConfig};
use tributary::store::{Batch, Expected, Listing, NewRecord, Store, StoreOptions, Via};
use tributary::web::{WebState, serve};
use url::Url;

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("fill") if args.len() == 5 => fill(&args[1], &args[2], args[3].parse()?, args[4].parse()?),
        Some("serve") if args.len() == 6 => run(&args[1], &args[2], &args[3], args[4].parse()?, args[5].parse()?),
        _ => {
            Err("usage: publish_bench fill <dir> <base> <n> <bytes> | serve <dir> <base> <addr> <entries> <events>"
                .into())
        }
    }
}

fn fill(dir: &str, base: &str, n: usize, size: usize) -> Result<(), Box<dyn Error>> {
    let store = Store::open(dir.as_ref())?;
    let naming = Naming::new(&Url::parse(base)?);
    let modified = Some("2024-05-01T10:00:00Z".parse()?);
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let mut batch = Batch::new();
        for &i in chunk {
            let mut content = format!("resource {i:08} ").into_bytes();
            content.resize(size, b'.');
            let info = store.put(&content[..], &Expected { md5: true, ..Expected::none() })?;
            let upstream = format!("http://museum.example.org/collection/object/{i:08}.xml");
            let hash = HashList::parse(&format!("md5:{}", info.md5.clone().unwrap_or_default()))?.0;
            batch.upsert(
                &["bench"],
                NewRecord {
                    uri: naming.resource("bench", &upstream).ok_or("bad URI")?,
                    source: "bench".into(),
                    upstream: upstream.clone(),
                    sha256: info.id,
                    // What the harvester records for an entry of a Source that is not an
                    // aggregator: `via` repeats the entry's own lastmod, hash, length and type.
                    listing: Listing {
                        origin: upstream.clone(),
                        declared: hash.clone(),
                        length: Some(size as u64),
                        media_type: Some("application/xml".into()),
                        lastmod: modified,
                        via: Via {
                            modified,
                            hash,
                            length: Some(size as u64),
                            media_type: Some("application/xml".into()),
                        },
                        links: vec![Link::new("describedby", format!("{upstream}.meta"))],
                    },
                },
            );
        }
        store.apply(&mut batch)?;
    }
    Ok(())
}

fn run(dir: &str, base: &str, addr: &str, entries: usize, events: u64) -> Result<(), Box<dyn Error>> {
    let mut options = StoreOptions::default();
    if let Some(mb) = std::env::var("CACHE_MB").ok().and_then(|v| v.parse::<u64>().ok()) {
        options.cache_capacity = mb << 20;
    }
    let store = Store::open_with(dir.as_ref(), &options)?;
    // NO_LINKS=1: republish no inherited links (no per-entry lookup for rewriting).
    let policies = if std::env::var("NO_LINKS").is_ok_and(|v| v == "1") {
        LinkPolicies { default: LinkPolicy::keeping(Vec::<String>::new()), ..LinkPolicies::default() }
    } else {
        LinkPolicies::default()
    };
    let naming = Naming::new(&Url::parse(base)?);
    let limits = Limits {
        resource_list_entries: entries,
        change_list: Rollover { max_events: events, period: None },
        ..Limits::default()
    };
    let state = WebState::new(store, naming, vec![SetConfig::source("bench")], policies, limits)?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let stop = async {
            // Until the script closes our stdin.
            let _ = tokio::task::spawn_blocking(|| std::io::stdin().read(&mut [0u8; 1])).await;
        };
        serve(listener, state, stop).await
    })?;
    Ok(())
}
