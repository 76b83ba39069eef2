//! Fetching one ResourceSync document and opening it for reading, shared by discovery and
//! the index walk, with the one error type of both: a document that cannot be fetched, read
//! or is not of the kind its place requires.

use std::io::Cursor;

use bytes::Bytes;
use url::Url;

use crate::config::Settings;
use crate::fetch::{Document, FetchError, Fetched, Fetcher, Validators};
use crate::model::{DocumentReader, Entry, Header, ReadError, ReadOptions};
use crate::store::DocumentValidators;

/// Why discovery or an index walk failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DiscoverError {
    /// A document could not be fetched.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// A document could not be read in full (malformed, truncated, over a limit).
    #[error("cannot read the document")]
    Read {
        /// The document.
        url: String,
        /// The reader's error (with position).
        #[source]
        source: ReadError,
    },
    /// No route led to a ResourceSync document.
    #[error("{url}: no ResourceSync document found; tried: {}", tried.join("; "))]
    NotFound {
        /// The configured URL.
        url: String,
        /// Each URL tried and why it did not qualify.
        tried: Vec<String>,
    },
    /// A Source Description lists several Capability Lists and none was selected.
    #[error("{url} lists {} Capability Lists; choose one with `capability_list` in the source: {}", choices.len(), choices.join(", "))]
    Ambiguous {
        /// The Source Description.
        url: String,
        /// The Capability Lists listed.
        choices: Vec<String>,
    },
    /// The selected Capability List is not in the Source Description.
    #[error("{url} does not list the selected Capability List {wanted}; it lists: {}", choices.join(", "))]
    NotListed {
        /// The Source Description.
        url: String,
        /// The configured selection.
        wanted: String,
        /// What it does list.
        choices: Vec<String>,
    },
    /// A document is not of the kind its place in the hierarchy requires.
    #[error("{url}: expected {expected}, found {found}")]
    WrongKind {
        /// The document.
        url: String,
        /// What was expected.
        expected: String,
        /// What it is.
        found: String,
    },
    /// An index refers (directly or not) to a document already visited.
    #[error("{url}: index loop (the document was already visited in this walk)")]
    IndexLoop {
        /// The document met again.
        url: String,
    },
    /// Indexes nested deeper than allowed.
    #[error("{url}: indexes nested deeper than {max} levels")]
    TooDeep {
        /// The index too deep.
        url: String,
        /// The limit.
        max: usize,
    },
    /// More documents than allowed in one walk.
    #[error("{url}: more than {max} documents in one index walk")]
    TooManyDocuments {
        /// The document over the limit.
        url: String,
        /// The limit.
        max: usize,
    },
}

pub(crate) type Result<T> = std::result::Result<T, DiscoverError>;

/// A fetched document and, when it is a ResourceSync document, its header.
pub(crate) struct FetchedDoc {
    pub(crate) doc: Document,
    pub(crate) header: Option<Header>,
}

/// Fetches `url` as a document; `header` is `Some` when it is a ResourceSync document.
pub(crate) async fn fetch_doc(f: &Fetcher, url: &Url, s: &Settings) -> Result<FetchedDoc> {
    // Without validators a 304 is the server answering wrongly: `None` becomes that error.
    fetch_doc_conditional(f, url, s, None)
        .await?
        .ok_or_else(|| FetchError::Status { url: url.to_string(), status: 304 }.into())
}

/// As [`fetch_doc`], sending `validators`; `None` when the server answered 304.
pub(crate) async fn fetch_doc_conditional(
    f: &Fetcher,
    url: &Url,
    s: &Settings,
    validators: Option<&Validators>,
) -> Result<Option<FetchedDoc>> {
    let doc = match f.get_document(url, s, validators).await? {
        Fetched::Modified(d) => d,
        Fetched::NotModified if validators.is_some() => return Ok(None),
        Fetched::NotModified => return Err(FetchError::Status { url: url.to_string(), status: 304 }.into()),
    };
    let header = reader(&doc.url, doc.body.clone(), s).ok().map(|r| r.header().clone()).filter(|h| h.kind().is_some());
    Ok(Some(FetchedDoc { doc, header }))
}

pub(crate) fn reader(url: &Url, body: Bytes, s: &Settings) -> Result<DocumentReader<Cursor<Bytes>>> {
    let opts = ReadOptions { max_bytes: s.max_document_bytes, ..ReadOptions::named(url.as_str()) };
    DocumentReader::new(Cursor::new(body), opts).map_err(|source| DiscoverError::Read { url: url.to_string(), source })
}

/// Every entry of a (small) document; an error when it cannot be read in full.
pub(crate) fn entries(d: &FetchedDoc, s: &Settings) -> Result<Vec<Entry>> {
    let (doc, _) = reader(&d.doc.url, d.doc.body.clone(), s)?
        .into_document()
        .map_err(|source| DiscoverError::Read { url: d.doc.url.to_string(), source })?;
    Ok(doc.entries)
}

pub(crate) fn wrong_kind(d: &FetchedDoc, expected: &str) -> DiscoverError {
    let found =
        d.header.as_ref().and_then(Header::kind).map_or("no ResourceSync document".to_owned(), |k| k.to_string());
    DiscoverError::WrongKind { url: d.doc.url.to_string(), expected: expected.to_owned(), found }
}

/// The fetcher's validators and the store's copy of them are two types on purpose: the store
/// keeps what it persists free of the HTTP client. These are the one crossing between them.
impl From<&DocumentValidators> for Validators {
    fn from(v: &DocumentValidators) -> Validators {
        Validators { etag: v.etag.clone(), last_modified: v.last_modified.clone() }
    }
}

impl From<&Validators> for DocumentValidators {
    fn from(v: &Validators) -> DocumentValidators {
        DocumentValidators { etag: v.etag.clone(), last_modified: v.last_modified.clone() }
    }
}
