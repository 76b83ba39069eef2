//! `sources.toml`: the shipped file loads, settings merge, and every kind of mistake is
//! reported with file, line and key.

use std::path::Path;
use std::time::Duration;

use tributary::config::{Config, ConfigError, Rate};

const HEAD: &str = r#"[aggregator]
base_url = "http://127.0.0.1:8080/"
listen = "127.0.0.1:8080"
data_dir = "store"
user_agent = "Tributary/0.1 (+mailto:ops@example.org)"
"#;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("conf/sources.toml"), None)
}

/// Asserts an `Invalid` error at `line` about `key` whose message contains `needle`, and that
/// the rendered message starts with `file:line:`.
fn assert_invalid(text: &str, line: usize, key: &str, needle: &str) {
    let err = parse(text).expect_err("should be rejected");
    let shown = err.to_string();
    match &err {
        ConfigError::Invalid { line: l, key: k, message, .. } => {
            assert_eq!((*l, k.as_str()), (line, key), "{shown}");
            assert!(message.contains(needle), "{shown}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(shown.starts_with(&format!("conf/sources.toml:{line}:")), "{shown}");
    assert!(shown.contains(&format!("`{key}`")), "{shown}");
}

#[test]
fn shipped_sources_toml_loads() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("sources.toml");
    let c = Config::load(&path, None).unwrap();
    assert!(c.aggregator.user_agent.contains("mailto:"));
    assert_eq!(c.aggregator.base_url.as_str(), "http://127.0.0.1:8080/");
    assert!(c.sources.len() >= 2);
    assert!(c.sources.iter().all(|s| s.settings.allow_private));
    assert_eq!(c.defaults.rate, Rate::Every(Duration::from_millis(200)));
    // The demo's simulators run on this machine: no politeness needed towards ourselves.
    assert_eq!(c.sources[0].settings.rate, Rate::Unlimited);
    assert!(!c.sets.is_empty());
    assert_eq!(c.aggregator.data_dir, path.parent().unwrap().join("store"));
}

#[test]
fn contract_example_loads_and_merges_overrides() {
    let text = format!(
        "{HEAD}[defaults]\nrate = \"5/s\"\nconcurrency = 4\npoll = \"10m\"\ndeletes = true\n\
         [[source]]\nid = \"museum-a\"\nurl = \"https://museum-a.example.org/.well-known/resourcesync\"\nallow_private = false\n\
         [[source]]\nid = \"museum-b\"\nurl = \"https://b.example.org/\"\nrate = \"30/min\"\ndeletes = false\nmax_document_bytes = 1000\n\
         [[set]]\nid = \"art\"\nsources = [\"museum-a\", \"museum-b\"]\n"
    );
    let c = parse(&text).unwrap();
    let (a, b) = (&c.sources[0].settings, &c.sources[1].settings);
    assert_eq!(
        (a.rate, a.concurrency.get(), a.poll, a.deletes),
        (Rate::Every(Duration::from_millis(200)), 4, Duration::from_secs(600), true)
    );
    assert_eq!(
        (b.rate, b.concurrency.get(), b.deletes, b.max_document_bytes),
        (Rate::Every(Duration::from_secs(2)), 4, false, 1000)
    );
    assert_eq!(c.sets[0].sources, ["museum-a", "museum-b"]);
    assert_eq!(c.sets_containing("museum-b"), ["museum-b", "art"]);
    assert_eq!(c.aggregator.data_dir, Path::new("conf/store"));
}

#[test]
fn data_dir_override_wins() {
    let c = Config::parse(HEAD, Path::new("x.toml"), Some(Path::new("/tmp/elsewhere"))).unwrap();
    assert_eq!(c.aggregator.data_dir, Path::new("/tmp/elsewhere"));
}

#[test]
fn missing_file_is_a_read_error() {
    let err = Config::load(Path::new("/nonexistent/sources.toml"), None).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }));
    assert!(err.to_string().contains("/nonexistent/sources.toml"));
}

#[test]
fn syntax_error() {
    assert_invalid(&format!("{HEAD}[defaults]\nrate = \"5/s\n"), 7, "rate", "");
}

