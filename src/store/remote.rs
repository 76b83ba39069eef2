//! Bitstreams in S3-compatible object storage (AWS S3, MinIO, Ceph RGW, Garage, SeaweedFS),
//! through the `object_store` crate: the second blob backend beside local files.
//!
//! Only bitstreams larger than [`INLINE_MAX`](super::INLINE_MAX) go to the bucket; smaller ones
//! stay in the local packs beside the database, as with local blobs (one S3 request per 2 KiB
//! record would cost more than the record). The blob row still records every blob
//! (`Place::Object`), so reference counting, provenance and `blob()` are unchanged.
//!
//! # Keys in the bucket
//! ```text
//! PREFIX/ab/ab12…(64 hex)          a bitstream, under its sha-256: stored once for every
//!                                  source and every instance sharing the bucket
//! PREFIX/refs/ab12…/INSTANCE       empty: the instance INSTANCE refers to the bitstream
//!                                  (its creator needs none: see [`CREATOR`])
//! PREFIX/doomed/ab12…              empty: no instance referred to it when it was written
//!                                  (see [`RELEASED_BY`]); deleted with the bitstream after
//!                                  the grace period
//! PREFIX/probe/INSTANCE            empty, for a moment: see [`Remote::probe_conditional`]
//! ```
//!
//! # Sync API over async I/O
//! The store's API blocks (callers use `spawn_blocking`); `object_store` is async. The backend
//! owns a small multi-threaded tokio runtime of its own (two workers, `store-s3`): a blocking
//! call spawns its future onto that runtime and waits on a std channel. Nothing here calls
//! `block_on`, so a store call made from inside another runtime (the harvester's blocking
//! threads, the web server's) never panics, and the runtime is shut down in the background
//! when the store closes, which is allowed anywhere.
//!
//! # Writing
//! A bitstream is spooled to `tmp/` while it is hashed (the same path as a local file blob);
//! only once its length and digests are verified does the backend create the content key
//! (a conditional PUT) or upload it when it is absent — a single PUT up to [`PART`] bytes, a
//! streamed multipart upload above, at most [`PARTS_IN_FLIGHT`] parts in memory — with the
//! reference markers it needs (see [`Remote::store_file`] for the order, docs/BUCKET.md for
//! why). S3 makes an object visible only once its PUT or multipart completion succeeded, so
//! the content key never shows a partial or unverified bitstream, and no temporary object is
//! left in the bucket by a crash (an interrupted multipart upload is aborted, or invisible
//! until the bucket's lifecycle rule removes it).

use std::fmt;
use std::future::Future;
use std::io::{self, Read};
use std::ops::Range;
use std::path::Path as FsPath;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt as _;
use futures_util::stream::BoxStream;
use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path as Key;
use object_store::{
    Attribute, Attributes, BackoffConfig, ClientConfigKey, GetOptions, GetRange, ObjectMeta, ObjectStore,
    ObjectStoreExt as _, PutMultipartOptions, PutOptions, PutPayload, RetryConfig, WriteMultipart,
};

use super::blob::{BlobId, ResponseHeaders};
use super::error::StoreError;

/// Bitstreams up to this size go up as one PUT (read into memory, at most this much); larger
/// ones as a multipart upload of parts of this size.
pub(super) const PART: usize = 8 * 1024 * 1024;

/// Parts of one multipart upload in flight at once: bounds its memory to about
/// `(PARTS_IN_FLIGHT + 1) × PART`.
const PARTS_IN_FLIGHT: usize = 2;

/// Where bitstreams live when they are not local files: `[aggregator] blobs = "s3://BUCKET/PREFIX"`.
/// Endpoint, region and credentials come from the standard AWS environment variables.
#[derive(Clone, PartialEq, Eq)]
pub struct RemoteBlobs {
    /// The bucket.
    pub bucket: String,
    /// The key prefix, without leading or trailing `/` (may be empty).
    pub prefix: String,
    /// Create the bucket when it does not exist (`blobs_create_bucket = true`); otherwise a
    /// missing bucket is an error at start-up.
    pub create_bucket: bool,
    /// How long a bitstream no instance refers to stays in the bucket before a `gc` deletes it
    /// (`blobs_gc_grace`, default 24 hours); see docs/BUCKET.md, "Collection in a shared bucket".
    pub gc_grace: Duration,
    /// Answer a full GET of a bitstream in the bucket with a redirect to a presigned URL
    /// (valid [`PRESIGN_FOR`]) instead of streaming it through Tributary
    /// (`blobs_presign = true`). Range requests are still streamed.
    pub presign: bool,
    /// Client settings applied over the AWS environment variables, as `object_store`'s
    /// `AmazonS3ConfigKey` names them (`endpoint`, `access_key_id`, `secret_access_key`,
    /// `region`, `allow_http`, …). Never read from `sources.toml`, whose credentials come from
    /// the environment only; for programs embedding the store, and the tests (one process
    /// cannot give its threads different environments). Not shown by `Display` or `Debug`.
    pub client: Vec<(String, String)>,
}

