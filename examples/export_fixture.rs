//! Writes a small store holding a row of every table, and its export: the fixtures the import
//! test starts from (`tests/fixtures/store-format-N/`). Each committed fixture was written by
//! the last build of store format N, so the test shows that a store of that format crosses to
//! the current one; when the format changes again, run this with the last build of the old one.
//!
//! `cargo run --example export_fixture -- DIR` writes `DIR/store/` and `DIR/export.jsonl`
//! (DIR must exist).

use std::path::PathBuf;

use tributary::model::{HashList, Link};
use tributary::store::{
    Batch, Expected, HubSubscriber, Lease, Listing, NewFailure, NewRecord, PendingRequest, SourceState, Store,
    StoreOptions, Subscription, Via,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(std::env::args().nth(1).ok_or("usage: export_fixture DIR")?);
    let store = Store::open_with(&dir.join("store"), &StoreOptions::small())?;
    fill(&store)?;
    let mut out = std::fs::File::create(dir.join("export.jsonl"))?;
    let counts = store.export(&mut out, &dir.join("export.jsonl"))?;
    eprintln!("{counts}");
    Ok(())
}

const SETS: [&str; 2] = ["museum", "all"];

fn listing(n: u32, via_origin: bool) -> Listing {
    let origin = if via_origin {
        format!("http://origin.example.org/item/{n}")
    } else {
        format!("http://museum.example.org/item/{n}")
    };
    let mut link = Link::new("describedby", format!("http://museum.example.org/meta/{n}"));
    link.modified = Some("2024-05-01T10:00:00.250+02:00".parse().expect("datetime"));
    link.media_type = Some("application/xml".into());
    let declared = HashList::parse("md5:00112233445566778899aabbccddeeff sha-512:abc").expect("hashes").0;
    Listing {
        origin,
        declared: if n.is_multiple_of(3) { declared } else { HashList::default() },
        length: None,
        media_type: Some(if n.is_multiple_of(2) { "text/plain" } else { "application/xml" }.into()),
        lastmod: Some(format!("2024-05-0{}T10:00:00Z", 1 + n % 9).parse().expect("datetime")),
        via: Via {
            modified: via_origin.then(|| "2024-04-30T23:59:59.125Z".parse().expect("datetime")),
            ..Via::default()
        },
        links: if n % 2 == 1 { vec![link] } else { Vec::new() },
    }
}

fn record(store: &Store, n: u32, content: &[u8]) -> Result<NewRecord, Box<dyn std::error::Error>> {
    let via_origin = n % 4 == 1;
    let sha256 = store.put(content, &Expected::none())?.id;
    let upstream = format!("http://museum.example.org/item/{n}");
    Ok(NewRecord {
        uri: format!("http://tributary.example.org/r/museum/{n}"),
        source: "museum".into(),
        upstream,
        sha256,
        listing: listing(n, via_origin),
    })
}

fn fill(store: &Store) -> Result<(), Box<dyn std::error::Error>> {
    // A baseline of twelve records, two of them sharing content and one larger than a pack
    // takes (a file under blobs/).
    let mut batch = Batch::new();
    for n in 0..12u32 {
        let content = match n {
            7 => vec![b'x'; 20_000],
            11 => b"shared content".to_vec(),
            _ => format!("item {n}").into_bytes(),
        };
        batch.upsert(&SETS, record(store, n, &content)?);
    }
    batch.upsert(&SETS, record(store, 12, b"shared content")?);
    batch.source_state("museum", state(1));
    store.apply(&mut batch)?;

    // Changes: an update, a deletion, a re-creation of a deleted one, and failures.
    let mut batch = Batch::new();
    batch.upsert(&SETS, record(store, 2, b"item 2, changed")?);
    batch.delete(&SETS, "http://tributary.example.org/r/museum/5");
    batch.delete(&SETS, "http://tributary.example.org/r/museum/6");
    batch.fail(NewFailure {
        source: "museum".into(),
        uri: "http://tributary.example.org/r/museum/99".into(),
        upstream: "http://museum.example.org/item/99".into(),
        reason: "http://museum.example.org/item/99: HTTP 503".into(),
        listing: listing(99, false),
    });
    batch.feed_item("news", "urn:uuid:1", Some(vec![1, 2, 3, 0, 255]));
    batch.source_state("museum", state(2));
    store.apply(&mut batch)?;

    let mut batch = Batch::new();
    batch.upsert(&SETS, record(store, 6, b"item 6, back")?);
    batch.source_state("museum", state(3));
    store.apply(&mut batch)?;

    store.save_hub_subscriber(&HubSubscriber {
        topic: "http://tributary.example.org/sets/museum/notify".into(),
        callback: "http://downstream.example.org/cb/1".into(),
        secret: Some("s3cret".into()),
        lease_seconds: 86_400,
        expires: 1_800_000_000,
    })?;
    store.save_subscription(&Subscription {
        id: "k1Zx".into(),
        source: "museum".into(),
        hub: "http://museum.example.org/hub".into(),
        advertised_hub: "http://museum.example.org/hub".into(),
        topic: "http://museum.example.org/capabilitylist.xml".into(),
        callback: "http://tributary.example.org/push/k1Zx".into(),
        active: Some(Lease {
            secret: "a".into(),
            previous_secret: None,
            verified: 1_790_000_000,
            expires: 1_790_086_400,
        }),
        pending: Some(PendingRequest {
            mode: "subscribe".into(),
            secret: "b".into(),
            lease_seconds: 86_400,
            sent: 1_790_080_000,
        }),
        last_error: Some("timed out".into()),
        retry_at: None,
    })?;
    store.save_publisher_state("partitions/museum", b"[\"http://tributary.example.org/r/museum/5\"]")?;
    store.flush()?;
    Ok(())
}

fn state(pass: u64) -> SourceState {
    SourceState {
        change_list_position: Some(pass),
        baselined: true,
        resource_list: Some("http://museum.example.org/resourcelist.xml".into()),
        ..SourceState::default()
    }
}
