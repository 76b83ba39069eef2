//! Interop: a Resource Dump package written by the Python reference implementation
//! (`resync-build --write-resourcedump`, `pip install resync`) is harvested correctly. Its
//! manifests write `path` without the leading slash and omit `at` and the `up` link; both
//! are accepted.
//!
//! Without `resync-build` the test is skipped with a notice, except under `CI=true`, where
//! `.ci/setup` installs it and its absence is a failure (`support::tools`).

use std::num::NonZeroU32;
use std::path::Path;
use std::time::Duration;

use crate::support::digest::sha256_id;
use crate::support::fetcher::{fetcher, settings};
use crate::support::rs::urlset;
use crate::support::store::temp_store;
use crate::support::tools::{Tool, resync_tool};
use crate::support::upstream::{Reply, Upstream};
use tributary::config::Settings;
use tributary::harvest::dump::{Content, DumpOptions, DumpWalker};

/// Runs `resync-build` in `dir`, writing a Resource Dump of `dir/data` into `dir/out`.
fn resync_build(tool: &Tool, dir: &Path) -> std::process::Output {
    let mut cmd = tool.command();
    cmd.current_dir(dir).args(["--write-resourcedump", "--outfile", "out/dump", "--hash", "sha-256", "--hash", "md5"]);
    cmd.arg("http://example.org/data=data").output().expect("resync-build runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_dump_written_by_resync_is_harvested() {
    let Some(tool) = resync_tool("resync-build", "dump_interop::resource_dump_written_by_resync_is_harvested") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let files: [(&str, Vec<u8>); 3] = [
        ("a.txt", b"hello one\n".to_vec()),
        ("sub/b.bin", (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect()),
        ("sub/deeper/c.xml", b"<x/>".to_vec()),
    ];
    for (name, data) in &files {
        let p = tmp.path().join("data").join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, data).unwrap();
    }
    std::fs::create_dir_all(tmp.path().join("out")).unwrap();
    let out = resync_build(&tool, tmp.path());
    assert!(out.status.success(), "resync-build failed: {}", String::from_utf8_lossy(&out.stderr));
    let zip = std::fs::read(tmp.path().join("out/dump00000.zip")).unwrap();

    let dump = urlset("resourcedump", &[("up", "/capabilitylist.xml")], &[("/dump00000.zip", "")]);
    let up =
        Upstream::routes(vec![("/dump.xml", vec![Reply::xml(dump)]), ("/dump00000.zip", vec![Reply::ok(zip)])]).await;
    let settings =
        Settings { concurrency: NonZeroU32::new(2).unwrap(), total_timeout: Duration::from_secs(20), ..settings() };
    let (_store_dir, store) = temp_store();
    let fetcher = fetcher();
    let opts = DumpOptions::new(&settings, None);
    let mut walker = DumpWalker::new(&fetcher, &store, up.url("/dump.xml"), &settings, opts);
    let package = walker.next_package().await.unwrap().expect("one package");
    assert!(walker.next_package().await.unwrap().is_none());

    let mut stored: Vec<(String, [u8; 32])> = package
        .items
        .iter()
        .map(|i| match &i.outcome {
            Ok(Content::Stored { url, blob }) => (url.to_string(), blob.id.0),
            other => panic!("{}: {other:?}", i.entry.loc),
        })
        .collect();
    stored.sort();
    let mut expected: Vec<(String, [u8; 32])> =
        files.iter().map(|(n, d)| (format!("http://example.org/data/{n}"), sha256_id(d).0)).collect();
    expected.sort();
    assert_eq!(stored, expected);
    assert!(package.items.iter().all(|i| i.declared().0.len() == 2), "md5 and sha-256 declared and verified");
}