impl RemoteBlobs {
    /// Parses `s3://BUCKET` or `s3://BUCKET/PREFIX`.
    ///
    /// # Errors
    /// A message saying what is wrong with the URL.
    pub fn parse(url: &str) -> Result<RemoteBlobs, String> {
        let rest = url
            .trim()
            .strip_prefix("s3://")
            .ok_or_else(|| format!("{url:?} is not an s3:// URL (expected \"s3://BUCKET/PREFIX\")"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && bucket.starts_with(|c: char| c.is_ascii_alphanumeric())
            && bucket.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !bucket_ok {
            return Err(format!(
                "{bucket:?} is not a bucket name (3-63 characters a-z, 0-9, '.' and '-', starting and ending with a letter or digit)"
            ));
        }
        let prefix = prefix.trim_matches('/');
        if !prefix.is_empty() {
            let parsed =
                Key::parse(prefix).map_err(|e| format!("the prefix {prefix:?} is not a usable key prefix: {e}"))?;
            if parsed.as_ref() != prefix || prefix.split('/').any(|s| s.is_empty() || s == "." || s == "..") {
                return Err(format!("the prefix {prefix:?} is not a usable key prefix"));
            }
        }
        Ok(RemoteBlobs {
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
            create_bucket: false,
            gc_grace: DEFAULT_GC_GRACE,
            presign: false,
            client: Vec::new(),
        })
    }
}

/// See [`RemoteBlobs::gc_grace`].
pub const DEFAULT_GC_GRACE: Duration = Duration::from_secs(24 * 3600);

/// How long a presigned URL of [`RemoteBlobs::presign`] is valid: long enough to start a
/// download, short enough that a copied link soon stops working.
pub const PRESIGN_FOR: Duration = Duration::from_secs(300);

impl fmt::Display for RemoteBlobs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.prefix.as_str() {
            "" => write!(f, "s3://{}", self.bucket),
            p => write!(f, "s3://{}/{p}", self.bucket),
        }
    }
}

impl fmt::Debug for RemoteBlobs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RemoteBlobs({self})")
    }
}

/// The runtime the backend's futures run on; shut down in the background on drop, which is
/// allowed from any context (dropping a runtime inside another one panics).
struct Rt(Option<tokio::runtime::Runtime>);

impl Drop for Rt {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// An open connection to the bucket.
pub(super) struct Remote {
    rt: Rt,
    s3: Arc<AmazonS3>,
    location: RemoteBlobs,
    /// The endpoint, for errors: the configured `AWS_ENDPOINT`, or AWS's regional one.
    endpoint: String,
    /// This store's instance id, naming its reference markers.
    instance: String,
    /// Whether new content goes up as a conditional PUT (`If-None-Match: *`); cleared for the
    /// life of the process when the server refuses or ignores the header.
    conditional: std::sync::atomic::AtomicBool,
    /// Whether the server was seen to honour the condition ([`Remote::probe_conditional`]):
    /// asked before the first conditional PUT, once per process.
    probed: std::sync::Once,
    /// Whether looking for content before fetching it still pays ([`Remote::adopt`]).
    adoptions: Adoptions,
}

/// Looks for content to adopt ([`Remote::adopt`]) found absent in a row after which only every
/// [`ADOPT_SAMPLE`]th one is made. A bucket no other instance fills (one aggregator on its
/// own) never holds content its harvest has not put there itself, and each look is a HEAD per
/// new bitstream; a top level on its shards' bucket finds nearly everything, and after a streak
/// of misses (sources of its own, not shards) loses at most a sample's worth of adoptions
/// before the next find turns looking back on. Either way, content not adopted is fetched.
const ADOPT_STREAK: u64 = 64;
/// See [`ADOPT_STREAK`].
const ADOPT_SAMPLE: u64 = 16;

/// How adoption has fared lately, for [`ADOPT_STREAK`].
#[derive(Default)]
struct Adoptions {
    /// Looks in a row that found nothing.
    misses: std::sync::atomic::AtomicU64,
    /// Adoptions asked for while only sampling.
    asked: std::sync::atomic::AtomicU64,
}

impl Adoptions {
    fn worth_a_look(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        self.misses.load(Relaxed) < ADOPT_STREAK || self.asked.fetch_add(1, Relaxed).is_multiple_of(ADOPT_SAMPLE)
    }

    fn saw(&self, present: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        match present {
            true => self.misses.store(0, Relaxed),
            false => drop(self.misses.fetch_add(1, Relaxed)),
        }
    }
}

/// The user metadata (`x-amz-meta-tributary-creator`) naming the instance whose conditional
/// PUT created an object. That PUT succeeding proves no object was there, so the creator
/// writes no reference marker: its reference is implicit until another instance finds the
/// object, which then writes the creator's marker beside its own before relying on it (see
/// [`Remote::take_up`]). A gc releasing its reference therefore always sees every other.
const CREATOR: &str = "tributary-creator";

/// The user metadata (`x-amz-meta-tributary-released-by`) of a tombstone: the instance whose
/// release wrote it. A tombstone its creator wrote says the creator let go, so whoever takes the
/// content back writes no marker for the creator (which would keep the object for good).
const RELEASED_BY: &str = "tributary-released-by";

/// What a look at a content key and its tombstone found.
struct Look {
    /// The object's size, when it is there.
    size: Option<u64>,
    /// The instance its metadata names as its creator ([`CREATOR`]).
    creator: Option<String>,
    /// Whether a tombstone names it: one that is there and not older than the object
    /// ([`outlives`]).
    doomed: bool,
    /// The instance whose release wrote the tombstone ([`RELEASED_BY`]).
    released_by: Option<String>,
}

/// What [`Remote::store_file`] did.
pub(super) enum Stored {
    /// The content key was already present: nothing was uploaded.
    Present,
    /// Uploaded.
    Uploaded,
}

/// What [`Remote::create`] did.
enum Created {
    /// The content went up under its key, naming this instance its creator.
    Uploaded,
    /// The key was there already: the object must be marked, looked at and taken up as
    /// present content is.
    Found,
    /// The PUT failed: refused by a server that does not take the condition (501, 400), or
    /// failed as any upload may.
    Failed(object_store::Error),
}

/// Bitstreams up to this size go up as a conditional PUT without a look first (see
/// [`Remote::store_file`]). Above it the look (a HEAD) is small next to the upload it may save
/// when another instance holds the content already.
const CONDITIONAL_MAX: u64 = 1024 * 1024;

/// What a sweep of the doomed bitstreams did.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Sweep {
    pub(super) deleted: u64,
    pub(super) bytes: u64,
    pub(super) rescued: u64,
    pub(super) waiting: u64,
}

