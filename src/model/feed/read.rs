//! Reading an Atom 1.0 or RSS 2.0 feed, with its FeedSync extensions, into a [`Feed`].
//!
//! One streaming pass over any `BufRead` with quick-xml's `NsReader`: elements are matched by
//! namespace URI (`sx:` is whatever prefix binds `http://feedsync.org/2007/feedsync`), never by
//! prefix. Each item's own markup is copied, event by event and byte for byte, into
//! [`FeedItem::xml`] while its fields are picked out, so foreign markup (§2.1.7) survives;
//! only its `sx:sync` is left out, and the namespace declarations it inherited are added to
//! its start tag so the copy stands alone.
//!
//! FeedSync metadata is validated strictly (`read/sync.rs`): a feed that breaks a rule is refused
//! whole, naming the item and the rule, because merging half-understood sync state would
//! spread the damage to every endpoint downstream. What is merely untidy about the feed itself
//! (an item without identity, an unreadable RSS date) becomes a warning instead.
//!
//! Hostile input is stopped here: a DOCTYPE (entity expansion) is refused, and bytes, items,
//! item size and nesting depth are capped, the byte cap as the bytes are read.

use std::collections::HashSet;
use std::io::{self, BufRead};

use quick_xml::NsReader;
use quick_xml::events::{BytesRef, BytesStart, Event};
use quick_xml::name::{PrefixDeclaration, ResolveResult};

use super::{ATOM_NS, Enclosure, Feed, FeedFormat, FeedItem, FeedLink, SX_NS, Sharing, Sync};
use crate::model::W3cDateTime;
use crate::model::position::{Position, Tracked};

mod rfc822;
mod sync;
#[cfg(test)]
mod tests;

/// Caps on what a feed may contain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedLimits {
    /// Bytes of the whole (decoded) document, counted as they are read.
    pub max_bytes: u64,
    /// Items: top-level entries or items, and the versions inside their `sx:conflicts`
    /// (each is a whole item the merge works on).
    pub max_items: usize,
    /// Bytes of one item: its own XML ([`FeedItem::xml`]), and its whole element as read,
    /// `sx:sync` with its history and conflicts included.
    pub max_item_bytes: usize,
    /// Element nesting depth, the root being 1.
    pub max_depth: usize,
    /// `sx:history` elements of one `sx:sync` (an item's, or a conflict's).
    pub max_history: usize,
    /// Versions in one item's `sx:conflicts`.
    pub max_conflicts: usize,
}

/// Default of [`FeedLimits::max_history`] (and of the `feed_max_history` setting).
pub const MAX_HISTORY: usize = 1_000;
/// Default of [`FeedLimits::max_conflicts`] (and of the `feed_max_conflicts` setting).
pub const MAX_CONFLICTS: usize = 100;

impl Default for FeedLimits {
    fn default() -> Self {
        FeedLimits {
            max_bytes: 64 << 20,
            max_items: 100_000,
            max_item_bytes: 4 << 20,
            max_depth: 64,
            max_history: MAX_HISTORY,
            max_conflicts: MAX_CONFLICTS,
        }
    }
}

impl FeedLimits {
    /// Whether `item`'s FeedSync state keeps within [`FeedLimits::max_history`] and
    /// [`FeedLimits::max_conflicts`] (a merge result is checked with it before it is kept);
    /// the broken cap when it does not.
    pub fn sync_within(&self, item: &FeedItem) -> Result<(), SyncCap> {
        let Some(sync) = &item.sync else { return Ok(()) };
        if sync.conflicts.len() > self.max_conflicts {
            return Err(SyncCap::Conflicts(self.max_conflicts));
        }
        let most =
            std::iter::once(item).chain(&sync.conflicts).filter_map(|i| i.sync.as_ref()).map(|s| s.history.len());
        match most.max() {
            Some(n) if n > self.max_history => Err(SyncCap::History(self.max_history)),
            _ => Ok(()),
        }
    }
}

/// Which per-item FeedSync cap was broken, with its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SyncCap {
    /// More `sx:history` than [`FeedLimits::max_history`] in one `sx:sync`.
    #[error("more than {0} sx:history entries")]
    History(usize),
    /// More versions than [`FeedLimits::max_conflicts`] in `sx:conflicts`.
    #[error("more than {0} sx:conflicts versions")]
    Conflicts(usize),
}

