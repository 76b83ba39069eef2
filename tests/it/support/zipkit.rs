//! A hand-rolled ZIP writer for hostile packages: any name bytes, symlink modes, sizes that
//! lie, and deflate bombs built in a few milliseconds (the real `zip` writer refuses or
//! normalises most of these, and would take seconds to deflate a gigabyte).

use std::io::Write;

/// One entry as it will be written: `data` is the payload exactly as stored.
pub(crate) struct RawEntry {
    pub(crate) name: Vec<u8>,
    pub(crate) method: u16,
    pub(crate) crc: u32,
    pub(crate) compressed: Vec<u8>,
    /// The uncompressed size written in both headers (may lie).
    pub(crate) size: u32,
    pub(crate) unix_mode: u32,
}

pub(crate) fn crc32(data: &[u8]) -> u32 {
    let mut c = flate2::Crc::new();
    c.update(data);
    c.sum()
}

/// A stored (uncompressed) regular file.
pub(crate) fn stored(name: &str, data: &[u8]) -> RawEntry {
    RawEntry {
        name: name.as_bytes().to_vec(),
        method: 0,
        crc: crc32(data),
        compressed: data.to_vec(),
        size: data.len() as u32,
        unix_mode: 0o100_644,
    }
}

/// A deflated regular file.
pub(crate) fn deflated(name: &str, data: &[u8]) -> RawEntry {
    let mut enc = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).unwrap();
    RawEntry { method: 8, compressed: enc.finish().unwrap(), ..stored(name, data) }
}

/// A symbolic link to `target`.
pub(crate) fn symlink(name: &str, target: &str) -> RawEntry {
    RawEntry { unix_mode: 0o120_777, ..stored(name, target.as_bytes()) }
}

/// `mib` MiB of zeros as raw deflate, built by repeating one byte-aligned, non-final block
/// of a MiB of zeros (its back-references only ever see zeros) and closing with an empty
/// final block: ~1 KB per MiB, the most deflate can do. `declared` is the size written into the headers; the CRC is left wrong,
/// since a bomb must be stopped before its end.
pub(crate) fn zero_bomb(name: &str, mib: usize, declared: u32) -> RawEntry {
    let mut c = flate2::Compress::new(flate2::Compression::best(), false);
    let zeros = vec![0u8; 1 << 20];
    let mut block = Vec::with_capacity(64 * 1024);
    c.compress_vec(&zeros, &mut block, flate2::FlushCompress::Sync).unwrap();
    assert_eq!(c.total_in(), 1 << 20, "block must hold the whole MiB");
    let mut compressed = Vec::with_capacity(block.len() * mib + 2);
    for _ in 0..mib {
        compressed.extend_from_slice(&block);
    }
    compressed.extend_from_slice(&[0x03, 0x00]); // final empty fixed-Huffman block
    RawEntry { name: name.as_bytes().to_vec(), method: 8, crc: 0, compressed, size: declared, unix_mode: 0o100_644 }
}

/// The ZIP file holding `entries`, in order.
pub(crate) fn build(entries: &[RawEntry]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for e in entries {
        let offset = out.len() as u32;
        out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        common_fields(&mut out, e);
        out.extend_from_slice(&0u16.to_le_bytes()); // extra length
        out.extend_from_slice(&e.name);
        out.extend_from_slice(&e.compressed);

        central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        central.extend_from_slice(&((3u16 << 8) | 20).to_le_bytes()); // made by: Unix
        common_fields(&mut central, e);
        central.extend_from_slice(&[0u8; 8]); // extra, comment, disk, internal attributes
        central.extend_from_slice(&(e.unix_mode << 16).to_le_bytes());
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(&e.name);
    }
    let cd_offset = out.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&cd_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

/// version needed, flags, method, time, date, crc, sizes, name length (shared by both headers).
fn common_fields(out: &mut Vec<u8>, e: &RawEntry) {
    out.extend_from_slice(&20u16.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&e.method.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&0x21u16.to_le_bytes()); // 1980-01-01
    out.extend_from_slice(&e.crc.to_le_bytes());
    out.extend_from_slice(&(e.compressed.len() as u32).to_le_bytes());
    out.extend_from_slice(&e.size.to_le_bytes());
    out.extend_from_slice(&(e.name.len() as u16).to_le_bytes());
}

/// A manifest: `capability` is `resourcedump-manifest` or `changedump-manifest`; each entry
/// is `(loc, attributes of <rs:md>)`.
pub(crate) fn manifest(capability: &str, entries: &[(&str, String)]) -> String {
    let times =
        if capability.starts_with("change") { "from=\"2024-01-01T00:00:00Z\"" } else { "at=\"2024-01-01T00:00:00Z\"" };
    let mut s = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" \
         xmlns:rs=\"http://www.openarchives.org/rs/terms/\">\n  <rs:ln rel=\"up\" href=\"/capabilitylist.xml\"/>\n  \
         <rs:md capability=\"{capability}\" {times}/>\n"
    );
    for (loc, md) in entries {
        s.push_str(&format!("  <url><loc>{loc}</loc><rs:md {md}/></url>\n"));
    }
    s.push_str("</urlset>\n");
    s
}

/// `path`, `length` and `sha-256` attributes for `data`.
pub(crate) fn md_for(path: &str, data: &[u8]) -> String {
    use sha2::Digest as _;
    format!("path=\"{path}\" length=\"{}\" hash=\"sha-256:{}\"", data.len(), hex::encode(sha2::Sha256::digest(data)))
}