#[test]
fn unknown_keys_everywhere() {
    assert_invalid(&format!("{HEAD}[defaults]\nrat = \"5/s\"\n"), 7, "rat", "unknown field");
    assert_invalid(&format!("{HEAD}colour = \"red\"\n"), 6, "colour", "unknown field");
    let src = "[[source]]\nid = \"a\"\nurl = \"http://a.example/\"\nallow_privat = true\n";
    assert_invalid(&format!("{HEAD}{src}"), 9, "allow_privat", "unknown field");
    assert_invalid(&format!("{HEAD}[extra]\nx = 1\n"), 6, "extra", "unknown field");
}

#[test]
fn user_agent_is_required_with_contact() {
    let no_ua = "[aggregator]\nbase_url = \"http://127.0.0.1:8080/\"\n";
    assert_invalid(no_ua, 1, "user_agent", "contact");
    let bare = "[aggregator]\nbase_url = \"http://x.example/\"\nuser_agent = \"Tributary/0.1\"\n";
    assert_invalid(bare, 3, "user_agent", "contact URL or e-mail");
    assert_invalid("[defaults]\nrate = \"5/s\"\n", 1, "aggregator", "missing");
    for ok in ["T/1 (+https://x.example/bot)", "T/1 (mailto:a@b.example)", "T/1 ops@b.example"] {
        let text = format!("[aggregator]\nbase_url = \"http://x.example/\"\nuser_agent = \"{ok}\"\n");
        assert!(parse(&text).is_ok(), "{ok}");
    }
}

#[test]
fn bad_values_point_at_their_line() {
    assert_invalid(&format!("{HEAD}[defaults]\npoll = \"ten minutes\"\n"), 7, "poll", "invalid duration");
    assert_invalid(
        &format!("{HEAD}[defaults]\n\nrate = \"5/hour\"\n"),
        8,
        "rate",
        "\"N/s\", \"N/min\" or \"unlimited\"",
    );
    assert_invalid(&format!("{HEAD}[defaults]\nconcurrency = 0\n"), 7, "concurrency", "out of range");
    assert_invalid(
        &format!("{HEAD}[defaults]\nmax_document_bytes = \"5 XB\"\n"),
        7,
        "max_document_bytes",
        "invalid size",
    );
    assert_invalid(&format!("{HEAD}[defaults]\nconcurrency = \"4\"\n"), 7, "concurrency", "invalid type");
    let src = "[[source]]\nid = \"a\"\nurl = \"ftp://a.example/\"\n";
    assert_invalid(&format!("{HEAD}{src}"), 8, "url", "not an http or https URL");
    let src = "[[source]]\nid = \"a\"\nurl = \"http://a.example/\"\nheader_timeout = \"soon\"\n";
    assert_invalid(&format!("{HEAD}{src}"), 9, "header_timeout", "invalid duration");
    assert_invalid(
        &format!("{HEAD}listen = \"localhost\"\n").replace("listen = \"127.0.0.1:8080\"\n", ""),
        5,
        "listen",
        "IP:port",
    );
    let both = format!("{HEAD}[defaults]\nkeep_links = [\"canonical\"]\n");
    assert_invalid(&both, 7, "keep_links", "both keep_links and drop_links");
}

#[test]
fn ids_are_checked_and_unique_across_sources_and_sets() {
    let two =
        "[[source]]\nid = \"a\"\nurl = \"http://a.example/\"\n[[source]]\nid = \"a\"\nurl = \"http://b.example/\"\n";
    assert_invalid(&format!("{HEAD}{two}"), 10, "id", "duplicate id \"a\"");
    let clash = "[[source]]\nid = \"a\"\nurl = \"http://a.example/\"\n[[set]]\nid = \"a\"\nsources = [\"a\"]\n";
    assert_invalid(&format!("{HEAD}{clash}"), 10, "id", "unique across sources and sets");
    let bad = "[[source]]\nid = \"Museum A\"\nurl = \"http://a.example/\"\n";
    assert_invalid(&format!("{HEAD}{bad}"), 7, "id", "invalid id");
}

#[test]
fn set_naming_an_unknown_source() {
    let text =
        "[[source]]\nid = \"a\"\nurl = \"http://a.example/\"\n[[set]]\nid = \"s\"\nsources = [\"a\",\n  \"ghost\"]\n";
    assert_invalid(&format!("{HEAD}{text}"), 12, "sources", "unknown source \"ghost\"");
}

