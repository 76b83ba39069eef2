//! The reader on responses shaped as real repositories write them, and on their damage.

use super::*;

const LIST: &str = r#"<?xml version='1.0' encoding='UTF-8'?>
<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
  <responseDate>2026-03-01T10:00:00Z</responseDate>
  <request verb="ListRecords" metadataPrefix="oai_dc">http://repo.example/oai</request>
  <ListRecords>
    <record>
      <header>
        <identifier>oai:repo:1</identifier>
        <datestamp>2026-02-01T09:00:00Z</datestamp>
        <setSpec>images</setSpec>
        <setSpec>maps</setSpec>
      </header>
      <metadata>
        <oai_dc:dc xmlns:oai_dc="http://www.openarchives.org/OAI/2.0/oai_dc/" xmlns:dc="http://purl.org/dc/elements/1.1/">
          <dc:title>A &amp; B</dc:title>
        </oai_dc:dc>
      </metadata>
    </record>
    <record>
      <header status="deleted">
        <identifier>oai:repo:2</identifier>
        <datestamp>2026-02-02T09:00:00Z</datestamp>
      </header>
    </record>
    <resumptionToken cursor="0" completeListSize="12">metadataPrefix%3Doai_dc%26cursor%3D2</resumptionToken>
  </ListRecords>
</OAI-PMH>
"#;

#[test]
fn list_records_with_headers_sets_deletions_and_token() {
    let r = read_response(LIST.as_bytes(), "list").unwrap();
    assert_eq!(r.response_date.as_deref(), Some("2026-03-01T10:00:00Z"));
    assert_eq!(r.records.len(), 2);
    let (a, b) = (&r.records[0], &r.records[1]);
    assert_eq!((a.identifier.as_str(), a.datestamp.as_str(), a.deleted), ("oai:repo:1", "2026-02-01T09:00:00Z", false));
    assert_eq!(a.set_specs, ["images", "maps"]);
    assert!(b.deleted && b.set_specs.is_empty());
    let t = r.token.unwrap();
    assert_eq!(
        (t.value.as_str(), t.cursor, t.complete_list_size),
        ("metadataPrefix%3Doai_dc%26cursor%3D2", Some(0), Some(12))
    );
    let doc = std::str::from_utf8(&a.document).unwrap();
    assert!(
        doc.starts_with(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<record xmlns=\"http://www.openarchives.org/OAI/2.0/\""
        ),
        "{doc}"
    );
    assert!(doc.ends_with("</record>") && doc.contains("A &amp; B") && !doc.contains("responseDate"), "{doc}");
    // The document stands alone: the reader takes it as a GetRecord's record would be.
    let again = format!(
        "<OAI-PMH xmlns=\"http://www.openarchives.org/OAI/2.0/\"><GetRecord>{}</GetRecord></OAI-PMH>",
        &doc[39..]
    );
    assert_eq!(read_response(again.as_bytes(), "again").unwrap().records[0].identifier, "oai:repo:1");
}

#[test]
fn the_record_document_does_not_change_with_the_response_date() {
    let later = LIST.replace("2026-03-01T10:00:00Z", "2027-01-01T00:00:00Z").replace("cursor%3D2", "x");
    let (a, b) = (read_response(LIST.as_bytes(), "a").unwrap(), read_response(later.as_bytes(), "b").unwrap());
    assert_eq!(a.records, b.records);
}

