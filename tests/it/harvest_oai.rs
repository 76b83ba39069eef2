//! OAI-PMH data providers as sources, end to end on 127.0.0.1: a real provider (PyPI
//! `oaipmh`, `tests/fixtures/oai/server.py`) for the protocol as a third party implements it —
//! baseline, resumption tokens with `%3D`, incremental harvests by `from`, deletions, sets,
//! the format check — and a hostile one written here for the damage real endpoints do.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::json;

use crate::support::harness::{Harness, UNLIMITED, config_text};
use crate::support::oai::{Hostile, PyOai, Script, oai_error, ok, page, preamble, record};

/// A harness with one OAI-PMH source `a` at `base`, with `extra` lines.
fn oai_source(base: &str, extra: &str) -> Harness {
    Harness::new(|dir| {
        format!(
            "{}[[source]]\nid = \"a\"\noai = \"{base}\"\nallow_private = true\n{extra}\n",
            config_text(dir, "", UNLIMITED, &[])
        )
    })
}

/// The GetRecord URL Tributary names a record by.
fn get_record(base: &str, id: &str) -> String {
    let mut u = url::Url::parse(base).unwrap();
    u.query_pairs_mut()
        .append_pair("verb", "GetRecord")
        .append_pair("metadataPrefix", "oai_dc")
        .append_pair("identifier", id);
    u.to_string()
}

fn rec(id: &str, datestamp: &str, sets: &[&str], title: &str, deleted: bool) -> serde_json::Value {
    json!({"id": id, "datestamp": datestamp, "sets": sets, "title": title, "deleted": deleted})
}

/// `now` in seconds granularity, as the repository's records are stamped when changed.
fn now() -> String {
    let t = tributary::model::W3cDateTime::now().to_string();
    format!("{}Z", &t[..19])
}

