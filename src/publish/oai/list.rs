//! ListRecords and ListIdentifiers: lists defined by change-log positions.
//!
//! A list reads the logs of its set (one log), or of every source (one log each; a resource
//! is in exactly one source). When it starts, it fixes each log's last seq `end`: the list is
//! the resources whose latest event at or before `end` has a datetime in `[from, until]`, each
//! once, at that event. Harvesting goes on meanwhile and a client may come back after a
//! restart: an event is emitted iff it is its resource's latest with seq `<= end`, which the
//! record's `heads` (its latest seq per log) and the events' `prev` chain answer whatever was
//! written since. So a client paging to the end sees no resource twice and misses none that
//! existed when it started; later changes have later datestamps, for its next `from`.
//!
//! A page stops before the record that would exceed the page size (count or bytes) — found by
//! reading on to the next record that will be emitted, so no page is empty and the last one
//! ends the list with an empty token. `completeListSize` is counted when the list starts, from
//! the log alone (the events in the window, less those a later event up to `end` supersedes),
//! for oai_dc, which every record is in; other formats leave it out rather than guess.
//!
//! # Two orders
//! The same list can be read in two orders, chosen when it starts and kept by its token:
//! - **log order**, for a window that is a small part of the logs (an incremental harvest's
//!   `from`): the window's events, each record looked up for what it says;
//! - **URI order**, for a window covering much of them (a first, full harvest): the records
//!   under the sources' URI prefixes, read in key order, each emitted at its latest event up to
//!   `end` — from the record itself (its `heads`, and `changed`, which the store keeps equal to
//!   its head events' datetime) unless it changed after the list started, when the log is read
//!   back to that event. One sequential scan instead of a point read per record: a full list
//!   of a million records is served about twice as fast. The next page starts at a URI.
//!
//! Both emit the same records at the same versions.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Mutex;

use super::ahead::{Made, MadeResponse, NextPage, NextToken};
use super::args::{self, ListStart, Request, Selection};
use super::record::Version;
use super::token::{Token, logs_fingerprint};
use super::write::{self, TokenElement};
use super::{Answer, Fault, OaiProvider};
use crate::model::{Change, W3cDateTime};
use crate::store::{RawRecord, RecordHead, Snapshot, StoreError};

/// Bytes buffered before they go to the client.
const FLUSH: usize = 64 * 1024;

