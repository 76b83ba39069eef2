//! The `hash` attribute: a whitespace-separated list of `algorithm:hexdigest` (spec §7).
//!
//! Tributary verifies every bitstream against these, so the digests are normalised on read:
//! lowercase hex for the algorithms it can compute (md5, sha-1, sha-256). Real-world Sources
//! also publish base64 digests; those are decoded and normalised, with a warning, because
//! rejecting them would make whole providers unusable. Unknown algorithms are kept verbatim so
//! they can be republished.

use std::fmt;

use base64::Engine as _;

/// A hash algorithm named in a `hash` attribute.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HashAlgorithm {
    /// `md5`
    Md5,
    /// `sha-1`
    Sha1,
    /// `sha-256`
    Sha256,
    /// Any other token, kept as written (e.g. `sha-512`).
    Other(String),
}

impl HashAlgorithm {
    /// Parses the token before the colon. Known names are matched case-insensitively, and the
    /// common misspellings `sha1`/`sha256` are accepted.
    pub fn from_token(token: &str) -> Self {
        let is = |name: &str| token.eq_ignore_ascii_case(name);
        if is("md5") {
            HashAlgorithm::Md5
        } else if is("sha-256") || is("sha256") {
            HashAlgorithm::Sha256
        } else if is("sha-1") || is("sha1") {
            HashAlgorithm::Sha1
        } else {
            HashAlgorithm::Other(token.to_owned())
        }
    }

    /// The token as the spec writes it.
    pub fn as_str(&self) -> &str {
        match self {
            HashAlgorithm::Md5 => "md5",
            HashAlgorithm::Sha1 => "sha-1",
            HashAlgorithm::Sha256 => "sha-256",
            HashAlgorithm::Other(s) => s,
        }
    }

    /// Digest size in bytes for algorithms Tributary computes.
    pub fn digest_len(&self) -> Option<usize> {
        match self {
            HashAlgorithm::Md5 => Some(16),
            HashAlgorithm::Sha1 => Some(20),
            HashAlgorithm::Sha256 => Some(32),
            HashAlgorithm::Other(_) => None,
        }
    }
}

/// One `algorithm:digest` pair. For known algorithms `value` is lowercase hex of the right
/// length; for unknown ones it is the text as written.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    /// The algorithm.
    pub algorithm: HashAlgorithm,
    /// The digest, lowercase hex for known algorithms.
    pub value: String,
}

impl Digest {
    /// A digest of a known algorithm from raw bytes.
    pub fn from_bytes(algorithm: HashAlgorithm, bytes: &[u8]) -> Self {
        Digest { algorithm, value: hex::encode(bytes) }
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algorithm.as_str(), self.value)
    }
}

/// The parsed `hash` attribute, in document order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct HashList(pub Vec<Digest>);

/// Something about a hash value that was read but deserves a warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashNote {
    /// A digest was base64 rather than hex; it has been converted.
    Base64(HashAlgorithm),
    /// A digest was uppercase hex; it has been lowercased.
    UpperHex(HashAlgorithm),
    /// The same algorithm appears twice with different values.
    Conflicting(HashAlgorithm),
}

/// Why a `hash` attribute was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HashError {
    /// A token has no `algorithm:` prefix.
    #[error("hash value `{0}` has no `algorithm:` prefix (expected e.g. md5:1584abdf…)")]
    NoAlgorithm(String),
    /// A digest of a known algorithm is neither hex nor base64 of the right size.
    #[error("`{0}` is not a valid {1} digest (expected {2} hex digits)")]
    BadDigest(String, String, usize),
    /// The attribute is present but empty.
    #[error("empty hash attribute")]
    Empty,
}

impl HashList {
    /// Parses a `hash` attribute, returning notes for the lenient readings it applied.
    ///
    /// # Errors
    /// When a token lacks an algorithm or a known algorithm's digest cannot be decoded.
    pub fn parse(s: &str) -> Result<(HashList, Vec<HashNote>), HashError> {
        match parse_plain(s) {
            Some(list) => Ok((list, Vec::new())),
            None => parse_general(s),
        }
    }

    /// The digest for `algorithm`, if listed.
    pub fn get(&self, algorithm: &HashAlgorithm) -> Option<&str> {
        self.0.iter().find(|d| &d.algorithm == algorithm).map(|d| d.value.as_str())
    }

