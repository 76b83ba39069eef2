//! `verify`: re-hash every blob and cross-check every record, index entry, change event and
//! counter against each other — the invariants `docs/STORE.md` lists, checked from scratch.
//!
//! It reads everything once and keeps only ids and counts in memory (32 bytes per blob), so
//! it runs on a store of millions of records. It never modifies the store.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;

use super::blob::{BlobId, BlobRow, Place};
use super::codec;
use super::error::StoreError;
use super::log::{ChunkEvents, Counters, decode_event};
use super::record::{Record, keys};
use super::report::VerifyReport;
use super::row;
use super::writer::Hashers;
use super::{Inner, Store};
use crate::model::W3cDateTime;

/// Per set, what the log holds: `(events, last seq)`.
type LogTally = HashMap<String, (u64, u64)>;

/// Events per resource and set, keyed by a hash of both: 16 bytes per pair, not the URIs.
type ResourceTally = HashMap<u64, u64>;

fn resource_key(uri: &str, set: &str) -> u64 {
    use std::hash::Hasher;
    // `DefaultHasher::new` has fixed keys: a pair hashes alike in both walks.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    h.write(uri.as_bytes());
    h.write_u8(0);
    h.write(set.as_bytes());
    h.finish()
}

impl Store {
    /// Checks the whole store; see [`VerifyReport`].
    ///
    /// # Errors
    /// Only when the database cannot be read at all; inconsistencies are reported, not errors.
    pub fn verify(&self) -> Result<VerifyReport, StoreError> {
        let inner = &self.inner;
        // Blobs put by this process but not yet committed are checked too.
        inner.commit_pending()?;
        let mut r = VerifyReport::default();
        // Every block of every table, read once: fjall checks each block's checksum as it
        // reads it, so damage anywhere is reported here even in a table no walk below reads.
        for (name, table) in super::open::TABLES.iter().zip(inner.trees.all()) {
            if let Some(Err(e)) = table.iter().find(Result::is_err) {
                r.problem("database", *name, crate::error::chain(&e).to_string());
            }
        }
        let blobs = inner.verify_blobs(&mut r)?;
        inner.count_stray_files(&blobs, &mut r)?;
        let live = inner.verify_records(&blobs, &mut r)?;
        inner.verify_indexes(&mut r)?;
        let (log, per_resource) = inner.verify_log(&mut r)?;
        inner.verify_counters(&live, &log, &mut r)?;
        inner.verify_histories(per_resource, &mut r)?;
        for kv in inner.trees.sources.iter() {
            let (k, v) = kv?;
            if let Err(e) = serde_json::from_slice::<super::SourceState>(&v) {
                r.problem("source state", String::from_utf8_lossy(&k), e.to_string());
            }
        }
        for kv in inner.trees.failures.iter() {
            let (k, v) = kv?;
            if let Err(e) = super::failure::verify_row(&k, &v) {
                r.problem("failure", String::from_utf8_lossy(&k).replace('\0', " "), e.to_string());
            }
        }
        Ok(r)
    }
}

impl Inner {
    /// Re-hashes every blob; returns their lengths by id.
    fn verify_blobs(&self, r: &mut VerifyReport) -> Result<HashMap<BlobId, u64>, StoreError> {
        let mut lengths = HashMap::new();
        for kv in self.trees.blobs.iter() {
            let (k, v) = kv?;
            let Ok(raw) = <[u8; 32]>::try_from(k.as_ref()) else {
                r.problem("blob", hex::encode(&k), "key is not a sha-256");
                continue;
            };
            let id = BlobId(raw);
            match BlobRow::decode(&v) {
                Ok(row) => {
                    self.verify_blob(&id, &row, r);
                    self.verify_referrer(&id, &row, r)?;
                    lengths.insert(id, row.length);
                }
                Err(e) => r.problem("blob", id.to_hex(), e.to_string()),
            }
        }
        Ok(lengths)
    }

