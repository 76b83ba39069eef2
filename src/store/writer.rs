//! Writing a blob as a stream: hash while writing, verify against what the Source declared,
//! and only then make the blob exist.
//!
//! Content up to [`INLINE_MAX`] stays in memory and becomes one database row. Anything larger
//! goes to a file in `tmp/`, which on commit is synced, renamed to `blobs/ab/<sha-256>` and
//! its directory synced, and only then gets its row. A put that fails — bad input stream,
//! wrong length or digest, disk full — removes its temporary file, and a crash leaves at most
//! a file in `tmp/`, swept on the next open. Nothing half-written is ever reachable.

use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};
use std::time::Instant;

use sha2::Digest as _;

use super::blob::{BlobId, BlobInfo, BlobRow, Expected, Place};
use super::error::StoreError;
use super::open::sync_dir;
use super::{INLINE_MAX, Inner, Store};
use crate::model::HashAlgorithm;

/// Read size for [`Store::put`]; also the file write buffer.
const IO_BUF: usize = 256 * 1024;

/// An incremental put, for content that arrives in pieces (an async HTTP body). Feed it with
/// [`BlobWriter::write`] (or as an [`io::Write`]), then [`BlobWriter::commit`] or
/// [`BlobWriter::abort`]. Dropping it uncommitted aborts.
pub struct BlobWriter {
    inner: Arc<Inner>,
    expected: Expected,
    hashers: Hashers,
    written: u64,
    small: Vec<u8>,
    spill: Option<Spill>,
    failed: Option<FailState>,
}

/// The temporary file of a blob larger than `INLINE_MAX`.
struct Spill {
    path: PathBuf,
    file: BufWriter<File>,
    /// Bytes handed to the kernel since the last background sync request.
    unsynced: u64,
    syncer: Option<Syncer>,
    /// Whether the file becomes the blob (local files) and so is synced as it grows; a spool
    /// for an upload to the bucket is read back and deleted, never synced.
    durable: bool,
}

/// Start writing a large blob's pages back to disk every this many bytes, so the final fsync
/// waits only for the tail instead of the whole bitstream.
const SYNC_EVERY: u64 = 16 * 1024 * 1024;

/// Syncs a file on a helper thread while the caller keeps hashing and writing. Its first
/// error is kept and returned by [`Syncer::finish`]: an fsync error is reported once per open
/// file, so one swallowed here would never reach the final sync.
struct Syncer {
    tx: mpsc::SyncSender<()>,
    handle: std::thread::JoinHandle<io::Result<()>>,
}

impl Syncer {
    fn start(file: &File) -> io::Result<Syncer> {
        let file = file.try_clone()?;
        let (tx, rx) = mpsc::sync_channel::<()>(1);
        let handle = std::thread::Builder::new().name("store-sync".into()).spawn(move || {
            let mut result = Ok(());
            for () in rx {
                if result.is_ok() {
                    result = file.sync_data();
                }
            }
            result
        })?;
        Ok(Syncer { tx, handle })
    }

    fn request(&self) {
        // A full channel means a sync is already pending, which covers this request too.
        let _ = self.tx.try_send(());
    }

    fn finish(self) -> io::Result<()> {
        drop(self.tx);
        self.handle.join().unwrap_or_else(|_| Err(io::Error::other("sync thread panicked")))
    }
}

impl Spill {
    fn write(&mut self, data: &[u8]) -> io::Result<()> {
        self.file.write_all(data)?;
        self.unsynced += data.len() as u64;
        if self.durable && self.unsynced >= SYNC_EVERY {
            self.file.flush()?;
            if self.syncer.is_none() {
                self.syncer = Some(Syncer::start(self.file.get_ref())?);
            }
            if let Some(syncer) = &self.syncer {
                syncer.request();
            }
            self.unsynced = 0;
        }
        Ok(())
    }
}

/// Why an earlier write failed, so `commit` can say so again.
#[derive(Clone, Copy)]
enum FailState {
    TooLong(u64),
    Io,
}

/// sha-256 always, md5 and sha-1 when asked, fed the same bytes.
pub(super) struct Hashers {
    sha256: sha2::Sha256,
    md5: Option<md5::Md5>,
    sha1: Option<sha1::Sha1>,
}

pub(super) struct Digests {
    pub(super) sha256: [u8; 32],
    pub(super) md5: Option<[u8; 16]>,
    pub(super) sha1: Option<[u8; 20]>,
}

