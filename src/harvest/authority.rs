//! Which URIs a Source speaks for: as the Sitemap protocol ResourceSync builds on restricts a
//! Sitemap to the URLs under its own location, an entry on another host or above the Source's
//! path is not the Source's to publish. The harvester skips such entries unless the operator
//! allows them (`allow_outside_authority`). Pure, no I/O.

use url::Url;

/// True when `uri` is within the authority of the Source at `source_url`: same scheme, host
/// and port, and a path under the source URL's directory. A source URL at the site root, at
/// `/.well-known/…` or at `/robots.txt` covers the whole host (those locations speak for the
/// site, not for a directory). Pass the URL the operator configured, or the Capability List.
pub fn within_authority(source_url: &Url, uri: &Url) -> bool {
    let same_origin = source_url.scheme() == uri.scheme()
        && match (source_url.host_str(), uri.host_str()) {
            (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
            (a, b) => a == b,
        }
        && source_url.port_or_known_default() == uri.port_or_known_default();
    same_origin && uri.path().starts_with(authority_prefix(source_url))
}

fn authority_prefix(source_url: &Url) -> &str {
    let path = source_url.path();
    if path.starts_with("/.well-known/") || path == "/robots.txt" {
        return "/";
    }
    path.rfind('/').map_or("/", |i| &path[..=i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authority() {
        let u = |s: &str| Url::parse(s).unwrap();
        let cl = u("https://ex.org/data/set1/capabilitylist.xml");
        assert!(within_authority(&cl, &u("https://ex.org/data/set1/res/a.txt")));
        assert!(within_authority(&cl, &u("https://EX.org:443/data/set1/b")));
        assert!(!within_authority(&cl, &u("https://ex.org/data/other.txt")));
        assert!(!within_authority(&cl, &u("http://ex.org/data/set1/a")));
        assert!(!within_authority(&cl, &u("https://ex.org:8443/data/set1/a")));
        assert!(!within_authority(&cl, &u("https://evil.org/data/set1/a")));
        let wk = u("https://ex.org/.well-known/resourcesync");
        assert!(within_authority(&wk, &u("https://ex.org/anything/x")));
        assert!(within_authority(&u("https://ex.org"), &u("https://ex.org/x")));
    }
}
