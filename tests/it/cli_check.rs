//! `tributary check` as a user runs it: exit status 0 / 1 / 2, the report's lines, files,
//! gzip, and URLs served from 127.0.0.1.

use std::collections::HashMap;
use std::io::Write;
use std::process::Output;

use crate::support::cli::tributary;
use crate::support::http::{Response, Server};
use crate::support::rs::spec_example;

fn check(args: &[&str]) -> Output {
    tributary(&["check"]).args(args).output().unwrap()
}

/// A spec example's path, as an argument.
fn fixture(name: &str) -> String {
    spec_example(name).display().to_string()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn a_valid_document_reports_kind_entries_times_and_exits_0() {
    let out = check(&[&fixture("example-21.xml")]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(text.contains("Change List, 4 entries"), "{text}");
    assert!(text.contains("from      2013-01-02T00:00:00Z"), "{text}");
    assert!(text.contains("until     2013-01-03T00:00:00Z"), "{text}");
    assert!(text.trim_end().ends_with("0 errors, 0 warnings"), "{text}");
}

#[test]
fn warnings_alone_exit_0_and_are_printed_with_line_and_column() {
    let out = check(&[&fixture("example-01.xml")]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(text.lines().any(|l| l.starts_with("warning: 4:3: capability `resourceList`")), "{text}");
    assert!(text.contains("[spec §7]"), "{text}");
}

#[test]
fn errors_exit_1_with_every_violation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.xml");
    std::fs::write(
        &path,
        r#"<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
<rs:md capability="changelist" from="2013-01-01T00:00:00Z"/>
<url><loc>http://e.org/a</loc><rs:md change="created" datetime="2013-01-05T00:00:00Z"/></url>
<url><loc>http://e.org/b</loc><rs:md datetime="2013-01-04T00:00:00Z"/></url>
</urlset>"#,
    )
    .unwrap();
    let out = check(&[path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(text.lines().any(|l| l.starts_with("error: 4:1: ") && l.contains("no valid `change`")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("error: 4:1: ") && l.contains("chronological")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("warning: 1:1: ") && l.contains("no <rs:ln rel=\"up\">")), "{text}");
}

/// Writes `body` to a file in `dir` and checks it.
fn check_text(dir: &tempfile::TempDir, body: &str) -> (Option<i32>, String) {
    let path = dir.path().join("doc.xml");
    std::fs::write(&path, body).unwrap();
    let out = check(&[path.to_str().unwrap()]);
    (out.status.code(), stdout(&out))
}

const URLSET: &str =
    r#"<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">"#;

#[test]
fn notification_payloads_are_checked_by_their_own_rules() {
    let dir = tempfile::tempdir().unwrap();
    // Change Notification 1.0.1, Example 1 (abridged): valid, and no `up` link needed.
    let (code, text) = check_text(
        &dir,
        &format!(
            r#"{URLSET}<rs:md capability="change-notification" from="2017-05-01T10:00:00Z" until="2017-05-01T10:05:00Z"/>
<url><loc>http://example.com/res1</loc><rs:md change="updated" datetime="2017-05-01T10:01:00Z" hash="md5:1584abdf8ebdc9802ac0c6a7402c03b6" length="8876" type="text/html"/></url>
<url><loc>http://example.com/res2</loc><rs:md change="deleted" datetime="2017-05-01T10:02:00Z"/></url>
</urlset>"#
        ),
    );
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("Change Notification, 2 entries"), "{text}");
    assert!(text.trim_end().ends_with("0 errors, 0 warnings"), "{text}");

    // The 1.0 name is read with a warning; a missing `until`, a change without `change` and
    // entries out of order are what a subscriber cannot work with.
    let (code, text) = check_text(
        &dir,
        &format!(
            r#"{URLSET}<rs:md capability="changelist-notification" from="2017-05-01T10:00:00Z"/>
<url><loc>http://example.com/res1</loc><rs:md change="updated" datetime="2017-05-01T10:03:00Z"/></url>
<url><loc>http://example.com/res2</loc><rs:md datetime="2017-05-01T10:02:00Z"/></url>
</urlset>"#
        ),
    );
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("Change Notification, 2 entries"), "{text}");
    assert!(text.contains("read as `change-notification`"), "{text}");
    assert!(text.contains("no `until` attribute"), "{text}");
    assert!(text.contains("no valid `change`") && text.contains("chronological"), "{text}");
    assert!(text.contains("[spec Change Notification §3]"), "{text}");

    // A framework notification names the framework document that changed.
    let (code, text) = check_text(
        &dir,
        &format!(
            r#"{URLSET}<rs:md capability="framework-notification"/>
<url><loc>http://example.com/resourcelist.xml</loc><rs:md change="updated" capability="resourcelist"/></url>
<url><loc>http://example.com/res1</loc><rs:md change="updated" capability="resourcedump-manifest"/></url>
<url><loc>http://example.com/changelist.xml</loc><rs:md capability="changelist"/></url>
</urlset>"#
        ),
    );
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("Framework Notification, 3 entries"), "{text}");
    assert!(text.contains("error: 3:1: capability `resourcedump-manifest` is not a framework document"), "{text}");
    assert!(text.contains("error: 4:1: entry http://example.com/changelist.xml has no valid <rs:md change"), "{text}");
    assert!(text.trim_end().ends_with("2 errors, 0 warnings"), "{text}");

    // Notifications are never indexes.
    let (code, text) = check_text(
        &dir,
        r#"<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/"><rs:md capability="change-notification" from="2017-05-01T10:00:00Z" until="2017-05-01T10:05:00Z"/></sitemapindex>"#,
    );
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("capability `change-notification` cannot be used on <sitemapindex>"), "{text}");
}

