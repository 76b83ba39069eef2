//! One record in one metadata format: its header, its `<metadata>` and, for a record
//! harvested from an OAI-PMH source, the provenance `<about>` that says where it came from.
//!
//! - A record of an OAI-PMH source is served in the format it was harvested in, its metadata
//!   element byte for byte as the source sent it (the namespace declarations it inherited go
//!   on `<metadata>`), with an `originDescription` of the source — and, nested in it, the
//!   one the source gave when it was an aggregator itself.
//! - Every record is offered in oai_dc (§3.4), generated from what Tributary knows of it (for
//!   a harvested OAI-PMH record in oai_dc, its own metadata): no bitstream is read for it, so
//!   an oai_dc list of a million resources costs no bitstream reads.
//! - An XML bitstream in a known format (EDM, LIDO, MODS, MARCXML) is also offered in it.

use std::io::Read;

use super::formats::{self, Format, MAX_EMBED, OAI_DC_NS, SNIFF_BYTES};
use super::write::{self, attr, element};
use super::{Answer, Fault, HarvestedFrom, OaiProvider};
use crate::model::W3cDateTime;
use crate::model::oai::{Origin, StoredRecord as Harvested, read_stored};
use crate::publish::PublishError;
use crate::publish::feed::feed_item_state;
use crate::publish::links::inherit_views;
use crate::store::{BlobId, RawRecord, RecordHead, StoreError};

/// The start tag of an oai_dc record.
pub(super) const DC_OPEN: &str = "<oai_dc:dc xmlns:oai_dc=\"http://www.openarchives.org/OAI/2.0/oai_dc/\" xmlns:dc=\"http://purl.org/dc/elements/1.1/\" xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xsi:schemaLocation=\"http://www.openarchives.org/OAI/2.0/oai_dc/ http://www.openarchives.org/OAI/2.0/oai_dc.xsd\">";
const PROVENANCE_OPEN: &str = "<provenance xmlns=\"http://www.openarchives.org/OAI/2.0/provenance\" xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xsi:schemaLocation=\"http://www.openarchives.org/OAI/2.0/provenance http://www.openarchives.org/OAI/2.0/provenance.xsd\">";

/// One version of a resource: the change-log event a list stands at (or the record's latest
/// state, for GetRecord).
#[derive(Debug, Clone)]
pub(super) struct Version {
    pub(super) deleted: bool,
    pub(super) datetime: W3cDateTime,
    pub(super) sha256: BlobId,
}

/// What the bitstream of a version is, as far as dissemination cares.
enum Content {
    /// A record harvested from an OAI-PMH source.
    Harvested { doc: Vec<u8>, rec: Box<Harvested> },
    /// An XML document whose root, at byte `start`, is in the namespace `ns`.
    Xml { doc: Vec<u8>, ns: String, start: usize },
    /// Anything else (or nothing readable).
    Other,
}

impl OaiProvider {
    /// ListMetadataFormats with `identifier`.
    pub(super) fn formats_of(&self, identifier: &str) -> Result<Vec<Format>, Answer> {
        let (raw, _) = self.lookup(identifier)?;
        let v = raw.head()?;
        let ver = latest(&v)?;
        let mut out = vec![formats::by_prefix("oai_dc").expect("oai_dc is known")];
        if let Some(h) = self.harvested.get(v.source) {
            out.push(self.source_format(h));
        } else if !ver.deleted
            && let Content::Xml { ns, .. } = self.content(&v, &ver, false)?
        {
            out.extend(formats::by_namespace(&ns).filter(|f| f.prefix != "oai_dc"));
        }
        out.dedup_by(|a, b| a.prefix == b.prefix);
        Ok(out)
    }

    /// GetRecord: the `<record>`.
    pub(super) fn get_record(&self, identifier: &str, prefix: &str) -> Result<Vec<u8>, Answer> {
        let (raw, identifier) = self.lookup(identifier)?;
        let v = raw.head()?;
        let ver = latest(&v)?;
        let mut out = Vec::new();
        if !self.render(&mut out, &raw, &v, &identifier, &ver, prefix, true)? {
            let why = format!("{identifier} is not available as {prefix}");
            return Err(Fault::new("cannotDisseminateFormat", why).into());
        }
        Ok(out)
    }