    /// True when no digest is listed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn parse_general(s: &str) -> Result<(HashList, Vec<HashNote>), HashError> {
    let mut list = Vec::with_capacity(2);
    let mut notes = Vec::new();
    for token in tokens(s) {
        // memchr rather than `split_once(':')`, whose char searcher showed in profiles.
        let (alg, value) = memchr::memchr(b':', token.as_bytes())
            .map(|i| (&token[..i], &token[i + 1..]))
            .filter(|(a, v)| !a.is_empty() && !v.is_empty())
            .ok_or_else(|| HashError::NoAlgorithm(token.to_owned()))?;
        let algorithm = HashAlgorithm::from_token(alg);
        let value = match algorithm.digest_len() {
            None => value.to_owned(),
            Some(len) => normalise_digest(token, &algorithm, value, len, &mut notes)?,
        };
        if list.iter().any(|d: &Digest| d.algorithm == algorithm && d.value != value) {
            notes.push(HashNote::Conflicting(algorithm.clone()));
        }
        list.push(Digest { algorithm, value });
    }
    if list.is_empty() {
        return Err(HashError::Empty);
    }
    Ok((HashList(list), notes))
}

/// The shape nearly every `hash` attribute has: known algorithms spelled as the spec does,
/// lowercase hex of the right length, single spaces between, each algorithm once. Checked with
/// a prefix test and one vectorisable pass per digest instead of tokenising with memchr; `None`
/// sends anything else through the general parse, which gives the same list where both apply.
fn parse_plain(s: &str) -> Option<HashList> {
    const KNOWN: [(&str, HashAlgorithm, usize); 3] = [
        ("md5:", HashAlgorithm::Md5, 32),
        ("sha-256:", HashAlgorithm::Sha256, 64),
        ("sha-1:", HashAlgorithm::Sha1, 40),
    ];
    let mut list = Vec::with_capacity(2);
    let mut rest = s;
    loop {
        let (prefix, algorithm, len) = KNOWN.iter().find(|(p, ..)| rest.starts_with(p))?;
        let digest = rest.get(prefix.len()..prefix.len() + len)?;
        let hex = digest.bytes().fold(true, |ok, b| ok & ((b.wrapping_sub(b'0') < 10) | (b.wrapping_sub(b'a') < 6)));
        if !hex || list.iter().any(|d: &Digest| d.algorithm == *algorithm) {
            return None;
        }
        list.push(Digest { algorithm: algorithm.clone(), value: digest.to_owned() });
        rest = &rest[prefix.len() + len..];
        match rest.strip_prefix(' ') {
            None if rest.is_empty() => return Some(HashList(list)),
            Some(next) if !next.is_empty() && !next.starts_with(' ') => rest = next,
            _ => return None,
        }
    }
}

const HEX_ANY: u8 = 0b10;
const NOT_UPPER: u8 = 0b01;
const HEX_LOWER: u8 = HEX_ANY | NOT_UPPER;
/// Per byte: `0b11` for digits and a–f, `0b10` for A–F, `0b00` for anything else (which also
/// clears "not upper", harmlessly, since such a value is not hex at all). ANDed over a digest,
/// bit 1 says "all hex" and bit 0 "no uppercase".
const HEX_CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = if b.is_ascii_digit() || (b >= b'a' && b <= b'f') {
            HEX_LOWER
        } else if b >= b'A' && b <= b'F' {
            HEX_ANY
        } else {
            0
        };
        i += 1;
    }
    t
};

/// Base64 as found in the wild: padding optional, non-canonical trailing bits tolerated (the
/// spec's own Example 27 has such digests).
const LENIENT: base64::engine::GeneralPurposeConfig = base64::engine::GeneralPurposeConfig::new()
    .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent)
    .with_decode_allow_trailing_bits(true);
const LENIENT_STANDARD: base64::engine::GeneralPurpose =
    base64::engine::GeneralPurpose::new(&base64::alphabet::STANDARD, LENIENT);
const LENIENT_URL_SAFE: base64::engine::GeneralPurpose =
    base64::engine::GeneralPurpose::new(&base64::alphabet::URL_SAFE, LENIENT);

/// Whitespace-separated tokens, scanning bytes (`split_ascii_whitespace` decodes chars and
/// showed up in profiles of 50,000-entry lists).
fn tokens(s: &str) -> impl Iterator<Item = &str> {
    let bytes = s.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let start = i;
        // Tokens end at a space, tab or newline (a stray CR or FF is caught when the digest
        // fails to decode).
        i = memchr::memchr3(b' ', b'\n', b'\t', &bytes[i..]).map_or(bytes.len(), |j| i + j);
        // Both ends sit on ASCII whitespace or the string's ends, so they are char boundaries.
        (start < i).then(|| &s[start..i])
    })
}

