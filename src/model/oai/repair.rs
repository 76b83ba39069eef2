//! Repairs what real endpoints get wrong at the character level, before the XML parser sees
//! it: control characters XML 1.0 forbids (SHARE#142, DOAJ#586), character references to
//! code points it forbids such as lone surrogates (`&#55349;`, lobid-gnd#336), and bytes that
//! are not UTF-8. Each is replaced (references and bad bytes by U+FFFD) or dropped (control
//! characters), so one bad character costs one character, not the record or the page.

use std::borrow::Cow;

/// `body` with the repairs made, as text, and how many there were; borrowed when there were
/// none, the common case, which costs one scan for each kind of damage and leaves the text
/// validated once.
pub fn repair(body: &[u8]) -> (Cow<'_, str>, usize) {
    if !body.iter().any(|&b| b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r'))
        && memchr::memmem::find(body, b"&#").is_none()
        && let Ok(text) = std::str::from_utf8(body)
    {
        return (Cow::Borrowed(text), 0);
    }
    let mut repairs = 0;
    let text = match String::from_utf8_lossy(body) {
        Cow::Borrowed(s) => Cow::Borrowed(s),
        Cow::Owned(s) => {
            repairs += 1;
            Cow::Owned(s)
        }
    };
    let mut out = String::with_capacity(text.len());
    let mut rest: &str = &text;
    // Bounded: every round consumes at least one character of `rest`.
    while let Some(i) = rest.find(|c: char| c == '&' || (c < ' ' && !matches!(c, '\t' | '\n' | '\r'))) {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        if !rest.starts_with('&') {
            repairs += 1;
            rest = &rest[1..];
            continue;
        }
        match char_ref(rest) {
            Some((len, ok)) if !ok => {
                repairs += 1;
                out.push_str("&#xFFFD;");
                rest = &rest[len..];
            }
            _ => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    (Cow::Owned(out), repairs)
}

/// At a `&`: the length of a character reference there and whether XML allows its code point;
/// `None` when it is no character reference.
fn char_ref(s: &str) -> Option<(usize, bool)> {
    let body = s.strip_prefix("&#")?;
    let end = body.find(';').filter(|&e| e <= 10)?;
    let digits = &body[..end];
    let value = match digits.strip_prefix(['x', 'X']) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => digits.parse::<u32>().ok(),
    };
    let ok = value.is_some_and(xml_char);
    Some((2 + end + 1, ok))
}

/// XML 1.0's `Char` production.
fn xml_char(c: u32) -> bool {
    matches!(c, 0x9 | 0xA | 0xD | 0x20..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF)
}
