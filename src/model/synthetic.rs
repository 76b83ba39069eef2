//! Deterministic synthetic documents, for benchmarks and tests that need realistic sizes
//! without shipping megabytes of fixtures.

use super::datetime::W3cDateTime;
use super::hash::{Digest, HashAlgorithm, HashList};
use super::types::{Capability, Document, Entry, Header, Link, Md, RootFormat};

/// A Resource List of `n` entries, each with `lastmod`, an md5 and a sha-256 digest, `length`
/// and `type` — the shape the performance targets are stated for (~280 bytes per entry).
/// The digests are pseudo-random, not digests of any content.
pub fn synthetic_resource_list(n: usize) -> Document {
    let at = W3cDateTime::from_unix(1_700_000_000, 0).unwrap_or_else(|_| W3cDateTime::now());
    let mut md = Md { capability: Some(Capability::ResourceList), at: Some(at), ..Md::default() };
    md.completed = W3cDateTime::from_unix(1_700_000_060, 0).ok();
    let mut header = Header::new(RootFormat::UrlSet, md);
    header.links.push(Link::new("up", "http://example.com/dataset1/capabilitylist.xml"));
    let mut rng = SplitMix(0x5EED);
    let entries = (0..n).map(|i| synthetic_entry(i, &mut rng)).collect();
    Document { header, entries }
}

fn synthetic_entry(i: usize, rng: &mut SplitMix) -> Entry {
    let mut e = Entry::new(format!("http://example.com/dataset1/resources/{i:08}.xml"));
    e.lastmod = W3cDateTime::from_unix(1_600_000_000 + (rng.next() % 90_000_000) as i64, 0).ok();
    let md5: Vec<u8> = (0..2).flat_map(|_| rng.next().to_le_bytes()).collect();
    let sha: Vec<u8> = (0..4).flat_map(|_| rng.next().to_le_bytes()).collect();
    let hash =
        HashList(vec![Digest::from_bytes(HashAlgorithm::Md5, &md5), Digest::from_bytes(HashAlgorithm::Sha256, &sha)]);
    e.md = Some(Md {
        hash: Some(hash),
        length: Some(1024 + rng.next() % 4096),
        media_type: Some("application/xml".into()),
        ..Md::default()
    });
    e
}

/// splitmix64: tiny, fast, good enough for synthetic data.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}
