//! FeedSync's merge (§3.3), creation (§3.1), update/deletion (§3.2) and conflict-merging
//! (§3.4) behaviour for one item.
//!
//! Tributary aggregates the same item from several feeds, and publishes it again; endpoints
//! that see the same updates must end in the same state whatever the order in which the
//! updates reach them, or an aggregator would report changes that are only artefacts of
//! arrival order. FeedSync's merge is built for that, but leaves two things open that matter
//! for convergence, so this module fixes them:
//!
//! - **Canonical form.** `sx:conflicts` is a flat *unordered* list (§2.6), so two states that
//!   differ only in the order of their conflicts are the same state. Every item this module
//!   returns is canonical: conflicts sorted by [`canonical_cmp`] (the winner-picking rank of
//!   note 3 descending, then the whole item) and without duplicates. Structural equality of
//!   canonical items is "same state"; [`Merged::Unchanged`] is decided by it.
//! - **Ties in winner picking.** Note 3 ends with "Y is the winning item": two versions with
//!   equal `updates`, topmost `when` and topmost `by` (or both without them) leave the winner
//!   to the order in which step 7 walks M — and M is built from conflicts, which have no
//!   order. The literal algorithm is therefore not commutative when such a tie reaches step
//!   7. With `by` on both topmost histories a tie needs the same `by`, and then one item
//!   subsumes the other (note 2), so it never does; without `by` it can. Example: versions
//!   `A` and `B`, both `updates=2`, topmost histories without `by`, `when=T`, sequences 2 and
//!   3 (two endpoints that set only `when`, editing within the same second): neither subsumes
//!   the other, and local `A` merged with incoming `B` keeps `A` as the winner with `B` as its
//!   conflict, while local `B` merged with `A` keeps `B`. [`merge`] walks M in canonical order,
//!   so the tie goes to the item that sorts first by the rest of [`canonical_cmp`] (sync
//!   fields and history, then XML bytes, …). That is one of the orders the spec allows, so no MUST is broken; it
//!   makes the outcome independent of arrival order. [`winner`] itself stays literal.
//!
//! Other choices where the spec is silent:
//! - `local_update` takes S2 (§3.2 step 2c) over the histories of the item *and of its
//!   conflicts*, as the step allows ("any valid value greater than S2"). Without that an
//!   endpoint whose own latest version sits in the conflicts could reuse a sequence number,
//!   and two different versions would then subsume each other (note 2 compares only `by` and
//!   `sequence`) — whichever arrived last would silently win.
//! - Note 4 adds every history of a resolved conflict that no history of the item subsumes
//!   "immediately after the topmost"; when several are added they keep their own order (most
//!   recent first) as one block after the topmost, instead of being reversed one by one.
//! - Items without `sx:sync` take no part in FeedSync (§2.4); [`merge`] hands them to
//!   [`merge_plain`], which compares Atom `updated`.
//! - An item in a collection without `sx:sync` or without any history (invalid, §2.5) is never
//!   subsumed and ranks below every valid item, so it is kept as a conflict, not lost.
//!
//! Where the algorithm is order-independent: taking each state as the set "winner plus
//! conflicts", a merge keeps the versions of both sets that the other set does not subsume,
//! i.e. the newest versions of the union, and picks the winner among them by a total order.
//! That is commutative, associative and idempotent as long as subsumption behaves as a
//! partial order on the versions that exist, which holds for versions produced by this
//! module's `local_update` and `merge` (the property tests in `tests/it/feed_merge.rs` check
//! it over random histories, with and without `noconflicts`). It does not hold for versions
//! that reuse a `by`/`sequence` pair with different content (possible for other publishers,
//! or histories without `by` that share `when` and `sequence`): note 2 then declares each
//! subsumed by the other, step 7 drops the local one and step 8 keeps the incoming one, so
//! the last arrival wins and no canonicalisation can restore convergence without breaking
//! the MUST of note 1.
use std::cmp::Ordering;

use super::{Enclosure, FeedItem, History, Sync};
use crate::model::W3cDateTime;

/// The largest `updates` and `sequence` FeedSync allows (2^31-1, §2.4–2.5).
const MAX_COUNT: u32 = i32::MAX as u32;

