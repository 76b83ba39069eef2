//! Bitstreams in S3-compatible object storage, against a real server (SeaweedFS, shared by the
//! run; each test in a bucket of its own): content addressing and deduplication across
//! instances, ranged reads, verification, collection with two instances sharing a bucket, and
//! the faults an operator meets (server down, wrong credentials, no bucket, 503 SlowDown).

// Each test holds the shared server's one-at-a-time guard (a std mutex) for its whole run,
// awaits included: every test has a runtime of its own, so no other task waits on that thread.
#![allow(clippy::await_holding_lock)]

use std::collections::HashMap;
use std::io::Read as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::{ObjectStore as _, ObjectStoreExt as _};
use tributary::model::HashList;
use tributary::store::{Batch, BlobId, Expected, GcReport, RemoteBlobs, Store, StoreError, StoreOptions};

use crate::support::digest::sha256_hex;
use crate::support::harness::{Harness, UNLIMITED, config_text};
use crate::support::s3::{self, Mode, Proxy, S3};
use crate::support::store::{bytes, put, read_blob, record};
use crate::support::upstream::{Reply, Upstream};

fn open(path: &std::path::Path, blobs: &RemoteBlobs) -> Result<Store, StoreError> {
    Store::open_with(path, &StoreOptions::small().with_blobs(Some(blobs.clone())))
}

/// A client of the test's own for `bucket`.
fn client(server: &S3, bucket: &str) -> object_store::aws::AmazonS3 {
    AmazonS3Builder::new()
        .with_endpoint(&server.endpoint)
        .with_access_key_id(s3::ACCESS_KEY)
        .with_secret_access_key(s3::SECRET_KEY)
        .with_region("us-east-1")
        .with_allow_http(true)
        .with_bucket_name(bucket)
        .build()
        .unwrap()
}

/// `work` done with a client of the test's own on `bucket`, on a thread of its own: the
/// caller may be a test running on a runtime.
fn with_client<T: Send>(
    server: &S3,
    bucket: &str,
    work: impl AsyncFnOnce(&object_store::aws::AmazonS3) -> T + Send,
) -> T {
    let s3 = client(server, bucket);
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                rt.block_on(work(&s3))
            })
            .join()
            .unwrap()
    })
}

/// The keys in `bucket` under `prefix`.
fn keys(server: &S3, bucket: &str, prefix: &str) -> Vec<String> {
    let prefix = object_store::path::Path::from(prefix);
    let mut keys: Vec<String> = with_client(server, bucket, async |s3| {
        use futures_util::TryStreamExt as _;
        s3.list(Some(&prefix)).map_ok(|m| m.location.to_string()).try_collect().await.unwrap()
    });
    keys.sort();
    keys
}

/// The `Content-Type` the object at `key` in `bucket` was stored with.
fn stored_content_type(server: &S3, bucket: &str, key: &str) -> Option<String> {
    let s3 = client(server, bucket);
    let key = object_store::path::Path::from(key);
    // On a thread of its own: the caller may be a test running on a runtime.
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                let got = rt.block_on(s3.get(&key)).unwrap();
                got.attributes.get(&object_store::Attribute::ContentType).map(|v| v.to_string())
            })
            .join()
            .unwrap()
    })
}

/// The content keys (not markers or tombstones) among `keys`.
fn content_keys(keys: &[String]) -> Vec<&String> {
    keys.iter().filter(|k| !k.contains("/refs/") && !k.contains("/doomed/")).collect()
}

/// A proxy in front of the server, and the settings of a store on `bucket` and `prefix` that
/// reaches it through the proxy.
fn proxied(server: &S3, bucket: &str, prefix: &str) -> (Proxy, RemoteBlobs) {
    let proxy = Proxy::start(&server.endpoint);
    let mut blobs = server.blobs(bucket, prefix);
    blobs.client = s3::client_settings(&proxy.endpoint);
    (proxy, blobs)
}

fn range(store: &Store, id: &BlobId, r: std::ops::Range<u64>) -> Vec<u8> {
    let mut out = Vec::new();
    store.get_range(id, r).unwrap().read_to_end(&mut out).unwrap();
    out
}

