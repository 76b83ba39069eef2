//! `tributary check` on an OAI-PMH base URL: the protocol walked as a harvester walks it —
//! Identify, ListMetadataFormats, ListSets, the first page of ListRecords and one resumption —
//! and every violation seen named, with the rule it breaks (OAI-PMH 2.0 and the harvester
//! guidelines). The violations looked for are the ones real endpoints commit (docs/HARVEST.md):
//!
//! - granularity: datestamps finer or coarser than Identify declares (DOAJ#507), an
//!   `earliestDatestamp` that is, and `from`/`until` of different granularities accepted
//!   instead of answered with `badArgument`;
//! - tokens: a token that comes back (oaipmh-scythe#411), one that is refused at once
//!   (`badResumptionToken`), a `cursor` or `completeListSize` that does not add up;
//! - XML: not well-formed, truncated, HTML, content after `</OAI-PMH>`, characters XML
//!   forbids (repaired by the harvester, but a violation);
//! - deleted records: a `status="deleted"` header from a repository that declares
//!   `deletedRecord` `no`;
//! - `oai_dc` not offered (§3.4), an unknown `deletedRecord` or `granularity`, a
//!   `protocolVersion` other than 2.0.
//!
//! Requests go through the polite [`Fetcher`] as `check` sends all of them. Sits beside
//! `check` at the application level; only the model's OAI-PMH reader is shared with the
//! harvester.

use std::fmt;

use url::Url;

use crate::config::Settings;
use crate::fetch::{Fetched, Fetcher};
use crate::model::oai::{Granularity, OaiRecord, OaiResponse, ResumptionToken, read_response};

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// The protocol is broken.
    Error,
    /// Allowed, or common and tolerated, but worth knowing.
    Warning,
}

/// One finding: the request it concerns and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Error or warning.
    pub severity: Severity,
    /// The verb (or step) it was seen in.
    pub verb: &'static str,
    /// What is wrong, naming the rule.
    pub message: String,
}

/// What `check` found out about an OAI-PMH repository.
#[derive(Debug, Default)]
pub struct OaiCheckReport {
    /// The base URL.
    pub base: String,
    /// Identify's `repositoryName`, `granularity`, `deletedRecord` and `earliestDatestamp`.
    pub identify: Option<crate::model::oai::Identify>,
    /// The metadata prefixes offered.
    pub formats: Vec<String>,
    /// Sets listed (on the first page of ListSets).
    pub sets: usize,
    /// Records on the first page of ListRecords and on the resumption.
    pub records: (usize, Option<usize>),
    /// Findings, in the order seen.
    pub findings: Vec<Finding>,
}

impl OaiCheckReport {
    /// Errors found.
    pub fn errors(&self) -> usize {
        self.findings.iter().filter(|f| f.severity == Severity::Error).count()
    }

    /// Warnings found.
    pub fn warnings(&self) -> usize {
        self.findings.len() - self.errors()
    }

    fn error(&mut self, verb: &'static str, message: String) {
        self.findings.push(Finding { severity: Severity::Error, verb, message });
    }

    fn warn(&mut self, verb: &'static str, message: String) {
        self.findings.push(Finding { severity: Severity::Warning, verb, message });
    }
}

/// Whether `body` is an OAI-PMH response: its root element, near the start, is `OAI-PMH`.
pub fn looks_like_oai(body: &[u8]) -> bool {
    let head = &body[..body.len().min(2048)];
    memchr::memmem::find(head, b"<OAI-PMH").is_some()
        || memchr::memmem::find(head, b":OAI-PMH").is_some_and(|i| i > 0 && head[..i].contains(&b'<'))
}

/// The base URL of an OAI-PMH request URL: the URL without its query.
pub fn base_of(url: &Url) -> Url {
    let mut base = url.clone();
    base.set_query(None);
    base.set_fragment(None);
    base
}

/// One check of the repository at `base`; see the module docs.
pub async fn check_oai(fetcher: &Fetcher, settings: &Settings, base: &Url) -> OaiCheckReport {
    let c = Checker { fetcher, settings, base };
    let mut r = OaiCheckReport { base: base.to_string(), ..OaiCheckReport::default() };
    let Some(g) = c.identify(&mut r).await else { return r };
    c.formats(&mut r).await;
    c.sets(&mut r).await;
    c.records(&mut r, g).await;
    c.mixed_granularity(&mut r, g).await;
    r
}

struct Checker<'a> {
    fetcher: &'a Fetcher,
    settings: &'a Settings,
    base: &'a Url,
}