#[test]
fn missing_required_source_keys() {
    let text = format!("{HEAD}[[source]]\nid = \"a\"\n");
    let err = parse(&text).unwrap_err().to_string();
    assert!(err.starts_with("conf/sources.toml:6:") && err.contains("needs `url`"), "{err}");
}

#[test]
fn duplicate_keys_are_syntax_errors() {
    assert_invalid(&format!("{HEAD}[defaults]\nrate = \"5/s\"\nrate = \"1/s\"\n"), 8, "rate", "duplicate key");
}

#[test]
fn publish_table_shapes_the_served_documents() {
    let defaults = parse(HEAD).unwrap().publish;
    assert_eq!(defaults.resource_list_entries, 50_000);
    assert_eq!(defaults.change_list_events, 1_000);
    assert_eq!(defaults.change_list_period, Some(Duration::from_secs(86_400)));
    let text =
        format!("{HEAD}[publish]\nresource_list_entries = 10\nchange_list_events = 5\nchange_list_period = \"1h\"\n");
    let p = parse(&text).unwrap().publish;
    assert_eq!((p.resource_list_entries, p.change_list_events), (10, 5));
    assert_eq!(p.change_list_period, Some(Duration::from_secs(3_600)));
    let by_count = parse(&format!("{HEAD}[publish]\nchange_list_period = \"none\"\n")).unwrap();
    assert_eq!(by_count.publish.change_list_period, None);

    let over = format!("{HEAD}[publish]\nresource_list_entries = 50001\n");
    assert_invalid(&over, 7, "resource_list_entries", "out of range");
    assert_invalid(&format!("{HEAD}[publish]\nchange_list_events = 0\n"), 7, "change_list_events", "out of range");
    assert_invalid(
        &format!("{HEAD}[publish]\nchange_list_period = \"0s\"\n"),
        7,
        "change_list_period",
        "longer than 0",
    );
    assert_invalid(&format!("{HEAD}[publish]\nparts = 3\n"), 7, "parts", "unknown field");
}

/// Dumps are published by default, but not from a bucket (a package is a local copy of every
/// bitstream) unless asked for; `dumps = false` turns them off anywhere.
#[test]
fn publish_dumps_default_to_off_with_a_bucket_only() {
    assert!(parse(HEAD).unwrap().publish.dumps);
    assert!(!parse(&format!("{HEAD}[publish]\ndumps = false\n")).unwrap().publish.dumps);
    let bucket = format!("{HEAD}blobs = \"s3://bits\"\n");
    assert!(!parse(&bucket).unwrap().publish.dumps);
    assert!(parse(&format!("{bucket}[publish]\ndumps = true\n")).unwrap().publish.dumps);
    assert_invalid(&format!("{HEAD}[publish]\ndumps = \"no\"\n"), 7, "dumps", "");
}

#[test]
fn shipped_sources_toml_starts_its_simulated_sources() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("sources.toml");
    let c = Config::load(&path, None).unwrap();
    assert!(c.simulators.len() >= 2, "the offline demo needs simulated Sources");
    assert!(c.simulators.iter().any(|s| s.via_origin.is_some()), "one poses as an upstream aggregator");
    for sim in &c.simulators {
        assert!(sim.listen.ip().is_loopback());
        let url = format!("http://{}/", sim.listen);
        assert!(c.sources.iter().any(|s| s.url.as_str().starts_with(&url)), "{url} is harvested by a [[source]]");
    }
    assert!(c.sets.iter().any(|s| s.sources.len() >= 2), "a merged set over two sources");
}