impl Remote {
    /// Connects and checks that the bucket answers: reachable, the credentials accepted, the
    /// bucket present (created first when the operator asked for that).
    pub(super) fn connect(location: &RemoteBlobs, instance: &str) -> Result<Remote, StoreError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("store-s3")
            .enable_all()
            .build()
            .map_err(|e| StoreError::io("object-store runtime", e))?;
        let mut builder = AmazonS3Builder::from_env();
        for (key, value) in &location.client {
            let key = key.parse::<AmazonS3ConfigKey>().map_err(|_| StoreError::ObjectStore {
                location: location.to_string(),
                endpoint: String::new(),
                action: "configuring the client".into(),
                detail: format!("unknown client setting {key:?}"),
            })?;
            builder = builder.with_config(key, value);
        }
        let builder = builder.with_bucket_name(&location.bucket);
        let endpoint = builder.get_config_value(&AmazonS3ConfigKey::Endpoint).unwrap_or_else(|| {
            let region = builder.get_config_value(&AmazonS3ConfigKey::Region).unwrap_or_else(|| "us-east-1".into());
            format!("https://s3.{region}.amazonaws.com")
        });
        let error = |action: &str, detail: String| StoreError::ObjectStore {
            location: location.to_string(),
            endpoint: endpoint.clone(),
            action: action.to_owned(),
            detail: scrub(&detail, location),
        };
        // Bounded: a few retries with backoff, each request bounded too, so a store that is
        // down mid-harvest fails the upload within about half a minute and the resource is
        // retried at the next pass instead of stalling it.
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(2),
                base: 2.0,
            },
            max_retries: 4,
            retry_timeout: Duration::from_secs(30),
        };
        // Timeouts as settings, not `with_client_options`, which would replace the client
        // settings from the environment (`AWS_ALLOW_HTTP` among them).
        let timeouts = |b: AmazonS3Builder, connect: &str, total: &str| {
            b.with_config(AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout), connect)
                .with_config(AmazonS3ConfigKey::Client(ClientConfigKey::Timeout), total)
        };
        let s3 = timeouts(builder.clone(), "5s", "60s")
            .with_retry(retry)
            .build()
            .map_err(|e| error("configuring the client", e.to_string()))?;
        // The start-up probe fails fast: no retry, a short timeout.
        let probe_retry =
            RetryConfig { max_retries: 0, retry_timeout: Duration::from_secs(5), ..RetryConfig::default() };
        let probe = timeouts(builder, "3s", "10s")
            .with_retry(probe_retry)
            .build()
            .map_err(|e| error("configuring the client", e.to_string()))?;
        let remote = Remote {
            rt: Rt(Some(rt)),
            s3: Arc::new(s3),
            location: location.clone(),
            endpoint: endpoint.clone(),
            instance: instance.to_owned(),
            conditional: std::sync::atomic::AtomicBool::new(true),
            probed: std::sync::Once::new(),
            adoptions: Adoptions::default(),
        };
        let probe = Arc::new(probe);
        match remote.probe(&probe) {
            Ok(()) => Ok(remote),
            Err(e) if location.create_bucket && e.contains("NoSuchBucket") => {
                remote.create_bucket(&probe).map_err(|e| error("creating the bucket", e))?;
                tracing::info!(bucket = %location.bucket, endpoint = %endpoint, "created the bucket for bitstreams");
                remote
                    .probe(&probe)
                    .map_err(|e| error("listing the bucket after creating it", explain(&e, location)))?;
                Ok(remote)
            }
            Err(e) => Err(error("checking the bucket at start-up", explain(&e, location))),
        }
    }

    /// One LIST under the prefix: needs the endpoint, the credentials and the bucket.
    fn probe(&self, probe: &Arc<AmazonS3>) -> Result<(), String> {
        let probe = Arc::clone(probe);
        let prefix = self.key_prefix();
        self.block(async move {
            let mut list = probe.list(Some(&prefix));
            match list.next().await {
                Some(Err(e)) => Err(full(&e)),
                _ => Ok(()),
            }
        })
        .map_err(|e| e.to_string())?
    }

    /// CreateBucket, as a presigned PUT on the bucket's URL: `object_store` has no call for it,
    /// and presigning keeps the signing in the crate.
    fn create_bucket(&self, probe: &Arc<AmazonS3>) -> Result<(), String> {
        use object_store::signer::Signer as _;
        let probe = Arc::clone(probe);
        self.block(async move {
            let url = probe
                .signed_url(http::Method::PUT, &Key::from(""), Duration::from_secs(60))
                .await
                .map_err(|e| e.to_string())?;
            // The URL of the empty key: the bucket's, with a trailing slash (signed as it is).
            let resp = reqwest::Client::new().put(url).send().await.map_err(|e| without_url(&e))?;
            match resp.status() {
                s if s.is_success() => Ok(()),
                s => Err(format!("the server answered {s}: {}", resp.text().await.unwrap_or_default())),
            }
        })
        .map_err(|e| e.to_string())?
    }

    /// Runs `fut` on the backend's runtime and waits for it, from any thread.
    fn block<T: Send + 'static>(&self, fut: impl Future<Output = T> + Send + 'static) -> Result<T, StoreError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let rt = self.rt.0.as_ref().ok_or_else(|| self.error("running", "the store is closing".into()))?;
        rt.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv().map_err(|_| self.error("running", "the object-store runtime stopped".into()))
    }

    pub(super) fn error(&self, action: &str, detail: String) -> StoreError {
        StoreError::ObjectStore {
            location: self.location.to_string(),
            endpoint: self.endpoint.clone(),
            action: action.to_owned(),
            detail: scrub(&detail, &self.location),
        }
    }

    fn os_error(&self, action: &str, id: &BlobId, e: &object_store::Error) -> StoreError {
        self.error(&format!("{action} sha-256:{id}"), full(e))
    }

    /// The bucket and prefix.
    pub(super) fn location(&self) -> &RemoteBlobs {
        &self.location
    }

    fn key_prefix(&self) -> Key {
        Key::from(self.location.prefix.as_str())
    }

    fn key(&self, rest: &str) -> Key {
        match self.location.prefix.as_str() {
            "" => Key::from(rest),
            p => Key::from(format!("{p}/{rest}")),
        }
    }

    /// `PREFIX/ab/ab12…`.
    pub(super) fn object_key(&self, id: &BlobId) -> Key {
        let hex = id.to_hex();
        self.key(&format!("{}/{hex}", &hex[..2]))
    }

    fn marker_key(&self, id: &BlobId, instance: &str) -> Key {
        self.key(&format!("refs/{id}/{instance}"))
    }

    fn markers_prefix(&self, id: &BlobId) -> Key {
        self.key(&format!("refs/{id}"))
    }

    fn tombstone_key(&self, id: &BlobId) -> Key {
        self.key(&format!("doomed/{id}"))
    }

    /// The object under the content key (its size and creator), if there is one, and whether
    /// it is doomed (a tombstone names it, and the object does not outlive it): two HEADs
    /// together.
    fn look(&self, id: &BlobId) -> Result<Look, StoreError> {
        let (s3, key, tomb) = (Arc::clone(&self.s3), self.object_key(id), self.tombstone_key(id));
        let (object, tomb) = self.block(async move {
            let head = || GetOptions { head: true, ..GetOptions::default() };
            tokio::join!(s3.get_opts(&key, head()), s3.get_opts(&tomb, head()))
        })?;
        let named = |got: &object_store::GetResult, name: &str| {
            got.attributes.get(&Attribute::Metadata(name.to_owned().into())).map(|v| v.to_string())
        };
        let tomb = found(tomb).map_err(|e| self.os_error("looking for the tombstone of", id, &e))?;
        let object = found(object).map_err(|e| self.os_error("looking for", id, &e))?;
        let stale = |t: &object_store::GetResult| object.as_ref().is_some_and(|o| outlives(&o.meta, &t.meta));
        Ok(Look {
            size: object.as_ref().map(|o| o.meta.size),
            creator: object.as_ref().and_then(|o| named(o, CREATOR)),
            doomed: tomb.as_ref().is_some_and(|t| !stale(t)),
            released_by: tomb.as_ref().and_then(|t| named(t, RELEASED_BY)),
        })
    }

    /// Writes the marker of the instance that created the object `look` saw, when that is
    /// another instance: its reference, implicit until now, becomes one every gc sees. Before
    /// this instance relies on an object, so that its own release later cannot doom what the
    /// creator still refers to. The creator's own release deletes it as its own. A creator that
    /// wrote the tombstone has let go already and gets none.
    fn mark_creator(&self, id: &BlobId, look: &Look) -> Result<(), StoreError> {
        match look.creator.as_deref() {
            Some(c) if c != self.instance && !(look.doomed && look.released_by.as_deref() == Some(c)) => {
                self.mark_as(id, c)
            }
            _ => Ok(()),
        }
    }

    /// Takes up the bitstream `id` if the bucket holds it already (put there, verified, by
    /// this or another instance sharing the bucket): a HEAD of the object; if it is there,
    /// this instance's marker is written, the object and its tombstone looked at after it and
    /// its creator's marker written, as a put does. Returns its size; `None` when it is absent,
    /// of another size than `length`, or doomed (then the caller fetches and puts it, which
    /// takes it back properly), or when lately nothing was found ([`ADOPT_STREAK`]).
    pub(super) fn adopt(&self, id: &BlobId, length: Option<u64>) -> Result<Option<u64>, StoreError> {
        let fits = |size: Option<u64>| size.filter(|s| length.is_none_or(|l| l == *s));
        if !self.adoptions.worth_a_look() {
            return Ok(None);
        }
        let (s3, key) = (Arc::clone(&self.s3), self.object_key(id));
        let head = self.block(async move { s3.head(&key).await })?;
        let size = found(head).map_err(|e| self.os_error("looking for", id, &e))?.map(|meta| meta.size);
        self.adoptions.saw(size.is_some());
        if fits(size).is_none() {
            return Ok(None);
        }
        self.mark(id)?;
        let look = self.look(id)?;
        if look.doomed || fits(look.size).is_none() {
            return Ok(None);
        }
        self.mark_creator(id, &look)?;
        Ok(look.size)
    }

    /// Makes the verified content spooled at `file` (`len` bytes) available under its content
    /// key, referred to by this instance.
    ///
    /// Bitstreams up to [`CONDITIONAL_MAX`] go up as a conditional PUT (`If-None-Match: *`:
    /// "only if the key is absent") naming this instance its [`CREATOR`]: one request, and no
    /// marker. A tombstone needs no look: the PUT succeeding proves the object it named was
    /// deleted, and a sweep keeps an object that outlives its tombstone ([`outlives`]). An
    /// existing key answers 412 and takes the path of present content: this instance's marker
    /// first (so no other instance's gc deletes the object from then on), the key and
    /// tombstone looked at, the creator's marker written, a tombstone removed (the content is
    /// wanted again) and the content uploaded unless a live object of its size is there.
    ///
    /// Larger bitstreams, and every one on a server that refuses or ignores the condition
    /// ([`Remote::probe_conditional`]; a refusal mid-run turns it off too), are looked for
    /// first: new content (neither key nor tombstone there) goes up with this instance's marker,
    /// present content takes the path above.
    pub(super) fn store_file(
        &self,
        id: &BlobId,
        file: &FsPath,
        len: u64,
        media_type: Option<&str>,
    ) -> Result<Stored, StoreError> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.goes_conditional(len) {
            match self.create(id, file, media_type)? {
                Created::Uploaded => return Ok(Stored::Uploaded),
                Created::Found => {
                    self.mark(id)?;
                    return self.take_up(id, file, len, media_type);
                }
                Created::Failed(e) => {
                    // Refused by a server without conditional PUTs, or failed as any PUT may:
                    // the looking path decides. Its success says it was the condition.
                    let stored = self.look_and_store(id, file, len, media_type)?;
                    self.conditional.store(false, Relaxed);
                    tracing::info!(bucket = %self.location.bucket, error = %full(&e), "a conditional PUT (If-None-Match) failed where a plain one succeeded: each new bitstream is looked for before its upload from now on");
                    return Ok(stored);
                }
            }
        }
        self.look_and_store(id, file, len, media_type)
    }

    /// Whether a put of `len` bytes goes up as a conditional PUT: small enough, and the server
    /// honours the condition (asked before the first one).
    fn goes_conditional(&self, len: u64) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        if len > CONDITIONAL_MAX || !self.conditional.load(Relaxed) {
            return false;
        }
        self.probed.call_once(|| self.probe_conditional());
        self.conditional.load(Relaxed)
    }

    /// Whether the server honours `If-None-Match: *` on a PUT: a server that ignores it would
    /// let a second creator overwrite the first one's [`CREATOR`], and with it the first one's
    /// only reference. Two conditional PUTs of an empty probe key of this instance's own: the
    /// second must be refused. Otherwise (or when the probe fails) new content gets markers
    /// as on a server without the condition.
    fn probe_conditional(&self) {
        let (s3, key) = (Arc::clone(&self.s3), self.key(&format!("probe/{}", self.instance)));
        let honoured = self.block(async move {
            let create = || PutOptions { mode: object_store::PutMode::Create, ..PutOptions::default() };
            // The first may find the key left by a probe that crashed before its delete.
            match s3.put_opts(&key, PutPayload::new(), create()).await {
                Ok(_) | Err(object_store::Error::AlreadyExists { .. }) => {}
                Err(e) => return Err(e),
            }
            let second = s3.put_opts(&key, PutPayload::new(), create()).await;
            gone(s3.delete(&key).await)?;
            match second {
                Err(object_store::Error::AlreadyExists { .. }) => Ok(true),
                Ok(_) => Ok(false),
                Err(e) => Err(e),
            }
        });
        let why = match honoured {
            Ok(Ok(true)) => return,
            Ok(Ok(false)) => "the server ignores it (a second create of one key succeeded)".to_owned(),
            Ok(Err(e)) => full(&e),
            Err(e) => e.to_string(),
        };
        self.conditional.store(false, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(bucket = %self.location.bucket, reason = %why, "conditional PUTs (If-None-Match) are not used: each new bitstream is looked for before its upload and marked");
    }

    /// [`Remote::store_file`] by looking first: a HEAD of the key and of its tombstone, then an
    /// upload (of new content, with the marker) or the path of present content.
    fn look_and_store(
        &self,
        id: &BlobId,
        file: &FsPath,
        len: u64,
        media_type: Option<&str>,
    ) -> Result<Stored, StoreError> {
        let look = self.look(id)?;
        if look.size.is_none() && !look.doomed {
            // New content, the common case: the upload and the marker go together, a round
            // trip saved. No gc deletes it meanwhile: a sweep deletes an object only after
            // seeing its tombstone, and there is none (a tombstone names an object that was
            // there when it was written, and goes after it).
            let (s3, key, marker) = (Arc::clone(&self.s3), self.object_key(id), self.marker_key(id, &self.instance));
            let (path, s3m, attributes) = (file.to_path_buf(), Arc::clone(&s3), content_type(media_type));
            let (uploaded, marked) = self.block(async move {
                tokio::join!(upload(s3, key, path, len, attributes), s3m.put(&marker, PutPayload::new()))
            })?;
            uploaded.map_err(|e| self.os_error("uploading", id, &e))?;
            marked.map_err(|e| self.os_error("marking the reference to", id, &e))?;
            return Ok(Stored::Uploaded);
        }
        // Present, or doomed: this instance's marker first, then the object and its tombstone
        // looked at again, so that no gc that has not seen the marker can still delete the object.
        self.mark(id)?;
        self.take_up(id, file, len, media_type)
    }

    /// The conditional PUT of new content, naming this instance its creator; see
    /// [`Remote::store_file`]. A tombstone it may leave standing names an object deleted
    /// before this one was put: the object outlives it ([`outlives`]) and no gc deletes it.
    fn create(&self, id: &BlobId, file: &FsPath, media_type: Option<&str>) -> Result<Created, StoreError> {
        let (s3, key) = (Arc::clone(&self.s3), self.object_key(id));
        let mut attributes = content_type(media_type);
        attributes.insert(Attribute::Metadata(CREATOR.into()), self.instance.clone().into());
        let path = file.to_path_buf();
        Ok(match self.block(upload_new(s3, key, path, attributes))? {
            Ok(()) => Created::Uploaded,
            Err(object_store::Error::AlreadyExists { .. }) => Created::Found,
            Err(e) => Created::Failed(e),
        })
    }

    /// With this instance's marker written: the object and its tombstone looked at, the
    /// creator's marker written ([`Remote::mark_creator`]), a tombstone removed (the content is
    /// wanted again) and the content uploaded unless a live object of its size is there.
    fn take_up(&self, id: &BlobId, file: &FsPath, len: u64, media_type: Option<&str>) -> Result<Stored, StoreError> {
        let look = self.look(id)?;
        self.mark_creator(id, &look)?;
        if look.doomed {
            // Content wanted again: take it off the list before trusting the object.
            let (s3, tomb) = (Arc::clone(&self.s3), self.tombstone_key(id));
            self.block(async move { gone(s3.delete(&tomb).await) })?.map_err(|e| self.os_error("checking", id, &e))?;
        } else if look.size == Some(len) {
            return Ok(Stored::Present);
        }
        let (s3, key, path) = (Arc::clone(&self.s3), self.object_key(id), file.to_path_buf());
        self.block(upload(s3, key, path, len, content_type(media_type)))?
            .map_err(|e| self.os_error("uploading", id, &e))?;
        Ok(Stored::Uploaded)
    }

    /// Writes this instance's reference marker for the bitstream.
    pub(super) fn mark(&self, id: &BlobId) -> Result<(), StoreError> {
        self.mark_as(id, &self.instance)
    }

    /// Writes `instance`'s reference marker for the bitstream.
    fn mark_as(&self, id: &BlobId, instance: &str) -> Result<(), StoreError> {
        let (s3, key) = (Arc::clone(&self.s3), self.marker_key(id, instance));
        self.block(async move { s3.put(&key, PutPayload::new()).await })?
            .map(drop)
            .map_err(|e| self.os_error("marking the reference to", id, &e))
    }

    /// A presigned GET URL of the bitstream, valid for [`PRESIGN_FOR`], whose answer carries
    /// `headers` (signed: a client cannot change them). It carries the access key id and a
    /// signature, never the secret.
    pub(super) fn presigned(&self, id: &BlobId, headers: &ResponseHeaders) -> Result<String, StoreError> {
        use object_store::signer::{SignedUrlOptions, Signer as _};
        let (s3, key) = (Arc::clone(&self.s3), self.object_key(id));
        let options = SignedUrlOptions::default().with_query([
            ("response-content-type", headers.content_type.as_str()),
            ("response-content-disposition", headers.disposition.as_str()),
        ]);
        self.block(async move { s3.signed_url_opts(http::Method::GET, &key, PRESIGN_FOR, &options).await })?
            .map(|u| u.to_string())
            .map_err(|e| self.os_error("presigning", id, &e))
    }

    /// Streams bytes `range` of the bitstream (ranged GET).
    pub(super) fn reader(self: &Arc<Self>, id: &BlobId, range: Range<u64>) -> Result<RemoteReader, StoreError> {
        if range.is_empty() {
            return Ok(RemoteReader { remote: Arc::clone(self), stream: None, buf: Bytes::new() });
        }
        let (s3, key) = (Arc::clone(&self.s3), self.object_key(id));
        let opts = GetOptions { range: Some(GetRange::Bounded(range)), ..GetOptions::default() };
        let got = self.block(async move { s3.get_opts(&key, opts).await })?;
        let got = got.map_err(|e| self.os_error("reading", id, &e))?;
        Ok(RemoteReader { remote: Arc::clone(self), stream: Some(got.into_stream()), buf: Bytes::new() })
    }

    /// This instance no longer refers to the bitstream: its marker goes, and when no other
    /// instance's marker is left the bitstream is marked doomed (the tombstone naming this
    /// instance, [`RELEASED_BY`]), to be deleted by a `gc` after the grace period if no instance
    /// has taken it back by then. Returns whether it was doomed.
    pub(super) fn release(&self, id: &BlobId) -> Result<bool, StoreError> {
        let (s3, mine, others, tomb, instance) = (
            Arc::clone(&self.s3),
            self.marker_key(id, &self.instance),
            self.markers_prefix(id),
            self.tombstone_key(id),
            self.instance.clone(),
        );
        self.block(async move {
            gone(s3.delete(&mine).await)?;
            let first = s3.list(Some(&others)).next().await.transpose()?;
            if first.is_some() {
                return Ok(false);
            }
            let mut attributes = Attributes::new();
            attributes.insert(Attribute::Metadata(RELEASED_BY.into()), instance.into());
            s3.put_opts(&tomb, PutPayload::new(), PutOptions { attributes, ..PutOptions::default() }).await?;
            Ok(true)
        })?
        .map_err(|e: object_store::Error| self.os_error("releasing", id, &e))
    }

    /// Deletes every doomed bitstream whose tombstone is older than the grace period and that
    /// no instance has marked since; a tombstone whose bitstream was marked again is removed.
    pub(super) fn sweep(&self) -> Result<Sweep, StoreError> {
        let s3 = Arc::clone(&self.s3);
        let doomed = self.key("doomed");
        let listed = self
            .block(async move { s3.list(Some(&doomed)).collect::<Vec<_>>().await })?
            .into_iter()
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.error("listing doomed bitstreams", full(&e)))?;
        let mut sweep = Sweep::default();
        let grace = chrono_seconds(self.location.gc_grace);
        for meta in listed {
            let Some(id) = meta.location.filename().and_then(|n| n.parse::<BlobId>().ok()) else { continue };
            let age = chrono_now() - meta.last_modified.timestamp();
            if age < grace {
                sweep.waiting += 1;
                continue;
            }
            let (s3, markers, object, tomb) =
                (Arc::clone(&self.s3), self.markers_prefix(&id), self.object_key(&id), meta.location.clone());
            let outcome = self.block(async move {
                if s3.list(Some(&markers)).next().await.transpose()?.is_some() {
                    gone(s3.delete(&tomb).await)?;
                    return Ok(None);
                }
                // Still doomed? Another gc may have swept it, or a put taken it back, since
                // the listing; the last check before the DELETE.
                let doom = match s3.head(&tomb).await {
                    Err(object_store::Error::NotFound { .. }) => return Ok(None),
                    Err(e) => return Err(e),
                    Ok(doom) => doom,
                };
                match s3.head(&object).await {
                    // Deleted by a sweep cut short before its tombstone: a conditional PUT may
                    // be creating it again right now, so only the tombstone goes.
                    Err(object_store::Error::NotFound { .. }) => {
                        gone(s3.delete(&tomb).await)?;
                        Ok(Some(0))
                    }
                    Err(e) => Err(e),
                    // Put again after such a sweep: wanted, and by a creator with no marker.
                    Ok(found) if outlives(&found, &doom) => {
                        gone(s3.delete(&tomb).await)?;
                        Ok(None)
                    }
                    Ok(found) => {
                        gone(s3.delete(&object).await)?;
                        gone(s3.delete(&tomb).await)?;
                        Ok(Some(found.size))
                    }
                }
            })?;
            match outcome.map_err(|e| self.os_error("collecting", &id, &e))? {
                None => sweep.rescued += 1,
                Some(size) => {
                    sweep.deleted += 1;
                    sweep.bytes += size;
                }
            }
        }
        Ok(sweep)
    }
}