impl Checker<'_> {
    /// GETs the verb with `args` and reads the response; a failure is a finding and `None`.
    async fn call(&self, r: &mut OaiCheckReport, verb: &'static str, args: &[(&str, &str)]) -> Option<OaiResponse> {
        let mut url = self.base.clone();
        url.query_pairs_mut().append_pair("verb", verb).extend_pairs(args);
        let body = match self.fetcher.get_document(&url, self.settings, None).await {
            Ok(Fetched::Modified(d)) => d.body,
            Ok(Fetched::NotModified) => {
                r.error(verb, "HTTP 304 to a request without validators".into());
                return None;
            }
            Err(e) => {
                r.error(verb, format!("request failed: {}", crate::error::chain(&e)));
                return None;
            }
        };
        match read_response(&body, url.as_str()) {
            Ok(resp) => {
                if resp.repaired > 0 {
                    r.error(verb, format!("invalid XML: {} characters XML forbids (control characters or invalid character references)", resp.repaired));
                }
                Some(resp)
            }
            Err(e) => {
                r.error(verb, format!("invalid XML: {e}"));
                None
            }
        }
    }

    /// Identify: the repository's declarations, checked; its granularity.
    async fn identify(&self, r: &mut OaiCheckReport) -> Option<Granularity> {
        let resp = self.call(r, "Identify", &[]).await?;
        protocol_errors(r, "Identify", &resp, &[]);
        let Some(id) = resp.identify else {
            r.error("Identify", "the response holds no <Identify>".into());
            return None;
        };
        if id.protocol_version.trim() != "2.0" {
            r.error("Identify", format!("protocolVersion is {:?}, not 2.0", id.protocol_version));
        }
        if !matches!(id.deleted_record.trim(), "no" | "transient" | "persistent") {
            r.error("Identify", format!("deletedRecord {:?} is not no, transient or persistent", id.deleted_record));
        }
        if id.base_url.trim() != self.base.as_str() {
            r.warn("Identify", format!("baseURL {} is not the URL asked, {}", id.base_url.trim(), self.base));
        }
        let g = Granularity::parse(&id.granularity);
        match g {
            None => r.error(
                "Identify",
                format!("granularity {:?} is neither YYYY-MM-DD nor YYYY-MM-DDThh:mm:ssZ", id.granularity),
            ),
            Some(g) if Granularity::of(&id.earliest_datestamp) != Some(g) => r.error(
                "Identify",
                format!(
                    "granularity mismatch: earliestDatestamp {:?} is not written in the declared {g}",
                    id.earliest_datestamp
                ),
            ),
            Some(_) => {}
        }
        r.identify = Some(id);
        Some(g.unwrap_or(Granularity::Day))
    }

    /// ListMetadataFormats: `oai_dc` must be offered (§3.4).
    async fn formats(&self, r: &mut OaiCheckReport) {
        let Some(resp) = self.call(r, "ListMetadataFormats", &[]).await else { return };
        protocol_errors(r, "ListMetadataFormats", &resp, &[]);
        r.formats = resp.formats.iter().map(|f| f.prefix.clone()).collect();
        if !r.formats.iter().any(|p| p == "oai_dc") {
            r.error(
                "ListMetadataFormats",
                format!("oai_dc is not offered (§3.4 requires it); offered: {}", r.formats.join(", ")),
            );
        }
    }

    /// ListSets: `noSetHierarchy` is a valid answer; a setSpec listed twice is not.
    async fn sets(&self, r: &mut OaiCheckReport) {
        let Some(resp) = self.call(r, "ListSets", &[]).await else { return };
        protocol_errors(r, "ListSets", &resp, &["noSetHierarchy"]);
        let mut specs: Vec<&str> = resp.sets.iter().map(|s| s.spec.as_str()).collect();
        r.sets = specs.len();
        specs.sort_unstable();
        if let Some(w) = specs.windows(2).find(|w| w[0] == w[1]) {
            r.error("ListSets", format!("setSpec {:?} is listed twice", w[0]));
        }
    }

    /// The first page of ListRecords (oai_dc) and one resumption.
    async fn records(&self, r: &mut OaiCheckReport, g: Granularity) {
        let Some(first) = self.call(r, "ListRecords", &[("metadataPrefix", "oai_dc")]).await else { return };
        protocol_errors(r, "ListRecords", &first, &["noRecordsMatch"]);
        self.check_records(r, &first.records, g);
        r.records.0 = first.records.len();
        let token = first.token.clone().filter(|t| !t.value.trim().is_empty());
        check_token(r, first.token.as_ref(), 0, first.records.len());
        let Some(token) = token else { return };
        let Some(next) = self.call(r, "ListRecords", &[("resumptionToken", &token.value)]).await else { return };
        if next.errors.iter().any(|e| e.code == "badResumptionToken") {
            r.error("ListRecords", format!("token problem: the resumptionToken {:?} was refused at once (badResumptionToken); the guidelines ask for tokens that live for hours", token.value));
            return;
        }
        protocol_errors(r, "ListRecords", &next, &[]);
        self.check_records(r, &next.records, g);
        r.records.1 = Some(next.records.len());
        match next.token.as_ref() {
            Some(t) if t.value == token.value => {
                r.error("ListRecords", format!("token problem: the resumptionToken {:?} came back on the page it leads to (a loop)", t.value));
            }
            None if next.records.is_empty() => {}
            None => r.warn("ListRecords", "the list ends without an empty <resumptionToken/> (§3.5 asks for one on the last page of an incomplete list)".into()),
            Some(_) => {}
        }
        check_token(r, next.token.as_ref(), first.records.len(), next.records.len());
        if let (Some(a), Some(b)) = (token.complete_list_size, next.token.as_ref().and_then(|t| t.complete_list_size))
            && a != b
        {
            r.error("ListRecords", format!("token problem: completeListSize changed from {a} to {b} within one list"));
        }
    }

    /// Each record's datestamp against the granularity; deleted headers against `deletedRecord`.
    fn check_records(&self, r: &mut OaiCheckReport, records: &[OaiRecord], g: Granularity) {
        let deleted_record = r.identify.as_ref().map(|i| i.deleted_record.trim().to_owned()).unwrap_or_default();
        for rec in records {
            match Granularity::of(&rec.datestamp) {
                Some(found) if found == g => {}
                Some(found) => r.error(
                    "ListRecords",
                    format!(
                        "granularity mismatch: datestamp {} of {} is {} than the declared {g}",
                        rec.datestamp,
                        rec.identifier,
                        if found == Granularity::Seconds { "finer" } else { "coarser" }
                    ),
                ),
                None => r.error(
                    "ListRecords",
                    format!("datestamp {:?} of {} is in neither granularity", rec.datestamp, rec.identifier),
                ),
            }
            if rec.deleted && deleted_record == "no" {
                r.error(
                    "ListRecords",
                    format!(
                        "deleted-record behaviour: {} has a deleted header, but Identify declares deletedRecord no",
                        rec.identifier
                    ),
                );
            }
        }
    }

    /// `from` and `until` of different granularities must be answered with `badArgument`
    /// (§3.3.1), and so must seconds to a repository of days.
    async fn mixed_granularity(&self, r: &mut OaiCheckReport, g: Granularity) {
        let (day, secs) = ("2000-01-01", "2000-01-02T00:00:00Z");
        let mut asks = vec![("from and until of different granularities", vec![("from", day), ("until", secs)])];
        if g == Granularity::Day {
            asks.push(("a from in seconds to a repository of days", vec![("from", secs)]));
        }
        for (what, args) in asks {
            let mut all = vec![("metadataPrefix", "oai_dc")];
            all.extend(args);
            let Some(resp) = self.call(r, "ListRecords", &all).await else { continue };
            if !resp.errors.iter().any(|e| e.code == "badArgument") {
                r.error(
                    "ListRecords",
                    format!("granularity mismatch: {what} was accepted, not answered with badArgument"),
                );
            }
        }
    }
}