impl Hashers {
    fn new(expected: &Expected) -> Self {
        Self::with(expected.wants_md5(), expected.wants_sha1())
    }

    pub(super) fn with(md5: bool, sha1: bool) -> Self {
        Hashers { sha256: sha2::Sha256::new(), md5: md5.then(md5::Md5::new), sha1: sha1.then(sha1::Sha1::new) }
    }

    pub(super) fn update(&mut self, data: &[u8]) {
        self.sha256.update(data);
        if let Some(h) = &mut self.md5 {
            h.update(data);
        }
        if let Some(h) = &mut self.sha1 {
            h.update(data);
        }
    }

    pub(super) fn finish(self) -> Digests {
        Digests {
            sha256: self.sha256.finalize().into(),
            md5: self.md5.map(|h| h.finalize().into()),
            sha1: self.sha1.map(|h| h.finalize().into()),
        }
    }
}

impl Store {
    /// Stores the content read from `reader`, streaming (never the whole body in memory), and
    /// returns its digests and length. Identical content is stored once.
    ///
    /// # Errors
    /// [`StoreError::LengthMismatch`], [`StoreError::TooLong`] or [`StoreError::HashMismatch`]
    /// when the content does not match `expected`; [`StoreError::Input`] when `reader` fails;
    /// [`StoreError::Io`] for disk errors (including a full disk). In every case nothing is
    /// left behind.
    pub fn put(&self, reader: impl Read, expected: &Expected) -> Result<BlobInfo, StoreError> {
        let mut writer = self.blob_writer(expected.clone());
        // A zeroed 256 KiB buffer per put cost more than storing a 2 KiB blob; reuse one.
        thread_local!(static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) });
        BUF.with(|buf| match buf.try_borrow_mut() {
            Ok(mut buf) => copy_into(reader, &mut writer, &mut buf),
            // Only reachable if `reader` itself puts into this store from this thread.
            Err(_) => copy_into(reader, &mut writer, &mut Vec::new()),
        })?;
        writer.commit()
    }

    /// Starts an incremental put; see [`BlobWriter`].
    pub fn blob_writer(&self, expected: Expected) -> BlobWriter {
        BlobWriter {
            inner: Arc::clone(&self.inner),
            hashers: Hashers::new(&expected),
            expected,
            written: 0,
            small: Vec::new(),
            spill: None,
            failed: None,
        }
    }
}

fn copy_into(mut reader: impl Read, writer: &mut BlobWriter, buf: &mut Vec<u8>) -> Result<(), StoreError> {
    buf.resize(IO_BUF, 0);
    loop {
        let n = match reader.read(buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(source) => return Err(StoreError::Input { read: writer.written, source }),
        };
        writer.write(&buf[..n])?;
    }
}

