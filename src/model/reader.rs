//! Streaming reader for every ResourceSync document.
//!
//! [`DocumentReader`] yields the root metadata first ([`Header`]) and then one [`Entry`] at a
//! time, so a 50,000-entry list is never held whole unless the caller collects it. Elements are
//! matched by namespace URI, never by prefix.
//!
//! Hostile input is handled here, once: DOCTYPE declarations and undefined entities are refused
//! (XXE, billion laughs), bytes, entries and element depth are capped, and a document that ends
//! before its root element closes is an error — never a shorter list, because a truncated
//! Resource List read as complete would turn into deletions downstream.
//!
//! Malformed *values* (a bad datetime, an unknown capability) do not stop reading: they become
//! [`Diagnostic`]s so `tributary check` can report every problem in one pass.

use std::borrow::Cow;
use std::io::{self, BufRead};

use quick_xml::Reader;
use quick_xml::events::attributes::Attribute;
use quick_xml::events::{BytesRef, BytesStart, Event};
use quick_xml::name::{NamespaceResolver, ResolveResult};

use super::datetime::W3cDateTime;
use super::diagnostic::Diagnostic;
use super::error::{ReadError, ReadErrorKind};
use super::hash::{HashList, HashNote};
use super::position::{Position, Tracked};
use super::types::{
    Capability, Change, Document, Entry, ExtNode, Extension, ForeignAttr, Header, Link, Md, RS_NS, RootFormat,
    SITEMAP_NS,
};

/// Limits and naming for one read.
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// Name of the document (URL or path) used in errors.
    pub name: String,
    /// Maximum bytes read (default 50 MB, the Sitemap protocol's limit).
    pub max_bytes: u64,
    /// Maximum entries (default 50,000, the Sitemap protocol's limit).
    pub max_entries: usize,
    /// Maximum element nesting depth (default 32).
    pub max_depth: usize,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            name: "<input>".into(),
            max_bytes: super::SITEMAP_MAX_BYTES,
            max_entries: super::SITEMAP_MAX_ENTRIES,
            max_depth: 32,
        }
    }
}

impl ReadOptions {
    /// Default limits with a document name for messages.
    pub fn named(name: impl Into<String>) -> Self {
        ReadOptions { name: name.into(), ..ReadOptions::default() }
    }
}

/// Namespace declarations (prefix, uri) and other attributes of the root element.
type RootAttributes = (Vec<(String, String)>, Vec<ForeignAttr>);

/// Where an element sits, by namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ns {
    Sitemap,
    Rs,
    Other,
}

/// The parser state shared by all the reading steps (everything but the event buffer, so a
/// borrowed event and the state can be used together).
struct Core<R: BufRead> {
    /// A plain reader with the namespace scopes kept here rather than by `NsReader`, which
    /// walks every start tag's attributes looking for declarations (a tenth of the parse);
    /// see [`Core::push_scope`].
    xml: Reader<Tracked<R>>,
    ns: NamespaceResolver,
    /// The element just read was empty or an end tag: its scope closes before the next event.
    pending_pop: bool,
    /// Finds `xmlns` in a start tag's attributes: only tags containing it can declare anything.
    xmlns: memchr::memmem::Finder<'static>,
    /// Namespace class of each element prefix met (`""` for none), valid while the bindings
    /// in scope stay the same: resolving every element through the resolver cost 5% of a parse.
    prefix_classes: Vec<(String, Ns)>,
    /// Levels whose start tag went through the full resolver push (it may have declared
    /// namespaces): leaving one may change the bindings in scope.
    decl_levels: Vec<u16>,
    opts: ReadOptions,
    depth: usize,
    diagnostics: Vec<Diagnostic>,
    /// Start of the event most recently read.
    event_start: u64,
}

/// Reads a ResourceSync document incrementally. See the module docs.
pub struct DocumentReader<R: BufRead> {
    core: Core<R>,
    buf: Vec<u8>,
    text_buf: String,
    header: Header,
    pending: Option<(Entry, Position)>,
    /// An error met while looking for the first entry, surfaced by the first `next_entry`
    /// so the header read before it is still available.
    pending_error: Option<ReadError>,
    entries: usize,
    finished: bool,
    last_entry: Position,
    root: Position,
}

impl<R: BufRead> DocumentReader<R> {
    /// Starts reading: parses everything up to the first entry.
    ///
    /// # Errors
    /// When the prolog is malformed (or has a DOCTYPE) or the root is not a Sitemap
    /// `<urlset>`/`<sitemapindex>` in the Sitemap namespace. Errors further in are returned by
    /// the first [`next_entry`](Self::next_entry), so the header read so far stays available.
    pub fn new(input: R, opts: ReadOptions) -> Result<Self, ReadError> {
        let mut xml = Reader::from_reader(Tracked::new(input, opts.max_bytes));
        let config = xml.config_mut();
        config.check_end_names = true;
        config.expand_empty_elements = false;
        config.check_comments = true;
        let core = Core {
            xml,
            ns: NamespaceResolver::default(),
            pending_pop: false,
            xmlns: memchr::memmem::Finder::new("xmlns"),
            prefix_classes: Vec::new(),
            decl_levels: Vec::new(),
            opts,
            depth: 0,
            diagnostics: Vec::new(),
            event_start: 0,
        };
        let mut reader = DocumentReader {
            core,
            buf: Vec::with_capacity(4096),
            text_buf: String::with_capacity(256),
            header: Header::default(),
            pending: None,
            pending_error: None,
            entries: 0,
            finished: false,
            last_entry: Position::default(),
            root: Position::default(),
        };
        reader.read_prolog()?;
        reader.read_header();
        Ok(reader)
    }

