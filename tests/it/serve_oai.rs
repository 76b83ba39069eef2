//! Tributary's OAI-PMH endpoint (`{base_url}oai`, issue #38) end to end on 127.0.0.1, with
//! real parts: a real data provider as the origin (PyPI `oaipmh`, `tests/fixtures/oai/server.py`),
//! Tributary harvesting it, and a real client no one here wrote (PyPI `Sickle`,
//! `tests/fixtures/oai/harvest.py`) harvesting Tributary. Every response is validated with
//! `xmllint --schema` against the official `OAI-PMH.xsd`, and every oai_dc and provenance part
//! against its own schema (`tests/fixtures/oai/schemas`, offline copies).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};

use crate::support::fetcher::USER_AGENT;
use crate::support::harness::{Harness, UNLIMITED};
use crate::support::oai::{PyOai, get_record_url};
use crate::support::publish::{Res, Running, bind, delete, spawn, upsert};
use crate::support::tools::{Tool, require, sickle_python};
use tributary::model::W3cDateTime;
use tributary::naming::Naming;
use tributary::web::WebState;

const SCHEMAS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/oai/schemas");
const HARVEST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/oai/harvest.py");

/// An aggregator serving OAI-PMH, with OAI-PMH source `a` at `origin` and `extra` config.
struct Agg {
    h: Harness,
    running: Running,
    naming: Naming,
    /// Its OAI-PMH endpoint.
    oai: String,
}

async fn aggregator(origin: &str, extra: &str) -> Agg {
    let (listener, naming) = bind().await;
    let base = naming.base().to_owned();
    let h = Harness::new(|dir| {
        format!(
            "[aggregator]\nbase_url = \"{base}\"\nlisten = \"127.0.0.1:0\"\ndata_dir = \"{}\"\nuser_agent = \"{USER_AGENT}\"\n\
             oai_name = \"Test aggregate\"\noai_admin_email = \"admin@example.org\"\noai_page_size = 2\n\
             [defaults]\n{UNLIMITED}\n[[source]]\nid = \"a\"\noai = \"{origin}\"\nallow_private = true\n{extra}\n",
            dir.join("store").display()
        )
    });
    let state = WebState::from_config(&h.config, &h.store, &h.fetcher).unwrap();
    assert!(state.oai().is_some(), "oai_name and oai_admin_email turn the endpoint on");
    let running = spawn(listener, naming.clone(), state);
    Agg { h, running, oai: format!("{base}oai"), naming }
}

fn rec(id: &str, datestamp: &str, title: &str, deleted: bool) -> Value {
    json!({"id": id, "datestamp": datestamp, "sets": ["s"], "title": title, "deleted": deleted})
}

/// Waits (bounded) until the clock is in a later second than now: what was stamped before
/// has an earlier datestamp than anything stamped after.
fn next_second() -> String {
    let start = W3cDateTime::now().unix_timestamp();
    for _ in 0..300 {
        std::thread::sleep(std::time::Duration::from_millis(10));
        let now = W3cDateTime::now();
        if now.unix_timestamp() > start {
            let t = now.to_string();
            return format!("{}Z", &t[..19]);
        }
    }
    panic!("the clock did not move for 3 s");
}

/// The tools of a harvest: Sickle's python3 and xmllint.
fn tools(test: &str) -> Option<(Tool, Tool)> {
    Some((sickle_python(test)?, require("xmllint", test)?))
}

