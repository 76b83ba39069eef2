//! Where incremental synchronization resumes, and which changes it applies (spec §12.1,
//! Appendix A): pure functions over the Change Lists as read and the stored position, so the
//! rules are testable without a network.
//!
//! The position is `(Change List URI, entries already processed in it)` plus
//! `changes_through`, the Source datetime up to which every change is incorporated. Inside
//! the list last processed the count decides (Example 19 has changes without `datetime`, so
//! only the order and the URI identify them); in lists Tributary has not read yet, or when the
//! remembered list is gone from the index, a change is new when its `datetime` is after
//! `changes_through` (a change without one counts as new). Re-reading a list therefore never
//! applies a change twice, and the same URI listed several times is applied once, as its last
//! change: only the current bitstream can be fetched, so earlier states are not observable.

use std::collections::HashMap;

use url::Url;

use crate::model::{Change, Entry, W3cDateTime};

/// One Change List named by the index (or the Change List itself when there is no index).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListRef {
    pub(crate) url: Url,
    pub(crate) from: Option<W3cDateTime>,
    pub(crate) until: Option<W3cDateTime>,
}

/// Where the stored position says processing resumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resume {
    /// Index into the (ordered) lists of the first list to read.
    pub(crate) list: usize,
    /// Entries of that list already processed (only when it is the remembered list).
    pub(crate) skip: u64,
}

/// Why the stored position cannot be continued: the caller re-baselines and logs this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Gap(pub(crate) String);

/// The stored position, as the planner needs it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Position {
    pub(crate) list: Option<String>,
    pub(crate) processed: u64,
    pub(crate) through: Option<W3cDateTime>,
}

/// Orders the lists by `from` (stable: lists without one keep their place relative to each
/// other) and decides where to resume, or that there is a gap.
pub(crate) fn plan(lists: &mut [ListRef], earliest: Option<W3cDateTime>, pos: &Position) -> Result<Resume, Gap> {
    lists.sort_by(|a, b| match (a.from, b.from) {
        (Some(x), Some(y)) => x.cmp(&y),
        _ => std::cmp::Ordering::Equal,
    });
    let earliest = earliest.or_else(|| lists.iter().filter_map(|l| l.from).min());
    if let (Some(e), Some(t)) = (earliest, pos.through)
        && e > t
    {
        return Err(Gap(format!(
            "the Source reports changes only from {e}, but Tributary has processed them only up to {t}"
        )));
    }
    if let Some(i) = pos.list.as_deref().and_then(|u| lists.iter().position(|l| l.url.as_str() == u)) {
        return Ok(Resume { list: i, skip: pos.processed });
    }
    match pos.through {
        // The first list not entirely before the time processed (one ending in that second
        // may hold changes of it not yet seen; see `is_new`).
        Some(t) => {
            let i = lists.iter().position(|l| l.until.is_none_or(|u| u >= t)).unwrap_or(lists.len());
            Ok(Resume { list: i, skip: 0 })
        }
        None if pos.list.is_some() => Err(Gap(format!(
            "the Change List last processed ({}) is no longer offered and the Source gives no datetimes to find the place again",
            pos.list.as_deref().unwrap_or_default()
        ))),
        None => Ok(Resume { list: 0, skip: 0 }),
    }
}

/// One change read from a list, with where it was read.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    /// Index of its list in the ordered lists.
    pub(crate) list: usize,
    /// 0-based position in that list.
    pub(crate) pos: u64,
    pub(crate) loc: Url,
    pub(crate) entry: Entry,
}

impl Pending {
    pub(crate) fn change(&self) -> Option<Change> {
        self.entry.md.as_ref().and_then(|m| m.change)
    }

    pub(crate) fn datetime(&self) -> Option<W3cDateTime> {
        self.entry.md.as_ref().and_then(|m| m.datetime)
    }
}

/// Checks a re-read of the remembered list against what was processed of it.
pub(crate) fn check_reread(
    url: &Url,
    entries: usize,
    processed: u64,
    last: Option<W3cDateTime>,
    at: Option<&Entry>,
) -> Result<(), Gap> {
    if (entries as u64) < processed {
        return Err(Gap(format!(
            "{url} now has {entries} changes, fewer than the {processed} already processed: the list was rewritten"
        )));
    }
    let seen = at.and_then(|e| e.md.as_ref()).and_then(|m| m.datetime);
    if let (Some(seen), Some(last)) = (seen, last)
        && seen > last
    {
        return Err(Gap(format!(
            "{url}: change {processed} is dated {seen}, later than the {last} recorded for it: the list was rewritten"
        )));
    }
    Ok(())
}

