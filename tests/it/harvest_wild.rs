//! Sources as they are in the wild (issue 50), through real `tributary harvest` and `run`
//! processes on 127.0.0.1: credentials that reach the source's own origin only and show
//! nowhere; a long `Retry-After` honoured in full and across restarts, without holding up a
//! one-shot harvest of the other sources; two host names of one server under one politeness
//! budget; and configured URLs that moved for good, reported.

use std::path::Path;
use std::time::Duration;

use crate::dashboard_browser::{browser, start_driver};
use crate::support::cli;
use crate::support::feeds::{atom, entry};
use crate::support::fetcher::USER_AGENT;
use crate::support::net::free_port;
use crate::support::rs::urlset;
use crate::support::service::{Service, parse_metrics, value};
use crate::support::sim;
use crate::support::tools::require;
use crate::support::upstream::{Hit, Reply, Upstream, assert_spaced, runtime};
use tributary::model::W3cDateTime;

/// A configuration for the binary, its store in `store/` beside it, listening on `port`.
fn config(port: u16, defaults: &str, sources: &[String]) -> String {
    format!(
        "[aggregator]\nbase_url = \"http://127.0.0.1:{port}/\"\nlisten = \"127.0.0.1:{port}\"\ndata_dir = \"store\"\n\
         user_agent = \"{USER_AGENT}\"\n\n[defaults]\nallow_private = true\nrate = \"unlimited\"\nmax_retries = 1\n\
         {defaults}\n\n{}",
        sources.concat()
    )
}

/// A `[[source]]` whose `key` (`url`, `feed`) is `url`, with `extra` lines.
fn source(id: &str, key: &str, url: &str, extra: &str) -> String {
    format!("[[source]]\nid = \"{id}\"\n{key} = \"{url}\"\n{extra}\n")
}

/// The paths of a small ResourceSync Source, for whatever host it is asked by: robots.txt
/// allowing everything, `/cl.xml`, `/rl.xml` listing `/r/0`…`/r/{n-1}` and `extra` (a path
/// there is on this host), and the bitstreams; `None` for any other path.
fn rs_reply(hit: &Hit, n: usize, extra: &[String]) -> Option<Reply> {
    let base = format!("http://{}", hit.headers.get("host")?);
    let cl = format!("{base}/cl.xml");
    match hit.path.as_str() {
        "/robots.txt" => Some(Reply::ok("User-agent: *\nAllow: /\n")),
        "/cl.xml" => Some(Reply::xml(urlset("capabilitylist", &[], &[(&format!("{base}/rl.xml"), "resourcelist")]))),
        "/rl.xml" => {
            let mut locs: Vec<String> = (0..n).map(|i| format!("{base}/r/{i}")).collect();
            locs.extend(extra.iter().map(|e| if e.starts_with('/') { format!("{base}{e}") } else { e.clone() }));
            let entries: Vec<(&str, &str)> = locs.iter().map(|l| (l.as_str(), "")).collect();
            Some(Reply::xml(urlset("resourcelist", &[("up", &cl)], &entries)))
        }
        p => p.strip_prefix("/r/").map(|i| Reply::ok(format!("resource {i} of {base}\n"))),
    }
}

/// `tributary harvest` in `dir` with `env`, to its end (at most 120 s: a harvest that sleeps
/// out a long wait fails here): its exit code and what it printed.
async fn harvest(dir: &Path, env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let (out, err) = (dir.join("harvest.out"), dir.join("harvest.err"));
    let mut cmd = cli::tributary(&["--config", dir.join("sources.toml").to_str().unwrap(), "harvest"]);
    cmd.current_dir(dir).envs(env.iter().copied());
    cmd.stdout(std::fs::File::create(&out).unwrap()).stderr(std::fs::File::create(&err).unwrap());
    let mut child = cmd.spawn().unwrap();
    let status = cli::wait_for_exit(&mut child, Duration::from_secs(120)).await;
    let (stdout, stderr) = (std::fs::read_to_string(out).unwrap(), std::fs::read_to_string(err).unwrap());
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("tributary harvest was still running after 120 s\nstdout:\n{stdout}\nstderr:\n{stderr}");
    };
    (status.code(), stdout, stderr)
}