#[test]
fn simulate_tables_are_validated() {
    let ok = format!(
        "{HEAD}[[simulate]]\nid = \"s\"\nlisten = \"127.0.0.1:8091\"\nresources = 10\nmax_size = \"4 KiB\"\n\
         change_rate = 2.5\nmix = \"1,2,3\"\nrollover_period = \"30s\"\nvia_origin = \"http://o.example.org/\"\n"
    );
    let sim = &parse(&ok).unwrap().simulators[0];
    assert_eq!((sim.resources, sim.max_size, sim.change_rate, sim.mix), (10, 4096, 2.5, [1, 2, 3]));
    assert_eq!((sim.min_size, sim.seed, sim.list_limit, sim.dump), (100, 1, 50_000, false));
    assert_eq!(sim.rollover_period, Some(Duration::from_secs(30)));

    let sim = |body: &str| format!("{HEAD}[[simulate]]\nid = \"s\"\n{body}\n");
    assert_invalid(&sim("listen = \"127.0.0.1:8091\"\nrate = 3"), 9, "rate", "unknown field");
    assert_invalid(&sim("listen = \"10.0.0.1:8091\""), 8, "listen", "loopback");
    assert_invalid(&sim("listen = \"127.0.0.1:1\"\nmix = \"1,2\""), 9, "mix", "create,update,delete");
    assert_invalid(&sim("listen = \"127.0.0.1:1\"\nchange_rate = -1.0"), 9, "change_rate", "per second");
    assert_invalid(&sim("listen = \"127.0.0.1:1\"\nmin_size = 10\nmax_size = 5"), 9, "min_size", "larger");
    let twice = format!("{}[[simulate]]\nid = \"t\"\nlisten = \"127.0.0.1:1\"\n", sim("listen = \"127.0.0.1:1\""));
    assert_invalid(&twice, 11, "listen", "two simulators");
}

#[test]
fn max_concurrent_sources_defaults_to_eight_and_is_bounded() {
    assert_eq!(parse(HEAD).unwrap().aggregator.max_concurrent_sources, 8);
    for ok in [1, 2, 256] {
        let c = parse(&format!("{HEAD}max_concurrent_sources = {ok}\n")).unwrap();
        assert_eq!(c.aggregator.max_concurrent_sources, ok);
    }
    for bad in ["0", "257", "-1", "100000000000"] {
        assert_invalid(&format!("{HEAD}max_concurrent_sources = {bad}\n"), 6, "max_concurrent_sources", "out of range");
    }
    let text = format!("{HEAD}max_concurrent_sources = \"4\"\n");
    assert_invalid(&text, 6, "max_concurrent_sources", "invalid type");
    // An aggregator-wide bound: it is not a per-source setting.
    let src = "[[source]]\nid = \"a\"\nurl = \"http://a.example/\"\nmax_concurrent_sources = 2\n";
    assert_invalid(&format!("{HEAD}{src}"), 9, "max_concurrent_sources", "unknown field");
}

#[test]
fn max_connections_per_client_defaults_to_a_tenth_of_the_cap() {
    let per_client =
        |server: &str| parse(&format!("{HEAD}[server]\n{server}")).unwrap().server.max_connections_per_client;
    assert_eq!(per_client(""), 102);
    assert_eq!(per_client("max_connections = 50\n"), 5);
    assert_eq!(per_client("max_connections = 9\n"), 1);
    assert_eq!(per_client("max_connections = 50\nmax_connections_per_client = 50\n"), 50);
    assert_eq!(per_client("max_connections_per_client = 1\nmax_connections = 3\n"), 1);
    let text = format!("{HEAD}[server]\nmax_connections = 50\nmax_connections_per_client = 51\n");
    assert_invalid(&text, 8, "max_connections_per_client", "more than max_connections (50)");
    for bad in ["0", "-1", "100001"] {
        let text = format!("{HEAD}[server]\nmax_connections_per_client = {bad}\n");
        assert_invalid(&text, 7, "max_connections_per_client", "out of range");
    }
}