    /// The root metadata. Root links that (wrongly) follow the entries are added as they are met.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Where the root element starts (header findings are reported here).
    pub fn root_position(&self) -> Position {
        self.root
    }

    /// Findings gathered so far (value errors and leniencies), in document order.
    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.core.diagnostics
    }

    /// Takes the findings gathered so far.
    pub fn take_diagnostics(&mut self) -> Vec<Diagnostic> {
        std::mem::take(&mut self.core.diagnostics)
    }

    /// Where the entry most recently returned by [`next_entry`](Self::next_entry) starts.
    pub fn entry_position(&self) -> Position {
        self.last_entry
    }

    /// Entries returned so far.
    pub fn entry_count(&self) -> usize {
        self.entries
    }

    /// The next entry, or `None` once the root element has closed and the document ended
    /// cleanly.
    ///
    /// # Errors
    /// On malformed XML, truncation, or a broken limit. After an error the reader is done.
    pub fn next_entry(&mut self) -> Result<Option<Entry>, ReadError> {
        if let Some((entry, pos)) = self.pending.take() {
            self.last_entry = pos;
            return Ok(Some(entry));
        }
        if let Some(e) = self.pending_error.take() {
            return Err(e);
        }
        if self.finished {
            return Ok(None);
        }
        match self.read_root_child()? {
            Some((entry, pos)) => {
                self.last_entry = pos;
                Ok(Some(entry))
            }
            None => Ok(None),
        }
    }

    /// Reads the rest of the document into memory.
    ///
    /// # Errors
    /// As [`next_entry`](Self::next_entry).
    pub fn into_document(mut self) -> Result<(Document, Vec<Diagnostic>), ReadError> {
        let mut entries = Vec::new();
        while let Some(e) = self.next_entry()? {
            entries.push(e);
        }
        Ok((Document { header: self.header, entries }, self.core.diagnostics))
    }

    fn read_prolog(&mut self) -> Result<(), ReadError> {
        loop {
            let ev = self.core.next(&mut self.buf)?;
            match ev {
                Event::Decl(_) | Event::Comment(_) | Event::PI(_) => {}
                Event::Text(t) if t.as_ref().trim().is_empty() => {}
                Event::Start(ref e) | Event::Empty(ref e) => {
                    let empty = matches!(ev, Event::Empty(_));
                    self.root = self.core.position(self.core.event_start);
                    let format = self.core.root_format(e)?;
                    self.header.format = Some(format);
                    let (namespaces, extra) = self.core.root_attributes(e)?;
                    self.header.namespaces = namespaces;
                    self.header.extra = extra;
                    if empty {
                        self.core.finish_document(&mut self.buf)?;
                        self.finished = true;
                    }
                    return Ok(());
                }
                Event::Eof => return Err(self.core.error(ReadErrorKind::Empty)),
                _ => return Err(self.core.error(ReadErrorKind::ContentBeforeRoot)),
            }
        }
    }

    fn read_header(&mut self) {
        if self.finished {
            return;
        }
        match self.read_root_child() {
            Ok(first) => self.pending = first,
            Err(e) => {
                self.pending_error = Some(e);
                self.finished = true;
            }
        }
    }

    /// Reads root-level content until the next entry (returned) or the end of the root.
    fn read_root_child(&mut self) -> Result<Option<(Entry, Position)>, ReadError> {
        let format = self.header.format.unwrap_or(RootFormat::UrlSet);
        loop {
            let ev = self.core.next(&mut self.buf)?;
            let start = self.core.event_start;
            match ev {
                Event::Start(ref e) | Event::Empty(ref e) => {
                    let empty = matches!(ev, Event::Empty(_));
                    let (ns, local) = self.core.classify(e);
                    match (ns, local.as_ref()) {
                        (Ns::Sitemap, l) if l == format.entry_name() => {
                            let pos = self.core.position(start);
                            self.count_entry()?;
                            let entry = if empty {
                                let msg = format!("<{l}> without <loc>");
                                self.core.diagnostics.push(Diagnostic::error(pos, "7", msg));
                                Entry::default()
                            } else {
                                self.core.read_entry(&mut self.buf, &mut self.text_buf, format, pos)?
                            };
                            return Ok(Some((entry, pos)));
                        }
                        (Ns::Rs, "md") => {
                            let md = self.core.parse_md(e, start)?;
                            self.root_md(md, empty, start)?;
                        }
                        (Ns::Rs, "ln") => {
                            let link = self.core.parse_link(e, start)?;
                            self.root_link(link, empty, start)?;
                        }
                        (Ns::Other, _) => {
                            let head = self.core.extension_head(e)?;
                            let ext = self.core.read_extension(head, empty, &mut self.buf)?;
                            self.header.extensions.push(ext);
                        }
                        _ => {
                            let name = e.name().as_ref().to_owned();
                            self.core.skip_unknown(name, empty, start, &mut self.buf)?;
                        }
                    }
                }
                Event::End(_) => {
                    self.core.finish_document(&mut self.buf)?;
                    self.finished = true;
                    return Ok(None);
                }
                Event::Text(t) => self.core.stray_text(t.as_ref(), start),
                Event::GeneralRef(r) => self.core.stray_ref(&r, start)?,
                Event::CData(_) => {
                    self.core.warn_at(start, "7", "character data directly in the root element is ignored")
                }
                Event::Comment(_) | Event::PI(_) => {}
                Event::Eof => return Err(self.core.truncated()),
                Event::Decl(_) | Event::DocType(_) => return Err(self.core.error(ReadErrorKind::Doctype)),
            }
        }
    }

    fn count_entry(&mut self) -> Result<(), ReadError> {
        self.entries += 1;
        if self.entries > self.core.opts.max_entries {
            return Err(self.core.error(ReadErrorKind::TooManyEntries(self.core.opts.max_entries)));
        }
        Ok(())
    }

    fn root_md(&mut self, md: Md, empty: bool, start: u64) -> Result<(), ReadError> {
        if !empty {
            self.core.skip_children(&mut self.buf, start)?;
        }
        if self.header.md.is_some() {
            let pos = self.core.position(start);
            self.core.diagnostics.push(Diagnostic::error(pos, "7", "the root has more than one <rs:md>"));
        } else {
            self.header.md = Some(md);
        }
        Ok(())
    }

    fn root_link(&mut self, link: Link, empty: bool, start: u64) -> Result<(), ReadError> {
        if !empty {
            self.core.skip_children(&mut self.buf, start)?;
        }
        if self.entries > 0 {
            let pos = self.core.position(start);
            self.core.warn(pos, "7", "root <rs:ln> after the entries; it belongs before them");
        }
        self.header.links.push(link);
        Ok(())
    }
}

