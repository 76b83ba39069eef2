//! Per-source harvest state: what has been processed, so a restart resumes instead of
//! starting over, plus the status a dashboard shows.
//!
//! The store treats it as the harvester's: a plain serde struct stored as JSON, so fields can
//! be added (with `#[serde(default)]`) without a store format change, and an older build
//! reading a newer row ignores what it does not know. Saving it inside a [`Batch`] makes it
//! commit with the records and events it describes.
//!
//! [`Batch`]: super::Batch

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Store;
use super::codec::{check_key, w3c_opt};
use super::error::StoreError;
use crate::model::W3cDateTime;

/// What the harvester has processed for one source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SourceState {
    /// `at` of the last Resource List fully incorporated (the baseline).
    #[serde(with = "w3c_opt")]
    pub resource_list_at: Option<W3cDateTime>,
    /// URI of the last Change List processed.
    pub change_list: Option<String>,
    /// Entries of that Change List already processed (to resume inside an open list).
    pub change_list_position: Option<u64>,
    /// Datetime of the last change processed.
    #[serde(with = "w3c_opt")]
    pub last_change: Option<W3cDateTime>,
    /// Conditional-GET validators per document URL.
    pub documents: BTreeMap<String, DocumentValidators>,
    /// The Resource List (or Index) discovery last found, so a poll need not rediscover.
    pub resource_list: Option<String>,
    /// What the Source's Capability List offered when last discovered; `None` until then.
    pub capabilities: Option<KnownCapabilities>,
    /// True once a baseline completed for a Source that offers changes: polls then follow its
    /// Change List (or Change Dump) instead of diffing the Resource List.
    pub baselined: bool,
    /// Every change before this datetime (the Source's clock) is incorporated, and those of
    /// this very second seen so far: the baseline's `at`, the `until` of a closed list read to
    /// its end, or the `datetime` of the last change processed. Datetimes are often whole
    /// seconds, so a list not read before is read from this second on.
    #[serde(with = "w3c_opt")]
    pub changes_through: Option<W3cDateTime>,
    /// The last Change Dump package applied in full (its URL): passed over at the next poll
    /// even when its `until` is the second of `changes_through`.
    pub change_dump_package: Option<String>,
    /// A feed source's `sx:sharing until` per feed URL at the last poll (FeedSync §4.1): a
    /// feed whose `since` is past it has dropped items this subscriber never saw.
    pub feed_until: BTreeMap<String, String>,
    /// The `until` of the last change notification applied (Change Notification §3: each
    /// notification's `from` meets the previous one's `until`, so a `from` later than this is a
    /// gap). Written in the batch that applies the notification; never moves the Change List
    /// position, which only polling advances.
    #[serde(with = "w3c_opt")]
    pub push_until: Option<W3cDateTime>,
    /// An OAI-PMH source's repository and harvest position; `None` for other sources, and
    /// then not written, so other sources' rows and exports are as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oai: Option<OaiState>,
    /// Since when the operator has the source paused (`tributary pause`): no polls, no push
    /// processing. `None` while it runs, and then not written, so rows of earlier builds read
    /// the same.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "w3c_opt")]
    pub paused: Option<W3cDateTime>,
    /// Dashboard status.
    pub status: SourceStatus,
    /// The last passes, oldest first, at most [`PASS_HISTORY`] (the source's page shows them).
    /// Not written while empty, so rows of earlier builds read the same.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub passes: Vec<PassRecord>,
}

/// Passes a source's state remembers: enough to see a pattern on the source's page, few enough
/// that the row every status read decodes stays small.
pub const PASS_HISTORY: usize = 20;

/// Longest error text a [`PassRecord`] keeps (the full chain of the last error is in
/// [`SourceStatus::last_error`]).
const PASS_ERROR_CHARS: usize = 500;

/// One finished pass over a source, as its history keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PassRecord {
    /// When the pass started.
    #[serde(with = "w3c_opt")]
    pub started: Option<W3cDateTime>,
    /// When it ended.
    #[serde(with = "w3c_opt")]
    pub finished: Option<W3cDateTime>,
    /// What it did (with `partial` when it failed part-way).
    pub counts: PassCounts,
    /// Why it failed, if it did (cut to a few hundred characters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl SourceState {
    /// Appends a finished pass to the history, dropping the oldest beyond [`PASS_HISTORY`].
    pub fn record_pass(&mut self, mut pass: PassRecord) {
        if let Some(e) = &mut pass.error
            && let Some((cut, _)) = e.char_indices().nth(PASS_ERROR_CHARS)
        {
            e.truncate(cut);
            e.push('…');
        }
        self.passes.push(pass);
        let excess = self.passes.len().saturating_sub(PASS_HISTORY);
        self.passes.drain(..excess);
    }
}

