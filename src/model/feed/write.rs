//! Writing FeedSync feeds as Atom 1.0, item by item, and single items as standalone
//! documents (the bitstream Tributary stores for a feed item).
//!
//! An item whose [`FeedItem::xml`] is an Atom entry is written as that markup, copied event
//! by event, with its `sx:sync` put back just before the end tag: foreign markup (§2.1.7)
//! is republished as it came. An RSS item, or an item with no markup, becomes an entry
//! synthesised from its fields. Namespace declarations are adjusted on the item's start tag
//! only: ones the enclosing feed already makes are dropped, and ones the item needs but lacks
//! (`sx:` in a standalone document) are added. Active markup (script elements, event
//! handlers, script URLs in the namespaces browsers render) is left out as it is copied
//! (`active`); so is active markup in text that is escaped HTML (Atom `type="html"`, RSS
//! `description` and `content:encoded`).
//!
//! Output depends on nothing but the input, never on the clock, so the same item always
//! gives the same bytes.
//!
//! # Architecture
//! Writes to any `Write`; no I/O of its own.

use std::io::{self, Write};

use quick_xml::NsReader;
use quick_xml::events::{BytesStart, Event};
use quick_xml::name::ResolveResult;

use super::active;
use super::{ATOM_NS, FeedItem, FeedLink, RelatedKind, SX_NS, Sharing, Sync};
use crate::model::push_attr as attr;
use crate::model::{W3cDateTime, escape_into};

/// The prefix of an Atom id made from a sync id, for an item that has no id of its own
/// (an RSS item without `<guid>`): a sync id is an RFC 2141 NSS (§2.4), so this is a valid
/// URN, and the same in every feed that shares the item.
pub const SYNC_ID_URN_PREFIX: &str = "urn:feedsync:";

/// What an Atom feed says of itself.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedHead {
    /// Atom `<id>`.
    pub id: String,
    /// `<title>`.
    pub title: String,
    /// `<updated>`; also the `<updated>` of an entry that has no date of its own.
    pub updated: W3cDateTime,
    /// Feed links (`self`, RFC 5005 `next-archive`, `prev-archive`, `current`, …).
    pub links: Vec<FeedLink>,
    /// `sx:sharing` for the consumer this copy is for.
    pub sharing: Option<Sharing>,
    /// `<author><name>`: Atom wants an author on the feed when entries lack one.
    pub author: Option<String>,
}

/// Writes an Atom feed with FeedSync extensions, item by item.
pub struct AtomWriter<W: Write> {
    out: W,
    buf: Vec<u8>,
    updated: W3cDateTime,
}

impl<W: Write> AtomWriter<W> {
    /// Starts the feed: the XML declaration, `<feed>` with the Atom and `sx:` namespaces, and
    /// the feed's own metadata.
    ///
    /// # Errors
    /// The writer's.
    pub fn new(mut out: W, head: &FeedHead) -> io::Result<Self> {
        let mut buf = Vec::with_capacity(8192);
        write_head(&mut buf, head);
        out.write_all(&buf)?;
        Ok(AtomWriter { out, buf, updated: head.updated })
    }

    /// Writes one item as an Atom `<entry>` with its `sx:sync`.
    ///
    /// # Errors
    /// The writer's; `InvalidData` when the item's `xml` is not well-formed, `InvalidInput`
    /// when an entry has to be synthesised for an item with no id, sync id or link. Nothing
    /// of a refused item is written.
    pub fn item(&mut self, item: &FeedItem) -> io::Result<()> {
        self.buf.clear();
        self.buf.extend_from_slice(b"  ");
        let ctx = Ctx { atom_only: true, strict: true, fallback_updated: Some(self.updated) };
        write_item(&mut self.buf, item, FEED_SCOPE, &ctx).map_err(|e| e.into_io(item))?;
        self.buf.push(b'\n');
        self.out.write_all(&self.buf)
    }

