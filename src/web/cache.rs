//! Closed Change Lists in memory. Their bytes never change (see `publish::changes`), so a
//! cached copy never goes stale and needs no invalidation: the cache only bounds memory,
//! evicting the least recently served lists once the total passes its budget. Serving from
//! here is a hash lookup and a reference-counted clone, which is what lets a closed list
//! answer thousands of requests a second.

use std::collections::HashMap;
use std::sync::Mutex;

use axum::body::Bytes;
use sha2::{Digest as _, Sha256};

/// A cached list and its validator.
#[derive(Debug, Clone)]
pub(crate) struct Cached {
    pub(crate) bytes: Bytes,
    /// Quoted strong entity tag (first 128 bits of the sha-256 of the bytes).
    pub(crate) etag: String,
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

    /// Caches `bytes` (unless larger than the whole budget) and returns them with their tag.
    pub(crate) fn insert(&self, set: &str, n: u64, bytes: Vec<u8>) -> Cached {
        let digest = Sha256::digest(&bytes);
        let cached = Cached { etag: format!("\"{}\"", hex::encode(&digest[..16])), bytes: Bytes::from(bytes) };
        let size = cached.bytes.len();
        if size > self.budget {
            return cached;
        }
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        while g.total + size > self.budget {
            let Some(oldest) = g.map.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone()) else { break };
            if let Some((old, _)) = g.map.remove(&oldest) {
                g.total -= old.bytes.len();
            }
        }
        g.tick += 1;
        let tick = g.tick;
        if let Some((old, _)) = g.map.insert((set.to_owned(), n), (cached.clone(), tick)) {
            g.total -= old.bytes.len();
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
        let c = ClosedLists::new(10);
        c.insert("s", 1, vec![1; 4]);
        c.insert("s", 2, vec![2; 4]);
        assert!(c.get("s", 1).is_some());
        c.insert("s", 3, vec![3; 4]);
        assert!(c.get("s", 2).is_none(), "least recently used goes first");
        assert!(c.get("s", 1).is_some() && c.get("s", 3).is_some());
        let big = c.insert("s", 4, vec![0; 11]);
        assert_eq!(big.bytes.len(), 11);
        assert!(c.get("s", 4).is_none(), "larger than the budget: served, not kept");
    }
}