/// OAI-PMH errors other than the `allowed` codes are findings.
fn protocol_errors(r: &mut OaiCheckReport, verb: &'static str, resp: &OaiResponse, allowed: &[&str]) {
    for e in resp.errors.iter().filter(|e| !allowed.contains(&e.code.as_str())) {
        r.error(verb, format!("the repository answered {e}"));
    }
}

/// A page's token: `cursor` counts the records before the page, and `completeListSize` is
/// at least what has been seen.
fn check_token(r: &mut OaiCheckReport, token: Option<&ResumptionToken>, before: usize, on_page: usize) {
    let Some(t) = token else { return };
    if let Some(c) = t.cursor.filter(|c| *c != before as u64) {
        r.error("ListRecords", format!("token problem: cursor {c}, but {before} records came before this page"));
    }
    if let Some(n) = t.complete_list_size.filter(|n| *n < (before + on_page) as u64) {
        r.error(
            "ListRecords",
            format!("token problem: completeListSize {n}, but {} records have been listed", before + on_page),
        );
    }
}

impl fmt::Display for OaiCheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.identify {
            Some(id) => writeln!(
                f,
                "{}: OAI-PMH repository {:?}, granularity {}, deletedRecord {}, earliestDatestamp {}",
                self.base, id.repository_name, id.granularity, id.deleted_record, id.earliest_datestamp
            )?,
            None => writeln!(f, "{}: OAI-PMH repository (Identify unreadable)", self.base)?,
        }
        writeln!(f, "  formats   {}", self.formats.join(", "))?;
        writeln!(f, "  sets      {}", self.sets)?;
        let second = self.records.1.map_or_else(|| "no resumption".to_owned(), |n| format!("{n} after the resumption"));
        writeln!(f, "  records   {} on the first page, {second}", self.records.0)?;
        for x in &self.findings {
            let level = if x.severity == Severity::Error { "error" } else { "warning" };
            writeln!(f, "{level}: {}: {}", x.verb, x.message)?;
        }
        let (e, w) = (self.errors(), self.warnings());
        write!(f, "{e} error{}, {w} warning{}", if e == 1 { "" } else { "s" }, if w == 1 { "" } else { "s" })
    }
}
