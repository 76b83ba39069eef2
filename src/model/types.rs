//! The ResourceSync document types (spec §7, Table 3): root formats, `<rs:md>`, `<rs:ln>`,
//! entries, and the document kinds they combine into.
//!
//! Values keep what the document said (URIs as written, hashes normalised, datetimes in UTC);
//! anything in another namespace is kept as [`Extension`]s and [`ForeignAttr`]s so a document
//! can be republished without losing it.

use std::fmt;

use super::datetime::W3cDateTime;
use super::hash::HashList;

/// The Sitemap namespace every ResourceSync document uses as its root namespace.
pub const SITEMAP_NS: &str = "http://www.sitemaps.org/schemas/sitemap/0.9";
/// The ResourceSync namespace of `<rs:md>` and `<rs:ln>`.
pub const RS_NS: &str = "http://www.openarchives.org/rs/terms/";

/// Which of the two Sitemap root formats a document uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RootFormat {
    /// `<urlset>` with `<url>` entries.
    UrlSet,
    /// `<sitemapindex>` with `<sitemap>` entries.
    SitemapIndex,
}

impl RootFormat {
    /// Local name of the root element.
    pub fn root_name(self) -> &'static str {
        match self {
            RootFormat::UrlSet => "urlset",
            RootFormat::SitemapIndex => "sitemapindex",
        }
    }

    /// Local name of the entry element.
    pub fn entry_name(self) -> &'static str {
        match self {
            RootFormat::UrlSet => "url",
            RootFormat::SitemapIndex => "sitemap",
        }
    }
}

/// Values of the `capability` attribute (spec §7), plus the ResourceSync Archives extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Capability {
    /// `description`
    Description,
    /// `capabilitylist`
    CapabilityList,
    /// `resourcelist`
    ResourceList,
    /// `changelist`
    ChangeList,
    /// `resourcedump`
    ResourceDump,
    /// `changedump`
    ChangeDump,
    /// `resourcedump-manifest`
    ResourceDumpManifest,
    /// `changedump-manifest`
    ChangeDumpManifest,
    /// `resourcelist-archive` (ResourceSync Archives, not Z39.99)
    ResourceListArchive,
    /// `changelist-archive` (ResourceSync Archives)
    ChangeListArchive,
    /// `resourcedump-archive` (ResourceSync Archives)
    ResourceDumpArchive,
    /// `changedump-archive` (ResourceSync Archives)
    ChangeDumpArchive,
    /// `change-notification`: a notification channel in a Capability List, and the payload of
    /// a change notification (ResourceSync Change Notification 1.0.1, §3 and §5)
    ChangeNotification,
    /// `framework-notification`: the channel and payload of framework notifications
    /// (ResourceSync Framework Notification 1.0.1)
    FrameworkNotification,
}

impl Capability {
    /// Every value, for parsing and tests.
    pub const ALL: [Capability; 14] = [
        Capability::Description,
        Capability::CapabilityList,
        Capability::ResourceList,
        Capability::ChangeList,
        Capability::ResourceDump,
        Capability::ChangeDump,
        Capability::ResourceDumpManifest,
        Capability::ChangeDumpManifest,
        Capability::ResourceListArchive,
        Capability::ChangeListArchive,
        Capability::ResourceDumpArchive,
        Capability::ChangeDumpArchive,
        Capability::ChangeNotification,
        Capability::FrameworkNotification,
    ];

