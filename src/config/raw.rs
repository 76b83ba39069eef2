//! The file as serde reads it (unknown keys rejected), and its validation into [`Config`].
//!
//! `[defaults]` and `[[source]]` share every settings key. serde cannot combine `flatten`
//! with `deny_unknown_fields` (nor keep spans through `flatten`), so a macro writes the shared
//! fields into both structs instead.

use std::collections::HashSet;
use std::num::NonZeroU32;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;
use url::Url;

use super::values::{parse_duration, parse_rate, parse_size};
use super::{
    Aggregator, Config, ConfigError, FeedContent, FeedSource, Locator, Politeness, Publishing, PushChannel, PushMode,
    SetDef, Settings, Source,
};
use crate::model::SITEMAP_MAX_ENTRIES;

type Result<T> = std::result::Result<T, ConfigError>;

/// A size written as a number of bytes or as text with a unit.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum SizeValue {
    Bytes(i64),
    Text(String),
}

/// A count written as a number, or as text: a number, a percentage, or a word.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum CountValue {
    Count(i64),
    Text(String),
}

macro_rules! settings_struct {
    ($(#[$meta:meta])* $name:ident { $($field:ident : $ty:ty),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub(super) struct $name {
            $(pub(super) $field: $ty,)*
            rate: Option<Spanned<String>>,
            concurrency: Option<Spanned<i64>>,
            poll: Option<Spanned<String>>,
            deletes: Option<bool>,
            keep_links: Option<Spanned<Vec<String>>>,
            drop_links: Option<Spanned<Vec<String>>>,
            max_document_bytes: Option<Spanned<SizeValue>>,
            max_resource_bytes: Option<Spanned<SizeValue>>,
            max_decompressed_ratio: Option<Spanned<i64>>,
            connect_timeout: Option<Spanned<String>>,
            header_timeout: Option<Spanned<String>>,
            total_timeout: Option<Spanned<String>>,
            idle_timeout: Option<Spanned<String>>,
            min_throughput: Option<Spanned<SizeValue>>,
            throughput_window: Option<Spanned<String>>,
            max_retries: Option<Spanned<i64>>,
            max_backoff: Option<Spanned<String>>,
            retry_after_cap: Option<Spanned<String>>,
            crawl_delay_cap: Option<Spanned<String>>,
            dumps: Option<bool>,
            allow_private: Option<bool>,
            allow_networks: Option<Spanned<Vec<String>>>,
            allow_outside_authority: Option<bool>,
            headers_env: Option<Spanned<std::collections::BTreeMap<String, Spanned<String>>>>,
            politeness: Option<Spanned<String>>,
            push: Option<Spanned<String>>,
            push_poll: Option<Spanned<String>>,
            push_lease: Option<Spanned<String>>,
            push_verify_timeout: Option<Spanned<String>>,
            push_max_body: Option<Spanned<SizeValue>>,
            push_body_timeout: Option<Spanned<String>>,
            push_sha1: Option<bool>,
            push_secret_grace: Option<Spanned<String>>,
            feed_max_history: Option<Spanned<i64>>,
            feed_max_conflicts: Option<Spanned<i64>>,
            max_deletions: Option<Spanned<CountValue>>,
            confirm_deletions: Option<Spanned<i64>>,
        }

        impl $name {
            /// Applies the keys present here over `base`.
            fn apply(&self, base: &Settings, at: &Locator<'_>) -> Result<Settings> {
                let mut s = base.clone();
                if let Some(v) = &self.rate { s.rate = at.value(v, "rate", |t| parse_rate(t))?; }
                if let Some(v) = &self.concurrency { s.concurrency = at.nonzero(v, "concurrency", 1024)?; }
                if let Some(v) = &self.poll { s.poll = at.duration(v, "poll")?; }
                if let Some(v) = self.deletes { s.deletes = v; }
                if let Some(v) = &self.keep_links { s.keep_links = v.get_ref().clone(); }
                if let Some(v) = &self.drop_links { s.drop_links = v.get_ref().clone(); }
                if let Some(v) = &self.max_document_bytes { s.max_document_bytes = at.size(v, "max_document_bytes")?; }
                if let Some(v) = &self.max_resource_bytes { s.max_resource_bytes = at.size(v, "max_resource_bytes")?; }
                if let Some(v) = &self.max_decompressed_ratio {
                    s.max_decompressed_ratio = at.int(v, "max_decompressed_ratio", 1, 1_000_000)?;
                }
                if let Some(v) = &self.connect_timeout { s.connect_timeout = at.duration(v, "connect_timeout")?; }
                if let Some(v) = &self.header_timeout { s.header_timeout = at.duration(v, "header_timeout")?; }
                if let Some(v) = &self.total_timeout { s.total_timeout = at.duration(v, "total_timeout")?; }
                if let Some(v) = &self.idle_timeout { s.idle_timeout = at.duration(v, "idle_timeout")?; }
                if let Some(v) = &self.min_throughput { s.min_throughput = at.size_or_zero(v, "min_throughput")?; }
                if let Some(v) = &self.throughput_window {
                    s.throughput_window = at.duration(v, "throughput_window")?;
                }
                if let Some(v) = &self.max_retries { s.max_retries = at.int(v, "max_retries", 0, 100)?; }
                if let Some(v) = &self.max_backoff { s.max_backoff = at.duration(v, "max_backoff")?; }
                if let Some(v) = &self.retry_after_cap { s.retry_after_cap = at.duration(v, "retry_after_cap")?; }
                if let Some(v) = &self.crawl_delay_cap { s.crawl_delay_cap = at.duration(v, "crawl_delay_cap")?; }
                if let Some(v) = self.dumps { s.dumps = v; }
                if let Some(v) = self.allow_private { s.allow_private = v; }
                if let Some(v) = &self.allow_networks { s.allow_networks = at.networks(v)?; }
                if let Some(v) = self.allow_outside_authority { s.allow_outside_authority = v; }
                if let Some(v) = &self.headers_env { s.credentials.headers = at.headers_env(v)?; }
                if let Some(v) = &self.politeness { s.politeness = at.value(v, "politeness", parse_politeness)?; }
                if let Some(v) = &self.push { s.push = at.value(v, "push", parse_push)?; }
                if let Some(v) = &self.push_poll { s.push_poll = at.duration(v, "push_poll")?; }
                if let Some(v) = &self.push_lease { s.push_lease = at.lease(v)?; }
                if let Some(v) = &self.push_verify_timeout {
                    s.push_verify_timeout = at.duration(v, "push_verify_timeout")?;
                }
                if let Some(v) = &self.push_max_body { s.push_max_body = at.size(v, "push_max_body")?; }
                if let Some(v) = &self.push_body_timeout {
                    s.push_body_timeout = at.duration(v, "push_body_timeout")?;
                }
                if let Some(v) = self.push_sha1 { s.push_sha1 = v; }
                if let Some(v) = &self.push_secret_grace {
                    s.push_secret_grace = at.duration(v, "push_secret_grace")?;
                }
                if let Some(v) = &self.feed_max_history {
                    s.feed_max_history = at.int(v, "feed_max_history", 1, 1_000_000)? as usize;
                }
                if let Some(v) = &self.feed_max_conflicts {
                    s.feed_max_conflicts = at.int(v, "feed_max_conflicts", 0, 100_000)? as usize;
                }
                if let Some(v) = &self.max_deletions { s.max_deletions = at.deletion_limit(v)?; }
                if let Some(v) = &self.confirm_deletions {
                    s.confirm_deletions = Some(at.int(v, "confirm_deletions", 1, 1_000)?);
                }
                check_links(&s, self.keep_links.as_ref().or(self.drop_links.as_ref()), at)?;
                Ok(s)
            }
        }
    };
}

