//! Writes ResourceSync documents: namespace-correct (default namespace Sitemap 0.9, prefix
//! `rs`), deterministic byte for byte, streaming to any `Write`.
//!
//! Output is one entry per line with attributes in a fixed order, so documents diff well and
//! the same model always gives the same bytes (closed Change Lists are served with long-lived
//! caching and must not change). Elements and attributes from other namespaces are written back
//! with their original prefixes, declaring a namespace locally when the root does not.

use std::io::{self, Write};

use super::types::{Document, Entry, ExtNode, Extension, ForeignAttr, Header, Link, Md, RS_NS, RootFormat, SITEMAP_NS};

const XML_NS: &str = "http://www.w3.org/XML/1998/namespace";

/// Streams one document: header on creation, then entries, then [`finish`](Self::finish).
pub struct DocumentWriter<W: Write> {
    out: W,
    format: RootFormat,
    /// Prefixes bound on the root (prefix, uri).
    root_ns: Vec<(String, String)>,
    scratch: Vec<u8>,
    bytes: u64,
    entries: usize,
}

impl<W: Write> DocumentWriter<W> {
    /// Writes the XML declaration, the root start tag, and the root `<rs:md>`/`<rs:ln>`.
    ///
    /// # Errors
    /// When the underlying writer fails.
    pub fn new(out: W, header: &Header) -> io::Result<Self> {
        let format = header.format.unwrap_or(RootFormat::UrlSet);
        let mut w = DocumentWriter {
            out,
            format,
            root_ns: header.namespaces.clone(),
            scratch: Vec::with_capacity(1024),
            bytes: 0,
            entries: 0,
        };
        let mut buf = std::mem::take(&mut w.scratch);
        w.render_header(&mut buf, header);
        w.emit(&buf)?;
        buf.clear();
        w.scratch = buf;
        Ok(w)
    }

    /// Writes one entry.
    ///
    /// # Errors
    /// When the underlying writer fails.
    pub fn write_entry(&mut self, entry: &Entry) -> io::Result<()> {
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        self.render_entry(&mut buf, entry);
        let r = self.emit(&buf);
        self.scratch = buf;
        self.entries += 1;
        r
    }

    /// Writes one entry the caller rendered itself, in exactly this writer's format: one
    /// `<url>` (or `<sitemap>`) element, attributes in the writer's order, values escaped with
    /// [`escape_into`], ending in a newline. For streaming many entries from borrowed data
    /// without building an [`Entry`] each; the caller answers for well-formedness.
    ///
    /// # Errors
    /// When the underlying writer fails.
    pub fn write_rendered_entry(&mut self, rendered: &[u8]) -> io::Result<()> {
        self.entries += 1;
        self.emit(rendered)
    }

    /// Closes the root element and returns the writer.
    ///
    /// # Errors
    /// When the underlying writer fails.
    pub fn finish(mut self) -> io::Result<W> {
        let end = closing_tag(self.format);
        self.emit(end.as_bytes())?;
        self.out.flush()?;
        Ok(self.out)
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }

    /// Entries written so far.
    pub fn entries_written(&self) -> usize {
        self.entries
    }

    fn emit(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.bytes += bytes.len() as u64;
        Ok(())
    }

