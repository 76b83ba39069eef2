//! A change notification's payload (Change Notification 1.0.1 §3), read with the project's
//! streaming reader and checked before anything of it is applied: a `<urlset>` whose root
//! `<rs:md>` says `capability="change-notification"` (the 1.0 name `changelist-notification`
//! is read as it), with `from` and `until`, and entries like a Change List's, each with its
//! `change`. Anything else — not XML, a DTD or entity (the reader refuses them), another
//! capability, a `<sitemapindex>`, an entry without `change` — refuses the whole payload, so a
//! bad delivery changes nothing.
//!
//! Pure: bytes in, a [`Notification`] or a [`PayloadError`] out.

use std::io::Cursor;

use crate::model::{Capability, DocumentReader, Entry, ReadError, ReadOptions, RootFormat, W3cDateTime};

/// A notification, checked.
#[derive(Debug, Clone)]
pub(crate) struct Notification {
    /// The root `from`: changes since then are covered.
    pub(crate) from: Option<W3cDateTime>,
    /// The root `until`: changes up to then are covered.
    pub(crate) until: Option<W3cDateTime>,
    /// The changes, in the order given (forward chronological, §3).
    pub(crate) entries: Vec<Entry>,
}

/// Why a payload is refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PayloadError {
    /// Not a well-formed document within the limits, or hostile XML.
    #[error("the payload cannot be read")]
    Read(#[source] ReadError),
    /// A document, but not a change notification.
    #[error("the payload is not a change notification: {0}")]
    NotANotification(String),
}

/// Reads and checks a payload of at most `max_bytes`.
pub(crate) fn parse(bytes: &[u8], name: &str, max_bytes: u64) -> Result<Notification, PayloadError> {
    let opts = ReadOptions { max_bytes, ..ReadOptions::named(name) };
    let mut r = DocumentReader::new(Cursor::new(bytes), opts).map_err(PayloadError::Read)?;
    let header = r.header().clone();
    if header.format != Some(RootFormat::UrlSet) {
        return Err(PayloadError::NotANotification("the root is not <urlset>".into()));
    }
    let md = header.md.unwrap_or_default();
    if md.capability != Some(Capability::ChangeNotification) {
        let found = md.capability.map_or("none".to_owned(), |c| c.to_string());
        return Err(PayloadError::NotANotification(format!("capability {found}, not change-notification")));
    }
    let mut entries = Vec::new();
    // Bounded by the reader's entry and byte limits.
    while let Some(e) = r.next_entry().map_err(PayloadError::Read)? {
        if e.md.as_ref().and_then(|m| m.change).is_none() {
            return Err(PayloadError::NotANotification(format!("entry {} has no rs:md change", e.loc)));
        }
        entries.push(e);
    }
    Ok(Notification { from: md.from, until: md.until, entries })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(capability: &str, entry_md: &str) -> String {
        format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
  <rs:md capability="{capability}" from="2017-05-01T10:00:00Z" until="2017-05-01T10:05:00Z"/>
  <url><loc>http://example.com/res1</loc><rs:md {entry_md}/></url>
</urlset>"#
        )
    }

    #[test]
    fn the_spec_s_example_reads_with_its_interval() {
        let n = parse(
            doc("change-notification", r#"change="updated" datetime="2017-05-01T10:01:00Z""#).as_bytes(),
            "t",
            1 << 20,
        )
        .unwrap();
        assert_eq!(n.from, Some("2017-05-01T10:00:00Z".parse().unwrap()));
        assert_eq!(n.until, Some("2017-05-01T10:05:00Z".parse().unwrap()));
        assert_eq!(n.entries.len(), 1);
    }

    #[test]
    fn the_1_0_capability_name_is_read_as_1_0_1_s() {
        let n = parse(doc("changelist-notification", r#"change="created""#).as_bytes(), "t", 1 << 20).unwrap();
        assert_eq!(n.entries.len(), 1);
    }

    #[test]
    fn other_documents_and_entries_without_change_are_refused() {
        assert!(parse(doc("changelist", r#"change="created""#).as_bytes(), "t", 1 << 20).is_err());
        assert!(parse(doc("change-notification", r#"length="3""#).as_bytes(), "t", 1 << 20).is_err());
        assert!(parse(b"<urlset", "t", 1 << 20).is_err());
        let dtd = r#"<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY x "y">]><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"/>"#;
        assert!(parse(dtd.as_bytes(), "t", 1 << 20).is_err());
        assert!(
            parse(doc("change-notification", r#"change="created""#).as_bytes(), "t", 100).is_err(),
            "over the limit"
        );
    }
}