settings_struct!(
    #[derive(Default)]
    RawDefaults {}
);
settings_struct!(RawSource {
    id: Spanned<String>,
    url: Option<Spanned<String>>,
    capability_list: Option<Spanned<String>>,
    feed: Option<Spanned<String>>,
    feeds: Option<Spanned<Vec<Spanned<String>>>>,
    feed_content: Option<Spanned<String>>,
    oai: Option<Spanned<String>>,
    metadata_prefix: Option<Spanned<String>>,
    oai_sets: Option<Spanned<Vec<Spanned<String>>>>,
    oai_relist: Option<Spanned<String>>,
    oai_objects: Option<Spanned<bool>>,
    shard: Option<Spanned<String>>,
    push_hub: Option<Spanned<String>>,
    push_topic: Option<Spanned<String>>,
});

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAggregator {
    base_url: Option<Spanned<String>>,
    listen: Option<Spanned<String>>,
    data_dir: Option<String>,
    user_agent: Option<Spanned<String>>,
    store_cache_mb: Option<Spanned<i64>>,
    max_concurrent_sources: Option<Spanned<i64>>,
    endpoint_id: Option<Spanned<String>>,
    hub: Option<Spanned<String>>,
    public_url: Option<Spanned<String>>,
    blobs: Option<Spanned<String>>,
    blobs_create_bucket: Option<Spanned<bool>>,
    blobs_gc_grace: Option<Spanned<String>>,
    blobs_presign: Option<Spanned<bool>>,
    proxy: Option<Spanned<String>>,
    oai_name: Option<Spanned<String>>,
    oai_admin_email: Option<Spanned<String>>,
    oai_repository_identifier: Option<Spanned<String>>,
    oai_page_size: Option<Spanned<i64>>,
    oai_token_lifetime: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSet {
    id: Spanned<String>,
    sources: Spanned<Vec<Spanned<String>>>,
}

/// `[publish]`: the shape of the documents Tributary serves.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPublish {
    resource_list_entries: Option<Spanned<i64>>,
    change_list_events: Option<Spanned<i64>>,
    change_list_period: Option<Spanned<String>>,
    dump_package_entries: Option<Spanned<i64>>,
    dump_package_size: Option<Spanned<SizeValue>>,
    dump_max_age: Option<Spanned<String>>,
    dumps: Option<Spanned<bool>>,
}

