//! Tributary's own URIs: where each republished document and resource lives under the
//! configured base URL.
//!
//! The harvester names a resource when it stores it (records are keyed by this URI) and the
//! publisher and web server serve under the same names, so the scheme lives in one place.
//! Resource URIs are per *source*, not per set: a resource in source `museum-a` has one
//! Tributary URI whichever sets include `museum-a`.
//!
//! ```text
//! {base}.well-known/resourcesync             Source Description
//! {base}sets/{set}/                          page describing the set (describedby)
//! {base}sets/{set}/capabilitylist.xml
//! {base}sets/{set}/resourcelist.xml          Resource List, or its index past the limit
//! {base}sets/{set}/resourcelist-{n}.xml      parts of the index
//! {base}sets/{set}/changelist.xml            the recent Change List (the one the Capability List names)
//! {base}sets/{set}/changelist-index.xml      Change List Index
//! {base}sets/{set}/changelist-{n}.xml        Change Lists (closed ones never change)
//! {base}sets/{set}/notifications             the set's change-notification topic (WebSub)
//! {base}hub                                  the built-in WebSub hub
//! {base}r/{source}/{scheme}/{authority}{path}[?query]   a resource
//! ```

use url::Url;

/// Builds and parses Tributary URIs under one base URL.
#[derive(Debug, Clone)]
pub struct Naming {
    base: String,
}

impl Naming {
    /// Uses `base` as the prefix; a missing trailing slash is added.
    pub fn new(base: &Url) -> Self {
        let mut base = base.as_str().to_owned();
        if !base.ends_with('/') {
            base.push('/');
        }
        Naming { base }
    }

    /// The base URL, ending in `/`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The Source Description (`/.well-known/resourcesync`).
    pub fn source_description(&self) -> String {
        format!("{}.well-known/resourcesync", self.base)
    }

    /// The human-readable page describing a set.
    pub fn set_page(&self, set: &str) -> String {
        format!("{}sets/{set}/", self.base)
    }

    /// A set's Capability List.
    pub fn capability_list(&self, set: &str) -> String {
        format!("{}sets/{set}/capabilitylist.xml", self.base)
    }

    /// A set's Resource List (or Resource List Index).
    pub fn resource_list(&self, set: &str) -> String {
        format!("{}sets/{set}/resourcelist.xml", self.base)
    }

    /// Part `n` (1-based) of a set's Resource List Index.
    pub fn resource_list_part(&self, set: &str, n: u64) -> String {
        format!("{}sets/{set}/resourcelist-{n}.xml", self.base)
    }

    /// A set's recent Change List, the one its Capability List names (a plain Change List).
    pub fn change_list(&self, set: &str) -> String {
        format!("{}sets/{set}/changelist.xml", self.base)
    }

    /// A set's Change List Index.
    pub fn change_list_index(&self, set: &str) -> String {
        format!("{}sets/{set}/changelist-index.xml", self.base)
    }

    /// Change List `n` (1-based) of a set.
    pub fn change_list_part(&self, set: &str, n: u64) -> String {
        format!("{}sets/{set}/changelist-{n}.xml", self.base)
    }

    /// A set's Resource Dump.
    pub fn resource_dump(&self, set: &str) -> String {
        format!("{}sets/{set}/resourcedump.xml", self.base)
    }

    /// Package `n` (1-based) of the set's Resource Dump at change-log position `seq`.
    pub fn resource_dump_package(&self, set: &str, seq: u64, n: u64) -> String {
        format!("{}sets/{set}/resourcedump-{seq}-{n}.zip", self.base)
    }

    /// The manifest of that package, on its own.
    pub fn resource_dump_manifest(&self, set: &str, seq: u64, n: u64) -> String {
        format!("{}sets/{set}/resourcedump-{seq}-{n}-manifest.xml", self.base)
    }

    /// A set's Change Dump.
    pub fn change_dump(&self, set: &str) -> String {
        format!("{}sets/{set}/changedump.xml", self.base)
    }

    /// The Change Dump package of Change List `n`: closed (`last = None`), or the open list's
    /// cut through event `last`.
    pub fn change_dump_package(&self, set: &str, n: u64, last: Option<u64>) -> String {
        match last {
            None => format!("{}sets/{set}/changedump-{n}.zip", self.base),
            Some(last) => format!("{}sets/{set}/changedump-{n}-{last}.zip", self.base),
        }
    }