    /// Ends the feed and flushes.
    ///
    /// # Errors
    /// The writer's.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.write_all(b"</feed>\n")?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// The item alone as a standalone XML document: the declaration, then the item element as
/// its `xml` has it (Atom `<entry>` or RSS `<item>`, with the namespace declarations it needs,
/// `sx:` among them) with its `sx:sync` before the end tag.
///
/// An item without `xml`, or whose `xml` is not well-formed, is written as an Atom entry
/// synthesised from its fields (without `<id>` or `<updated>` when it has nothing to make them
/// from: a stored item may lack them, and no clock is read, so the bytes are deterministic).
pub fn item_document(item: &FeedItem) -> Vec<u8> {
    let mut out = Vec::with_capacity(item.xml.len() + 512);
    out.extend_from_slice(b"<?xml version=\"1.0\" encoding=\"utf-8\"?>\n");
    let mark = out.len();
    let ctx = Ctx { atom_only: false, strict: false, fallback_updated: None };
    if write_item(&mut out, item, STANDALONE_SCOPE, &ctx).is_err() {
        out.truncate(mark);
        synthesize(&mut out, item, STANDALONE_SCOPE, &ctx).unwrap_or(());
    }
    out.push(b'\n');
    out
}

/// What the surrounding markup already declares.
#[derive(Debug, Clone, Copy)]
struct Scope {
    /// The default namespace in scope is Atom's (else there is none).
    default_atom: bool,
    /// `sx` is bound to the FeedSync namespace.
    sx_bound: bool,
}

const FEED_SCOPE: Scope = Scope { default_atom: true, sx_bound: true };
const STANDALONE_SCOPE: Scope = Scope { default_atom: false, sx_bound: false };

/// How items are written.
struct Ctx {
    /// Every item (conflicts too) must be an Atom entry: others are synthesised.
    atom_only: bool,
    /// A synthesised entry without anything to make an id from is an error (else the id
    /// is left out).
    strict: bool,
    /// `<updated>` for a synthesised entry with no date of its own.
    fallback_updated: Option<W3cDateTime>,
}

/// Why an item could not be written.
#[derive(Debug)]
enum ItemError {
    Malformed(String),
    NoId,
}

impl ItemError {
    fn into_io(self, item: &FeedItem) -> io::Error {
        let who = item.identity().unwrap_or("(no identity)");
        match self {
            ItemError::Malformed(why) => {
                io::Error::new(io::ErrorKind::InvalidData, format!("item {who}: its xml is not well-formed: {why}"))
            }
            ItemError::NoId => io::Error::new(
                io::ErrorKind::InvalidInput,
                "an item with no id, sync id or link cannot be written as an Atom entry (Atom requires <id>)",
            ),
        }
    }
}

fn write_head(out: &mut Vec<u8>, head: &FeedHead) {
    out.extend_from_slice(b"<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<feed xmlns=\"");
    out.extend_from_slice(ATOM_NS.as_bytes());
    out.extend_from_slice(b"\" xmlns:sx=\"");
    out.extend_from_slice(SX_NS.as_bytes());
    out.extend_from_slice(b"\">\n");
    text_element(out, "  ", "id", &head.id);
    text_element(out, "  ", "title", &head.title);
    text_element(out, "  ", "updated", &head.updated.to_string());
    if let Some(author) = &head.author {
        out.extend_from_slice(b"  <author>\n");
        text_element(out, "    ", "name", author);
        out.extend_from_slice(b"  </author>\n");
    }
    for link in &head.links {
        out.extend_from_slice(b"  <link");
        attr(out, "rel", &link.rel);
        attr(out, "href", &link.href);
        out.extend_from_slice(b"/>\n");
    }
    if let Some(sharing) = &head.sharing {
        write_sharing(out, sharing);
    }
}

fn write_sharing(out: &mut Vec<u8>, sharing: &Sharing) {
    out.extend_from_slice(b"  <sx:sharing");
    opt_attr(out, "since", sharing.since.as_deref());
    opt_attr(out, "until", sharing.until.as_deref());
    opt_attr(out, "expires", sharing.expires.map(|e| e.to_string()).as_deref());
    if sharing.related.is_empty() {
        out.extend_from_slice(b"/>\n");
        return;
    }
    out.extend_from_slice(b">\n");
    for related in &sharing.related {
        out.extend_from_slice(b"    <sx:related");
        attr(out, "link", &related.link);
        let kind = match related.kind {
            RelatedKind::Complete => "complete",
            RelatedKind::Aggregated => "aggregated",
        };
        attr(out, "type", kind);
        opt_attr(out, "title", related.title.as_deref());
        out.extend_from_slice(b"/>\n");
    }
    out.extend_from_slice(b"  </sx:sharing>\n");
}

/// Writes an item in `scope`: its own markup when it has usable markup, else synthesised.
fn write_item(out: &mut Vec<u8>, item: &FeedItem, scope: Scope, ctx: &Ctx) -> Result<(), ItemError> {
    if item.xml.trim().is_empty() {
        return synthesize(out, item, scope, ctx);
    }
    let mark = out.len();
    match copy_item(out, item, scope, ctx) {
        Ok(true) => Ok(()),
        Ok(false) => {
            out.truncate(mark);
            synthesize(out, item, scope, ctx)
        }
        Err(e) => {
            out.truncate(mark);
            Err(e)
        }
    }
}

/// Copies the item's markup with its `sx:sync` inserted; `Ok(false)`, having written nothing,
/// when the markup is not an Atom entry and `ctx` wants one.
fn copy_item(out: &mut Vec<u8>, item: &FeedItem, scope: Scope, ctx: &Ctx) -> Result<bool, ItemError> {
    let mut reader = NsReader::from_str(&item.xml);
    reader.config_mut().check_end_names = true;
    let mut depth = 0usize;
    let mut inner = scope;
    let mut root_name = String::new();
    // The depth at which a dropped element (active markup, see `active`) was opened.
    let mut skipping: Option<usize> = None;
    // The depth of an element whose text is escaped HTML, and that text so far: it is
    // sanitised whole (see `active`) when the element ends, or a (non-conforming) child starts.
    let mut html: Option<(usize, String)> = None;
    // The item is an RSS `<item>` (RSS 2.0, no namespace; or RSS 1.0).
    let mut rss = false;
    loop {
        let (res, ev) = reader.read_resolved_event().map_err(|e| ItemError::Malformed(e.to_string()))?;
        let is_atom = matches!(res, ResolveResult::Bound(ns) if ns.0 == ATOM_NS);
        let ns = match res {
            ResolveResult::Bound(ns) => Some(ns.0.to_owned()),
            _ => None,
        };
        match ev {
            Event::Start(ref e) | Event::Empty(ref e) if depth == 0 => {
                let empty = matches!(ev, Event::Empty(_));
                if ctx.atom_only && !(is_atom && e.local_name().as_ref() == "entry") {
                    return Ok(false);
                }
                root_name = e.name().as_ref().to_owned();
                rss = e.local_name().as_ref() == "item" && !is_atom;
                inner = root_start_tag(out, e, scope)?;
                out.push(b'>');
                if !empty {
                    depth = 1;
                    continue;
                }
                close_root(out, item, &root_name, inner, ctx)?;
                return Ok(true);
            }
            Event::End(_) if depth == 1 => {
                close_root(out, item, &root_name, inner, ctx)?;
                return Ok(true);
            }
            Event::Decl(_) | Event::Comment(_) | Event::PI(_) | Event::Text(_) if depth == 0 => {}
            Event::DocType(_) => return Err(ItemError::Malformed("a DOCTYPE".into())),
            Event::Eof => return Err(ItemError::Malformed("it ends before the item element closes".into())),
            Event::GeneralRef(ref r) if !r.is_char_ref() && !is_predefined(r) => {
                return Err(ItemError::Malformed(format!("undefined entity `&{};`", &**r)));
            }
            ref ev if depth == 0 => {
                return Err(ItemError::Malformed(format!("unexpected content before the item: {ev:?}")));
            }
            ev => {
                match ev {
                    Event::Start(_) => depth += 1,
                    Event::End(_) => depth -= 1,
                    _ => {}
                }
                if let Some(at) = skipping {
                    if depth < at {
                        skipping = None;
                    }
                    continue;
                }
                if let Some((at, text)) = html.as_mut() {
                    match &ev {
                        Event::Text(t) => text.push_str(&t.xml10_content()),
                        Event::CData(c) => text.push_str(&c.xml10_content()),
                        Event::GeneralRef(r) => text.push(resolve_ref(r)?),
                        _ => {
                            escape_into(out, &active::sanitise_html(text), false);
                            text.clear();
                            if depth < *at {
                                html = None;
                            }
                        }
                    }
                    if matches!(ev, Event::Text(_) | Event::CData(_) | Event::GeneralRef(_)) {
                        continue;
                    }
                }
                let rendered = active::is_rendered(ns.as_deref());
                match &ev {
                    Event::Start(e) | Event::Empty(e) if rendered && active::is_dropped(e.local_name().as_ref()) => {
                        if matches!(ev, Event::Start(_)) {
                            skipping = Some(depth);
                        }
                    }
                    Event::Start(e) | Event::Empty(e) => {
                        start_tag(out, e, matches!(ev, Event::Empty(_)), rendered, &reader)?;
                        let local = e.local_name();
                        let local = local.as_ref();
                        let escaped_html = if is_atom {
                            active::is_atom_html(local, type_attribute(e)?.as_deref())
                        } else {
                            rss && depth == 2 && active::is_rss_html(ns.as_deref(), local)
                        };
                        if escaped_html && matches!(ev, Event::Start(_)) {
                            html = Some((depth, String::new()));
                        }
                    }
                    _ => copy_event(out, &ev),
                }
            }
        }
    }
}

/// Writes a start (or empty) tag without its active attributes (see `active`).
fn start_tag(
    out: &mut Vec<u8>,
    e: &BytesStart<'_>,
    empty: bool,
    rendered: bool,
    reader: &NsReader<&[u8]>,
) -> Result<(), ItemError> {
    out.push(b'<');
    out.extend_from_slice(e.name().as_ref().as_bytes());
    for a in e.attributes() {
        let a = a.map_err(|err| ItemError::Malformed(err.to_string()))?;
        let value = a
            .normalized_value(quick_xml::XmlVersion::Implicit1_0)
            .map_err(|err| ItemError::Malformed(err.to_string()))?;
        let key = a.key.as_ref();
        let declaration = key == "xmlns" || key.starts_with("xmlns:");
        let (res, local) = reader.resolver().resolve_attribute(a.key);
        let ns = match res {
            ResolveResult::Bound(ns) => Some(ns.0),
            _ => None,
        };
        if declaration || !active::is_active_attribute(rendered, ns, local.as_ref(), &value) {
            attr(out, key, &value);
        }
    }
    out.extend_from_slice(if empty { b"/>" } else { b">" });
    Ok(())
}

/// The value of an element's unprefixed `type` attribute.
fn type_attribute(e: &BytesStart<'_>) -> Result<Option<String>, ItemError> {
    let a = e.try_get_attribute("type").map_err(|err| ItemError::Malformed(err.to_string()))?;
    a.map(|a| a.normalized_value(quick_xml::XmlVersion::Implicit1_0).map(|v| v.into_owned()))
        .transpose()
        .map_err(|err| ItemError::Malformed(err.to_string()))
}

/// The character an entity or character reference stands for (the caller has refused
/// references to undefined entities).
fn resolve_ref(r: &quick_xml::events::BytesRef<'_>) -> Result<char, ItemError> {
    let c = if r.is_char_ref() {
        r.resolve_char_ref().ok().flatten()
    } else {
        quick_xml::escape::resolve_xml_entity(r).and_then(|s| s.chars().next())
    };
    c.ok_or_else(|| ItemError::Malformed(format!("`&{};` is not a valid reference", &**r)))
}

fn is_predefined(r: &str) -> bool {
    matches!(r, "lt" | "gt" | "amp" | "apos" | "quot")
}

/// Writes the item's start tag (without its closing `>`), adjusting its namespace
/// declarations to `scope`; returns the scope inside it.
fn root_start_tag(out: &mut Vec<u8>, e: &BytesStart<'_>, scope: Scope) -> Result<Scope, ItemError> {
    let name = e.name();
    out.push(b'<');
    out.extend_from_slice(name.as_ref().as_bytes());
    let (mut default, mut sx) = (None, None);
    for a in e.attributes() {
        let a = a.map_err(|err| ItemError::Malformed(err.to_string()))?;
        let key = a.key.as_ref();
        let value = a
            .normalized_value(quick_xml::XmlVersion::Implicit1_0)
            .map_err(|err| ItemError::Malformed(err.to_string()))?;
        let redundant = match key {
            "xmlns" => {
                default = Some(value == ATOM_NS);
                scope.default_atom && value == ATOM_NS
            }
            "xmlns:sx" => {
                sx = Some(value == SX_NS);
                scope.sx_bound && value == SX_NS
            }
            _ => false,
        };
        if !redundant {
            attr(out, key, &value);
        }
    }
    // Unprefixed names in an item that declares no default namespace are in none: say so
    // when the surrounding feed has one.
    if default.is_none() && scope.default_atom {
        out.extend_from_slice(b" xmlns=\"\"");
    }
    if sx.is_none() && !scope.sx_bound {
        attr(out, "xmlns:sx", SX_NS);
    }
    Ok(Scope { default_atom: default.unwrap_or(false), sx_bound: sx.unwrap_or(true) })
}

/// Writes `sx:sync` (when the item has one) and the end tag of the item element.
fn close_root(out: &mut Vec<u8>, item: &FeedItem, name: &str, inner: Scope, ctx: &Ctx) -> Result<(), ItemError> {
    if let Some(sync) = &item.sync {
        match tail_indent(out) {
            Some(indent) => {
                out.extend_from_slice(b"  ");
                write_sync(out, sync, Some(indent + 2), inner, ctx)?;
                out.push(b'\n');
                out.extend(std::iter::repeat_n(b' ', indent));
            }
            None => write_sync(out, sync, None, inner, ctx)?,
        }
    }
    out.extend_from_slice(b"</");
    out.extend_from_slice(name.as_bytes());
    out.push(b'>');
    Ok(())
}

/// The number of spaces after the last newline, when only spaces follow it.
fn tail_indent(out: &[u8]) -> Option<usize> {
    let nl = out.iter().rposition(|&b| b == b'\n')?;
    let tail = &out[nl + 1..];
    tail.iter().all(|&b| b == b' ').then_some(tail.len())
}

fn copy_event(out: &mut Vec<u8>, ev: &Event<'_>) {
    let (before, after): (&[u8], &[u8]) = match ev {
        Event::Start(_) => (b"<", b">"),
        Event::End(_) => (b"</", b">"),
        Event::Empty(_) => (b"<", b"/>"),
        Event::Text(_) => (b"", b""),
        Event::CData(_) => (b"<![CDATA[", b"]]>"),
        Event::Comment(_) => (b"<!--", b"-->"),
        Event::PI(_) | Event::Decl(_) => (b"<?", b"?>"),
        Event::GeneralRef(_) => (b"&", b";"),
        Event::DocType(_) | Event::Eof => return,
    };
    out.extend_from_slice(before);
    out.extend_from_slice(ev.as_bytes());
    out.extend_from_slice(after);
}

/// Writes an Atom entry made from the item's fields.
fn synthesize(out: &mut Vec<u8>, item: &FeedItem, scope: Scope, ctx: &Ctx) -> Result<(), ItemError> {
    let id = item
        .id
        .clone()
        .or_else(|| item.sync.as_ref().map(|s| format!("{SYNC_ID_URN_PREFIX}{}", s.id)))
        .or_else(|| item.link.clone());
    if id.is_none() && ctx.strict {
        return Err(ItemError::NoId);
    }
    out.extend_from_slice(b"<entry");
    if !scope.default_atom {
        attr(out, "xmlns", ATOM_NS);
    }
    if !scope.sx_bound {
        attr(out, "xmlns:sx", SX_NS);
    }
    out.extend_from_slice(b">\n");
    if let Some(id) = &id {
        text_element(out, "    ", "id", id);
    }
    text_element(out, "    ", "title", item.title.as_deref().unwrap_or(""));
    if let Some(link) = &item.link {
        out.extend_from_slice(b"    <link");
        attr(out, "href", link);
        out.extend_from_slice(b"/>\n");
    }
    if let Some(updated) = entry_updated(item, ctx) {
        text_element(out, "    ", "updated", &updated.to_string());
    }
    if let Some(enc) = &item.enclosure {
        out.extend_from_slice(b"    <link rel=\"enclosure\"");
        attr(out, "href", &enc.url);
        opt_attr(out, "length", enc.length.map(|l| l.to_string()).as_deref());
        opt_attr(out, "type", enc.media_type.as_deref());
        out.extend_from_slice(b"/>\n");
    }
    if let Some(sync) = &item.sync {
        out.extend_from_slice(b"    ");
        write_sync(out, sync, Some(4), Scope { default_atom: true, sx_bound: true }, ctx)?;
        out.push(b'\n');
    }
    out.extend_from_slice(b"  </entry>");
    Ok(())
}

/// The item's own date, else its newest history `when`, else the feed's.
fn entry_updated(item: &FeedItem, ctx: &Ctx) -> Option<W3cDateTime> {
    item.updated
        .or_else(|| item.sync.as_ref().and_then(|s| s.history.iter().filter_map(|h| h.when).max()))
        .or(ctx.fallback_updated)
}

/// Writes `sx:sync` in `scope`; `indent` is the column it starts at (`None`: all on one line).
fn write_sync(out: &mut Vec<u8>, sync: &Sync, indent: Option<usize>, scope: Scope, ctx: &Ctx) -> Result<(), ItemError> {
    let newline = |out: &mut Vec<u8>, extra: usize| {
        if let Some(n) = indent {
            out.push(b'\n');
            out.extend(std::iter::repeat_n(b' ', n + extra));
        }
    };
    out.extend_from_slice(b"<sx:sync");
    if !scope.sx_bound {
        attr(out, "xmlns:sx", SX_NS);
    }
    attr(out, "id", &sync.id);
    let mut num = itoa::Buffer::new();
    attr(out, "updates", num.format(sync.updates));
    if sync.deleted {
        attr(out, "deleted", "true");
    }
    if sync.noconflicts {
        attr(out, "noconflicts", "true");
    }
    out.push(b'>');
    for h in &sync.history {
        newline(out, 2);
        out.extend_from_slice(b"<sx:history");
        attr(out, "sequence", num.format(h.sequence));
        opt_attr(out, "when", h.when.map(|w| w.to_string()).as_deref());
        opt_attr(out, "by", h.by.as_deref());
        out.extend_from_slice(b"/>");
    }
    if !sync.conflicts.is_empty() {
        newline(out, 2);
        out.extend_from_slice(b"<sx:conflicts>");
        let inner = Scope { sx_bound: true, ..scope };
        for c in &sync.conflicts {
            newline(out, 4);
            write_item(out, c, inner, ctx)?;
        }
        newline(out, 2);
        out.extend_from_slice(b"</sx:conflicts>");
    }
    newline(out, 0);
    out.extend_from_slice(b"</sx:sync>");
    Ok(())
}

fn text_element(out: &mut Vec<u8>, indent: &str, name: &str, value: &str) {
    out.extend_from_slice(indent.as_bytes());
    out.push(b'<');
    out.extend_from_slice(name.as_bytes());
    if value.is_empty() {
        out.extend_from_slice(b"/>\n");
        return;
    }
    out.push(b'>');
    escape_into(out, value, false);
    out.extend_from_slice(b"</");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b">\n");
}

fn opt_attr(out: &mut Vec<u8>, name: &str, value: Option<&str>) {
    if let Some(v) = value {
        attr(out, name, v);
    }
}

#[cfg(test)]
mod tests;