    fn verify_blob(&self, id: &BlobId, row: &BlobRow, r: &mut VerifyReport) {
        let mut hashers = Hashers::with(row.md5.is_some(), row.sha1.is_some());
        let length = match row.place {
            Place::Pack(loc) => match self.read_packed(id, loc, row.length) {
                Ok(data) => {
                    hashers.update(&data);
                    data.len() as u64
                }
                Err(e) => return r.problem("blob", id.to_hex(), format!("pack unreadable: {e}")),
            },
            Place::File => match hash_file(&self.blob_path(id), &mut hashers) {
                Ok(n) => n,
                Err(e) => return r.problem("blob", id.to_hex(), format!("file unreadable: {e}")),
            },
            Place::Object => match self.hash_object(id, row.length, &mut hashers) {
                Ok(n) => n,
                Err(e) => return r.problem("blob", id.to_hex(), format!("object unreadable: {e}")),
            },
        };
        r.blobs += 1;
        r.bytes += length;
        let d = hashers.finish();
        if length != row.length {
            r.problem("blob", id.to_hex(), format!("content is {length} bytes, row says {}", row.length));
        }
        if d.sha256 != id.0 {
            r.problem("blob", id.to_hex(), format!("content hashes to sha-256:{}", hex::encode(d.sha256)));
        }
        if d.md5 != row.md5 || d.sha1 != row.sha1 {
            r.problem("blob", id.to_hex(), "stored md5 or sha-1 does not match the content");
        }
    }

    /// The record a blob row names must be live with this content; a blob nothing names is
    /// counted (gc's to collect), not a problem.
    fn verify_referrer(&self, id: &BlobId, row: &BlobRow, r: &mut VerifyReport) -> Result<(), StoreError> {
        match &row.referrer {
            Some(uri) => {
                if self.live_record(uri)?.is_none_or(|rec| rec.sha256 != *id) {
                    r.problem("blob", id.to_hex(), format!("names {uri}, which is not a live record of this content"));
                }
            }
            None => {
                if self.trees.by_sha.scan_prefix(id.0).keys().next().transpose()?.is_none() {
                    r.unreferenced_blobs += 1;
                }
            }
        }
        Ok(())
    }

    fn count_stray_files(&self, blobs: &HashMap<BlobId, u64>, r: &mut VerifyReport) -> Result<(), StoreError> {
        for (id, _) in self.blob_files()? {
            if id.is_none_or(|id| !blobs.contains_key(&id)) {
                r.stray_files += 1;
            }
        }
        let tmp = self.root.join("tmp");
        let entries = std::fs::read_dir(&tmp).map_err(|e| StoreError::io(&tmp, e))?;
        r.stray_files += entries.count() as u64;
        Ok(())
    }

    /// Checks each record against its blob and indexes; returns live records per set.
    fn verify_records(
        &self,
        blobs: &HashMap<BlobId, u64>,
        r: &mut VerifyReport,
    ) -> Result<HashMap<String, u64>, StoreError> {
        let mut live: HashMap<String, u64> = HashMap::new();
        for kv in self.trees.records.iter() {
            let (k, v) = kv?;
            let key = String::from_utf8_lossy(&k).into_owned();
            let rec: Record = match row::decode(&k, &v) {
                Ok(rec) => rec,
                Err(e) => {
                    r.problem("record", key, e.to_string());
                    continue;
                }
            };
            r.records += 1;
            if rec.is_deleted() {
                // A deleted record keeps its digests for history; its blob may be collected.
                continue;
            }
            match blobs.get(&rec.sha256) {
                None => r.problem("record", &key, format!("blob sha-256:{} is missing", rec.sha256)),
                Some(&len) if len != rec.length => {
                    r.problem("record", &key, format!("length {} but its blob has {len}", rec.length));
                }
                Some(_) => {}
            }
            self.check_record_indexes(&rec, r)?;
            for set in &rec.sets {
                *live.entry(set.clone()).or_default() += 1;
            }
        }
        Ok(live)
    }

    fn check_record_indexes(&self, rec: &Record, r: &mut VerifyReport) -> Result<(), StoreError> {
        let indexed = self.trees.by_sha.contains_key(keys::by_sha(&rec.sha256, &rec.uri))?;
        let named = self.blob_row(&rec.sha256)?.is_some_and(|b| b.referrer.as_deref() == Some(rec.uri.as_str()));
        match (named, indexed) {
            (false, false) => {
                r.problem("index by_sha256", &rec.uri, format!("no entry for sha-256:{}", rec.sha256));
            }
            (true, true) => {
                r.problem("index by_sha256", &rec.uri, "entry for the record its blob row names already");
            }
            _ => {}
        }
        let by_origin = self.trees.by_origin.contains_key(keys::by_origin(&rec.origin, &rec.uri))?;
        if !row::via_aggregator(rec) {
            if by_origin {
                r.problem("index by_origin", &rec.uri, "entry for a record fetched from its origin (found by name)");
            }
            return Ok(());
        }
        if !by_origin {
            r.problem("index by_origin", &rec.uri, format!("no entry for origin {}", rec.origin));
        }
        Ok(())
    }

