//! What Tributary serves right now, read whole after a restart: each set's change log through
//! `api/changes` and through its Change Lists, its Resource List, and the bitstreams that list
//! names. Every read is bounded; an error says which URL failed and how.

use std::collections::BTreeMap;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tributary::model::{Entry, HashAlgorithm, RootFormat};

use super::observer::{Change, ClosedList, parse};

/// Pages of `api/changes` read at most per set (500 rows each).
const MAX_PAGES: usize = 1_000;

/// One set as served.
#[derive(Debug, Default)]
pub(super) struct ServedSet {
    /// Position → change, from `api/changes`.
    pub(super) log: BTreeMap<u64, Change>,
    /// Position → (change, list number), from the Change Lists.
    pub(super) lists: BTreeMap<u64, (Change, u64)>,
    /// Closed Change List number → what it holds.
    pub(super) closed: BTreeMap<u64, ClosedList>,
}

impl ServedSet {
    /// The last position of the log as read.
    pub(super) fn end(&self) -> u64 {
        self.log.keys().next_back().copied().unwrap_or(0)
    }
}

/// A client for Tributary at `base`.
pub(super) struct Reader<'a> {
    pub(super) client: &'a reqwest::Client,
    pub(super) base: &'a str,
}

impl Reader<'_> {
    pub(super) async fn get(&self, url: &str) -> Result<(u16, Vec<u8>), String> {
        let r = self.client.get(url).send().await.map_err(|e| format!("GET {url}: {e}"))?;
        let status = r.status().as_u16();
        Ok((status, r.bytes().await.map_err(|e| format!("GET {url}: body: {e}"))?.to_vec()))
    }

    async fn get_ok(&self, url: &str) -> Result<Vec<u8>, String> {
        match self.get(url).await? {
            (200, body) => Ok(body),
            (status, body) => Err(format!("GET {url}: {status}: {}", String::from_utf8_lossy(&body))),
        }
    }

    async fn document(&self, url: &str) -> Result<tributary::model::Document, String> {
        let body = self.get_ok(url).await?;
        parse(&body, url).ok_or_else(|| format!("GET {url}: not a ResourceSync document"))
    }

    /// `set` as served, log and Change Lists.
    pub(super) async fn set(&self, set: &str) -> Result<ServedSet, String> {
        let mut served = ServedSet { log: self.log(set).await?, ..ServedSet::default() };
        let index = self.document(&format!("{}sets/{set}/changelist-index.xml", self.base)).await?;
        let mut first = 1;
        for (i, list) in index.entries.iter().enumerate() {
            let n = i as u64 + 1;
            let body = self.get_ok(&list.loc).await?;
            let doc = parse(&body, &list.loc).ok_or_else(|| format!("{}: not a ResourceSync document", list.loc))?;
            for (k, e) in doc.entries.iter().enumerate() {
                let change =
                    Change::of_entry(e).ok_or_else(|| format!("{}: entry {} lacks change", list.loc, k + 1))?;
                served.lists.insert(first + k as u64, (change, n));
            }
            let count = doc.entries.len() as u64;
            if list.md.as_ref().is_some_and(|md| md.until.is_some()) {
                let sha256 = hex::encode(Sha256::digest(&body));
                served.closed.insert(n, ClosedList { first, count, sha256 });
            }
            first += count;
        }
        Ok(served)
    }

    async fn log(&self, set: &str) -> Result<BTreeMap<u64, Change>, String> {
        let mut log = BTreeMap::new();
        let mut after = 0;
        for _ in 0..MAX_PAGES {
            let url = format!("{}api/changes?set={set}&after={after}&limit=500", self.base);
            let json: serde_json::Value =
                serde_json::from_slice(&self.get_ok(&url).await?).map_err(|e| format!("{url}: {e}"))?;
            let rows = json["changes"].as_array().ok_or_else(|| format!("{url}: no changes array"))?;
            for row in rows {
                let (position, change) = Change::of_row(row).ok_or_else(|| format!("{url}: bad row {row}"))?;
                log.insert(position, change);
                after = position;
            }
            if rows.len() < 500 {
                return Ok(log);
            }
        }
        Err(format!("set {set}: more than {MAX_PAGES} pages of changes"))
    }

    /// The set's Resource List entries (following an index).
    pub(super) async fn resources(&self, set: &str) -> Result<Vec<Entry>, String> {
        let doc = self.document(&format!("{}sets/{set}/resourcelist.xml", self.base)).await?;
        if doc.header.format != Some(RootFormat::SitemapIndex) {
            return Ok(doc.entries);
        }
        let mut all = Vec::new();
        for part in &doc.entries {
            all.extend(self.document(&part.loc).await?.entries);
        }
        Ok(all)
    }

    /// Reads every bitstream the Resource List of `set` names and checks its bytes against
    /// the list's sha-256 and length. An entry whose bytes differ is looked up again, since the
    /// harvester keeps running: only one that still names the same content is a problem.
    pub(super) async fn missing_bytes(&self, set: &str) -> Result<Vec<String>, String> {
        let listed = self.resources(set).await?;
        let mut problems = Vec::new();
        for e in &listed {
            let Some((sha, length)) = declared(e) else {
                problems.push(format!("{}: listed without a sha-256 and length", e.loc));
                continue;
            };
            let (status, body) = self.get(&e.loc).await?;
            let got = hex::encode(Sha256::digest(&body));
            if status == 200 && got == sha && body.len() as u64 == length {
                continue;
            }
            let now = self.resources(set).await?;
            if now.iter().find(|n| n.loc == e.loc).and_then(declared) == Some((sha.clone(), length)) {
                problems.push(format!(
                    "{}: listed as sha-256 {sha}, {length} bytes; served {status}, {} bytes, sha-256 {got}",
                    e.loc,
                    body.len()
                ));
            }
        }
        Ok(problems)
    }
}

/// An entry's declared sha-256 and length.
pub(super) fn declared(e: &Entry) -> Option<(String, u64)> {
    let md = e.md.as_ref()?;
    Some((md.hash.as_ref()?.get(&HashAlgorithm::Sha256)?.to_owned(), md.length?))
}

/// The upstream URL a republished entry came from.
pub(super) fn via(e: &Entry) -> Option<&str> {
    e.links.iter().find(|l| l.rel == "via").map(|l| l.href.as_str())
}

/// Retries `read` (Tributary may still be settling after a start) up to `attempts` times,
/// a second apart; the last error if none succeeds.
pub(super) async fn with_retries<T, F, Fut>(attempts: usize, mut read: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let mut last = String::new();
    for _ in 0..attempts.max(1) {
        match read().await {
            Ok(v) => return Ok(v),
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Err(last)
}