#[test]
fn bitstreams_go_to_the_bucket_once_across_instances_and_read_back_by_range() {
    let Some((server, _one)) = s3::server("store_s3::bitstreams_go_to_the_bucket_once") else { return };
    let bucket = server.bucket("once");
    let (proxy, blobs) = proxied(server, &bucket, "shared/blobs");
    let dir = tempfile::tempdir().unwrap();
    let a = open(&dir.path().join("a"), &blobs).unwrap();
    assert_eq!(
        a.remote_blobs().map(ToString::to_string).as_deref(),
        Some(format!("s3://{bucket}/shared/blobs").as_str())
    );

    let small = bytes(1, 2000);
    let medium = bytes(2, 300_000);
    // Larger than one part: a multipart upload of two parts.
    let large = bytes(3, 8 * 1024 * 1024 + 12345);
    let (s, m, l) = (put(&a, &small), put(&a, &medium), put(&a, &large));
    assert_eq!(read_blob(&a, &s), small);
    assert_eq!(read_blob(&a, &m), medium);
    assert_eq!(read_blob(&a, &l), large);
    assert_eq!(range(&a, &m, 1000..1100), &medium[1000..1100]);
    assert_eq!(range(&a, &l, 8_000_000..u64::MAX), &large[8_000_000..]);
    assert_eq!(range(&a, &m, 5..5), b"");
    assert_eq!(a.blob(&l).unwrap().unwrap().length, large.len() as u64);

    // The small one stayed in the local pack; the others are objects under their sha-256.
    let listed = keys(server, &bucket, "shared/blobs");
    let hex = |id: &BlobId| id.to_hex();
    let want: Vec<String> = {
        let mut w = vec![
            format!("shared/blobs/{}/{}", &hex(&m)[..2], hex(&m)),
            format!("shared/blobs/{}/{}", &hex(&l)[..2], hex(&l)),
        ];
        w.sort();
        w
    };
    assert_eq!(content_keys(&listed), want.iter().collect::<Vec<_>>(), "{listed:?}");

    // The same content again, in this store: nothing at all reaches the bucket.
    proxy.reset_counts();
    let again = a.put(&medium[..], &Expected::none()).unwrap();
    assert!(again.deduplicated);
    assert_eq!(proxy.forwarded("PUT") + proxy.forwarded("HEAD"), 0);

    // Another instance, another store, the same bucket: its marker is written and the content
    // key found (HEAD), and the bytes are not uploaded again. The large one went up after a
    // look, with A's marker; the medium one as a conditional PUT naming A, without one.
    let b = open(&dir.path().join("b"), &blobs).unwrap();
    proxy.reset_counts();
    let info = b.put(&large[..], &Expected::none()).unwrap();
    assert_eq!(info.id, l);
    assert_eq!(proxy.forwarded("PUT"), 1, "only B's reference marker is written");
    assert_eq!(proxy.forwarded("POST"), 0, "no multipart upload started");
    assert_eq!(read_blob(&b, &l), large);
    let listed = keys(server, &bucket, "shared/blobs");
    assert_eq!(content_keys(&listed).len(), 2, "{listed:?}");
    assert_eq!(listed.iter().filter(|k| k.contains("/refs/")).count(), 2, "A's marker and B's: {listed:?}");

    // `verify` reads every object back and re-hashes it.
    let report = a.verify().unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.blobs, 3);

    // The store remembers its bucket: opened without it, or with another, it refuses.
    drop(a);
    let err = Store::open_with(&dir.path().join("a"), &StoreOptions::small()).unwrap_err();
    assert!(matches!(err, StoreError::BlobsElsewhere { .. }), "{err}");
    assert!(err.to_string().contains(&format!("s3://{bucket}/shared/blobs")), "{err}");
    let other = server.blobs(&bucket, "elsewhere");
    let err = open(&dir.path().join("a"), &other).unwrap_err();
    assert!(matches!(err, StoreError::BlobsElsewhere { .. }), "{err}");
    assert_eq!(read_blob(&open(&dir.path().join("a"), &blobs).unwrap(), &l), large);
}

fn live(store: &Store, uri: &str, id: BlobId) {
    store.apply(Batch::new().upsert(&["s"], record(uri, id))).unwrap();
}

fn gone(store: &Store, uri: &str) {
    store.apply(Batch::new().delete(&["s"], uri)).unwrap();
}

/// `store` stops referring to `uris`, is reopened (a process forgets what it put a moment ago,
/// which gc spares for an hour) and collects: the reopened store and its gc's report.
fn let_go(store: Store, dir: &std::path::Path, blobs: &RemoteBlobs, uris: &[&str]) -> (Store, GcReport) {
    for uri in uris {
        gone(&store, uri);
    }
    drop(store);
    let store = open(dir, blobs).unwrap();
    let report = store.gc().unwrap();
    (store, report)
}

/// Two instances share a bucket. One instance's gc never deletes what the other still refers
/// to; content nobody refers to is deleted only after the grace period; content taken back
/// within it is kept.
#[test]
fn two_instances_sharing_a_bucket_collect_only_what_neither_refers_to() {
    let Some((server, _one)) = s3::server("store_s3::two_instances_sharing_a_bucket") else { return };
    let bucket = server.bucket("gc");
    let mut blobs = server.blobs(&bucket, "");
    blobs.gc_grace = Duration::ZERO;
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (open(&dir.path().join("a"), &blobs).unwrap(), open(&dir.path().join("b"), &blobs).unwrap());
    let (shared, only_a) = (bytes(10, 50_000), bytes(11, 60_000));
    let x = put(&a, &shared);
    let y = put(&a, &only_a);
    assert_eq!(put(&b, &shared), x);
    live(&a, "http://tributary.test/a/x", x);
    live(&a, "http://tributary.test/a/y", y);
    live(&b, "http://tributary.test/b/x", x);
    let object = |id: &BlobId| format!("{}/{}", &id.to_hex()[..2], id.to_hex());

    // Still referred to by A: B's gc is not even asked about it.
    let (a, report) =
        let_go(a, &dir.path().join("a"), &blobs, &["http://tributary.test/a/x", "http://tributary.test/a/y"]);
    assert_eq!((report.blobs_removed, report.objects_doomed, report.objects_deleted), (2, 1, 1), "{report}");
    let listed = keys(server, &bucket, "");
    assert!(listed.contains(&object(&x)), "B still refers to x: {listed:?}");
    assert!(!listed.contains(&object(&y)), "nobody refers to y: {listed:?}");
    assert_eq!(read_blob(&b, &x), shared);
    assert!(b.verify().unwrap().is_clean());

    // B lets go too: now x goes.
    let (b, report) = let_go(b, &dir.path().join("b"), &blobs, &["http://tributary.test/b/x"]);
    assert_eq!((report.objects_doomed, report.objects_deleted), (1, 1), "{report}");
    assert!(keys(server, &bucket, "").is_empty(), "{:?}", keys(server, &bucket, ""));

    // A creates w with a conditional PUT naming it, and writes no marker; B finds w and writes
    // A's marker beside its own, so B letting go first dooms nothing A still refers to.
    let both = bytes(12, 70_000);
    let w = put(&a, &both);
    assert!(keys(server, &bucket, &format!("refs/{w}")).is_empty(), "its creator marks nothing");
    assert_eq!(put(&b, &both), w);
    assert_eq!(keys(server, &bucket, &format!("refs/{w}")).len(), 2, "B's marker and A's, written by B");
    live(&a, "http://tributary.test/a/w", w);
    live(&b, "http://tributary.test/b/w", w);
    let (b, report) = let_go(b, &dir.path().join("b"), &blobs, &["http://tributary.test/b/w"]);
    assert_eq!((report.blobs_removed, report.objects_doomed, report.objects_deleted), (1, 0, 0), "{report}");
    assert_eq!(read_blob(&a, &w), both);
    assert!(a.verify().unwrap().is_clean());
    // A lets go too: its marker, written by B, goes, and with no grace so does w.
    let (a, report) = let_go(a, &dir.path().join("a"), &blobs, &["http://tributary.test/a/w"]);
    assert_eq!((report.blobs_removed, report.objects_doomed, report.objects_deleted), (1, 1, 1), "{report}");
    assert!(keys(server, &bucket, "").is_empty(), "{:?}", keys(server, &bucket, ""));

    // With a grace period, a doomed bitstream waits; taken back meanwhile, it stays.
    drop((a, b));
    blobs.gc_grace = Duration::from_secs(3600);
    let (a, b) = (open(&dir.path().join("a"), &blobs).unwrap(), open(&dir.path().join("b"), &blobs).unwrap());
    let z = put(&a, &shared);
    live(&a, "http://tributary.test/a/z", z);
    let (a, report) = let_go(a, &dir.path().join("a"), &blobs, &["http://tributary.test/a/z"]);
    assert_eq!((report.objects_doomed, report.objects_deleted, report.objects_waiting), (1, 0, 1), "{report}");
    assert!(keys(server, &bucket, "").contains(&object(&z)));
    // B wants the same content within the grace period: the tombstone goes, and even a gc
    // with no grace at all keeps the bitstream. A, its creator, let go before B found it, so
    // B writes no marker for A (which nothing would ever delete).
    assert_eq!(put(&b, &shared), z);
    live(&b, "http://tributary.test/b/z", z);
    assert_eq!(keys(server, &bucket, &format!("refs/{z}")).len(), 1, "B's marker alone");
    drop(a);
    blobs.gc_grace = Duration::ZERO;
    let a = open(&dir.path().join("a"), &blobs).unwrap();
    let report = a.gc().unwrap();
    assert_eq!(report.objects_deleted, 0, "{report}");
    assert_eq!(read_blob(&b, &z), shared);
    let listed = keys(server, &bucket, "");
    assert!(listed.iter().all(|k| !k.starts_with("doomed/")), "{listed:?}");
    // B lets go: nothing is left of z.
    let (_b, report) = let_go(b, &dir.path().join("b"), &blobs, &["http://tributary.test/b/z"]);
    assert_eq!((report.objects_doomed, report.objects_deleted), (1, 1), "{report}");
    assert!(keys(server, &bucket, "").is_empty(), "{:?}", keys(server, &bucket, ""));
}

