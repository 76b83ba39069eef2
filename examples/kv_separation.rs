//! Small bitstreams in packs or in fjall (docs/STORE.md, "Why fjall"): writes N bitstreams of
//! 300 bytes in durable batches of 1,000, either as Tributary stores them (appended to a pack
//! file that is synced before the batch of rows naming it) or as the values of a fjall
//! keyspace with key-value separation, and prints the rate, the bytes the process wrote and
//! the bytes left on disk once fjall is settled.
//!
//! `cargo run --release --example kv_separation -- pack|kv N DIR` (DIR is emptied first).

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use fjall::config::CompressionPolicy;
use fjall::{CompressionType, Database, KeyspaceCreateOptions, KvSeparationOptions, PersistMode};
use sha2::Digest as _;

const BATCH: u64 = 1_000;
const SIZE: usize = 300;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, n, dir] = args.as_slice() else {
        eprintln!("usage: kv_separation pack|kv N DIR");
        std::process::exit(2);
    };
    let kv = match mode.as_str() {
        "kv" => true,
        "pack" => false,
        other => panic!("mode {other:?}: expected pack or kv"),
    };
    let n: u64 = n.parse().expect("N is a number");
    let dir = Path::new(dir);
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("DIR");

    let db = Database::builder(dir.join("meta")).journal_compression(CompressionType::None).open().expect("open");
    let options = KeyspaceCreateOptions::default()
        .data_block_compression_policy(CompressionPolicy::all(CompressionType::Lz4))
        .max_memtable_size(16 << 20);
    let keyspace = if kv {
        let separation = KvSeparationOptions::default().separation_threshold(256).compression(CompressionType::Lz4);
        db.keyspace("blobs", || options.with_kv_separation(Some(separation)))
    } else {
        db.keyspace("blobs", || options)
    }
    .expect("keyspace");
    let mut pack = OpenOptions::new().create(true).append(true).open(dir.join("pack")).expect("pack");

    let (written, start) = (io_written(), Instant::now());
    let mut offset = 0u64;
    for b in 0..n / BATCH {
        let mut batch = db.batch().durability(Some(PersistMode::SyncData));
        let mut appended = Vec::new();
        for i in b * BATCH..(b + 1) * BATCH {
            let content = bitstream(i);
            let key = sha2::Sha256::digest(&content).to_vec();
            if kv {
                batch.insert(&keyspace, key, content);
            } else {
                // A row as the store keeps one: where in which pack, the length, the hashes.
                let mut row = offset.to_le_bytes().to_vec();
                row.extend_from_slice(&[0; 60]);
                offset += content.len() as u64;
                appended.extend_from_slice(&content);
                batch.insert(&keyspace, key, row);
            }
        }
        if !kv {
            append_durably(&mut pack, &appended);
        }
        batch.commit().expect("commit");
    }
    let secs = start.elapsed().as_secs_f64();
    settle(&db, &keyspace);
    let written = (io_written() - written) as f64;
    println!(
        "{mode}: {n} bitstreams in {secs:.2} s = {:.0}/s; written {:.0} MB ({:.1} B each); on disk {:.0} MB",
        n as f64 / secs,
        written / 1e6,
        written / n as f64,
        allocated(dir) as f64 / 1e6
    );
}

/// Bitstream `i`: 300 bytes of XML-like text, as a small metadata record.
fn bitstream(i: u64) -> Vec<u8> {
    let mut v = format!("<record><id>{i:010}</id><title>Title of record number {i}</title>").into_bytes();
    while v.len() < SIZE {
        v.extend_from_slice(format!("<dc:subject>subject {}</dc:subject>", i % 97).as_bytes());
    }
    v.truncate(SIZE);
    v
}

/// The pack rule: bytes synced before the rows that name them are committed.
fn append_durably(pack: &mut File, bytes: &[u8]) {
    pack.write_all(bytes).expect("pack write");
    pack.sync_data().expect("pack sync");
}

/// Writes the memtable out and waits for flushes and compactions to finish.
fn settle(db: &Database, keyspace: &fjall::Keyspace) {
    keyspace.rotate_memtable_and_wait().expect("flush");
    std::thread::sleep(Duration::from_secs(5));
    while db.outstanding_flushes() > 0 || db.active_compactions() > 0 {
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Bytes this process has caused to be written to storage (`write_bytes` of `/proc/self/io`).
fn io_written() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").expect("/proc/self/io");
    io.lines().find_map(|l| l.strip_prefix("write_bytes: ")).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

/// Allocated bytes under `path`.
fn allocated(path: &Path) -> u64 {
    std::fs::read_dir(path)
        .expect("read_dir")
        .map(|e| {
            let e = e.expect("entry");
            let meta = e.metadata().expect("metadata");
            if meta.is_dir() { allocated(&e.path()) } else { std::os::unix::fs::MetadataExt::blocks(&meta) * 512 }
        })
        .sum()
}