impl RawPublish {
    /// `bucket`: whether `[aggregator] blobs` puts the bitstreams in a bucket, which turns
    /// dumps off unless `dumps` is given.
    fn validate(&self, at: &Locator<'_>, bucket: bool) -> Result<Publishing> {
        let mut p = Publishing { dumps: !bucket, ..Publishing::default() };
        if let Some(v) = &self.dumps {
            p.dumps = *v.get_ref();
        }
        // The sitemap protocol's limit: no list or part may hold more.
        let max = u32::try_from(SITEMAP_MAX_ENTRIES).unwrap_or(u32::MAX);
        if let Some(v) = &self.resource_list_entries {
            p.resource_list_entries = at.int(v, "resource_list_entries", 1, max)? as usize;
        }
        if let Some(v) = &self.change_list_events {
            p.change_list_events = u64::from(at.int(v, "change_list_events", 1, max)?);
        }
        if let Some(v) = &self.change_list_period {
            p.change_list_period = match v.get_ref().trim() {
                "none" => None,
                _ => Some(at.duration(v, "change_list_period")?).filter(|d| !d.is_zero()),
            };
            if v.get_ref().trim() != "none" && p.change_list_period.is_none() {
                return Err(at.error(v.span(), "change_list_period", "must be longer than 0 (or \"none\")"));
            }
        }
        // A package's manifest is a Sitemap document: the same limit.
        if let Some(v) = &self.dump_package_entries {
            p.dump_package_entries = at.int(v, "dump_package_entries", 1, max)? as usize;
        }
        if let Some(v) = &self.dump_package_size {
            p.dump_package_size = at.size(v, "dump_package_size")?;
        }
        if let Some(v) = &self.dump_max_age {
            p.dump_max_age = at.duration(v, "dump_max_age")?;
        }
        Ok(p)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    aggregator: Option<Spanned<RawAggregator>>,
    #[serde(default)]
    publish: RawPublish,
    #[serde(default)]
    defaults: RawDefaults,
    #[serde(default)]
    source: Vec<Spanned<RawSource>>,
    #[serde(default)]
    set: Vec<Spanned<RawSet>>,
    #[serde(default)]
    simulate: Vec<Spanned<super::simulate::RawSimulate>>,
    #[serde(default)]
    shards: std::collections::BTreeMap<String, Spanned<super::shard::RawShard>>,
    #[serde(default)]
    hub: super::hub::RawHub,
    #[serde(default)]
    server: super::server::RawServer,
}

impl RawConfig {
    pub(super) fn validate(self, at: &Locator<'_>) -> Result<Config> {
        let Some(agg) = &self.aggregator else {
            return Err(at.error(0..0, "aggregator", "the [aggregator] table is missing (base_url and user_agent)"));
        };
        let aggregator = validate_aggregator(agg, at)?;
        let publish = self.publish.validate(at, aggregator.blobs.is_some())?;
        let defaults = self.defaults.apply(&Settings::default(), at)?;
        let shards = super::shard::validate_all(&self.shards, at)?;
        let mut ids = HashSet::new();
        let mut sources = Vec::with_capacity(self.source.len());
        for raw in &self.source {
            let s = raw.get_ref();
            check_id(&s.id, &mut ids, at)?;
            let oai = super::oai::validate(raw, at)?;
            let (url, feed) = match &oai {
                Some(o) => (o.base.clone(), None),
                None => source_kind(raw, at)?,
            };
            let capability_list = s.capability_list.as_ref().map(|c| at.http_url(c, "capability_list")).transpose()?;
            let mut settings = s.apply(&defaults, at)?;
            settings.source_id = s.id.get_ref().clone();
            settings.credentials.origin = Some(url.origin().ascii_serialization());
            if s.dumps.is_none() && self.defaults.dumps.is_none() && shares_bucket(&aggregator, &shards, &url) {
                settings.dumps = false;
            }
            let links_given = [&s.keep_links, &s.drop_links, &self.defaults.keep_links, &self.defaults.drop_links];
            if oai.is_some() && links_given.iter().all(|l| l.is_none()) {
                super::oai::keep_collection_links(&mut settings);
            }
            let shard = super::shard::check_member(s.shard.as_ref(), &s.id, "source", &shards, at)?;
            let push = push_channel(s, feed.is_some() || oai.is_some(), at)?;
            let id = s.id.get_ref().clone();
            sources.push(Source { id, url, capability_list, feed, oai, settings, shard, push });
        }
        let source_ids: HashSet<&str> = sources.iter().map(|s| s.id.as_str()).collect();
        let sets =
            self.set.iter().map(|raw| validate_set(raw.get_ref(), &source_ids, &mut ids, at)).collect::<Result<_>>()?;
        let simulators = super::simulate::validate_all(&self.simulate, &shards, at)?;
        let hub = self.hub.validate(at)?;
        let server = self.server.validate(at)?;
        Ok(Config {
            path: at.path.to_owned(),
            aggregator,
            publish,
            defaults,
            sources,
            sets,
            simulators,
            shards,
            hub,
            server,
        })
    }
}

/// Whether a source is one of the file's own shards (its `url` under a shard's `base_url`)
/// and the instances keep their bitstreams in a bucket, which they all share. Such a source
/// does not use dumps unless asked to: a dump's packages carry every bitstream, while the
/// lists let the harvester ask the bucket for each declared sha-256 first and fetch nothing it
/// holds (CONFIGURATION.md, `dumps`).
fn shares_bucket(aggregator: &Aggregator, shards: &[super::shard::ShardDef], url: &Url) -> bool {
    aggregator.blobs.is_some()
        && shards.iter().filter_map(|s| s.base_url.as_ref()).any(|base| url.as_str().starts_with(base.as_str()))
}

/// A source is a ResourceSync Source (`url`) or a feed (`feed`), never both.
fn source_kind(raw: &Spanned<RawSource>, at: &Locator<'_>) -> Result<(Url, Option<FeedSource>)> {
    let s = raw.get_ref();
    let feeds = feed_urls(s, at)?;
    match (&s.url, feeds) {
        (Some(u), None) => {
            if let Some(c) = &s.feed_content {
                return Err(at.error(c.span(), "feed_content", "feed_content is for feed sources (`feed = ...`)"));
            }
            Ok((at.http_url(u, "url")?, None))
        }
        (None, Some(urls)) => {
            if let Some(c) = &s.capability_list {
                return Err(at.error(c.span(), "capability_list", "a feed source has no Capability List"));
            }
            let content = s.feed_content.as_ref().map(|c| at.value(c, "feed_content", parse_feed_content));
            let content = content.transpose()?.unwrap_or_default();
            Ok((urls[0].clone(), Some(FeedSource { urls, content })))
        }
        (Some(_), Some(_)) => {
            let span = s.feed.as_ref().map(Spanned::span).or_else(|| s.feeds.as_ref().map(Spanned::span));
            let why = "a source has either `url` (ResourceSync) or `feed`, not both";
            Err(at.error(span.unwrap_or_else(|| raw.span()), "feed", why))
        }
        (None, None) => Err(at.error(
            raw.span(),
            "url",
            "a source needs `url` (a ResourceSync Source) or `feed` (an Atom or RSS feed)",
        )),
    }
}

/// `feed = URL` or `feeds = [URL, …]` (at least one, each once), or neither.
fn feed_urls(s: &RawSource, at: &Locator<'_>) -> Result<Option<Vec<Url>>> {
    match (&s.feed, &s.feeds) {
        (Some(f), None) => Ok(Some(vec![at.http_url(f, "feed")?])),
        (None, Some(list)) => {
            let mut urls: Vec<Url> = Vec::new();
            for f in list.get_ref() {
                let u = at.http_url(f, "feeds")?;
                if urls.contains(&u) {
                    return Err(at.error(f.span(), "feeds", format!("{u} is listed twice")));
                }
                urls.push(u);
            }
            if urls.is_empty() {
                return Err(at.error(list.span(), "feeds", "lists no feed"));
            }
            Ok(Some(urls))
        }
        (Some(_), Some(list)) => {
            Err(at.error(list.span(), "feeds", "use `feed` for one feed or `feeds` for several, not both"))
        }
        (None, None) => Ok(None),
    }
}

/// `push_hub` / `push_topic`: either may be given, each overriding what the Capability List
/// says; a feed or OAI-PMH source has no notification channel.
fn push_channel(s: &RawSource, feed: bool, at: &Locator<'_>) -> Result<PushChannel> {
    let hub = s.push_hub.as_ref().map(|v| at.http_url(v, "push_hub")).transpose()?;
    let topic = s.push_topic.as_ref().map(|v| at.http_url(v, "push_topic")).transpose()?;
    if feed && let Some(v) = s.push_hub.as_ref().or(s.push_topic.as_ref()) {
        let key = if s.push_hub.is_some() { "push_hub" } else { "push_topic" };
        return Err(at.error(v.span(), key, "a feed or OAI-PMH source has no ResourceSync notification channel"));
    }
    Ok(PushChannel { hub, topic })
}

fn parse_push(text: &str) -> std::result::Result<PushMode, String> {
    match text.trim() {
        "auto" => Ok(PushMode::Auto),
        "off" => Ok(PushMode::Off),
        other => Err(format!("`{other}` is not one of auto, off")),
    }
}

fn parse_politeness(text: &str) -> std::result::Result<Politeness, String> {
    match text.trim() {
        "origin" => Ok(Politeness::Origin),
        "ip" => Ok(Politeness::Ip),
        other => Err(format!("`{other}` is not one of origin, ip")),
    }
}

fn parse_feed_content(text: &str) -> std::result::Result<FeedContent, String> {
    match text {
        "item" => Ok(FeedContent::Item),
        "enclosure" => Ok(FeedContent::Enclosure),
        "link" => Ok(FeedContent::Link),
        other => Err(format!("`{other}` is not one of item, enclosure, link")),
    }
}

fn validate_aggregator(agg: &Spanned<RawAggregator>, at: &Locator<'_>) -> Result<Aggregator> {
    let a = agg.get_ref();
    let table = agg.span();
    let Some(base) = &a.base_url else {
        return Err(at.error(table, "base_url", "[aggregator] needs base_url, the prefix of every URI republished"));
    };
    let mut base_url = at.http_url(base, "base_url")?;
    if !base_url.path().ends_with('/') {
        let path = format!("{}/", base_url.path());
        base_url.set_path(&path);
    }
    let Some(ua) = &a.user_agent else {
        return Err(at.error(table, "user_agent", USER_AGENT_HELP));
    };
    check_user_agent(ua, at)?;
    let listen = match &a.listen {
        None => "127.0.0.1:8080".parse().map_err(|_| at.error(table.clone(), "listen", "bad default"))?,
        Some(l) => l.get_ref().trim().parse().map_err(|_| {
            at.error(
                l.span(),
                "listen",
                format!("invalid address {:?}: expected IP:port, e.g. \"127.0.0.1:8080\"", l.get_ref()),
            )
        })?,
    };
    let data_dir = at.relative_path(a.data_dir.as_deref().unwrap_or("store"));
    let store_cache_mb = match &a.store_cache_mb {
        Some(v) => at.int(v, "store_cache_mb", 1, 65_536)?,
        None => DEFAULT_STORE_CACHE_MB,
    };
    let max_concurrent_sources = match &a.max_concurrent_sources {
        Some(v) => at.int(v, "max_concurrent_sources", 1, MAX_CONCURRENT_SOURCES)? as usize,
        None => DEFAULT_CONCURRENT_SOURCES,
    };
    let user_agent = ua.get_ref().trim().to_owned();
    let public_url = match &a.public_url {
        Some(v) => with_slash(at.http_url(v, "public_url")?),
        None => base_url.clone(),
    };
    let endpoint_id = match &a.endpoint_id {
        Some(v) => at.value(v, "endpoint_id", check_nss)?,
        None => default_endpoint_id(&base_url),
    };
    let hub = a.hub.as_ref().map(|h| at.http_url(h, "hub")).transpose()?;
    let blobs = validate_blobs(a, at)?;
    let proxy = a.proxy.as_ref().map(|p| at.http_url(p, "proxy")).transpose()?;
    let oai_keys = super::oai_serve::RawOaiKeys {
        name: a.oai_name.as_ref(),
        admin_email: a.oai_admin_email.as_ref(),
        repository_identifier: a.oai_repository_identifier.as_ref(),
        page_size: a.oai_page_size.as_ref(),
        token_lifetime: a.oai_token_lifetime.as_ref(),
    };
    let oai = super::oai_serve::validate(&oai_keys, &base_url, table, at)?;
    Ok(Aggregator {
        base_url,
        listen,
        data_dir,
        user_agent,
        store_cache_mb,
        max_concurrent_sources,
        endpoint_id,
        hub,
        public_url,
        blobs,
        proxy,
        oai,
    })
}

/// A URL prefix always ends with `/`, so relative paths join under it.
pub(super) fn with_slash(mut url: Url) -> Url {
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    url
}

/// `blobs = "s3://BUCKET/PREFIX"` and the keys that only mean something with it.
fn validate_blobs(a: &RawAggregator, at: &Locator<'_>) -> Result<Option<crate::store::RemoteBlobs>> {
    let Some(url) = &a.blobs else {
        for (key, span) in [
            ("blobs_create_bucket", a.blobs_create_bucket.as_ref().map(Spanned::span)),
            ("blobs_gc_grace", a.blobs_gc_grace.as_ref().map(Spanned::span)),
            ("blobs_presign", a.blobs_presign.as_ref().map(Spanned::span)),
        ] {
            if let Some(span) = span {
                return Err(at.error(span, key, format!("{key} needs `blobs = \"s3://BUCKET/PREFIX\"`")));
            }
        }
        return Ok(None);
    };
    let mut blobs = at.value(url, "blobs", crate::store::RemoteBlobs::parse)?;
    if let Some(create) = &a.blobs_create_bucket {
        blobs.create_bucket = *create.get_ref();
    }
    if let Some(grace) = &a.blobs_gc_grace {
        blobs.gc_grace = at.duration(grace, "blobs_gc_grace")?;
        // Shorter, a sweep could delete what a put is taking back, or tell a bitstream put again
        // from the tombstone of the one it replaced by less than Last-Modified's whole second.
        if blobs.gc_grace < Duration::from_secs(60) {
            return Err(at.error(grace.span(), "blobs_gc_grace", "must be at least 1m (docs/BUCKET.md)"));
        }
    }
    if let Some(presign) = &a.blobs_presign {
        blobs.presign = *presign.get_ref();
    }
    Ok(Some(blobs))
}

/// FeedSync endpoint ids are the NSS part of a URN (seed `002_…` §2.1, RFC 2141).
fn check_nss(text: &str) -> std::result::Result<String, String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "()+,-.:=@;$_!*'%/?#".contains(c);
    match text.chars().find(|c| !allowed(*c)) {
        _ if text.is_empty() => Err("must not be empty".into()),
        Some(c) => Err(format!("{c:?} is not allowed in a URN's namespace-specific string (RFC 2141)")),
        None => Ok(text.to_owned()),
    }
}

