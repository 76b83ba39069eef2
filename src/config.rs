//! `sources.toml`: the one file an operator edits. It is read once at start-up into a
//! validated [`Config`] so nothing downstream re-checks a URL, a rate or an id.
//!
//! Two stages, as in ripgrep's low/high args: serde reads a `RawConfig` that rejects unknown
//! keys, then validation turns it into parsed `Url`s, durations, rates and per-source
//! [`Settings`] (defaults merged with the source's overrides). Every error — a syntax error,
//! an unknown key, a bad value, a duplicate id — names the file, the line and column, and the
//! key, because the operator's next step is to open the file at that line. Fields that are
//! validated after deserialising are kept as `toml::Spanned` for exactly that reason.
//!
//! Must not depend on the harvester or the store: they depend on it.

mod credentials;
mod hub;
mod oai;
mod oai_serve;
mod raw;
mod server;
mod shard;
mod simulate;
mod values;

use std::fmt;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use url::Url;

use crate::model::SITEMAP_MAX_ENTRIES;
pub use credentials::{CredentialHeader, Credentials, Secret};
pub use hub::{CLIENT_BURST, ExternalMode, HubSettings};
use raw::RawConfig;
pub use server::ServerSettings;
pub use shard::ShardDef;
pub use simulate::SimulateDef;
pub use values::{Rate, parse_rate, parse_size};

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it was read from.
    pub path: PathBuf,
    /// `[aggregator]`
    pub aggregator: Aggregator,
    /// `[publish]` with built-in defaults filled in.
    pub publish: Publishing,
    /// `[defaults]` with built-in defaults filled in.
    pub defaults: Settings,
    /// `[[source]]` tables in file order.
    pub sources: Vec<Source>,
    /// `[[set]]` tables in file order (merged sets; each source is also a set of its own).
    pub sets: Vec<SetDef>,
    /// `[[simulate]]` tables: simulated Sources started by `run` and `harvest`.
    pub simulators: Vec<SimulateDef>,
    /// `[shards.*]` tables, in name order: the instances one file deploys (see
    /// [`Config::for_shard`]); empty for a single instance.
    pub shards: Vec<ShardDef>,
    /// `[hub]`: Tributary's own change notifications and its built-in WebSub hub.
    pub hub: HubSettings,
    /// `[server]`: the web server's limits on clients.
    pub server: ServerSettings,
}

/// The `[aggregator]` table.
#[derive(Debug, Clone)]
pub struct Aggregator {
    /// Prefix of every URI Tributary republishes; always ends with `/`.
    pub base_url: Url,
    /// Address the web server binds.
    pub listen: SocketAddr,
    /// Data directory; relative paths in the file are resolved against the file's directory.
    pub data_dir: PathBuf,
    /// Sent with every request; contains a contact URL or e-mail address.
    pub user_agent: String,
    /// The database's block cache in MiB (`store_cache_mb`; 1–65536, default 16): decompressed
    /// blocks of the store's tables, which the kernel's page cache holds compressed anyway.
    pub store_cache_mb: u32,
    /// Sources harvested at the same time (`max_concurrent_sources`; 1–256, default 8), by
    /// one pass and by the service alike: each source's own fetches are already capped per
    /// host, so this bounds the harvester's total connections, tasks and memory.
    pub max_concurrent_sources: usize,
    /// The aggregator's FeedSync endpoint id (`endpoint_id`; default `tributary:HOST[:PORT]`
    /// of `base_url`): the `by` of the history entries its own updates add to its feeds.
    pub endpoint_id: String,
    /// An external WebSub hub (`hub`) that publishes Tributary's change notifications instead of
    /// the built-in one at `{base_url}hub`.
    pub hub: Option<Url>,
    /// Where hubs reach this aggregator (`public_url`; default `base_url`): the prefix of the
    /// WebSub callback URLs (`{public_url}websub/{id}`); always ends with `/`.
    pub public_url: Url,
    /// Where bitstreams larger than the store's inline limit live (`blobs =
    /// "s3://BUCKET/PREFIX"`, with `blobs_create_bucket` and `blobs_gc_grace`); `None`, the
    /// default: files in the data directory. Endpoint, region and credentials come from the
    /// standard AWS environment variables, never from this file.
    pub blobs: Option<crate::store::RemoteBlobs>,
    /// The HTTP(S) proxy for the harvester's requests (`proxy`); `None`, the default: no proxy,
    /// whatever `HTTP(S)_PROXY` say. A proxy resolves names itself, so with one the address
    /// guard (`allow_private`) sees only the proxy's address (docs/SECURITY.md).
    pub proxy: Option<Url>,
    /// Tributary's own OAI-PMH endpoint at `{base_url}oai` (`oai_name`, `oai_admin_email`,
    /// …); `None`, the endpoint is off, when neither name nor e-mail is given.
    pub oai: Option<OaiProvider>,
}

