//! W3C Datetime (the profile of ISO 8601 the spec references for every time attribute).
//!
//! Every granularity is accepted (`YYYY` … `YYYY-MM-DDThh:mm:ss.sTZD`); times with a zone offset
//! are converted to UTC, and values are always written back in UTC as
//! `YYYY-MM-DDThh:mm:ss[.s]Z`. A time of day without a zone is ambiguous and rejected: the spec
//! recommends UTC, and guessing the Source's local zone would silently shift every change.
//!
//! Parsing is hand-written over bytes because it runs for every `lastmod` and `datetime` of a
//! 50,000-entry list; the calendar arithmetic is left to the `time` crate.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use time::{Date, Month, OffsetDateTime, PrimitiveDateTime, Time, UtcOffset};

/// How much of the datetime the document actually stated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Precision {
    /// `YYYY`
    Year,
    /// `YYYY-MM`
    Month,
    /// `YYYY-MM-DD`
    Day,
    /// `YYYY-MM-DDThh:mmTZD`
    Minute,
    /// `YYYY-MM-DDThh:mm:ss[.s]TZD`
    Second,
}

/// A W3C Datetime, normalised to a UTC instant.
///
/// Equality and ordering compare the instant only (and the number of fractional digits written
/// back), so `1994-11-05T08:15:30-05:00` equals `1994-11-05T13:15:30Z`. A date without a time
/// stands for the start of that period in UTC.
#[derive(Debug, Clone, Copy)]
pub struct W3cDateTime {
    utc: OffsetDateTime,
    precision: Precision,
    /// Number of fractional-second digits to write back (0 = none, at most 9).
    frac_digits: u8,
}

/// Why a datetime string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DateTimeError {
    /// The text does not follow any W3C Datetime granularity.
    #[error("`{0}` is not a W3C Datetime (expected e.g. 2013-01-03T09:00:00Z)")]
    Syntax(String),
    /// A time of day is given without `Z` or a `±hh:mm` offset.
    #[error("`{0}` has a time but no time zone; add `Z` for UTC or an offset like +01:00")]
    MissingZone(String),
    /// The fields are well-formed but name no real moment (month 13, 25:00, Feb 30…).
    #[error("`{0}` is not a valid date or time: {1}")]
    OutOfRange(String, String),
}

impl W3cDateTime {
    /// Builds a value from a UTC instant, written back at second precision (plus the fraction
    /// when the instant has one).
    pub fn from_utc(t: OffsetDateTime) -> Self {
        let utc = t.to_offset(UtcOffset::UTC);
        let frac_digits = frac_digits_needed(utc.nanosecond());
        W3cDateTime { utc, precision: Precision::Second, frac_digits }
    }

    /// The current time, truncated to whole seconds (for times shown to people and kept for
    /// schedules; Tributary's change events are stamped by the store, to the millisecond).
    pub fn now() -> Self {
        let now = OffsetDateTime::now_utc();
        Self::from_utc(now.replace_nanosecond(0).unwrap_or(now))
    }

    /// Milliseconds since the Unix epoch, written back with exactly three fractional digits:
    /// the precision Tributary stamps its own changes with, stated even when it is `.000`.
    ///
    /// # Errors
    /// When the timestamp is outside the years 0000–9999.
    pub fn from_unix_millis(ms: i64) -> Result<Self, DateTimeError> {
        let nanos = (ms.rem_euclid(1000) * 1_000_000) as u32;
        let t = Self::from_unix(ms.div_euclid(1000), nanos)?;
        Ok(W3cDateTime { frac_digits: 3, ..t })
    }

    /// Milliseconds since the Unix epoch (truncated).
    pub fn unix_millis(&self) -> i64 {
        (self.utc.unix_timestamp_nanos().div_euclid(1_000_000)) as i64
    }

    /// The current time to the millisecond, written with three fractional digits.
    pub fn now_millis() -> Self {
        let now = Self::now_precise();
        Self::from_unix_millis(now.unix_millis()).unwrap_or(now)
    }

    /// The current time, with the clock's full precision.
    pub fn now_precise() -> Self {
        Self::from_utc(OffsetDateTime::now_utc())
    }