    /// That package's manifest, on its own.
    pub fn change_dump_manifest(&self, set: &str, n: u64, last: Option<u64>) -> String {
        match last {
            None => format!("{}sets/{set}/changedump-{n}-manifest.xml", self.base),
            Some(last) => format!("{}sets/{set}/changedump-{n}-{last}-manifest.xml", self.base),
        }
    }

    /// A set's recent changes as a FeedSync Atom feed.
    pub fn set_feed(&self, set: &str) -> String {
        format!("{}sets/{set}/feed.atom", self.base)
    }

    /// Page `page` of a set's complete feed (`None`: the first, or the only one).
    pub fn set_complete_feed(&self, set: &str, page: Option<u64>) -> String {
        match page {
            None => format!("{}sets/{set}/feed-complete.atom", self.base),
            Some(n) => format!("{}sets/{set}/feed-complete-{n}.atom", self.base),
        }
    }

    /// The set's change-notification channel: the WebSub topic its notifications are
    /// published under (ResourceSync Change Notification 1.0.1 §2).
    pub fn notification_topic(&self, set: &str) -> String {
        format!("{}sets/{set}/notifications", self.base)
    }

    /// The set a notification topic URI names, if it is one of this base's.
    pub fn parse_notification_topic(&self, topic: &str) -> Option<String> {
        let set = topic.strip_prefix(&self.base)?.strip_prefix("sets/")?.strip_suffix("/notifications")?;
        (!set.is_empty() && !set.contains('/')).then(|| set.to_owned())
    }

    /// The built-in WebSub hub.
    pub fn hub(&self) -> String {
        format!("{}hub", self.base)
    }

    /// The provenance endpoint.
    pub fn provenance(&self) -> String {
        format!("{}provenance", self.base)
    }

    /// Tributary's URI for `upstream`, harvested from `source`. `None` when `upstream` is
    /// not an absolute http(s) URI (those are never fetched).
    pub fn resource(&self, source: &str, upstream: &str) -> Option<String> {
        self.resource_url(source, &Url::parse(upstream).ok()?)
    }

    /// [`Naming::resource`] for an upstream URI already parsed (the harvester names every
    /// entry it walks, and parsing it again was a percent of a baseline's CPU).
    pub fn resource_url(&self, source: &str, u: &Url) -> Option<String> {
        if !matches!(u.scheme(), "http" | "https") {
            return None;
        }
        let (host, path) = (u.host_str()?, u.path());
        // Pushed rather than formatted: every entry of every list is named, and `format!` cost
        // three allocations where one will do.
        let mut out = String::with_capacity(self.base.as_str().len() + source.len() + host.len() + path.len() + 32);
        for part in [self.base.as_str(), "r/", source, "/", u.scheme(), "/", host] {
            out.push_str(part);
        }
        if let Some(p) = u.port() {
            use std::fmt::Write as _;
            let _ = write!(out, ":{p}");
        }
        out.push_str(path);
        if let Some(q) = u.query() {
            out.push('?');
            out.push_str(q);
        }
        Some(out)
    }

    /// The prefix every resource URI of `source` starts with.
    pub fn resource_prefix(&self, source: &str) -> String {
        format!("{}r/{source}/", self.base)
    }

    /// The (source, upstream URI) a Tributary resource URI was made from.
    pub fn parse_resource(&self, uri: &str) -> Option<(String, String)> {
        let rest = uri.strip_prefix(&self.base)?.strip_prefix("r/")?;
        let (source, rest) = rest.split_once('/')?;
        let (scheme, rest) = rest.split_once('/')?;
        if !matches!(scheme, "http" | "https") || source.is_empty() || rest.is_empty() {
            return None;
        }
        Some((source.to_owned(), format!("{scheme}://{rest}")))
    }

    /// The set id and part number of a set document path relative to the base, e.g.
    /// `sets/art/changelist-3.xml` → `("art", SetDocument::ChangeListPart(3))`.
    pub fn parse_set_document(&self, path: &str) -> Option<(String, SetDocument)> {
        let rest = path.strip_prefix("sets/")?;
        let (set, file) = rest.split_once('/')?;
        Some((set.to_owned(), self.parse_set_file(file)?))
    }

