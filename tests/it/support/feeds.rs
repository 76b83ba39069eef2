//! Feeds served by a test: a site of paths whose bodies the test changes between polls, with
//! an `ETag` per body and `304` answers as feed servers give; FeedSync Atom written as text;
//! and a feed source of Tributary's configuration reading them.

use std::sync::{Arc, Mutex};

use super::digest::sha256_hex;
use super::harness::{Harness, UNLIMITED, config_text};
use super::upstream::{Reply, Upstream};

/// What the test serves, by path; changed between polls.
pub(crate) type Site = Arc<Mutex<Vec<(String, String)>>>;

/// Serves the site with an `ETag` per body, answering `304` to a matching `If-None-Match`:
/// an unchanged feed costs nothing, and a harvester that keeps validators too long is caught.
pub(crate) async fn serve(site: &Site) -> Upstream {
    let s = site.clone();
    Upstream::start(move |hit, _| {
        let Some((path, body)) = s.lock().unwrap().iter().find(|(p, _)| *p == hit.path).cloned() else {
            return Reply::status(404);
        };
        let etag = format!("\"{}\"", &sha256_hex(body.as_bytes())[..16]);
        if hit.headers.get("if-none-match") == Some(&etag) {
            return Reply::status(304).header("ETag", &etag);
        }
        let media = if path.ends_with(".rss") { "application/rss+xml" } else { "application/atom+xml" };
        Reply::ok(body).header("Content-Type", media).header("ETag", &etag)
    })
    .await
}

/// Serves `body` at `path` from now on.
pub(crate) fn set(site: &Site, path: &str, body: String) {
    let mut s = site.lock().unwrap();
    s.retain(|(p, _)| p != path);
    s.push((path.to_owned(), body));
}

/// A harness with one feed source `id` reading `url` (with `url` empty, `extra` names the
/// feeds), reaching 127.0.0.1.
pub(crate) fn feed_source(id: &str, url: &str, extra: &str) -> Harness {
    let feed = if url.is_empty() { String::new() } else { format!("feed = \"{url}\"\n") };
    Harness::new(|dir| {
        format!(
            "{}[[source]]\nid = \"{id}\"\n{feed}allow_private = true\n{extra}\n",
            config_text(dir, "", UNLIMITED, &[])
        )
    })
}

/// An Atom entry with FeedSync history `(sequence, when, by)`, most recent first; its link is
/// `http://example.org/items/{sync_id}`.
pub(crate) fn entry(sync_id: &str, title: &str, updates: u32, deleted: bool, history: &[(u32, &str, &str)]) -> String {
    let hist: String =
        history.iter().map(|(s, w, b)| format!("<sx:history sequence=\"{s}\" when=\"{w}\" by=\"{b}\"/>")).collect();
    let del = if deleted { " deleted=\"true\"" } else { "" };
    format!(
        "<entry><title>{title}</title><id>urn:uuid:{sync_id}</id><link href=\"http://example.org/items/{sync_id}\"/>\
         <updated>{}</updated><content>{title} body</content>\
         <sx:sync id=\"{sync_id}\" updates=\"{updates}\"{del}>{hist}</sx:sync></entry>\n",
        history[0].1
    )
}

/// A FeedSync Atom feed of `entries`; with `sharing`, an `sx:sharing` with those
/// `since`/`until`, naming `complete` as the complete feed when given.
pub(crate) fn atom(
    self_url: &str,
    complete: Option<&str>,
    sharing: Option<(&str, &str)>,
    entries: &[String],
) -> String {
    let related = complete.map_or(String::new(), |c| format!("<sx:related link=\"{c}\" type=\"complete\"/>"));
    let sharing = sharing.map_or(String::new(), |(since, until)| {
        format!("<sx:sharing since=\"{since}\" until=\"{until}\">{related}</sx:sharing>")
    });
    format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<feed xmlns=\"http://www.w3.org/2005/Atom\" \
         xmlns:sx=\"http://feedsync.org/2007/feedsync\"><title>To Do</title><id>urn:uuid:feed</id>\
         <updated>2026-01-01T00:00:00Z</updated><link rel=\"self\" href=\"{self_url}\"/>{sharing}\n{}</feed>\n",
        entries.concat()
    )
}
