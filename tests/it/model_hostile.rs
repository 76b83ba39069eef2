//! Hostile and broken inputs: each gives its own specific error, never a shorter document.

use tributary::model::{
    Document, DocumentReader, ReadError, ReadErrorKind, ReadOptions, Severity, read_document, synthetic_resource_list,
    to_bytes, validate,
};

const HEAD: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
<rs:md capability="resourcelist" at="2013-01-03T09:00:00Z"/>
"#;

fn read(text: &str) -> Result<(Document, Vec<tributary::model::Diagnostic>), ReadError> {
    read_document(text.as_bytes(), ReadOptions::named("test.xml"))
}

fn read_err(text: &str) -> ReadError {
    match read(text) {
        Ok((doc, _)) => panic!("accepted a bad document with {} entries", doc.entries.len()),
        Err(e) => e,
    }
}

fn findings(text: &str) -> Vec<tributary::model::Diagnostic> {
    let (doc, mut diags) = read(text).unwrap();
    diags.extend(validate(&doc));
    diags
}

fn errors(text: &str) -> Vec<String> {
    findings(text).into_iter().filter(|d| d.severity == Severity::Error).map(|d| d.message).collect()
}

#[test]
fn truncation_anywhere_is_an_error_never_a_shorter_list() {
    let full = to_bytes(&synthetic_resource_list(20));
    let (doc, _) = read_document(&full, ReadOptions::default()).unwrap();
    assert_eq!(doc.entries.len(), 20);
    // Cut at every byte from inside the root element on: no prefix may read as a document.
    let root_end = full.windows(2).position(|w| w == b">\n").unwrap() + 1;
    let mut truncated_kinds = 0;
    for cut in root_end..full.len() - 1 {
        let prefix = &full[..cut];
        let text = String::from_utf8_lossy(prefix);
        if text.trim_end().ends_with("</urlset>") {
            continue; // only trailing whitespace was cut
        }
        let err = read_document(prefix, ReadOptions::named("cut.xml")).err();
        let err = err.unwrap_or_else(|| panic!("prefix of {cut} bytes read as a complete document"));
        if matches!(err.kind, ReadErrorKind::Truncated { .. }) {
            truncated_kinds += 1;
        }
        assert!(err.position.offset as usize <= cut, "error placed past the cut");
    }
    assert!(truncated_kinds > (full.len() - root_end) / 2, "most cuts should say 'truncated'");
}