/// A sweep that deleted a bitstream and stopped before its tombstone leaves the tombstone
/// standing. Content put again after it is not doomed by it: a conditional PUT creates the
/// object (no marker, no look at the tombstone), another instance finding it writes its
/// creator's marker although the creator wrote the tombstone, and a sweep keeps it.
#[test]
fn a_tombstone_left_by_a_sweep_cut_short_dooms_no_bitstream_put_again() {
    let Some((server, _one)) = s3::server("store_s3::tombstone_left_by_a_sweep") else { return };
    let bucket = server.bucket("stale");
    let mut blobs = server.blobs(&bucket, "");
    blobs.gc_grace = Duration::from_secs(3600);
    let dir = tempfile::tempdir().unwrap();
    let (a_dir, b_dir) = (dir.path().join("a"), dir.path().join("b"));
    let (a, b) = (open(&a_dir, &blobs).unwrap(), open(&b_dir, &blobs).unwrap());
    let object = |id: &BlobId| format!("{}/{}", &id.to_hex()[..2], id.to_hex());
    let (first, second) = (bytes(40, 50_000), bytes(41, 60_000));
    // A puts, refers to, and lets go of both: doomed, waiting out the grace period; then a
    // sweep deletes each object and stops before its tombstone.
    let cut_short = |a: Store, uri: &str, content: &[u8]| -> (Store, BlobId) {
        let id = put(&a, content);
        live(&a, uri, id);
        let (a, report) = let_go(a, &a_dir, &blobs, &[uri]);
        assert_eq!((report.objects_doomed, report.objects_deleted), (1, 0), "{report}");
        let key = object_store::path::Path::from(object(&id));
        with_client(server, &bucket, async |s3| s3.delete(&key).await.unwrap());
        (a, id)
    };
    let (a, x) = cut_short(a, "http://tributary.test/a/x", &first);
    let (a, y) = cut_short(a, "http://tributary.test/a/y", &second);
    let doomed = keys(server, &bucket, "doomed");
    assert_eq!(doomed.len(), 2, "{doomed:?}");
    // Put again in a later second than the tombstones (Last-Modified has whole seconds; the
    // grace period keeps a real sweep further apart than that).
    std::thread::sleep(Duration::from_millis(1_100));
    assert_eq!((put(&a, &first), put(&a, &second)), (x, y));
    live(&a, "http://tributary.test/a/x", x);
    live(&a, "http://tributary.test/a/y", y);
    assert!(keys(server, &bucket, "refs").is_empty(), "created again, no marker");
    assert_eq!(keys(server, &bucket, "doomed"), doomed, "no look at the tombstones");

    // B finds y: the tombstone, written by A's release, is older than the object, so A did not
    // let go of this one; B writes A's marker beside its own.
    assert_eq!(put(&b, &second), y);
    live(&b, "http://tributary.test/b/y", y);
    assert_eq!(keys(server, &bucket, &format!("refs/{y}")).len(), 2, "B's marker and A's");

    // A sweep with no grace at all: x outlives its tombstone and stays; y is marked.
    drop(b);
    blobs.gc_grace = Duration::ZERO;
    let b = open(&b_dir, &blobs).unwrap();
    let report = b.gc().unwrap();
    assert_eq!((report.objects_deleted, report.objects_rescued), (0, 2), "{report}");
    let listed = keys(server, &bucket, "");
    assert!(listed.contains(&object(&x)) && listed.contains(&object(&y)), "{listed:?}");
    assert!(listed.iter().all(|k| !k.starts_with("doomed/")), "{listed:?}");
    assert_eq!((read_blob(&a, &x), read_blob(&a, &y)), (first.clone(), second.clone()));
    assert!(a.verify().unwrap().is_clean() && b.verify().unwrap().is_clean());

    // B lets go of y: A's marker keeps it. Then A lets go of both: nothing is left.
    let (_b, report) = let_go(b, &b_dir, &blobs, &["http://tributary.test/b/y"]);
    assert_eq!((report.objects_doomed, report.objects_deleted), (0, 0), "{report}");
    assert_eq!(read_blob(&a, &y), second);
    let (_a, report) = let_go(a, &a_dir, &blobs, &["http://tributary.test/a/x", "http://tributary.test/a/y"]);
    assert_eq!((report.objects_doomed, report.objects_deleted), (2, 2), "{report}");
    assert!(keys(server, &bucket, "").is_empty(), "{:?}", keys(server, &bucket, ""));
}

