//! Store throughput (issue targets: ≥ 20,000 records/s for 2 KiB bitstreams with records and
//! change events in flushed batches of 100; ≥ 300 MB/s for one 256 MiB put; ≥ 1 GB/s
//! streaming get). Peak memory of the 256 MiB put is checked by the ignored test
//! `tests/it/store_perf.rs`. Run with `cargo bench --bench store`.

/// The allocator the `tributary` binary uses (see docs/STORE.md, "Why fjall").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;
use std::io::{self, Read};
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use sha2::Digest as _;
use tributary::model::{HashList, Link};
use tributary::store::{Batch, BlobId, Expected, Listing, NewRecord, Store, StoreOptions, Via};

const RECORDS: usize = 10_000;
const PER_BATCH: usize = 100;
const SMALL: usize = 2 * 1024;
const BIG: u64 = 256 * 1024 * 1024;

/// Serves `len` bytes from a 1 MiB pattern, stamping each chunk with its index and `seed` so
/// every run stores new content; costs almost nothing next to hashing.
struct Synthetic {
    pattern: Vec<u8>,
    seed: u64,
    pos: u64,
    len: u64,
}

impl Synthetic {
    fn new(seed: u64, len: u64) -> Self {
        let pattern = (0..1 << 20).map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        Synthetic { pattern, seed, pos: 0, len }
    }
}

impl Read for Synthetic {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let chunk = self.pattern.len() as u64;
        let off = (self.pos % chunk) as usize;
        let n = buf.len().min(self.pattern.len() - off).min((self.len - self.pos) as usize);
        buf[..n].copy_from_slice(&self.pattern[off..off + n]);
        if off == 0 && n >= 16 {
            buf[..8].copy_from_slice(&(self.pos / chunk).to_le_bytes());
            buf[8..16].copy_from_slice(&self.seed.to_le_bytes());
        }
        self.pos += n as u64;
        Ok(n)
    }
}

fn fresh_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open_with(&dir.path().join("store"), &StoreOptions::default()).expect("open");
    (dir, store)
}

fn record(i: usize, sha: BlobId) -> NewRecord {
    NewRecord {
        uri: format!("http://tributary.test/set/res/{i:08}"),
        source: "bench".into(),
        upstream: format!("http://upstream.test/res/{i:08}"),
        sha256: sha,
        listing: Listing {
            origin: format!("http://origin.test/res/{i:08}"),
            declared: HashList::default(),
            length: None,
            media_type: Some("application/xml".into()),
            lastmod: Some("2024-05-01T10:00:00Z".parse().expect("datetime")),
            via: Via { length: Some(SMALL as u64), ..Via::default() },
            links: vec![Link::new("describedby", "http://origin.test/meta.xml")],
        },
    }
}

/// The harvester's loop: put each bitstream, add its record to the batch, apply (durably)
/// every 100.
fn harvest(store: &Store, seed: u64) {
    let mut content = vec![0u8; SMALL];
    let mut batch = Batch::new();
    for i in 0..RECORDS {
        content[..8].copy_from_slice(&(i as u64).to_le_bytes());
        content[8..16].copy_from_slice(&seed.to_le_bytes());
        let info = store.put(&content[..], &Expected { length: Some(SMALL as u64), ..Expected::none() }).expect("put");
        batch.upsert(&["bench", "merged"], record(i, info.id));
        if batch.len() == PER_BATCH {
            store.apply(&mut batch).expect("apply");
        }
    }
}

/// The same work with puts on one thread and batches applied on another, as the harvester
/// runs them (downloads and verification continue while a batch commits and fsyncs).
fn harvest_pipelined(store: &Store, seed: u64) {
    let (tx, rx) = std::sync::mpsc::sync_channel::<Batch>(2);
    std::thread::scope(|s| {
        s.spawn(move || {
            for mut batch in rx {
                store.apply(&mut batch).expect("apply");
            }
        });
        let mut content = vec![0u8; SMALL];
        let mut batch = Batch::new();
        for i in 0..RECORDS {
            content[..8].copy_from_slice(&(i as u64).to_le_bytes());
            content[8..16].copy_from_slice(&seed.to_le_bytes());
            let expected = Expected { length: Some(SMALL as u64), ..Expected::none() };
            let info = store.put(&content[..], &expected).expect("put");
            batch.upsert(&["bench", "merged"], record(i, info.id));
            if batch.len() == PER_BATCH {
                tx.send(std::mem::take(&mut batch)).expect("send batch");
            }
        }
        drop(tx);
    });
}

fn bench_records(c: &mut Criterion) {
    let mut g = c.benchmark_group("store_records");
    g.throughput(Throughput::Elements(RECORDS as u64));
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    let mut seed = 0;
    g.bench_function("put+apply 10k x 2KiB, batches of 100, flushed", |b| {
        b.iter_batched(
            fresh_store,
            |(dir, store)| {
                seed += 1;
                harvest(&store, seed);
                (dir, store)
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("pipelined: puts on one thread, apply on another", |b| {
        b.iter_batched(
            fresh_store,
            |(dir, store)| {
                seed += 1;
                harvest_pipelined(&store, seed);
                (dir, store)
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

fn bench_big(c: &mut Criterion) {
    let mut g = c.benchmark_group("store_big");
    g.throughput(Throughput::Bytes(BIG));
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    let mut seed = 0;
    g.bench_function("put 256 MiB (synced)", |b| {
        b.iter_batched(
            fresh_store,
            |(dir, store)| {
                seed += 1;
                black_box(store.put(Synthetic::new(seed, BIG), &Expected::none()).expect("put"));
                (dir, store)
            },
            BatchSize::PerIteration,
        )
    });
    let (_dir, store) = fresh_store();
    let id = store.put(Synthetic::new(0, BIG), &Expected::none()).expect("put").id;
    let mut buf = vec![0u8; 256 * 1024];
    g.bench_function("get 256 MiB (streaming)", |b| {
        b.iter(|| {
            let mut r = store.get(&id).expect("get");
            while r.read(&mut buf).expect("read") > 0 {
                black_box(&buf);
            }
        })
    });
    g.finish();
}

fn bench_hash(c: &mut Criterion) {
    let data = vec![0x5au8; 1 << 20];
    let mut g = c.benchmark_group("hash_1MiB");
    g.throughput(Throughput::Bytes(data.len() as u64));
    g.bench_function("sha-256", |b| b.iter(|| black_box(sha2::Sha256::digest(&data))));
    g.bench_function("md5", |b| b.iter(|| black_box(md5::Md5::digest(&data))));
    g.bench_function("sha-1", |b| b.iter(|| black_box(sha1::Sha1::digest(&data))));
    g.finish();
}

criterion_group!(benches, bench_records, bench_big, bench_hash);
criterion_main!(benches);
