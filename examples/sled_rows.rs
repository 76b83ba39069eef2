//! What one sled 0.34 row costs, without the rest of Tributary: the evidence for store format
//! 8 keeping the per-resource tables out of sled (docs/STORE.md, "Format 8").
//!
//! ```text
//! sled_rows <dir> <rows> <key> <value bytes> [rows per batch]
//! ```
//! `key`: `uri` (an 80-byte Tributary URI, in order, as a harvest of a sorted listing writes
//! them), `path` (a 30-byte URI tail, in order), `seq` (a 9-byte counter) or `sha` (a 33-byte
//! sha-256, in random order, as blob rows are). One `apply_batch` and `flush` per batch
//! (default 1,000), as the store's `apply` does. Prints rows/s and the bytes sled's directory
//! takes per row.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::error::Error;
use std::path::Path;
use std::time::Instant;

use sha2::Digest as _;

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, n, key, value, rest @ ..] = args.as_slice() else {
        return Err("usage: sled_rows <dir> <rows> uri|path|seq|sha <value bytes> [rows per batch]".into());
    };
    let (n, value): (usize, usize) = (n.parse()?, value.parse()?);
    let batch: usize = rest.first().map(|b| b.parse()).transpose()?.unwrap_or(1000);
    let key_of = |i: usize| -> Vec<u8> {
        match key.as_str() {
            "uri" => format!("rhttp://t.example.org/r/bench/https/provider.example.org/oai/record/{i:010}.xml").into(),
            "path" => format!("r/oai/record/{i:010}.xml").into(),
            "seq" => [b"r".as_slice(), &(i as u64).to_be_bytes()].concat(),
            _ => [b"b".as_slice(), &sha2::Sha256::digest(i.to_le_bytes())].concat(),
        }
    };
    if !matches!(key.as_str(), "uri" | "path" | "seq" | "sha") {
        return Err(format!("unknown key shape {key:?}").into());
    }
    let dir = Path::new(dir);
    let db = sled::Config::new().path(dir).cache_capacity(128 << 20).mode(sled::Mode::HighThroughput).open()?;
    let start = Instant::now();
    for first in (0..n).step_by(batch) {
        let mut b = sled::Batch::default();
        for i in first..(first + batch).min(n) {
            b.insert(key_of(i), vec![7u8; value]);
        }
        db.apply_batch(b)?;
        db.flush()?;
    }
    let secs = start.elapsed().as_secs_f64();
    drop(db);
    println!(
        "{key} keys, {value}-byte values: {n} rows in {secs:.1} s = {:.0} rows/s, {:.0} bytes/row on disk",
        n as f64 / secs,
        dir_size(dir)? as f64 / n as f64
    );
    Ok(())
}

fn dir_size(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() { dir_size(&entry.path())? } else { meta.len() };
    }
    Ok(total)
}
