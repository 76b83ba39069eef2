//! What the power-cut test checks after each restart, and how it reports: the observer's
//! memory against what Tributary serves now. Each problem is reported once, in the words a
//! reader needs (set, position, URI, datetime, what was seen and what is served), and the
//! memory is then brought in line with what is served, so the next cut is judged on its own.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use super::observer::{Change, Memory, Sighting};
use super::served::ServedSet;
use crate::support::powercut::CutReport;

/// Lines shown per kind of problem and cut in the failure message (the report file has all).
const SHOWN: usize = 25;

/// What one cut (or the end of the run) turned up.
#[derive(Debug, Default)]
pub(super) struct CutFindings {
    pub(super) cut: usize,
    /// What the file system dropped.
    pub(super) fs: CutReport,
    /// `tributary store verify` on the stopped store: `None` when clean.
    pub(super) verify: Option<String>,
    /// Tributary did not start again, or what it served could not be read.
    pub(super) broken: Option<String>,
    /// Changes seen and now served nowhere.
    pub(super) lost: Vec<String>,
    /// Changes seen and now served at another position.
    pub(super) moved: Vec<String>,
    /// Positions seen and now holding another change.
    pub(super) reused: Vec<String>,
    /// Changes notified and now served nowhere.
    pub(super) notified_lost: Vec<String>,
    /// Closed Change Lists (cached for a year) that changed.
    pub(super) closed_changed: Vec<String>,
    /// Positions where `api/changes` and the Change Lists disagree.
    pub(super) views_disagree: Vec<String>,
    /// Resource List entries whose bytes are not served.
    pub(super) missing_bytes: Vec<String>,
    /// The harvest did not converge to the Source's state (end of the run only).
    pub(super) diverged: Vec<String>,
    /// Notifications that did not parse.
    pub(super) bad_notifications: Vec<String>,
}

impl CutFindings {
    pub(super) fn is_clean(&self) -> bool {
        self.verify.is_none() && self.broken.is_none() && self.lists().iter().all(|(_, l)| l.is_empty())
    }