impl OaiProvider {
    /// Writes a page of the list `start` names; the page its resumption token names, if the
    /// list goes on.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn list(
        &self,
        records: bool,
        start: &ListStart,
        now: &W3cDateTime,
        date: &str,
        pairs: &[(String, String)],
        buf: &mut Vec<u8>,
        out: &mut dyn Write,
    ) -> Result<Option<NextPage>, Answer> {
        let snap = self.publisher.store().snapshot();
        let (token, logs) = match start {
            ListStart::New(sel) => self.new_list(&snap, records, sel, now)?,
            ListStart::Resume(text) => self.resume(text, records, now)?,
        };
        let head = Head { date, base_url: &self.base_url, pairs, records };
        let mut page = Page::new(buf, out, Some(head));
        let next = self.walk_any(&snap, &token, &logs, &mut page)?;
        let count = page.count;
        let next = self.next_token(&token, count, next, now);
        self.close(records, matches!(start, ListStart::Resume(_)), &token, count, next, buf)
    }

    /// The response to a request for a page that was made ahead (see `ahead`): `None` when it
    /// was not, and [`OaiProvider::respond`] makes it. While it is being made, waits for it
    /// (`wait`: call it where blocking is allowed) or answers `None` at once.
    pub fn respond_made(&self, pairs: &[(String, String)], now: &W3cDateTime, wait: bool) -> Option<MadeResponse> {
        let Ok(Request::List { records, start: ListStart::Resume(text) }) = args::parse(pairs) else { return None };
        let m = self.ahead.take(&NextPage { records, token: text }, wait)?;
        let date = write::datestamp(now);
        let (mut head, mut tail) = (Vec::new(), Vec::new());
        Head { date: &date, base_url: &self.base_url, pairs, records }.open(&mut head);
        match self.close(records, true, &m.token, m.count, m.next, &mut tail) {
            Ok(next) => Some(MadeResponse { parts: [head, m.body, tail], next }),
            Err(Answer::Fault(f)) => {
                head.clear();
                write::error_response(&mut head, &date, &self.base_url, pairs, &f);
                Some(MadeResponse { parts: [head, Vec::new(), Vec::new()], next: None })
            }
            Err(Answer::Failed(_)) => None,
        }
    }

    /// Ends a page of `count` records: its resumption token (naming `next`, if the list goes
    /// on) and the envelope's end; the page that token names.
    fn close(
        &self,
        records: bool,
        resumed: bool,
        token: &Token,
        count: u64,
        next: Option<NextToken>,
        buf: &mut Vec<u8>,
    ) -> Result<Option<NextPage>, Answer> {
        if count == 0 {
            let why = if resumed {
                "the rest of the list is no longer available; start it again"
            } else {
                "no records match the request"
            };
            return Err(Fault::new("noRecordsMatch", why).into());
        }
        let expires =
            next.as_ref().and_then(|n| W3cDateTime::from_unix(n.expires, 0).ok()).map(|t| write::datestamp(&t));
        write::resumption_token(
            buf,
            &TokenElement {
                value: next.as_ref().map(|n| n.text.as_str()),
                expires: expires.as_deref(),
                size: token.size,
                cursor: token.cursor,
            },
        );
        buf.extend_from_slice(if records { b"</ListRecords>\n" } else { b"</ListIdentifiers>\n" });
        write::close(buf);
        Ok(next.map(|n| NextPage { records, token: n.text }))
    }

    /// The token of the page after one of `count` records, which starts at `next`.
    fn next_token(&self, token: &Token, count: u64, next: Option<Next>, now: &W3cDateTime) -> Option<NextToken> {
        next.map(|at| {
            let mut t = Token { cursor: token.cursor + count, expires: self.expiry(now), ..token.clone() };
            match at {
                Next::Log(log, seq) => (t.log, t.next) = (log, seq),
                Next::Uri(uri) => t.key = Some(uri),
            }
            NextToken { text: self.codec.encode(&t), expires: t.expires }
        })
    }

    /// Makes the page a response's resumption token names and keeps it a while for the
    /// client's next request (see `ahead`); call it once that response is complete. Does
    /// nothing when the page is kept or being made already; a page that cannot be made is
    /// left to its request, which answers what went wrong. While the client is already
    /// waiting for the page made, the one after it is made next, without a pause.
    pub fn make_next(&self, page: &NextPage) {
        let mut page = page.clone();
        // Bounded: each turn makes a later page of a finite list.
        while self.ahead.claim(&page) {
            let made = self.make(&page).ok();
            let after = made
                .as_ref()
                .and_then(|m| m.next.as_ref())
                .map(|n| NextPage { records: page.records, token: n.text.clone() });
            let waited = self.ahead.fill(&page, made);
            match after {
                Some(a) if waited => page = a,
                _ => break,
            }
        }
    }

    fn make(&self, p: &NextPage) -> Result<Made, Answer> {
        let now = W3cDateTime::now();
        let (token, logs) = self.resume(&p.token, p.records, &now)?;
        let snap = self.publisher.store().snapshot();
        // Written straight into the page kept, which is never sent from here; room for a
        // usual page up front, rather than copied as it grows.
        let mut body = Vec::with_capacity(self.settings.page_bytes.min(1 << 20));
        let mut sink = std::io::sink();
        let mut page = Page::new(&mut body, &mut sink, None);
        page.flush = usize::MAX;
        let next = self.walk_any(&snap, &token, &logs, &mut page)?;
        let count = page.count;
        let next = self.next_token(&token, count, next, &now);
        Ok(Made { token, body, count, next })
    }

    /// Writes the page's records in the list's order; where the next page starts.
    fn walk_any(
        &self,
        snap: &Snapshot,
        token: &Token,
        logs: &[String],
        page: &mut Page<'_, '_>,
    ) -> Result<Option<Next>, Answer> {
        match token.key {
            Some(_) => self.walk_uris(snap, token, logs, page),
            None => self.walk(snap, token, logs, page),
        }
    }

    fn expiry(&self, now: &W3cDateTime) -> i64 {
        now.unix_timestamp() + i64::try_from(self.settings.token_lifetime.as_secs()).unwrap_or(i64::MAX / 4)
    }

    /// The token of a list starting now: its logs' ends, and its size for oai_dc.
    fn new_list(
        &self,
        snap: &Snapshot,
        records: bool,
        sel: &Selection,
        now: &W3cDateTime,
    ) -> Result<(Token, Vec<String>), Answer> {
        if !self.all_formats().iter().any(|f| f.prefix == sel.prefix) {
            return Err(Fault::new(
                "cannotDisseminateFormat",
                format!("{} is not a format of this repository", sel.prefix),
            )
            .into());
        }
        let logs = match &sel.set {
            Some(s) if self.publisher.set(s).is_some() => vec![s.clone()],
            Some(s) => return Err(Fault::new("noRecordsMatch", format!("there is no set {s:?}")).into()),
            None => self.source_logs(),
        };
        let mut ends = Vec::with_capacity(logs.len());
        for log in &logs {
            ends.push(snap.set_info(log)?.map_or(0, |i| i.events));
        }
        let mut token = Token {
            records,
            prefix: sel.prefix.clone(),
            set: sel.set.clone(),
            from_ms: sel.from.map(|t| t.unix_millis()),
            until_ms: sel.until.map(|t| t.unix_millis()),
            logs: logs_fingerprint(logs.iter().map(String::as_str)),
            ends,
            log: 0,
            next: 0,
            key: None,
            cursor: 0,
            size: None,
            expires: self.expiry(now),
        };
        let windows = logs
            .iter()
            .zip(&token.ends)
            .map(|(log, &end)| self.window(snap, &token, log, end))
            .collect::<Result<Vec<_>, _>>()?;
        if wide(snap, &logs, &windows)? {
            token.key = Some(String::new());
        }
        if sel.prefix == "oai_dc" {
            token.size = Some(count(snap, &logs, &token.ends, &windows, &self.superseding)?);
        }
        Ok((token, logs))
    }

    /// The list a token continues, checked against this repository's logs.
    fn resume(&self, text: &str, records: bool, now: &W3cDateTime) -> Result<(Token, Vec<String>), Answer> {
        let bad = |why: &str| Answer::Fault(Fault::new("badResumptionToken", why));
        let token = self.codec.decode(text, records, now.unix_timestamp()).map_err(|r| bad(r.0))?;
        let logs = match &token.set {
            Some(s) => vec![s.clone()],
            None => self.source_logs(),
        };
        let fits = token.logs == logs_fingerprint(logs.iter().map(String::as_str))
            && token.ends.len() == logs.len()
            && (token.log as usize) < logs.len();
        if !fits {
            return Err(bad("the repository's sets have changed since the list started; start it again"));
        }
        Ok((token, logs))
    }

    /// The seqs `lo..=hi` of a log's events within the token's dates, at most its end.
    fn window(&self, snap: &Snapshot, token: &Token, log: &str, end: u64) -> Result<(u64, u64), StoreError> {
        let at = |ms: i64| W3cDateTime::from_unix_millis(ms).map_err(|e| StoreError::corrupt("token", e));
        let lo = match token.from_ms {
            Some(ms) => snap.first_seq_at_or_after(log, &at(ms)?, end)?,
            None => 1,
        };
        let hi = match token.until_ms {
            Some(ms) => snap.first_seq_at_or_after(log, &at(ms)?, end)? - 1,
            None => end,
        };
        Ok((lo, hi))
    }

    /// Writes the page's records from the token's log position; the position of the next
    /// page, if the list goes on.
    fn walk(
        &self,
        snap: &Snapshot,
        token: &Token,
        logs: &[String],
        page: &mut Page<'_, '_>,
    ) -> Result<Option<Next>, Answer> {
        for (i, log) in logs.iter().enumerate().skip(token.log as usize) {
            let end = token.ends[i];
            let (lo, hi) = self.window(snap, token, log, end)?;
            let first = if i == token.log as usize { token.next.max(lo) } else { lo };
            let mut events = snap.events_range(log, first, hi)?;
            while let Some(e) = events.next_view() {
                let e = e?;
                let Some(raw) = snap.raw_record(e.uri)? else { continue };
                let v = raw.head()?;
                if !emitted(snap, log, &v, e.seq, end)? {
                    continue;
                }
                let ver = Version { deleted: e.change == Change::Deleted, datetime: e.datetime()?, sha256: e.sha256 };
                if self.put(page, &raw, &v, &ver, token)? == Put::Full {
                    return Ok(Some(Next::Log(u32::try_from(i).unwrap_or(u32::MAX), e.seq)));
                }
            }
        }
        Ok(None)
    }

    /// Writes the page's records from the token's URI, in URI order; the URI the next page
    /// starts at, if the list goes on.
    fn walk_uris(
        &self,
        snap: &Snapshot,
        token: &Token,
        logs: &[String],
        page: &mut Page<'_, '_>,
    ) -> Result<Option<Next>, Answer> {
        let ends: HashMap<&str, u64> = logs.iter().map(String::as_str).zip(token.ends.iter().copied()).collect();
        let from = token.key.as_deref().unwrap_or_default();
        let at = |ms: Option<i64>| {
            ms.map(W3cDateTime::from_unix_millis).transpose().map_err(|e| StoreError::corrupt("token", e))
        };
        let (since, before) = (at(token.from_ms)?, at(token.until_ms)?);
        for prefix in self.prefixes(token.set.as_deref(), logs) {
            for raw in snap.raw_records_in_range(&prefix, from, None) {
                let raw = raw?;
                let v = raw.head()?;
                let log = token.set.as_deref().unwrap_or(v.source);
                let Some(&end) = ends.get(log) else { continue };
                let Some(ver) = version_at(snap, log, &v, end)? else { continue };
                if since.is_some_and(|t| ver.datetime < t) || before.is_some_and(|t| ver.datetime >= t) {
                    continue;
                }
                if self.put(page, &raw, &v, &ver, token)? == Put::Full {
                    return Ok(Some(Next::Uri(v.uri.to_owned())));
                }
            }
        }
        Ok(None)
    }

    /// The URI prefixes of the list's records, sorted: its set's, or every source's.
    fn prefixes(&self, set: Option<&str>, logs: &[String]) -> Vec<String> {
        let ids: Vec<&str> = match set {
            Some(s) => vec![s],
            None => logs.iter().map(String::as_str).collect(),
        };
        let mut out: Vec<String> =
            ids.into_iter().filter_map(|id| self.publisher.view(id)).flat_map(|v| v.prefixes.clone()).collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Writes one record of the list at version `ver` into the page, unless it is not available
    /// in the list's format or the page is full (then nothing of it stays written).
    fn put(
        &self,
        page: &mut Page<'_, '_>,
        raw: &RawRecord,
        v: &RecordHead<'_>,
        ver: &Version,
        token: &Token,
    ) -> Result<Put, Answer> {
        self.identifier_into(&mut page.identifier, v.uri);
        let (mark, was_started) = (page.buf.len(), page.started);
        page.start();
        let at = page.buf.len();
        if !self.render(page.buf, raw, v, &page.identifier, ver, &token.prefix, token.records)? {
            page.buf.truncate(mark);
            page.started = was_started;
            return Ok(Put::Unavailable);
        }
        if page.count >= u64::from(self.settings.page_size) || page.bytes >= self.settings.page_bytes {
            page.buf.truncate(mark);
            return Ok(Put::Full);
        }
        page.bytes += page.buf.len() - at;
        page.pushed()?;
        Ok(Put::Written)
    }
}

