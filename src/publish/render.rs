//! The Resource List's hot path: one `<url>` entry rendered straight from a borrowed
//! [`RecordView`], byte-identical to what the model's writer produces for the entry
//! [`super::entries::resource_entry`] builds (a test holds the two together).
//!
//! A 100,000-entry list spends most of its time per entry, and building an owned `Entry`
//! (a dozen strings, three datetimes parsed from their stored text and formatted again) cost
//! more than everything else together. Here stored strings are escaped directly into one
//! reused buffer and datetimes are copied as the W3C text they are stored as. A link carrying
//! attributes in other namespaces needs the writer's namespace bookkeeping, so such a record
//! takes the model path instead ([`Rendered::NeedsModel`]).

use std::borrow::Cow;

use crate::model::escape_into;
use crate::model::push_attr as attr;
use crate::store::{LinkView, RecordView};

/// An inherited link that passed the policy: its (possibly reduced) `rel` and its (possibly
/// rewritten) `href`, with the stored link for the other attributes.
pub(crate) struct Kept<'a> {
    pub(crate) rel: Cow<'a, str>,
    pub(crate) href: Cow<'a, str>,
    pub(crate) link: &'a LinkView<'a>,
}

/// Whether the entry was rendered.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Rendered {
    /// `out` holds the entry.
    Done,
    /// A link has foreign attributes; render through the model instead.
    NeedsModel,
}

/// Renders `v` as a Resource List entry with `kept` links into `out` (cleared first).
pub(crate) fn resource_entry(out: &mut Vec<u8>, v: &RecordView<'_>, kept: &[Kept<'_>]) -> Rendered {
    if kept.iter().any(|k| !k.link.extra.is_empty()) {
        return Rendered::NeedsModel;
    }
    out.clear();
    out.extend_from_slice(b"<url><loc>");
    escape_into(out, v.uri, false);
    out.extend_from_slice(b"</loc><lastmod>");
    out.extend_from_slice(v.changed.as_bytes());
    out.extend_from_slice(b"</lastmod><rs:md hash=\"");
    if let Some(md5) = v.md5 {
        out.extend_from_slice(b"md5:");
        escape_into(out, md5, true);
        out.push(b' ');
    }
    out.extend_from_slice(b"sha-256:");
    hex_into(out, &v.sha256.0);
    out.push(b'"');
    number(out, "length", v.length);
    opt(out, "type", v.media_type);
    out.extend_from_slice(b"/><rs:ln rel=\"via\" href=\"");
    escape_into(out, v.origin, true);
    out.push(b'"');
    opt_raw(out, "modified", v.via.modified);
    hashes(out, &v.via.hash);
    if let Some(n) = v.via.length {
        number(out, "length", n);
    }
    opt(out, "type", v.via.media_type);
    out.extend_from_slice(b"/>");
    for k in kept {
        link(out, k);
    }
    out.extend_from_slice(b"</url>\n");
    Rendered::Done
}

/// One inherited link, attributes in the writer's order.
fn link(out: &mut Vec<u8>, k: &Kept<'_>) {
    let l = k.link;
    out.extend_from_slice(b"<rs:ln");
    attr(out, "rel", &k.rel);
    attr(out, "href", &k.href);
    if let Some(p) = l.pri {
        number(out, "pri", u64::from(p));
    }
    opt_raw(out, "modified", l.modified);
    if let Some(h) = &l.hash {
        hashes(out, h);
    }
    if let Some(n) = l.length {
        number(out, "length", n);
    }
    opt(out, "type", l.media_type);
    opt(out, "encoding", l.encoding);
    opt(out, "path", l.path);
    out.extend_from_slice(b"/>");
}

fn opt(out: &mut Vec<u8>, name: &str, value: Option<&str>) {
    if let Some(v) = value {
        attr(out, name, v);
    }
}

/// A stored datetime: its W3C text needs no escaping.
fn opt_raw(out: &mut Vec<u8>, name: &str, value: Option<&str>) {
    if let Some(v) = value {
        out.push(b' ');
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"=\"");
        out.extend_from_slice(v.as_bytes());
        out.push(b'"');
    }
}

fn number(out: &mut Vec<u8>, name: &str, n: u64) {
    out.push(b' ');
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"=\"");
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.push(b'"');
}

/// A `hash` attribute from stored `(algorithm, value)` pairs; nothing when empty.
fn hashes(out: &mut Vec<u8>, pairs: &[(&str, &str)]) {
    if pairs.is_empty() {
        return;
    }
    out.extend_from_slice(b" hash=\"");
    for (i, (alg, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(b' ');
        }
        escape_into(out, alg, true);
        out.push(b':');
        escape_into(out, value, true);
    }
    out.push(b'"');
}

