//! Tributary as an OAI-PMH 2.0 data provider: the aggregate served to the harvesters that
//! speak only OAI-PMH (Europeana Metis, BASE, OpenAIRE…), over the same store the
//! ResourceSync documents come from.
//!
//! - `args`: the request's arguments, checked; `token`: resumption tokens (authenticated,
//!   stateless); `write`: the envelope, headers, errors; `list`: ListRecords /
//!   ListIdentifiers, defined by change-log positions; `record`: one record's metadata and
//!   provenance (a record harvested from an OAI-PMH source is read back by
//!   `model::oai::read_stored`);
//!   `formats`: the metadata formats, and which one an XML bitstream is; `ahead`: a list's
//!   next page, made while the client reads the current one.
//!
//! A record's datestamp is when Tributary's copy last changed (its change-log event, to the
//! second), so a harvester's `from` finds exactly what changed since its last harvest, and
//! deletions are kept as long as the log keeps them (`deletedRecord=persistent`).
//!
//! # Architecture
//! Part of `publish`: depends on `store`, `model`, `naming` and `config` (the endpoint's
//! settings), never on axum or tokio. `web/oai.rs` parses the HTTP request into argument pairs
//! and streams what [`OaiProvider::respond`] writes, on the blocking pool, or sends a list page
//! made ahead ([`OaiProvider::respond_made`]) from memory.

mod ahead;
mod args;
mod formats;
mod list;
mod record;
mod token;
mod write;

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use url::Url;

pub use ahead::{MadeResponse, NextPage};
pub use args::Fault;
pub use token::MAX_TOKEN_LEN;

use self::args::Request;
use self::formats::Format;
use self::write::{element, error_response};
use super::{PublishError, Publisher};
use crate::config::{Config, OaiProvider as Settings};
use crate::model::W3cDateTime;

/// An OAI-PMH source of the aggregate: where its records came from and in which format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HarvestedFrom {
    /// The source's OAI-PMH base URL.
    pub base: Url,
    /// The `metadataPrefix` harvested.
    pub prefix: String,
}

/// The OAI-PMH endpoint over a publisher. `Send + Sync`; share it in an `Arc`.
#[derive(Debug)]
pub struct OaiProvider {
    publisher: Arc<Publisher>,
    settings: Settings,
    /// `{base_url}oai`.
    base_url: String,
    /// The OAI-PMH sources, by source id.
    harvested: HashMap<String, HarvestedFrom>,
    /// Per set id, a sentence for its `setDescription`.
    descriptions: HashMap<String, String>,
    codec: token::Codec,
    ahead: ahead::Ahead,
    superseding: list::Superseding,
}

/// The file in the data directory holding the resumption tokens' key.
const KEY_FILE: &str = "oai-token.key";

impl OaiProvider {
    /// The endpoint over `publisher`, described by `settings`; tokens are signed with a key
    /// kept in the store's data directory (made on first use).
    ///
    /// # Errors
    /// [`PublishError::Write`] when the key can be neither read nor made.
    pub fn new(
        publisher: Arc<Publisher>,
        settings: Settings,
        harvested: HashMap<String, HarvestedFrom>,
        descriptions: HashMap<String, String>,
    ) -> Result<OaiProvider, PublishError> {
        let key = token_key(publisher.store().path())?;
        let base_url = format!("{}oai", publisher.naming().base());
        let (codec, ahead) = (token::Codec::new(key), ahead::Ahead::default());
        let superseding = list::Superseding::default();
        Ok(OaiProvider { publisher, settings, base_url, harvested, descriptions, codec, ahead, superseding })
    }

    /// The endpoint `config` describes, if `[aggregator]` turns it on.
    ///
    /// # Errors
    /// As [`OaiProvider::new`].
    pub fn from_config(publisher: Arc<Publisher>, config: &Config) -> Result<Option<OaiProvider>, PublishError> {
        let Some(settings) = config.aggregator.oai.clone() else { return Ok(None) };
        let mut harvested = HashMap::new();
        let mut descriptions = HashMap::new();
        for s in &config.sources {
            let from = match (&s.oai, &s.feed) {
                (Some(oai), _) => {
                    harvested.insert(
                        s.id.clone(),
                        HarvestedFrom { base: oai.base.clone(), prefix: oai.metadata_prefix.clone() },
                    );
                    format!("OAI-PMH repository {}", oai.base)
                }
                (None, Some(feed)) => format!("feed {}", feed.urls.first().map(Url::as_str).unwrap_or_default()),
                (None, None) => format!("ResourceSync Source {}", s.url),
            };
            descriptions.insert(s.id.clone(), format!("The resources Tributary harvests from the {from}."));
        }
        for set in &config.sets {
            descriptions.insert(set.id.clone(), format!("The resources of the sources {}.", set.sources.join(", ")));
        }
        OaiProvider::new(publisher, settings, harvested, descriptions).map(Some)
    }

