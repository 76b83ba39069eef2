//! Pages made ahead of their request.
//!
//! A harvester pages through a list one request at a time: it reads a page to its end, takes
//! the resumption token from it, and only then asks for the next. Made on request, each page
//! would wait for the client to finish the previous one, and the client for the store. So once
//! a page with a token is sent, the page that token names is made at once, while the client
//! is still reading, and kept for the request that comes for it: the store's work overlaps the
//! client's instead of following it.
//!
//! What a page holds is fixed by its token (the list's log ends and the position where it
//! starts), so a page made a moment early lists the same records at the same versions as one
//! made on request. The envelope (`responseDate`, the request) is written when it is sent; its
//! own resumption token is made with it, so that when a request is already waiting for it (the
//! client is ahead of the store), the page after it is made next, without a pause. A request
//! that arrives while its page is being made waits for it, a bounded time. Pages are kept for
//! [`KEEP`] at most, and [`PAGES`] of them at once: a client that never comes back, or one that
//! asks for pages out of order, costs at most the making of pages nobody takes, never memory
//! that grows.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::token::Token;

/// Pages kept at once (made, or being made).
const PAGES: usize = 8;
/// How long a made page waits for its request.
const KEEP: Duration = Duration::from_secs(30);
/// How long a request waits for a page being made before it makes the page itself.
const WAIT: Duration = Duration::from_secs(10);

/// The page a response's resumption token names, to be made ahead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextPage {
    /// ListRecords (true) or ListIdentifiers: a token is valid for one verb.
    pub(super) records: bool,
    /// The token as the client will send it.
    pub(super) token: String,
}

/// A response whose page was made ahead: `parts`, one after the other (the envelope's start,
/// the records, the token and the envelope's end), then the page after it to make.
#[derive(Debug)]
pub struct MadeResponse {
    /// The response's bytes, in three parts sent one after the other.
    pub parts: [Vec<u8>; 3],
    /// The page this one's resumption token names: make it next.
    pub next: Option<NextPage>,
}

/// A page made ahead: its records as XML, and what its resumption token needs.
#[derive(Debug)]
pub(super) struct Made {
    /// The list as the page's token decoded.
    pub(super) token: Token,
    /// The `<record>`s (or `<header>`s), one after another.
    pub(super) body: Vec<u8>,
    /// Records in `body`.
    pub(super) count: u64,
    /// The token of the page after this one, if the list goes on: made with the page, so that
    /// the page after it can be made before this one is sent.
    pub(super) next: Option<NextToken>,
}

/// A resumption token as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NextToken {
    pub(super) text: String,
    /// Its `expirationDate` (Unix seconds).
    pub(super) expires: i64,
}

#[derive(Debug)]
enum Slot {
    /// Being made; `true` once a request waits for it.
    Making(bool),
    Made(Box<Made>, Instant),
}

/// The pages made ahead.
#[derive(Debug, Default)]
pub(super) struct Ahead {
    slots: Mutex<Vec<(NextPage, Slot)>>,
    changed: Condvar,
}

impl Ahead {
    fn lock(&self) -> MutexGuard<'_, Vec<(NextPage, Slot)>> {
        // A panic while holding the lock leaves only pages behind; they are still whole.
        self.slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes the page `page` if it was made ahead; while it is being made, waits for it
    /// (`wait`) or leaves it.
    pub(super) fn take(&self, page: &NextPage, wait: bool) -> Option<Made> {
        let deadline = Instant::now() + WAIT;
        let mut slots = self.lock();
        loop {
            let i = slots.iter().position(|(p, _)| p == page)?;
            if let Slot::Made(..) = slots[i].1 {
                let (_, Slot::Made(made, at)) = slots.swap_remove(i) else { unreachable!("matched above") };
                return (at.elapsed() < KEEP).then_some(*made);
            }
            if !wait {
                return None;
            }
            slots[i].1 = Slot::Making(true);
            let left = deadline.checked_duration_since(Instant::now())?;
            slots = self.changed.wait_timeout(slots, left).unwrap_or_else(std::sync::PoisonError::into_inner).0;
        }
    }

