//! Packs: small bitstreams (≤ [`INLINE_MAX`](super::INLINE_MAX)) appended to a few large files
//! instead of stored as database values or files of their own.
//!
//! Why: a file per bitstream costs an inode, a rename and two fsyncs; as database values, the
//! content would be written again by every compaction of the metadata (docs/STORE.md, "What is
//! stored where"). A pack is an append-only file `packs/<n>.pack`; a blob row says which pack
//! and where. Reads are one `pread`.
//!
//! Crash and power-loss safety rest on one rule: **a row pointing into a pack is committed
//! only after the pack bytes it points at are synced.** A put appends the bytes and keeps the
//! row *pending* in memory (readers of this process see it there). A batch of records syncs the
//! pack once and commits, with its records, the pending rows of the blobs they refer to; a
//! flush ([`Inner::commit_pending`]) commits every pending row. So no record can refer to a
//! blob whose row is not committed, and no committed row can point at bytes a power cut could
//! lose. A sync that fails is never tried again and trusted: the kernel may have dropped the
//! pages it could not write, so the store turns read-only. A crash loses only pending rows,
//! which no record refers to; their bytes become unreferenced space that `gc` reclaims when it
//! rewrites a mostly-dead pack. Closing a full pack syncs it; its rows stay pending.
//!
//! Why a batch takes only its own rows (and those pending longer than [`PENDING_AT_MOST`]):
//! a dump's readers store bitstreams a few thousand entries ahead of the records the committer
//! applies, and a batch that took every pending row wrote each of those blobs' rows twice,
//! without its referrer and again one batch later with it: a table read and a second row per
//! record.
//!
//! Appends are buffered: a put copies its bytes into the active pack's buffer, which is
//! written to the file once it holds [`WRITE_AT`] bytes and before every commit. Each small
//! `pwrite` cost ext4 a block reservation and a page lookup per page it touched, most of them
//! partial; one write per 256 KiB took 6% off a baseline harvest's CPU. Nothing else changes
//! for a reader or a crash: buffered blobs are pending, [`Packs::read`] serves them from the
//! buffer, and a crash loses them exactly as it loses any pending row.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::Inner;
use super::blob::{BlobId, BlobInfo, BlobRow, Place};
use super::error::StoreError;
use super::open::sync_dir;
use super::table::{FastMap, FastSet, Overlay};

/// Where a packed blob's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct PackLoc {
    pub(super) pack: u32,
    pub(super) offset: u64,
}

/// The pack files of one store.
pub(super) struct Packs {
    dir: PathBuf,
    /// A pack is closed and the next one started once it holds this many bytes; `gc` rewrites
    /// whole packs, so this bounds the work (and the temporary extra space) of reclaiming one.
    roll_at: u64,
    active: Mutex<Active>,
    /// Held from taking the pending rows ([`Inner::take_pending`]) until they are committed, so a
    /// commit never writes rows whose sync another commit has only started.
    commit: Mutex<()>,
    /// Read handles by pack number, opened on first use.
    readers: Mutex<HashMap<u32, Arc<File>>>,
}

/// Appended bytes are written to the pack file once this many are buffered (and at every
/// commit).
const WRITE_AT: usize = 256 * 1024;

/// The pack being appended to, and the rows whose bytes it holds that are not committed yet.
struct Active {
    id: u32,
    file: Arc<File>,
    /// The pack's length, counting the buffered bytes.
    len: u64,
    /// Bytes appended but not yet written to the file; they start at `written`.
    buf: Vec<u8>,
    written: u64,
    /// Bytes written since the last sync.
    dirty: bool,
    pending: FastMap<BlobId, Pending>,
}

/// A blob row waiting to be committed, and since when.
struct Pending {
    row: BlobRow,
    since: Instant,
}

/// Longest a row waits for a batch that refers to its blob; the next commit after that takes
/// it anyway. Bounds the rows held in memory (and lost by a crash) for content no record
/// refers to yet: at most this long's puts.
pub(super) const PENDING_AT_MOST: Duration = Duration::from_secs(2);