    /// The document a file name under `sets/{set}/` names, e.g. `changelist-3.xml` →
    /// `SetDocument::ChangeListPart(3)`; the empty name is the set's page. The web router
    /// extracts the set and the file name as separate path segments and asks here.
    pub fn parse_set_file(&self, file: &str) -> Option<SetDocument> {
        Some(match file {
            "" => SetDocument::Page,
            "capabilitylist.xml" => SetDocument::CapabilityList,
            "resourcelist.xml" => SetDocument::ResourceList,
            "changelist.xml" => SetDocument::ChangeList,
            "changelist-index.xml" => SetDocument::ChangeListIndex,
            "resourcedump.xml" => SetDocument::ResourceDump,
            "changedump.xml" => SetDocument::ChangeDump,
            "feed.atom" => SetDocument::Feed,
            "notifications" => SetDocument::Notifications,
            "feed-complete.atom" => SetDocument::CompleteFeed(None),
            other => part(other, "resourcelist-")
                .map(SetDocument::ResourceListPart)
                .or_else(|| part(other, "changelist-").map(SetDocument::ChangeListPart))
                .or_else(|| feed_page(other))
                .or_else(|| dump_file(other))
                .or_else(|| change_dump_file(other))?,
        })
    }
}

/// `feed-complete-{n}.atom`.
fn feed_page(file: &str) -> Option<SetDocument> {
    let n = file.strip_prefix("feed-complete-")?.strip_suffix(".atom")?;
    let n = n.bytes().all(|b| b.is_ascii_digit()).then(|| n.parse::<u64>().ok()).flatten()?;
    Some(SetDocument::CompleteFeed(Some(n)))
}

/// `resourcedump-{seq}-{n}.zip` or `resourcedump-{seq}-{n}-manifest.xml`.
fn dump_file(file: &str) -> Option<SetDocument> {
    let rest = file.strip_prefix("resourcedump-")?;
    let (rest, manifest) = match rest.strip_suffix("-manifest.xml") {
        Some(r) => (r, true),
        None => (rest.strip_suffix(".zip")?, false),
    };
    let (seq, n) = rest.split_once('-')?;
    let number = |s: &str| s.bytes().all(|b| b.is_ascii_digit()).then(|| s.parse::<u64>().ok()).flatten();
    let (seq, n) = (number(seq)?, number(n).filter(|n| *n >= 1)?);
    Some(if manifest { SetDocument::ResourceDumpManifest(seq, n) } else { SetDocument::ResourceDumpPackage(seq, n) })
}

/// `changedump-{n}[-{last}].zip` or `changedump-{n}[-{last}]-manifest.xml`.
fn change_dump_file(file: &str) -> Option<SetDocument> {
    let rest = file.strip_prefix("changedump-")?;
    let (rest, manifest) = match rest.strip_suffix("-manifest.xml") {
        Some(r) => (r, true),
        None => (rest.strip_suffix(".zip")?, false),
    };
    let number = |s: &str| s.bytes().all(|b| b.is_ascii_digit()).then(|| s.parse::<u64>().ok()).flatten();
    let (n, last) = match rest.split_once('-') {
        Some((n, last)) => (number(n)?, Some(number(last)?)),
        None => (number(rest)?, None),
    };
    (n >= 1).then_some(if manifest {
        SetDocument::ChangeDumpManifest(n, last)
    } else {
        SetDocument::ChangeDumpPackage(n, last)
    })
}

fn part(file: &str, prefix: &str) -> Option<u64> {
    file.strip_prefix(prefix)?.strip_suffix(".xml")?.parse().ok().filter(|n| *n >= 1)
}

