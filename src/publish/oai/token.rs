//! Resumption tokens: the position of a list, carried by the client and authenticated, so the
//! server keeps no state per list and a token outlives a restart.
//!
//! A list is defined by change-log positions (see `list`): the last seq of each log it reads
//! when it started, and where the next page starts (a log position, or a URI for a list read
//! in URI order). Nothing in a token is trusted unless its
//! MAC (HMAC-SHA-256, truncated to 128 bits, under a key kept in the data directory) matches:
//! a forged or altered token, one from another store, an expired one and one for another
//! verb or format are all `badResumptionToken`. Encoded as postcard bytes plus the MAC in
//! unpadded base64url, which needs no escaping in a URL or in XML.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// Bytes of the MAC kept: forging needs 2^128 tries.
const MAC_LEN: usize = 16;
/// The format version, first in the encoded bytes.
const VERSION: u8 = 2;
/// Tokens longer than this are refused before decoding (a real one is well under 1 KiB per
/// hundred sources).
pub const MAX_TOKEN_LEN: usize = 16 * 1024;

/// Where a list stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Token {
    /// ListRecords (true) or ListIdentifiers.
    pub(crate) records: bool,
    pub(crate) prefix: String,
    pub(crate) set: Option<String>,
    /// Unix milliseconds of `from` / the exclusive `until`.
    pub(crate) from_ms: Option<i64>,
    pub(crate) until_ms: Option<i64>,
    /// A fingerprint of the logs the list reads, so a token does not outlive a change of them.
    pub(crate) logs: u64,
    /// Per log, the last seq the list covers (the log's end when the list started).
    pub(crate) ends: Vec<u64>,
    /// The log the next page starts in, and its first seq there (a list in log order).
    pub(crate) log: u32,
    pub(crate) next: u64,
    /// A list in URI order: the URI the next page starts at (`""` before the first).
    pub(crate) key: Option<String>,
    /// Records sent before the next page.
    pub(crate) cursor: u64,
    /// The list's size, when known.
    pub(crate) size: Option<u64>,
    /// When the token expires (Unix seconds).
    pub(crate) expires: i64,
}

/// Why a token is refused; the message is the `badResumptionToken` answer's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused(pub(crate) &'static str);

/// Signs and checks tokens with one key.
#[derive(Clone)]
pub(crate) struct Codec {
    key: [u8; 32],
}

impl std::fmt::Debug for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Codec")
    }
}

impl Codec {
    pub(crate) fn new(key: [u8; 32]) -> Codec {
        Codec { key }
    }

    fn mac(&self, bytes: &[u8]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(bytes);
        mac
    }

    /// The token as text.
    pub(crate) fn encode(&self, t: &Token) -> String {
        let mut bytes = vec![VERSION];
        bytes = postcard::to_extend(t, bytes).expect("a token always encodes");
        let tag = self.mac(&bytes).finalize().into_bytes();
        bytes.extend_from_slice(&tag[..MAC_LEN]);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// The token `text` stands for, if it was made with this key, for a list of this kind,
    /// and has not expired at `now` (Unix seconds).
    pub(crate) fn decode(&self, text: &str, records: bool, now: i64) -> Result<Token, Refused> {
        if text.len() > MAX_TOKEN_LEN {
            return Err(Refused("the resumptionToken is too long to be one of this repository's"));
        }
        let bytes = URL_SAFE_NO_PAD
            .decode(text.trim())
            .map_err(|_| Refused("the resumptionToken is not one of this repository's"))?;
        let Some(cut) = bytes.len().checked_sub(MAC_LEN).filter(|c| *c > 1) else {
            return Err(Refused("the resumptionToken is not one of this repository's"));
        };
        let (body, tag) = bytes.split_at(cut);
        self.mac(body)
            .verify_truncated_left(tag)
            .map_err(|_| Refused("the resumptionToken is not one of this repository's"))?;
        if body[0] != VERSION {
            return Err(Refused("the resumptionToken is from another version of this repository"));
        }
        let t: Token = postcard::from_bytes(&body[1..]).map_err(|_| Refused("the resumptionToken is damaged"))?;
        if t.records != records {
            return Err(Refused("the resumptionToken belongs to a list of another verb"));
        }
        if t.expires < now {
            return Err(Refused("the resumptionToken has expired; start the list again"));
        }
        Ok(t)
    }
}

/// A fingerprint of the logs a list reads, in order.
pub(crate) fn logs_fingerprint<'a>(logs: impl IntoIterator<Item = &'a str>) -> u64 {
    use sha2::Digest as _;
    let mut h = Sha256::new();
    for l in logs {
        h.update(l.as_bytes());
        h.update([0]);
    }
    u64::from_le_bytes(h.finalize()[..8].try_into().expect("eight bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> Token {
        Token {
            records: true,
            prefix: "oai_dc".into(),
            set: Some("museum".into()),
            from_ms: Some(1_000),
            until_ms: None,
            logs: logs_fingerprint(["museum"]),
            ends: vec![1_000_000],
            log: 0,
            next: 501,
            key: None,
            cursor: 500,
            size: Some(999_999),
            expires: 2_000_000_000,
        }
    }

    #[test]
    fn round_trip_and_refusals() {
        let codec = Codec::new([7; 32]);
        let text = codec.encode(&token());
        assert!(text.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'), "{text}");
        assert_eq!(codec.decode(&text, true, 1_900_000_000).unwrap(), token());
        assert_eq!(
            codec.decode(&text, false, 1_900_000_000).unwrap_err().0,
            "the resumptionToken belongs to a list of another verb"
        );
        assert!(codec.decode(&text, true, 2_000_000_001).unwrap_err().0.contains("expired"));
        assert!(Codec::new([8; 32]).decode(&text, true, 0).is_err(), "another key");
        // Any changed character is a forgery.
        let mut forged = text.clone().into_bytes();
        let i = forged.len() / 2;
        forged[i] = if forged[i] == b'A' { b'B' } else { b'A' };
        assert!(codec.decode(std::str::from_utf8(&forged).unwrap(), true, 0).is_err());
        for junk in ["", "x", "!!!", "AAAA", &"A".repeat(MAX_TOKEN_LEN + 1)] {
            assert!(codec.decode(junk, true, 0).is_err(), "{junk:?}");
        }
    }
}