/// Which pending rows a commit takes.
#[derive(Clone, Copy)]
pub(super) enum Take<'a> {
    /// Every one: a flush, `gc`, an export.
    All,
    /// Those of the blobs a batch's records refer to, and those older than
    /// [`PENDING_AT_MOST`].
    For(&'a FastSet<BlobId>),
}

impl Take<'_> {
    fn wants(&self, id: &BlobId, pending: &Pending, now: Instant) -> bool {
        match self {
            Take::All => true,
            Take::For(ids) => ids.contains(id) || now.duration_since(pending.since) >= PENDING_AT_MOST,
        }
    }
}

impl Active {
    fn new(id: u32, file: File, len: u64) -> Active {
        Active {
            id,
            file: Arc::new(file),
            len,
            buf: Vec::new(),
            written: len,
            dirty: false,
            pending: FastMap::default(),
        }
    }

    /// Writes the buffered bytes to the file. On failure they stay buffered, with their rows
    /// pending, and the next write tries again from the same offset.
    fn write_buffered(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        self.file.write_all_at(&self.buf, self.written)?;
        self.written += self.buf.len() as u64;
        self.buf.clear();
        self.dirty = true;
        Ok(())
    }

    /// The bytes at `loc` if they are still buffered here.
    fn buffered(&self, loc: PackLoc, len: u64) -> Option<Vec<u8>> {
        if loc.pack != self.id || loc.offset < self.written {
            return None;
        }
        let start = usize::try_from(loc.offset - self.written).ok()?;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        self.buf.get(start..end).map(<[u8]>::to_vec)
    }
}

impl Packs {
    /// Opens `dir` (creating it), appending to the highest-numbered pack. Bytes a crash left at
    /// its end without a row are unreferenced space, reclaimed by `gc`.
    pub(super) fn open(dir: &Path, roll_at: u64) -> Result<Packs, StoreError> {
        super::open::create_dir_durable(dir)?;
        let existing = list(dir)?.into_iter().map(|(id, _)| id).max();
        let id = existing.unwrap_or(1);
        let (file, len) = open_for_append(dir, id)?;
        if existing.is_none() {
            sync_dir(dir).map_err(|e| StoreError::io(dir, e))?;
        }
        let active = Active::new(id, file, len);
        Ok(Packs {
            dir: dir.to_path_buf(),
            roll_at: roll_at.max(1),
            active: Mutex::new(active),
            commit: Mutex::new(()),
            readers: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Active> {
        self.active.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// [`Active::write_buffered`], with the pack's path in the error.
    fn write_buffered(&self, active: &mut Active) -> Result<(), StoreError> {
        active.write_buffered().map_err(|e| StoreError::io(self.path(active.id), e))
    }

    /// The row of a blob put but not yet committed.
    pub(super) fn pending(&self, id: &BlobId) -> Option<BlobRow> {
        self.lock().pending.get(id).map(|p| p.row.clone())
    }

    /// Reads a packed blob's `len` bytes.
    pub(super) fn read(&self, loc: PackLoc, len: u64) -> io::Result<Vec<u8>> {
        // Bytes leave the buffer only for the file, so once not found here they are there.
        if let Some(bytes) = self.lock().buffered(loc, len) {
            return Ok(bytes);
        }
        let file = self.reader(loc.pack)?;
        let mut buf = vec![0; usize::try_from(len).map_err(io::Error::other)?];
        file.read_exact_at(&mut buf, loc.offset).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                io::Error::new(e.kind(), format!("pack {} is shorter than its rows say", loc.pack))
            } else {
                e
            }
        })?;
        Ok(buf)
    }

    fn reader(&self, pack: u32) -> io::Result<Arc<File>> {
        let mut readers = self.readers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = readers.get(&pack) {
            return Ok(Arc::clone(f));
        }
        let file = Arc::new(File::open(pack_path(&self.dir, pack))?);
        readers.insert(pack, Arc::clone(&file));
        Ok(file)
    }

    /// Every pack file with its size.
    pub(super) fn sizes(&self) -> Result<Vec<(u32, u64)>, StoreError> {
        list(&self.dir)
    }

    pub(super) fn active_id(&self) -> u32 {
        self.lock().id
    }

    /// Deletes a pack no row refers to any more.
    pub(super) fn remove(&self, pack: u32) -> Result<(), StoreError> {
        self.readers.lock().unwrap_or_else(|p| p.into_inner()).remove(&pack);
        let path = pack_path(&self.dir, pack);
        match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(StoreError::io(&path, e)),
            _ => sync_dir(&self.dir).map_err(|e| StoreError::io(&self.dir, e)),
        }
    }