/// What Tributary's OAI-PMH endpoint says of itself, and the shape of its lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OaiProvider {
    /// Identify's `repositoryName` (`oai_name`).
    pub name: String,
    /// Identify's `adminEmail` (`oai_admin_email`).
    pub admin_email: String,
    /// The oai-identifier `repositoryIdentifier` (`oai_repository_identifier`; default: the
    /// base URL's host, or a `tributary-….local` name made from an address).
    pub repository_identifier: String,
    /// Records or headers per page (`oai_page_size`; 1–10,000, default 500).
    pub page_size: u32,
    /// A page also ends once it holds this many bytes (4 MiB).
    pub page_bytes: usize,
    /// How long a resumption token is valid (`oai_token_lifetime`; default 24 h, at least 60 s).
    pub token_lifetime: Duration,
}

/// The `[publish]` table: the shape of the documents Tributary serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publishing {
    /// Entries per Resource List; past it the list becomes an index with parts.
    pub resource_list_entries: usize,
    /// A Change List closes once it holds this many events.
    pub change_list_events: u64,
    /// A Change List also closes at the end of this period (epoch-aligned, so daily lists end
    /// at midnight UTC); `None`: by count only.
    pub change_list_period: Option<Duration>,
    /// Bitstreams per Resource Dump package (at most the Sitemap limit: its manifest is one).
    pub dump_package_entries: usize,
    /// Bytes of bitstreams per Resource Dump package.
    pub dump_package_size: u64,
    /// A Resource Dump is rebuilt on request once its set has changed and it is this old.
    pub dump_max_age: Duration,
    /// Publish Resource Dumps and Change Dumps at all. Off by default when bitstreams are in a
    /// bucket: a dump's packages are local ZIP copies of every bitstream of the set.
    pub dumps: bool,
}

impl Default for Publishing {
    fn default() -> Self {
        Publishing {
            resource_list_entries: SITEMAP_MAX_ENTRIES,
            change_list_events: 1_000,
            change_list_period: Some(Duration::from_secs(86_400)),
            dump_package_entries: SITEMAP_MAX_ENTRIES,
            dump_package_size: 1 << 30,
            dump_max_age: Duration::from_secs(3600),
            dumps: true,
        }
    }
}

/// One upstream Source.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    /// Unique id (also the id of its implicit set).
    pub id: String,
    /// Whatever the operator knows: Source Description, Capability List, Resource List or
    /// Index, or the site root. Discovery works out the rest.
    pub url: Url,
    /// Which Capability List to use when the Source Description lists several.
    pub capability_list: Option<Url>,
    /// `Some` for a feed source (`feed = URL`, then `url` is the feed): an Atom or RSS feed,
    /// with or without FeedSync, harvested instead of ResourceSync documents.
    pub feed: Option<FeedSource>,
    /// `Some` for an OAI-PMH data provider (`oai = URL`, then `url` is its base URL).
    pub oai: Option<OaiSource>,
    /// Defaults merged with this source's overrides.
    pub settings: Settings,
    /// The instance that harvests it (`shard = "NAME"`); `None` in a file without shards.
    pub shard: Option<String>,
    /// `push_hub` / `push_topic`: the notification channel, over what discovery finds.
    pub push: PushChannel,
}

/// A source's change-notification channel as configured; what is `None` comes from the
/// Source's Capability List.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PushChannel {
    /// `push_hub`: the WebSub hub to subscribe at.
    pub hub: Option<Url>,
    /// `push_topic`: the topic (channel) URI to subscribe to.
    pub topic: Option<Url>,
}

/// What one rate limit and concurrency cap cover (`politeness`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Politeness {
    /// Each origin (scheme, host, port) its own.
    #[default]
    Origin,
    /// Origins whose names resolve to the same address share one: several host names of one
    /// server are polled as the one server they are.
    Ip,
}

/// Whether Tributary subscribes to a Source's change notifications (`push`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PushMode {
    /// Subscribe when the Source advertises a channel (or `push_hub` names one).
    #[default]
    Auto,
    /// Poll only.
    Off,
}

