//! Property tests: model → write → read is the identity, and W3C datetimes round-trip and
//! convert offsets to UTC correctly.

use proptest::prelude::*;
use time::{Date, Month, PrimitiveDateTime, Time, UtcOffset};
use tributary::model::{
    Capability, Change, Digest, Document, Entry, ExtNode, Extension, ForeignAttr, HashAlgorithm, HashList, Header,
    Link, Md, ReadOptions, RootFormat, W3cDateTime, read_document, to_bytes,
};

fn text() -> impl Strategy<Value = String> {
    // Printable text with the characters that need escaping, trimmed (the reader trims
    // element text) and never empty.
    "[a-zA-Z0-9&<>\"'/:.?=#%é中 -]{0,12}[a-z0-9&<>é]"
        .prop_map(|s| s.trim().to_owned())
        .prop_filter("non-empty", |s| !s.is_empty())
}

fn attr_value() -> impl Strategy<Value = String> {
    // Attribute values keep inner whitespace, including newlines and tabs.
    "[a-zA-Z0-9&<>\"' \t\n/.:=-]{0,16}"
}

fn datetime() -> impl Strategy<Value = W3cDateTime> {
    (0i64..253_402_300_799, prop_oneof![Just(0u32), 0u32..1_000_000_000])
        .prop_map(|(s, n)| W3cDateTime::from_unix(s, n).unwrap())
}

fn hash_list() -> impl Strategy<Value = HashList> {
    let digest = prop_oneof![
        prop::collection::vec(any::<u8>(), 16).prop_map(|b| Digest::from_bytes(HashAlgorithm::Md5, &b)),
        prop::collection::vec(any::<u8>(), 20).prop_map(|b| Digest::from_bytes(HashAlgorithm::Sha1, &b)),
        prop::collection::vec(any::<u8>(), 32).prop_map(|b| Digest::from_bytes(HashAlgorithm::Sha256, &b)),
        "[a-f0-9]{8}".prop_map(|v| Digest { algorithm: HashAlgorithm::Other("sha-512".into()), value: v }),
    ];
    prop::collection::vec(digest, 1..3).prop_map(HashList)
}

fn foreign_attr() -> impl Strategy<Value = ForeignAttr> {
    prop_oneof![
        attr_value().prop_map(|v| ForeignAttr {
            ns: Some("urn:example".into()),
            prefix: Some("ex".into()),
            local: "note".into(),
            value: v
        }),
        attr_value().prop_map(|v| ForeignAttr { ns: None, prefix: None, local: "custom".into(), value: v }),
    ]
}

fn md() -> impl Strategy<Value = Md> {
    (
        prop::option::of(prop::sample::select(Capability::ALL.to_vec())),
        prop::option::of(prop::sample::select(vec![Change::Created, Change::Updated, Change::Deleted])),
        prop::array::uniform5(prop::option::of(datetime())),
        prop::option::of(hash_list()),
        prop::option::of(any::<u64>()),
        prop::option::of(attr_value()),
        prop::option::of("[a-z]+/[a-z+.-]+"),
        prop::collection::vec(foreign_attr(), 0..2),
    )
        .prop_map(
            |(capability, change, [at, completed, from, until, datetime], hash, length, path, media_type, extra)| Md {
                capability,
                change,
                at,
                completed,
                from,
                until,
                datetime,
                encoding: None,
                hash,
                length,
                path,
                media_type,
                extra,
            },
        )
}

fn link() -> impl Strategy<Value = Link> {
    (
        prop::sample::select(vec!["duplicate", "via", "describedby", "http://www.openarchives.org/rs/terms/patch"]),
        text(),
        prop::option::of(1u32..=999_999),
        prop::option::of(datetime()),
        prop::option::of(hash_list()),
        prop::option::of(any::<u64>()),
        prop::option::of("[a-z]+/[a-z]+"),
    )
        .prop_map(|(rel, href, pri, modified, hash, length, media_type)| Link {
            rel: rel.into(),
            href,
            pri,
            modified,
            hash,
            length,
            media_type,
            ..Link::default()
        })
}