/// The outcome of merging an incoming item into the local state (§3.3).
#[derive(Debug, Clone, PartialEq)]
pub enum Merged {
    /// No local item had this sync id: the incoming item is added as it is (canonicalised).
    New(FeedItem),
    /// The local item already holds everything the incoming one says.
    Unchanged,
    /// The merge result: the winner, with `sx:conflicts` as §3.3 steps 10–11 say, canonical.
    Changed(FeedItem),
}

/// §3.3 for one incoming item against the local item with the same identity, if any.
///
/// When either item lacks `sx:sync` FeedSync cannot merge them, and [`merge_plain`] decides.
/// The result is canonical (see the module doc); `Unchanged` means it equals the local item
/// once that is canonicalised too.
pub fn merge(local: Option<&FeedItem>, incoming: &FeedItem) -> Merged {
    let Some(local) = local else {
        return Merged::New(canonical(incoming.clone()));
    };
    if local.sync.is_none() || incoming.sync.is_none() {
        return merge_plain(Some(local), incoming);
    }
    let survivors = newest_of(collection(local), collection(incoming));
    let Some(result) = assemble(survivors) else {
        // Unreachable with both sides synced (each collection holds at least its item, and
        // step 8 keeps an incoming item that step 7 found subsuming a local one); answered
        // conservatively rather than by a panic.
        return Merged::Unchanged;
    };
    if result == canonical(local.clone()) { Merged::Unchanged } else { Merged::Changed(result) }
}

/// The fallback for items that do not both carry `sx:sync`, i.e. plain Atom/RSS items.
///
/// The newer Atom `updated` (RSS `pubDate`) wins; equal or older is `Unchanged`. When either
/// date is missing there is nothing to order by, so the incoming item replaces the local one
/// exactly when its XML differs. A synced local item meeting a plain incoming one with the
/// same identity is treated the same way: the plain item carries no history to merge.
pub fn merge_plain(local: Option<&FeedItem>, incoming: &FeedItem) -> Merged {
    let Some(local) = local else {
        return Merged::New(incoming.clone());
    };
    let newer = match (local.updated, incoming.updated) {
        (Some(l), Some(i)) => i > l,
        _ => incoming.xml != local.xml,
    };
    if newer { Merged::Changed(incoming.clone()) } else { Merged::Unchanged }
}

/// History subsumption (§3.3 note 2): whether `hy` already accounts for the update `hx`.
pub fn history_subsumed(hx: &History, hy: &History) -> bool {
    match (&hx.by, &hy.by) {
        (Some(bx), Some(by)) => bx == by && hy.sequence >= hx.sequence,
        (None, None) => hx.when == hy.when && hx.sequence == hy.sequence,
        _ => false,
    }
}

/// Item subsumption (§3.3 note 1): whether the topmost history of `x` is subsumed by any
/// history of `y`. An item without `sx:sync` or without history is never subsumed.
pub fn item_subsumed(x: &FeedItem, y: &FeedItem) -> bool {
    let (Some(hx), Some(sy)) = (topmost(x), &y.sync) else {
        return false;
    };
    sy.history.iter().any(|hy| history_subsumed(hx, hy))
}

/// Winner picking (§3.3 note 3), literally: `x` when it ranks strictly higher, else `y`.
///
/// The rank is `updates`, then the topmost `when` (present beats absent, later beats
/// earlier), then the topmost `by` (present beats absent, then code-point order, §2.1.4 —
/// which is Rust's `str` order). [`merge`] breaks the ties this leaves; see the module doc.
pub fn winner<'a>(x: &'a FeedItem, y: &'a FeedItem) -> &'a FeedItem {
    if rank_cmp(x, y) == Ordering::Greater { x } else { y }
}

/// The total order canonical conflicts are sorted by, and by which [`merge`] walks M: higher
/// note-3 rank first, then (for equal ranks) the rest of the item, so that only identical
/// items compare equal.
pub fn canonical_cmp(a: &FeedItem, b: &FeedItem) -> Ordering {
    rank_cmp(b, a).then_with(|| content_cmp(a, b))
}

