//! Audit of a 10,000-resource Source without `--fetch`: the Resource List served from
//! 127.0.0.1, the records in a real store. Target: at least 50,000 resources/s.

#[path = "../tests/it/support/http.rs"]
#[allow(dead_code, unreachable_pub)]
mod http;

use std::collections::HashMap;
use std::num::NonZeroU32;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sha2::Digest as _;
use tributary::config::{Rate, Settings};
use tributary::fetch::{Fetcher, FetcherOptions};
use tributary::harvest::audit::audit_source;
use tributary::model::HashList;
use tributary::naming::Naming;
use tributary::store::{Batch, Expected, Listing, NewRecord, Store, StoreOptions, Via};
use url::Url;

const N: usize = 10_000;

fn setup(store: &Store, naming: &Naming) -> String {
    let mut batch = Batch::new();
    let mut list = String::from(
        "<?xml version=\"1.0\"?>\n<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" \
         xmlns:rs=\"http://www.openarchives.org/rs/terms/\"><rs:ln rel=\"up\" href=\"/cl.xml\"/>\
         <rs:md capability=\"resourcelist\" at=\"2024-06-01T00:00:00Z\"/>\n",
    );
    for i in 0..N {
        let data = format!("resource number {i}");
        let upstream = format!("http://127.0.0.1:1/obj/{i}.xml");
        let blob = store.put(data.as_bytes(), &Expected::none()).unwrap();
        let hex = hex::encode(sha2::Sha256::digest(data.as_bytes()));
        list.push_str(&format!(
            "<url><loc>{upstream}</loc><lastmod>2024-05-01T10:00:00Z</lastmod>\
             <rs:md hash=\"sha-256:{hex}\" length=\"{}\"/></url>\n",
            data.len()
        ));
        batch.upsert(
            &["set"],
            NewRecord {
                uri: naming.resource("src", &upstream).unwrap(),
                source: "src".into(),
                upstream: upstream.clone(),
                sha256: blob.id,
                listing: Listing {
                    origin: upstream,
                    declared: HashList::default(),
                    length: None,
                    media_type: Some("application/xml".into()),
                    lastmod: Some("2024-05-01T10:00:00Z".parse().unwrap()),
                    via: Via::default(),
                    links: vec![],
                },
            },
        );
    }
    store.apply(&mut batch).unwrap();
    list + "</urlset>\n"
}

fn audit(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with(&dir.path().join("store"), &StoreOptions::default()).unwrap();
    let naming = Naming::new(&Url::parse("http://tributary.test/").unwrap());
    let list = setup(&store, &naming);
    let server = http::Server::start(HashMap::from([("/rl.xml".to_owned(), http::Response::ok(list))]));
    let url = Url::parse(&server.url("/rl.xml")).unwrap();
    let settings = Settings {
        allow_private: true,
        rate: Rate::Unlimited,
        concurrency: NonZeroU32::new(4).unwrap(),
        ..Settings::default()
    };
    let fetcher = Fetcher::new(FetcherOptions::new("TributaryBench/0.1 (+mailto:test@example.org)")).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut g = c.benchmark_group("audit");
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(10);
    g.bench_function("10k_resources_no_fetch", |b| {
        b.iter(|| {
            let r = rt.block_on(audit_source(&settings, &store, &fetcher, &naming, "src", &url, false)).unwrap();
            assert!(r.is_in_sync());
        })
    });
    g.finish();
}

criterion_group!(benches, audit);
criterion_main!(benches);