    pub(super) fn path(&self, pack: u32) -> PathBuf {
        pack_path(&self.dir, pack)
    }
}

impl Inner {
    /// Stores a verified small blob: appends it to the active pack and keeps its row pending.
    /// Identical content already stored (or pending) is not written again.
    pub(super) fn put_packed(&self, id: BlobId, mut row: BlobRow, data: &[u8]) -> Result<BlobInfo, StoreError> {
        let _gc = self.gc_lock.read().unwrap_or_else(|p| p.into_inner());
        if let Some(info) = merge_pending(&mut self.packs.lock(), id, &row) {
            return Ok(info);
        }
        // Outside the pack lock: a database read is slow next to an append, and every put waits
        // on that lock. Should the same content be put and committed in between, it is appended
        // twice; the row points at the later copy and `gc` reclaims the other. New content is
        // answered by the blob filter, without asking the table.
        if self.filter.may_hold(&id, &self.trees.blobs) && self.trees.blobs.contains_key(id.0)? {
            return self.merge_digests(id, &row);
        }
        let mut active = self.packs.lock();
        if let Some(info) = merge_pending(&mut active, id, &row) {
            return Ok(info);
        }
        self.append(&mut active, id, &mut row, data)?;
        Ok(row.info(id, false))
    }

    /// Appends `data` to the active pack (rolling to a new one when it is full) and makes `row`
    /// pending, pointing at it.
    fn append(&self, active: &mut Active, id: BlobId, row: &mut BlobRow, data: &[u8]) -> Result<(), StoreError> {
        if active.len >= self.packs.roll_at {
            self.roll(active)?;
        }
        if active.buf.len() + data.len() > WRITE_AT {
            // A failure (a full disk) fails this put, before anything of it is buffered, and
            // the store turns read-only (see `table`).
            self.packs.write_buffered(active).map_err(|e| self.db.fail_io(e))?;
        }
        active.buf.extend_from_slice(data);
        self.filter.insert(&id);
        row.place = Place::Pack(PackLoc { pack: active.id, offset: active.len });
        active.len += data.len() as u64;
        active.pending.insert(id, Pending { row: row.clone(), since: Instant::now() });
        Ok(())
    }

    /// Closes the active pack, its bytes synced, and starts the next. Its pending rows stay
    /// pending, for a later commit: writing them here, outside the commit lock, could
    /// overwrite the rows a batch being applied has just given a referrer.
    fn roll(&self, active: &mut Active) -> Result<(), StoreError> {
        self.packs.write_buffered(active)?;
        // Whatever `dirty` says: a concurrent `take_pending` may have cleared it and not yet
        // finished its sync, and the commits that follow sync only the active pack.
        active.file.sync_data().map_err(|e| self.db.fail_io(StoreError::io(self.packs.path(active.id), e)))?;
        let next = active.id + 1;
        let (file, len) = open_for_append(&self.packs.dir, next)?;
        sync_dir(&self.packs.dir).map_err(|e| StoreError::io(&self.packs.dir, e))?;
        let pending = std::mem::take(&mut active.pending);
        *active = Active::new(next, file, len);
        active.pending = pending;
        Ok(())
    }