/// The documents served per set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetDocument {
    /// The describing page.
    Page,
    /// The Capability List.
    CapabilityList,
    /// The Resource List or its index.
    ResourceList,
    /// A part of the Resource List Index.
    ResourceListPart(u64),
    /// The recent Change List.
    ChangeList,
    /// The Change List Index.
    ChangeListIndex,
    /// One Change List.
    ChangeListPart(u64),
    /// The Resource Dump.
    ResourceDump,
    /// Package `n` of the Resource Dump at change-log position `seq`: `(seq, n)`.
    ResourceDumpPackage(u64, u64),
    /// That package's manifest: `(seq, n)`.
    ResourceDumpManifest(u64, u64),
    /// The Change Dump.
    ChangeDump,
    /// The Change Dump package of Change List `n`: closed (`None`) or the open list's cut
    /// through the given event.
    ChangeDumpPackage(u64, Option<u64>),
    /// That package's manifest.
    ChangeDumpManifest(u64, Option<u64>),
    /// The set's recent changes as a FeedSync Atom feed.
    Feed,
    /// A page of the set's complete FeedSync feed (`None`: the first).
    CompleteFeed(Option<u64>),
    /// The set's change-notification topic (its latest notification).
    Notifications,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naming() -> Naming {
        Naming::new(&Url::parse("http://127.0.0.1:8080").unwrap())
    }

    #[test]
    fn resource_uris_round_trip() {
        let n = naming();
        for upstream in [
            "http://museum-a.example.org/obj/1.xml",
            "https://example.org:8443/a%20b/c?x=1&y=2",
            "http://127.0.0.1:9000/",
        ] {
            let uri = n.resource("museum-a", upstream).unwrap();
            assert!(uri.starts_with("http://127.0.0.1:8080/r/museum-a/"), "{uri}");
            assert_eq!(n.parse_resource(&uri), Some(("museum-a".into(), upstream.into())));
        }
        assert_eq!(n.resource("s", "ftp://example.org/x"), None);
        assert_eq!(n.parse_resource("http://127.0.0.1:8080/sets/a/"), None);
    }

    #[test]
    fn resource_uris_are_spelled_exactly() {
        // Stored keys: the spelling must never drift.
        let n = naming();
        for (upstream, ours) in [
            ("https://example.org:8443/a%20b/c?x=1", "http://127.0.0.1:8080/r/m/https/example.org:8443/a%20b/c?x=1"),
            ("http://Example.ORG:80/x", "http://127.0.0.1:8080/r/m/http/example.org/x"),
            ("http://[::1]:8099/f", "http://127.0.0.1:8080/r/m/http/[::1]:8099/f"),
            ("http://h.example/?", "http://127.0.0.1:8080/r/m/http/h.example/?"),
        ] {
            assert_eq!(n.resource("m", upstream).as_deref(), Some(ours), "{upstream}");
        }
    }

    #[test]
    fn set_documents() {
        let n = naming();
        assert_eq!(n.change_list_part("art", 3), "http://127.0.0.1:8080/sets/art/changelist-3.xml");
        assert_eq!(
            n.parse_set_document("sets/art/changelist-3.xml"),
            Some(("art".into(), SetDocument::ChangeListPart(3)))
        );
        assert_eq!(n.parse_set_document("sets/art/"), Some(("art".into(), SetDocument::Page)));
        assert_eq!(n.parse_set_document("sets/art/changelist-0.xml"), None);
        assert_eq!(n.parse_set_document("sets/art/other.xml"), None);
        assert_eq!(n.parse_set_file("resourcelist-2.xml"), Some(SetDocument::ResourceListPart(2)));
        assert_eq!(n.parse_set_file(""), Some(SetDocument::Page));
        assert_eq!(n.parse_set_file("changelist-x.xml"), None);
        assert_eq!(n.parse_set_file("resourcedump.xml"), Some(SetDocument::ResourceDump));
        assert_eq!(n.parse_set_file("resourcedump-17-2.zip"), Some(SetDocument::ResourceDumpPackage(17, 2)));
        assert_eq!(n.parse_set_file("resourcedump-17-2-manifest.xml"), Some(SetDocument::ResourceDumpManifest(17, 2)));
        assert_eq!(n.parse_set_file("changedump.xml"), Some(SetDocument::ChangeDump));
        assert_eq!(n.parse_set_file("changedump-3.zip"), Some(SetDocument::ChangeDumpPackage(3, None)));
        assert_eq!(n.parse_set_file("changedump-3-40.zip"), Some(SetDocument::ChangeDumpPackage(3, Some(40))));
        assert_eq!(n.parse_set_file("changedump-3-manifest.xml"), Some(SetDocument::ChangeDumpManifest(3, None)));
        assert_eq!(
            n.parse_set_file("changedump-3-40-manifest.xml"),
            Some(SetDocument::ChangeDumpManifest(3, Some(40)))
        );
        assert_eq!(n.parse_set_file("changedump-0.zip"), None);
        for bad in ["resourcedump-17-0.zip", "resourcedump-x-1.zip", "resourcedump-1.zip", "resourcedump-+1-1.zip"] {
            assert_eq!(n.parse_set_file(bad), None, "{bad}");
        }
    }
}