/// Content declared by its sha-256 is looked for in the bucket before it is fetched, with one
/// HEAD. Where a streak of 64 looks found nothing (a bucket no other instance fills) only
/// every 16th is made, and a find turns looking back on. Content declared small enough for the
/// packs is never looked for.
#[test]
fn adoption_stops_looking_where_it_finds_nothing_and_looks_again_after_a_find() {
    let Some((server, _one)) = s3::server("store_s3::adoption_streak") else { return };
    let bucket = server.bucket("adopt");
    let (proxy, blobs) = proxied(server, &bucket, "");
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (open(&dir.path().join("a"), &blobs).unwrap(), open(&dir.path().join("b"), &blobs).unwrap());
    let declared = |data: &[u8]| {
        let hashes = HashList::parse(&format!("sha-256:{}", sha256_hex(data))).unwrap().0;
        Expected::declared(Some(data.len() as u64), Some(&hashes))
    };
    let adopted = |seed: u64, len: usize| a.adopt(&declared(&bytes(seed, len))).unwrap().is_some();
    let requests = |p: &Proxy| ["GET", "HEAD", "PUT", "POST"].map(|m| p.forwarded(m)).iter().sum::<u32>();

    proxy.reset_counts();
    assert!((0..64).all(|i| !adopted(100 + i, 9_000)));
    assert_eq!((proxy.forwarded("HEAD"), requests(&proxy)), (64, 64), "one HEAD per look");
    proxy.reset_counts();
    assert!((64..96).all(|i| !adopted(100 + i, 9_000)));
    assert_eq!(requests(&proxy), 2, "every 16th");

    // B puts content: A finds it within a sample's worth of asking, and looks every time again.
    let shared = bytes(200, 20_000);
    let id = put(&b, &shared);
    let asked = (1..=16).find(|_| a.adopt(&declared(&shared)).unwrap().is_some());
    assert!(asked.is_some(), "adopted within 16 askings");
    assert_eq!(read_blob(&a, &id), shared);
    proxy.reset_counts();
    assert!(!adopted(300, 9_000));
    assert_eq!(proxy.forwarded("HEAD"), 1, "looking again");

    proxy.reset_counts();
    assert!(!adopted(301, 8_192));
    assert_eq!(requests(&proxy), 0, "kept in the packs, never in the bucket");
}

/// A start-up against a server that is down, refuses the credentials or has no such bucket
/// fails with an error that names the endpoint and the bucket, and never the secret.
#[test]
fn start_up_faults_are_clear_and_never_show_the_secret() {
    let Some((server, _one)) = s3::server("store_s3::start_up_faults") else { return };
    let dir = tempfile::tempdir().unwrap();
    let check = |err: &StoreError, want: &[&str]| {
        let text = format!("{err} / {err:?}");
        assert!(!text.contains(s3::SECRET_KEY), "{text}");
        for w in want {
            assert!(text.contains(w), "{w:?} missing from: {text}");
        }
    };

    // Nothing listens there.
    // Port 1 (tcpmux): nothing listens there, and no test server of this run can take it.
    let dead = "http://127.0.0.1:1".to_owned();
    let mut blobs = server.blobs(&server.bucket("down"), "p");
    blobs.client = s3::client_settings(&dead);
    let started = std::time::Instant::now();
    let err = open(&dir.path().join("a"), &blobs).unwrap_err();
    check(&err, &[&dead, &blobs.to_string(), "cannot be reached"]);
    assert!(started.elapsed() < Duration::from_secs(20), "a dead endpoint fails fast: {:?}", started.elapsed());

    // Wrong secret.
    let mut blobs = server.blobs(&server.bucket("creds"), "p");
    let wrong = "WRONG-secret-value-4242";
    blobs.client.retain(|(k, _)| k != "secret_access_key");
    blobs.client.push(("secret_access_key".into(), wrong.into()));
    let err = open(&dir.path().join("b"), &blobs).unwrap_err();
    check(&err, &[&server.endpoint, "credentials were refused"]);
    assert!(!format!("{err:?}").contains(wrong));

    // No such bucket, and not asked to create it; then asked.
    let mut blobs = server.blobs(&server.bucket("missing"), "p");
    blobs.create_bucket = false;
    let err = open(&dir.path().join("c"), &blobs).unwrap_err();
    check(&err, &[&blobs.bucket, "does not exist", "blobs_create_bucket"]);
    blobs.create_bucket = true;
    let store = open(&dir.path().join("c"), &blobs).unwrap();
    let id = put(&store, &bytes(5, 40_000));
    assert_eq!(read_blob(&store, &id), bytes(5, 40_000));
}

