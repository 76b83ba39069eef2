//! OAI-PMH data providers as sources, end to end on 127.0.0.1: a real provider (PyPI
//! `oaipmh`, `tests/fixtures/oai/server.py`) for the protocol as a third party implements it —
//! baseline, resumption tokens with `%3D`, incremental harvests by `from`, deletions, sets,
//! the format check — and a hostile one written here for the damage real endpoints do.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::json;

use crate::support::harness::{Harness, UNLIMITED, config_text};
use crate::support::oai::{Hostile, PyOai, Script, get_record_url, oai_error, ok, page, preamble, record};

/// A harness with one OAI-PMH source `a` at `base`, with `extra` lines.
fn oai_source(base: &str, extra: &str) -> Harness {
    Harness::new(|dir| {
        format!(
            "{}[[source]]\nid = \"a\"\noai = \"{base}\"\nallow_private = true\n{extra}\n",
            config_text(dir, "", UNLIMITED, &[])
        )
    })
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
    let upstream = get_record_url(&repo.base, "oai:t:1");
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
    let moved = h.record("a", &get_record_url(&repo.base, "oai:t:2")).unwrap();
    let collections: Vec<&str> =
        moved.links.iter().filter(|l| l.rel == "collection").map(|l| l.href.as_str()).collect();
    assert_eq!(collections.len(), 1, "{collections:?}");
    assert!(collections[0].ends_with("verb=ListRecords&metadataPrefix=oai_dc&set=b"), "{collections:?}");
    assert!(moved.links.iter().any(|l| l.rel == "describedby" && l.href.ends_with("/oai_dc/")));
    // Provenance names the record as OAI-PMH does, from what is stored.
    let naming = tributary::naming::Naming::new(&h.config.aggregator.base_url);
    let query = tributary::publish::provenance::Query::Uri(get_record_url(&repo.base, "oai:t:2"));
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
    assert!(h.record("a", &get_record_url(&repo.base, "oai:s:3")).is_none());
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
    let body = String::from_utf8(h.content("a", &get_record_url(&up.base, "r0")).unwrap()).unwrap();
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
    let until =
        args.get("until").map_or_else(|| tributary::model::W3cDateTime::now().unix_timestamp() / 86_400, |u| day(u));
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
    assert!((15 * 86_400..=30 * 86_400).contains(&window), "{window}");
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
    assert!(
        up.requests()[n - 1].contains("from=") && !up.requests()[n - 1].contains("until="),
        "the last window is open"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oai_objects_are_harvested_linked_and_deleted_with_their_record() {
    let old = "2020-01-01T00:00:00Z";
    let obj = |base: &str, name: &str| format!("{}/objects/{name}", base.trim_end_matches("/oai"));
    let v = |base: &str, one_deleted: bool, stamp: &str| {
        json!({"records": [
            {"id": "oai:o:1", "datestamp": stamp, "sets": ["a"], "title": "One", "deleted": one_deleted,
             "urls": [obj(base, "a.pdf"), "http://elsewhere.example/x.pdf"], "relations": [obj(base, "shared.pdf")]},
            {"id": "oai:o:2", "datestamp": old, "sets": ["a"], "title": "Two", "deleted": false,
             "urls": [obj(base, "shared.pdf")]},
        ], "objects": {"a.pdf": "A's bytes", "shared.pdf": "shared bytes"}})
    };
    let Some(repo) =
        PyOai::start("oai_objects_are_harvested_linked_and_deleted_with_their_record", &json!({"records": []}), 10)
    else {
        return;
    };
    repo.set(&v(&repo.base, false, old));
    let h = oai_source(&repo.base, "oai_objects = true");
    let r = h.pass_one().await;
    assert!(r.error.is_none() && r.failed == 0, "{r:?}");
    assert_eq!(h.live("a").len(), 4, "two records, two objects; the one on another host is not fetched");
    assert_eq!(h.content("a", &obj(&repo.base, "a.pdf")).unwrap(), b"A's bytes");
    let one = get_record_url(&repo.base, "oai:o:1");
    let record = h.record("a", &one).unwrap();
    let describes: Vec<&str> = record.links.iter().filter(|l| l.rel == "describes").map(|l| l.href.as_str()).collect();
    assert_eq!(describes, [obj(&repo.base, "a.pdf"), obj(&repo.base, "shared.pdf")], "{:?}", record.links);
    let shared = h.record("a", &obj(&repo.base, "shared.pdf")).unwrap();
    let by: Vec<&str> = shared.links.iter().filter(|l| l.rel == "describedby").map(|l| l.href.as_str()).collect();
    assert_eq!(by.len(), 2, "described by both records: {by:?}");
    assert!(by.contains(&one.as_str()), "{by:?}");

    // Record 1 is deleted: its own object goes with it, the shared one stays.
    repo.set(&v(&repo.base, true, &now()));
    let r = h.pass_one().await;
    assert!(r.error.is_none(), "{r:?}");
    let live = h.live("a");
    assert_eq!(live.len(), 2, "{live:?}");
    assert!(h.record("a", &obj(&repo.base, "a.pdf")).unwrap().is_deleted());
    assert!(!h.record("a", &obj(&repo.base, "shared.pdf")).unwrap().is_deleted());
}

/// Issue #37, end to end: a baseline, then records changed, added, deleted and moved between
/// sets at the real provider, an incremental harvest; Tributary's Change List holds exactly
/// those changes, each with its GetRecord URL as `via`, and a second Tributary harvesting the
/// first (a ResourceSync Source) keeps that origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_change_list_holds_the_repository_s_changes_and_a_second_tributary_keeps_the_origin() {
    use crate::support::publish::{bind, entries, spawn};
    use tributary::model::Change;
    let old = "2020-01-01T00:00:00Z";
    let v1 = json!({"records": [
        rec("oai:e:1", old, &["x"], "One", false),
        rec("oai:e:2", old, &["x"], "Two", false),
        rec("oai:e:3", old, &["y"], "Three", false),
        rec("oai:e:4", old, &["y"], "Four", false),
    ]});
    let name = "the_change_list_holds_the_repository_s_changes_and_a_second_tributary_keeps_the_origin";
    let Some(repo) = PyOai::start(name, &v1, 2) else { return };
    let (listener, naming) = bind().await;
    let base = naming.base().to_string();
    let a = Harness::new(|dir| {
        let text = config_text(dir, "", UNLIMITED, &[]).replace(crate::support::harness::BASE_URL, &base);
        format!("{text}[[source]]\nid = \"a\"\noai = \"{}\"\nallow_private = true\n", repo.base)
    });
    assert!(a.pass_one().await.error.is_none());
    let t = now();
    repo.set(&json!({"records": [
        rec("oai:e:1", &t, &["x"], "One, revised", false),
        rec("oai:e:2", &t, &["y"], "Two", false),
        rec("oai:e:3", &t, &["y"], "Three", true),
        rec("oai:e:4", old, &["y"], "Four", false),
        rec("oai:e:5", &t, &["x"], "Five", false),
    ]}));
    let second = a.pass_one().await;
    assert!(second.error.is_none() && second.unchanged == 0, "{second:?}");

    let server = spawn(
        listener,
        naming.clone(),
        tributary::web::WebState::from_config(&a.config, &a.store, &a.fetcher).unwrap(),
    );
    let changes = entries(&server.client, &naming.change_list("a")).await;
    let seen: Vec<(Change, String)> = changes
        .iter()
        .map(|e| {
            let via = e.links.iter().find(|l| l.rel == "via").map(|l| l.href.clone()).unwrap_or_default();
            (e.md.as_ref().unwrap().change.unwrap(), via)
        })
        .collect();
    let gr = |id: &str| get_record_url(&repo.base, id);
    let baseline: Vec<(Change, String)> = (1..=4).map(|i| (Change::Created, gr(&format!("oai:e:{i}")))).collect();
    let mut first: Vec<_> = seen[..4].to_vec();
    first.sort_by(|x, y| x.1.cmp(&y.1));
    assert_eq!(first, baseline, "the baseline: {seen:?}");
    let mut incremental: Vec<_> = seen[4..].to_vec();
    incremental.sort_by(|x, y| x.1.cmp(&y.1));
    let expected = vec![
        (Change::Updated, gr("oai:e:1")),
        (Change::Updated, gr("oai:e:2")),
        (Change::Deleted, gr("oai:e:3")),
        (Change::Created, gr("oai:e:5")),
    ];
    assert_eq!(incremental, expected, "exactly the repository's changes, each via its GetRecord URL");

    // Downstream: a second Tributary harvests the first's published set and keeps the origin.
    // A serves its copies under its own root, not below the set's Capability List.
    let b = Harness::sources(&[("b", &naming.capability_list("a"), "allow_outside_authority = true")]);
    let r = b.pass_one().await;
    assert!(r.error.is_none(), "{r:?}");
    assert_eq!(b.live("b").len(), 4);
    let a_uri = a.uri("a", &gr("oai:e:1"));
    let copy = b.record("b", &a_uri).expect("B names the record by A's URI");
    assert_eq!(copy.origin, gr("oai:e:1"), "B's via is still the repository's GetRecord URL");
    assert_eq!(b.content("b", &a_uri), a.content("a", &gr("oai:e:1")), "the same record bytes");
    let p = tributary::publish::provenance::lookup(
        &b.store,
        &tributary::naming::Naming::new(&b.config.aggregator.base_url),
        &tributary::publish::provenance::Query::Uri(gr("oai:e:1")),
    )
    .unwrap();
    let oai = p.resources[0].oai.clone().expect("B's provenance shows the OAI record too");
    assert_eq!((oai.identifier.as_str(), oai.sets.as_slice()), ("oai:e:1", &["x".to_owned()][..]));
}
