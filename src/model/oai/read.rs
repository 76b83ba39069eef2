//! One OAI-PMH response, read in one streaming pass (see the module docs of `oai`).
//!
//! Elements are matched by local name: the OAI-PMH envelope has no foreign elements outside
//! `metadata`, `about` and `description`, which are skipped here (a record's are copied
//! verbatim into its document). What makes a response unusable is an error, never a shorter
//! answer: a root that is not `OAI-PMH` (an HTML page served as OAI, sickle#58), a document
//! that ends before its root does (eScholarship/jschol#898), content after `</OAI-PMH>` (PHP
//! notices, findsorguk#843), a DOCTYPE, or XML that is not well-formed.

use quick_xml::Reader;
use quick_xml::events::{BytesRef, BytesStart, Event};

use super::repair::repair;
use super::{Identify, MetadataFormat, OaiError, OaiRecord, OaiResponse, OaiSet, ResumptionToken};

/// The standalone record document's first line.
const XML_DECL: &[u8] = b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";

/// Element nesting deeper than this is refused (a bound on the stack, not a real limit).
const MAX_DEPTH: usize = 256;

/// Why a response could not be read. Nothing of it is returned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OaiReadError {
    /// The document is not an OAI-PMH response at all (HTML, another XML vocabulary, empty).
    #[error("{document}: not an OAI-PMH response: {what}")]
    NotOai {
        /// URL or name.
        document: String,
        /// What it is instead.
        what: String,
    },
    /// The document ends before `</OAI-PMH>`.
    #[error("{document}: truncated: the document ends at byte {at}, inside <{open}>")]
    Truncated {
        /// URL or name.
        document: String,
        /// Where it ends.
        at: u64,
        /// The innermost element still open.
        open: String,
    },
    /// Something other than whitespace, comments or processing instructions after the root.
    #[error("{document}: content after </OAI-PMH> at byte {at}")]
    TrailingContent {
        /// URL or name.
        document: String,
        /// Where it starts.
        at: u64,
    },
    /// The XML is not well-formed, or too deeply nested.
    #[error("{document}: not well-formed XML at byte {at}: {detail}")]
    Syntax {
        /// URL or name.
        document: String,
        /// Where.
        at: u64,
        /// The parser's message.
        detail: String,
    },
}

/// Reads one response; `document` names it in errors (its URL).
///
/// # Errors
/// [`OaiReadError`]: see the module docs.
pub fn read_response(body: &[u8], document: &str) -> Result<OaiResponse, OaiReadError> {
    // Text already: `repair` replaces what is not UTF-8.
    let (fixed, repaired) = repair(body);
    let text = fixed.strip_prefix('\u{FEFF}').unwrap_or(&fixed);
    let mut p = Parser { text, document, xml: Reader::from_str(text), stack: Vec::new(), out: OaiResponse::default() };
    p.xml.config_mut().expand_empty_elements = false;
    p.run()?;
    p.out.repaired = repaired;
    Ok(p.out)
}

/// An element on the path from the root, with the namespace declarations it made.
struct Open {
    name: String,
    decls: Vec<(String, String)>,
}

struct Parser<'a> {
    text: &'a str,
    document: &'a str,
    xml: Reader<&'a [u8]>,
    stack: Vec<Open>,
    out: OaiResponse,
}

/// Where a leaf's text goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Leaf {
    ResponseDate,
    Error,
    Identify(usize),
    Format(usize),
    Set(usize),
    Token,
    Ignored,
}

impl<'a> Parser<'a> {
    fn run(&mut self) -> Result<(), OaiReadError> {
        self.root()?;
        // Bounded: every event consumes input.
        loop {
            let at = self.xml.buffer_position();
            let ev = self.next()?;
            match ev {
                Event::Start(e) => self.start(&e, at)?,
                Event::Empty(e) => self.empty(&e)?,
                Event::End(_) => {
                    self.stack.pop();
                    if self.stack.is_empty() {
                        return self.trailer();
                    }
                }
                Event::Eof => return Err(self.truncated()),
                Event::DocType(_) => return Err(self.syntax(at, "a DOCTYPE is refused (entity expansion)")),
                _ => {}
            }
        }
    }