fn normalise_digest(
    token: &str,
    algorithm: &HashAlgorithm,
    value: &str,
    len: usize,
    notes: &mut Vec<HashNote>,
) -> Result<String, HashError> {
    let bytes = value.as_bytes();
    if bytes.len() == len * 2 {
        // The common case, lowercase hex, in one branch-free (vectorisable) pass: this runs
        // twice per entry of every list.
        let lower = bytes.iter().fold(true, |ok, &b| ok & ((b.wrapping_sub(b'0') < 10) | (b.wrapping_sub(b'a') < 6)));
        if lower {
            return Ok(value.to_owned());
        }
        let class = bytes.iter().fold(HEX_LOWER, |acc, &b| acc & HEX_CLASS[usize::from(b)]);
        if class & HEX_ANY != 0 {
            if class & NOT_UPPER == 0 {
                notes.push(HashNote::UpperHex(algorithm.clone()));
                return Ok(value.to_ascii_lowercase());
            }
            return Ok(value.to_owned());
        }
    }
    let decoded = LENIENT_STANDARD.decode(value).or_else(|_| LENIENT_URL_SAFE.decode(value));
    match decoded {
        Ok(raw) if raw.len() == len => {
            notes.push(HashNote::Base64(algorithm.clone()));
            Ok(hex::encode(raw))
        }
        _ => Err(HashError::BadDigest(token.to_owned(), algorithm.as_str().to_owned(), len * 2)),
    }
}

impl fmt::Display for HashList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_list_of_known_and_unknown_algorithms() {
        let (list, notes) = HashList::parse(
            "md5:1e0d5cb8ef6ba40c99b14c0237be735e  sha-256:854f61290e2e197a11bc91063afce22e43f8ccc655237050ace766adc68dc784 sha-512:abc",
        )
        .unwrap();
        assert!(notes.is_empty());
        assert_eq!(list.get(&HashAlgorithm::Md5), Some("1e0d5cb8ef6ba40c99b14c0237be735e"));
        assert_eq!(list.get(&HashAlgorithm::Other("sha-512".into())), Some("abc"));
        assert_eq!(list.0.len(), 3);
    }

    #[test]
    fn base64_digests_are_normalised_to_hex_with_a_note() {
        // md5("") = d41d8cd98f00b204e9800998ecf8427e
        let (list, notes) = HashList::parse("md5:1B2M2Y8AsgTpgAmY7PhCfg==").unwrap();
        assert_eq!(list.to_string(), "md5:d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(notes, vec![HashNote::Base64(HashAlgorithm::Md5)]);
    }

    #[test]
    fn uppercase_hex_is_lowercased_with_a_note() {
        let (list, notes) = HashList::parse("MD5:D41D8CD98F00B204E9800998ECF8427E").unwrap();
        assert_eq!(list.to_string(), "md5:d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(notes, vec![HashNote::UpperHex(HashAlgorithm::Md5)]);
        let (_, notes) = HashList::parse("md5:d41d8cd98f00b204e9800998ecf8427e").unwrap();
        assert!(notes.is_empty());
    }

    #[test]
    fn the_plain_fast_path_agrees_with_the_general_parse() {
        let md5 = "1e0d5cb8ef6ba40c99b14c0237be735e";
        let sha1 = "a9993e364706816aba3e25717850c26c9cd0d89d";
        let sha256 = "854f61290e2e197a11bc91063afce22e43f8ccc655237050ace766adc68dc784";
        let cases = [
            format!("md5:{md5}"),
            format!("md5:{md5} sha-256:{sha256}"),
            format!("sha-256:{sha256} md5:{md5} sha-1:{sha1}"),
            format!("md5:{md5}  sha-256:{sha256}"),
            format!(" md5:{md5}"),
            format!("md5:{md5} "),
            format!("md5:{md5}\tsha-1:{sha1}"),
            format!("md5:{md5} md5:{md5}"),
            format!("md5:{md5} md5:{}", &sha256[..32]),
            format!("md5:{md5}0"),
            format!("md5:{}", &md5[..31]),
            format!("md5:{}", md5.to_uppercase()),
            format!("MD5:{md5}"),
            format!("sha-1:{sha256}"),
            format!("sha-256:{sha256}sha-1:{sha1}"),
            format!("sha-512:abc md5:{md5}"),
            "md5:1B2M2Y8AsgTpgAmY7PhCfg==".to_owned(),
            "md5:".to_owned(),
            String::new(),
        ];
        for case in cases {
            if let Some(plain) = parse_plain(&case) {
                assert_eq!(Ok((plain, Vec::new())), parse_general(&case), "{case:?}");
            }
            assert_eq!(HashList::parse(&case), parse_general(&case), "{case:?}");
        }
        assert!(parse_plain(&format!("md5:{md5} sha-256:{sha256}")).is_some());
    }

    #[test]
    fn bad_digests_are_errors() {
        assert!(matches!(HashList::parse("md5:xyz"), Err(HashError::BadDigest(..))));
        assert!(matches!(HashList::parse("1e0d5cb8"), Err(HashError::NoAlgorithm(_))));
        assert!(matches!(HashList::parse("   "), Err(HashError::Empty)));
        assert!(matches!(HashList::parse("sha-256:1e0d5cb8ef6ba40c99b14c0237be735e"), Err(HashError::BadDigest(..))));
    }
}
