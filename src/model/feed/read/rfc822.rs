//! RSS 2.0 dates: RFC 822 as updated by RFC 2822 (`Sat, 21 May 2005 11:43:33 GMT`).
//!
//! Hand-written because feeds in the wild stretch the grammar in ways the strict parsers
//! (httpdate: GMT only; time's `Rfc2822`: no named zones) refuse: named zones (`EST`, `UT`),
//! numeric ones (`-0500`), a missing weekday or seconds, two-digit years, full month names.
//! The weekday, when given, is not checked against the date: it adds nothing and is often
//! wrong.

use time::{Date, Month, PrimitiveDateTime, Time, UtcOffset};

use crate::model::W3cDateTime;

/// Parses an RSS date; `None` when it is not one.
pub(super) fn parse(s: &str) -> Option<W3cDateTime> {
    let s = s.trim();
    // An optional "Sat," (or "Saturday,").
    let s = match s.split_once(',') {
        Some((day, rest)) if day.trim().bytes().all(|b| b.is_ascii_alphabetic()) => rest,
        Some(_) => return None,
        None => s,
    };
    let mut parts = s.split_ascii_whitespace();
    let day: u8 = digits(parts.next()?, 1, 2)?.try_into().ok()?;
    let month = month(parts.next()?)?;
    let year = year(parts.next()?)?;
    let time = time_of_day(parts.next()?)?;
    let offset = zone(parts.next()?)?;
    if parts.next().is_some() {
        return None;
    }
    let date = Date::from_calendar_date(year, month, day).ok()?;
    let utc = PrimitiveDateTime::new(date, time).assume_offset(offset).to_offset(UtcOffset::UTC);
    if !(0..=9999).contains(&utc.year()) {
        return None;
    }
    Some(W3cDateTime::from_utc(utc))
}

/// A number of `min..=max` ASCII digits.
fn digits(s: &str, min: usize, max: usize) -> Option<u32> {
    if s.len() < min || s.len() > max || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn month(s: &str) -> Option<Month> {
    const NAMES: [&str; 12] = [
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ];
    let lower = s.to_ascii_lowercase();
    let i = NAMES.iter().position(|name| lower.len() >= 3 && name.starts_with(lower.as_str()))?;
    Month::try_from(u8::try_from(i + 1).ok()?).ok()
}

/// Four digits, or the obsolete two (50–99 → 19xx, else 20xx) and three (+1900) of RFC 2822
/// §4.3.
fn year(s: &str) -> Option<i32> {
    let n = i32::try_from(digits(s, 2, 4)?).ok()?;
    Some(match s.len() {
        2 if n >= 50 => 1900 + n,
        2 => 2000 + n,
        3 => 1900 + n,
        _ => n,
    })
}

/// `hh:mm` or `hh:mm:ss`.
fn time_of_day(s: &str) -> Option<Time> {
    let mut it = s.split(':');
    let h = u8::try_from(digits(it.next()?, 1, 2)?).ok()?;
    let m = u8::try_from(digits(it.next()?, 2, 2)?).ok()?;
    let sec = match it.next() {
        Some(v) => u8::try_from(digits(v, 2, 2)?).ok()?,
        None => 0,
    };
    if it.next().is_some() {
        return None;
    }
    Time::from_hms(h, m, sec).ok()
}

/// `+hhmm`/`-hhmm`, or a name: UT, UTC, GMT, Z, the US zones, or a military letter (which
/// RFC 2822 §4.3 says to read as +0000, their sign having been defined backwards).
fn zone(s: &str) -> Option<UtcOffset> {
    let b = s.as_bytes();
    if b.len() == 5 && matches!(b[0], b'+' | b'-') {
        let hours = i8::try_from(digits(&s[1..3], 2, 2)?).ok()?;
        let minutes = i8::try_from(digits(&s[3..5], 2, 2)?).ok()?;
        if minutes > 59 {
            return None;
        }
        let sign = if b[0] == b'-' { -1 } else { 1 };
        return UtcOffset::from_hms(sign * hours, sign * minutes, 0).ok();
    }
    let hours = match s.to_ascii_uppercase().as_str() {
        "UT" | "UTC" | "GMT" | "Z" => 0,
        "EDT" => -4,
        "EST" | "CDT" => -5,
        "CST" | "MDT" => -6,
        "MST" | "PDT" => -7,
        "PST" => -8,
        m if m.len() == 1 && m.bytes().all(|c| c.is_ascii_alphabetic() && c != b'J') => 0,
        _ => return None,
    };
    UtcOffset::from_hms(hours, 0, 0).ok()
}

#[cfg(test)]
mod tests {
    use super::parse;

    fn utc(s: &str) -> String {
        parse(s).map(|d| d.to_string()).unwrap_or_else(|| format!("unparsed: {s}"))
    }

    #[test]
    fn numeric_zones_are_converted_to_utc() {
        assert_eq!(utc("Sat, 21 May 2005 11:43:33 +0000"), "2005-05-21T11:43:33Z");
        assert_eq!(utc("Sat, 21 May 2005 11:43:33 -0500"), "2005-05-21T16:43:33Z");
        assert_eq!(utc("Sat, 21 May 2005 01:13:33 +0130"), "2005-05-20T23:43:33Z");
    }

    #[test]
    fn named_zones_are_converted_to_utc() {
        assert_eq!(utc("Sat, 21 May 2005 11:43:33 GMT"), "2005-05-21T11:43:33Z");
        assert_eq!(utc("Sat, 21 May 2005 11:43:33 UT"), "2005-05-21T11:43:33Z");
        assert_eq!(utc("Sat, 21 May 2005 11:43:33 EST"), "2005-05-21T16:43:33Z");
        assert_eq!(utc("Sat, 21 May 2005 11:43:33 EDT"), "2005-05-21T15:43:33Z");
        assert_eq!(utc("Sat, 21 May 2005 11:43:33 PST"), "2005-05-21T19:43:33Z");
        assert_eq!(utc("Sat, 21 May 2005 11:43:33 Z"), "2005-05-21T11:43:33Z");
    }

    #[test]
    fn lenient_forms_found_in_the_wild() {
        assert_eq!(utc("21 May 2005 11:43 GMT"), "2005-05-21T11:43:00Z");
        assert_eq!(utc("Sat, 1 may 05 11:43:33 +0000"), "2005-05-01T11:43:33Z");
        assert_eq!(utc("Saturday, 21 May 2005 11:43:33 GMT"), "2005-05-21T11:43:33Z");
        assert_eq!(utc("Sat, 21 September 2005 11:43:33 GMT"), "2005-09-21T11:43:33Z");
    }

    #[test]
    fn non_dates_are_refused() {
        for s in [
            "",
            "2005-05-21T11:43:33Z",
            "Sat, 32 May 2005 11:43:33 GMT",
            "Sat, 21 Foo 2005 11:43:33 GMT",
            "Sat, 21 May 2005 25:43:33 GMT",
            "Sat, 21 May 2005 11:43:33 +05",
            "Sat, 21 May 2005 11:43:33 XYZ",
            "Sat, 21 May 2005 11:43:33",
            "Sat, 21 May 2005 11:43:33 GMT extra",
        ] {
            assert!(parse(s).is_none(), "{s:?} parsed");
        }
    }
}