/// How a feed source is harvested.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedSource {
    /// The feeds, in the order each poll reads them; the first is the source's `url`. Several
    /// (`feeds = [...]`) are copies of one item set — mirrors, or an aggregator and its
    /// original — whose items are merged into one resource each.
    pub urls: Vec<Url>,
    /// What each item's bitstream is.
    pub content: FeedContent,
}

/// How an OAI-PMH data provider is harvested (`oai = URL`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OaiSource {
    /// The repository's base URL, without a query.
    pub base: Url,
    /// `metadata_prefix` (default `oai_dc`): the one format harvested.
    pub metadata_prefix: String,
    /// `oai_sets`: only these sets (`setSpec`s), each listed on its own; empty: the whole
    /// repository.
    pub sets: Vec<String>,
    /// `oai_relist` (default 7 days): how often a repository that keeps no deleted records
    /// (`deletedRecord` `no` or `transient`) is listed in full to find what it deleted.
    pub relist: Duration,
    /// `oai_objects` (default false): also harvest the objects records point to (their
    /// `dc:identifier` / `dc:relation` http(s) URLs on the repository's host), each a resource
    /// linked to its record by `describedby` (and the record to it by `describes`).
    pub objects: bool,
}

/// What Tributary stores as the bitstream of a feed item (`feed_content`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FeedContent {
    /// The item itself, as a standalone XML document with its `sx:sync` (the default: every
    /// feed has it, and it carries the item's FeedSync state downstream).
    #[default]
    Item,
    /// The item's enclosure (items without one are skipped with a warning).
    Enclosure,
    /// The page the item's link points to.
    Link,
}

/// A merged set: several sources republished under one Capability List.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetDef {
    /// Unique id (unique across sources too: both become set ids in URLs).
    pub id: String,
    /// Ids of the member sources.
    pub sources: Vec<String>,
}

/// Everything `[defaults]` sets and a `[[source]]` may override, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The source these are resolved for (empty outside a source). A host's limits are the
    /// strictest of each source's latest ask, by this id (`fetch::host`).
    pub source_id: String,
    /// Request rate per host.
    pub rate: Rate,
    /// Requests in flight per host.
    pub concurrency: NonZeroU32,
    /// Time between polls of a source.
    pub poll: Duration,
    /// Whether resources absent from a complete Resource List are deleted.
    pub deletes: bool,
    /// Relation types of upstream `rs:ln` links republished (rewritten where possible).
    pub keep_links: Vec<String>,
    /// Relation types of upstream `rs:ln` links dropped.
    pub drop_links: Vec<String>,
    /// Largest ResourceSync document accepted (decompressed).
    pub max_document_bytes: u64,
    /// Largest bitstream accepted.
    pub max_resource_bytes: u64,
    /// Largest ratio of decompressed to compressed bytes before gzip counts as a bomb.
    pub max_decompressed_ratio: u32,
    /// TCP + TLS connect timeout.
    pub connect_timeout: Duration,
    /// From sending the request to receiving the response head.
    pub header_timeout: Duration,
    /// Whole request: redirects, retries and their waits, and the body.
    pub total_timeout: Duration,
    /// Longest pause between two body chunks.
    pub idle_timeout: Duration,
    /// Minimum average body throughput in bytes/s over each `throughput_window` (0: off).
    pub min_throughput: u64,
    /// Window over which `min_throughput` is measured.
    pub throughput_window: Duration,
    /// Retries after the first attempt on 5xx, 429, timeouts and connection errors.
    pub max_retries: u32,
    /// Upper bound of one exponential backoff wait.
    pub max_backoff: Duration,
    /// Upper bound of the wait a server's `Retry-After` parks its origin for (a guard against
    /// absurd values; the wait asked for is honoured in full up to it).
    pub retry_after_cap: Duration,
    /// Upper bound honoured for robots.txt `Crawl-delay`.
    pub crawl_delay_cap: Duration,
    /// Whether Resource and Change Dumps are used when offered.
    pub dumps: bool,
    /// Let URIs resolve to loopback, private, link-local and other non-public addresses.
    /// An operator decision: it exposes the aggregator's own network to the upstream.
    pub allow_private: bool,
    /// Networks treated as public even when `allow_private` is off (e.g. a known intranet
    /// upstream), so one host can be allowed without opening every private address.
    pub allow_networks: Vec<ipnet::IpNet>,
    /// Harvest resources outside the Source's authority (other hosts, or above its path).
    pub allow_outside_authority: bool,
    /// Headers sent to the source's own origin only (`headers_env`), their values read from
    /// the environment.
    pub credentials: Credentials,
    /// What shares one rate and concurrency budget (`politeness`).
    pub politeness: Politeness,
    /// Subscribe to the Source's change notifications (`push`).
    pub push: PushMode,
    /// While subscribed, the source is polled this often (never more often than `poll`): a
    /// safety net for what a hub loses.
    pub push_poll: Duration,
    /// The lease asked of the hub (`hub.lease_seconds`); renewed before it ends.
    pub push_lease: Duration,
    /// How long a subscription may wait for the hub's verification before the source falls
    /// back to polling at `poll`.
    pub push_verify_timeout: Duration,
    /// Largest notification body a delivery may carry (`push_max_body`, default 4 MiB, never
    /// more than `max_document_bytes`).
    pub push_max_body: u64,
    /// Longest a delivery's body may take to arrive (`push_body_timeout`, default 30 s).
    pub push_body_timeout: Duration,
    /// Accept deliveries signed with sha1 (`push_sha1`, default false: sha256 and stronger).
    pub push_sha1: bool,
    /// How long after a renewal is verified a delivery signed with the secret it replaced
    /// still checks (`push_secret_grace`, default 5 minutes).
    pub push_secret_grace: Duration,
    /// Most `sx:history` entries in one item's FeedSync state (`feed_max_history`).
    pub feed_max_history: usize,
    /// Most versions in one item's `sx:conflicts` (`feed_max_conflicts`).
    pub feed_max_conflicts: usize,
    /// How many deletions one pass may apply before they are held for the operator
    /// (`max_deletions`: a count, a percentage of the source's live resources, or
    /// `"unlimited"`; default: more than 50 *and* more than 10% are held).
    pub max_deletions: crate::store::DeletionLimit,
    /// Release a held deletion once this many passes in a row, each at least `poll` apart,
    /// found it (`confirm_deletions`; `None`, the default: only the operator releases them).
    pub confirm_deletions: Option<u32>,
}

