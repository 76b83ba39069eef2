//! Conditional requests and byte ranges (RFC 9110 §13 and §14), as pure functions of the
//! request headers and the representation's validators, so every rule is unit-tested without
//! a server.
//!
//! Evaluation order is §13.2.2: `If-Match`, else `If-Unmodified-Since` (412 on failure); then
//! `If-None-Match`, else `If-Modified-Since` (304); then `Range`, honoured only when an
//! `If-Range` validator (if any) still matches. A multi-range request is answered with the
//! whole representation, which §14.2 allows, rather than `multipart/byteranges`.

use std::ops::Range;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, header};

/// The outcome of the preconditions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// 304 Not Modified.
    NotModified,
    /// 412 Precondition Failed.
    PreconditionFailed,
    /// 200 with the whole representation.
    Full,
    /// 206 with these bytes.
    Partial(Range<u64>),
    /// 416 Range Not Satisfiable.
    Unsatisfiable,
}

/// What the response would carry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Validators<'a> {
    /// The quoted strong entity tag.
    pub(crate) etag: &'a str,
    /// Last-Modified, at whole seconds.
    pub(crate) last_modified: SystemTime,
    /// Representation length.
    pub(crate) length: u64,
}

/// Evaluates every conditional and range header of a GET (`ranges = true`) or HEAD.
pub(crate) fn decide(req: &HeaderMap, v: Validators<'_>, ranges: bool) -> Decision {
    let text = |name| req.get(name).and_then(|h| h.to_str().ok());
    if let Some(im) = text(header::IF_MATCH) {
        if !tag_list_matches(im, v.etag, false) {
            return Decision::PreconditionFailed;
        }
    } else if let Some(t) = text(header::IF_UNMODIFIED_SINCE).and_then(http_date)
        && secs(v.last_modified) > secs(t)
    {
        return Decision::PreconditionFailed;
    }
    if let Some(inm) = text(header::IF_NONE_MATCH) {
        if tag_list_matches(inm, v.etag, true) {
            return Decision::NotModified;
        }
    } else if let Some(t) = text(header::IF_MODIFIED_SINCE).and_then(http_date)
        && secs(v.last_modified) <= secs(t)
    {
        return Decision::NotModified;
    }
    let Some(range) = text(header::RANGE).filter(|_| ranges) else { return Decision::Full };
    if let Some(ir) = text(header::IF_RANGE)
        && !if_range_matches(ir, v)
    {
        return Decision::Full;
    }
    parse_range(range, v.length)
}

/// `*` or a comma-separated list of entity tags; weak comparison ignores `W/`.
fn tag_list_matches(list: &str, etag: &str, weak: bool) -> bool {
    list.split(',').map(str::trim).any(|t| {
        if t == "*" {
            return true;
        }
        match t.strip_prefix("W/") {
            Some(stripped) => weak && stripped == etag,
            None => t == etag,
        }
    })
}

/// `If-Range` holds a strong entity tag or an HTTP-date, which must match exactly.
fn if_range_matches(value: &str, v: Validators<'_>) -> bool {
    if value.starts_with('"') {
        return value == v.etag;
    }
    http_date(value).is_some_and(|t| secs(t) == secs(v.last_modified))
}

/// One `bytes=` range; anything unparsable is ignored (whole representation).
fn parse_range(value: &str, length: u64) -> Decision {
    let Some(spec) = value.trim().strip_prefix("bytes=") else { return Decision::Full };
    if spec.contains(',') {
        return Decision::Full;
    }
    let Some((a, b)) = spec.trim().split_once('-') else { return Decision::Full };
    let num = |s: &str| if s.bytes().all(|c| c.is_ascii_digit()) { s.parse::<u64>().ok() } else { None };
    match (a.trim(), b.trim()) {
        ("", "") => Decision::Full,
        ("", suffix) => match num(suffix) {
            None => Decision::Full,
            Some(0) => Decision::Unsatisfiable,
            Some(_) if length == 0 => Decision::Unsatisfiable,
            Some(n) => Decision::Partial(length - n.min(length)..length),
        },
        (first, last) => {
            let Some(first) = num(first) else { return Decision::Full };
            let last = if last.is_empty() { Some(u64::MAX) } else { num(last) };
            match last {
                Some(last) if last < first => Decision::Full,
                Some(_) if first >= length => Decision::Unsatisfiable,
                Some(last) => Decision::Partial(first..last.min(length - 1) + 1),
                None => Decision::Full,
            }
        }
    }
}

