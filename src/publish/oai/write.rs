//! The XML of OAI-PMH responses: the envelope, headers, errors and resumption tokens, written
//! straight into a byte buffer (a list writes a million headers; no DOM, no per-element
//! allocation beyond escaping). What goes inside `<metadata>` and `<about>` is `record`'s.

use super::args::Fault;
use crate::model::{W3cDateTime, escape_into};

/// The OAI-PMH namespace.
pub(crate) const OAI_NS: &str = "http://www.openarchives.org/OAI/2.0/";
const XSI: &str = "http://www.w3.org/2001/XMLSchema-instance";

/// `t` as a datestamp of seconds granularity, `YYYY-MM-DDThh:mm:ssZ` (milliseconds dropped:
/// the datestamp is the second the change falls in, so `from` of that second includes it).
pub(crate) fn datestamp(t: &W3cDateTime) -> String {
    if let Some(s) = Stamp::of(t) {
        return s.as_str().to_owned();
    }
    let u = t.utc();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        u.year(),
        u8::from(u.month()),
        u.day(),
        u.hour(),
        u.minute(),
        u.second()
    )
}

/// A datestamp written without formatting machinery (a list writes one per record), for the
/// years of four digits; [`datestamp`] otherwise.
pub(crate) struct Stamp([u8; 20]);

impl Stamp {
    pub(crate) fn of(t: &W3cDateTime) -> Option<Stamp> {
        let u = t.utc();
        let year = u16::try_from(u.year()).ok().filter(|y| *y <= 9999)?;
        let mut b = *b"0000-00-00T00:00:00Z";
        let two = |b: &mut [u8], at: usize, n: u8| {
            b[at] = b'0' + n / 10;
            b[at + 1] = b'0' + n % 10;
        };
        // Each part is below 100.
        #[allow(clippy::cast_possible_truncation)]
        {
            two(&mut b, 0, (year / 100) as u8);
            two(&mut b, 2, (year % 100) as u8);
        }
        two(&mut b, 5, u8::from(u.month()));
        two(&mut b, 8, u.day());
        two(&mut b, 11, u.hour());
        two(&mut b, 14, u.minute());
        two(&mut b, 17, u.second());
        Some(Stamp(b))
    }

    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// The XML declaration, `<OAI-PMH>`, `responseDate` and `request`. `echo`: the request's
/// arguments, written as attributes (left out for `badVerb` / `badArgument`, §3.6).
pub(crate) fn open(out: &mut Vec<u8>, response_date: &str, base_url: &str, echo: Option<&[(String, String)]>) {
    out.extend_from_slice(b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<OAI-PMH xmlns=\"");
    out.extend_from_slice(OAI_NS.as_bytes());
    out.extend_from_slice(b"\" xmlns:xsi=\"");
    out.extend_from_slice(XSI.as_bytes());
    out.extend_from_slice(b"\" xsi:schemaLocation=\"http://www.openarchives.org/OAI/2.0/ http://www.openarchives.org/OAI/2.0/OAI-PMH.xsd\">\n<responseDate>");
    out.extend_from_slice(response_date.as_bytes());
    out.extend_from_slice(b"</responseDate>\n<request");
    for (k, v) in echo.unwrap_or_default() {
        attr(out, k, v);
    }
    out.push(b'>');
    escape_into(out, base_url, false);
    out.extend_from_slice(b"</request>\n");
}

/// `</OAI-PMH>`.
pub(crate) fn close(out: &mut Vec<u8>) {
    out.extend_from_slice(b"</OAI-PMH>\n");
}

/// A whole error response.
pub(crate) fn error_response(
    out: &mut Vec<u8>,
    response_date: &str,
    base_url: &str,
    args: &[(String, String)],
    f: &Fault,
) {
    open(out, response_date, base_url, f.echoes_arguments().then_some(args));
    out.extend_from_slice(b"<error code=\"");
    out.extend_from_slice(f.code.as_bytes());
    out.extend_from_slice(b"\">");
    escape_into(out, &f.message, false);
    out.extend_from_slice(b"</error>\n");
    close(out);
}

/// ` name="value"`, escaped.
pub(crate) fn attr(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(b' ');
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"=\"");
    escape_into(out, value, true);
    out.push(b'"');
}