    /// Builds a value from seconds since the Unix epoch.
    ///
    /// # Errors
    /// When the timestamp is outside the years 0000–9999.
    pub fn from_unix(secs: i64, nanos: u32) -> Result<Self, DateTimeError> {
        let t = OffsetDateTime::from_unix_timestamp(secs)
            .and_then(|t| t.replace_nanosecond(nanos))
            .map_err(|e| DateTimeError::OutOfRange(secs.to_string(), e.to_string()))?;
        if !(0..=9999).contains(&t.year()) {
            return Err(DateTimeError::OutOfRange(secs.to_string(), "year out of range".into()));
        }
        Ok(Self::from_utc(t))
    }

    /// The instant in UTC.
    pub fn utc(&self) -> OffsetDateTime {
        self.utc
    }

    /// Seconds since the Unix epoch.
    pub fn unix_timestamp(&self) -> i64 {
        self.utc.unix_timestamp()
    }

    /// Nanoseconds since the Unix epoch (for ordering keys).
    pub fn unix_nanos(&self) -> i128 {
        self.utc.unix_timestamp_nanos()
    }

    /// The granularity the source document used.
    pub fn precision(&self) -> Precision {
        self.precision
    }
}

fn frac_digits_needed(nanos: u32) -> u8 {
    if nanos == 0 {
        return 0;
    }
    let mut digits = 9;
    let mut n = nanos;
    while n.is_multiple_of(10) {
        n /= 10;
        digits -= 1;
    }
    digits
}

impl PartialEq for W3cDateTime {
    fn eq(&self, other: &Self) -> bool {
        self.utc == other.utc && self.frac_digits == other.frac_digits
    }
}
impl Eq for W3cDateTime {}

impl PartialOrd for W3cDateTime {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for W3cDateTime {
    fn cmp(&self, other: &Self) -> Ordering {
        self.utc.cmp(&other.utc).then(self.frac_digits.cmp(&other.frac_digits))
    }
}

impl std::hash::Hash for W3cDateTime {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.utc.unix_timestamp_nanos().hash(state);
        self.frac_digits.hash(state);
    }
}

/// A small cursor over the ASCII bytes of a datetime.
struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn digits(&mut self, n: usize) -> Option<u32> {
        let slice = self.b.get(self.i..self.i + n)?;
        let mut v = 0u32;
        for &c in slice {
            if !c.is_ascii_digit() {
                return None;
            }
            v = v * 10 + u32::from(c - b'0');
        }
        self.i += n;
        Some(v)
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.b.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn done(&self) -> bool {
        self.i == self.b.len()
    }
}

impl FromStr for W3cDateTime {
    type Err = DateTimeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s.trim())
    }
}

fn parse(s: &str) -> Result<W3cDateTime, DateTimeError> {
    let syntax = || DateTimeError::Syntax(s.to_owned());
    let mut c = Cursor { b: s.as_bytes(), i: 0 };
    let year = c.digits(4).ok_or_else(syntax)?;
    let (mut month, mut day) = (1, 1);
    let mut precision = Precision::Year;
    if c.eat(b'-') {
        month = c.digits(2).ok_or_else(syntax)?;
        precision = Precision::Month;
        if c.eat(b'-') {
            day = c.digits(2).ok_or_else(syntax)?;
            precision = Precision::Day;
        }
    }
    let date = make_date(s, year, month, day)?;
    if c.done() {
        let utc = PrimitiveDateTime::new(date, Time::MIDNIGHT).assume_utc();
        return Ok(W3cDateTime { utc, precision, frac_digits: 0 });
    }
    if precision != Precision::Day || !c.eat(b'T') {
        return Err(syntax());
    }
    let (time, precision, frac_digits) = parse_time(s, &mut c)?;
    let offset = parse_zone(s, &mut c)?;
    if !c.done() {
        return Err(syntax());
    }
    let utc = PrimitiveDateTime::new(date, time).assume_offset(offset).to_offset(UtcOffset::UTC);
    if !(0..=9999).contains(&utc.year()) {
        return Err(DateTimeError::OutOfRange(s.to_owned(), "year out of range in UTC".into()));
    }
    Ok(W3cDateTime { utc, precision, frac_digits })
}