/// Whether a list with these logs and windows is read in URI order: when the windows hold at
/// least a quarter as many events as the logs have live resources, a scan of the records
/// costs less than a lookup per event.
fn wide(snap: &Snapshot, logs: &[String], windows: &[(u64, u64)]) -> Result<bool, StoreError> {
    let (mut events, mut live) = (0u64, 0u64);
    for (log, &(lo, hi)) in logs.iter().zip(windows) {
        events += (hi + 1).saturating_sub(lo);
        live += snap.set_info(log)?.map_or(0, |i| i.live);
    }
    Ok(events > 0 && events.saturating_mul(4) >= live)
}

/// The list's size: per log, the events in its window less those superseded by a later event
/// at or before its end (each event has at most one successor, which names it).
fn count(
    snap: &Snapshot,
    logs: &[String],
    ends: &[u64],
    windows: &[(u64, u64)],
    memo: &Superseding,
) -> Result<u64, StoreError> {
    let mut n = 0;
    for ((log, &end), &(lo, hi)) in logs.iter().zip(ends).zip(windows) {
        if lo > hi {
            continue;
        }
        if (lo, hi) == (1, end) {
            // The whole log: every event that supersedes another is after the first.
            n += end - memo.up_to(snap, log, end)?;
            continue;
        }
        n += hi - lo + 1;
        let mut events = snap.events_range(log, lo + 1, end)?;
        while let Some(prev) = events.next_prev() {
            if prev?.is_some_and(|p| (lo..=hi).contains(&p)) {
                n -= 1;
            }
        }
    }
    Ok(n)
}