    /// The attribute value.
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Description => "description",
            Capability::CapabilityList => "capabilitylist",
            Capability::ResourceList => "resourcelist",
            Capability::ChangeList => "changelist",
            Capability::ResourceDump => "resourcedump",
            Capability::ChangeDump => "changedump",
            Capability::ResourceDumpManifest => "resourcedump-manifest",
            Capability::ChangeDumpManifest => "changedump-manifest",
            Capability::ResourceListArchive => "resourcelist-archive",
            Capability::ChangeListArchive => "changelist-archive",
            Capability::ResourceDumpArchive => "resourcedump-archive",
            Capability::ChangeDumpArchive => "changedump-archive",
            Capability::ChangeNotification => "change-notification",
            Capability::FrameworkNotification => "framework-notification",
        }
    }

    /// Exact match of an attribute value.
    pub fn from_exact(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// True for the capabilities defined by the ResourceSync Archives specification.
    pub fn is_archive(self) -> bool {
        matches!(
            self,
            Capability::ResourceListArchive
                | Capability::ChangeListArchive
                | Capability::ResourceDumpArchive
                | Capability::ChangeDumpArchive
        )
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Values of the `change` attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Change {
    /// `created`
    Created,
    /// `updated`
    Updated,
    /// `deleted`
    Deleted,
}

impl Change {
    /// The attribute value.
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Created => "created",
            Change::Updated => "updated",
            Change::Deleted => "deleted",
        }
    }

    /// Exact match of an attribute value.
    pub fn from_exact(s: &str) -> Option<Self> {
        match s {
            "created" => Some(Change::Created),
            "updated" => Some(Change::Updated),
            "deleted" => Some(Change::Deleted),
            _ => None,
        }
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An attribute in a namespace other than ResourceSync's own (or an unknown unprefixed one),
/// kept for round-tripping.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ForeignAttr {
    /// Namespace URI, `None` for an unprefixed attribute.
    pub ns: Option<String>,
    /// Prefix used in the source document, reused when writing.
    pub prefix: Option<String>,
    /// Local name.
    pub local: String,
    /// Unescaped value.
    pub value: String,
}

/// A child node of an [`Extension`] element.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ExtNode {
    /// A nested element.
    Element(Extension),
    /// Character data (unescaped).
    Text(String),
}

/// An element in another namespace (e.g. `<image:image>`, `<xhtml:link>`), kept whole.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Extension {
    /// Namespace URI, `None` when the element is in no namespace.
    pub ns: Option<String>,
    /// Prefix used in the source document.
    pub prefix: Option<String>,
    /// Local name.
    pub local: String,
    /// Attributes (namespace declarations are derived when writing, not stored).
    pub attrs: Vec<ForeignAttr>,
    /// Children in document order.
    pub children: Vec<ExtNode>,
}

/// The attributes of an `<rs:md>` element (Table 3). Which ones are allowed depends on where
/// the element is; the validator reports misuse.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Md {
    /// `capability`
    pub capability: Option<Capability>,
    /// `at`
    pub at: Option<W3cDateTime>,
    /// `completed`
    pub completed: Option<W3cDateTime>,
    /// `from`
    pub from: Option<W3cDateTime>,
    /// `until`
    pub until: Option<W3cDateTime>,
    /// `change`
    pub change: Option<Change>,
    /// `datetime`
    pub datetime: Option<W3cDateTime>,
    /// `encoding`
    pub encoding: Option<String>,
    /// `hash`
    pub hash: Option<HashList>,
    /// `length`
    pub length: Option<u64>,
    /// `path`
    pub path: Option<String>,
    /// `type` (a media type)
    pub media_type: Option<String>,
    /// Attributes from other namespaces.
    pub extra: Vec<ForeignAttr>,
}

/// An `<rs:ln>` element (Table 3).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Link {
    /// `rel` (mandatory; empty only in documents the validator rejects).
    pub rel: String,
    /// `href` as written (mandatory).
    pub href: String,
    /// `encoding`
    pub encoding: Option<String>,
    /// `hash`
    pub hash: Option<HashList>,
    /// `length`
    pub length: Option<u64>,
    /// `modified`
    pub modified: Option<W3cDateTime>,
    /// `path`
    pub path: Option<String>,
    /// `pri`, 1..=999999
    pub pri: Option<u32>,
    /// `type`
    pub media_type: Option<String>,
    /// Attributes from other namespaces.
    pub extra: Vec<ForeignAttr>,
}