/// `api/status`'s row of source `id`.
async fn row(s: &Service, id: &str) -> serde_json::Value {
    let status = s.json("api/status").await;
    status["sources"].as_array().unwrap().iter().find(|r| r["id"] == id).cloned().unwrap()
}

/// Passes of `source` that ended well since the process started.
async fn passes(s: &Service, source: &str) -> f64 {
    let m = parse_metrics(&s.get("metrics").await.2);
    value(&m, "tributary_source_passes_total", &[("source", source), ("outcome", "ok")]).unwrap_or(0.0)
}

/// The bearer token of the credentials test: any text that shows it leaked.
const SECRET: &str = "Bearer wild-secret-7Qk2x9Zr";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_reach_the_source_origin_only_and_show_nowhere() {
    // Another origin: resources the locked Source lists, and where its redirect leads.
    let other = Upstream::start(|hit, _| rs_reply(hit, 2, &[]).unwrap_or(Reply::status(404))).await;
    let extra = vec![other.url("/r/0").to_string(), "/hop".to_owned()];
    let hop_to = other.url("/r/1").to_string();
    let locked = Upstream::start(move |hit, _| {
        if hit.headers.get("authorization").map(String::as_str) != Some(SECRET) {
            return Reply::status(401);
        }
        match hit.path.as_str() {
            "/hop" => Reply::redirect(302, &hop_to),
            _ => rs_reply(hit, 2, &extra).unwrap_or(Reply::status(404)),
        }
    })
    .await;
    let wrong_key =
        Upstream::start(|hit, _| if hit.path == "/robots.txt" { Reply::status(404) } else { Reply::status(401) }).await;
    let closed =
        Upstream::start(|hit, _| if hit.path == "/robots.txt" { Reply::status(404) } else { Reply::status(403) }).await;
    let creds = "headers_env = { Authorization = \"UP_AUTH\" }";
    let sources = [
        source("locked", "url", locked.url("/cl.xml").as_str(), &format!("{creds}\nallow_outside_authority = true")),
        source("refused", "url", wrong_key.url("/cl.xml").as_str(), creds),
        source("closed", "feed", closed.url("/feed.xml").as_str(), ""),
    ];
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(free_port(), "poll = \"1h\"", &sources);
    std::fs::write(dir.path().join("sources.toml"), &cfg).unwrap();

    // Without the variable: a configuration error naming it at its line, and nothing fetched.
    let (code, _, stderr) = harvest(dir.path(), &[]).await;
    let line = cfg[..cfg.find(creds).unwrap()].matches('\n').count() + 1;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(&format!("sources.toml:{line}:")), "no line {line} in {stderr}");
    assert!(
        stderr.contains("`headers_env`: environment variable UP_AUTH") && stderr.contains("is not set"),
        "{stderr}"
    );
    assert!(locked.hits().is_empty() && !dir.path().join("store").exists());

    let log_levels = "debug,tributary=trace,reqwest=trace,hyper=trace,hyper_util=trace,fjall=warn,lsm_tree=warn";
    let mut s = Service::start(dir.path(), &cfg, &[], &[("UP_AUTH", SECRET), ("RUST_LOG", log_levels)]).await;
    s.wait_until("every source has been polled", Duration::from_secs(60), |s| async move {
        let status = s.json("api/status").await;
        let rows = status["sources"].as_array().unwrap().clone();
        rows.iter().all(|r| !r["last_success"].is_null() || !r["last_error"].is_null())
    })
    .await;

    let locked_row = row(&s, "locked").await;
    assert!(locked_row["last_error"].is_null(), "{locked_row}\n{}", s.log());
    assert_eq!(locked_row["resources"], 4, "two on its own origin, one elsewhere, one by a redirect: {locked_row}");
    let own = locked.hits();
    assert!(own.iter().any(|h| h.path == "/robots.txt") && own.iter().any(|h| h.path == "/hop"), "{own:?}");
    assert!(own.iter().all(|h| h.headers.get("authorization").map(String::as_str) == Some(SECRET)));
    let elsewhere = other.hits();
    for path in ["/robots.txt", "/r/0", "/r/1"] {
        assert_eq!(other.count(path), 1, "{path} of the other origin: {elsewhere:?}");
    }
    assert!(elsewhere.iter().all(|h| !h.headers.contains_key("authorization")), "{elsewhere:?}");

    // Refusals are named and not retried (max_retries = 1 would have asked twice).
    let refused = row(&s, "refused").await;
    assert!(refused["last_error"].as_str().unwrap().contains("HTTP 401: credentials refused"), "{refused}");
    assert_eq!(wrong_key.count("/cl.xml"), 1);
    let closed_row = row(&s, "closed").await;
    assert!(closed_row["last_error"].as_str().unwrap().contains("HTTP 403: the server refused access"), "{closed_row}");
    assert_eq!(closed.count("/feed.xml"), 1);

    // Nowhere to be read: not in what the server shows, its log, or an export.
    let token = SECRET.trim_start_matches("Bearer ");
    let mut shown = vec![
        ("api/status", s.get("api/status").await.2),
        ("the dashboard", s.get("").await.2),
        ("/metrics", s.get("metrics").await.2),
        ("api/failures", s.get("api/failures?source=locked").await.2),
    ];
    s.terminate().await;
    shown.push(("the log", s.log()));
    // Without the variable the file does not load; `--data-dir` names the store instead.
    let (cfg_path, store) = (dir.path().join("sources.toml"), dir.path().join("store"));
    let args = ["--config", cfg_path.to_str().unwrap(), "--data-dir", store.to_str().unwrap()];
    let export = cli::run(&[&args[..], &["store", "export", "-"]].concat()).await;
    assert!(export.status.success(), "{}", String::from_utf8_lossy(&export.stderr));
    shown.push(("the export", String::from_utf8_lossy(&export.stdout).into_owned()));
    assert!(shown[4].1.contains("locked"), "the log is the service's: {}", shown[4].1);
    for (what, text) in &shown {
        assert!(!text.contains(token), "{what} shows the credential");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_retry_after_parks_the_origin_across_harvests_and_restarts() {
    let healthy = sim::start(|c| c.resources = 5).await;
    let busy = Upstream::start(|_, _| Reply::status(429).header("Retry-After", "3600")).await;
    let later = Upstream::start(|_, _| Reply::status(503).header("Retry-After", "3600")).await;
    let healthy_source = source("healthy", "url", &healthy.sim.url("/.well-known/resourcesync"), "");
    let busy_source = source("busy", "url", busy.url("/.well-known/resourcesync").as_str(), "");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let one_shot = config(port, "poll = \"1s\"", &[healthy_source.clone(), busy_source.clone()]);
    std::fs::write(dir.path().join("sources.toml"), &one_shot).unwrap();

    // A one-shot harvest reports the parked source with the time and finishes the other.
    let started = W3cDateTime::now();
    let (code, stdout, stderr) = harvest(dir.path(), &[]).await;
    assert_eq!(code, Some(1), "a parked source fails the pass\n{stdout}\n{stderr}");
    let origin = format!("http://{}", busy.addr);
    let until = parked_until(&stdout, &origin);
    let asked = until.unix_timestamp() - started.unix_timestamp();
    // The park is the hour asked, counted from the 429 (rounded up to the second), which came
    // within the harvest's bounded run.
    assert!((3599..=3600 + 121).contains(&asked), "parked for {asked} s, not the hour asked: {stdout}");
    assert!(stdout.contains("fetched 5") && !stdout.contains("healthy:"), "{stdout}");
    assert_eq!(busy.hits().len(), 1, "one request, then none: {:?}", busy.hits());

    // The next harvest sends it nothing, and says until when.
    let (code, stdout, _) = harvest(dir.path(), &[]).await;
    assert_eq!((code, parked_until(&stdout, &origin)), (Some(1), until), "{stdout}");
    assert_eq!(busy.hits().len(), 1);

    // The service honours the harvest's park, parks an origin of its own, and after a
    // restart sends neither anything.
    let later_source = source("later", "url", later.url("/.well-known/resourcesync").as_str(), "");
    let cfg = config(port, "poll = \"1s\"", &[healthy_source, busy_source, later_source]);
    for run in 0..2 {
        let mut s = Service::start(dir.path(), &cfg, &[], &[]).await;
        s.wait_until("the healthy source is polled twice", Duration::from_secs(60), |s| async move {
            passes(s, "healthy").await >= 2.0 && !row(s, "later").await["parked"].is_null()
        })
        .await;
        assert_eq!((busy.hits().len(), later.hits().len()), (1, 1), "run {run}\n{}", s.log());
        let busy_row = row(&s, "busy").await;
        assert_eq!(busy_row["parked"]["origin"], origin.as_str(), "{busy_row}");
        assert_eq!(busy_row["parked"]["until"], until.to_string(), "{busy_row}");
        assert_eq!(busy_row["next_attempt"], until.to_string(), "polled when the park ends: {busy_row}");
        assert_eq!(busy_row["state"], "backing_off");
        let status = s.json("api/status").await;
        assert_eq!(status["parked_origins"].as_array().unwrap().len(), 2, "{status}");
        let m = parse_metrics(&s.get("metrics").await.2);
        let gauge = value(&m, "tributary_source_parked_until_seconds", &[("source", "busy")]);
        assert_eq!(gauge, Some(until.unix_timestamp() as f64));
        assert_eq!(value(&m, "tributary_source_parked_until_seconds", &[("source", "healthy")]), Some(0.0));
        assert_eq!(value(&m, "tributary_origins_parked", &[]), Some(2.0));
        assert!(s.log().contains("origin parked"), "{}", s.log());
        assert!(s.terminate().await.success());
    }
}

/// The time `stdout` of a harvest says `origin` asked us to wait until.
fn parked_until(stdout: &str, origin: &str) -> W3cDateTime {
    let said = format!("parked: origin {origin} asked us to wait until ");
    let at = stdout.find(&said).unwrap_or_else(|| panic!("no {said:?} in {stdout}")) + said.len();
    stdout[at..].split_whitespace().next().unwrap().parse().unwrap()
}

/// Two sources on one server, one named `localhost` and one `127.0.0.1`, harvested by the
/// binary with `politeness`; the server's requests (its record, and the most in flight).
fn two_names_one_server(politeness: &str) -> (Vec<Hit>, usize) {
    let server = runtime(1);
    // Each bitstream's reply outlasts the rate's interval, so only a shared cap of one keeps
    // the two names' fetches from overlapping.
    let slow = Duration::from_millis(250);
    let up = server.block_on(Upstream::start(move |hit, _| {
        let reply = rs_reply(hit, 4, &[]).unwrap_or(Reply::status(404));
        if hit.path.starts_with("/r/") { reply.delayed(slow) } else { reply }
    }));
    let dir = tempfile::tempdir().unwrap();
    let port = up.addr.port();
    let sources = [
        source("by-name", "url", &format!("http://localhost:{port}/cl.xml"), ""),
        source("by-address", "url", &format!("http://127.0.0.1:{port}/cl.xml"), ""),
    ];
    let defaults = format!("rate = \"10/s\"\nconcurrency = 1\npoliteness = \"{politeness}\"");
    let cfg = config(free_port(), &defaults, &sources).replace("rate = \"unlimited\"\n", "");
    std::fs::write(dir.path().join("sources.toml"), cfg).unwrap();
    let (code, stdout, stderr) = runtime(1).block_on(harvest(dir.path(), &[]));
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("fetched 8"), "{stdout}");
    let seen = (up.hits(), up.max_in_flight());
    drop(up);
    server.shutdown_background();
    seen
}

