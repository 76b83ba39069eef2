//! A baseline from a Resource Dump that fails part-way, end to end on 127.0.0.1: the second
//! of two packages has an entry whose bitstream does not match its manifest's hash. The poll
//! must fall back to the Resource List and end with the Source's exact state, one `created`
//! event per resource, and without fetching again what the first package already stored.

use std::sync::{Arc, Mutex};

use crate::support::digest::sha256_hex;
use crate::support::harness::{BASE_URL, Harness, UNLIMITED, config_text};
use crate::support::upstream::{Reply, Upstream};
use crate::support::zipkit;
use tributary::naming::Naming;

const RESOURCES: usize = 6;

fn content(i: usize) -> Vec<u8> {
    format!("resource {i}: {}", "x".repeat(100 + i)).into_bytes()
}

fn urlset(md: &str, items: &str) -> Vec<u8> {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" \
         xmlns:rs=\"http://www.openarchives.org/rs/terms/\">\n<rs:md {md}/>\n{items}</urlset>\n"
    )
    .into_bytes()
}

/// A package of the resources `range`; the entry of `lying` declares another bitstream's hash.
fn package(base: &str, range: std::ops::Range<usize>, lying: Option<usize>) -> Vec<u8> {
    let mut entries = Vec::new();
    let mut files = Vec::new();
    for i in range {
        let path = format!("/res/{i}.txt");
        let declared = if lying == Some(i) { content(i + 100) } else { content(i) };
        let md = zipkit::md_for(&path, &declared)
            .replace(&format!("length=\"{}\"", declared.len()), &format!("length=\"{}\"", content(i).len()));
        entries.push((format!("{base}/r/{i}"), md));
        files.push(zipkit::stored(&path[1..], &content(i)));
    }
    let refs: Vec<(&str, String)> = entries.iter().map(|(l, m)| (l.as_str(), m.clone())).collect();
    let mut all = vec![zipkit::stored("manifest.xml", zipkit::manifest("resourcedump-manifest", &refs).as_bytes())];
    all.extend(files);
    zipkit::build(&all)
}

fn serve(base: &str, path: &str) -> Reply {
    let packages = [package(base, 0..3, None), package(base, 3..RESOURCES, Some(4))];
    match path {
        "/capabilitylist.xml" => Reply::xml(urlset(
            "capability=\"capabilitylist\"",
            &format!(
                "<url><loc>{base}/resourcelist.xml</loc><rs:md capability=\"resourcelist\"/></url>\n\
                 <url><loc>{base}/resourcedump.xml</loc><rs:md capability=\"resourcedump\"/></url>\n"
            ),
        )),
        "/resourcelist.xml" => {
            let items: String = (0..RESOURCES)
                .map(|i| {
                    let c = content(i);
                    format!(
                        "<url><loc>{base}/r/{i}</loc><rs:md hash=\"sha-256:{}\" length=\"{}\"/></url>\n",
                        sha256_hex(&c),
                        c.len()
                    )
                })
                .collect();
            Reply::xml(urlset("capability=\"resourcelist\" at=\"2024-01-01T00:00:00Z\"", &items))
        }
        "/resourcedump.xml" => {
            let items: String = packages
                .iter()
                .enumerate()
                .map(|(n, z)| {
                    format!(
                        "<url><loc>{base}/p{n}.zip</loc><rs:md type=\"application/zip\" length=\"{}\"/></url>\n",
                        z.len()
                    )
                })
                .collect();
            Reply::xml(urlset("capability=\"resourcedump\" at=\"2024-01-01T00:00:00Z\"", &items))
        }
        "/p0.zip" | "/p1.zip" => {
            let n = usize::from(path == "/p1.zip");
            Reply::ok(packages[n].clone()).header("Content-Type", "application/zip")
        }
        p => match p.strip_prefix("/r/").and_then(|i| i.parse::<usize>().ok()) {
            Some(i) if i < RESOURCES => Reply::ok(content(i)),
            _ => Reply::status(404),
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_that_does_not_verify_falls_back_to_the_list_keeping_what_the_dump_stored() {
    let base_cell: Arc<Mutex<String>> = Arc::default();
    let b2 = base_cell.clone();
    let up = Upstream::start(move |hit, _| serve(&b2.lock().unwrap(), &hit.path)).await;
    let base = up.url("/").as_str().trim_end_matches('/').to_owned();
    *base_cell.lock().unwrap() = base.clone();
    let url = format!("{base}/capabilitylist.xml");
    let h = Harness::new(|dir| config_text(dir, "", UNLIMITED, &[("a", &url, "dumps = true")]));

    let summary = h.pass().await;
    assert!(summary.sources[0].error.is_none(), "{summary}");

    let naming = Naming::new(&url::Url::parse(BASE_URL).unwrap());
    let expected: std::collections::HashMap<String, String> = (0..RESOURCES)
        .map(|i| (naming.resource("a", &format!("{base}/r/{i}")).unwrap(), sha256_hex(&content(i))))
        .collect();
    assert_eq!(h.live("a"), expected, "the Source's exact state");
    assert_eq!(up.count("/p1.zip"), 1, "the broken package is read once");
    for i in 0..3 {
        assert_eq!(up.count(&format!("/r/{i}")), 0, "r/{i} came in the first package: not fetched again");
    }
    assert_eq!(up.count("/r/4"), 1, "the entry that did not verify is fetched from its origin");
    let events = h.events("a");
    assert_eq!(events.len(), RESOURCES, "one event per resource: {events:?}");
    assert!(events.iter().all(|(change, _)| change == "Created"), "{events:?}");
}