#[test]
fn feed_sources_take_feed_instead_of_url() {
    let text = format!(
        "{HEAD}[[source]]\nid = \"news\"\nfeed = \"https://news.example.org/feed.atom\"\nfeed_content = \"enclosure\"\n\
         [[source]]\nid = \"blog\"\nfeed = \"https://blog.example.org/rss\"\n"
    );
    let c = parse(&text).unwrap();
    assert_eq!(c.sources[0].url.as_str(), "https://news.example.org/feed.atom");
    let feed = c.sources[0].feed.as_ref().expect("a feed source");
    assert_eq!(feed.content, tributary::config::FeedContent::Enclosure);
    assert_eq!(c.sources[1].feed.as_ref().unwrap().content, tributary::config::FeedContent::Item, "the default");
    assert_eq!(c.aggregator.endpoint_id, "tributary:127.0.0.1:8080", "endpoint id from base_url");

    // Lines: HEAD is 5 lines, so `[[source]]` is line 6.
    assert_invalid(
        &format!("{HEAD}[[source]]\nid = \"x\"\nurl = \"https://a/\"\nfeed = \"https://a/f\"\n"),
        9,
        "feed",
        "not both",
    );
    assert_invalid(&format!("{HEAD}[[source]]\nid = \"x\"\n"), 6, "url", "`feed`");
    assert_invalid(
        &format!("{HEAD}[[source]]\nid = \"x\"\nfeed = \"https://a/f\"\nfeed_content = \"page\"\n"),
        9,
        "feed_content",
        "item, enclosure, link",
    );
    assert_invalid(
        &format!("{HEAD}[[source]]\nid = \"x\"\nurl = \"https://a/\"\nfeed_content = \"item\"\n"),
        9,
        "feed_content",
        "feed sources",
    );
    assert_invalid(&format!("{HEAD}[[source]]\nid = \"x\"\nfeed = \"ftp://a/f\"\n"), 8, "feed", "");
    let c = parse(&format!("{HEAD}[[source]]\nid = \"x\"\nfeeds = [\"https://a/f\", \"https://b/f\"]\n")).unwrap();
    let urls: Vec<&str> = c.sources[0].feed.as_ref().unwrap().urls.iter().map(|u| u.as_str()).collect();
    assert_eq!((urls, c.sources[0].url.as_str()), (vec!["https://a/f", "https://b/f"], "https://a/f"));
    assert_invalid(
        &format!("{HEAD}[[source]]\nid = \"x\"\nfeeds = [\"https://a/f\", \"https://a/f\"]\n"),
        8,
        "feeds",
        "twice",
    );
    assert_invalid(&format!("{HEAD}[[source]]\nid = \"x\"\nfeeds = []\n"), 8, "feeds", "no feed");
    assert_invalid(
        &format!("{HEAD}[[source]]\nid = \"x\"\nfeed = \"https://a/f\"\nfeeds = [\"https://b/f\"]\n"),
        9,
        "feeds",
        "not both",
    );
    let head = HEAD.replace("data_dir", "endpoint_id = \"tributary aggregator\"\ndata_dir");
    assert_invalid(&format!("{head}[[source]]\nid = \"x\"\nurl = \"https://a/\"\n"), 4, "endpoint_id", "RFC 2141");
}