    /// The endpoint's URL, Identify's `baseURL`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Writes the answer to one request, whose arguments are `pairs` (decoded, in order), at
    /// `now`. Protocol errors are answers like any other; only a failure of the store or of
    /// `out` is an error, and then what was written is not a complete response.
    ///
    /// Returns the page the answer's resumption token names, if it has one: once the response
    /// is complete, [`OaiProvider::make_next`] makes that page while the client reads this one.
    ///
    /// # Errors
    /// [`PublishError::Store`] / [`PublishError::Write`].
    pub fn respond(
        &self,
        pairs: &[(String, String)],
        now: W3cDateTime,
        out: &mut dyn Write,
    ) -> Result<Option<NextPage>, PublishError> {
        let date = write::datestamp(&now);
        let mut buf = Vec::with_capacity(64 * 1024);
        let answered = match args::parse(pairs) {
            Ok(req) => self.answer(&req, pairs, &now, &mut buf, out),
            Err(f) => Err(Answer::Fault(f)),
        };
        let next = match answered {
            Ok(next) => next,
            Err(Answer::Fault(f)) => {
                buf.clear();
                error_response(&mut buf, &date, &self.base_url, pairs, &f);
                None
            }
            Err(Answer::Failed(e)) => return Err(e),
        };
        out.write_all(&buf)?;
        Ok(next)
    }

    fn answer(
        &self,
        req: &Request,
        pairs: &[(String, String)],
        now: &W3cDateTime,
        buf: &mut Vec<u8>,
        out: &mut dyn Write,
    ) -> Result<Option<NextPage>, Answer> {
        let date = write::datestamp(now);
        let open = |buf: &mut Vec<u8>| write::open(buf, &date, &self.base_url, Some(pairs));
        match req {
            Request::Identify => {
                let earliest = self.earliest()?;
                open(buf);
                self.identify(buf, &earliest);
            }
            Request::ListMetadataFormats { identifier } => {
                let formats = match identifier {
                    Some(id) => self.formats_of(id)?,
                    None => self.all_formats(),
                };
                open(buf);
                list_formats(buf, &formats);
            }
            Request::ListSets { token } => {
                if token.is_some() {
                    return Err(Fault::new("badResumptionToken", "ListSets is answered in one response").into());
                }
                if self.publisher.sets().next().is_none() {
                    return Err(Fault::new("noSetHierarchy", "no sets are configured").into());
                }
                open(buf);
                self.list_sets(buf);
            }
            Request::GetRecord { identifier, prefix } => {
                let rendered = self.get_record(identifier, prefix)?;
                open(buf);
                buf.extend_from_slice(b"<GetRecord>");
                buf.extend_from_slice(&rendered);
                buf.extend_from_slice(b"</GetRecord>\n");
            }
            Request::List { records, start } => {
                return self.list(*records, start, now, &date, pairs, buf, out);
            }
        }
        write::close(buf);
        Ok(None)
    }

    fn identify(&self, buf: &mut Vec<u8>, earliest: &str) {
        buf.extend_from_slice(b"<Identify>");
        element(buf, "repositoryName", &self.settings.name);
        element(buf, "baseURL", &self.base_url);
        element(buf, "protocolVersion", "2.0");
        element(buf, "adminEmail", &self.settings.admin_email);
        element(buf, "earliestDatestamp", earliest);
        element(buf, "deletedRecord", "persistent");
        element(buf, "granularity", "YYYY-MM-DDThh:mm:ssZ");
        let repo = &self.settings.repository_identifier;
        buf.extend_from_slice(b"<description><oai-identifier xmlns=\"http://www.openarchives.org/OAI/2.0/oai-identifier\" xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xsi:schemaLocation=\"http://www.openarchives.org/OAI/2.0/oai-identifier http://www.openarchives.org/OAI/2.0/oai-identifier.xsd\">");
        element(buf, "scheme", "oai");
        element(buf, "repositoryIdentifier", repo);
        element(buf, "delimiter", ":");
        element(buf, "sampleIdentifier", &format!("oai:{repo}:r/source/https/example.org/item/1"));
        buf.extend_from_slice(b"</oai-identifier></description></Identify>\n");
    }

    /// The oldest datestamp of any source's log (now, for an empty store).
    fn earliest(&self) -> Result<String, Answer> {
        let snap = self.publisher.store().snapshot();
        let mut earliest: Option<W3cDateTime> = None;
        for log in self.source_logs() {
            if let Some(e) = snap.event(&log, 1).map_err(PublishError::from)? {
                earliest = Some(earliest.map_or(e.datetime, |t| t.min(e.datetime)));
            }
        }
        Ok(write::datestamp(&earliest.unwrap_or_else(W3cDateTime::now)))
    }

