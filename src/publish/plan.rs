//! How a set's Resource List is cut into parts, so that the parts stay consistent while the
//! harvester writes.
//!
//! A part is a fixed range of Tributary URIs (`from <= uri < until`), not a position in a
//! listing: whatever the harvester adds or deletes, every live resource falls in exactly one
//! part of an index, so a Destination walking the parts neither misses a resource nor sees one
//! twice. A part number, once given to a range, is never given to another range (numbers only
//! grow), so a Destination holding an older index still gets exactly the range that index
//! meant. Ranges are chosen at about three quarters of the limit, leaving room to grow; when a
//! part has grown past the limit, the next index request replaces it by new, smaller parts
//! with new numbers, while the old number keeps serving its old range for whoever still holds
//! the old index. Parts never merge (a shrinking set leaves smaller or empty parts, which is
//! valid), and once a set needed an index it keeps one.
//!
//! The plan lives in memory and is saved in the store whenever its numbering changes (see
//! [`Plan::to_bytes`]), so after a restart every number keeps its range and new parts get new
//! numbers. It is revalidated (one scan of the set's live records) on an index request when
//! the set's change log has moved since, at least every [`MAX_AGE`], and after a restart; a
//! part request uses the plan as it is.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Revalidate at least this often even without new change events (records written without an
/// event in this set, e.g. after a set's sources were reconfigured, are picked up this way).
pub(super) const MAX_AGE: Duration = Duration::from_secs(300);

/// A range of Tributary URIs: `from <= uri < until`; `from = ""` is the start, `until =
/// None` the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyRange {
    pub(crate) from: String,
    pub(crate) until: Option<String>,
}

impl KeyRange {
    pub(crate) fn all() -> Self {
        KeyRange { from: String::new(), until: None }
    }

    fn contains(&self, key: &str) -> bool {
        key >= self.from.as_str() && self.until.as_deref().is_none_or(|u| key < u)
    }
}

/// Whether the Resource List is one document or an index of parts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum Layout {
    /// One document with every live resource.
    #[default]
    Single,
    /// An index; the current parts' numbers, in URI order.
    Index(Vec<u64>),
}

/// One set's partition.
#[derive(Debug, Clone, Default)]
pub(crate) struct Plan {
    /// The set's visible sequence number and the time at the last validation.
    validated: Option<(u64, Instant)>,
    pub(crate) layout: Layout,
    /// Every part ever defined, by number.
    parts: BTreeMap<u64, KeyRange>,
}

/// The saved form: the layout (`None`: a single list) and every part ever numbered as
/// `(number, from, until)`. JSON, so a later build can add fields.
#[derive(Serialize, Deserialize)]
struct Saved {
    layout: Option<Vec<u64>>,
    parts: Vec<(u64, String, Option<String>)>,
}

/// What one scan found in one range: its live count and the URIs at which a new part of
/// `fill` entries would start.
#[derive(Debug, Default)]
struct Tally {
    count: usize,
    cuts: Vec<String>,
}

impl Plan {
    /// The numbering, for the store: what must survive a restart (not the validation time).
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let layout = match &self.layout {
            Layout::Single => None,
            Layout::Index(nums) => Some(nums.clone()),
        };
        let parts = self.parts.iter().map(|(n, r)| (*n, r.from.clone(), r.until.clone())).collect();
        serde_json::to_vec(&Saved { layout, parts }).unwrap_or_default()
    }

    /// A plan saved by [`Plan::to_bytes`], to be revalidated before use; `None` when the bytes
    /// are not a plan (a fresh plan is then as good as the old one for every new Destination).
    pub(crate) fn from_bytes(bytes: &[u8]) -> Option<Plan> {
        let saved: Saved = serde_json::from_slice(bytes).ok()?;
        let parts: BTreeMap<u64, KeyRange> =
            saved.parts.into_iter().map(|(n, from, until)| (n, KeyRange { from, until })).collect();
        let layout = match saved.layout {
            None => Layout::Single,
            Some(nums) if nums.iter().all(|n| parts.contains_key(n)) => Layout::Index(nums),
            Some(_) => return None,
        };
        Some(Plan { validated: None, layout, parts })
    }

    /// Whether `other` numbers parts differently (so the new numbering must be saved).
    pub(crate) fn numbering_differs(&self, other: &Plan) -> bool {
        self.layout != other.layout || self.parts != other.parts
    }

    /// Whether a validation at `seq` is needed.
    pub(crate) fn is_stale(&self, seq: u64, now: Instant) -> bool {
        self.validated.is_none_or(|(s, at)| s != seq || now.duration_since(at) >= MAX_AGE)
    }

    /// The range of part `n`, current or retired.
    pub(crate) fn part(&self, n: u64) -> Option<&KeyRange> {
        self.parts.get(&n)
    }

    /// The ranges a validation scan must count: the whole key space, or the current parts.
    pub(crate) fn ranges(&self) -> Vec<KeyRange> {
        match &self.layout {
            Layout::Single => vec![KeyRange::all()],
            Layout::Index(nums) => nums.iter().filter_map(|n| self.parts.get(n).cloned()).collect(),
        }
    }

    /// Applies a validation scan: `uris` are the set's live URIs in order, taken at `seq`.
    /// Ranges with more than `limit` entries are cut into new parts of `fill` entries.
    ///
    /// # Errors
    /// The first error `uris` yields; the plan is then unchanged.
    pub(crate) fn validate<E>(
        &mut self,
        uris: impl Iterator<Item = Result<String, E>>,
        seq: u64,
        now: Instant,
        limit: usize,
        fill: usize,
    ) -> Result<(), E> {
        let ranges = self.ranges();
        let tallies = tally(&ranges, uris, fill)?;
        let mut next = self.parts.keys().next_back().map_or(1, |n| n + 1);
        let mut current = Vec::new();
        let old: Vec<Option<u64>> = match &self.layout {
            Layout::Single => vec![None],
            Layout::Index(nums) => nums.iter().map(|n| Some(*n)).collect(),
        };
        let was_single = self.layout == Layout::Single;
        for ((range, t), n) in ranges.into_iter().zip(tallies).zip(old) {
            match n {
                Some(n) if t.count <= limit => current.push(n),
                _ if was_single && t.count <= limit => {}
                _ => {
                    for piece in cut(&range, t.cuts) {
                        self.parts.insert(next, piece);
                        current.push(next);
                        next += 1;
                    }
                }
            }
        }
        if !current.is_empty() {
            self.layout = Layout::Index(current);
        }
        self.validated = Some((seq, now));
        Ok(())
    }
}

