//! Atom 1.0 and RSS 2.0 feeds with the FeedSync 1.0.2 extensions (`sx:`, seed `002_…`):
//! the types, a streaming reader, an Atom writer, and FeedSync's merge behaviour (§3.3) and
//! local update behaviour (§3.2).
//!
//! Feeds are the other way providers publish changes, above all small ones; FeedSync adds
//! per-item sync metadata (`sx:sync`: id, update count, tombstone, history, conflicts) that
//! lets independent endpoints converge on the same item state whatever the order in which
//! they see updates. Tributary reads feeds as upstream sources and publishes its sets as
//! FeedSync feeds, so both directions share these types.
//!
//! An item keeps its own XML (`FeedItem::xml`) without its `sx:sync`: what is not modelled
//! here — foreign markup, which §2.1.7 asks an endpoint to preserve and republish — survives
//! a round trip, and the item can be served as a standalone document.
//!
//! # Architecture
//! Part of the model: no I/O of its own (any `BufRead` in, any `Write` out), no tokio, no
//! store. The harvester and the publisher build on it.

mod active;
mod merge;
mod read;
mod write;

pub use merge::{
    Merged, canonical_cmp, canonicalize, create_sync, history_subsumed, item_subsumed, local_update, merge,
    merge_plain, resolve_conflicts, winner,
};
pub use read::{FeedError, FeedLimits, MAX_CONFLICTS, MAX_HISTORY, SyncCap, read_feed};
pub use write::{AtomWriter, FeedHead, SYNC_ID_URN_PREFIX, item_document};

/// The item as Tributary republishes and stores it: [`item_document`] read back, so without
/// active markup and with its escaped HTML as the sanitiser writes it. The harvester merges
/// this, not the item as upstream wrote it, so that an unchanged item compares equal to its
/// stored state (an item without a date is compared by its markup, and one version of a
/// synced item in two spellings would become a conflict). An item whose document cannot be
/// read back is returned as it is.
pub fn republished(item: &FeedItem) -> FeedItem {
    read_item(&item_document(item), item.identity().unwrap_or("item")).unwrap_or_else(|_| item.clone())
}

/// Reads back one item from a standalone item document, as [`item_document`] writes it
/// (what the store keeps as a feed item's state); `document` names it in errors.
///
/// # Errors
/// A [`FeedError`] when the bytes are not such a document.
pub fn read_item(bytes: &[u8], document: &str) -> Result<FeedItem, FeedError> {
    let malformed =
        |detail: String| FeedError::Malformed { document: document.to_owned(), position: Default::default(), detail };
    let text = std::str::from_utf8(bytes).map_err(|e| malformed(e.to_string()))?;
    let body = match text.trim_start().strip_prefix("<?xml") {
        Some(rest) => rest.split_once("?>").map_or("", |(_, b)| b),
        None => text,
    };
    // The reader reads feeds: the item is read as the only one of a feed of its format.
    let wrapped = if body.trim_start().starts_with("<item") {
        format!("<rss version=\"2.0\"><channel>{body}</channel></rss>")
    } else {
        format!("<feed xmlns=\"{ATOM_NS}\">{body}</feed>")
    };
    // The state was written by Tributary after the caps of the feed it came from were
    // checked, possibly higher ones than the defaults: only the document's size bounds it.
    let limits = FeedLimits {
        max_item_bytes: usize::MAX,
        max_history: usize::MAX,
        max_conflicts: usize::MAX,
        ..FeedLimits::default()
    };
    let feed = read_feed(wrapped.as_bytes(), document, &limits)?;
    feed.items.into_iter().next().ok_or_else(|| malformed("no item in the document".into()))
}

use super::W3cDateTime;

/// The FeedSync namespace (§1.1).
pub const SX_NS: &str = "http://feedsync.org/2007/feedsync";
/// The Atom namespace (RFC 4287).
pub const ATOM_NS: &str = "http://www.w3.org/2005/Atom";

/// Which syndication format a feed was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedFormat {
    /// Atom 1.0: `<feed>` of `<entry>`.
    Atom,
    /// RSS 2.0: `<rss><channel>` of `<item>`.
    Rss,
}

/// A whole feed as read.
#[derive(Debug, Clone, PartialEq)]
pub struct Feed {
    /// Atom or RSS.
    pub format: FeedFormat,
    /// `<title>`.
    pub title: Option<String>,
    /// Atom `<id>` of the feed (RSS has none).
    pub id: Option<String>,
    /// Atom `<updated>` or RSS `<lastBuildDate>`/`<pubDate>`.
    pub updated: Option<W3cDateTime>,
    /// The feed's links: Atom `<link rel href>` (RFC 5005 `next`/`prev-archive`/`current` among
    /// them), RSS `<link>` as `alternate`.
    pub links: Vec<FeedLink>,
    /// `sx:sharing`, when present. Publisher-specific: never republished (§2.2).
    pub sharing: Option<Sharing>,
    /// The items in document order.
    pub items: Vec<FeedItem>,
    /// What was wrong but did not stop reading (e.g. an item without identity, skipped).
    pub warnings: Vec<String>,
}