impl Default for Settings {
    fn default() -> Self {
        let s = Duration::from_secs;
        Settings {
            source_id: String::new(),
            rate: Rate::Every(Duration::from_millis(200)),
            concurrency: NonZeroU32::new(2).unwrap(),
            poll: s(3600),
            deletes: true,
            keep_links: ["describedby", "describes", "profile", "alternate"].map(String::from).to_vec(),
            drop_links: ["collection", "canonical", "memento", "timegate", "timemap", "duplicate"]
                .map(String::from)
                .to_vec(),
            max_document_bytes: crate::model::SITEMAP_MAX_BYTES,
            max_resource_bytes: 1 << 30,
            max_decompressed_ratio: 250,
            connect_timeout: s(10),
            header_timeout: s(30),
            total_timeout: s(1800),
            idle_timeout: s(30),
            min_throughput: 1024,
            throughput_window: s(30),
            max_retries: 3,
            max_backoff: s(300),
            retry_after_cap: s(7 * 86_400),
            crawl_delay_cap: s(60),
            dumps: true,
            allow_private: false,
            allow_networks: Vec::new(),
            allow_outside_authority: false,
            credentials: Credentials::default(),
            politeness: Politeness::Origin,
            push: PushMode::Auto,
            push_poll: s(6 * 3600),
            push_lease: s(10 * 86_400),
            push_verify_timeout: s(120),
            push_max_body: 4 << 20,
            push_body_timeout: s(30),
            push_sha1: false,
            push_secret_grace: s(300),
            feed_max_history: crate::model::feed::MAX_HISTORY,
            feed_max_conflicts: crate::model::feed::MAX_CONFLICTS,
            max_deletions: crate::store::DeletionLimit::default(),
            confirm_deletions: None,
        }
    }
}

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML, has an unknown key, or a value is wrong.
    #[error("{}:{line}:{column}: `{key}`: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The offending key (or table).
        key: String,
        /// What is wrong, and what is expected.
        message: String,
    },
    /// `--shard` is missing for a file with shards, or names none of them.
    #[error("{message} (shards: {})", known.join(", "))]
    Shard {
        /// What is wrong.
        message: String,
        /// The shards the file defines.
        known: Vec<String>,
    },
    /// A source id asked for (`--source`) names no configured source.
    #[error("no source {id:?} in the configuration (its sources: {})", known.join(", "))]
    UnknownSource {
        /// The id asked for.
        id: String,
        /// The configured source ids.
        known: Vec<String>,
    },
}

