//! Walking a list or an index of lists (spec §10.2, §12.2) down to its entries, one entry at
//! a time, so a 50,000-entry part is parsed as it is consumed and never held as entries.
//!
//! Each document is fetched in full (bounded by `max_document_bytes`) and read with the
//! model's streaming reader. Indexes may nest up to a depth limit; a document met twice in one
//! walk (an index listing itself, or a cycle) is an error, not a hang. Every child must carry
//! the same capability as the root (a Resource List Index holds Resource Lists).
//!
//! Completeness: only `Ok(None)` from [`IndexWalker::next_entry`] means the whole list was
//! read. After an error the entries already returned are a prefix of unknown length — a
//! caller must never treat them as the complete list (no deletions from a partial list).

use std::collections::HashSet;
use std::io::Cursor;

use bytes::Bytes;
use url::Url;

use super::document::{DiscoverError, FetchedDoc, fetch_doc_conditional, reader, wrong_kind};
use crate::config::Settings;
use crate::fetch::{Fetcher, Validators};
use crate::model::{Capability, DocumentReader, Entry, Header, RootFormat};

type Result<T> = std::result::Result<T, DiscoverError>;

/// Bounds of one walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalkLimits {
    /// Index levels below the root (a root index with list children is depth 1).
    pub max_depth: usize,
    /// Documents fetched in one walk, indexes included.
    pub max_documents: usize,
}

impl Default for WalkLimits {
    fn default() -> Self {
        WalkLimits { max_depth: 3, max_documents: 10_000 }
    }
}

struct Leaf {
    url: Url,
    reader: DocumentReader<Cursor<Bytes>>,
}

/// Pull-based walk over the leaf entries of a list or index (see the module docs).
pub struct IndexWalker {
    fetcher: Fetcher,
    settings: Settings,
    limits: WalkLimits,
    /// Documents still to open, with their depth; popped from the end.
    pending: Vec<(Url, usize)>,
    visited: HashSet<String>,
    capability: Option<Capability>,
    leaf: Option<Leaf>,
    root_header: Option<Header>,
    leaves_done: usize,
    /// Validators sent with the root's GET (a conditional walk), and those it answered with.
    root_validators: Option<Validators>,
    root_answer: Option<Validators>,
    not_modified: bool,
    /// The root document, when discovery fetched it already (see [`IndexWalker::starting_with`]).
    prefetched: Option<FetchedDoc>,
}

impl IndexWalker {
    /// A walk starting at `url` (a list or an index of lists).
    pub fn new(fetcher: &Fetcher, url: Url, settings: &Settings, limits: WalkLimits) -> Self {
        IndexWalker {
            fetcher: fetcher.clone(),
            settings: settings.clone(),
            limits,
            pending: vec![(url, 0)],
            visited: HashSet::new(),
            capability: None,
            leaf: None,
            root_header: None,
            leaves_done: 0,
            root_validators: None,
            root_answer: None,
            not_modified: false,
            prefetched: None,
        }
    }

    /// Opens the root from `doc`, fetched a moment ago by discovery, instead of fetching it
    /// again, when `doc` is the document at the walk's URL (after redirects); any other is
    /// ignored.
    pub(crate) fn starting_with(mut self, doc: Option<FetchedDoc>) -> Self {
        let root = self.pending.first().map(|(url, _)| url);
        self.prefetched = doc.filter(|d| root == Some(&d.doc.url));
        self
    }

    /// Makes the root's GET conditional: when the server answers `304 Not Modified` the walk
    /// ends at once with no entries and [`IndexWalker::not_modified`] is true. (Only the root
    /// is conditional: an index whose parts changed is expected to change too.)
    pub fn conditional(mut self, validators: Option<Validators>) -> Self {
        self.root_validators = validators.filter(|v| !v.is_empty());
        self
    }

    /// True when a conditional walk found the root unchanged.
    pub fn not_modified(&self) -> bool {
        self.not_modified
    }

    /// The validators of the root document's response, once fetched.
    pub fn root_validators(&self) -> Option<&Validators> {
        self.root_answer.as_ref()
    }

    /// The next entry of a leaf list, in document order; `Ok(None)` once every document was
    /// read in full.
    ///
    /// # Errors
    /// Fetch or read failures of any document, a loop, nesting too deep, too many documents,
    /// or a child of the wrong kind. The walk is over after an error.
    pub async fn next_entry(&mut self) -> Result<Option<Entry>> {
        // Bounded: each turn either returns or opens one of at most `max_documents` documents.
        loop {
            if let Some(leaf) = &mut self.leaf {
                match leaf.reader.next_entry() {
                    Ok(Some(e)) => return Ok(Some(e)),
                    Ok(None) => {
                        self.leaf = None;
                        self.leaves_done += 1;
                    }
                    Err(source) => {
                        let url = leaf.url.to_string();
                        self.fail();
                        return Err(DiscoverError::Read { url, source });
                    }
                }
            }
            let Some((url, depth)) = self.pending.pop() else { return Ok(None) };
            if let Err(e) = self.open(url, depth).await {
                self.fail();
                return Err(e);
            }
        }
    }