fn extension() -> impl Strategy<Value = Extension> {
    (text(), attr_value()).prop_map(|(body, a)| Extension {
        ns: Some("urn:example".into()),
        prefix: Some("ex".into()),
        local: "thing".into(),
        attrs: vec![ForeignAttr { ns: None, prefix: None, local: "a".into(), value: a }],
        children: vec![
            ExtNode::Text(body),
            ExtNode::Element(Extension {
                ns: None,
                prefix: None,
                local: "bare".into(),
                attrs: vec![],
                children: vec![],
            }),
        ],
    })
}

fn entry() -> impl Strategy<Value = Entry> {
    (
        text(),
        prop::option::of(datetime()),
        prop::option::of(prop::sample::select(vec!["daily".to_owned(), "never".to_owned()])),
        prop::option::of(md()),
        prop::collection::vec(link(), 0..3),
        prop::collection::vec(extension(), 0..2),
    )
        .prop_map(|(loc, lastmod, changefreq, md, links, extensions)| Entry {
            loc,
            lastmod,
            changefreq,
            priority: None,
            md,
            links,
            extensions,
        })
}

fn document() -> impl Strategy<Value = Document> {
    (
        prop::sample::select(vec![RootFormat::UrlSet, RootFormat::SitemapIndex]),
        md(),
        prop::collection::vec(link(), 0..3),
        any::<bool>(),
        prop::collection::vec(entry(), 0..6),
    )
        .prop_map(|(format, md, links, declare_ns, entries)| {
            let mut header = Header::new(format, md);
            header.links = links;
            if declare_ns {
                header.namespaces.push(("ex".into(), "urn:example".into()));
            }
            Document { header, entries }
        })
}

/// 300 cases, and the saved failures in `model_roundtrip.proptest-regressions` beside this
/// file: proptest's default would look for them under `tests/proptest-regressions/`, since
/// this directory holds a `main.rs`.
fn config() -> ProptestConfig {
    let saved = proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions");
    ProptestConfig { failure_persistence: Some(Box::new(saved)), ..ProptestConfig::with_cases(300) }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn write_then_read_is_the_identity(doc in document()) {
        let bytes = to_bytes(&doc);
        let (again, _) = read_document(&bytes, ReadOptions::default())
            .map_err(|e| TestCaseError::fail(format!("{e}\n{}", String::from_utf8_lossy(&bytes))))?;
        prop_assert_eq!(&again, &doc, "\n{}", String::from_utf8_lossy(&bytes));
        prop_assert_eq!(to_bytes(&again), bytes);
    }

    #[test]
    fn datetimes_round_trip_and_offsets_convert_to_utc(
        y in 1i32..9999, m in 1u8..=12, d in 1u8..=28, h in 0u8..24, min in 0u8..60, s in 0u8..60,
        frac in prop::option::of(1u32..1_000_000_000), off_h in -14i8..=14, off_m in 0i8..60,
    ) {
        let off_m = if off_h < 0 { -off_m } else { off_m };
        let offset = UtcOffset::from_hms(off_h, off_m, 0).unwrap();
        let sign = if off_h < 0 || off_m < 0 { '-' } else { '+' };
        let frac_text = frac.map(|f| format!(".{f:09}")).unwrap_or_default();
        let text = format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}{frac_text}{sign}{:02}:{:02}", off_h.abs(), off_m.abs());
        let local = PrimitiveDateTime::new(
            Date::from_calendar_date(y, Month::try_from(m).unwrap(), d).unwrap(),
            Time::from_hms_nano(h, min, s, frac.unwrap_or(0)).unwrap(),
        );
        let expected_utc = local.assume_offset(offset).to_offset(UtcOffset::UTC);
        match text.parse::<W3cDateTime>() {
            Ok(t) => {
                prop_assert_eq!(t.utc(), expected_utc);
                let again: W3cDateTime = t.to_string().parse().unwrap();
                prop_assert_eq!(again, t);
                prop_assert!(t.to_string().ends_with('Z'));
            }
            // Only instants that leave the years 0000–9999 in UTC may be refused.
            Err(_) => prop_assert!(!(0..=9999).contains(&expected_utc.year())),
        }
    }
}
