//! Byte offsets to line:column, for a reader that never holds the whole document.
//!
//! [`Tracked`] wraps the `BufRead` the XML parser pulls from: it counts consumed bytes (which
//! is also where the per-document byte limit is enforced, before the parser ever sees the
//! excess) and remembers the offsets of recent newlines, so any recent offset — the start of an
//! entry, or the place a parse error occurred — maps to an exact line and column.

use std::fmt;
use std::io::{self, BufRead, Read};

/// A place in a document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Position {
    /// Byte offset from the start of the document.
    pub offset: u64,
    /// 1-based line.
    pub line: u64,
    /// 1-based column, in bytes.
    pub column: u64,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// How far back newline offsets are remembered. Positions are only ever asked for the element
/// being read, so this only has to exceed the largest single start tag.
const WINDOW_BYTES: u64 = 1 << 20;

/// How far past the consumed position newlines are scanned in one go.
const SCAN_AHEAD: usize = 256 * 1024;

/// Remembered newlines beyond which old ones are dropped (checked when new ones are recorded).
const PRUNE_AT: usize = 131_072;

/// A `BufRead` adapter that tracks newlines and caps the bytes read.
#[derive(Debug)]
pub(crate) struct Tracked<R> {
    inner: R,
    consumed: u64,
    limit: u64,
    exceeded: bool,
    /// Offsets of recent newlines, ascending (a `Vec` pruned in bulk: pushing to a
    /// `VecDeque` cost a tenth of the parse in profiles).
    newlines: Vec<u64>,
    dropped_lines: u64,
    /// Everything before this offset has been scanned for newlines.
    scanned_to: u64,
}

impl<R: BufRead> Tracked<R> {
    pub(crate) fn new(inner: R, limit: u64) -> Self {
        Tracked {
            inner,
            consumed: 0,
            limit,
            exceeded: false,
            newlines: Vec::with_capacity(4096),
            dropped_lines: 0,
            scanned_to: 0,
        }
    }

    /// True once more than `limit` bytes were requested.
    pub(crate) fn exceeded(&self) -> bool {
        // `consume` does not set the flag itself: it runs for every few bytes parsed.
        self.exceeded || self.consumed > self.limit
    }

    /// Line and column of a byte offset at or before the consumed position.
    pub(crate) fn position(&self, offset: u64) -> Position {
        // Offsets asked for are almost always recent: search the tail first.
        let len = self.newlines.len();
        let tail = len.saturating_sub(64);
        let before = if self.newlines.get(tail).is_some_and(|&nl| nl < offset) {
            tail + self.newlines[tail..].iter().take_while(|&&nl| nl < offset).count()
        } else {
            self.newlines.partition_point(|&nl| nl < offset)
        };
        let line = self.dropped_lines + before as u64 + 1;
        let line_start = match before {
            0 if self.dropped_lines == 0 => 0,
            // The newline that starts this line fell out of the window: column unknown.
            0 => return Position { offset, line, column: 0 },
            n => self.newlines[n - 1] + 1,
        };
        Position { offset, line, column: offset - line_start + 1 }
    }
}

impl<R: BufRead> Read for Tracked<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(out.len());
        out[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Tracked<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        // The parser calls this and `consume` a few times per event, so the common case is a
        // subtraction, a `min` and one comparison; scanning, pruning and the limit error live
        // on the cold paths.
        let allowed = self.limit.saturating_add(1).saturating_sub(self.consumed);
        if allowed == 0 {
            self.exceeded = true;
            return Err(io::Error::other("document exceeds the byte limit"));
        }
        let buf = self.inner.fill_buf()?;
        let n = if (buf.len() as u64) < allowed { buf.len() } else { allowed as usize };
        // Scan ahead in large blocks (the parser consumes a few bytes at a time, and memchr
        // per tiny slice cost a tenth of the parse), but at most SCAN_AHEAD past the consumed
        // position, so memory stays bounded even when the input is one slice of a whole file.
        if self.consumed + n.min(SCAN_AHEAD / 2) as u64 > self.scanned_to {
            let ahead = usize::try_from(self.scanned_to.saturating_sub(self.consumed)).unwrap_or(usize::MAX);
            let end = n.min(ahead + SCAN_AHEAD);
            record_newlines(&mut self.newlines, self.consumed, &buf[ahead..end], ahead);
            self.scanned_to = self.consumed + end as u64;
            if self.newlines.len() > PRUNE_AT {
                prune(&mut self.newlines, &mut self.dropped_lines, self.consumed);
            }
        }
        Ok(&buf[..n])
    }

    fn consume(&mut self, amt: usize) {
        let end = self.consumed + amt as u64;
        if end > self.scanned_to {
            self.consume_unscanned(amt);
        }
        self.inner.consume(amt);
        self.consumed = end;
    }
}

