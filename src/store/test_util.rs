//! Helpers shared by the store's unit tests (the integration tests have their own in
//! `tests/it/support/store.rs`, which cannot see the store's internals).

use super::blob::BlobId;
use super::record::{Listing, NewRecord, Via};
use crate::model::Link;

/// A record of source `s` fetched from its origin (`<uri>/origin`), pointing at `sha`.
pub(super) fn record(uri: &str, sha: BlobId) -> NewRecord {
    NewRecord {
        uri: uri.into(),
        source: "s".into(),
        upstream: format!("{uri}/origin"),
        sha256: sha,
        listing: Listing {
            origin: format!("{uri}/origin"),
            declared: Default::default(),
            length: None,
            media_type: None,
            lastmod: None,
            via: Via::default(),
            links: vec![Link::new("describedby", "http://o/m")],
        },
    }
}