impl Link {
    /// A link with just `rel` and `href`.
    pub fn new(rel: impl Into<String>, href: impl Into<String>) -> Self {
        Link { rel: rel.into(), href: href.into(), ..Link::default() }
    }

    /// The effective priority: absence means 999,999 (spec §7).
    pub fn priority(&self) -> u32 {
        self.pri.unwrap_or(999_999)
    }
}

/// A `<url>` or `<sitemap>` entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Entry {
    /// `<loc>` as written (trimmed).
    pub loc: String,
    /// `<lastmod>`
    pub lastmod: Option<W3cDateTime>,
    /// `<changefreq>`, as written.
    pub changefreq: Option<String>,
    /// `<priority>` (Sitemap protocol), as written.
    pub priority: Option<String>,
    /// `<rs:md>`
    pub md: Option<Md>,
    /// `<rs:ln>` elements in document order.
    pub links: Vec<Link>,
    /// Child elements in other namespaces.
    pub extensions: Vec<Extension>,
}

impl Entry {
    /// An entry with only a `<loc>`.
    pub fn new(loc: impl Into<String>) -> Self {
        Entry { loc: loc.into(), ..Entry::default() }
    }

    /// The first link with relation `rel`.
    pub fn link(&self, rel: &str) -> Option<&Link> {
        self.links.iter().find(|l| l.rel == rel)
    }
}

/// Everything about a document that precedes its entries: root format, root `<rs:md>` and
/// `<rs:ln>`, namespace declarations, and root-level extensions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Header {
    /// `<urlset>` or `<sitemapindex>`; `None` only before reading.
    pub format: Option<RootFormat>,
    /// The root `<rs:md>`.
    pub md: Option<Md>,
    /// The root `<rs:ln>` elements.
    pub links: Vec<Link>,
    /// Namespace declarations on the root beyond the sitemap and rs ones (prefix, uri), kept
    /// so extensions can be written back with their prefixes.
    pub namespaces: Vec<(String, String)>,
    /// Other attributes on the root element (e.g. `xsi:schemaLocation`).
    pub extra: Vec<ForeignAttr>,
    /// Root-level elements in other namespaces.
    pub extensions: Vec<Extension>,
}

impl Header {
    /// A header for `format` with the given root `<rs:md>`.
    pub fn new(format: RootFormat, md: Md) -> Self {
        Header { format: Some(format), md: Some(md), ..Header::default() }
    }

    /// The root `capability`, if present and known.
    pub fn capability(&self) -> Option<Capability> {
        self.md.as_ref().and_then(|m| m.capability)
    }

    /// The first root link with relation `rel`.
    pub fn link(&self, rel: &str) -> Option<&Link> {
        self.links.iter().find(|l| l.rel == rel)
    }

    /// What kind of ResourceSync document this header describes.
    pub fn kind(&self) -> Option<DocumentKind> {
        DocumentKind::from_parts(self.format?, self.capability()?)
    }
}

/// A whole document held in memory: the header and every entry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Document {
    /// Root metadata.
    pub header: Header,
    /// Entries in document order.
    pub entries: Vec<Entry>,
}

/// The kinds of ResourceSync document (spec §8–§13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DocumentKind {
    /// §8
    SourceDescription,
    /// §8, a `<sitemapindex>` of Source Descriptions
    SourceDescriptionIndex,
    /// §9
    CapabilityList,
    /// A `<sitemapindex>` of Capability Lists (not defined by the spec, seen in the wild)
    CapabilityListIndex,
    /// §10.1
    ResourceList,
    /// §10.2
    ResourceListIndex,
    /// §11.1
    ResourceDump,
    /// §11.1, a `<sitemapindex>` of Resource Dumps
    ResourceDumpIndex,
    /// §11.2
    ResourceDumpManifest,
    /// §12.1
    ChangeList,
    /// §12.2
    ChangeListIndex,
    /// §13.1
    ChangeDump,
    /// §13.1, a `<sitemapindex>` of Change Dumps
    ChangeDumpIndex,
    /// §13.2
    ChangeDumpManifest,
    /// ResourceSync Archives documents (any of the four archive capabilities)
    Archive,
    /// A change notification's payload (Change Notification 1.0.1 §3): pushed, not listed
    ChangeNotification,
    /// A framework notification's payload (Framework Notification 1.0.1 §3)
    FrameworkNotification,
}

