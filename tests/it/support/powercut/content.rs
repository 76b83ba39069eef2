//! A file's bytes, in copy-on-write chunks. Every file of the power-cut file system keeps two
//! of these, what it holds now and what was last made durable, and `fsync` copies the first
//! over the second. Shared chunks make that copy cost a pointer per 64 KiB rather than the
//! file's size, so a write-ahead log synced after every frame stays cheap; a write copies only
//! the chunks it touches, once after each sync.

use std::sync::Arc;

/// Bytes per chunk.
const CHUNK: u64 = 64 * 1024;

/// A sparse byte string: chunks never written (`None`) and bytes past a chunk's end read as
/// zeros, as a hole in a file does.
#[derive(Debug, Clone, Default)]
pub(super) struct Content {
    len: u64,
    chunks: Vec<Option<Arc<Vec<u8>>>>,
}

impl Content {
    pub(super) fn len(&self) -> u64 {
        self.len
    }

    /// Up to `size` bytes from `offset`, fewer at the end of the file.
    pub(super) fn read(&self, offset: u64, size: usize) -> Vec<u8> {
        let end = self.len.min(offset.saturating_add(size as u64));
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        let mut pos = offset;
        while pos < end {
            let (index, within) = ((pos / CHUNK) as usize, (pos % CHUNK) as usize);
            let n = (CHUNK - pos % CHUNK).min(end - pos) as usize;
            let chunk = self.chunks.get(index).and_then(Option::as_deref).map_or(&[][..], Vec::as_slice);
            let have = chunk.len().saturating_sub(within).min(n);
            if have > 0 {
                out.extend_from_slice(&chunk[within..within + have]);
            }
            out.resize(out.len() + (n - have), 0);
            pos += n as u64;
        }
        out
    }

    /// Writes `data` at `offset`, growing the file when it ends past the end.
    pub(super) fn write(&mut self, offset: u64, data: &[u8]) {
        let mut pos = offset;
        let mut rest = data;
        while !rest.is_empty() {
            let (index, within) = ((pos / CHUNK) as usize, (pos % CHUNK) as usize);
            let n = ((CHUNK - pos % CHUNK) as usize).min(rest.len());
            let bytes = Arc::make_mut(self.chunk_mut(index));
            if bytes.len() < within + n {
                bytes.resize(within + n, 0);
            }
            bytes[within..within + n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
            pos += n as u64;
        }
        self.len = self.len.max(offset + data.len() as u64);
    }

    /// Zeros `len` bytes from `offset` without changing the file's length (a punched hole).
    pub(super) fn zero(&mut self, offset: u64, len: u64) {
        let end = self.len.min(offset.saturating_add(len));
        let mut pos = offset;
        while pos < end {
            let (index, within) = ((pos / CHUNK) as usize, (pos % CHUNK) as usize);
            let n = (CHUNK - pos % CHUNK).min(end - pos) as usize;
            if let Some(slot) = self.chunks.get_mut(index) {
                if n as u64 == CHUNK {
                    *slot = None;
                } else if let Some(chunk) = slot {
                    let bytes = Arc::make_mut(chunk);
                    let stop = bytes.len().min(within + n);
                    if stop > within {
                        bytes[within..stop].fill(0);
                    }
                }
            }
            pos += n as u64;
        }
    }

    /// Truncates or extends (with zeros) to `len` bytes.
    pub(super) fn set_len(&mut self, len: u64) {
        if len < self.len {
            self.chunks.truncate(len.div_ceil(CHUNK) as usize);
            let keep = (len % CHUNK) as usize;
            if keep > 0
                && let Some(Some(last)) = self.chunks.last_mut()
                && last.len() > keep
            {
                Arc::make_mut(last).truncate(keep);
            }
        }
        self.len = len;
    }

    fn chunk_mut(&mut self, index: usize) -> &mut Arc<Vec<u8>> {
        if self.chunks.len() <= index {
            self.chunks.resize(index + 1, None);
        }
        self.chunks[index].get_or_insert_with(Default::default)
    }
}