impl<R: BufRead> Tracked<R> {
    /// Consumed past the scanned block in one go (a huge text node): scan the gap first.
    #[cold]
    fn consume_unscanned(&mut self, amt: usize) {
        if let Ok(buf) = self.inner.fill_buf() {
            let ahead = usize::try_from(self.scanned_to.saturating_sub(self.consumed)).unwrap_or(0);
            let upto = amt.min(buf.len());
            if ahead < upto {
                record_newlines(&mut self.newlines, self.consumed, &buf[ahead..upto], ahead);
            }
        }
        self.scanned_to = self.consumed + amt as u64;
        if self.newlines.len() > PRUNE_AT {
            prune(&mut self.newlines, &mut self.dropped_lines, self.consumed);
        }
    }
}

/// Drops newlines older than the window (fields passed apart so the caller can hold the inner
/// buffer meanwhile).
fn prune(newlines: &mut Vec<u64>, dropped_lines: &mut u64, consumed: u64) {
    let horizon = consumed.saturating_sub(WINDOW_BYTES);
    // Keep at least the last newline so the current line's start stays known.
    let old = newlines.partition_point(|&nl| nl < horizon).min(newlines.len().saturating_sub(1));
    newlines.drain(..old);
    *dropped_lines += old as u64;
}

fn record_newlines(newlines: &mut Vec<u64>, base: u64, bytes: &[u8], skip: usize) {
    for i in memchr::memchr_iter(b'\n', bytes) {
        newlines.push(base + (skip + i) as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_offsets_to_lines_and_columns() {
        let text = b"ab\ncde\n\nf";
        let mut t = Tracked::new(&text[..], 100);
        let mut sink = Vec::new();
        t.read_to_end(&mut sink).unwrap();
        assert_eq!(t.position(0), Position { offset: 0, line: 1, column: 1 });
        assert_eq!(t.position(4).to_string(), "2:2");
        assert_eq!(t.position(7).to_string(), "3:1");
        assert_eq!(t.position(8).to_string(), "4:1");
    }

    #[test]
    fn lines_are_right_across_small_reads_and_huge_consumes() {
        let mut text = Vec::new();
        for i in 0..2000 {
            text.extend_from_slice(format!("line {i}\n").as_bytes());
        }
        text.extend(std::iter::repeat_n(b'x', 600_000));
        text.extend_from_slice(b"\nlast");
        // A slice gives one huge buffer consumed at once; a tiny BufReader many small fills.
        let mut t = Tracked::new(&text[..], u64::MAX);
        t.consume(text.len());
        let last = text.len() as u64 - 4;
        assert_eq!(t.position(last).to_string(), "2002:1");
        let mut t = Tracked::new(io::BufReader::with_capacity(7, &text[..]), u64::MAX);
        let mut sink = Vec::new();
        t.read_to_end(&mut sink).unwrap();
        assert_eq!(t.position(last).to_string(), "2002:1");
        assert_eq!(t.position(last - 2).line, 2001);
    }

    #[test]
    fn refuses_to_read_past_the_limit() {
        let text = [b'x'; 100];
        let mut t = Tracked::new(&text[..], 10);
        let mut sink = Vec::new();
        assert!(t.read_to_end(&mut sink).is_err());
        assert!(t.exceeded());
        assert_eq!(sink.len(), 11);
    }
}
