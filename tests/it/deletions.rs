//! Deletions you can trust, against a real `tributary run` and a real upstream on 127.0.0.1:
//! a Source that suddenly lists a fraction of itself has its deletions held (by count, by
//! share, across a restart), not published; the operator applies or keeps them; a resource
//! listed again cancels its held deletion; `confirm_deletions` releases them on its own; a
//! Change List's `deleted` entries are held the same way. And takedowns: by each kind of
//! identifier, kept out of later harvests (by another source carrying the same bytes too),
//! carried by export and import, lifted; and what a downstream Tributary sees of both.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use axum::Router;

use crate::support::cli;
use crate::support::net::{free_port, listen};
use crate::support::push::{Files, NS, serve_file};
use crate::support::service::{Service, parse_metrics, value};

const LIMIT: Duration = Duration::from_secs(90);

/// A Source under `/{prefix}/`: a Capability List, a Resource List of the resources listed
/// now, and (when asked) a Change List the test writes.
struct Upstream {
    files: Files,
    port: u16,
    prefix: String,
}

impl Upstream {
    async fn start(prefix: &str) -> Upstream {
        let files = Files::default();
        let port = listen(Router::new().fallback(serve_file).with_state(files.clone())).await;
        Upstream { files, port, prefix: prefix.to_owned() }
    }

    fn url(&self, rel: &str) -> String {
        format!("http://127.0.0.1:{}/{}/{rel}", self.port, self.prefix)
    }

    /// Lists `res{i}` for each `i` in `listed`, with a Change List in the Capability List when
    /// `changes` is given (its entries: `(i, change)`).
    fn publish(&self, listed: impl IntoIterator<Item = usize>, changes: Option<&[(usize, &str)]>) {
        let p = |rel: &str| format!("/{}/{rel}", self.prefix);
        let mut caps = format!(
            "<urlset {NS}><rs:md capability=\"capabilitylist\"/><url><loc>{}</loc><rs:md capability=\"resourcelist\"/></url>",
            self.url("resourcelist.xml")
        );
        if changes.is_some() {
            caps += &format!("<url><loc>{}</loc><rs:md capability=\"changelist\"/></url>", self.url("changelist.xml"));
        }
        caps += "</urlset>";
        self.files.put(&p("capabilitylist.xml"), caps);
        let mut rl = format!("<urlset {NS}><rs:md capability=\"resourcelist\" at=\"{}\"/>", now(-60));
        for i in listed {
            rl += &format!("<url><loc>{}</loc></url>", self.url(&format!("res{i}")));
            self.files.put(&p(&format!("res{i}")), format!("{} resource {i}", self.prefix));
        }
        rl += "</urlset>";
        self.files.put(&p("resourcelist.xml"), rl);
        if let Some(changes) = changes {
            let mut cl = format!("<urlset {NS}><rs:md capability=\"changelist\" from=\"{}\"/>", now(-60));
            for (i, change) in changes {
                cl += &format!(
                    "<url><loc>{}</loc><lastmod>{}</lastmod><rs:md change=\"{change}\"/></url>",
                    self.url(&format!("res{i}")),
                    now(-1)
                );
            }
            cl += "</urlset>";
            self.files.put(&p("changelist.xml"), cl);
        }
    }

    /// The `[[source]]` table of this Source, polled every second.
    fn source(&self, id: &str, extra: &str) -> String {
        format!(
            "[[source]]\nid = \"{id}\"\nurl = \"{}\"\nallow_private = true\nrate = \"unlimited\"\npoll = \"1s\"\n{extra}\n",
            self.url("capabilitylist.xml")
        )
    }
}

fn now(offset: i64) -> String {
    let t = tributary::model::W3cDateTime::now().unix_timestamp() + offset;
    tributary::model::W3cDateTime::from_unix(t, 0).unwrap().to_string()
}