/// The base URL's host and port: unique per aggregator, and already NSS characters.
pub(super) fn default_endpoint_id(base: &Url) -> String {
    let host = base.host_str().unwrap_or("tributary").trim_matches(['[', ']']);
    match base.port() {
        Some(p) => format!("tributary:{host}:{p}"),
        None => format!("tributary:{host}"),
    }
}

/// Sources harvested at once unless the operator says otherwise: enough to keep a slow Source
/// from holding up the rest, few enough that a pass over hundreds of sources does not open
/// hundreds of connections and commit queues together.
const DEFAULT_CONCURRENT_SOURCES: usize = 8;

/// The largest `max_concurrent_sources`: each running source holds its own fetch tasks,
/// connections and commit queue, so a slip of the keyboard must not ask for thousands.
const MAX_CONCURRENT_SOURCES: u32 = 256;

/// The database's block cache by default: decompressed blocks of recently read records, blob
/// rows and index entries. Small, since the kernel's page cache holds the tables already (see
/// docs/STORE.md, "Sizing").
const DEFAULT_STORE_CACHE_MB: u32 = 16;

const USER_AGENT_HELP: &str = "[aggregator] needs user_agent with a contact URL or e-mail address, e.g. \
     \"Tributary/0.1 (+mailto:ops@example.org)\": upstream operators must be able to reach whoever runs this harvester";