fn http_date(s: &str) -> Option<SystemTime> {
    httpdate::parse_http_date(s.trim()).ok()
}

fn secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A Unix timestamp as a `SystemTime` at whole seconds (HTTP dates have no fraction).
pub(crate) fn system_time(unix_secs: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(u64::try_from(unix_secs).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    const TAG: &str = "\"abc\"";

    fn v() -> Validators<'static> {
        Validators { etag: TAG, last_modified: system_time(1_700_000_000), length: 100 }
    }

    fn with(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, val) in pairs {
            h.insert(k.clone(), HeaderValue::from_str(val).unwrap());
        }
        h
    }

    fn date(secs: i64) -> String {
        httpdate::fmt_http_date(system_time(secs))
    }

    #[test]
    fn not_modified_by_tag_or_date() {
        assert_eq!(decide(&with(&[(header::IF_NONE_MATCH, TAG)]), v(), true), Decision::NotModified);
        assert_eq!(decide(&with(&[(header::IF_NONE_MATCH, "W/\"abc\", \"x\"")]), v(), true), Decision::NotModified);
        assert_eq!(decide(&with(&[(header::IF_NONE_MATCH, "\"x\"")]), v(), true), Decision::Full);
        let ims = date(1_700_000_000);
        assert_eq!(decide(&with(&[(header::IF_MODIFIED_SINCE, &ims)]), v(), true), Decision::NotModified);
        let older = date(1_699_999_999);
        assert_eq!(decide(&with(&[(header::IF_MODIFIED_SINCE, &older)]), v(), true), Decision::Full);
        // If-None-Match wins over If-Modified-Since.
        let both = with(&[(header::IF_NONE_MATCH, "\"x\""), (header::IF_MODIFIED_SINCE, &ims)]);
        assert_eq!(decide(&both, v(), true), Decision::Full);
    }

    #[test]
    fn preconditions_fail_with_412() {
        assert_eq!(decide(&with(&[(header::IF_MATCH, "\"x\"")]), v(), true), Decision::PreconditionFailed);
        assert_eq!(decide(&with(&[(header::IF_MATCH, "W/\"abc\"")]), v(), true), Decision::PreconditionFailed);
        assert_eq!(decide(&with(&[(header::IF_MATCH, "*")]), v(), true), Decision::Full);
        let ius = date(1_699_999_999);
        assert_eq!(decide(&with(&[(header::IF_UNMODIFIED_SINCE, &ius)]), v(), true), Decision::PreconditionFailed);
    }

    #[test]
    fn ranges() {
        let r = |s: &str| decide(&with(&[(header::RANGE, s)]), v(), true);
        assert_eq!(r("bytes=0-9"), Decision::Partial(0..10));
        assert_eq!(r("bytes=90-"), Decision::Partial(90..100));
        assert_eq!(r("bytes=90-500"), Decision::Partial(90..100));
        assert_eq!(r("bytes=-10"), Decision::Partial(90..100));
        assert_eq!(r("bytes=-500"), Decision::Partial(0..100));
        assert_eq!(r("bytes=100-"), Decision::Unsatisfiable);
        assert_eq!(r("bytes=-0"), Decision::Unsatisfiable);
        assert_eq!(r("bytes=5-2"), Decision::Full, "invalid: ignored");
        assert_eq!(r("bytes=0-1,5-6"), Decision::Full, "multi-range: whole representation");
        assert_eq!(r("items=0-1"), Decision::Full);
        assert_eq!(r("bytes=x-1"), Decision::Full);
        let head = decide(&with(&[(header::RANGE, "bytes=0-9")]), v(), false);
        assert_eq!(head, Decision::Full, "HEAD ignores Range");
        let empty = Validators { length: 0, ..v() };
        assert_eq!(decide(&with(&[(header::RANGE, "bytes=0-")]), empty, true), Decision::Unsatisfiable);
    }

    #[test]
    fn if_range_needs_a_current_validator() {
        let stale = with(&[(header::RANGE, "bytes=0-9"), (header::IF_RANGE, "\"old\"")]);
        assert_eq!(decide(&stale, v(), true), Decision::Full);
        let current = with(&[(header::RANGE, "bytes=0-9"), (header::IF_RANGE, TAG)]);
        assert_eq!(decide(&current, v(), true), Decision::Partial(0..10));
        let d = date(1_700_000_000);
        let by_date = with(&[(header::RANGE, "bytes=0-9"), (header::IF_RANGE, &d)]);
        assert_eq!(decide(&by_date, v(), true), Decision::Partial(0..10));
    }
}
