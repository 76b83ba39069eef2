//! The simulated Source's documents, written with the model's deterministic writer from a
//! borrowed [`State`]: the caller holds the read lock for the duration of one render, so a
//! document always shows the state between two events, never half of one.
//!
//! URL layout (all under the configured base URL):
//! `/.well-known/resourcesync`, `/capabilitylist.xml`, `/resourcelist.xml` (a list, or an index
//! of `/resourcelist/<k>.xml`), `/changelist.xml` (always an index) of `/changelist/<seq>.xml`,
//! `/resourcedump.xml` with `/resourcedump/<generation>/<k>.zip` and `…/<k>-manifest.xml`, and
//! the resources `/res/<id>` (plus `/meta/<id>` with links on).
//!
//! Resource List parts cover fixed id ranges rather than positions, so a resource never moves
//! between parts while a Destination walks the index: a create or delete elsewhere cannot make
//! it skip or see twice an unchanged resource.

use std::io;

use super::clock::to_datetime;
use super::config::SimConfig;
use super::content::{DATA_TYPE, Digests, META_TYPE};
use super::state::{ChangeRecord, Listed, OpenList, State, Target};
use crate::model::{Capability, Change, DocumentWriter, Entry, Header, Link, Md, RootFormat};

/// Path of the Source Description.
pub(crate) const SOURCE_DESCRIPTION: &str = "/.well-known/resourcesync";
/// Path of the Capability List.
pub(crate) const CAPABILITY_LIST: &str = "/capabilitylist.xml";
/// Path of the Resource List (or Resource List Index).
pub(crate) const RESOURCE_LIST: &str = "/resourcelist.xml";
/// Path of the Change List Index.
pub(crate) const CHANGE_LIST_INDEX: &str = "/changelist.xml";
/// Path of the Resource Dump.
pub(crate) const RESOURCE_DUMP: &str = "/resourcedump.xml";

/// Path of Resource List part `k` (1-based).
pub(crate) fn resource_list_part(k: u64) -> String {
    format!("/resourcelist/{k}.xml")
}

/// Path of Change List `seq`.
pub(crate) fn change_list(seq: u64) -> String {
    format!("/changelist/{seq}.xml")
}

/// Path of a resource.
pub(crate) fn target_path(t: Target) -> String {
    match t {
        Target::Data(id) => format!("/res/{id}"),
        Target::Meta(id) => format!("/meta/{id}"),
    }
}

/// Media type of a resource.
pub(crate) fn media_type(t: Target) -> &'static str {
    match t {
        Target::Data(_) => DATA_TYPE,
        Target::Meta(_) => META_TYPE,
    }
}

/// The configuration plus what is derived from it once: absolute URL prefixes.
#[derive(Debug)]
pub(crate) struct Site {
    pub(crate) config: SimConfig,
    base: String,
    origin: Option<String>,
}

impl Site {
    pub(crate) fn new(config: SimConfig) -> Self {
        let base = config.base_url.as_str().trim_end_matches('/').to_owned();
        let origin = config.via_origin.as_ref().map(|u| u.as_str().trim_end_matches('/').to_owned());
        Site { config, base, origin }
    }

    /// The absolute URL of a path.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Resource List parts the current id space needs (at least one).
    pub(crate) fn part_count(&self, st: &State) -> u64 {
        st.next_id.div_ceil(self.config.ids_per_part()).max(1)
    }

    fn header(&self, format: RootFormat, md: Md, index: Option<&str>) -> Header {
        let mut h = Header::new(format, md);
        h.links.push(Link::new("up", self.url(CAPABILITY_LIST)));
        if let Some(index) = index {
            h.links.push(Link::new("index", self.url(index)));
        }
        h
    }

    pub(crate) fn source_description(&self) -> Vec<u8> {
        let md = Md { capability: Some(Capability::Description), ..Md::default() };
        let mut entry = Entry::new(self.url(CAPABILITY_LIST));
        entry.md = Some(Md { capability: Some(Capability::CapabilityList), ..Md::default() });
        write(&Header::new(RootFormat::UrlSet, md), [entry])
    }

