//! One source's page of the dashboard, `api/sources/{id}`: what a monitoring script or an
//! operator reads of one source without downloading every source's status. Its row as
//! `api/status` shows it, its last passes (kept in its state row, see
//! [`crate::store::PASS_HISTORY`]), the first of its failures and held deletions, and its
//! changes per day over the last [`DAYS`] days.
//!
//! Every part is bounded whatever the source's size: the failures and held deletions are read
//! up to a few rows, and the changes per day are counted without reading the events between
//! (the change log's datetimes never go back, so the first event of each day is a binary
//! search, and a day's count is the difference of two sequence numbers): about `DAYS` times
//! log₂(events) single-event reads.

use axum::response::Response;
use serde::Serialize;

use super::WebState;
use super::dashboard::{SourceRow, candidate, json, source_ids, source_row};
use super::error::WebError;
use crate::model::W3cDateTime;
use crate::publish::Publisher;
use crate::store::{FailureReport, HeldDeletion, PassRecord, Store, StoreError};

/// Days the plot of changes covers, today included.
pub(crate) const DAYS: i64 = 30;
/// Failures and held deletions shown (their counts are in the row; the full lists are
/// `api/failures` and `tributary deletions`).
const SHOWN: usize = 10;
const DAY_SECS: i64 = 86_400;

/// What `api/sources/{id}` answers.
#[derive(Debug, Serialize)]
struct SourcePage {
    generated: String,
    source: SourceRow,
    /// The last passes, newest first.
    passes: Vec<PassRecord>,
    /// The first failing resources, in URI order (`failing` counts them all).
    failures: FailureReport,
    /// The first held (or staged) deletions, in URI order.
    held: Vec<HeldDeletion>,
    /// Changes applied per UTC day, oldest first, the last being today.
    changes_per_day: Vec<DayCount>,
}

/// Changes applied on one day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct DayCount {
    /// `YYYY-MM-DD`, UTC.
    day: String,
    changes: u64,
}

fn page(
    p: &Publisher,
    id: &str,
    configured: Option<&std::collections::HashSet<String>>,
) -> Result<SourcePage, WebError> {
    if !source_ids(p).iter().any(|s| s == id) {
        return Err(WebError::NotFound(format!("no source {id:?}")));
    }
    let store = p.store();
    let now = W3cDateTime::now();
    let mut c = candidate(store, id.to_owned(), configured, now.unix_timestamp())?;
    let passes = std::mem::take(&mut c.state.passes).into_iter().rev().collect();
    let subs = store.subscriptions()?;
    Ok(SourcePage {
        generated: now.to_string(),
        source: source_row(p.naming(), &subs, now, c),
        passes,
        failures: store.failure_report(id, SHOWN)?,
        held: store.held_deletions_first(id, SHOWN)?,
        changes_per_day: changes_per_day(store, id, now.unix_timestamp())?,
    })
}

/// The set's changes per UTC day over the [`DAYS`] days ending with the one holding `now`.
fn changes_per_day(store: &Store, set: &str, now: i64) -> Result<Vec<DayCount>, StoreError> {
    let snap = store.snapshot();
    let last = snap.set_info(set)?.map_or(0, |i| i.events);
    let today = now.div_euclid(DAY_SECS);
    let mut firsts = Vec::with_capacity(DAYS as usize + 1);
    for day in (today - DAYS + 1)..=(today + 1) {
        let first = match midnight(day) {
            Some(t) if last > 0 => snap.first_seq_at_or_after(set, &t, last)?,
            _ => last + 1,
        };
        firsts.push((day, first));
    }
    Ok(firsts.windows(2).map(|w| DayCount { day: date(w[0].0), changes: w[1].1.saturating_sub(w[0].1) }).collect())
}

fn midnight(day: i64) -> Option<W3cDateTime> {
    W3cDateTime::from_unix(day * DAY_SECS, 0).ok()
}

fn date(day: i64) -> String {
    midnight(day).map(|t| t.to_string().chars().take(10).collect()).unwrap_or_default()
}

/// `api/sources/{id}`: one source's row, passes, failures, held deletions and changes per day.
pub(crate) async fn api_source(st: &WebState, id: String) -> Result<Response, WebError> {
    let p = st.shared.publisher.clone();
    let configured = st.configured();
    let page = tokio::task::spawn_blocking(move || page(&p, &id, configured.as_deref())).await??;
    Ok(json(&page))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_utc_dates() {
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(19_723), "2024-01-01");
    }

    #[test]
    fn a_set_without_events_has_a_month_of_zeros() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let days = changes_per_day(&store, "nothing", 19_723 * DAY_SECS + 5).unwrap();
        assert_eq!(days.len(), DAYS as usize);
        assert_eq!((days[0].day.as_str(), days[29].day.as_str()), ("2023-12-03", "2024-01-01"));
        assert!(days.iter().all(|d| d.changes == 0));
    }
}
