//! What is wrong with a source, for an operator with a thousand of them: the dashboard lists
//! the sources with problems first, most serious first, and filters by problem or harvest
//! state. One function, [`problems`], decides both, so the order the page shows and the
//! filter of `api/status` cannot disagree.
//!
//! Pure: it judges a saved status and two facts the web layer knows (whether the source is
//! still configured, when its newest change was applied), and reads nothing itself.

use serde::Serialize;

use crate::model::W3cDateTime;
use crate::store::{HarvestState, SourceState};

/// A source is quiet when its newest change is older than this (or it never had one) although
/// it is harvested: a Source that stalls upstream looks healthy to every other check. A fixed
/// span rather than a multiple of the poll interval, because a quiet Source is quiet by the
/// calendar (a provider that sends nothing for a week), however often it is asked.
pub(crate) const QUIET_AFTER_SECS: i64 = 7 * 86_400;

/// One thing an operator should look at, in order of severity (the declaration order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Problem {
    /// The last attempt failed (backing off or failing).
    Failing,
    /// An origin it needs asked (`Retry-After`) not to be contacted before a time.
    Parked,
    /// Deletions held for the operator (`tributary deletions`).
    Held,
    /// A configured URL answers a permanent redirect: `sources.toml` should be updated.
    Moved,
    /// Paused by the operator.
    Paused,
    /// Removed from the configuration, its records still published.
    Unconfigured,
    /// Harvested, but no change applied for [`QUIET_AFTER_SECS`].
    Quiet,
    /// No pass has succeeded yet.
    NeverHarvested,
}

impl Problem {
    /// Every problem, most serious first.
    pub(crate) const ALL: [Problem; 8] = [
        Problem::Failing,
        Problem::Parked,
        Problem::Held,
        Problem::Moved,
        Problem::Paused,
        Problem::Unconfigured,
        Problem::Quiet,
        Problem::NeverHarvested,
    ];

    /// The name `api/status` uses (its `state=` filter takes the same).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Problem::Failing => "failing",
            Problem::Parked => "parked",
            Problem::Held => "held",
            Problem::Moved => "moved",
            Problem::Paused => "paused",
            Problem::Unconfigured => "unconfigured",
            Problem::Quiet => "quiet",
            Problem::NeverHarvested => "never_harvested",
        }
    }
}

/// A source's problems, most serious first; empty for a healthy source.
pub(crate) fn problems(
    state: &SourceState,
    configured: bool,
    last_change: Option<W3cDateTime>,
    now: i64,
) -> Vec<Problem> {
    let s = &state.status;
    let mut out = Vec::new();
    // A parked source backs off because it was asked to, not because it failed.
    if s.parked.as_ref().is_some_and(|p| p.until.unix_timestamp() > now) {
        out.push(Problem::Parked);
    } else if matches!(s.state, HarvestState::BackingOff | HarvestState::Failing) {
        out.push(Problem::Failing);
    }
    if s.held_deletions > 0 {
        out.push(Problem::Held);
    }
    if !s.moved.is_empty() {
        out.push(Problem::Moved);
    }
    if state.paused.is_some() {
        out.push(Problem::Paused);
    }
    if !configured {
        out.push(Problem::Unconfigured);
    }
    match s.last_success {
        None => out.push(Problem::NeverHarvested),
        Some(_) if last_change.is_none_or(|t| now - t.unix_timestamp() > QUIET_AFTER_SECS) => out.push(Problem::Quiet),
        Some(_) => {}
    }
    out
}

/// What a `state=` filter of `api/status` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StateFilter {
    /// Any problem.
    AnyProblem,
    /// No problem at all.
    Healthy,
    /// This problem.
    Problem(Problem),
    /// This harvest state.
    Harvest(HarvestState),
}