/// A feed-level link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedLink {
    /// `rel` (`alternate` when absent, as Atom says).
    pub rel: String,
    /// Absolute URL.
    pub href: String,
}

/// `sx:sharing` (§2.2).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sharing {
    /// Lower bound of the items in the feed; opaque, compared as strings (§4, note 1).
    pub since: Option<String>,
    /// Upper bound; opaque, compared as strings.
    pub until: Option<String>,
    /// Read before this to miss nothing.
    pub expires: Option<W3cDateTime>,
    /// `sx:related` feeds.
    pub related: Vec<Related>,
}

/// `sx:related` (§2.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Related {
    /// Absolute URI of the related feed.
    pub link: String,
    /// Optional title.
    pub title: Option<String>,
    /// `complete` or `aggregated`.
    pub kind: RelatedKind,
}

/// The `type` of an `sx:related`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelatedKind {
    /// The feed holding every item of this one (§4).
    Complete,
    /// A feed whose items this one incorporates (§2.3.1).
    Aggregated,
}

/// One `<entry>` or `<item>`.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedItem {
    /// Atom `<id>` or RSS `<guid>`.
    pub id: Option<String>,
    /// `<title>`.
    pub title: Option<String>,
    /// The item's link: Atom `<link rel="alternate">` (or without `rel`), RSS `<link>`.
    pub link: Option<String>,
    /// Atom `<updated>`, RSS `<pubDate>` (RFC 822, converted).
    pub updated: Option<W3cDateTime>,
    /// Atom `<link rel="enclosure">` or RSS `<enclosure>`.
    pub enclosure: Option<Enclosure>,
    /// `sx:sync`, when the item takes part in FeedSync.
    pub sync: Option<Sync>,
    /// The item element as it appeared (`<entry …>…</entry>` or `<item>…</item>`), with the
    /// namespace declarations it needs and without its `sx:sync` element.
    pub xml: String,
}

impl FeedItem {
    /// The identity Tributary gives the item: the sync id, else the Atom id / RSS guid, else
    /// the link.
    pub fn identity(&self) -> Option<&str> {
        self.sync.as_ref().map(|s| s.id.as_str()).or(self.id.as_deref()).or(self.link.as_deref())
    }

    /// Whether the item is a FeedSync tombstone.
    pub fn is_deleted(&self) -> bool {
        self.sync.as_ref().is_some_and(|s| s.deleted)
    }
}

/// An enclosure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enclosure {
    /// Absolute URL.
    pub url: String,
    /// Declared length in bytes.
    pub length: Option<u64>,
    /// Declared media type.
    pub media_type: Option<String>,
}

/// `sx:sync` (§2.4).
#[derive(Debug, Clone, PartialEq)]
pub struct Sync {
    /// The item's id, the same in every feed that shares it (an RFC 2141 NSS).
    pub id: String,
    /// Updates applied so far, 1 ..= 2^31-1.
    pub updates: u32,
    /// A tombstone.
    pub deleted: bool,
    /// Conflicts are not kept for this item.
    pub noconflicts: bool,
    /// `sx:history`, most recent first; never empty.
    pub history: Vec<History>,
    /// `sx:conflicts`: conflicting versions, a flat unordered list (§2.6).
    pub conflicts: Vec<FeedItem>,
}

/// `sx:history` (§2.5). At least one of `when` and `by` is present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct History {
    /// 1 ..= 2^31-1.
    pub sequence: u32,
    /// When the update was made (whole-second UTC).
    pub when: Option<W3cDateTime>,
    /// The endpoint that made it.
    pub by: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const FEED: &str = r#"<?xml version="1.0"?>
<rss version="2.0" xmlns:sx="http://feedsync.org/2007/feedsync"><channel><title>t</title>
<item><title>Buy groceries</title><x:extra xmlns:x="urn:x">kept</x:extra>
<sx:sync id="item_1" updates="2"><sx:history sequence="2" when="2005-05-21T10:43:33Z" by="JEO2000"/>
<sx:history sequence="1" when="2005-05-21T09:43:33Z" by="REO1750"/></sx:sync></item>
<item><title>plain</title><guid>http://example.org/p</guid></item>
</channel></rss>"#;

    #[test]
    fn read_item_reads_back_what_item_document_wrote() {
        let feed = read_feed(FEED.as_bytes(), "feed", &FeedLimits::default()).unwrap();
        for item in &feed.items {
            let doc = item_document(item);
            let back = read_item(&doc, "state").unwrap();
            assert_eq!(back.sync, item.sync);
            assert_eq!((back.title.as_deref(), back.identity()), (item.title.as_deref(), item.identity()));
            assert_eq!(item_document(&back), doc, "stable: the same state writes the same bytes");
        }
        assert!(String::from_utf8(item_document(&feed.items[0])).unwrap().contains("kept"), "foreign markup survives");
        assert!(read_item(b"<html/>", "state").is_err());
    }
}