/// `[shards.NAME]`: each instance gets its sources, sets, simulators and addresses; a source or
/// simulator that names no shard, or an unknown one, is an error at its line.
#[test]
fn shards_split_one_file_into_instances() {
    let shards = "[shards.one]\nbase_url = \"http://10.0.0.1:8080\"\nlisten = \"0.0.0.0:8080\"\ndata_dir = \"one\"\n\
                  [shards.top]\nbase_url = \"https://agg.example.org/\"\n";
    let text = format!(
        "{HEAD}{shards}[[source]]\nid = \"a\"\nurl = \"https://a.example.org/\"\nshard = \"one\"\n\
         [[source]]\nid = \"b\"\nurl = \"https://b.example.org/\"\nshard = \"one\"\n\
         [[source]]\nid = \"up\"\nurl = \"http://10.0.0.1:8080/\"\nshard = \"top\"\n\
         [[set]]\nid = \"ab\"\nsources = [\"a\", \"b\"]\n[[set]]\nid = \"mixed\"\nsources = [\"a\", \"up\"]\n\
         [[simulate]]\nid = \"sim\"\nlisten = \"127.0.0.1:0\"\nshard = \"one\"\n"
    );
    let whole = parse(&text).unwrap();
    assert_eq!(whole.shards.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["one", "top"]);

    let one = whole.clone().for_shard(Some("one"), None).unwrap();
    assert_eq!(one.sources.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(
        one.sets.iter().map(|s| (s.id.as_str(), s.sources.len())).collect::<Vec<_>>(),
        [("ab", 2), ("mixed", 1)]
    );
    assert_eq!(one.simulators.len(), 1);
    assert_eq!(one.aggregator.base_url.as_str(), "http://10.0.0.1:8080/");
    assert_eq!(one.aggregator.listen.to_string(), "0.0.0.0:8080");
    assert_eq!(one.aggregator.data_dir, Path::new("conf/one"));
    assert_eq!(one.aggregator.endpoint_id, "tributary:10.0.0.1:8080", "a default endpoint id follows base_url");

    let top = whole.clone().for_shard(Some("top"), Some(Path::new("/data"))).unwrap();
    assert_eq!(top.sources.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), ["up"]);
    assert_eq!(top.sets.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), ["mixed"], "ab has none of top's");
    assert!(top.simulators.is_empty());
    assert_eq!(top.aggregator.listen, whole.aggregator.listen, "not overridden: [aggregator]'s");
    assert_eq!(top.aggregator.data_dir, Path::new("/data"), "--data-dir wins");

    for (shard, needle) in [(None, "--shard NAME"), (Some("west"), "no shard \"west\"")] {
        let err = whole.clone().for_shard(shard, None).unwrap_err().to_string();
        assert!(err.contains(needle) && err.contains("one, top"), "{err}");
    }
    let plain = parse(&format!("{HEAD}[[source]]\nid = \"a\"\nurl = \"https://a.example.org/\"\n")).unwrap();
    assert_eq!(plain.clone().for_shard(None, None).unwrap().sources.len(), 1, "no shards: the whole file");
    assert!(plain.for_shard(Some("one"), None).is_err());

    let head_lines = HEAD.lines().count();
    let unsharded = format!("{HEAD}{shards}[[source]]\nid = \"a\"\nurl = \"https://a.example.org/\"\n");
    assert_invalid(&unsharded, head_lines + 8, "shard", "has no `shard`");
    let unknown = format!("{HEAD}{shards}[[source]]\nid = \"a\"\nurl = \"https://a.example.org/\"\nshard = \"west\"\n");
    assert_invalid(&unknown, head_lines + 10, "shard", "no [shards.west] table");
    let no_tables = format!("{HEAD}[[source]]\nid = \"a\"\nurl = \"https://a.example.org/\"\nshard = \"west\"\n");
    assert_invalid(&no_tables, head_lines + 4, "shard", "needs a [shards.west] table");
    let sim = format!("{HEAD}{shards}[[simulate]]\nid = \"s\"\nlisten = \"127.0.0.1:0\"\n");
    assert_invalid(&sim, head_lines + 8, "shard", "simulator \"s\" has no `shard`");
    assert_invalid(&format!("{HEAD}[shards.West]\n"), head_lines + 1, "shards.West", "invalid shard name");
}

#[test]
fn push_keys_default_merge_and_report_their_line() {
    use tributary::config::PushMode;
    let c = parse(&format!("{HEAD}[[source]]\nid = \"x\"\nurl = \"https://a/\"\n")).unwrap();
    assert_eq!(c.aggregator.public_url, c.aggregator.base_url, "public_url defaults to base_url");
    let s = &c.sources[0];
    assert_eq!((s.settings.push, s.push.hub.as_ref(), s.push.topic.as_ref()), (PushMode::Auto, None, None));
    assert_eq!(s.settings.push_lease, Duration::from_secs(864_000));
    let head = HEAD.replace("data_dir", "public_url = \"https://agg.example.org/t\"\ndata_dir");
    let text = format!(
        "{head}[defaults]\npush_poll = \"2h\"\npush_lease = \"1day\"\n\n[[source]]\nid = \"x\"\nurl = \"https://a/\"\n\
         push = \"off\"\npush_verify_timeout = \"30s\"\n\n[[source]]\nid = \"y\"\nurl = \"https://b/\"\n\
         push_hub = \"https://hub.example.org/\"\npush_topic = \"https://b/notify\"\n"
    );
    let c = parse(&text).unwrap();
    assert_eq!(c.aggregator.public_url.as_str(), "https://agg.example.org/t/", "a prefix: it gains its slash");
    let (x, y) = (&c.sources[0], &c.sources[1]);
    assert_eq!((x.settings.push, x.settings.push_verify_timeout), (PushMode::Off, Duration::from_secs(30)));
    assert_eq!((y.settings.push_poll, y.settings.push_lease), (Duration::from_secs(7200), Duration::from_secs(86_400)));
    assert_eq!(y.push.hub.as_ref().map(|u| u.as_str()), Some("https://hub.example.org/"));
    assert_eq!(y.push.topic.as_ref().map(|u| u.as_str()), Some("https://b/notify"));

    let src = |extra: &str| format!("{HEAD}[[source]]\nid = \"x\"\nurl = \"https://a/\"\n{extra}\n");
    assert_invalid(&src("push = \"sometimes\""), 9, "push", "auto, off");
    assert_invalid(&src("push_lease = \"5s\""), 9, "push_lease", "between");
    assert_invalid(&src("push_lease = \"1year\""), 9, "push_lease", "between");
    assert_invalid(&src("push_hub = \"ftp://hub/\""), 9, "push_hub", "http");
    assert_invalid(&src("push_topic = \"not a url\""), 9, "push_topic", "invalid URL");
    assert_invalid(&src("push_poll = \"soon\""), 9, "push_poll", "");
    let feed = format!("{HEAD}[[source]]\nid = \"x\"\nfeed = \"https://a/f\"\npush_hub = \"https://hub/\"\n");
    assert_invalid(&feed, 9, "push_hub", "feed or OAI-PMH source");
    let head = HEAD.replace("data_dir", "public_url = \"mailto:x@y\"\ndata_dir");
    assert_invalid(&format!("{head}[[source]]\nid = \"x\"\nurl = \"https://a/\"\n"), 4, "public_url", "http");
}