    fn lists(&self) -> [(&'static str, &Vec<String>); 9] {
        [
            ("observed changes lost", &self.lost),
            ("observed changes now at another position", &self.moved),
            ("positions reused for another change", &self.reused),
            ("notified changes lost", &self.notified_lost),
            ("closed Change Lists changed", &self.closed_changed),
            ("positions where api/changes and the Change Lists disagree", &self.views_disagree),
            ("Resource List entries whose bytes are not served", &self.missing_bytes),
            ("differences from the Source after the harvest had time to converge", &self.diverged),
            ("notifications that do not parse", &self.bad_notifications),
        ]
    }

    /// One line of counts.
    pub(super) fn summary(&self) -> String {
        let mut s = format!(
            "cut {}: lost {}, moved {}, reused {}, notified lost {}, closed lists changed {}, views disagree {}, \
             missing bytes {}, verify {}",
            self.cut,
            self.lost.len(),
            self.moved.len(),
            self.reused.len(),
            self.notified_lost.len(),
            self.closed_changed.len(),
            self.views_disagree.len(),
            self.missing_bytes.len(),
            if self.verify.is_some() { "NOT clean" } else { "clean" },
        );
        if !self.diverged.is_empty() {
            let _ = write!(s, ", diverged {}", self.diverged.len());
        }
        if self.broken.is_some() {
            s.push_str(", BROKEN");
        }
        s
    }

    /// Everything, each list cut at `shown` lines (all of it when `None`).
    pub(super) fn details(&self, shown: Option<usize>) -> String {
        let mut s = format!("{}\n  the file system dropped: {}\n", self.summary(), self.fs);
        if !self.fs.files.is_empty() {
            let _ = writeln!(s, "    files reverted: {}", self.fs.files.join(" "));
        }
        if !self.fs.entries.is_empty() {
            let _ = writeln!(s, "    directory entries undone or back: {}", self.fs.entries.join(" "));
        }
        if let Some(b) = &self.broken {
            let _ = writeln!(s, "  {b}");
        }
        if let Some(v) = &self.verify {
            let _ = writeln!(s, "  tributary store verify:\n{}", indent(v, "    "));
        }
        for (what, list) in self.lists() {
            if list.is_empty() {
                continue;
            }
            let _ = writeln!(s, "  {} {what}:", list.len());
            let n = shown.unwrap_or(usize::MAX);
            for line in list.iter().take(n) {
                let _ = writeln!(s, "    {line}");
            }
            if list.len() > n {
                let _ = writeln!(s, "    … and {} more", list.len() - n);
            }
        }
        s
    }

    /// [`details`](Self::details) as the failure message shows it.
    pub(super) fn shown(&self) -> String {
        self.details(Some(SHOWN))
    }
}

fn indent(text: &str, by: &str) -> String {
    text.lines().map(|l| format!("{by}{l}\n")).collect()
}

/// Compares everything the observer remembers with `served` (one entry per set), adds the
/// problems to `f`, and makes the memory agree with what is served.
pub(super) fn compare(memory: &mut Memory, served: &BTreeMap<String, ServedSet>, f: &mut CutFindings) {
    let run = memory.run;
    let where_now: BTreeMap<&str, HashMap<&Change, u64>> =
        served.iter().map(|(set, s)| (set.as_str(), s.log.iter().map(|(p, c)| (c, *p)).collect())).collect();
    for ((set, position), seen) in &mut memory.positions {
        let Some(s) = served.get(set) else { continue };
        // Seen in this run after the snapshot was read: the next check judges it.
        if seen.run == run && *position > s.end() {
            continue;
        }
        judge((set, *position), seen, (s, &where_now[set.as_str()]), run, f);
    }
    for (set, s) in served {
        for (position, change) in &s.log {
            let seen = || Sighting::new(change.clone(), format!("api/changes after cut {}", f.cut), run);
            memory.positions.entry((set.clone(), *position)).or_insert_with(seen);
        }
        let after = memory.after.entry(set.clone()).or_default();
        *after = (*after).min(s.end());
        compare_views(set, s, f);
    }
    compare_notified(memory, &where_now, f);
    compare_closed(memory, served, f);
    f.bad_notifications.extend(memory.bad_notifications.drain(..).map(|(r, m)| format!("run {r}: {m}")));
    f.reused.extend(memory.live_reuses.drain(..).map(|(r, m)| format!("{m} (while run {r} was serving)")));
}

/// One remembered position against what the set serves now.
fn judge(
    (set, position): (&str, u64),
    seen: &mut Sighting,
    (s, where_now): (&ServedSet, &HashMap<&Change, u64>),
    run: usize,
    f: &mut CutFindings,
) {
    let now = s.log.get(&position);
    if now == Some(&seen.change) {
        return;
    }
    let served_there =
        now.map_or_else(|| format!("nothing there (the log ends at {})", s.end()), |c| format!("{c} there"));
    let elsewhere = where_now.get(&seen.change).copied();
    if let Some(c) = now.filter(|c| *c != seen.latest()) {
        f.reused.push(format!("set {set} position {position}: the observer saw {seen}; now served: {c}"));
    }
    match elsewhere {
        _ if seen.reported_lost => {}
        // The same text at another position: moved, or lost and made again within the same
        // second (datetimes are to the second).
        Some(other) => f.moved.push(format!(
            "set {set} position {position}: the observer saw {seen}; now served at position {other}, and {served_there}"
        )),
        None => {
            f.lost.push(format!("set {set} position {position}: the observer saw {seen}; now served: {served_there}"))
        }
    }
    match now {
        Some(c) => *seen = Sighting::new(c.clone(), format!("api/changes after cut {}", f.cut), run),
        None => seen.reported_lost = true,
    }
}

/// The Change Lists must show what `api/changes` shows, position by position.
fn compare_views(set: &str, s: &ServedSet, f: &mut CutFindings) {
    for (position, (change, n)) in &s.lists {
        if let Some(logged) = s.log.get(position).filter(|l| *l != change) {
            f.views_disagree.push(format!(
                "set {set} position {position}: api/changes serves {logged}, changelist-{n}.xml serves {change}"
            ));
        }
    }
}

/// Every change notified in an earlier run must be in its set's log.
fn compare_notified(memory: &mut Memory, where_now: &BTreeMap<&str, HashMap<&Change, u64>>, f: &mut CutFindings) {
    let run = memory.run;
    for ((set, change), (seen_run, reported)) in &mut memory.notified {
        let served = where_now.get(set.as_str()).is_some_and(|w| w.contains_key(change));
        if served || *reported || *seen_run == run {
            continue;
        }
        f.notified_lost.push(format!("set {set}: notified {change} (run {seen_run}); not in the set's log now"));
        *reported = true;
    }
}

/// A closed Change List, once read, must stay as it was.
fn compare_closed(memory: &mut Memory, served: &BTreeMap<String, ServedSet>, f: &mut CutFindings) {
    let run = memory.run;
    for ((set, n), (was, seen_run)) in &memory.closed {
        let Some(s) = served.get(set) else { continue };
        // Closed in this run after `served` was read: the next check judges it.
        if *seen_run == run && was.first + was.count - 1 > s.end() {
            continue;
        }
        match s.closed.get(n) {
            Some(now) if now == was => {}
            Some(now) => f.closed_changed.push(format!(
                "set {set} changelist-{n}.xml: was positions {}..={} (sha-256 {}), now {}..={} (sha-256 {})",
                was.first,
                was.first + was.count - 1,
                was.sha256,
                now.first,
                now.first + now.count.max(1) - 1,
                now.sha256
            )),
            None => f.closed_changed.push(format!(
                "set {set} changelist-{n}.xml: was closed (positions {}..={}), now not a closed list \
                 (the log ends at {}, the lists show positions up to {}, {} lists closed)",
                was.first,
                was.first + was.count - 1,
                s.end(),
                s.lists.keys().next_back().copied().unwrap_or(0),
                s.closed.len()
            )),
        }
    }
    // What was served replaces what was remembered, except lists closed since it was read.
    let since: Vec<_> = std::mem::take(&mut memory.closed)
        .into_iter()
        .filter(|((set, n), (was, seen_run))| {
            *seen_run == run
                && served.get(set).is_some_and(|s| !s.closed.contains_key(n) && was.first + was.count - 1 > s.end())
        })
        .collect();
    memory.closed = served
        .iter()
        .flat_map(|(set, s)| s.closed.iter().map(move |(n, c)| ((set.clone(), *n), (c.clone(), run))))
        .chain(since)
        .collect();
}
