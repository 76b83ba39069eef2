//! The observer of the power-cut test: what a Destination of Tributary saw, all along. A task
//! reads each set's change log (`api/changes`) and its Change Lists every 100 ms, and a
//! WebSub subscriber per set receives Tributary's own change notifications; every change seen
//! goes into [`Memory`] with where and in which run of Tributary it was seen. Requests made
//! while Tributary is down simply fail, and the next round tries again.
//!
//! A change is `(uri, change, datetime)`, all as text. A log position, once served, is
//! Tributary's promise: the same position must always hold the same change, so a sighting
//! that contradicts an earlier one is recorded at once as a reused position.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tributary::model::{Document, Entry, ReadOptions, W3cDateTime, read_document};

use crate::support::subscriber::{OnPost, OnVerify, Subscriber};

/// How often the observer reads.
const EVERY: Duration = Duration::from_millis(100);
/// Rows per `api/changes` request (its maximum), and pages per round.
const PAGE: usize = 500;
const PAGES_PER_ROUND: usize = 40;

/// One change of a set's log, as served.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct Change {
    pub(super) uri: String,
    pub(super) change: String,
    pub(super) datetime: String,
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} at {}", self.change, self.uri, self.datetime)
    }
}

impl Change {
    /// A Change List or notification entry's change; `None` if it lacks one of the three.
    pub(super) fn of_entry(e: &Entry) -> Option<Change> {
        let md = e.md.as_ref()?;
        Some(Change { uri: e.loc.clone(), change: md.change?.as_str().to_owned(), datetime: md.datetime?.to_string() })
    }

    /// An `api/changes` row's change, its datetime written as the Change Lists write it.
    pub(super) fn of_row(row: &serde_json::Value) -> Option<(u64, Change)> {
        let datetime: W3cDateTime = row["datetime"].as_str()?.parse().ok()?;
        let change = Change {
            uri: row["uri"].as_str()?.to_owned(),
            change: row["change"].as_str()?.to_owned(),
            datetime: datetime.to_string(),
        };
        Some((row["seq"].as_u64()?, change))
    }
}

/// A change seen at a log position.
#[derive(Debug, Clone)]
pub(super) struct Sighting {
    /// The change first seen there, which the position must keep.
    pub(super) change: Change,
    /// Where: `api/changes` or `changelist-N.xml`.
    pub(super) seen_in: String,
    /// In which run of Tributary (1 = before the first cut).
    pub(super) run: usize,
    /// What the position was last seen holding, when that differs from `change` (a reuse,
    /// already reported): later sightings are compared with it, not reported again.
    pub(super) latest: Option<Change>,
    /// Already reported as lost after a cut: not again, unless the position is reused.
    pub(super) reported_lost: bool,
}

impl Sighting {
    pub(super) fn new(change: Change, seen_in: String, run: usize) -> Sighting {
        Sighting { change, seen_in, run, latest: None, reported_lost: false }
    }

    /// What the position was last seen holding.
    pub(super) fn latest(&self) -> &Change {
        self.latest.as_ref().unwrap_or(&self.change)
    }
}

impl std::fmt::Display for Sighting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (seen in {}, run {})", self.change, self.seen_in, self.run)
    }
}

/// A closed Change List as read: the positions it holds and the sha-256 of its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ClosedList {
    pub(super) first: u64,
    pub(super) count: u64,
    pub(super) sha256: String,
}

/// Everything the observer saw.
#[derive(Debug, Default)]
pub(super) struct Memory {
    /// `(set, position)` → the change seen there.
    pub(super) positions: BTreeMap<(String, u64), Sighting>,
    /// `(set, change)` notified → `(run, reported as lost)`.
    pub(super) notified: BTreeMap<(String, Change), (usize, bool)>,
    /// `(set, n)` → closed Change List `n` as first read, and the run it was read in.
    pub(super) closed: BTreeMap<(String, u64), (ClosedList, usize)>,
    /// Reused positions seen while Tributary ran, as messages, with the run they were seen in.
    pub(super) live_reuses: Vec<(usize, String)>,
    /// Notifications that could not be read, as messages.
    pub(super) bad_notifications: Vec<(usize, String)>,
    /// The `api/changes` cursor of each set.
    pub(super) after: BTreeMap<String, u64>,
    /// Tributary's current run.
    pub(super) run: usize,
}

