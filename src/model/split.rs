//! Splitting a long list into an index plus parts (spec §10.2, §12.2; the Sitemap protocol's
//! 50,000-entry / 50 MB limits).
//!
//! Whether a list needs splitting is only known once it overflows, but a part must say from
//! its very first bytes that it belongs to an index (its `index` link). So the first part's
//! entries are spooled in memory — bounded by the part limits — and written either as a plain
//! list (no overflow) or as part 1; later parts stream straight to their targets.

use std::io::{self, Write};

use super::W3cDateTime;
use super::types::{Entry, Header, Link, Md, RootFormat};
use super::writer::DocumentWriter;

/// When a list becomes an index.
#[derive(Debug, Clone, Copy)]
pub struct SplitLimits {
    /// Entries per document (default 50,000).
    pub max_entries: usize,
    /// Bytes per document (default 50 MB).
    pub max_bytes: u64,
}

impl Default for SplitLimits {
    fn default() -> Self {
        SplitLimits { max_entries: super::SITEMAP_MAX_ENTRIES, max_bytes: super::SITEMAP_MAX_BYTES }
    }
}

/// Which document a sink is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartTarget {
    /// The whole list fitted in one document.
    Single,
    /// Part `n` (1-based) of a split list.
    Part(usize),
    /// The index listing the parts.
    Index,
}

/// What [`write_split`] produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SplitOutcome {
    /// One document.
    Single {
        /// Entries written.
        entries: usize,
    },
    /// An index plus parts.
    Index {
        /// Entries in each part, in order.
        parts: Vec<usize>,
    },
}

/// What is known about one finished part, for its index entry.
struct PartInfo {
    entries: usize,
    first: Option<W3cDateTime>,
    last: Option<W3cDateTime>,
}

/// Writes `entries` under `header`, as one document or as an index plus parts.
///
/// `index_url` is the URI of the index (each part links to it with `rel="index"`), `part_url`
/// gives the URI of part `n`, and `open` returns the writer for each target. The index is
/// written last.
///
/// # Errors
/// When a sink fails.
pub fn write_split<I, F, W>(
    header: &Header,
    entries: I,
    limits: SplitLimits,
    index_url: &str,
    part_url: impl Fn(usize) -> String,
    mut open: F,
) -> io::Result<SplitOutcome>
where
    I: IntoIterator<Item = Entry>,
    F: FnMut(PartTarget) -> io::Result<W>,
    W: Write,
{
    let part_header = part_header(header, index_url);
    let budget = limits.max_bytes.saturating_sub(header_overhead(&part_header)?);
    let mut spool: Vec<Entry> = Vec::new();
    let mut spool_bytes = 0u64;
    let mut iter = entries.into_iter();
    let mut probe = DocumentWriter::new(io::sink(), &part_header)?;
    for e in iter.by_ref() {
        let before = probe.bytes_written();
        probe.write_entry(&e)?;
        let size = probe.bytes_written() - before;
        if spool.len() + 1 > limits.max_entries || spool_bytes + size > budget {
            return write_parts(header, &part_header, spool, e, iter, limits, index_url, &part_url, &mut open);
        }
        spool_bytes += size;
        spool.push(e);
    }
    let mut w = DocumentWriter::new(open(PartTarget::Single)?, header)?;
    for e in &spool {
        w.write_entry(e)?;
    }
    w.finish()?;
    Ok(SplitOutcome::Single { entries: spool.len() })
}