    /// The leaf list whose entries are being returned: its URL and header.
    pub fn leaf(&self) -> Option<(&Url, &Header)> {
        self.leaf.as_ref().map(|l| (&l.url, l.reader.header()))
    }

    /// The header of the document the walk started at, once opened.
    pub fn root_header(&self) -> Option<&Header> {
        self.root_header.as_ref()
    }

    /// Leaf lists read to their end so far.
    pub fn leaves_done(&self) -> usize {
        self.leaves_done
    }

    fn fail(&mut self) {
        self.leaf = None;
        self.pending.clear();
    }

    async fn open(&mut self, url: Url, depth: usize) -> Result<()> {
        if self.visited.len() >= self.limits.max_documents {
            return Err(DiscoverError::TooManyDocuments { url: url.to_string(), max: self.limits.max_documents });
        }
        if !self.visited.insert(without_fragment(&url)) {
            return Err(DiscoverError::IndexLoop { url: url.to_string() });
        }
        let d = match self.prefetched.take().filter(|_| depth == 0) {
            Some(d) => d,
            None => {
                let validators = if depth == 0 { self.root_validators.as_ref() } else { None };
                let fetched = fetch_doc_conditional(&self.fetcher, &url, &self.settings, validators).await?;
                let Some(d) = fetched else {
                    self.not_modified = true;
                    return Ok(());
                };
                d
            }
        };
        if depth == 0 {
            self.root_answer = Some(d.doc.validators.clone());
        }
        // A redirect to a document already visited is a loop too.
        if d.doc.url != url && !self.visited.insert(without_fragment(&d.doc.url)) {
            return Err(DiscoverError::IndexLoop { url: d.doc.url.to_string() });
        }
        let header = self.check_kind(&d)?;
        if self.root_header.is_none() {
            self.root_header = Some(header.clone());
        }
        let reader = reader(&d.doc.url, d.doc.body.clone(), &self.settings)?;
        if header.format == Some(RootFormat::SitemapIndex) {
            if depth >= self.limits.max_depth {
                return Err(DiscoverError::TooDeep { url: url.to_string(), max: self.limits.max_depth });
            }
            self.push_children(&d.doc.url, reader, depth)
        } else {
            self.leaf = Some(Leaf { url: d.doc.url, reader });
            Ok(())
        }
    }

    /// Every document must carry the root's capability.
    fn check_kind(&mut self, d: &FetchedDoc) -> Result<Header> {
        let header = d.header.clone().ok_or_else(|| wrong_kind(d, "a ResourceSync list or index"))?;
        let cap = header.capability();
        match (self.capability, cap) {
            (_, None) => Err(wrong_kind(d, "a ResourceSync list or index")),
            (None, Some(c)) => {
                self.capability = Some(c);
                Ok(header)
            }
            (Some(want), Some(c)) if want == c => Ok(header),
            (Some(want), Some(_)) => Err(wrong_kind(d, &format!("a document with capability {want}"))),
        }
    }

    fn push_children(&mut self, base: &Url, mut reader: DocumentReader<Cursor<Bytes>>, depth: usize) -> Result<()> {
        let mut children = Vec::new();
        // Bounded by the reader's entry limit.
        loop {
            match reader.next_entry() {
                Ok(Some(e)) => children.push(base.join(&e.loc).map_err(|err| DiscoverError::Read {
                    url: base.to_string(),
                    source: bad_loc(&reader, &e.loc, err),
                })?),
                Ok(None) => break,
                Err(source) => return Err(DiscoverError::Read { url: base.to_string(), source }),
            }
        }
        self.pending.extend(children.into_iter().rev().map(|u| (u, depth + 1)));
        Ok(())
    }
}

fn without_fragment(u: &Url) -> String {
    let mut u = u.clone();
    u.set_fragment(None);
    u.to_string()
}

fn bad_loc(reader: &DocumentReader<Cursor<Bytes>>, loc: &str, err: url::ParseError) -> crate::model::ReadError {
    crate::model::ReadError {
        document: String::new(),
        position: reader.entry_position(),
        kind: crate::model::ReadErrorKind::Malformed(format!("<loc> {loc:?} is not a URL: {err}")),
    }
}