/// Puts `item` in canonical form: its conflicts sorted by [`canonical_cmp`], without
/// duplicates. Conflicts are unordered (§2.6), so this changes the representation only.
pub fn canonicalize(item: &mut FeedItem) {
    if let Some(sync) = item.sync.as_mut() {
        sync.conflicts.sort_by(canonical_cmp);
        sync.conflicts.dedup();
    }
}

/// §3.1: makes `item` a FeedSync item with sync id `id`, created by endpoint `by` at `when`
/// (`updates` 1, one history with sequence 1). An existing `sx:sync` is replaced.
///
/// `noconflicts` and `deleted` start false; a creator that wants either sets it on the
/// returned sync before publishing, as §3.1 step 1 allows only at creation.
pub fn create_sync<'a>(item: &'a mut FeedItem, id: String, by: &str, when: W3cDateTime) -> &'a mut Sync {
    item.sync.insert(Sync {
        id,
        updates: 1,
        deleted: false,
        noconflicts: false,
        history: vec![History { sequence: 1, when: Some(when), by: Some(by.to_owned()) }],
        conflicts: Vec::new(),
    })
}

/// §3.2: records an update of `item` made by endpoint `by` at `when`; `deleted` true makes it
/// a deletion (tombstone), false an update — which un-deletes a tombstone.
///
/// The caller changes the item's data (`xml`, `title`, …); this updates `sx:sync`: one more
/// update, a new topmost history numbered per step 2c (S2 taken over the item's and its
/// conflicts' histories, see the module doc), and step 4 — conflicts whose topmost history is
/// by the same endpoint are resolved into the item's history (note 4). Counters stop at
/// 2^31-1 rather than leave the valid range.
///
/// Returns false, changing nothing, when `item` has no `sx:sync`: it must be created first
/// with [`create_sync`], since only its creator can choose the sync id (§3.1).
pub fn local_update(item: &mut FeedItem, by: &str, when: W3cDateTime, deleted: bool) -> bool {
    let Some(sync) = item.sync.as_mut() else {
        return false;
    };
    sync.updates = sync.updates.saturating_add(1).min(MAX_COUNT);
    let sequence = next_sequence(sync, by);
    sync.history.insert(0, History { sequence, when: Some(when), by: Some(by.to_owned()) });
    let own: Vec<usize> = (0..sync.conflicts.len())
        .filter(|&i| topmost(&sync.conflicts[i]).is_some_and(|h| h.by.as_deref() == Some(by)))
        .collect();
    resolve_conflicts(item, &own);
    if let Some(sync) = item.sync.as_mut() {
        sync.deleted = deleted;
    }
    true
}

/// §3.4 step 3 with note 4: removes the conflicts at indices `resolved` (into the item's
/// `conflicts`; out-of-range indices are ignored) and merges their histories into the item's,
/// right after its topmost history, skipping those the item's history already subsumes.
///
/// Call it after the [`local_update`] that records the resolved state, so that the topmost
/// history is the resolution.
pub fn resolve_conflicts(item: &mut FeedItem, resolved: &[usize]) {
    let Some(sync) = item.sync.as_mut() else {
        return;
    };
    let conflicts = std::mem::take(&mut sync.conflicts);
    for (i, conflict) in conflicts.into_iter().enumerate() {
        if resolved.contains(&i) {
            absorb_history(sync, &conflict);
        } else {
            sync.conflicts.push(conflict);
        }
    }
}

/// Note 4's inner loops for one resolved conflict `x`.
fn absorb_history(sync: &mut Sync, x: &FeedItem) {
    let Some(sx) = &x.sync else {
        return;
    };
    let mut added: Vec<History> = Vec::new();
    for hx in &sx.history {
        if !sync.history.iter().chain(&added).any(|hy| history_subsumed(hx, hy)) {
            added.push(hx.clone());
        }
    }
    let at = sync.history.len().min(1);
    sync.history.splice(at..at, added);
}