fn hex_into(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(HEX[usize::from(b >> 4)]);
        out.push(HEX[usize::from(b & 0xF)]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DocumentWriter, Header, Link};
    use crate::publish::entries;
    use crate::publish::links::{LinkPolicy, inherit, inherit_views};
    use crate::store::{Batch, Expected, Listing, NewRecord, Store, StoreOptions, Via};

    fn rewrite(href: &str) -> Result<Option<String>, ()> {
        Ok((href == "http://u/meta&1").then(|| "http://t/r/s/http/u/meta&1".to_owned()))
    }

    fn records() -> Vec<NewRecord> {
        let mut rich = Link::new("describedby", "http://u/meta&1");
        rich.pri = Some(2);
        rich.modified = Some("2024-01-02T03:04:05.5Z".parse().unwrap());
        rich.hash = Some(crate::model::HashList::parse("md5:00112233445566778899aabbccddeeff sha-512:a\"b").unwrap().0);
        rich.length = Some(10);
        rich.media_type = Some("application/xml; q=\"1\"".into());
        rich.encoding = Some("gzip".into());
        rich.path = Some("/x<y".into());
        let base = NewRecord {
            uri: "http://t/r/s/http/u/a?x=1&y=<2>".into(),
            source: "s".into(),
            upstream: "http://u/a?x=1&y=<2>".into(),
            sha256: crate::store::BlobId([0; 32]),
            listing: Listing {
                origin: "http://o/a?\"q\"&r".into(),
                declared: Default::default(),
                length: None,
                media_type: Some("text/html; charset=\"utf-8\"".into()),
                lastmod: None,
                via: Via {
                    modified: Some("2024-05-01T09:00:00+01:00".parse().unwrap()),
                    hash: crate::model::HashList::parse("md5:00112233445566778899aabbccddeeff").unwrap().0,
                    length: Some(3),
                    media_type: Some("text/html".into()),
                },
                links: vec![
                    rich,
                    Link::new("alternate canonical", "http://u/alt"),
                    Link::new("collection", "http://u/c"),
                ],
            },
        };
        let bare = NewRecord {
            uri: "http://t/r/s/http/u/b".into(),
            upstream: "http://u/b".into(),
            listing: Listing {
                origin: "http://u/b".into(),
                media_type: None,
                via: Via::default(),
                links: vec![],
                ..base.listing.clone()
            },
            ..base.clone()
        };
        vec![base, bare]
    }

    /// The fast path and the model path write the same bytes, md5 known or not.
    #[test]
    fn rendering_matches_the_model_writer() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_with(&dir.path().join("s"), &StoreOptions::small()).unwrap();
        for md5 in [true, false] {
            let info = store.put(&b"abc"[..], &Expected { md5, ..Expected::none() }).unwrap();
            let mut batch = Batch::new();
            for mut r in records() {
                r.sha256 = info.id;
                r.uri = format!("{}-{md5}", r.uri);
                batch.upsert(&["s"], r);
            }
            store.apply(&mut batch).unwrap();
        }
        let policy = LinkPolicy::default();
        let mut n = 0;
        for raw in store.raw_records_in_range("http://t/", "", None) {
            let raw = raw.unwrap();
            let v = raw.view().unwrap();
            let kept = inherit_views(&v.links, &policy, rewrite).unwrap();
            let mut fast = Vec::new();
            assert_eq!(resource_entry(&mut fast, &v, &kept), Rendered::Done);
            let rec = raw.record().unwrap();
            let links = inherit(&rec.links, &policy, rewrite).unwrap();
            let mut w = DocumentWriter::new(Vec::new(), &Header::default()).unwrap();
            let start = w.bytes_written() as usize;
            w.write_entry(&entries::resource_entry(rec, links)).unwrap();
            let model = w.finish().unwrap();
            let model = &model[start..model.len() - "</urlset>\n".len()];
            assert_eq!(String::from_utf8_lossy(&fast), String::from_utf8_lossy(model));
            n += 1;
        }
        assert_eq!(n, 4);
    }

    #[test]
    fn foreign_attributes_take_the_model_path() {
        let link = LinkView {
            rel: "describedby",
            href: "http://u/m",
            encoding: None,
            hash: None,
            length: None,
            modified: None,
            path: None,
            pri: None,
            media_type: None,
            extra: vec![crate::store::AttrView { ns: Some("urn:x"), prefix: Some("x"), local: "k", value: "v" }],
        };
        let kept = [Kept { rel: "describedby".into(), href: "http://u/m".into(), link: &link }];
        let v = RecordView {
            uri: "u",
            source: "s",
            sets: vec![],
            origin: "o",
            upstream: "u",
            sha256: crate::store::BlobId([0; 32]),
            md5: None,
            length: 0,
            declared: vec![],
            media_type: None,
            lastmod: None,
            via: crate::store::ViaView { modified: None, hash: vec![], length: None, media_type: None },
            links: vec![],
            deleted: None,
            changed: "2024-01-01T00:00:00Z",
            heads: vec![],
        };
        assert_eq!(resource_entry(&mut Vec::new(), &v, &kept), Rendered::NeedsModel);
    }
}
