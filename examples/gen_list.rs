//! Writes a synthetic Resource List for benchmarks: `cargo run --release --example gen_list -- N`
//! prints N entries, each with `lastmod`, md5 and sha-256 hashes, `length` and `type` (about
//! 280 bytes per entry, so 50,000 entries make ~14 MB).

use std::io::{self, BufWriter};

use tributary::model::{synthetic_resource_list, write_document};

fn main() -> io::Result<()> {
    let n = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(50_000);
    let doc = synthetic_resource_list(n);
    write_document(&doc, BufWriter::new(io::stdout().lock()))?;
    Ok(())
}
