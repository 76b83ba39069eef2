//! What both sides of WebSub share (W3C WebSub §7, ResourceSync Change Notification 1.0.1 §4):
//! the `X-Hub-Signature` of a delivery, made by the hub with the subscriber's `hub.secret` and
//! checked by the subscriber, and the `Link` header naming a notification's topic and hub.
//!
//! Kept apart from both the publishing side (Tributary's own hub) and the subscribing side
//! (Tributary subscribed to upstream hubs) so the two agree byte for byte. Pure: no I/O.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Sha256, Sha384, Sha512};

/// The header carrying a delivery's signature.
pub const SIGNATURE_HEADER: &str = "X-Hub-Signature";

/// `hub.secret` must be shorter than this many bytes (WebSub §5.1).
pub const MAX_SECRET_BYTES: usize = 200;

/// The hash functions WebSub names for signatures (§7.1). Tributary's hub signs with sha256
/// (WebSub asks for at least SHA-256 when the callback is not HTTPS); a subscriber checks
/// whichever of the four its hub chose, most hubs still using sha1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// `sha1`.
    Sha1,
    /// `sha256` (what Tributary's hub sends).
    Sha256,
    /// `sha384`.
    Sha384,
    /// `sha512`.
    Sha512,
}

impl Algorithm {
    /// The name in the header.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Sha1 => "sha1",
            Algorithm::Sha256 => "sha256",
            Algorithm::Sha384 => "sha384",
            Algorithm::Sha512 => "sha512",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        [Algorithm::Sha1, Algorithm::Sha256, Algorithm::Sha384, Algorithm::Sha512]
            .into_iter()
            .find(|a| a.as_str() == name)
    }
}

fn mac(algorithm: Algorithm, secret: &[u8], body: &[u8]) -> Vec<u8> {
    fn run<M: Mac + KeyInit>(secret: &[u8], body: &[u8]) -> Vec<u8> {
        // HMAC takes keys of any length, so this never fails.
        let mut m = <M as KeyInit>::new_from_slice(secret).expect("HMAC accepts any key length");
        m.update(body);
        m.finalize().into_bytes().to_vec()
    }
    match algorithm {
        Algorithm::Sha1 => run::<Hmac<sha1::Sha1>>(secret, body),
        Algorithm::Sha256 => run::<Hmac<Sha256>>(secret, body),
        Algorithm::Sha384 => run::<Hmac<Sha384>>(secret, body),
        Algorithm::Sha512 => run::<Hmac<Sha512>>(secret, body),
    }
}

/// The `X-Hub-Signature` value for `body`: `sha256=<hex HMAC>`.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    format!("{}={}", Algorithm::Sha256.as_str(), hex::encode(mac(Algorithm::Sha256, secret, body)))
}

/// Why a signature was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// Not `<algorithm>=<hex>`.
    #[error("malformed signature (expected <algorithm>=<hex digest>)")]
    Malformed,
    /// An algorithm WebSub does not name.
    #[error("signature algorithm {0:?} is not one of sha1, sha256, sha384, sha512")]
    Algorithm(String),
    /// The HMAC does not match the body.
    #[error("signature does not match the body")]
    Mismatch,
}

/// Checks an `X-Hub-Signature` value against `body`, comparing in constant time.
///
/// # Errors
/// [`SignatureError`] when the value is malformed, names an algorithm not accepted, or does
/// not match.
pub fn verify(secret: &[u8], body: &[u8], header: &str) -> Result<Algorithm, SignatureError> {
    let (name, digest) = header.trim().split_once('=').ok_or(SignatureError::Malformed)?;
    let algorithm =
        Algorithm::from_name(&name.to_ascii_lowercase()).ok_or_else(|| SignatureError::Algorithm(name.to_owned()))?;
    let given = hex::decode(digest).map_err(|_| SignatureError::Malformed)?;
    let expected = mac(algorithm, secret, body);
    let same = given.len() == expected.len() && given.iter().zip(&expected).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
    if same { Ok(algorithm) } else { Err(SignatureError::Mismatch) }
}

/// The `Link` header of a notification and of its topic: `<topic>; rel="self", <hub>; rel="hub"`
/// (Change Notification §4.1, WebSub §4).
pub fn link_header(topic: &str, hub: &str) -> String {
    format!("<{topic}>; rel=\"self\", <{hub}>; rel=\"hub\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_matches_rfc_4231_test_case_2() {
        let sig = sign(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(sig, "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
        assert_eq!(verify(b"Jefe", b"what do ya want for nothing?", &sig), Ok(Algorithm::Sha256));
    }

    #[test]
    fn bad_signatures_are_refused() {
        let body = b"<urlset/>";
        let good = sign(b"k", body);
        assert_eq!(verify(b"other", body, &good), Err(SignatureError::Mismatch));
        assert_eq!(verify(b"k", b"<urlset />", &good), Err(SignatureError::Mismatch));
        assert_eq!(verify(b"k", body, "sha256"), Err(SignatureError::Malformed));
        assert_eq!(verify(b"k", body, "sha256=zz"), Err(SignatureError::Malformed));
        assert_eq!(verify(b"k", body, &good[..good.len() - 2]), Err(SignatureError::Mismatch));
        assert!(matches!(verify(b"k", body, "md5=00"), Err(SignatureError::Algorithm(_))));
        // RFC 2202 test case 2.
        let sha1 = "sha1=effcdf6ae5eb2fa2d27416d5f184df9c259a7c79";
        assert_eq!(verify(b"Jefe", b"what do ya want for nothing?", sha1), Ok(Algorithm::Sha1));
        let sha512 = format!("sha512={}", hex::encode(mac(Algorithm::Sha512, b"k", body)));
        assert_eq!(verify(b"k", body, &sha512), Ok(Algorithm::Sha512));
    }

    #[test]
    fn the_link_header_names_topic_and_hub() {
        assert_eq!(
            link_header("http://t/n", "http://t/hub"),
            "<http://t/n>; rel=\"self\", <http://t/hub>; rel=\"hub\""
        );
    }
}
