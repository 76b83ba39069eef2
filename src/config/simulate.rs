//! `[[simulate]]` tables: simulated Sources that `tributary run` (and `harvest`) start on
//! loopback ports before harvesting, so the shipped `sources.toml` runs the whole product on a
//! machine with no internet.
//!
//! They are a separate table, not an attribute of a `[[source]]`, because a simulated Source
//! is a stand-in for a remote server: the harvester finds it through an ordinary `[[source]]`
//! `url`, exactly as it would find a real provider, and deleting the `[[simulate]]` table is
//! all it takes to point that source somewhere real. Only plain values live here; the
//! simulator turns them into its own configuration, so this module never depends on it.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;
use url::Url;

use super::raw::SizeValue;
use super::{ConfigError, Locator};

/// One `[[simulate]]` table, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct SimulateDef {
    /// A name for logs.
    pub id: String,
    /// Loopback address the simulated Source listens on; it is served at `http://<listen>/`.
    pub listen: SocketAddr,
    /// Resources at the start.
    pub resources: usize,
    /// Smallest bitstream in bytes.
    pub min_size: u64,
    /// Largest bitstream in bytes.
    pub max_size: u64,
    /// Change events per second (0: a static Source).
    pub change_rate: f64,
    /// Weights of creates, updates and deletes.
    pub mix: [u32; 3],
    /// Seed of the content and of the sequence of changes.
    pub seed: u64,
    /// Entries per document; a larger Resource List becomes an index.
    pub list_limit: usize,
    /// Close a Change List after this many changes (0: only by period and list limit).
    pub rollover_count: usize,
    /// Close a Change List once this long has passed since its `from`.
    pub rollover_period: Option<Duration>,
    /// Closed Change Lists kept.
    pub keep_lists: usize,
    /// Serve a Resource Dump.
    pub dump: bool,
    /// Pose as an aggregator of this origin: entries carry `via` links to it.
    pub via_origin: Option<Url>,
    /// Add describedby/describes, canonical and collection links.
    pub links: bool,
    /// Push: serve a WebSub hub at `{base}hub` and notify every batch of changes to its
    /// subscribers through the channel the Capability List advertises.
    pub push: bool,
    /// The instance that starts it (`shard = "NAME"`, see [`super::ShardDef`]).
    pub shard: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSimulate {
    id: Spanned<String>,
    listen: Spanned<String>,
    resources: Option<Spanned<i64>>,
    min_size: Option<Spanned<SizeValue>>,
    max_size: Option<Spanned<SizeValue>>,
    change_rate: Option<Spanned<f64>>,
    mix: Option<Spanned<String>>,
    seed: Option<Spanned<i64>>,
    list_limit: Option<Spanned<i64>>,
    rollover_count: Option<Spanned<i64>>,
    rollover_period: Option<Spanned<String>>,
    keep_lists: Option<Spanned<i64>>,
    dump: Option<bool>,
    via_origin: Option<Spanned<String>>,
    links: Option<bool>,
    push: Option<bool>,
    shard: Option<Spanned<String>>,
}

type Result<T> = std::result::Result<T, ConfigError>;

/// Validates every `[[simulate]]` table: ids and listen addresses unique, addresses on
/// loopback (a simulator is a demo and test fixture, never a public server).
pub(super) fn validate_all(
    raw: &[Spanned<RawSimulate>],
    shards: &[super::shard::ShardDef],
    at: &Locator<'_>,
) -> Result<Vec<SimulateDef>> {
    let mut ids = HashSet::new();
    let mut addrs = HashSet::new();
    let mut out = Vec::with_capacity(raw.len());
    for r in raw {
        let mut def = r.get_ref().validate(at)?;
        def.shard = super::shard::check_member(r.get_ref().shard.as_ref(), &r.get_ref().id, "simulator", shards, at)?;
        if !ids.insert(def.id.clone()) {
            return Err(at.error(r.get_ref().id.span(), "id", format!("duplicate simulator id {:?}", def.id)));
        }
        if def.listen.port() != 0 && !addrs.insert(def.listen) {
            let msg = format!("two simulators listen on {}", def.listen);
            return Err(at.error(r.get_ref().listen.span(), "listen", msg));
        }
        out.push(def);
    }
    Ok(out)
}

