//! Parses a document once in the given mode, for instruction-count profiling with callgrind
//! (repeatable on a noisy machine): `parse_count model FILE` or `parse_count bare FILE`.

use tributary::model::{DocumentReader, ReadOptions, Validator};

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_default();
    let bytes = std::fs::read(args.next().expect("file")).expect("readable file");
    let n = if mode == "bare" { bare(&bytes) } else { model(&bytes) };
    println!("{n} entries");
}

fn model(bytes: &[u8]) -> usize {
    let mut reader = DocumentReader::new(bytes, ReadOptions::default()).expect("readable");
    let mut v = Validator::new(reader.header(), reader.root_position());
    let mut n = 0;
    while let Some(e) = reader.next_entry().expect("entry") {
        v.entry(&e, reader.entry_position());
        n += 1;
    }
    assert!(v.finish().is_empty());
    n
}

fn bare(bytes: &[u8]) -> usize {
    let mut r = quick_xml::NsReader::from_reader(bytes);
    let mut buf = Vec::new();
    let mut n = 0;
    loop {
        match r.read_event_into(&mut buf).expect("event") {
            quick_xml::events::Event::Start(e) | quick_xml::events::Event::Empty(e) => {
                let (_, local) = r.resolver().resolve_element(e.name());
                n += usize::from(local.as_ref() == "url");
                for a in e.attributes() {
                    std::hint::black_box(a.expect("attr"));
                }
            }
            quick_xml::events::Event::Eof => return n,
            _ => {}
        }
        buf.clear();
    }
}
