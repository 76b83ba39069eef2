//! Deterministic bitstreams: the bytes of resource `id` at `version` are a pure function of
//! the seed, so they never need storing — the simulator keeps only their length and digests
//! and regenerates the bytes for each GET or dump package.
//!
//! Content is readable text (a header line, then pseudo-random words), so a human poking at a
//! resource with curl sees what it is. An update changes the version and therefore the bytes,
//! the length (usually) and every hash.

use md5::Md5;
use sha2::{Digest as _, Sha256};

use crate::model::{Digest, HashAlgorithm, HashList};

/// Media type of the simulated data resources.
pub(crate) const DATA_TYPE: &str = "text/plain";
/// Media type of the metadata resources served with `--links`.
pub(crate) const META_TYPE: &str = "application/xml";

/// Length and digests of one bitstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Digests {
    pub(crate) length: u64,
    pub(crate) md5: [u8; 16],
    pub(crate) sha256: [u8; 32],
}

impl Digests {
    pub(crate) fn of(bytes: &[u8]) -> Self {
        Digests { length: bytes.len() as u64, md5: Md5::digest(bytes).into(), sha256: Sha256::digest(bytes).into() }
    }

    /// The `hash` attribute value: md5 and sha-256.
    pub(crate) fn hash_list(&self) -> HashList {
        HashList(vec![
            Digest::from_bytes(HashAlgorithm::Md5, &self.md5),
            Digest::from_bytes(HashAlgorithm::Sha256, &self.sha256),
        ])
    }
}

/// splitmix64: tiny, fast, and good enough for picking sizes, ids and filler text.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix(u64);

impl SplitMix {
    pub(crate) fn new(seed: u64) -> Self {
        SplitMix(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// A generator for one (seed, id, version), independent of the event stream's generator so
/// that regenerating a body never disturbs the sequence of events.
fn stream(seed: u64, id: u64, version: u32) -> SplitMix {
    let mut mix = SplitMix::new(seed ^ id.rotate_left(17) ^ u64::from(version).rotate_left(41));
    mix.next_u64();
    mix
}

/// The size of resource `id` at `version`, uniform in `min..=max`.
pub(crate) fn size_of(seed: u64, id: u64, version: u32, min: u64, max: u64) -> u64 {
    let span = max - min + 1;
    min + stream(seed ^ 0x5173, id, version).next_u64() % span
}

/// The bytes of data resource `id` at `version`, exactly `size` long.
pub(crate) fn data_body(seed: u64, id: u64, version: u32, size: u64) -> Vec<u8> {
    let size = size as usize;
    let mut out = format!("Tributary simulated resource {id}, version {version}, seed {seed}\n").into_bytes();
    out.truncate(size);
    out.reserve(size - out.len());
    let mut rng = stream(seed, id, version);
    let mut column = 0;
    while out.len() < size {
        for b in rng.next_u64().to_le_bytes() {
            if out.len() == size {
                break;
            }
            let c = match (column, b % 7) {
                (71.., _) => b'\n',
                (_, 0) => b' ',
                _ => b'a' + b % 26,
            };
            column = if c == b'\n' { 0 } else { column + 1 };
            out.push(c);
        }
    }
    out
}

/// The metadata record describing data resource `id` at `version` (its digests included, so
/// it changes whenever the data does).
pub(crate) fn meta_body(id: u64, version: u32, data: &Digests) -> Vec<u8> {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<record id=\"{id}\" version=\"{version}\">\
         <length>{}</length><sha256>{}</sha256></record>\n",
        data.length,
        hex::encode(data.sha256)
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_have_the_exact_size_and_depend_on_version() {
        for size in [0, 1, 10, 72, 73, 500, 4096] {
            assert_eq!(data_body(7, 3, 1, size).len() as u64, size);
        }
        assert_eq!(data_body(7, 3, 1, 300), data_body(7, 3, 1, 300));
        assert_ne!(data_body(7, 3, 1, 300), data_body(7, 3, 2, 300));
        assert_ne!(data_body(7, 3, 1, 300), data_body(8, 3, 1, 300));
    }

    #[test]
    fn sizes_stay_in_range() {
        for id in 0..200 {
            let s = size_of(1, id, 1, 100, 120);
            assert!((100..=120).contains(&s));
        }
        assert_eq!(size_of(1, 5, 1, 64, 64), 64);
    }
}