/// 503 SlowDown answers are retried with backoff; an upload that still fails, or a server
/// that stopped answering, fails only that put, with nothing recorded, and the same put
/// succeeds once the server is back.
#[test]
fn slowdown_is_retried_and_a_failed_upload_or_a_server_gone_stores_nothing() {
    let Some((server, _one)) = s3::server("store_s3::slowdown_is_retried") else { return };
    let (proxy, blobs) = proxied(server, &server.bucket("slow"), "p");
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("s"), &blobs).unwrap();

    proxy.set(Mode::SlowDown(3));
    let content = bytes(20, 100_000);
    let id = put(&store, &content);
    assert_eq!(proxy.refused(), 3);
    assert_eq!(read_blob(&store, &id), content);

    proxy.set(Mode::FailPuts);
    let other = bytes(21, 100_000);
    let err = store.put(&other[..], &Expected::none()).unwrap_err();
    assert!(err.is_object_store(), "{err}");
    assert!(!format!("{err:?}").contains(s3::SECRET_KEY));
    let other_id = crate::support::digest::sha256_id(&other);
    assert!(store.blob(&other_id).unwrap().is_none(), "a failed upload leaves no blob row");
    assert_eq!(std::fs::read_dir(dir.path().join("s/tmp")).unwrap().count(), 0, "nor a spool file");

    proxy.set(Mode::Pass);
    assert_eq!(put(&store, &other), other_id);
    assert_eq!(read_blob(&store, &other_id), other);

    // The server unreachable mid-run (nothing listens any more): the put fails after its
    // bounded retries, storing nothing; once it is back on the same address, the put works.
    let port: u16 = proxy.endpoint.rsplit(':').next().unwrap().parse().unwrap();
    drop(proxy);
    let third = bytes(22, 100_000);
    let started = std::time::Instant::now();
    let err = store.put(&third[..], &Expected::none()).unwrap_err();
    assert!(err.is_object_store(), "{err}");
    assert!(started.elapsed() < Duration::from_secs(40), "retries are bounded: {:?}", started.elapsed());
    assert!(store.blob(&crate::support::digest::sha256_id(&third)).unwrap().is_none());
    let _back = Proxy::start_on(&server.endpoint, port);
    assert_eq!(read_blob(&store, &put(&store, &third)), third);
}

/// New content goes up as a conditional PUT naming its creator, and nothing else (no look
/// first, no marker); content already in the bucket answers 412 and is
/// taken up as present, the creator's marker written beside the finder's; a server that
/// refuses the condition, or ignores it, gets the looking path and markers, from then on.
#[test]
fn new_bitstreams_go_up_as_conditional_puts_and_a_server_refusing_them_is_looked_at_first() {
    let Some((server, _one)) = s3::server("store_s3::conditional_puts") else { return };
    let bucket = server.bucket("cond");
    let (proxy, blobs) = proxied(server, &bucket, "p");
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("s"), &blobs).unwrap();
    let other = open(&dir.path().join("t"), &blobs).unwrap();

    proxy.reset_counts();
    let first = bytes(30, 100_000);
    let id = put(&store, &first);
    // PUTs, HEADs, and deletes (object_store deletes by POST /?delete).
    let counts = |p: &Proxy| ["PUT", "HEAD", "POST"].map(|m| p.forwarded(m));
    // The first conditional PUT of the process is preceded by the probe: two creates of one key
    // (the second refused) and its removal.
    assert_eq!(counts(&proxy), [3, 0, 1], "the probe and the object; the probe's key");
    assert_eq!(read_blob(&store, &id), first);
    assert!(keys(server, &bucket, "p/refs").is_empty(), "its creator marks nothing");
    assert!(keys(server, &bucket, "p/probe").is_empty());

    // Another instance on the bucket: its conditional PUT is refused (412), it marks, looks,
    // and writes the creator's marker.
    proxy.reset_counts();
    assert_eq!(put(&other, &first), id);
    assert_eq!(counts(&proxy), [2 + 3, 2, 1], "its probe; the 412, its marker, the creator's; a look");
    assert_eq!(read_blob(&other, &id), first);
    let markers = keys(server, &bucket, &format!("p/refs/{id}"));
    assert_eq!(markers.len(), 2, "both instances refer to it: {markers:?}");

    // A server without conditional PUTs: 501 (retried as a server error), then the looking path.
    proxy.set(Mode::NoConditionalPut);
    let second = bytes(31, 100_000);
    let second_id = put(&store, &second);
    let refused = proxy.refused();
    assert!(refused >= 1);
    assert_eq!(read_blob(&store, &second_id), second);
    let third = bytes(32, 100_000);
    proxy.reset_counts();
    let third_id = put(&store, &third);
    assert_eq!(proxy.refused(), 0, "no conditional PUT is sent any more");
    assert_eq!((proxy.forwarded("PUT"), proxy.forwarded("HEAD")), (2, 2));
    assert_eq!(read_blob(&store, &third_id), third);
    assert!(store.verify().unwrap().is_clean() && other.verify().unwrap().is_clean());

    // A server that ignores the condition (a second create of one key succeeds) would let a
    // second creator take the first one's name off the object: the probe finds it out, and
    // new content is looked for and marked.
    proxy.set(Mode::IgnoreConditionalPut);
    let ignoring = open(&dir.path().join("u"), &blobs).unwrap();
    let fourth = bytes(33, 100_000);
    proxy.reset_counts();
    let fourth_id = put(&ignoring, &fourth);
    assert_eq!(counts(&proxy), [2 + 2, 2, 1], "the probe; the object and its marker; two looks");
    assert_eq!(keys(server, &bucket, &format!("p/refs/{fourth_id}")).len(), 1);
    assert_eq!(read_blob(&ignoring, &fourth_id), fourth);
}