/// Sickle harvests `verb` with `args` from `base`; every response and part is validated.
async fn sickle(tools: &(Tool, Tool), base: &str, verb: &str, args: &[(&str, &str)]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = tools.0.command();
    cmd.args([HARVEST, base, dir.path().to_str().unwrap(), verb]);
    cmd.args(args.iter().map(|(k, v)| format!("{k}={v}")));
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
    assert!(out.status.success(), "harvest.py {verb}: {}", String::from_utf8_lossy(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let validated = validate_dir(&tools.1, dir.path());
    assert_eq!(validated, json["responses"].as_u64().unwrap() as usize, "every response was validated");
    json
}

/// Validates each saved response and part; returns how many responses there were.
fn validate_dir(xmllint: &Tool, dir: &Path) -> usize {
    let mut responses = 0;
    let mut names: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    names.sort();
    for path in names {
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        let schema = match name {
            n if n.starts_with("response-") => {
                responses += 1;
                "OAI-PMH.xsd"
            }
            n if n.ends_with("-dc.xml") => "oai_dc.xsd",
            n if n.ends_with("-prov.xml") => "provenance.xsd",
            _ => continue,
        };
        validate(xmllint, &path, schema);
    }
    responses
}

fn validate(xmllint: &Tool, file: &Path, schema: &str) {
    let out = xmllint
        .command()
        .args(["--noout", "--nonet", "--schema", &format!("{SCHEMAS}/{schema}")])
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{} does not validate against {schema}: {}\n{}",
        file.display(),
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(file).unwrap_or_default().chars().take(3000).collect::<String>()
    );
}

/// GETs `query` at the endpoint; the body, validated against OAI-PMH.xsd, as text.
async fn get(agg: &Agg, xmllint: &Tool, query: &str) -> String {
    let r = agg.running.client.get(format!("{}?{query}", agg.oai)).send().await.unwrap();
    assert_eq!(r.status(), 200, "{query}");
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/xml"));
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    let body = r.text().await.unwrap();
    check(xmllint, &body);
    body
}

/// POSTs `form` to the endpoint as `application/x-www-form-urlencoded`.
async fn post_form(agg: &Agg, form: String) -> reqwest::Result<reqwest::Response> {
    agg.running
        .client
        .post(&agg.oai)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
}

fn check(xmllint: &Tool, body: &str) {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), body).unwrap();
    validate(xmllint, f.path(), "OAI-PMH.xsd");
}

fn error_code(body: &str) -> Option<&str> {
    let at = body.find("<error code=\"")? + 13;
    Some(&body[at..at + body[at..].find('"')?])
}

fn token(body: &str) -> Option<String> {
    let start = body.find("<resumptionToken")?;
    let rest = &body[start..];
    let open = rest.find('>')?;
    if rest[..open].ends_with('/') {
        return None;
    }
    let end = rest.find("</resumptionToken>")?;
    Some(rest[open + 1..end].to_owned())
}

fn identifiers(body: &str) -> Vec<String> {
    body.split("<identifier>").skip(1).map(|s| s[..s.find("</identifier>").unwrap()].to_owned()).collect()
}

/// `(identifier, deleted)` of the items a Sickle harvest read.
fn items(v: &Value) -> BTreeMap<String, bool> {
    let items = v["items"].as_array().cloned().unwrap_or_default();
    items.iter().map(|i| (i["id"].as_str().unwrap().to_owned(), i["deleted"].as_bool().unwrap())).collect()
}

/// Every record of the store as `(identifier, deleted)`.
fn expected(agg: &Agg) -> BTreeMap<String, bool> {
    let repo = agg.h.config.aggregator.oai.as_ref().unwrap().repository_identifier.clone();
    let base = agg.naming.base();
    let records = agg.h.store.records_with_prefix(&format!("{base}r/")).map(Result::unwrap);
    records.map(|r| (format!("oai:{repo}:{}", &r.uri[base.len()..]), r.is_deleted())).collect()
}

fn id_of(agg: &Agg, uri: &str) -> String {
    let repo = &agg.h.config.aggregator.oai.as_ref().unwrap().repository_identifier;
    format!("oai:{repo}:{}", &uri[agg.naming.base().len()..])
}