impl Memory {
    /// Records that `set` served `change` at `position`; a different change than last seen
    /// there is a reused position, reported once. The first change seen stays, for the next
    /// check to look for.
    pub(super) fn saw(&mut self, set: &str, position: u64, change: Change, seen_in: &str) {
        let run = self.run;
        match self.positions.entry((set.to_owned(), position)) {
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(Sighting::new(change, seen_in.to_owned(), run));
            }
            std::collections::btree_map::Entry::Occupied(mut o) => {
                if *o.get().latest() != change {
                    let was = o.get();
                    let msg = format!(
                        "set {set} position {position}: the observer saw {was}; then {change} (seen in {seen_in}, run {run})"
                    );
                    self.live_reuses.push((run, msg));
                    o.get_mut().latest = Some(change);
                }
            }
        }
    }
}

/// The observer: its memory, its subscribers, and the task that polls.
pub(super) struct Observer {
    pub(super) memory: Arc<Mutex<Memory>>,
    subscribers: Vec<(String, Subscriber)>,
    /// Deliveries of each subscriber already taken into memory.
    absorbed: Arc<Mutex<Vec<usize>>>,
    base: String,
    client: reqwest::Client,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A locked memory, whatever a panicking holder left.
pub(super) fn lock(memory: &Mutex<Memory>) -> std::sync::MutexGuard<'_, Memory> {
    memory.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Observer {
    /// Starts observing Tributary at `base` (its sets `sets`) for at most `limit`.
    pub(super) async fn start(base: &str, sets: &[&str], limit: Duration) -> Observer {
        let memory = Arc::new(Mutex::new(Memory { run: 1, ..Memory::default() }));
        let mut subscribers = Vec::new();
        for set in sets {
            subscribers.push((set.to_string(), Subscriber::start(OnPost::Accept, OnVerify::Echo).await));
        }
        let absorbed = Arc::new(Mutex::new(vec![0; sets.len()]));
        let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
        let poller = Poller {
            memory: memory.clone(),
            subscribers: subscribers.clone(),
            absorbed: absorbed.clone(),
            base: base.to_owned(),
            client: client.clone(),
        };
        let task = tokio::spawn(poller.run(Instant::now() + limit));
        Observer { memory, subscribers, absorbed, base: base.to_owned(), client, task }
    }

    /// Subscribes to every set's notifications at Tributary's hub (again after a restart:
    /// the hub may have lost the subscription with the rest).
    pub(super) async fn subscribe(&self) -> Result<(), String> {
        for (set, sub) in &self.subscribers {
            let topic = format!("{}sets/{set}/notifications", self.base);
            let form = url::form_urlencoded::Serializer::new(String::new())
                .append_pair("hub.mode", "subscribe")
                .append_pair("hub.topic", &topic)
                .append_pair("hub.callback", &sub.callback())
                .append_pair("hub.lease_seconds", "86400")
                .finish();
            let r = self
                .client
                .post(format!("{}hub", self.base))
                .header("Content-Type", "application/x-www-form-urlencoded")
                .body(form)
                .send()
                .await
                .map_err(|e| format!("subscribing to {topic}: {e}"))?;
            if r.status().as_u16() != 202 {
                return Err(format!("subscribing to {topic}: {}", r.status()));
            }
        }
        Ok(())
    }

    /// Notifications received so far, in all.
    pub(super) fn deliveries(&self) -> usize {
        self.subscribers.iter().map(|(_, s)| s.deliveries().len()).sum()
    }

    /// Takes the notifications received so far into memory now (the task does it too).
    pub(super) fn absorb_notifications(&self) {
        absorb(&self.memory, &self.subscribers, &self.absorbed);
    }
}

/// The polling task's share of the observer.
struct Poller {
    memory: Arc<Mutex<Memory>>,
    subscribers: Vec<(String, Subscriber)>,
    absorbed: Arc<Mutex<Vec<usize>>>,
    base: String,
    client: reqwest::Client,
}

impl Poller {
    async fn run(self, deadline: Instant) {
        while Instant::now() < deadline {
            for (set, _) in &self.subscribers {
                self.read_log(set).await;
                self.read_change_lists(set).await;
            }
            absorb(&self.memory, &self.subscribers, &self.absorbed);
            tokio::time::sleep(EVERY).await;
        }
    }