impl<R: BufRead> Core<R> {
    /// Reads one event, maintaining depth and turning parser failures into positioned errors.
    fn next<'b>(&mut self, buf: &'b mut Vec<u8>) -> Result<Event<'b>, ReadError> {
        buf.clear();
        if self.pending_pop {
            self.ns.pop();
            self.pending_pop = false;
            while self.decl_levels.last().is_some_and(|&l| l > self.ns.level()) {
                self.decl_levels.pop();
                self.prefix_classes.clear();
            }
        }
        self.event_start = self.xml.buffer_position();
        let ev = match self.xml.read_event_into(buf) {
            Ok(ev) => ev,
            Err(e) => return Err(self.parser_error(e)),
        };
        match &ev {
            Event::Start(e) => {
                self.push_scope(e)?;
                self.depth += 1;
                if self.depth > self.opts.max_depth {
                    return Err(self.error(ReadErrorKind::TooDeep(self.opts.max_depth)));
                }
            }
            Event::Empty(e) => {
                self.push_scope(e)?;
                self.pending_pop = true;
            }
            Event::End(_) => {
                self.pending_pop = true;
                self.depth = self.depth.saturating_sub(1);
            }
            Event::DocType(_) => return Err(self.error(ReadErrorKind::Doctype)),
            Event::Eof if self.xml.get_ref().exceeded() => {
                return Err(self.error(ReadErrorKind::TooLarge(self.opts.max_bytes)));
            }
            _ => {}
        }
        Ok(ev)
    }

    /// Opens the namespace scope of a start tag, as `NsReader` does, but walks the attributes
    /// only when the tag contains `xmlns`: without it no attribute can be a declaration, and
    /// the scope is just one level deeper.
    fn push_scope(&mut self, e: &BytesStart<'_>) -> Result<(), ReadError> {
        let level = self.ns.level();
        let raw = e.attributes_raw().as_bytes();
        if level < u16::MAX && (raw.len() < "xmlns".len() || self.xmlns.find(raw).is_none()) {
            self.ns.set_level(level + 1);
            return Ok(());
        }
        self.ns.push(e).map_err(|err| self.parser_error(err.into()))?;
        self.decl_levels.push(self.ns.level());
        self.prefix_classes.clear();
        Ok(())
    }

    fn parser_error(&self, e: quick_xml::Error) -> ReadError {
        if self.xml.get_ref().exceeded() {
            return self.error(ReadErrorKind::TooLarge(self.opts.max_bytes));
        }
        let offset = self.xml.error_position();
        let kind = match e {
            quick_xml::Error::Io(io) => ReadErrorKind::Io(io::Error::new(io.kind(), io.to_string())),
            quick_xml::Error::Syntax(s) if self.depth > 0 => {
                ReadErrorKind::Truncated { detail: Some(s.to_string()), depth: self.depth }
            }
            quick_xml::Error::Escape(esc) => ReadErrorKind::UndefinedEntity(esc.to_string()),
            other => ReadErrorKind::Malformed(other.to_string()),
        };
        self.error_at(offset, kind)
    }

    fn position(&self, offset: u64) -> Position {
        self.xml.get_ref().position(offset)
    }

    fn error(&self, kind: ReadErrorKind) -> ReadError {
        self.error_at(self.event_start, kind)
    }

    fn error_at(&self, offset: u64, kind: ReadErrorKind) -> ReadError {
        ReadError { document: self.opts.name.clone(), position: self.position(offset), kind }
    }

    fn truncated(&self) -> ReadError {
        if self.xml.get_ref().exceeded() {
            return self.error(ReadErrorKind::TooLarge(self.opts.max_bytes));
        }
        self.error(ReadErrorKind::Truncated { detail: None, depth: self.depth })
    }

    fn warn(&mut self, pos: Position, section: &'static str, msg: impl Into<String>) {
        self.diagnostics.push(Diagnostic::warning(pos, section, msg));
    }

    fn warn_at(&mut self, offset: u64, section: &'static str, msg: impl Into<String>) {
        let pos = self.position(offset);
        self.warn(pos, section, msg);
    }

    fn value_error(&mut self, offset: u64, section: &'static str, msg: impl Into<String>) {
        let pos = self.position(offset);
        self.diagnostics.push(Diagnostic::error(pos, section, msg));
    }

    /// The namespace class and local name of an element. Names ResourceSync cares about come
    /// back as static strings, so the per-entry hot path allocates nothing here.
    fn classify(&mut self, e: &BytesStart<'_>) -> (Ns, Cow<'static, str>) {
        // Split as `QName::decompose` does (at the first colon).
        let name = e.name().into_inner();
        let (prefix, local) = match name.bytes().position(|b| b == b':') {
            Some(i) => (&name[..i], &name[i + 1..]),
            None => ("", name),
        };
        let ns = match self.prefix_classes.iter().find(|(p, _)| p == prefix) {
            Some(&(_, ns)) => ns,
            None => {
                let ns = match self.ns.resolve_element(e.name()).0 {
                    ResolveResult::Bound(ns) if ns.as_ref() == SITEMAP_NS => Ns::Sitemap,
                    ResolveResult::Bound(ns) if ns.as_ref() == RS_NS => Ns::Rs,
                    _ => Ns::Other,
                };
                // Bounded: a hostile document may use any number of undeclared prefixes.
                if self.prefix_classes.len() < 8 {
                    self.prefix_classes.push((prefix.to_owned(), ns));
                }
                ns
            }
        };
        let local: Cow<'static, str> = match local {
            "url" => Cow::Borrowed("url"),
            "sitemap" => Cow::Borrowed("sitemap"),
            "loc" => Cow::Borrowed("loc"),
            "lastmod" => Cow::Borrowed("lastmod"),
            "md" => Cow::Borrowed("md"),
            "ln" => Cow::Borrowed("ln"),
            "changefreq" => Cow::Borrowed("changefreq"),
            "priority" => Cow::Borrowed("priority"),
            other => Cow::Owned(other.to_owned()),
        };
        (ns, local)
    }

    fn root_format(&self, e: &BytesStart<'_>) -> Result<RootFormat, ReadError> {
        let (res, local) = self.ns.resolve_element(e.name());
        let format = match local.as_ref() {
            "urlset" => RootFormat::UrlSet,
            "sitemapindex" => RootFormat::SitemapIndex,
            other => {
                let found = other.to_owned();
                return Err(self.error(ReadErrorKind::NotSitemap(found)));
            }
        };
        match res {
            ResolveResult::Bound(ns) if ns.as_ref() == SITEMAP_NS => Ok(format),
            ResolveResult::Bound(ns) => {
                let found = Some(ns.as_ref().to_owned());
                Err(self.error(ReadErrorKind::WrongNamespace { element: format.root_name(), found }))
            }
            _ => Err(self.error(ReadErrorKind::WrongNamespace { element: format.root_name(), found: None })),
        }
    }

    /// Namespace declarations worth keeping and other root attributes.
    fn root_attributes(&self, e: &BytesStart<'_>) -> Result<RootAttributes, ReadError> {
        let mut namespaces = Vec::new();
        let mut extra = Vec::new();
        for attr in e.attributes() {
            let attr = attr.map_err(|err| self.error(ReadErrorKind::Malformed(err.to_string())))?;
            if let Some(binding) = attr.key.as_namespace_binding() {
                let uri = self.attr_value(&attr)?.into_owned();
                if uri != SITEMAP_NS && uri != RS_NS {
                    let prefix = match binding {
                        quick_xml::name::PrefixDeclaration::Named(p) => p.to_owned(),
                        quick_xml::name::PrefixDeclaration::Default => String::new(),
                    };
                    namespaces.push((prefix, uri));
                }
                continue;
            }
            extra.push(self.foreign_attr(&attr)?);
        }
        Ok((namespaces, extra))
    }

    fn attr_value<'a>(&self, attr: &'a Attribute<'a>) -> Result<Cow<'a, str>, ReadError> {
        // Most values hold nothing to normalise or unescape; skip the general path for them.
        let raw: &str = attr.value.as_ref();
        if memchr::memchr3(b'&', b'\t', b'\n', raw.as_bytes()).is_none()
            && memchr::memchr(b'\r', raw.as_bytes()).is_none()
        {
            return Ok(Cow::Borrowed(raw));
        }
        attr.normalized_value(quick_xml::XmlVersion::Implicit1_0).map_err(|e| match e {
            quick_xml::Error::Escape(esc) => self.error(ReadErrorKind::UndefinedEntity(esc.to_string())),
            other => self.error(ReadErrorKind::Malformed(other.to_string())),
        })
    }

    fn foreign_attr(&self, attr: &Attribute<'_>) -> Result<ForeignAttr, ReadError> {
        let (res, local) = self.ns.resolve_attribute(attr.key);
        let ns = match res {
            ResolveResult::Bound(ns) => Some(ns.as_ref().to_owned()),
            _ => None,
        };
        Ok(ForeignAttr {
            ns,
            prefix: attr.key.prefix().map(|p| p.as_ref().to_owned()),
            local: local.as_ref().to_owned(),
            value: self.attr_value(attr)?.into_owned(),
        })
    }

    /// Iterates the ResourceSync attributes (unprefixed) of an `rs:` element, handing foreign
    /// ones to `extra`.
    fn rs_attributes(
        &mut self,
        e: &BytesStart<'_>,
        mut each: impl FnMut(&mut Self, &str, &str),
    ) -> Result<Vec<ForeignAttr>, ReadError> {
        if let Some(simple) = SimpleAttrs::scan(e.attributes_raw()) {
            for &(key, value) in simple.as_slice() {
                each(self, key, value);
            }
            return Ok(Vec::new());
        }
        let mut extra = Vec::new();
        for attr in e.attributes() {
            let attr = attr.map_err(|err| self.error(ReadErrorKind::Malformed(err.to_string())))?;
            if attr.key.as_namespace_binding().is_some() {
                continue;
            }
            if attr.key.prefix().is_some() {
                extra.push(self.foreign_attr(&attr)?);
                continue;
            }
            let value = self.attr_value(&attr)?;
            each(self, attr.key.local_name().as_ref(), value.as_ref());
        }
        Ok(extra)
    }

    fn parse_md(&mut self, e: &BytesStart<'_>, start: u64) -> Result<Md, ReadError> {
        let mut md = Md::default();
        let mut unknown = Vec::new();
        md.extra = self.rs_attributes(e, |core, key, value| match key {
            "capability" => md.capability = core.capability(value, start),
            "at" => md.at = core.datetime("at", value, start),
            "completed" => md.completed = core.datetime("completed", value, start),
            "from" => md.from = core.datetime("from", value, start),
            "until" => md.until = core.datetime("until", value, start),
            "datetime" => md.datetime = core.datetime("datetime", value, start),
            "change" => md.change = core.change(value, start),
            "encoding" => md.encoding = Some(value.to_owned()),
            "hash" => md.hash = core.hash(value, start),
            "length" => md.length = core.length(value, start),
            "path" => md.path = Some(value.to_owned()),
            "type" => md.media_type = Some(value.to_owned()),
            other => {
                unknown.push(ForeignAttr { ns: None, prefix: None, local: other.to_owned(), value: value.to_owned() })
            }
        })?;
        for attr in unknown {
            self.warn_at(
                start,
                "7",
                format!("<rs:md> attribute `{}` is not defined by ResourceSync; kept", attr.local),
            );
            md.extra.push(attr);
        }
        Ok(md)
    }

    fn parse_link(&mut self, e: &BytesStart<'_>, start: u64) -> Result<Link, ReadError> {
        let mut link = Link::default();
        let (mut has_rel, mut has_href) = (false, false);
        let mut unknown = Vec::new();
        link.extra = self.rs_attributes(e, |core, key, value| match key {
            "rel" => (link.rel, has_rel) = (value.trim().to_owned(), true),
            "href" => (link.href, has_href) = (value.trim().to_owned(), true),
            "encoding" => link.encoding = Some(value.to_owned()),
            "hash" => link.hash = core.hash(value, start),
            "length" => link.length = core.length(value, start),
            "modified" => link.modified = core.datetime("modified", value, start),
            "path" => link.path = Some(value.to_owned()),
            "pri" => link.pri = core.pri(value, start),
            "type" => link.media_type = Some(value.to_owned()),
            other => {
                unknown.push(ForeignAttr { ns: None, prefix: None, local: other.to_owned(), value: value.to_owned() })
            }
        })?;
        for attr in unknown {
            self.warn_at(
                start,
                "7",
                format!("<rs:ln> attribute `{}` is not defined by ResourceSync; kept", attr.local),
            );
            link.extra.push(attr);
        }
        if !has_rel || link.rel.is_empty() {
            self.value_error(start, "7", "<rs:ln> without a `rel` attribute");
        }
        if !has_href || link.href.is_empty() {
            self.value_error(start, "7", "<rs:ln> without an `href` attribute");
        }
        Ok(link)
    }

    fn capability(&mut self, value: &str, start: u64) -> Option<Capability> {
        if let Some(c) = Capability::from_exact(value) {
            return Some(c);
        }
        let folded = value.trim().to_ascii_lowercase();
        // Change Notification 0.9 and 1.0 named the payload `changelist-notification`; 1.0.1
        // made it `change-notification` everywhere. Sources written to the older text still
        // push, so the old name is read as the new one.
        if folded == "changelist-notification" {
            let c = Capability::ChangeNotification;
            self.warn_at(start, "7", format!("capability `{value}` (Change Notification 1.0) read as `{c}`"));
            return Some(c);
        }
        if let Some(c) = Capability::from_exact(&folded) {
            self.warn_at(start, "7", format!("capability `{value}` read as `{c}` (values are lowercase)"));
            return Some(c);
        }
        self.value_error(
            start,
            "7",
            format!(
                "unknown capability `{value}` (expected one of resourcelist, changelist, resourcedump, \
                 changedump, resourcedump-manifest, changedump-manifest, capabilitylist, description)"
            ),
        );
        None
    }

    fn change(&mut self, value: &str, start: u64) -> Option<Change> {
        if let Some(c) = Change::from_exact(value) {
            return Some(c);
        }
        if let Some(c) = Change::from_exact(&value.trim().to_ascii_lowercase()) {
            self.warn_at(start, "7", format!("change `{value}` read as `{c}` (values are lowercase)"));
            return Some(c);
        }
        self.value_error(start, "7", format!("unknown change `{value}` (expected created, updated or deleted)"));
        None
    }

    fn datetime(&mut self, attr: &str, value: &str, start: u64) -> Option<W3cDateTime> {
        match value.parse::<W3cDateTime>() {
            Ok(t) => Some(t),
            Err(e) => {
                self.value_error(start, "7", format!("attribute `{attr}`: {e}"));
                None
            }
        }
    }

    fn length(&mut self, value: &str, start: u64) -> Option<u64> {
        match value.trim().parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => {
                self.value_error(start, "7", format!("length `{value}` is not a non-negative integer"));
                None
            }
        }
    }

    fn pri(&mut self, value: &str, start: u64) -> Option<u32> {
        match value.trim().parse::<u32>() {
            Ok(n) if (1..=999_999).contains(&n) => Some(n),
            _ => {
                self.value_error(start, "7", format!("pri `{value}` is not an integer between 1 and 999999"));
                None
            }
        }
    }

    fn hash(&mut self, value: &str, start: u64) -> Option<HashList> {
        match HashList::parse(value) {
            Ok((list, notes)) => {
                for note in notes {
                    let msg = match note {
                        HashNote::Base64(a) => format!("{} digest is base64, not hex; converted", a.as_str()),
                        HashNote::UpperHex(a) => format!("{} digest is uppercase hex; lowercased", a.as_str()),
                        HashNote::Conflicting(a) => {
                            format!("two different {} digests in one hash attribute", a.as_str())
                        }
                    };
                    self.warn_at(start, "7", msg);
                }
                Some(list)
            }
            Err(e) => {
                self.value_error(start, "7", e.to_string());
                None
            }
        }
    }

    /// Reads a `<url>`/`<sitemap>` element whose start tag was just read.
    fn read_entry(
        &mut self,
        buf: &mut Vec<u8>,
        text: &mut String,
        format: RootFormat,
        pos: Position,
    ) -> Result<Entry, ReadError> {
        let mut entry = Entry::default();
        let mut seen_loc = false;
        let entry_depth = self.depth;
        loop {
            let ev = self.next(buf)?;
            let start = self.event_start;
            match ev {
                Event::Start(ref e) | Event::Empty(ref e) => {
                    let empty = matches!(ev, Event::Empty(_));
                    let (ns, local) = self.classify(e);
                    match (ns, local.as_ref()) {
                        (Ns::Sitemap, "loc" | "lastmod" | "changefreq" | "priority") => {
                            if empty {
                                text.clear();
                            } else {
                                self.read_text(buf, text)?;
                            }
                            self.entry_field(&mut entry, &local, text, start, &mut seen_loc);
                        }
                        (Ns::Rs, "md") => {
                            let md = self.parse_md(e, start)?;
                            if !empty {
                                self.skip_children(buf, start)?;
                            }
                            if entry.md.is_some() {
                                self.value_error(start, "7", "an entry has more than one <rs:md>");
                            } else {
                                entry.md = Some(md);
                            }
                        }
                        (Ns::Rs, "ln") => {
                            let link = self.parse_link(e, start)?;
                            if !empty {
                                self.skip_children(buf, start)?;
                            }
                            entry.links.push(link);
                        }
                        (Ns::Other, _) => {
                            let head = self.extension_head(e)?;
                            let ext = self.read_extension(head, empty, buf)?;
                            entry.extensions.push(ext);
                        }
                        _ => {
                            let name = e.name().as_ref().to_owned();
                            self.skip_unknown(name, empty, start, buf)?;
                        }
                    }
                }
                Event::End(_) if self.depth < entry_depth => break,
                Event::End(_) => {}
                Event::Text(t) => self.stray_text(t.as_ref(), start),
                Event::GeneralRef(r) => self.stray_ref(&r, start)?,
                Event::CData(_) | Event::Comment(_) | Event::PI(_) => {}
                Event::Eof => return Err(self.truncated()),
                Event::Decl(_) | Event::DocType(_) => return Err(self.error(ReadErrorKind::Doctype)),
            }
        }
        if !seen_loc {
            self.diagnostics.push(Diagnostic::error(pos, "7", format!("<{}> without <loc>", format.entry_name())));
        } else if entry.loc.is_empty() {
            self.diagnostics.push(Diagnostic::error(pos, "7", "empty <loc>: the entry names no resource"));
        }
        Ok(entry)
    }

    /// Stores one simple field; the value is copied only where the entry keeps it (a
    /// `<lastmod>` is parsed straight from the reused text buffer).
    fn entry_field(&mut self, entry: &mut Entry, local: &str, value: &str, start: u64, seen_loc: &mut bool) {
        match local {
            "loc" => {
                if *seen_loc {
                    self.value_error(start, "7", "an entry has more than one <loc>");
                }
                *seen_loc = true;
                value.clone_into(&mut entry.loc);
            }
            "lastmod" => {
                entry.lastmod = match value.parse::<W3cDateTime>() {
                    Ok(t) => Some(t),
                    Err(e) => {
                        self.value_error(start, "7", format!("<lastmod>: {e}"));
                        None
                    }
                }
            }
            "changefreq" => {
                const FREQS: [&str; 7] = ["always", "hourly", "daily", "weekly", "monthly", "yearly", "never"];
                if !FREQS.contains(&value) {
                    self.warn_at(start, "7", format!("<changefreq> `{value}` is not a Sitemap change frequency"));
                }
                entry.changefreq = Some(value.to_owned());
            }
            _ => entry.priority = Some(value.to_owned()),
        }
    }

    /// Collects the text content of a simple element (`<loc>` …) whose start was just read into
    /// `text`, trimmed and with CRLF line ends as LF.
    fn read_text(&mut self, buf: &mut Vec<u8>, text: &mut String) -> Result<(), ReadError> {
        text.clear();
        let depth = self.depth;
        loop {
            let ev = self.next(buf)?;
            match ev {
                Event::Text(t) => text.push_str(t.as_ref()),
                Event::CData(c) => text.push_str(c.as_ref()),
                Event::GeneralRef(r) => text.push(self.resolve_ref(&r)?),
                Event::End(_) if self.depth < depth => break,
                Event::Comment(_) | Event::PI(_) => {}
                Event::Eof => return Err(self.truncated()),
                Event::Start(_) | Event::Empty(_) | Event::End(_) => {
                    return Err(self.error(ReadErrorKind::Malformed("unexpected element inside a text element".into())));
                }
                Event::Decl(_) | Event::DocType(_) => return Err(self.error(ReadErrorKind::Doctype)),
            }
        }
        // Trimmed in place: the buffer is reused for every field of every entry.
        let end = text.trim_end().len();
        text.truncate(end);
        let start = text.len() - text.trim_start().len();
        text.drain(..start);
        if text.contains('\r') {
            *text = text.replace("\r\n", "\n");
        }
        Ok(())
    }

    fn resolve_ref(&self, r: &BytesRef<'_>) -> Result<char, ReadError> {
        if r.is_char_ref() {
            return match r.resolve_char_ref() {
                Ok(Some(c)) => Ok(c),
                _ => Err(self.error(ReadErrorKind::UndefinedEntity(format!("&{};", r.as_ref())))),
            };
        }
        // The five entities XML predefines; a feed or list has no DOCTYPE to define others.
        match quick_xml::escape::resolve_xml_entity(r.as_ref()).and_then(|s| s.chars().next()) {
            Some(c) => Ok(c),
            None => Err(self.error(ReadErrorKind::UndefinedEntity(format!("&{};", r.as_ref())))),
        }
    }

    /// Reads an element in a foreign namespace (start just read) with all its content.
    fn read_extension(&mut self, head: Extension, empty: bool, buf: &mut Vec<u8>) -> Result<Extension, ReadError> {
        let mut root = head;
        if empty {
            return Ok(root);
        }
        // An explicit stack instead of recursion: depth is already capped by `next`.
        let mut stack: Vec<Extension> = Vec::new();
        // Text is gathered across text, CDATA and reference events and kept only if it is not
        // all whitespace: whitespace-only text between elements is indentation, and dropping
        // it keeps read → write → read stable whatever indentation was used.
        let mut text = String::new();
        let base = self.depth;
        loop {
            let ev = self.next(buf)?;
            if matches!(ev, Event::Start(_) | Event::Empty(_) | Event::End(_)) {
                flush_text(stack.last_mut().unwrap_or(&mut root), &mut text);
            }
            match ev {
                Event::Start(ref e) => stack.push(self.extension_head(e)?),
                Event::Empty(ref e) => {
                    let head = self.extension_head(e)?;
                    stack.last_mut().unwrap_or(&mut root).children.push(ExtNode::Element(head));
                }
                Event::End(_) if self.depth < base => return Ok(root),
                Event::End(_) => {
                    let done = stack.pop().expect("depth tracking keeps the stack in step");
                    stack.last_mut().unwrap_or(&mut root).children.push(ExtNode::Element(done));
                }
                Event::Text(t) => text.push_str(&t.xml10_content()),
                Event::CData(c) => text.push_str(c.as_ref()),
                Event::GeneralRef(r) => text.push(self.resolve_ref(&r)?),
                Event::Comment(_) | Event::PI(_) => {}
                Event::Eof => return Err(self.truncated()),
                Event::Decl(_) | Event::DocType(_) => return Err(self.error(ReadErrorKind::Doctype)),
            }
        }
    }

    fn extension_head(&self, e: &BytesStart<'_>) -> Result<Extension, ReadError> {
        let (res, local) = self.ns.resolve_element(e.name());
        let ns = match res {
            ResolveResult::Bound(ns) => Some(ns.as_ref().to_owned()),
            _ => None,
        };
        let mut attrs = Vec::new();
        for attr in e.attributes() {
            let attr = attr.map_err(|err| self.error(ReadErrorKind::Malformed(err.to_string())))?;
            // Declarations are not kept: the writer derives the ones it needs from each
            // element's and attribute's (prefix, namespace), so round trips are stable.
            if attr.key.as_namespace_binding().is_some() {
                continue;
            }
            attrs.push(self.foreign_attr(&attr)?);
        }
        Ok(Extension {
            ns,
            prefix: e.name().prefix().map(|p| p.as_ref().to_owned()),
            local: local.as_ref().to_owned(),
            attrs,
            children: Vec::new(),
        })
    }

    fn skip_unknown(&mut self, name: String, empty: bool, start: u64, buf: &mut Vec<u8>) -> Result<(), ReadError> {
        self.warn_at(start, "7", format!("unexpected element <{name}> ignored"));
        if !empty {
            self.skip_children(buf, start)?;
        }
        Ok(())
    }

    /// Skips to the end of the element whose start tag was just read.
    fn skip_children(&mut self, buf: &mut Vec<u8>, _start: u64) -> Result<(), ReadError> {
        let depth = self.depth;
        loop {
            match self.next(buf)? {
                Event::End(_) if self.depth < depth => return Ok(()),
                Event::GeneralRef(r) => {
                    self.resolve_ref(&r)?;
                }
                Event::Eof => return Err(self.truncated()),
                _ => {}
            }
        }
    }

    fn stray_text(&mut self, t: &str, start: u64) {
        if !t.trim().is_empty() {
            self.warn_at(start, "7", "stray text between elements ignored");
        }
    }

    fn stray_ref(&mut self, r: &BytesRef<'_>, start: u64) -> Result<(), ReadError> {
        self.resolve_ref(r)?;
        self.warn_at(start, "7", "stray text between elements ignored");
        Ok(())
    }

    /// After the root closes: only whitespace, comments and PIs may follow.
    fn finish_document(&mut self, buf: &mut Vec<u8>) -> Result<(), ReadError> {
        loop {
            match self.next(buf)? {
                Event::Eof => return Ok(()),
                Event::Comment(_) | Event::PI(_) => {}
                Event::Text(t) if t.as_ref().trim().is_empty() => {}
                _ => return Err(self.error(ReadErrorKind::ContentAfterRoot)),
            }
        }
    }
}