/// Whether a change read from a list Tributary had not been positioned in is new: dated at
/// or after `through`. The same instant counts: datetimes are often whole seconds, so a change made in the second a snapshot was taken, after it, carries the
/// snapshot's time; applying a change already reflected is harmless (the content is held, so
/// nothing is fetched or logged), missing one is not.
pub(crate) fn is_new(datetime: Option<W3cDateTime>, through: Option<W3cDateTime>) -> bool {
    match (datetime, through) {
        (Some(d), Some(t)) => d >= t,
        _ => true,
    }
}

/// Keeps only the last change of each URI, in the order of those last changes. Returns the
/// indices into `pending`.
pub(crate) fn coalesce(pending: &[Pending]) -> Vec<usize> {
    let mut last: HashMap<&str, usize> = HashMap::with_capacity(pending.len());
    for (i, p) in pending.iter().enumerate() {
        last.insert(p.loc.as_str(), i);
    }
    (0..pending.len()).filter(|i| last.get(pending[*i].loc.as_str()) == Some(i)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Md;

    fn t(s: &str) -> W3cDateTime {
        s.parse().unwrap()
    }

    fn list(n: u32, from: &str, until: Option<&str>) -> ListRef {
        ListRef {
            url: Url::parse(&format!("http://s.example/cl/{n}.xml")).unwrap(),
            from: Some(t(from)),
            until: until.map(t),
        }
    }

    fn lists() -> Vec<ListRef> {
        vec![list(2, "2024-01-02T00:00:00Z", None), list(1, "2024-01-01T00:00:00Z", Some("2024-01-02T00:00:00Z"))]
    }

    #[test]
    fn resumes_in_the_remembered_list_by_count() {
        let mut l = lists();
        let pos = Position { list: Some("http://s.example/cl/2.xml".into()), processed: 3, through: None };
        assert_eq!(plan(&mut l, None, &pos), Ok(Resume { list: 1, skip: 3 }));
        assert_eq!(l[0].url.as_str(), "http://s.example/cl/1.xml", "ordered by from");
    }

    #[test]
    fn after_a_baseline_starts_at_the_first_list_not_before_at() {
        let mut l = lists();
        let pos = Position { through: Some(t("2024-01-02T10:00:00Z")), ..Position::default() };
        assert_eq!(plan(&mut l, None, &pos), Ok(Resume { list: 1, skip: 0 }));
        let pos = Position { through: Some(t("2024-01-01T10:00:00Z")), ..Position::default() };
        assert_eq!(plan(&mut l, None, &pos), Ok(Resume { list: 0, skip: 0 }));
    }

    #[test]
    fn a_source_that_forgot_changes_is_a_gap() {
        let mut l = lists();
        let pos = Position { through: Some(t("2023-12-31T00:00:00Z")), ..Position::default() };
        assert!(plan(&mut l, None, &pos).is_err());
        let pos = Position { list: Some("http://s.example/cl/0.xml".into()), processed: 1, through: None };
        assert!(plan(&mut lists(), None, &pos).is_err(), "gone, and nothing to find the place with");
    }

    #[test]
    fn a_shorter_reread_is_a_contradiction() {
        let u = Url::parse("http://s.example/cl/2.xml").unwrap();
        assert!(check_reread(&u, 2, 3, None, None).is_err());
        assert!(check_reread(&u, 3, 3, None, None).is_ok());
    }

    fn pending(loc: &str, change: Change) -> Pending {
        let mut entry = Entry::new(loc);
        entry.md = Some(Md { change: Some(change), ..Md::default() });
        Pending { list: 0, pos: 0, loc: Url::parse(loc).unwrap(), entry }
    }

    #[test]
    fn example_19_applies_each_uri_once_as_its_last_change() {
        let p = vec![
            pending("http://e.com/res4", Change::Created),
            pending("http://e.com/res1", Change::Updated),
            pending("http://e.com/res2", Change::Deleted),
            pending("http://e.com/res1", Change::Updated),
        ];
        assert_eq!(coalesce(&p), vec![0, 2, 3], "res1's first update is superseded by its second");
    }

    #[test]
    fn new_means_at_or_after_the_time_processed_or_undated() {
        assert!(is_new(None, Some(t("2024-01-01T00:00:00Z"))));
        assert!(!is_new(Some(t("2023-12-31T23:59:59Z")), Some(t("2024-01-01T00:00:00Z"))));
        assert!(is_new(Some(t("2024-01-01T00:00:00Z")), Some(t("2024-01-01T00:00:00Z"))), "the same second");
        assert!(is_new(Some(t("2024-01-01T00:00:01Z")), Some(t("2024-01-01T00:00:00Z"))));
    }
}