    fn next(&mut self) -> Result<Event<'a>, OaiReadError> {
        let at = self.xml.buffer_position();
        match self.xml.read_event() {
            // Every other syntax error quick-xml reports is a construct the input ended inside.
            Err(quick_xml::Error::Syntax(e)) if !matches!(e, quick_xml::errors::SyntaxError::InvalidBangMarkup) => {
                Err(self.truncated())
            }
            other => other.map_err(|e| self.syntax(at, &e.to_string())),
        }
    }

    /// Up to and including the root's start tag, which must be `OAI-PMH`.
    fn root(&mut self) -> Result<(), OaiReadError> {
        loop {
            let at = self.xml.buffer_position();
            match self.next()? {
                Event::Start(e) => {
                    let name = local(e.name().as_ref()).to_owned();
                    if name != "OAI-PMH" {
                        return Err(self.not_oai(&format!("its root element is <{name}>")));
                    }
                    self.push(&e);
                    return Ok(());
                }
                Event::Empty(e) => {
                    let what = format!("its root element is an empty <{}/>", e.name().as_ref());
                    return Err(self.not_oai(&what));
                }
                Event::DocType(d) => {
                    let html = d.as_ref().trim().eq_ignore_ascii_case("html");
                    let what = if html { "an HTML page" } else { "a document with a DOCTYPE" };
                    return Err(self.not_oai(what));
                }
                Event::Text(t) if !t.trim().is_empty() => {
                    return Err(self.not_oai("text before any element"));
                }
                Event::Eof => return Err(self.not_oai(if at == 0 { "an empty body" } else { "no element" })),
                _ => {}
            }
        }
    }

    /// After `</OAI-PMH>`: only whitespace, comments and processing instructions.
    fn trailer(&mut self) -> Result<(), OaiReadError> {
        loop {
            let at = self.xml.buffer_position();
            match self.next() {
                Ok(Event::Eof) => return Ok(()),
                Ok(Event::Text(t)) if t.trim().is_empty() => {}
                Ok(Event::Comment(_) | Event::PI(_)) => {}
                _ => return Err(OaiReadError::TrailingContent { document: self.document.to_owned(), at }),
            }
        }
    }

    fn push(&mut self, e: &BytesStart<'_>) {
        let decls = e
            .attributes()
            .with_checks(false)
            .flatten()
            .filter(|a| a.key.as_ref().starts_with("xmlns"))
            .map(|a| (a.key.as_ref().to_owned(), a.value.into_owned()))
            .collect();
        self.stack.push(Open { name: local(e.name().as_ref()).to_owned(), decls });
    }

    fn parent(&self) -> &str {
        self.stack.last().map_or("", |o| &o.name)
    }

    fn start(&mut self, e: &BytesStart<'_>, at: u64) -> Result<(), OaiReadError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(self.syntax(at, "elements nested too deeply"));
        }
        let qname = e.name();
        let name = local(qname.as_ref());
        match (self.parent(), name) {
            ("ListRecords" | "GetRecord", "record") => return self.record(e, at),
            (_, "description" | "metadata" | "about") => return self.skip(),
            _ => {}
        }
        let leaf = self.leaf(e, name);
        match leaf {
            Some(leaf) => {
                let text = self.text()?;
                self.put(leaf, text);
                Ok(())
            }
            None => {
                self.open_container(name);
                self.push(e);
                Ok(())
            }
        }
    }

    fn empty(&mut self, e: &BytesStart<'_>) -> Result<(), OaiReadError> {
        let qname = e.name();
        let name = local(qname.as_ref());
        if let Some(leaf) = self.leaf(e, name) {
            self.put(leaf, String::new());
        }
        Ok(())
    }

    /// Containers whose children fill one value: a new value starts with them.
    fn open_container(&mut self, name: &str) {
        match (self.parent(), name) {
            ("OAI-PMH", "Identify") => self.out.identify = Some(Identify::default()),
            ("ListMetadataFormats", "metadataFormat") => self.out.formats.push(MetadataFormat::default()),
            ("ListSets", "set") => self.out.sets.push(OaiSet::default()),
            _ => {}
        }
    }

    /// Which leaf `name` is here, reading its attributes; `None` for a container.
    fn leaf(&mut self, e: &BytesStart<'_>, name: &str) -> Option<Leaf> {
        let parent = self.parent();
        let leaf = match (parent, name) {
            ("OAI-PMH", "responseDate") => Leaf::ResponseDate,
            ("OAI-PMH", "request") => Leaf::Ignored,
            ("OAI-PMH", "error") => {
                let code = attr(e, "code").unwrap_or_default();
                self.out.errors.push(OaiError { code, message: String::new() });
                Leaf::Error
            }
            ("Identify", field) => {
                Leaf::Identify(IDENTIFY_FIELDS.iter().position(|f| *f == field).unwrap_or(usize::MAX))
            }
            ("metadataFormat", field) => {
                Leaf::Format(FORMAT_FIELDS.iter().position(|f| *f == field).unwrap_or(usize::MAX))
            }
            ("set", field) => Leaf::Set(SET_FIELDS.iter().position(|f| *f == field).unwrap_or(usize::MAX)),
            ("ListRecords" | "ListIdentifiers" | "ListSets", "resumptionToken") => {
                let number = |k: &str| attr(e, k).and_then(|v| v.trim().parse().ok());
                self.out.token = Some(ResumptionToken {
                    value: String::new(),
                    cursor: number("cursor"),
                    complete_list_size: number("completeListSize"),
                });
                Leaf::Token
            }
            _ => return None,
        };
        Some(leaf)
    }

    fn put(&mut self, leaf: Leaf, text: String) {
        let o = &mut self.out;
        match leaf {
            Leaf::ResponseDate => o.response_date = Some(text),
            Leaf::Error => {
                if let Some(e) = o.errors.last_mut() {
                    e.message = text;
                }
            }
            Leaf::Token => {
                if let Some(t) = o.token.as_mut() {
                    t.value = text;
                }
            }
            Leaf::Identify(i) => {
                let Some(id) = o.identify.as_mut() else { return };
                match i {
                    0 => id.repository_name = text,
                    1 => id.base_url = text,
                    2 => id.protocol_version = text,
                    3 => id.admin_emails.push(text),
                    4 => id.earliest_datestamp = text,
                    5 => id.deleted_record = text,
                    6 => id.granularity = text,
                    _ => {}
                }
            }
            Leaf::Format(i) => {
                let Some(f) = o.formats.last_mut() else { return };
                match i {
                    0 => f.prefix = text,
                    1 => f.schema = text,
                    2 => f.namespace = text,
                    _ => {}
                }
            }
            Leaf::Set(i) => {
                let Some(s) = o.sets.last_mut() else { return };
                match i {
                    0 => s.spec = text,
                    1 => s.name = text,
                    _ => {}
                }
            }
            Leaf::Ignored => {}
        }
    }

    /// The text of the element whose start tag was just read, up to its end; markup inside it
    /// is skipped. Trimmed: every OAI-PMH leaf is a token, a date or a name.
    fn text(&mut self) -> Result<String, OaiReadError> {
        let mut text = String::new();
        let mut depth = 0usize;
        loop {
            let at = self.xml.buffer_position();
            match self.next()? {
                Event::Text(t) => text.push_str(&t),
                Event::CData(c) => text.push_str(&c),
                Event::GeneralRef(r) => text.push(self.resolve(&r, at)?),
                Event::Start(_) => depth += 1,
                Event::End(_) if depth == 0 => return Ok(text.trim().to_owned()),
                Event::End(_) => depth -= 1,
                Event::Eof => return Err(self.truncated()),
                _ => {}
            }
        }
    }

    /// Skips the element whose start tag was just read.
    fn skip(&mut self) -> Result<(), OaiReadError> {
        let mut depth = 0usize;
        loop {
            match self.next()? {
                Event::Start(_) => depth += 1,
                Event::End(_) if depth == 0 => return Ok(()),
                Event::End(_) => depth -= 1,
                Event::Eof => return Err(self.truncated()),
                _ => {}
            }
        }
    }

    /// A `record`, whose start tag (at byte `start`) was just read: its header fields, and its
    /// bytes as a standalone document.
    fn record(&mut self, e: &BytesStart<'_>, start: u64) -> Result<(), OaiReadError> {
        let own: Vec<String> = e
            .attributes()
            .with_checks(false)
            .flatten()
            .map(|a| a.key.as_ref().to_owned())
            .filter(|k| k.starts_with("xmlns"))
            .collect();
        let name_len = e.name().as_ref().len();
        let mut rec = OaiRecord::default();
        let mut depth = 0usize;
        let mut in_header = false;
        loop {
            let at = self.xml.buffer_position();
            match self.next()? {
                Event::Start(s) if depth == 0 && local(s.name().as_ref()) == "header" => {
                    rec.deleted = attr(&s, "status").is_some_and(|v| v == "deleted");
                    in_header = true;
                    depth += 1;
                }
                Event::Empty(s) if depth == 0 && local(s.name().as_ref()) == "header" => {
                    rec.deleted = attr(&s, "status").is_some_and(|v| v == "deleted");
                }
                Event::Start(s) if in_header && depth == 1 => {
                    let field = local(s.name().as_ref()).to_owned();
                    let text = self.text()?;
                    match field.as_str() {
                        "identifier" => rec.identifier = text,
                        "datestamp" => rec.datestamp = text,
                        "setSpec" => rec.set_specs.push(text),
                        _ => {}
                    }
                }
                Event::Start(_) => depth += 1,
                Event::End(_) if depth == 0 => break,
                Event::End(_) => {
                    depth -= 1;
                    if depth == 0 {
                        in_header = false;
                    }
                }
                Event::GeneralRef(r) => {
                    self.resolve(&r, at)?;
                }
                Event::Eof => return Err(self.truncated()),
                _ => {}
            }
        }
        let end = self.xml.buffer_position();
        rec.document = self.standalone(start as usize, end as usize, name_len, &own);
        self.out.records.push(rec);
        Ok(())
    }

    /// The record's bytes with the namespace declarations of its ancestors that it does not
    /// make itself added to its start tag, after the XML declaration.
    fn standalone(&self, start: usize, end: usize, name_len: usize, own: &[String]) -> Vec<u8> {
        let raw = self.text.as_bytes().get(start..end).unwrap_or_default();
        let cut = (1 + name_len).min(raw.len());
        let mut doc = Vec::with_capacity(raw.len() + XML_DECL.len() + 128);
        doc.extend_from_slice(XML_DECL);
        doc.extend_from_slice(&raw[..cut]);
        let mut added: Vec<&str> = Vec::new();
        // Innermost first: the nearest declaration of a prefix is the one in scope.
        for open in self.stack.iter().rev() {
            for (k, v) in &open.decls {
                if own.contains(k) || added.contains(&k.as_str()) {
                    continue;
                }
                added.push(k);
                let q = if v.contains('"') { b'\'' } else { b'"' };
                doc.push(b' ');
                doc.extend_from_slice(k.as_bytes());
                doc.extend_from_slice(&[b'=', q]);
                doc.extend_from_slice(v.as_bytes());
                doc.push(q);
            }
        }
        doc.extend_from_slice(&raw[cut..]);
        doc
    }

    fn resolve(&self, r: &BytesRef<'_>, at: u64) -> Result<char, OaiReadError> {
        if r.is_char_ref() {
            return match r.resolve_char_ref() {
                Ok(Some(c)) => Ok(c),
                _ => Err(self.syntax(at, "an invalid character reference")),
            };
        }
        match quick_xml::escape::resolve_xml_entity(r.as_ref()).and_then(|s| s.chars().next()) {
            Some(c) => Ok(c),
            None => Err(self.syntax(at, &format!("undefined entity &{};", r.as_ref()))),
        }
    }

    fn truncated(&self) -> OaiReadError {
        let open = self.stack.last().map_or("OAI-PMH", |o| o.name.as_str()).to_owned();
        OaiReadError::Truncated { document: self.document.to_owned(), at: self.text.len() as u64, open }
    }

    fn syntax(&self, at: u64, detail: &str) -> OaiReadError {
        OaiReadError::Syntax { document: self.document.to_owned(), at, detail: detail.to_owned() }
    }

    fn not_oai(&self, what: &str) -> OaiReadError {
        OaiReadError::NotOai { document: self.document.to_owned(), what: what.to_owned() }
    }
}

const IDENTIFY_FIELDS: [&str; 7] =
    ["repositoryName", "baseURL", "protocolVersion", "adminEmail", "earliestDatestamp", "deletedRecord", "granularity"];
const FORMAT_FIELDS: [&str; 3] = ["metadataPrefix", "schema", "metadataNamespace"];
const SET_FIELDS: [&str; 2] = ["setSpec", "setName"];

/// The local part of a qualified name.
fn local(name: &str) -> &str {
    name.rsplit_once(':').map_or(name, |(_, l)| l)
}

/// An attribute's value, unescaped.
fn attr(e: &BytesStart<'_>, key: &str) -> Option<String> {
    let a = e.attributes().with_checks(false).flatten().find(|a| a.key.as_ref() == key)?;
    Some(
        a.normalized_value(quick_xml::XmlVersion::Implicit1_0)
            .map_or_else(|_| a.value.clone().into_owned(), |v| v.into_owned()),
    )
}
