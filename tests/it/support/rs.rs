//! ResourceSync documents for tests: small ones written as text, so the tests read like the
//! spec's examples, and the spec's own examples, transcribed under `tests/fixtures/spec/`.

use std::path::PathBuf;

/// The path of `name` among the spec's examples (`tests/fixtures/spec/`).
pub(crate) fn spec_example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/spec").join(name)
}

/// A `<urlset>` with root capability `capability`, root links `(rel, href)` and entries
/// `(loc, capability-or-empty)`.
pub(crate) fn urlset(capability: &str, links: &[(&str, &str)], entries: &[(&str, &str)]) -> String {
    document("urlset", "url", capability, links, entries)
}

/// A `<sitemapindex>` of the same shape.
pub(crate) fn sitemapindex(capability: &str, links: &[(&str, &str)], entries: &[&str]) -> String {
    let entries: Vec<(&str, &str)> = entries.iter().map(|e| (*e, "")).collect();
    document("sitemapindex", "sitemap", capability, links, &entries)
}

fn document(root: &str, item: &str, capability: &str, links: &[(&str, &str)], entries: &[(&str, &str)]) -> String {
    let mut s = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<{root} xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" \
         xmlns:rs=\"http://www.openarchives.org/rs/terms/\">\n"
    );
    for (rel, href) in links {
        s.push_str(&format!("  <rs:ln rel=\"{rel}\" href=\"{href}\"/>\n"));
    }
    s.push_str(&format!("  <rs:md capability=\"{capability}\" at=\"2024-01-01T00:00:00Z\"/>\n"));
    for (loc, cap) in entries {
        let md = if cap.is_empty() { String::new() } else { format!("<rs:md capability=\"{cap}\"/>") };
        s.push_str(&format!("  <{item}><loc>{loc}</loc>{md}</{item}>\n"));
    }
    s.push_str(&format!("</{root}>\n"));
    s
}

/// A Resource List of `n` resources named `{prefix}{i}`.
pub(crate) fn resource_list(up: &str, prefix: &str, n: usize) -> String {
    let locs: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
    let entries: Vec<(&str, &str)> = locs.iter().map(|l| (l.as_str(), "")).collect();
    urlset("resourcelist", &[("up", up)], &entries)
}