    /// The logs a list without `set` reads: one per source (each resource is in exactly one).
    fn source_logs(&self) -> Vec<String> {
        self.publisher.sets().filter(|s| s.sources.len() == 1 && s.sources[0] == s.id).map(|s| s.id.clone()).collect()
    }

    fn list_sets(&self, buf: &mut Vec<u8>) {
        buf.extend_from_slice(b"<ListSets>");
        for set in self.publisher.sets() {
            buf.extend_from_slice(b"<set>");
            element(buf, "setSpec", &set.id);
            element(buf, "setName", &set.id);
            if let Some(d) = self.descriptions.get(&set.id) {
                buf.extend_from_slice(b"<setDescription>");
                buf.extend_from_slice(record::DC_OPEN.as_bytes());
                element(buf, "dc:description", d);
                buf.extend_from_slice(b"</oai_dc:dc></setDescription>");
            }
            buf.extend_from_slice(b"</set>");
        }
        buf.extend_from_slice(b"</ListSets>\n");
    }

    /// Every format some record may be disseminated in: oai_dc, the OAI-PMH sources'
    /// formats and the formats recognised in XML bitstreams.
    fn all_formats(&self) -> Vec<Format> {
        let mut out: Vec<Format> = formats::known().collect();
        for h in self.harvested.values() {
            if !out.iter().any(|f| f.prefix == h.prefix) {
                out.push(self.source_format(h));
            }
        }
        out
    }

    /// An OAI-PMH source's format: known, or named by its prefix alone.
    fn source_format(&self, h: &HarvestedFrom) -> Format {
        formats::by_prefix(&h.prefix).unwrap_or_else(|| {
            // An unknown format: its namespace is in every record, but not its schema; the
            // source's ListMetadataFormats answer is the place to look.
            let url = format!("{}?verb=ListMetadataFormats", h.base);
            Format { prefix: h.prefix.clone(), schema: url.clone(), namespace: url }
        })
    }

    /// Tributary's URI of an identifier, if it is one of this repository's.
    fn uri_of(&self, identifier: &str) -> Option<String> {
        let rest = identifier.strip_prefix("oai:")?.strip_prefix(self.settings.repository_identifier.as_str())?;
        Some(format!("{}{}", self.publisher.naming().base(), rest.strip_prefix(':')?))
    }

    /// The identifier of a Tributary URI.
    /// The OAI identifier of a resource, into a reused string.
    fn identifier_into(&self, out: &mut String, uri: &str) {
        let rel = uri.strip_prefix(self.publisher.naming().base()).unwrap_or(uri);
        out.clear();
        out.push_str("oai:");
        out.push_str(&self.settings.repository_identifier);
        out.push(':');
        out.push_str(rel);
    }
}

/// Why no normal answer was written.
enum Answer {
    Fault(Fault),
    Failed(PublishError),
}

impl From<Fault> for Answer {
    fn from(f: Fault) -> Answer {
        Answer::Fault(f)
    }
}

impl From<PublishError> for Answer {
    fn from(e: PublishError) -> Answer {
        Answer::Failed(e)
    }
}

impl From<crate::store::StoreError> for Answer {
    fn from(e: crate::store::StoreError) -> Answer {
        Answer::Failed(e.into())
    }
}

impl From<std::io::Error> for Answer {
    fn from(e: std::io::Error) -> Answer {
        Answer::Failed(e.into())
    }
}

fn list_formats(buf: &mut Vec<u8>, formats: &[Format]) {
    buf.extend_from_slice(b"<ListMetadataFormats>");
    for f in formats {
        buf.extend_from_slice(b"<metadataFormat>");
        element(buf, "metadataPrefix", &f.prefix);
        element(buf, "schema", &f.schema);
        element(buf, "metadataNamespace", &f.namespace);
        buf.extend_from_slice(b"</metadataFormat>");
    }
    buf.extend_from_slice(b"</ListMetadataFormats>\n");
}

/// The tokens' key from `{dir}/oai-token.key`, made (32 random bytes, owner-only) if missing.
fn token_key(dir: &Path) -> Result<[u8; 32], PublishError> {
    let path = dir.join(KEY_FILE);
    if let Ok(bytes) = std::fs::read(&path)
        && let Ok(key) = <[u8; 32]>::try_from(bytes.as_slice())
    {
        return Ok(key);
    }
    let key: [u8; 32] = rand::random();
    let tmp = dir.join(format!("{KEY_FILE}.tmp"));
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(&tmp)?;
    f.write_all(&key)?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    Ok(key)
}
