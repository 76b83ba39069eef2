//! Small bitstreams' complete `200` responses, kept in memory so that a request for one is
//! answered on the async worker, without a hand-off to the blocking pool.
//!
//! The hand-off, not the store lookup, was most of a small bitstream's cost: profiled under
//! `wrk`, the server spent about 40% of its time switching between the async workers and the
//! blocking pool's threads (futex waits and wakes) and most of the rest in per-request
//! allocations across those threads, for some 3% in the store itself. A store read may hit the
//! disk, so it stays on the blocking pool; a hit here touches neither.
//!
//! Validity: every entry carries the generation it was read in, and the generation moves
//! whenever the store makes new change events visible (every change to a record is one; see
//! `store::watch`). The generation is read *before* the store, so an entry read across a
//! commit is already stale when stored. A stale entry is simply read again on the blocking
//! pool. Only plain `GET`s answered `200` in full are served from here; conditional requests
//! that do not pass, ranges and `HEAD` take the ordinary path.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use quick_cache::Weighter;
use quick_cache::sync::Cache;

use super::conditional::Validators;
use crate::store::Store;

/// Bodies up to this size are kept.
pub(crate) const MAX_BODY: usize = 16 * 1024;
/// What the kept entries may weigh in all.
const BUDGET: u64 = 32 * 1024 * 1024;
/// Counted per entry besides its body: the URI, the headers, the bookkeeping.
const OVERHEAD: u64 = 1024;

/// One kept response.
#[derive(Debug)]
pub(crate) struct Hot {
    generation: u64,
    etag: String,
    last_modified: SystemTime,
    headers: HeaderMap,
    body: Bytes,
}

impl Hot {
    /// What conditional requests are decided on.
    pub(crate) fn validators(&self) -> Validators<'_> {
        Validators { etag: &self.etag, last_modified: self.last_modified, length: self.body.len() as u64 }
    }

    /// The `200` response, sharing the kept bytes.
    pub(crate) fn response(&self) -> Response {
        let mut r = Response::new(Body::from(self.body.clone()));
        *r.status_mut() = StatusCode::OK;
        *r.headers_mut() = self.headers.clone();
        r
    }
}

#[derive(Clone)]
struct ByBytes;

impl Weighter<String, Arc<Hot>> for ByBytes {
    fn weight(&self, key: &String, val: &Arc<Hot>) -> u64 {
        key.len() as u64 + val.body.len() as u64 + OVERHEAD
    }
}

/// The kept responses, by Tributary URI.
pub(crate) struct HotBlobs {
    cache: Cache<String, Arc<Hot>, ByBytes>,
    generation: Arc<AtomicU64>,
}

impl std::fmt::Debug for HotBlobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HotBlobs").field("entries", &self.cache.len()).finish()
    }
}

impl HotBlobs {
    /// An empty cache that `store`'s commits invalidate.
    pub(crate) fn new(store: &Store) -> HotBlobs {
        let generation = Arc::new(AtomicU64::new(0));
        let bump = generation.clone();
        store.on_visible(Arc::new(move || {
            bump.fetch_add(1, Ordering::AcqRel);
        }));
        let items = (BUDGET / (2048 + OVERHEAD)) as usize;
        HotBlobs { cache: Cache::with_weighter(items, BUDGET, ByBytes), generation }
    }

    /// The current generation; read it before the store.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The response kept for `uri`, if it is still current.
    pub(crate) fn get(&self, uri: &str) -> Option<Arc<Hot>> {
        let now = self.generation();
        self.cache.get(uri).filter(|h| h.generation == now)
    }

    /// Keeps a `200` response read in `generation`.
    pub(crate) fn keep(&self, uri: String, generation: u64, v: Validators<'_>, headers: &HeaderMap, body: Bytes) {
        if body.len() > MAX_BODY {
            return;
        }
        let hot =
            Hot { generation, etag: v.etag.to_owned(), last_modified: v.last_modified, headers: headers.clone(), body };
        self.cache.insert(uri, Arc::new(hot));
    }
}