#[test]
fn blobs_is_an_s3_url_and_its_options_need_it() {
    let c = parse(HEAD).unwrap();
    assert!(c.aggregator.blobs.is_none(), "local files by default");
    let c = parse(&format!("{HEAD}blobs = \"s3://bits/tributary/prod\"\n")).unwrap();
    let b = c.aggregator.blobs.unwrap();
    assert_eq!((b.bucket.as_str(), b.prefix.as_str(), b.create_bucket), ("bits", "tributary/prod", false));
    assert_eq!(b.gc_grace, tributary::store::DEFAULT_GC_GRACE);
    assert!(b.client.is_empty(), "credentials come from the environment only");
    let c = parse(&format!(
        "{HEAD}blobs = \"s3://bits\"\nblobs_create_bucket = true\nblobs_gc_grace = \"2h\"\nblobs_presign = true\n"
    ))
    .unwrap();
    let b = c.aggregator.blobs.unwrap();
    assert_eq!(
        (b.prefix.as_str(), b.create_bucket, b.gc_grace, b.presign),
        ("", true, Duration::from_secs(7200), true)
    );
    assert!(!parse(&format!("{HEAD}blobs = \"s3://bits\"\n")).unwrap().aggregator.blobs.unwrap().presign);

    // A top level's sources that are the file's own shards, sharing the bucket, use no dumps
    // unless asked to (a dump would download what the bucket holds); other sources keep them.
    let shards = "[shards.one]\nbase_url = \"http://10.0.0.1:8080/\"\n[shards.top]\nbase_url = \"http://10.0.0.9/\"\n";
    let src = |id: &str, url: &str, extra: &str| {
        format!("[[source]]\nid = \"{id}\"\nurl = \"{url}\"\nshard = \"{id}\"\n{extra}")
    };
    let srcs = [
        src("one", "https://provider.example.org/", ""),
        src("top", "http://10.0.0.1:8080/.well-known/resourcesync", ""),
    ]
    .concat();
    let dumps = |text: String| parse(&text).unwrap().sources.iter().map(|s| s.settings.dumps).collect::<Vec<_>>();
    assert_eq!(dumps(format!("{HEAD}blobs = \"s3://bits\"\n{shards}{srcs}")), [true, false]);
    assert_eq!(dumps(format!("{HEAD}{shards}{srcs}")), [true, true], "no bucket: nothing shared");
    assert_eq!(dumps(format!("{HEAD}blobs = \"s3://bits\"\n[defaults]\ndumps = true\n{shards}{srcs}")), [true, true]);
    let asked = src("top", "http://10.0.0.1:8080/", "dumps = true\n");
    assert_eq!(dumps(format!("{HEAD}blobs = \"s3://bits\"\n{shards}{asked}")), [true]);

    assert_invalid(&format!("{HEAD}blobs = \"https://bits.example/x\"\n"), 6, "blobs", "not an s3:// URL");
    assert_invalid(&format!("{HEAD}blobs = \"s3://Bits\"\n"), 6, "blobs", "not a bucket name");
    assert_invalid(&format!("{HEAD}blobs = \"s3://bits/a//b\"\n"), 6, "blobs", "prefix");
    assert_invalid(&format!("{HEAD}blobs = \"s3://bits\"\nblobs_gc_grace = \"soon\"\n"), 7, "blobs_gc_grace", "");
    assert_invalid(
        &format!("{HEAD}blobs = \"s3://bits\"\nblobs_gc_grace = \"30s\"\n"),
        7,
        "blobs_gc_grace",
        "at least 1m",
    );
    assert_invalid(&format!("{HEAD}blobs_create_bucket = true\n"), 6, "blobs_create_bucket", "needs `blobs");
    // Credentials are never read from the file.
    assert_invalid(
        &format!("{HEAD}blobs = \"s3://bits\"\naws_secret_access_key = \"x\"\n"),
        7,
        "aws_secret_access_key",
        "unknown field",
    );
}