/// The change log of set `a` as `(change, identifier)`.
fn changes(h: &Harness) -> Vec<(String, String)> {
    h.events("a")
        .into_iter()
        .map(|(c, uri)| {
            let id = url::Url::parse(&format!("http://x/?{}", uri.split_once('?').unwrap().1))
                .unwrap()
                .query_pairs()
                .find(|(k, _)| k == "identifier")
                .unwrap()
                .1
                .into_owned();
            (c, id)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_provider_baseline_then_changes_by_from() {
    let old = "2020-01-01T00:00:00Z";
    let v1 = json!({"records": [
        rec("oai:t:1", old, &["a"], "One", false),
        rec("oai:t:2", old, &["a"], "Two", false),
        rec("oai:t:3", old, &["b"], "Three", false),
        rec("oai:t:4", old, &["b"], "Four", false),
        rec("oai:t:9", old, &[], "Gone long ago", true),
    ]});
    // Two records a page: the list needs tokens, which this server writes with `%3D`.
    let Some(repo) = PyOai::start("a_real_provider_baseline_then_changes_by_from", &v1, 2) else { return };
    let h = oai_source(&repo.base, "");

    let first = h.pass_one().await;
    assert!(first.error.is_none() && first.complete, "{first:?}");
    assert_eq!((first.created, first.fetched), (4, 4), "{first:?}");
    assert_eq!(h.live("a").len(), 4);
    let upstream = get_record(&repo.base, "oai:t:1");
    let record = h.record("a", &upstream).expect("oai:t:1 is named by its GetRecord URL");
    assert_eq!(record.origin, upstream, "the origin, and so the via, is the GetRecord URL");
    let body = String::from_utf8(h.content("a", &upstream).unwrap()).unwrap();
    assert!(body.starts_with("<?xml") && body.contains("<identifier>oai:t:1</identifier>"), "{body}");
    assert!(body.contains("<dc:title>One</dc:title>") && !body.contains("responseDate"), "{body}");
    // The via dereferences: the repository answers the GetRecord URL with the record.
    let got = reqwest::get(&upstream).await.unwrap().text().await.unwrap();
    assert!(got.contains("<identifier>oai:t:1</identifier>") && got.contains("One"), "{got}");
    let state = h.store.source_state("a").unwrap().unwrap().oai.unwrap();
    assert_eq!((state.granularity.as_str(), state.deleted_record.as_str()), ("YYYY-MM-DDThh:mm:ssZ", "persistent"));
    assert_eq!(state.admin_emails, ["admin@example.org"]);

    // Changed, moved between sets, deleted, added; oai:t:4 untouched.
    let t = now();
    repo.set(&json!({"records": [
        rec("oai:t:1", &t, &["a"], "One, revised", false),
        rec("oai:t:2", &t, &["b"], "Two", false),
        rec("oai:t:3", &t, &["b"], "Three", true),
        rec("oai:t:4", old, &["b"], "Four", false),
        rec("oai:t:5", &t, &["a"], "Five", false),
        rec("oai:t:9", old, &[], "Gone long ago", true),
    ]}));
    let second = h.pass_one().await;
    assert!(second.error.is_none() && second.complete, "{second:?}");
    assert_eq!(second.unchanged, 0, "from = the last responseDate: only the changed records are listed: {second:?}");
    let mut log = changes(&h);
    log.sort();
    let expected: Vec<(String, String)> = [
        ("Created", "oai:t:1"),
        ("Created", "oai:t:2"),
        ("Created", "oai:t:3"),
        ("Created", "oai:t:4"),
        ("Created", "oai:t:5"),
        ("Deleted", "oai:t:3"),
        ("Updated", "oai:t:1"),
        ("Updated", "oai:t:2"),
    ]
    .iter()
    .map(|(c, i)| ((*c).to_owned(), (*i).to_owned()))
    .collect();
    assert_eq!(log, expected);
    let moved = h.record("a", &get_record(&repo.base, "oai:t:2")).unwrap();
    let collections: Vec<&str> =
        moved.links.iter().filter(|l| l.rel == "collection").map(|l| l.href.as_str()).collect();
    assert_eq!(collections.len(), 1, "{collections:?}");
    assert!(collections[0].ends_with("verb=ListRecords&metadataPrefix=oai_dc&set=b"), "{collections:?}");
    assert!(moved.links.iter().any(|l| l.rel == "describedby" && l.href.ends_with("/oai_dc/")));
    // Provenance names the record as OAI-PMH does, from what is stored.
    let naming = tributary::naming::Naming::new(&h.config.aggregator.base_url);
    let query = tributary::publish::provenance::Query::Uri(get_record(&repo.base, "oai:t:2"));
    let p = tributary::publish::provenance::lookup(&h.store, &naming, &query).unwrap();
    let oai = p.resources[0].oai.clone().expect("an OAI-PMH record's provenance has its OAI part");
    assert_eq!((oai.identifier.as_str(), oai.repository.as_str()), ("oai:t:2", repo.base.as_str()));
    assert_eq!((oai.datestamp.as_deref(), oai.sets.as_slice()), (Some(t.as_str()), &["b".to_owned()][..]));
    assert!(p.to_string().contains("oai-pmh    identifier oai:t:2"), "{p}");

    // Again: the overlap lists the changed records once more, and nothing changes.
    let third = h.pass_one().await;
    assert!(third.error.is_none(), "{third:?}");
    assert_eq!((third.created, third.updated, third.deleted), (0, 0, 0), "{third:?}");
    assert_eq!(changes(&h).len(), expected.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_provider_sets_and_formats() {
    let old = "2020-01-01";
    let repo_json = json!({"granularity": "YYYY-MM-DD", "records": [
        rec("oai:s:1", old, &["images"], "One", false),
        rec("oai:s:2", old, &["maps"], "Two", false),
        rec("oai:s:3", old, &["texts"], "Three", false),
    ]});
    let Some(repo) = PyOai::start("a_real_provider_sets_and_formats", &repo_json, 10) else { return };
    let h = oai_source(&repo.base, "oai_sets = [\"images\", \"maps\"]");
    let r = h.pass_one().await;
    assert!(r.error.is_none(), "{r:?}");
    assert_eq!(h.live("a").len(), 2, "only the configured sets");
    assert!(h.record("a", &get_record(&repo.base, "oai:s:3")).is_none());
    // Incremental, day granularity: from and the datestamps agree; nothing new.
    let again = h.pass_one().await;
    assert!(again.error.is_none() && again.created == 0, "{again:?}");

    let wrong = oai_source(&repo.base, "metadata_prefix = \"marc21\"");
    let r = wrong.pass_one().await;
    let e = r.error.expect("a format the repository does not offer fails");
    assert!(e.contains("marc21") && e.contains("oai_dc"), "{e}");
}

/// The records `r0`, `r1`… of page `n` of a scripted list.
fn records(n: usize, per_page: usize) -> Vec<String> {
    (0..per_page).map(|i| record(&format!("r{}", n * per_page + i), "t")).collect()
}

/// A hostile provider whose ListRecords requests (numbered from 0) are answered by `list`.
async fn hostile(
    list: impl Fn(&HashMap<String, String>, usize) -> crate::support::oai::Answer + Send + Sync + 'static,
) -> Hostile {
    let counter = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let script: Script = Arc::new(move |args, _| {
        if let Some(a) = preamble(args) {
            return a;
        }
        list(args, counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst))
    });
    Hostile::start(script).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_url_encoded_and_loops_stop_keeping_what_was_applied() {
    // The token holds `%3D` and `&`: sent encoded, it comes back intact.
    let up = hostile(|args, n| match n {
        0 => ok(page(&records(0, 2), Some("a%3Db&amp;c"))),
        _ if args.get("resumptionToken").map(String::as_str) == Some("a%3Db&c") => {
            ok(page(&records(1, 2), Some("loop")))
        }
        _ => ok(page(&records(2, 2), Some("loop"))),
    })
    .await;
    let h = oai_source(&up.base, "");
    let r = h.pass_one().await;
    let e = r.error.clone().expect("the same token twice stops the list");
    assert!(e.contains("came back"), "{e}");
    assert_eq!(h.live("a").len(), 6, "every page read before the loop is kept: {r:?}");
    assert_eq!(r.created, 6, "and reported: {r:?}");
    assert!(r.partial(), "as a partial poll, not a plain failure: {r:?}");
    let reqs = up.requests();
    assert!(reqs.iter().any(|q| q.contains("resumptionToken=a%253Db%26c")), "{reqs:?}");
    assert!(h.store.source_state("a").unwrap().unwrap().oai.unwrap().response_date.is_none(), "no position moved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_resumption_token_restarts_and_no_records_match_is_nothing() {
    let up = hostile(|args, n| match (n, args.contains_key("resumptionToken")) {
        (1, true) => ok(oai_error("badResumptionToken")),
        (_, false) => ok(page(&records(0, 2), Some("t1"))),
        (_, true) => ok(page(&[record("r2", "t")], None)),
    })
    .await;
    let h = oai_source(&up.base, "");
    let r = h.pass_one().await;
    assert!(r.error.is_none() && r.complete, "{r:?}");
    assert_eq!(h.live("a").len(), 3);
    let lists = up.requests().into_iter().filter(|q| q.contains("ListRecords")).count();
    assert_eq!(lists, 4, "first page, expired token, first page again, second page");

    let none = hostile(|_, _| ok(oai_error("noRecordsMatch"))).await;
    let h = oai_source(&none.base, "");
    let r = h.pass_one().await;
    assert!(r.error.is_none() && r.complete, "noRecordsMatch is an empty list: {r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_second_poll_asks_from_the_response_date_in_the_granularity() {
    let day = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d = day.clone();
    let script: Script = Arc::new(move |args, _| match args.get("verb").map(String::as_str) {
        Some("Identify") if d.load(std::sync::atomic::Ordering::SeqCst) => {
            ok(crate::support::oai::identify("YYYY-MM-DD", "persistent"))
        }
        _ => match preamble(args) {
            Some(a) => a,
            None if args.contains_key("from") => ok(oai_error("noRecordsMatch")),
            None => ok(page(&records(0, 1), None)),
        },
    });
    let up = Hostile::start(script).await;
    let h = oai_source(&up.base, "");
    assert!(h.pass_one().await.error.is_none());
    assert!(h.pass_one().await.error.is_none());
    day.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(h.pass_one().await.error.is_none());
    let froms: Vec<String> = up.requests().into_iter().filter(|q| q.contains("from=")).collect();
    // responseDate 2026-01-10T12:00:00Z less five minutes; then the same day in days.
    assert!(froms[0].contains("from=2026-01-10T11%3A55%3A00Z"), "{froms:?}");
    assert!(froms[1].ends_with("from=2026-01-10"), "{froms:?}");
    assert!(!up.requests()[..3].iter().any(|q| q.contains("from=")), "the baseline lists everything");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_honoured_and_403_stops() {
    let up = hostile(|_, n| match n {
        0 => (503, vec![("retry-after", "1".into())], b"busy".to_vec()),
        _ => ok(page(&records(0, 1), None)),
    })
    .await;
    let h = oai_source(&up.base, "max_retries = 2");
    let r = h.pass_one().await;
    assert!(r.error.is_none() && h.live("a").len() == 1, "{r:?}");

    let forbidden = hostile(|_, _| (403, vec![], b"go away".to_vec())).await;
    let h = oai_source(&forbidden.base, "max_retries = 3");
    let r = h.pass_one().await;
    assert!(r.error.as_deref().is_some_and(|e| e.contains("403")), "{r:?}");
    let lists = forbidden.requests().into_iter().filter(|q| q.contains("ListRecords")).count();
    assert_eq!(lists, 1, "403 is never retried");
}

/// A damaged-page case: its name, the page served, and what the error must say.
type DamageCase = (&'static str, fn() -> crate::support::oai::Answer, &'static str);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_pages_are_clear_errors_or_repaired() {
    let cases: [DamageCase; 3] = [
        (
            "html",
            || (200, vec![("content-type", "text/html".into())], b"<!DOCTYPE html><html>Error</html>".to_vec()),
            "HTML",
        ),
        ("truncated", || ok(page(&records(1, 2), None)[..300].to_vec()), "truncated"),
        (
            "junk",
            || {
                let mut b = page(&records(1, 2), None);
                b.extend_from_slice(b"<b>Notice</b>: Undefined index");
                ok(b)
            },
            "after </OAI-PMH>",
        ),
    ];
    for (name, second, says) in cases {
        let up = hostile(move |_, n| if n == 0 { ok(page(&records(0, 2), Some("next"))) } else { second() }).await;
        let h = oai_source(&up.base, "");
        let r = h.pass_one().await;
        let e = r.error.clone().unwrap_or_else(|| panic!("{name}: {r:?}"));
        assert!(e.contains(says), "{name}: {e}");
        assert_eq!(h.live("a").len(), 2, "{name}: the first page stays");
    }

    // Control characters and a lone surrogate reference, in gzip the server does not announce.
    let up = hostile(|_, _| {
        let body = page(&[record("r0", "bad\u{1}title &#55349; here")], None);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut gz, &body).unwrap();
        ok(gz.finish().unwrap())
    })
    .await;
    let h = oai_source(&up.base, "");
    let r = h.pass_one().await;
    assert!(r.error.is_none(), "{r:?}");
    let body = String::from_utf8(h.content("a", &get_record(&up.base, "r0")).unwrap()).unwrap();
    assert!(body.contains("badtitle &#xFFFD; here"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_of_empty_pages_stops_the_list() {
    let up = hostile(|_, n| ok(page(&[], Some(&format!("t{n}"))))).await;
    let h = oai_source(&up.base, "");
    let r = h.pass_one().await;
    assert!(r.error.as_deref().is_some_and(|e| e.contains("empty pages")), "{r:?}");
    assert!(up.requests().len() < 10, "{:?}", up.requests());
}

/// Days from `from` to `until` (today when open), for a repository that counts its range.
fn span_days(args: &HashMap<String, String>) -> i64 {
    let day = |s: &str| s.parse::<tributary::model::W3cDateTime>().unwrap().unix_timestamp() / 86_400;
    let Some(from) = args.get("from") else { return i64::MAX };
    let until = args.get("until").map_or_else(|| tributary::model::W3cDateTime::now().unix_timestamp() / 86_400, |u| day(u));
    until - day(from) + 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_range_is_walked_in_windows_and_the_size_kept() {
    // Like DNB's 413 past 100,000 records: ranges wider than 30 days are refused.
    let refusals = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let r2 = refusals.clone();
    let script: Script = Arc::new(move |args, _| match args.get("verb").map(String::as_str) {
        Some("Identify") => ok(crate::support::oai::identify_since("YYYY-MM-DD", "persistent", "2026-01-01")),
        _ => match preamble(args) {
            Some(a) => a,
            None if span_days(args) > 30 => {
                r2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                (413, vec![("content-type", "text/html".into())], b"<html>Too many records</html>".to_vec())
            }
            None => ok(page(&[record(&format!("w{}", args["from"]), "t")], None)),
        },
    });
    let up = Hostile::start(script).await;
    let h = oai_source(&up.base, "max_retries = 0");
    let r = h.pass_one().await;
    assert!(r.error.is_none() && r.complete, "{r:?}");
    let state = h.store.source_state("a").unwrap().unwrap().oai.unwrap();
    let window = state.window_secs.expect("the size that worked is kept");
    assert!(window <= 30 * 86_400 && window >= 15 * 86_400, "{window}");
    let lists: Vec<String> = up.requests().into_iter().filter(|q| q.contains("ListRecords")).collect();
    assert!(!lists[0].contains("from="), "the baseline first asks for everything: {lists:?}");
    assert!(lists[1].contains("from=2026-01-01&until="), "then windows from earliestDatestamp: {lists:?}");
    let windows = lists.len() - refusals.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(h.live("a").len(), windows, "one record a window, every window read: {lists:?}");
    assert!(windows > 5, "{lists:?}");

    // The next poll starts with the kept size: nothing is refused.
    let before = refusals.load(std::sync::atomic::Ordering::SeqCst);
    let again = h.pass_one().await;
    assert!(again.error.is_none() && again.complete, "{again:?}");
    assert_eq!(refusals.load(std::sync::atomic::Ordering::SeqCst), before, "{:?}", up.requests());
    let n = up.requests().len();
    assert!(up.requests()[n - 1].contains("from=") && !up.requests()[n - 1].contains("until="), "the last window is open");
}