fn aggregator(port: u16) -> String {
    format!(
        "[aggregator]\nbase_url = \"http://127.0.0.1:{port}/\"\nlisten = \"127.0.0.1:{port}\"\ndata_dir = \"store\"\n\
         user_agent = \"Tributary-test/0.1 (+mailto:test@example.org)\"\n\n"
    )
}

async fn tributary(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let mut cmd = cli::tributary(args);
    cmd.current_dir(dir);
    let o: Output = cli::finish(cmd).await;
    (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

fn row<'a>(st: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    st["sources"].as_array().unwrap().iter().find(|s| s["id"] == id).unwrap()
}

async fn until(s: &Service, what: &str, check: impl Fn(&serde_json::Value) -> bool + Copy) {
    s.wait_until(what, LIMIT, move |s| async move { check(row(&s.json("api/status").await, "up")) }).await;
}

/// `deleted` entries in the set's Change List(s) as Tributary publishes them.
async fn published_deletions(s: &Service, set: &str) -> usize {
    let index = s.get(&format!("sets/{set}/changelist.xml")).await.2;
    let mut lists: Vec<String> = index
        .split("<loc>")
        .skip(1)
        .filter_map(|x| x.split("</loc>").next())
        .filter(|l| l.contains("/changelist"))
        .map(str::to_owned)
        .collect();
    if lists.is_empty() {
        return index.matches("change=\"deleted\"").count();
    }
    let mut n = 0;
    for l in lists.drain(..) {
        let path = l.split_once("127.0.0.1:").and_then(|(_, r)| r.split_once('/')).map(|(_, p)| p.to_owned()).unwrap();
        n += s.get(&path).await.2.matches("change=\"deleted\"").count();
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_that_lists_a_tenth_of_itself_has_its_deletions_held_until_the_operator_decides() {
    let up = Upstream::start("up").await;
    up.publish(0..300, None);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = aggregator(port) + &up.source("up", "");
    let mut s = Service::start(dir.path(), &cfg, &[], &[]).await;
    until(&s, "300 harvested", |r| r["resources"] == 300).await;

    // A bad publishing day: 10 of 300.
    up.publish(0..10, None);
    until(&s, "290 deletions held", |r| r["held_deletions"] == 290).await;
    let st = s.json("api/status").await;
    assert_eq!(row(&st, "up")["resources"], 300, "the records stay live and published");
    assert!(row(&st, "up")["held_since"].is_string());
    assert_eq!(published_deletions(&s, "up").await, 0, "nothing deleted downstream");
    let m = parse_metrics(&s.get("metrics").await.2);
    assert_eq!(value(&m, "tributary_source_deletions_held", &[("source", "up")]), Some(290.0));
    // Later passes find them again without warning again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(s.log().matches("deletions held:").count(), 1, "one WARN line: {}", s.log());

    let (code, out, _) = tributary(dir.path(), &["deletions", "--source", "up"]).await;
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("up: 290 deletions held since"), "{out}");
    assert!(out.contains("/r/up/http/127.0.0.1:") && out.contains("by poll "), "{out}");

    // Held across a restart.
    assert_eq!(s.terminate().await.code(), Some(0));
    let (code, out, _) = tributary(dir.path(), &["deletions", "--json"]).await;
    assert_eq!(code, Some(1));
    assert_eq!(serde_json::from_str::<serde_json::Value>(&out).unwrap().as_array().unwrap().len(), 290);
    let mut s = Service::start(dir.path(), &cfg, &[], &[]).await;
    assert_eq!(row(&s.json("api/status").await, "up")["held_deletions"], 290);

    // The Source recovers but for 5: 285 held deletions cancelled by the listing, 5 applied.
    up.publish(0..295, None);
    until(&s, "the held deletions resolved", |r| r["held_deletions"] == 0 && r["resources"] == 295).await;
    assert_eq!(published_deletions(&s, "up").await, 5);

    // Another bad day, released by the operator: applied and published.
    up.publish(0..20, None);
    until(&s, "275 held", |r| r["held_deletions"] == 275).await;
    let (code, out, err) = tributary(dir.path(), &["deletions", "apply", "--source", "up"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("up: 275 held deletions applied and published"), "{out}");
    until(&s, "20 live", |r| r["resources"] == 20 && r["held_deletions"] == 0).await;
    assert_eq!(published_deletions(&s, "up").await, 280);
    assert_eq!(tributary(dir.path(), &["deletions"]).await.0, Some(0), "nothing held");
    assert_eq!(s.terminate().await.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_a_share_keep_and_confirmations_each_decide_what_is_held() {
    let (a, b, c) = (Upstream::start("a").await, Upstream::start("b").await, Upstream::start("c").await);
    for u in [&a, &b, &c] {
        u.publish(0..40, None);
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = aggregator(port)
        + &a.source("a", "max_deletions = 3")
        + &b.source("b", "max_deletions = \"5%\"")
        + &c.source("c", "max_deletions = 3\nconfirm_deletions = 2");
    let mut s = Service::start(dir.path(), &cfg, &[], &[]).await;
    for id in ["a", "b", "c"] {
        s.wait_until(id, LIMIT, |s| async move { row(&s.json("api/status").await, id)["resources"] == 40 }).await;
    }
    // a: 3 deletions pass, then 4 are held; b: 2 of 40 pass (5%), 3 are held.
    a.publish(0..37, None);
    b.publish(0..38, None);
    c.publish(0..30, None);
    s.wait_until("3 and 2 applied", LIMIT, |s| async move {
        let st = s.json("api/status").await;
        row(&st, "a")["resources"] == 37 && row(&st, "b")["resources"] == 38
    })
    .await;
    a.publish(0..33, None);
    b.publish(0..35, None);
    s.wait_until("4 and 3 held", LIMIT, |s| async move {
        let st = s.json("api/status").await;
        row(&st, "a")["held_deletions"] == 4 && row(&st, "b")["held_deletions"] == 3
    })
    .await;
    let (code, out, _) = tributary(dir.path(), &["deletions", "keep", "--source", "a"]).await;
    assert_eq!(code, Some(0));
    assert!(out.contains("a: 4 held deletions dropped; the resources are kept"), "{out}");
    let st = s.json("api/status").await;
    assert_eq!((row(&st, "a")["held_deletions"].clone(), row(&st, "a")["resources"].clone()), (0.into(), 37.into()));

    // c: 10 held, then released by two passes a poll interval apart that found them again.
    s.wait_until("c's 10 deletions released on their own", LIMIT, |s| async move {
        let r = row(&s.json("api/status").await, "c").clone();
        r["resources"] == 30 && r["held_deletions"] == 0
    })
    .await;
    assert_eq!(published_deletions(&s, "c").await, 10);
    assert_eq!(s.terminate().await.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_lists_deleted_entries_are_held_and_a_later_update_cancels_one() {
    let up = Upstream::start("up").await;
    up.publish(0..100, Some(&[]));
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = aggregator(port) + &up.source("up", "");
    let mut s = Service::start(dir.path(), &cfg, &[], &[]).await;
    until(&s, "100 harvested", |r| r["resources"] == 100).await;
    let deleted: Vec<(usize, &str)> = (0..60).map(|i| (i, "deleted")).collect();
    up.publish(60..100, Some(&deleted));
    until(&s, "60 held", |r| r["held_deletions"] == 60).await;
    assert_eq!(published_deletions(&s, "up").await, 0);
    // The Source updates one of them: it is seen again, its held deletion goes.
    let mut changes = deleted.clone();
    changes.push((7, "updated"));
    up.publish((60..100).chain([7]), Some(&changes));
    until(&s, "59 held", |r| r["held_deletions"] == 59).await;
    assert_eq!(tributary(dir.path(), &["deletions", "apply", "--source", "up"]).await.0, Some(0));
    until(&s, "41 live", |r| r["resources"] == 41).await;
    assert_eq!(published_deletions(&s, "up").await, 59);
    assert_eq!(s.terminate().await.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takedowns_stick_through_harvests_other_sources_export_and_import_until_lifted() {
    let (one, two) = (Upstream::start("one").await, Upstream::start("two").await);
    one.publish(0..10, None);
    two.publish(0..3, None);
    // `two` carries a copy of one's res5, byte for byte.
    two.files.put("/two/res2", "one resource 5");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = aggregator(port) + &one.source("one", "") + &two.source("two", "");
    let mut s = Service::start(dir.path(), &cfg, &[], &[]).await;
    s.wait_until("both harvested", LIMIT, |s| async move {
        let st = s.json("api/status").await;
        row(&st, "one")["resources"] == 10 && row(&st, "two")["resources"] == 3
    })
    .await;
    let tributary_uri = |src: &str, i: usize| {
        format!(
            "http://127.0.0.1:{port}/r/{src}/http/127.0.0.1:{}/{src}/res{i}",
            if src == "one" { one.port } else { two.port }
        )
    };

    // By upstream URI (and so by its bytes: two's copy goes too), by Tributary URI, by digest.
    let (code, out, err) =
        tributary(dir.path(), &["takedown", &one.url("res5"), "--reason", "rights holder's request"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("2 records deleted"), "{out}");
    let (code, out, _) =
        tributary(dir.path(), &["takedown", &tributary_uri("one", 1), "--reason", "personal data"]).await;
    assert_eq!(code, Some(0), "{out}");
    let digest = format!("sha-256:{}", crate::support::digest::sha256_hex(b"one resource 8"));
    let (code, out, _) = tributary(dir.path(), &["takedown", &digest, "--reason", "court order"]).await;
    assert_eq!(code, Some(0), "{out}");
    let (code, _, _) = tributary(dir.path(), &["takedown", "http://x.example/"]).await;
    assert_eq!(code, Some(2), "--reason is required");

    // 410 Gone, the reason never served; the deletions published once; harvests keep them out.
    let gone = s.get(&format!("r/one/http/127.0.0.1:{}/one/res5", one.port)).await;
    assert_eq!(gone.0, 410);
    assert!(!gone.2.contains("rights holder"), "{}", gone.2);
    tokio::time::sleep(Duration::from_secs(4)).await; // several polls
    let st = s.json("api/status").await;
    assert_eq!(row(&st, "one")["resources"], 7);
    assert_eq!(row(&st, "two")["resources"], 2);
    assert_eq!(published_deletions(&s, "one").await, 3);
    let (code, out, _) = tributary(dir.path(), &["provenance", &tributary_uri("one", 5)]).await;
    assert_eq!(code, Some(0));
    assert!(out.contains("taken down on"), "{out}");
    assert!(!out.contains("rights holder"), "{out}");
    let (code, out, _) = tributary(dir.path(), &["takedown", "list"]).await;
    assert_eq!(code, Some(0));
    assert!(out.contains("rights holder's request") && out.contains("court order") && out.contains(&digest), "{out}");

    // Carried by an export into a new store, which keeps them out too.
    assert_eq!(tributary(dir.path(), &["store", "export", "backup.jsonl"]).await.0, Some(0));
    let backup = std::fs::read_to_string(dir.path().join("backup.jsonl")).unwrap();
    assert_eq!(backup.matches("\"kind\":\"takedown\"").count(), 3);
    assert_eq!(s.terminate().await.code(), Some(0));
    std::fs::rename(dir.path().join("store"), dir.path().join("old")).unwrap();
    std::fs::create_dir(dir.path().join("store")).unwrap();
    for sub in ["packs", "blobs"] {
        std::fs::rename(dir.path().join("old").join(sub), dir.path().join("store").join(sub)).unwrap();
    }
    let (code, _, err) = tributary(dir.path(), &["store", "import", "backup.jsonl"]).await;
    assert_eq!(code, Some(0), "{err}");
    let (code, out, _) = tributary(dir.path(), &["audit", "--source", "one"]).await;
    assert_eq!(code, Some(0), "taken down is not missing: {out}");
    let mut s = Service::start(dir.path(), &cfg, &[], &[]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(row(&s.json("api/status").await, "one")["resources"], 7);

    // Lifted: the next poll brings it back as a creation.
    let (code, out, _) = tributary(dir.path(), &["takedown", "lift", &one.url("res5")]).await;
    assert_eq!(code, Some(0), "{out}");
    s.wait_until("res5 and its copy are back", LIMIT, |s| async move {
        let st = s.json("api/status").await;
        row(&st, "one")["resources"] == 8 && row(&st, "two")["resources"] == 3
    })
    .await;
    assert_eq!(s.get(&format!("r/one/http/127.0.0.1:{}/one/res5", one.port)).await.0, 200);
    assert_eq!(s.terminate().await.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downstream_tributary_sees_no_held_deletion_and_sees_a_takedown() {
    let up = Upstream::start("up").await;
    up.publish(0..100, None);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut s = Service::start(dir.path(), &(aggregator(port) + &up.source("up", "")), &[], &[]).await;
    until(&s, "100 harvested", |r| r["resources"] == 100).await;
    // Downstream: a second Tributary harvesting the first's set once per `harvest`.
    let down = dir.path().join("down");
    std::fs::create_dir(&down).unwrap();
    let down_cfg = aggregator(free_port())
        + &format!(
            "[[source]]\nid = \"first\"\nurl = \"http://127.0.0.1:{port}/sets/up/capabilitylist.xml\"\nallow_private = true\n\
             rate = \"unlimited\"\nallow_outside_authority = true\n"
        );
    std::fs::write(down.join("sources.toml"), down_cfg).unwrap();
    let (code, out, err) = tributary(&down, &["harvest"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("fetched 100"), "{out}");

    up.publish(0..5, None);
    until(&s, "95 held", |r| r["held_deletions"] == 95).await;
    let (code, out, _) = tributary(&down, &["harvest"]).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("deleted 0"), "no deletion reaches downstream: {out}");

    let (code, _, _) = tributary(dir.path(), &["takedown", &up.url("res3"), "--reason", "personal data"]).await;
    assert_eq!(code, Some(0));
    let (code, out, _) = tributary(&down, &["harvest"]).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("deleted 1"), "the takedown's deletion reaches downstream: {out}");
    assert_eq!(s.terminate().await.code(), Some(0));
}

// ---------------------------------------------------------------------------------------------
// The other ways a deletion enters, through the harvester in process (the same pass `run`
// makes) against a real upstream.

mod paths {
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;

    use crate::support::feeds::{self, entry, feed_source};
    use crate::support::harness::{Harness, UNLIMITED, config_text};
    use crate::support::oai::{Hostile, PyOai, Script, envelope, formats, identify, ok, record};

    fn oai_source(base: &str, extra: &str) -> Harness {
        Harness::new(|dir| {
            format!(
                "{}[[source]]\nid = \"a\"\noai = \"{base}\"\nallow_private = true\n{extra}\n",
                config_text(dir, "", UNLIMITED, &[])
            )
        })
    }

    fn now() -> String {
        let t = tributary::model::W3cDateTime::now().to_string();
        format!("{}Z", &t[..19])
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn oai_deleted_headers_are_held_then_applied() {
        let old = "2020-01-01T00:00:00Z";
        let recs = |deleted: usize, stamp: &str| {
            let r: Vec<serde_json::Value> = (0..80)
                .map(|i| {
                    let d = i < deleted;
                    json!({"id": format!("oai:d:{i}"), "datestamp": if d { stamp } else { old }, "sets": [], "title": format!("R{i}"), "deleted": d})
                })
                .collect();
            json!({"records": r})
        };
        let Some(repo) = PyOai::start("oai_deleted_headers_are_held_then_applied", &recs(0, old), 50) else { return };
        let h = oai_source(&repo.base, "");
        assert!(h.pass_one().await.error.is_none());
        assert_eq!(h.live("a").len(), 80);
        repo.set(&recs(60, &now()));
        let r = h.pass_one().await;
        assert_eq!((r.deleted, r.held), (0, 60), "{r:?}");
        assert_eq!(h.live("a").len(), 80, "held: the records stay live");
        assert_eq!(h.store.apply_held("a").unwrap(), 60);
        assert_eq!(h.live("a").len(), 20);
        assert_eq!(h.events("a").iter().filter(|(c, _)| c == "Deleted").count(), 60);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_oai_list_shorter_than_its_complete_list_size_is_partial_and_deletes_nothing() {
        // A repository that keeps no deletions is listed in full at every poll (oai_relist):
        // six records, then a list that ends after three while declaring six.
        let lists = Arc::new(AtomicUsize::new(0));
        let l = lists.clone();
        let script: Script =
            Arc::new(move |args: &HashMap<String, String>, _| match args.get("verb").map(String::as_str) {
                Some("Identify") => ok(identify("YYYY-MM-DDThh:mm:ssZ", "no")),
                Some("ListMetadataFormats") => ok(formats()),
                _ => {
                    let n = if l.fetch_add(1, Ordering::SeqCst) == 0 { 6 } else { 3 };
                    let records: Vec<String> = (0..n).map(|i| record(&format!("oai:s:{i}"), "t")).collect();
                    ok(envelope(&format!(
                        "<ListRecords>{}<resumptionToken completeListSize=\"6\" cursor=\"0\"/></ListRecords>",
                        records.concat()
                    )))
                }
            });
        let up = Hostile::start(script).await;
        let h = oai_source(&up.base, "oai_relist = \"1s\"");
        let first = h.pass_one().await;
        assert!(first.error.is_none(), "{first:?}");
        assert_eq!(h.live("a").len(), 6);
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
        let r = h.pass_one().await;
        let e = r.error.clone().expect("a short list is an error");
        assert!(e.contains("ended after 3 records") && e.contains("completeListSize 6"), "{e}");
        assert!(r.partial() || r.unchanged > 0, "kept as a partial pass: {r:?}");
        assert_eq!(h.live("a").len(), 6, "nothing deleted");
        assert_eq!(r.deleted + r.held, 0, "{r:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_complete_feed_that_lost_most_items_has_the_deletions_held() {
        let site = feeds::Site::default();
        let up = feeds::serve(&site).await;
        let url = up.url("/all.atom").to_string();
        let items = |n: usize| {
            (0..n)
                .map(|i| {
                    entry(&format!("item{i}"), &format!("Item {i}"), 1, false, &[(1, "2026-01-01T00:00:00Z", "ep")])
                })
                .collect::<Vec<_>>()
        };
        feeds::set(&site, "/all.atom", feeds::atom(&url, Some(&url), Some(("1", "5")), &items(70)));
        let h = feed_source("a", &url, "");
        assert!(h.pass_one().await.error.is_none());
        assert_eq!(h.live("a").len(), 70);
        feeds::set(&site, "/all.atom", feeds::atom(&url, Some(&url), Some(("1", "6")), &items(5)));
        let r = h.pass_one().await;
        assert_eq!((r.deleted, r.held), (0, 65), "{r:?}");
        assert_eq!(h.live("a").len(), 70);
        // The feed comes back whole: the listing cancels every held deletion.
        feeds::set(&site, "/all.atom", feeds::atom(&url, Some(&url), Some(("1", "7")), &items(70)));
        let r = h.pass_one().await;
        assert_eq!((r.deleted, r.held), (0, 0), "{r:?}");
        assert!(h.store.held_deletions(Some("a")).unwrap().is_empty());
    }
}