/// §3.2 step 2c: S1 is the new `updates` unless this endpoint has already used a sequence
/// that high.
fn next_sequence(sync: &Sync, by: &str) -> u32 {
    let own = sync.history.iter().chain(sync.conflicts.iter().filter_map(|c| c.sync.as_ref()).flat_map(|s| &s.history));
    let s2 = own.filter(|h| h.by.as_deref() == Some(by)).map(|h| h.sequence).max();
    match s2 {
        Some(s2) if s2 >= sync.updates => s2.saturating_add(1).min(MAX_COUNT),
        _ => sync.updates,
    }
}

/// Steps 2–3: the item and its conflicts, each without `sx:conflicts`.
fn collection(item: &FeedItem) -> Vec<FeedItem> {
    let mut item = item.clone();
    let conflicts = item.sync.as_mut().map(|s| std::mem::take(&mut s.conflicts)).unwrap_or_default();
    let mut all: Vec<FeedItem> = conflicts.into_iter().map(without_conflicts).collect();
    all.push(item);
    all
}

fn without_conflicts(mut item: FeedItem) -> FeedItem {
    if let Some(sync) = item.sync.as_mut() {
        sync.conflicts.clear();
    }
    item
}

/// Steps 6–8: M, the items of L not subsumed by I, then those of I not subsumed by what is
/// left of L.
fn newest_of(local: Vec<FeedItem>, incoming: Vec<FeedItem>) -> Vec<FeedItem> {
    let mut m: Vec<FeedItem> = local.into_iter().filter(|x| !incoming.iter().any(|y| item_subsumed(x, y))).collect();
    let kept_local = m.len();
    let from_incoming: Vec<FeedItem> =
        incoming.into_iter().filter(|x| !m[..kept_local].iter().any(|y| item_subsumed(x, y))).collect();
    m.extend(from_incoming);
    m
}

/// Steps 5, 7.3–7.4 and 9–11 over M walked in canonical order: the winner W first, the rest
/// as its conflicts unless W says `noconflicts`. None only when M is empty.
fn assemble(mut m: Vec<FeedItem>) -> Option<FeedItem> {
    m.sort_by(canonical_cmp);
    m.dedup();
    let mut rest = m.into_iter();
    let mut w = rest.next()?;
    if let Some(sync) = w.sync.as_mut()
        && !sync.noconflicts
    {
        sync.conflicts = rest.collect();
    }
    Some(w)
}

fn canonical(mut item: FeedItem) -> FeedItem {
    canonicalize(&mut item);
    item
}

fn topmost(item: &FeedItem) -> Option<&History> {
    item.sync.as_ref().and_then(|s| s.history.first())
}

/// Note 3 as an ordering: Greater when `x` wins over `y`, Equal when it cannot tell.
fn rank_cmp(x: &FeedItem, y: &FeedItem) -> Ordering {
    let updates = |i: &FeedItem| i.sync.as_ref().map(|s| s.updates);
    let when = |i: &FeedItem| topmost(i).and_then(|h| h.when);
    let by = |i: &FeedItem| topmost(i).and_then(|h| h.by.clone());
    updates(x).cmp(&updates(y)).then_with(|| when(x).cmp(&when(y))).then_with(|| by(x).cmp(&by(y)))
}

/// Everything but the rank, field by field, so that only equal items compare equal.
fn content_cmp(a: &FeedItem, b: &FeedItem) -> Ordering {
    option_cmp(a.sync.as_ref(), b.sync.as_ref(), sync_cmp)
        .then_with(|| a.xml.cmp(&b.xml))
        .then_with(|| a.id.cmp(&b.id))
        .then_with(|| a.title.cmp(&b.title))
        .then_with(|| a.link.cmp(&b.link))
        .then_with(|| a.updated.cmp(&b.updated))
        .then_with(|| option_cmp(a.enclosure.as_ref(), b.enclosure.as_ref(), enclosure_cmp))
}

fn sync_cmp(a: &Sync, b: &Sync) -> Ordering {
    a.id.cmp(&b.id)
        .then_with(|| a.updates.cmp(&b.updates))
        .then_with(|| a.deleted.cmp(&b.deleted))
        .then_with(|| a.noconflicts.cmp(&b.noconflicts))
        .then_with(|| slice_cmp(&a.history, &b.history, history_cmp))
        .then_with(|| slice_cmp(&a.conflicts, &b.conflicts, canonical_cmp))
}