/// `(path, body)` resources as a Resource List declaring each one's sha-256 and length.
fn resource_list(up: &Upstream, resources: &[(String, Vec<u8>)]) -> String {
    let entries: String = resources
        .iter()
        .map(|(p, b)| {
            format!(
                "<url><loc>{}</loc><rs:md hash=\"sha-256:{}\" length=\"{}\"/></url>",
                up.url(p),
                crate::support::digest::sha256_hex(b),
                b.len()
            )
        })
        .collect();
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" \
         xmlns:rs=\"http://www.openarchives.org/rs/terms/\"><rs:md capability=\"resourcelist\" \
         at=\"2024-01-01T00:00:00Z\"/>{entries}</urlset>\n"
    )
}

type Routes = Arc<Mutex<HashMap<String, Reply>>>;

async fn upstream(routes: &Routes) -> Upstream {
    let routes = routes.clone();
    Upstream::start(move |hit, _| routes.lock().unwrap().get(&hit.path).cloned().unwrap_or_else(|| Reply::status(404)))
        .await
}

fn publish(routes: &Routes, up: &Upstream, resources: &[(String, Vec<u8>)]) {
    let mut r = routes.lock().unwrap();
    r.insert("/rl.xml".into(), Reply::xml(resource_list(up, resources)));
    for (p, b) in resources {
        r.insert(p.clone(), Reply::ok(b.clone()));
    }
}

/// A harvest into the bucket through a server that answers 503 SlowDown now and then holds
/// every resource, byte for byte, and serves them (ranges too). Uploads that keep failing
/// are recorded as the resources' failures, not as held, and the next pass stores them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_harvest_into_the_bucket_survives_slowdown_and_records_failed_uploads_for_retry() {
    let Some((server, _one)) = s3::server("store_s3::a_harvest_into_the_bucket") else { return };
    let (proxy, blobs) = proxied(server, &server.bucket("harvest"), "h");
    let routes = Routes::default();
    let up = upstream(&routes).await;
    let mut resources: Vec<(String, Vec<u8>)> =
        (0..6).map(|i| (format!("/r/{i}"), bytes(100 + i, 20_000 + 7_000 * i as usize))).collect();
    resources.push(("/r/small".into(), b"a small record, kept in the local pack".to_vec()));
    publish(&routes, &up, &resources);
    let url = up.url("/rl.xml").to_string();
    let options = StoreOptions::default().with_blobs(Some(blobs.clone()));
    let h = Harness::with_store(|dir| config_text(dir, "", UNLIMITED, &[("a", &url, "")]), &options);

    proxy.set(Mode::SlowDown(4));
    let r = h.pass_one().await;
    assert_eq!((r.fetched, r.failed, r.error.as_deref()), (7, 0, None), "{r:?}");
    assert_eq!(proxy.refused(), 4, "the 503s were answered, and retried");
    for (p, b) in &resources {
        assert_eq!(h.content("a", up.url(p).as_str()).as_ref(), Some(b), "{p}");
    }

    // Served over HTTP from the bucket, whole and by range.
    let app = tributary::web::router(tributary::web::WebState::from_config(&h.config, &h.store, &h.fetcher).unwrap());
    let rec = h.record("a", up.url("/r/5").as_str()).unwrap();
    let path = url::Url::parse(&rec.uri).unwrap();
    let path = &rec.uri[rec.uri.find(path.path()).unwrap()..];
    let get = |range: Option<&str>| {
        let mut req = axum::http::Request::get(path);
        if let Some(r) = range {
            req = req.header("range", r);
        }
        tower::ServiceExt::oneshot(app.clone(), req.body(axum::body::Body::empty()).unwrap())
    };
    let resp = get(None).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
    assert_eq!(&body[..], &resources[5].1[..]);
    let resp = get(Some("bytes=1000-50999")).await.unwrap();
    assert_eq!(resp.status(), 206);
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
    assert_eq!(&body[..], &resources[5].1[1000..51000]);

    // New resources while every upload fails: recorded as failing, not held.
    let new: Vec<(String, Vec<u8>)> = (6..9).map(|i| (format!("/r/{i}"), bytes(100 + i, 30_000))).collect();
    resources.extend(new.iter().cloned());
    publish(&routes, &up, &resources);
    proxy.set(Mode::FailPuts);
    let r = h.pass_one().await;
    assert_eq!((r.failed, r.error.as_deref()), (3, None), "{r:?}");
    for (p, _) in &new {
        let uri = h.uri("a", up.url(p).as_str());
        assert!(h.store.record(&uri).unwrap().is_none(), "{p} is not held");
        let f = h.store.failure("a", &uri).unwrap().expect("a failure row");
        assert!(f.reason.contains("object storage"), "{}", f.reason);
        assert!(!f.reason.contains(s3::SECRET_KEY), "{}", f.reason);
    }
    assert_eq!(h.store.failure_count("a").unwrap(), 3);
    // Nor does the dashboard, its API or the metrics show the secret, failures and all.
    let mut failures_shown = String::new();
    for page in ["/", "/api/status", "/api/failures?source=a", "/metrics"] {
        let req = axum::http::Request::get(page).body(axum::body::Body::empty()).unwrap();
        let resp = tower::ServiceExt::oneshot(app.clone(), req).await.unwrap();
        assert_eq!(resp.status(), 200, "{page}");
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
        let text = String::from_utf8_lossy(&body);
        assert!(!text.contains(s3::SECRET_KEY), "{page}: {text}");
        if page.starts_with("/api/failures") {
            failures_shown = text.into_owned();
        }
    }
    assert!(failures_shown.contains("object storage"), "{failures_shown}");

    // The storage is back: the next pass stores them.
    proxy.set(Mode::Pass);
    let r = h.pass_one().await;
    assert_eq!((r.failed, r.error.as_deref()), (0, None), "{r:?}");
    for (p, b) in &new {
        assert_eq!(h.content("a", up.url(p).as_str()).as_ref(), Some(b), "{p}");
    }
    assert_eq!(h.store.failure_count("a").unwrap(), 0);
}

