//! Shards: one `sources.toml` deploying several Tributary instances, each harvesting a share of
//! the sources, joined by the aggregator chain (a top-level instance whose sources are the
//! shards). A `[shards.NAME]` table says what differs per instance — `base_url`, `listen`,
//! `data_dir` — and every `[[source]]` and `[[simulate]]` names its instance with `shard =
//! "NAME"`. `--shard NAME` then turns the whole file into that instance's configuration.
//!
//! A file with shards is never run whole: every source would be harvested twice, once by its
//! shard and once more through the top level. So without `--shard` such a file is an error,
//! and a source without a `shard` in it is one too (nothing would harvest it).

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;
use url::Url;

use super::{Config, ConfigError, Locator};

type Result<T> = std::result::Result<T, ConfigError>;

/// What one instance changes of `[aggregator]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardDef {
    /// The name sources and `--shard` use.
    pub name: String,
    /// The instance's `base_url` (with a trailing `/`); `None` keeps `[aggregator]`'s.
    pub base_url: Option<Url>,
    /// The instance's `listen`; `None` keeps `[aggregator]`'s.
    pub listen: Option<SocketAddr>,
    /// The instance's `data_dir`, resolved against the file's directory; `None` keeps
    /// `[aggregator]`'s (which is then shared: only sensible for instances on other machines).
    pub data_dir: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawShard {
    base_url: Option<Spanned<String>>,
    listen: Option<Spanned<String>>,
    data_dir: Option<String>,
}

/// Validates the `[shards.*]` tables, in name order.
pub(super) fn validate_all(raw: &BTreeMap<String, Spanned<RawShard>>, at: &Locator<'_>) -> Result<Vec<ShardDef>> {
    raw.iter().map(|(name, table)| validate(name, table, at)).collect()
}

fn validate(name: &str, table: &Spanned<RawShard>, at: &Locator<'_>) -> Result<ShardDef> {
    let key = format!("shards.{name}");
    let name_ok = name.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
        && name.len() <= 64;
    if !name_ok {
        let msg =
            format!("invalid shard name {name:?}: use 1-64 characters [a-z0-9._-], starting with a letter or digit");
        return Err(at.error(table.span(), &key, msg));
    }
    let raw = table.get_ref();
    let base_url = raw.base_url.as_ref().map(|b| at.http_url(b, "base_url").map(super::raw::with_slash)).transpose()?;
    let listen = raw
        .listen
        .as_ref()
        .map(|l| {
            l.get_ref().trim().parse().map_err(|_| {
                let msg = format!("invalid address {:?}: expected IP:port, e.g. \"127.0.0.1:8081\"", l.get_ref());
                at.error(l.span(), "listen", msg)
            })
        })
        .transpose()?;
    let data_dir = raw.data_dir.as_deref().map(|d| at.relative_path(d));
    Ok(ShardDef { name: name.to_owned(), base_url, listen, data_dir })
}

/// Checks a `shard = "NAME"` of a source or simulator against the `[shards.*]` tables: it must
/// name one, and with shards every source and simulator must have one.
pub(super) fn check_member(
    shard: Option<&Spanned<String>>,
    id: &Spanned<String>,
    what: &str,
    shards: &[ShardDef],
    at: &Locator<'_>,
) -> Result<Option<String>> {
    let known = || shards.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ");
    match shard {
        None if shards.is_empty() => Ok(None),
        None => {
            let msg = format!(
                "{what} {:?} has no `shard`: with [shards] tables every {what} names the instance that runs it ({})",
                id.get_ref(),
                known()
            );
            Err(at.error(id.span(), "shard", msg))
        }
        Some(s) if shards.iter().any(|d| &d.name == s.get_ref()) => Ok(Some(s.get_ref().clone())),
        Some(s) if shards.is_empty() => {
            let msg =
                format!("shard {:?} needs a [shards.{}] table (base_url, listen, data_dir)", s.get_ref(), s.get_ref());
            Err(at.error(s.span(), "shard", msg))
        }
        Some(s) => Err(at.error(s.span(), "shard", format!("no [shards.{}] table (shards: {})", s.get_ref(), known()))),
    }
}

impl Config {
    /// This instance's configuration: the whole file when it defines no shards (and `shard` is
    /// `None`); otherwise the shard's sources, the merged sets restricted to them (a set left
    /// with none is dropped), its simulators, and its `base_url`, `listen` and `data_dir` over
    /// `[aggregator]`'s. A `--data-dir` given on the command line still wins.
    ///
    /// # Errors
    /// [`ConfigError::Shard`] when the file has shards and none is named, or the name is not
    /// one of them.
    pub fn for_shard(mut self, shard: Option<&str>, data_dir_override: Option<&std::path::Path>) -> Result<Config> {
        let known = self.shards.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
        let def = match shard {
            None if self.shards.is_empty() => return Ok(self),
            None => {
                let message = "this file defines shards; run each instance with --shard NAME".to_owned();
                return Err(ConfigError::Shard { message, known });
            }
            Some(name) => match self.shards.iter().find(|s| s.name == name) {
                Some(def) => def.clone(),
                None => return Err(ConfigError::Shard { message: format!("no shard {name:?} in the file"), known }),
            },
        };
        let mine = |s: &Option<String>| s.as_deref() == Some(def.name.as_str());
        self.sources.retain(|s| mine(&s.shard));
        self.simulators.retain(|s| mine(&s.shard));
        let ids: HashSet<&str> = self.sources.iter().map(|s| s.id.as_str()).collect();
        for set in &mut self.sets {
            set.sources.retain(|m| ids.contains(m.as_str()));
        }
        self.sets.retain(|set| !set.sources.is_empty());
        self.apply_instance(&def, data_dir_override);
        Ok(self)
    }

    fn apply_instance(&mut self, def: &ShardDef, data_dir_override: Option<&std::path::Path>) {
        let agg = &mut self.aggregator;
        if let Some(base) = &def.base_url {
            // An endpoint id left to its default follows the instance's own base URL.
            if agg.endpoint_id == super::raw::default_endpoint_id(&agg.base_url) {
                agg.endpoint_id = super::raw::default_endpoint_id(base);
            }
            // So does a public URL left to its default (`base_url`).
            if agg.public_url == agg.base_url {
                agg.public_url = base.clone();
            }
            agg.base_url = base.clone();
        }
        if let Some(listen) = def.listen {
            agg.listen = listen;
        }
        match (data_dir_override, &def.data_dir) {
            (Some(dir), _) => agg.data_dir = dir.to_owned(),
            (None, Some(dir)) => agg.data_dir = dir.clone(),
            (None, None) => {}
        }
    }
}
