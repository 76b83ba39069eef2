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

use std::io::Write;

use super::args::{ListStart, Selection};
use super::record::Version;
use super::token::{Token, logs_fingerprint};
use super::write::{self, TokenElement};
use super::{Answer, Fault, OaiProvider};
use crate::model::{Change, W3cDateTime};
use crate::store::{RecordView, Snapshot, StoreError};

/// Bytes buffered before they go to the client.
const FLUSH: usize = 64 * 1024;

impl OaiProvider {
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
    ) -> Result<(), Answer> {
        let snap = self.publisher.store().snapshot();
        let (token, logs) = match start {
            ListStart::New(sel) => self.new_list(&snap, records, sel, now)?,
            ListStart::Resume(text) => self.resume(text, records, now)?,
        };
        let mut page = Page { buf, out, started: false, count: 0, date, base_url: &self.base_url, pairs, records };
        let next = self.walk(&snap, &token, &logs, &mut page)?;
        if !page.started {
            let why = match start {
                ListStart::New(_) => "no records match the request",
                ListStart::Resume(_) => "the rest of the list is no longer available; start it again",
            };
            return Err(Fault::new("noRecordsMatch", why).into());
        }
        let value = next.map(|(log, seq)| {
            let t =
                Token { log, next: seq, cursor: token.cursor + page.count, expires: self.expiry(now), ..token.clone() };
            (self.codec.encode(&t), t.expires)
        });
        let expires =
            value.as_ref().and_then(|(_, e)| W3cDateTime::from_unix(*e, 0).ok()).map(|t| write::datestamp(&t));
        write::resumption_token(
            page.buf,
            &TokenElement {
                value: value.as_ref().map(|(v, _)| v.as_str()),
                expires: expires.as_deref(),
                size: token.size,
                cursor: token.cursor,
            },
        );
        page.buf.extend_from_slice(if records { b"</ListRecords>\n" } else { b"</ListIdentifiers>\n" });
        write::close(page.buf);
        Ok(())
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
            cursor: 0,
            size: None,
            expires: self.expiry(now),
        };
        if sel.prefix == "oai_dc" {
            token.size = Some(self.count(snap, &token, &logs)?);
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

    /// The list's size: per log, the events in the window less those superseded by a later
    /// event at or before the end (each event has at most one successor, which names it).
    fn count(&self, snap: &Snapshot, token: &Token, logs: &[String]) -> Result<u64, StoreError> {
        let mut n = 0;
        for (log, &end) in logs.iter().zip(&token.ends) {
            let (lo, hi) = self.window(snap, token, log, end)?;
            if lo > hi {
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

    /// Writes the page's records from the token's position; the position of the next page,
    /// if the list goes on. Each record is written straight into the response buffer and
    /// taken back if it does not fit the page.
    fn walk(
        &self,
        snap: &Snapshot,
        token: &Token,
        logs: &[String],
        page: &mut Page<'_, '_>,
    ) -> Result<Option<(u32, u64)>, Answer> {
        let mut identifier = String::with_capacity(128);
        let mut bytes = 0usize;
        for (i, log) in logs.iter().enumerate().skip(token.log as usize) {
            let end = token.ends[i];
            let (lo, hi) = self.window(snap, token, log, end)?;
            let first = if i == token.log as usize { token.next.max(lo) } else { lo };
            let mut events = snap.events_range(log, first, hi)?;
            while let Some(e) = events.next_view() {
                let e = e?;
                let Some(raw) = snap.raw_record(e.uri)? else { continue };
                let v = raw.view()?;
                if !emitted(snap, log, &v, e.seq, end)? {
                    continue;
                }
                let ver = Version { deleted: e.change == Change::Deleted, datetime: e.datetime()?, sha256: e.sha256 };
                self.identifier_into(&mut identifier, v.uri);
                let (mark, was_started) = (page.buf.len(), page.started);
                page.start();
                let at = page.buf.len();
                if !self.render(page.buf, &raw, &v, &identifier, &ver, &token.prefix, token.records)? {
                    page.buf.truncate(mark);
                    page.started = was_started;
                    continue;
                }
                let full = page.count >= u64::from(self.settings.page_size) || bytes >= self.settings.page_bytes;
                if full {
                    page.buf.truncate(mark);
                    return Ok(Some((u32::try_from(i).unwrap_or(u32::MAX), e.seq)));
                }
                bytes += page.buf.len() - at;
                page.pushed()?;
            }
        }
        Ok(None)
    }
}

/// Whether the list emits the resource `v` at its event `seq`: its latest event at or before
/// `end` is that one.
fn emitted(snap: &Snapshot, log: &str, v: &RecordView<'_>, seq: u64, end: u64) -> Result<bool, StoreError> {
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

/// The response being written: the envelope is opened at the first record, so a list with
/// none can still be answered `noRecordsMatch`.
struct Page<'a, 'b> {
    buf: &'a mut Vec<u8>,
    out: &'a mut dyn Write,
    started: bool,
    count: u64,
    date: &'b str,
    base_url: &'b str,
    pairs: &'b [(String, String)],
    records: bool,
}

impl Page<'_, '_> {
    /// Opens the envelope, before the first record.
    fn start(&mut self) {
        if !self.started {
            self.started = true;
            write::open(self.buf, self.date, self.base_url, Some(self.pairs));
            self.buf.extend_from_slice(if self.records { b"<ListRecords>" } else { b"<ListIdentifiers>" });
        }
    }

    /// Counts the record just written, and sends what is buffered once there is enough.
    fn pushed(&mut self) -> Result<(), std::io::Error> {
        self.count += 1;
        if self.buf.len() >= FLUSH {
            self.out.write_all(self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }
}
