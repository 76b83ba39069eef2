//! What one poll of a source does, decided without I/O: the steps (baseline, catch-up from a
//! Change Dump, the Change List, retries) from what is known of the Source, and how the rest
//! of the poll changes when a step reports back. `synchronize` only carries the steps out.
//!
//! The rules, from the standard's Destination side (spec §5.2, §12, §13) and what a Source
//! may fail to deliver:
//! - A Source with a Change List is baselined once (from its Resource Dump when it offers one
//!   and the source uses dumps, else from its Resource List, read in full) and then followed:
//!   its Change Dump first when it has one (a bulk catch-up), then its Change List for the
//!   tail not packaged yet. The resources that failed before are retried first, because the
//!   Change List will not name them again.
//! - When the Change List no longer reaches back to where Tributary stopped, the position is
//!   forgotten and the source is baselined again, at most once per poll.
//! - A Source without a Change List is diffed against its Resource List on every poll (a
//!   conditional GET may answer that nothing changed), or followed through its Change Dump.
//! - A dump that cannot be used is never fatal: the list is the fallback.
//!
//! Within a baseline, what to do with each listed entry ([`entry`]) and, once the walk is
//! over, what to delete ([`after_walk`]) are decided here too, as is which entries of a Change
//! Dump package a poll applies ([`package_changes`]): a resource is fetched only when
//! what is held is not its listed content, and nothing is deleted unless the whole list was
//! read.

use std::collections::{HashMap, HashSet, VecDeque};

use url::Url;

use super::changes::is_new;
use crate::harvest::listed::Listed;
use crate::model::W3cDateTime;
use crate::store::{KnownCapabilities, Record};

/// Rebaselines one poll may start; a Source whose fresh baseline cannot be continued either
/// waits for the next poll instead of looping.
const MAX_REBASELINES: usize = 1;

/// One step of a poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Retry the resources recorded as failing.
    RetryFailures,
    /// Baseline from the Resource Dump; the [`Step::Baseline`] that follows is the fallback.
    BaselineFromDump(Url),
    /// Walk the Resource List, fetch what is not held, delete what a complete list no longer
    /// names. `initial`: the list must be read in full (no conditional GET), since it starts
    /// the position from which changes are followed.
    Baseline {
        /// A first (or repeated) baseline rather than the diff of a list-only Source.
        initial: bool,
    },
    /// Forget the position in the Source's changes, so the next baseline starts it afresh.
    ForgetChanges,
    /// Catch up from the Change Dump.
    FollowChangeDump(Url),
    /// Follow the Change List (or its index).
    FollowChangeList(Url),
}

/// How a step ended, as far as the rest of the poll cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The step ran to its end (for a baseline: the whole list was read and applied).
    Done,
    /// The step ran but did not finish (a baseline cut short by an error or shutdown).
    Incomplete,
    /// A dump could not be used; the plan falls back to the list.
    Unusable,
    /// The Change List does not connect to the position: re-baseline.
    Rebaseline,
}

/// The steps left in a poll. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    steps: VecDeque<Step>,
    resource_dump: Option<Url>,
    change_dump: Option<Url>,
    change_list: Option<Url>,
    rebaselines: usize,
}

impl Plan {
    /// The poll of a source whose capabilities are `caps`; `baselined` when a baseline was
    /// completed before, `dumps` when the source may use dumps.
    pub(crate) fn new(caps: &KnownCapabilities, baselined: bool, dumps: bool) -> Plan {
        let url = |u: &Option<String>| u.as_deref().and_then(|u| Url::parse(u).ok());
        let mut plan = Plan {
            steps: VecDeque::new(),
            resource_dump: url(&caps.resource_dump).filter(|_| dumps),
            change_dump: url(&caps.change_dump).filter(|_| dumps),
            change_list: url(&caps.change_list),
            rebaselines: 0,
        };
        match (plan.change_list.is_some(), baselined) {
            (_, false) => plan.push_baseline(),
            (false, true) => match plan.change_dump.clone() {
                Some(dump) => plan.steps.push_back(Step::FollowChangeDump(dump)),
                None => plan.steps.push_back(Step::Baseline { initial: false }),
            },
            (true, true) => plan.steps.push_back(Step::RetryFailures),
        }
        plan.push_changes();
        plan
    }