/// `tributary harvest` with `blobs` in `sources.toml` and the credentials in the environment:
/// a server that is down or refuses the credentials stops it at start-up with exit 2 and an
/// error naming the endpoint and the bucket, never the secret; a good one harvests into the
/// bucket, and `store verify` and `store gc` work on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_reads_blobs_from_the_configuration_and_credentials_from_the_environment() {
    use crate::support::cli::{finish, tributary};
    let Some((server, _one)) = s3::server("store_s3::the_binary_reads_blobs") else { return };
    let routes = Routes::default();
    let up = upstream(&routes).await;
    let resources: Vec<(String, Vec<u8>)> = (0..3).map(|i| (format!("/r/{i}"), bytes(300 + i, 25_000))).collect();
    publish(&routes, &up, &resources);
    let bucket = server.bucket("cli");
    let dir = tempfile::tempdir().unwrap();
    let aggregator = format!("blobs = \"s3://{bucket}/p\"\nblobs_create_bucket = true\n");
    let text = config_text(dir.path(), &aggregator, UNLIMITED, &[("a", up.url("/rl.xml").as_str(), "")]);
    let cfg = dir.path().join("sources.toml");
    std::fs::write(&cfg, text).unwrap();
    let run = |args: &[&str], env: Vec<(&'static str, String)>| {
        let mut cmd = tributary(&[&["--config", cfg.to_str().unwrap()], args].concat());
        for (k, _) in s3::env("") {
            cmd.env_remove(k);
        }
        cmd.envs(env);
        finish(cmd)
    };

    // Port 1 (tcpmux): nothing listens there, and no test server of this run can take it.
    let dead = "http://127.0.0.1:1".to_owned();
    let out = run(&["harvest"], s3::env(&dead)).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for want in [dead.as_str(), &format!("s3://{bucket}/p"), "cannot be reached"] {
        assert!(stderr.contains(want), "{want:?} missing from: {stderr}");
    }
    assert!(!stderr.contains(s3::SECRET_KEY), "{stderr}");

    let mut env = s3::env(&server.endpoint);
    let wrong = "WRONG-cli-secret-1717";
    env.retain(|(k, _)| *k != "AWS_SECRET_ACCESS_KEY");
    env.push(("AWS_SECRET_ACCESS_KEY", wrong.into()));
    let out = run(&["harvest"], env).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("credentials were refused") && stderr.contains(&server.endpoint), "{stderr}");
    assert!(!stderr.contains(wrong) && !stderr.contains(s3::SECRET_KEY), "{stderr}");

    let out = run(&["harvest"], s3::env(&server.endpoint)).await;
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(!stderr.contains(s3::SECRET_KEY) && !stdout.contains(s3::SECRET_KEY));
    let listed = keys(server, &bucket, "p");
    assert_eq!(content_keys(&listed).len(), 3, "{listed:?}");
    let out = run(&["store", "verify"], s3::env(&server.endpoint)).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    let out = run(&["store", "gc"], s3::env(&server.endpoint)).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(content_keys(&keys(server, &bucket, "p")).len(), 3, "gc keeps what records refer to");

    // Without the configuration the store refuses to open, naming its bucket.
    let mut cmd = tributary(&[
        "--config",
        "/nonexistent.toml",
        "--data-dir",
        dir.path().join("store").to_str().unwrap(),
        "store",
        "stats",
    ]);
    cmd.envs(s3::env(&server.endpoint));
    let out = finish(cmd).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("s3://{bucket}/p")), "{stderr}");
}

/// A shard and a top-level instance on one bucket: the top level harvests the shard's
/// Resource List, whose entries declare each bitstream's sha-256, and finds every one already
/// in the bucket — nothing is fetched, not one bitstream byte crosses from the shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_top_level_instance_on_the_shards_bucket_fetches_no_bitstream() {
    use crate::support::harness::BASE_URL;
    let Some((server, _one)) = s3::server("store_s3::a_top_level_instance") else { return };
    let bucket = server.bucket("chain");
    let blobs = server.blobs(&bucket, "chain");
    let options = StoreOptions::default().with_blobs(Some(blobs));
    let routes = Routes::default();
    let up = upstream(&routes).await;
    let resources: Vec<(String, Vec<u8>)> =
        (0..5).map(|i| (format!("/r/{i}"), bytes(500 + i, 30_000 + 9_000 * i as usize))).collect();
    publish(&routes, &up, &resources);
    let total: u64 = resources.iter().map(|(_, b)| b.len() as u64).sum();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/", listener.local_addr().unwrap());
    let url = up.url("/rl.xml").to_string();
    let shard =
        Harness::with_store(|d| config_text(d, "", UNLIMITED, &[("s1", &url, "")]).replace(BASE_URL, &base), &options);
    let r = shard.pass_one().await;
    assert_eq!((r.fetched, r.failed, r.bytes), (5, 0, total), "{r:?}");
    let state = tributary::web::WebState::from_config(&shard.config, &shard.store, &shard.fetcher).unwrap();
    let served = tokio::spawn(tributary::web::serve(listener, state, std::future::pending()));

    let list = tributary::naming::Naming::new(&url::Url::parse(&base).unwrap()).capability_list("s1");
    let top = Harness::with_store(
        |d| config_text(d, "", UNLIMITED, &[("top", &list, "dumps = false\nallow_outside_authority = true")]),
        &options,
    );
    let r = top.pass_one().await;
    assert_eq!((r.fetched, r.failed, r.error.as_deref()), (5, 0, None), "{r:?}");
    assert_eq!(r.bytes, 0, "no bitstream byte was transferred from the shard: {r:?}");
    let records: Vec<_> = top.store.records().map(Result::unwrap).collect();
    assert_eq!(records.len(), 5);
    for rec in &records {
        let (_, body) =
            resources.iter().find(|(p, _)| rec.origin == up.url(p).as_str()).expect("origin kept via the shard");
        assert_eq!(&read_blob(&top.store, &rec.sha256), body);
    }
    assert_eq!(content_keys(&keys(server, &bucket, "chain")).len(), 5, "each bitstream stored once for both");
    served.abort();
}

