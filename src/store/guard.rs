//! What keeps an upstream accident, or a resource the operator took down, out of what
//! Tributary publishes: held deletions and takedowns.
//!
//! **Held deletions** (table `held`, a row per source and resource). The harvester never
//! deletes a record outright: it *stages* the deletion ([`super::Batch::stage_delete`]), in the
//! same commit as the position that found it, so a crash can neither lose it nor apply it. When
//! the pass (or the push notification) ends, [`Store::settle_deletions`] judges what it staged:
//! under the source's threshold they are applied and published; over it they stay *held* —
//! the records stay live and published — until the operator applies or keeps them, or, with
//! `confirm_deletions`, enough passes have found them. A resource seen again (listed, or
//! updated) cancels its held deletion in the batch that stores it.
//!
//! **Takedowns** (table `takedowns`, a row per target the operator named). A takedown deletes
//! the records it matches and keeps a set of *match keys* — the upstream and origin URIs and the
//! sha-256 of everything it took down, and the target itself — that every later upsert is
//! checked against in memory, whatever the source, so a taken-down resource never comes back by
//! a re-harvest, another source, or a copy of the same bytes. The reason is for operators only.
//!
//! Both kinds of row are JSON, so fields can be added without a format change.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::codec::{check_key, pair_key, pair_prefix, w3c};
use super::error::StoreError;
use super::{Batch, Store};
use crate::model::W3cDateTime;

/// One staged or held deletion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HeldDeletion {
    /// The source.
    pub source: String,
    /// Tributary's URI of the resource.
    pub uri: String,
    /// The sets its deletion is published in.
    pub sets: Vec<String>,
    /// When a pass first found it.
    #[serde(with = "w3c")]
    pub first_seen: W3cDateTime,
    /// The pass that first found it (`poll <start>` or `push <time>`).
    pub pass: String,
    /// The last pass that found it.
    pub last_pass: String,
    /// False while staged by a pass not yet judged; true once held.
    pub held: bool,
    /// Passes in a row, each at least a poll interval after the last, that found it
    /// (`confirm_deletions`).
    pub found: u32,
    /// When it was last counted as found.
    #[serde(with = "w3c")]
    pub last_found: W3cDateTime,
}

impl Default for HeldDeletion {
    fn default() -> Self {
        let now = W3cDateTime::now();
        HeldDeletion {
            source: String::new(),
            uri: String::new(),
            sets: Vec::new(),
            first_seen: now,
            pass: String::new(),
            last_pass: String::new(),
            held: false,
            found: 0,
            last_found: now,
        }
    }
}

/// Who staged a deletion: the source and its pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    /// The source.
    pub source: String,
    /// The pass (`poll <start>`, `push <time>`).
    pub pass: String,
}

/// How many deletions one pass may make before they are held (`max_deletions`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeletionLimit {
    /// Held when more than this many (`None`: no count limit).
    pub count: Option<u64>,
    /// Held when more than this share of the source's live resources, in percent (`None`: no
    /// share limit).
    pub percent: Option<f64>,
}

impl DeletionLimit {
    /// No limit: `max_deletions = "unlimited"`.
    pub const UNLIMITED: DeletionLimit = DeletionLimit { count: None, percent: None };

    /// Whether `n` deletions out of `live` resources must be held: every limit set is exceeded
    /// (the default, 50 and 10%, holds a pass that deletes more than 50 *and* more than a tenth).
    pub fn holds(&self, n: u64, live: u64) -> bool {
        if self.count.is_none() && self.percent.is_none() {
            return false;
        }
        let over_count = self.count.is_none_or(|c| n > c);
        let over_share = self.percent.is_none_or(|p| (n as f64) > live as f64 * p / 100.0);
        over_count && over_share
    }
}

impl Default for DeletionLimit {
    fn default() -> Self {
        DeletionLimit { count: Some(50), percent: Some(10.0) }
    }
}

impl std::fmt::Display for DeletionLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.count, self.percent) {
            (None, None) => write!(f, "unlimited"),
            (Some(c), None) => write!(f, "{c}"),
            (None, Some(p)) => write!(f, "{p}%"),
            (Some(c), Some(p)) => write!(f, "{c} and {p}%"),
        }
    }
}