impl StateFilter {
    /// The filter named `name`: `problem`, `ok`, a problem's name, or a harvest state
    /// (`idle`, `harvesting`, `backing_off`); `None` for anything else.
    pub(crate) fn parse(name: &str) -> Option<StateFilter> {
        if let Some(p) = Problem::ALL.into_iter().find(|p| p.as_str() == name) {
            return Some(StateFilter::Problem(p));
        }
        Some(match name {
            "problem" => StateFilter::AnyProblem,
            "ok" => StateFilter::Healthy,
            "idle" => StateFilter::Harvest(HarvestState::Idle),
            "harvesting" => StateFilter::Harvest(HarvestState::Harvesting),
            "backing_off" => StateFilter::Harvest(HarvestState::BackingOff),
            _ => return None,
        })
    }

    /// Whether a source in harvest state `state` with `problems` passes the filter.
    pub(crate) fn admits(self, state: HarvestState, problems: &[Problem]) -> bool {
        match self {
            StateFilter::AnyProblem => !problems.is_empty(),
            StateFilter::Healthy => problems.is_empty(),
            StateFilter::Problem(p) => problems.contains(&p),
            StateFilter::Harvest(h) => state == h,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000;

    fn at(secs_ago: i64) -> Option<W3cDateTime> {
        W3cDateTime::from_unix(NOW - secs_ago, 0).ok()
    }

    fn healthy() -> SourceState {
        let mut s = SourceState::default();
        s.status.last_success = at(60);
        s
    }

    #[test]
    fn a_healthy_source_has_none() {
        assert!(problems(&healthy(), true, at(3600), NOW).is_empty());
    }

    #[test]
    fn problems_come_most_serious_first() {
        let mut s = healthy();
        s.status.state = HarvestState::BackingOff;
        s.status.held_deletions = 3;
        s.paused = at(10);
        let found = problems(&s, false, at(QUIET_AFTER_SECS + 1), NOW);
        use Problem::*;
        assert_eq!(found, [Failing, Held, Paused, Unconfigured, Quiet]);
        assert!(found.windows(2).all(|w| w[0] < w[1]), "the order is the enum's");
    }

    #[test]
    fn a_parked_source_is_parked_not_failing_and_a_move_is_a_problem_of_its_own() {
        let mut s = healthy();
        s.status.state = HarvestState::BackingOff;
        let until = W3cDateTime::from_unix(NOW + 3600, 0).unwrap();
        s.status.parked = Some(crate::store::ParkedOrigin { origin: "http://up.example".into(), until });
        s.status.moved.insert("http://up.example/a".into(), "http://up.example/b".into());
        assert_eq!(problems(&s, true, at(60), NOW), [Problem::Parked, Problem::Moved]);
        let past = W3cDateTime::from_unix(NOW - 1, 0).unwrap();
        s.status.parked = Some(crate::store::ParkedOrigin { origin: "http://up.example".into(), until: past });
        assert_eq!(problems(&s, true, at(60), NOW), [Problem::Failing, Problem::Moved], "a park that ended");
    }

    #[test]
    fn quiet_and_never_harvested() {
        assert_eq!(problems(&healthy(), true, None, NOW), [Problem::Quiet], "harvested, never a change");
        assert_eq!(problems(&healthy(), true, at(QUIET_AFTER_SECS + 5), NOW), [Problem::Quiet]);
        assert!(problems(&healthy(), true, at(QUIET_AFTER_SECS - 5), NOW).is_empty());
        assert_eq!(problems(&SourceState::default(), true, None, NOW), [Problem::NeverHarvested]);
    }

    #[test]
    fn filters() {
        let failing = [Problem::Failing];
        assert!(StateFilter::parse("problem").unwrap().admits(HarvestState::Failing, &failing));
        assert!(!StateFilter::parse("ok").unwrap().admits(HarvestState::Failing, &failing));
        assert!(StateFilter::parse("failing").unwrap().admits(HarvestState::BackingOff, &failing));
        assert!(StateFilter::parse("backing_off").unwrap().admits(HarvestState::BackingOff, &failing));
        assert!(!StateFilter::parse("idle").unwrap().admits(HarvestState::BackingOff, &failing));
        assert!(StateFilter::parse("never_harvested").unwrap().admits(HarvestState::Idle, &[Problem::NeverHarvested]));
        assert_eq!(StateFilter::parse("nonsense"), None);
    }
}