#[test]
fn a_harvest_proxy_is_used_only_when_configured() {
    assert!(parse(HEAD).unwrap().aggregator.proxy.is_none(), "no proxy by default, whatever the environment");
    let c = parse(&format!("{HEAD}proxy = \"http://10.0.0.5:3128\"\n")).unwrap();
    assert_eq!(c.aggregator.proxy.unwrap().as_str(), "http://10.0.0.5:3128/");
    assert_invalid(&format!("{HEAD}proxy = \"socks5://10.0.0.5:1080\"\n"), 6, "proxy", "http");
}

#[test]
fn credentials_come_from_the_environment_and_politeness_is_one_of_two() {
    use tributary::config::Politeness;
    // Cargo sets CARGO_PKG_NAME for the tests it runs: a variable that is surely there.
    let text = format!(
        "{HEAD}[defaults]\nheaders_env = {{ X-Api-Key = \"CARGO_PKG_NAME\" }}\npoliteness = \"ip\"\n\n\
         [[source]]\nid = \"x\"\nurl = \"https://a.example:8443/rs/\"\n\n\
         [[source]]\nid = \"y\"\noai = \"http://b.example/oai\"\nheaders_env = {{}}\npoliteness = \"origin\"\n"
    );
    let c = parse(&text).unwrap();
    let (x, y) = (&c.sources[0].settings, &c.sources[1].settings);
    assert_eq!(x.credentials.origin.as_deref(), Some("https://a.example:8443"), "the source's own origin");
    assert_eq!(x.credentials.headers.len(), 1);
    assert_eq!(
        (x.credentials.headers[0].name.as_str(), x.credentials.headers[0].value.expose()),
        ("X-Api-Key", "tributary")
    );
    assert!(!format!("{x:?}").contains("tributary"), "the value never prints");
    assert!(y.credentials.headers.is_empty(), "a source's table replaces the default's whole");
    assert_eq!((x.politeness, y.politeness), (Politeness::Ip, Politeness::Origin));
    assert!(c.defaults.credentials.origin.is_none(), "[defaults]' own settings go to no origin");
    assert_eq!(c.defaults.retry_after_cap, Duration::from_secs(7 * 86_400));

    let src = |extra: &str| format!("{HEAD}[[source]]\nid = \"x\"\nurl = \"https://a/\"\n{extra}\n");
    let unset = "TRIBUTARY_TEST_VARIABLE_THAT_IS_NEVER_SET";
    assert_invalid(&src(&format!("headers_env = {{ Authorization = \"{unset}\" }}")), 9, "headers_env", "is not set");
    assert_invalid(&src("headers_env = { Host = \"CARGO_PKG_NAME\" }"), 9, "headers_env", "set by Tributary");
    assert_invalid(&src("headers_env = { \"Bad Name\" = \"CARGO_PKG_NAME\" }"), 9, "headers_env", "not an HTTP header");
    assert_invalid(&src("headers_env = { Authorization = \"\" }"), 9, "headers_env", "names no environment variable");
    assert_invalid(&src("headers_env = \"UP_AUTH\""), 9, "headers_env", "");
    assert_invalid(&src("politeness = \"host\""), 9, "politeness", "origin, ip");
}