fn check_user_agent(ua: &Spanned<String>, at: &Locator<'_>) -> Result<()> {
    let v = ua.get_ref();
    let has_contact = v.contains("+http") || v.contains("mailto:") || v.contains('@');
    if !has_contact {
        return Err(at.error(ua.span(), "user_agent", USER_AGENT_HELP));
    }
    if !v.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(at.error(ua.span(), "user_agent", "must be printable ASCII (it is sent as an HTTP header)"));
    }
    Ok(())
}

fn validate_set(s: &RawSet, source_ids: &HashSet<&str>, ids: &mut HashSet<String>, at: &Locator<'_>) -> Result<SetDef> {
    check_id(&s.id, ids, at)?;
    if s.sources.get_ref().is_empty() {
        return Err(at.error(s.sources.span(), "sources", format!("set {:?} lists no sources", s.id.get_ref())));
    }
    let mut members = Vec::new();
    for m in s.sources.get_ref() {
        let name = m.get_ref();
        if !source_ids.contains(name.as_str()) {
            let msg = format!("set {:?} names unknown source {name:?}", s.id.get_ref());
            return Err(at.error(m.span(), "sources", msg));
        }
        if members.contains(name) {
            return Err(at.error(m.span(), "sources", format!("source {name:?} is listed twice")));
        }
        members.push(name.clone());
    }
    Ok(SetDef { id: s.id.get_ref().clone(), sources: members })
}