/// What an OAI-PMH source's harvester keeps between polls: what Identify said (shown on the
/// source's page) and where the next incremental harvest starts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct OaiState {
    /// Identify's `repositoryName`.
    pub repository_name: String,
    /// Identify's `adminEmail`s.
    pub admin_emails: Vec<String>,
    /// Identify's `granularity`, as written.
    pub granularity: String,
    /// Identify's `earliestDatestamp`, as written.
    pub earliest_datestamp: String,
    /// Identify's `deletedRecord`: `no`, `transient` or `persistent`.
    pub deleted_record: String,
    /// The harvested format's `metadataNamespace` (and `schema`), from ListMetadataFormats.
    pub metadata_namespace: String,
    /// The harvested format's `schema`.
    pub metadata_schema: String,
    /// The `responseDate` of the first response of the last harvest that read its lists in
    /// full: the next incremental harvest starts there, less an overlap.
    pub response_date: Option<String>,
    /// When the last complete list without `from` ended (Tributary's clock): deletions of a
    /// repository that keeps none are found by such a list.
    #[serde(with = "w3c_opt")]
    pub full_list_at: Option<W3cDateTime>,
    /// The width in seconds of the date windows the repository last accepted after refusing a
    /// wider range; `None` while it takes whole ranges (and then not written, so rows and
    /// exports of earlier builds read the same).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_secs: Option<u64>,
}

/// The capability documents of a Source, as absolute URLs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct KnownCapabilities {
    /// Resource List or Resource List Index.
    pub resource_list: Option<String>,
    /// Change List or Change List Index.
    pub change_list: Option<String>,
    /// Resource Dump (or its index).
    pub resource_dump: Option<String>,
    /// Change Dump (or its index).
    pub change_dump: Option<String>,
    /// The change-notification channel (Change Notification §5), when the Capability List
    /// advertises one.
    pub change_notification: Option<NotificationChannel>,
}

/// A WebSub topic and the hub it is published through, as absolute URLs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NotificationChannel {
    /// The topic URI (the channel's `<loc>`).
    pub topic: String,
    /// The hub (its `rs:ln rel="hub"`).
    pub hub: String,
}

/// HTTP validators of one fetched document.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DocumentValidators {
    /// `ETag` as received.
    pub etag: Option<String>,
    /// `Last-Modified` as received (HTTP-date text, kept verbatim for `If-Modified-Since`).
    pub last_modified: Option<String>,
}

/// What the dashboard shows about a source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SourceStatus {
    /// Start of the last harvest attempt.
    #[serde(with = "w3c_opt")]
    pub last_attempt: Option<W3cDateTime>,
    /// End of the last successful harvest.
    #[serde(with = "w3c_opt")]
    pub last_success: Option<W3cDateTime>,
    /// The last error, as shown to the operator.
    pub last_error: Option<String>,
    /// Resources incorporated in total.
    pub resources: u64,
    /// Bitstreams that failed verification or fetching in total.
    pub failures: u64,
    /// Resources recorded as failing after the last attempt (see [`Store::failures`]).
    pub failing: u64,
    /// What the harvester is doing with the source now.
    pub state: HarvestState,
    /// Attempts in a row that ended in an error (0 after a success).
    pub consecutive_failures: u32,
    /// When the next attempt is due (`tributary run`).
    #[serde(with = "w3c_opt")]
    pub next_attempt: Option<W3cDateTime>,
    /// Counts of the last completed attempt.
    pub last_pass: PassCounts,
    /// The origin the source needs that asked (`Retry-After`) not to be contacted before a
    /// time, when the last attempt met it; not written when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parked: Option<ParkedOrigin>,
    /// Configured URLs that answered a permanent redirect (301, 308), each with where it led:
    /// `sources.toml` should be updated. Not written when empty.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub moved: BTreeMap<String, String>,
    /// Deletions held for the operator (more than `max_deletions` in one pass).
    #[serde(skip_serializing_if = "is_zero")]
    pub held_deletions: u64,
    /// When the oldest held deletion was first found.
    #[serde(skip_serializing_if = "Option::is_none", with = "w3c_opt")]
    pub held_since: Option<W3cDateTime>,
}

