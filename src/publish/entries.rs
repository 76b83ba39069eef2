//! One `<url>` entry per record (Resource List) or event (Change List).
//!
//! The `<loc>` is always Tributary's URI and the `<rs:md>` describes Tributary's copy (which
//! is byte-identical to what was harvested); the origin is described only by the generated
//! `via` link, whose `href` is the stored origin — for a resource harvested from another
//! aggregator that is the original Source, never the intermediate (§14.8, Example 33). The
//! upstream URI is deliberately not used here at all.

use crate::model::{Change, Digest, Entry, HashAlgorithm, HashList, Link, Md};
use crate::store::{BlobId, Event, Record, Via};

/// The `hash` of Tributary's copy: md5 when known, then sha-256 (the spec's examples list md5
/// first).
pub(crate) fn content_hash(sha256: &BlobId, md5: Option<&str>) -> HashList {
    let mut list = Vec::with_capacity(2);
    if let Some(md5) = md5 {
        list.push(Digest { algorithm: HashAlgorithm::Md5, value: md5.to_owned() });
    }
    list.push(sha256.to_digest());
    HashList(list)
}

/// The `via` link: the origin URI and the origin's own `modified`, `hash`, `length`, `type`.
pub(crate) fn via_link(origin: &str, via: &Via) -> Link {
    Link {
        rel: "via".to_owned(),
        href: origin.to_owned(),
        modified: via.modified,
        hash: (!via.hash.is_empty()).then(|| via.hash.clone()),
        length: via.length,
        media_type: via.media_type.clone(),
        ..Link::default()
    }
}

/// A Resource List entry: `<lastmod>` is when Tributary's copy last changed; `inherited` are
/// the links that passed the policy (already rewritten).
pub(crate) fn resource_entry(rec: Record, inherited: Vec<Link>) -> Entry {
    let mut links = Vec::with_capacity(1 + inherited.len());
    links.push(via_link(&rec.origin, &rec.via));
    links.extend(inherited);
    Entry {
        md: Some(Md {
            hash: Some(content_hash(&rec.sha256, rec.md5.as_deref())),
            length: Some(rec.length),
            media_type: rec.media_type,
            ..Md::default()
        }),
        loc: rec.uri,
        lastmod: Some(rec.changed),
        links,
        ..Entry::default()
    }
}

/// A Change List entry. Built from the event alone (no record lookup), so a closed list's
/// bytes depend only on its fixed range of events. A creation or update carries the new
/// content's hash, length and type and a `<lastmod>` equal to its `datetime` (Destinations
/// such as the Python reference client set file times from `<lastmod>`, and the Resource List
/// reports the same instant); a deletion carries neither, there being no representation left.
pub(crate) fn change_entry(ev: Event) -> Entry {
    let deleted = ev.change == Change::Deleted;
    let md = if deleted {
        Md { change: Some(ev.change), datetime: Some(ev.datetime), ..Md::default() }
    } else {
        Md {
            change: Some(ev.change),
            datetime: Some(ev.datetime),
            hash: Some(content_hash(&ev.sha256, ev.md5.as_deref())),
            length: Some(ev.length),
            media_type: ev.media_type,
            ..Md::default()
        }
    };
    Entry {
        lastmod: (!deleted).then_some(ev.datetime),
        md: Some(md),
        links: vec![via_link(&ev.origin, &ev.via)],
        loc: ev.uri,
        ..Entry::default()
    }
}
