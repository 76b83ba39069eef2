//! The simulator's clock: virtual (reproducible) or real (tokio time), in whole milliseconds.
//!
//! Change Lists must be in forward chronological order, and a Destination that resumes "after
//! datetime T" must not miss a change stamped T. So every instant the clock hands out is
//! strictly later than the one before, even when two events fall in the same millisecond.

use super::config::ClockMode;
use crate::model::W3cDateTime;

/// 2025-01-01T00:00:00Z, the virtual clock's default start.
const VIRTUAL_EPOCH_MS: i64 = 1_735_689_600_000;

#[derive(Debug)]
enum Source {
    Virtual { now_ms: i64 },
    Real { start_ms: i64, origin: tokio::time::Instant },
}

/// A monotonic millisecond clock. See the module docs.
#[derive(Debug)]
pub(crate) struct Clock {
    source: Source,
    last_ms: i64,
}

impl Clock {
    pub(crate) fn new(mode: ClockMode, start: Option<W3cDateTime>) -> Self {
        let start_ms = start.map(|t| (t.unix_nanos() / 1_000_000) as i64);
        let source = match mode {
            ClockMode::Virtual => Source::Virtual { now_ms: start_ms.unwrap_or(VIRTUAL_EPOCH_MS) },
            ClockMode::Real => {
                // To the millisecond: `W3cDateTime::now` is whole seconds, which would put every
                // instant up to a second behind the real time the Destination measures against.
                let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
                let wall = since_epoch.map_or(0, |d| d.as_millis() as i64);
                Source::Real { start_ms: start_ms.unwrap_or(wall), origin: tokio::time::Instant::now() }
            }
        };
        let mut clock = Clock { source, last_ms: i64::MIN };
        clock.last_ms = clock.now_ms();
        clock
    }

    /// The current reading (may be earlier than the last instant handed out).
    pub(crate) fn now_ms(&self) -> i64 {
        match &self.source {
            Source::Virtual { now_ms } => *now_ms,
            Source::Real { start_ms, origin } => start_ms + origin.elapsed().as_millis() as i64,
        }
    }

    /// True for the virtual clock.
    pub(crate) fn is_virtual(&self) -> bool {
        matches!(self.source, Source::Virtual { .. })
    }

    /// Moves virtual time forward; the real clock ignores it.
    pub(crate) fn advance(&mut self, ms: i64) {
        if let Source::Virtual { now_ms } = &mut self.source {
            *now_ms += ms.max(0);
        }
    }

    /// An instant strictly later than every instant handed out or observed before.
    pub(crate) fn issue(&mut self) -> i64 {
        let t = self.now_ms().max(self.last_ms + 1);
        self.last_ms = t;
        t
    }

    /// Records that `t` was used (e.g. as a list's `until`), so later instants come after it.
    pub(crate) fn observe(&mut self, t: i64) {
        self.last_ms = self.last_ms.max(t);
    }
}

/// Milliseconds since the epoch as a W3C datetime (fraction written only when non-zero).
pub(crate) fn to_datetime(ms: i64) -> W3cDateTime {
    let secs = ms.div_euclid(1000);
    let nanos = (ms.rem_euclid(1000) * 1_000_000) as u32;
    // The simulator's instants are all within years 0000-9999; fall back to the epoch anyway.
    W3cDateTime::from_unix(secs, nanos).unwrap_or_else(|_| W3cDateTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_instants_strictly_increase_even_without_time_passing() {
        let mut c = Clock::new(ClockMode::Virtual, None);
        let a = c.issue();
        let b = c.issue();
        assert!(b > a);
        c.observe(b + 10);
        assert_eq!(c.issue(), b + 11);
    }

    #[tokio::test]
    async fn the_real_clock_starts_at_the_current_millisecond() {
        let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
        let c = Clock::new(ClockMode::Real, None);
        let after = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
        let t = c.now_ms();
        assert!(before <= t && t <= after + 1, "{before} <= {t} <= {after}");
    }

    #[test]
    fn virtual_time_moves_only_when_advanced() {
        let mut c = Clock::new(ClockMode::Virtual, None);
        let t0 = c.now_ms();
        c.advance(1500);
        assert_eq!(c.now_ms(), t0 + 1500);
        assert_eq!(to_datetime(t0 + 1500).to_string(), "2025-01-01T00:00:01.5Z");
    }
}
