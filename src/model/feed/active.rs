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
//! Text that is escaped HTML — Atom text constructs and `content` of `type="html"` (or
//! `text/html`), RSS `description` and `content:encoded` — is markup too: a feed reader
//! unescapes and renders it. Such text is parsed as a browser would (`ammonia`, on html5ever)
//! and written back without the same active markup: the elements above with their content,
//! `on…` attributes, and URLs whose scheme is not a plain link's (`javascript:`, `data:`, …).
//! The rest is kept: the common HTML of articles with its attributes, including `style`;
//! comments, SVG, MathML, forms and unknown elements lose their tags but keep their text.
//! Text without `<` or `&` is kept as it is; other text is written as the sanitiser
//! serialises it (quoting and closing tags normalised), unless that is the text itself.
//!
//! The served feeds also carry `Content-Security-Policy: default-src 'none'; sandbox`, which
//! stops script whatever gets through here; this keeps the markup harmless for feed readers,
//! which do not apply Tributary's headers.
//!
//! Pure: decisions on names and values, and a function from HTML text to HTML text.

use std::borrow::Cow;
use std::sync::LazyLock;

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

/// Atom's text constructs and `content`: escaped HTML when their `type` says so.
const ATOM_TEXT: [&str; 5] = ["content", "summary", "title", "rights", "subtitle"];

/// RSS 1.0's namespace (RSS 2.0 elements have none).
const RSS1_NS: &str = "http://purl.org/rss/1.0/";

/// The content module's namespace (`content:encoded`), used by RSS 1.0 and 2.0 alike.
const CONTENT_NS: &str = "http://purl.org/rss/1.0/modules/content/";

/// Whether the text of an Atom element named `local` with `type` attribute `ty` is escaped
/// HTML (RFC 4287 §3.1.1.2; a `text/…` media type of `content` is text too, §4.1.3.3).
pub(super) fn is_atom_html(local: &str, ty: Option<&str>) -> bool {
    ATOM_TEXT.contains(&local)
        && ty.is_some_and(|t| t.trim().eq_ignore_ascii_case("html") || t.trim().eq_ignore_ascii_case("text/html"))
}

/// Whether the text of an element (namespace `ns`, local name `local`) of an RSS item is
/// escaped HTML: `description` (RSS 2.0 §"Elements of <item>": "entity-encoded HTML is
/// allowed") and `content:encoded`.
pub(super) fn is_rss_html(ns: Option<&str>, local: &str) -> bool {
    (local == "description" && matches!(ns, None | Some(RSS1_NS))) || (local == "encoded" && ns == Some(CONTENT_NS))
}

/// The sanitiser: ammonia's defaults (which drop script and the other active elements with
/// their content, every attribute it does not know, and URLs of other schemes), widened to the
/// markup of articles, and otherwise told to change nothing it need not (no `rel` added to
/// links, comments kept out as ammonia must).
static SANITISER: LazyLock<ammonia::Builder<'static>> = LazyLock::new(|| {
    let mut b = ammonia::Builder::default();
    b.add_tags([
        "address", "audio", "big", "font", "label", "legend", "fieldset", "main", "picture", "section", "source",
        "tfoot", "track", "video",
    ])
    .add_generic_attributes(["class", "id", "dir", "style", "align", "width", "height"])
    .add_tag_attributes("a", ["name", "rel", "target", "type"])
    .add_tag_attributes("img", ["loading", "border", "hspace", "vspace"])
    .add_tag_attributes("font", ["color", "face", "size"])
    .add_tag_attributes("audio", ["src", "controls", "loop", "muted", "preload"])
    .add_tag_attributes("video", ["src", "controls", "loop", "muted", "preload", "poster"])
    .add_tag_attributes("source", ["src", "type", "media"])
    .add_tag_attributes("track", ["src", "kind", "srclang", "label", "default"])
    .add_tag_attributes("ol", ["type", "reversed"])
    .add_tag_attributes("li", ["value"])
    .link_rel(None);
    b
});

/// `html` without its active markup, as the sanitiser serialises it; `html` itself when it
/// has no markup or is already what the sanitiser would write (so that writing is idempotent).
pub(super) fn sanitise_html(html: &str) -> Cow<'_, str> {
    if !html.contains(['<', '&']) {
        // No tag and no reference: nothing a browser could parse as markup.
        return Cow::Borrowed(html);
    }
    let clean = SANITISER.clean(html).to_string();
    if clean == html { Cow::Borrowed(html) } else { Cow::Owned(clean) }
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

    #[test]
    fn which_text_is_escaped_html() {
        assert!(is_atom_html("content", Some("html")) && is_atom_html("summary", Some(" HTML ")));
        assert!(is_atom_html("title", Some("html")) && is_atom_html("content", Some("text/html")));
        assert!(is_atom_html("rights", Some("html")) && is_atom_html("subtitle", Some("html")));
        assert!(!is_atom_html("content", Some("xhtml")) && !is_atom_html("content", None));
        assert!(!is_atom_html("content", Some("text")) && !is_atom_html("id", Some("html")));
        assert!(is_rss_html(None, "description") && is_rss_html(Some(RSS1_NS), "description"));
        assert!(is_rss_html(Some(CONTENT_NS), "encoded"));
        assert!(!is_rss_html(Some("http://example.org/ext"), "description") && !is_rss_html(None, "title"));
    }

    #[test]
    fn active_markup_is_removed_from_html_and_the_rest_kept() {
        let dirty = concat!(
            r#"<p class="lead" style="color: red" onclick="x()">Hi <b>there</b><script>alert(1)</script></p>"#,
            r#"<iframe src="https://e.org/"></iframe><object data="x.swf"><embed src="x.swf"></object>"#,
            r#"<a href="javascript:alert(2)">j</a><a href=" jav&#x09;ascript:alert(3)">k</a>"#,
            r#"<img src="https://e.org/i.png" alt="i" onerror="y()"><a href="https://e.org/" title="t">l</a>"#,
            r#"<svg><script>z()</script></svg><math><mi xlink:href="javascript:w()">m</mi></math>"#,
            r#"<form action="javascript:v()"><input formaction="javascript:u()"></form>"#,
        );
        let clean = sanitise_html(dirty);
        for gone in ["<script", "alert", "onclick", "javascript", "iframe", "<object", "<embed", "onerror", "z()"] {
            assert!(!clean.contains(gone), "{gone} in {clean}");
        }
        for kept in [
            r#"<p class="lead" style="color: red">Hi <b>there</b></p>"#,
            r#"<img src="https://e.org/i.png" alt="i">"#,
            r#"<a href="https://e.org/" title="t">l</a>"#,
            "<a>j</a>",
        ] {
            assert!(clean.contains(kept), "{kept} not in {clean}");
        }
    }

    #[test]
    fn inert_or_already_clean_html_is_kept_as_it_is() {
        for same in ["plain text", "a <b>bold</b> &amp; <i>italic</i> word", r#"<p><a href="/rel">x</a></p>"#] {
            assert!(matches!(sanitise_html(same), Cow::Borrowed(s) if s == same), "{same}");
        }
        // Another serialisation of clean HTML is written as the sanitiser writes it, and
        // sanitising that again changes nothing.
        let once = sanitise_html("<p>a<br/>b");
        assert_eq!(once, "<p>a<br>b</p>");
        assert!(matches!(sanitise_html(&once), Cow::Borrowed(_)));
    }
}