/// An origin parked until a time, as a source's status shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParkedOrigin {
    /// `scheme://host[:port]`.
    pub origin: String,
    /// Nothing is sent to it before this time.
    #[serde(with = "super::codec::w3c")]
    pub until: W3cDateTime,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What a source is doing, for the dashboard.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HarvestState {
    /// Waiting for its next poll; the last attempt succeeded (or none was made yet).
    #[default]
    Idle,
    /// A harvest is running.
    Harvesting,
    /// The last attempt failed; waiting longer than the poll interval before retrying.
    BackingOff,
    /// Several attempts in a row failed.
    Failing,
}

/// Resource counts of one harvest attempt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PassCounts {
    /// Resources fetched, verified and stored (created or updated).
    pub fetched: u64,
    /// Resources already held in their listed state.
    pub unchanged: u64,
    /// Resources that failed fetching or verification.
    pub failed: u64,
    /// Resources marked deleted.
    pub deleted: u64,
    /// The attempt failed part-way, and these counts are what it did before (kept). Not
    /// written when false, so rows of earlier builds read the same.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
}

pub(super) fn encode(state: &SourceState) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(state).map_err(|e| StoreError::corrupt("source state (encoding)", e))
}

pub(super) fn decode(bytes: &[u8]) -> Result<SourceState, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::corrupt("source state", e))
}

impl Store {
    /// The saved state of a source, if any.
    ///
    /// # Errors
    /// [`StoreError::Database`] / [`StoreError::Corrupt`].
    pub fn source_state(&self, source: &str) -> Result<Option<SourceState>, StoreError> {
        self.inner.trees.sources.get(source.as_bytes())?.map(|v| decode(&v)).transpose()
    }

    /// Saves a source's state on its own (e.g. dashboard status after a failed attempt),
    /// durably. To save it together with records, use [`Batch::source_state`].
    ///
    /// [`Batch::source_state`]: super::Batch::source_state
    ///
    /// # Errors
    /// [`StoreError::InvalidKey`] for an empty id; [`StoreError::Database`].
    pub fn save_source_state(&self, source: &str, state: &SourceState) -> Result<(), StoreError> {
        check_key("source id", source)?;
        self.inner.trees.sources.insert(source.as_bytes(), encode(state)?)
    }

    /// Forgets a source's own rows — its state, its failure rows and its feed items' states — in
    /// one commit, after its records were deleted: what `tributary source forget` ends with.
    /// Its records and change events stay (deleted records keep their history).
    ///
    /// # Errors
    /// [`StoreError::InvalidKey`] for an empty id; [`StoreError::Database`].
    pub fn remove_source(&self, source: &str) -> Result<(), StoreError> {
        check_key("source id", source)?;
        let trees = &self.inner.trees;
        let _writes = self.inner.write_lock();
        let mut w = super::table::Overlay::default();
        w.remove(&trees.sources, source.as_bytes());
        let prefix = super::codec::pair_prefix(source.as_bytes());
        for table in [&trees.failures, &trees.feed_items] {
            for key in table.scan_prefix(&prefix).keys() {
                w.remove(table, &key?);
            }
        }
        self.inner.db.commit(w)
    }

    /// Every source with saved state, by id.
    ///
    /// # Errors
    /// As [`Store::source_state`].
    pub fn source_states(&self) -> Result<Vec<(String, SourceState)>, StoreError> {
        let mut out = Vec::new();
        for kv in self.inner.trees.sources.iter() {
            let (k, v) = kv?;
            out.push((String::from_utf8_lossy(&k).into_owned(), decode(&v)?));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_without_a_history_read_and_write_as_before() {
        let old = br#"{"baselined":true,"status":{"failures":2}}"#;
        let state = decode(old).unwrap();
        assert!(state.baselined && state.passes.is_empty() && state.status.failures == 2);
        assert!(!String::from_utf8(encode(&state).unwrap()).unwrap().contains("passes"));
    }

    #[test]
    fn the_history_keeps_the_newest_passes_and_short_errors() {
        let mut state = SourceState::default();
        for n in 0..(PASS_HISTORY as u64 + 5) {
            let counts = PassCounts { fetched: n, ..PassCounts::default() };
            state.record_pass(PassRecord { counts, error: Some("x".repeat(2000)), ..PassRecord::default() });
        }
        assert_eq!(state.passes.len(), PASS_HISTORY);
        assert_eq!((state.passes[0].counts.fetched, state.passes[PASS_HISTORY - 1].counts.fetched), (5, 24));
        assert_eq!(state.passes[0].error.as_ref().unwrap().chars().count(), PASS_ERROR_CHARS + 1);
        assert_eq!(decode(&encode(&state).unwrap()).unwrap(), state);
    }
}