fn make_date(s: &str, year: u32, month: u32, day: u32) -> Result<Date, DateTimeError> {
    let range = |e: time::error::ComponentRange| DateTimeError::OutOfRange(s.to_owned(), e.to_string());
    let month = u8::try_from(month)
        .ok()
        .and_then(|m| Month::try_from(m).ok())
        .ok_or_else(|| DateTimeError::OutOfRange(s.to_owned(), "month must be 01–12".into()))?;
    // Four digits always fit in i32 and u8 holds any two digits.
    Date::from_calendar_date(year as i32, month, day as u8).map_err(range)
}

fn parse_time(s: &str, c: &mut Cursor<'_>) -> Result<(Time, Precision, u8), DateTimeError> {
    let syntax = || DateTimeError::Syntax(s.to_owned());
    let hour = c.digits(2).ok_or_else(syntax)?;
    if !c.eat(b':') {
        return Err(syntax());
    }
    let minute = c.digits(2).ok_or_else(syntax)?;
    let (mut second, mut nanos, mut frac_digits) = (0, 0, 0u8);
    let mut precision = Precision::Minute;
    if c.eat(b':') {
        second = c.digits(2).ok_or_else(syntax)?;
        precision = Precision::Second;
        if c.eat(b'.') {
            (nanos, frac_digits) = parse_fraction(c).ok_or_else(syntax)?;
        }
    }
    let time = Time::from_hms_nano(hour as u8, minute as u8, second as u8, nanos)
        .map_err(|e| DateTimeError::OutOfRange(s.to_owned(), e.to_string()))?;
    Ok((time, precision, frac_digits))
}

/// Reads one or more fractional digits; digits past nanoseconds are dropped.
fn parse_fraction(c: &mut Cursor<'_>) -> Option<(u32, u8)> {
    let (mut nanos, mut digits) = (0u32, 0u8);
    while let Some(d) = c.peek().filter(u8::is_ascii_digit) {
        c.i += 1;
        if digits < 9 {
            nanos = nanos * 10 + u32::from(d - b'0');
            digits += 1;
        }
    }
    if digits == 0 {
        return None;
    }
    Some((nanos * 10u32.pow(u32::from(9 - digits)), digits))
}

fn parse_zone(s: &str, c: &mut Cursor<'_>) -> Result<UtcOffset, DateTimeError> {
    let sign: i8 = match c.peek() {
        None => return Err(DateTimeError::MissingZone(s.to_owned())),
        Some(b'Z') => {
            c.i += 1;
            return Ok(UtcOffset::UTC);
        }
        Some(b'+') => 1,
        Some(b'-') => -1,
        Some(_) => return Err(DateTimeError::Syntax(s.to_owned())),
    };
    c.i += 1;
    let syntax = || DateTimeError::Syntax(s.to_owned());
    let hours = c.digits(2).ok_or_else(syntax)?;
    if !c.eat(b':') {
        return Err(syntax());
    }
    let minutes = c.digits(2).ok_or_else(syntax)?;
    if hours > 23 || minutes > 59 {
        return Err(DateTimeError::OutOfRange(s.to_owned(), "zone offset out of range".into()));
    }
    // The offset is the zone's distance *ahead* of UTC: 08:15-05:00 is 13:15Z.
    UtcOffset::from_hms(sign * hours as i8, sign * minutes as i8, 0)
        .map_err(|e| DateTimeError::OutOfRange(s.to_owned(), e.to_string()))
}

impl fmt::Display for W3cDateTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [0u8; 30];
        let n = self.write_bytes(&mut buf);
        // Only ASCII digits and separators are ever written.
        f.write_str(std::str::from_utf8(&buf[..n]).map_err(|_| fmt::Error)?)
    }
}