fn history_cmp(a: &History, b: &History) -> Ordering {
    a.sequence.cmp(&b.sequence).then_with(|| a.when.cmp(&b.when)).then_with(|| a.by.cmp(&b.by))
}

fn enclosure_cmp(a: &Enclosure, b: &Enclosure) -> Ordering {
    a.url.cmp(&b.url).then_with(|| a.length.cmp(&b.length)).then_with(|| a.media_type.cmp(&b.media_type))
}

fn option_cmp<T>(a: Option<&T>, b: Option<&T>, cmp: fn(&T, &T) -> Ordering) -> Ordering {
    match (a, b) {
        (Some(a), Some(b)) => cmp(a, b),
        (a, b) => a.is_some().cmp(&b.is_some()),
    }
}

fn slice_cmp<T>(a: &[T], b: &[T], cmp: fn(&T, &T) -> Ordering) -> Ordering {
    a.iter().zip(b).map(|(x, y)| cmp(x, y)).find(|o| o.is_ne()).unwrap_or_else(|| a.len().cmp(&b.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> W3cDateTime {
        s.parse().unwrap()
    }

    fn h(sequence: u32, when: Option<&str>, by: Option<&str>) -> History {
        History { sequence, when: when.map(at), by: by.map(str::to_owned) }
    }

    fn synced(xml: &str, updates: u32, history: Vec<History>) -> FeedItem {
        FeedItem {
            id: Some("urn:uuid:60a76c80-d399-11d9-b93C-0003939e0aa0".into()),
            title: None,
            link: None,
            updated: None,
            enclosure: None,
            sync: Some(Sync {
                id: "item_1_myapp_2005-05-21T11:43:33Z".into(),
                updates,
                deleted: false,
                noconflicts: false,
                history,
                conflicts: Vec::new(),
            }),
            xml: xml.into(),
        }
    }

    fn plain(xml: &str, updated: Option<&str>) -> FeedItem {
        FeedItem {
            id: Some("tag:x".into()),
            title: None,
            link: None,
            updated: updated.map(at),
            enclosure: None,
            sync: None,
            xml: xml.into(),
        }
    }

    fn sync(item: &FeedItem) -> &Sync {
        item.sync.as_ref().unwrap()
    }

    /// The seed's §3.2 history up to JEO2000's update (Atom Example #2), oldest last.
    fn base() -> Vec<History> {
        vec![
            h(3, Some("2005-05-21T11:43:33Z"), Some("JEO2000")),
            h(2, Some("2005-05-21T10:43:33Z"), Some("REO1750")),
            h(1, Some("2005-05-21T09:43:33Z"), Some("REO1750")),
        ]
    }

    fn with_top(top: History, xml: &str) -> FeedItem {
        let mut history = vec![top];
        history.extend(base());
        synced(xml, 4, history)
    }

    /// The two versions of the §3.3 conflict example (the RSS one's times, which §3.4 uses).
    fn gpm() -> FeedItem {
        with_top(h(4, Some("2005-05-21T12:43:33Z"), Some("GPM7383")), "<entry>DONE</entry>")
    }

    fn jeo() -> FeedItem {
        with_top(h(4, Some("2005-05-21T12:03:33Z"), Some("JEO2000")), "<entry>rolls</entry>")
    }

    fn conflicted() -> FeedItem {
        let mut expected = gpm();
        expected.sync.as_mut().unwrap().conflicts = vec![jeo()];
        expected
    }

    #[test]
    fn history_with_by_is_subsumed_by_same_by_and_no_lower_sequence() {
        let hx = h(2, Some("2005-05-21T10:43:33Z"), Some("REO1750"));
        assert!(history_subsumed(&hx, &h(2, Some("2005-05-21T10:43:33Z"), Some("REO1750"))));
        assert!(history_subsumed(&hx, &h(3, None, Some("REO1750"))));
        assert!(!history_subsumed(&hx, &h(1, Some("2005-05-21T10:43:33Z"), Some("REO1750"))));
        assert!(!history_subsumed(&hx, &h(9, None, Some("JEO2000"))));
        assert!(!history_subsumed(&hx, &h(9, Some("2005-05-21T10:43:33Z"), None)));
    }

    #[test]
    fn history_without_by_needs_the_same_when_and_sequence() {
        let hx = h(2, Some("2005-05-21T10:43:33Z"), None);
        assert!(history_subsumed(&hx, &h(2, Some("2005-05-21T10:43:33Z"), None)));
        assert!(!history_subsumed(&hx, &h(3, Some("2005-05-21T10:43:33Z"), None)));
        assert!(!history_subsumed(&hx, &h(2, Some("2005-05-21T10:43:34Z"), None)));
        assert!(!history_subsumed(&hx, &h(2, Some("2005-05-21T10:43:33Z"), Some("REO1750"))));
    }

    #[test]
    fn item_is_subsumed_when_its_topmost_history_is_in_the_other() {
        let older = synced("<a/>", 2, base()[1..].to_vec());
        let newer = synced("<b/>", 3, base());
        assert!(item_subsumed(&older, &newer), "REO1750's sequence 2 is in the newer history");
        assert!(!item_subsumed(&newer, &older));
        assert!(!item_subsumed(&gpm(), &jeo()) && !item_subsumed(&jeo(), &gpm()));
        assert!(!item_subsumed(&plain("<a/>", None), &newer), "no sync, never subsumed");
    }

    #[test]
    fn winner_prefers_more_updates() {
        let x = synced("<x/>", 5, vec![h(5, Some("2005-05-21T09:00:00Z"), Some("A"))]);
        let y = synced("<y/>", 4, vec![h(4, Some("2005-05-21T12:00:00Z"), Some("B"))]);
        assert_eq!(winner(&x, &y), &x);
        assert_eq!(winner(&y, &x), &x);
    }

    #[test]
    fn winner_prefers_a_when_then_the_later_when() {
        let with = synced("<x/>", 4, vec![h(4, Some("2005-05-21T09:00:00Z"), Some("A"))]);
        let without = synced("<y/>", 4, vec![h(4, None, Some("Z"))]);
        assert_eq!(winner(&with, &without), &with);
        assert_eq!(winner(&without, &with), &with);
        let later = synced("<z/>", 4, vec![h(4, Some("2005-05-21T09:00:01Z"), Some("A"))]);
        assert_eq!(winner(&with, &later), &later);
        assert_eq!(winner(&later, &with), &later);
    }

    #[test]
    fn winner_with_the_same_when_prefers_a_by_then_the_greater_by_in_code_point_order() {
        let when = Some("2005-05-21T12:43:33Z");
        let anonymous = synced("<x/>", 4, vec![h(4, when, None)]);
        let upper = synced("<y/>", 4, vec![h(4, when, Some("Zed"))]);
        let lower = synced("<z/>", 4, vec![h(4, when, Some("abc"))]);
        let accented = synced("<w/>", 4, vec![h(4, when, Some("\u{e9}t\u{e9}"))]);
        assert_eq!(winner(&anonymous, &upper), &upper);
        assert_eq!(winner(&upper, &anonymous), &upper);
        assert_eq!(winner(&upper, &lower), &lower, "'a' (U+0061) collates after 'Z' (U+005A)");
        assert_eq!(winner(&accented, &lower), &accented, "U+00E9 collates after 'a'");
        // The seed's Atom conflict example gives both versions when=12:43:33; by note 3 the
        // greater by, JEO2000, would then win.
        let g = with_top(h(4, when, Some("GPM7383")), "<g/>");
        let j = with_top(h(4, when, Some("JEO2000")), "<j/>");
        assert_eq!(winner(&g, &j), &j);
    }

    #[test]
    fn winner_of_a_tie_is_y() {
        let x = synced("<x/>", 4, vec![h(4, Some("2005-05-21T12:43:33Z"), None)]);
        let y = synced("<y/>", 4, vec![h(3, Some("2005-05-21T12:43:33Z"), None)]);
        assert_eq!(winner(&x, &y), &y);
        assert_eq!(winner(&y, &x), &x);
    }

    #[test]
    fn merge_without_local_item_is_new() {
        assert_eq!(merge(None, &gpm()), Merged::New(gpm()));
    }

    #[test]
    fn merge_of_a_subsumed_incoming_item_is_unchanged() {
        let local = synced("<b/>", 3, base());
        let incoming = synced("<a/>", 2, base()[1..].to_vec());
        assert_eq!(merge(Some(&local), &incoming), Merged::Unchanged);
        assert_eq!(merge(Some(&local), &local), Merged::Unchanged, "idempotent");
    }

    #[test]
    fn merge_of_a_newer_incoming_item_replaces_the_local_one() {
        let local = synced("<a/>", 2, base()[1..].to_vec());
        let incoming = synced("<b/>", 3, base());
        assert_eq!(merge(Some(&local), &incoming), Merged::Changed(incoming));
    }

    #[test]
    fn merge_of_concurrent_updates_keeps_the_loser_as_a_conflict_in_either_order() {
        assert_eq!(merge(Some(&jeo()), &gpm()), Merged::Changed(conflicted()));
        assert_eq!(merge(Some(&gpm()), &jeo()), Merged::Changed(conflicted()));
        assert_eq!(merge(Some(&conflicted()), &jeo()), Merged::Unchanged);
        assert_eq!(merge(Some(&conflicted()), &gpm()), Merged::Unchanged);
        assert_eq!(merge(Some(&jeo()), &conflicted()), Merged::Changed(conflicted()));
    }

    #[test]
    fn merge_with_noconflicts_keeps_only_the_winner() {
        let noconflicts = |mut i: FeedItem| {
            i.sync.as_mut().unwrap().noconflicts = true;
            i
        };
        let (g, j) = (noconflicts(gpm()), noconflicts(jeo()));
        assert_eq!(merge(Some(&j), &g), Merged::Changed(g.clone()));
        assert_eq!(merge(Some(&g), &j), Merged::Unchanged);
    }

    #[test]
    fn merge_breaks_ties_without_by_the_same_way_in_either_order() {
        let a = synced("<a/>", 2, vec![h(2, Some("2005-05-21T12:00:00Z"), None)]);
        let b = synced("<b/>", 2, vec![h(3, Some("2005-05-21T12:00:00Z"), None)]);
        let Merged::Changed(ab) = merge(Some(&a), &b) else { panic!("a conflict is a change") };
        assert_eq!(merge(Some(&b), &a), Merged::Changed(ab.clone()));
        assert_eq!(sync(&ab).conflicts.len(), 1);
    }

    #[test]
    fn conflicts_compare_unordered() {
        let mut other = synced("<o/>", 4, vec![h(4, Some("2005-05-21T12:00:00Z"), Some("OTH1"))]);
        other.xml = "<o/>".into();
        let mut ab = conflicted();
        ab.sync.as_mut().unwrap().conflicts.push(other.clone());
        let mut ba = conflicted();
        ba.sync.as_mut().unwrap().conflicts.insert(0, other);
        assert_eq!(merge(Some(&ab), &ba), Merged::Unchanged);
        assert_eq!(merge(Some(&ba), &ab), Merged::Unchanged);
    }

    #[test]
    fn create_and_update_number_sequences_as_the_seed_examples() {
        let mut item = plain("<entry>milk and eggs</entry>", None);
        assert!(!local_update(&mut item, "REO1750", at("2005-05-21T10:43:33Z"), false), "no sync: no-op");
        assert_eq!(item.sync, None);
        create_sync(&mut item, "item_1_myapp_2005-05-21T11:43:33Z".into(), "REO1750", at("2005-05-21T09:43:33Z"));
        assert_eq!(sync(&item).history, base()[2..].to_vec());
        assert!(local_update(&mut item, "REO1750", at("2005-05-21T10:43:33Z"), false));
        assert_eq!((sync(&item).updates, &sync(&item).history[..]), (2, &base()[1..]), "Example #1");
        assert!(local_update(&mut item, "JEO2000", at("2005-05-21T11:43:33Z"), false));
        assert_eq!((sync(&item).updates, &sync(&item).history[..]), (3, &base()[..]), "Example #2");
    }

    #[test]
    fn update_numbers_above_the_endpoints_greatest_sequence() {
        let mut item = synced("<a/>", 2, vec![h(5, None, Some("A")), h(1, None, Some("B"))]);
        local_update(&mut item, "A", at("2005-05-21T10:00:00Z"), false);
        assert_eq!(sync(&item).history[0], h(6, Some("2005-05-21T10:00:00Z"), Some("A")), "S2 + 1");
        local_update(&mut item, "B", at("2005-05-21T10:00:01Z"), false);
        assert_eq!(sync(&item).history[0], h(4, Some("2005-05-21T10:00:01Z"), Some("B")), "updates");
        // The endpoint's own sequence 9 sits in a conflict only: still not reused.
        let mut item = synced("<a/>", 2, vec![h(2, None, Some("B"))]);
        item.sync.as_mut().unwrap().conflicts = vec![synced("<c/>", 1, vec![h(9, None, Some("C"))])];
        local_update(&mut item, "C", at("2005-05-21T10:00:00Z"), false);
        assert_eq!(sync(&item).history[0].sequence, 10);
    }

    #[test]
    fn deletion_and_undeletion() {
        let mut item = synced("<a/>", 3, base());
        local_update(&mut item, "REO1750", at("2005-05-21T13:00:00Z"), true);
        assert!(item.is_deleted());
        assert_eq!(sync(&item).updates, 4);
        local_update(&mut item, "REO1750", at("2005-05-21T13:00:01Z"), false);
        assert!(!item.is_deleted());
        assert_eq!(sync(&item).history[0].sequence, 5);
    }

    #[test]
    fn resolving_a_conflict_merges_its_history_after_the_topmost_as_the_seed_example() {
        let mut item = conflicted();
        local_update(&mut item, "GPM7383", at("2005-05-21T12:53:33Z"), false);
        assert_eq!(sync(&item).conflicts, vec![jeo()], "JEO2000's conflict is not GPM7383's own");
        resolve_conflicts(&mut item, &[0]);
        let mut expected = vec![
            h(5, Some("2005-05-21T12:53:33Z"), Some("GPM7383")),
            h(4, Some("2005-05-21T12:03:33Z"), Some("JEO2000")),
            h(4, Some("2005-05-21T12:43:33Z"), Some("GPM7383")),
        ];
        expected.extend(base());
        assert_eq!((sync(&item).updates, &sync(&item).history), (5, &expected));
        assert!(sync(&item).conflicts.is_empty());
    }

    #[test]
    fn update_resolves_the_endpoints_own_conflicts() {
        let mut item = conflicted();
        local_update(&mut item, "JEO2000", at("2005-05-21T12:53:33Z"), false);
        let mut expected = vec![h(5, Some("2005-05-21T12:53:33Z"), Some("JEO2000"))];
        expected.extend(gpm().sync.unwrap().history);
        assert_eq!(sync(&item).history, expected, "JEO2000's sequences 4 and 3 are subsumed by 5");
        assert!(sync(&item).conflicts.is_empty());
    }

    #[test]
    fn plain_items_compare_updated() {
        let old = plain("<a/>", Some("2005-05-21T10:00:00Z"));
        let new = plain("<b/>", Some("2005-05-21T11:00:00Z"));
        assert_eq!(merge_plain(None, &old), Merged::New(old.clone()));
        assert_eq!(merge(Some(&old), &new), Merged::Changed(new.clone()));
        assert_eq!(merge(Some(&new), &old), Merged::Unchanged);
        assert_eq!(merge(Some(&new), &plain("<c/>", Some("2005-05-21T11:00:00Z"))), Merged::Unchanged);
        let undated = plain("<c/>", None);
        assert_eq!(merge(Some(&new), &undated), Merged::Changed(undated.clone()));
        assert_eq!(merge(Some(&undated), &plain("<c/>", None)), Merged::Unchanged);
        assert_eq!(merge(Some(&gpm()), &new), Merged::Changed(new.clone()), "synced local, plain incoming");
    }
}
