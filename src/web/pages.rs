//! Plain HTML for people (the front page is the dashboard, in `dashboard`): one page per set
//! (each Capability List's `describedby`), the provenance page, and `/robots.txt`.
//!
//! Pages show third-party strings (URIs, media types, error messages from upstreams), so
//! everything interpolated is escaped, and every page is sent with a Content-Security-Policy
//! that allows no script at all.

use std::fmt::Write as _;

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use super::WebState;
use super::error::WebError;
use crate::publish::provenance::{Provenance, ResourceProvenance};

const PAGE_CSP: &str = "default-src 'none'; style-src 'unsafe-inline'";

/// Escapes text for HTML element content and double-quoted attributes.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A link, only for http(s) URIs (a `javascript:` href from an upstream must not be clickable).
fn link(uri: &str) -> String {
    if uri.starts_with("http://") || uri.starts_with("https://") {
        format!("<a href=\"{0}\">{0}</a>", esc(uri))
    } else {
        esc(uri)
    }
}

pub(crate) fn html(status: axum::http::StatusCode, title: &str, body: &str) -> Response {
    let page = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
         <style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}td,th{{padding:.2em .6em;text-align:left}}\
         code{{word-break:break-all}}</style></head>\n<body>\n<h1>{}</h1>\n{body}</body></html>\n",
        esc(title),
        esc(title)
    );
    let mut r = (status, page).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(PAGE_CSP));
    r
}

/// `sets/{set}/`: sources, counts, last change and harvest.
pub(crate) async fn set_page(st: &WebState, set: String) -> Result<Response, WebError> {
    let p = st.shared.publisher.clone();
    let id = set.clone();
    let s = tokio::task::spawn_blocking(move || p.set_summary(&id)).await??;
    let n = st.shared.publisher.naming();
    let mut b = String::new();
    let _ = writeln!(
        b,
        "<p>{} live resources, {} change events, last change {}.</p>",
        s.live,
        s.events,
        opt(&s.last_change)
    );
    let _ = writeln!(
        b,
        "<p>Capability List: {}<br>Resource List: {}<br>Change List: {}<br>FeedSync feed: {} (complete: {})</p>",
        link(&n.capability_list(&set)),
        link(&n.resource_list(&set)),
        link(&n.change_list(&set)),
        link(&n.set_feed(&set)),
        link(&n.set_complete_feed(&set, None))
    );
    b.push_str(
        "<table><tr><th>source</th><th>live</th><th>last change</th><th>last harvest</th><th>last error</th></tr>\n",
    );
    for src in &s.sources {
        let _ = writeln!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&src.id),
            src.live,
            opt(&src.last_change),
            opt(&src.last_harvest),
            opt(&src.last_error)
        );
    }
    b.push_str("</table>\n");
    Ok(html(axum::http::StatusCode::OK, &format!("Set {set}"), &b))
}