/// Ids appear in URLs (`/sets/<id>/…`) and must be unique across sources and sets.
fn check_id(id: &Spanned<String>, seen: &mut HashSet<String>, at: &Locator<'_>) -> Result<()> {
    let v = id.get_ref();
    let mut chars = v.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c));
    if !(first_ok && rest_ok) || v.len() > 64 {
        let msg = format!("invalid id {v:?}: use 1-64 characters [a-z0-9._-], starting with a letter or digit");
        return Err(at.error(id.span(), "id", msg));
    }
    if !seen.insert(v.clone()) {
        return Err(at.error(id.span(), "id", format!("duplicate id {v:?} (ids are unique across sources and sets)")));
    }
    Ok(())
}

fn check_links(s: &Settings, span: Option<&Spanned<Vec<String>>>, at: &Locator<'_>) -> Result<()> {
    match s.keep_links.iter().find(|r| s.drop_links.contains(r)) {
        Some(rel) => {
            let span = span.map_or(0..0, Spanned::span);
            Err(at.error(span, "keep_links", format!("relation {rel:?} is in both keep_links and drop_links")))
        }
        None => Ok(()),
    }
}

impl Locator<'_> {
    fn value<T>(
        &self,
        v: &Spanned<String>,
        key: &str,
        parse: impl Fn(&str) -> std::result::Result<T, String>,
    ) -> Result<T> {
        parse(v.get_ref()).map_err(|m| self.error(v.span(), key, m))
    }

    pub(super) fn duration(&self, v: &Spanned<String>, key: &str) -> Result<Duration> {
        self.value(v, key, parse_duration)
    }

    /// A lease asked of a hub: Change Notification §4.2 recommends 300 s to a month; shorter
    /// ones are allowed down to 10 s for tests, longer ones are refused (WebSub forbids
    /// perpetual leases, and a hub caps what it grants anyway).
    fn lease(&self, v: &Spanned<String>) -> Result<Duration> {
        let d = self.duration(v, "push_lease")?;
        if !(10..=2_678_400).contains(&d.as_secs()) {
            return Err(self.error(v.span(), "push_lease", "must be between 10s and 31days (2678400 s)"));
        }
        Ok(d)
    }

    /// `max_deletions`: `N` (a count), `"N%"` (a share of the live resources) or `"unlimited"`.
    fn deletion_limit(&self, v: &Spanned<CountValue>) -> Result<crate::store::DeletionLimit> {
        use crate::store::DeletionLimit;
        let bad = |m: String| self.error(v.span(), "max_deletions", m);
        let count = |n: i64| u64::try_from(n).map_err(|_| bad(format!("{n} is negative")));
        match v.get_ref() {
            CountValue::Count(n) => Ok(DeletionLimit { count: Some(count(*n)?), percent: None }),
            CountValue::Text(t) if t.trim() == "unlimited" => Ok(DeletionLimit::UNLIMITED),
            CountValue::Text(t) => match t.trim().strip_suffix('%') {
                Some(p) => match p.trim().parse::<f64>() {
                    Ok(p) if (0.0..=100.0).contains(&p) => Ok(DeletionLimit { count: None, percent: Some(p) }),
                    _ => Err(bad(format!("{t:?}: a percentage is 0% to 100%"))),
                },
                None => match t.trim().parse::<i64>() {
                    Ok(n) => Ok(DeletionLimit { count: Some(count(n)?), percent: None }),
                    Err(_) => Err(bad(format!("{t:?}: write a count (50), a percentage (\"10%\") or \"unlimited\""))),
                },
            },
        }
    }

    pub(super) fn int(&self, v: &Spanned<i64>, key: &str, min: u32, max: u32) -> Result<u32> {
        let n = *v.get_ref();
        u32::try_from(n)
            .ok()
            .filter(|n| (min..=max).contains(n))
            .ok_or_else(|| self.error(v.span(), key, format!("{n} is out of range {min}..={max}")))
    }

    fn nonzero(&self, v: &Spanned<i64>, key: &str, max: u32) -> Result<NonZeroU32> {
        let n = self.int(v, key, 1, max)?;
        Ok(NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN))
    }

    fn size(&self, v: &Spanned<SizeValue>, key: &str) -> Result<u64> {
        let parsed = match v.get_ref() {
            SizeValue::Bytes(n) if *n >= 1 => Ok(*n as u64),
            SizeValue::Bytes(n) => Err(format!("{n} is not a positive size")),
            SizeValue::Text(t) => parse_size(t),
        };
        parsed.map_err(|m| self.error(v.span(), key, m))
    }

    fn size_or_zero(&self, v: &Spanned<SizeValue>, key: &str) -> Result<u64> {
        match v.get_ref() {
            SizeValue::Bytes(0) => Ok(0),
            _ => self.size(v, key),
        }
    }

    pub(super) fn http_url(&self, v: &Spanned<String>, key: &str) -> Result<Url> {
        let url = Url::parse(v.get_ref().trim())
            .map_err(|e| self.error(v.span(), key, format!("invalid URL {:?}: {e}", v.get_ref())))?;
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Err(self.error(v.span(), key, format!("{:?} is not an http or https URL", v.get_ref())));
        }
        Ok(url)
    }

    pub(super) fn networks(&self, v: &Spanned<Vec<String>>) -> Result<Vec<ipnet::IpNet>> {
        let parse = |s: &String| {
            s.parse::<ipnet::IpNet>().or_else(|_| s.parse::<std::net::IpAddr>().map(ipnet::IpNet::from)).map_err(|_| {
                self.error(
                    v.span(),
                    "allow_networks",
                    format!("invalid network {s:?}: expected CIDR, e.g. \"10.1.2.0/24\""),
                )
            })
        };
        v.get_ref().iter().map(parse).collect()
    }
}
