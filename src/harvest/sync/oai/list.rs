//! One ListRecords list, page by page: the resumptionToken followed until the list ends, with
//! the guards real repositories need.
//!
//! - A list ends on a missing or empty token (metha#43); `noRecordsMatch` is an empty list,
//!   not an error (MITLibraries/oai-pmh-harvester#18).
//! - Loops stop the list with an error: the same token twice (a token leading to its own
//!   page, oaipmh-scythe#411), a run of empty pages carrying tokens (pyoai PR #8, HAL), a cap
//!   on requests.
//! - `badResumptionToken` (an expired token) restarts the list from its beginning, the same
//!   `from`, a bounded number of times (sickle#19): records applied twice change nothing.
//! - Transient failures are retried by the fetcher with the same token.
//!
//! An error ends the list but not what was applied from its earlier pages; the caller keeps
//! its position where it was, so the next poll reads the range again.

use std::collections::HashSet;

use url::Url;

use super::request::{call, verb_url};
use crate::config::Source;
use crate::harvest::ctx::Ctx;
use crate::harvest::oai_error::OaiHarvestError;
use crate::model::oai::OaiRecord;

/// Requests one list may make: 100,000 pages are some ten million records at the usual page
/// sizes, more than any repository holds; a list past it is looping.
const MAX_REQUESTS: u32 = 100_000;

/// Empty pages in a row that still carry a token before the list is taken to loop.
const MAX_EMPTY_PAGES: u32 = 5;

/// Restarts after `badResumptionToken` before the list is given up.
const MAX_RESTARTS: u32 = 2;

/// What one list asks for.
#[derive(Debug, Clone, Default)]
pub(super) struct ListArgs {
    pub(super) prefix: String,
    pub(super) set: Option<String>,
    pub(super) from: Option<String>,
    /// Set only when the range is walked in windows (`window`).
    pub(super) until: Option<String>,
}

/// One page of records.
pub(super) struct Page {
    pub(super) records: Vec<OaiRecord>,
    pub(super) repaired: usize,
}

/// A list being read; see the module docs.
pub(super) struct Lister<'a> {
    ctx: &'a Ctx,
    source: &'a Source,
    base: &'a Url,
    args: ListArgs,
    token: Option<String>,
    seen_tokens: HashSet<String>,
    empty_run: u32,
    requests: u32,
    restarts: u32,
    done: bool,
    /// A loop found on the page just returned: its records are applied, then the list stops.
    stopped: Option<OaiHarvestError>,
    /// The list's `completeListSize`, when a page declared one.
    declared: Option<u64>,
    /// Records received since the list (re)started.
    received: u64,
    /// The `responseDate` of the list's first response.
    pub(super) response_date: Option<String>,
}

impl<'a> Lister<'a> {
    pub(super) fn new(ctx: &'a Ctx, source: &'a Source, base: &'a Url, args: ListArgs) -> Self {
        Lister {
            ctx,
            source,
            base,
            args,
            token: None,
            seen_tokens: HashSet::new(),
            empty_run: 0,
            requests: 0,
            restarts: 0,
            done: false,
            stopped: None,
            declared: None,
            received: 0,
            response_date: None,
        }
    }

    /// The next page; `None` once the list has ended.
    pub(super) async fn next_page(&mut self) -> Result<Option<Page>, OaiHarvestError> {
        if let Some(e) = self.stopped.take() {
            self.done = true;
            return Err(e);
        }
        // Bounded: each round makes a request, and `requests` is capped.
        while !self.done {
            if self.requests >= MAX_REQUESTS {
                return Err(self.looping(format!("{MAX_REQUESTS} requests")));
            }
            let url = self.url();
            self.requests += 1;
            let resp = call(self.ctx, self.source, "ListRecords", &url).await?;
            if self.response_date.is_none() && self.token.is_none() {
                self.response_date.clone_from(&resp.response_date);
            }
            if !resp.errors.is_empty() {
                self.on_errors(&url, resp.errors)?;
                continue;
            }
            if let Some(n) = resp.token.as_ref().and_then(|t| t.complete_list_size) {
                self.declared = Some(self.declared.map_or(n, |d| d.max(n)));
            }
            self.received += resp.records.len() as u64;
            let next = resp.token.map(|t| t.value).filter(|v| !v.trim().is_empty());
            self.stopped = self.follow(next, resp.records.is_empty()).err().or_else(|| self.short());
            return Ok(Some(Page { records: resp.records, repaired: resp.repaired }));
        }
        Ok(None)
    }

    /// At the list's end, fewer records than it declared: the pass must not take the list as
    /// the repository's whole content.
    fn short(&self) -> Option<OaiHarvestError> {
        let declared = self.declared?;
        (self.done && self.received < declared).then_some(OaiHarvestError::Short { declared, received: self.received })
    }

    fn url(&self) -> Url {
        match &self.token {
            Some(t) => verb_url(self.base, &[("verb", "ListRecords"), ("resumptionToken", t)]),
            None => {
                let mut args = vec![("verb", "ListRecords"), ("metadataPrefix", self.args.prefix.as_str())];
                if let Some(f) = &self.args.from {
                    args.push(("from", f));
                }
                if let Some(u) = &self.args.until {
                    args.push(("until", u));
                }
                if let Some(s) = &self.args.set {
                    args.push(("set", s));
                }
                verb_url(self.base, &args)
            }
        }
    }

    /// `noRecordsMatch` ends the list; `badResumptionToken` restarts it; others are errors.
    fn on_errors(&mut self, url: &Url, errors: Vec<crate::model::oai::OaiError>) -> Result<(), OaiHarvestError> {
        let has = |code: &str| errors.iter().any(|e| e.code == code);
        if has("noRecordsMatch") {
            self.done = true;
            return Ok(());
        }
        if has("badResumptionToken") && self.token.is_some() && self.restarts < MAX_RESTARTS {
            self.restarts += 1;
            tracing::warn!(source.id = %self.source.id, token = ?self.token, restart = self.restarts,
                "badResumptionToken: restarting the list from its beginning");
            self.token = None;
            self.seen_tokens.clear();
            self.empty_run = 0;
            (self.declared, self.received) = (None, 0);
            return Ok(());
        }
        Err(OaiHarvestError::Protocol { verb: "ListRecords", url: url.to_string(), errors })
    }

    /// Moves on to `next`, or ends the list without one.
    fn follow(&mut self, next: Option<String>, empty: bool) -> Result<(), OaiHarvestError> {
        let Some(next) = next else {
            self.done = true;
            return Ok(());
        };
        self.empty_run = if empty { self.empty_run + 1 } else { 0 };
        if self.empty_run >= MAX_EMPTY_PAGES {
            return Err(self.looping(format!("{MAX_EMPTY_PAGES} empty pages in a row, each with a resumptionToken")));
        }
        if !self.seen_tokens.insert(next.clone()) {
            return Err(self.looping(format!("the resumptionToken {next:?} came back")));
        }
        self.token = Some(next);
        Ok(())
    }

    /// Whether no page has come yet: an error now concerns the list's range, not a token.
    pub(super) fn at_start(&self) -> bool {
        self.token.is_none() && self.restarts == 0
    }

    fn looping(&self, why: String) -> OaiHarvestError {
        OaiHarvestError::Loop { why, requests: self.requests }
    }
}