#[test]
fn identify_formats_sets_and_errors() {
    let identify = r#"<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"><responseDate>2026-03-01T10:00:00Z</responseDate>
      <Identify><repositoryName>R</repositoryName><baseURL>http://r/oai</baseURL><protocolVersion>2.0</protocolVersion>
      <adminEmail>a@r</adminEmail><adminEmail>b@r</adminEmail><earliestDatestamp>2001-01-01</earliestDatestamp>
      <deletedRecord>transient</deletedRecord><granularity>YYYY-MM-DD</granularity>
      <description><toolkit><title>x</title></toolkit></description></Identify></OAI-PMH>"#;
    let id = read_response(identify.as_bytes(), "i").unwrap().identify.unwrap();
    assert_eq!(id.admin_emails, ["a@r", "b@r"]);
    assert_eq!((id.deleted_record.as_str(), id.granularity.as_str()), ("transient", "YYYY-MM-DD"));
    assert_eq!(id.repository_name, "R");
    let formats = r#"<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"><ListMetadataFormats><metadataFormat>
      <metadataPrefix>oai_dc</metadataPrefix><schema>http://s</schema><metadataNamespace>http://n</metadataNamespace>
      </metadataFormat></ListMetadataFormats></OAI-PMH>"#;
    let f = read_response(formats.as_bytes(), "f").unwrap().formats;
    assert_eq!(
        f,
        [MetadataFormat { prefix: "oai_dc".into(), schema: "http://s".into(), namespace: "http://n".into() }]
    );
    let err =
        r#"<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"><error code="noRecordsMatch">none</error></OAI-PMH>"#;
    let e = read_response(err.as_bytes(), "e").unwrap().errors;
    assert_eq!(e[0].to_string(), "noRecordsMatch: none");
}

#[test]
fn damage_is_a_clear_error() {
    let html = "<!DOCTYPE html><html><body>Service Unavailable</body></html>";
    let e = read_response(html.as_bytes(), "u").unwrap_err().to_string();
    assert!(e.contains("not an OAI-PMH response") && e.contains("HTML"), "{e}");
    let e = read_response(b"<html><body/></html>", "u").unwrap_err().to_string();
    assert!(e.contains("root element is <html>"), "{e}");
    let cut = &LIST[..LIST.find("</metadata>").unwrap()];
    assert!(matches!(read_response(cut.as_bytes(), "u"), Err(OaiReadError::Truncated { .. })));
    let junk = format!("{LIST}<br/><b>Notice</b>: Undefined index");
    assert!(matches!(read_response(junk.as_bytes(), "u"), Err(OaiReadError::TrailingContent { .. })));
    assert!(matches!(read_response(b"", "u"), Err(OaiReadError::NotOai { .. })));
}

#[test]
fn control_characters_and_bad_references_are_repaired() {
    let bad = LIST.replace("A &amp; B", "A\u{1}B &#55349; &#x0; ok").into_bytes();
    let r = read_response(&bad, "u").unwrap();
    assert_eq!(r.repaired, 3);
    let doc = String::from_utf8(r.records[0].document.clone()).unwrap();
    assert!(doc.contains("AB &#xFFFD; &#xFFFD; ok"), "{doc}");
    let mut latin1 = LIST.as_bytes().to_vec();
    latin1.extend_from_slice(b"");
    let pos = LIST.find("A &amp;").unwrap();
    latin1[pos] = 0xE9;
    assert_eq!(read_response(&latin1, "u").unwrap().repaired, 1);
}

#[test]
fn granularity_formats_and_overlaps() {
    let t: crate::model::W3cDateTime = "2026-03-01T00:02:00Z".parse().unwrap();
    let five_min = std::time::Duration::from_secs(300);
    assert_eq!(Granularity::Seconds.from_after(&t, five_min), "2026-02-28T23:57:00Z");
    assert_eq!(Granularity::Day.from_after(&t, five_min), "2026-02-28");
    assert_eq!(Granularity::parse("YYYY-MM-DDThh:mm:ssZ"), Some(Granularity::Seconds));
    assert_eq!(Granularity::of("2026-01-01"), Some(Granularity::Day));
    assert_eq!(Granularity::of("2026-01-01T00:00:00Z"), Some(Granularity::Seconds));
}

#[test]
fn a_stored_record_reads_back() {
    let page = br#"<?xml version="1.0"?><OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"><responseDate>2026-01-01T00:00:00Z</responseDate><request>x</request><ListRecords><record><header><identifier>oai:x:1</identifier><datestamp>2025-02-03</datestamp><setSpec>a</setSpec><setSpec>b:c</setSpec></header><metadata><t xmlns="urn:t">One</t></metadata></record></ListRecords></OAI-PMH>"#;
    let doc = &super::read_response(page, "p").unwrap().records[0].document;
    let r = super::read_record(doc).expect("the stored document is a record");
    assert_eq!((r.identifier.as_str(), r.datestamp.as_str()), ("oai:x:1", "2025-02-03"));
    assert_eq!(r.set_specs, ["a", "b:c"]);
    assert!(super::read_record(b"<html>no</html>").is_none());
}