/// Why a feed was refused. Nothing of a refused feed is returned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FeedError {
    /// The input could not be read.
    #[error("{document}: read failed: {source}")]
    Io {
        /// URL or path.
        document: String,
        /// The reader's error.
        #[source]
        source: io::Error,
    },
    /// The XML is not well-formed (or ends early).
    #[error("{document}: malformed XML at byte {} (line {position}): {detail}", position.offset)]
    Malformed {
        /// URL or path.
        document: String,
        /// Where the parser stopped.
        position: Position,
        /// Parser detail.
        detail: String,
    },
    /// The document has a DOCTYPE, refused because entity declarations can expand without
    /// bound ("billion laughs") or reach outside the document.
    #[error("{document}: a DOCTYPE at byte {} (line {position}) is refused (entity expansion); feeds need none", position.offset)]
    Doctype {
        /// URL or path.
        document: String,
        /// Where the DOCTYPE starts.
        position: Position,
    },
    /// The root element is neither an Atom `<feed>` nor an RSS `<rss>`.
    #[error("{document}: not a feed: the root element is {root}, not an Atom <feed> or an RSS <rss>")]
    NotAFeed {
        /// URL or path.
        document: String,
        /// The root element's name (and namespace, when it has one).
        root: String,
    },
    /// More bytes than [`FeedLimits::max_bytes`].
    #[error("{document}: larger than the limit of {limit} bytes; reading stopped there")]
    TooLarge {
        /// URL or path.
        document: String,
        /// The limit.
        limit: u64,
    },
    /// More items than [`FeedLimits::max_items`].
    #[error("{document}: more than the limit of {limit} items")]
    TooManyItems {
        /// URL or path.
        document: String,
        /// The limit.
        limit: usize,
    },
    /// One item's XML is larger than [`FeedLimits::max_item_bytes`].
    #[error("{document}: item {item} at line {position} is larger than the limit of {limit} bytes")]
    ItemTooLarge {
        /// URL or path.
        document: String,
        /// The item (`#n`, its position among the items).
        item: String,
        /// Where the item starts.
        position: Position,
        /// The limit.
        limit: usize,
    },
    /// An item's `sx:sync` holds more history or conflicts than [`FeedLimits`] allows.
    #[error("{document}: item {item} at line {position} has {cap}")]
    TooMuchSync {
        /// URL or path.
        document: String,
        /// The item's sync id.
        item: String,
        /// Where the item's `sx:sync` starts.
        position: Position,
        /// The cap broken.
        cap: SyncCap,
    },
    /// Elements nested deeper than [`FeedLimits::max_depth`].
    #[error("{document}: elements nested deeper than {limit} at line {position}")]
    TooDeep {
        /// URL or path.
        document: String,
        /// Where the limit was crossed.
        position: Position,
        /// The limit.
        limit: usize,
    },
    /// An item's `sx:sync` breaks a FeedSync rule.
    #[error("{document}: item {item} at line {position}: {rule}")]
    InvalidSync {
        /// URL or path.
        document: String,
        /// The item's sync id (`#n`, its position among the items, when it has none).
        item: String,
        /// Where the offending element starts.
        position: Position,
        /// The rule broken, with the section of the spec.
        rule: String,
    },
    /// Two items of the feed have the same sync id (§2.4: unique within the feed).
    #[error(
        "{document}: two items have the sync id `{id}` (the second at line {position}); §2.4 wants it unique within the feed"
    )]
    DuplicateSyncId {
        /// URL or path.
        document: String,
        /// The repeated id.
        id: String,
        /// Where the second one starts.
        position: Position,
    },
    /// The feed's `sx:sharing` breaks a FeedSync rule.
    #[error("{document}: sx:sharing at line {position}: {rule}")]
    InvalidSharing {
        /// URL or path.
        document: String,
        /// Where the offending element starts.
        position: Position,
        /// The rule broken, with the section of the spec.
        rule: String,
    },
}

/// Reads a whole feed. See the module docs for what is refused and what only warned about.
///
/// `document` names the feed (URL or path) in errors and warnings.
///
/// # Errors
/// A [`FeedError`]: malformed XML, a DOCTYPE, a root that is not a feed, a broken limit or a
/// broken FeedSync rule. Nothing partial is returned.
pub fn read_feed<R: BufRead>(input: R, document: &str, limits: &FeedLimits) -> Result<Feed, FeedError> {
    let mut core = Core::new(input, document, limits);
    let mut buf = Vec::with_capacity(4096);
    let (format, root_level) = core.read_root(&mut buf)?;
    let mut feed = Feed {
        format,
        title: None,
        id: None,
        updated: None,
        links: Vec::new(),
        sharing: None,
        items: Vec::new(),
        warnings: Vec::new(),
    };
    let mut seen = HashSet::new();
    match format {
        FeedFormat::Atom => core.read_container(&mut buf, root_level, &mut feed, &mut seen)?,
        FeedFormat::Rss => core.read_rss(&mut buf, root_level, &mut feed, &mut seen)?,
    }
    core.finish_document(&mut buf)?;
    feed.warnings = core.warnings;
    Ok(feed)
}

/// The namespace an element or attribute is in, as far as this reader cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ns {
    Atom,
    Sx,
    /// No namespace: RSS 2.0's elements.
    None,
    Other,
}

impl Ns {
    fn of(res: &ResolveResult<'_>) -> Ns {
        match res {
            ResolveResult::Bound(ns) if ns.0 == ATOM_NS => Ns::Atom,
            ResolveResult::Bound(ns) if ns.0 == SX_NS => Ns::Sx,
            ResolveResult::Unbound => Ns::None,
            // An undeclared prefix is not namespace-well-formed, but it is foreign markup
            // either way: it is copied, never interpreted.
            _ => Ns::Other,
        }
    }
}

/// A field of an item whose text is being collected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Id,
    Title,
    Link,
    Updated,
    PubDate,
}

