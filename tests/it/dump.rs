//! Resource Dumps and Change Dumps (spec §11, §13) harvested from a real HTTP server on
//! 127.0.0.1 into a real store: good packages, change order with deletes, and hostile ZIPs.

use std::time::Duration;

use crate::support::digest::sha256_id;
use crate::support::fetcher::{fetcher, settings as default_settings};
use crate::support::rs::urlset;
use crate::support::store::{read_blob, temp_store};
use crate::support::upstream::{Reply, Upstream};
use crate::support::zipkit::{self, RawEntry, build, deflated, manifest, md_for, stored, symlink, zero_bomb};
use tributary::config::Settings;
use tributary::harvest::dump::{Content, DumpError, DumpOptions, DumpWalker, EntryError, Package, process_dump};
use tributary::model::Change;
use tributary::store::Store;

/// The default settings, with time for the largest packages here.
fn settings() -> Settings {
    Settings { total_timeout: Duration::from_secs(20), ..default_settings() }
}

/// A test site serving a dump of capability `cap` at `/dump.xml` with `packages` at
/// `/p{i}.zip`.
struct Site {
    up: Upstream,
    _dir: tempfile::TempDir,
    store: Store,
}

impl Site {
    async fn new(cap: &str, packages: Vec<Vec<u8>>) -> Site {
        let paths: Vec<String> = (0..packages.len()).map(|i| format!("/p{i}.zip")).collect();
        let locs: Vec<(&str, &str)> = paths.iter().map(|p| (p.as_str(), "")).collect();
        Site::serving(urlset(cap, &[("up", "/capabilitylist.xml")], &locs), paths, packages).await
    }

    /// A Resource Dump whose package `i` is declared with the attributes `mds[i]`.
    async fn declaring(packages: Vec<Vec<u8>>, mds: &[String]) -> Site {
        let paths: Vec<String> = (0..packages.len()).map(|i| format!("/p{i}.zip")).collect();
        let mut dump = urlset("resourcedump", &[("up", "/capabilitylist.xml")], &[]);
        let urls: String =
            paths.iter().zip(mds).map(|(p, md)| format!("<url><loc>{p}</loc><rs:md {md}/></url>")).collect();
        dump = dump.replace("</urlset>", &format!("{urls}</urlset>"));
        Site::serving(dump, paths, packages).await
    }

    async fn serving(dump: String, paths: Vec<String>, packages: Vec<Vec<u8>>) -> Site {
        let mut routes: Vec<(&str, Vec<Reply>)> = vec![("/dump.xml", vec![Reply::xml(dump)])];
        for (p, z) in paths.iter().zip(packages) {
            routes.push((p.as_str(), vec![Reply::ok(z).header("Content-Type", "application/zip")]));
        }
        let up = Upstream::routes(routes).await;
        let (dir, store) = temp_store();
        Site { up, _dir: dir, store }
    }

    /// Every package outcome, stopping after a walk-ending error.
    async fn walk_with(&self, options: DumpOptions) -> Vec<Result<Package, DumpError>> {
        let s = settings();
        let mut w = DumpWalker::new(&fetcher(), &self.store, self.up.url("/dump.xml"), &s, options);
        let mut out = Vec::new();
        for _ in 0..20 {
            match w.next_package().await {
                Ok(None) => return out,
                Ok(Some(p)) => out.push(Ok(p)),
                Err(e) => {
                    let last = !e.is_package_local();
                    out.push(Err(e));
                    if last {
                        return out;
                    }
                }
            }
        }
        panic!("walk did not end");
    }

    async fn walk(&self) -> Vec<Result<Package, DumpError>> {
        self.walk_with(DumpOptions::new(&settings(), None)).await
    }

    /// The single package of a one-package dump.
    async fn one(&self) -> Result<Package, DumpError> {
        let mut all = self.walk().await;
        assert_eq!(all.len(), 1, "one package expected");
        all.remove(0)
    }
}

fn package(manifest_xml: &str, mut entries: Vec<RawEntry>) -> Vec<u8> {
    entries.insert(0, deflated("manifest.xml", manifest_xml.as_bytes()));
    build(&entries)
}

