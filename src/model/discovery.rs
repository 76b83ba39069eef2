//! The three non-Sitemap discovery formats of spec §6.3: an HTTP `Link` header, an HTML
//! `<link rel="resourcesync">`, and robots.txt `Sitemap:` lines.
//!
//! Pure text parsing, no I/O: the harvester hands over what it fetched. Each returns targets as
//! written; resolving relative references against the document's URL is the caller's job,
//! because only it knows that URL.

/// Targets of `Link` header values whose `rel` includes `rel` (RFC 8288). Accepts several
/// comma-separated links, quoted or bare `rel` values, several space-separated relations, and
/// header folding as in the spec's Example 10.
pub fn link_header_targets(header: &str, rel: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = header;
    while let Some(open) = rest.find('<') {
        let Some(close) = rest[open..].find('>') else { break };
        let target = rest[open + 1..open + close].trim();
        let params_start = open + close + 1;
        // Parameters run to the comma that separates this link from the next.
        let params_end = next_link_separator(&rest[params_start..]).map_or(rest.len(), |i| params_start + i);
        if link_params_have_rel(&rest[params_start..params_end], rel) {
            out.push(target.to_owned());
        }
        rest = rest.get(params_end + 1..).unwrap_or("");
    }
    out
}

/// The first comma outside a quoted string.
fn next_link_separator(s: &str) -> Option<usize> {
    let mut in_quotes = false;
    s.bytes().position(|b| {
        if b == b'"' {
            in_quotes = !in_quotes;
        }
        b == b',' && !in_quotes
    })
}

fn link_params_have_rel(params: &str, rel: &str) -> bool {
    params.split(';').any(|p| {
        let Some((name, value)) = p.split_once('=') else { return false };
        name.trim().eq_ignore_ascii_case("rel")
            && value.trim().trim_matches('"').split_ascii_whitespace().any(|r| r.eq_ignore_ascii_case(rel))
    })
}

/// `href`s of `<link>` elements whose `rel` includes `rel`, in an HTML page. A tolerant tag
/// scanner, not an HTML parser: pages in the wild are rarely well-formed, and only `<link>`
/// tags matter here.
pub fn html_link_targets(html: &str, rel: &str) -> Vec<String> {
    let lower = html.to_ascii_lowercase();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = lower[from..].find("<link") {
        let start = from + i + 5;
        let end = lower[start..].find('>').map_or(lower.len(), |j| start + j);
        let tag = &html[start..end];
        let rels = html_attr(tag, "rel").unwrap_or_default();
        if rels.split_ascii_whitespace().any(|r| r.eq_ignore_ascii_case(rel))
            && let Some(href) = html_attr(tag, "href")
        {
            out.push(decode_html_entities(&href));
        }
        from = end;
    }
    out
}

/// The value of attribute `name` inside a tag's text (quoted with `"` or `'`, or bare).
fn html_attr(tag: &str, name: &str) -> Option<String> {
    let lower = tag.to_ascii_lowercase();
    let mut from = 0;
    while let Some(i) = lower[from..].find(name) {
        let at = from + i;
        from = at + name.len();
        let before_ok = at == 0 || lower.as_bytes()[at - 1].is_ascii_whitespace();
        let after = lower[from..].trim_start();
        if !before_ok || !after.starts_with('=') {
            continue;
        }
        let value_start = tag.len() - after.len() + 1;
        let value = tag[value_start..].trim_start();
        return Some(match value.chars().next() {
            Some(q @ ('"' | '\'')) => value[1..].split(q).next().unwrap_or("").to_owned(),
            // Unquoted values run to whitespace (HTML: `href=/a/>` means "/a/").
            _ => value.split(|c: char| c.is_ascii_whitespace()).next().unwrap_or("").to_owned(),
        });
    }
    None
}

fn decode_html_entities(s: &str) -> String {
    s.replace("&amp;", "&").replace("&quot;", "\"").replace("&#39;", "'").trim().to_owned()
}

/// The values of `Sitemap:` lines in a robots.txt (case-insensitive field name, comments
/// stripped), in file order.
pub fn robots_sitemaps(robots: &str) -> Vec<String> {
    robots
        .lines()
        .filter_map(|line| {
            let line = line.split('#').next().unwrap_or("");
            let (field, value) = line.split_once(':')?;
            field.trim().eq_ignore_ascii_case("sitemap").then(|| value.trim().to_owned())
        })
        .filter(|v| !v.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_headers() {
        let h = r#"<http://a.example/cl.xml>; rel="resourcesync", <http://a.example/x>; rel="describedby alternate""#;
        assert_eq!(link_header_targets(h, "resourcesync"), vec!["http://a.example/cl.xml"]);
        assert_eq!(link_header_targets(h, "alternate"), vec!["http://a.example/x"]);
        assert_eq!(link_header_targets("<u>; rel=ResourceSync", "resourcesync"), vec!["u"]);
        assert!(link_header_targets("<u>; title=\"rel=resourcesync\"", "resourcesync").is_empty());
    }

    #[test]
    fn html_links() {
        let html = r#"<HTML><head><link href='/cl.xml' rel="resourcesync stylesheet"><LINK rel=resourcesync href=/b.xml></head>"#;
        assert_eq!(html_link_targets(html, "resourcesync"), vec!["/cl.xml", "/b.xml"]);
    }

    #[test]
    fn robots() {
        let txt = "User-agent: *\nsitemap: http://e.org/a.xml # main\nSitemap:http://e.org/b.xml\nDisallow: /x\n";
        assert_eq!(robots_sitemaps(txt), vec!["http://e.org/a.xml", "http://e.org/b.xml"]);
    }
}