/// The parser state (everything but the event buffer, so that a borrowed event and the state
/// can be used together).
struct Core<'a, R: BufRead> {
    xml: NsReader<Tracked<R>>,
    document: &'a str,
    limits: &'a FeedLimits,
    depth: usize,
    /// Start of the event most recently read.
    event_start: u64,
    warnings: Vec<String>,
    /// Namespace prefixes the items being copied use (`""` for the default namespace); each
    /// item owns the tail from where it started, so nested conflict items share the vector.
    used_prefixes: Vec<String>,
    /// Where the innermost item being read starts in `used_prefixes`.
    used_base: usize,
    /// Items met so far at the top level (for `#n` labels and the item limit).
    items: usize,
    /// Versions met so far inside `sx:conflicts` (counted with `items` against the limit).
    conflict_items: usize,
    /// The top-level item being read: where it starts and its label. Every event read inside
    /// it counts its bytes against the item limit, `sx:sync` included.
    item: Option<(u64, String)>,
}

impl<'a, R: BufRead> Core<'a, R> {
    fn new(input: R, document: &'a str, limits: &'a FeedLimits) -> Self {
        let mut xml = NsReader::from_reader(Tracked::new(input, limits.max_bytes));
        let config = xml.config_mut();
        config.check_end_names = true;
        config.expand_empty_elements = false;
        config.check_comments = true;
        Core {
            xml,
            document,
            limits,
            depth: 0,
            event_start: 0,
            warnings: Vec::new(),
            used_prefixes: Vec::new(),
            used_base: 0,
            items: 0,
            conflict_items: 0,
            item: None,
        }
    }