/// `/robots.txt`: everything may be crawled but the provenance endpoint (each answer is a
/// lookup, and `verify` a fetch elsewhere), and each set's Resource List is a sitemap.
pub(crate) fn robots(st: &WebState) -> Response {
    let p = &st.shared.publisher;
    let mut text = format!("User-agent: *\nDisallow: {}provenance\n\n", st.shared.base_path);
    for s in p.sets() {
        let _ = writeln!(text, "Sitemap: {}", p.naming().resource_list(&s.id));
    }
    let mut r = text.into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// The provenance answer as a page.
pub(crate) fn provenance_page(status: axum::http::StatusCode, p: &Provenance) -> Response {
    let mut b = String::new();
    if p.resources.is_empty() {
        let _ = writeln!(b, "<p>No republished resource matches <code>{}</code>.</p>", esc(&p.query));
    }
    for r in &p.resources {
        resource_section(&mut b, r);
    }
    html(status, &format!("Provenance of {}", p.query), &b)
}

fn resource_section(b: &mut String, r: &ResourceProvenance) {
    let _ = writeln!(b, "<h2>{}</h2>", link(&r.uri));
    let _ = writeln!(
        b,
        "<p>Matched by {}; source <b>{}</b>; sets {}.</p>",
        r.matched_by,
        esc(&r.source),
        esc(&r.sets.join(", "))
    );
    b.push_str("<h3>Chain</h3><ol>");
    for c in &r.chain {
        let _ = write!(b, "<li>{}: {}</li>", c.role, link(&c.uri));
    }
    b.push_str("</ol>\n");
    origin_table(b, r);
    let s = &r.state;
    let _ = writeln!(
        b,
        "<h3>Tributary's copy</h3><p>{}, {} bytes, {}, last change {}; sha-256 <code>{}</code></p>",
        s.status,
        s.length,
        opt(&s.media_type),
        esc(&s.last_change),
        s.sha256
    );
    history_table(b, r);
    feed_table(b, r);
    oai_table(b, r);
    if let Some(v) = &r.verify {
        let _ = writeln!(b, "<h3>Live check</h3><p>{}: {}</p>", link(&v.checked), esc(&v.summary));
    }
}

fn opt(v: &Option<String>) -> String {
    v.as_deref().map_or_else(|| "–".to_owned(), esc)
}

fn origin_table(b: &mut String, r: &ResourceProvenance) {
    let o = &r.origin;
    b.push_str("<h3>Origin (via)</h3><table>");
    let rows = [
        ("href", Some(o.href.clone())),
        ("modified", o.modified.clone()),
        ("hash", o.hash.clone()),
        ("length", o.length.map(|l| l.to_string())),
        ("type", o.media_type.clone()),
    ];
    for (k, v) in rows {
        let _ = write!(b, "<tr><th>{k}</th><td><code>{}</code></td></tr>", opt(&v));
    }
    b.push_str("</table>\n");
}

/// An OAI-PMH record's identifier, datestamp, sets and repository.
fn oai_table(b: &mut String, r: &ResourceProvenance) {
    let Some(o) = &r.oai else { return };
    b.push_str("<h3>OAI-PMH record</h3><table>");
    let rows = [
        ("identifier", Some(o.identifier.clone())),
        ("datestamp", o.datestamp.clone()),
        ("sets", Some(o.sets.join(", "))),
        ("metadataPrefix", Some(o.metadata_prefix.clone())),
        ("repository", Some(o.repository.clone())),
    ];
    for (k, v) in rows {
        let _ = write!(b, "<tr><th>{k}</th><td><code>{}</code></td></tr>", opt(&v));
    }
    b.push_str("</table>\n");
}

/// A feed item's FeedSync state: its `sx:sync` and `sx:history`, most recent first.
fn feed_table(b: &mut String, r: &ResourceProvenance) {
    let Some(feed) = &r.feed else { return };
    let _ = write!(b, "<h3>FeedSync</h3><p>Feed item <code>{}</code>, updated {}", esc(&feed.item), opt(&feed.updated));
    let Some(s) = &feed.sync else {
        b.push_str("; no <code>sx:sync</code> (merged by date).</p>\n");
        return;
    };
    let _ = writeln!(
        b,
        "; sync id <code>{}</code>, {} update(s), {}, {} conflict(s) kept{}.</p>",
        esc(&s.id),
        s.updates,
        if s.deleted { "deleted" } else { "live" },
        s.conflicts,
        if s.noconflicts { " (noconflicts)" } else { "" }
    );
    b.push_str("<table><tr><th>sequence</th><th>when</th><th>by</th></tr>");
    for h in &s.history {
        let _ = write!(b, "<tr><td>{}</td><td>{}</td><td>{}</td></tr>", h.sequence, opt(&h.when), opt(&h.by));
    }
    b.push_str("</table>\n");
}

fn history_table(b: &mut String, r: &ResourceProvenance) {
    b.push_str("<h3>History</h3><table><tr><th>datetime</th><th>change</th><th>length</th><th>sha-256</th><th>logged</th></tr>");
    for h in &r.history {
        let logged: Vec<String> = h.logged.iter().map(|(set, n)| format!("{}#{n}", esc(set))).collect();
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td></tr>",
            esc(&h.datetime),
            h.change,
            h.length,
            h.sha256,
            logged.join(" ")
        );
    }
    b.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::provenance::{
        CopyState, FeedHistoryEntry, FeedProvenance, FeedSyncState, Origin, ResourceProvenance,
    };

    fn resource(feed: Option<FeedProvenance>) -> ResourceProvenance {
        ResourceProvenance {
            matched_by: "tributary-uri",
            uri: "http://agg.example/r".into(),
            source: "a".into(),
            sets: vec!["a".into()],
            origin: Origin { href: "http://x.org/".into(), modified: None, hash: None, length: None, media_type: None },
            upstream: "http://x.org/feed?sx-item=i".into(),
            chain: Vec::new(),
            state: CopyState {
                status: "live",
                sha256: String::new(),
                md5: None,
                length: 0,
                media_type: None,
                last_change: String::new(),
                deleted: None,
                taken_down: None,
            },
            history: Vec::new(),
            feed,
            oai: None,
            verify: None,
        }
    }

    #[test]
    fn the_feedsync_section_escapes_what_the_feed_said() {
        let mut b = String::new();
        feed_table(&mut b, &resource(None));
        assert!(b.is_empty(), "no section for a resource not from a feed");

        let sync = FeedSyncState {
            id: "<i>".into(),
            updates: 2,
            deleted: true,
            noconflicts: false,
            history: vec![
                FeedHistoryEntry { sequence: 2, when: None, by: Some("<script>x</script>".into()) },
                FeedHistoryEntry { sequence: 1, when: Some("2026-01-01T09:00:00Z".into()), by: None },
            ],
            conflicts: 1,
        };
        let feed = FeedProvenance { item: "a&b".into(), updated: None, sync: Some(sync) };
        feed_table(&mut b, &resource(Some(feed)));
        assert!(!b.contains("<script>") && !b.contains("<i>"), "{b}");
        assert!(b.contains("&lt;script&gt;x&lt;/script&gt;") && b.contains("a&amp;b"), "{b}");
        assert!(b.contains("2 update(s), deleted, 1 conflict(s)"), "{b}");
        let rows: Vec<&str> = b.matches("<tr><td>").collect();
        assert_eq!(rows.len(), 2, "{b}");

        let mut plain = String::new();
        feed_table(&mut plain, &resource(Some(FeedProvenance { item: "g".into(), updated: None, sync: None })));
        assert!(plain.contains("no <code>sx:sync</code>") && !plain.contains("<table>"), "{plain}");
    }
}
