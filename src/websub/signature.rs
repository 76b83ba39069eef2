//! The `X-Hub-Signature` of a delivery (W3C WebSub §7.1) — made by a hub with a subscriber's
//! `hub.secret`, checked by a subscriber with its own — and the `Link` header naming a
//! notification's topic and hub (Change Notification 1.0.1 §4.1).
//!
//! The header is `method=signature`, the method one of `sha1`, `sha256`, `sha384`, `sha512`, the
//! signature the hex HMAC of the raw body keyed with the secret. The comparison is constant-time
//! (the RustCrypto `hmac` crate's `verify_slice`), so timing tells a forger nothing about how
//! much of a guess was right. Pure: no I/O; depends on hashing crates only.

use hmac::{Hmac, KeyInit, Mac};

/// The header a hub signs a delivery with.
pub const SIGNATURE_HEADER: &str = "x-hub-signature";

/// `hub.secret` must be shorter than this many bytes (WebSub §5.1).
pub const MAX_SECRET_BYTES: usize = 200;

/// The hash functions WebSub allows for the signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `sha1` (what most hubs send; WebSub asks for at least sha256 over plain HTTP).
    Sha1,
    /// `sha256`
    Sha256,
    /// `sha384`
    Sha384,
    /// `sha512`
    Sha512,
}

impl Method {
    /// The method's name in the header.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Sha1 => "sha1",
            Method::Sha256 => "sha256",
            Method::Sha384 => "sha384",
            Method::Sha512 => "sha512",
        }
    }

    fn parse(s: &str) -> Option<Method> {
        [Method::Sha1, Method::Sha256, Method::Sha384, Method::Sha512].into_iter().find(|m| m.as_str() == s)
    }
}

/// Why a delivery's signature is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// No `X-Hub-Signature` header.
    #[error("the delivery carries no X-Hub-Signature")]
    Missing,
    /// The header is not `method=hex`.
    #[error("X-Hub-Signature is not of the form method=hex")]
    Malformed,
    /// A method WebSub does not name.
    #[error("X-Hub-Signature uses {0:?}, not sha1, sha256, sha384 or sha512")]
    UnknownMethod(String),
    /// The signature is not the body's HMAC under the subscription's secret.
    #[error("X-Hub-Signature does not match the body")]
    Mismatch,
    /// `sha1`, which the subscription does not accept.
    #[error("X-Hub-Signature uses sha1, which this subscription does not accept")]
    Weak,
}

/// A signature header taken apart: the method and the tag, before the body is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// The hash function.
    pub method: Method,
    tag: Vec<u8>,
}

impl Signature {
    /// Parses `header` (the `X-Hub-Signature` value, if any).
    ///
    /// # Errors
    /// [`SignatureError::Missing`], [`SignatureError::Malformed`] or
    /// [`SignatureError::UnknownMethod`].
    pub fn parse(header: Option<&str>) -> Result<Signature, SignatureError> {
        let header = header.ok_or(SignatureError::Missing)?.trim();
        let (name, hex_sig) = header.split_once('=').ok_or(SignatureError::Malformed)?;
        let method = Method::parse(&name.trim().to_ascii_lowercase())
            .ok_or_else(|| SignatureError::UnknownMethod(name.trim().chars().take(32).collect()))?;
        let tag = hex::decode(hex_sig.trim()).map_err(|_| SignatureError::Malformed)?;
        Ok(Signature { method, tag })
    }

    /// The tag, which identifies the signed body under one secret (a replay has the same).
    pub fn tag(&self) -> &[u8] {
        &self.tag
    }
}

/// An HMAC computed as the body streams in, so nothing has to be held to check it but the
/// running hash.
#[derive(Clone)]
pub enum Streaming {
    /// `sha1`
    Sha1(Hmac<sha1::Sha1>),
    /// `sha256`
    Sha256(Hmac<sha2::Sha256>),
    /// `sha384`
    Sha384(Hmac<sha2::Sha384>),
    /// `sha512`
    Sha512(Hmac<sha2::Sha512>),
}

impl std::fmt::Debug for Streaming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.write_str("Streaming(..)")
    }
}

impl Streaming {
    /// A hash of `method` keyed with `secret`.
    pub fn new(method: Method, secret: &[u8]) -> Streaming {
        // HMAC takes keys of any length, so these never fail.
        match method {
            Method::Sha1 => Streaming::Sha1(<Hmac<sha1::Sha1> as KeyInit>::new_from_slice(secret).expect("any key")),
            Method::Sha256 => {
                Streaming::Sha256(<Hmac<sha2::Sha256> as KeyInit>::new_from_slice(secret).expect("any key"))
            }
            Method::Sha384 => {
                Streaming::Sha384(<Hmac<sha2::Sha384> as KeyInit>::new_from_slice(secret).expect("any key"))
            }
            Method::Sha512 => {
                Streaming::Sha512(<Hmac<sha2::Sha512> as KeyInit>::new_from_slice(secret).expect("any key"))
            }
        }
    }

    /// Adds the next bytes of the body.
    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            Streaming::Sha1(m) => m.update(bytes),
            Streaming::Sha256(m) => m.update(bytes),
            Streaming::Sha384(m) => m.update(bytes),
            Streaming::Sha512(m) => m.update(bytes),
        }
    }

    /// Whether the body was signed with `sig` (constant-time comparison).
    pub fn matches(self, sig: &Signature) -> bool {
        match self {
            Streaming::Sha1(m) => m.verify_slice(&sig.tag).is_ok(),
            Streaming::Sha256(m) => m.verify_slice(&sig.tag).is_ok(),
            Streaming::Sha384(m) => m.verify_slice(&sig.tag).is_ok(),
            Streaming::Sha512(m) => m.verify_slice(&sig.tag).is_ok(),
        }
    }
}