    fn render_header(&self, out: &mut Vec<u8>, header: &Header) {
        out.extend_from_slice(b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<");
        out.extend_from_slice(self.format.root_name().as_bytes());
        out.extend_from_slice(b" xmlns=\"");
        out.extend_from_slice(SITEMAP_NS.as_bytes());
        out.extend_from_slice(b"\" xmlns:rs=\"");
        out.extend_from_slice(RS_NS.as_bytes());
        out.push(b'"');
        for (prefix, uri) in &header.namespaces {
            if prefix.is_empty() {
                continue; // the default namespace is always Sitemap's
            }
            attr(out, &format!("xmlns:{prefix}"), uri);
        }
        let scope = Scope::root(&self.root_ns);
        for a in &header.extra {
            foreign_attr(out, a, &scope);
        }
        out.extend_from_slice(b">\n");
        if let Some(md) = &header.md {
            render_md(out, md, &scope);
            out.push(b'\n');
        }
        for link in &header.links {
            render_link(out, link, &scope);
            out.push(b'\n');
        }
        for ext in &header.extensions {
            render_extension(out, ext, &mut scope.clone());
            out.push(b'\n');
        }
    }

    fn render_entry(&self, out: &mut Vec<u8>, e: &Entry) {
        let name = self.format.entry_name().as_bytes();
        out.push(b'<');
        out.extend_from_slice(name);
        out.extend_from_slice(b"><loc>");
        escape_text(out, &e.loc);
        out.extend_from_slice(b"</loc>");
        if let Some(t) = &e.lastmod {
            out.extend_from_slice(b"<lastmod>");
            datetime(out, t);
            out.extend_from_slice(b"</lastmod>");
        }
        if let Some(f) = &e.changefreq {
            simple(out, "changefreq", f);
        }
        if let Some(p) = &e.priority {
            simple(out, "priority", p);
        }
        let scope = Scope::root(&self.root_ns);
        if let Some(md) = &e.md {
            render_md(out, md, &scope);
        }
        for link in &e.links {
            render_link(out, link, &scope);
        }
        for ext in &e.extensions {
            render_extension(out, ext, &mut scope.clone());
        }
        out.extend_from_slice(b"</");
        out.extend_from_slice(name);
        out.extend_from_slice(b">\n");
    }
}

fn closing_tag(format: RootFormat) -> String {
    format!("</{}>\n", format.root_name())
}

/// Writes a whole in-memory document.
///
/// # Errors
/// When the underlying writer fails.
pub fn write_document<W: Write>(doc: &Document, out: W) -> io::Result<W> {
    let mut w = DocumentWriter::new(out, &doc.header)?;
    for e in &doc.entries {
        w.write_entry(e)?;
    }
    w.finish()
}

/// Serialises a whole document to bytes.
pub fn to_bytes(doc: &Document) -> Vec<u8> {
    // Writing to a Vec cannot fail.
    write_document(doc, Vec::new()).unwrap_or_default()
}

/// Namespace bindings in scope while writing foreign content.
#[derive(Clone)]
struct Scope<'a> {
    root: &'a [(String, String)],
    local: Vec<(Option<String>, Option<String>)>,
}

impl<'a> Scope<'a> {
    fn root(root: &'a [(String, String)]) -> Self {
        Scope { root, local: Vec::new() }
    }

    /// The namespace a prefix (None = default) is bound to here.
    fn lookup(&self, prefix: Option<&str>) -> Option<&str> {
        if let Some((_, uri)) = self.local.iter().rev().find(|(p, _)| p.as_deref() == prefix) {
            return uri.as_deref();
        }
        match prefix {
            None => Some(SITEMAP_NS),
            Some("rs") => Some(RS_NS),
            Some("xml") => Some(XML_NS),
            Some(p) => self.root.iter().find(|(rp, _)| rp == p).map(|(_, u)| u.as_str()),
        }
    }
}

fn render_md(out: &mut Vec<u8>, md: &Md, scope: &Scope<'_>) {
    out.extend_from_slice(b"<rs:md");
    if let Some(c) = md.capability {
        attr(out, "capability", c.as_str());
    }
    if let Some(c) = md.change {
        attr(out, "change", c.as_str());
    }
    for (name, t) in [
        ("at", &md.at),
        ("completed", &md.completed),
        ("from", &md.from),
        ("until", &md.until),
        ("datetime", &md.datetime),
    ] {
        if let Some(t) = t {
            datetime_attr(out, name, t);
        }
    }
    if let Some(h) = &md.hash {
        attr(out, "hash", &h.to_string());
    }
    if let Some(n) = md.length {
        attr(out, "length", itoa::Buffer::new().format(n));
    }
    for (name, v) in [("type", &md.media_type), ("encoding", &md.encoding), ("path", &md.path)] {
        if let Some(v) = v {
            attr(out, name, v);
        }
    }
    for a in &md.extra {
        foreign_attr(out, a, scope);
    }
    out.extend_from_slice(b"/>");
}

fn render_link(out: &mut Vec<u8>, link: &Link, scope: &Scope<'_>) {
    out.extend_from_slice(b"<rs:ln");
    attr(out, "rel", &link.rel);
    attr(out, "href", &link.href);
    if let Some(p) = link.pri {
        attr(out, "pri", itoa::Buffer::new().format(p));
    }
    if let Some(t) = &link.modified {
        datetime_attr(out, "modified", t);
    }
    if let Some(h) = &link.hash {
        attr(out, "hash", &h.to_string());
    }
    if let Some(n) = link.length {
        attr(out, "length", itoa::Buffer::new().format(n));
    }
    for (name, v) in [("type", &link.media_type), ("encoding", &link.encoding), ("path", &link.path)] {
        if let Some(v) = v {
            attr(out, name, v);
        }
    }
    for a in &link.extra {
        foreign_attr(out, a, scope);
    }
    out.extend_from_slice(b"/>");
}