impl BlobWriter {
    /// Appends a piece of the content.
    ///
    /// # Errors
    /// [`StoreError::TooLong`] as soon as the content exceeds the declared length;
    /// [`StoreError::Io`] when the temporary file cannot be written. After an error the writer
    /// holds nothing on disk, and `commit` fails.
    pub fn write(&mut self, data: &[u8]) -> Result<(), StoreError> {
        if let Some(state) = self.failed {
            return Err(self.fail_error(state));
        }
        let total = self.written + data.len() as u64;
        if let Some(expected) = self.expected.length.filter(|&l| total > l) {
            return Err(self.fail(FailState::TooLong(expected), None));
        }
        self.hashers.update(data);
        self.written = total;
        if self.spill.is_none() && self.small.len() + data.len() <= INLINE_MAX {
            self.small.extend_from_slice(data);
            return Ok(());
        }
        self.write_spill(data)
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    fn write_spill(&mut self, data: &[u8]) -> Result<(), StoreError> {
        if self.spill.is_none() {
            let spill = self.start_spill().map_err(|e| self.fail(FailState::Io, Some(e)))?;
            self.spill = Some(spill);
        }
        let Some(spill) = &mut self.spill else { unreachable!("spill was just created") };
        if let Err(e) = spill.write(data) {
            let err = self.inner.write_failed(&spill.path, e);
            return Err(self.fail(FailState::Io, Some(err)));
        }
        Ok(())
    }

    fn start_spill(&mut self) -> Result<Spill, StoreError> {
        let n = self.inner.tmp_counter.fetch_add(1, Ordering::Relaxed);
        let path = self.inner.root.join("tmp").join(format!("{}-{n}", std::process::id()));
        let file = File::create(&path).map_err(|e| StoreError::io(&path, e))?;
        let mut file = BufWriter::with_capacity(IO_BUF, file);
        if let Err(e) = file.write_all(&self.small) {
            drop(file.into_parts());
            let _ = fs::remove_file(&path);
            return Err(self.inner.write_failed(&path, e));
        }
        self.small = Vec::new();
        Ok(Spill { path, file, unsynced: 0, syncer: None, durable: self.inner.remote.is_none() })
    }

    /// Records a failure and removes the temporary file.
    fn fail(&mut self, state: FailState, err: Option<StoreError>) -> StoreError {
        self.failed = Some(state);
        self.discard();
        err.unwrap_or_else(|| self.fail_error(state))
    }

    fn fail_error(&self, state: FailState) -> StoreError {
        match state {
            FailState::TooLong(expected) => StoreError::TooLong { expected },
            FailState::Io => StoreError::Io {
                path: self.inner.root.join("tmp"),
                source: io::Error::other("an earlier write to this blob failed"),
            },
        }
    }

    fn discard(&mut self) {
        self.small = Vec::new();
        if let Some(spill) = self.spill.take() {
            if let Some(syncer) = spill.syncer {
                let _ = syncer.finish();
            }
            drop(spill.file.into_parts());
            // Best effort: whatever is left in tmp/ is swept on the next open.
            let _ = fs::remove_file(&spill.path);
        }
    }

    /// Drops everything written; nothing is stored.
    pub fn abort(mut self) {
        self.discard();
    }

    /// Verifies the content against the expectation and stores it.
    ///
    /// # Errors
    /// [`StoreError::LengthMismatch`] / [`StoreError::HashMismatch`] (nothing stored),
    /// [`StoreError::Io`] / [`StoreError::Database`] when storing fails (nothing visible).
    pub fn commit(mut self) -> Result<BlobInfo, StoreError> {
        if let Some(state) = self.failed {
            return Err(self.fail_error(state));
        }
        if let Err(e) = self.inner.db.check_writable() {
            self.discard();
            return Err(e);
        }
        let hashers = std::mem::replace(&mut self.hashers, Hashers::new(&Expected::none()));
        let digests = hashers.finish();
        if let Err(e) = self.check(&digests) {
            self.discard();
            return Err(e);
        }
        let id = BlobId(digests.sha256);
        self.inner.fresh.lock().unwrap_or_else(|p| p.into_inner()).insert(id, Instant::now());
        let row = BlobRow {
            length: self.written,
            md5: digests.md5,
            sha1: digests.sha1,
            created: crate::model::W3cDateTime::now().unix_timestamp(),
            place: Place::File,
            referrer: None,
        };
        let result = match self.spill.take() {
            None => {
                let small = std::mem::take(&mut self.small);
                self.inner.put_packed(id, row, &small)
            }
            Some(spill) => self.commit_file(id, row, spill),
        };
        self.discard();
        result
    }

    fn check(&self, d: &Digests) -> Result<(), StoreError> {
        if let Some(expected) = self.expected.length.filter(|&l| l != self.written) {
            return Err(StoreError::LengthMismatch { expected, actual: self.written });
        }
        for declared in &self.expected.hashes.0 {
            let actual = match declared.algorithm {
                HashAlgorithm::Sha256 => hex::encode(d.sha256),
                HashAlgorithm::Md5 => d.md5.map(hex::encode).unwrap_or_default(),
                HashAlgorithm::Sha1 => d.sha1.map(hex::encode).unwrap_or_default(),
                HashAlgorithm::Other(_) => continue,
            };
            if !declared.value.eq_ignore_ascii_case(&actual) {
                return Err(StoreError::HashMismatch {
                    algorithm: declared.algorithm.clone(),
                    expected: declared.value.clone(),
                    actual,
                });
            }
        }
        Ok(())
    }

    fn commit_file(&mut self, id: BlobId, row: BlobRow, spill: Spill) -> Result<BlobInfo, StoreError> {
        if self.inner.remote.is_some() {
            return self.commit_object(id, row, spill);
        }
        let _gc = self.inner.gc_lock.read().unwrap_or_else(|p| p.into_inner());
        if let Some(existing) = self.inner.blob_row(&id)?
            && self.inner.file_is_whole(&id, existing.length)
        {
            if let Some(syncer) = spill.syncer {
                let _ = syncer.finish();
            }
            drop(spill.file.into_parts());
            let _ = fs::remove_file(&spill.path);
            return self.inner.merge_digests(id, &row);
        }
        let tmp = spill.path.clone();
        let result = self.inner.install_file(&id, spill);
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        // A sync that failed cannot be trusted to succeed later (see `pack`).
        result.map_err(|e| self.inner.db.fail_io(e))?;
        self.inner.publish_row(id, &row)
    }
}

impl Store {
    /// For a store whose bitstreams live in a bucket: when the declared sha-256 in `expected`
    /// names content this store or the bucket already holds (put there, verified, by this or
    /// another instance sharing it), records it as held without fetching it and returns it, as
    /// a put of it would have. `None` — fetch it — when nothing is declared, the store has no
    /// bucket, the content is absent, or its length differs from the declared one.
    ///
    /// Content in the bucket is stored under the sha-256 of its verified bytes, so the declared
    /// sha-256 identifies it; other declared digests (md5, sha-1) cannot be checked without the
    /// bytes and stay in the record as declared, not in the blob row.
    ///
    /// # Errors
    /// [`StoreError::ObjectStore`] when the bucket cannot be asked; [`StoreError::Database`].
    pub fn adopt(&self, expected: &Expected) -> Result<Option<BlobInfo>, StoreError> {
        let inner = &self.inner;
        let Some(remote) = &inner.remote else { return Ok(None) };
        let Some(declared) = expected.hashes.get(&HashAlgorithm::Sha256) else { return Ok(None) };
        let Ok(id) = declared.parse::<BlobId>() else { return Ok(None) };
        let _gc = inner.gc_lock.read().unwrap_or_else(|p| p.into_inner());
        if let Some(row) = inner.blob_row(&id)? {
            let matches = expected.length.is_none_or(|l| l == row.length);
            return Ok(matches.then(|| row.info(id, true)));
        }
        // Declared small enough for the packs, it is never in the bucket: no request.
        if expected.length.is_some_and(|l| l <= INLINE_MAX as u64) {
            return Ok(None);
        }
        let Some(length) = remote.adopt(&id, expected.length)? else { return Ok(None) };
        inner.fresh.lock().unwrap_or_else(|p| p.into_inner()).insert(id, Instant::now());
        let row = BlobRow {
            length,
            md5: None,
            sha1: None,
            created: crate::model::W3cDateTime::now().unix_timestamp(),
            place: Place::Object,
            referrer: None,
        };
        if inner.insert_blob_row_if_absent(id, &row)? {
            Ok(Some(row.info(id, true)))
        } else {
            inner.blob_row(&id).map(|r| r.map(|r| r.info(id, true)))
        }
    }
}

impl BlobWriter {
    /// [`BlobWriter::commit_file`] for a store whose large bitstreams live in a bucket: the
    /// verified spool is uploaded under its content key (unless the key is there already),
    /// and only then does the blob get its row. The spool is removed either way.
    fn commit_object(&mut self, id: BlobId, mut row: BlobRow, spill: Spill) -> Result<BlobInfo, StoreError> {
        let Spill { path: tmp, file, syncer, .. } = spill;
        if let Some(syncer) = syncer {
            let _ = syncer.finish();
        }
        let flushed = file.into_inner().map_err(|e| StoreError::io(&tmp, e.into_error()));
        let result = flushed.and_then(|file| {
            drop(file);
            let _gc = self.inner.gc_lock.read().unwrap_or_else(|p| p.into_inner());
            if self.inner.blob_row(&id)?.is_some() {
                // Already in this store: in the bucket (marked by this instance), or a local
                // file from before the store had a bucket, which keeps serving.
                return self.inner.merge_digests(id, &row);
            }
            let remote = self.inner.remote_for(&id)?;
            match remote.store_file(&id, &tmp, self.written, self.expected.media_type.as_deref())? {
                super::remote::Stored::Present => tracing::debug!(sha256 = %id, "already in the bucket; not uploaded"),
                super::remote::Stored::Uploaded => tracing::debug!(sha256 = %id, bytes = self.written, "uploaded"),
            }
            row.place = Place::Object;
            self.inner.publish_row(id, &row)
        });
        let _ = fs::remove_file(&tmp);
        result
    }
}

impl Inner {
    /// Syncs the temporary file and renames it into place, durably.
    fn install_file(&self, id: &BlobId, spill: Spill) -> Result<(), StoreError> {
        let Spill { path: tmp, file, syncer, .. } = spill;
        let file = file.into_inner().map_err(|e| StoreError::io(&tmp, e.into_error()))?;
        if let Some(syncer) = syncer {
            syncer.finish().map_err(|e| StoreError::io(&tmp, e))?;
        }
        file.sync_all().map_err(|e| StoreError::io(&tmp, e))?;
        drop(file);
        let dest = self.blob_path(id);
        let dir = dest.parent().map(PathBuf::from).unwrap_or_else(|| self.root.join("blobs"));
        super::open::create_dir_durable(&dir)?;
        fs::rename(&tmp, &dest).map_err(|e| StoreError::io(&dest, e))?;
        sync_dir(&dir).map_err(|e| StoreError::io(&dir, e))
    }