/// How [`Store::settle_deletions`] judges a source's staged deletions.
#[derive(Debug, Clone, Copy)]
pub struct Settle<'a> {
    /// The source.
    pub source: &'a str,
    /// The pass that just ended.
    pub pass: &'a str,
    /// `max_deletions`.
    pub limit: DeletionLimit,
    /// `confirm_deletions` and the poll interval between confirmations, when set.
    pub confirm: Option<(u32, std::time::Duration)>,
    /// Whether the pass ended without an error (only such a pass confirms held deletions).
    pub complete: bool,
    /// Whether the pass read the Source's whole inventory: a held deletion it did not stage
    /// again names a resource it found listed, and is cancelled.
    pub listed_all: bool,
}

/// What [`Store::settle_deletions`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settled {
    /// Deletions applied and published.
    pub applied: u64,
    /// Deletions newly held by this pass.
    pub newly_held: u64,
    /// Deletions held for the source now, in all.
    pub held: u64,
    /// When the oldest of them was first found.
    pub held_since: Option<W3cDateTime>,
}

/// One takedown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Takedown {
    /// What the operator named: an upstream URI, a Tributary URI or `sha-256:<hex>`.
    pub target: String,
    /// Why (for operators; never served).
    pub reason: String,
    /// When.
    #[serde(with = "w3c")]
    pub at: W3cDateTime,
    /// What later upserts are refused by: `uri:` upstream and origin URIs, `sha-256:` digests.
    pub keys: Vec<String>,
    /// Each record taken down: `(source, Tributary URI)`, to fetch again if it is lifted.
    pub records: Vec<(String, String)>,
}

impl Default for Takedown {
    fn default() -> Self {
        Takedown {
            target: String::new(),
            reason: String::new(),
            at: W3cDateTime::now(),
            keys: Vec::new(),
            records: Vec::new(),
        }
    }
}

/// A match key for a URI.
pub fn uri_key(uri: &str) -> String {
    format!("uri:{uri}")
}

/// A match key for a sha-256 digest in hex.
pub fn sha_key(hex: &str) -> String {
    format!("sha-256:{}", hex.to_ascii_lowercase())
}

/// The takedowns' match keys, held in memory: every upsert is checked against them.
#[derive(Debug, Default)]
pub(super) struct TakedownIndex {
    /// Match key → the target whose takedown it belongs to.
    keys: HashMap<String, String>,
}

impl TakedownIndex {
    pub(super) fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The target of the takedown matching any of `keys`.
    pub(super) fn matching<'a>(&self, mut keys: impl Iterator<Item = &'a str>) -> Option<&str> {
        keys.find_map(|k| self.keys.get(k)).map(String::as_str)
    }

    fn add(&mut self, t: &Takedown) {
        for k in &t.keys {
            self.keys.insert(k.clone(), t.target.clone());
        }
    }
}

/// Loads the takedowns' match keys and counts the held rows (what [`super::Inner`] keeps).
pub(super) fn load(trees: &super::Trees) -> Result<(TakedownIndex, u64), StoreError> {
    let mut index = TakedownIndex::default();
    for kv in trees.takedowns.iter() {
        let (_, v) = kv?;
        index.add(&decode_takedown(&v)?);
    }
    let held = trees.held.iter().keys().count() as u64;
    Ok((index, held))
}

fn decode_held(v: &[u8]) -> Result<HeldDeletion, StoreError> {
    serde_json::from_slice(v).map_err(|e| StoreError::corrupt("held deletion", e))
}

fn decode_takedown(v: &[u8]) -> Result<Takedown, StoreError> {
    serde_json::from_slice(v).map_err(|e| StoreError::corrupt("takedown", e))
}

pub(super) fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(v).map_err(|e| StoreError::corrupt("guard row", e))
}

pub(super) fn held_key(source: &str, uri: &str) -> Vec<u8> {
    pair_key(source.as_bytes(), uri.as_bytes())
}

/// A staged deletion as its batch writes it: a new row, or the row it had, found again.
pub(super) fn staged(old: Option<&[u8]>, sets: &[String], uri: &str, stage: &Stage) -> Result<Vec<u8>, StoreError> {
    let row = match old.map(decode_held).transpose()? {
        Some(mut row) => {
            row.last_pass.clone_from(&stage.pass);
            row.sets = sets.to_vec();
            row
        }
        None => HeldDeletion {
            source: stage.source.clone(),
            uri: uri.to_owned(),
            sets: sets.to_vec(),
            pass: stage.pass.clone(),
            last_pass: stage.pass.clone(),
            ..HeldDeletion::default()
        },
    };
    encode(&row)
}