/// Whether `object` was put after `tombstone` was written: then the tombstone was left by a
/// sweep that deleted the object it named and stopped before the tombstone, and this object
/// is content put again since, which the tombstone does not name. By the server's
/// `Last-Modified` (whole seconds): a doomed object was there before its tombstone was
/// written, and one put again came after a sweep, at least the grace period later.
fn outlives(object: &ObjectMeta, tombstone: &ObjectMeta) -> bool {
    object.last_modified.timestamp() > tombstone.last_modified.timestamp()
}

fn chrono_seconds(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

fn chrono_now() -> i64 {
    crate::model::W3cDateTime::now().unix_timestamp()
}

/// The object attributes of an upload: its `Content-Type`, when the content declared one.
fn content_type(media_type: Option<&str>) -> Attributes {
    let mut attributes = Attributes::new();
    if let Some(t) = media_type.filter(|t| !t.is_empty()) {
        attributes.insert(Attribute::ContentType, t.to_owned().into());
    }
    attributes
}

/// Uploads the spool at `path` (`len` bytes) under `key`: one PUT up to [`PART`] bytes, else a
/// multipart upload of `PART`-sized parts, at most [`PARTS_IN_FLIGHT`] in flight, aborted on
/// failure.
async fn upload(
    s3: Arc<AmazonS3>,
    key: Key,
    path: std::path::PathBuf,
    len: u64,
    attributes: Attributes,
) -> object_store::Result<()> {
    use tokio::io::AsyncReadExt as _;
    let read_err = |e: io::Error| object_store::Error::Generic { store: "spool", source: Box::new(e) };
    let mut f = tokio::fs::File::open(&path).await.map_err(read_err)?;
    if len <= PART as u64 {
        let mut buf = Vec::with_capacity(len as usize);
        f.read_to_end(&mut buf).await.map_err(read_err)?;
        let opts = PutOptions { attributes, ..PutOptions::default() };
        s3.put_opts(&key, PutPayload::from(buf), opts).await?;
        return Ok(());
    }
    let opts = PutMultipartOptions { attributes, ..PutMultipartOptions::default() };
    let mut upload = WriteMultipart::new_with_chunk_size(s3.put_multipart_opts(&key, opts).await?, PART);
    let mut buf = vec![0u8; 1024 * 1024];
    loop {
        let n = match f.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                let _ = upload.abort().await;
                return Err(read_err(e));
            }
        };
        if let Err(e) = upload.wait_for_capacity(PARTS_IN_FLIGHT).await {
            let _ = upload.abort().await;
            return Err(e);
        }
        upload.write(&buf[..n]);
    }
    upload.finish().await.map(drop)
}

