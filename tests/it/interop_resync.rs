//! Interop with documents no one here wrote: the Python reference implementation
//! (`pip install resync`) builds a Source from a directory with `resync-build` — a Resource
//! List with md5 and sha-256, a Capability List and a Source Description — which is served on
//! 127.0.0.1 and harvested byte-identically.
//!
//! Without `resync` the test is skipped with a notice, except under `CI=true`, where the
//! missing tool is a failure (CI must install it); see `support::tools`.

use std::path::{Path, PathBuf};

use crate::support::harness::{Harness, config_text};
use crate::support::tools::{Tool, resync_tool};
use crate::support::upstream::{Reply, Upstream};
use tributary::model::HashAlgorithm;

/// One source `py` at `url`, without a rate limit.
fn harness(url: &str) -> Harness {
    Harness::new(|dir| config_text(dir, "", "rate = \"unlimited\"\n", &[("py", url, "")]))
}

/// Files of assorted sizes (some above the store's inline limit), in nested directories.
fn write_files(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for i in 0..24u32 {
        let dir = if i % 3 == 0 { "files/deep/er" } else { "files" };
        let rel = format!("{dir}/item-{i}.dat");
        let len = 10 + (i as usize * 1_777) % 20_000;
        let body: Vec<u8> =
            (0..len).map(|j| ((j as u32).wrapping_mul(2_654_435_761).wrapping_add(i) >> 13) as u8).collect();
        std::fs::create_dir_all(root.join(dir)).unwrap();
        std::fs::write(root.join(&rel), &body).unwrap();
        out.push((rel, body));
    }
    out
}

fn resync_build(tool: &Tool, root: &Path, args: &[&str]) {
    let out = tool.command().current_dir(root).args(args).output().expect("resync-build runs");
    assert!(out.status.success(), "resync-build {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Serves `root` by path; documents as XML.
async fn serve(root: PathBuf) -> Upstream {
    Upstream::start(move |hit, _| {
        let rel = hit.path.trim_start_matches('/');
        if rel.contains("..") {
            return Reply::status(400);
        }
        match std::fs::read(root.join(rel)) {
            Ok(body) if rel.ends_with(".xml") || rel.ends_with("resourcesync") => Reply::xml(body),
            Ok(body) => Reply::ok(body),
            Err(_) => Reply::status(404),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn harvests_a_source_built_by_the_reference_implementation() {
    let Some(tool) =
        resync_tool("resync-build", "interop_resync::harvests_a_source_built_by_the_reference_implementation")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    let files = write_files(&site);
    let srv = serve(site.clone()).await;
    let base = format!("http://{}/", srv.addr);
    let (cl, rl) = (format!("{base}capabilitylist.xml"), format!("{base}resourcelist.xml"));
    resync_build(
        &tool,
        &site,
        &[
            "--write-resourcelist",
            "--hash",
            "md5",
            "--hash",
            "sha-256",
            "--capabilitylist-link",
            &cl,
            "--outfile",
            "resourcelist.xml",
            &format!("{base}files/=files"),
        ],
    );
    let sd = format!("{base}.well-known/resourcesync");
    resync_build(
        &tool,
        &site,
        &[
            "--write-capabilitylist",
            &format!("resourcelist={rl}"),
            "--sourcedescription-link",
            &sd,
            "--outfile",
            "capabilitylist.xml",
        ],
    );
    std::fs::create_dir_all(site.join(".well-known")).unwrap();
    resync_build(&tool, &site, &["--write-sourcedescription", &cl, "--outfile", ".well-known/resourcesync"]);

    let h = harness(&base);
    let summary = h.pass().await;
    assert_eq!((summary.fetched(), summary.failed()), (files.len() as u64, 0), "{summary}");
    assert!(srv.count("/.well-known/resourcesync") >= 1, "discovered from the site root");

    for (rel, body) in &files {
        let url = format!("{base}{rel}");
        let rec = h.record("py", &url).unwrap_or_else(|| panic!("{rel} not stored"));
        assert!(rec.declared.get(&HashAlgorithm::Md5).is_some() && rec.declared.get(&HashAlgorithm::Sha256).is_some());
        assert_eq!(h.content("py", &url).as_ref(), Some(body), "{rel}");
    }
}

/// Incremental: a Change List written by `resync-build --write-changelist` (no `from`, no
/// `datetime`, changes in the tool's own order) after a baseline from its Resource List is
/// applied exactly once: the store then equals the directory, and re-reading the list
/// changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_a_change_list_built_by_the_reference_implementation() {
    let Some(tool) =
        resync_tool("resync-build", "interop_resync::follows_a_change_list_built_by_the_reference_implementation")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    let mut files = write_files(&site);
    let srv = serve(site.clone()).await;
    let base = format!("http://{}/", srv.addr);
    let map = format!("{base}files/=files");
    let (rl, cl) = (format!("{base}resourcelist.xml"), format!("{base}changelist.xml"));
    resync_build(&tool, &site, &["--write-resourcelist", "--hash", "md5", "--outfile", "resourcelist.xml", &map]);
    resync_build(&tool, &site, &["--write-changelist", "--empty", "--outfile", "changelist.xml"]);
    let caps = format!("resourcelist={rl},changelist={cl}");
    resync_build(&tool, &site, &["--write-capabilitylist", &caps, "--outfile", "capabilitylist.xml"]);

    let h = harness(&format!("{base}capabilitylist.xml"));
    let first = h.pass().await;
    assert_eq!((first.fetched(), first.failed()), (files.len() as u64, 0), "{first}");

    // One file updated, one deleted, one created; then the tool writes the Change List.
    let (upd, gone) = (files[1].0.clone(), files.remove(2).0);
    std::fs::write(site.join(&upd), b"updated content").unwrap();
    files[1].1 = b"updated content".to_vec();
    std::fs::remove_file(site.join(&gone)).unwrap();
    std::fs::write(site.join("files/new.dat"), b"brand new").unwrap();
    files.push(("files/new.dat".into(), b"brand new".to_vec()));
    resync_build(
        &tool,
        &site,
        &[
            "--write-changelist",
            "--reference",
            "resourcelist.xml",
            "--hash",
            "md5",
            "--outfile",
            "changelist.xml",
            &map,
        ],
    );
    let rl_hits = srv.count("/resourcelist.xml");
    let second = h.pass().await;
    let r = &second.sources[0];
    assert_eq!((r.created, r.updated, r.deleted, r.failed), (1, 1, 1, 0), "{second}");
    assert_eq!(srv.count("/resourcelist.xml"), rl_hits, "incremental: the Resource List is not read again");
    let third = h.pass().await;
    let r = &third.sources[0];
    assert_eq!((r.created, r.updated, r.deleted, r.fetched), (0, 0, 0, 0), "re-read applies nothing: {third}");

    let audit = tributary::harvest::audit::audit_sources(&h.config, &h.store, &[], false).await.unwrap();
    assert!(audit[0].is_in_sync(), "ahead of the Resource List, in step with the Change List: {:?}", audit[0]);

    let gone_rec = h.record("py", &format!("{base}{gone}")).unwrap();
    assert!(gone_rec.is_deleted(), "{gone} deleted");
    for (rel, body) in &files {
        let url = format!("{base}{rel}");
        assert!(h.record("py", &url).is_some(), "{rel} not stored");
        assert_eq!(h.content("py", &url).as_ref(), Some(body), "{rel}");
    }
}