#[test]
fn truncation_is_reported_with_the_document_name_and_position() {
    let text = format!("{HEAD}<url><loc>http://example.com/a</loc></url>\n<url><loc>http://exa");
    let err = read_err(&text);
    assert!(matches!(err.kind, ReadErrorKind::Truncated { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.starts_with("test.xml:5:"), "{msg}");
    assert!(msg.contains("truncated"), "{msg}");
}

#[test]
fn streaming_reader_yields_complete_entries_then_the_truncation_error() {
    let text = format!("{HEAD}<url><loc>http://example.com/a</loc></url>\n<url><loc>http://example.com/b</loc>");
    let mut r = DocumentReader::new(text.as_bytes(), ReadOptions::default()).unwrap();
    assert_eq!(r.next_entry().unwrap().unwrap().loc, "http://example.com/a");
    assert!(matches!(r.next_entry().unwrap_err().kind, ReadErrorKind::Truncated { .. }));
}

#[test]
fn unclosed_and_mismatched_elements() {
    let err = read_err(&format!("{HEAD}<url><loc>http://example.com/a</loc></urlset>"));
    assert!(matches!(err.kind, ReadErrorKind::Malformed(_)), "{err}");
    let err = read_err(&format!("{HEAD}<url><loc>http://example.com/a</loc></url>"));
    assert!(matches!(err.kind, ReadErrorKind::Truncated { depth: 1, .. }), "{err}");
}

#[test]
fn wrong_or_missing_namespace() {
    let err =
        read_err(r#"<urlset xmlns="http://www.google.com/schemas/sitemap/0.84"><url><loc>x</loc></url></urlset>"#);
    assert!(matches!(err.kind, ReadErrorKind::WrongNamespace { found: Some(_), .. }), "{err}");
    let err = read_err("<urlset><url><loc>x</loc></url></urlset>");
    assert!(matches!(err.kind, ReadErrorKind::WrongNamespace { found: None, .. }), "{err}");
    let err = read_err(r#"<feed xmlns="http://www.w3.org/2005/Atom"/>"#);
    assert!(matches!(err.kind, ReadErrorKind::NotSitemap(_)), "{err}");
}

#[test]
fn other_prefixes_and_default_namespaces_are_matched_by_uri() {
    let text = r#"<sm:urlset xmlns:sm="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:r="http://www.openarchives.org/rs/terms/">
      <r:md capability="resourcelist" at="2013-01-03T09:00:00Z"/>
      <sm:url><sm:loc>http://example.com/a</sm:loc><md xmlns="http://www.openarchives.org/rs/terms/" length="3"/></sm:url>
    </sm:urlset>"#;
    let (doc, diags) = read(text).unwrap();
    assert!(diags.is_empty(), "{diags:?}");
    assert_eq!(doc.entries[0].md.as_ref().unwrap().length, Some(3));
    // An rs-looking prefix bound to another namespace is not ResourceSync's md.
    let text =
        format!("{HEAD}<url><loc>http://example.com/a</loc><x:md xmlns:x=\"urn:other\" length=\"3\"/></url></urlset>");
    let (doc, _) = read(&text).unwrap();
    assert!(doc.entries[0].md.is_none());
    assert_eq!(doc.entries[0].extensions.len(), 1);
}

#[test]
fn missing_and_unknown_capability() {
    let no_md =
        r#"<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>http://e.org/a</loc></url></urlset>"#;
    assert!(errors(no_md).iter().any(|m| m.contains("no <rs:md>")));
    let no_cap = HEAD.replace(r#"capability="resourcelist" "#, "") + "</urlset>";
    assert!(errors(&no_cap).iter().any(|m| m.contains("no valid `capability`")));
    let unknown = HEAD.replace("resourcelist", "resourcelists") + "</urlset>";
    let errs = errors(&unknown);
    assert!(errs.iter().any(|m| m.contains("unknown capability `resourcelists`")), "{errs:?}");
}

#[test]
fn bad_datetimes_name_the_value_and_position() {
    let text = HEAD.replace("2013-01-03T09:00:00Z", "2013-01-03T09:00:00")
        + "<url><loc>http://e.org/a</loc><lastmod>Tuesday</lastmod></url></urlset>";
    let diags = findings(&text);
    let zone = diags.iter().find(|d| d.message.contains("no time zone")).expect("missing zone reported");
    assert_eq!(zone.position.line, 3);
    let bad = diags.iter().find(|d| d.message.contains("`Tuesday`")).expect("bad lastmod reported");
    assert_eq!((bad.severity, bad.position.line), (Severity::Error, 4));
}

#[test]
fn bad_values_of_pri_length_change() {
    let text = r#"<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
<rs:md capability="changelist" from="2013-01-01T00:00:00Z"/>
<url><loc>http://e.org/a</loc><rs:md change="modified" length="-1"/><rs:ln rel="duplicate" href="http://m.org/a" pri="1000000"/></url>
</urlset>"#;
    let errs = errors(text);
    for needle in ["unknown change `modified`", "length `-1`", "pri `1000000`"] {
        assert!(errs.iter().any(|m| m.contains(needle)), "{needle}: {errs:?}");
    }
}

#[test]
fn doctype_xxe_and_billion_laughs_are_refused() {
    let xxe = r#"<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>&xxe;</loc></url></urlset>"#;
    assert!(matches!(read_err(xxe).kind, ReadErrorKind::Doctype));
    let laughs = r#"<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;">]>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>&lol2;</loc></url></urlset>"#;
    assert!(matches!(read_err(laughs).kind, ReadErrorKind::Doctype));
    // Without a DOCTYPE an undefined entity is still refused, in text and in attributes.
    let undefined = format!("{HEAD}<url><loc>http://e.org/&lol;</loc></url></urlset>");
    assert!(matches!(read_err(&undefined).kind, ReadErrorKind::UndefinedEntity(_)));
    let in_attr = format!("{HEAD}<url><loc>http://e.org/a</loc><rs:md type=\"&lol;\"/></url></urlset>");
    assert!(matches!(read_err(&in_attr).kind, ReadErrorKind::UndefinedEntity(_)));
    // The predefined entities and character references are fine.
    let ok = format!("{HEAD}<url><loc>http://e.org/?a=1&amp;b=&#50;&#x33;</loc></url></urlset>");
    assert_eq!(read(&ok).unwrap().0.entries[0].loc, "http://e.org/?a=1&b=23");
}

#[test]
fn more_than_50000_entries_is_an_error() {
    let bytes = to_bytes(&synthetic_resource_list(50_001));
    let err = read_document(&bytes, ReadOptions::default()).unwrap_err();
    assert!(matches!(err.kind, ReadErrorKind::TooManyEntries(50_000)), "{err}");
    let bytes = to_bytes(&synthetic_resource_list(50_000));
    assert_eq!(read_document(&bytes, ReadOptions::default()).unwrap().0.entries.len(), 50_000);
}

#[test]
fn over_the_byte_limit_is_an_error() {
    let bytes = to_bytes(&synthetic_resource_list(100));
    let limit = bytes.len() as u64 - 1;
    let opts = ReadOptions { max_bytes: limit, ..ReadOptions::default() };
    let err = read_document(&bytes, opts).unwrap_err();
    assert!(matches!(err.kind, ReadErrorKind::TooLarge(l) if l == limit), "{err}");
    let exact = ReadOptions { max_bytes: bytes.len() as u64, ..ReadOptions::default() };
    assert!(read_document(&bytes, exact).is_ok());
}

#[test]
fn deep_nesting_is_an_error() {
    let deep = format!(
        "{HEAD}<url><loc>http://e.org/a</loc>{}{}</url></urlset>",
        "<x:a xmlns:x=\"urn:x\">".repeat(40),
        "</x:a>".repeat(40)
    );
    assert!(matches!(read_err(&deep).kind, ReadErrorKind::TooDeep(32)));
}

#[test]
fn garbage_around_the_root() {
    assert!(matches!(read_err("").kind, ReadErrorKind::Empty));
    assert!(matches!(read_err("hello <urlset/>").kind, ReadErrorKind::ContentBeforeRoot));
    let after = format!("{HEAD}</urlset><urlset/>");
    assert!(matches!(read_err(&after).kind, ReadErrorKind::ContentAfterRoot));
    assert!(matches!(
        read_err("\u{feff}not xml at all").kind,
        ReadErrorKind::ContentBeforeRoot | ReadErrorKind::Malformed(_)
    ));
}

#[test]
fn change_list_rules() {
    let text = r#"<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
<rs:ln rel="up" href="http://e.org/cl.xml"/>
<rs:md capability="changelist" from="2013-01-02T00:00:00Z" until="2013-01-01T00:00:00Z"/>
<url><loc>http://e.org/a</loc><rs:md change="created" datetime="2013-01-03T00:00:00Z"/></url>
<url><loc>http://e.org/b</loc><rs:md datetime="2013-01-04T00:00:00Z"/></url>
<url><loc>http://e.org/c</loc><rs:md change="deleted" datetime="2013-01-02T12:00:00Z"/></url>
</urlset>"#;
    let errs = errors(text);
    for needle in
        ["`until` 2013-01-01T00:00:00Z is before `from`", "no valid `change`", "not in forward chronological order"]
    {
        assert!(errs.iter().any(|m| m.contains(needle)), "{needle}: {errs:?}");
    }
}

#[test]
fn manifest_needs_paths_except_for_deletes_and_capability_lists_one_entry_per_capability() {
    let manifest = r#"<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
<rs:ln rel="up" href="http://e.org/cl.xml"/>
<rs:md capability="changedump-manifest" from="2013-01-01T00:00:00Z"/>
<url><loc>http://e.org/a</loc><rs:md change="created" datetime="2013-01-02T00:00:00Z"/></url>
<url><loc>http://e.org/b</loc><rs:md change="deleted" datetime="2013-01-02T00:00:00Z"/></url>
</urlset>"#;
    assert_eq!(errors(manifest).len(), 1, "{:?}", errors(manifest));
    let caps = r#"<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
<rs:ln rel="up" href="http://e.org/.well-known/resourcesync"/>
<rs:md capability="capabilitylist"/>
<url><loc>http://e.org/rl1.xml</loc><rs:md capability="resourcelist"/></url>
<url><loc>http://e.org/rl2.xml</loc><rs:md capability="resourcelist"/></url>
<url><loc>http://e.org/x.xml</loc></url>
</urlset>"#;
    let errs = errors(caps);
    assert!(errs.iter().any(|m| m.contains("listed twice")), "{errs:?}");
    assert!(errs.iter().any(|m| m.contains("has no <rs:md capability")), "{errs:?}");
}