/// Per log, how many of its events up to a seq supersede an earlier one, as last counted.
///
/// A list of a whole log (a full harvest) is that log's events less these; the logs only grow,
/// so the count up to a later seq reads only the events since. Without it, each full list of a
/// million records would start by reading the whole log (about 0.4 s); with it, only the
/// first after a start does, and every full harvest after it reads what was added since.
#[derive(Debug, Default)]
pub(super) struct Superseding(Mutex<HashMap<String, (u64, u64)>>);

impl Superseding {
    /// The events in `2..=end` of `log` that name a previous one.
    fn up_to(&self, snap: &Snapshot, log: &str, end: u64) -> Result<u64, StoreError> {
        let lock = || self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let known = lock().get(log).copied().filter(|(at, _)| *at <= end);
        let (at, mut n) = known.unwrap_or((1, 0));
        let mut events = snap.events_range(log, at + 1, end)?;
        while let Some(prev) = events.next_prev() {
            n += u64::from(prev?.is_some());
        }
        let mut memo = lock();
        if memo.get(log).is_none_or(|(at, _)| *at < end) {
            memo.insert(log.to_owned(), (end, n));
        }
        Ok(n)
    }
}

/// Where the next page starts.
#[derive(Debug)]
pub(super) enum Next {
    /// A log (by index) and a seq in it.
    Log(u32, u64),
    /// A URI.
    Uri(String),
}

