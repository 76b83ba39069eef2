//! The write-ahead log: the memtable's writes, on disk before sled is told about them.
//!
//! One file per generation, `wal-<generation>.log`; a new generation starts whenever the memtable is
//! frozen, and a generation's file is deleted once the runs hold its writes (the manifest's
//! `wal_start` says from which generation on replay must begin). A commit appends one frame —
//! `len u32 LE · crc32 u32 LE · entries` — and syncs it, and only then does sled commit the
//! batch that carries the new end of the log (see [`super::Lsm::commit`]). So sled's committed
//! position is the truth: after a crash, frames up to it are replayed, anything after it
//! belonged to a batch sled never committed and is cut off. A frame inside the committed range
//! that fails its checksum is corruption, reported, never skipped.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};

use super::encoding::{get_varint, put_varint, read_slot, slot_tag, take};
use super::memtable::Memtable;
use super::{Pos, Slot};
use crate::store::error::StoreError;
use crate::store::open::sync_dir;

/// The file being appended to.
pub(super) struct Wal {
    dir: PathBuf,
    pub(super) generation: u64,
    file: File,
    /// Where the next frame goes: the committed end, once a commit has finished.
    pub(super) len: u64,
    /// The frame being written, kept between commits: a batch's frame is a megabyte or so,
    /// and a fresh one each time cost an allocation from the OS and its page faults.
    frame: Vec<u8>,
}

pub(super) fn path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("wal-{generation:016}.log"))
}

/// The generations of the WAL files in `dir`, sorted.
pub(super) fn generations(dir: &Path) -> Result<Vec<u64>, StoreError> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| StoreError::io(dir, e))? {
        let name = entry.map_err(|e| StoreError::io(dir, e))?.file_name();
        let name = name.to_string_lossy();
        if let Some(generation) =
            name.strip_prefix("wal-").and_then(|n| n.strip_suffix(".log")).and_then(|n| n.parse().ok())
        {
            found.push(generation);
        }
    }
    found.sort_unstable();
    Ok(found)
}

impl Wal {
    /// Opens generation `generation` for appending at `len`, cutting off anything after it (the
    /// frames of a batch sled never committed).
    pub(super) fn open(dir: &Path, generation: u64, len: u64) -> Result<Wal, StoreError> {
        let path = path(dir, generation);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .append(true)
            .open(&path)
            .map_err(|e| StoreError::io(&path, e))?;
        let on_disk = file.metadata().map_err(|e| StoreError::io(&path, e))?.len();
        if on_disk < len {
            return Err(StoreError::corrupt(
                "write-ahead log",
                format!("{} is {on_disk} bytes, but the database committed {len}", path.display()),
            ));
        }
        if on_disk > len {
            file.set_len(len).map_err(|e| StoreError::io(&path, e))?;
            file.sync_all().map_err(|e| StoreError::io(&path, e))?;
        }
        sync_dir(dir).map_err(|e| StoreError::io(dir, e))?;
        Ok(Wal { dir: dir.to_path_buf(), generation, file, len, frame: Vec::new() })
    }

    /// Appends one frame holding `writes` and syncs it; returns the log's new end. On failure
    /// the file is cut back, so the next frame starts where this one would have.
    pub(super) fn append(&mut self, writes: &[(Vec<u8>, Slot)]) -> Result<Pos, StoreError> {
        encode_frame(writes, &mut self.frame)?;
        let frame = &self.frame;
        let written = self.file.write_all(frame).and_then(|()| self.file.sync_data());
        if let Err(e) = written {
            self.rollback();
            return Err(StoreError::io(path(&self.dir, self.generation), e));
        }
        self.len += frame.len() as u64;
        // A batch's frame is bounded by the committer's batch size; anything far past it (a
        // single write of an unusual size) is not kept.
        self.frame.shrink_to(FRAME_KEPT);
        Ok(Pos { generation: self.generation, offset: self.len })
    }

    /// Cuts the file back to the committed end after a failed write or a commit sled refused.
    pub(super) fn rollback_to(&mut self, len: u64) -> Result<(), StoreError> {
        self.len = len;
        self.rollback_result().map_err(|e| StoreError::io(path(&self.dir, self.generation), e))
    }

    fn rollback(&mut self) {
        if let Err(e) = self.rollback_result() {
            tracing::warn!(error = %e, "could not cut the write-ahead log back after a failed write");
        }
    }

    /// The file is opened to append, so after the cut the next frame lands at the new end.
    fn rollback_result(&mut self) -> io::Result<()> {
        self.file.set_len(self.len)?;
        self.file.sync_data()
    }

    /// Starts generation `generation + 1`.
    pub(super) fn rotate(&mut self) -> Result<(), StoreError> {
        let mut next = Wal::open(&self.dir, self.generation + 1, 0)?;
        next.frame = std::mem::take(&mut self.frame);
        *self = next;
        Ok(())
    }
}

/// The most the frame buffer keeps between commits: a batch of 1,200 records is about 1 MiB.
const FRAME_KEPT: usize = 8 << 20;

