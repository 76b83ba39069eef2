//! Tests of the writer: each output is read back with the reader.

use super::*;
use crate::model::feed::{Enclosure, Feed, FeedLimits, History, Related, read_feed, read_item};

fn when(s: &str) -> W3cDateTime {
    s.parse().expect("date")
}

fn head() -> FeedHead {
    FeedHead {
        id: "urn:tributary:feed".into(),
        title: "Set <A> & \"B\"".into(),
        updated: when("2024-01-02T03:04:05Z"),
        links: vec![FeedLink { rel: "self".into(), href: "http://127.0.0.1/feed?a=1&b=2".into() }],
        sharing: Some(Sharing {
            since: Some("1".into()),
            until: Some("9".into()),
            expires: Some(when("2024-02-01T00:00:00Z")),
            related: vec![Related { link: "http://127.0.0.1/all".into(), title: None, kind: RelatedKind::Complete }],
        }),
        author: Some("Tributary".into()),
    }
}

fn sync(id: &str, updates: u32) -> Sync {
    Sync {
        id: id.into(),
        updates,
        deleted: false,
        noconflicts: false,
        history: (1..=updates)
            .rev()
            .map(|n| History {
                sequence: n,
                when: Some(when(&format!("2005-05-21T0{n}:43:33Z"))),
                by: Some("REO1750".into()),
            })
            .collect(),
        conflicts: Vec::new(),
    }
}

fn bare(id: &str) -> FeedItem {
    FeedItem {
        id: None,
        title: Some(format!("Item {id}")),
        link: None,
        updated: None,
        enclosure: None,
        sync: Some(sync(id, 2)),
        xml: String::new(),
    }
}

fn write_feed(items: &[FeedItem]) -> String {
    let mut w = AtomWriter::new(Vec::new(), &head()).expect("head");
    for item in items {
        w.item(item).expect("item");
    }
    String::from_utf8(w.finish().expect("finish")).expect("utf-8")
}

fn reread(xml: &str) -> Feed {
    read_feed(xml.as_bytes(), "written", &FeedLimits::default()).unwrap_or_else(|e| panic!("{e}\n{xml}"))
}

#[test]
fn the_head_round_trips() {
    let xml = write_feed(&[]);
    assert!(xml.starts_with("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<feed xmlns=\"http://www.w3.org/2005/Atom\" xmlns:sx=\"http://feedsync.org/2007/feedsync\">"), "{xml}");
    assert!(xml.contains("<author>\n    <name>Tributary</name>\n  </author>"), "{xml}");
    let feed = reread(&xml);
    let h = head();
    assert_eq!(feed.title.as_deref(), Some(h.title.as_str()));
    assert_eq!(feed.id.as_deref(), Some(h.id.as_str()));
    assert_eq!(feed.updated, Some(h.updated));
    assert_eq!(feed.links, h.links);
    assert_eq!(feed.sharing, h.sharing);
}

#[test]
fn synthesised_entries_carry_the_fields_and_sync() {
    let mut a = bare("a");
    a.id = Some("urn:a".into());
    a.link = Some("http://127.0.0.1/a?x=1&y=2".into());
    a.updated = Some(when("2006-01-01T00:00:00Z"));
    a.enclosure = Some(Enclosure { url: "http://127.0.0.1/a.mp3".into(), length: Some(5), media_type: None });
    let mut b = bare("b");
    b.title = None;
    b.sync.as_mut().expect("sync").deleted = true;
    let feed = reread(&write_feed(&[a.clone(), b.clone()]));
    let (ra, rb) = (&feed.items[0], &feed.items[1]);
    assert_eq!((ra.id.as_deref(), ra.link.as_deref(), ra.updated), (Some("urn:a"), a.link.as_deref(), a.updated));
    assert_eq!(ra.enclosure, a.enclosure);
    assert_eq!(ra.sync, a.sync);
    // No id: one made from the sync id; no date: the newest history `when`.
    assert_eq!(rb.id.as_deref(), Some("urn:feedsync:b"));
    assert_eq!(rb.title.as_deref(), Some(""));
    assert_eq!(rb.updated, Some(when("2005-05-21T02:43:33Z")));
    assert_eq!(rb.sync, b.sync);
    assert!(rb.is_deleted());
}

#[test]
fn an_entry_without_any_date_gets_the_feeds() {
    let mut item = bare("a");
    let s = item.sync.as_mut().expect("sync");
    s.history.truncate(1);
    s.history[0].when = None;
    let feed = reread(&write_feed(&[item]));
    assert_eq!(feed.items[0].updated, Some(head().updated));
}