const MODS: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<mods xmlns=\"http://www.loc.gov/mods/v3\"><titleInfo><title>A map</title></titleInfo></mods>\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_client_harvests_the_aggregate_then_exactly_what_changed() {
    let test = "a_real_client_harvests_the_aggregate_then_exactly_what_changed";
    let Some(tools) = tools(test) else { return };
    let old = "2020-01-01T00:00:00Z";
    let v1 = json!({"records": [rec("oai:t:1", old, "One", false), rec("oai:t:2", old, "Two", false),
        rec("oai:t:3", old, "Three", false), rec("oai:t:4", old, "Four", false)]});
    let Some(origin) = PyOai::start(test, &v1, 2) else { return };
    // A ResourceSync source beside it (never reachable: its records are written here).
    let agg = aggregator(
        &origin.base,
        "[[source]]\nid = \"rs\"\nurl = \"http://127.0.0.1:9/resourcelist.xml\"\nallow_private = true\n",
    )
    .await;
    agg.h.pass().await;
    let mut mods = Res::new("rs", "http://rs.example/map.xml", MODS);
    mods.media_type = Some("application/xml".into());
    let plain = Res::new("rs", "http://rs.example/note.txt", "a note");
    let rs_uris = upsert(&agg.h.store, &agg.naming, &["rs"], &[mods, plain]);
    assert_eq!(expected(&agg).len(), 6);
    let baseline_at = next_second();

    // The baseline: everything, with provenance for the harvested records.
    let all = sickle(&tools, &agg.oai, "ListRecords", &[("metadataPrefix", "oai_dc")]).await;
    assert_eq!(items(&all), expected(&agg));
    assert!(all["responses"].as_u64().unwrap() >= 3, "two records a page: the client followed tokens");
    let one = all["items"].as_array().unwrap().iter().find(|i| i["xml"].as_str().unwrap().contains("oai:t:1")).unwrap();
    let xml = one["xml"].as_str().unwrap();
    assert!(xml.contains(&format!("<baseURL>{}</baseURL><identifier>oai:t:1</identifier>", origin.base)), "{xml}");
    assert!(xml.contains("altered=\"false\"") && xml.contains("<dc:title>One</dc:title>"), "{xml}");
    let ids = sickle(&tools, &agg.oai, "ListIdentifiers", &[("metadataPrefix", "oai_dc")]).await;
    assert_eq!(items(&ids), expected(&agg));
    let identify = sickle(&tools, &agg.oai, "Identify", &[]).await;
    assert_eq!(identify["identify"]["deletedRecord"], "persistent");
    assert_eq!(identify["identify"]["granularity"], "YYYY-MM-DDThh:mm:ssZ");
    let sets = sickle(&tools, &agg.oai, "ListSets", &[]).await;
    assert_eq!(sets["sets"], json!(["a", "rs"]));
    let map = id_of(&agg, &rs_uris[0]);
    let formats = sickle(&tools, &agg.oai, "ListMetadataFormats", &[("identifier", &map)]).await;
    assert_eq!(formats["formats"], json!(["oai_dc", "mods"]));
    let got = sickle(&tools, &agg.oai, "GetRecord", &[("identifier", &map), ("metadataPrefix", "mods")]).await;
    assert!(got["items"][0]["xml"].as_str().unwrap().contains("<title>A map</title>"));
    let in_mods = sickle(&tools, &agg.oai, "ListRecords", &[("metadataPrefix", "mods")]).await;
    assert_eq!(items(&in_mods).into_keys().collect::<Vec<_>>(), vec![map.clone()]);
    let note = sickle(
        &tools,
        &agg.oai,
        "GetRecord",
        &[("identifier", &id_of(&agg, &rs_uris[1])), ("metadataPrefix", "oai_dc")],
    )
    .await;
    let note = note["items"][0]["xml"].as_str().unwrap();
    assert!(
        note.contains("<dc:source>http://rs.example/note.txt</dc:source>")
            && note.contains("<dc:format>text/plain</dc:format>"),
        "{note}"
    );

    // Changes at the origin: one update, one deletion, one new record; one deletion in `rs`.
    let now = next_second();
    let v2 = json!({"records": [rec("oai:t:1", &now, "One, revised", false), rec("oai:t:2", &now, "Two", true),
        rec("oai:t:3", old, "Three", false), rec("oai:t:4", old, "Four", false), rec("oai:t:5", &now, "Five", false)]});
    origin.set(&v2);
    agg.h.pass().await;
    delete(&agg.h.store, &["rs"], &rs_uris[1..]);

    let since = sickle(&tools, &agg.oai, "ListRecords", &[("metadataPrefix", "oai_dc"), ("from", &baseline_at)]).await;
    let mut want: BTreeMap<String, bool> = BTreeMap::new();
    for (id, deleted) in expected(&agg) {
        let changed = ["oai%3At%3A1", "oai%3At%3A2", "oai%3At%3A5"].iter().any(|t| id.ends_with(t));
        if changed || id == id_of(&agg, &rs_uris[1]) {
            want.insert(id, deleted);
        }
    }
    assert_eq!(want.len(), 4, "{want:?}");
    assert_eq!(items(&since), want, "exactly the updates and deletions since the baseline");
    let revised =
        since["items"].as_array().unwrap().iter().find(|i| i["id"].as_str().unwrap().ends_with("oai%3At%3A1")).unwrap();
    assert!(revised["xml"].as_str().unwrap().contains("One, revised"));
    let ids =
        sickle(&tools, &agg.oai, "ListIdentifiers", &[("metadataPrefix", "oai_dc"), ("from", &baseline_at)]).await;
    assert_eq!(items(&ids), want);
    let none =
        sickle(&tools, &agg.oai, "ListIdentifiers", &[("metadataPrefix", "oai_dc"), ("from", "2999-01-01")]).await;
    assert_eq!(none["error"], "NoRecordsMatch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_and_foreign_tokens_get_protocol_errors() {
    let test = "hostile_requests_and_foreign_tokens_get_protocol_errors";
    let Some(xmllint) = require("xmllint", test) else { return };
    let old = "2020-01-01T00:00:00Z";
    let records: Vec<Value> = (1..=9).map(|i| rec(&format!("oai:t:{i}"), old, "R", false)).collect();
    let Some(origin) = PyOai::start(test, &json!({ "records": records }), 5) else { return };
    let agg = aggregator(&origin.base, "").await;
    agg.h.pass_one().await;

    for (query, code) in [
        ("verb=Frobnicate", "badVerb"),
        ("", "badVerb"),
        ("verb=Identify&verb=Identify", "badVerb"),
        ("verb=Identify&extra=1", "badArgument"),
        ("verb=ListRecords", "badArgument"),
        ("verb=ListRecords&metadataPrefix=oai_dc&metadataPrefix=oai_dc", "badArgument"),
        ("verb=ListRecords&metadataPrefix=oai_dc&from=2020-01-02&until=2020-01-01", "badArgument"),
        ("verb=ListRecords&metadataPrefix=oai_dc&from=2020-01-01&until=2020-01-02T00:00:00Z", "badArgument"),
        ("verb=ListRecords&metadataPrefix=oai_dc&from=yesterday", "badArgument"),
        ("verb=ListRecords&metadataPrefix=nope", "cannotDisseminateFormat"),
        ("verb=ListRecords&metadataPrefix=oai_dc&set=nope", "noRecordsMatch"),
        ("verb=ListIdentifiers&resumptionToken=AAAA", "badResumptionToken"),
        ("verb=ListSets&resumptionToken=x", "badResumptionToken"),
        ("verb=GetRecord&identifier=oai:else:1&metadataPrefix=oai_dc", "idDoesNotExist"),
        ("verb=ListMetadataFormats&identifier=oai:else:1", "idDoesNotExist"),
    ] {
        let body = get(&agg, &xmllint, query).await;
        assert_eq!(error_code(&body), Some(code), "{query}: {body}");
    }
    // Thousands of arguments: badArgument, at once.
    let many = format!("verb=Identify{}", "&x=1".repeat(5000));
    assert_eq!(error_code(&get(&agg, &xmllint, &many).await), Some("badArgument"));
    // POST, as a form; a body past the limit is refused, never a 500.
    let post = post_form(&agg, "verb=Identify".into()).await.unwrap();
    assert_eq!(post.status(), 200);
    let body = post.text().await.unwrap();
    check(&xmllint, &body);
    assert!(body.contains("<repositoryName>Test aggregate</repositoryName>"), "{body}");
    // The server answers 400 after reading the first 20 KiB and closes: the client sees the
    // 400, saying so (or the pool would send the next request down the closed connection),
    // or (a race) the pipe closed while it still writes the body. Either way it is refused,
    // and the endpoint answers the next request.
    let huge = format!("verb=Identify&x={}", "a".repeat(1 << 20));
    match post_form(&agg, huge).await {
        Ok(r) => {
            assert_eq!(r.status(), 400);
            assert_eq!(r.headers().get("connection").map(|v| v.as_bytes()), Some(&b"close"[..]));
        }
        Err(e) => assert!(e.is_request() && format!("{e:?}").contains("BodyWrite"), "{e:?}"),
    }
    assert_eq!(post_form(&agg, "verb=Identify".into()).await.unwrap().status(), 200);

    // A huge range is a list like any other, paged.
    let first =
        get(&agg, &xmllint, "verb=ListIdentifiers&metadataPrefix=oai_dc&from=0001-01-01&until=9999-12-31").await;
    assert_eq!(identifiers(&first).len(), 2, "{first}");
    assert!(first.contains("completeListSize=\"9\"") && first.contains("cursor=\"0\""), "{first}");
    let t = token(&first).unwrap();
    // A token for ListIdentifiers is no token for ListRecords; a changed one is a forgery.
    let other = get(&agg, &xmllint, &format!("verb=ListRecords&resumptionToken={t}")).await;
    assert_eq!(error_code(&other), Some("badResumptionToken"));
    let mut forged = t.clone().into_bytes();
    forged[5] = if forged[5] == b'B' { b'C' } else { b'B' };
    let forged = String::from_utf8(forged).unwrap();
    let bad = get(&agg, &xmllint, &format!("verb=ListIdentifiers&resumptionToken={forged}")).await;
    assert_eq!(error_code(&bad), Some("badResumptionToken"));
    // An expired one: the same token, answered two days later.
    let oai = agg.running.state.oai().unwrap().clone();
    let later = W3cDateTime::from_unix(W3cDateTime::now().unix_timestamp() + 2 * 86_400, 0).unwrap();
    let pairs = vec![("verb".to_owned(), "ListIdentifiers".to_owned()), ("resumptionToken".to_owned(), t.clone())];
    let mut out = Vec::new();
    oai.respond(&pairs, later, &mut out).unwrap();
    let expired = String::from_utf8(out).unwrap();
    assert_eq!(error_code(&expired), Some("badResumptionToken"), "{expired}");
    assert!(expired.contains("expired"));

    // The most recent token can be re-issued: the same page again. And while harvesting goes
    // on, the list goes on as it started: no record twice, none missed.
    let page2 = get(&agg, &xmllint, &format!("verb=ListIdentifiers&resumptionToken={t}")).await;
    let again = get(&agg, &xmllint, &format!("verb=ListIdentifiers&resumptionToken={t}")).await;
    assert_eq!(identifiers(&page2), identifiers(&again));
    assert!(page2.contains("cursor=\"2\""), "{page2}");
    let now = next_second();
    let mut changed: Vec<Value> = (1..=9).map(|i| rec(&format!("oai:t:{i}"), &now, "Changed", false)).collect();
    changed.push(rec("oai:t:10", &now, "New", false));
    origin.set(&json!({ "records": changed }));
    agg.h.pass_one().await;
    let mut seen = identifiers(&first);
    seen.extend(identifiers(&page2));
    let mut next = token(&page2);
    for _ in 0..20 {
        let Some(t) = next else { break };
        let page = get(&agg, &xmllint, &format!("verb=ListIdentifiers&resumptionToken={t}")).await;
        seen.extend(identifiers(&page));
        next = token(&page);
    }
    assert!(next.is_none(), "the list ends");
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), seen.len(), "no record twice: {seen:?}");
    assert_eq!(seen.len(), 9, "every record that existed at the start, and not the new one: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b_harvests_a_and_keeps_both_hops_of_provenance_and_the_original_via() {
    let test = "b_harvests_a_and_keeps_both_hops_of_provenance_and_the_original_via";
    let Some(xmllint) = require("xmllint", test) else { return };
    let old = "2020-01-01T00:00:00Z";
    let records: Vec<Value> = (1..=3).map(|i| rec(&format!("oai:t:{i}"), old, &format!("R{i}"), false)).collect();
    let Some(origin) = PyOai::start(test, &json!({ "records": records }), 2) else { return };
    let a = aggregator(&origin.base, "").await;
    a.h.pass_one().await;
    let b = aggregator(&a.oai, "").await;
    let report = b.h.pass_one().await;
    assert!(report.error.is_none() && report.created == 3, "{report:?}");

    let mut bodies = Vec::new();
    let mut query = "verb=ListRecords&metadataPrefix=oai_dc".to_owned();
    for _ in 0..10 {
        let body = get(&b, &xmllint, &query).await;
        let next = token(&body);
        bodies.push(body);
        match next {
            Some(t) => query = format!("verb=ListRecords&resumptionToken={t}"),
            None => break,
        }
    }
    let all = bodies.concat();
    for i in 1..=3 {
        let a_uri = a.h.uri("a", &get_record_url(&origin.base, &format!("oai:t:{i}")));
        let a_id = id_of(&a, &a_uri);
        let two_hops =
            format!("<baseURL>{}</baseURL><identifier>{}</identifier><datestamp>", a.oai, a_id.replace('&', "&amp;"));
        assert!(all.contains(&two_hops), "B's originDescription of A for oai:t:{i}: {all}");
        let inner = format!("<baseURL>{}</baseURL><identifier>oai:t:{i}</identifier>", origin.base);
        let at = all.find(&two_hops).unwrap();
        let record_end = at + all[at..].find("</record>").unwrap();
        assert!(all[at..record_end].contains(&inner), "A's originDescription of the origin, nested");
        // B's `via` is the origin's record, as A's is.
        let origin_url = get_record_url(&origin.base, &format!("oai:t:{i}"));
        let a_rec = a.h.store.record(&a_uri).unwrap().unwrap();
        assert_eq!(a_rec.origin, origin_url);
        let b_uri = b.h.uri("a", &get_record_url(&a.oai, &a_id));
        let b_rec = b.h.store.record(&b_uri).unwrap().unwrap();
        assert_eq!(b_rec.origin, origin_url, "B's via is the original origin");
    }
    // Each provenance part validates against provenance.xsd.
    let dir = tempfile::tempdir().unwrap();
    for (n, part) in all.split("<provenance ").skip(1).enumerate() {
        let body = format!("<provenance {}</provenance>", &part[..part.find("</provenance>").unwrap()]);
        let path = dir.path().join(format!("p{n}.xml"));
        std::fs::write(&path, body).unwrap();
        validate(&xmllint, &path, "provenance.xsd");
    }
}

