//! A harvested record read back from its stored document (the `<record>` as the repository
//! sent it, made standalone by `read`: the namespace declarations it inherited are on its
//! start tag). What serving it again needs: the repository's identifier and datestamp, the
//! byte range of the `<metadata>` child (served as it is), the namespace declarations in scope
//! there, the child's namespace, and the `originDescription` the repository gave when it was
//! an aggregator itself — whose innermost hop is also the record's true origin.

use std::ops::Range;

use quick_xml::Reader;
use quick_xml::events::{BytesRef, BytesStart, Event};

/// One hop of provenance (OAI-PMH provenance schema, `originDescription`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    /// `harvestDate`.
    pub harvest_date: String,
    /// `altered`.
    pub altered: String,
    /// `baseURL` of the repository the record was harvested from.
    pub base_url: String,
    /// Its `identifier` there.
    pub identifier: String,
    /// Its `datestamp` there.
    pub datestamp: String,
    /// `metadataNamespace`.
    pub namespace: String,
    /// The hop before, when that repository was an aggregator too.
    pub nested: Option<Box<Origin>>,
}

impl Origin {
    /// The first hop: the repository the record was created in.
    pub fn innermost(&self) -> &Origin {
        let mut o = self;
        // Bounded by the nesting read (MAX_DEPTH).
        while let Some(n) = &o.nested {
            o = n;
        }
        o
    }
}

/// What a stored record says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredRecord {
    /// The header's `identifier`.
    pub identifier: String,
    /// The header's `datestamp`.
    pub datestamp: String,
    /// `xmlns…` attributes in scope inside `<metadata>` (the record's and the metadata
    /// element's own), as `(name, value)`.
    pub decls: Vec<(String, String)>,
    /// The bytes of `<metadata>`'s child element.
    pub metadata: Option<Range<usize>>,
    /// That element's namespace.
    pub namespace: Option<String>,
    /// The first `originDescription` of its `<about>`s.
    pub origin: Option<Origin>,
}

/// Deepest nesting read; stored records are the harvester's, but a store can be imported.
const MAX_DEPTH: usize = 512;

/// Reads a stored record (see the module docs); `None` when it is not one (not UTF-8, not well-formed).
pub fn read_stored(doc: &[u8]) -> Option<StoredRecord> {
    let text = std::str::from_utf8(doc).ok()?;
    let mut xml = Reader::from_str(text);
    xml.config_mut().expand_empty_elements = false;
    let mut st = State::default();
    // Bounded: every event consumes input.
    loop {
        let at = xml.buffer_position() as usize;
        match xml.read_event().ok()? {
            Event::Start(e) => st.start(&e, at, None)?,
            Event::Empty(e) => st.start(&e, at, Some(xml.buffer_position() as usize))?,
            Event::End(_) => st.end(xml.buffer_position() as usize),
            Event::Text(t) => st.text(&t),
            Event::CData(c) => st.text(&c),
            Event::GeneralRef(r) => st.text(&resolve(&r)?.to_string()),
            Event::DocType(_) => return None,
            Event::Eof => return st.path.is_empty().then_some(st.out),
            _ => {}
        }
    }
}

fn resolve(r: &BytesRef<'_>) -> Option<char> {
    if r.is_char_ref() {
        return r.resolve_char_ref().ok().flatten();
    }
    quick_xml::escape::resolve_xml_entity(r.as_ref()).and_then(|s| s.chars().next())
}

#[derive(Default)]
struct State {
    /// Local names of the open elements.
    path: Vec<String>,
    out: StoredRecord,
    /// The open `originDescription`s, outermost first.
    origins: Vec<Origin>,
    /// Text of the leaf being read, if it is one we keep.
    leaf: Option<String>,
    metadata_start: usize,
}

impl State {
    fn start(&mut self, e: &BytesStart<'_>, at: usize, empty_end: Option<usize>) -> Option<()> {
        let name = local(e.name().as_ref()).to_owned();
        let depth = self.path.len();
        if depth >= MAX_DEPTH {
            return None;
        }
        let parent = self.path.last().cloned();
        let parent = parent.as_deref();
        match (depth, parent) {
            (0, _) => self.out.decls.extend(decls(e)),
            (1, _) if name == "metadata" => self.out.decls.extend(decls(e)),
            (2, Some("metadata")) => self.metadata_child(e, at, empty_end),
            _ => {}
        }
        if self.in_about() && name == "originDescription" {
            self.origins.push(Origin {
                harvest_date: attr(e, "harvestDate").unwrap_or_default(),
                altered: attr(e, "altered").unwrap_or_default(),
                ..Origin::default()
            });
        }
        self.leaf = self.keeps_leaf(parent, &name).then(String::new);
        if empty_end.is_none() {
            self.path.push(name);
        } else {
            self.leaf = None;
            if name == "originDescription" && self.in_about() {
                self.close_origin();
            }
        }
        Some(())
    }

    fn metadata_child(&mut self, e: &BytesStart<'_>, at: usize, empty_end: Option<usize>) {
        let qname = e.name().as_ref().to_owned();
        let prefix = qname.split_once(':').map(|(p, _)| p);
        let key = prefix.map_or_else(|| "xmlns".to_owned(), |p| format!("xmlns:{p}"));
        let own = decls(e);
        self.out.namespace =
            own.iter().chain(self.out.decls.iter().rev()).find(|(k, _)| *k == key).map(|(_, v)| v.clone());
        self.metadata_start = at;
        if let Some(end) = empty_end {
            self.out.metadata = Some(at..end);
        }
    }