    async fn get(&self, url: &str) -> Option<Vec<u8>> {
        let r = self.client.get(url).send().await.ok()?;
        if !r.status().is_success() {
            return None;
        }
        Some(r.bytes().await.ok()?.to_vec())
    }

    /// The set's log forward from the cursor.
    async fn read_log(&self, set: &str) {
        for _ in 0..PAGES_PER_ROUND {
            let after = lock(&self.memory).after.get(set).copied().unwrap_or(0);
            let url = format!("{}api/changes?set={set}&after={after}&limit={PAGE}", self.base);
            let Some(body) = self.get(&url).await else { return };
            let Ok(json) = serde_json::from_slice::<serde_json::Value>(&body) else { return };
            let rows: Vec<(u64, Change)> =
                json["changes"].as_array().into_iter().flatten().filter_map(Change::of_row).collect();
            let mut memory = lock(&self.memory);
            for (position, change) in &rows {
                memory.saw(set, *position, change.clone(), "api/changes");
            }
            if let Some((last, _)) = rows.last() {
                memory.after.insert(set.to_owned(), *last);
            }
            if rows.len() < PAGE {
                return;
            }
        }
    }

    /// The set's Change Lists: closed ones once (they never change), the open one every time.
    async fn read_change_lists(&self, set: &str) {
        let index_url = format!("{}sets/{set}/changelist-index.xml", self.base);
        let Some(index) = self.get(&index_url).await.and_then(|b| parse(&b, &index_url)) else { return };
        let mut first = 1;
        for (i, list) in index.entries.iter().enumerate() {
            let n = i as u64 + 1;
            let closed = list.md.as_ref().is_some_and(|md| md.until.is_some());
            let known = lock(&self.memory).closed.get(&(set.to_owned(), n)).cloned();
            if let Some((c, _)) = known.filter(|(c, _)| closed && c.first == first) {
                first += c.count;
                continue;
            }
            let Some(body) = self.get(&list.loc).await else { return };
            let Some(doc) = parse(&body, &list.loc) else { return };
            let mut memory = lock(&self.memory);
            let name = format!("changelist-{n}.xml");
            for (k, change) in doc.entries.iter().filter_map(Change::of_entry).enumerate() {
                memory.saw(set, first + k as u64, change, &name);
            }
            let count = doc.entries.len() as u64;
            if closed {
                let sha256 = hex::encode(Sha256::digest(&body));
                let run = memory.run;
                memory.closed.entry((set.to_owned(), n)).or_insert((ClosedList { first, count, sha256 }, run));
            }
            first += count;
        }
    }
}

/// A ResourceSync document, or `None` if it does not parse.
pub(super) fn parse(body: &[u8], name: &str) -> Option<Document> {
    read_document(body, ReadOptions::named(name)).ok().map(|(d, _)| d)
}

/// Takes each subscriber's new deliveries into memory: every entry is a change notified.
fn absorb(memory: &Mutex<Memory>, subscribers: &[(String, Subscriber)], absorbed: &Mutex<Vec<usize>>) {
    let mut absorbed = absorbed.lock().unwrap_or_else(PoisonError::into_inner);
    for (i, (set, sub)) in subscribers.iter().enumerate() {
        let deliveries = sub.deliveries();
        let mut memory = lock(memory);
        let run = memory.run;
        for d in &deliveries[absorbed[i].min(deliveries.len())..] {
            let Some(doc) = parse(&d.body, "notification") else {
                let text = String::from_utf8_lossy(&d.body).into_owned();
                memory.bad_notifications.push((run, format!("set {set}: a notification that does not parse: {text}")));
                continue;
            };
            for change in doc.entries.iter().filter_map(Change::of_entry) {
                memory.notified.entry((set.clone(), change)).or_insert((run, false));
            }
        }
        absorbed[i] = deliveries.len();
    }
}