    fn live_record(&self, uri: &str) -> Result<Option<Record>, StoreError> {
        let Some(v) = self.trees.records.get(uri.as_bytes())? else { return Ok(None) };
        Ok(row::decode(uri.as_bytes(), &v).ok().filter(|rec| !rec.is_deleted()))
    }

    /// Every index entry must point at a live record that agrees with it.
    fn verify_indexes(&self, r: &mut VerifyReport) -> Result<(), StoreError> {
        for key in self.trees.by_origin.iter().keys() {
            let key = key?;
            let Some(nul) = key.iter().position(|&b| b == 0) else {
                r.problem("index by_origin", hex::encode(&key), "malformed key");
                continue;
            };
            let (origin, uri) = (String::from_utf8_lossy(&key[..nul]), String::from_utf8_lossy(&key[nul + 1..]));
            if self.live_record(&uri)?.is_none_or(|rec| rec.origin != origin) {
                r.problem("index by_origin", uri, format!("dangling entry for origin {origin}"));
            }
        }
        for key in self.trees.by_sha.iter().keys() {
            let key = key?;
            let (sha, uri) = key.split_at(32.min(key.len()));
            let uri = String::from_utf8_lossy(uri);
            if self.live_record(&uri)?.is_none_or(|rec| rec.sha256.0 != sha) {
                r.problem("index by_sha256", uri, format!("dangling entry for sha-256:{}", hex::encode(sha)));
            }
        }
        Ok(())
    }

    /// Walks the log in key order: per set, seqs 1, 2, 3… (each chunk starting where its key
    /// says) and datetimes never decreasing, and each event's record exists.
    /// Also counts each resource's events per set, for [`Inner::verify_histories`].
    fn verify_log(&self, r: &mut VerifyReport) -> Result<(LogTally, ResourceTally), StoreError> {
        let mut tally: LogTally = HashMap::new();
        let mut per_resource = ResourceTally::new();
        let mut last_time: HashMap<String, W3cDateTime> = HashMap::new();
        for kv in self.trees.log.iter() {
            let (k, v) = kv?;
            let Some((set, first)) = split_event_key(&k) else {
                r.problem("event", hex::encode(&k), "malformed key");
                continue;
            };
            let events = match ChunkEvents::new(&v) {
                Ok(events) => events,
                Err(e) => {
                    r.problem("event", format!("{set} #{first}"), e.to_string());
                    continue;
                }
            };
            for (seq, bytes) in (first..).zip(events) {
                let key = format!("{set} #{seq}");
                let entry = tally.entry(set.clone()).or_default();
                if seq != entry.1 + 1 {
                    r.problem("event", &key, format!("sequence gap: expected #{}", entry.1 + 1));
                }
                *entry = (entry.0 + 1, seq);
                r.events += 1;
                let event = match bytes.and_then(decode_event) {
                    Ok(e) => e,
                    Err(e) => {
                        r.problem("event", key, e.to_string());
                        break;
                    }
                };
                if event.seq != seq {
                    r.problem("event", &key, format!("stored as #{seq} but says #{}", event.seq));
                }
                if last_time.get(&set).is_some_and(|t| event.datetime < *t) {
                    r.problem("event", &key, "datetime earlier than the previous event's");
                }
                if !self.trees.records.contains_key(event.uri.as_bytes())? {
                    r.problem("event", &key, format!("record {} does not exist", event.uri));
                }
                if event.prev.is_some_and(|p| p >= seq) {
                    r.problem("event", &key, "names a previous event that is not earlier");
                }
                *per_resource.entry(resource_key(&event.uri, &set)).or_default() += 1;
                last_time.insert(set.clone(), event.datetime);
            }
        }
        Ok((tally, per_resource))
    }