/// Checks `header` (the `X-Hub-Signature` value, if any) against `body` under `secret`;
/// returns the method used.
///
/// # Errors
/// [`SignatureError`] saying why the delivery must be ignored.
pub fn verify(secret: &[u8], header: Option<&str>, body: &[u8]) -> Result<Method, SignatureError> {
    let header = header.ok_or(SignatureError::Missing)?.trim();
    let (name, hex_sig) = header.split_once('=').ok_or(SignatureError::Malformed)?;
    let method = Method::parse(&name.trim().to_ascii_lowercase())
        .ok_or_else(|| SignatureError::UnknownMethod(name.trim().chars().take(32).collect()))?;
    let tag = hex::decode(hex_sig.trim()).map_err(|_| SignatureError::Malformed)?;
    let ok = match method {
        Method::Sha1 => check::<sha1::Sha1>(secret, body, &tag),
        Method::Sha256 => check::<sha2::Sha256>(secret, body, &tag),
        Method::Sha384 => check::<sha2::Sha384>(secret, body, &tag),
        Method::Sha512 => check::<sha2::Sha512>(secret, body, &tag),
    };
    if ok { Ok(method) } else { Err(SignatureError::Mismatch) }
}

/// The `X-Hub-Signature` value for `body` under `secret` (what a hub sends).
pub fn sign(method: Method, secret: &[u8], body: &[u8]) -> String {
    let tag = match method {
        Method::Sha1 => tag::<sha1::Sha1>(secret, body),
        Method::Sha256 => tag::<sha2::Sha256>(secret, body),
        Method::Sha384 => tag::<sha2::Sha384>(secret, body),
        Method::Sha512 => tag::<sha2::Sha512>(secret, body),
    };
    format!("{}={}", method.as_str(), hex::encode(tag))
}

fn check<D>(secret: &[u8], body: &[u8], tag: &[u8]) -> bool
where
    D: hmac::EagerHash,
    Hmac<D>: KeyInit + Mac,
{
    // HMAC takes keys of any length, so this never fails.
    let Ok(mut mac) = <Hmac<D> as KeyInit>::new_from_slice(secret) else { return false };
    mac.update(body);
    mac.verify_slice(tag).is_ok()
}

fn tag<D>(secret: &[u8], body: &[u8]) -> Vec<u8>
where
    D: hmac::EagerHash,
    Hmac<D>: KeyInit + Mac,
{
    let Ok(mut mac) = <Hmac<D> as KeyInit>::new_from_slice(secret) else { return Vec::new() };
    mac.update(body);
    mac.finalize().into_bytes().to_vec()
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
    fn the_rfc_2202_and_4231_vectors_verify() {
        // RFC 2202 test case 2 (sha1) and RFC 4231 test case 2 (sha256), key "Jefe".
        let body = b"what do ya want for nothing?";
        let sha1 = "sha1=effcdf6ae5eb2fa2d27416d5f184df9c259a7c79";
        assert_eq!(verify(b"Jefe", Some(sha1), body), Ok(Method::Sha1));
        let sha256 = "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
        assert_eq!(verify(b"Jefe", Some(sha256), body), Ok(Method::Sha256));
    }

    #[test]
    fn every_method_round_trips_and_a_changed_byte_fails() {
        for m in [Method::Sha1, Method::Sha256, Method::Sha384, Method::Sha512] {
            let h = sign(m, b"secret", b"<urlset/>");
            assert_eq!(verify(b"secret", Some(&h), b"<urlset/>"), Ok(m));
            assert_eq!(verify(b"secret", Some(&h), b"<urlset/ >"), Err(SignatureError::Mismatch));
            assert_eq!(verify(b"other", Some(&h), b"<urlset/>"), Err(SignatureError::Mismatch));
        }
    }

    #[test]
    fn a_streamed_hmac_matches_the_whole_body_s() {
        for m in [Method::Sha1, Method::Sha256, Method::Sha384, Method::Sha512] {
            let header = sign(m, b"k", b"<urlset>abc</urlset>");
            let sig = Signature::parse(Some(&header)).unwrap();
            let mut h = Streaming::new(sig.method, b"k");
            for chunk in [&b"<urlset>"[..], b"abc", b"</urlset>"] {
                h.update(chunk);
            }
            assert!(h.clone().matches(&sig));
            h.update(b" ");
            assert!(!h.matches(&sig));
        }
    }

    #[test]
    fn bad_headers_are_told_apart() {
        assert_eq!(verify(b"s", None, b""), Err(SignatureError::Missing));
        assert_eq!(verify(b"s", Some("abc"), b""), Err(SignatureError::Malformed));
        assert_eq!(verify(b"s", Some("sha256=zz"), b""), Err(SignatureError::Malformed));
        assert_eq!(verify(b"s", Some("md5=00"), b""), Err(SignatureError::UnknownMethod("md5".into())));
        assert_eq!(verify(b"s", Some("sha256=00"), b""), Err(SignatureError::Mismatch), "a short tag");
    }

    #[test]
    fn the_link_header_names_topic_and_hub() {
        assert_eq!(
            link_header("http://t/n", "http://t/hub"),
            "<http://t/n>; rel=\"self\", <http://t/hub>; rel=\"hub\""
        );
    }
}
