//! The simulated Sources declared in `sources.toml` (`[[simulate]]`), started by `tributary
//! run` and `harvest` so that the shipped configuration works on a machine with no internet.
//!
//! Every listener is bound before [`start_all`] returns, so a harvester started right after
//! never races a simulator that is not up yet; a port already in use is an error naming the
//! simulator, before anything is fetched.

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use url::Url;

use super::config::{ChangeMix, ClockMode, Rollover, SimConfig};
use super::{SimError, Simulator, Ticker, render, serve};
use crate::config::SimulateDef;

/// Running simulated Sources; [`Simulators::stop`] ends them.
#[derive(Debug)]
pub struct Simulators {
    stop: watch::Sender<bool>,
    servers: JoinSet<std::io::Result<()>>,
    tickers: Vec<Ticker>,
    urls: Vec<(String, Url)>,
}

/// The simulator configuration a `[[simulate]]` table describes, serving at `base_url` on the
/// real clock (it is a Source that changes while the harvester polls it).
pub fn sim_config(def: &SimulateDef, base_url: Url) -> SimConfig {
    let [create, update, delete] = def.mix;
    SimConfig {
        resources: def.resources,
        min_size: def.min_size,
        max_size: def.max_size,
        change_rate_per_sec: def.change_rate,
        mix: ChangeMix { create, update, delete },
        seed: def.seed,
        list_limit: def.list_limit,
        rollover: Rollover {
            count: (def.rollover_count > 0).then_some(def.rollover_count),
            period: def.rollover_period,
        },
        keep_closed_lists: def.keep_lists,
        dump: def.dump,
        via_origin: def.via_origin.clone(),
        links: def.links,
        push: def.push,
        clock: ClockMode::Real,
        ..SimConfig::new(base_url)
    }
}

/// Binds and starts every simulator in `defs`. Must run inside a tokio runtime.
///
/// # Errors
/// [`SimError::Bind`] when an address is taken, [`SimError::Config`] for settings the
/// simulator rejects.
pub async fn start_all(defs: &[SimulateDef]) -> Result<Simulators, SimError> {
    let (stop, rx) = watch::channel(false);
    let mut running = Simulators { stop, servers: JoinSet::new(), tickers: Vec::new(), urls: Vec::new() };
    for def in defs {
        let listener =
            TcpListener::bind(def.listen).await.map_err(|source| SimError::Bind { addr: def.listen, source })?;
        let addr = listener.local_addr().map_err(SimError::Serve)?;
        let base = Url::parse(&format!("http://{addr}/")).map_err(|e| SimError::Config(format!("{addr}: {e}")))?;
        let sim = Simulator::new(sim_config(def, base.clone()))?;
        running.tickers.push(sim.start_ticking());
        tracing::info!(
            simulator = %def.id,
            source.url = %sim.url(render::SOURCE_DESCRIPTION),
            resources = def.resources,
            change_rate = def.change_rate,
            push = def.push,
            "simulated source serving"
        );
        let mut rx = rx.clone();
        running.servers.spawn(serve(listener, sim, async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }));
        running.urls.push((def.id.clone(), base));
    }
    Ok(running)
}

impl Simulators {
    /// Each simulator's id and base URL (the bound port when the configuration said 0).
    pub fn urls(&self) -> &[(String, Url)] {
        &self.urls
    }

    /// Stops ticking and serving; waits for in-flight responses.
    pub async fn stop(mut self) {
        self.tickers.clear();
        let _ = self.stop.send(true);
        while let Some(done) = self.servers.join_next().await {
            match done {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %crate::error::chain(&e), "a simulated source failed"),
                Err(e) => tracing::warn!(error = %crate::error::chain(&e), "a simulated source's task failed"),
            }
        }
    }
}