#[test]
fn two_host_names_of_one_server_share_its_budget_under_politeness_ip() {
    let (hits, most) = two_names_one_server("ip");
    let hosts: std::collections::HashSet<&str> =
        hits.iter().filter_map(|h| h.headers.get("host")).map(|h| h.split(':').next().unwrap()).collect();
    assert_eq!(hosts.len(), 2, "both names were used: {hosts:?}");
    assert_eq!(most, 1, "one request at a time for the one server");
    let mut arrivals: Vec<_> = hits.iter().map(|h| h.at).collect();
    let closest = assert_spaced(&mut arrivals, Duration::from_millis(100), "one server, two names");
    eprintln!("closest arrivals across both names: {closest:?}");
    // The same sources by origin: each name has a budget of its own, so two requests overlap.
    let (_, most) = two_names_one_server("origin");
    assert_eq!(most, 2, "without politeness = \"ip\" the two names are two budgets");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_redirects_of_configured_urls_are_reported_once() {
    let m = Upstream::start(|hit, _| {
        let base = format!("http://{}", hit.headers.get("host").map_or("", String::as_str));
        match hit.path.as_str() {
            "/old301" => Reply::redirect(301, &format!("{base}/cl.xml")),
            "/old308" => Reply::redirect(308, &format!("{base}/cl.xml")),
            "/temp302" => Reply::redirect(302, &format!("{base}/cl.xml")),
            "/temp307" => Reply::redirect(307, &format!("{base}/cl.xml")),
            "/feed-old" => Reply::redirect(301, &format!("{base}/feed.xml")),
            "/feed.xml" => {
                let item = entry("item-1", "One", 1, false, &[(1, "2026-01-01T00:00:00Z", "upstream")]);
                Reply::ok(atom(&format!("{base}/feed.xml"), None, None, &[item]))
                    .header("Content-Type", "application/atom+xml")
            }
            _ => rs_reply(hit, 2, &[]).unwrap_or(Reply::status(404)),
        }
    })
    .await;
    let url = |p: &str| m.url(p).to_string();
    let sources = |m301: &str, feed: &str| {
        vec![
            source("m301", "url", m301, ""),
            source("m308", "url", &url("/old308"), ""),
            source("t302", "url", &url("/temp302"), ""),
            source("t307", "url", &url("/temp307"), ""),
            source("fmoved", "feed", feed, ""),
        ]
    };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = config(port, "poll = \"1s\"", &sources(&url("/old301"), &url("/feed-old")));
    let mut s = Service::start(dir.path(), &cfg, &[], &[]).await;
    s.wait_until("every source is polled, the feed three times", Duration::from_secs(60), |s| async move {
        passes(s, "fmoved").await >= 3.0 && passes(s, "m301").await >= 1.0 && passes(s, "t307").await >= 1.0
    })
    .await;
    let moved = |row: &serde_json::Value| -> Vec<(String, String)> {
        let list = row["moved"].as_array().unwrap();
        list.iter().map(|m| (m["from"].as_str().unwrap().to_owned(), m["to"].as_str().unwrap().to_owned())).collect()
    };
    assert_eq!(moved(&row(&s, "m301").await), [(url("/old301"), url("/cl.xml"))]);
    assert_eq!(moved(&row(&s, "m308").await), [(url("/old308"), url("/cl.xml"))]);
    assert_eq!(moved(&row(&s, "fmoved").await), [(url("/feed-old"), url("/feed.xml"))]);
    for temporary in ["t302", "t307"] {
        assert!(moved(&row(&s, temporary).await).is_empty(), "{temporary}");
        assert_eq!(row(&s, temporary).await["resources"], 2, "{temporary} is harvested through its redirect");
    }
    let metrics = parse_metrics(&s.get("metrics").await.2);
    for (id, to) in [("m301", url("/cl.xml")), ("m308", url("/cl.xml")), ("fmoved", url("/feed.xml"))] {
        assert_eq!(value(&metrics, "tributary_source_moved", &[("source", id), ("to", &to)]), Some(1.0), "{id}");
    }
    assert!(
        !metrics
            .iter()
            .any(|x| x.name == "tributary_source_moved" && x.label("source").is_some_and(|id| id.starts_with('t')))
    );
    // One WARN line per move, though the feed answered its redirect at every poll.
    let log = s.log();
    let warned = |to: &str| {
        log.lines()
            .filter(|l| l.contains("WARN") && l.contains(&format!("moved to {to} — update sources.toml")))
            .count()
    };
    assert_eq!(warned(&url("/cl.xml")), 2, "m301 and m308 once each:\n{log}");
    assert_eq!(warned(&url("/feed.xml")), 1, "{log}");
    assert!(m.count("/feed-old") >= 3);
    assert!(s.terminate().await.success());

    // The operator updates sources.toml: the reports go.
    let cfg = config(port, "poll = \"1s\"", &sources(&url("/cl.xml"), &url("/feed.xml")));
    let s = Service::start(dir.path(), &cfg, &[], &[]).await;
    s.wait_until("m301 and the feed are polled again", Duration::from_secs(60), |s| async move {
        passes(s, "fmoved").await >= 1.0 && passes(s, "m301").await >= 1.0
    })
    .await;
    assert!(moved(&row(&s, "m301").await).is_empty() && moved(&row(&s, "fmoved").await).is_empty());
    assert_eq!(moved(&row(&s, "m308").await).len(), 1, "still configured with its old URL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_names_parked_and_moved_sources() {
    const TEST: &str = "harvest_wild::the_dashboard_names_parked_and_moved_sources";
    let (Some(chromium), Some(chromedriver)) = (require("chromium", TEST), require("chromedriver", TEST)) else {
        return;
    };
    let busy = Upstream::start(|_, _| Reply::status(429).header("Retry-After", "3600")).await;
    let m = Upstream::start(|hit, _| match hit.path.as_str() {
        "/old" => {
            Reply::redirect(301, &format!("http://{}/cl.xml", hit.headers.get("host").map_or("", String::as_str)))
        }
        _ => rs_reply(hit, 1, &[]).unwrap_or(Reply::status(404)),
    })
    .await;
    let sources =
        [source("busy", "url", busy.url("/cl.xml").as_str(), ""), source("moved", "url", m.url("/old").as_str(), "")];
    let dir = tempfile::tempdir().unwrap();
    let s = Service::start(dir.path(), &config(free_port(), "poll = \"1h\"", &sources), &[], &[]).await;
    s.wait_until("both are reported", Duration::from_secs(60), |s| async move {
        !row(s, "busy").await["parked"].is_null()
            && row(s, "moved").await["moved"].as_array().is_some_and(|m| !m.is_empty())
    })
    .await;
    let driver = start_driver(&chromedriver);
    let c = browser(&driver, &chromium).await;
    let shown = dashboard_notes(&c, &s.base).await;
    let _ = c.close().await;
    let (parked, moved) = shown.unwrap_or_else(|e| panic!("{e}\nservice log:\n{}", s.log()));
    assert!(
        parked.starts_with("parked until ") && parked.contains(&format!("http://{} asked us to wait", busy.addr)),
        "{parked}"
    );
    assert_eq!(moved, format!("{} moved to {} — update sources.toml", m.url("/old"), m.url("/cl.xml")));
}

/// The dashboard's parked line of source `busy` and moved line of source `moved`.
async fn dashboard_notes(c: &fantoccini::Client, base: &str) -> Result<(String, String), fantoccini::error::CmdError> {
    use fantoccini::Locator;
    c.goto(base).await?;
    let parked = Locator::Css("tr[data-source='busy'] [data-field='parked']");
    let parked = c.wait().at_most(Duration::from_secs(20)).for_element(parked).await?.text().await?;
    let moved = c.find(Locator::Css("tr[data-source='moved'] [data-field='moved']")).await?.text().await?;
    Ok((parked, moved))
}