    fn in_about(&self) -> bool {
        self.path.get(1).is_some_and(|p| p == "about")
    }

    fn keeps_leaf(&self, parent: Option<&str>, name: &str) -> bool {
        match parent {
            Some("header") if self.path.len() == 2 => matches!(name, "identifier" | "datestamp"),
            Some("originDescription") if self.in_about() => {
                matches!(name, "baseURL" | "identifier" | "datestamp" | "metadataNamespace")
            }
            _ => false,
        }
    }

    fn text(&mut self, t: &str) {
        if let Some(leaf) = &mut self.leaf {
            leaf.push_str(t);
        }
    }

    fn end(&mut self, after: usize) {
        let Some(name) = self.path.pop() else { return };
        let parent = self.path.last().cloned();
        let parent = parent.as_deref();
        if let Some(text) = self.leaf.take() {
            self.set_leaf(parent, &name, text.trim().to_owned());
        }
        if self.path.len() == 2 && parent == Some("metadata") && self.out.metadata.is_none() {
            self.out.metadata = Some(self.metadata_start..after);
        }
        if name == "originDescription" && self.in_about() {
            self.close_origin();
        }
    }

    fn set_leaf(&mut self, parent: Option<&str>, name: &str, text: String) {
        match (parent, self.origins.last_mut()) {
            (Some("header"), _) if name == "identifier" => self.out.identifier = text,
            (Some("header"), _) if name == "datestamp" => self.out.datestamp = text,
            (Some("originDescription"), Some(o)) => match name {
                "baseURL" => o.base_url = text,
                "identifier" => o.identifier = text,
                "datestamp" => o.datestamp = text,
                _ => o.namespace = text,
            },
            _ => {}
        }
    }

    /// An `originDescription` ended: it is the nested one of the one around it, or the first
    /// complete chain.
    fn close_origin(&mut self) {
        let Some(done) = self.origins.pop() else { return };
        match self.origins.last_mut() {
            Some(outer) if outer.nested.is_none() => outer.nested = Some(Box::new(done)),
            Some(_) => {}
            None if self.out.origin.is_none() => self.out.origin = Some(done),
            None => {}
        }
    }
}

/// The `xmlns` / `xmlns:p` attributes of a start tag.
fn decls(e: &BytesStart<'_>) -> Vec<(String, String)> {
    e.attributes()
        .with_checks(false)
        .flatten()
        .filter(|a| a.key.as_ref() == "xmlns" || a.key.as_ref().starts_with("xmlns:"))
        .map(|a| (a.key.as_ref().to_owned(), value(&a)))
        .collect()
}

fn value(a: &quick_xml::events::attributes::Attribute<'_>) -> String {
    a.normalized_value(quick_xml::XmlVersion::Implicit1_0)
        .map_or_else(|_| a.value.clone().into_owned(), |v| v.into_owned())
}

fn attr(e: &BytesStart<'_>, key: &str) -> Option<String> {
    let a = e.attributes().with_checks(false).flatten().find(|a| a.key.as_ref() == key)?;
    Some(value(&a))
}

fn local(name: &str) -> &str {
    name.rsplit_once(':').map_or(name, |(_, l)| l)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r#"<record xmlns="http://www.openarchives.org/OAI/2.0/" xmlns:oai_dc="http://www.openarchives.org/OAI/2.0/oai_dc/" xmlns:dc="http://purl.org/dc/elements/1.1/"><header><identifier>oai:x:1</identifier><datestamp>2020-01-02</datestamp></header><metadata><oai_dc:dc><dc:title>A &amp; B</dc:title></oai_dc:dc></metadata><about><provenance xmlns="http://www.openarchives.org/OAI/2.0/provenance"><originDescription harvestDate="2020-02-02T00:00:00Z" altered="false"><baseURL>http://o/oai</baseURL><identifier>oai:o:1</identifier><datestamp>2019-01-01</datestamp><metadataNamespace>http://www.openarchives.org/OAI/2.0/oai_dc/</metadataNamespace><originDescription harvestDate="2019-02-02" altered="false"><baseURL>http://p/oai</baseURL><identifier>oai:p:1</identifier><datestamp>2018-01-01</datestamp><metadataNamespace>n</metadataNamespace></originDescription></originDescription></provenance></about></record>"#;

    #[test]
    fn reads_a_stored_record() {
        let h = read_stored(DOC.as_bytes()).unwrap();
        assert_eq!((h.identifier.as_str(), h.datestamp.as_str()), ("oai:x:1", "2020-01-02"));
        let m = &DOC[h.metadata.clone().unwrap()];
        assert_eq!(m, "<oai_dc:dc><dc:title>A &amp; B</dc:title></oai_dc:dc>");
        assert_eq!(h.namespace.as_deref(), Some("http://www.openarchives.org/OAI/2.0/oai_dc/"));
        assert_eq!(h.decls.len(), 3);
        let o = h.origin.unwrap();
        assert_eq!((o.base_url.as_str(), o.identifier.as_str()), ("http://o/oai", "oai:o:1"));
        let inner = o.nested.unwrap();
        assert_eq!((inner.base_url.as_str(), inner.harvest_date.as_str()), ("http://p/oai", "2019-02-02"));
        assert!(inner.nested.is_none());
    }

    #[test]
    fn refuses_what_is_not_a_record() {
        assert!(read_stored(b"<record><metadata>").is_none());
        assert!(read_stored(&[0xff, 0xfe]).is_none());
    }
}