fn render_extension(out: &mut Vec<u8>, ext: &Extension, scope: &mut Scope<'_>) {
    let depth = scope.local.len();
    let qname = match &ext.prefix {
        Some(p) => format!("{p}:{}", ext.local),
        None => ext.local.clone(),
    };
    out.push(b'<');
    out.extend_from_slice(qname.as_bytes());
    if scope.lookup(ext.prefix.as_deref()) != ext.ns.as_deref() {
        declare(out, ext.prefix.as_deref(), ext.ns.as_deref().unwrap_or(""));
        scope.local.push((ext.prefix.clone(), ext.ns.clone()));
    }
    for a in &ext.attrs {
        foreign_attr(out, a, scope);
    }
    if ext.children.is_empty() {
        out.extend_from_slice(b"/>");
    } else {
        out.push(b'>');
        for child in &ext.children {
            match child {
                ExtNode::Text(t) => escape_text(out, t),
                ExtNode::Element(el) => render_extension(out, el, scope),
            }
        }
        out.extend_from_slice(b"</");
        out.extend_from_slice(qname.as_bytes());
        out.push(b'>');
    }
    scope.local.truncate(depth);
}

fn declare(out: &mut Vec<u8>, prefix: Option<&str>, uri: &str) {
    match prefix {
        Some(p) => attr(out, &format!("xmlns:{p}"), uri),
        None => attr(out, "xmlns", uri),
    }
}

fn foreign_attr(out: &mut Vec<u8>, a: &ForeignAttr, scope: &Scope<'_>) {
    match (&a.prefix, &a.ns) {
        (Some(p), Some(ns)) => {
            if scope.lookup(Some(p)) != Some(ns.as_str()) {
                declare(out, Some(p), ns);
            }
            attr(out, &format!("{p}:{}", a.local), &a.value);
        }
        _ => attr(out, &a.local, &a.value),
    }
}

fn simple(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(b'<');
    out.extend_from_slice(name.as_bytes());
    out.push(b'>');
    escape_text(out, value);
    out.extend_from_slice(b"</");
    out.extend_from_slice(name.as_bytes());
    out.push(b'>');
}

fn datetime(out: &mut Vec<u8>, t: &super::W3cDateTime) {
    let mut buf = [0u8; 30];
    let n = t.write_bytes(&mut buf);
    out.extend_from_slice(&buf[..n]);
}

fn datetime_attr(out: &mut Vec<u8>, name: &str, t: &super::W3cDateTime) {
    out.push(b' ');
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"=\"");
    datetime(out, t);
    out.push(b'"');
}

/// ` name="value"`, escaped: for the hand-rendered XML elsewhere (the publisher's fast entry
/// path, the feed writer), so every writer quotes and escapes attributes one way.
pub(crate) fn attr(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(b' ');
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"=\"");
    escape_attr(out, value);
    out.push(b'"');
}

/// Escapes `s` as this writer does: for element text, or (`attribute = true`) for a
/// double-quoted attribute value. See [`DocumentWriter::write_rendered_entry`].
pub fn escape_into(out: &mut Vec<u8>, s: &str, attribute: bool) {
    escape(out, s, attribute);
}

fn escape_text(out: &mut Vec<u8>, s: &str) {
    escape(out, s, false);
}

fn escape_attr(out: &mut Vec<u8>, s: &str) {
    escape(out, s, true);
}

/// Which bytes need escaping: bit 0 in text, bit 1 in attribute values.
const ESCAPE: [u8; 256] = {
    let mut t = [0u8; 256];
    t[b'&' as usize] = 3;
    t[b'<' as usize] = 3;
    t[b'>' as usize] = 3;
    t[b'"' as usize] = 2;
    t[b'\n' as usize] = 2;
    t[b'\r' as usize] = 2;
    t[b'\t' as usize] = 2;
    t
};

/// Escapes markup characters; in attributes also `"` and the whitespace characters that
/// attribute-value normalisation would otherwise turn into spaces.
fn escape(out: &mut Vec<u8>, s: &str, in_attr: bool) {
    let bytes = s.as_bytes();
    let mask = if in_attr { 2 } else { 1 };
    // Most values (URIs, digests, datetimes) need no escaping: one branch-free pass finds
    // out, and they are copied whole. This runs for every attribute of every entry.
    if bytes.iter().fold(0u8, |acc, &b| acc | ESCAPE[usize::from(b)]) & mask == 0 {
        out.extend_from_slice(bytes);
        return;
    }
    let mut last = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if ESCAPE[usize::from(b)] & mask == 0 {
            continue;
        }
        out.extend_from_slice(&bytes[last..i]);
        out.extend_from_slice(match b {
            b'&' => b"&amp;",
            b'<' => b"&lt;",
            b'>' => b"&gt;",
            b'"' => b"&quot;",
            b'\n' => b"&#10;",
            b'\r' => b"&#13;",
            _ => b"&#9;",
        });
        last = i + 1;
    }
    out.extend_from_slice(&bytes[last..]);
}
