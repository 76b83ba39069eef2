//! Digests as the tests declare them in documents and compare them with what was stored:
//! lowercase hex, as ResourceSync writes them, and the store's own blob ids.

use md5::Md5;
use sha2::{Digest as _, Sha256};
use tributary::store::BlobId;

/// md5 of `bytes`, lowercase hex.
pub(crate) fn md5_hex(bytes: &[u8]) -> String {
    hex::encode(Md5::digest(bytes))
}

/// sha-256 of `bytes`, lowercase hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// md5 and sha-256 of `bytes`, lowercase hex.
pub(crate) fn digests(bytes: &[u8]) -> (String, String) {
    (md5_hex(bytes), sha256_hex(bytes))
}

/// The id under which the store keeps `bytes`: their sha-256.
pub(crate) fn sha256_id(bytes: &[u8]) -> BlobId {
    BlobId(Sha256::digest(bytes).into())
}

/// `<rs:md>` attributes declaring `body` exactly: both hashes and the length.
pub(crate) fn md_attrs(body: &[u8]) -> String {
    format!("hash=\"md5:{} sha-256:{}\" length=\"{}\"", md5_hex(body), sha256_hex(body), body.len())
}
