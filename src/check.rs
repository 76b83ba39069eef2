//! `tributary check`: read any ResourceSync document from a file or URL, report its kind,
//! entry count and time attributes, and every rule it breaks.
//!
//! Reading streams through the model's reader and validator, so checking a 50,000-entry list
//! holds one entry at a time. Gzip-compressed documents (`.xml.gz`, or anything starting with
//! the gzip magic bytes) are decompressed on the fly, with the same byte limit applied to the
//! decompressed stream. A URL is fetched through [`crate::fetch`], like every request
//! Tributary sends. A URL that turns out to be an OAI-PMH data provider is checked as one
//! ([`crate::oai_check`]).

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;
use url::Url;

use crate::config::Settings;
use crate::fetch::{FetchError, Fetched, Fetcher, FetcherOptions, ProxyChoice};
use crate::model::{Diagnostic, DocumentKind, DocumentReader, Header, ReadError, ReadOptions, RootFormat, Validator};
use crate::oai_check::{OaiCheckReport, base_of, check_oai, looks_like_oai};

/// Everything `check` found out about one document.
#[derive(Debug)]
pub struct CheckReport {
    /// The file path or URL.
    pub name: String,
    /// The kind, when the root metadata names a valid one.
    pub kind: Option<DocumentKind>,
    /// Root format, when the root element was read.
    pub format: Option<RootFormat>,
    /// Complete entries read (up to the point of a fatal error).
    pub entries: usize,
    /// The root metadata.
    pub header: Header,
    /// Findings, sorted by position.
    pub diagnostics: Vec<Diagnostic>,
    /// The error that stopped reading, if any.
    pub fatal: Option<ReadError>,
}

impl CheckReport {
    /// Number of error findings, counting a fatal error.
    pub fn errors(&self) -> usize {
        self.diagnostics.iter().filter(|d| d.is_error()).count() + usize::from(self.fatal.is_some())
    }

    /// Number of warnings.
    pub fn warnings(&self) -> usize {
        self.diagnostics.iter().filter(|d| !d.is_error()).count()
    }
}

/// Why the input could not be read at all (exit status 2).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// A local file could not be opened.
    #[error("cannot open {path}")]
    File {
        /// The path.
        path: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A URL could not be fetched.
    #[error("cannot fetch the document")]
    Fetch {
        /// The URL.
        url: String,
        /// What went wrong.
        #[source]
        source: FetchError,
    },
}

/// Checks a document from any reader (decompressing gzip when the stream starts with its magic).
pub fn check_reader<R: BufRead>(mut input: R, opts: ReadOptions) -> CheckReport {
    let gzip = input.fill_buf().map(|b| b.starts_with(&[0x1f, 0x8b])).unwrap_or(false);
    if gzip {
        let decoded = BufReader::with_capacity(64 * 1024, flate2::bufread::MultiGzDecoder::new(input));
        return check_stream(decoded, opts);
    }
    check_stream(input, opts)
}

fn check_stream<R: BufRead>(input: R, opts: ReadOptions) -> CheckReport {
    let mut report = CheckReport {
        name: opts.name.clone(),
        kind: None,
        format: None,
        entries: 0,
        header: Header::default(),
        diagnostics: Vec::new(),
        fatal: None,
    };
    let mut reader = match DocumentReader::new(input, opts) {
        Ok(r) => r,
        Err(e) => {
            report.fatal = Some(e);
            return report;
        }
    };
    let mut validator = Validator::new(reader.header(), reader.root_position());
    let mut entries = 0;
    loop {
        match reader.next_entry() {
            Ok(Some(entry)) => {
                entries += 1;
                validator.entry(&entry, reader.entry_position());
            }
            Ok(None) => break,
            Err(e) => {
                report.fatal = Some(e);
                break;
            }
        }
    }
    report.kind = validator.kind();
    report.entries = entries;
    report.header = reader.header().clone();
    report.format = report.header.format;
    report.diagnostics = reader.take_diagnostics();
    report.diagnostics.extend(validator.finish());
    report.diagnostics.sort_by_key(|d| d.position.offset);
    report
}

/// Checks a local file.
///
/// # Errors
/// When the file cannot be opened.
pub fn check_file(path: &Path, mut opts: ReadOptions) -> Result<CheckReport, InputError> {
    let file = File::open(path).map_err(|source| InputError::File { path: path.display().to_string(), source })?;
    opts.name = path.display().to_string();
    Ok(check_reader(BufReader::with_capacity(64 * 1024, file), opts))
}

/// Fetches a URL through the polite [`Fetcher`] and checks the body.
///
/// The document is fetched as the harvester would fetch it (robots.txt, redirects checked
/// hop by hop, retries, gzip decoded, `opts.max_bytes` applied to the decoded body), with one
/// difference: the address may be private or loopback, since the person running `check`
/// named it themselves — as with `curl`, not as with a URL found in an upstream's document.
///
/// # Errors
/// [`InputError::Fetch`] when the request fails, the status is not 2xx, or the body exceeds
/// the byte limit.
pub async fn check_url(url: &str, opts: ReadOptions) -> Result<CheckReport, InputError> {
    let (_, _, _, body) = fetch(url, &opts).await?;
    Ok(check_body(url, &body, opts))
}