fn rd_manifest(entries: &[(&str, String)]) -> String {
    manifest("resourcedump-manifest", entries)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn good_resource_dump_stores_every_bitstream_verified() {
    let big = crate::support::zipkit::crc32(b"seed").to_le_bytes().repeat(5_000); // 20 KB: a file blob
    let res: Vec<(String, Vec<u8>)> = vec![
        ("http://example.org/res1".into(), b"<html>one</html>".to_vec()),
        ("http://example.org/res2".into(), big),
        ("http://example.org/res3".into(), b"three".repeat(100)),
        ("http://example.org/res4".into(), Vec::new()),
    ];
    let mk = |part: &[(String, Vec<u8>)]| {
        let m: Vec<(&str, String)> = part
            .iter()
            .enumerate()
            .map(|(i, (loc, data))| (loc.as_str(), md_for(&format!("/resources/r{i}"), data) + " type=\"text/html\""))
            .collect();
        let files = part
            .iter()
            .enumerate()
            .map(|(i, (_, d))| {
                if i % 2 == 0 { deflated(&format!("resources/r{i}"), d) } else { stored(&format!("resources/r{i}"), d) }
            })
            .collect();
        package(&rd_manifest(&m), files)
    };
    let site = Site::new("resourcedump", vec![mk(&res[..2]), mk(&res[2..])]).await;
    let mut seen = Vec::new();
    let summary = process_dump(
        &fetcher(),
        &site.store,
        site.up.url("/dump.xml"),
        &settings(),
        DumpOptions::new(&settings(), None),
        |p| {
            seen.push(p);
            std::ops::ControlFlow::Continue(())
        },
    )
    .await
    .unwrap();
    assert_eq!((summary.packages, summary.stored, summary.failed, summary.deleted), (2, 4, 0, 0));
    let items: Vec<_> = seen.iter().flat_map(|p| &p.items).collect();
    for (item, (loc, data)) in items.iter().zip(&res) {
        let Ok(Content::Stored { url, blob }) = &item.outcome else { panic!("{loc}: {:?}", item.outcome) };
        assert_eq!(url.as_str(), loc);
        assert_eq!((blob.id, blob.length), (sha256_id(data), data.len() as u64));
        assert_eq!(&read_blob(&site.store, &blob.id), data);
        assert_eq!(item.media_type(), Some("text/html"));
        assert_eq!(item.change(), None);
        assert_eq!(item.length(), Some(data.len() as u64));
    }
    assert_eq!(seen[0].kind, tributary::model::DocumentKind::ResourceDumpManifest);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_dump_is_applied_in_forward_chronological_order_with_deletes() {
    let (v1, v2, r9) = (b"res7 version 1".to_vec(), b"res7 version 2!".to_vec(), b"pdf".to_vec());
    let ch =
        |change: &str, at: &str, md: String| format!("change=\"{change}\" datetime=\"2024-01-02T{at}:00:00Z\" {md}");
    // Written out of order: the two res7 entries swapped; datetimes put them right.
    let m = manifest(
        "changedump-manifest",
        &[
            ("http://example.org/res7.html", ch("updated", "20", md_for("/changes/res7-v2.html", &v2))),
            ("http://example.org/res9.pdf", ch("updated", "13", md_for("/changes/res9.pdf", &r9))),
            ("http://example.org/res5.tiff", ch("deleted", "19", String::new())),
            ("http://example.org/res7.html", ch("created", "12", md_for("/changes/res7.html", &v1))),
        ],
    );
    let zip = package(
        &m,
        vec![stored("changes/res7.html", &v1), deflated("changes/res9.pdf", &r9), stored("changes/res7-v2.html", &v2)],
    );
    let site = Site::new("changedump", vec![zip]).await;
    let p = site.one().await.unwrap();
    assert_eq!(p.kind, tributary::model::DocumentKind::ChangeDumpManifest);
    let order: Vec<(usize, Option<Change>, &str)> =
        p.items.iter().map(|i| (i.position, i.change(), i.entry.loc.as_str())).collect();
    assert_eq!(
        order,
        vec![
            (3, Some(Change::Created), "http://example.org/res7.html"),
            (1, Some(Change::Updated), "http://example.org/res9.pdf"),
            (2, Some(Change::Deleted), "http://example.org/res5.tiff"),
            (0, Some(Change::Updated), "http://example.org/res7.html"),
        ]
    );
    let blob = |i: usize| match &p.items[i].outcome {
        Ok(Content::Stored { blob, .. }) => blob.id,
        other => panic!("{other:?}"),
    };
    assert_eq!((blob(0), blob(1), blob(3)), (sha256_id(&v1), sha256_id(&r9), sha256_id(&v2)));
    assert!(
        matches!(&p.items[2].outcome, Ok(Content::Deleted { url }) if url.as_str() == "http://example.org/res5.tiff")
    );
}

/// A package with one good entry plus `bad`, whose manifest entry is `(loc, md)`.
fn with_good(bad_md: String, bad: Vec<RawEntry>) -> Vec<u8> {
    let m =
        rd_manifest(&[("http://example.org/good", md_for("/ok/good", b"good")), ("http://example.org/bad", bad_md)]);
    let mut files = vec![stored("ok/good", b"good")];
    files.extend(bad);
    package(&m, files)
}

/// The good entry was stored; returns the bad entry's error.
fn bad_entry(p: Package) -> EntryError {
    assert_eq!(p.items.len(), 2);
    let mut items = p.items.into_iter();
    assert!(matches!(items.next().unwrap().outcome, Ok(Content::Stored { .. })));
    items.next().unwrap().outcome.expect_err("bad entry must fail")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entry_level_failures_leave_their_siblings_alone() {
    let wrong = b"not what the manifest says";
    let packages = vec![
        with_good(md_for("/nothere", b"x"), vec![]),
        with_good(md_for("/ok/evil", b"x"), vec![symlink("ok/evil", "../../../etc/passwd")]),
        with_good(md_for("/ok/wrong", b"expected bytes"), vec![stored("ok/wrong", wrong)]),
        with_good(md_for("/../x", b"x"), vec![]),
        with_good("length=\"1\"".into(), vec![]),
    ];
    let site = Site::new("resourcedump", packages).await;
    let results: Vec<EntryError> = site.walk().await.into_iter().map(|p| bad_entry(p.unwrap())).collect();
    assert!(matches!(&results[0], EntryError::MissingPath(p) if p == "/nothere"), "{:?}", results[0]);
    assert!(matches!(&results[1], EntryError::Symlink(_)), "{:?}", results[1]);
    assert!(matches!(&results[2], EntryError::Mismatch { .. }), "{:?}", results[2]);
    assert!(matches!(&results[3], EntryError::UnsafePath { .. }), "{:?}", results[3]);
    assert!(matches!(&results[4], EntryError::NoPath), "{:?}", results[4]);
    // Nothing was stored for the mismatched or refused entries.
    assert!(site.store.blob(&sha256_id(wrong)).unwrap().is_none());
    assert!(site.store.blob(&sha256_id(b"../../../etc/passwd")).unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsafe_entry_names_refuse_the_package() {
    let names = ["../evil", "/etc/evil", "dir\\evil", "C:evil", "ok/../../evil"];
    let packages = names.iter().map(|n| with_good(md_for("/ok/good", b"good"), vec![stored(n, b"x")])).collect();
    let site = Site::new("resourcedump", packages).await;
    let results = site.walk().await;
    assert_eq!(results.len(), names.len());
    for (r, name) in results.into_iter().zip(names) {
        match r {
            Err(DumpError::UnsafeName { name: n, .. }) => assert_eq!(n, name),
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zip_bombs_fail_fast_whether_declared_or_lying() {
    // 1 GiB of zeros in ~1 MB, honestly declared: refused from the header, before reading.
    // No length or hash in the manifest: only the caps can stop these.
    let md = || "path=\"/ok/bomb\"".to_owned();
    let honest = with_good(md(), vec![zero_bomb("ok/bomb", 1024, 1 << 30)]);
    // 256 MiB of zeros whose headers claim 100 bytes: stopped at byte 101.
    let liar = with_good(md(), vec![zero_bomb("ok/bomb", 256, 100)]);
    let site = Site::new("resourcedump", vec![honest, liar]).await;
    let mut results = site.walk().await.into_iter();
    match results.next().unwrap() {
        Err(DumpError::Bomb { name, detail, .. }) => {
            assert!(name == "/ok/bomb" && detail.contains("ratio"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
    match results.next().unwrap() {
        Err(DumpError::Bomb { name, detail, .. }) => {
            assert!(name == "/ok/bomb" && detail.contains("declares"), "{detail}")
        }
        // The ZIP reader itself stops at the declared size; the CRC then fails.
        Ok(p) => {
            let e = bad_entry(p);
            assert!(matches!(e, EntryError::Corrupt { .. }), "{e:?}");
        }
        Err(e) => panic!("{e}"),
    }
    assert!(results.next().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_packages_are_clear_errors() {
    let rl = urlset("resourcelist", &[], &[("http://example.org/a", "")]);
    let cdm = manifest("changedump-manifest", &[]);
    let packages = vec![
        build(&[stored("resources/a", b"a")]),              // no manifest.xml
        build(&[stored("manifest.xml", rl.as_bytes())]),    // not a manifest
        build(&[stored("manifest.xml", cdm.as_bytes())]),   // the wrong manifest
        build(&[stored("sub/manifest.xml", b"<urlset/>")]), // not at the top level
        b"this is not a zip file at all".to_vec(),
    ];
    let site = Site::new("resourcedump", packages).await;
    let r = site.walk().await;
    assert!(matches!(&r[0], Err(DumpError::NoManifest { .. })), "{:?}", r[0]);
    assert!(matches!(&r[1], Err(DumpError::WrongManifest { .. })), "{:?}", r[1]);
    assert!(matches!(&r[2], Err(DumpError::WrongManifest { .. })), "{:?}", r[2]);
    assert!(matches!(&r[3], Err(DumpError::NoManifest { .. })), "{:?}", r[3]);
    assert!(matches!(&r[4], Err(DumpError::NotZip { .. })), "{:?}", r[4]);
}

/// A package's declared `length` and `hash` are checked on the whole download before any of its
/// entries is read: a mismatch refuses the package and names what differs. The hash checked is
/// the strongest declared (sha-256 before md5): the package is only a container, each entry is
/// verified against its own manifest entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_package_unlike_its_declared_length_or_hash_is_refused_whole() {
    use md5::Digest as _;
    let zip = with_good(md_for("/ok/also", b"also"), vec![stored("ok/also", b"also")]);
    let (sha, md5) = (hex::encode(sha2::Sha256::digest(&zip)), hex::encode(md5::Md5::digest(&zip)));
    let n = zip.len();
    let (zeros, fs) = ("0".repeat(64), "f".repeat(32));
    let mds = [
        format!("length=\"{n}\" hash=\"md5:{md5} sha-256:{sha}\""),
        format!("length=\"{n}\" hash=\"md5:{md5} sha-256:{zeros}\""),
        format!("length=\"{n}\" hash=\"md5:{fs}\""),
        format!("length=\"{}\" hash=\"sha-256:{sha}\"", n + 1),
        format!("hash=\"md5:{fs} sha-256:{sha}\""),
    ];
    let site = Site::declaring(vec![zip; 5], &mds).await;
    let r = site.walk().await;
    assert_eq!(r.len(), 5);
    let whole = |r: &Result<Package, DumpError>| matches!(r, Ok(p) if p.items.len() == 2 && p.items.iter().all(|i| i.outcome.is_ok()));
    assert!(whole(&r[0]), "{:?}", r[0]);
    let detail = |r: &Result<Package, DumpError>| match r {
        Err(DumpError::PackageMismatch { detail, .. }) => detail.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(detail(&r[1]), format!("sha-256 is {sha}, but the dump declares {zeros}"));
    assert_eq!(detail(&r[2]), format!("md5 is {md5}, but the dump declares {fs}"));
    assert_eq!(detail(&r[3]), format!("{n} bytes, but the dump declares {}", n + 1));
    assert!(whole(&r[4]), "the matching sha-256 settles it: {:?}", r[4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entry_count_and_authority_are_enforced() {
    let files: Vec<RawEntry> = (0..20).map(|i| stored(&format!("f{i}"), b"x")).collect();
    let many = with_good(md_for("/f0", b"x"), files);
    let outside = with_good(md_for("/ok/good", b"good"), vec![]);
    let site = Site::new("resourcedump", vec![many, outside]).await;
    let mut opts = DumpOptions::new(&settings(), Some(&url::Url::parse("http://example.org/good").unwrap()));
    opts.limits.max_entries = 10;
    let r = site.walk_with(opts).await;
    assert!(matches!(&r[0], Err(DumpError::TooManyEntries { count: 22, max: 10, .. })), "{:?}", r[0]);
    let Ok(p) = &r[1] else { panic!("{:?}", r[1]) };
    assert!(matches!(&p.items[0].outcome, Ok(Content::Stored { .. })));
    // `http://example.org/good` as authority covers `/`: both are inside. A foreign host is not.
    let _ = p;
    let foreign = zipkit::build(&[
        deflated("manifest.xml", rd_manifest(&[("http://elsewhere.test/x", md_for("/ok/good", b"good"))]).as_bytes()),
        stored("ok/good", b"good"),
    ]);
    let site = Site::new("resourcedump", vec![foreign]).await;
    let opts = DumpOptions::new(&settings(), Some(&url::Url::parse("http://example.org/").unwrap()));
    let r = site.walk_with(opts).await;
    let Ok(p) = &r[0] else { panic!("{:?}", r[0]) };
    assert!(matches!(&p.items[0].outcome, Err(EntryError::OutsideAuthority(_))), "{:?}", p.items[0].outcome);
}