    pub(crate) fn capability_list(&self) -> Vec<u8> {
        let md = Md { capability: Some(Capability::CapabilityList), ..Md::default() };
        let mut header = Header::new(RootFormat::UrlSet, md);
        header.links.push(Link::new("up", self.url(SOURCE_DESCRIPTION)));
        let mut caps = vec![(RESOURCE_LIST, Capability::ResourceList)];
        if self.config.dump {
            caps.push((RESOURCE_DUMP, Capability::ResourceDump));
        }
        caps.push((CHANGE_LIST_INDEX, Capability::ChangeList));
        let mut entries: Vec<Entry> = caps
            .into_iter()
            .map(|(path, c)| {
                let mut e = Entry::new(self.url(path));
                e.md = Some(Md { capability: Some(c), ..Md::default() });
                e
            })
            .collect();
        if self.config.push {
            // Change Notification §5: the channel is the topic, with its hub.
            let mut e = Entry::new(self.url(super::push::TOPIC));
            e.md = Some(Md { capability: Some(Capability::ChangeNotification), ..Md::default() });
            e.links.push(Link::new("hub", self.url(super::push::HUB)));
            entries.push(e);
        }
        write(&header, entries)
    }

    /// A change-notification payload (Change Notification §3) of `batch`, covering
    /// `from_ms`..`until_ms`: the batch's Change List entries, in the order they happened.
    pub(crate) fn notification(&self, batch: &[ChangeRecord], from_ms: i64, until_ms: i64) -> Vec<u8> {
        let md = Md {
            capability: Some(Capability::ChangeNotification),
            from: Some(to_datetime(from_ms)),
            until: Some(to_datetime(until_ms)),
            ..Md::default()
        };
        let header = self.header(RootFormat::UrlSet, md, None);
        write(&header, batch.iter().map(|c| self.change_entry(c)))
    }

    /// The Resource List, or its index once the set outgrows one document.
    pub(crate) fn resource_list(&self, st: &State) -> Vec<u8> {
        let at = Some(to_datetime(st.state_ms));
        let md = Md { capability: Some(Capability::ResourceList), at, ..Md::default() };
        if st.listed_count(self.config.links) <= self.config.list_limit {
            let header = self.header(RootFormat::UrlSet, md, None);
            return write(&header, st.listed(0..u64::MAX).map(|l| self.resource_entry(&l)));
        }
        let header = self.header(RootFormat::SitemapIndex, md, None);
        let per = self.config.ids_per_part();
        let live_parts =
            (1..=self.part_count(st)).filter(|k| st.resources.range((k - 1) * per..k * per).next().is_some());
        let entries = live_parts.map(|k| {
            let mut e = Entry::new(self.url(&resource_list_part(k)));
            e.md = Some(Md { at, ..Md::default() });
            e
        });
        write(&header, entries)
    }

    /// Part `k` of the Resource List Index, `None` beyond the id space.
    pub(crate) fn resource_list_part(&self, st: &State, k: u64) -> Option<Vec<u8>> {
        if k == 0 || k > self.part_count(st) {
            return None;
        }
        let at = Some(to_datetime(st.state_ms));
        let md = Md { capability: Some(Capability::ResourceList), at, ..Md::default() };
        let header = self.header(RootFormat::UrlSet, md, Some(RESOURCE_LIST));
        let per = self.config.ids_per_part();
        Some(write(&header, st.listed((k - 1) * per..k * per).map(|l| self.resource_entry(&l))))
    }

    /// The Change List Index: retained closed lists, then the open one.
    pub(crate) fn change_list_index(&self, st: &State) -> Vec<u8> {
        let from = Some(to_datetime(st.first_from_ms()));
        let header = self.header(
            RootFormat::SitemapIndex,
            Md { capability: Some(Capability::ChangeList), from, ..Md::default() },
            None,
        );
        let closed = st.closed.iter().map(|l| (l.seq, l.from_ms, Some(l.until_ms)));
        let lists = closed.chain(std::iter::once((st.open.seq, st.open.from_ms, None)));
        let entries = lists.map(|(seq, from, until)| {
            let mut e = Entry::new(self.url(&change_list(seq)));
            let md = Md { from: Some(to_datetime(from)), until: until.map(to_datetime), ..Md::default() };
            e.md = Some(md);
            e
        });
        write(&header, entries)
    }