/// What became of one record offered to a page.
#[derive(Debug, PartialEq, Eq)]
enum Put {
    Written,
    /// Not in the list's format: skipped.
    Unavailable,
    /// Not written: it starts the next page.
    Full,
}

/// The version of record `v` a list over `log` up to `end` emits, if any: its latest event at
/// or before `end`. The record's own state when that is its head (the usual case, no read);
/// else, when it changed after the list started, the event read back along `prev`.
fn version_at(snap: &Snapshot, log: &str, v: &RecordHead<'_>, end: u64) -> Result<Option<Version>, StoreError> {
    let Some(&(_, head)) = v.heads.iter().find(|(s, _)| *s == log) else { return Ok(None) };
    if head <= end {
        let datetime = v.changed.parse().map_err(|e| StoreError::corrupt("record", e))?;
        return Ok(Some(Version { deleted: v.is_deleted(), datetime, sha256: v.sha256 }));
    }
    let seq = latest_by(snap, log, head, end)?;
    if seq == 0 {
        return Ok(None);
    }
    let e =
        snap.event(log, seq)?.ok_or_else(|| StoreError::corrupt("change log", format!("{log} #{seq} is missing")))?;
    Ok(Some(Version { deleted: e.change == Change::Deleted, datetime: e.datetime, sha256: e.sha256 }))
}

