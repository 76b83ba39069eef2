//! The server side of `scripts/bench-oai-serve.sh`: a store filled by `publish_bench fill` (set
//! `bench`), served with its OAI-PMH endpoint on.
//!
//! ```text
//! oai_bench <store dir> <base URL> <listen addr> <page size>
//! ```
//! Serves until stdin closes. `CACHE_MB` sets the store's block cache (default 16, as
//! `tributary`'s). With `CACHE_STAT` set to a path, the bytes the store's block cache holds
//! are written there every 100 ms (the script tells the bounded cache filling from other
//! growth).

/// The allocator the `tributary` binary uses, so the server measured here is the shipped one.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::HashMap;
use std::error::Error;
use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use tributary::config::OaiProvider as Settings;
use tributary::naming::Naming;
use tributary::publish::oai::OaiProvider;
use tributary::publish::{Limits, LinkPolicies, SetConfig};
use tributary::store::{Store, StoreOptions};
use tributary::web::{WebState, serve};
use url::Url;

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, base, addr, page] = args.as_slice() else {
        return Err("usage: oai_bench <store dir> <base URL> <listen addr> <page size>".into());
    };
    let mut options = StoreOptions::default();
    if let Some(mb) = std::env::var("CACHE_MB").ok().and_then(|v| v.parse::<u64>().ok()) {
        options.cache_capacity = mb << 20;
    }
    let store = Store::open_with(dir.as_ref(), &options)?;
    if let Some(path) = std::env::var_os("CACHE_STAT") {
        let store = store.clone();
        std::thread::spawn(move || {
            // Until the process ends.
            loop {
                let mut tmp = path.clone();
                tmp.push(".tmp");
                if std::fs::write(&tmp, store.cache_bytes().to_string()).is_ok() {
                    let _ = std::fs::rename(&tmp, &path);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
    }
    let naming = Naming::new(&Url::parse(base)?);
    let state =
        WebState::new(store, naming, vec![SetConfig::source("bench")], LinkPolicies::default(), Limits::default())?;
    let settings = Settings {
        name: "Tributary benchmark".into(),
        admin_email: "bench@example.org".into(),
        repository_identifier: "bench.example.org".into(),
        page_size: page.parse()?,
        page_bytes: 4 << 20,
        token_lifetime: Duration::from_secs(86_400),
    };
    let oai = OaiProvider::new(state.publisher().clone(), settings, HashMap::new(), HashMap::new())?;
    let state = state.with_oai(Arc::new(oai));
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(addr.as_str()).await?;
        let stop = async {
            // Until the script closes our stdin.
            let _ = tokio::task::spawn_blocking(|| std::io::stdin().read(&mut [0u8; 1])).await;
        };
        serve(listener, state, stop).await
    })?;
    Ok(())
}
