//! Tests of the reader: formats, fields, the FeedSync rules, limits and hostile input.

use super::*;
use crate::model::feed::RelatedKind;

fn read(xml: &str) -> Result<Feed, FeedError> {
    read_feed(xml.as_bytes(), "test.xml", &FeedLimits::default())
}

fn ok(xml: &str) -> Feed {
    read(xml).unwrap_or_else(|e| panic!("refused: {e}"))
}

fn refused(xml: &str) -> String {
    match read(xml) {
        Ok(feed) => panic!("accepted: {feed:?}"),
        Err(e) => e.to_string(),
    }
}

/// An Atom feed around `entries`.
fn atom(entries: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom" xmlns:sx="http://feedsync.org/2007/feedsync">
  <title>T</title>
  <id>urn:feed</id>
  <updated>2005-05-21T11:43:33Z</updated>
{entries}
</feed>"#
    )
}

/// An Atom entry with an `sx:sync` made of `sync_attrs` and `history`.
fn entry(sync_attrs: &str, history: &str) -> String {
    format!(r#"<entry><id>urn:e</id><title>E</title><sx:sync {sync_attrs}>{history}</sx:sync></entry>"#)
}

const H1: &str = r#"<sx:history sequence="1" when="2005-05-21T09:43:33Z" by="REO1750"/>"#;

const SEED_ATOM: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom"
xmlns:sx="http://feedsync.org/2007/feedsync">
  <title>To Do List</title>
  <subtitle>A list of items to do</subtitle>
  <link rel="self" href="http://example.com/partial.xml"/>
  <author>
    <name>Ray Ozzie</name>
  </author>
  <updated>2005-05-21T11:43:33Z</updated>
  <id>urn:uuid:60a76c80-d399-11d9-b93C-0003939e0aaa</id>
  <sx:sharing since="2005-02-13T18:30:02Z"
    until="2005-05-23T18:30:02Z" >
   <sx:related link="http://example.com/all.xml" type="complete" />
   <sx:related link="http://example.com/B.xml" type="aggregated"
    title="To Do List (Jacks Copy)" />
  </sx:sharing>
  <entry>
   <title>Buy groceries</title>
   <content>Get milk, eggs, butter and bread</content>
   <id>urn:uuid:60a76c80-d399-11d9-b93C-0003939e0aa0</id>
   <author>
    <name>Ray Ozzie</name>
   </author>
   <updated>2005-05-21T11:43:33Z</updated>
   <sx:sync id="item_1_myapp_2005-05-21T11:43:33Z" updates="3">
    <sx:history sequence="3" when="2005-05-21T11:43:33Z" by="JEO2000"/>
    <sx:history sequence="2" when="2005-05-21T10:43:33Z" by="REO1750"/>
    <sx:history sequence="1" when="2005-05-21T09:43:33Z" by="REO1750"/>
   </sx:sync>
  </entry>
</feed>"#;

#[test]
fn reads_the_seed_atom_feed() {
    let feed = ok(SEED_ATOM);
    assert_eq!(feed.format, FeedFormat::Atom);
    assert_eq!(feed.title.as_deref(), Some("To Do List"));
    assert_eq!(feed.id.as_deref(), Some("urn:uuid:60a76c80-d399-11d9-b93C-0003939e0aaa"));
    assert_eq!(feed.updated.map(|u| u.to_string()).as_deref(), Some("2005-05-21T11:43:33Z"));
    assert_eq!(feed.links, vec![FeedLink { rel: "self".into(), href: "http://example.com/partial.xml".into() }]);
    let sharing = feed.sharing.as_ref().expect("sharing");
    assert_eq!(sharing.since.as_deref(), Some("2005-02-13T18:30:02Z"));
    assert_eq!(sharing.until.as_deref(), Some("2005-05-23T18:30:02Z"));
    assert_eq!(sharing.related.len(), 2);
    assert_eq!(sharing.related[1].kind, RelatedKind::Aggregated);
    assert_eq!(sharing.related[1].title.as_deref(), Some("To Do List (Jacks Copy)"));
    assert_eq!(feed.items.len(), 1);
    let item = &feed.items[0];
    assert_eq!(item.title.as_deref(), Some("Buy groceries"));
    assert_eq!(item.id.as_deref(), Some("urn:uuid:60a76c80-d399-11d9-b93C-0003939e0aa0"));
    let sync = item.sync.as_ref().expect("sync");
    assert_eq!(sync.id, "item_1_myapp_2005-05-21T11:43:33Z");
    assert_eq!(sync.updates, 3);
    assert_eq!(sync.history.len(), 3);
    assert_eq!(sync.history[0].by.as_deref(), Some("JEO2000"));
    assert_eq!(sync.history[2].when.map(|w| w.to_string()).as_deref(), Some("2005-05-21T09:43:33Z"));
    assert!(feed.warnings.is_empty(), "{:?}", feed.warnings);
}

#[test]
fn item_xml_is_standalone_and_has_no_sync() {
    let feed = ok(SEED_ATOM);
    let xml = &feed.items[0].xml;
    assert!(xml.starts_with(r#"<entry xmlns="http://www.w3.org/2005/Atom">"#), "{xml}");
    assert!(xml.ends_with("</entry>"), "{xml}");
    assert!(!xml.contains("sx:"), "{xml}");
    assert!(xml.contains("<content>Get milk, eggs, butter and bread</content>"), "{xml}");
    // The copy parses on its own, as an Atom entry.
    let again = ok(&atom(&xml.replace("</entry>", "<link href=\"http://x/\"/></entry>")));
    assert_eq!(again.items[0].title.as_deref(), Some("Buy groceries"));
}

#[test]
fn foreign_markup_and_prefixes_survive_in_the_item_xml() {
    let xml = r#"<feed xmlns="http://www.w3.org/2005/Atom" xmlns:sx="http://feedsync.org/2007/feedsync"
        xmlns:ext="urn:ext" xmlns:unused="urn:unused">
      <entry ext:flag="yes"><id>urn:a</id><title>A &amp; B &#233;</title>
        <ext:thing a="1"><![CDATA[<raw>]]></ext:thing><!-- kept -->
        <sx:sync id="a" updates="1">
          <sx:history sequence="1" by="x"/>
        </sx:sync>
      </entry></feed>"#;
    let feed = ok(xml);
    let item = &feed.items[0];
    assert_eq!(item.title.as_deref(), Some("A & B é"));
    assert!(
        item.xml.starts_with(r#"<entry xmlns="http://www.w3.org/2005/Atom" xmlns:ext="urn:ext" ext:flag="yes">"#),
        "{}",
        item.xml
    );
    assert!(item.xml.contains("<title>A &amp; B &#233;</title>"), "{}", item.xml);
    assert!(item.xml.contains(r#"<ext:thing a="1"><![CDATA[<raw>]]></ext:thing><!-- kept -->"#), "{}", item.xml);
    assert!(!item.xml.contains("unused") && !item.xml.contains("sx:"), "{}", item.xml);
}

#[test]
fn the_sx_namespace_is_matched_by_uri_not_prefix() {
    let xml = r#"<feed xmlns="http://www.w3.org/2005/Atom" xmlns:fs="http://feedsync.org/2007/feedsync"
        xmlns:sx="urn:not-feedsync">
      <entry><id>urn:a</id><sx:sync id="decoy"/>
        <fs:sync id="real" updates="2"><fs:history sequence="2" by="me"/></fs:sync></entry></feed>"#;
    let feed = ok(xml);
    let item = &feed.items[0];
    assert_eq!(item.sync.as_ref().map(|s| s.id.as_str()), Some("real"));
    assert!(item.xml.contains(r#"xmlns:sx="urn:not-feedsync""#), "{}", item.xml);
    assert!(item.xml.contains(r#"<sx:sync id="decoy"/>"#), "{}", item.xml);
}

const SEED_RSS: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<rss version="2.0" xmlns:sx="http://feedsync.org/2007/feedsync">
 <channel>
  <title>To Do List</title>
  <description>A list of items to do</description>
  <link> http://example.com/partial.xml </link>
  <sx:sharing since="2005-02-13T18:30:02Z"
    until="2005-05-23T18:30:02Z" >
   <sx:related link="http://example.com/all.xml" type="complete" />
   <sx:related link="http://example.com/B.xml" type="aggregated" 
    title="To Do List (Jacks Copy)" />
  </sx:sharing>
  <item>
   <title>Buy groceries</title>
   <description>Get milk, eggs, butter and bread</description>
   <sx:sync id="item_1_myapp_2005-05-21T11:43:33Z" updates="3">
    <sx:history sequence="3" when="2005-05-21T11:43:33Z" by="JEO2000"/>
    <sx:history sequence="2" when="2005-05-21T10:43:33Z" by="REO1750"/>
    <sx:history sequence="1" when="2005-05-21T09:43:33Z" by="REO1750"/>
   </sx:sync>
  </item>
 </channel>
</rss>"#;

#[test]
fn reads_the_seed_rss_feed() {
    let feed = ok(SEED_RSS);
    assert_eq!(feed.format, FeedFormat::Rss);
    assert_eq!(feed.title.as_deref(), Some("To Do List"));
    assert_eq!(feed.links, vec![FeedLink { rel: "alternate".into(), href: "http://example.com/partial.xml".into() }]);
    assert_eq!(feed.sharing.as_ref().map(|s| s.related.len()), Some(2));
    let item = &feed.items[0];
    assert_eq!(item.sync.as_ref().map(|s| s.updates), Some(3));
    assert_eq!(item.xml.lines().next(), Some("<item>"));
    assert!(!item.xml.contains("sx:"), "{}", item.xml);
}

#[test]
fn reads_rss_fields_dates_and_enclosures() {
    let xml = r#"<rss version="2.0" xmlns:atom="http://www.w3.org/2005/Atom"><channel>
      <title>R</title><link>http://r/</link>
      <atom:link rel="self" href="http://r/feed.xml"/>
      <pubDate>Sat, 21 May 2005 09:00:00 GMT</pubDate>
      <lastBuildDate>Sat, 21 May 2005 10:00:00 -0500</lastBuildDate>
      <item><title> One </title><link> http://r/1 </link><guid>g1</guid>
        <pubDate>Sat, 21 May 2005 11:43:33 EST</pubDate>
        <enclosure url="http://r/1.mp3" length="123" type="audio/mpeg"/></item>
      <item><title>Two</title><link>http://r/2</link><pubDate>yesterday</pubDate></item>
    </channel></rss>"#;
    let feed = ok(xml);
    assert_eq!(feed.updated.map(|u| u.to_string()).as_deref(), Some("2005-05-21T15:00:00Z"));
    assert_eq!(feed.links.len(), 2);
    assert_eq!(feed.links[1], FeedLink { rel: "self".into(), href: "http://r/feed.xml".into() });
    let one = &feed.items[0];
    assert_eq!(one.title.as_deref(), Some("One"));
    assert_eq!(one.link.as_deref(), Some("http://r/1"));
    assert_eq!(one.id.as_deref(), Some("g1"));
    assert_eq!(one.updated.map(|u| u.to_string()).as_deref(), Some("2005-05-21T16:43:33Z"));
    assert_eq!(
        one.enclosure,
        Some(Enclosure { url: "http://r/1.mp3".into(), length: Some(123), media_type: Some("audio/mpeg".into()) })
    );
    assert_eq!(feed.items[1].updated, None);
    assert_eq!(feed.warnings.len(), 1, "{:?}", feed.warnings);
    assert!(feed.warnings[0].contains("`yesterday` is not an RFC 822 date"), "{:?}", feed.warnings);
}

#[test]
fn atom_links_alternate_and_enclosure() {
    let xml = atom(
        r#"<entry><id>urn:a</id><link rel="self" href="http://s/"/><link href="http://alt/"/>
           <link rel="enclosure" href="http://e/f.ogg" length="9" type="audio/ogg"/></entry>"#,
    );
    let item = &ok(&xml).items[0];
    assert_eq!(item.link.as_deref(), Some("http://alt/"));
    assert_eq!(item.enclosure.as_ref().map(|e| (e.url.as_str(), e.length)), Some(("http://e/f.ogg", Some(9))));
}

#[test]
fn conflicts_are_read_as_items_recursively() {
    let xml = atom(
        r#"<entry><id>urn:a</id><title>DONE</title>
        <sx:sync id="item_1" updates="4">
          <sx:history sequence="4" when="2005-05-21T12:43:33Z" by="GPM7383"/>
          <sx:conflicts>
            <entry><title>Buy groceries</title><id>urn:a</id>
              <sx:sync id="item_1" updates="4"><sx:history sequence="4" when="2005-05-21T12:43:33Z" by="JEO2000"/></sx:sync>
            </entry>
          </sx:conflicts>
        </sx:sync></entry>"#,
    );
    let feed = ok(&xml);
    let sync = feed.items[0].sync.as_ref().expect("sync");
    assert_eq!(sync.conflicts.len(), 1);
    let c = &sync.conflicts[0];
    assert_eq!(c.title.as_deref(), Some("Buy groceries"));
    assert_eq!(c.sync.as_ref().map(|s| s.history[0].by.as_deref()), Some(Some("JEO2000")));
    assert!(c.xml.starts_with(r#"<entry xmlns="http://www.w3.org/2005/Atom">"#), "{}", c.xml);
    assert!(!c.xml.contains("sx:"), "{}", c.xml);
    assert!(!feed.items[0].xml.contains("conflicts"), "{}", feed.items[0].xml);
}

#[test]
fn tombstones_and_noconflicts_are_read() {
    let feed = ok(&atom(&entry(r#"id="a" updates="2" deleted="true" noconflicts="false""#, H1)));
    let sync = feed.items[0].sync.as_ref().expect("sync");
    assert!(sync.deleted && !sync.noconflicts);
    assert!(feed.items[0].is_deleted());
}

/// Each FeedSync rule: the refusal names the item and the rule.
#[test]
fn sync_rules_refuse_the_feed_naming_item_and_rule() {
    let cases: &[(&str, &str, &[&str])] = &[
        (r#"updates="1""#, H1, &["item #1", "no id"]),
        (r#"id="" updates="1""#, H1, &["item #1", "empty id"]),
        (r#"id="a""#, H1, &["item a", "no updates"]),
        (r#"id="a" updates="x1""#, H1, &["item a", "updates=\"x1\"", "not an integer"]),
        (r#"id="a" updates="0""#, H1, &["item a", "outside 1..=2147483647"]),
        (r#"id="a" updates="2147483648""#, H1, &["item a", "outside"]),
        (r#"id="a" updates="1" deleted="TRUE""#, H1, &["item a", "deleted=\"TRUE\"", "only \"true\" or \"false\""]),
        (r#"id="a" updates="1" noconflicts="yes""#, H1, &["item a", "noconflicts=\"yes\""]),
        (r#"id="a" updates="1""#, "", &["item a", "no sx:history"]),
        (r#"id="a" updates="1""#, r#"<sx:history when="2005-05-21T09:43:33Z"/>"#, &["item a", "no sequence"]),
        (r#"id="a" updates="1""#, r#"<sx:history sequence="0" by="x"/>"#, &["item a", "sequence=\"0\"", "outside"]),
        (r#"id="a" updates="1""#, r#"<sx:history sequence="1"/>"#, &["item a", "neither when nor by"]),
        (
            r#"id="a" updates="1""#,
            r#"<sx:history sequence="1" when="2005-05-21T09:43:33.5Z"/>"#,
            &["item a", "fractional seconds", "§2.1.5"],
        ),
        (
            r#"id="a" updates="1""#,
            r#"<sx:history sequence="1" when="2005-05-21T09:43:33+01:00"/>"#,
            &["item a", "zone offset instead of Z"],
        ),
        (r#"id="a" updates="1""#, r#"<sx:history sequence="1" when="2005-05-21"/>"#, &["item a", "not a date-time"]),
    ];
    for (attrs, history, expected) in cases {
        let msg = refused(&atom(&entry(attrs, history)));
        for e in *expected {
            assert!(msg.contains(e), "`{attrs}` `{history}`: {msg:?} lacks {e:?}");
        }
        assert!(msg.starts_with("test.xml: "), "{msg}");
    }
    // An empty sx:sync element is one without history.
    assert!(refused(&atom(r#"<entry><sx:sync id="e" updates="1"/></entry>"#)).contains("no sx:history"));
}

#[test]
fn sync_rules_apply_to_conflicts_too() {
    let bad =
        r#"<sx:conflicts><entry><sx:sync id="a" updates="0">"#.to_owned() + H1 + "</sx:sync></entry></sx:conflicts>";
    let msg = refused(&atom(&entry(r#"id="a" updates="1""#, &(H1.to_owned() + &bad))));
    assert!(msg.contains("item a") && msg.contains("updates=\"0\""), "{msg}");
}

#[test]
fn a_repeated_sync_id_is_refused() {
    let e = entry(r#"id="dup" updates="1""#, H1);
    let msg = refused(&atom(&format!("{e}{e}")));
    assert!(msg.contains("`dup`") && msg.contains("unique"), "{msg}");
}

#[test]
fn sharing_rules() {
    let with = |s: &str| {
        format!(r#"<feed xmlns="http://www.w3.org/2005/Atom" xmlns:sx="http://feedsync.org/2007/feedsync">{s}</feed>"#)
    };
    let msg = refused(&with(r#"<sx:sharing since="1"/>"#));
    assert!(msg.contains("sx:sharing") && msg.contains("since without until"), "{msg}");
    assert!(refused(&with(r#"<sx:sharing until="1"/>"#)).contains("until without since"));
    let msg = refused(&with(r#"<sx:sharing><sx:related type="complete"/></sx:sharing>"#));
    assert!(msg.contains("sx:related has no link"), "{msg}");
    let msg = refused(&with(r#"<sx:sharing><sx:related link="http://x/" type="partial"/></sx:sharing>"#));
    assert!(msg.contains("type=\"partial\""), "{msg}");
    let msg = refused(&with(r#"<sx:sharing expires="2005-05-21T09:43:33.1Z"/>"#));
    assert!(msg.contains("expires") && msg.contains("fractional"), "{msg}");
    let feed = ok(&with(r#"<sx:sharing expires="2005-05-21T09:43:33Z"/>"#));
    assert_eq!(feed.sharing.and_then(|s| s.expires).map(|e| e.to_string()).as_deref(), Some("2005-05-21T09:43:33Z"));
}

#[test]
fn an_item_without_identity_is_skipped_with_a_warning() {
    let xml = r#"<rss version="2.0"><channel><title>R</title>
      <item><title>No identity</title><description>x</description></item>
      <item><title>Linked</title><link>http://r/2</link></item>
    </channel></rss>"#;
    let feed = ok(xml);
    assert_eq!(feed.items.len(), 1);
    assert_eq!(feed.items[0].title.as_deref(), Some("Linked"));
    assert_eq!(feed.warnings.len(), 1);
    assert!(feed.warnings[0].contains("item #1") && feed.warnings[0].contains("skipped"), "{:?}", feed.warnings);
}

#[test]
fn a_non_feed_root_is_named() {
    let msg = refused(r#"<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"/>"#);
    assert!(msg.contains("not a feed") && msg.contains("<urlset>"), "{msg}");
    assert!(msg.contains("http://www.sitemaps.org/schemas/sitemap/0.9"), "{msg}");
    // <feed> outside the Atom namespace is not Atom.
    assert!(matches!(read("<feed><entry/></feed>"), Err(FeedError::NotAFeed { .. })));
}

#[test]
fn a_doctype_is_refused() {
    let xml = r#"<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;">]>
<rss version="2.0"><channel><title>&lol2;</title></channel></rss>"#;
    let err = read(xml).expect_err("refused");
    assert!(matches!(err, FeedError::Doctype { .. }), "{err}");
    assert!(err.to_string().contains("DOCTYPE"), "{err}");
}

#[test]
fn undefined_entities_are_malformed() {
    let msg = refused(r#"<rss version="2.0"><channel><title>&nbsp;</title></channel></rss>"#);
    assert!(msg.contains("undefined entity `&nbsp;`"), "{msg}");
}

#[test]
fn malformed_xml_reports_the_byte_position() {
    let err = read(&atom("<entry><id>urn:a</id></entyr>")).expect_err("refused");
    match &err {
        FeedError::Malformed { position, .. } => assert!(position.offset > 100, "{err}"),
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains("at byte"), "{err}");
    // Truncated documents too.
    assert!(matches!(read(&atom("<entry><id>urn:a</id>")[..150]), Err(FeedError::Malformed { .. })));
}

#[test]
fn the_byte_limit_stops_reading_early() {
    /// Endless feed bytes, counting what was read.
    struct Endless {
        served: u64,
        chunk: Vec<u8>,
        head: bool,
    }
    impl std::io::Read for Endless {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let src: &[u8] = if self.head { b"<rss version=\"2.0\"><channel>" } else { &self.chunk };
            self.head = false;
            let n = src.len().min(out.len());
            out[..n].copy_from_slice(&src[..n]);
            self.served += n as u64;
            Ok(n)
        }
    }
    let chunk = b"<item><title>x</title><link>http://r/</link></item>".repeat(100);
    let mut input = std::io::BufReader::new(Endless { served: 0, chunk, head: true });
    let limits = FeedLimits { max_bytes: 1 << 20, max_items: usize::MAX, ..FeedLimits::default() };
    let err = read_feed(&mut input, "big.xml", &limits).expect_err("refused");
    assert!(matches!(err, FeedError::TooLarge { limit: 1048576, .. }), "{err}");
    assert!(input.get_ref().served < (1 << 20) + 65536, "read {} bytes", input.get_ref().served);
}

#[test]
fn item_count_item_size_and_depth_are_capped() {
    let two = atom(&format!("{}{}", entry(r#"id="a" updates="1""#, H1), entry(r#"id="b" updates="1""#, H1)));
    let limits = FeedLimits { max_items: 1, ..FeedLimits::default() };
    let err = read_feed(two.as_bytes(), "t", &limits).expect_err("refused");
    assert!(matches!(err, FeedError::TooManyItems { limit: 1, .. }), "{err}");

    let big = atom(&format!("<entry><id>urn:a</id><content>{}</content></entry>", "x".repeat(5000)));
    let limits = FeedLimits { max_item_bytes: 4096, ..FeedLimits::default() };
    let err = read_feed(big.as_bytes(), "t", &limits).expect_err("refused");
    assert!(matches!(err, FeedError::ItemTooLarge { limit: 4096, .. }), "{err}");
    assert!(err.to_string().contains("item #1"), "{err}");

    let deep = atom(&format!("<entry><id>urn:a</id>{}{}</entry>", "<x>".repeat(70), "</x>".repeat(70)));
    let err = read(&deep).expect_err("refused");
    assert!(matches!(err, FeedError::TooDeep { limit: 64, .. }), "{err}");
}

/// `n` histories by distinct endpoints, most recent first.
fn histories(n: usize) -> String {
    (1..=n).rev().map(|i| format!(r#"<sx:history sequence="{i}" by="e{i}"/>"#)).collect()
}

/// An item whose `sx:sync` holds `n` conflicting versions.
fn with_conflicts(n: usize) -> String {
    let conflict = |i: usize| {
        format!(
            r#"<entry><id>urn:e</id><title>C{i}</title><sx:sync id="s" updates="1">{}</sx:sync></entry>"#,
            histories(1).replace("e1", &format!("c{i}"))
        )
    };
    let conflicts: String = (0..n).map(conflict).collect();
    entry(r#"id="s" updates="2""#, &format!("{H1}<sx:conflicts>{conflicts}</sx:conflicts>"))
}

#[test]
fn sync_history_and_conflicts_count_against_the_item_size() {
    // The item's own XML is small; its history is not.
    let feed = atom(&entry(r#"id="s" updates="200""#, &histories(200)));
    let limits = FeedLimits { max_item_bytes: 4096, ..FeedLimits::default() };
    let err = read_feed(feed.as_bytes(), "t", &limits).expect_err("refused");
    assert!(matches!(err, FeedError::ItemTooLarge { limit: 4096, .. }), "{err}");
    let item = &read_feed(feed.as_bytes(), "t", &FeedLimits::default()).unwrap().items[0];
    assert!(item.xml.len() < 4096, "the history is not in the item's XML, so only the element's size catches it");

    let feed = atom(&with_conflicts(40));
    let err = read_feed(feed.as_bytes(), "t", &limits).expect_err("refused");
    assert!(matches!(err, FeedError::ItemTooLarge { .. }), "{err}");
}

#[test]
fn conflicts_count_as_items() {
    let feed = atom(&with_conflicts(3));
    let limits = FeedLimits { max_items: 3, ..FeedLimits::default() };
    let err = read_feed(feed.as_bytes(), "t", &limits).expect_err("refused");
    assert!(matches!(err, FeedError::TooManyItems { limit: 3, .. }), "{err}");
    let limits = FeedLimits { max_items: 4, ..FeedLimits::default() };
    assert_eq!(read_feed(feed.as_bytes(), "t", &limits).unwrap().items[0].sync.as_ref().unwrap().conflicts.len(), 3);
}

#[test]
fn history_and_conflicts_are_capped_per_item() {
    let feed = atom(&entry(r#"id="s" updates="6""#, &histories(6)));
    let limits = FeedLimits { max_history: 5, ..FeedLimits::default() };
    let err = read_feed(feed.as_bytes(), "t", &limits).expect_err("refused");
    assert!(matches!(err, FeedError::TooMuchSync { cap: SyncCap::History(5), .. }), "{err}");
    assert!(err.to_string().contains("item s"), "{err}");
    let limits = FeedLimits { max_history: 6, ..FeedLimits::default() };
    let item = read_feed(feed.as_bytes(), "t", &limits).unwrap().items.remove(0);
    assert_eq!(limits.sync_within(&item), Ok(()));
    let tighter = FeedLimits { max_history: 5, ..FeedLimits::default() };
    assert_eq!(tighter.sync_within(&item), Err(SyncCap::History(5)), "a merge result is checked the same way");

    let feed = atom(&with_conflicts(3));
    let limits = FeedLimits { max_conflicts: 2, ..FeedLimits::default() };
    let err = read_feed(feed.as_bytes(), "t", &limits).expect_err("refused");
    assert!(matches!(err, FeedError::TooMuchSync { cap: SyncCap::Conflicts(2), .. }), "{err}");
    let item = read_feed(feed.as_bytes(), "t", &FeedLimits::default()).unwrap().items.remove(0);
    assert_eq!(limits.sync_within(&item), Err(SyncCap::Conflicts(2)));
}