    /// Syncs the active pack and commits every pending row. Cheap when nothing is pending.
    /// Nothing to do on a read-only store: its pending rows are never committed (readers of
    /// this process still find them), and a reader calling this first carries on.
    pub(super) fn commit_pending(&self) -> Result<(), StoreError> {
        if self.db.broken().is_some() {
            return Ok(());
        }
        let taken = self.take_pending(Take::All)?;
        if taken.len() > 0 {
            // Under the write lock: a batch may be rewriting one of these rows' referrers.
            let _writes = self.write_lock();
            write_rows(self, taken.iter())?;
            self.committed(taken, std::iter::empty());
        }
        Ok(())
    }

    /// Writes the buffered bytes, syncs the active pack and takes a copy of the pending rows
    /// `take` names, for the caller to commit — in its own batch, so a batch of records and
    /// the rows of the blobs they refer to land together. Until [`Inner::committed`], other
    /// commits wait.
    ///
    /// The pack lock is held only to write the buffer (at most [`WRITE_AT`] bytes into the page
    /// cache) and take the copy, not while syncing (milliseconds), because puts run on the
    /// harvester's async workers and would all stop behind it. Rows stay pending, where
    /// readers find them, until they are committed; a put appending meanwhile is left for a
    /// later commit. When `take` names no row, nothing is written or synced.
    pub(super) fn take_pending(&self, take: Take<'_>) -> Result<TakenRows<'_>, StoreError> {
        let taken = self.take_pending_unsynced(take)?;
        self.sync_taken(&taken)?;
        Ok(taken)
    }

    /// [`Inner::take_pending`] without the sync: the caller must call [`Inner::sync_taken`]
    /// before committing the rows. [`Store::apply`](super::Store::apply) syncs the pack on
    /// another thread while it reads and encodes its batch, since the sync is milliseconds of
    /// waiting on the disk that nothing in the batch's work depends on.
    pub(super) fn take_pending_unsynced(&self, take: Take<'_>) -> Result<TakenRows<'_>, StoreError> {
        self.db.check_writable()?;
        let one_at_a_time = self.packs.commit.lock().unwrap_or_else(|p| p.into_inner());
        let mut active = self.packs.lock();
        let now = Instant::now();
        let rows: Vec<(BlobId, BlobRow)> = active
            .pending
            .iter()
            .filter(|(id, p)| take.wants(id, p, now))
            .map(|(id, p)| (*id, p.row.clone()))
            .collect();
        if rows.is_empty() {
            return Ok(TakenRows { _one_at_a_time: one_at_a_time, rows, unsynced: None });
        }
        // Every buffered byte, not only the rows': the sync covers the pack up to here anyway.
        self.packs.write_buffered(&mut active).map_err(|e| self.db.fail_io(e))?;
        let dirty = std::mem::replace(&mut active.dirty, false);
        let unsynced = dirty.then(|| (Arc::clone(&active.file), active.id));
        Ok(TakenRows { _one_at_a_time: one_at_a_time, rows, unsynced })
    }

    /// Syncs the pack bytes of `taken`'s rows, if they need it. The pack lock is not held: see
    /// [`Inner::take_pending`].
    pub(super) fn sync_taken(&self, taken: &TakenRows<'_>) -> Result<(), StoreError> {
        if let Some((file, pack)) = &taken.unsynced {
            // Covers every byte appended before the rows were copied, so every row taken. A
            // failure is final: see the module docs.
            file.sync_data().map_err(|e| self.db.fail_io(StoreError::io(self.packs.path(*pack), e)))?;
        }
        Ok(())
    }

    /// The batch holding `taken` is committed: its rows stop being pending. Not calling this (the
    /// batch failed) leaves them pending for the next commit, which writes them again.
    /// `rewritten` are the blob rows the batch wrote (see [`BlobRow::referrer`]): a row still
    /// pending takes its referrer, so writing it later keeps it.
    pub(super) fn committed<'a>(
        &self,
        taken: TakenRows<'_>,
        rewritten: impl Iterator<Item = (&'a BlobId, &'a BlobRow)>,
    ) {
        let mut active = self.packs.lock();
        for (id, row) in taken.rows {
            // A put of the same content may have merged a digest into the pending row since:
            // then it stays pending and is written again next time.
            if active.pending.get(&id).is_some_and(|p| p.row == row) {
                active.pending.remove(&id);
            }
        }
        for (id, row) in rewritten {
            if let Some(pending) = active.pending.get_mut(id) {
                pending.row.referrer.clone_from(&row.referrer);
            }
        }
    }

    /// Reads a packed blob, following it once if `gc` moved it between reading its row and
    /// opening its pack.
    pub(super) fn read_packed(&self, id: &BlobId, loc: PackLoc, len: u64) -> Result<Vec<u8>, StoreError> {
        match self.packs.read(loc, len) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => match self.blob_row(id)?.map(|r| r.place) {
                Some(Place::Pack(moved)) if moved != loc => {
                    self.packs.read(moved, len).map_err(|e| StoreError::io(self.packs.path(moved.pack), e))
                }
                _ => Err(StoreError::io(self.packs.path(loc.pack), e)),
            },
            r => r.map_err(|e| StoreError::io(self.packs.path(loc.pack), e)),
        }
    }

