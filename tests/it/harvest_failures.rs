//! A resource that cannot be stored is recorded as a failure for that resource (issue #4,
//! "Baseline synchronization"): with its reason, attempts and times, until it is stored, no
//! longer listed, or deleted; and a source that follows a Change List retries it on its next
//! polls, since the Change List will not name it again. Real upstreams on 127.0.0.1 whose
//! content the tests change between passes, a real store, and the real binary for
//! `tributary failures` and `api/failures`.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::cli;
use crate::support::digest::{md_attrs, sha256_hex};
use crate::support::harness::Harness;
use crate::support::net::{free_port, wait_until_ok};
use crate::support::upstream::{Reply, Upstream};
use tributary::model::Change;

/// What the upstream serves, changed by the tests between passes: path → body.
type Site = Arc<Mutex<HashMap<String, Vec<u8>>>>;

async fn upstream(site: &Site) -> Upstream {
    let site = site.clone();
    Upstream::start(move |hit, _| match site.lock().unwrap().get(&hit.path) {
        Some(body) if hit.path.ends_with(".xml") => Reply::xml(body.clone()),
        Some(body) => Reply::ok(body.clone()),
        None => Reply::status(404),
    })
    .await
}

fn serve(site: &Site, path: &str, body: impl Into<Vec<u8>>) {
    site.lock().unwrap().insert(path.to_owned(), body.into());
}

/// `<rs:md>` declaring `body`'s digests and length.
fn md(body: &[u8]) -> String {
    format!("<rs:md {}/>", md_attrs(body))
}

const NS: &str =
    "xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" xmlns:rs=\"http://www.openarchives.org/rs/terms/\"";

/// A Resource List whose entries declare the digests of the given content (which need not be
/// what the upstream serves).
fn resource_list(up: &Upstream, entries: &[(&str, &[u8])]) -> String {
    let mut s = format!(
        "<?xml version=\"1.0\"?>\n<urlset {NS}>\n<rs:ln rel=\"up\" href=\"{}\"/>\n\
         <rs:md capability=\"resourcelist\" at=\"2024-01-01T00:00:00Z\"/>\n",
        up.url("/cap.xml")
    );
    for (path, declared) in entries {
        s.push_str(&format!("<url><loc>{}</loc>{}</url>\n", up.url(path), md(declared)));
    }
    s + "</urlset>\n"
}

/// A Change List of `updated` changes, each declaring the digests of the given content.
fn change_list(up: &Upstream, changes: &[(&str, &str, &[u8])]) -> String {
    let mut s = format!(
        "<?xml version=\"1.0\"?>\n<urlset {NS}>\n<rs:ln rel=\"up\" href=\"{}\"/>\n\
         <rs:md capability=\"changelist\" from=\"2024-01-01T00:00:00Z\"/>\n",
        up.url("/cap.xml")
    );
    for (path, at, declared) in changes {
        let m = md(declared).replace("<rs:md ", &format!("<rs:md change=\"updated\" datetime=\"{at}\" "));
        s.push_str(&format!("<url><loc>{}</loc>{m}</url>\n", up.url(path)));
    }
    s + "</urlset>\n"
}

fn capability_list(up: &Upstream, with_changes: bool) -> String {
    let mut s = format!(
        "<?xml version=\"1.0\"?>\n<urlset {NS}>\n<rs:md capability=\"capabilitylist\"/>\n\
         <url><loc>{}</loc><rs:md capability=\"resourcelist\"/></url>\n",
        up.url("/rl.xml")
    );
    if with_changes {
        s.push_str(&format!("<url><loc>{}</loc><rs:md capability=\"changelist\"/></url>\n", up.url("/cl.xml")));
    }
    s + "</urlset>\n"
}

/// One source `a` at `url`, rate limits lifted.
fn harness(url: &str) -> Harness {
    Harness::sources(&[("a", url, "")])
}

/// The sha-256 of the live content of `path` (source `a`), if any.
fn held(h: &Harness, up: &Upstream, path: &str) -> Option<String> {
    h.record("a", up.url(path).as_str()).filter(|r| !r.is_deleted()).map(|r| r.sha256.to_hex())
}