impl W3cDateTime {
    /// Writes `YYYY-MM-DDThh:mm:ss[.f]Z` into `buf`, returning the length. Used by the XML
    /// writer to avoid a `format!` per attribute.
    pub fn write_bytes(&self, buf: &mut [u8; 30]) -> usize {
        let t = self.utc;
        let put = |buf: &mut [u8; 30], at: usize, v: u32, width: usize| {
            let mut v = v;
            for i in (0..width).rev() {
                buf[at + i] = b'0' + (v % 10) as u8;
                v /= 10;
            }
        };
        put(buf, 0, t.year() as u32, 4);
        buf[4] = b'-';
        put(buf, 5, u32::from(u8::from(t.month())), 2);
        buf[7] = b'-';
        put(buf, 8, u32::from(t.day()), 2);
        buf[10] = b'T';
        put(buf, 11, u32::from(t.hour()), 2);
        buf[13] = b':';
        put(buf, 14, u32::from(t.minute()), 2);
        buf[16] = b':';
        put(buf, 17, u32::from(t.second()), 2);
        let mut n = 19;
        if self.frac_digits > 0 {
            buf[n] = b'.';
            let digits = usize::from(self.frac_digits);
            let scaled = t.nanosecond() / 10u32.pow(9 - u32::from(self.frac_digits));
            put(buf, n + 1, scaled, digits);
            n += 1 + digits;
        }
        buf[n] = b'Z';
        n + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dt(s: &str) -> W3cDateTime {
        s.parse().unwrap()
    }

    #[test]
    fn negative_offset_is_added_to_reach_utc() {
        // The Python reference client gets this sign backwards.
        assert_eq!(dt("1994-11-05T08:15:30-05:00"), dt("1994-11-05T13:15:30Z"));
        assert_eq!(dt("1994-11-05T08:15:30-05:00").to_string(), "1994-11-05T13:15:30Z");
        assert_eq!(dt("1994-11-05T13:15:30+05:30").to_string(), "1994-11-05T07:45:30Z");
    }

    #[test]
    fn milliseconds_are_always_written_and_read_back() {
        let t = W3cDateTime::from_unix_millis(1_764_000_000_120).unwrap();
        assert_eq!(t.to_string(), "2025-11-24T16:00:00.120Z");
        assert_eq!(W3cDateTime::from_unix_millis(1_764_000_000_000).unwrap().to_string(), "2025-11-24T16:00:00.000Z");
        assert_eq!(dt(&t.to_string()), t);
        assert_eq!(t.unix_millis(), 1_764_000_000_120);
    }

    #[test]
    fn every_granularity() {
        assert_eq!(dt("1997").to_string(), "1997-01-01T00:00:00Z");
        assert_eq!(dt("1997-07").to_string(), "1997-07-01T00:00:00Z");
        assert_eq!(dt("1997-07-16").to_string(), "1997-07-16T00:00:00Z");
        assert_eq!(dt("1997-07-16T19:20+01:00").to_string(), "1997-07-16T18:20:00Z");
        assert_eq!(dt("1997-07-16T19:20:30+01:00").to_string(), "1997-07-16T18:20:30Z");
        assert_eq!(dt("1997-07-16T19:20:30.45+01:00").to_string(), "1997-07-16T18:20:30.45Z");
        assert_eq!(dt("1997").precision(), Precision::Year);
        assert_eq!(dt("1997-07-16T19:20Z").precision(), Precision::Minute);
    }

    #[test]
    fn offsets_cross_day_and_year_boundaries() {
        assert_eq!(dt("2013-12-31T23:30:00-01:00").to_string(), "2014-01-01T00:30:00Z");
        assert_eq!(dt("2013-01-01T00:30:00+01:00").to_string(), "2012-12-31T23:30:00Z");
    }

    #[test]
    fn fraction_is_kept() {
        assert_eq!(dt("2013-01-03T09:00:00.123456789Z").to_string(), "2013-01-03T09:00:00.123456789Z");
        assert_eq!(dt("2013-01-03T09:00:00.5Z").to_string(), "2013-01-03T09:00:00.5Z");
        assert!(dt("2013-01-03T09:00:00.5Z") > dt("2013-01-03T09:00:00Z"));
    }

    #[test]
    fn time_without_zone_is_a_clear_error() {
        let err = "2013-01-03T09:00:00".parse::<W3cDateTime>().unwrap_err();
        assert!(matches!(err, DateTimeError::MissingZone(_)));
        assert!(err.to_string().contains("no time zone"), "{err}");
    }

    #[test]
    fn malformed_values_are_rejected() {
        for bad in [
            "",
            "13",
            "2013-1-03",
            "2013-01-03T9:00Z",
            "2013-01-03 09:00:00Z",
            "2013-13-01",
            "2013-02-30",
            "2013-01-03T24:00:00Z",
            "2013-01-03T09:00:00.Z",
            "2013-01-03T09:00:00+5:00",
            "2013-01-03T09:00:00Zjunk",
            "2013-01-03T",
            "yesterday",
            "2013-01-03T09:00:00+24:00",
        ] {
            assert!(bad.parse::<W3cDateTime>().is_err(), "{bad:?} accepted");
        }
    }
}
