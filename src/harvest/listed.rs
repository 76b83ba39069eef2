//! What a Resource List entry says about one resource, as the store records it ([`Listing`]), and
//! whether the record already held is its current state.
//!
//! Pure: no I/O, so the provenance rules (spec §14.8) are testable on their own. The origin
//! is the entry's `via` target when the upstream is itself an aggregator, else the `<loc>`;
//! the entry's other `rs:ln` links are kept as they came (the publisher filters them).

use url::Url;

use crate::model::{Entry, HashAlgorithm, Link};
use crate::store::{BlobId, Expected, Failure, Listing, NewFailure, NewRecord, Record, Via};

/// One accepted entry: where Tributary names it and fetches it, and what the list says of it.
#[derive(Debug, Clone)]
pub(crate) struct Listed {
    /// Tributary's URI (the record key).
    pub(crate) uri: String,
    /// The absolute `<loc>`.
    pub(crate) loc: Url,
    /// What the entry declares, as the store records it.
    pub(crate) listing: Listing,
}

impl Listed {
    /// Reads an entry whose `<loc>` was resolved to `loc` and named `uri`.
    pub(crate) fn new(entry: Entry, loc: Url, uri: String) -> Listed {
        let mut md = entry.md.unwrap_or_default();
        let declared = md.hash.take().unwrap_or_default();
        let (via_links, links): (Vec<Link>, Vec<Link>) = entry.links.into_iter().partition(|l| l.rel == "via");
        let (origin, via) = match via_links.into_iter().next() {
            Some(v) => (
                loc.join(&v.href).map_or(v.href.clone(), String::from),
                Via {
                    modified: v.modified,
                    hash: v.hash.unwrap_or_default(),
                    length: v.length,
                    media_type: v.media_type,
                },
            ),
            None => (
                loc.to_string(),
                Via {
                    modified: entry.lastmod,
                    hash: declared.clone(),
                    length: md.length,
                    media_type: md.media_type.clone(),
                },
            ),
        };
        let listing = Listing {
            origin,
            declared,
            length: md.length,
            media_type: md.media_type,
            lastmod: entry.lastmod,
            via,
            links,
        };
        Listed { uri, loc, listing }
    }

    /// What the stored content must match.
    pub(crate) fn expected(&self) -> Expected {
        Expected::declared(self.listing.length, Some(&self.listing.declared))
            .with_media_type(self.listing.media_type.clone())
    }

    /// The URLs to try: the `<loc>`, then `duplicate` mirrors by ascending `pri`.
    pub(crate) fn urls(&self) -> Vec<Url> {
        let mut mirrors: Vec<&Link> = self.listing.links.iter().filter(|l| l.rel == "duplicate").collect();
        mirrors.sort_by_key(|l| l.priority());
        let mut out = vec![self.loc.clone()];
        out.extend(mirrors.iter().filter_map(|l| self.loc.join(&l.href).ok()));
        out
    }

    /// The record for this entry with content `sha256`.
    pub(crate) fn into_record(self, source: &str, sha256: BlobId) -> NewRecord {
        NewRecord { uri: self.uri, source: source.to_owned(), upstream: self.loc.into(), sha256, listing: self.listing }
    }

    /// The failure to record when this entry could not be stored, with what it listed, so a
    /// later poll can retry it without the list.
    pub(crate) fn into_failure(self, source: &str, reason: String) -> NewFailure {
        NewFailure {
            source: source.to_owned(),
            uri: self.uri,
            upstream: self.loc.into(),
            reason,
            listing: self.listing,
        }
    }

    /// The entry a recorded failure listed; `None` when its `<loc>` no longer parses (rows are
    /// written from parsed URLs, so only a damaged row).
    pub(crate) fn from_failure(f: Failure) -> Option<Listed> {
        let loc = Url::parse(&f.upstream).ok()?;
        Some(Listed { uri: f.uri, loc, listing: f.listing })
    }