    /// Reads one event with its element's namespace, keeping the depth and turning parser
    /// failures into positioned errors.
    fn next<'b>(&mut self, buf: &'b mut Vec<u8>) -> Result<(Ns, Event<'b>), FeedError> {
        buf.clear();
        self.event_start = self.xml.buffer_position();
        let (ns, ev) = match self.xml.read_resolved_event_into(buf) {
            Ok((res, ev)) => (Ns::of(&res), ev),
            Err(e) => return Err(self.parser_error(e)),
        };
        match &ev {
            Event::Start(_) => {
                self.depth += 1;
                if self.depth > self.limits.max_depth {
                    let position = self.position(self.event_start);
                    return Err(FeedError::TooDeep { document: self.doc(), position, limit: self.limits.max_depth });
                }
            }
            Event::End(_) => self.depth = self.depth.saturating_sub(1),
            Event::DocType(_) => return Err(FeedError::Doctype { document: self.doc(), position: self.here() }),
            Event::Eof if self.xml.get_ref().exceeded() => return Err(self.too_large()),
            _ => {}
        }
        self.check_item_bytes()?;
        Ok((ns, ev))
    }

    fn doc(&self) -> String {
        self.document.to_owned()
    }

    /// Refuses the item being read once its element, as read so far, is over the limit:
    /// its `sx:sync` is not in [`FeedItem::xml`], so only this counts history and conflicts.
    fn check_item_bytes(&self) -> Result<(), FeedError> {
        let Some((start, label)) = &self.item else { return Ok(()) };
        let limit = self.limits.max_item_bytes;
        if self.xml.buffer_position().saturating_sub(*start) <= limit as u64 {
            return Ok(());
        }
        let position = self.position(*start);
        Err(FeedError::ItemTooLarge { document: self.doc(), item: label.clone(), position, limit })
    }

    fn position(&self, offset: u64) -> Position {
        self.xml.get_ref().position(offset)
    }

    /// Where the event most recently read starts.
    fn here(&self) -> Position {
        self.position(self.event_start)
    }

    fn too_large(&self) -> FeedError {
        FeedError::TooLarge { document: self.doc(), limit: self.limits.max_bytes }
    }

    fn parser_error(&self, e: quick_xml::Error) -> FeedError {
        if self.xml.get_ref().exceeded() {
            return self.too_large();
        }
        match e {
            quick_xml::Error::Io(source) => {
                FeedError::Io { document: self.doc(), source: io::Error::new(source.kind(), source.to_string()) }
            }
            e => self.malformed_at(self.xml.error_position(), e.to_string()),
        }
    }

    fn malformed_at(&self, offset: u64, detail: impl Into<String>) -> FeedError {
        FeedError::Malformed { document: self.doc(), position: self.position(offset), detail: detail.into() }
    }

    fn malformed(&self, detail: impl Into<String>) -> FeedError {
        self.malformed_at(self.event_start, detail)
    }

    fn truncated(&self) -> FeedError {
        self.malformed("the document ends before its root element closes")
    }

    /// Reads the prolog and the root start tag: which format, at which depth.
    fn read_root(&mut self, buf: &mut Vec<u8>) -> Result<(FeedFormat, usize), FeedError> {
        loop {
            let (ns, ev) = self.next(buf)?;
            match ev {
                Event::Decl(_) | Event::Comment(_) | Event::PI(_) => {}
                Event::Text(t) if t.trim().is_empty() => {}
                Event::Start(ref e) => {
                    let local = e.local_name();
                    return match (ns, local.as_ref()) {
                        (Ns::Atom, "feed") => Ok((FeedFormat::Atom, self.depth)),
                        (Ns::None, "rss") => Ok((FeedFormat::Rss, self.depth)),
                        _ => Err(self.not_a_feed(e, ns)),
                    };
                }
                Event::Empty(ref e) => return Err(self.not_a_feed(e, ns)),
                Event::Eof => return Err(self.malformed("the document is empty")),
                _ => return Err(self.malformed("content before the root element")),
            }
        }
    }

    fn not_a_feed(&self, e: &BytesStart<'_>, ns: Ns) -> FeedError {
        let name = e.name();
        let mut root = format!("<{}>", name.as_ref());
        if ns != Ns::None {
            let (res, _) = self.xml.resolver().resolve_element(name);
            if let ResolveResult::Bound(uri) = res {
                root.push_str(&format!(" in namespace {}", uri.0));
            }
        }
        FeedError::NotAFeed { document: self.doc(), root }
    }

    /// Reads an RSS `<rss>` (start just read): its `<channel>` is the container of the items.
    fn read_rss(
        &mut self,
        buf: &mut Vec<u8>,
        level: usize,
        feed: &mut Feed,
        seen: &mut HashSet<String>,
    ) -> Result<(), FeedError> {
        let mut channels = 0;
        loop {
            let (ns, ev) = self.next(buf)?;
            match ev {
                Event::Start(ref e) if ns == Ns::None && e.local_name().as_ref() == "channel" => {
                    channels += 1;
                    let inner = self.depth;
                    self.read_container(buf, inner, feed, seen)?;
                }
                Event::Start(_) => self.skip(buf)?,
                Event::End(_) if self.depth < level => break,
                Event::GeneralRef(ref r) => {
                    self.resolve_ref(r)?;
                }
                Event::Eof => return Err(self.truncated()),
                _ => {}
            }
        }
        if channels == 0 {
            self.warnings.push(format!("{}: an RSS feed without a <channel>", self.document));
        }
        Ok(())
    }

    /// Reads the children of an Atom `<feed>` or an RSS `<channel>` (start just read, at
    /// depth `level`) up to its end.
    fn read_container(
        &mut self,
        buf: &mut Vec<u8>,
        level: usize,
        feed: &mut Feed,
        seen: &mut HashSet<String>,
    ) -> Result<(), FeedError> {
        let atom = feed.format == FeedFormat::Atom;
        // The format's own elements: Atom's namespace, or no namespace in RSS.
        let own = if atom { Ns::Atom } else { Ns::None };
        loop {
            let (ns, ev) = self.next(buf)?;
            let (e, empty) = match ev {
                Event::Start(e) => (e, false),
                Event::Empty(e) => (e, true),
                Event::End(_) if self.depth < level => return Ok(()),
                Event::GeneralRef(ref r) => {
                    self.resolve_ref(r)?;
                    continue;
                }
                Event::Eof => return Err(self.truncated()),
                _ => continue,
            };
            let local = e.local_name();
            match (ns, local.as_ref()) {
                (n, "entry" | "item") if n == own && (local.as_ref() == "entry") == atom => {
                    let item_start = self.event_start;
                    self.count_item()?;
                    let label = format!("#{}", self.items);
                    let head = ItemHead::new(&e, self.xml.resolver().level());
                    let item = self.read_item(buf, head, feed.format, empty, &label)?;
                    self.accept_item(item, item_start, feed, seen)?;
                }
                (n, "title") if n == own => {
                    let t = self.field_text(buf, empty)?;
                    feed.title.get_or_insert(t);
                }
                (Ns::Atom, "id") if atom => {
                    let t = self.field_text(buf, empty)?;
                    feed.id.get_or_insert(t);
                }
                (Ns::Atom, "updated") | (Ns::None, "lastBuildDate" | "pubDate") => {
                    let rss_pub = local.as_ref() == "pubDate";
                    let t = self.field_text(buf, empty)?;
                    let parsed = self.parse_date(&t, atom);
                    // RSS: lastBuildDate wins over pubDate, whichever comes first.
                    if feed.updated.is_none() || (!atom && !rss_pub) {
                        feed.updated = parsed.or(feed.updated);
                    }
                }
                (Ns::Atom, "link") => {
                    let link = self.link_attrs(&e)?;
                    if let Some((rel, href)) = link {
                        feed.links.push(FeedLink { rel, href });
                    }
                    if !empty {
                        self.skip(buf)?;
                    }
                }
                (Ns::None, "link") if !atom => {
                    let href = self.field_text(buf, empty)?;
                    if !href.is_empty() {
                        feed.links.push(FeedLink { rel: "alternate".into(), href });
                    }
                }
                (Ns::Sx, "sharing") => {
                    let attrs = sync::sharing_attrs(self, &e, self.event_start)?;
                    let sharing = self.read_sharing(buf, attrs, empty)?;
                    feed.sharing.get_or_insert(sharing);
                }
                _ if !empty => self.skip(buf)?,
                _ => {}
            }
        }
    }

    fn count_item(&mut self) -> Result<(), FeedError> {
        self.items += 1;
        self.check_item_count()
    }

    /// A conflict is a whole version for the merge to weigh: it counts as an item.
    fn count_conflict(&mut self) -> Result<(), FeedError> {
        self.conflict_items += 1;
        self.check_item_count()
    }

    fn check_item_count(&self) -> Result<(), FeedError> {
        if self.items + self.conflict_items > self.limits.max_items {
            return Err(FeedError::TooManyItems { document: self.doc(), limit: self.limits.max_items });
        }
        Ok(())
    }

    /// Keeps a top-level item: refuses a repeated sync id, skips (with a warning) an item
    /// nothing identifies.
    fn accept_item(
        &mut self,
        item: FeedItem,
        start: u64,
        feed: &mut Feed,
        seen: &mut HashSet<String>,
    ) -> Result<(), FeedError> {
        if let Some(sync) = &item.sync {
            if !seen.insert(sync.id.clone()) {
                let position = self.position(start);
                return Err(FeedError::DuplicateSyncId { document: self.doc(), id: sync.id.clone(), position });
            }
        } else if item.identity().is_none() {
            let position = self.position(start);
            self.warnings.push(format!(
                "{}: item #{} at line {position} skipped: it has no sx:sync id, no id/guid and no link",
                self.document, self.items
            ));
            return Ok(());
        }
        feed.items.push(item);
        Ok(())
    }

    /// A date: RFC 3339 in Atom, RFC 822/2822 in RSS. An unreadable one is a warning.
    fn parse_date(&mut self, text: &str, atom: bool) -> Option<W3cDateTime> {
        let parsed = if atom { text.parse::<W3cDateTime>().ok() } else { rfc822::parse(text) };
        if parsed.is_none() {
            let what = if atom { "an RFC 3339 date" } else { "an RFC 822 date" };
            self.warnings.push(format!("{}: line {}: `{text}` is not {what}; ignored", self.document, self.here()));
        }
        parsed
    }

    /// An Atom `<link>`'s (rel, href); `rel` defaults to `alternate` (RFC 4287 §4.2.7.2).
    fn link_attrs(&self, e: &BytesStart<'_>) -> Result<Option<(String, String)>, FeedError> {
        let (mut rel, mut href) = (None, None);
        for attr in e.attributes() {
            let attr = attr.map_err(|err| self.malformed(err.to_string()))?;
            match attr.key.as_ref() {
                "rel" => rel = Some(self.attr_value(&attr)?),
                "href" => href = Some(self.attr_value(&attr)?),
                _ => {}
            }
        }
        Ok(href.map(|h| (rel.unwrap_or_else(|| "alternate".into()), h.trim().to_owned())))
    }

    fn attr_value(&self, attr: &quick_xml::events::attributes::Attribute<'_>) -> Result<String, FeedError> {
        attr.normalized_value(quick_xml::XmlVersion::Implicit1_0)
            .map(|v| v.into_owned())
            .map_err(|err| self.malformed(err.to_string()))
    }

    /// The trimmed text of the element whose start was just read, with that of any child
    /// elements (an Atom `type="xhtml"` title).
    fn field_text(&mut self, buf: &mut Vec<u8>, empty: bool) -> Result<String, FeedError> {
        let mut text = String::new();
        if empty {
            return Ok(text);
        }
        let level = self.depth;
        loop {
            match self.next(buf)?.1 {
                Event::Text(t) => text.push_str(&t),
                Event::CData(c) => text.push_str(&c),
                Event::GeneralRef(ref r) => text.push(self.resolve_ref(r)?),
                Event::End(_) if self.depth < level => break,
                Event::Eof => return Err(self.truncated()),
                _ => {}
            }
        }
        Ok(trimmed(text))
    }

    fn resolve_ref(&self, r: &BytesRef<'_>) -> Result<char, FeedError> {
        if r.is_char_ref() {
            return match r.resolve_char_ref() {
                Ok(Some(c)) => Ok(c),
                _ => Err(self.malformed(format!("`&{};` is not a valid character reference", &**r))),
            };
        }
        match quick_xml::escape::resolve_xml_entity(r).and_then(|s| s.chars().next()) {
            Some(c) => Ok(c),
            None => Err(self.malformed(format!("undefined entity `&{};` (feeds have no DOCTYPE to define it)", &**r))),
        }
    }

    /// Skips to the end of the element whose start tag was just read, still checking its
    /// entity references.
    fn skip(&mut self, buf: &mut Vec<u8>) -> Result<(), FeedError> {
        let level = self.depth;
        loop {
            match self.next(buf)?.1 {
                Event::End(_) if self.depth < level => return Ok(()),
                Event::GeneralRef(ref r) => {
                    self.resolve_ref(r)?;
                }
                Event::Eof => return Err(self.truncated()),
                _ => {}
            }
        }
    }

    /// After the root closes: only whitespace, comments and PIs may follow.
    fn finish_document(&mut self, buf: &mut Vec<u8>) -> Result<(), FeedError> {
        loop {
            match self.next(buf)?.1 {
                Event::Eof => return Ok(()),
                Event::Comment(_) | Event::PI(_) => {}
                Event::Text(t) if t.trim().is_empty() => {}
                _ => return Err(self.malformed("content after the root element")),
            }
        }
    }

    /// Reads one item (start tag just read) into a [`FeedItem`], copying its markup but for
    /// its `sx:sync`.
    fn read_item(
        &mut self,
        buf: &mut Vec<u8>,
        mut head: ItemHead,
        format: FeedFormat,
        empty: bool,
        label: &str,
    ) -> Result<FeedItem, FeedError> {
        let start = self.event_start;
        let top_level = self.item.is_none();
        if top_level {
            self.item = Some((start, label.to_owned()));
        }
        let used_base = self.used_prefixes.len();
        let outer_base = std::mem::replace(&mut self.used_base, used_base);
        self.note_prefix(head.prefix.as_deref().unwrap_or(""));
        let mut item = FeedItem {
            id: None,
            title: None,
            link: None,
            updated: None,
            enclosure: None,
            sync: None,
            xml: std::mem::take(&mut head.xml),
        };
        if empty {
            item.xml.push_str("/>");
        } else {
            item.xml.push('>');
            self.read_item_body(buf, &mut item, format, label, start)?;
        }
        head.drop_unused_sx(&mut item.xml, &self.used_prefixes[used_base..]);
        let decls = self.inherited_declarations(used_base, head.level);
        item.xml.insert_str(head.name_end, &decls);
        self.used_prefixes.truncate(used_base);
        self.used_base = outer_base;
        if top_level {
            self.item = None;
        }
        Ok(item)
    }

    /// The item's content up to and including its end tag.
    fn read_item_body(
        &mut self,
        buf: &mut Vec<u8>,
        item: &mut FeedItem,
        format: FeedFormat,
        label: &str,
        start: u64,
    ) -> Result<(), FeedError> {
        let level = self.depth;
        let atom = format == FeedFormat::Atom;
        let own = if atom { Ns::Atom } else { Ns::None };
        let mut field: Option<Field> = None;
        let mut text = String::new();
        loop {
            let (ns, ev) = self.next(buf)?;
            let xml = &mut item.xml;
            match ev {
                Event::Start(ref e) | Event::Empty(ref e) => {
                    let empty = matches!(ev, Event::Empty(_));
                    // Direct children only: the depth just went up for a start tag.
                    let child = if empty { self.depth == level } else { self.depth == level + 1 };
                    if child && ns == Ns::Sx && e.local_name().as_ref() == "sync" {
                        trim_trailing_space(xml);
                        let sync_start = self.event_start;
                        let head = sync::SyncHead::parse(self, e, label)?;
                        let sync = self.read_sync(buf, head, empty, sync_start)?;
                        if item.sync.is_none() {
                            item.sync = Some(sync);
                        }
                        continue;
                    }
                    self.note_prefixes(e)?;
                    xml.push('<');
                    xml.push_str(e);
                    xml.push_str(if empty { "/>" } else { ">" });
                    if child {
                        field = self.child_field(e, ns, own, item)?;
                        // `<title/>`: an empty value, not none.
                        if empty && let Some(f) = field.take() {
                            self.set_field(item, f, &mut text, atom);
                        }
                    }
                }
                Event::End(ref e) => {
                    xml.push_str("</");
                    xml.push_str(e);
                    xml.push('>');
                    if self.depth < level {
                        break;
                    }
                    if self.depth == level
                        && let Some(f) = field.take()
                    {
                        self.set_field(item, f, &mut text, atom);
                    }
                }
                Event::Text(ref t) => {
                    xml.push_str(t);
                    if field.is_some() {
                        text.push_str(t);
                    }
                }
                Event::CData(ref c) => {
                    xml.push_str("<![CDATA[");
                    xml.push_str(c);
                    xml.push_str("]]>");
                    if field.is_some() {
                        text.push_str(c);
                    }
                }
                Event::GeneralRef(ref r) => {
                    xml.push('&');
                    xml.push_str(r);
                    xml.push(';');
                    let c = self.resolve_ref(r)?;
                    if field.is_some() {
                        text.push(c);
                    }
                }
                Event::Comment(ref c) => {
                    xml.push_str("<!--");
                    xml.push_str(c);
                    xml.push_str("-->");
                }
                Event::PI(ref p) => {
                    xml.push_str("<?");
                    xml.push_str(p);
                    xml.push_str("?>");
                }
                Event::Decl(_) => return Err(self.malformed("an XML declaration inside an item")),
                Event::DocType(_) | Event::Eof => return Err(self.truncated()),
            }
            if item.xml.len() > self.limits.max_item_bytes {
                let position = self.position(start);
                let limit = self.limits.max_item_bytes;
                return Err(FeedError::ItemTooLarge { document: self.doc(), item: label.to_owned(), position, limit });
            }
        }
        Ok(())
    }

    /// A direct child of an item: which text field it starts, after taking what its
    /// attributes say (Atom `<link>`, RSS `<enclosure>`).
    fn child_field(
        &self,
        e: &BytesStart<'_>,
        ns: Ns,
        own: Ns,
        item: &mut FeedItem,
    ) -> Result<Option<Field>, FeedError> {
        if ns != own {
            return Ok(None);
        }
        let local = e.local_name();
        Ok(match (ns, local.as_ref()) {
            (Ns::Atom, "id") | (Ns::None, "guid") => Some(Field::Id),
            (_, "title") => Some(Field::Title),
            (Ns::Atom, "updated") => Some(Field::Updated),
            (Ns::None, "pubDate") => Some(Field::PubDate),
            (Ns::None, "link") => Some(Field::Link),
            (Ns::Atom, "link") => {
                self.atom_item_link(e, item)?;
                None
            }
            (Ns::None, "enclosure") => {
                if item.enclosure.is_none() {
                    item.enclosure = self.enclosure(e, "url")?;
                }
                None
            }
            _ => None,
        })
    }

    fn atom_item_link(&self, e: &BytesStart<'_>, item: &mut FeedItem) -> Result<(), FeedError> {
        let Some((rel, href)) = self.link_attrs(e)? else { return Ok(()) };
        match rel.as_str() {
            "alternate" if item.link.is_none() => item.link = Some(href),
            "enclosure" if item.enclosure.is_none() => item.enclosure = self.enclosure(e, "href")?,
            _ => {}
        }
        Ok(())
    }

    /// An enclosure from a tag's attributes: `url_attr` (`url` in RSS, `href` in Atom),
    /// `length` and `type`.
    fn enclosure(&self, e: &BytesStart<'_>, url_attr: &str) -> Result<Option<Enclosure>, FeedError> {
        let (mut url, mut length, mut media_type) = (None, None, None);
        for attr in e.attributes() {
            let attr = attr.map_err(|err| self.malformed(err.to_string()))?;
            let key = attr.key.as_ref();
            if key == url_attr {
                url = Some(self.attr_value(&attr)?.trim().to_owned());
            } else if key == "length" {
                length = self.attr_value(&attr)?.trim().parse::<u64>().ok();
            } else if key == "type" {
                media_type = Some(self.attr_value(&attr)?);
            }
        }
        Ok(url.filter(|u| !u.is_empty()).map(|url| Enclosure { url, length, media_type }))
    }

    fn set_field(&mut self, item: &mut FeedItem, field: Field, text: &mut String, atom: bool) {
        let value = trimmed(std::mem::take(text));
        match field {
            Field::Id => {
                item.id.get_or_insert(value);
            }
            Field::Title => {
                item.title.get_or_insert(value);
            }
            Field::Link => {
                if !value.is_empty() {
                    item.link.get_or_insert(value);
                }
            }
            Field::Updated | Field::PubDate => {
                if item.updated.is_none() {
                    item.updated = self.parse_date(&value, atom);
                }
            }
        }
    }

    /// Records the prefixes a copied start tag uses, for the item's standalone declarations.
    fn note_prefixes(&mut self, e: &BytesStart<'_>) -> Result<(), FeedError> {
        self.note_prefix(e.name().prefix().map_or("", |p| p.into_inner()));
        // Attributes are walked only when one can be prefixed.
        if !e.attributes_raw().contains(':') {
            return Ok(());
        }
        for attr in e.attributes() {
            let attr = attr.map_err(|err| self.malformed(err.to_string()))?;
            if let Some(p) = attr.key.prefix()
                && !p.is_xml()
                && !p.is_xmlns()
            {
                self.note_prefix(p.into_inner());
            }
        }
        Ok(())
    }

    fn note_prefix(&mut self, prefix: &str) {
        if !self.used_prefixes[self.used_base..].iter().any(|p| p == prefix) {
            self.used_prefixes.push(prefix.to_owned());
        }
    }

    /// ` xmlns…="…"` for each prefix the item uses that an ancestor declared, not the item's
    /// own start tag. Called at the item's end tag, while its scope is still open.
    fn inherited_declarations(&self, used_base: usize, level: u16) -> String {
        let resolver = self.xml.resolver();
        let mut used: Vec<&str> = self.used_prefixes[used_base..].iter().map(String::as_str).collect();
        used.sort_unstable();
        used.dedup();
        let mut out = String::new();
        for prefix in used {
            let declared_here = resolver.bindings_of(level).any(|(p, _)| decl_prefix(&p) == prefix);
            if declared_here {
                continue;
            }
            if let Some((_, ns)) = resolver.bindings().find(|(p, _)| decl_prefix(p) == prefix) {
                out.push_str(" xmlns");
                if !prefix.is_empty() {
                    out.push(':');
                    out.push_str(prefix);
                }
                out.push_str("=\"");
                let mut v = Vec::new();
                crate::model::escape_into(&mut v, ns.0, true);
                out.push_str(&String::from_utf8_lossy(&v));
                out.push('"');
            }
        }
        out
    }

    /// Reads the `sx:related` children of `sx:sharing` (start just read, its attributes in
    /// `sharing`).
    fn read_sharing(&mut self, buf: &mut Vec<u8>, mut sharing: Sharing, empty: bool) -> Result<Sharing, FeedError> {
        if !empty {
            let level = self.depth;
            loop {
                let (ns, ev) = self.next(buf)?;
                match ev {
                    Event::Start(ref e) | Event::Empty(ref e) => {
                        let empty = matches!(ev, Event::Empty(_));
                        if ns == Ns::Sx && e.local_name().as_ref() == "related" {
                            sharing.related.push(sync::related(self, e)?);
                        }
                        if !empty {
                            self.skip(buf)?;
                        }
                    }
                    Event::End(_) if self.depth < level => break,
                    Event::GeneralRef(ref r) => {
                        self.resolve_ref(r)?;
                    }
                    Event::Eof => return Err(self.truncated()),
                    _ => {}
                }
            }
        }
        Ok(sharing)
    }

    /// Reads the content of `sx:sync` (start just read and parsed into `head`).
    fn read_sync(
        &mut self,
        buf: &mut Vec<u8>,
        head: sync::SyncHead,
        empty: bool,
        start: u64,
    ) -> Result<Sync, FeedError> {
        let mut sync = head.into_sync();
        if !empty {
            let level = self.depth;
            loop {
                let (ns, ev) = self.next(buf)?;
                let (e, empty) = match ev {
                    Event::Start(e) => (e, false),
                    Event::Empty(e) => (e, true),
                    Event::End(_) if self.depth < level => break,
                    Event::GeneralRef(ref r) => {
                        self.resolve_ref(r)?;
                        continue;
                    }
                    Event::Eof => return Err(self.truncated()),
                    _ => continue,
                };
                let local = e.local_name();
                match (ns, local.as_ref()) {
                    (Ns::Sx, "history") => {
                        if sync.history.len() == self.limits.max_history {
                            return Err(self.too_much_sync(&sync.id, start, SyncCap::History(self.limits.max_history)));
                        }
                        sync.history.push(sync::history(self, &e, &sync.id)?);
                        if !empty {
                            self.skip(buf)?;
                        }
                    }
                    (Ns::Sx, "conflicts") if !empty => {
                        drop(e);
                        let label = format!("{} (a conflict)", sync.id);
                        self.read_conflicts(buf, &mut sync.conflicts, &label)?;
                        if sync.conflicts.len() > self.limits.max_conflicts {
                            let cap = SyncCap::Conflicts(self.limits.max_conflicts);
                            return Err(self.too_much_sync(&sync.id, start, cap));
                        }
                    }
                    _ if !empty => self.skip(buf)?,
                    _ => {}
                }
            }
        }
        if sync.history.is_empty() {
            let rule = "sx:sync has no sx:history; §2.5 wants at least one".to_owned();
            let position = self.position(start);
            return Err(FeedError::InvalidSync { document: self.doc(), item: sync.id, position, rule });
        }
        Ok(sync)
    }

    fn too_much_sync(&self, id: &str, start: u64, cap: SyncCap) -> FeedError {
        FeedError::TooMuchSync { document: self.doc(), item: id.to_owned(), position: self.position(start), cap }
    }

    /// Reads the items inside `sx:conflicts` (start just read): Atom entries or RSS items.
    fn read_conflicts(&mut self, buf: &mut Vec<u8>, out: &mut Vec<FeedItem>, label: &str) -> Result<(), FeedError> {
        let level = self.depth;
        loop {
            let (ns, ev) = self.next(buf)?;
            let (e, empty) = match ev {
                Event::Start(e) => (e, false),
                Event::Empty(e) => (e, true),
                Event::End(_) if self.depth < level => return Ok(()),
                Event::GeneralRef(ref r) => {
                    self.resolve_ref(r)?;
                    continue;
                }
                Event::Eof => return Err(self.truncated()),
                _ => continue,
            };
            let format = match (ns, e.local_name().as_ref()) {
                (Ns::Atom, "entry") => Some(FeedFormat::Atom),
                (Ns::None, "item") => Some(FeedFormat::Rss),
                _ => None,
            };
            match format {
                Some(format) => {
                    self.count_conflict()?;
                    let head = ItemHead::new(&e, self.xml.resolver().level());
                    out.push(self.read_item(buf, head, format, empty, label)?);
                }
                None if !empty => self.skip(buf)?,
                None => {}
            }
        }
    }
}