    /// Whether `page` should be made now: `false` when it is already kept or being made, or
    /// when [`PAGES`] are being made; otherwise it is marked as being made, in place of the
    /// oldest kept page when there is no room.
    pub(super) fn claim(&self, page: &NextPage) -> bool {
        let mut slots = self.lock();
        slots.retain(|(_, s)| !matches!(s, Slot::Made(_, at) if at.elapsed() >= KEEP));
        if slots.iter().any(|(p, _)| p == page) {
            return false;
        }
        if slots.len() >= PAGES {
            let oldest = slots
                .iter()
                .enumerate()
                .filter_map(|(i, (_, s))| match s {
                    Slot::Made(_, at) => Some((i, *at)),
                    Slot::Making(_) => None,
                })
                .min_by_key(|(_, at)| *at);
            let Some((i, _)) = oldest else { return false };
            slots.swap_remove(i);
        }
        slots.push((page.clone(), Slot::Making(false)));
        true
    }

    /// Ends the making of `page`: keeps it when it was made, forgets it when not. Whether a
    /// request was waiting for it.
    pub(super) fn fill(&self, page: &NextPage, made: Option<Made>) -> bool {
        let mut slots = self.lock();
        let mut waited = false;
        if let Some(i) = slots.iter().position(|(p, s)| p == page && matches!(s, Slot::Making(_))) {
            waited = matches!(slots[i].1, Slot::Making(true));
            match made {
                Some(m) => slots[i].1 = Slot::Made(Box::new(m), Instant::now()),
                None => {
                    slots.swap_remove(i);
                }
            }
        }
        drop(slots);
        self.changed.notify_all();
        waited
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(t: &str) -> NextPage {
        NextPage { records: true, token: t.into() }
    }

    fn made(count: u64) -> Made {
        let token = Token {
            records: true,
            prefix: "oai_dc".into(),
            set: None,
            from_ms: None,
            until_ms: None,
            logs: 0,
            ends: vec![],
            log: 0,
            next: 0,
            key: None,
            cursor: 0,
            size: None,
            expires: 0,
        };
        Made { token, body: Vec::new(), count, next: None }
    }

    #[test]
    fn a_page_is_made_once_and_taken_once() {
        let a = Ahead::default();
        assert!(a.claim(&page("t1")));
        assert!(!a.claim(&page("t1")), "already being made");
        a.fill(&page("t1"), Some(made(3)));
        assert!(!a.claim(&page("t1")), "already made");
        assert!(a.take(&NextPage { records: false, token: "t1".into() }, true).is_none(), "another verb");
        assert_eq!(a.take(&page("t1"), true).map(|m| m.count), Some(3));
        assert!(a.take(&page("t1"), true).is_none(), "taken");
        assert!(a.claim(&page("t2")));
        a.fill(&page("t2"), None);
        assert!(a.take(&page("t2"), true).is_none(), "a page that could not be made is not kept");
    }

    #[test]
    fn a_request_waits_for_its_page_being_made() {
        let a = std::sync::Arc::new(Ahead::default());
        assert!(a.claim(&page("t")));
        let maker = {
            let a = a.clone();
            std::thread::spawn(move || {
                // Bounded: the request below starts waiting at once.
                for _ in 0..5000 {
                    if matches!(a.lock().first(), Some((_, Slot::Making(true)))) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                a.fill(&page("t"), Some(made(7)))
            })
        };
        assert!(a.take(&page("t"), false).is_none(), "not made yet, and not waited for");
        assert_eq!(a.take(&page("t"), true).map(|m| m.count), Some(7));
        assert!(maker.join().unwrap(), "the maker learns that a request was waiting");
        assert!(a.claim(&page("u")));
        assert!(!a.fill(&page("u"), Some(made(1))), "no request was waiting");
    }

    #[test]
    fn pages_are_bounded_and_the_oldest_made_goes_first() {
        let a = Ahead::default();
        for i in 0..PAGES {
            assert!(a.claim(&page(&i.to_string())));
        }
        assert!(!a.claim(&page("x")), "all being made: nothing more is started");
        a.fill(&page("0"), Some(made(0)));
        a.fill(&page("1"), Some(made(1)));
        assert!(a.claim(&page("x")), "room made by dropping a made page");
        assert!(a.take(&page("0"), true).is_none(), "the oldest made page went");
        assert!(a.take(&page("1"), true).is_some());
        assert_eq!(a.lock().len(), PAGES - 1);
    }
}
