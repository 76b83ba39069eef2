//! robots.txt per RFC 9309, cached per host. The fetcher consults it before every request,
//! redirect hops included; the rules are parsed by `texting_robots`.
//!
//! Outcomes follow the RFC: a 2xx body is parsed (only its first 512 KiB, as the RFC allows);
//! a 4xx means there are no rules (allow all); a 5xx, a network failure or a refused redirect
//! means the host is unreachable and everything is disallowed until a shorter retry time. A
//! parsed file is kept for a day. `Crawl-delay` lowers the host's rate (capped by the source).

use std::time::{Duration, Instant};

use texting_robots::Robot;

use super::error::FetchError;

/// How long a fetched robots.txt is trusted (RFC 9309 asks for no more than 24 h).
pub(crate) const ROBOTS_TTL: Duration = Duration::from_secs(24 * 3600);
/// How long an unreachable robots.txt blocks the host before it is tried again.
pub(crate) const ROBOTS_RETRY: Duration = Duration::from_secs(300);
/// How much of a robots.txt is parsed.
pub(crate) const ROBOTS_MAX_BYTES: usize = 512 * 1024;

/// What robots.txt says about a host, for the dashboard.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RobotsStatus {
    /// No rules (robots.txt answered 4xx).
    AllowAll,
    /// Rules were fetched and apply.
    Rules {
        /// `Crawl-delay` for our agent, before capping.
        crawl_delay: Option<Duration>,
    },
    /// robots.txt was unreachable; everything is disallowed until it is retried.
    Unavailable {
        /// Why.
        reason: String,
    },
}

enum Rules {
    AllowAll,
    Parsed(Box<Robot>),
    Unavailable(String),
}

/// A cached robots.txt.
pub(crate) struct RobotsEntry {
    rules: Rules,
    expires: Instant,
    pub(crate) sitemaps: Vec<String>,
}

impl RobotsEntry {
    pub(crate) fn allow_all() -> Self {
        RobotsEntry { rules: Rules::AllowAll, expires: Instant::now() + ROBOTS_TTL, sitemaps: Vec::new() }
    }

    pub(crate) fn unavailable(reason: String) -> Self {
        RobotsEntry { rules: Rules::Unavailable(reason), expires: Instant::now() + ROBOTS_RETRY, sitemaps: Vec::new() }
    }

    /// Parses a robots.txt body for `agent` (the product token of our User-Agent).
    pub(crate) fn parse(agent: &str, body: &[u8]) -> Self {
        let body = &body[..body.len().min(ROBOTS_MAX_BYTES)];
        match Robot::new(agent, body) {
            Ok(robot) => {
                let sitemaps = robot.sitemaps.clone();
                RobotsEntry { rules: Rules::Parsed(Box::new(robot)), expires: Instant::now() + ROBOTS_TTL, sitemaps }
            }
            // The RFC asks parsers to use what they can; a file that cannot be parsed at all
            // carries no usable rules.
            Err(_) => RobotsEntry::allow_all(),
        }
    }

    pub(crate) fn is_fresh(&self) -> bool {
        Instant::now() < self.expires
    }

    /// `Crawl-delay` for our agent, capped.
    pub(crate) fn crawl_delay(&self, cap: Duration) -> Option<Duration> {
        match &self.rules {
            Rules::Parsed(r) => r.delay.and_then(|d| Duration::try_from_secs_f32(d).ok()).map(|d| d.min(cap)),
            _ => None,
        }
    }

    /// Whether `url` may be fetched.
    ///
    /// # Errors
    /// [`FetchError::RobotsDisallowed`] or [`FetchError::RobotsUnavailable`].
    pub(crate) fn check(&self, url: &url::Url) -> Result<(), FetchError> {
        match &self.rules {
            Rules::AllowAll => Ok(()),
            Rules::Parsed(r) if r.allowed(url.as_str()) => Ok(()),
            Rules::Parsed(_) => Err(FetchError::RobotsDisallowed { url: url.to_string() }),
            Rules::Unavailable(reason) => {
                Err(FetchError::RobotsUnavailable { url: url.to_string(), detail: reason.clone() })
            }
        }
    }

    pub(crate) fn status(&self) -> RobotsStatus {
        match &self.rules {
            Rules::AllowAll => RobotsStatus::AllowAll,
            Rules::Parsed(r) => {
                RobotsStatus::Rules { crawl_delay: r.delay.and_then(|d| Duration::try_from_secs_f32(d).ok()) }
            }
            Rules::Unavailable(reason) => RobotsStatus::Unavailable { reason: reason.clone() },
        }
    }
}

/// The robots.txt product token of a User-Agent: `Tributary/0.1 (+mailto:…)` → `Tributary`.
pub(crate) fn agent_token(user_agent: &str) -> String {
    user_agent.split(['/', ' ', '(']).next().unwrap_or("").trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_and_delay() {
        let txt = b"User-agent: *\nDisallow: /private\nCrawl-delay: 120\nSitemap: http://h/sm.xml\n";
        let e = RobotsEntry::parse("Tributary", txt);
        let u = |s: &str| url::Url::parse(s).unwrap();
        assert!(e.check(&u("http://h/public")).is_ok());
        assert!(matches!(e.check(&u("http://h/private/x")), Err(FetchError::RobotsDisallowed { .. })));
        assert_eq!(e.crawl_delay(Duration::from_secs(60)), Some(Duration::from_secs(60)));
        assert_eq!(e.sitemaps, ["http://h/sm.xml"]);
        assert_eq!(agent_token("Tributary/0.1 (+mailto:a@b)"), "Tributary");
    }
}