    /// Every record's history chains reach exactly the events the log holds for it: a chain
    /// that breaks, or events no chain reaches, are problems.
    fn verify_histories(&self, mut per_resource: ResourceTally, r: &mut VerifyReport) -> Result<(), StoreError> {
        for kv in self.trees.records.iter() {
            let (k, v) = kv?;
            let Ok(rec) = row::decode(&k, &v) else { continue }; // reported by verify_records
            for (set, head) in &rec.heads {
                let counted = per_resource.remove(&resource_key(&rec.uri, set)).unwrap_or(0);
                match self.chain(&rec.uri, set, *head) {
                    Err(e) => r.problem("history", &rec.uri, e.to_string()),
                    Ok(chain) if chain.len() as u64 != counted => r.problem(
                        "history",
                        &rec.uri,
                        format!("{} events in {set}, of which its history reaches {}", counted, chain.len()),
                    ),
                    Ok(_) => {}
                }
            }
        }
        if !per_resource.is_empty() {
            r.problem("history", "-", format!("events of {} resource/set pairs are in no history", per_resource.len()));
        }
        Ok(())
    }

    fn verify_counters(
        &self,
        live: &HashMap<String, u64>,
        log: &LogTally,
        r: &mut VerifyReport,
    ) -> Result<(), StoreError> {
        let mut seen = Vec::new();
        for kv in self.trees.sets.iter() {
            let (k, v) = kv?;
            let set = String::from_utf8_lossy(&k).into_owned();
            let c: Counters = match codec::decode("set counters", &v) {
                Ok(c) => c,
                Err(e) => {
                    r.problem("set counters", set, e.to_string());
                    continue;
                }
            };
            let (events, last) = log.get(&set).copied().unwrap_or_default();
            if c.last_seq != last || c.last_seq != events {
                r.problem(
                    "set counters",
                    &set,
                    format!("last seq {} but the log has {events} events up to #{last}", c.last_seq),
                );
            }
            let counted = live.get(&set).copied().unwrap_or_default();
            if c.live != counted {
                r.problem("set counters", &set, format!("{} live but {counted} live records list the set", c.live));
            }
            seen.push(set);
        }
        for set in log.keys().chain(live.keys()) {
            if !seen.contains(set) {
                r.problem("set counters", set, "missing for a set with events or records");
                seen.push(set.clone());
            }
        }
        Ok(())
    }
}

fn split_event_key(key: &[u8]) -> Option<(String, u64)> {
    let nul = key.iter().position(|&b| b == 0)?;
    let seq = <[u8; 8]>::try_from(&key[nul + 1..]).ok()?;
    Some((String::from_utf8_lossy(&key[..nul]).into_owned(), u64::from_be_bytes(seq)))
}

impl Inner {
    /// Reads the whole object back from the bucket and hashes it.
    fn hash_object(&self, id: &BlobId, length: u64, hashers: &mut Hashers) -> Result<u64, StoreError> {
        let mut reader = self.remote_for(id)?.reader(id, 0..length)?;
        // The length in the row, checked again by its caller: a shorter object reads short.
        hash_reader(&mut reader, hashers).map_err(|e| StoreError::io("object", e))
    }
}

fn hash_file(path: &std::path::Path, hashers: &mut Hashers) -> std::io::Result<u64> {
    hash_reader(&mut File::open(path)?, hashers)
}

