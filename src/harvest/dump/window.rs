//! A read-ahead window over a downloaded package, for the ZIP reader.
//!
//! The ZIP reader seeks to each entry's local header and reads the header and then the data,
//! a few small reads each: through a plain `File` that was four or so system calls per 2 KiB
//! bitstream, a quarter of a second of system time for a 50,000-entry package. A package's
//! entries are read in about the order they are stored, so here a seek only moves a position
//! and a read is served from the last 256 KiB read with one `pread`, which the next entries
//! mostly fall into. Reads larger than the window go straight to the file.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt as _;
use std::sync::Arc;

/// Bytes read ahead at a time.
const WINDOW: usize = 256 * 1024;

/// A `Read + Seek` over a file of fixed length, through a window of [`WINDOW`] bytes. Clones
/// share the file and start with an empty window.
pub(super) struct WindowReader {
    file: Arc<File>,
    len: u64,
    pos: u64,
    /// The window: the file's bytes from `start`.
    buf: Vec<u8>,
    start: u64,
}

impl WindowReader {
    pub(super) fn new(file: File) -> io::Result<Self> {
        let len = file.metadata()?.len();
        Ok(WindowReader { file: Arc::new(file), len, pos: 0, buf: Vec::new(), start: 0 })
    }

    fn in_window(&self) -> bool {
        self.pos >= self.start && self.pos - self.start < self.buf.len() as u64
    }

    /// Fills the window from `pos`; the bytes read (0 at the end of the file).
    fn refill(&mut self) -> io::Result<usize> {
        let want = usize::try_from((self.len - self.pos).min(WINDOW as u64)).unwrap_or(WINDOW);
        self.buf.resize(want, 0);
        let mut filled = 0;
        // Bounded: every turn reads bytes, or ends at the end of the file.
        while filled < want {
            match self.file.read_at(&mut self.buf[filled..], self.pos + filled as u64) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.buf.clear();
                    return Err(e);
                }
            }
        }
        self.buf.truncate(filled);
        self.start = self.pos;
        Ok(filled)
    }
}

impl Clone for WindowReader {
    fn clone(&self) -> Self {
        WindowReader { file: self.file.clone(), len: self.len, pos: self.pos, buf: Vec::new(), start: 0 }
    }
}

impl Read for WindowReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() || self.pos >= self.len {
            return Ok(0);
        }
        if !self.in_window() {
            if out.len() >= WINDOW {
                let n = self.file.read_at(out, self.pos)?;
                self.pos += n as u64;
                return Ok(n);
            }
            if self.refill()? == 0 {
                return Ok(0);
            }
        }
        let at = usize::try_from(self.pos - self.start).expect("inside the window");
        let n = out.len().min(self.buf.len() - at);
        out[..n].copy_from_slice(&self.buf[at..at + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for WindowReader {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let target = match to {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        let target = target.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
        self.pos = target;
        Ok(target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    #[test]
    fn reads_and_seeks_like_the_file_itself() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..(3 * WINDOW + 123)).map(|i| (i * 7 % 251) as u8).collect();
        f.write_all(&data).unwrap();
        let mut r = WindowReader::new(f).unwrap();
        let mut all = Vec::new();
        r.read_to_end(&mut all).unwrap();
        assert_eq!(all, data);
        for (at, len) in [(0, 10), (WINDOW - 5, 20), (2 * WINDOW + 7, WINDOW + 9), (data.len() - 3, 10), (5, 0)] {
            r.seek(SeekFrom::Start(at as u64)).unwrap();
            let mut buf = vec![0; len];
            let mut got = 0;
            while got < len {
                let n = r.read(&mut buf[got..]).unwrap();
                if n == 0 {
                    break;
                }
                got += n;
            }
            let end = (at + len).min(data.len());
            assert_eq!(&buf[..got], &data[at..end], "at {at}, {len} bytes");
        }
        assert_eq!(r.seek(SeekFrom::End(-1)).unwrap(), data.len() as u64 - 1);
        assert!(r.seek(SeekFrom::Current(-(data.len() as i64))).is_err());
        let mut c = r.clone();
        c.seek(SeekFrom::Start(1)).unwrap();
        let mut b = [0; 2];
        c.read_exact(&mut b).unwrap();
        assert_eq!(b, [data[1], data[2]]);
    }
}