/// `<name>text</name>`, escaped.
pub(crate) fn element(out: &mut Vec<u8>, name: &str, text: &str) {
    out.push(b'<');
    out.extend_from_slice(name.as_bytes());
    out.push(b'>');
    escape_into(out, text, false);
    out.extend_from_slice(b"</");
    out.extend_from_slice(name.as_bytes());
    out.push(b'>');
}

/// A record's `<header>`.
pub(crate) fn header<'a>(
    out: &mut Vec<u8>,
    identifier: &str,
    datestamp: &str,
    sets: impl IntoIterator<Item = &'a str>,
    deleted: bool,
) {
    out.extend_from_slice(if deleted { b"<header status=\"deleted\">" as &[u8] } else { b"<header>" });
    element(out, "identifier", identifier);
    element(out, "datestamp", datestamp);
    for s in sets {
        element(out, "setSpec", s);
    }
    out.extend_from_slice(b"</header>");
}

/// What a page's `<resumptionToken>` says.
pub(crate) struct TokenElement<'a> {
    /// The token; `None` on the last page (an empty element ends the list, §3.5).
    pub(crate) value: Option<&'a str>,
    pub(crate) expires: Option<&'a str>,
    pub(crate) size: Option<u64>,
    pub(crate) cursor: u64,
}

pub(crate) fn resumption_token(out: &mut Vec<u8>, t: &TokenElement<'_>) {
    out.extend_from_slice(b"<resumptionToken");
    if let Some(e) = t.expires {
        attr(out, "expirationDate", e);
    }
    // `positiveInteger`: a list that is not empty.
    if let Some(n) = t.size.filter(|n| *n > 0) {
        attr(out, "completeListSize", &n.to_string());
    }
    attr(out, "cursor", &t.cursor.to_string());
    match t.value {
        Some(v) => {
            out.push(b'>');
            escape_into(out, v, false);
            out.extend_from_slice(b"</resumptionToken>\n");
        }
        None => out.extend_from_slice(b"/>\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_and_errors() {
        let mut out = Vec::new();
        let args = vec![("verb".to_owned(), "Nope".to_owned())];
        error_response(&mut out, "2026-01-01T00:00:00Z", "http://h/oai", &args, &Fault::new("badVerb", "a <b>"));
        let s = String::from_utf8(out).unwrap();
        assert!(s.contains("<request>http://h/oai</request>"), "no echo for badVerb: {s}");
        assert!(s.contains("<error code=\"badVerb\">a &lt;b&gt;</error>"), "{s}");
        let mut out = Vec::new();
        error_response(&mut out, "d", "http://h/oai", &args, &Fault::new("idDoesNotExist", "x"));
        assert!(String::from_utf8(out).unwrap().contains("<request verb=\"Nope\">"));
    }

    #[test]
    fn headers_and_tokens() {
        let mut out = Vec::new();
        header(&mut out, "oai:a.b:r/x", "2026-01-01T00:00:00Z", ["s1", "s2"], true);
        let s = String::from_utf8(out).unwrap();
        assert_eq!(
            s,
            "<header status=\"deleted\"><identifier>oai:a.b:r/x</identifier><datestamp>2026-01-01T00:00:00Z</datestamp><setSpec>s1</setSpec><setSpec>s2</setSpec></header>"
        );
        let mut out = Vec::new();
        resumption_token(&mut out, &TokenElement { value: None, expires: None, size: Some(0), cursor: 3 });
        assert_eq!(String::from_utf8(out).unwrap(), "<resumptionToken cursor=\"3\"/>\n");
        let t: W3cDateTime = "2026-11-26T21:33:01.676Z".parse().unwrap();
        assert_eq!(datestamp(&t), "2026-11-26T21:33:01Z");
        for text in ["0999-01-02T03:04:05+01:00", "2000-12-31T23:59:59.999Z", "1970-01-01T00:00:00Z"] {
            let t: W3cDateTime = text.parse().unwrap();
            let u = t.utc();
            let slow = format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
                u.year(),
                u8::from(u.month()),
                u.day(),
                u.hour(),
                u.minute(),
                u.second()
            );
            assert_eq!(datestamp(&t), slow);
        }
    }
}