/// What a URL turned out to be.
#[derive(Debug)]
pub enum Checked {
    /// A ResourceSync document (or something that is not one).
    ResourceSync(Box<CheckReport>),
    /// An OAI-PMH data provider.
    Oai(Box<OaiCheckReport>),
}

/// [`check_url`], or for an OAI-PMH base URL (or request URL) the protocol check of
/// [`crate::oai_check`]: a URL answered with an OAI-PMH response is one, and so is a URL
/// without a query that is no ResourceSync document but answers `?verb=Identify`.
///
/// # Errors
/// As [`check_url`], for the first request.
pub async fn check_any_url(url: &str, opts: ReadOptions) -> Result<Checked, InputError> {
    let (fetcher, settings, parsed, body) = fetch(url, &opts).await?;
    if looks_like_oai(&body) {
        return Ok(Checked::Oai(Box::new(check_oai(&fetcher, &settings, &base_of(&parsed)).await)));
    }
    let report = check_body(url, &body, opts);
    if report.format.is_none() && parsed.query().is_none() && answers_identify(&fetcher, &settings, &parsed).await {
        return Ok(Checked::Oai(Box::new(check_oai(&fetcher, &settings, &parsed).await)));
    }
    Ok(Checked::ResourceSync(Box::new(report)))
}

async fn answers_identify(fetcher: &Fetcher, settings: &Settings, base: &Url) -> bool {
    let mut url = base.clone();
    url.query_pairs_mut().append_pair("verb", "Identify");
    matches!(fetcher.get_document(&url, settings, None).await, Ok(Fetched::Modified(d)) if looks_like_oai(&d.body))
}

fn check_body(url: &str, body: &[u8], mut opts: ReadOptions) -> CheckReport {
    opts.name = url.to_owned();
    check_reader(body, opts)
}

/// The body at `url`, with the fetcher and settings that fetched it.
async fn fetch(url: &str, opts: &ReadOptions) -> Result<(Fetcher, Settings, Url, bytes::Bytes), InputError> {
    let fail = |source: FetchError| InputError::Fetch { url: url.to_owned(), source };
    let parsed =
        Url::parse(url).map_err(|e| fail(FetchError::InvalidUrl { url: url.to_owned(), detail: e.to_string() }))?;
    let agent = concat!("Tributary/", env!("CARGO_PKG_VERSION"), " (check)");
    // Like `curl`, the proxy environment variables are honoured: any address may be named here.
    let fetcher =
        Fetcher::new(FetcherOptions { proxy: ProxyChoice::Environment, ..FetcherOptions::new(agent) }).map_err(fail)?;
    let settings = Settings { max_document_bytes: opts.max_bytes, allow_private: true, ..Settings::default() };
    let doc = match fetcher.get_document(&parsed, &settings, None).await.map_err(fail)? {
        Fetched::Modified(doc) => doc,
        // Without validators a 304 is the server's mistake.
        Fetched::NotModified => return Err(fail(FetchError::Status { url: url.to_owned(), status: 304 })),
    };
    Ok((fetcher, settings, parsed, doc.body))
}

impl CheckReport {
    /// The report as text; `warnings = false` leaves warning lines out (they are still counted).
    pub fn render(&self, warnings: bool) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = self.write_to(&mut out, warnings);
        out
    }

    fn write_to(&self, f: &mut impl fmt::Write, warnings: bool) -> fmt::Result {
        let kind = match (self.kind, self.format) {
            (Some(k), _) => k.name().to_owned(),
            (None, Some(fmt)) => format!("unknown kind of <{}>", fmt.root_name()),
            (None, None) => "not a ResourceSync document".to_owned(),
        };
        let plural = if self.entries == 1 { "entry" } else { "entries" };
        writeln!(f, "{}: {kind}, {} {plural}", self.name, self.entries)?;
        if let Some(md) = &self.header.md {
            for (name, t) in [("at", md.at), ("completed", md.completed), ("from", md.from), ("until", md.until)] {
                if let Some(t) = t {
                    writeln!(f, "  {name:<9} {t}")?;
                }
            }
        }
        for d in self.diagnostics.iter().filter(|d| warnings || d.is_error()) {
            writeln!(f, "{d}")?;
        }
        if let Some(e) = &self.fatal {
            writeln!(f, "error: {}: {} (byte {})", e.position, e.kind, e.position.offset)?;
        }
        write!(f, "{} error{}, {} warning{}", self.errors(), s(self.errors()), self.warnings(), s(self.warnings()))
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_to(f, true)
    }
}

fn s(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// True when `input` should be fetched rather than opened.
pub fn is_url(input: &str) -> bool {
    input.starts_with("http://") || input.starts_with("https://")
}
