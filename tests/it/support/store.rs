//! Stores for tests: each in a temporary directory of its own, with small caches; plausible
//! records and reproducible content to put in them, and the bytes read back.

use std::io::Read as _;
use std::path::Path;

use tributary::model::{HashList, Link};
use tributary::store::{BlobId, Expected, Listing, NewRecord, Store, StoreOptions, Via};

/// A fresh store in its own temporary directory (kept alive by the returned guard).
pub(crate) fn temp_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open_with(&dir.path().join("store"), &StoreOptions::small()).expect("open store");
    (dir, store)
}

/// Reopens the store at `path`.
pub(crate) fn reopen(path: &Path) -> Store {
    Store::open_with(path, &StoreOptions::small()).expect("reopen store")
}

/// Deterministic pseudo-random bytes (xorshift), so content differs by seed without a crate.
pub(crate) fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The bytes of blob `id`, read back in full.
pub(crate) fn read_blob(store: &Store, id: &BlobId) -> Vec<u8> {
    let mut out = Vec::new();
    store.get(id).unwrap().read_to_end(&mut out).unwrap();
    out
}

/// Puts `data` with no expectations.
pub(crate) fn put(store: &Store, data: &[u8]) -> BlobId {
    store.put(data, &Expected::none()).expect("put").id
}

/// A record for `uri` pointing at `sha`, with plausible provenance.
pub(crate) fn record(uri: &str, sha: BlobId) -> NewRecord {
    let origin = uri.replace("http://tributary.test/", "http://origin.test/");
    NewRecord {
        uri: uri.to_owned(),
        source: "src-a".to_owned(),
        upstream: origin.replace("origin.test", "upstream.test"),
        sha256: sha,
        listing: Listing {
            origin,
            declared: HashList::default(),
            length: None,
            media_type: Some("application/xml".to_owned()),
            lastmod: Some("2024-05-01T10:00:00Z".parse().expect("datetime")),
            via: Via {
                modified: Some("2024-05-01T10:00:00Z".parse().expect("datetime")),
                length: Some(1),
                ..Via::default()
            },
            links: vec![Link::new("describedby", "http://origin.test/meta.xml")],
        },
    }
}