fn failure(h: &Harness, up: &Upstream, path: &str) -> Option<tributary::store::Failure> {
    h.store.failure("a", &h.uri("a", up.url(path).as_str())).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_that_does_not_verify_is_recorded_until_it_is_stored_or_unlisted() {
    let site: Site = Arc::default();
    let up = upstream(&site).await;
    serve(&site, "/cap.xml", capability_list(&up, false));
    serve(&site, "/a", "A");
    serve(&site, "/b", "B served");
    serve(&site, "/c", "C served");
    // `/b` and `/c` are listed with content the upstream does not (yet) serve.
    serve(&site, "/rl.xml", resource_list(&up, &[("/a", b"A"), ("/b", b"B listed"), ("/c", b"C listed")]));
    let h = harness(up.url("/rl.xml").as_str());

    let first = h.pass().await;
    assert_eq!((first.fetched(), first.failed()), (1, 2), "{first}");
    let b = failure(&h, &up, "/b").expect("the failure of /b is recorded");
    assert_eq!(b.upstream, up.url("/b").as_str());
    assert_eq!(b.attempts, 1);
    assert!(b.reason.contains("/b") && b.reason.contains("was declared"), "{}", b.reason);
    assert_eq!(b.first_failed, b.last_failed);
    assert_eq!(b.listing.length, Some(8), "what the list declared is kept, to retry with");
    assert_eq!(held(&h, &up, "/b"), None, "never stored as good");
    assert_eq!(h.status("a").failing, 2);
    assert_eq!(h.store.failures("a").count(), 2);
    assert!(h.store.verify().unwrap().is_clean());

    // Still wrong: the same failure, counted on from the first.
    let second = h.pass().await;
    assert_eq!((second.fetched(), second.failed()), (0, 2), "{second}");
    let again = failure(&h, &up, "/b").unwrap();
    assert_eq!((again.attempts, again.first_failed), (2, b.first_failed));
    assert!(again.last_failed >= b.last_failed);

    // The upstream now serves what it lists for /b, and lists /c no more.
    serve(&site, "/b", "B listed");
    serve(&site, "/rl.xml", resource_list(&up, &[("/a", b"A"), ("/b", b"B listed")]));
    let third = h.pass().await;
    assert_eq!((third.fetched(), third.failed()), (1, 0), "{third}");
    assert_eq!(held(&h, &up, "/b"), Some(sha256_hex(b"B listed")));
    assert_eq!(h.store.failures("a").count(), 0, "stored, and no longer listed: both failures are over");
    assert_eq!(h.status("a").failing, 0);
    assert!(h.store.verify().unwrap().is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_update_keeps_the_held_content_and_ends_when_the_list_reverts() {
    let site: Site = Arc::default();
    let up = upstream(&site).await;
    serve(&site, "/cap.xml", capability_list(&up, false));
    serve(&site, "/a", "A1");
    serve(&site, "/rl.xml", resource_list(&up, &[("/a", b"A1")]));
    let h = harness(up.url("/rl.xml").as_str());
    assert_eq!(h.pass().await.fetched(), 1);

    // The list announces A2, the upstream still serves A1.
    serve(&site, "/rl.xml", resource_list(&up, &[("/a", b"A2")]));
    let failed = h.pass().await;
    assert_eq!(failed.failed(), 1, "{failed}");
    assert_eq!(held(&h, &up, "/a"), Some(sha256_hex(b"A1")), "the verified copy stays");
    assert_eq!(h.status("a").failing, 1);

    // The Source goes back to A1: what is held is what is listed, with nothing to fetch.
    serve(&site, "/rl.xml", resource_list(&up, &[("/a", b"A1")]));
    let back = h.pass().await;
    assert_eq!((back.fetched(), back.unchanged(), back.failed()), (0, 1, 0), "{back}");
    assert!(failure(&h, &up, "/a").is_none());
    assert_eq!(h.status("a").failing, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_change_is_retried_on_later_polls_until_it_verifies() {
    let site: Site = Arc::default();
    let up = upstream(&site).await;
    serve(&site, "/cap.xml", capability_list(&up, true));
    serve(&site, "/a", "A1");
    serve(&site, "/b", "B1");
    serve(&site, "/rl.xml", resource_list(&up, &[("/a", b"A1"), ("/b", b"B1")]));
    serve(&site, "/cl.xml", change_list(&up, &[]));
    let h = harness(up.url("/cap.xml").as_str());
    let baseline = h.pass().await;
    assert_eq!((baseline.fetched(), baseline.failed()), (2, 0), "{baseline}");
    assert!(h.store.source_state("a").unwrap().unwrap().baselined);

    // Both change; /b's new content is served, /a's is not yet.
    serve(&site, "/b", "B2");
    let changes = [("/a", "2024-06-01T00:00:00Z", &b"A2"[..]), ("/b", "2024-06-01T00:00:01Z", &b"B2"[..])];
    serve(&site, "/cl.xml", change_list(&up, &changes));
    let poll = h.pass().await;
    assert_eq!((poll.fetched(), poll.failed()), (1, 1), "{poll}");
    assert_eq!(held(&h, &up, "/b"), Some(sha256_hex(b"B2")));
    assert_eq!(held(&h, &up, "/a"), Some(sha256_hex(b"A1")));
    let f = failure(&h, &up, "/a").expect("the failed change is recorded");
    assert_eq!((f.attempts, f.listing.length), (1, Some(2)));
    let position = h.store.source_state("a").unwrap().unwrap().change_list_position;
    assert_eq!(position, Some(2), "the failure does not hold the source's position back");

    // The Change List names nothing new; the failure is retried from its row, and fails again.
    let gets_of_a = up.count("/a");
    let retry = h.pass().await;
    assert_eq!((retry.fetched(), retry.failed()), (0, 1), "{retry}");
    assert!(up.count("/a") > gets_of_a, "the retry fetched /a again");
    assert_eq!(failure(&h, &up, "/a").unwrap().attempts, 2);

    // Now the upstream serves what the change announced: stored, logged, failure cleared.
    serve(&site, "/a", "A2");
    let fixed = h.pass().await;
    assert_eq!((fixed.fetched(), fixed.failed()), (1, 0), "{fixed}");
    assert_eq!(held(&h, &up, "/a"), Some(sha256_hex(b"A2")));
    assert!(failure(&h, &up, "/a").is_none());
    assert_eq!(h.status("a").failing, 0);
    let last = h.store.events_after("a", 0).unwrap().map(Result::unwrap).last().unwrap();
    assert_eq!((last.uri, last.change), (h.uri("a", up.url("/a").as_str()), Change::Updated));

    // Nothing left to retry: the next poll fetches nothing.
    let quiet = h.pass().await;
    assert_eq!((quiet.fetched(), quiet.failed()), (0, 0), "{quiet}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_change_supersedes_a_recorded_failure() {
    let site: Site = Arc::default();
    let up = upstream(&site).await;
    serve(&site, "/cap.xml", capability_list(&up, true));
    serve(&site, "/a", "A1");
    serve(&site, "/rl.xml", resource_list(&up, &[("/a", b"A1")]));
    serve(&site, "/cl.xml", change_list(&up, &[]));
    let h = harness(up.url("/cap.xml").as_str());
    h.pass().await;

    serve(&site, "/cl.xml", change_list(&up, &[("/a", "2024-06-01T00:00:00Z", b"A2")]));
    assert_eq!(h.pass().await.failed(), 1);
    // A later change announces A3, which is served: the retry of A2 fails (first), then the
    // new change wins and ends the failure.
    serve(&site, "/a", "A3");
    let changes = [("/a", "2024-06-01T00:00:00Z", &b"A2"[..]), ("/a", "2024-06-02T00:00:00Z", &b"A3"[..])];
    serve(&site, "/cl.xml", change_list(&up, &changes));
    let poll = h.pass().await;
    assert_eq!(poll.fetched(), 1, "{poll}");
    assert_eq!(held(&h, &up, "/a"), Some(sha256_hex(b"A3")));
    assert!(failure(&h, &up, "/a").is_none(), "the later change ended the failure");
    assert_eq!(h.status("a").failing, 0);
}

/// `tributary ARGS…` in `dir`, where `sources.toml` is, run to its end off the runtime.
async fn tributary(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = cli::tributary(args);
    cmd.current_dir(dir);
    cli::finish(cmd).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_see_failures_from_the_command_line_and_the_api() {
    let site: Site = Arc::default();
    let up = upstream(&site).await;
    serve(&site, "/cap.xml", capability_list(&up, false));
    serve(&site, "/a", "A");
    serve(&site, "/b", "B served");
    serve(&site, "/rl.xml", resource_list(&up, &[("/a", b"A"), ("/b", b"B listed")]));
    let h = harness(up.url("/rl.xml").as_str());
    assert_eq!(h.pass().await.failed(), 1);
    let (_dir, config) = h.close(); // one process at a time: the binary opens the store next
    let dir = config.parent().unwrap().to_owned();

    let out = tributary(&dir, &["failures"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "failures exist: exit 1\n{text}");
    assert!(text.contains("a: 1 failing") && text.contains(up.url("/b").as_str()), "{text}");
    assert!(text.contains("failed 1 time since") && text.contains("was declared"), "{text}");
    let out = tributary(&dir, &["failures", "--json", "--source", "a"]).await;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json[0]["failing"], 1);
    assert_eq!(json[0]["failures"][0]["upstream"], up.url("/b").as_str());
    let unknown = tributary(&dir, &["failures", "--source", "nope"]).await;
    assert_eq!(unknown.status.code(), Some(2), "an unknown source is a usage error");

    // `serve` answers api/failures and counts the failing resources in api/status.
    let port = free_port();
    let cfg = std::fs::read_to_string(dir.join("sources.toml"))
        .unwrap()
        .replace("listen = \"127.0.0.1:0\"", &format!("listen = \"127.0.0.1:{port}\""));
    let cfg = cfg.replace("base_url = \"http://agg.example/\"", &format!("base_url = \"http://127.0.0.1:{port}/\""));
    std::fs::write(dir.join("sources.toml"), cfg).unwrap();
    let mut child =
        cli::tributary(&["serve"]).current_dir(&dir).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let base = format!("http://127.0.0.1:{port}/");
    wait_until_ok(&client, &format!("{base}api/status"), &mut child, Duration::from_secs(30)).await.unwrap();
    let failures = client.get(format!("{base}api/failures?source=a")).send().await.unwrap();
    assert_eq!(failures.status(), 200);
    let body: serde_json::Value = serde_json::from_slice(&failures.bytes().await.unwrap()).unwrap();
    assert_eq!(body["failing"], 1);
    assert_eq!(body["failures"][0]["attempts"], 1);
    assert!(body["failures"][0]["reason"].as_str().unwrap().contains("was declared"));
    let status = client.get(format!("{base}api/status")).send().await.unwrap().bytes().await.unwrap();
    let status: serde_json::Value = serde_json::from_slice(&status).unwrap();
    assert_eq!(status["sources"][0]["failing"], 1);
    let missing = client.get(format!("{base}api/failures?source=nope")).send().await.unwrap();
    assert_eq!(missing.status(), 404);
    let bad = client.get(format!("{base}api/failures")).send().await.unwrap();
    assert_eq!(bad.status(), 400);
    let _ = child.kill();
    let _ = child.wait();
}

/// Issue #37, "Reports and tools": a Source whose advertised Change List answers 404 gets its
/// baseline applied, and the poll says so — partial, with the counts — not "fetched 0, failed".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_list_that_answers_404_after_the_baseline_is_a_partial_poll() {
    let site: Site = Arc::default();
    let up = upstream(&site).await;
    serve(&site, "/cap.xml", capability_list(&up, true));
    serve(&site, "/a", "A");
    serve(&site, "/b", "B");
    serve(&site, "/rl.xml", resource_list(&up, &[("/a", b"A"), ("/b", b"B")]));
    let h = harness(up.url("/cap.xml").as_str());

    let summary = h.pass().await;
    let r = &summary.sources[0];
    assert!(r.error.as_deref().is_some_and(|e| e.contains("404")), "{summary}");
    assert!(r.partial() && summary.partial_sources() == 1, "{r:?}");
    assert_eq!(summary.fetched(), 2, "the baseline is counted: {summary}");
    assert!(!summary.succeeded(), "the poll did not finish: {summary}");
    let text = summary.to_string();
    assert!(text.contains("; 1 partial") && text.contains("a: partial (fetched 2"), "{text}");
    assert_eq!(held(&h, &up, "/a").as_deref(), Some(sha256_hex(b"A").as_str()), "kept");
    let status = h.status("a");
    assert!(status.last_pass.partial && status.last_pass.fetched == 2, "{status:?}");
}