impl Config {
    /// Reads and validates `path`; `data_dir_override` (the `--data-dir` flag) replaces
    /// `data_dir` from the file.
    ///
    /// # Errors
    /// [`ConfigError::Read`] when the file cannot be read, [`ConfigError::Invalid`] (with line,
    /// column and key) for any syntax or validation error.
    pub fn load(path: &Path, data_dir_override: Option<&Path>) -> Result<Config, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        Config::parse(&text, path, data_dir_override)
    }

    /// Validates configuration text; `path` names it in errors and anchors relative paths.
    ///
    /// # Errors
    /// As [`Config::load`].
    pub fn parse(text: &str, path: &Path, data_dir_override: Option<&Path>) -> Result<Config, ConfigError> {
        let at = Locator { text, path };
        let raw: RawConfig = toml::from_str(text).map_err(|e| at.de_error(&e))?;
        let mut config = raw.validate(&at)?;
        if let Some(dir) = data_dir_override {
            config.aggregator.data_dir = dir.to_owned();
        }
        Ok(config)
    }

    /// The source with this id.
    pub fn source(&self, id: &str) -> Option<&Source> {
        self.sources.iter().find(|s| s.id == id)
    }

    /// The sources named by `only` (every source when it is empty), in configuration order:
    /// the one place a `--source` selection is checked, by every command that takes one.
    ///
    /// # Errors
    /// [`ConfigError::UnknownSource`] for the first id that names no configured source.
    pub fn select(&self, only: &[String]) -> Result<Vec<&Source>, ConfigError> {
        if let Some(id) = only.iter().find(|id| self.source(id).is_none()) {
            let known = self.sources.iter().map(|s| s.id.clone()).collect();
            return Err(ConfigError::UnknownSource { id: id.clone(), known });
        }
        Ok(self.sources.iter().filter(|s| only.is_empty() || only.contains(&s.id)).collect())
    }

    /// Ids of every set that contains `source_id`: its own set first, then merged sets.
    pub fn sets_containing(&self, source_id: &str) -> Vec<&str> {
        let own = self.source(source_id).map(|s| s.id.as_str());
        own.into_iter()
            .chain(self.sets.iter().filter(|s| s.sources.iter().any(|m| m == source_id)).map(|s| s.id.as_str()))
            .collect()
    }
}

/// Turns byte spans into `file:line:column` errors.
pub(crate) struct Locator<'a> {
    text: &'a str,
    path: &'a Path,
}

impl Locator<'_> {
    /// An error at `span` about `key`.
    pub(crate) fn error(&self, span: Range<usize>, key: &str, message: impl fmt::Display) -> ConfigError {
        let (line, column) = line_col(self.text, span.start);
        ConfigError::Invalid {
            path: self.path.to_owned(),
            line,
            column,
            key: key.to_owned(),
            message: message.to_string(),
        }
    }

    fn de_error(&self, e: &toml::de::Error) -> ConfigError {
        let span = e.span().unwrap_or(0..0);
        let key = key_at(self.text, span.clone());
        self.error(span, &key, e.message().trim())
    }

    /// Resolves a relative path in the file against the file's directory.
    pub(crate) fn relative_path(&self, p: &str) -> PathBuf {
        let p = Path::new(p);
        match self.path.parent() {
            Some(dir) if p.is_relative() && !dir.as_os_str().is_empty() => dir.join(p),
            _ => p.to_owned(),
        }
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// The key a serde error points at: the span's own text when it is a bare key, otherwise the
/// key on the left of `=` on the span's line, otherwise the table header.
fn key_at(text: &str, span: Range<usize>) -> String {
    let start = span.start.min(text.len());
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let line = &text[line_start..line_end];
    let spanned = text.get(span.clone()).unwrap_or("").trim();
    let is_key = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "_-.\"".contains(c));
    if is_key(spanned) && line[start - line_start..].trim_start().starts_with(spanned) && line.contains('=') {
        let before_eq = line.split('=').next().unwrap_or("").trim();
        if before_eq == spanned {
            return spanned.trim_matches('"').to_owned();
        }
    }
    match line.split_once('=') {
        Some((k, _)) if is_key(k.trim()) => k.trim().trim_matches('"').to_owned(),
        _ => line.trim().trim_start_matches('[').trim_end_matches(']').trim_matches(['[', ']']).to_owned(),
    }
}