impl Store {
    /// The staged and held deletions of `source` (every source when `None`), in URI order.
    ///
    /// # Errors
    /// [`StoreError::Database`]; [`StoreError::Corrupt`] for an unreadable row.
    pub fn held_deletions(&self, source: Option<&str>) -> Result<Vec<HeldDeletion>, StoreError> {
        let table = &self.inner.trees.held;
        let rows = match source {
            Some(s) => table.scan_prefix(pair_prefix(s.as_bytes())),
            None => table.iter(),
        };
        rows.map(|kv| decode_held(&kv?.1)).collect()
    }

    /// The first `limit` staged and held deletions of `source`, in URI order: a page shows a
    /// few without reading them all.
    ///
    /// # Errors
    /// As [`Store::held_deletions`].
    pub fn held_deletions_first(&self, source: &str, limit: usize) -> Result<Vec<HeldDeletion>, StoreError> {
        let rows = self.inner.trees.held.scan_prefix(pair_prefix(source.as_bytes()));
        rows.take(limit).map(|kv| decode_held(&kv?.1)).collect()
    }

    /// Judges the deletions `settle.pass` staged for `settle.source` (see the module docs): at
    /// most the limit, they are applied; more, they are held. A complete pass also counts as
    /// finding every held deletion of the source again, and with `confirm_deletions` releases
    /// those found often enough.
    ///
    /// # Errors
    /// As [`Store::apply`].
    pub fn settle_deletions(&self, settle: &Settle<'_>) -> Result<Settled, StoreError> {
        let rows = self.held_deletions(Some(settle.source))?;
        if rows.is_empty() {
            return Ok(Settled::default());
        }
        let now = W3cDateTime::now();
        let live = self.set_info(settle.source)?.map_or(0, |i| i.live);
        // A pass that read the whole inventory staged again everything still missing: any
        // other row names a resource it found listed, and is cancelled.
        let (rows, listed): (Vec<_>, Vec<_>) =
            rows.into_iter().partition(|r| !settle.listed_all || r.last_pass == settle.pass);
        // This pass's deletions: what it staged, what it found again, and what a pass that
        // stopped before judging left staged.
        let (judged, rest): (Vec<_>, Vec<_>) = rows.into_iter().partition(|r| !r.held || r.last_pass == settle.pass);
        let hold = settle.limit.holds(judged.len() as u64, live);
        let mut release = Vec::new();
        let mut keep = Vec::new();
        for mut row in judged.into_iter().chain(rest) {
            let this_pass = !row.held || row.last_pass == settle.pass;
            if this_pass && !hold {
                release.push(row);
                continue;
            }
            if settle.complete && confirmed_again(&row, settle.confirm, now) {
                row.found += 1;
                row.last_found = now;
            }
            if settle.confirm.is_some_and(|(n, _)| row.found >= n) {
                release.push(row);
                continue;
            }
            row.held = true;
            keep.push(row);
        }
        let newly_held = keep.iter().filter(|r| r.last_pass == settle.pass && r.pass == settle.pass).count() as u64;
        let applied = self.release(&release, &keep, &listed)?;
        Ok(Settled {
            applied,
            newly_held,
            held: keep.len() as u64,
            held_since: keep.iter().map(|r| r.first_seen).min(),
        })
    }

    /// `tributary deletions apply`: applies and publishes the held deletions of `source`.
    ///
    /// # Errors
    /// As [`Store::apply`].
    pub fn apply_held(&self, source: &str) -> Result<u64, StoreError> {
        let rows = self.held_deletions(Some(source))?;
        self.release(&rows, &[], &[])
    }

    /// `tributary deletions keep`: drops the held deletions of `source`, keeping the resources.
    ///
    /// # Errors
    /// As [`Store::apply`].
    pub fn keep_held(&self, source: &str) -> Result<u64, StoreError> {
        let rows = self.held_deletions(Some(source))?;
        let mut batch = Batch::new();
        for r in &rows {
            batch.unhold(&r.source, &r.uri);
        }
        self.apply(&mut batch)?;
        Ok(rows.len() as u64)
    }

    /// Deletes the records of `release` (publishing the deletions), rewrites `keep` and drops
    /// `cancel`, in one commit; returns the deletions applied.
    fn release(
        &self,
        release: &[HeldDeletion],
        keep: &[HeldDeletion],
        cancel: &[HeldDeletion],
    ) -> Result<u64, StoreError> {
        let mut batch = Batch::new();
        for r in cancel {
            batch.unhold(&r.source, &r.uri);
        }
        for r in release {
            let sets: Vec<&str> = r.sets.iter().map(String::as_str).collect();
            batch.delete(&sets, &r.uri);
            batch.unhold(&r.source, &r.uri);
        }
        for r in keep {
            batch.rehold(r.clone());
        }
        if batch.is_empty() {
            return Ok(0);
        }
        let applied = self.apply(&mut batch)?;
        Ok(applied.ops.iter().filter(|o| o.outcome == super::Outcome::Deleted).count() as u64)
    }

