//! The OAI-PMH part of a provenance answer: for a resource harvested from an OAI-PMH data
//! provider, its OAI identifier, datestamp, sets, format and repository, as fields of their
//! own.
//!
//! Derived from what is stored, with no column of its own: the origin is the record's
//! GetRecord URL (`{base}?verb=GetRecord&metadataPrefix=…&identifier=…`, the harvester's
//! naming), which gives the repository, format and identifier, and the bitstream is the record
//! with its header, which gives the datestamp and sets. So it holds for a copy harvested from
//! another Tributary too, which keeps the origin and the bytes.

use serde::Serialize;
use std::io::Read as _;

use crate::model::oai::read_record;
use crate::store::{Record, Store};

/// Records larger than this are not read back for their header: a metadata record is a few
/// kilobytes, and provenance must not read a large bitstream that merely has such an origin.
const MAX_RECORD: u64 = 4 << 20;

/// An OAI-PMH record's provenance.
#[derive(Debug, Clone, Serialize)]
pub struct OaiProvenance {
    /// The repository's base URL.
    pub repository: String,
    /// The OAI identifier.
    pub identifier: String,
    /// The `metadataPrefix` harvested.
    pub metadata_prefix: String,
    /// The header's datestamp, as the repository wrote it (of the copy held).
    pub datestamp: Option<String>,
    /// The header's `setSpec`s (of the copy held).
    pub sets: Vec<String>,
}

/// The OAI-PMH provenance of `rec`, when its origin is a GetRecord URL.
pub(super) fn oai_provenance(store: &Store, rec: &Record) -> Option<OaiProvenance> {
    let url = url::Url::parse(&rec.origin).ok()?;
    let arg = |k: &str| url.query_pairs().find(|(n, _)| n == k).map(|(_, v)| v.into_owned());
    if arg("verb").as_deref() != Some("GetRecord") {
        return None;
    }
    let (identifier, metadata_prefix) = (arg("identifier")?, arg("metadataPrefix")?);
    let mut repository = url.clone();
    repository.set_query(None);
    let header = stored_header(store, rec).filter(|h| h.identifier == identifier);
    Some(OaiProvenance {
        repository: repository.to_string(),
        identifier,
        metadata_prefix,
        datestamp: header.as_ref().map(|h| h.datestamp.clone()),
        sets: header.map(|h| h.set_specs).unwrap_or_default(),
    })
}

/// The header of the stored record, if the bitstream is one and can be read.
fn stored_header(store: &Store, rec: &Record) -> Option<crate::model::oai::OaiRecord> {
    if rec.length > MAX_RECORD {
        return None;
    }
    let mut bytes = Vec::with_capacity(usize::try_from(rec.length).unwrap_or(0));
    store.get(&rec.sha256).ok()?.read_to_end(&mut bytes).ok()?;
    read_record(&bytes)
}