/// Uploads the spool at `path` as one PUT that only creates: `AlreadyExists` when the key is
/// there (412, or 304 from some servers).
async fn upload_new(
    s3: Arc<AmazonS3>,
    key: Key,
    path: std::path::PathBuf,
    attributes: Attributes,
) -> object_store::Result<()> {
    let read_err = |e: io::Error| object_store::Error::Generic { store: "spool", source: Box::new(e) };
    let buf = tokio::fs::read(&path).await.map_err(read_err)?;
    let opts = PutOptions { mode: object_store::PutMode::Create, attributes, ..PutOptions::default() };
    s3.put_opts(&key, PutPayload::from(buf), opts).await.map(drop)
}

/// A DELETE's result, with "not found" as success: S3 answers 204 for a missing key, but not
/// every compatible server does, and the key being gone is what was asked.
fn gone(result: object_store::Result<()>) -> object_store::Result<()> {
    found(result).map(drop)
}

/// What a request got, `None` when the key is absent: a 404 is an answer, not a failure.
fn found<T>(result: object_store::Result<T>) -> object_store::Result<Option<T>> {
    match result {
        Ok(got) => Ok(Some(got)),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// An error with its causes, each said once (`object_store` repeats its causes' text).
fn full(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let part = c.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = c.source();
    }
    text
}

/// A reqwest error's text without its URL (a presigned URL carries a signature).
fn without_url(e: &reqwest::Error) -> String {
    let mut e = e.to_string();
    if let Some(i) = e.find(" for url (") {
        e.truncate(i);
    }
    e
}

/// Says what a start-up failure most likely means, in the operator's terms.
fn explain(detail: &str, location: &RemoteBlobs) -> String {
    let hint = if detail.contains("NoSuchBucket") {
        format!(
            "the bucket {:?} does not exist: create it, or set `blobs_create_bucket = true` in [aggregator] to have Tributary create it",
            location.bucket
        )
    } else if unreachable(detail) {
        "the endpoint cannot be reached: check AWS_ENDPOINT (or AWS_ENDPOINT_URL) and that the server is running"
            .to_owned()
    } else if ["InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403 Forbidden", "InvalidSecurity"]
        .iter()
        .any(|c| detail.contains(c))
    {
        "the credentials were refused: check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY".to_owned()
    } else {
        return detail.to_owned();
    };
    format!("{hint} ({detail})")
}

/// Whether the request never got an answer. Checked before the credential codes: a refused
/// connection's message carries an elapsed time such as "in 403.58µs", which once read as a 403.
fn unreachable(detail: &str) -> bool {
    ["error sending request", "tcp connect error", "Connection refused", "dns error", "timed out"]
        .iter()
        .any(|c| detail.contains(c))
}

/// Replaces the secret key and session token, should either ever appear in a message, by `***`.
fn scrub(text: &str, location: &RemoteBlobs) -> String {
    let secret_keys = ["secret_access_key", "aws_secret_access_key", "token", "session_token", "aws_session_token"];
    let given = location.client.iter().filter(|(k, _)| secret_keys.contains(&k.as_str())).map(|(_, v)| v.clone());
    let env = ["AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"].into_iter().filter_map(|k| std::env::var(k).ok());
    let mut text = text.to_owned();
    for secret in given.chain(env).filter(|s| s.len() >= 4) {
        text = text.replace(&secret, "***");
    }
    text
}

/// A streaming reader over a ranged GET; each `read` takes the next chunk from the backend's
/// runtime.
pub(super) struct RemoteReader {
    remote: Arc<Remote>,
    stream: Option<BoxStream<'static, object_store::Result<Bytes>>>,
    buf: Bytes,
}

impl Read for RemoteReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.buf.is_empty() {
            let Some(mut stream) = self.stream.take() else { return Ok(0) };
            let (next, stream) = self
                .remote
                .block(async move {
                    let next = stream.next().await;
                    (next, stream)
                })
                .map_err(io::Error::other)?;
            match next {
                None => return Ok(0),
                Some(Ok(bytes)) => {
                    self.stream = Some(stream);
                    self.buf = bytes;
                }
                Some(Err(e)) => return Err(io::Error::other(self.remote.error("reading", full(&e)))),
            }
        }
        let n = out.len().min(self.buf.len());
        out[..n].copy_from_slice(&self.buf.split_to(n));
        Ok(n)
    }
}