/// Whether the list emits the resource `v` at its event `seq`: its latest event at or before
/// `end` is that one.
fn emitted(snap: &Snapshot, log: &str, v: &RecordHead<'_>, seq: u64, end: u64) -> Result<bool, StoreError> {
    let Some(&(_, head)) = v.heads.iter().find(|(s, _)| *s == log) else { return Ok(false) };
    Ok(latest_by(snap, log, head, end)? == seq)
}

/// The seq of the resource's latest event at or before `end`, from its latest event `head`:
/// back along `prev` (0 when it has none that early).
fn latest_by(snap: &Snapshot, log: &str, head: u64, end: u64) -> Result<u64, StoreError> {
    let mut seq = head;
    // Bounded: each step goes to an earlier seq.
    while seq > end {
        seq = match snap.event(log, seq)? {
            Some(e) => e.prev.unwrap_or(0),
            None => return Err(StoreError::corrupt("change log", format!("{log} #{seq} is missing"))),
        };
    }
    Ok(seq)
}

/// The response's envelope up to the list's element, written before the first record.
struct Head<'b> {
    date: &'b str,
    base_url: &'b str,
    pairs: &'b [(String, String)],
    records: bool,
}

impl Head<'_> {
    fn open(&self, buf: &mut Vec<u8>) {
        write::open(buf, self.date, self.base_url, Some(self.pairs));
        buf.extend_from_slice(if self.records { b"<ListRecords>" } else { b"<ListIdentifiers>" });
    }
}

/// The page being written: the envelope (when there is one: a page made ahead has none) is
/// opened at the first record, so a list with none can still be answered `noRecordsMatch`.
struct Page<'a, 'b> {
    buf: &'a mut Vec<u8>,
    out: &'a mut dyn Write,
    head: Option<Head<'b>>,
    started: bool,
    /// Records written, and the bytes they took.
    count: u64,
    bytes: usize,
    /// The current record's identifier (reused).
    identifier: String,
    /// Bytes buffered before they go to `out`.
    flush: usize,
}

impl<'a, 'b> Page<'a, 'b> {
    fn new(buf: &'a mut Vec<u8>, out: &'a mut dyn Write, head: Option<Head<'b>>) -> Page<'a, 'b> {
        let identifier = String::with_capacity(128);
        Page { buf, out, head, started: false, count: 0, bytes: 0, identifier, flush: FLUSH }
    }

    /// Opens the envelope, before the first record.
    fn start(&mut self) {
        if !self.started {
            self.started = true;
            if let Some(h) = &self.head {
                h.open(self.buf);
            }
        }
    }