    /// The open Change List (no `until`).
    pub(crate) fn open_change_list(&self, st: &State) -> Vec<u8> {
        self.change_list_doc(&st.open, None)
    }

    /// A Change List being closed at `until_ms`; these bytes are served from then on.
    pub(crate) fn closed_change_list(&self, list: &OpenList, until_ms: i64) -> Vec<u8> {
        self.change_list_doc(list, Some(until_ms))
    }

    fn change_list_doc(&self, list: &OpenList, until_ms: Option<i64>) -> Vec<u8> {
        let md = Md {
            capability: Some(Capability::ChangeList),
            from: Some(to_datetime(list.from_ms)),
            until: until_ms.map(to_datetime),
            ..Md::default()
        };
        let header = self.header(RootFormat::UrlSet, md, Some(CHANGE_LIST_INDEX));
        write(&header, list.changes.iter().map(|c| self.change_entry(c)))
    }

    /// A Resource List (or manifest) entry: lastmod, md5 + sha-256, length, type, links.
    pub(crate) fn resource_entry(&self, l: &Listed) -> Entry {
        let mut e = Entry::new(self.url(&target_path(l.target)));
        e.lastmod = Some(to_datetime(l.lastmod_ms));
        e.md = Some(Md {
            hash: Some(l.digests.hash_list()),
            length: Some(l.digests.length),
            media_type: Some(media_type(l.target).into()),
            ..Md::default()
        });
        e.links = self.links(l.target, Some((l.lastmod_ms, &l.digests)));
        e
    }

    fn change_entry(&self, c: &ChangeRecord) -> Entry {
        let mut e = Entry::new(self.url(&target_path(c.target)));
        let mut md = Md { change: Some(c.change), datetime: Some(to_datetime(c.datetime_ms)), ..Md::default() };
        if let (Some(d), false) = (&c.digests, c.change == Change::Deleted) {
            e.lastmod = md.datetime;
            md.hash = Some(d.hash_list());
            md.length = Some(d.length);
            md.media_type = Some(media_type(c.target).into());
            e.links = self.links(c.target, Some((c.datetime_ms, d)));
        }
        e.md = Some(md);
        e
    }

    /// Inherited-style links (with links on) and the `via` link (in aggregator mode).
    fn links(&self, target: Target, current: Option<(i64, &Digests)>) -> Vec<Link> {
        let mut links = Vec::new();
        if self.config.links {
            match target {
                Target::Data(id) => {
                    let mut d = Link::new("describedby", self.url(&target_path(Target::Meta(id))));
                    d.media_type = Some(META_TYPE.into());
                    links.push(d);
                    links.push(Link::new("canonical", format!("https://example.org/records/{id}")));
                    links.push(Link::new("collection", format!("https://example.org/collections/{}", id % 4)));
                }
                Target::Meta(id) => links.push(Link::new("describes", self.url(&target_path(Target::Data(id))))),
            }
        }
        if let (Some(origin), Some((t, d))) = (&self.origin, current) {
            let mut via = Link::new("via", format!("{origin}{}", target_path(target)));
            via.modified = Some(to_datetime(t));
            via.hash = Some(d.hash_list());
            via.length = Some(d.length);
            via.media_type = Some(media_type(target).into());
            links.push(via);
        }
        links
    }

    /// The header of a Resource Dump or a Resource Dump Manifest.
    pub(crate) fn dump_header(&self, capability: Capability, at_ms: i64) -> Header {
        let md = Md { capability: Some(capability), at: Some(to_datetime(at_ms)), ..Md::default() };
        self.header(RootFormat::UrlSet, md, None)
    }
}

/// Writes a whole document into memory.
pub(crate) fn write(header: &Header, entries: impl IntoIterator<Item = Entry>) -> Vec<u8> {
    fn inner(header: &Header, entries: impl IntoIterator<Item = Entry>) -> io::Result<Vec<u8>> {
        let mut w = DocumentWriter::new(Vec::new(), header)?;
        for e in entries {
            w.write_entry(&e)?;
        }
        w.finish()
    }
    // Writing to a Vec cannot fail.
    inner(header, entries).unwrap_or_default()
}