#[test]
fn atom_markup_is_kept_and_sync_put_back_before_the_end_tag() {
    let source = r#"<feed xmlns="http://www.w3.org/2005/Atom" xmlns:sx="http://feedsync.org/2007/feedsync" xmlns:x="urn:x">
  <entry>
    <id>urn:a</id><title type="html">A &lt;b&gt;B&lt;/b&gt;</title><x:foreign x:a="1">kept</x:foreign>
    <sx:sync id="a" updates="1"><sx:history sequence="1" by="me"/></sx:sync>
  </entry>
</feed>"#;
    let item = reread(source).items.remove(0);
    let xml = write_feed(std::slice::from_ref(&item));
    // The feed declares Atom and sx: the entry does not repeat them, but keeps x.
    assert!(xml.contains("  <entry xmlns:x=\"urn:x\">"), "{xml}");
    assert!(xml.contains(r#"<x:foreign x:a="1">kept</x:foreign>"#), "{xml}");
    assert!(xml.contains("</sx:sync>\n  </entry>"), "{xml}");
    let again = reread(&xml).items.remove(0);
    assert_eq!(again.sync, item.sync);
    assert_eq!(again.title, item.title);
    assert_eq!(again.xml, item.xml);
}

#[test]
fn conflicts_are_written_as_entries_recursively() {
    let mut loser = bare("a");
    loser.title = Some("Loser".into());
    loser.sync =
        Some(Sync { history: vec![History { sequence: 2, when: None, by: Some("JEO2000".into()) }], ..sync("a", 2) });
    let mut winner = bare("a");
    winner.sync.as_mut().expect("sync").conflicts.push(loser.clone());
    let feed = reread(&write_feed(std::slice::from_ref(&winner)));
    let s = feed.items[0].sync.as_ref().expect("sync");
    assert_eq!(s.conflicts.len(), 1);
    assert_eq!(s.conflicts[0].title.as_deref(), Some("Loser"));
    assert_eq!(s.conflicts[0].sync, loser.sync);
}

#[test]
fn malformed_item_xml_is_an_error_and_writes_nothing() {
    let mut item = bare("a");
    item.xml = "<entry xmlns=\"http://www.w3.org/2005/Atom\"><id>x</entry>".into();
    let mut w = AtomWriter::new(Vec::new(), &head()).expect("head");
    let err = w.item(&item).expect_err("refused");
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    assert!(err.to_string().contains("item a"), "{err}");
    let out = String::from_utf8(w.finish().expect("finish")).expect("utf-8");
    assert!(!out.contains("<entry"), "{out}");
    // item_document cannot fail: it falls back to the fields.
    let doc = String::from_utf8(item_document(&item)).expect("utf-8");
    assert!(doc.contains("<title>Item a</title>"), "{doc}");
}

#[test]
fn an_item_with_nothing_to_make_an_id_from_is_refused() {
    let mut item = bare("a");
    item.sync = None;
    let mut w = AtomWriter::new(Vec::new(), &head()).expect("head");
    assert_eq!(w.item(&item).expect_err("refused").kind(), io::ErrorKind::InvalidInput);
}

/// The body of a standalone document, wrapped into a feed of its format.
fn wrap(doc: &[u8]) -> Feed {
    let doc = std::str::from_utf8(doc).expect("utf-8");
    let body = doc.strip_prefix("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n").expect("declaration");
    let feed = if body.starts_with("<item") {
        format!("<rss version=\"2.0\"><channel>{body}</channel></rss>")
    } else {
        format!("<feed xmlns=\"http://www.w3.org/2005/Atom\">{body}</feed>")
    };
    reread(&feed)
}

#[test]
fn item_documents_are_standalone_and_deterministic() {
    let rss = r#"<rss version="2.0" xmlns:sx="http://feedsync.org/2007/feedsync" xmlns:dc="http://purl.org/dc/elements/1.1/"><channel>
      <item><title>T &amp; U</title><dc:creator>me</dc:creator>
        <sx:sync id="r" updates="1"><sx:history sequence="1" by="me"/></sx:sync></item></channel></rss>"#;
    let item = reread(rss).items.remove(0);
    let doc = item_document(&item);
    assert_eq!(doc, item_document(&item.clone()));
    let text = String::from_utf8(doc.clone()).expect("utf-8");
    assert!(
        text.contains(
            "<item xmlns:dc=\"http://purl.org/dc/elements/1.1/\" xmlns:sx=\"http://feedsync.org/2007/feedsync\">"
        ),
        "{text}"
    );
    let back = wrap(&doc).items.remove(0);
    assert_eq!(back.sync, item.sync);
    assert_eq!(back.xml, item.xml);

    let synthesised = item_document(&bare("s"));
    let text = String::from_utf8(synthesised.clone()).expect("utf-8");
    assert!(
        text.contains("<entry xmlns=\"http://www.w3.org/2005/Atom\" xmlns:sx=\"http://feedsync.org/2007/feedsync\">"),
        "{text}"
    );
    assert_eq!(wrap(&synthesised).items[0].sync, bare("s").sync);
}

#[test]
fn active_markup_is_left_out_and_foreign_markup_kept() {
    let feed = r#"<feed xmlns="http://www.w3.org/2005/Atom"><entry><id>urn:x</id><title>t</title>
<updated>2020-01-01T00:00:00Z</updated><content type="xhtml"><div xmlns="http://www.w3.org/1999/xhtml">
<p onclick="x()" class="c">hi<script>alert(1)<b>nested</b></script>!</p><a href=" javascript:alert(2)">l</a>
<iframe src="x"/><img src="i.png" onerror="y()"/><svg xmlns="http://www.w3.org/2000/svg"><script>z()</script></svg></div></content>
<ext:thing xmlns:ext="http://example.org/ext" onclick="kept"><ext:script>kept too</ext:script></ext:thing></entry></feed>"#;
    let f = read_feed(feed.as_bytes(), "t", &FeedLimits::default()).unwrap();
    let doc = String::from_utf8(item_document(&f.items[0])).unwrap();
    for gone in ["<script", "alert", "nested", "onclick=\"x()\"", "javascript", "iframe", "onerror", "z()"] {
        assert!(!doc.contains(gone), "{gone} in {doc}");
    }
    for kept in ["<p class=\"c\">hi!</p>", "<a>l</a>", "<img src=\"i.png\"/>", "<ext:script>kept too</ext:script>"] {
        assert!(doc.contains(kept), "{kept} not in {doc}");
    }
    assert!(doc.contains("<ext:thing xmlns:ext=\"http://example.org/ext\" onclick=\"kept\">"), "{doc}");
    read_item(doc.as_bytes(), "again").unwrap();
}

#[test]
fn active_markup_in_escaped_html_is_left_out_and_the_rest_kept() {
    let feed = r#"<feed xmlns="http://www.w3.org/2005/Atom"><entry><id>urn:x</id>
<title type="html">T &lt;img src=x onerror=alert(1)&gt;</title><updated>2020-01-01T00:00:00Z</updated>
<summary type="html"><![CDATA[<p>s<script>alert(2)</script></p>]]></summary>
<content type="html">&lt;p class="c"&gt;hi &amp;amp; &lt;b&gt;bye&lt;/b&gt;&lt;iframe src="https://e.org/"&gt;&lt;/iframe&gt;&lt;a href="javascript:alert(3)"&gt;l&lt;/a&gt;&lt;/p&gt;</content>
<rights type="text">&lt;script&gt; is text here</rights>
<ext:html xmlns:ext="http://example.org/ext" type="html">&lt;script&gt;foreign&lt;/script&gt;</ext:html>
</entry></feed>"#;
    let f = read_feed(feed.as_bytes(), "t", &FeedLimits::default()).unwrap();
    let mut w = AtomWriter::new(Vec::new(), &head()).unwrap();
    w.item(&f.items[0]).unwrap();
    let out = String::from_utf8(w.finish().unwrap()).unwrap();
    for gone in ["onerror", "alert", "iframe", "javascript"] {
        let republished = out.split("<ext:html").next().unwrap();
        assert!(!republished.contains(gone), "{gone} in {out}");
    }
    for kept in [
        r#"<title type="html">T &lt;img src="x"&gt;</title>"#,
        r#"<summary type="html">&lt;p&gt;s&lt;/p&gt;</summary>"#,
        r#"<content type="html">&lt;p class="c"&gt;hi &amp;amp; &lt;b&gt;bye&lt;/b&gt;&lt;a&gt;l&lt;/a&gt;&lt;/p&gt;</content>"#,
        r#"<rights type="text">&lt;script&gt; is text here</rights>"#,
        r#"&lt;script&gt;foreign&lt;/script&gt;</ext:html>"#,
    ] {
        assert!(out.contains(kept), "{kept} not in {out}");
    }
    assert_eq!(read_feed(out.as_bytes(), "again", &FeedLimits::default()).unwrap().items.len(), 1, "well-formed");
}

#[test]
fn rss_descriptions_lose_active_markup_and_written_items_merge_unchanged() {
    let feed = r#"<rss version="2.0" xmlns:content="http://purl.org/rss/1.0/modules/content/"><channel><title>t</title>
<item><title>&lt;script&gt;a title is text&lt;/script&gt;</title><guid>urn:r</guid>
<description>&lt;p&gt;one&lt;br/&gt;two&lt;script&gt;alert(1)&lt;/script&gt;&lt;/p&gt;</description>
<content:encoded><![CDATA[<div onmouseover="alert(2)">full</div><embed src="x.swf">]]></content:encoded></item>
</channel></rss>"#;
    let f = read_feed(feed.as_bytes(), "t", &FeedLimits::default()).unwrap();
    let doc = String::from_utf8(item_document(&f.items[0])).unwrap();
    for gone in ["alert", "onmouseover", "embed"] {
        assert!(!doc.contains(gone), "{gone} in {doc}");
    }
    assert!(doc.contains("<description>&lt;p&gt;one&lt;br&gt;two&lt;/p&gt;</description>"), "{doc}");
    assert!(doc.contains("<content:encoded>&lt;div&gt;full&lt;/div&gt;</content:encoded>"), "{doc}");
    assert!(doc.contains("&lt;script&gt;a title is text"), "RSS titles are text: {doc}");
    // The state stored for the item is what it was written as: the same item polled again
    // (no date to order by, so compared by its markup) changes nothing.
    let stored = read_item(doc.as_bytes(), "state").unwrap();
    assert_eq!(item_document(&stored), doc.as_bytes(), "writing is idempotent");
    let again = crate::model::feed::merge(Some(&stored), &crate::model::feed::republished(&f.items[0]));
    assert!(matches!(again, crate::model::feed::Merged::Unchanged), "{again:?}");
}