/// An item's start tag, copied before the event buffer is reused.
struct ItemHead {
    /// `<` and the start tag's content, to which the item's markup is appended.
    xml: String,
    /// Where the name ends in `xml`: inherited declarations go there.
    name_end: usize,
    prefix: Option<String>,
    /// The namespace level of the item's start tag.
    level: u16,
    /// The prefix the start tag binds to the FeedSync namespace, if it does, and the tag's
    /// length in `xml`: once `sx:sync` is left out the declaration may be unused, and is
    /// dropped so that reading a stored item document gives back the item's own markup.
    sx_decl: Option<(String, usize)>,
}

impl ItemHead {
    fn new(e: &BytesStart<'_>, level: u16) -> Self {
        let mut xml = String::with_capacity(e.len() + 1024);
        xml.push('<');
        xml.push_str(e);
        let name = e.name();
        let sx_decl = if e.attributes_raw().contains(SX_NS) {
            e.attributes().flatten().find_map(|a| match a.key.as_namespace_binding() {
                Some(p) if &*a.value == SX_NS => Some((decl_prefix(&p).to_owned(), xml.len())),
                _ => None,
            })
        } else {
            None
        };
        ItemHead {
            xml,
            name_end: 1 + name.as_ref().len(),
            prefix: name.prefix().map(|p| p.into_inner().to_owned()),
            level,
            sx_decl,
        }
    }