/// Counts `uris` (sorted) into `ranges` (sorted, contiguous), noting every `fill`-th URI of
/// each range as a cut point.
fn tally<E>(ranges: &[KeyRange], uris: impl Iterator<Item = Result<String, E>>, fill: usize) -> Result<Vec<Tally>, E> {
    let mut tallies: Vec<Tally> = ranges.iter().map(|_| Tally::default()).collect();
    let mut i = 0;
    for uri in uris {
        let uri = uri?;
        while i < ranges.len() && !ranges[i].contains(&uri) {
            i += 1;
        }
        let Some(t) = tallies.get_mut(i) else { break };
        if t.count > 0 && t.count.is_multiple_of(fill) {
            t.cuts.push(uri);
        }
        t.count += 1;
    }
    Ok(tallies)
}

/// `range` split at `cuts` (sorted URIs inside it).
fn cut(range: &KeyRange, cuts: Vec<String>) -> Vec<KeyRange> {
    let mut out = Vec::with_capacity(cuts.len() + 1);
    let mut from = range.from.clone();
    for c in cuts {
        out.push(KeyRange { from: std::mem::replace(&mut from, c.clone()), until: Some(c) });
    }
    out.push(KeyRange { from, until: range.until.clone() });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uris(range: std::ops::Range<u32>) -> impl Iterator<Item = Result<String, ()>> {
        range.map(|i| Ok(format!("u{i:04}")))
    }

    fn members(plan: &Plan, all: &[String]) -> Vec<Vec<String>> {
        let Layout::Index(nums) = &plan.layout else { return vec![all.to_vec()] };
        nums.iter().map(|n| all.iter().filter(|u| plan.part(*n).unwrap().contains(u)).cloned().collect()).collect()
    }

    #[test]
    fn small_sets_stay_single_and_large_ones_are_cut_at_fill() {
        let mut p = Plan::default();
        p.validate(uris(0..10), 1, Instant::now(), 10, 7).unwrap();
        assert_eq!(p.layout, Layout::Single);
        p.validate(uris(0..25), 2, Instant::now(), 10, 7).unwrap();
        assert_eq!(p.layout, Layout::Index(vec![1, 2, 3, 4]));
        let all: Vec<String> = uris(0..25).map(Result::unwrap).collect();
        let sizes: Vec<usize> = members(&p, &all).iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![7, 7, 7, 4]);
    }

    #[test]
    fn overflowing_parts_split_under_new_numbers_and_old_numbers_keep_their_range() {
        let mut p = Plan::default();
        p.validate(uris(0..20), 1, Instant::now(), 10, 7).unwrap();
        assert_eq!(p.layout, Layout::Index(vec![1, 2, 3]));
        let old_two = p.part(2).unwrap().clone();
        // Part 2 is u0007..u0014; add 6 keys inside it (u0007a…) so it holds 13 > 10.
        let mut all: Vec<String> = uris(0..20).map(Result::unwrap).collect();
        all.extend((0..6).map(|i| format!("u0008{i}")));
        all.sort();
        p.validate(all.iter().cloned().map(Ok::<_, ()>), 2, Instant::now(), 10, 7).unwrap();
        assert_eq!(p.layout, Layout::Index(vec![1, 4, 5, 3]));
        assert_eq!(p.part(2), Some(&old_two), "retired numbers keep their range");
        let parts = members(&p, &all);
        assert_eq!(parts.iter().map(Vec::len).sum::<usize>(), all.len(), "every key in exactly one part");
        assert!(parts.iter().all(|m| m.len() <= 10));
    }

    #[test]
    fn numbering_survives_a_save_and_restore() {
        let mut p = Plan::default();
        p.validate(uris(0..20), 1, Instant::now(), 10, 7).unwrap();
        let restored = Plan::from_bytes(&p.to_bytes()).unwrap();
        assert!(!restored.numbering_differs(&p));
        assert!(restored.is_stale(1, Instant::now()), "a restored plan is revalidated before use");
        assert_eq!(restored.part(3), p.part(3));
        assert!(Plan::from_bytes(b"{\"layout\":[9],\"parts\":[]}").is_none(), "a layout naming unknown parts");
        assert!(Plan::from_bytes(b"not json").is_none());
    }

    #[test]
    fn staleness_follows_the_sequence_number_and_age() {
        let mut p = Plan::default();
        let t = Instant::now();
        assert!(p.is_stale(0, t));
        p.validate(uris(0..1), 5, t, 10, 7).unwrap();
        assert!(!p.is_stale(5, t));
        assert!(p.is_stale(6, t));
        assert!(p.is_stale(5, t + MAX_AGE));
    }
}