    /// Copies a blob still in an old pack into the active one; its row moves when pending rows
    /// are next committed. The caller holds the gc lock for writing, so no put or batch runs.
    pub(super) fn relocate(&self, id: BlobId, mut row: BlobRow) -> Result<(), StoreError> {
        let Place::Pack(loc) = row.place else { return Ok(()) };
        let data = self.read_packed(&id, loc, row.length)?;
        let mut active = self.packs.lock();
        self.append(&mut active, id, &mut row, &data)
    }
}

/// When `id` is pending already, merges `row`'s digests into it and answers for it.
fn merge_pending(active: &mut Active, id: BlobId, row: &BlobRow) -> Option<BlobInfo> {
    let pending = &mut active.pending.get_mut(&id)?.row;
    pending.md5 = pending.md5.or(row.md5);
    pending.sha1 = pending.sha1.or(row.sha1);
    Some(pending.info(id, true))
}

/// Pending rows of small blobs whose bytes are synced, taken by [`Inner::take_pending`] to be
/// written in the caller's batch.
pub(super) struct TakenRows<'a> {
    _one_at_a_time: MutexGuard<'a, ()>,
    rows: Vec<(BlobId, BlobRow)>,
    /// The pack whose bytes must be synced before the rows are committed, when
    /// [`Inner::take_pending_unsynced`] took them and no sync has covered them yet.
    unsynced: Option<(Arc<File>, u32)>,
}

impl TakenRows<'_> {
    /// Whether the rows' bytes still need [`Inner::sync_taken`].
    pub(super) fn needs_sync(&self) -> bool {
        self.unsynced.is_some()
    }

    pub(super) fn len(&self) -> usize {
        self.rows.len()
    }

    pub(super) fn iter(&self) -> impl ExactSizeIterator<Item = (&BlobId, &BlobRow)> {
        self.rows.iter().map(|(id, row)| (id, row))
    }
}

/// Commits blob rows in one batch.
fn write_rows<'a>(
    inner: &Inner,
    rows: impl ExactSizeIterator<Item = (&'a BlobId, &'a BlobRow)>,
) -> Result<(), StoreError> {
    let mut w = Overlay::with_capacity(rows.len());
    for (id, row) in rows {
        w.insert(&inner.trees.blobs, &id.0, row.encode()?);
    }
    inner.db.commit(w)
}

fn pack_path(dir: &Path, pack: u32) -> PathBuf {
    dir.join(format!("{pack:08}.pack"))
}

fn open_for_append(dir: &Path, id: u32) -> Result<(File, u64), StoreError> {
    let path = pack_path(dir, id);
    let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path);
    let file = file.map_err(|e| StoreError::io(&path, e))?;
    let len = file.metadata().map_err(|e| StoreError::io(&path, e))?.len();
    Ok((file, len))
}