    /// Whether `held` already has this entry's content: every declared digest Tributary can
    /// compare matches, or — with none — `lastmod` and `length` are the ones recorded.
    pub(crate) fn content_held(&self, held: &Record) -> bool {
        if held.is_deleted() {
            return false;
        }
        let l = &self.listing;
        let mut compared = false;
        for d in &l.declared.0 {
            let stored = match &d.algorithm {
                HashAlgorithm::Sha256 => Some(held.sha256.to_hex()),
                HashAlgorithm::Md5 => held.md5.clone(),
                // A sha-1 was verified when the record was stored, so the declared one stands.
                HashAlgorithm::Sha1 => held.declared.get(&HashAlgorithm::Sha1).map(str::to_owned),
                HashAlgorithm::Other(_) => None,
            };
            if let Some(stored) = stored {
                if !stored.eq_ignore_ascii_case(&d.value) {
                    return false;
                }
                compared = true;
            }
        }
        if l.length.is_some_and(|len| len != held.length) {
            return false;
        }
        compared || (l.lastmod.is_some() && l.lastmod == held.lastmod)
    }

    /// Whether the record `held` (with content already current) says everything this entry
    /// says; if not, an upsert without a fetch brings the metadata up to date.
    pub(crate) fn metadata_held(&self, held: &Record) -> bool {
        let l = &self.listing;
        held.origin == l.origin
            && held.upstream == self.loc.as_str()
            && held.declared == l.declared
            && held.media_type == l.media_type
            && held.lastmod == l.lastmod
            && held.via == l.via
            && held.links == l.links
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Md, W3cDateTime};

    fn entry(via: bool) -> Entry {
        let mut e = Entry::new("http://a.example/r/1");
        e.md = Some(Md { length: Some(3), ..Md::default() });
        e.links.push(Link::new("describedby", "http://a.example/m/1"));
        if via {
            e.links.push(Link { length: Some(3), ..Link::new("via", "http://origin.example/1") });
        }
        e
    }

    #[test]
    fn origin_is_the_via_target_when_present_else_the_loc() {
        let loc = Url::parse("http://a.example/r/1").unwrap();
        let plain = Listed::new(entry(false), loc.clone(), "u".into());
        assert_eq!(plain.listing.origin, "http://a.example/r/1");
        let agg = Listed::new(entry(true), loc, "u".into());
        assert_eq!(agg.listing.origin, "http://origin.example/1");
        assert_eq!(agg.listing.via.length, Some(3));
        assert_eq!(agg.listing.links.len(), 1, "the via link becomes the origin, other links stay");
    }

    #[test]
    fn mirrors_follow_the_loc_by_priority() {
        let mut e = entry(false);
        e.links.push(Link { pri: Some(5), ..Link::new("duplicate", "http://m.example/b") });
        e.links.push(Link { pri: Some(1), ..Link::new("duplicate", "http://m.example/a") });
        let l = Listed::new(e, Url::parse("http://a.example/r/1").unwrap(), "u".into());
        let urls: Vec<String> = l.urls().iter().map(Url::to_string).collect();
        assert_eq!(urls, ["http://a.example/r/1", "http://m.example/a", "http://m.example/b"]);
    }

    #[test]
    fn a_failure_gives_back_the_entry_it_was_made_from() {
        let base = Url::parse("http://s/").unwrap();
        let mut e = entry(true);
        let mut mirror = Link::new("duplicate", "http://mirror/a");
        mirror.pri = Some(1);
        e.links.push(mirror);
        let listed = Listed::new(e, base.join("a").unwrap(), "http://agg/r/s/http/s/a".into());
        let f = listed.clone().into_failure("s", "why".into());
        let stored = Failure {
            source: f.source,
            uri: f.uri,
            upstream: f.upstream,
            reason: f.reason,
            first_failed: W3cDateTime::now(),
            last_failed: W3cDateTime::now(),
            attempts: 1,
            listing: f.listing,
        };
        let back = Listed::from_failure(stored).unwrap();
        assert_eq!(back.urls(), listed.urls(), "the mirrors come back, in their order");
        assert_eq!((back.uri, back.loc, back.listing), (listed.uri, listed.loc, listed.listing));
    }
}
