//! `tributary simulate`: the command-line face of the simulator. `src/cli/` flattens
//! [`SimulateArgs`] into its subcommand and awaits [`run`] with its Ctrl-C future.
//!
//! The command always uses the real clock and ticks in the background: it is the changing
//! Source a harvester polls. Tests use the library with the virtual clock instead.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;
use url::Url;

use super::config::{ChangeMix, ClockMode, Rollover, SimConfig};
use super::{SimError, Simulator, render, serve};

/// Arguments of `tributary simulate`.
#[derive(Debug, Clone, clap::Args)]
pub struct SimulateArgs {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub listen: SocketAddr,
    /// Base URL used in documents (default: http://ADDRESS/ of the bound listener).
    #[arg(long, value_name = "URL")]
    pub base_url: Option<Url>,
    /// Resources at the start.
    #[arg(long, default_value_t = 1_000)]
    pub resources: usize,
    /// Smallest bitstream in bytes.
    #[arg(long, default_value_t = 100)]
    pub min_size: u64,
    /// Largest bitstream in bytes.
    #[arg(long, default_value_t = 2_000)]
    pub max_size: u64,
    /// Change events per second (0: no changes).
    #[arg(long, default_value_t = 1.0)]
    pub rate: f64,
    /// Weights of creates, updates and deletes.
    #[arg(long, default_value = "10,80,10", value_name = "C,U,D")]
    pub mix: ChangeMix,
    /// Seed of the content and of the sequence of changes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Entries per document; a larger Resource List becomes an index (at most 50,000).
    #[arg(long, default_value_t = crate::model::SITEMAP_MAX_ENTRIES)]
    pub list_limit: usize,
    /// Close a Change List after this many changes (0: only by period and list limit).
    #[arg(long, default_value_t = 500)]
    pub rollover_count: usize,
    /// Close a Change List once this long has passed since its `from` (e.g. 30s, 5m, 1h).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub rollover_period: Option<Duration>,
    /// Closed Change Lists kept; older ones are dropped and the index's `from` moves on.
    #[arg(long, default_value_t = 50)]
    pub keep_lists: usize,
    /// Also serve a Resource Dump (ZIP packages with manifest.xml).
    #[arg(long)]
    pub dump: bool,
    /// Pose as an aggregator of this origin: entries carry `via` links to URL/res/ID.
    #[arg(long, value_name = "URL")]
    pub via_origin: Option<Url>,
    /// Add describedby/describes (metadata resources), canonical and collection links.
    #[arg(long)]
    pub links: bool,
    /// Push: serve a WebSub hub at BASE/hub, advertise the change-notification channel
    /// BASE/notifications in the Capability List, and notify each batch of changes.
    #[arg(long)]
    pub push: bool,
}

impl SimulateArgs {
    /// The simulator configuration these arguments describe, serving at `base_url`, on the
    /// real clock.
    pub fn to_config(&self, base_url: Url) -> SimConfig {
        SimConfig {
            resources: self.resources,
            min_size: self.min_size,
            max_size: self.max_size,
            change_rate_per_sec: self.rate,
            mix: self.mix,
            seed: self.seed,
            list_limit: self.list_limit,
            rollover: Rollover {
                count: (self.rollover_count > 0).then_some(self.rollover_count),
                period: self.rollover_period,
            },
            keep_closed_lists: self.keep_lists,
            dump: self.dump,
            via_origin: self.via_origin.clone(),
            links: self.links,
            push: self.push,
            clock: ClockMode::Real,
            ..SimConfig::new(base_url)
        }
    }
}

/// Binds, starts ticking, and serves until `shutdown` completes.
///
/// # Errors
/// [`SimError::Config`] for invalid arguments, [`SimError::Bind`] when the address cannot be
/// bound, [`SimError::Serve`] when the server fails.
pub async fn run(args: SimulateArgs, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), SimError> {
    let listener =
        TcpListener::bind(args.listen).await.map_err(|source| SimError::Bind { addr: args.listen, source })?;
    let addr = listener.local_addr().map_err(SimError::Serve)?;
    let base_url = match &args.base_url {
        Some(url) => url.clone(),
        None => Url::parse(&format!("http://{addr}/"))
            .map_err(|e| SimError::Config(format!("base URL from {addr}: {e}")))?,
    };
    let sim = Simulator::new(args.to_config(base_url))?;
    let _ticker = sim.start_ticking();
    tracing::info!(
        source.url = %sim.url(render::SOURCE_DESCRIPTION),
        resources = args.resources,
        rate_per_sec = args.rate,
        push = args.push,
        "simulated source serving"
    );
    serve(listener, sim, shutdown).await.map_err(SimError::Serve)
}

/// `250ms`, `30s`, `5m`, `1h`, or a bare number of seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("`{s}`: expected a number with an optional unit (ms, s, m, h)"))?;
    let d = match unit.trim() {
        "ms" => Duration::from_millis(n),
        "" | "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        other => return Err(format!("`{s}`: unknown unit `{other}` (use ms, s, m or h)")),
    };
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("m").is_err());
    }

    #[test]
    fn mix_parses_three_weights() {
        assert_eq!("10,80,10".parse::<ChangeMix>(), Ok(ChangeMix { create: 10, update: 80, delete: 10 }));
        assert!("10,80".parse::<ChangeMix>().is_err());
    }
}