    /// The takedowns, by target.
    ///
    /// # Errors
    /// [`StoreError::Database`]; [`StoreError::Corrupt`] for an unreadable row.
    pub fn takedowns(&self) -> Result<Vec<Takedown>, StoreError> {
        self.inner.trees.takedowns.iter().map(|kv| decode_takedown(&kv?.1)).collect()
    }

    /// The takedown matching any of `keys` (see [`uri_key`], [`sha_key`]), if one does.
    ///
    /// # Errors
    /// [`StoreError::Database`].
    pub fn takedown_matching(&self, keys: &[String]) -> Result<Option<Takedown>, StoreError> {
        let target = {
            let index = self.inner.takedowns.read().unwrap_or_else(|p| p.into_inner());
            index.matching(keys.iter().map(String::as_str)).map(str::to_owned)
        };
        match target {
            Some(t) => self.inner.trees.takedowns.get(t.as_bytes())?.map(|v| decode_takedown(&v)).transpose(),
            None => Ok(None),
        }
    }

    /// Takes down: deletes `records` (each `(sets, uri)`, publishing the deletions) and saves
    /// `takedown`, whose keys refuse every later upsert that matches, in one commit.
    ///
    /// # Errors
    /// [`StoreError::InvalidKey`] for an empty target; as [`Store::apply`].
    pub fn take_down(&self, takedown: &Takedown, records: &[(Vec<String>, String)]) -> Result<u64, StoreError> {
        check_key("takedown target", &takedown.target)?;
        let mut batch = Batch::new();
        for (sets, uri) in records {
            let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
            batch.delete(&sets, uri);
        }
        batch.takedown(takedown.clone());
        let applied = self.apply(&mut batch)?;
        Ok(applied.ops.iter().filter(|o| o.outcome == super::Outcome::Deleted).count() as u64)
    }

    /// Lifts the takedown of `target`; returns it, or `None` when there was none.
    ///
    /// # Errors
    /// [`StoreError::Database`].
    pub fn lift_takedown(&self, target: &str) -> Result<Option<Takedown>, StoreError> {
        let Some(v) = self.inner.trees.takedowns.get(target.as_bytes())? else { return Ok(None) };
        let takedown = decode_takedown(&v)?;
        let mut batch = Batch::new();
        batch.lift(target);
        self.apply(&mut batch)?;
        Ok(Some(takedown))
    }
}

impl super::Inner {
    /// Rebuilds the in-memory match keys after a takedown was added or lifted.
    pub(super) fn reload_takedowns(&self) -> Result<(), StoreError> {
        let (index, _) = load(&self.trees)?;
        *self.takedowns.write().unwrap_or_else(|p| p.into_inner()) = index;
        Ok(())
    }
}

/// Whether a held deletion counts as found again now: a poll interval after the last time.
fn confirmed_again(row: &HeldDeletion, confirm: Option<(u32, std::time::Duration)>, now: W3cDateTime) -> bool {
    let Some((_, interval)) = confirm else { return false };
    let since = now.unix_timestamp() - row.last_found.unix_timestamp();
    row.found == 0 || since >= i64::try_from(interval.as_secs()).unwrap_or(i64::MAX)
}

/// The match keys of a record: its upstream and origin URIs and its digest.
pub fn record_keys(upstream: &str, origin: &str, sha256_hex: &str) -> [String; 3] {
    [uri_key(upstream), uri_key(origin), sha_key(sha256_hex)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_limit_holds_past_fifty_and_a_tenth() {
        let d = DeletionLimit::default();
        assert!(!d.holds(50, 100), "50 is not more than 50");
        assert!(d.holds(51, 100));
        assert!(!d.holds(60, 1000), "a 6% share");
        assert!(d.holds(290, 300));
        let count = DeletionLimit { count: Some(5), percent: None };
        assert!(count.holds(6, 1_000_000) && !count.holds(5, 5));
        let share = DeletionLimit { count: None, percent: Some(1.0) };
        assert!(share.holds(2, 100) && !share.holds(1, 100));
        assert!(!DeletionLimit::UNLIMITED.holds(u64::MAX, 1));
        assert_eq!(DeletionLimit::default().to_string(), "50 and 10%");
    }
}