    /// The stored record an identifier names, and the identifier as Tributary writes it.
    fn lookup(&self, identifier: &str) -> Result<(RawRecord, String), Answer> {
        let missing = || Fault::new("idDoesNotExist", format!("{identifier} is not an identifier of this repository"));
        let uri = self.uri_of(identifier).ok_or_else(missing)?;
        let raw = self.publisher.store().snapshot().raw_record(&uri)?.ok_or_else(missing)?;
        Ok((raw, identifier.to_owned()))
    }

    /// Appends the record (`full`) or its header in `prefix`; `false` when it is not
    /// available in that format.
    ///
    /// # Errors
    /// When the store cannot be read.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn render(
        &self,
        out: &mut Vec<u8>,
        raw: &RawRecord,
        v: &RecordHead<'_>,
        identifier: &str,
        ver: &Version,
        prefix: &str,
        full: bool,
    ) -> Result<bool, PublishError> {
        let harvested = self.harvested.get(v.source);
        // Only what is needed is read: nothing for oai_dc headers, the first bytes to tell a
        // format, the whole bitstream to serve it.
        let content = match (full, prefix, harvested) {
            (_, _, _) if ver.deleted => Content::Other,
            // oai_dc is made from the record: a list of a million reads no bitstream.
            (_, "oai_dc", None) | (false, "oai_dc", _) => Content::Other,
            (false, p, Some(h)) if p == h.prefix => Content::Other,
            _ => self.content(v, ver, full)?,
        };
        if !available(&content, harvested, prefix, ver.deleted) {
            return Ok(false);
        }
        // A stored record that cannot be read back has no metadata in its own format to give.
        let unreadable = !matches!(content, Content::Harvested { .. }) && prefix != "oai_dc";
        if full && !ver.deleted && harvested.is_some_and(|h| h.prefix == prefix) && unreadable {
            return Ok(false);
        }
        let (stamp, slow);
        let datestamp = match write::Stamp::of(&ver.datetime) {
            Some(s) => {
                stamp = s;
                stamp.as_str()
            }
            None => {
                slow = write::datestamp(&ver.datetime);
                slow.as_str()
            }
        };
        let layout = self.publisher.layout();
        let sets = layout.by_source.get(v.source).map_or(&[][..], Vec::as_slice).iter().map(String::as_str);
        if !full {
            write::header(out, identifier, datestamp, sets, ver.deleted);
            return Ok(true);
        }
        out.extend_from_slice(b"<record>");
        write::header(out, identifier, datestamp, sets, ver.deleted);
        if !ver.deleted {
            self.metadata(out, raw, v, ver, &content, harvested, prefix)?;
        }
        out.extend_from_slice(b"</record>\n");
        Ok(true)
    }

    #[allow(clippy::too_many_arguments)]
    fn metadata(
        &self,
        out: &mut Vec<u8>,
        raw: &RawRecord,
        v: &RecordHead<'_>,
        ver: &Version,
        content: &Content,
        harvested: Option<&HarvestedFrom>,
        prefix: &str,
    ) -> Result<(), PublishError> {
        match (content, harvested) {
            (Content::Harvested { doc, rec }, Some(h)) if prefix == h.prefix => {
                original(out, doc, rec);
                provenance(out, h, rec, ver, false);
            }
            (Content::Harvested { rec, .. }, Some(h)) => {
                self.dublin_core(out, raw, v)?;
                provenance(out, h, rec, ver, true);
            }
            (Content::Xml { doc, start, ns }, _) if formats::by_namespace(ns).is_some_and(|f| f.prefix == prefix) => {
                let root = formats::embeddable(doc, *start).unwrap_or_default();
                out.extend_from_slice(b"<metadata>");
                out.extend_from_slice(root);
                out.extend_from_slice(b"</metadata>");
            }
            _ => self.dublin_core(out, raw, v)?,
        }
        Ok(())
    }

    /// oai_dc made from the record: Tributary's URI, the origin, type, lastmod, the links the
    /// policy keeps, and the title a feed gave.
    fn dublin_core(&self, out: &mut Vec<u8>, raw: &RawRecord, v: &RecordHead<'_>) -> Result<(), PublishError> {
        out.extend_from_slice(b"<metadata>");
        out.extend_from_slice(DC_OPEN.as_bytes());
        if let Some(title) = self.title(raw, v)? {
            element(out, "dc:title", &title);
        }
        element(out, "dc:identifier", v.uri);
        element(out, "dc:source", v.origin);
        if let Some(t) = v.media_type {
            element(out, "dc:format", t);
        }
        if let Some(d) = v.lastmod {
            element(out, "dc:date", d);
        }
        let layout = self.publisher.layout();
        let policy = layout.policies.for_source(v.source);
        let kept = inherit_views(&v.links, policy, |_| Ok::<_, PublishError>(None))?;
        for k in &kept {
            element(out, "dc:relation", &k.href);
        }
        out.extend_from_slice(b"</oai_dc:dc></metadata>");
        Ok(())
    }

    /// The title of an item harvested from a feed (the only sources that give one).
    fn title(&self, raw: &RawRecord, v: &RecordHead<'_>) -> Result<Option<String>, PublishError> {
        if !v.upstream.contains("sx-item=") {
            return Ok(None);
        }
        let rec = raw.record()?;
        Ok(feed_item_state(self.publisher.store(), &rec)?.and_then(|item| item.title))
    }

    /// Reads what dissemination needs of the version's bitstream (`whole`: all of it; else
    /// its first bytes unless it is a harvested record). The version's own bitstream, else
    /// (collected since) the record's current one.
    fn content(&self, v: &RecordHead<'_>, ver: &Version, whole: bool) -> Result<Content, PublishError> {
        let harvested = self.harvested.contains_key(v.source);
        if !harvested && !formats::is_xml(v.media_type) {
            return Ok(Content::Other);
        }
        let limit = if whole || harvested { MAX_EMBED + 1 } else { SNIFF_BYTES as u64 };
        let Some(doc) = self.read_blob(&ver.sha256, limit)?.or(self.read_blob(&v.sha256, limit)?) else {
            return Ok(Content::Other);
        };
        if doc.len() as u64 > MAX_EMBED {
            return Ok(Content::Other);
        }
        if harvested {
            return Ok(read_stored(&doc).map_or(Content::Other, |rec| Content::Harvested { doc, rec: Box::new(rec) }));
        }
        Ok(match formats::root(&doc) {
            // Served only whole and well-formed.
            Some((ns, start)) if !whole || formats::embeddable(&doc, start).is_some() => {
                Content::Xml { doc, ns, start }
            }
            _ => Content::Other,
        })
    }

    /// Up to `limit` bytes of a blob; `None` when the store has it no more.
    fn read_blob(&self, id: &BlobId, limit: u64) -> Result<Option<Vec<u8>>, PublishError> {
        let reader = match self.publisher.store().get(id) {
            Ok(r) => r,
            Err(StoreError::BlobNotFound(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let mut doc = Vec::new();
        reader.take(limit).read_to_end(&mut doc)?;
        Ok(Some(doc))
    }
}

/// The record's latest state as a version.
fn latest(v: &RecordHead<'_>) -> Result<Version, StoreError> {
    let datetime: W3cDateTime = v.changed.parse().map_err(|e| StoreError::corrupt("record", e))?;
    Ok(Version { deleted: v.is_deleted(), datetime, sha256: v.sha256 })
}

/// Whether a version can be disseminated in `prefix`.
fn available(content: &Content, harvested: Option<&HarvestedFrom>, prefix: &str, deleted: bool) -> bool {
    if prefix == "oai_dc" || harvested.is_some_and(|h| h.prefix == prefix) {
        return true;
    }
    match content {
        _ if deleted || harvested.is_some() => false,
        Content::Xml { ns, .. } => formats::by_namespace(ns).is_some_and(|f| f.prefix == prefix),
        _ => false,
    }
}

/// The harvested metadata element, as harvested, inside a `<metadata>` that declares the
/// namespaces it inherited.
fn original(out: &mut Vec<u8>, doc: &[u8], rec: &Harvested) {
    out.extend_from_slice(b"<metadata");
    // The innermost declaration of each name is the one in scope; `<metadata>` itself stays
    // in the OAI-PMH namespace (its default is written on the envelope).
    for (i, (name, value)) in rec.decls.iter().enumerate() {
        let shadowed = rec.decls[i + 1..].iter().any(|(n, _)| n == name);
        if !shadowed && name != "xmlns" {
            attr(out, name, value);
        }
    }
    out.push(b'>');
    if let Some(r) = &rec.metadata {
        out.extend_from_slice(&doc[r.clone()]);
    }
    out.extend_from_slice(b"</metadata>");
}

/// `<about>` with Tributary's `originDescription` of the source, the source's own inside.
fn provenance(out: &mut Vec<u8>, h: &HarvestedFrom, rec: &Harvested, ver: &Version, altered: bool) {
    let own = Origin {
        harvest_date: write::datestamp(&ver.datetime),
        altered: altered.to_string(),
        base_url: h.base.to_string(),
        identifier: rec.identifier.clone(),
        datestamp: rec.datestamp.clone(),
        namespace: rec.namespace.clone().unwrap_or_else(|| OAI_DC_NS.to_owned()),
        nested: rec.origin.clone().map(Box::new),
    };
    out.extend_from_slice(b"<about>");
    out.extend_from_slice(PROVENANCE_OPEN.as_bytes());
    origin(out, &own);
    out.extend_from_slice(b"</provenance></about>");
}

fn origin(out: &mut Vec<u8>, o: &Origin) {
    out.extend_from_slice(b"<originDescription");
    attr(out, "harvestDate", &o.harvest_date);
    attr(out, "altered", &o.altered);
    out.push(b'>');
    element(out, "baseURL", &o.base_url);
    element(out, "identifier", &o.identifier);
    element(out, "datestamp", &o.datestamp);
    element(out, "metadataNamespace", &o.namespace);
    if let Some(n) = &o.nested {
        origin(out, n);
    }
    out.extend_from_slice(b"</originDescription>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn original_metadata_keeps_its_bytes_and_gains_its_namespaces() {
        let doc = br#"<record xmlns="http://www.openarchives.org/OAI/2.0/" xmlns:oai_dc="http://www.openarchives.org/OAI/2.0/oai_dc/" xmlns:dc="http://purl.org/dc/elements/1.1/"><header><identifier>oai:s:1</identifier><datestamp>2020-01-02</datestamp></header><metadata><oai_dc:dc><dc:title>T</dc:title></oai_dc:dc></metadata></record>"#;
        let rec = read_stored(doc).unwrap();
        let mut out = Vec::new();
        original(&mut out, doc, &rec);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"<metadata xmlns:oai_dc="http://www.openarchives.org/OAI/2.0/oai_dc/" xmlns:dc="http://purl.org/dc/elements/1.1/"><oai_dc:dc><dc:title>T</dc:title></oai_dc:dc></metadata>"#
        );
        let h = HarvestedFrom { base: "http://s.example/oai".parse().unwrap(), prefix: "oai_dc".into() };
        let ver =
            Version { deleted: false, datetime: "2026-01-01T00:00:00.123Z".parse().unwrap(), sha256: BlobId([0; 32]) };
        let mut out = Vec::new();
        provenance(&mut out, &h, &rec, &ver, false);
        let s = String::from_utf8(out).unwrap();
        assert!(s.contains(r#"<originDescription harvestDate="2026-01-01T00:00:00Z" altered="false"><baseURL>http://s.example/oai</baseURL><identifier>oai:s:1</identifier><datestamp>2020-01-02</datestamp><metadataNamespace>http://www.openarchives.org/OAI/2.0/oai_dc/</metadataNamespace></originDescription>"#), "{s}");
    }
}
