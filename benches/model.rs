//! Reading and writing a 50,000-entry Resource List (issue: ≥ 500,000 entries/s with the full
//! model built and validated; writing at least as fast as reading).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tributary::model::{DocumentReader, ReadOptions, Validator, synthetic_resource_list, to_bytes, write_document};

fn bench(c: &mut Criterion) {
    let doc = synthetic_resource_list(50_000);
    let bytes = to_bytes(&doc);
    let mut g = c.benchmark_group("resourcelist_50k");
    g.throughput(Throughput::Elements(50_000));
    g.sample_size(20);
    g.bench_function("read+validate", |b| {
        b.iter(|| {
            let mut reader = DocumentReader::new(&bytes[..], ReadOptions::default()).unwrap();
            let mut v = Validator::new(reader.header(), reader.root_position());
            while let Some(e) = reader.next_entry().unwrap() {
                v.entry(&e, reader.entry_position());
            }
            black_box(v.finish());
        })
    });
    g.bench_function("read_only", |b| {
        b.iter(|| {
            let mut reader = DocumentReader::new(&bytes[..], ReadOptions::default()).unwrap();
            while let Some(e) = reader.next_entry().unwrap() {
                black_box(e);
            }
        })
    });
    // For scale: quick-xml alone, namespace-aware, resolving every element and touching every
    // attribute, building nothing. The model's read+validate is measured against this.
    g.bench_function("bare_quick_xml_scan", |b| {
        b.iter(|| {
            let mut r = quick_xml::NsReader::from_reader(&bytes[..]);
            let mut buf = Vec::with_capacity(4096);
            let mut urls = 0usize;
            loop {
                match r.read_event_into(&mut buf).unwrap() {
                    quick_xml::events::Event::Start(e) | quick_xml::events::Event::Empty(e) => {
                        let (_, local) = r.resolver().resolve_element(e.name());
                        urls += usize::from(local.as_ref() == "url");
                        for a in e.attributes() {
                            black_box(a.unwrap());
                        }
                    }
                    quick_xml::events::Event::Eof => break,
                    _ => {}
                }
                buf.clear();
            }
            assert_eq!(urls, 50_000);
        })
    });
    let mut out = Vec::with_capacity(bytes.len() + 1024);
    g.bench_function("write", |b| {
        b.iter(|| {
            out.clear();
            black_box(write_document(&doc, &mut out).unwrap());
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
