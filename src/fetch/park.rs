//! Parked origins: a `429` or `503` with `Retry-After` parks its origin until then, and no
//! request of any kind — robots.txt included — goes there before that time.
//!
//! Parks outlive the hosts map (an evicted host must not forget one) and the process: the
//! fetcher knows nothing of the store, so the caller hands it the parks it kept
//! ([`Fetcher::restore_parks`](super::Fetcher::restore_parks)) and keeps the ones it reports
//! ([`Fetcher::parks`](super::Fetcher::parks), with
//! [`Fetcher::watch_parks`](super::Fetcher::watch_parks) ringing at each new one).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::SystemTime;

use tokio::sync::watch;

/// An origin parked until a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Park {
    /// `scheme://host[:port]`.
    pub origin: String,
    /// No request goes to the origin before this time.
    pub until: SystemTime,
}

/// Every origin parked now.
pub(crate) struct Parks {
    map: Mutex<HashMap<String, SystemTime>>,
    changed: watch::Sender<u64>,
}

impl Parks {
    pub(crate) fn new() -> Parks {
        Parks { map: Mutex::new(HashMap::new()), changed: watch::Sender::new(0) }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, SystemTime>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Parks `origin` until `until`, unless it is parked until later already; true when this
    /// moved the park (and the watchers were told).
    pub(crate) fn park(&self, origin: &str, until: SystemTime) -> bool {
        let mut map = self.map();
        let now = SystemTime::now();
        if until <= now || map.get(origin).is_some_and(|t| *t >= until) {
            return false;
        }
        map.retain(|_, t| *t > now);
        map.insert(origin.to_owned(), until);
        drop(map);
        self.changed.send_modify(|n| *n += 1);
        true
    }

    /// Until when `origin` is parked, if it is now.
    pub(crate) fn until(&self, origin: &str) -> Option<SystemTime> {
        self.map().get(origin).copied().filter(|t| *t > SystemTime::now())
    }

    /// The parks in force, by origin.
    pub(crate) fn all(&self) -> Vec<Park> {
        let now = SystemTime::now();
        let mut out: Vec<Park> = self
            .map()
            .iter()
            .filter(|(_, t)| **t > now)
            .map(|(origin, until)| Park { origin: origin.clone(), until: *until })
            .collect();
        out.sort_by(|a, b| a.origin.cmp(&b.origin));
        out
    }

    pub(crate) fn watch(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

/// `until` as `YYYY-MM-DDTHH:MM:SSZ` (UTC), for messages.
pub(crate) fn utc(until: SystemTime) -> String {
    let t = time::OffsetDateTime::from(until);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_park_only_moves_later_and_expires() {
        let parks = Parks::new();
        let rx = parks.watch();
        let later = SystemTime::now() + Duration::from_secs(3600);
        assert!(parks.park("http://a", later));
        assert!(!parks.park("http://a", later - Duration::from_secs(60)), "an earlier time does not shorten it");
        assert_eq!(parks.until("http://a"), Some(later));
        assert!(rx.has_changed().unwrap());
        assert!(!parks.park("http://b", SystemTime::now() - Duration::from_secs(1)), "a past time parks nothing");
        assert_eq!(parks.all(), vec![Park { origin: "http://a".into(), until: later }]);
        assert_eq!(utc(SystemTime::UNIX_EPOCH + Duration::from_secs(86_400 + 3661)), "1970-01-02T01:01:01Z");
    }
}