#[allow(clippy::too_many_arguments)]
fn write_parts<F, W>(
    header: &Header,
    part_header: &Header,
    first_part: Vec<Entry>,
    next: Entry,
    rest: impl Iterator<Item = Entry>,
    limits: SplitLimits,
    index_url: &str,
    part_url: &impl Fn(usize) -> String,
    open: &mut F,
) -> io::Result<SplitOutcome>
where
    F: FnMut(PartTarget) -> io::Result<W>,
    W: Write,
{
    let mut parts = Vec::new();
    let mut info = PartInfo { entries: 0, first: None, last: None };
    let mut w = DocumentWriter::new(open(PartTarget::Part(1))?, part_header)?;
    for e in first_part.into_iter().chain(std::iter::once(next)).chain(rest) {
        w = roll_if_full(w, &e, &mut info, &mut parts, part_header, limits, open)?;
        record(&mut info, &e);
        w.write_entry(&e)?;
    }
    w.finish()?;
    parts.push(info);
    write_index(header, &parts, index_url, part_url, open)?;
    Ok(SplitOutcome::Index { parts: parts.iter().map(|p| p.entries).collect() })
}

fn record(info: &mut PartInfo, e: &Entry) {
    info.entries += 1;
    if let Some(t) = e.md.as_ref().and_then(|m| m.datetime) {
        info.first.get_or_insert(t);
        info.last = Some(t);
    }
}

fn roll_if_full<F, W>(
    w: DocumentWriter<W>,
    e: &Entry,
    info: &mut PartInfo,
    parts: &mut Vec<PartInfo>,
    part_header: &Header,
    limits: SplitLimits,
    open: &mut F,
) -> io::Result<DocumentWriter<W>>
where
    F: FnMut(PartTarget) -> io::Result<W>,
    W: Write,
{
    let size = entry_size(e)?;
    let closing = "</urlset>\n".len() as u64;
    let full = w.entries_written() >= limits.max_entries
        || (w.entries_written() > 0 && w.bytes_written() + size + closing > limits.max_bytes);
    if !full {
        return Ok(w);
    }
    w.finish()?;
    parts.push(std::mem::replace(info, PartInfo { entries: 0, first: None, last: None }));
    DocumentWriter::new(open(PartTarget::Part(parts.len() + 1))?, part_header)
}

fn entry_size(e: &Entry) -> io::Result<u64> {
    let mut w = DocumentWriter::new(io::sink(), &Header::default())?;
    let before = w.bytes_written();
    w.write_entry(e)?;
    Ok(w.bytes_written() - before)
}

/// The header every part carries: the list's own, plus `index` pointing at the index.
fn part_header(header: &Header, index_url: &str) -> Header {
    let mut h = header.clone();
    h.format = Some(RootFormat::UrlSet);
    h.links.retain(|l| l.rel != "index");
    h.links.push(Link::new("index", index_url));
    h
}

fn header_overhead(header: &Header) -> io::Result<u64> {
    let w = DocumentWriter::new(io::sink(), header)?;
    Ok(w.bytes_written() + "</urlset>\n".len() as u64)
}

fn write_index<F, W>(
    header: &Header,
    parts: &[PartInfo],
    _index_url: &str,
    part_url: &impl Fn(usize) -> String,
    open: &mut F,
) -> io::Result<()>
where
    F: FnMut(PartTarget) -> io::Result<W>,
    W: Write,
{
    let mut index = header.clone();
    index.format = Some(RootFormat::SitemapIndex);
    let mut w = DocumentWriter::new(open(PartTarget::Index)?, &index)?;
    let change_kind = header.md.as_ref().and_then(|m| m.from).is_some();
    for i in 0..parts.len() {
        let mut e = Entry::new(part_url(i + 1));
        if change_kind {
            e.md = Some(part_interval(header, parts, i));
        }
        w.write_entry(&e)?;
    }
    w.finish()?;
    Ok(())
}

/// A Change List part covers from the previous part's last change (or the list's `from`)
/// until its own last change (or the list's `until`, for the final part).
fn part_interval(header: &Header, parts: &[PartInfo], i: usize) -> Md {
    let md = header.md.clone().unwrap_or_default();
    let from = if i == 0 { md.from } else { parts[i - 1].last.or(md.from) };
    let until = if i + 1 == parts.len() { md.until } else { parts[i].last.or(parts[i].first) };
    Md { from, until, ..Md::default() }
}