/// With `blobs_presign`, a full GET of a bitstream in the bucket is redirected to a presigned
/// URL that serves the same bytes and carries no secret; a range, a HEAD and content in the
/// local pack are still answered by Tributary. Objects are uploaded with their type, and the
/// bucket answers the redirect with the type and disposition Tributary would send: an active
/// type (HTML) as an attachment, whatever the object itself was uploaded as.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presign_redirects_a_full_get_to_the_bucket() {
    use crate::support::publish::{Res, bind, upsert};
    let Some((server, _one)) = s3::server("store_s3::presign_redirects") else { return };
    let bucket = server.bucket("presign");
    let mut blobs = server.blobs(&bucket, "p");
    blobs.presign = true;
    let dir = tempfile::tempdir().unwrap();
    let store = tokio::task::block_in_place(|| open(&dir.path().join("s"), &blobs)).unwrap();
    let (_listener, naming) = bind().await;
    let (big, small) = (bytes(700, 90_000), b"small, in the pack".to_vec());
    let page = format!("<html><script>alert(1)</script>{}</html>", "x".repeat(90_000)).into_bytes();
    let mut html = Res::new("s", "http://o.example/page", page.clone());
    html.media_type = Some("text/html; charset=utf-8".into());
    // The same bytes as a second record of another type: the object keeps its first type.
    let mut again = Res::new("s", "http://o.example/page-as-text", page.clone());
    again.media_type = Some("text/plain".into());
    let uris = tokio::task::block_in_place(|| {
        upsert(
            &store,
            &naming,
            &["s"],
            &[
                Res::new("s", "http://o.example/big", big.clone()),
                Res::new("s", "http://o.example/small", small.clone()),
                html,
                again,
            ],
        )
    });
    let state = tributary::web::WebState::new(
        store.clone(),
        naming.clone(),
        vec![tributary::publish::SetConfig::source("s")],
        tributary::publish::LinkPolicies::default(),
        tributary::publish::Limits::default(),
    )
    .unwrap();
    let app = tributary::web::router(state);
    let send = |uri: &str, method: &str, range: Option<&str>| {
        let path = &uri[uri.find("/r/").unwrap()..];
        let mut req = axum::http::Request::builder().method(method).uri(path);
        if let Some(r) = range {
            req = req.header("range", r);
        }
        tower::ServiceExt::oneshot(app.clone(), req.body(axum::body::Body::empty()).unwrap())
    };

    let resp = send(&uris[0], "GET", None).await.unwrap();
    assert_eq!(resp.status(), 307);
    let location = resp.headers()["location"].to_str().unwrap().to_owned();
    assert!(location.starts_with(&server.endpoint) && location.contains("X-Amz-Signature"), "{location}");
    assert!(!location.contains(s3::SECRET_KEY), "{location}");
    let fetched = reqwest::get(&location).await.unwrap();
    assert_eq!(fetched.status(), 200);
    assert_eq!(fetched.headers()["content-type"], "text/plain");
    assert_eq!(fetched.headers()["content-disposition"], "inline");
    assert_eq!(&fetched.bytes().await.unwrap()[..], &big[..]);
    let key_of = |content: &[u8]| {
        let hex = crate::support::digest::sha256_hex(content);
        format!("p/{}/{hex}", &hex[..2])
    };
    let big_key = key_of(&big);
    assert_eq!(stored_content_type(server, &bucket, &big_key).as_deref(), Some("text/plain"), "uploaded with its type");

    // Followed as a browser would: the bucket's own answer carries the protections.
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::limited(2)).build().unwrap();
    for (uri, disposition, content_type) in
        [(&uris[2], "attachment", "text/html; charset=utf-8"), (&uris[3], "inline", "text/plain")]
    {
        let resp = send(uri, "GET", None).await.unwrap();
        assert_eq!(resp.status(), 307, "{uri}");
        let location = resp.headers()["location"].to_str().unwrap().to_owned();
        assert!(location.contains("response-content-disposition"), "{location}");
        let fetched = client.get(&location).send().await.unwrap();
        assert_eq!(fetched.status(), 200, "{uri}");
        assert!(fetched.url().as_str().starts_with(&server.endpoint), "answered by the bucket");
        assert_eq!(fetched.headers()["content-type"], content_type, "{uri}");
        assert_eq!(fetched.headers()["content-disposition"], disposition, "{uri}");
        assert_eq!(&fetched.bytes().await.unwrap()[..], &page[..]);
    }
    let uploaded_as = stored_content_type(server, &bucket, &key_of(&page));
    assert_eq!(uploaded_as.as_deref(), Some("text/html; charset=utf-8"), "the first record's type");
    // A client cannot change the signed overrides.
    let tampered = location.replace("response-content-type=text%2Fplain", "response-content-type=text%2Fhtml");
    assert_ne!(tampered, location);
    assert_eq!(reqwest::get(&tampered).await.unwrap().status(), 403, "the overrides are signed");

    let resp = send(&uris[0], "GET", Some("bytes=10-19")).await.unwrap();
    assert_eq!(resp.status(), 206);
    assert_eq!(&axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap()[..], &big[10..20]);
    assert_eq!(send(&uris[0], "HEAD", None).await.unwrap().status(), 200);
    let resp = send(&uris[1], "GET", None).await.unwrap();
    assert_eq!(resp.status(), 200, "content in the local pack is served here");
    assert_eq!(&axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap()[..], &small[..]);
}