/// The attributes of a start tag in the shape nearly every `<rs:md>` and `<rs:ln>` has:
/// unprefixed names, `name="value"` with nothing to unescape or normalise, whitespace between,
/// no duplicates. quick-xml's general iterator walks values byte by byte and allocates for its
/// duplicate check; this scan finds each closing quote with memchr. Anything else (prefixes,
/// declarations, references, odd spacing, errors) returns `None` and takes the general path,
/// which gives the same keys and values where both apply.
struct SimpleAttrs<'a> {
    attrs: [(&'a str, &'a str); SimpleAttrs::MAX],
    len: usize,
}

impl<'a> SimpleAttrs<'a> {
    /// Table 3 has at most nine attributes per element; more take the general path.
    const MAX: usize = 10;

    fn scan(raw: &'a str) -> Option<Self> {
        let b = raw.as_bytes();
        // One branch-free (vectorisable) pass over the whole tag for anything needing
        // unescaping or normalising, or spacing other than plain spaces: `&`, or a control
        // character (tab, CR and LF among them). Cheaper than two memchr calls on a short tag.
        if !b.iter().fold(true, |ok, &c| ok & (c != b'&') & (c >= b' ')) {
            return None;
        }
        let mut out = SimpleAttrs { attrs: [("", ""); Self::MAX], len: 0 };
        let mut i = 0;
        loop {
            while i < b.len() && b[i] == b' ' {
                i += 1;
            }
            if i == b.len() {
                return Some(out);
            }
            let key_start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || matches!(b[i], b'_' | b'-' | b'.')) {
                i += 1;
            }
            if i == key_start || i + 1 >= b.len() || b[i] != b'=' || out.len == Self::MAX {
                return None;
            }
            let key = &raw[key_start..i];
            let quote = b[i + 1];
            if quote != b'"' && quote != b'\'' {
                return None;
            }
            let value_start = i + 2;
            let value_len = memchr::memchr(quote, &b[value_start..])?;
            let value = &raw[value_start..value_start + value_len];
            i = value_start + value_len + 1;
            let separated = i == b.len() || b[i] == b' ';
            if !separated || key.starts_with("xmlns") || out.as_slice().iter().any(|&(k, _)| k == key) {
                return None;
            }
            out.attrs[out.len] = (key, value);
            out.len += 1;
        }
    }

    fn as_slice(&self) -> &[(&'a str, &'a str)] {
        &self.attrs[..self.len]
    }
}