    /// The next step, if any.
    pub(crate) fn next_step(&mut self) -> Option<Step> {
        self.steps.pop_front()
    }

    /// The steps still to come, for the log and the tests.
    pub(crate) fn remaining(&self) -> impl Iterator<Item = &Step> {
        self.steps.iter()
    }

    /// Adjusts the rest of the poll to how `step` ended.
    pub(crate) fn after(&mut self, step: &Step, outcome: &Outcome) {
        match (step, outcome) {
            // The dump did the baseline: its fallback is not needed.
            (Step::BaselineFromDump(_), Outcome::Done) => {
                if let Some(Step::Baseline { .. }) = self.steps.front() {
                    self.steps.pop_front();
                }
            }
            // Changes are followed only from a complete baseline.
            (Step::BaselineFromDump(_) | Step::Baseline { .. }, Outcome::Incomplete) => self.steps.clear(),
            // Without a Change List the diff of the Resource List levels the store instead.
            (Step::FollowChangeDump(_), Outcome::Unusable) if self.change_list.is_none() => {
                self.steps.push_back(Step::ForgetChanges);
                self.steps.push_back(Step::Baseline { initial: false });
            }
            (Step::FollowChangeList(_), Outcome::Rebaseline) => {
                self.steps.clear();
                self.steps.push_back(Step::ForgetChanges);
                // Past the limit the position is still forgotten: the next poll baselines.
                if self.rebaselines < MAX_REBASELINES {
                    self.rebaselines += 1;
                    self.push_baseline();
                    self.push_changes();
                }
            }
            _ => {}
        }
    }

    fn push_baseline(&mut self) {
        if let Some(dump) = self.resource_dump.clone() {
            self.steps.push_back(Step::BaselineFromDump(dump));
        }
        self.steps.push_back(Step::Baseline { initial: true });
    }

    /// A Source with a Change List: its Change Dump first when offered, then the list.
    fn push_changes(&mut self) {
        let Some(list) = self.change_list.clone() else { return };
        if let Some(dump) = self.change_dump.clone() {
            self.steps.push_back(Step::FollowChangeDump(dump));
        }
        self.steps.push_back(Step::FollowChangeList(list));
    }
}

/// What a baseline does with one accepted entry of the Resource List.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryAction {
    /// Listed twice in one walk: the first one counts.
    Repeated,
    /// The content held is the listed one: no fetch. `refresh`: the record is rewritten
    /// because the entry's metadata (links, `via`, type, …) changed; `recovered`: a failure
    /// recorded for it is over (the upstream lists again what is held).
    Held {
        /// Rewrite the record's metadata.
        refresh: bool,
        /// Clear the resource's failure row.
        recovered: bool,
    },
    /// Fetch, verify and store it; `was_failing`: its failure row is cleared once it is stored.
    Fetch {
        /// A failure is recorded for it.
        was_failing: bool,
    },
}

/// What to do with `listed`; `held` is the live record of its URI, `failing` whether a failure
/// is recorded for it, `first` whether this walk meets the URI for the first time.
pub(crate) fn entry(listed: &Listed, held: Option<&Record>, failing: bool, first: bool) -> EntryAction {
    if !first {
        return EntryAction::Repeated;
    }
    match held.filter(|h| listed.content_held(h)) {
        Some(h) => EntryAction::Held { refresh: !listed.metadata_held(h), recovered: failing },
        None => EntryAction::Fetch { was_failing: failing },
    }
}

