//! Parsers for the value syntaxes of `sources.toml` that TOML has no type for: request rates,
//! byte sizes and durations. Each returns a message meant for the operator.

use std::fmt;
use std::time::Duration;

/// A per-host request rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    /// No limit (local mirrors, benchmarks).
    Unlimited,
    /// At most one request per this interval (a burst of one: requests are spaced, not
    /// bunched, which is what a server's operator sees as polite).
    Every(Duration),
}

impl Rate {
    /// The interval between requests, `None` when unlimited.
    pub fn interval(self) -> Option<Duration> {
        match self {
            Rate::Unlimited => None,
            Rate::Every(d) => Some(d),
        }
    }

    /// The stricter of two rates.
    pub fn stricter(self, other: Rate) -> Rate {
        match (self, other) {
            (Rate::Unlimited, r) | (r, Rate::Unlimited) => r,
            (Rate::Every(a), Rate::Every(b)) => Rate::Every(a.max(b)),
        }
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rate::Unlimited => f.write_str("unlimited"),
            Rate::Every(d) => write!(f, "{:.3}/s", 1.0 / d.as_secs_f64()),
        }
    }
}

/// Parses `"N/s"`, `"N/min"` (N a positive number, fractions allowed) or `"unlimited"`.
///
/// # Errors
/// A message naming the accepted forms.
pub fn parse_rate(s: &str) -> Result<Rate, String> {
    let expected = || format!("invalid rate {s:?}: expected \"N/s\", \"N/min\" or \"unlimited\" (N > 0)");
    let t = s.trim();
    if t.eq_ignore_ascii_case("unlimited") {
        return Ok(Rate::Unlimited);
    }
    let (n, unit) = t.split_once('/').ok_or_else(expected)?;
    let unit_secs = match unit.trim() {
        "s" | "sec" => 1.0,
        "min" | "m" => 60.0,
        _ => return Err(expected()),
    };
    let n: f64 = n.trim().parse().map_err(|_| expected())?;
    if !(n.is_finite() && n > 0.0) {
        return Err(expected());
    }
    let interval = Duration::try_from_secs_f64(unit_secs / n).map_err(|_| expected())?;
    if interval.is_zero() {
        return Err(format!("invalid rate {s:?}: too fast; use \"unlimited\" to lift the limit"));
    }
    Ok(Rate::Every(interval))
}

/// Parses a byte size: a plain number of bytes, or a number with a unit (`B`, `KB`, `MB`,
/// `GB`, `KiB`, `MiB`, `GiB`), e.g. `"50 MB"`.
///
/// # Errors
/// A message naming the accepted forms.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '_' || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => {
            return Err(format!("invalid size {s:?}: expected bytes, or a number with B, KB, MB, GB, KiB, MiB or GiB"));
        }
    };
    let n: f64 = num.replace('_', "").parse().map_err(|_| format!("invalid size {s:?}: no number"))?;
    let bytes = n * mult as f64;
    if !(bytes.is_finite() && bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(format!("invalid size {s:?}: must be at least one byte"));
    }
    Ok(bytes as u64)
}

/// Parses a duration such as `"10m"`, `"30s"`, `"1h 30m"` (humantime syntax).
///
/// # Errors
/// A message with an example.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("invalid duration {s:?}: {e} (expected e.g. \"30s\", \"10m\", \"1h 30m\")"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("5/s"), Ok(Rate::Every(Duration::from_millis(200))));
        assert_eq!(parse_rate("30/min"), Ok(Rate::Every(Duration::from_secs(2))));
        assert_eq!(parse_rate("0.5/s"), Ok(Rate::Every(Duration::from_secs(2))));
        assert_eq!(parse_rate("unlimited"), Ok(Rate::Unlimited));
        for bad in ["5", "5/h", "0/s", "-1/s", "x/s", "inf/s", ""] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("50 MB"), Ok(50_000_000));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("1_024"), Ok(1024));
        assert!(parse_size("0").is_err());
        assert!(parse_size("5 XB").is_err());
    }
}
