//! Metadata formats: the ones Tributary can name (prefix, schema, namespace), and which of
//! them a stored XML bitstream is, by its root element's namespace. Only the first bytes of a
//! bitstream are read to tell; a bitstream served as metadata is read whole and checked to be
//! well-formed first, so a broken one can never break the response around it.

use quick_xml::Reader;
use quick_xml::events::Event;

/// A metadata format as ListMetadataFormats names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Format {
    pub(crate) prefix: String,
    pub(crate) schema: String,
    pub(crate) namespace: String,
}

/// The oai_dc namespace; every record is offered in oai_dc (OAI-PMH 2.0 §3.4).
pub(crate) const OAI_DC_NS: &str = "http://www.openarchives.org/OAI/2.0/oai_dc/";

/// `(prefix, namespace, schema)` of the formats recognised in XML bitstreams and named for
/// OAI-PMH sources: Europeana's EDM (an `rdf:RDF` root), LIDO, MODS, MARCXML.
const KNOWN: [(&str, &str, &str); 5] = [
    ("oai_dc", OAI_DC_NS, "http://www.openarchives.org/OAI/2.0/oai_dc.xsd"),
    ("edm", "http://www.w3.org/1999/02/22-rdf-syntax-ns#", "http://www.europeana.eu/schemas/edm/EDM.xsd"),
    ("lido", "http://www.lido-schema.org", "http://www.lido-schema.org/schema/v1.0/lido-v1.0.xsd"),
    ("mods", "http://www.loc.gov/mods/v3", "http://www.loc.gov/standards/mods/v3/mods-3-7.xsd"),
    ("marc21", "http://www.loc.gov/MARC21/slim", "http://www.loc.gov/standards/marcxml/schema/MARC21slim.xsd"),
];

fn format((prefix, namespace, schema): (&str, &str, &str)) -> Format {
    Format { prefix: prefix.into(), schema: schema.into(), namespace: namespace.into() }
}

/// Every known format.
pub(crate) fn known() -> impl Iterator<Item = Format> {
    KNOWN.into_iter().map(format)
}

/// The known format of a prefix.
pub(crate) fn by_prefix(prefix: &str) -> Option<Format> {
    KNOWN.into_iter().find(|k| k.0 == prefix).map(format)
}

/// The known format of a namespace.
pub(crate) fn by_namespace(ns: &str) -> Option<Format> {
    KNOWN.into_iter().find(|k| k.1 == ns).map(format)
}

/// Bytes read to find a bitstream's root element.
pub(crate) const SNIFF_BYTES: usize = 8 * 1024;
/// The largest bitstream embedded as metadata; larger ones are offered in oai_dc only.
pub(crate) const MAX_EMBED: u64 = 8 * 1024 * 1024;

/// Whether a media type is XML, so its bitstream is worth sniffing.
pub(crate) fn is_xml(media_type: Option<&str>) -> bool {
    let Some(t) = media_type else { return false };
    let t = t.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    t == "application/xml" || t == "text/xml" || t.ends_with("+xml")
}

/// The namespace of the root element in the first bytes of an XML document, and the byte
/// where the root starts; `None` if no root starts within them or the prolog is not XML.
pub(crate) fn root(head: &[u8]) -> Option<(String, usize)> {
    // The cut may fall inside a character.
    let text = match std::str::from_utf8(head) {
        Ok(t) => t,
        Err(e) => std::str::from_utf8(&head[..e.valid_up_to()]).ok()?,
    };
    let mut xml = Reader::from_str(text);
    // Bounded by `head`: every event consumes input.
    loop {
        let at = xml.buffer_position() as usize;
        match xml.read_event().ok()? {
            Event::Start(e) | Event::Empty(e) => {
                let qname = e.name().0.to_owned();
                let key = match qname.split_once(':') {
                    Some((p, _)) => format!("xmlns:{p}"),
                    None => "xmlns".into(),
                };
                let ns = e.attributes().with_checks(false).flatten().find(|a| a.key.0 == key)?;
                return Some((ns.value.into_owned(), at));
            }
            Event::Decl(d) => {
                let utf8 = d.encoding().is_none_or(|e| e.is_ok_and(|e| e.eq_ignore_ascii_case("utf-8")));
                if !utf8 {
                    return None;
                }
            }
            Event::DocType(_) | Event::Eof => return None,
            _ => {}
        }
    }
}

/// The root element of a whole XML document, from `start`, if the document is well-formed
/// UTF-8 with nothing but comments, processing instructions and space after the root.
pub(crate) fn embeddable(doc: &[u8], start: usize) -> Option<&[u8]> {
    let body = std::str::from_utf8(doc.get(start..)?).ok()?;
    let mut xml = Reader::from_str(body);
    xml.config_mut().check_end_names = true;
    let mut depth = 0usize;
    let mut end = None;
    // Bounded: every event consumes input.
    loop {
        match xml.read_event().ok()? {
            Event::Start(_) | Event::Empty(_) if depth == 0 && end.is_some() => return None,
            Event::CData(_) | Event::GeneralRef(_) if depth == 0 => return None,
            Event::Start(_) => depth += 1,
            Event::End(_) => {
                depth = depth.checked_sub(1)?;
                if depth == 0 && end.is_none() {
                    end = Some(xml.buffer_position() as usize);
                }
            }
            Event::Empty(_) if depth == 0 && end.is_none() => end = Some(xml.buffer_position() as usize),
            Event::Text(t) if depth == 0 && !t.trim().is_empty() => return None,
            Event::DocType(_) => return None,
            Event::Eof => return if depth == 0 { end.map(|e| &body.as_bytes()[..e]) } else { None },
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_and_embedding() {
        let doc = b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!-- c --><mods:mods xmlns:mods=\"http://www.loc.gov/mods/v3\"><mods:titleInfo/></mods:mods>\n";
        let (ns, at) = root(doc).unwrap();
        assert_eq!(ns, "http://www.loc.gov/mods/v3");
        assert_eq!(by_namespace(&ns).unwrap().prefix, "mods");
        assert_eq!(embeddable(doc, at).unwrap(), &doc[at..doc.len() - 1]);
        assert!(embeddable(b"<a><b></a>", 0).is_none());
        assert!(embeddable(b"<a/><b/>", 0).is_none());
        assert!(root(b"<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?><a xmlns=\"x\"/>").is_none());
        assert!(is_xml(Some("application/rdf+xml; charset=utf-8")) && !is_xml(Some("image/png")));
    }
}