    /// The start tag without its FeedSync declaration, when nothing in the item used it.
    fn drop_unused_sx(&self, xml: &mut String, used: &[String]) {
        let Some((prefix, tag_len)) = &self.sx_decl else { return };
        if used.iter().any(|u| u == prefix) {
            return;
        }
        let name_len = self.name_end - 1;
        let tag = BytesStart::from_content(&xml[1..*tag_len], name_len);
        let mut rebuilt = format!("<{}", tag.name().as_ref());
        for a in tag.attributes().flatten() {
            let is_sx = a.key.as_namespace_binding().is_some_and(|p| decl_prefix(&p) == prefix) && &*a.value == SX_NS;
            if !is_sx {
                rebuilt.push_str(&format!(" {}=\"{}\"", a.key.as_ref(), a.value.replace('"', "&quot;")));
            }
        }
        xml.replace_range(..*tag_len, &rebuilt);
    }
}

fn decl_prefix<'p>(p: &PrefixDeclaration<'p>) -> &'p str {
    match p {
        PrefixDeclaration::Default => "",
        PrefixDeclaration::Named(name) => name,
    }
}

/// Drops the whitespace that indented an element left out of the copy, so no blank line is
/// left where it was.
fn trim_trailing_space(xml: &mut String) {
    let kept = xml.trim_end_matches([' ', '\t', '\r', '\n']).len();
    if xml[..kept].ends_with('>') {
        xml.truncate(kept);
    }
}

fn trimmed(text: String) -> String {
    let t = text.trim();
    if t.len() == text.len() { text } else { t.to_owned() }
}