impl RawSimulate {
    fn validate(&self, at: &Locator<'_>) -> Result<SimulateDef> {
        let id = self.id.get_ref().trim().to_owned();
        if id.is_empty() {
            return Err(at.error(self.id.span(), "id", "a simulator needs a non-empty id"));
        }
        let listen = listen(&self.listen, at)?;
        const MAX: i64 = crate::model::SITEMAP_MAX_ENTRIES as i64;
        let count = |v: &Option<Spanned<i64>>, key: &str, default: usize, min: i64, max: i64| -> Result<usize> {
            match v {
                None => Ok(default),
                Some(v) if (min..=max).contains(v.get_ref()) => Ok(*v.get_ref() as usize),
                Some(v) => Err(at.error(v.span(), key, format!("{} is out of range {min}..={max}", v.get_ref()))),
            }
        };
        let def = SimulateDef {
            id,
            listen,
            resources: count(&self.resources, "resources", 1_000, 0, 10_000_000)?,
            min_size: size(&self.min_size, "min_size", 100, at)?,
            max_size: size(&self.max_size, "max_size", 2_000, at)?,
            change_rate: change_rate(self.change_rate.as_ref(), at)?,
            mix: mix(self.mix.as_ref(), at)?,
            seed: self.seed.as_ref().map_or(1, |s| *s.get_ref() as u64),
            list_limit: count(&self.list_limit, "list_limit", crate::model::SITEMAP_MAX_ENTRIES, 2, MAX)?,
            rollover_count: count(&self.rollover_count, "rollover_count", 500, 0, MAX)?,
            rollover_period: self
                .rollover_period
                .as_ref()
                .map(|p| {
                    super::values::parse_duration(p.get_ref()).map_err(|m| at.error(p.span(), "rollover_period", m))
                })
                .transpose()?,
            keep_lists: count(&self.keep_lists, "keep_lists", 50, 1, 49_999)?,
            dump: self.dump.unwrap_or(false),
            via_origin: self.via_origin.as_ref().map(|v| via_origin(v, at)).transpose()?,
            links: self.links.unwrap_or(false),
            push: self.push.unwrap_or(false),
            shard: None,
        };
        if def.min_size > def.max_size {
            let span = self.min_size.as_ref().map_or(0..0, Spanned::span);
            return Err(at.error(
                span,
                "min_size",
                format!("{} is larger than max_size {}", def.min_size, def.max_size),
            ));
        }
        Ok(def)
    }
}

fn listen(v: &Spanned<String>, at: &Locator<'_>) -> Result<SocketAddr> {
    let addr: SocketAddr = v.get_ref().trim().parse().map_err(|_| {
        at.error(
            v.span(),
            "listen",
            format!("invalid address {:?}: expected IP:port, e.g. \"127.0.0.1:8091\"", v.get_ref()),
        )
    })?;
    if !addr.ip().is_loopback() {
        return Err(at.error(
            v.span(),
            "listen",
            "a simulated Source listens on a loopback address only (127.0.0.1, ::1)",
        ));
    }
    Ok(addr)
}

fn size(v: &Option<Spanned<SizeValue>>, key: &str, default: u64, at: &Locator<'_>) -> Result<u64> {
    match v {
        None => Ok(default),
        Some(v) => match v.get_ref() {
            SizeValue::Bytes(n) if *n >= 0 => Ok(*n as u64),
            SizeValue::Bytes(n) => Err(at.error(v.span(), key, format!("{n} is not a size"))),
            SizeValue::Text(t) => super::values::parse_size(t).map_err(|m| at.error(v.span(), key, m)),
        },
    }
}

fn change_rate(v: Option<&Spanned<f64>>, at: &Locator<'_>) -> Result<f64> {
    match v {
        None => Ok(1.0),
        Some(v) if v.get_ref().is_finite() && (0.0..=10_000.0).contains(v.get_ref()) => Ok(*v.get_ref()),
        Some(v) => Err(at.error(v.span(), "change_rate", "expected change events per second, 0 to 10000")),
    }
}

fn mix(v: Option<&Spanned<String>>, at: &Locator<'_>) -> Result<[u32; 3]> {
    let Some(v) = v else { return Ok([10, 80, 10]) };
    let bad = || {
        at.error(
            v.span(),
            "mix",
            format!("{:?}: expected weights \"create,update,delete\", e.g. \"10,80,10\"", v.get_ref()),
        )
    };
    let parts: Vec<u32> = v.get_ref().split(',').map(|p| p.trim().parse().map_err(|_| bad())).collect::<Result<_>>()?;
    match parts.as_slice() {
        [c, u, d] if c + u + d > 0 => Ok([*c, *u, *d]),
        _ => Err(bad()),
    }
}

fn via_origin(v: &Spanned<String>, at: &Locator<'_>) -> Result<Url> {
    let url =
        Url::parse(v.get_ref().trim()).map_err(|e| at.error(v.span(), "via_origin", format!("invalid URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(at.error(v.span(), "via_origin", "expected an http or https URL"));
    }
    Ok(url)
}
