//! Performance checks too slow or too machine-dependent for every `cargo test`; run them on
//! purpose with
//! `cargo test --release --test it -- store_perf:: --ignored --nocapture --test-threads=1`.
//! Each test runs alone in its process (`--exact store_perf::NAME`) when its peak RSS matters.
//! The figures are the binary's: the test binary uses its allocator (see `main.rs`).

use std::io::{self, Read};
use std::time::Instant;

use crate::support::store::record;
use tributary::store::{Batch, Expected, Store, StoreOptions};

/// Peak resident set size of this process so far, from `/proc/self/status` (Linux).
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// `len` bytes from a 1 MiB pattern, each chunk stamped with its index, generated on the fly.
struct Synthetic {
    pattern: Vec<u8>,
    pos: u64,
    len: u64,
}

impl Read for Synthetic {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let chunk = self.pattern.len() as u64;
        let off = (self.pos % chunk) as usize;
        let n = buf.len().min(self.pattern.len() - off).min((self.len - self.pos) as usize);
        buf[..n].copy_from_slice(&self.pattern[off..off + n]);
        if off == 0 && n >= 8 {
            buf[..8].copy_from_slice(&(self.pos / chunk).to_le_bytes());
        }
        self.pos += n as u64;
        Ok(n)
    }
}

/// The memory bound: a 256 MiB put streams with peak RSS under 64 MiB. Run it alone:
/// `cargo test --release --test it -- --ignored --exact store_perf::put_256mib_peak_rss_under_64mib --nocapture`
#[test]
#[ignore = "slow; run on purpose, alone in its process"]
fn put_256mib_peak_rss_under_64mib() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with(&dir.path().join("store"), &StoreOptions::default()).unwrap();
    let len = 256 * 1024 * 1024;
    let pattern = (0..1u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let start = Instant::now();
    let info =
        store.put(Synthetic { pattern, pos: 0, len }, &Expected { length: Some(len), ..Expected::none() }).unwrap();
    let put_secs = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let copied = io::copy(&mut store.get(&info.id).unwrap(), &mut io::sink()).unwrap();
    let get_secs = start.elapsed().as_secs_f64();
    assert_eq!(copied, len);
    let peak = peak_rss_bytes().expect("VmHWM in /proc/self/status");
    eprintln!(
        "put 256 MiB: {:.0} MB/s; get: {:.0} MB/s; peak RSS {:.1} MiB",
        len as f64 / 1e6 / put_secs,
        len as f64 / 1e6 / get_secs,
        peak as f64 / 1048576.0
    );
    assert!(peak < 64 * 1024 * 1024, "peak RSS {peak} bytes");
}

/// CPU time of the calling thread so far (`/proc/thread-self/schedstat`, Linux), in seconds.
/// Wall-clock phases mean little on a shared two-core machine; CPU time does.
fn thread_cpu() -> f64 {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    text.split_whitespace().next().and_then(|ns| ns.parse::<f64>().ok()).unwrap_or(0.0) / 1e9
}

/// User + system CPU time of the whole process so far (`/proc/self/stat`, all threads: the
/// database's flushes and compactions included), in seconds, at clock-tick resolution.
fn process_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Numeric fields after the parenthesised command name and the state letter start at field
    // 4; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    f.get(10).zip(f.get(11)).map_or(0.0, |(u, s)| (u + s) / 100.0)
}

/// The harvester's loop at full speed, with phase timings, for profiling (`perf record` this
/// test). `STORE_CACHE_MB` sets the block cache; `STORE_BATCH` the records per batch (100).
#[test]
#[ignore = "slow; run on purpose"]
fn harvest_10k_small_records() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = StoreOptions::default();
    if let Ok(mb) = std::env::var("STORE_CACHE_MB") {
        options.cache_capacity = mb.parse::<u64>().unwrap() << 20;
    }
    let per_batch: usize = std::env::var("STORE_BATCH").ok().and_then(|b| b.parse().ok()).unwrap_or(100);
    let store = Store::open_with(&dir.path().join("store"), &options).unwrap();
    let mut content = vec![0x42u8; 2048];
    let start = Instant::now();
    let cpu_start = process_cpu();
    let mut batch = Batch::new();
    let (mut put, mut apply) = (0.0, 0.0);
    let mut t = thread_cpu();
    for i in 0..10_000u64 {
        content[..8].copy_from_slice(&i.to_le_bytes());
        let info = store.put(&content[..], &Expected::none()).unwrap();
        batch.upsert(&["bench", "merged"], record(&format!("http://tributary.test/r/{i:08}"), info.id));
        if batch.len() == per_batch {
            let t1 = thread_cpu();
            put += t1 - t;
            store.apply(&mut batch).unwrap();
            t = thread_cpu();
            apply += t - t1;
            batch = Batch::new();
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = process_cpu() - cpu_start;
    eprintln!(
        "10k records in {secs:.3}s wall: {:.0} records/s; process CPU {cpu:.2}s ({:.0} records per CPU-second); \
         this thread's CPU: put+build {put:.3}s, apply (durable) {apply:.3}s",
        10_000.0 / secs,
        10_000.0 / cpu
    );
    assert!(store.verify().unwrap().is_clean());
}