impl DocumentKind {
    /// Combines the root format and the root capability.
    pub fn from_parts(format: RootFormat, capability: Capability) -> Option<Self> {
        use Capability as C;
        use DocumentKind as K;
        let index = format == RootFormat::SitemapIndex;
        Some(match (capability, index) {
            (C::Description, false) => K::SourceDescription,
            (C::Description, true) => K::SourceDescriptionIndex,
            (C::CapabilityList, false) => K::CapabilityList,
            (C::CapabilityList, true) => K::CapabilityListIndex,
            (C::ResourceList, false) => K::ResourceList,
            (C::ResourceList, true) => K::ResourceListIndex,
            (C::ResourceDump, false) => K::ResourceDump,
            (C::ResourceDump, true) => K::ResourceDumpIndex,
            (C::ResourceDumpManifest, false) => K::ResourceDumpManifest,
            (C::ChangeList, false) => K::ChangeList,
            (C::ChangeList, true) => K::ChangeListIndex,
            (C::ChangeDump, false) => K::ChangeDump,
            (C::ChangeDump, true) => K::ChangeDumpIndex,
            (C::ChangeDumpManifest, false) => K::ChangeDumpManifest,
            // Notifications are never indexes: a large batch is split into several payloads.
            (C::ChangeNotification, false) => K::ChangeNotification,
            (C::FrameworkNotification, false) => K::FrameworkNotification,
            (c, _) if c.is_archive() => K::Archive,
            (C::ResourceDumpManifest | C::ChangeDumpManifest, true) => return None,
            _ => return None,
        })
    }

    /// The human name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            DocumentKind::SourceDescription => "Source Description",
            DocumentKind::SourceDescriptionIndex => "Source Description Index",
            DocumentKind::CapabilityList => "Capability List",
            DocumentKind::CapabilityListIndex => "Capability List Index",
            DocumentKind::ResourceList => "Resource List",
            DocumentKind::ResourceListIndex => "Resource List Index",
            DocumentKind::ResourceDump => "Resource Dump",
            DocumentKind::ResourceDumpIndex => "Resource Dump Index",
            DocumentKind::ResourceDumpManifest => "Resource Dump Manifest",
            DocumentKind::ChangeList => "Change List",
            DocumentKind::ChangeListIndex => "Change List Index",
            DocumentKind::ChangeDump => "Change Dump",
            DocumentKind::ChangeDumpIndex => "Change Dump Index",
            DocumentKind::ChangeDumpManifest => "Change Dump Manifest",
            DocumentKind::Archive => "ResourceSync Archive",
            DocumentKind::ChangeNotification => "Change Notification",
            DocumentKind::FrameworkNotification => "Framework Notification",
        }
    }

    /// True for the change-oriented documents whose times are `from`/`until`.
    pub fn is_change_kind(self) -> bool {
        matches!(
            self,
            DocumentKind::ChangeList
                | DocumentKind::ChangeListIndex
                | DocumentKind::ChangeDump
                | DocumentKind::ChangeDumpIndex
                | DocumentKind::ChangeDumpManifest
                | DocumentKind::ChangeNotification
                | DocumentKind::FrameworkNotification
        )
    }

    /// True for the snapshot documents whose times are `at`/`completed`.
    pub fn is_snapshot_kind(self) -> bool {
        matches!(
            self,
            DocumentKind::ResourceList
                | DocumentKind::ResourceListIndex
                | DocumentKind::ResourceDump
                | DocumentKind::ResourceDumpIndex
                | DocumentKind::ResourceDumpManifest
        )
    }
}

impl fmt::Display for DocumentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