    /// A cheap health check before deduplicating against a file blob.
    pub(super) fn file_is_whole(&self, id: &BlobId, length: u64) -> bool {
        fs::metadata(self.blob_path(id)).is_ok_and(|m| m.len() == length)
    }

    /// Deduplicated put: keep the stored row, adding any digest it lacked.
    pub(super) fn merge_digests(&self, id: BlobId, new: &BlobRow) -> Result<BlobInfo, StoreError> {
        let adds =
            |row: &BlobRow| (row.md5.is_none() && new.md5.is_some()) || (row.sha1.is_none() && new.sha1.is_some());
        let row = self.committed_blob_row(&id)?;
        if !adds(&row) {
            return Ok(row.info(id, true));
        }
        // Under the write lock, and read again: a batch that names a record in this row
        // rewrites it whole, and would drop a digest added meanwhile. Rare (content first
        // stored without a digest a later put computes), so the wait for a batch is too.
        let _writes = self.write_lock();
        let mut row = self.committed_blob_row(&id)?;
        if adds(&row) {
            row.md5 = row.md5.or(new.md5);
            row.sha1 = row.sha1.or(new.sha1);
            self.trees.blobs.insert(id.0, row.encode()?)?;
        }
        Ok(row.info(id, true))
    }

    fn committed_blob_row(&self, id: &BlobId) -> Result<BlobRow, StoreError> {
        match self.trees.blobs.get(id.0)? {
            Some(bytes) => BlobRow::decode(&bytes),
            None => Err(StoreError::BlobNotFound(id.to_hex())),
        }
    }
}

impl Write for BlobWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        BlobWriter::write(self, buf).map_err(io::Error::other)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for BlobWriter {
    fn drop(&mut self) {
        self.discard();
    }
}

impl std::fmt::Debug for BlobWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobWriter").field("written", &self.written).finish_non_exhaustive()
    }
}