/// `(number, size)` of every `<n>.pack` in `dir`; other names are ignored.
fn list(dir: &Path) -> Result<Vec<(u32, u64)>, StoreError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| StoreError::io(dir, e))? {
        let entry = entry.map_err(|e| StoreError::io(dir, e))?;
        let name = entry.file_name();
        let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".pack")).and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let len = entry.metadata().map_err(|e| StoreError::io(entry.path(), e))?.len();
        out.push((id, len));
    }
    out.sort_unstable();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Expected, Store, StoreOptions};

    /// A batch gives a taken row a referrer while a put of the same content merges its md5
    /// into the row still pending: the row written later must keep both, or gc would see the
    /// content as unreferenced.
    #[test]
    fn a_row_still_pending_after_its_batch_keeps_the_referrer_the_batch_gave_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_with(&dir.path().join("store"), &StoreOptions::small()).unwrap();
        let inner = &store.inner;
        let id = store.put(&b"content"[..], &Expected::none()).unwrap().id;
        let taken = inner.take_pending(Take::All).unwrap();
        let merged = store.put(&b"content"[..], &Expected { md5: true, ..Expected::none() }).unwrap();
        assert!(merged.deduplicated && merged.md5.is_some());

        let mut row = taken.rows[0].1.clone();
        row.referrer = Some("http://t/a".into());
        let mut w = Overlay::with_capacity(2);
        w.insert(&inner.trees.blobs, &id.0, row.encode().unwrap());
        inner.db.commit(w).unwrap();
        inner.committed(taken, [(&id, &row)].into_iter());
        assert!(inner.packs.pending(&id).is_some(), "the merged row is still to be written");

        inner.commit_pending().unwrap();
        assert!(inner.packs.pending(&id).is_none());
        let stored = inner.blob_row(&id).unwrap().unwrap();
        assert_eq!((stored.referrer.as_deref(), stored.md5.is_some()), (Some("http://t/a"), true));
    }

    /// A batch commits the rows of the blobs its records refer to, each once and with its
    /// referrer, and leaves another put's row pending (for a flush, or a batch of its own).
    #[test]
    fn a_batch_takes_the_pending_rows_of_its_own_blobs() {
        use crate::store::Batch;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_with(&dir.path().join("store"), &StoreOptions::small()).unwrap();
        let inner = &store.inner;
        let a = store.put(&b"a"[..], &Expected::none()).unwrap().id;
        let b = store.put(&b"b"[..], &Expected::none()).unwrap().id;
        store.apply(Batch::new().upsert(&["s"], crate::store::test_util::record("http://t/a", a))).unwrap();
        assert!(inner.packs.pending(&a).is_none());
        let committed = BlobRow::decode(&inner.trees.blobs.get(a.0).unwrap().unwrap()).unwrap();
        assert_eq!(committed.referrer.as_deref(), Some("http://t/a"));
        assert!(inner.packs.pending(&b).is_some(), "no record refers to b yet");
        assert!(!inner.trees.blobs.contains_key(b.0).unwrap());
        assert!(store.blob(&b).unwrap().is_some(), "a pending blob is still found");

        inner.commit_pending().unwrap();
        assert!(inner.packs.pending(&b).is_none());
        assert!(inner.trees.blobs.contains_key(b.0).unwrap());
    }

    /// A row no batch refers to waits at most `PENDING_AT_MOST`.
    #[test]
    fn a_batch_also_takes_rows_pending_too_long() {
        let row = BlobRow { length: 1, md5: None, sha1: None, created: 0, place: Place::File, referrer: None };
        let (id, other) = (BlobId([1; 32]), BlobId([2; 32]));
        let now = Instant::now();
        let young = Pending { row: row.clone(), since: now };
        let old = Pending { row, since: now - PENDING_AT_MOST };
        let ids: FastSet<BlobId> = [id].into_iter().collect();
        let take = Take::For(&ids);
        assert!(take.wants(&id, &young, now));
        assert!(!take.wants(&other, &young, now));
        assert!(take.wants(&other, &old, now));
        assert!(Take::All.wants(&other, &young, now));
    }
}
