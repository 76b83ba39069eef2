//! The digital objects a record points to: the http(s) URLs among its Dublin Core
//! `dc:identifier` and `dc:relation` values (DSpace and EPrints put their bitstreams' and
//! landing pages' URLs there). Pure: the stored record's bytes in, URLs out; which of them a
//! harvester fetches (its authority rules) is the harvester's to say.

use quick_xml::NsReader;
use quick_xml::events::Event;
use quick_xml::name::{Namespace, ResolveResult};

/// The Dublin Core elements namespace (`dc:`).
pub const DC_NS: &str = "http://purl.org/dc/elements/1.1/";

/// The http(s) URLs of `document`'s `dc:identifier` and `dc:relation` elements, in document
/// order, each once. Stops quietly at the first XML error: a stored record was well-formed.
pub fn object_urls(document: &[u8]) -> Vec<String> {
    let Ok(document) = std::str::from_utf8(document) else { return Vec::new() };
    let mut reader = NsReader::from_str(document);
    let mut out: Vec<String> = Vec::new();
    let mut inside = false;
    let mut text = String::new();
    // Bounded by the document's length: every event consumes input.
    loop {
        match reader.read_resolved_event() {
            Ok((ResolveResult::Bound(Namespace(ns)), Event::Start(e)))
                if ns == DC_NS && matches!(e.local_name().as_ref(), "identifier" | "relation") =>
            {
                inside = true;
                text.clear();
            }
            Ok((_, Event::Text(t))) if inside => text.push_str(&t),
            Ok((_, Event::GeneralRef(r))) if inside => {
                if let Ok(Some(c)) = r.resolve_char_ref() {
                    text.push(c);
                } else if let Some(s) = quick_xml::escape::resolve_xml_entity(&r) {
                    text.push_str(s);
                }
            }
            Ok((_, Event::End(_))) if inside => {
                inside = false;
                let v = text.trim();
                let lower = v.get(..8).map(str::to_ascii_lowercase).unwrap_or_default();
                if (lower.starts_with("http://") || lower.starts_with("https://")) && !out.iter().any(|u| u == v) {
                    out.push(v.to_owned());
                }
            }
            Ok((_, Event::Eof)) | Err(_) => return out,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dc_identifiers_and_relations_that_are_urls() {
        let doc = br#"<record xmlns="http://www.openarchives.org/OAI/2.0/"><header><identifier>http://not/a/dc/one</identifier></header>
<metadata><oai_dc:dc xmlns:oai_dc="http://www.openarchives.org/OAI/2.0/oai_dc/" xmlns:dc="http://purl.org/dc/elements/1.1/">
<dc:identifier>http://repo.example/bitstream/1?a=1&amp;b=2</dc:identifier><dc:identifier>urn:isbn:123</dc:identifier>
<dc:relation> https://repo.example/item/2 </dc:relation><dc:identifier>http://repo.example/bitstream/1?a=1&amp;b=2</dc:identifier>
</oai_dc:dc></metadata></record>"#;
        assert_eq!(object_urls(doc), ["http://repo.example/bitstream/1?a=1&b=2", "https://repo.example/item/2"]);
    }
}
