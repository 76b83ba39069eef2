//! Windowing: a repository that refuses a wide date range (DNB answers HTTP 413 past 100,000
//! records, metha#6; Zenodo 422, metha#39; others time out or fail with a 5xx) is asked for
//! the same range in windows, each half the last refused size, down to a floor of one granule
//! (an hour in seconds granularity, a day in days). The size that worked is kept in the
//! source's state and used from the next poll on, so a large repository is not refused afresh
//! at every poll.
//!
//! Pure: which errors are refusals, how a range splits, what the next size is. The harvest
//! loop in the parent drives it.

use crate::fetch::FetchError;
use crate::harvest::oai_error::OaiHarvestError;
use crate::model::W3cDateTime;
use crate::model::oai::Granularity;

const DAY: i64 = 86_400;

/// Whether `e`, met on a list's first request, is a refusal of its range: HTTP 413, 422 or
/// 5xx (after the fetcher's retries), or a timeout. A protocol error is an answer, not one.
pub(super) fn refused(e: &OaiHarvestError) -> bool {
    match e {
        OaiHarvestError::Fetch { source: FetchError::Status { status, .. }, .. } => {
            matches!(status, 413 | 422 | 500..=599)
        }
        OaiHarvestError::Fetch { source: FetchError::Timeout { .. }, .. } => true,
        _ => false,
    }
}

/// The smallest window: one granule, an hour for seconds (metha's finest walk).
pub(super) fn floor(g: Granularity) -> i64 {
    match g {
        Granularity::Day => DAY,
        Granularity::Seconds => 3_600,
    }
}

/// Half of `size`, in whole granules; `None` once below the floor.
pub(super) fn halve(size: i64, g: Granularity) -> Option<i64> {
    let unit = match g {
        Granularity::Day => DAY,
        Granularity::Seconds => 1,
    };
    let half = (size / 2) / unit * unit;
    (half >= floor(g)).then_some(half)
}

/// The window starting at `start` (Unix seconds) of `size`: its `from`, and its `until`
/// (inclusive, so one second or one day before the next window's `from`), or `None` for the
/// last window, left open so that it reaches whatever the repository holds now.
pub(super) fn window(start: i64, size: i64, now: i64, g: Granularity) -> (String, Option<String>) {
    let from = fmt(start, g);
    let end = start.saturating_add(size);
    if end > now {
        return (from, None);
    }
    let last = match g {
        Granularity::Day => end - DAY,
        Granularity::Seconds => end - 1,
    };
    (from, Some(fmt(last.max(start), g)))
}

/// A `from` or `earliestDatestamp` as Unix seconds, aligned to the granularity.
pub(super) fn start_of(text: &str, g: Granularity) -> Option<i64> {
    let t: W3cDateTime = text.trim().parse().ok()?;
    let s = t.unix_timestamp();
    Some(match g {
        Granularity::Day => s.div_euclid(DAY) * DAY,
        Granularity::Seconds => s,
    })
}

fn fmt(secs: i64, g: Granularity) -> String {
    W3cDateTime::from_unix(secs.max(0), 0).map(|t| g.format(&t)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_disjoint_and_the_last_is_open() {
        let g = Granularity::Day;
        let start = start_of("2020-01-01", g).unwrap();
        let now = start + 10 * DAY;
        assert_eq!(window(start, 4 * DAY, now, g), ("2020-01-01".into(), Some("2020-01-04".into())));
        assert_eq!(window(start + 4 * DAY, 4 * DAY, now, g).0, "2020-01-05");
        assert_eq!(window(start + 8 * DAY, 4 * DAY, now, g), ("2020-01-09".into(), None));
        assert_eq!(window(start, DAY, now, g), ("2020-01-01".into(), Some("2020-01-01".into())));
        let s = Granularity::Seconds;
        let t = start_of("2020-01-01T00:00:00Z", s).unwrap();
        assert_eq!(window(t, 3_600, now, s), ("2020-01-01T00:00:00Z".into(), Some("2020-01-01T00:59:59Z".into())));
    }

    #[test]
    fn halving_stops_at_one_granule() {
        assert_eq!(halve(8 * DAY, Granularity::Day), Some(4 * DAY));
        assert_eq!(halve(3 * DAY, Granularity::Day), Some(DAY));
        assert_eq!(halve(DAY, Granularity::Day), None);
        assert_eq!(halve(7_201, Granularity::Seconds), Some(3_600));
        assert_eq!(halve(7_000, Granularity::Seconds), None);
    }

    #[test]
    fn refusals() {
        let status = |s| OaiHarvestError::Fetch {
            verb: "ListRecords",
            source: FetchError::Status { url: "u".into(), status: s },
        };
        assert!(refused(&status(413)) && refused(&status(422)) && refused(&status(503)));
        assert!(!refused(&status(403)) && !refused(&status(404)));
    }
}