#[test]
fn a_truncated_document_is_an_error_not_a_short_list() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.xml");
    let full = std::fs::read(fixture("example-14.xml")).unwrap();
    std::fs::write(&path, &full[..full.len() / 2]).unwrap();
    let out = check(&[path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("document is truncated"), "{}", stdout(&out));
}

#[test]
fn unreadable_input_exits_2() {
    let out = check(&["/nonexistent/resourcelist.xml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot open /nonexistent/resourcelist.xml"));
}

#[test]
fn gzip_files_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("example-13.xml.gz");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&std::fs::read(fixture("example-13.xml")).unwrap()).unwrap();
    std::fs::write(&path, gz.finish().unwrap()).unwrap();
    let out = check(&[path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("Capability List, 4 entries"));
}

#[test]
fn urls_are_fetched_from_loopback_including_gzip_bodies() {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&std::fs::read(fixture("example-20.xml")).unwrap()).unwrap();
    let routes = HashMap::from([
        ("/cl.xml".to_owned(), Response::ok(std::fs::read(fixture("example-21.xml")).unwrap())),
        ("/index.xml.gz".to_owned(), Response::ok(gz.finish().unwrap())),
    ]);
    let server = Server::start(routes);
    let out = check(&[&server.url("/cl.xml")]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).starts_with(&format!("{}: Change List, 4 entries", server.url("/cl.xml"))));
    let out = check(&[&server.url("/index.xml.gz")]);
    assert!(stdout(&out).contains("Change List Index, 3 entries"), "{}", stdout(&out));
    let out = check(&[&server.url("/missing.xml")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("404"));
}

/// Issue #37: `check` on an OAI-PMH base URL served by a real provider (PyPI `oaipmh`), two
/// records a page so that the resumption is walked.
#[test]
fn an_oai_pmh_base_url_is_checked_as_one() {
    use crate::support::oai::PyOai;
    let recs: Vec<serde_json::Value> = (1..=3)
        .map(|i| serde_json::json!({"id": format!("oai:c:{i}"), "datestamp": "2020-01-01T00:00:00Z", "sets": ["a"], "title": "T"}))
        .collect();
    let Some(repo) = PyOai::start("an_oai_pmh_base_url_is_checked_as_one", &serde_json::json!({"records": recs}), 2)
    else {
        return;
    };
    let out = check(&[&repo.base]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("OAI-PMH repository \"Tributary test repository\", granularity YYYY-MM-DDThh:mm:ssZ"),
        "{text}"
    );
    assert!(text.contains("records   2 on the first page, 1 after the resumption"), "{text}");
    assert!(text.contains("formats   oai_dc") && text.contains("sets      1"), "{text}");
}

/// Issue #37: every violation of a hostile provider is named, and the exit status is 1.
#[test]
fn an_oai_pmh_provider_s_violations_are_named() {
    use crate::support::oai::{Hostile, Script, envelope, formats, identify, ok, record};
    let script: Script = std::sync::Arc::new(|args, _| {
        let verb = args.get("verb").map(String::as_str).unwrap_or_default();
        let token = "<resumptionToken cursor=\"0\" completeListSize=\"1\">t1</resumptionToken>";
        let deleted = "<record><header status=\"deleted\"><identifier>gone</identifier>\
                       <datestamp>2026-01-01</datestamp></header></record>";
        match verb {
            "Identify" => ok(identify("YYYY-MM-DD", "no")),
            "ListMetadataFormats" => ok(formats()),
            "ListSets" => ok(envelope("<ListSets><set><setSpec>a</setSpec>")[..120].to_vec()),
            _ if args.contains_key("from") => {
                ok(envelope(&format!("<ListRecords>{}</ListRecords>", record("r9", "t"))))
            }
            _ => ok(envelope(&format!("<ListRecords>{}{deleted}{token}</ListRecords>", record("r1", "t")))),
        }
    });
    let rt = crate::support::upstream::runtime(2);
    let up = rt.block_on(Hostile::start(script));
    let out = check(&[&up.base]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    for says in [
        "granularity mismatch: datestamp 2026-01-01T00:00:00Z of r1 is finer than the declared YYYY-MM-DD",
        "deleted-record behaviour: gone has a deleted header, but Identify declares deletedRecord no",
        "token problem: the resumptionToken \"t1\" came back",
        "token problem: completeListSize 1, but 2 records have been listed",
        "error: ListSets: invalid XML",
        "granularity mismatch: from and until of different granularities was accepted",
        "granularity mismatch: a from in seconds to a repository of days was accepted",
    ] {
        assert!(text.contains(says), "{says}\n{text}");
    }
    drop(up);
}
