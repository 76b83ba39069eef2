//! OAI-PMH 2.0 responses, read into plain types: the protocol Tributary harvests from data
//! providers that publish no ResourceSync (DSpace, EPrints, Fedora…). Pure like the rest of
//! `model`: bytes in, values out; fetching, paging and retries belong to the harvester.
//!
//! - `read`: one streaming pass of quick-xml over a response, whatever its verb. Each record's
//!   markup is copied byte for byte into a standalone XML document (the bitstream Tributary
//!   stores), with the namespace declarations it inherited added to its start tag, so its
//!   hash changes when the record does and never with `responseDate`.
//! - `repair`: real endpoints emit control characters and character references XML forbids;
//!   they are repaired before parsing (and counted), so one bad character costs no record.
//! - `dates`: the repository's granularity, which `from` and `until` must share.
//! - `stored`: a stored record read back (Tributary's OAI-PMH endpoint serves it again; its
//!   provenance names the origin).

mod dates;
mod objects;
mod read;
mod repair;
mod stored;
#[cfg(test)]
mod tests;

pub use dates::Granularity;
pub use objects::{DC_NS, object_urls};
pub use read::{OaiReadError, read_response};
pub use repair::repair;
pub use stored::{Origin, StoredRecord, read_stored};

/// The OAI-PMH namespace.
pub const OAI_NS: &str = "http://www.openarchives.org/OAI/2.0/";

/// A stored record (the standalone document of [`OaiRecord::document`]) read back: its
/// header, for provenance. The same reader as for responses, around an envelope, so a record
/// reads back as it was read. `None` when `document` is not such a record.
pub fn read_record(document: &[u8]) -> Option<OaiRecord> {
    let body = match document.strip_prefix(b"<?xml") {
        Some(rest) => &rest[memchr::memmem::find(rest, b"?>")? + 2..],
        None => document,
    };
    let mut wrapped = Vec::with_capacity(body.len() + 160);
    wrapped.extend_from_slice(b"<OAI-PMH xmlns=\"");
    wrapped.extend_from_slice(OAI_NS.as_bytes());
    wrapped.extend_from_slice(b"\"><GetRecord>");
    wrapped.extend_from_slice(body);
    wrapped.extend_from_slice(b"</GetRecord></OAI-PMH>");
    read_response(&wrapped, "stored record").ok()?.records.into_iter().next()
}

/// One response, whatever its verb: the parts a verb does not have stay empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OaiResponse {
    /// `responseDate` as written (the repository's clock, UTC).
    pub response_date: Option<String>,
    /// The protocol errors (`<error code=…>`); a response with errors has nothing else.
    pub errors: Vec<OaiError>,
    /// Identify's answer.
    pub identify: Option<Identify>,
    /// ListMetadataFormats' answer.
    pub formats: Vec<MetadataFormat>,
    /// ListSets' answer.
    pub sets: Vec<OaiSet>,
    /// ListRecords' or GetRecord's records, in document order.
    pub records: Vec<OaiRecord>,
    /// The list's `resumptionToken`, when the response has one (an empty one ends a list).
    pub token: Option<ResumptionToken>,
    /// Characters repaired before parsing (see `repair`).
    pub repaired: usize,
}

/// A protocol error, named by its code as OAI-PMH §3.6 does (`badArgument`, `noRecordsMatch`…).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OaiError {
    /// The code.
    pub code: String,
    /// The repository's message.
    pub message: String,
}

impl std::fmt::Display for OaiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.message.trim() {
            "" => write!(f, "{}", self.code),
            m => write!(f, "{}: {m}", self.code),
        }
    }
}

/// What Identify says about a repository.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identify {
    /// `repositoryName`.
    pub repository_name: String,
    /// `baseURL`.
    pub base_url: String,
    /// `protocolVersion` (2.0).
    pub protocol_version: String,
    /// Every `adminEmail`.
    pub admin_emails: Vec<String>,
    /// `earliestDatestamp`.
    pub earliest_datestamp: String,
    /// `deletedRecord`: `no`, `transient` or `persistent`.
    pub deleted_record: String,
    /// `granularity`: `YYYY-MM-DD` or `YYYY-MM-DDThh:mm:ssZ`.
    pub granularity: String,
}

/// One format of ListMetadataFormats.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetadataFormat {
    /// `metadataPrefix`.
    pub prefix: String,
    /// `schema`.
    pub schema: String,
    /// `metadataNamespace`.
    pub namespace: String,
}

/// One set of ListSets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OaiSet {
    /// `setSpec`.
    pub spec: String,
    /// `setName`.
    pub name: String,
}

/// One record of ListRecords or GetRecord.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OaiRecord {
    /// The header's `identifier`.
    pub identifier: String,
    /// The header's `datestamp`, as written.
    pub datestamp: String,
    /// `status="deleted"`.
    pub deleted: bool,
    /// The header's `setSpec`s, in document order.
    pub set_specs: Vec<String>,
    /// The record (header, metadata, about) as a standalone UTF-8 XML document.
    pub document: Vec<u8>,
}

/// A `resumptionToken`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResumptionToken {
    /// The token (empty: the list is complete).
    pub value: String,
    /// `cursor`, when given.
    pub cursor: Option<u64>,
    /// `completeListSize`, when given.
    pub complete_list_size: Option<u64>,
}