/// What a baseline applies once its walk is over.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct AfterWalk {
    /// Records to delete: held, but not named by the complete list.
    pub(crate) deletes: Vec<String>,
    /// Failure rows to clear: their resources are no longer listed, so nothing is left to retry.
    pub(crate) unlisted: Vec<String>,
}

/// After a walk that read the whole list (`complete`), what it no longer names is deleted
/// (when the source's `deletes` is on) and its failures are over; after an incomplete walk,
/// nothing: a list cut short must never look like a shorter list.
pub(crate) fn after_walk(
    complete: bool,
    deletes: bool,
    held: &HashMap<String, Record>,
    failing: &HashSet<String>,
    seen: &HashSet<String>,
) -> AfterWalk {
    if !complete {
        return AfterWalk::default();
    }
    let gone = |u: &&String| !seen.contains(*u);
    AfterWalk {
        deletes: if deletes { held.keys().filter(gone).cloned().collect() } else { Vec::new() },
        unlisted: failing.iter().filter(gone).cloned().collect(),
    }
}

/// One entry of a Change Dump package, as [`package_changes`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PackageEntry<'a> {
    /// The change's `datetime`.
    pub(crate) datetime: Option<W3cDateTime>,
    /// The resource's URL; `None` when the entry failed to verify.
    pub(crate) url: Option<&'a str>,
}

/// What a poll applies of one Change Dump package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PackageChanges {
    /// Indexes of the entries to apply, in manifest order: of the new entries, each URI's
    /// last (the manifest is in forward chronological order, so that is the state the package
    /// leaves the resource in).
    pub(crate) apply: Vec<usize>,
    /// The newest change datetime seen, the position's new `changes_through` (before the
    /// package's own `until`).
    pub(crate) newest: Option<W3cDateTime>,
}

