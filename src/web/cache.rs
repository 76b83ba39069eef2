//! Closed Change Lists in memory. Their bytes never change (see `publish::changes`), so a
//! cached copy never goes stale and needs no invalidation: the cache only bounds memory,
//! evicting the least recently served lists once the total passes its budget. Serving from
//! here is a hash lookup and a reference-counted clone, which is what lets a closed list
//! answer thousands of requests a second. Each list is also kept gzip-compressed (done once,
//! when it is first generated): a Destination that accepts gzip moves a tenth of the bytes.

use std::collections::HashMap;
use std::sync::Mutex;

use axum::body::Bytes;
use sha2::{Digest as _, Sha256};

/// A cached list, in both encodings, and its validator.
#[derive(Debug, Clone)]
pub(crate) struct Cached {
    pub(crate) bytes: Bytes,
    /// The same, gzip-compressed.
    pub(crate) gzip: Bytes,
    /// Quoted strong entity tag of the identity encoding (first 128 bits of the sha-256 of
    /// the bytes); the gzip encoding's tag adds `-gzip` inside the quotes.
    pub(crate) etag: String,
}

impl Cached {
    /// Builds the entry: compresses and hashes (blocking work; run it off the async workers).
    pub(crate) fn new(bytes: Vec<u8>) -> Cached {
        let digest = Sha256::digest(&bytes);
        let mut gz = flate2::write::GzEncoder::new(Vec::with_capacity(bytes.len() / 8), flate2::Compression::default());
        // Writing to a Vec cannot fail.
        let gzip = std::io::Write::write_all(&mut gz, &bytes).and_then(|()| gz.finish()).unwrap_or_default();
        Cached {
            etag: format!("\"{}\"", hex::encode(&digest[..16])),
            bytes: Bytes::from(bytes),
            gzip: Bytes::from(gzip),
        }
    }

    /// The entity tag of the gzip encoding.
    pub(crate) fn gzip_etag(&self) -> String {
        format!("{}-gzip\"", self.etag.trim_end_matches('"'))
    }

    fn size(&self) -> usize {
        self.bytes.len() + self.gzip.len()
    }
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<(String, u64), (Cached, u64)>,
    total: usize,
    tick: u64,
}

/// Closed lists by `(set, n)`, bounded by total bytes.
#[derive(Debug)]
pub(crate) struct ClosedLists {
    inner: Mutex<Inner>,
    budget: usize,
}

impl ClosedLists {
    pub(crate) fn new(budget: usize) -> Self {
        ClosedLists { inner: Mutex::new(Inner::default()), budget }
    }

    pub(crate) fn get(&self, set: &str, n: u64) -> Option<Cached> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.tick += 1;
        let tick = g.tick;
        let (cached, used) = g.map.get_mut(&(set.to_owned(), n))?;
        *used = tick;
        Some(cached.clone())
    }

    /// Caches a list (unless larger than the whole budget) and returns it.
    pub(crate) fn insert(&self, set: &str, n: u64, cached: Cached) -> Cached {
        let size = cached.size();
        if size > self.budget {
            return cached;
        }
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        while g.total + size > self.budget {
            let Some(oldest) = g.map.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone()) else { break };
            if let Some((old, _)) = g.map.remove(&oldest) {
                g.total -= old.size();
            }
        }
        g.tick += 1;
        let tick = g.tick;
        if let Some((old, _)) = g.map.insert((set.to_owned(), n), (cached.clone(), tick)) {
            g.total -= old.size();
        }
        g.total += size;
        cached
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_the_least_recently_served_past_the_budget() {
        let item = |b: u8| Cached::new(vec![b; 4]);
        let each = item(0).size();
        let c = ClosedLists::new(2 * each + 1);
        c.insert("s", 1, item(1));
        c.insert("s", 2, item(2));
        assert!(c.get("s", 1).is_some());
        c.insert("s", 3, item(3));
        assert!(c.get("s", 2).is_none(), "least recently used goes first");
        assert!(c.get("s", 1).is_some() && c.get("s", 3).is_some());
        let big = c.insert("s", 4, Cached::new(vec![0; 3 * each]));
        assert_eq!(big.bytes.len(), 3 * each);
        assert!(c.get("s", 4).is_none(), "larger than the budget: served, not kept");
    }

    #[test]
    fn gzip_copy_decompresses_to_the_bytes_and_has_its_own_tag() {
        let c = Cached::new(b"<urlset>hello</urlset>".repeat(100));
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&c.gzip[..]), &mut out).unwrap();
        assert_eq!(out, c.bytes);
        assert!(c.gzip.len() < c.bytes.len());
        assert_ne!(c.gzip_etag(), c.etag);
        assert!(c.gzip_etag().starts_with('"') && c.gzip_etag().ends_with("-gzip\""));
    }
}
