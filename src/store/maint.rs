//! Maintenance: `stats` (counts without re-reading content) and `gc` (remove what nothing
//! refers to). `verify` lives in [`super::verify`].
//!
//! gc is safe to run while the harvester writes in the same process: a blob counts as
//! referenced while its row or the sha-256 index names a live record, the decision to remove it
//! is taken under the gc lock that puts and batches hold, blobs this process put recently are
//! spared, and rows are removed (durably) before their files, so a crash in between leaves a
//! stray file — never a row without its file.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::blob::{BlobId, BlobRow, Place};
use super::codec;
use super::error::StoreError;
use super::log::Counters;
use super::record::Record;
use super::report::{EngineStats, GcReport, SetStats, Stats};
use super::row;
use super::{Inner, Store};

/// How long a blob put by this process is protected from gc while no record refers to it.
const FRESH_GRACE: Duration = Duration::from_secs(3600);

impl Store {
    /// Counts blobs, records, events per set and bytes.
    ///
    /// # Errors
    /// [`StoreError::Database`] / [`StoreError::Corrupt`].
    pub fn stats(&self) -> Result<Stats, StoreError> {
        let t = &self.inner.trees;
        self.inner.commit_pending()?;
        let mut stats = Stats::default();
        for kv in t.blobs.iter() {
            let (_, v) = kv?;
            let row = BlobRow::decode(&v)?;
            stats.blobs += 1;
            stats.stored_bytes += row.length;
            stats.packed_blobs += u64::from(matches!(row.place, Place::Pack(_)));
        }
        stats.pack_bytes = self.inner.packs.sizes()?.iter().map(|(_, len)| len).sum();
        for kv in t.records.iter() {
            let (k, v) = kv?;
            let rec: Record = row::decode(&k, &v)?;
            if rec.is_deleted() {
                stats.records_deleted += 1;
            } else {
                stats.records_live += 1;
                stats.logical_bytes += rec.length;
            }
        }
        for kv in t.sets.iter() {
            let (k, v) = kv?;
            let c: Counters = codec::decode("set counters", &v)?;
            let id = String::from_utf8_lossy(&k).into_owned();
            stats.sets.push(SetStats { id, live: c.live, events: c.last_seq, last_change: c.last_change });
        }
        stats.sources = t.sources.iter().count() as u64;
        let db = self.inner.db.fjall();
        stats.database_bytes = db.disk_space()?;
        stats.engine = EngineStats {
            tables: t.keyspaces().map(|k| k.table_count() as u64).sum(),
            journals: db.journal_count() as u64,
            journal_bytes: db.journal_disk_space()?,
            write_buffer_bytes: db.write_buffer_size(),
            cache_bytes: db.cache_size(),
        };
        stats.read_only = self.read_only();
        Ok(stats)
    }

    /// The bytes the database's block cache holds now (at most its capacity): how much of a
    /// process's memory is that bounded cache, for benchmarks that measure memory.
    pub fn cache_bytes(&self) -> u64 {
        self.inner.db.fjall().cache_size()
    }