impl Inner {
    /// Makes a blob whose content is in place visible: its row is written only if none is
    /// (else the digests are merged into the row a concurrent put of the same content, or a
    /// repair of a damaged file, wrote first).
    fn publish_row(&self, id: BlobId, row: &BlobRow) -> Result<BlobInfo, StoreError> {
        if self.insert_blob_row_if_absent(id, row)? { Ok(row.info(id, false)) } else { self.merge_digests(id, row) }
    }

    /// Commits `row` for `id` unless a row is there already (committed or pending); returns
    /// whether it did. Under the write lock, so no batch rewrites the row meanwhile.
    fn insert_blob_row_if_absent(&self, id: BlobId, row: &BlobRow) -> Result<bool, StoreError> {
        let _writes = self.write_lock();
        if self.blob_row(&id)?.is_some() {
            return Ok(false);
        }
        self.filter.insert(&id);
        self.trees.blobs.insert(id.0, row.encode()?)?;
        Ok(true)
    }

    /// The error of a failed write to a store file: a full disk or a failing device makes the
    /// store read-only (see `table`); any other error (a permission) is only this write's.
    pub(super) fn write_failed(&self, path: &std::path::Path, e: io::Error) -> StoreError {
        let fatal = matches!(e.kind(), io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded)
            || e.raw_os_error() == Some(5);
        let err = StoreError::io(path, e);
        if fatal { self.db.fail_io(err) } else { err }
    }
}