impl fmt::Debug for RemoteReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteReader").field("location", &self.remote.location).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_urls_parse() {
        let r = RemoteBlobs::parse("s3://my-bucket/a/b/").unwrap();
        assert_eq!((r.bucket.as_str(), r.prefix.as_str()), ("my-bucket", "a/b"));
        assert_eq!(r.to_string(), "s3://my-bucket/a/b");
        let r = RemoteBlobs::parse("s3://bucket").unwrap();
        assert_eq!((r.bucket.as_str(), r.prefix.as_str(), r.to_string().as_str()), ("bucket", "", "s3://bucket"));
        for bad in
            ["http://b/p", "s3://", "s3://B", "s3://ab", "s3://-bucket", "s3://bucket/a//b", "s3://bucket/a/../b"]
        {
            assert!(RemoteBlobs::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_secret_in_a_message_is_scrubbed() {
        let mut location = RemoteBlobs::parse("s3://bucket/p").unwrap();
        location.client.push(("secret_access_key".into(), "hush-hush-1234".into()));
        assert_eq!(scrub("x hush-hush-1234 y", &location), "x *** y");
        assert_eq!(scrub("nothing secret", &location), "nothing secret");
    }

    #[test]
    fn a_refused_connection_is_not_read_as_refused_credentials() {
        let location = RemoteBlobs::parse("s3://bucket/p").unwrap();
        let down = "Error performing GET http://127.0.0.1:1/b in 403.58µs - HTTP error: error sending request: \
                    client error (Connect): tcp connect error: Connection refused (os error 111)";
        assert!(explain(down, &location).starts_with("the endpoint cannot be reached"));
        let denied = "Client error with status 403 Forbidden: <Code>AccessDenied</Code>";
        assert!(explain(denied, &location).starts_with("the credentials were refused"));
        let missing = "<Code>NoSuchBucket</Code>";
        assert!(explain(missing, &location).starts_with("the bucket \"bucket\" does not exist"));
    }
}