    /// Writes every memtable out and waits, at most `limit`, until no flush or compaction is
    /// running or waiting; true when none is. Nothing needs this for correctness: it is for
    /// measuring a settled store (its size on disk, journals released) in benchmarks.
    pub fn settle(&self, limit: Duration) -> bool {
        for keyspace in self.inner.trees.keyspaces() {
            if let Err(e) = keyspace.rotate_memtable_and_wait() {
                tracing::warn!(error = %e, "could not write a memtable out");
            }
        }
        let db = self.inner.db.fjall();
        let deadline = Instant::now() + limit;
        let mut quiet = 0;
        // Bounded by `limit`; "quiet" three times in a row, as a compaction may start just
        // after a flush ends.
        while Instant::now() < deadline {
            if db.outstanding_flushes() == 0 && db.active_compactions() == 0 {
                quiet += 1;
                if quiet == 3 {
                    return true;
                }
            } else {
                quiet = 0;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// Removes blobs no live record refers to, and files under `blobs/` that have no row.
    ///
    /// # Errors
    /// [`StoreError::Database`] / [`StoreError::Io`]; what was removed before the error stays
    /// removed, and the store stays consistent.
    pub fn gc(&self) -> Result<GcReport, StoreError> {
        let inner = &self.inner;
        inner.commit_pending()?;
        inner.prune_fresh();
        let mut report = GcReport::default();
        let mut files = Vec::new();
        let mut objects = Vec::new();
        for key in inner.trees.blobs.iter().keys() {
            let key = key?;
            let Ok(raw) = <[u8; 32]>::try_from(key.as_ref()) else { continue };
            let id = BlobId(raw);
            match inner.collect_blob(&id)? {
                Collected::Referenced => {}
                Collected::Fresh => report.kept_fresh += 1,
                Collected::Removed(row) => {
                    report.blobs_removed += 1;
                    report.bytes_freed += row.length;
                    match row.place {
                        Place::File => files.push(id),
                        Place::Object => objects.push(id),
                        Place::Pack(_) => {}
                    }
                }
            }
        }
        // Rows first (each removal is durable); then their files, unless a put has brought the
        // blob back.
        for id in files {
            let _gc = inner.gc_lock.write().unwrap_or_else(|p| p.into_inner());
            if !inner.trees.blobs.contains_key(id.0)? {
                remove_if_present(&inner.blob_path(&id))?;
            }
        }
        report.stray_files_removed = inner.remove_stray_files()?;
        report.packs_rewritten = inner.compact_packs()?;
        if let Some(remote) = &inner.remote {
            // Bitstreams in the bucket: this instance's marker goes, and the bitstream is
            // doomed if no other instance refers to it; any gc deletes doomed bitstreams
            // after the grace period (docs/BUCKET.md, "Collection in a shared bucket").
            for id in objects {
                let _gc = inner.gc_lock.write().unwrap_or_else(|p| p.into_inner());
                if !inner.trees.blobs.contains_key(id.0)? {
                    report.objects_doomed += u64::from(remote.release(&id)?);
                }
            }
            let sweep = remote.sweep()?;
            report.objects_deleted = sweep.deleted;
            report.object_bytes_freed = sweep.bytes;
            report.objects_rescued = sweep.rescued;
            report.objects_waiting = sweep.waiting;
        }
        Ok(report)
    }
}

enum Collected {
    Referenced,
    Fresh,
    Removed(BlobRow),
}

impl Inner {
    fn is_fresh(&self, id: &BlobId) -> bool {
        let fresh = self.fresh.lock().unwrap_or_else(|p| p.into_inner());
        fresh.get(id).is_some_and(|t| t.elapsed() < FRESH_GRACE)
    }

    fn prune_fresh(&self) {
        let mut fresh = self.fresh.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        fresh.retain(|_, t| now.duration_since(*t) < FRESH_GRACE);
    }

    /// Whether a live record refers to the blob: its row names one, or the index has one.
    fn is_referenced(&self, id: &BlobId) -> Result<bool, StoreError> {
        if self.blob_row(id)?.is_some_and(|row| row.referrer.is_some()) {
            return Ok(true);
        }
        Ok(self.trees.by_sha.scan_prefix(id.0).keys().next().transpose()?.is_some())
    }

    /// Removes the blob's row if nothing refers to it, deciding under the gc lock.
    fn collect_blob(&self, id: &BlobId) -> Result<Collected, StoreError> {
        if self.is_referenced(id)? {
            return Ok(Collected::Referenced);
        }
        let _gc = self.gc_lock.write().unwrap_or_else(|p| p.into_inner());
        if self.is_fresh(id) {
            return Ok(Collected::Fresh);
        }
        if self.is_referenced(id)? {
            return Ok(Collected::Referenced);
        }
        let _writes = self.write_lock();
        let Some(v) = self.trees.blobs.get(id.0)? else { return Ok(Collected::Referenced) };
        self.trees.blobs.remove(id.0)?;
        Ok(Collected::Removed(BlobRow::decode(&v)?))
    }

    /// Files under `blobs/` whose row does not exist (a gc or put interrupted by a crash).
    fn remove_stray_files(&self) -> Result<u64, StoreError> {
        let mut removed = 0;
        for (id, path) in self.blob_files()? {
            let _gc = self.gc_lock.write().unwrap_or_else(|p| p.into_inner());
            let stray = match id {
                Some(id) => !self.is_fresh(&id) && !self.trees.blobs.contains_key(id.0)?,
                None => false,
            };
            if stray {
                remove_if_present(&path)?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Rewrites every closed pack that is mostly unreferenced space (removed blobs, bytes a
    /// crash left without a row): its live blobs are copied into the active pack, their rows
    /// moved (synced and committed), and only then is the old pack deleted. Returns the number
    /// of packs rewritten.
    fn compact_packs(&self) -> Result<u64, StoreError> {
        let active = self.packs.active_id();
        let mut live: HashMap<u32, u64> = HashMap::new();
        for kv in self.trees.blobs.iter() {
            let (_, v) = kv?;
            let row = BlobRow::decode(&v)?;
            if let Place::Pack(loc) = row.place {
                *live.entry(loc.pack).or_default() += row.length;
            }
        }
        let doomed: Vec<u32> = self
            .packs
            .sizes()?
            .into_iter()
            .filter(|&(id, size)| id != active && live.get(&id).copied().unwrap_or(0) * 2 < size)
            .map(|(id, _)| id)
            .collect();
        for &pack in &doomed {
            self.rewrite_pack(pack)?;
        }
        Ok(doomed.len() as u64)
    }

    fn rewrite_pack(&self, pack: u32) -> Result<(), StoreError> {
        {
            let _gc = self.gc_lock.write().unwrap_or_else(|p| p.into_inner());
            // Rows still pending may point into this pack (a closed pack's rows wait for the
            // next commit): committed first, so the walk below moves them too.
            self.commit_pending()?;
            for kv in self.trees.blobs.iter() {
                let (k, v) = kv?;
                let row = BlobRow::decode(&v)?;
                let Ok(raw) = <[u8; 32]>::try_from(k.as_ref()) else { continue };
                if matches!(row.place, Place::Pack(loc) if loc.pack == pack) {
                    self.relocate(BlobId(raw), row)?;
                }
            }
            self.commit_pending()?;
        }
        self.packs.remove(pack)
    }

    /// Every file under `blobs/`, with the id its name encodes (`None` for foreign names).
    pub(super) fn blob_files(&self) -> Result<Vec<(Option<BlobId>, PathBuf)>, StoreError> {
        let mut out = Vec::new();
        for dir in read_dir(&self.root.join("blobs"))? {
            if !dir.is_dir() {
                continue;
            }
            for path in read_dir(&dir)? {
                let id = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.parse::<BlobId>().ok());
                out.push((id, path));
            }
        }
        Ok(out)
    }
}

fn read_dir(dir: &Path) -> Result<Vec<PathBuf>, StoreError> {
    let entries = fs::read_dir(dir).map_err(|e| StoreError::io(dir, e))?;
    entries.map(|e| e.map(|e| e.path()).map_err(|e| StoreError::io(dir, e))).collect()
}

fn remove_if_present(path: &Path) -> Result<(), StoreError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(StoreError::io(path, e)),
        _ => Ok(()),
    }
}