#[tokio::test]
async fn the_endpoint_is_off_without_a_name_and_an_administrator() {
    let text = |extra: &str| {
        format!("[aggregator]\nbase_url = \"http://agg.example/\"\nuser_agent = \"{USER_AGENT}\"\n{extra}\n")
    };
    let parse = |t: &str| tributary::config::Config::parse(t, Path::new("sources.toml"), None);
    let half = parse(&text("oai_name = \"X\"")).unwrap_err().to_string();
    assert!(half.contains("oai_admin_email"), "{half}");
    let stray = parse(&text("oai_page_size = 10")).unwrap_err().to_string();
    assert!(stray.contains("oai_name"), "{stray}");
    let bad = parse(&text("oai_name = \"X\"\noai_admin_email = \"nobody\"")).unwrap_err().to_string();
    assert!(bad.contains("e-mail"), "{bad}");
    let on = parse(&text("oai_name = \"X\"\noai_admin_email = \"a@b.org\"")).unwrap();
    assert_eq!(on.aggregator.oai.unwrap().repository_identifier, "agg.example");

    let (listener, naming) = bind().await;
    let base = naming.base().to_owned();
    let h = Harness::new(|dir| {
        format!(
            "[aggregator]\nbase_url = \"{base}\"\ndata_dir = \"{}\"\nuser_agent = \"{USER_AGENT}\"\n",
            dir.join("store").display()
        )
    });
    let state = WebState::from_config(&h.config, &h.store, &h.fetcher).unwrap();
    assert!(state.oai().is_none());
    let running = spawn(listener, naming, state);
    let r = running.client.get(format!("{base}oai?verb=Identify")).send().await.unwrap();
    assert_eq!(r.status(), 404);
}
