//! Active markup in republished entries, neutralised as the entry is copied.
//!
//! An Atom entry may carry XHTML (`<content type="xhtml">`) and any foreign markup, and
//! FeedSync asks that foreign markup be republished as it came. A browser that opens a feed
//! renders elements of the XHTML and SVG namespaces as it would in a page, and runs their
//! scripts; so in those namespaces (and MathML, which browsers also render) the elements that
//! run or load code — `script`, `iframe`, `frame`, `frameset`, `object`, `embed`, `applet`,
//! `base`, `meta`, `link`, SVG `handler` — are dropped with their content, and attributes that
//! can run script — event handlers (`on…`) and values naming a `javascript:`, `vbscript:` or
//! `data:text/html` URL — are dropped from the element. XLink attributes are treated so on any
//! element. Elements of other namespaces, and text, are inert in a browser and stay intact.
//!
//! The served feeds also carry `Content-Security-Policy: default-src 'none'; sandbox`, which
//! stops script whatever gets through here; this keeps the markup harmless for feed readers,
//! which do not apply Tributary's headers.
//!
//! Pure: decisions on names and values only.

/// XHTML (and HTML's DOM namespace), SVG and MathML: the namespaces browsers render.
const RENDERED: [&str; 3] =
    ["http://www.w3.org/1999/xhtml", "http://www.w3.org/2000/svg", "http://www.w3.org/1998/Math/MathML"];

/// The XLink namespace: `xlink:href` is a link on SVG elements.
const XLINK: &str = "http://www.w3.org/1999/xlink";

/// Elements that run or load code, dropped with everything inside them.
const DROPPED: [&str; 11] =
    ["script", "iframe", "frame", "frameset", "object", "embed", "applet", "base", "meta", "link", "handler"];

/// Whether an element of namespace `ns` is one a browser renders.
pub(super) fn is_rendered(ns: Option<&str>) -> bool {
    ns.is_some_and(|ns| RENDERED.contains(&ns))
}

/// Whether a rendered element named `local` is dropped with its content.
pub(super) fn is_dropped(local: &str) -> bool {
    DROPPED.iter().any(|d| d.eq_ignore_ascii_case(local))
}

/// Whether an attribute (namespace `ns`, local name `local`, value `value`) is dropped;
/// `rendered` says whether its element is in a rendered namespace.
pub(super) fn is_active_attribute(rendered: bool, ns: Option<&str>, local: &str, value: &str) -> bool {
    let xlink = ns == Some(XLINK);
    if !(rendered || xlink) {
        return false;
    }
    let handler = ns.is_none() && local.len() > 2 && local.as_bytes()[..2].eq_ignore_ascii_case(b"on");
    handler || names_script(value)
}

/// Whether a value names a script URL anywhere in it (SVG `values` lists several), ignoring
/// the whitespace and control characters browsers strip from URLs.
fn names_script(value: &str) -> bool {
    let squeezed: String =
        value.chars().filter(|c| !c.is_whitespace() && !c.is_control()).flat_map(char::to_lowercase).collect();
    ["javascript:", "vbscript:", "data:text/html"].iter().any(|s| squeezed.contains(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    const XHTML: Option<&str> = Some("http://www.w3.org/1999/xhtml");

    #[test]
    fn script_elements_of_rendered_namespaces_only_are_dropped() {
        assert!(is_rendered(XHTML) && is_rendered(Some("http://www.w3.org/2000/svg")));
        assert!(!is_rendered(Some("http://example.org/ext")) && !is_rendered(None));
        assert!(is_dropped("script") && is_dropped("IFRAME") && is_dropped("embed"));
        assert!(!is_dropped("div") && !is_dropped("a"));
    }

    #[test]
    fn handlers_and_script_urls_are_dropped_from_rendered_elements() {
        assert!(is_active_attribute(true, None, "onclick", "x()"));
        assert!(is_active_attribute(true, None, "href", " JaVa\tScript:alert(1)"));
        assert!(is_active_attribute(true, None, "values", "a;javascript:alert(1)"));
        assert!(is_active_attribute(false, Some(XLINK), "href", "javascript:x"));
        assert!(!is_active_attribute(true, None, "href", "https://example.org/on"));
        assert!(!is_active_attribute(true, None, "on", "x"), "not a handler name");
        assert!(!is_active_attribute(false, None, "onclick", "x()"), "inert in a foreign namespace");
    }
}