fn hash_reader(file: &mut impl Read, hashers: &mut Hashers) -> std::io::Result<u64> {
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(total);
        }
        hashers.update(&buf[..n]);
        total += n as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_util::record;
    use crate::store::{Batch, Expected, NewRecord};

    /// Rewrites `uri`'s record with other history heads, as a damaged store might hold it.
    fn set_heads(store: &Store, uri: &str, heads: Vec<(String, u64)>) {
        let rec = Record { heads, ..store.record(uri).unwrap().unwrap() };
        store.inner.trees.records.insert(uri.as_bytes(), row::encode(&rec).unwrap()).unwrap();
    }

    fn history_problems(store: &Store) -> Vec<String> {
        let report = store.verify().unwrap();
        report.problems.iter().filter(|p| p.area == "history").map(|p| p.detail.clone()).collect()
    }

    #[test]
    fn broken_history_chains_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("store")).unwrap();
        let sha = store.put(&b"x"[..], &Expected::none()).unwrap().id;
        let (a, b) = ("http://t/a", "http://t/b");
        store.apply(Batch::new().upsert(&["s"], record(a, sha)).upsert(&["s"], record(b, sha))).unwrap();
        store.apply(Batch::new().delete(&["s"], a)).unwrap();
        assert!(store.verify().unwrap().is_clean());

        // a's events are #1 and #3: a head at #1 misses #3; one at b's #2 is another's.
        set_heads(&store, a, vec![("s".into(), 1)]);
        assert_eq!(history_problems(&store), ["2 events in s, of which its history reaches 1"]);
        set_heads(&store, a, vec![("s".into(), 2)]);
        let problems = history_problems(&store);
        assert!(problems.iter().any(|p| p.contains("event #2 is http://t/b's")), "{problems:?}");
        // No heads at all: a's events are in no history.
        set_heads(&store, a, vec![]);
        assert_eq!(history_problems(&store), ["events of 1 resource/set pairs are in no history"]);
        set_heads(&store, a, vec![("s".into(), 3)]);
        assert!(store.verify().unwrap().is_clean());
        assert_eq!(store.history(a).unwrap().len(), 2);
    }

    fn index_problems(store: &Store) -> Vec<(String, String)> {
        let report = store.verify().unwrap();
        report
            .problems
            .iter()
            .filter(|p| p.area.starts_with("index"))
            .map(|p| (p.area.to_owned(), p.detail.clone()))
            .collect()
    }

    /// Format 5: a record fetched from its origin has no `by_origin` row, any other has one.
    #[test]
    fn the_origin_index_holds_exactly_the_records_not_fetched_from_their_origin() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("store")).unwrap();
        let sha = store.put(&b"x"[..], &Expected::none()).unwrap().id;
        let direct = record("http://t/direct", sha);
        let aggregated = NewRecord { upstream: "http://t/upstream".into(), ..record("http://t/agg", sha) };
        store.apply(Batch::new().upsert(&["s"], direct.clone()).upsert(&["s"], aggregated.clone())).unwrap();
        assert!(store.verify().unwrap().is_clean());
        let by_origin = &store.inner.trees.by_origin;

        by_origin.insert(keys::by_origin(&direct.listing.origin, &direct.uri), Vec::new()).unwrap();
        let problems = index_problems(&store);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].1.contains("fetched from its origin"), "{problems:?}");
        by_origin.remove(keys::by_origin(&direct.listing.origin, &direct.uri)).unwrap();

        by_origin.remove(keys::by_origin(&aggregated.listing.origin, &aggregated.uri)).unwrap();
        assert_eq!(
            index_problems(&store),
            [("index by_origin".to_owned(), format!("no entry for origin {}", aggregated.listing.origin))]
        );
    }

    /// Format 6: every live record is named by its blob row or listed in the sha-256 index,
    /// never both, and a row names only a live record of its content.
    #[test]
    fn each_record_is_named_by_its_blob_row_or_indexed_exactly_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("store")).unwrap();
        let sha = store.put(&b"x"[..], &Expected::none()).unwrap().id;
        let (a, b) = ("http://t/a", "http://t/b");
        store.apply(Batch::new().upsert(&["s"], record(a, sha)).upsert(&["s"], record(b, sha))).unwrap();
        assert!(store.verify().unwrap().is_clean());
        let (t, row) = (&store.inner.trees, store.inner.blob_row(&sha).unwrap().unwrap());
        assert_eq!(row.referrer.as_deref(), Some(a), "the first record applied");
        assert!(!t.by_sha.contains_key(keys::by_sha(&sha, a)).unwrap());

        t.by_sha.insert(keys::by_sha(&sha, a), Vec::new()).unwrap();
        assert_eq!(
            index_problems(&store),
            [("index by_sha256".into(), "entry for the record its blob row names already".into())]
        );
        t.by_sha.remove(keys::by_sha(&sha, b)).unwrap();
        t.by_sha.remove(keys::by_sha(&sha, a)).unwrap();
        assert_eq!(index_problems(&store), [("index by_sha256".into(), format!("no entry for sha-256:{sha}"))]);
        t.by_sha.insert(keys::by_sha(&sha, b), Vec::new()).unwrap();
        assert!(store.verify().unwrap().is_clean());

        let named = |uri: &str| BlobRow { referrer: Some(uri.into()), ..row.clone() }.encode().unwrap();
        t.blobs.insert(sha.0, named("http://t/gone")).unwrap();
        let report = store.verify().unwrap();
        let problems: Vec<_> = report.problems.iter().map(|p| (p.area, p.key.as_str(), p.detail.clone())).collect();
        let gone = "names http://t/gone, which is not a live record of this content".to_owned();
        assert_eq!(
            problems,
            [("blob", sha.to_hex().as_str(), gone), ("index by_sha256", a, format!("no entry for sha-256:{sha}"))]
        );
    }
}
