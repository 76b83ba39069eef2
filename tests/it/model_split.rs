//! Splitting long lists into an index plus parts (spec §10.2, §12.2).

use std::cell::RefCell;
use std::collections::BTreeMap;

use tributary::model::{
    Capability, Change, DocumentKind, Entry, Header, Link, Md, PartTarget, ReadOptions, RootFormat, Severity,
    SplitLimits, SplitOutcome, W3cDateTime, read_document, synthetic_resource_list, validate, write_split,
};

type Outputs = RefCell<BTreeMap<String, Vec<u8>>>;

fn name(t: PartTarget) -> String {
    match t {
        PartTarget::Single => "single".into(),
        PartTarget::Part(n) => format!("part{n}"),
        PartTarget::Index => "index".into(),
    }
}

fn split(header: &Header, entries: Vec<Entry>, limits: SplitLimits) -> (SplitOutcome, BTreeMap<String, Vec<u8>>) {
    let outputs: Outputs = RefCell::default();
    let outcome = write_split(
        header,
        entries,
        limits,
        "http://t.example/resourcelist.xml",
        |n| format!("http://t.example/resourcelist-{n}.xml"),
        |target| {
            outputs.borrow_mut().insert(name(target), Vec::new());
            Ok(Sink { name: name(target), outputs: &outputs })
        },
    )
    .unwrap();
    (outcome, outputs.into_inner())
}

struct Sink<'a> {
    name: String,
    outputs: &'a Outputs,
}

impl std::io::Write for Sink<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.outputs.borrow_mut().get_mut(&self.name).unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_list_within_the_limit_stays_one_document() {
    let doc = synthetic_resource_list(10);
    let (outcome, out) = split(&doc.header, doc.entries.clone(), SplitLimits { max_entries: 10, max_bytes: 1 << 20 });
    assert_eq!(outcome, SplitOutcome::Single { entries: 10 });
    assert_eq!(out.keys().collect::<Vec<_>>(), ["single"]);
    let (again, _) = read_document(&out["single"], ReadOptions::default()).unwrap();
    assert_eq!(again, doc);
}

#[test]
fn past_the_entry_limit_it_becomes_an_index_with_linked_parts() {
    let doc = synthetic_resource_list(25);
    let (outcome, out) = split(&doc.header, doc.entries.clone(), SplitLimits { max_entries: 10, max_bytes: 1 << 20 });
    assert_eq!(outcome, SplitOutcome::Index { parts: vec![10, 10, 5] });
    let (index, _) = read_document(&out["index"], ReadOptions::default()).unwrap();
    assert_eq!(index.header.kind(), Some(DocumentKind::ResourceListIndex));
    let locs: Vec<_> = index.entries.iter().map(|e| e.loc.as_str()).collect();
    assert_eq!(
        locs,
        [
            "http://t.example/resourcelist-1.xml",
            "http://t.example/resourcelist-2.xml",
            "http://t.example/resourcelist-3.xml"
        ]
    );
    let mut all = Vec::new();
    for n in 1..=3 {
        let (part, diags) = read_document(&out[&format!("part{n}")], ReadOptions::default()).unwrap();
        assert!(diags.is_empty());
        assert!(validate(&part).iter().all(|d| d.severity != Severity::Error));
        assert_eq!(part.header.kind(), Some(DocumentKind::ResourceList));
        assert_eq!(part.header.link("index").unwrap().href, "http://t.example/resourcelist.xml");
        assert_eq!(part.header.link("up").unwrap().href, doc.header.link("up").unwrap().href);
        all.extend(part.entries);
    }
    assert_eq!(all, doc.entries, "the parts hold every entry, in order");
}

#[test]
fn the_byte_limit_also_splits_and_no_part_exceeds_it() {
    let doc = synthetic_resource_list(40);
    let limit = 4_000;
    let (outcome, out) = split(&doc.header, doc.entries.clone(), SplitLimits { max_entries: 50_000, max_bytes: limit });
    let SplitOutcome::Index { parts } = outcome else { panic!("expected an index") };
    assert_eq!(parts.iter().sum::<usize>(), 40);
    for (name, bytes) in &out {
        if name.starts_with("part") {
            assert!(bytes.len() as u64 <= limit, "{name} is {} bytes", bytes.len());
        }
    }
}

#[test]
fn change_list_parts_carry_their_intervals_in_the_index() {
    let t = |h: i64| W3cDateTime::from_unix(1_700_000_000 + h * 3600, 0).unwrap();
    let md = Md { capability: Some(Capability::ChangeList), from: Some(t(0)), ..Md::default() };
    let mut header = Header::new(RootFormat::UrlSet, md);
    header.links.push(Link::new("up", "http://t.example/capabilitylist.xml"));
    let entries: Vec<_> = (1..=6)
        .map(|h| {
            let mut e = Entry::new(format!("http://t.example/r{h}"));
            e.md = Some(Md { change: Some(Change::Updated), datetime: Some(t(h)), ..Md::default() });
            e
        })
        .collect();
    let (_, out) = split(&header, entries, SplitLimits { max_entries: 4, max_bytes: 1 << 20 });
    let (index, _) = read_document(&out["index"], ReadOptions::default()).unwrap();
    assert_eq!(index.header.kind(), Some(DocumentKind::ChangeListIndex));
    assert!(validate(&index).iter().all(|d| d.severity != Severity::Error), "{:?}", validate(&index));
    let first = index.entries[0].md.as_ref().unwrap();
    let last = index.entries[1].md.as_ref().unwrap();
    assert_eq!((first.from, first.until), (Some(t(0)), Some(t(4))));
    assert_eq!((last.from, last.until), (Some(t(4)), None), "the last part stays open");
}