/// The entries of a package to apply. New entries are those past `skip` (the position within
/// the package read last, when `remembered`) or, in a package not read before, those changed
/// after `through`. A package is applied whole or not at all: a new entry that failed to
/// verify refuses it (`Err` with that entry's index), since the changes after it could not be
/// applied in order.
pub(crate) fn package_changes(
    entries: &[PackageEntry<'_>],
    skip: u64,
    remembered: bool,
    through: Option<W3cDateTime>,
) -> Result<PackageChanges, usize> {
    let wanted = |i: usize, e: &PackageEntry<'_>| (i as u64) >= skip && (remembered || is_new(e.datetime, through));
    let mut last: HashMap<&str, usize> = HashMap::new();
    let mut newest = through;
    for (i, e) in entries.iter().enumerate().filter(|(i, e)| wanted(*i, e)) {
        let Some(url) = e.url else { return Err(i) };
        last.insert(url, i);
        if let Some(d) = e.datetime {
            newest = Some(newest.map_or(d, |t| t.max(d)));
        }
    }
    let mut apply: Vec<usize> = last.into_values().collect();
    apply.sort_unstable();
    Ok(PackageChanges { apply, newest })
}

#[cfg(test)]
mod tests {
    use super::*;

    const RL: &str = "http://s.example/rl.xml";
    const CL: &str = "http://s.example/cl.xml";
    const RD: &str = "http://s.example/rd.xml";
    const CD: &str = "http://s.example/cd.xml";

    fn caps(rd: bool, cl: bool, cd: bool) -> KnownCapabilities {
        KnownCapabilities {
            resource_list: Some(RL.into()),
            change_list: cl.then(|| CL.into()),
            resource_dump: rd.then(|| RD.into()),
            change_dump: cd.then(|| CD.into()),
            change_notification: None,
        }
    }

    fn u(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    /// Runs `plan`, answering each step from `outcomes` (a step not named ends `Done`).
    fn run(mut plan: Plan, outcomes: &[(Step, Outcome)]) -> Vec<Step> {
        let mut taken = Vec::new();
        // Bounded: a plan never holds more than a dozen steps.
        while let Some(step) = plan.next_step() {
            assert!(taken.len() < 20, "the plan does not end: {taken:?}");
            let outcome = outcomes.iter().find(|(s, _)| *s == step).map_or(Outcome::Done, |(_, o)| o.clone());
            plan.after(&step, &outcome);
            taken.push(step);
        }
        taken
    }

    #[test]
    fn a_list_only_source_is_baselined_then_diffed() {
        assert_eq!(run(Plan::new(&caps(false, false, false), false, true), &[]), [Step::Baseline { initial: true }]);
        assert_eq!(run(Plan::new(&caps(false, false, false), true, true), &[]), [Step::Baseline { initial: false }]);
    }

    #[test]
    fn a_resource_dump_baselines_when_offered_and_enabled() {
        let plan = Plan::new(&caps(true, false, false), false, true);
        assert_eq!(run(plan.clone(), &[]), [Step::BaselineFromDump(u(RD))], "the fallback is dropped");
        let failed = [(Step::BaselineFromDump(u(RD)), Outcome::Unusable)];
        assert_eq!(run(plan, &failed), [Step::BaselineFromDump(u(RD)), Step::Baseline { initial: true }]);
        let off = Plan::new(&caps(true, false, false), false, false);
        assert_eq!(run(off, &[]), [Step::Baseline { initial: true }], "dumps = false");
    }

    #[test]
    fn a_source_with_changes_retries_failures_then_follows_dump_and_list() {
        let plan = Plan::new(&caps(false, true, true), true, true);
        let want = [Step::RetryFailures, Step::FollowChangeDump(u(CD)), Step::FollowChangeList(u(CL))];
        assert_eq!(run(plan.clone(), &[]), want);
        // A Change Dump that cannot be followed leaves the Change List to do it all.
        assert_eq!(run(plan, &[(Step::FollowChangeDump(u(CD)), Outcome::Unusable)]), want);
    }

    #[test]
    fn a_first_poll_baselines_then_follows_the_changes() {
        let plan = Plan::new(&caps(true, true, false), false, true);
        let want = [Step::BaselineFromDump(u(RD)), Step::FollowChangeList(u(CL))];
        assert_eq!(run(plan.clone(), &[]), want);
        let cut = [(Step::BaselineFromDump(u(RD)), Outcome::Incomplete)];
        assert_eq!(run(plan, &cut), [Step::BaselineFromDump(u(RD))], "no changes after an incomplete baseline");
    }

    #[test]
    fn a_gap_rebaselines_once_per_poll() {
        let plan = Plan::new(&caps(false, true, false), true, true);
        let gap = [(Step::FollowChangeList(u(CL)), Outcome::Rebaseline)];
        let once = [
            Step::RetryFailures,
            Step::FollowChangeList(u(CL)),
            Step::ForgetChanges,
            Step::Baseline { initial: true },
            Step::FollowChangeList(u(CL)),
            Step::ForgetChanges,
        ];
        assert_eq!(run(plan, &gap), once, "a second gap is left to the next poll's baseline");
    }

    #[test]
    fn a_list_only_source_whose_change_dump_fails_is_diffed_from_scratch() {
        let plan = Plan::new(&caps(false, false, true), true, true);
        assert_eq!(run(plan.clone(), &[]), [Step::FollowChangeDump(u(CD))]);
        let failed = [(Step::FollowChangeDump(u(CD)), Outcome::Unusable)];
        let want = [Step::FollowChangeDump(u(CD)), Step::ForgetChanges, Step::Baseline { initial: false }];
        assert_eq!(run(plan, &failed), want);
    }

    fn listed(uri: &str, len: u64) -> Listed {
        let mut e = crate::model::Entry::new("http://s.example/a");
        e.md = Some(crate::model::Md { length: Some(len), ..crate::model::Md::default() });
        // Without a digest, lastmod and length say whether the content held is the listed one.
        e.lastmod = Some(crate::model::W3cDateTime::from_unix(1_700_000_000, 0).unwrap());
        Listed::new(e, u("http://s.example/a"), uri.into())
    }

    fn record(uri: &str, len: u64) -> Record {
        let l = listed(uri, len);
        Record {
            uri: uri.into(),
            source: "s".into(),
            sets: vec!["s".into()],
            origin: l.listing.origin.clone(),
            upstream: l.loc.to_string(),
            sha256: crate::store::BlobId([7; 32]),
            md5: None,
            length: len,
            declared: l.listing.declared.clone(),
            media_type: None,
            lastmod: l.listing.lastmod,
            via: l.listing.via.clone(),
            links: Vec::new(),
            deleted: None,
            changed: crate::model::W3cDateTime::now(),
            heads: Vec::new(),
        }
    }

    #[test]
    fn an_entry_is_fetched_unless_its_content_is_held() {
        let held = record("t/a", 3);
        assert_eq!(entry(&listed("t/a", 3), None, false, true), EntryAction::Fetch { was_failing: false });
        assert_eq!(entry(&listed("t/a", 4), Some(&held), true, true), EntryAction::Fetch { was_failing: true });
        assert_eq!(
            entry(&listed("t/a", 3), Some(&held), true, true),
            EntryAction::Held { refresh: false, recovered: true }
        );
        assert_eq!(entry(&listed("t/a", 3), Some(&held), false, false), EntryAction::Repeated);
        let mut moved = held.clone();
        moved.upstream = "http://old.example/a".into();
        assert_eq!(
            entry(&listed("t/a", 3), Some(&moved), false, true),
            EntryAction::Held { refresh: true, recovered: false }
        );
    }

    #[test]
    fn only_a_complete_walk_deletes() {
        let held: HashMap<String, Record> = ["t/a", "t/b"].map(|u| (u.to_owned(), record(u, 1))).into();
        let failing: HashSet<String> = ["t/c".to_owned()].into();
        let seen: HashSet<String> = ["t/a".to_owned()].into();
        assert_eq!(after_walk(false, true, &held, &failing, &seen), AfterWalk::default());
        let done = after_walk(true, true, &held, &failing, &seen);
        assert_eq!((done.deletes, done.unlisted), (vec!["t/b".to_owned()], vec!["t/c".to_owned()]));
        assert!(after_walk(true, false, &held, &failing, &seen).deletes.is_empty(), "deletes = false");
    }

    fn at(s: u64) -> Option<W3cDateTime> {
        Some(W3cDateTime::from_unix(1_700_000_000 + s as i64, 0).unwrap())
    }

    #[test]
    fn a_package_applies_each_uris_last_new_change() {
        let e = |t, url| PackageEntry { datetime: at(t), url };
        let entries = [e(1, Some("a")), e(2, Some("b")), e(3, Some("a")), e(4, Some("c"))];
        let all = package_changes(&entries, 0, false, None).unwrap();
        assert_eq!((all.apply, all.newest), (vec![1, 2, 3], at(4)), "a's first change is superseded");
        let after_2 = package_changes(&entries, 0, false, at(2)).unwrap();
        assert_eq!(after_2.apply, [1, 2, 3], "a package not read before: the changes from the position's second on");
        let after_3 = package_changes(&entries, 0, false, at(3)).unwrap();
        assert_eq!(after_3.apply, [2, 3]);
        let resumed = package_changes(&entries, 3, true, at(9)).unwrap();
        assert_eq!(resumed.apply, [3], "the package read last: only past the position within it");
    }

    #[test]
    fn a_failed_new_entry_refuses_the_package_and_an_old_one_does_not() {
        let e = |t, url| PackageEntry { datetime: at(t), url };
        let entries = [e(1, None), e(2, Some("b")), e(3, None)];
        assert_eq!(package_changes(&entries, 0, false, None), Err(0));
        assert_eq!(package_changes(&entries, 0, false, at(2)), Err(2));
        assert_eq!(package_changes(&entries[..2], 0, false, at(2)).unwrap().apply, [1]);
    }
}