fn flush_text(el: &mut Extension, text: &mut String) {
    if !text.trim().is_empty() {
        el.children.push(ExtNode::Text(std::mem::take(text)));
    }
    text.clear();
}

/// Reads a whole document from bytes.
///
/// # Errors
/// See [`DocumentReader::new`] and [`DocumentReader::next_entry`].
pub fn read_document(bytes: &[u8], opts: ReadOptions) -> Result<(Document, Vec<Diagnostic>), ReadError> {
    DocumentReader::new(bytes, opts)?.into_document()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Wherever the plain-attribute scan answers, it must give what quick-xml's iterator (and
    /// `attr_value`'s normalisation) gives.
    #[test]
    fn the_simple_attribute_scan_agrees_with_quick_xml() {
        let cases = [
            r#"rs:md hash="md5:1e0d" length="2481" type="application/xml""#,
            r#"rs:md a='1' b="2""#,
            r#"rs:md   a="1"   "#,
            r#"rs:md a="x'y" b='x"y'"#,
            r#"rs:md a="""#,
            r#"rs:md a="1"b="2""#,
            r#"rs:md a = "1""#,
            r#"rs:md a="1" a="2""#,
            r#"rs:md a="a&amp;b""#,
            "rs:md a=\"tab\there\"",
            "rs:md a=\"1\"\nb=\"2\"",
            r#"rs:md x:a="1" xmlns:x="urn:x""#,
            r#"rs:md xmlns="urn:x" a="1""#,
            r#"rs:md a="1"#,
            r#"rs:md a=1"#,
            r#"rs:md a"#,
            r#"rs:md é="1""#,
            r#"rs:md a-b.c_d="1" e="é""#,
        ];
        for content in cases {
            let e = BytesStart::from_content(content, "rs:md".len());
            let Some(simple) = SimpleAttrs::scan(e.attributes_raw()) else { continue };
            let general: Vec<(String, String)> = e
                .attributes()
                .map(|a| {
                    let a = a.expect("the scan only accepts well-formed attributes");
                    let value = a.normalized_value(quick_xml::XmlVersion::Implicit1_0).unwrap();
                    (a.key.as_ref().to_owned(), value.into_owned())
                })
                .collect();
            let scanned: Vec<(String, String)> =
                simple.as_slice().iter().map(|&(k, v)| (k.to_owned(), v.to_owned())).collect();
            assert_eq!(scanned, general, "{content:?}");
        }
        let plain = BytesStart::from_content(r#"rs:md hash="md5:1e0d" length="1""#, 5);
        assert_eq!(SimpleAttrs::scan(plain.attributes_raw()).map(|s| s.len), Some(2));
    }
}
