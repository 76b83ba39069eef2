//! A repository's datestamp granularity (OAI-PMH 2.0 §3.3): `from` and `until` must be
//! written in it, and in the same one, or a repository answers `badArgument` (Dataverse sent
//! seconds to day-only repositories; PubMed Central refuses times).

use std::time::Duration;

use crate::model::W3cDateTime;

/// `YYYY-MM-DD` or `YYYY-MM-DDThh:mm:ssZ`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granularity {
    /// `YYYY-MM-DD`: every repository supports it.
    Day,
    /// `YYYY-MM-DDThh:mm:ssZ`.
    Seconds,
}

impl Granularity {
    /// Identify's `granularity`; `None` when it is neither form.
    pub fn parse(text: &str) -> Option<Granularity> {
        match text.trim() {
            "YYYY-MM-DD" => Some(Granularity::Day),
            "YYYY-MM-DDThh:mm:ssZ" => Some(Granularity::Seconds),
            _ => None,
        }
    }

    /// The granularity a datestamp is written in, for checking what a repository emits.
    pub fn of(datestamp: &str) -> Option<Granularity> {
        match datestamp.trim().len() {
            10 => Some(Granularity::Day),
            20 if datestamp.trim().ends_with('Z') => Some(Granularity::Seconds),
            _ => None,
        }
    }

    /// `t` written in this granularity: a day is the UTC date `t` falls on (a `from` of that
    /// day includes all of it).
    pub fn format(self, t: &W3cDateTime) -> String {
        let s = t.to_string();
        match self {
            Granularity::Day => s[..10].to_owned(),
            Granularity::Seconds => format!("{}Z", &s[..19]),
        }
    }

    /// The `from` of an incremental harvest: `response_date` (of the previous complete
    /// harvest) less `overlap`, in this granularity. Never the newest datestamp seen: lists are
    /// not in date order, and records can be stamped before they become visible.
    pub fn from_after(self, response_date: &W3cDateTime, overlap: Duration) -> String {
        let secs = response_date.unix_timestamp() - i64::try_from(overlap.as_secs()).unwrap_or(i64::MAX / 2);
        let t = W3cDateTime::from_unix(secs.max(0), 0).unwrap_or(*response_date);
        self.format(&t)
    }
}

impl std::fmt::Display for Granularity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Granularity::Day => "YYYY-MM-DD",
            Granularity::Seconds => "YYYY-MM-DDThh:mm:ssZ",
        })
    }
}