    /// Counts the record just written, and sends what is buffered once there is enough.
    fn pushed(&mut self) -> Result<(), std::io::Error> {
        self.count += 1;
        if self.buf.len() >= self.flush {
            self.out.write_all(self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use super::super::args::Selection;
    use super::*;
    use crate::config::OaiProvider as Settings;
    use crate::naming::Naming;
    use crate::publish::{Limits, LinkPolicies, Publisher, SetConfig};
    use crate::store::{Batch, Expected, Listing, NewRecord, Store, StoreOptions};
    use std::sync::Arc;

    const BASE: &str = "http://t.test/";

    fn upsert(store: &Store, source: &str, i: u32, body: &str) {
        let info = store.put(body.as_bytes(), &Expected::none()).unwrap();
        let uri = format!("{BASE}r/{source}/x{i:03}");
        let listing = Listing { origin: format!("http://o/{source}/{i}"), ..Listing::default() };
        let rec = NewRecord {
            uri,
            source: source.into(),
            upstream: format!("http://o/{source}/{i}"),
            sha256: info.id,
            listing,
        };
        store.apply(Batch::new().upsert(&[source, "ab"], rec)).unwrap();
    }

    fn delete(store: &Store, source: &str, i: u32) {
        store.apply(Batch::new().delete(&[source, "ab"], &format!("{BASE}r/{source}/x{i:03}"))).unwrap();
    }

    /// (identifier, datestamp, deleted) of every header of a ListIdentifiers page, and its token.
    fn page(oai: &OaiProvider, token: &str) -> (Vec<(String, String, bool)>, Option<String>) {
        let pairs =
            [("verb".to_owned(), "ListIdentifiers".to_owned()), ("resumptionToken".to_owned(), token.to_owned())];
        let mut out = Vec::new();
        oai.respond(&pairs, W3cDateTime::now(), &mut out).unwrap();
        let body = String::from_utf8(out).unwrap();
        let inner = |h: &str, tag: &str| {
            let open = format!("<{tag}>");
            let s = &h[h.find(&open).unwrap() + open.len()..];
            s[..s.find('<').unwrap()].to_owned()
        };
        let headers = body
            .split("<header")
            .skip(1)
            .map(|h| (inner(h, "identifier"), inner(h, "datestamp"), h.starts_with(" status=\"deleted\"")))
            .collect();
        let next = body
            .split_once("<resumptionToken")
            .and_then(|(_, r)| r.split_once('>'))
            .map(|(_, r)| r[..r.find('<').unwrap()].to_owned())
            .filter(|t| !t.is_empty());
        (headers, next)
    }

    fn provider(store: &Store, page_size: u32) -> OaiProvider {
        let naming = Naming::new(&url::Url::parse(BASE).unwrap());
        let sets = SetConfig::all(["a", "b"], [SetConfig::new("ab", ["a", "b"])]);
        let publisher =
            Arc::new(Publisher::new(store.clone(), naming, sets, LinkPolicies::default(), Limits::default()).unwrap());
        let settings = Settings {
            name: "t".into(),
            admin_email: "t@example.org".into(),
            repository_identifier: "t.test".into(),
            page_size,
            page_bytes: 1 << 20,
            token_lifetime: Duration::from_secs(3600),
        };
        OaiProvider::new(publisher, settings, Default::default(), Default::default()).unwrap()
    }

    /// A page made ahead, then served, is byte for byte the page made on request, though the
    /// store changed in between; it is served once.
    #[test]
    fn a_page_made_ahead_is_the_page_made_on_request() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_with(&dir.path().join("s"), &StoreOptions::small()).unwrap();
        let oai = provider(&store, 3);
        for i in 0..10 {
            upsert(&store, if i % 2 == 0 { "a" } else { "b" }, i, &format!("v1 {i}"));
        }
        let now = W3cDateTime::now();
        let ask = |pairs: &[(&str, &str)]| {
            let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
            let mut out = Vec::new();
            let next = oai.respond(&pairs, now, &mut out).unwrap();
            (pairs, out, next)
        };
        let (_, _, next) = ask(&[("verb", "ListRecords"), ("metadataPrefix", "oai_dc")]);
        let page = next.expect("the list goes on");
        let (pairs, fresh, after) = ask(&[("verb", "ListRecords"), ("resumptionToken", &page.token)]);
        oai.make_next(&page);
        upsert(&store, "a", 2, "v2 2");
        delete(&store, "b", 3);
        upsert(&store, "a", 40, "new");
        let made = oai.respond_made(&pairs, &now, true).expect("made ahead");
        assert_eq!(made.parts.concat(), fresh, "the same page");
        assert_eq!(made.next, after, "the same next page");
        assert!(oai.respond_made(&pairs, &now, true).is_none(), "served once");
        let other = [("verb".to_owned(), "ListIdentifiers".to_owned()), pairs[1].clone()];
        oai.make_next(&page);
        assert!(oai.respond_made(&other, &now, true).is_none(), "a token is for one verb");
    }

    /// `completeListSize` of a whole list, counted from what was added since the last count,
    /// is what a count from scratch gives, and the number of records the list has.
    #[test]
    fn a_whole_log_is_counted_from_what_was_added_since() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_with(&dir.path().join("s"), &StoreOptions::small()).unwrap();
        let oai = provider(&store, 1000);
        let list = |oai: &OaiProvider| {
            let pairs = [("verb".to_owned(), "ListIdentifiers".to_owned()), ("metadataPrefix".into(), "oai_dc".into())];
            let mut out = Vec::new();
            oai.respond(&pairs, W3cDateTime::now(), &mut out).unwrap();
            let body = String::from_utf8(out).unwrap();
            let size = body.split("completeListSize=\"").nth(1).map(|r| r[..r.find('"').unwrap()].parse().unwrap());
            (size, body.matches("<header").count() as u64)
        };
        for round in 0..3u32 {
            for i in 0..5 {
                upsert(&store, if i % 2 == 0 { "a" } else { "b" }, round * 10 + i, "v1");
            }
            upsert(&store, "a", 0, &format!("v{round}"));
            delete(&store, "b", round * 10 + 1);
            let (size, headers) = list(&oai);
            assert_eq!(size, Some(headers), "round {round}");
            assert_eq!(list(&provider(&store, 1000)).0, size, "round {round}: as counted from scratch");
        }
    }

    /// A list in both orders, started together and read together while the store changes
    /// under them: the same headers, each once, as the store was when they started.
    #[test]
    fn both_orders_list_the_same_versions_while_harvesting_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_with(&dir.path().join("s"), &StoreOptions::small()).unwrap();
        let oai = provider(&store, 4);
        // Interleaved in the logs, so log order is not URI order; some updated, some deleted.
        for i in (0..20).rev() {
            upsert(&store, if i % 3 == 0 { "b" } else { "a" }, i, &format!("v1 {i}"));
        }
        for i in [2, 5, 8] {
            upsert(&store, "a", i, &format!("v2 {i}"));
        }
        delete(&store, "a", 4);
        delete(&store, "b", 6);
        store.flush().unwrap();

        for set in [None, Some("ab"), Some("b")] {
            let snap = store.snapshot();
            let sel = Selection { prefix: "oai_dc".into(), set: set.map(str::to_owned), from: None, until: None };
            let now = W3cDateTime::now();
            let (mut by_log, _) = oai.new_list(&snap, false, &sel, &now).unwrap_or_else(|_| panic!("{set:?}"));
            by_log.key = None;
            let by_uri = Token { key: Some(String::new()), ..by_log.clone() };
            let mut tokens = [Some(oai.codec.encode(&by_log)), Some(oai.codec.encode(&by_uri))];
            let mut seen: [Vec<(String, String, bool)>; 2] = [Vec::new(), Vec::new()];
            for round in 0..20 {
                if round == 1 {
                    // Harvesting goes on: changes, deletions and new records after the start.
                    upsert(&store, "a", 1, "v3 1");
                    upsert(&store, "b", 3, "v3 3");
                    delete(&store, "a", 7);
                    upsert(&store, "a", 50, "new");
                    upsert(&store, "b", 51, "new");
                }
                for (t, seen) in tokens.iter_mut().zip(&mut seen) {
                    if let Some(text) = t.take() {
                        let (headers, next) = page(&oai, &text);
                        seen.extend(headers);
                        *t = next;
                    }
                }
            }
            assert!(tokens.iter().all(Option::is_none), "both lists end");
            let n = seen[0].len();
            let unique: BTreeSet<_> = seen[0].iter().map(|h| h.0.clone()).collect();
            assert_eq!(unique.len(), n, "no record twice: {:?}", seen[0]);
            // The records of round 1 (50, 51) are there for the lists after the first.
            let expected = match set {
                None => 20,
                Some("ab") => 22,
                _ => 8,
            };
            assert_eq!(n, expected, "{set:?}: every record that existed at the start: {:?}", seen[0]);
            let [mut log, mut uri] = seen;
            log.sort();
            uri.sort();
            assert_eq!(log, uri, "{set:?}: the same versions in both orders");
            let deleted: Vec<&str> = log.iter().filter(|h| h.2).map(|h| h.0.as_str()).collect();
            let want: Vec<&str> = ["oai:t.test:r/a/x004", "oai:t.test:r/b/x006"]
                .into_iter()
                .filter(|d| set != Some("b") || d.contains("/b/"))
                .collect();
            assert_eq!(deleted, want, "{set:?}: deleted as they were at the start, not since");
            // Put the store back for the next set's lists.
            upsert(&store, "a", 1, "v1 1");
            upsert(&store, "b", 3, "v1 3");
            upsert(&store, "a", 7, "v1 7");
        }
    }
}