fn encode_frame(writes: &[(Vec<u8>, Slot)], frame: &mut Vec<u8>) -> Result<(), StoreError> {
    frame.clear();
    frame.reserve(8 + writes.iter().map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len) + 8).sum::<usize>());
    // The header (length, checksum) goes in front once the body is there.
    frame.extend_from_slice(&[0; 8]);
    for (key, slot) in writes {
        put_varint(frame, key.len() as u64);
        frame.extend_from_slice(key);
        put_varint(frame, slot_tag(slot));
        if let Some(v) = slot {
            frame.extend_from_slice(v);
        }
    }
    let body = &frame[8..];
    let len = u32::try_from(body.len()).map_err(|_| StoreError::corrupt("write-ahead log", "a batch over 4 GiB"))?;
    let crc = crc32fast::hash(body);
    frame[..4].copy_from_slice(&len.to_le_bytes());
    frame[4..8].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// Replays generation `generation` up to `len` bytes into `mem`.
pub(super) fn replay(dir: &Path, generation: u64, len: u64, mem: &mut Memtable) -> Result<(), StoreError> {
    let path = path(dir, generation);
    let mut bytes = Vec::new();
    match File::open(&path) {
        Ok(f) => f.take(len).read_to_end(&mut bytes).map_err(|e| StoreError::io(&path, e))?,
        Err(e) if e.kind() == io::ErrorKind::NotFound && len == 0 => return Ok(()),
        Err(e) => return Err(StoreError::io(&path, e)),
    };
    let corrupt = |at: usize, why: &str| {
        StoreError::corrupt("write-ahead log", format!("{} at byte {at}: {why}", path.display()))
    };
    if (bytes.len() as u64) < len {
        return Err(corrupt(bytes.len(), "shorter than the database's committed end"));
    }
    let mut at = 0;
    while at < bytes.len() {
        let Some(head) = bytes.get(at..at + 8) else { return Err(corrupt(at, "truncated frame header")) };
        let body_len = u32::from_le_bytes(head[..4].try_into().expect("four bytes")) as usize;
        let crc = u32::from_le_bytes(head[4..].try_into().expect("four bytes"));
        let Some(body) = bytes.get(at + 8..at + 8 + body_len) else { return Err(corrupt(at, "truncated frame")) };
        if crc32fast::hash(body) != crc {
            return Err(corrupt(at, "checksum mismatch"));
        }
        decode_body(body, mem).ok_or_else(|| corrupt(at, "malformed entry"))?;
        at += 8 + body_len;
    }
    Ok(())
}

fn decode_body(body: &[u8], mem: &mut Memtable) -> Option<()> {
    let mut pos = 0;
    while pos < body.len() {
        let key_len = get_varint(body, &mut pos)?;
        let key = take(body, &mut pos, key_len)?.to_vec();
        let tag = get_varint(body, &mut pos)?;
        let slot = read_slot(body, &mut pos, tag)?;
        mem.apply(key, slot);
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_replay_up_to_the_committed_end_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = Wal::open(dir.path(), 3, 0).unwrap();
        let first = wal.append(&[(b"a".to_vec(), Some(b"1".to_vec())), (b"b".to_vec(), None)]).unwrap();
        let second = wal.append(&[(b"a".to_vec(), Some(b"2".to_vec()))]).unwrap();
        assert_eq!((first.generation, second.generation), (3, 3));
        drop(wal);

        let mut mem = Memtable::default();
        replay(dir.path(), 3, first.offset, &mut mem).unwrap();
        assert_eq!(mem.get(b"a"), Some(&Some(b"1".to_vec())));
        assert_eq!(mem.get(b"b"), Some(&None));
        let mut mem = Memtable::default();
        replay(dir.path(), 3, second.offset, &mut mem).unwrap();
        assert_eq!(mem.get(b"a"), Some(&Some(b"2".to_vec())));

        // Opening at the first frame's end cuts the second off; appending continues there.
        let mut wal = Wal::open(dir.path(), 3, first.offset).unwrap();
        let third = wal.append(&[(b"c".to_vec(), Some(b"3".to_vec()))]).unwrap();
        let mut mem = Memtable::default();
        replay(dir.path(), 3, third.offset, &mut mem).unwrap();
        assert_eq!(mem.get(b"a"), Some(&Some(b"1".to_vec())));
        assert_eq!(mem.get(b"c"), Some(&Some(b"3".to_vec())));
    }

    #[test]
    fn a_damaged_frame_inside_the_committed_range_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = Wal::open(dir.path(), 1, 0).unwrap();
        let end = wal.append(&[(b"key".to_vec(), Some(b"value".to_vec()))]).unwrap();
        drop(wal);
        let p = path(dir.path(), 1);
        let mut bytes = fs::read(&p).unwrap();
        *bytes.last_mut().unwrap() ^= 1;
        fs::write(&p, bytes).unwrap();
        let err = replay(dir.path(), 1, end.offset, &mut Memtable::default()).unwrap_err();
        assert!(err.to_string().contains("checksum"), "{err}");
        assert!(Wal::open(dir.path(), 1, end.offset + 1).is_err(), "a committed end past the file is corruption");
    }
}
